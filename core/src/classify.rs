//! Sensitivity classification (docs/design.md#classification).
//!
//! The built-in rules were first written as JavaScript regexes; JS `\b` is an ASCII word boundary and `/i` folds ASCII
//! only for these keywords, so the patterns are compiled as byte regexes with Unicode off. That
//! keeps those semantics and lets the engine use its fastest literal prefilters.
//!
//! This file is long because the built-in rule table, the one-pass scan that gates the detectors,
//! and the reference implementation the property tests compare against belong together.

use crate::detect::{self, Detector, Gates};
use crate::fold;
use regex::bytes::{Regex, RegexSet, RegexSetBuilder};
use std::borrow::Cow;
use std::sync::LazyLock;

pub use crate::detect::{luhn_valid, Set as DetectorSet};
pub use crate::tier::Tier;

/// Whether a memory's content is blank: empty, only white space (Unicode `White_Space`, as
/// `memory_internal._blank` reads a text argument), or not text at all (invalid UTF-8). A blank
/// memory is refused where its content is required (memory.observations; a governed table with
/// `"content_required": true`).
pub fn is_blank(content: &[u8]) -> bool {
    std::str::from_utf8(content).map_or(false, |s| s.chars().all(char::is_whitespace))
}

/// `memory.derive_classification`: the stored label when valid, else the safe default `internal`.
pub fn derive_classification(label: Option<&str>) -> Tier {
    label.and_then(Tier::parse).unwrap_or(Tier::Internal)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SourceType {
    Decision,
    Fact,
    Preference,
    ToolResult,
}

impl SourceType {
    pub const ALL: [SourceType; 4] =
        [SourceType::Decision, SourceType::Fact, SourceType::Preference, SourceType::ToolResult];

    pub fn as_str(self) -> &'static str {
        match self {
            SourceType::Decision => "decision",
            SourceType::Fact => "fact",
            SourceType::Preference => "preference",
            SourceType::ToolResult => "tool_result",
        }
    }

    pub fn parse(s: &str) -> Option<SourceType> {
        SourceType::ALL.into_iter().find(|t| t.as_str() == s)
    }
}

/// Which rule decided the tier. Names are stable: `classify_explain` reports them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rule {
    RestrictedKeyword,
    ConfidentialPath,
    ConfidentialKeyword,
    /// A validated detector (`crate::detect`) matched.
    Detector(Detector),
    InternalDecision,
    PublicPaths,
    Default,
    /// An org rule (by its id) raised the tier above what the built-in rules decided.
    OrgRule(i64),
}

impl Rule {
    pub fn name(&self) -> String {
        match self {
            Rule::RestrictedKeyword => "restricted_keyword".into(),
            Rule::ConfidentialPath => "confidential_path".into(),
            Rule::ConfidentialKeyword => "confidential_keyword".into(),
            Rule::Detector(d) => format!("detector_{}", d.name()),
            Rule::InternalDecision => "internal_compliance_decision".into(),
            Rule::PublicPaths => "public_paths".into(),
            Rule::Default => "default".into(),
            Rule::OrgRule(id) => format!("org_rule:{id}"),
        }
    }
}

/// The outcome of classification: the tier, the rule that decided it, and the evidence.
///
/// Evidence is a matched keyword (as the writer wrote it, before folding) or path, never a
/// detector's match: echoing a card number or a key back in an explanation would leak exactly
/// what the tier protects. `detectors` names every enabled detector that matched (filled by
/// `explain` only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub tier: Tier,
    pub rule: Rule,
    pub evidence: Option<String>,
    pub detectors: DetectorSet,
}

impl Decision {
    fn new(tier: Tier, rule: Rule, evidence: Option<String>) -> Self {
        Decision { tier, rule, evidence, detectors: DetectorSet::NONE }
    }
}

// Content patterns of the built-in keyword rules, indexed by the constants below. One RegexSet
// scans the content once.
const C_RESTRICTED: usize = 0;
const C_CONFIDENTIAL: usize = 1;
const C_INTERNAL: usize = 2;

const CONTENT_PATTERNS: [&str; 3] = [
    r"(?i)\b(ssn|social security|credit card|pci|pii)\b",
    r"(?i)\b(password|api[_-]?key|token|private[_-]?key|secret)\b",
    r"(?i)\b(compliance|security|audit|policy|sox|sr[-_ ]?11[-_ ]?7|gdpr|hipaa)\b",
];

