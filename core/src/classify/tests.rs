use super::*;

fn tier(content: &str, paths: &[&str], st: Option<SourceType>) -> Tier {
    classify(content.as_bytes(), paths, st, true.into()).tier
}

/// The classification vectors: one file, `core/tests/vectors/classification.json`, read here, by
/// the `#[pg_test]`s and by the pgTAP suite (tests/run-sql.sh loads it into each test database).
pub(crate) const VECTORS: &str = include_str!("../../tests/vectors/classification.json");

#[test]
fn vectors_from_the_shared_file() {
    let vectors: serde_json::Value = serde_json::from_str(VECTORS).expect("vectors are JSON");
    let list = vectors.as_array().expect("an array");
    assert!(list.len() >= 50, "the shared vectors are all there");
    for v in list {
        let s = |k: &str| v[k].as_str().map(str::to_string);
        let content = s("content").expect("content");
        let paths: Vec<String> = v["paths"].as_array().map(|a| a.iter().filter_map(|p| p.as_str().map(str::to_string)).collect()).unwrap_or_default();
        let paths: Vec<&str> = paths.iter().map(String::as_str).collect();
        let st = s("source_type").map(|t| SourceType::parse(&t).expect("known source type"));
        let d = classify(content.as_bytes(), &paths, st, true.into());
        let name = s("name").unwrap_or_default();
        assert_eq!(d.tier.as_str(), s("tier").expect("tier"), "tier of vector {name} ({content:?})");
        assert_eq!(d.rule.name(), s("rule").expect("rule"), "rule of vector {name} ({content:?})");
    }
}

#[test]
fn keyword_inside_a_failed_longer_keyword_is_found() {
    // "social security" fails its left boundary; "security" inside it does not.
    let d = classify(b"xsocial security", &[], Some(SourceType::Decision), true.into());
    assert_eq!((d.tier, d.rule), (Tier::Internal, Rule::InternalDecision));
    assert_eq!(classify_reference(b"xsocial security", &[], Some(SourceType::Decision), true.into()).rule, Rule::InternalDecision);
}

#[test]
fn keywords_spanning_words() {
    for (text, tier) in [("social security", Tier::Restricted), ("credit card", Tier::Restricted), ("api-key", Tier::Confidential),
                         ("private-key", Tier::Confidential), ("api key", Tier::Internal), ("social  security", Tier::Internal),
                         ("credit cards", Tier::Internal), ("sr 11-7", Tier::Internal), ("SR_117", Tier::Internal), ("sr-11-7x", Tier::Internal)] {
        assert_eq!(classify(text.as_bytes(), &[], None, true.into()).tier, tier, "{text}");
        assert_eq!(classify_reference(text.as_bytes(), &[], None, true.into()).tier, tier, "{text}");
    }
    let d = classify(b"sr-11-7", &[], Some(SourceType::Decision), true.into());
    assert_eq!(d.rule, Rule::InternalDecision);
    let d = classify(b"sr-11-7x", &[], Some(SourceType::Decision), true.into());
    assert_eq!(d.rule, Rule::Default);
}

#[test]
fn detectors_off_keeps_only_seed_rules() {
    let d = classify(b"number 123-45-6789", &[], None, false.into());
    assert_eq!(d.tier, Tier::Internal);
    let d = classify(b"AKIAIOSFODNN7EXAMPLE", &["docs/a.md"], None, false.into());
    assert_eq!(d.tier, Tier::Public);
}

#[test]
fn evidence_names_keyword_or_path_never_detector_match() {
    let d = explain(b"My PASSWORD", &[], None, true.into());
    assert_eq!(d.evidence.as_deref(), Some("password"));
    let d = explain(b"4111 1111 1111 1111", &[], None, true.into());
    assert_eq!(d.evidence, None);
    let d = explain(b"x", &["a/secrets/b"], None, true.into());
    assert_eq!(d.evidence.as_deref(), Some("a/secrets/b"));
}

#[test]
fn luhn_known_values() {
    assert!(luhn_valid(b"4111111111111111"));
    assert!(luhn_valid(b"5500 0000 0000 0004"));
    assert!(luhn_valid(b"378282246310005"));
    assert!(!luhn_valid(b"4111111111111112"));
    assert!(!luhn_valid(b"411111111111")); // too short
}

