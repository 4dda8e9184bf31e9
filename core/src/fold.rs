//! Folding before scanning (docs/design.md#classification): text is classified as if
//! written in its Unicode compatibility form (NFKC per character: full-width letters and digits,
//! ligatures, no-break spaces and the like become their plain forms) with invisible characters
//! (zero-width spaces and joiners, word joiner, soft hyphen, BOM...) left out, so `ｓｓｎ`,
//! `s\u{200B}sn` and `４１１１ …` classify like `ssn` and `4111 …`.
//!
//! Folding is a copy only when it changes something: ASCII text (most memories) and text already
//! in NFKC without invisible characters are scanned as they are. A folded copy keeps, for each of
//! its bytes, the span of the original character it came from, so evidence can be reported as the
//! writer wrote it.

use std::borrow::Cow;
use unicode_normalization::{is_nfkc_quick, IsNormalized, UnicodeNormalization};

/// Characters that render as nothing and are dropped before scanning.
pub fn is_ignorable(c: char) -> bool {
    matches!(
        c,
        '\u{00AD}'                      // soft hyphen
            | '\u{034F}'                // combining grapheme joiner
            | '\u{061C}'                // Arabic letter mark
            | '\u{115F}' | '\u{1160}'   // Hangul fillers
            | '\u{17B4}' | '\u{17B5}'   // Khmer inherent vowels
            | '\u{180B}'..='\u{180F}'   // Mongolian variation selectors and vowel separator
            | '\u{200B}'..='\u{200F}'   // zero-width space, non-joiner, joiner, LRM, RLM
            | '\u{202A}'..='\u{202E}'   // bidi embeddings and overrides
            | '\u{2060}'..='\u{206F}'   // word joiner, invisible operators, bidi isolates
            | '\u{3164}'                // Hangul filler
            | '\u{FE00}'..='\u{FE0F}'   // variation selectors
            | '\u{FEFF}'                // zero-width no-break space (BOM)
            | '\u{FFA0}'                // half-width Hangul filler
            | '\u{1D173}'..='\u{1D17A}' // musical formatting
            | '\u{E0000}'..='\u{E007F}' // tags
    )
}

/// Text as the scanners see it.
pub struct Folded<'a> {
    /// The folded text (borrowed when folding changes nothing).
    pub text: Cow<'a, str>,
    /// For each byte of a folded copy, the original span `(start, end)` of the character it came
    /// from; empty when `text` is borrowed.
    spans: Vec<(u32, u32)>,
}

impl<'a> Folded<'a> {
    /// Whether folding changed the text.
    pub fn changed(&self) -> bool {
        matches!(self.text, Cow::Owned(_))
    }

    /// The original text of the folded byte range `start..end` (for evidence), as written.
    pub fn original<'o>(&self, original: &'o str, start: usize, end: usize) -> &'o str {
        if !self.changed() || start >= end {
            return &original[start.min(original.len())..end.min(original.len())];
        }
        let s = self.spans[start].0 as usize;
        let e = self.spans[end - 1].1 as usize;
        &original[s..e]
    }
}

/// Whether `text` needs a folded copy: some character is not NFKC or is invisible.
fn needs_folding(text: &str) -> bool {
    if text.is_ascii() {
        return false;
    }
    text.chars().any(is_ignorable) || is_nfkc_quick(text.chars()) != IsNormalized::Yes
}

/// Fold `text` (see the module documentation).
pub fn fold(text: &str) -> Folded<'_> {
    if !needs_folding(text) {
        return Folded { text: Cow::Borrowed(text), spans: Vec::new() };
    }
    let mut out = String::with_capacity(text.len());
    let mut spans = Vec::with_capacity(text.len());
    let mut buf = [0u8; 4];
    for (i, c) in text.char_indices() {
        let span = (i as u32, (i + c.len_utf8()) as u32);
        if is_ignorable(c) {
            continue;
        }
        if c.is_ascii() {
            out.push(c);
            spans.push(span);
            continue;
        }
        for f in std::iter::once(c).nfkc() {
            if is_ignorable(f) {
                continue;
            }
            let s = f.encode_utf8(&mut buf);
            out.push_str(s);
            spans.extend(std::iter::repeat_n(span, s.len()));
        }
    }
    Folded { text: Cow::Owned(out), spans }
}

/// Fold a path the same way (paths carry no evidence spans: the path is reported whole).
pub fn fold_path(path: &str) -> Cow<'_, str> {
    fold(path).text
}
