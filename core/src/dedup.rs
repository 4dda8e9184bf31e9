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
    // ASCII is its own NFKC, and its case folding is its lower-case mapping: the same text without
    // the two passes of normalisation (most memories; remember hashes every one).
    let folded: String = if text.is_ascii() { text.to_ascii_lowercase() } else { fold_case(&text.nfkc().collect::<String>()).nfkc().collect() };
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

/// The advisory lock (pg_advisory_xact_lock's int8) memory.remember's calls of one text in one org
/// (the normalised text's hash) wait on in the exact mode: the first 8 bytes of the SHA-256 of
/// "memory_ext.remember", the org and the hash, joined by U+001F.
pub fn lock_key(org: &str, hash: &str) -> i64 {
    let d = Sha256::digest(format!("memory_ext.remember\u{1f}{org}\u{1f}{hash}").as_bytes());
    i64::from_be_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]])
}

/// Whether memory.remember's arguments surely pass its checks (memory_internal._remember_check),
/// so it need not call them: an org and a content that are not blank, a user_id NULL or not blank,
/// a memory_type, a metadata object, no embedding it is unsure of (`embedding`: one was given that
/// the caller has not found surely valid), and a namespace NULL or of 1 to 20 labels, each
/// with a letter or digit (never a space in any locale), without a period, at most 256 bytes.
/// False says only "ask the checks", which raise the error or pass.
#[allow(clippy::too_many_arguments)]
pub fn surely_valid(
    org: Option<&str>,
    content: Option<&str>,
    user_id: Option<&str>,
    memory_type: bool,
    metadata_object: bool,
    embedding: bool,
    namespace: Option<&[Option<&str>]>,
) -> bool {
    let blank = |s: Option<&str>| s.is_none_or(|s| s.chars().all(char::is_whitespace));
    !blank(org)
        && !blank(content)
        && (user_id.is_none() || !blank(user_id))
        && memory_type
        && metadata_object
        && !embedding
        && namespace.is_none_or(|labels| {
            (1..=20).contains(&labels.len())
                && labels.iter().all(|l| l.is_some_and(|l| l.len() <= 256 && !l.contains('.') && l.chars().any(char::is_alphanumeric)))
        })
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

    #[test]
    fn lock_keys_differ_by_org_and_text() {
        let h = norm_hash("the sky is blue");
        assert_eq!(lock_key("acme", &h), lock_key("acme", &norm_hash("The  SKY is blue")));
        assert_ne!(lock_key("acme", &h), lock_key("globex", &h));
        assert_ne!(lock_key("acme", &h), lock_key("acme", &norm_hash("the sky is grey")));
        // (The separator keeps the org and the hash apart.)
        assert_ne!(lock_key("a", "bc"), lock_key("ab", "c"));
    }

    #[test]
    fn surely_valid_arguments() {
        let ok = |org, content, user, ns: Option<&[Option<&str>]>| surely_valid(org, content, user, true, true, false, ns);
        assert!(ok(Some("acme"), Some("the sky is blue"), None, None));
        assert!(ok(Some("acme"), Some("x"), Some("u1"), Some(&[Some("a"), Some("b-1")])));
        assert!(!ok(Some(" "), Some("x"), None, None));
        assert!(!ok(Some("acme"), Some("\t\n"), None, None));
        assert!(!ok(Some("acme"), None, None, None));
        assert!(!ok(Some("acme"), Some("x"), Some(""), None));
        assert!(!surely_valid(Some("acme"), Some("x"), None, false, true, false, None));
        assert!(!surely_valid(Some("acme"), Some("x"), None, true, false, false, None));
        assert!(!surely_valid(Some("acme"), Some("x"), None, true, true, true, None));
        // Namespaces the checks decide (a blank, NULL or dotted label, none, too many, too long,
        // or one without a letter or digit).
        assert!(!ok(Some("acme"), Some("x"), None, Some(&[])));
        assert!(!ok(Some("acme"), Some("x"), None, Some(&[Some("a"), None])));
        assert!(!ok(Some("acme"), Some("x"), None, Some(&[Some("a.b")])));
        assert!(!ok(Some("acme"), Some("x"), None, Some(&[Some("\u{a0}")])));
        assert!(!ok(Some("acme"), Some("x"), None, Some(&[Some("-")])));
        let long = "a".repeat(257);
        assert!(!ok(Some("acme"), Some("x"), None, Some(&[Some(long.as_str())])));
        let many = vec![Some("a"); 21];
        assert!(!ok(Some("acme"), Some("x"), None, Some(&many)));
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
        fn ascii_takes_the_general_path_s_result(s in "[\\x00-\\x7f]{0,60}") {
            // The ASCII shortcut (no normalisation passes) against NFKC, folding and NFKC again,
            // every ASCII character (controls, the vertical tab and the separators U+001C..U+001F,
            // which are not white space, included).
            let general: String = fold_case(&s.nfkc().collect::<String>()).nfkc().collect();
            let mut spaced = String::new();
            for word in general.split_whitespace() {
                if !spaced.is_empty() {
                    spaced.push(' ');
                }
                spaced.push_str(word);
            }
            prop_assert_eq!(normalize(&s), spaced);
        }

        #[test]
        fn case_and_spacing_variants_hash_alike(words in proptest::collection::vec("[a-zA-Z0-9]{1,8}", 1..8), pad in "[ \\t\\n]{1,3}") {
            let plain = words.join(" ");
            let shouted = format!("{pad}{}{pad}", words.iter().map(|w| w.to_uppercase()).collect::<Vec<_>>().join(&pad));
            prop_assert_eq!(norm_hash(&plain), norm_hash(&shouted));
        }
    }
}