#[test]
fn org_rules_raise_never_lower() {
    let up = OrgRule::compile(7, Tier::Restricted, Target::Content, "(?i)project x", None).unwrap();
    let down = OrgRule::compile(8, Tier::Public, Target::Content, "password", None).unwrap();
    let base = classify(b"password for Project X", &[], None, true.into());
    assert_eq!(base.tier, Tier::Confidential);
    let d = apply_org_rules(base.clone(), &[down.clone()], b"password for Project X", &[], None);
    assert_eq!(d, base);
    let d = apply_org_rules(base, &[down, up], b"password for Project X", &[], None);
    assert_eq!((d.tier, d.rule), (Tier::Restricted, Rule::OrgRule(7)));
}

#[test]
fn org_rule_paths_and_source_type() {
    let r = OrgRule::compile(1, Tier::Confidential, Target::Path, "^/vault/", Some(SourceType::Fact)).unwrap();
    let base = classify(b"x", &["vault/a"], Some(SourceType::Fact), true.into());
    assert_eq!(apply_org_rules(base.clone(), &[r.clone()], b"x", &["vault/a"], Some(SourceType::Fact)).tier, Tier::Confidential);
    assert_eq!(apply_org_rules(base, &[r], b"x", &["vault/a"], None).tier, Tier::Internal);
}

#[test]
fn bad_org_pattern_is_an_error() {
    assert!(OrgRule::compile(1, Tier::Restricted, Target::Content, "(unclosed", None).is_err());
}

#[test]
fn labels_round_trip_and_bands() {
    for t in Tier::ALL {
        assert_eq!(Tier::parse(t.as_str()), Some(t));
    }
    assert_eq!(Tier::parse("Public"), None);
    assert_eq!(Tier::Restricted.risk_band(), "critical");
    assert_eq!(derive_classification(Some("nope")), Tier::Internal);
    assert_eq!(derive_classification(Some("public")), Tier::Public);
    assert_eq!(derive_classification(None), Tier::Internal);
    for s in SourceType::ALL {
        assert_eq!(SourceType::parse(s.as_str()), Some(s));
    }
}

#[test]
fn non_utf8_and_non_ascii_content_is_fine() {
    assert_eq!(tier("passwörd über", &[], None), Tier::Internal);
    assert_eq!(classify(&[0xff, 0xfe, b' ', b's', b's', b'n'], &[], None, true.into()).tier, Tier::Restricted);
}

mod props {
    use super::super::*;
    use proptest::prelude::*;