// Path patterns, matched against the normalised path (leading `/`, `\` turned into `/`).
const P_CONFIDENTIAL_DIR: usize = 0;
const P_DOTENV: usize = 1;
const P_PUBLIC: usize = 2;
const PATH_PATTERNS: [&str; 3] =
    [r"(?i)/(auth|secrets|credentials|keys)/", r"(?i)/\.env(\b|$)", r"(?i)/(public|docs)/"];

fn build_set(patterns: &[&str]) -> RegexSet {
    RegexSetBuilder::new(patterns)
        .unicode(false)
        .build()
        .expect("built-in classification patterns are valid")
}

fn build_one(pattern: &str) -> Regex {
    regex::bytes::RegexBuilder::new(pattern)
        .unicode(false)
        .build()
        .expect("built-in classification patterns are valid")
}

// Compiled once per process (a Postgres backend), on first use.
static CONTENT_SET: LazyLock<RegexSet> = LazyLock::new(|| build_set(&CONTENT_PATTERNS));
static PATH_SET: LazyLock<RegexSet> = LazyLock::new(|| build_set(&PATH_PATTERNS));
static CONTENT_ONE: LazyLock<Vec<Regex>> =
    LazyLock::new(|| CONTENT_PATTERNS.iter().map(|p| build_one(p)).collect());

/// The first match of keyword rule `idx` in the scanned text, reported as the writer wrote it:
/// the original characters of a folded match (`ｓｓｎ` stays `ｓｓｎ`), lower-cased when plain.
fn keyword(idx: usize, text: &Text<'_>) -> Option<String> {
    CONTENT_ONE[idx].find(text.scanned()).map(|m| match text.original_of(m.start(), m.end()) {
        Some(orig) => orig.to_string(),
        None => String::from_utf8_lossy(m.as_bytes()).to_ascii_lowercase(),
    })
}

/// Content as classification scans it: folded when it is UTF-8 and folding changes it (bytes
/// that are not UTF-8 are scanned as they are).
struct Text<'a> {
    original: &'a [u8],
    folded: Option<(&'a str, fold::Folded<'a>)>,
}

impl<'a> Text<'a> {
    fn new(content: &'a [u8]) -> Text<'a> {
        if content.is_ascii() {
            return Text { original: content, folded: None };
        }
        match std::str::from_utf8(content) {
            Ok(s) => {
                let f = fold::fold(s);
                Text { original: content, folded: f.changed().then_some((s, f)) }
            }
            Err(_) => Text { original: content, folded: None },
        }
    }

    fn scanned(&self) -> &[u8] {
        match &self.folded {
            Some((_, f)) => f.text.as_bytes(),
            None => self.original,
        }
    }

    /// The writer's characters behind the scanned range, when the text was folded.
    fn original_of(&self, start: usize, end: usize) -> Option<&'a str> {
        self.folded.as_ref().map(|(s, f)| f.original(s, start, end))
    }
}

/// A path as the path rules see it: folded like content.
fn fold_path(p: &str) -> Cow<'_, str> {
    if p.is_ascii() {
        Cow::Borrowed(p)
    } else {
        fold::fold_path(p)
    }
}

/// Path as the built-in regexes expect it: rooted and with forward slashes, so that a relative
/// `auth/x.ts` or a bare `.env` matches like `src/auth/x.ts` or `app/.env`.
pub fn normalize_path(path: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(path.len() + 1);
    if !path.starts_with('/') && !path.starts_with('\\') {
        out.push(b'/');
    }
    out.extend(path.bytes().map(|b| if b == b'\\' { b'/' } else { b }));
    out
}

