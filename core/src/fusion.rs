//! Reciprocal rank fusion of hybrid recall (docs/vector.md): the full-text list and the vector
//! list cut from one set of candidates, fused as memory.recall's SQL fuses the two index lists,
//! order for order, so either way of reading gives the same answer.
//!
//! - the full-text list: candidates with a relevance, by coverage (how many of the query's words
//!   the row has) descending, relevance descending, then id; `depth` long;
//! - the vector list: candidates with a distance, by distance ascending, then id; `k` long
//!   (`fuse`), or as long as the caller says (`fuse_lists`: a length the same for every page);
//! - score = weight × (1/(60 + full-text rank) + 1/(60 + vector rank)), a missing rank adding 0;
//! - the answer: by score descending, then the better of the two ranks, then id; `k` long.
//!
//! Numbers compare as PostgreSQL's float4/float8 do: NaN equals NaN and sorts above every number.

use std::cmp::Ordering;

/// The RRF constant of memory.recall and memory.retrieve.
pub const RRF_K: f64 = 60.0;

/// One row under the call's conditions.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Candidate {
    /// The uuid's bytes: compared as PostgreSQL compares uuids (bytewise).
    pub id: [u8; 16],
    pub weight: f64,
    /// Cosine distance to the query embedding; None: the row has no embedding.
    pub distance: Option<f64>,
    /// ts_rank_cd of the row's words; None: the row does not match the query.
    pub relevance: Option<f32>,
    /// How many of the query's words the row has (0 when not counted).
    pub coverage: i32,
}

/// One row of the answer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fused {
    pub id: [u8; 16],
    pub lexical_rank: Option<i32>,
    pub vector_rank: Option<i32>,
    pub score: f64,
}

/// PostgreSQL's float order: NaN equal to NaN and above every number.
fn pg_cmp<F: PartialOrd + Copy>(a: F, b: F, is_nan: impl Fn(F) -> bool) -> Ordering {
    match (is_nan(a), is_nan(b)) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        (false, false) => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
    }
}

/// The same rule in SQL, over two rank expressions (NULL: not in that list), for the statements
/// `retrieval::render` writes.
pub fn rrf_sql(lexical_rank: &str, vector_rank: &str) -> String {
    let k = RRF_K as i64;
    format!(
        "coalesce(1.0::pg_catalog.float8 OPERATOR(pg_catalog./) ({k} OPERATOR(pg_catalog.+) {lexical_rank}), 0) \
         OPERATOR(pg_catalog.+) coalesce(1.0::pg_catalog.float8 OPERATOR(pg_catalog./) ({k} OPERATOR(pg_catalog.+) {vector_rank}), 0)"
    )
}

fn rrf_term(rank: Option<i32>) -> f64 {
    rank.map_or(0.0, |r| 1.0 / (RRF_K + f64::from(r)))
}

/// The top `k` of the fusion of the two lists cut from `candidates` (each id once), the vector
/// list `k` long.
pub fn fuse(candidates: &[Candidate], k: usize, depth: usize) -> Vec<Fused> {
    fuse_lists(candidates, k, depth, k)
}

/// The first `n` of `xs` in the order `cmp` (a total order: ids break every tie), sorted; the rest
/// dropped. The first `n` are selected before they are sorted: of a user's thousand candidates the
/// lists keep ten or forty, and sorting all of them was most of the fusion's time.
fn top<T>(xs: &mut Vec<T>, n: usize, mut cmp: impl FnMut(&T, &T) -> Ordering) {
    if n == 0 {
        xs.clear();
        return;
    }
    if xs.len() > n {
        xs.select_nth_unstable_by(n - 1, &mut cmp);
        xs.truncate(n);
    }
    xs.sort_unstable_by(cmp);
}

/// The full-text list's cut: the `depth`-th largest of the matching rows' coverages (0 when fewer
/// rows match; the largest for a `depth` of 0). The list is by coverage, then relevance, `depth`
/// long, so a row of less coverage than the cut is out of it whatever its relevance: the one pass
/// computes the relevance (ts_rank_cd) of the rows of at least the cut only.
pub fn coverage_cut(mut coverages: Vec<i32>, depth: usize) -> i32 {
    let i = depth.saturating_sub(1);
    if coverages.len() <= i {
        return 0;
    }
    *coverages.select_nth_unstable_by(i, |a, b| b.cmp(a)).1
}