    fn any_tier_content() -> impl Strategy<Value = String> {
        prop::collection::vec(
            prop_oneof![
                Just("ssn".to_string()),
                Just("password".to_string()),
                Just("audit".to_string()),
                Just("4111 1111 1111 1111".to_string()),
                "[a-z ]{0,12}",
            ],
            0..6,
        )
        .prop_map(|v| v.join(" "))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3000))]

        // Adding a path can never lower the tier below what the content alone forces,
        // except for the public rule, which only applies when every path is public.
        #[test]
        fn restricted_content_dominates_paths(content in any_tier_content(), path in "[a-z/.]{0,20}") {
            let without = classify(content.as_bytes(), &[], None, true.into());
            let with = classify(content.as_bytes(), &[path.as_str()], None, true.into());
            if without.tier == Tier::Restricted { prop_assert_eq!(with.tier, Tier::Restricted); }
            if without.tier >= Tier::Confidential { prop_assert!(with.tier >= Tier::Confidential); }
        }

        #[test]
        fn org_rules_are_monotone(content in any_tier_content(), tier_idx in 0usize..4) {
            let base = classify(content.as_bytes(), &[], None, true.into());
            let r = OrgRule::compile(1, Tier::ALL[tier_idx], Target::Content, ".", None).unwrap();
            let d = apply_org_rules(base.clone(), &[r], content.as_bytes(), &[], None);
            prop_assert!(d.tier >= base.tier);
        }

        #[test]
        fn detectors_only_raise(content in any_tier_content(), paths in prop::collection::vec("[a-z/.]{0,12}", 0..3)) {
            let ps: Vec<&str> = paths.iter().map(String::as_str).collect();
            let on = classify(content.as_bytes(), &ps, Some(SourceType::Decision), true.into());
            let off = classify(content.as_bytes(), &ps, Some(SourceType::Decision), false.into());
            prop_assert!(on.tier >= off.tier);
        }

        // The vector masks of a block equal the byte-by-byte tables, whatever the bytes.
        #[test]
        fn block_masks_match_tables(block in prop::collection::vec(any::<u8>(), 0..=64)) {
            let mut want = [0u64; 7];
            for (i, &b) in block.iter().enumerate() {
                want[0] |= u64::from(CLASS[b as usize] != 0) << i;
                want[1] |= u64::from(CLASS[b as usize] == DIGIT) << i;
                want[2] |= u64::from(b == b'-') << i;
                want[3] |= u64::from(FIRST[b as usize]) << i;
                want[4] |= u64::from(matches!(b, b'@' | b'+' | b':' | b'_')) << i;
                want[5] |= u64::from(b.is_ascii_uppercase()) << i;
                want[6] |= u64::from(b == b'1') << i;
            }
            prop_assert_eq!(block_masks(&block), want);
        }

        // The fast path and the literal regexes agree on tier and rule for any mix of
        // keywords, near-misses, digits, separators and paths.
        #[test]
        fn fast_path_matches_reference(
            parts in prop::collection::vec(prop_oneof![
                Just("ssn".to_string()), Just("SSN".to_string()), Just("social security".to_string()), Just("credit card".to_string()), Just("pci".to_string()), Just("pii".to_string()),
                Just("password".to_string()), Just("api_key".to_string()), Just("API-KEY".to_string()), Just("apikey".to_string()), Just("api key".to_string()), Just("token".to_string()),
                Just("tokens".to_string()), Just("private_key".to_string()), Just("privatekey".to_string()), Just("Secret".to_string()), Just("secrets".to_string()),
                Just("compliance".to_string()), Just("security".to_string()), Just("audit".to_string()), Just("policy".to_string()), Just("sox".to_string()), Just("sr 11-7".to_string()),
                Just("SR_117".to_string()), Just("sr11 7".to_string()), Just("gdpr".to_string()), Just("hipaa".to_string()), Just("xaudit".to_string()), Just("audit_".to_string()),
                Just("4111 1111 1111 1111".to_string()), Just("4111-1111-1111-1111".to_string()), Just("411111111111111".to_string()), Just("123-45-6789".to_string()),
                Just("-----BEGIN RSA PRIVATE KEY-----".to_string()), Just("-----begin private key-----".to_string()), Just("AKIAIOSFODNN7EXAMPLE".to_string()),
                Just("akiaIOSFODNN7EXAMPLE".to_string()), Just("xAKIAIOSFODNN7EXAMPLE".to_string()), Just("private-key".to_string()),
                Just("api-keys".to_string()), Just("credit cards".to_string()), Just("social  security".to_string()), Just("sr-11-7x".to_string()),
                Just("PASSWORD".to_string()), Just("Hipaa".to_string()), Just("GDPR".to_string()), Just("Audit".to_string()), Just("POLICY".to_string()),
                Just("Private-Key".to_string()), Just("Credit Card".to_string()), Just("Social SECURITY".to_string()), Just("COMPLIANCE".to_string()), Just("Sox".to_string()),
                Just("sr_11".to_string()), Just("SR".to_string()), Just("-----BEGIN".to_string()), Just("xeyJhbGciOi.eyJzdWIi.sig".to_string()), Just("eyJhbGciOi.eyJzdWIi.sig".to_string()), Just("é".to_string()), Just("_".to_string()), Just("-".to_string()), Just(".".to_string()),
                "[a-z0-9 _-]{0,8}",
            ], 0..8),
            seps in prop::collection::vec(prop_oneof![Just(" "), Just(""), Just("_"), Just("-"), Just("\n"), Just("é")], 8),
            paths in prop::collection::vec(prop_oneof![
                Just("docs/a.md".to_string()), Just("public/x".to_string()), Just("src/auth/x.ts".to_string()),
                Just("auth".to_string()), Just(".env".to_string()), Just("app/.env.local".to_string()),
                Just("app/.envrc".to_string()), Just("a\\KEYS\\b".to_string()), Just("/docs/".to_string()),
                Just("x/.env_prod".to_string()), Just("x/.env-prod".to_string()), r"[a-zA-Z./\\]{0,14}",
            ], 0..4),
            st in prop::option::of(0usize..4),
            detectors in any::<bool>(),
        ) {
            let mut content = String::new();
            for (i, p) in parts.iter().enumerate() {
                content.push_str(p);
                content.push_str(seps[i % seps.len()]);
            }
            let ps: Vec<&str> = paths.iter().map(String::as_str).collect();
            let st = st.map(|i| SourceType::ALL[i]);
            let fast = classify(content.as_bytes(), &ps, st, detectors.into());
            let reference = classify_reference(content.as_bytes(), &ps, st, detectors.into());
            prop_assert_eq!((fast.tier, fast.rule), (reference.tier, reference.rule), "content {:?} paths {:?}", content, ps);
        }

        #[test]
        fn never_panics_on_bytes(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
            let _ = classify(&bytes, &["x/y"], None, true.into());
        }
    }
}