/// The reference implementation: the built-in regexes applied literally, one RegexSet pass over the
/// content and one per path. `classify` must agree with it on every input (property-tested); it
/// also supplies the evidence for `explain`.
pub fn classify_reference(
    content: &[u8],
    paths: &[&str],
    source_type: Option<SourceType>,
    detectors: DetectorSet,
) -> Decision {
    let text = Text::new(content);
    let scanned = text.scanned();
    let hits = CONTENT_SET.matches(scanned);
    let found = detect::find_folded(scanned, detectors);
    let first_found = |tier: Tier| found.iter().find(|d| d.tier() == tier);
    let with_found = |mut d: Decision| {
        d.detectors = found;
        d
    };

    // Priority 1: restricted.
    if hits.matched(C_RESTRICTED) {
        return with_found(Decision::new(Tier::Restricted, Rule::RestrictedKeyword, keyword(C_RESTRICTED, &text)));
    }
    if let Some(d) = first_found(Tier::Restricted) {
        return with_found(Decision::new(Tier::Restricted, Rule::Detector(d), None));
    }

    // Priority 2: confidential, paths first (2a) then content (2b).
    let mut all_public = !paths.is_empty();
    for p in paths {
        let norm = normalize_path(&fold_path(p));
        let ph = PATH_SET.matches(&norm);
        if ph.matched(P_CONFIDENTIAL_DIR) || ph.matched(P_DOTENV) {
            return with_found(Decision::new(Tier::Confidential, Rule::ConfidentialPath, Some((*p).to_string())));
        }
        all_public &= ph.matched(P_PUBLIC);
    }
    if hits.matched(C_CONFIDENTIAL) {
        return with_found(Decision::new(Tier::Confidential, Rule::ConfidentialKeyword, keyword(C_CONFIDENTIAL, &text)));
    }
    if let Some(d) = first_found(Tier::Confidential) {
        return with_found(Decision::new(Tier::Confidential, Rule::Detector(d), None));
    }

    // Priority 3: internal for compliance decisions.
    if source_type == Some(SourceType::Decision) && hits.matched(C_INTERNAL) {
        return with_found(Decision::new(Tier::Internal, Rule::InternalDecision, keyword(C_INTERNAL, &text)));
    }

    // Priority 4: public when every (present) path is a public/docs path.
    if all_public {
        return with_found(Decision::new(Tier::Public, Rule::PublicPaths, None));
    }
    with_found(Decision::new(Tier::Internal, Rule::Default, None))
}

// ---------------------------------------------------------------------------------------------
// The fast path. Every keyword rule is `\b(...)\b` with the ASCII word definition, so the content
// is walked once as words (runs of `[A-Za-z0-9_]`): a word is a keyword when it equals one
// (case-insensitively), and the few keywords spanning words (`social security`, `credit card`,
// `api-key`, `private-key`, `sr 11-7`...) are followed from their first word. Paths are checked
// segment by segment; the detector regexes only run when a cheap gate says they could match.

/// `[A-Za-z0-9_]`: the ASCII `\w` of the rules.
const WORD: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 256 {
        let b = i as u8;
        t[i] = b.is_ascii_alphanumeric() || b == b'_';
        i += 1;
    }
    t
};

fn is_word(b: u8) -> bool {
    WORD[b as usize]
}

/// Byte classes of the scan: 0 outside a word, `DIGIT`, or `ALPHA` (a letter or `_`).
const DIGIT: u8 = 1;
const ALPHA: u8 = 2;
const CLASS: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        let b = i as u8;
        t[i] = if b.is_ascii_digit() {
            DIGIT
        } else if b.is_ascii_alphabetic() || b == b'_' {
            ALPHA
        } else {
            0
        };
        i += 1;
    }
    t
};

/// The words `scan_content` matches (whole keywords, and the first words of the keywords that
/// span words), which the prefilter below is built from. `sr 11-7` is followed by `sr_11_7`.
/// (The detectors' context words are their validators' to find, near a candidate; the keywords
/// of the identity detectors, from `passport` on, only open their gates.)
const KEYWORD_WORDS: [&str; 29] = [
    "ssn", "pci", "pii", "social", "credit", "password", "token", "secret", "apikey", "api_key", "privatekey",
    "private_key", "api", "private", "compliance", "security", "audit", "policy", "sox", "gdpr", "hipaa",
    "passport", "sort", "sortcode", "born", "dob", "birth", "birthdate", "d",
];

/// By first byte (either case): a bit per word length that some entry of `KEYWORD_WORDS` starting
/// with that letter has. Most words of ordinary text fail this test and are never lowercased.
const KEYWORD_LENGTHS: [u16; 256] = {
    let mut t = [0u16; 256];
    let mut k = 0;
    while k < KEYWORD_WORDS.len() {
        let w = KEYWORD_WORDS[k].as_bytes();
        let bit = 1u16 << w.len();
        t[w[0] as usize] |= bit;
        t[w[0].to_ascii_uppercase() as usize] |= bit;
        k += 1;
    }
    t
};

