//! Context packing (SPEC §17, docs/reference.md#memorycontext): recall's candidates, best first,
//! made into one prompt-ready block under a token budget.
//!
//! 1. Near-duplicates are dropped: a candidate as similar as `near` (the org's `dedup_threshold`)
//!    to a better one already kept is left out.
//! 2. Maximal marginal relevance orders the rest: each step takes the candidate with the highest
//!    `(1 - diversity) × relevance - diversity × (its highest similarity to one already taken)`;
//!    relevance is recall's score over the best score (recall's order when there are no positive
//!    scores). `diversity` 0 is recall's order.
//! 3. Lines are packed greedily in that order: a line that does not fit the budget left is
//!    skipped and the next tried.
//!
//! Similarity is cosine of the two embeddings when both have one, otherwise the trigram
//! similarity of their words (pg_trgm's: shared trigrams over all trigrams of the two).
//! Tokens are estimated by [`estimate_tokens`].

use std::collections::BTreeSet;

/// One candidate, in recall's order.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub id: String,
    /// The line the block shows for it (one line: its date, id and text).
    pub line: String,
    /// The text compared for near-duplicates.
    pub text: String,
    pub score: f64,
    pub embedding: Option<Vec<f32>>,
}

/// A candidate's line in the block: `[date] id: text`, the text's white space runs one space.
pub fn line_for(id: &str, date: &str, text: &str) -> String {
    format!("[{date}] {id}: {}", text.split_whitespace().collect::<Vec<_>>().join(" "))
}

/// The packed block.
#[derive(Debug, Clone, PartialEq)]
pub struct Packed {
    pub text: String,
    pub ids: Vec<String>,
    pub tokens: usize,
    /// Candidates left out: near-duplicates and lines that did not fit.
    pub omitted: usize,
}

fn is_wide(c: char) -> bool {
    // Scripts past Latin Extended are about one token a character in BPE vocabularies.
    c as u32 > 0x024F
}

/// Estimated tokens of a text: a word-piece count close to a byte-pair tokenizer's (cl100k):
/// a word of letters up to 11 characters is 1 piece and every 3 more letters one more; digits
/// are pieces of up to 3; every other visible character is 1; a letter outside Latin is 1.
/// White space joins the next piece. Checked against cl100k_base counts of English sentences
/// (within 10% in total; core/src/packing.rs's tests).
pub fn estimate_tokens(text: &str) -> usize {
    let mut n = 0usize;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_alphabetic() && !is_wide(c) {
            let mut len = 1usize;
            while let Some(&d) = chars.peek() {
                if d.is_alphabetic() && !is_wide(d) {
                    len += 1;
                    chars.next();
                } else {
                    break;
                }
            }
            n += if len <= 11 { 1 } else { 1 + (len - 11).div_ceil(3) };
        } else if c.is_ascii_digit() {
            let mut len = 1usize;
            while let Some(&d) = chars.peek() {
                if d.is_ascii_digit() {
                    len += 1;
                    chars.next();
                } else {
                    break;
                }
            }
            n += len.div_ceil(3);
        } else if !c.is_whitespace() {
            n += 1;
        }
    }
    n
}

/// pg_trgm's trigrams of a text: each word (letters and digits, lower-cased) padded with two
/// spaces before and one after.
fn trigrams(text: &str) -> BTreeSet<[char; 3]> {
    let mut out = BTreeSet::new();
    for word in text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()) {
        let padded: Vec<char> = "  ".chars().chain(word.chars().flat_map(char::to_lowercase)).chain(" ".chars()).collect();
        for w in padded.windows(3) {
            out.insert([w[0], w[1], w[2]]);
        }
    }
    out
}

/// Trigram similarity in [0, 1] (1: the same words).
pub fn trigram_similarity(a: &str, b: &str) -> f64 {
    let (x, y) = (trigrams(a), trigrams(b));
    if x.is_empty() && y.is_empty() {
        return 1.0;
    }
    let shared = x.intersection(&y).count();
    shared as f64 / (x.len() + y.len() - shared) as f64
}

/// Cosine similarity, or None for vectors of different lengths, a zero vector or a non-finite
/// result.
pub fn cosine(a: &[f32], b: &[f32]) -> Option<f64> {
    if a.len() != b.len() || a.is_empty() {
        return None;
    }
    let (mut dot, mut na, mut nb) = (0f64, 0f64, 0f64);
    for (x, y) in a.iter().zip(b) {
        let (x, y) = (*x as f64, *y as f64);
        dot += x * y;
        na += x * x;
        nb += y * y;
    }
    let s = dot / (na.sqrt() * nb.sqrt());
    s.is_finite().then_some(s.clamp(-1.0, 1.0))
}

