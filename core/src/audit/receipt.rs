//! Erasure receipts (docs/audit.md#erasure-receipts): what `memory.forget` and
//! `memory.erase_subject` hand back as evidence that rows are gone, and what
//! `memory.verify_receipt` and an offline auditor check.
//!
//! A receipt is a flat JSON object. Its `signature` is `HMAC-SHA256(key[key_id], JCS(receipt
//! without "signature"))`, lowercase hex: the same canonical form and MAC as the audit chain's
//! entries ([`super::canonical_json`], [`super::hmac_sha256`]). `ids_sha256` commits to the
//! forgotten ids: SHA-256 of their lowercase text, distinct, sorted bytewise, joined by `\n`.

use super::{canonical_json, hmac_sha256, sha256_hex};
use serde_json::Value;

/// The members of a receipt, each with what it must hold. Nothing else may be present.
pub const FIELDS: [&str; 10] =
    ["org_id", "event_id", "seq", "entry_hash", "chain_head", "ids_sha256", "count", "at", "key_id", "signature"];

/// `ids_sha256` of a set of ids: SHA-256 (lowercase hex) of the distinct lowercased ids, sorted
/// bytewise and joined by `\n` (no trailing newline; the empty set hashes the empty string).
pub fn ids_sha256<S: AsRef<str>>(ids: &[S]) -> String {
    let mut v: Vec<String> = ids.iter().map(|s| s.as_ref().to_lowercase()).collect();
    v.sort_unstable();
    v.dedup();
    sha256_hex(v.join("\n").as_bytes())
}

/// The receipt's signature: lowercase hex `HMAC-SHA256(key, JCS(receipt minus "signature"))`.
/// `receipt` must be an object (checked by [`shape_error`] first).
pub fn signature(key: &[u8], receipt: &Value) -> String {
    let mut unsigned = receipt.clone();
    if let Value::Object(map) = &mut unsigned {
        map.remove("signature");
    }
    hex::encode(hmac_sha256(key, &canonical_json(&unsigned)))
}

/// Whether `sig` (as found in a receipt) is the signature of `receipt` under `key`, compared in
/// constant time.
pub fn signature_ok(key: &[u8], receipt: &Value) -> bool {
    let want = signature(key, receipt);
    match receipt.get("signature").and_then(Value::as_str) {
        Some(got) if got.len() == want.len() => {
            got.bytes().zip(want.bytes()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
        }
        _ => false,
    }
}

fn is_hex64(v: &Value) -> bool {
    v.as_str().is_some_and(|s| s.len() == 64 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
}

fn is_uuid(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 36
        && b.iter().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => *c == b'-',
            _ => c.is_ascii_hexdigit(),
        })
}

fn is_count(v: &Value) -> bool {
    v.as_i64().is_some_and(|n| (0..=(1 << 53)).contains(&n))
}

/// Why `receipt` is not a well-formed receipt (the first member at fault, named), or `None`.
/// Values are checked for their form only: whether they are true is `memory.verify_receipt`'s.
pub fn shape_error(receipt: &Value) -> Option<String> {
    let Value::Object(map) = receipt else {
        return Some("a receipt is a JSON object".into());
    };
    if let Some(k) = map.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Some(format!("receipt has an unknown member \"{}\"", k.chars().take(64).collect::<String>()));
    }
    for f in FIELDS {
        let Some(v) = map.get(f) else {
            return Some(format!("receipt has no \"{f}\""));
        };
        let ok = match f {
            "org_id" => v.is_string(),
            "event_id" => v.as_str().is_some_and(is_uuid),
            "seq" => v.is_null() || v.as_i64().is_some_and(|n| (1..=(1 << 53)).contains(&n)),
            "entry_hash" => v.is_null() || is_hex64(v),
            "chain_head" => match v {
                Value::Object(h) => {
                    h.len() == 2
                        && h.get("seq").is_some_and(is_count)
                        && h.get("entry_hash").is_some_and(is_hex64)
                }
                _ => false,
            },
            "ids_sha256" | "signature" => is_hex64(v),
            "count" => is_count(v),
            "at" => v.as_str().is_some_and(|s| s.len() == 27 && s.ends_with('Z')),
            "key_id" => v.as_i64().is_some_and(|n| (1..=i64::from(i32::MAX)).contains(&n)),
            _ => true,
        };
        if !ok {
            return Some(format!("receipt member \"{f}\" is not {}", expected(f)));
        }
    }
    if map.get("seq").is_some_and(Value::is_null) != map.get("entry_hash").is_some_and(Value::is_null) {
        return Some("receipt members \"seq\" and \"entry_hash\" are both null or both set".into());
    }
    None
}