#[derive(Default)]
struct ContentHits {
    restricted: bool,
    confidential: bool,
    internal: bool,
    /// What the detectors need to have a chance (see `detect::Gates`).
    gates: Gates,
}

/// Whether `content[at..]` starts with `sep` then the word `word` (ASCII case-insensitive) ending
/// at a word boundary.
fn followed_by(content: &[u8], at: usize, sep: u8, word: &str) -> bool {
    let w = word.as_bytes();
    let end = at + 1 + w.len();
    end <= content.len()
        && content[at] == sep
        && content[at + 1..end].eq_ignore_ascii_case(w)
        && (end == content.len() || !is_word(content[end]))
}

/// `sr[-_ ]?11[-_ ]?7\b` from `at` (ASCII case-insensitive), the start of a word.
fn sr_11_7(content: &[u8], at: usize) -> bool {
    let c = content;
    let mut i = at + 2;
    let sep = |b: u8| b == b'-' || b == b'_' || b == b' ';
    if i < c.len() && sep(c[i]) {
        i += 1;
    }
    if !(i + 2 <= c.len() && &c[i..i + 2] == b"11") {
        return false;
    }
    i += 2;
    if i < c.len() && sep(c[i]) {
        i += 1;
    }
    i < c.len() && c[i] == b'7' && (i + 1 == c.len() || !is_word(c[i + 1]))
}

/// Masks of one block of at most 64 bytes (bit i: byte i): word bytes (`[A-Za-z0-9_]`), digits,
/// dashes (the PEM and Slack gates), the bytes a word worth looking at can start with (`FIRST`),
/// `@`, `+`, `:`, `_` (the e-mail, phone, URL and Stripe gates), upper-case letters (the IBAN
/// gate) and `1` (the bech32 gate: `bc1`).
#[inline]
fn block_masks(block: &[u8]) -> [u64; 7] {
    let (mut word, mut digit, mut dash, mut first, mut punct, mut upper, mut ones) = (0u64, 0u64, 0u64, 0u64, 0u64, 0u64, 0u64);
    let mut i = 0;
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SSE2 is part of the x86_64 baseline; every load reads 16 bytes inside `block`.
    unsafe {
        use std::arch::x86_64::*;
        // A byte v lies in [lo, lo + width) iff v + (0x80 - lo), as a signed byte, is below
        // -128 + width (SSE2 has no unsigned byte compare).
        let digit_bias = _mm_set1_epi8((0x80u8.wrapping_sub(b'0')) as i8);
        let digit_limit = _mm_set1_epi8((-128i16 + 10) as i8);
        let alpha_bias = _mm_set1_epi8((0x80u8.wrapping_sub(b'a')) as i8);
        let alpha_limit = _mm_set1_epi8((-128i16 + 26) as i8);
        let case_bit = _mm_set1_epi8(0x20);
        let eq = |v: __m128i, b: u8| _mm_cmpeq_epi8(v, _mm_set1_epi8(b as i8));
        while i + 16 <= block.len() {
            let v = _mm_loadu_si128(block.as_ptr().add(i) as *const __m128i);
            let lower = _mm_or_si128(v, case_bit);
            let d = _mm_cmplt_epi8(_mm_add_epi8(v, digit_bias), digit_limit);
            let a = _mm_cmplt_epi8(_mm_add_epi8(lower, alpha_bias), alpha_limit);
            let w = _mm_or_si128(_mm_or_si128(a, d), eq(v, b'_'));
            // Upper-case letters: letters whose case bit is clear.
            let up = _mm_andnot_si128(_mm_cmpeq_epi8(_mm_and_si128(v, case_bit), case_bit), a);
            let f = _mm_or_si128(
                _mm_or_si128(_mm_or_si128(eq(lower, b's'), eq(lower, b'p')), _mm_or_si128(eq(lower, b'c'), eq(lower, b't'))),
                _mm_or_si128(_mm_or_si128(eq(lower, b'a'), eq(lower, b'g')), _mm_or_si128(eq(lower, b'h'), eq(lower, b'e'))),
            );
            let f = _mm_or_si128(f, _mm_or_si128(eq(lower, b'b'), eq(lower, b'd')));
            let f = _mm_or_si128(_mm_and_si128(f, a), d);
            let p = _mm_or_si128(_mm_or_si128(eq(v, b'@'), eq(v, b'+')), _mm_or_si128(eq(v, b':'), eq(v, b'_')));
            word |= (_mm_movemask_epi8(w) as u16 as u64) << i;
            digit |= (_mm_movemask_epi8(d) as u16 as u64) << i;
            dash |= (_mm_movemask_epi8(eq(v, b'-')) as u16 as u64) << i;
            first |= (_mm_movemask_epi8(f) as u16 as u64) << i;
            punct |= (_mm_movemask_epi8(p) as u16 as u64) << i;
            upper |= (_mm_movemask_epi8(up) as u16 as u64) << i;
            ones |= (_mm_movemask_epi8(eq(v, b'1')) as u16 as u64) << i;
            i += 16;
        }
    }
    while i < block.len() {
        let b = block[i];
        let c = CLASS[b as usize];
        word |= ((c != 0) as u64) << i;
        digit |= ((c == DIGIT) as u64) << i;
        dash |= ((b == b'-') as u64) << i;
        first |= (FIRST[b as usize] as u64) << i;
        punct |= (matches!(b, b'@' | b'+' | b':' | b'_') as u64) << i;
        upper |= (b.is_ascii_uppercase() as u64) << i;
        ones |= ((b == b'1') as u64) << i;
        i += 1;
    }
    [word, digit, dash, first, punct, upper, ones]
}

