//! Duplicates at write (SPEC §17, docs/reference.md#memoryremember): the normalised text two
//! memories are compared by, and its SHA-256, kept with a remembered row (`content_sha256`).
//!
//! Normalised text: Unicode NFKC, case-folded (the lower-case mapping, then `ß`/`ẞ` → `ss` and
//! final `ς` → `σ`, where full case folding differs from it), NFKC again (folding can leave a
//! compatibility form), every run of white space one space, trimmed. So `"  The  Sky\tis BLUE "`
//! and `"the sky is blue"` are the same fact, and `"ﬁle"` (a ligature) and `"FILE"` too.

use sha2::{Digest, Sha256};
use unicode_normalization::UnicodeNormalization;

/// The org's dedup modes (`memory.org_settings.dedup`).
pub const MODES: [&str; 3] = ["off", "exact", "near"];

/// The default near-duplicate threshold (`memory.org_settings.dedup_threshold`).
pub const DEFAULT_THRESHOLD: f64 = 0.95;

/// Why an org's dedup setting is refused (22023 with this message).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SettingError {
    #[error("unknown dedup mode {0:?}")]
    Mode(String),
    #[error("dedup_threshold must be in (0, 1], got {0}")]
    Threshold(f64),
}

/// Checks an org's dedup mode and threshold.
pub fn check_setting(mode: &str, threshold: f64) -> Result<(), SettingError> {
    if !MODES.contains(&mode) {
        return Err(SettingError::Mode(mode.chars().take(40).collect()));
    }
    if !(threshold > 0.0 && threshold <= 1.0) {
        return Err(SettingError::Threshold(threshold));
    }
    Ok(())
}

/// Case folding: the lower-case mapping, with full folding's differences for the letters that
/// have them in common text.
fn fold_case(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            'ß' | 'ẞ' => out.push_str("ss"),
            'ς' => out.push('σ'),
            _ => out.extend(c.to_lowercase().map(|l| if l == 'ς' { 'σ' } else { l })),
        }
    }
    out
}

/// The normalised text of a memory (see the module's header).
pub fn normalize(text: &str) -> String {
    let nfkc: String = text.nfkc().collect();
    let folded: String = fold_case(&nfkc).nfkc().collect();
    let mut out = String::with_capacity(folded.len());
    for word in folded.split_whitespace() {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    out
}

/// SHA-256 of the normalised text's UTF-8, lower-case hex (the `content_sha256` column).
pub fn norm_hash(text: &str) -> String {
    hex::encode(Sha256::digest(normalize(text).as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn case_and_white_space_do_not_matter() {
        assert_eq!(normalize("  The  Sky\tis\nBLUE "), "the sky is blue");
        assert_eq!(norm_hash("The sky is blue."), norm_hash("the SKY  is blue. "));
        assert_ne!(norm_hash("the sky is blue"), norm_hash("the sky is blue."));
    }

    #[test]
    fn compatibility_forms_and_folding() {
        assert_eq!(normalize("ﬁle"), "file");
        assert_eq!(normalize("ＡＢＣ１２３"), "abc123");
        assert_eq!(normalize("Straße"), normalize("STRASSE"));
        assert_eq!(normalize("ΟΔΟΣ"), normalize("οδος"));
        assert_eq!(normalize("a\u{00A0}b\u{3000}c"), "a b c");
        assert_eq!(normalize(" \t\n"), "");
    }

    #[test]
    fn hash_is_sha256_of_the_normal_form() {
        // printf 'abc' | sha256sum
        assert_eq!(norm_hash(" ABC "), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    }

    #[test]
    fn settings() {
        assert!(check_setting("exact", DEFAULT_THRESHOLD).is_ok());
        assert!(check_setting("near", 1.0).is_ok());
        assert!(matches!(check_setting("fuzzy", 0.9), Err(SettingError::Mode(_))));
        for t in [0.0, -0.1, 1.01, f64::NAN, f64::INFINITY] {
            assert!(matches!(check_setting("off", t), Err(SettingError::Threshold(_))), "{t}");
        }
    }

    proptest! {
        #[test]
        fn normalize_is_idempotent(s in "\\PC{0,40}") {
            let n = normalize(&s);
            prop_assert_eq!(normalize(&n), n.clone());
        }

        #[test]
        fn normal_form_has_single_inner_spaces(s in "[ \\ta-zA-Z\u{00A0}\u{3000}ß]{0,40}") {
            let n = normalize(&s);
            prop_assert!(!n.starts_with(' ') && !n.ends_with(' ') && !n.contains("  "));
            prop_assert!(!n.chars().any(|c| c.is_whitespace() && c != ' '));
        }

        #[test]
        fn case_and_spacing_variants_hash_alike(words in proptest::collection::vec("[a-zA-Z0-9]{1,8}", 1..8), pad in "[ \\t\\n]{1,3}") {
            let plain = words.join(" ");
            let shouted = format!("{pad}{}{pad}", words.iter().map(|w| w.to_uppercase()).collect::<Vec<_>>().join(&pad));
            prop_assert_eq!(norm_hash(&plain), norm_hash(&shouted));
        }
    }
}