fn expected(f: &str) -> &'static str {
    match f {
        "org_id" => "a string",
        "event_id" => "a uuid in lowercase text",
        "seq" => "null or an integer from 1",
        "entry_hash" => "null or 64 lowercase hex digits",
        "chain_head" => "an object {seq, entry_hash}",
        "count" => "an integer from 0",
        "at" => "a UTC timestamp as YYYY-MM-DDTHH:MM:SS.ffffffZ",
        "key_id" => "a positive integer",
        _ => "64 lowercase hex digits",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn sample() -> Value {
        json!({
            "org_id": "acme", "event_id": "6f1c2b4e-0000-4000-8000-000000000001", "seq": null, "entry_hash": null,
            "chain_head": {"seq": 3, "entry_hash": "ab".repeat(32)}, "ids_sha256": ids_sha256(&["B", "a"]),
            "count": 2, "at": "2026-12-05T03:00:00.000000Z", "key_id": 1, "signature": "00".repeat(32)
        })
    }

    fn signed(key: &[u8]) -> Value {
        let mut r = sample();
        let sig = signature(key, &r);
        r["signature"] = Value::String(sig);
        r
    }

    #[test]
    fn ids_hash_is_of_sorted_lowercase_distinct_ids() {
        // sha256("a\nb")
        assert_eq!(ids_sha256(&["B", "a", "b"]), sha256_hex(b"a\nb"));
        assert_eq!(ids_sha256::<&str>(&[]), sha256_hex(b""));
    }

    #[test]
    fn signature_is_hmac_of_jcs_without_signature() {
        let r = signed(b"k");
        let mut unsigned = r.clone();
        unsigned.as_object_mut().unwrap().remove("signature");
        let jcs = serde_json_canonicalizer::to_vec(&unsigned).unwrap();
        assert_eq!(r["signature"].as_str().unwrap(), hex::encode(hmac_sha256(b"k", &jcs)));
        assert!(signature_ok(b"k", &r));
        assert!(!signature_ok(b"other", &r));
        assert_eq!(shape_error(&r), None);
    }

    #[test]
    fn every_member_is_signed() {
        let r = signed(b"k");
        for f in FIELDS.iter().filter(|f| **f != "signature") {
            let mut t = r.clone();
            t[*f] = match &r[*f] {
                Value::Null => json!(7),
                Value::String(s) => Value::String(format!("{s}x")),
                Value::Number(n) => json!(n.as_i64().unwrap() + 1),
                other => json!({"was": other}),
            };
            assert!(!signature_ok(b"k", &t), "{f} is not covered");
        }
    }

    #[test]
    fn malformed_receipts_name_the_member() {
        assert!(shape_error(&json!([1])).unwrap().contains("object"));
        let mut r = sample();
        r.as_object_mut().unwrap().remove("at");
        assert!(shape_error(&r).unwrap().contains("\"at\""));
        let mut r = sample();
        r["extra"] = json!(1);
        assert!(shape_error(&r).unwrap().contains("extra"));
        let mut r = sample();
        r["event_id"] = json!("not-a-uuid");
        assert!(shape_error(&r).unwrap().contains("event_id"));
        let mut r = sample();
        r["seq"] = json!(4);
        assert!(shape_error(&r).unwrap().contains("both"));
        let mut r = sample();
        r["chain_head"] = json!({"seq": -1, "entry_hash": "ab".repeat(32)});
        assert!(shape_error(&r).unwrap().contains("chain_head"));
        let mut r = sample();
        r["ids_sha256"] = json!("AB".repeat(32));
        assert!(shape_error(&r).unwrap().contains("ids_sha256"));
    }

    proptest! {
        #[test]
        fn ids_hash_ignores_order_case_and_repeats(mut ids in proptest::collection::vec("[a-fA-F0-9-]{1,12}", 0..20), seed in any::<u64>()) {
            let h = ids_sha256(&ids);
            let n = ids.len();
            if n > 1 { ids.rotate_left((seed as usize) % n); }
            let mut more = ids.iter().map(|s| s.to_uppercase()).collect::<Vec<_>>();
            more.extend(ids.iter().take(2).cloned());
            prop_assert_eq!(ids_sha256(&more), h);
        }

        #[test]
        fn signature_matches_the_reference_canonicalizer(org in "\\PC{0,20}", count in 0i64..1_000_000, key in proptest::collection::vec(any::<u8>(), 1..64)) {
            let mut r = sample();
            r["org_id"] = Value::String(org);
            r["count"] = json!(count);
            let mut unsigned = r.clone();
            unsigned.as_object_mut().unwrap().remove("signature");
            let jcs = serde_json_canonicalizer::to_vec(&unsigned).unwrap();
            prop_assert_eq!(signature(&key, &r), hex::encode(hmac_sha256(&key, &jcs)));
        }
    }
}