/// Bytes that can start a word `Scan::word` acts on (see `block_masks`): in either case, the
/// first letters of the keyword words and of the word-start detector prefixes (`AKIA`, `ASIA`,
/// `AIza`, `eyJ`, `gh`), of the identity detectors' keywords (`b`, `d`: `born`, `dob`), and digits. The other detectors are gated from the masks (IBAN, Slack,
/// Stripe, bech32, e-mail, phone, URL).
const FIRST: [bool; 256] = {
    let mut t = [false; 256];
    let starts = b"spctaghebd";
    let mut k = 0;
    while k < starts.len() {
        t[starts[k] as usize] = true;
        t[starts[k].to_ascii_uppercase() as usize] = true;
        k += 1;
    }
    let mut d = b'0';
    while d <= b'9' {
        t[d as usize] = true;
        d += 1;
    }
    t
};

/// Bits `0..n` set.
fn low_bits(n: usize) -> u64 {
    if n >= 64 {
        u64::MAX
    } else {
        (1u64 << n) - 1
    }
}

/// The words of the content, visited block by block from masks: a word is a maximal run of
/// word bytes, found with bit scans instead of a branch per byte.
struct Scan<'c> {
    content: &'c [u8],
    hits: ContentHits,
    low: [u8; 12],
    // The current chain of all-digit words: digits so far, whether it has a dash, and where the
    // last digit word ended.
    chain: usize,
    chain_dash: bool,
    chain_end: usize,
    // The phone chain: digit words joined by one or two of ` -.()` (see `detect::Gates`).
    pchain: usize,
}