/// The top `k` of the fusion of the full-text list (`depth` long) and the vector list
/// (`vector_depth` long) cut from `candidates`: a caller that pages keeps both lengths the same
/// for every page, so each page is a slice of one ranking.
pub fn fuse_lists(candidates: &[Candidate], k: usize, depth: usize, vector_depth: usize) -> Vec<Fused> {
    let mut lex: Vec<&Candidate> = candidates.iter().filter(|c| c.relevance.is_some()).collect();
    top(&mut lex, depth, |a, b| {
        b.coverage
            .cmp(&a.coverage)
            .then_with(|| pg_cmp(b.relevance.unwrap(), a.relevance.unwrap(), f32::is_nan))
            .then_with(|| a.id.cmp(&b.id))
    });
    let mut vec: Vec<&Candidate> = candidates.iter().filter(|c| c.distance.is_some()).collect();
    top(&mut vec, vector_depth, |a, b| pg_cmp(a.distance.unwrap(), b.distance.unwrap(), f64::is_nan).then_with(|| a.id.cmp(&b.id)));

    // (id, weight, lexical rank, vector rank), the full-text list's first.
    let mut both: Vec<([u8; 16], f64, Option<i32>, Option<i32>)> =
        lex.iter().enumerate().map(|(i, c)| (c.id, c.weight, Some(i as i32 + 1), None)).collect();
    for (i, c) in vec.iter().enumerate() {
        match both.iter_mut().find(|e| e.0 == c.id) {
            Some(e) => e.3 = Some(i as i32 + 1),
            None => both.push((c.id, c.weight, None, Some(i as i32 + 1))),
        }
    }
    let mut out: Vec<Fused> = both
        .into_iter()
        .map(|(id, weight, l, v)| Fused { id, lexical_rank: l, vector_rank: v, score: (rrf_term(l) + rrf_term(v)) * weight })
        .collect();
    let best = |f: &Fused| f.lexical_rank.unwrap_or(i32::MAX).min(f.vector_rank.unwrap_or(i32::MAX));
    out.sort_by(|a, b| pg_cmp(b.score, a.score, f64::is_nan).then_with(|| best(a).cmp(&best(b))).then_with(|| a.id.cmp(&b.id)));
    out.truncate(k);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn id(n: u8) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[15] = n;
        b
    }

    fn c(n: u8, d: Option<f64>, r: Option<f32>) -> Candidate {
        Candidate { id: id(n), weight: 1.0, distance: d, relevance: r, coverage: 0 }
    }

    #[test]
    fn the_cut_is_the_depth_th_largest_coverage() {
        assert_eq!(coverage_cut(vec![1, 3, 2, 3, 1], 2), 3);
        assert_eq!(coverage_cut(vec![1, 3, 2, 3, 1], 3), 2);
        assert_eq!(coverage_cut(vec![1, 3, 2, 3, 1], 5), 1);
        assert_eq!(coverage_cut(vec![1, 3, 2, 3, 1], 6), 0, "fewer rows than the list: every row");
        assert_eq!(coverage_cut(vec![], 40), 0);
        assert_eq!(coverage_cut(vec![1, 3, 2], 0), 3, "depth 0: the largest (OFFSET 0)");
    }

    #[test]
    fn the_worked_example_of_19_vector() {
        // a1 matches with a2 the closest: the fixture of tests/sql/19_vector.sql.
        let cands = [c(1, Some(0.0), Some(0.1)), c(2, Some(0.006), None), c(3, Some(1.0), Some(0.1)), c(4, Some(1.0), Some(0.1))];
        let got: Vec<(u8, Option<i32>, Option<i32>, String)> =
            fuse(&cands, 10, 40).iter().map(|f| (f.id[15], f.lexical_rank, f.vector_rank, format!("{:.6}", f.score))).collect();
        assert_eq!(
            got,
            vec![
                (1, Some(1), Some(1), "0.032787".into()),
                (3, Some(2), Some(3), "0.032002".into()),
                (4, Some(3), Some(4), "0.031498".into()),
                (2, None, Some(2), "0.016129".into()),
            ]
        );
    }

    #[test]
    fn lists_are_cut_to_their_lengths() {
        let cands: Vec<Candidate> = (0..50).map(|n| c(n, Some(f64::from(n)), Some(50.0 - f32::from(n)))).collect();
        let got = fuse(&cands, 3, 5);
        assert_eq!(got.len(), 3);
        assert!(got.iter().all(|f| f.lexical_rank.map_or(true, |r| r <= 5) && f.vector_rank.map_or(true, |r| r <= 3)));
        // n = 0 is first in both lists.
        assert_eq!((got[0].id[15], got[0].lexical_rank, got[0].vector_rank), (0, Some(1), Some(1)));
    }

    #[test]
    fn weight_scales_and_nan_sorts_last() {
        let mut a = c(1, Some(0.1), None);
        a.weight = 0.5;
        let b = c(2, Some(0.2), None);
        let n = c(3, Some(f64::NAN), None);
        let got: Vec<(u8, Option<i32>)> = fuse(&[n, a, b], 10, 40).iter().map(|f| (f.id[15], f.vector_rank)).collect();
        // The NaN distance is last in the vector list (rank 3); b (rank 2, weight 1) and even
        // the NaN row (1/63) outscore a (rank 1, weight 0.5: 0.5/61).
        assert_eq!(got, vec![(2, Some(2)), (3, Some(3)), (1, Some(1))]);
    }

    #[test]
    fn coverage_ranks_before_relevance() {
        // a has two of the query's words, b one with a higher ts_rank_cd: a is first.
        let mut a = c(1, None, Some(0.1));
        a.coverage = 2;
        let mut b = c(2, None, Some(0.9));
        b.coverage = 1;
        let got: Vec<(u8, Option<i32>)> = fuse(&[b, a], 10, 40).iter().map(|f| (f.id[15], f.lexical_rank)).collect();
        assert_eq!(got, vec![(1, Some(1)), (2, Some(2))]);
    }

    #[test]
    fn no_rows_no_answer() {
        assert!(fuse(&[], 10, 40).is_empty());
        assert!(fuse(&[c(1, None, None)], 10, 40).is_empty());
    }

    #[test]
    fn a_vector_list_as_long_as_the_page_ranks_each_page_differently() {
        // Word order 8, 7, .., 1, vector order the reverse (memory.search's bug: the vector list
        // k + offset long). With the list as long as the page's end, pages of 2 show 4 three
        // times and never 6, 7 or 8; with one length for every page, the pages are slices of one
        // ranking.
        let cands: Vec<Candidate> = (1..=8).map(|n| c(n, Some(f64::from(n) / 10.0), Some(f32::from(n)))).collect();
        let ids = |f: &[Fused]| f.iter().map(|f| f.id[15]).collect::<Vec<u8>>();
        let page = |k: usize, off: usize, vector_depth: usize| ids(&fuse_lists(&cands, k + off, 40, vector_depth)[off.min(k + off)..]);
        let whole = ids(&fuse_lists(&cands, 8, 40, 40));
        assert_eq!(whole, vec![1, 8, 2, 7, 3, 6, 4, 5]);
        let buggy: Vec<u8> = [0, 2, 4, 6].iter().flat_map(|&off| page(2, off, 2 + off)).collect();
        assert_eq!(buggy, vec![1, 2, 3, 4, 4, 5, 4, 5], "the bug this guards against");
        for (k, off) in [(2, 0), (2, 2), (2, 4), (3, 5), (1, 7), (4, 6)] {
            assert_eq!(page(k, off, 40), whole[off.min(8)..(off + k).min(8)].to_vec(), "k {k} offset {off}");
        }
        // fuse is fuse_lists with the vector list k long.
        assert_eq!(fuse(&cands, 3, 40), fuse_lists(&cands, 3, 40, 3));
    }

    fn cand() -> impl Strategy<Value = Candidate> {
        (any::<u8>(), prop::option::of(0.0f64..2.0), prop::option::of(0.0f32..1.0), prop::sample::select(vec![0.0, 0.25, 0.5, 1.0]))
            .prop_map(|(n, d, r, w)| Candidate { id: id(n), weight: w, distance: d, relevance: r, coverage: 0 })
    }

    proptest! {
        /// At most k rows, each id once, best first, every row in at least one list, and the
        /// score is the weight times the sum of the RRF terms of its ranks.
        #[test]
        fn answer_is_well_formed(mut cands in prop::collection::vec(cand(), 0..60), k in 1usize..12, depth in 1usize..50) {
            cands.sort_by_key(|c| c.id);
            cands.dedup_by_key(|c| c.id);
            let got = fuse(&cands, k, depth);
            prop_assert!(got.len() <= k);
            let mut ids: Vec<_> = got.iter().map(|f| f.id).collect();
            ids.dedup();
            prop_assert_eq!(ids.len(), got.len());
            for w in got.windows(2) {
                prop_assert!(w[0].score >= w[1].score);
            }
            for f in &got {
                prop_assert!(f.lexical_rank.is_some() || f.vector_rank.is_some());
                prop_assert!(f.lexical_rank.map_or(true, |r| r as usize <= depth) && f.vector_rank.map_or(true, |r| r as usize <= k));
                let w = cands.iter().find(|c| c.id == f.id).unwrap().weight;
                prop_assert_eq!(f.score, (rrf_term(f.lexical_rank) + rrf_term(f.vector_rank)) * w);
            }
        }

        /// With both lists' lengths fixed, the top k + offset from offset is the whole ranking's
        /// slice [offset, offset + k): pages never repeat or skip a row.
        #[test]
        fn fixed_lengths_page_one_ranking(mut cands in prop::collection::vec(cand(), 0..60), k in 1usize..12, off in 0usize..40,
                                          depth in 1usize..50, vector_depth in 1usize..50) {
            cands.sort_by_key(|c| c.id);
            cands.dedup_by_key(|c| c.id);
            let whole = fuse_lists(&cands, 200, depth, vector_depth);
            let page = fuse_lists(&cands, k + off, depth, vector_depth);
            let from = off.min(page.len());
            prop_assert_eq!(&page[from..], &whole[off.min(whole.len())..(off + k).min(whole.len())]);
            prop_assert!(page.iter().all(|f| f.vector_rank.map_or(true, |r| r as usize <= vector_depth)));
        }

        /// Selecting each list's first rows before sorting them gives the lists a whole sort cut
        /// to length gives (NaN distances and ties of coverage and relevance among them).
        #[test]
        fn selected_lists_are_the_sorted_lists_cut(mut cands in prop::collection::vec(
                (any::<u8>(), prop::option::of(prop::sample::select(vec![0.0, 0.5, 1.0, f64::NAN])),
                 prop::option::of(prop::sample::select(vec![0.0f32, 0.5, f32::NAN])), 0i32..3)
                    .prop_map(|(n, d, r, m)| Candidate { id: id(n), weight: 1.0, distance: d, relevance: r, coverage: m }), 0..80),
                k in 1usize..12, depth in 0usize..50, vector_depth in 0usize..50) {
            cands.sort_by_key(|c| c.id);
            cands.dedup_by_key(|c| c.id);
            let ranks = |lex: bool| -> Vec<[u8; 16]> {
                let mut xs: Vec<&Candidate> = cands.iter().filter(|c| if lex { c.relevance.is_some() } else { c.distance.is_some() }).collect();
                if lex {
                    xs.sort_by(|a, b| b.coverage.cmp(&a.coverage)
                        .then_with(|| pg_cmp(b.relevance.unwrap(), a.relevance.unwrap(), f32::is_nan)).then_with(|| a.id.cmp(&b.id)));
                    xs.truncate(depth);
                } else {
                    xs.sort_by(|a, b| pg_cmp(a.distance.unwrap(), b.distance.unwrap(), f64::is_nan).then_with(|| a.id.cmp(&b.id)));
                    xs.truncate(vector_depth);
                }
                xs.iter().map(|c| c.id).collect()
            };
            let (lex, vec) = (ranks(true), ranks(false));
            for f in fuse_lists(&cands, k, depth, vector_depth) {
                prop_assert_eq!(f.lexical_rank, lex.iter().position(|i| *i == f.id).map(|p| p as i32 + 1));
                prop_assert_eq!(f.vector_rank, vec.iter().position(|i| *i == f.id).map(|p| p as i32 + 1));
            }
        }

        /// The order of the candidates does not change the answer.
        #[test]
        fn order_of_candidates_does_not_matter(mut cands in prop::collection::vec(cand(), 0..40), k in 1usize..12) {
            cands.sort_by_key(|c| c.id);
            cands.dedup_by_key(|c| c.id);
            let a = fuse(&cands, k, 40);
            cands.reverse();
            prop_assert_eq!(a, fuse(&cands, k, 40));
        }
    }
}