// The keyword prefilter (first letter and length) lets every keyword word through in any case,
// alone, inside a sentence, and next to the separators of the keywords that span words.
#[test]
fn keyword_prefilter_passes_every_keyword_in_any_case() {
    for w in KEYWORD_WORDS {
        let title = format!("{}{}", w[..1].to_ascii_uppercase(), &w[1..]);
        for form in [w.to_string(), w.to_ascii_uppercase(), title] {
            for content in [
                form.clone(),
                format!("note: {form} here"),
                format!("{form} security"),
                format!("{form} card"),
                format!("{form}-key"),
                format!("x{form}"),
                format!("{form}s"),
            ] {
                for st in [None, Some(SourceType::Decision)] {
                    let fast = classify(content.as_bytes(), &[], st, true.into());
                    let reference = classify_reference(content.as_bytes(), &[], st, true.into());
                    assert_eq!((fast.tier, fast.rule), (reference.tier, reference.rule), "content {content:?}");
                }
            }
        }
        assert_ne!(KEYWORD_LENGTHS[w.as_bytes()[0] as usize] & (1 << w.len()), 0, "{w}");
    }
}
// Keywords and detector inputs at every offset, among letters, spaces, non-ASCII or digits: the
// fast path agrees with the literal regexes wherever the word falls.
#[test]
fn keywords_at_every_offset() {
    for needle in ["credit card", "PASSWORD", "sr-11-7", "4111 1111 1111 1111", "123-45-6789", "AKIAIOSFODNN7EXAMPLE", "-----BEGIN RSA PRIVATE KEY-----", "audit", "xaudit", "audit_"] {
        for pad in 0..140 {
            for filler in ["a", " ", "é", "7"] {
                let content = format!("{}{needle}{}", filler.repeat(pad), filler.repeat(pad % 7));
                for st in [None, Some(SourceType::Decision)] {
                    let fast = classify(content.as_bytes(), &[], st, true.into());
                    let reference = classify_reference(content.as_bytes(), &[], st, true.into());
                    assert_eq!((fast.tier, fast.rule), (reference.tier, reference.rule), "content {content:?}");
                }
            }
        }
    }
}

#[test]
fn blank_contents() {
    for b in ["", " ", "\t\n\r", "\u{a0}\u{2028}\u{3000}"] {
        assert!(is_blank(b.as_bytes()), "{b:?} is blank");
    }
    for c in ["x", " a ", "\u{200b}", "0"] {
        assert!(!is_blank(c.as_bytes()), "{c:?} is not blank");
    }
    // Not text: not blank (the trigger sees only valid text in a UTF-8 database).
    assert!(!is_blank(&[0xff, 0x20]));
}

proptest::proptest! {
    #[test]
    fn blank_is_all_white_space(s in "\\PC{0,12}") {
        proptest::prop_assert_eq!(is_blank(s.as_bytes()), s.trim().is_empty());
    }
}