impl Scan<'_> {
    /// Look at the word `content[start..end]`; true when nothing can outrank what was found.
    #[inline(always)]
    fn word(&mut self, start: usize, end: usize, all_digits: bool) -> bool {
        let content = self.content;
        let h = &mut self.hits;
        let g = &mut h.gates;
        let word = &content[start..end];
        let b = word[0];
        // Bitcoin Base58Check addresses start with 1 or 3 and are 26+ characters.
        g.base58 |= matches!(b, b'1' | b'3') && word.len() >= 26;
        if all_digits {
            let ce = self.chain_end;
            let joined = ce != usize::MAX && start == ce + 1 && matches!(content[ce], b' ' | b'-');
            if joined {
                self.chain += word.len();
                self.chain_dash |= content[ce] == b'-';
            } else {
                (self.chain, self.chain_dash) = (word.len(), false);
            }
            // Phone shapes join groups with a space, dash or dot, or around one parenthesised group.
            let pjoined = ce != usize::MAX
                && (start == ce + 1 || start == ce + 2)
                && content[ce..start].iter().all(|&c| matches!(c, b' ' | b'-' | b'.' | b'(' | b')'));
            self.pchain = if pjoined { self.pchain + word.len() } else { word.len() };
            g.phone_chain = g.phone_chain.max(self.pchain);
            self.chain_end = end;
            g.nine_digits |= word.len() == 9;
            g.digit_chain = g.digit_chain.max(self.chain);
            g.dashed_nine |= self.chain_dash && self.chain >= 9;
            return false;
        }
        // Detector gates: their patterns begin at a word boundary and are case-sensitive.
        match b {
            b'A' => {
                g.aws |= word.starts_with(b"AKIA") || word.starts_with(b"ASIA");
                g.google |= word.starts_with(b"AIza");
            }
            b'e' => g.jwt |= word.starts_with(b"eyJ"),
            b'g' => g.github |= word.starts_with(b"gh") || word.starts_with(b"github_pat_"),
            b'0' => g.hex0x |= word.len() > 1 && word[1] == b'x',
            _ => {}
        }
        if (b | 0x20) == b's' && word.len() >= 2 && (word[1] | 0x20) == b'r' && sr_11_7(content, start) {
            h.internal = true;
        }
        if word.len() > self.low.len() || KEYWORD_LENGTHS[b as usize] & (1 << word.len()) == 0 {
            return false;
        }
        for (d, s) in self.low.iter_mut().zip(word) {
            *d = s.to_ascii_lowercase();
        }
        match &self.low[..word.len()] {
            b"ssn" | b"pci" | b"pii" => h.restricted = true,
            b"social" => h.restricted |= followed_by(content, end, b' ', "security"),
            b"credit" => h.restricted |= followed_by(content, end, b' ', "card"),
            b"password" | b"token" | b"secret" | b"apikey" | b"api_key" | b"privatekey" | b"private_key" => h.confidential = true,
            b"api" | b"private" => h.confidential |= followed_by(content, end, b'-', "key"),
            b"compliance" | b"security" | b"audit" | b"policy" | b"sox" | b"gdpr" | b"hipaa" => h.internal = true,
            b"passport" => h.gates.passport = true,
            b"sort" | b"sortcode" => h.gates.sort_code = true,
            b"born" | b"dob" | b"birth" | b"birthdate" => h.gates.birth = true,
            b"d" => h.gates.birth |= content.len() >= end + 4 && content[end..end + 4].eq_ignore_ascii_case(b".o.b"),
            _ => {}
        }
        // Nothing outranks a restricted keyword.
        h.restricted
    }
}