/// Similarity of two candidates: cosine of their embeddings when both have one, else trigrams.
pub fn similarity(a: &Candidate, b: &Candidate) -> f64 {
    if let (Some(x), Some(y)) = (&a.embedding, &b.embedding) {
        if let Some(s) = cosine(x, y) {
            return s;
        }
    }
    trigram_similarity(&a.text, &b.text)
}

/// Indexes of the candidates kept (in order) when each is compared with the better ones kept.
pub fn drop_near_duplicates(cands: &[Candidate], near: f64) -> Vec<usize> {
    let mut kept: Vec<usize> = Vec::new();
    for (i, c) in cands.iter().enumerate() {
        if !kept.iter().any(|&k| similarity(&cands[k], c) >= near) {
            kept.push(i);
        }
    }
    kept
}

/// Maximal-marginal-relevance order of `idx` (indexes into `cands`, in recall's order).
pub fn mmr_order(cands: &[Candidate], idx: &[usize], diversity: f64) -> Vec<usize> {
    let best = idx.iter().map(|&i| cands[i].score).filter(|s| s.is_finite()).fold(0f64, f64::max);
    let n = idx.len().max(1) as f64;
    let relevance: Vec<f64> = idx
        .iter()
        .enumerate()
        .map(|(r, &i)| {
            let s = cands[i].score;
            if best > 0.0 && s.is_finite() { (s / best).clamp(0.0, 1.0) } else { 1.0 - r as f64 / n }
        })
        .collect();
    let mut left: Vec<usize> = (0..idx.len()).collect();
    let mut max_sim = vec![0f64; idx.len()];
    let mut out = Vec::with_capacity(idx.len());
    while !left.is_empty() {
        // Ties go to the earlier candidate (recall's order).
        let mut pick = 0usize;
        let mut pick_value = f64::NEG_INFINITY;
        for (p, &j) in left.iter().enumerate() {
            let v = (1.0 - diversity) * relevance[j] - diversity * max_sim[j];
            if v > pick_value {
                pick_value = v;
                pick = p;
            }
        }
        let j = left.remove(pick);
        out.push(idx[j]);
        if diversity > 0.0 {
            for &m in &left {
                let s = similarity(&cands[idx[j]], &cands[idx[m]]);
                if s > max_sim[m] {
                    max_sim[m] = s;
                }
            }
        }
    }
    out
}