fn scan_content(content: &[u8]) -> ContentHits {
    let n = content.len();
    let mut s = Scan { content, hits: ContentHits::default(), low: [0; 12], chain: 0, chain_dash: false, chain_end: usize::MAX, pchain: 0 };
    // Words are found from masks, 64 bytes at a time: only those starting with a byte that can
    // matter are looked at (other words touch no keyword, detector or digit chain).
    let mut base = 0;
    let mut prev_word = false;
    let mut prev_letter = false;
    while base < n {
        let len = (n - base).min(64);
        let [w, d, dash, first, punct, up, ones] = block_masks(&content[base..base + len]);
        // IBAN gate: two upper-case letters then two digits somewhere (the validator finds where);
        // an occurrence may start in the last three bytes of a full block and end in the next.
        if up & (up >> 1) & (d >> 2) & (d >> 3) != 0 {
            s.hits.gates.iban = true;
        } else if up >> 61 != 0 && base + len < n {
            let c = content;
            s.hits.gates.iban |= (61..64).map(|i| base + i).any(|at| {
                at + 3 < n && c[at].is_ascii_uppercase() && c[at + 1].is_ascii_uppercase() && c[at + 2].is_ascii_digit() && c[at + 3].is_ascii_digit()
            });
        }
        let mut dm = dash;
        while dm != 0 {
            let at = base + dm.trailing_zeros() as usize;
            if content[at..].starts_with(b"-----BEGIN ") {
                s.hits.gates.pem = true;
            }
            // Slack: `xox?-`.
            if at >= 4 && &content[at - 4..at - 1] == b"xox" {
                s.hits.gates.slack = true;
            }
            dm &= dm - 1;
        }
        // bech32: a `1` right after `bc` (either case).
        let mut om = ones & ((w & !d) << 1 | prev_letter as u64);
        while om != 0 {
            let at = base + om.trailing_zeros() as usize;
            if at >= 2 && content[at - 2..at].eq_ignore_ascii_case(b"bc") {
                s.hits.gates.bech32 = true;
            }
            om &= om - 1;
        }
        let mut pm = punct;
        while pm != 0 {
            let at = base + pm.trailing_zeros() as usize;
            let next = content.get(at + 1).copied().unwrap_or(0);
            let g = &mut s.hits.gates;
            match content[at] {
                b'@' => g.at = true,
                b'+' => g.plus_digit |= next.is_ascii_digit() || next == b'(',
                // Stripe: `sk_live_`, `rk_live_`.
                b'_' => g.stripe |= at >= 2 && matches!(&content[at - 2..at], b"sk" | b"rk") && content[at + 1..].starts_with(b"live_"),
                _ => g.scheme |= content[at..].starts_with(b"://"),
            }
            pm &= pm - 1;
        }
        let starts = w & !((w << 1) | prev_word as u64);
        let mut todo = starts & first;
        while todo != 0 {
            let p = todo.trailing_zeros() as usize;
            todo &= todo - 1;
            let run = (((!w) >> p).trailing_zeros() as usize).min(64 - p);
            let (end, all_digits) = if p + run < len || base + len == n {
                (base + p + run, (w & !d) >> p & low_bits(run) == 0)
            } else {
                // The word runs on into the next block.
                let mut e = base + len;
                while e < n && is_word(content[e]) {
                    e += 1;
                }
                let start = base + p;
                (e, content[start..e].iter().all(u8::is_ascii_digit))
            };
            if s.word(base + p, end, all_digits) {
                return s.hits;
            }
        }
        prev_word = w >> (len - 1) & 1 == 1;
        prev_letter = (w & !d) >> (len - 1) & 1 == 1;
        base += len;
    }
    s.hits
}

/// Per-path verdict of the built-in path rules, by segments of the normalised path: a directory
/// segment (one followed by `/`) named auth/secrets/credentials/keys, or any segment starting
/// with `.env` at a word boundary, is confidential; a directory segment named public/docs makes
/// the path public.
#[derive(Clone, Copy, PartialEq, Eq)]
enum PathClass {
    Confidential,
    Public,
    Other,
}

fn eq_ic(a: &[u8], b: &str) -> bool {
    a.eq_ignore_ascii_case(b.as_bytes())
}

fn path_class(path: &str) -> PathClass {
    let bytes = path.as_bytes();
    // Segments between separators of the normalised path (`\` is a separator too; a leading
    // separator is implied).
    let mut segments = bytes.split(|&b| b == b'/' || b == b'\\').peekable();
    let mut public = false;
    while let Some(seg) = segments.next() {
        let is_dir = segments.peek().is_some();
        if seg.len() >= 4 && eq_ic(&seg[..4], ".env") && (seg.len() == 4 || !is_word(seg[4])) {
            return PathClass::Confidential;
        }
        if is_dir {
            if eq_ic(seg, "auth") || eq_ic(seg, "secrets") || eq_ic(seg, "credentials") || eq_ic(seg, "keys") {
                return PathClass::Confidential;
            }
            public |= eq_ic(seg, "public") || eq_ic(seg, "docs");
        }
    }
    if public {
        PathClass::Public
    } else {
        PathClass::Other
    }
}

/// Classify with the built-in rules (the keyword and path rules plus, when `detectors` is on, the deterministic
/// detectors). Most restrictive match wins; ties within a tier are reported in priority order.
/// Same result as `classify_reference`, without the evidence; use `explain` for that.
///
/// `paths` holds the source files that are present; callers drop NULL array elements.
pub fn classify(content: &[u8], paths: &[&str], source_type: Option<SourceType>, detectors: DetectorSet) -> Decision {
    let text = Text::new(content);
    classify_scanned(text.scanned(), paths, source_type, detectors)
}

/// The plain scanner: `classify` of content as written, no folding (the differential tests).
#[cfg(test)]
pub(crate) fn classify_plain(content: &[u8], detectors: DetectorSet) -> Decision {
    classify_scanned(content, &[], None, detectors)
}

fn classify_scanned(scanned: &[u8], paths: &[&str], source_type: Option<SourceType>, detectors: DetectorSet) -> Decision {
    let h = scan_content(scanned);
    if h.restricted {
        return Decision::new(Tier::Restricted, Rule::RestrictedKeyword, None);
    }
    let candidates = if detectors.is_empty() { DetectorSet::NONE } else { detectors.and(h.gates.admitted()) };
    if !candidates.is_empty() {
        if let Some(d) = detect::first_match(scanned, candidates, Tier::Restricted) {
            return Decision::new(Tier::Restricted, Rule::Detector(d), None);
        }
    }
    let mut all_public = !paths.is_empty();
    for p in paths {
        match path_class(&fold_path(p)) {
            PathClass::Confidential => return Decision::new(Tier::Confidential, Rule::ConfidentialPath, None),
            PathClass::Public => {}
            PathClass::Other => all_public = false,
        }
    }
    if h.confidential {
        return Decision::new(Tier::Confidential, Rule::ConfidentialKeyword, None);
    }
    if !candidates.is_empty() {
        if let Some(d) = detect::first_match(scanned, candidates, Tier::Confidential) {
            return Decision::new(Tier::Confidential, Rule::Detector(d), None);
        }
    }
    if source_type == Some(SourceType::Decision) && h.internal {
        return Decision::new(Tier::Internal, Rule::InternalDecision, None);
    }
    if all_public {
        return Decision::new(Tier::Public, Rule::PublicPaths, None);
    }
    Decision::new(Tier::Internal, Rule::Default, None)
}

/// `classify` with the evidence filled in (the matched keyword or the deciding path).
pub fn explain(content: &[u8], paths: &[&str], source_type: Option<SourceType>, detectors: DetectorSet) -> Decision {
    classify_reference(content, paths, source_type, detectors)
}

/// What an org rule looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Content,
    Path,
}

impl Target {
    pub fn parse(s: &str) -> Option<Target> {
        match s {
            "content" => Some(Target::Content),
            "path" => Some(Target::Path),
            _ => None,
        }
    }
}

/// A compiled org rule (`memory.classification_rules`). Org rules can only raise a tier.
#[derive(Debug, Clone)]
pub struct OrgRule {
    pub id: i64,
    pub tier: Tier,
    pub target: Target,
    pub source_type: Option<SourceType>,
    regex: Regex,
}

/// Why an org rule could not be compiled.
#[derive(Debug, thiserror::Error)]
pub enum RuleError {
    #[error("invalid regular expression {pattern:?}: {reason}")]
    BadPattern { pattern: String, reason: String },
}

/// Size limit for compiled org regexes: a pathological pattern must not eat a backend's memory.
const ORG_RULE_SIZE_LIMIT: usize = 1 << 20;

impl OrgRule {
    /// Org patterns use the regex crate's syntax, case-sensitive unless they say `(?i)`. Paths
    /// are matched in their normalised form, like the built-in path rules.
    pub fn compile(
        id: i64,
        tier: Tier,
        target: Target,
        pattern: &str,
        source_type: Option<SourceType>,
    ) -> Result<OrgRule, RuleError> {
        let regex = regex::bytes::RegexBuilder::new(pattern)
            .size_limit(ORG_RULE_SIZE_LIMIT)
            .build()
            .map_err(|e| RuleError::BadPattern { pattern: pattern.to_string(), reason: e.to_string() })?;
        Ok(OrgRule { id, tier, target, source_type, regex })
    }

    fn matches(&self, content: &[u8], paths: &[&str], source_type: Option<SourceType>) -> bool {
        if self.source_type.is_some() && self.source_type != source_type {
            return false;
        }
        match self.target {
            Target::Content => self.regex.is_match(content),
            Target::Path => paths.iter().any(|p| self.regex.is_match(&normalize_path(p))),
        }
    }
}

/// Apply org rules on top of a built-in decision: the result is the most restrictive of the two,
/// and the built-in decision is kept on ties.
pub fn apply_org_rules(
    base: Decision,
    rules: &[OrgRule],
    content: &[u8],
    paths: &[&str],
    source_type: Option<SourceType>,
) -> Decision {
    let mut best = base;
    for r in rules {
        if r.tier > best.tier && r.matches(content, paths, source_type) {
            best = Decision::new(r.tier, Rule::OrgRule(r.id), None);
        }
    }
    best
}

#[cfg(test)]
mod tests;