/// The whole packing: near-duplicates dropped, MMR order, greedy lines under `budget` tokens.
pub fn pack(cands: &[Candidate], budget: usize, diversity: f64, near: f64) -> Packed {
    let kept = drop_near_duplicates(cands, near);
    let order = mmr_order(cands, &kept, diversity);
    let mut lines: Vec<&str> = Vec::new();
    let mut ids = Vec::new();
    let mut tokens = 0usize;
    let mut omitted = cands.len() - kept.len();
    for i in order {
        // White space costs nothing (it joins the next piece), so the block's tokens are its lines'.
        let cost = estimate_tokens(&cands[i].line);
        if tokens + cost <= budget {
            tokens += cost;
            lines.push(&cands[i].line);
            ids.push(cands[i].id.clone());
        } else {
            omitted += 1;
        }
    }
    Packed { text: lines.join("\n"), ids, tokens, omitted }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// English sentences with their token counts under cl100k_base (OpenAI's tokenizer, counted
    /// with the bpe-openai 0.1.4 Python package, which embeds the cl100k_base vocabulary).
    const REFERENCE: &str = include_str!("packing_reference.tsv");

    fn cand(id: &str, text: &str, score: f64, emb: Option<Vec<f32>>) -> Candidate {
        Candidate { id: id.into(), line: format!("- {text}"), text: text.into(), score, embedding: emb }
    }

    #[test]
    fn token_estimate_is_within_ten_percent_of_cl100k() {
        let (mut want, mut got, mut lines) = (0usize, 0usize, 0usize);
        for l in REFERENCE.lines().filter(|l| !l.is_empty()) {
            let (n, text) = l.split_once('\t').expect("count<TAB>text");
            let n: usize = n.parse().expect("count");
            let e = estimate_tokens(text);
            assert!((e as f64 - n as f64).abs() <= 0.2 * n as f64, "{text:?}: {e} estimated, {n} counted");
            want += n;
            got += e;
            lines += 1;
        }
        assert!(lines >= 40);
        assert!((got as f64 - want as f64).abs() <= 0.10 * want as f64, "{got} estimated, {want} counted");
    }

    #[test]
    fn token_estimate_pieces() {
        assert_eq!(estimate_tokens(""), 0);
        assert_eq!(estimate_tokens("The quick brown fox."), 5);
        assert_eq!(estimate_tokens("1234567"), 3);
        assert_eq!(estimate_tokens("internationalization"), 4);
        assert_eq!(estimate_tokens("東京"), 2);
    }

    #[test]
    fn trigram_similarity_as_pg_trgm() {
        // SELECT similarity('word', 'words') = 0.5714286 (4 shared of 7).
        assert!((trigram_similarity("word", "words") - 4.0 / 7.0).abs() < 1e-9);
        assert_eq!(trigram_similarity("The Cat", "the cat!"), 1.0);
        assert_eq!(trigram_similarity("abc", "xyz"), 0.0);
    }

    #[test]
    fn a_line_is_one_line() {
        assert_eq!(line_for("7", "2026-03-03", " two\nlines\t here "), "[2026-03-03] 7: two lines here");
    }

    #[test]
    fn cosine_cases() {
        assert_eq!(cosine(&[1.0, 0.0], &[2.0, 0.0]), Some(1.0));
        assert_eq!(cosine(&[1.0, 0.0], &[0.0, 1.0]), Some(0.0));
        assert_eq!(cosine(&[1.0], &[1.0, 2.0]), None);
        assert_eq!(cosine(&[0.0, 0.0], &[1.0, 1.0]), None);
    }

    #[test]
    fn near_duplicates_are_dropped_by_text_or_embedding() {
        let c = vec![
            cand("a", "The user prefers dark mode", 3.0, None),
            cand("b", "the user PREFERS dark mode!", 2.0, None),
            cand("c", "Deploys need two reviewers", 1.0, None),
        ];
        assert_eq!(drop_near_duplicates(&c, 0.95), vec![0, 2]);
        let e = vec![
            cand("a", "one", 3.0, Some(vec![1.0, 0.0])),
            cand("b", "two", 2.0, Some(vec![0.99, 0.01])),
            cand("c", "three", 1.0, Some(vec![0.0, 1.0])),
        ];
        assert_eq!(drop_near_duplicates(&e, 0.95), vec![0, 2]);
        assert_eq!(drop_near_duplicates(&e, 1.0), vec![0, 1, 2]);
    }

    #[test]
    fn mmr_prefers_a_different_memory_when_asked() {
        let c = vec![
            cand("a", "x", 1.0, Some(vec![1.0, 0.0])),
            cand("b", "y", 0.9, Some(vec![0.9, 0.1])),
            cand("c", "z", 0.8, Some(vec![0.0, 1.0])),
        ];
        assert_eq!(mmr_order(&c, &[0, 1, 2], 0.0), vec![0, 1, 2]);
        assert_eq!(mmr_order(&c, &[0, 1, 2], 0.5), vec![0, 2, 1]);
    }

    #[test]
    fn packing_fits_the_budget_and_counts_what_is_left_out() {
        let c = vec![
            cand("a", "The user prefers dark mode in every editor", 3.0, None),
            cand("b", "the user prefers dark mode in every editor", 2.9, None),
            cand("c", "A very long memory about many things that will not fit in a small budget at all", 2.0, None),
            cand("d", "Short one", 1.0, None),
        ];
        let p = pack(&c, 14, 0.3, 0.95);
        assert_eq!(p.ids, vec!["a", "d"]);
        assert_eq!(p.omitted, 2);
        assert_eq!(p.text, "- The user prefers dark mode in every editor\n- Short one");
        assert_eq!(p.tokens, estimate_tokens(&p.text));
        assert!(p.tokens <= 14);
    }

    proptest! {
        #[test]
        fn pack_never_exceeds_budget(texts in proptest::collection::vec("[a-z ]{1,60}", 0..20), budget in 1usize..200, div in 0.0f64..=1.0) {
            let c: Vec<Candidate> = texts.iter().enumerate().map(|(i, t)| cand(&i.to_string(), t, 1.0 / (i + 1) as f64, None)).collect();
            let p = pack(&c, budget, div, 0.95);
            prop_assert!(p.tokens <= budget);
            prop_assert_eq!(p.tokens, estimate_tokens(&p.text));
            prop_assert_eq!(p.ids.len() + p.omitted, c.len());
            let unique: BTreeSet<&String> = p.ids.iter().collect();
            prop_assert_eq!(unique.len(), p.ids.len());
        }

        #[test]
        fn mmr_is_a_permutation(n in 0usize..15, div in 0.0f64..=1.0) {
            let c: Vec<Candidate> = (0..n).map(|i| cand(&i.to_string(), &format!("memory number {i}"), (n - i) as f64, None)).collect();
            let idx: Vec<usize> = (0..n).collect();
            let mut o = mmr_order(&c, &idx, div);
            if n > 0 { prop_assert_eq!(o[0], 0); }
            o.sort();
            prop_assert_eq!(o, idx);
        }

        #[test]
        fn similarity_is_symmetric_and_bounded(a in "[a-zA-Z ]{0,30}", b in "[a-zA-Z ]{0,30}") {
            let s = trigram_similarity(&a, &b);
            prop_assert!((0.0..=1.0).contains(&s));
            prop_assert_eq!(s, trigram_similarity(&b, &a));
        }
    }
}
