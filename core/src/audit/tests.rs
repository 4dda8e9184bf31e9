//! Tests of the audit chain's rules: canonical form vectors, chaining and verification of
//! tampered chains, seals, Merkle roots and property tests against a reference. This file is long
//! because every verdict of the verifier has its own tampering case here.

use super::*;
use serde_json::json;

fn keys() -> HashMap<i32, Vec<u8>> {
    HashMap::from([(1, b"key-one".to_vec()), (2, b"key-two-after-rotation".to_vec())])
}

fn to_array(bytes: &[u8]) -> [u8; 32] {
    bytes.try_into().expect("32-byte hash")
}

/// A chain of `n` entries built the way the extension builds it; the key rotates halfway.
fn chain(n: usize) -> Vec<StoredEntry> {
    let keys = keys();
    let mut chainer = Chainer::new(0, ZERO_HASH);
    (0..n)
        .map(|i| {
            let payload = json!({"memory_id": i, "op": "write", "note": "café", "tags": ["a", i % 3]});
            let key_id = if i < n / 2 { 1 } else { 2 };
            let mut ev = Event {
                chain_id: "tenant-a",
                seq: 0,
                prev_hash: ZERO_HASH,
                event_type: ["memory.write", "memory.read"][i % 2],
                recorded_at_micros: 1_700_000_000_000_000 + i as i64 * 1_000,
                actor_id: (i % 3 != 0).then_some("h:abc"),
                org_id: Some("org-1"),
                project_id: (i % 2 == 0).then_some("proj"),
                workspace_id: None,
                key_id,
                payload: Payload::Json(&payload),
            };
            let (_, _, hash) = chainer.append(&keys[&key_id], &mut ev);
            StoredEntry::from_event(&ev, hash)
        })
        .collect()
}

/// Recomputes a row's entry_hash with the real key, as someone holding the key would.
fn resign(e: &mut StoredEntry) {
    let ev = Event {
        chain_id: &e.chain_id,
        seq: e.seq,
        prev_hash: to_array(&e.prev_hash),
        event_type: &e.event_type,
        recorded_at_micros: e.recorded_at_micros,
        actor_id: e.actor_id.as_deref(),
        org_id: e.org_id.as_deref(),
        project_id: e.project_id.as_deref(),
        workspace_id: e.workspace_id.as_deref(),
        key_id: e.key_id,
        payload: Payload::Json(&e.payload),
    };
    e.entry_hash = entry_hash(&keys()[&e.key_id], &ev).to_vec();
}

fn head_of(rows: &[StoredEntry]) -> Option<(i64, [u8; 32])> {
    rows.last().map(|e| (e.seq, to_array(&e.entry_hash)))
}

#[test]
fn timestamps_known_values() {
    let cases: &[(i64, &str)] = &[
        (0, "1970-01-01T00:00:00.000000Z"),
        (951_782_400_123_456, "2000-02-29T00:00:00.123456Z"),
        (1_700_000_000_000_000, "2023-11-14T22:13:20.000000Z"),
        (-1, "1969-12-31T23:59:59.999999Z"),
        (-1_000_000, "1969-12-31T23:59:59.000000Z"),
        (-62_135_596_800_000_000, "0001-01-01T00:00:00.000000Z"),
        (-62_167_219_200_000_000, "0000-01-01T00:00:00.000000Z"),
        (-62_167_219_200_000_001, "-000001-12-31T23:59:59.999999Z"),
        (253_402_300_799_999_999, "9999-12-31T23:59:59.999999Z"),
        (253_402_300_800_000_000, "+010000-01-01T00:00:00.000000Z"),
        (i64::MAX, "+294247-01-10T04:00:54.775807Z"),
        (i64::MIN, "-290308-12-21T19:59:05.224192Z"),
    ];
    for &(micros, want) in cases {
        assert_eq!(format_timestamp(micros), want, "micros {micros}");
    }
}

#[test]
fn civil_from_days_matches_day_by_day_calendar() {
    // Walk the proleptic Gregorian calendar one day at a time from 1600-01-01 to 2400-12-31.
    let leap = |y: i64| (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let month_len = |y: i64, m: u32| match m {
        2 if leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    };
    let (mut y, mut m, mut d) = (1600i64, 1u32, 1u32);
    let mut day = -135_140; // 1600-01-01 relative to 1970-01-01
    while y <= 2400 {
        assert_eq!(civil_from_days(day), (y, m, d), "day {day}");
        day += 1;
        d += 1;
        if d > month_len(y, m) {
            (d, m) = (1, m + 1);
            if m > 12 {
                (m, y) = (1, y + 1);
            }
        }
    }
}

#[test]
fn hmac_rfc4231_vectors() {
    let tc2 = hmac_sha256(b"Jefe", b"what do ya want for nothing?");
    assert_eq!(hex::encode(tc2), "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    // Test case 6: a key longer than the block size is hashed first.
    let tc6 = hmac_sha256(&[0xaa; 131], b"Test Using Larger Than Block-Size Key - Hash Key First");
    assert_eq!(hex::encode(tc6), "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

#[test]
fn digests_and_pseudonyms() {
    assert_eq!(sha256_hex(b""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    assert_eq!(sha256_hex(b"abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    let p = pseudonymize(b"Jefe", "what do ya want for nothing?");
    assert_eq!(p, "h:5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    assert_ne!(pseudonymize(b"other salt", "user-1"), pseudonymize(b"salt", "user-1"));
}

fn kat_payload() -> Value {
    serde_json::from_str(
        r#"{"z":1,"b":{"y":0.1,"x":1e21,"\u20ac":"\u20ac","\r":"\n","1":true,"\ud83d\ude00":null,
            "\ufb33":"\u001f","\u00f6":[1.5,-0.0,1E-7,9007199254740993]},"a":"\u00e9\u0001/\"\\"}"#,
    )
    .expect("valid JSON")
}

fn kat_event(payload: &Value) -> Event<'_> {
    Event {
        chain_id: "tenant-7",
        seq: 3,
        prev_hash: [0xab; 32],
        event_type: "memory.write",
        recorded_at_micros: 951_782_400_123_456,
        actor_id: Some("h:01"),
        org_id: None,
        project_id: Some("p\u{e9}"),
        workspace_id: None,
        key_id: 2,
        payload: Payload::Json(payload),
    }
}

#[test]
fn canonical_event_known_answer() {
    // By hand from RFC 8785: members sorted by UTF-16 code units (so U+1F600, a surrogate pair
    // starting 0xD83D, sorts before U+FB33), no whitespace, ECMAScript numbers (1e21 -> 1e+21,
    // -0 -> 0, 1E-7 -> 1e-7, 2^53+1 rounds to 2^53), only `"`, `\` and controls escaped.
    let payload = concat!(
        r#"{"a":"é\u0001/\"\\","#,
        r#""b":{"\r":"\n","1":true,"x":1e+21,"y":0.1,"ö":[1.5,0,1e-7,9007199254740992],"#,
        "\"\u{20ac}\":\"\u{20ac}\",\"\u{1f600}\":null,\"\u{fb33}\":\"\\u001f\"},",
        r#""z":1}"#,
    );
    let want = format!(
        concat!(
            r#"{{"actor_id":"h:01","chain_id":"tenant-7","event_type":"memory.write","key_id":2,"#,
            r#""org_id":null,"payload":{},"prev_hash":"{}","project_id":"pé","#,
            r#""recorded_at":"2000-02-29T00:00:00.123456Z","seq":3,"workspace_id":null}}"#,
        ),
        payload,
        "ab".repeat(32),
    );
    let p = kat_payload();
    let got = canonical_event(&kat_event(&p));
    assert_eq!(String::from_utf8_lossy(&got), want);
    // The crate's own canonicalizer agrees on the whole object.
    let reference = json!({
        "chain_id": "tenant-7", "seq": 3, "prev_hash": "ab".repeat(32), "event_type": "memory.write",
        "recorded_at": "2000-02-29T00:00:00.123456Z", "actor_id": "h:01", "org_id": null,
        "project_id": "p\u{e9}", "workspace_id": null, "key_id": 2, "payload": p,
    });
    assert_eq!(got, serde_json_canonicalizer::to_vec(&reference).expect("canonicalizes"));
}

#[test]
fn entry_hash_is_hmac_of_canonical_event() {
    let p = kat_payload();
    let ev = kat_event(&p);
    assert_eq!(entry_hash(b"k", &ev), hmac_sha256(b"k", &canonical_event(&ev)));
    assert_ne!(entry_hash(b"k", &ev), entry_hash(b"k2", &ev));
}

#[test]
fn chainer_links_and_resumes() {
    let rows = chain(6);
    assert_eq!(rows[0].prev_hash, ZERO_HASH.to_vec());
    for w in rows.windows(2) {
        assert_eq!(w[1].prev_hash, w[0].entry_hash);
        assert_eq!(w[1].seq, w[0].seq + 1);
    }
    assert_eq!(rows.iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 2, 3, 4, 5, 6]);
    // Resuming from a stored head continues the same chain.
    let p = json!({});
    let mut ev = Event { payload: Payload::Json(&p), ..kat_event(&p) };
    let mut resumed = Chainer::new(6, to_array(&rows[5].entry_hash));
    let (seq, prev, hash) = resumed.append(b"k", &mut ev);
    assert_eq!((seq, prev.to_vec(), ev.seq, ev.prev_hash), (7, rows[5].entry_hash.clone(), 7, prev));
    assert_eq!(resumed.head(), (7, hash));
    assert_eq!(hash, entry_hash(b"k", &ev));
}

fn merkle_leaf(d: &[u8; 32]) -> [u8; 32] {
    let mut v = vec![0u8];
    v.extend_from_slice(d);
    Sha256::digest(&v).into()
}

fn merkle_node(l: [u8; 32], r: [u8; 32]) -> [u8; 32] {
    let mut v = vec![1u8];
    v.extend_from_slice(&l);
    v.extend_from_slice(&r);
    Sha256::digest(&v).into()
}

/// RFC 9162 §2.1.1 read literally.
fn merkle_reference(leaves: &[[u8; 32]]) -> [u8; 32] {
    match leaves.len() {
        0 => Sha256::digest(b"").into(),
        1 => merkle_leaf(&leaves[0]),
        n => {
            let mut k = 1;
            while k * 2 < n {
                k *= 2;
            }
            merkle_node(merkle_reference(&leaves[..k]), merkle_reference(&leaves[k..]))
        }
    }
}

#[test]
fn merkle_small_trees_by_hand() {
    let d: Vec<[u8; 32]> = (0..7u8).map(|i| [i; 32]).collect();
    let l: Vec<[u8; 32]> = d.iter().map(merkle_leaf).collect();
    let n = merkle_node;
    let cases: &[(usize, [u8; 32])] = &[
        (0, Sha256::digest(b"").into()),
        (1, l[0]),
        (2, n(l[0], l[1])),
        (3, n(n(l[0], l[1]), l[2])),
        (5, n(n(n(l[0], l[1]), n(l[2], l[3])), l[4])),
        (7, n(n(n(l[0], l[1]), n(l[2], l[3])), n(n(l[4], l[5]), l[6]))),
    ];
    for &(count, want) in cases {
        assert_eq!(merkle_root(&d[..count]), want, "{count} leaves");
        assert_eq!(merkle_reference(&d[..count]), want, "reference, {count} leaves");
    }
    assert_eq!(hex::encode(merkle_root(&[])), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

type Tamper = fn(&mut Vec<StoredEntry>, &mut Option<(i64, [u8; 32])>);
/// Expected verdict: the failure and the seq it is reported at, or none.
type Expect = Option<(Failure, i64)>;

#[test]
fn tamper_matrix() {
    use Failure::*;
    let cases: &[(&str, Tamper, Expect)] = &[
        ("untouched", |_, _| {}, None),
        ("chain_id", |r, _| r[4].chain_id = "tenant-b".into(), Some((HashMismatch, 5))),
        ("event_type", |r, _| r[4].event_type = "memory.delete".into(), Some((HashMismatch, 5))),
        ("recorded_at", |r, _| r[4].recorded_at_micros += 1, Some((HashMismatch, 5))),
        ("actor_id removed", |r, _| r[4].actor_id = None, Some((HashMismatch, 5))),
        ("org_id", |r, _| r[4].org_id = Some("org-2".into()), Some((HashMismatch, 5))),
        ("project_id removed", |r, _| r[4].project_id = None, Some((HashMismatch, 5))),
        ("workspace_id added", |r, _| r[4].workspace_id = Some("w".into()), Some((HashMismatch, 5))),
        ("key_id to another known key", |r, _| r[4].key_id = 2, Some((HashMismatch, 5))),
        ("key_id unknown", |r, _| r[4].key_id = 99, Some((UnknownKey, 5))),
        ("payload value", |r, _| r[4].payload["op"] = json!("delete"), Some((HashMismatch, 5))),
        ("payload nested", |r, _| r[4].payload["tags"][1] = json!(7), Some((HashMismatch, 5))),
        ("payload extra key", |r, _| r[4].payload["x"] = json!(null), Some((HashMismatch, 5))),
        ("prev_hash", |r, _| r[4].prev_hash[0] ^= 1, Some((HashMismatch, 5))),
        ("prev_hash truncated", |r, _| r[4].prev_hash.truncate(31), Some((HashMismatch, 5))),
        ("entry_hash", |r, _| r[4].entry_hash[31] ^= 0x80, Some((HashMismatch, 5))),
        ("last entry_hash", |r, _| r[9].entry_hash[0] ^= 1, Some((HashMismatch, 10))),
        ("delete middle row", |r, _| drop(r.remove(4)), Some((Gap, 5))),
        ("delete first row", |r, _| drop(r.remove(0)), Some((Gap, 1))),
        ("seq moved away", |r, _| { r[4].seq = 50; r.sort_by_key(|e| e.seq) }, Some((Gap, 5))),
        ("swap seqs 3 and 7", |r, _| { (r[2].seq, r[6].seq) = (7, 3); r.sort_by_key(|e| e.seq) }, Some((HashMismatch, 3))),
        ("swap seqs 1 and 2", |r, _| { (r[0].seq, r[1].seq) = (2, 1); r.sort_by_key(|e| e.seq) }, Some((HashMismatch, 1))),
        ("read out of order", |r, _| r.swap(3, 4), Some((Gap, 4))),
        ("forged duplicate after", |r, _| { let mut f = r[4].clone(); f.payload["op"] = json!("x"); r.insert(5, f) }, Some((Reorder, 5))),
        ("forged duplicate before", |r, _| { let mut f = r[4].clone(); f.payload["op"] = json!("x"); r.insert(4, f) }, Some((HashMismatch, 5))),
        ("re-signed duplicate before", |r, _| { let mut f = r[4].clone(); f.payload["op"] = json!("x"); resign(&mut f); r.insert(4, f) }, Some((Reorder, 5))),
        ("re-signed, wrong prev", |r, _| { let mut f = r[4].clone(); f.prev_hash = vec![7; 32]; resign(&mut f); r.insert(4, f) }, Some((BrokenLink, 5))),
        ("re-signed edit", |r, _| { r[4].event_type = "x".into(); resign(&mut r[4]) }, Some((BrokenLink, 6))),
        ("truncated tail", |r, _| r.truncate(8), Some((TailMissing, 9))),
        ("truncated tail, no head", |r, h| { r.truncate(8); *h = None }, None),
        ("all rows deleted", |r, _| r.clear(), Some((TailMissing, 1))),
        ("entries beyond head", |r, h| *h = head_of(&r[..8]), Some((BrokenLink, 9))),
        ("head hash differs", |_, h| *h = h.map(|(s, _)| (s, [1; 32])), Some((HashMismatch, 10))),
    ];
    let keys = keys();
    for (name, tamper, want) in cases {
        let mut rows = chain(10);
        let mut head = head_of(&rows);
        tamper(&mut rows, &mut head);
        let v = verify_entries(&keys, Vec::new(), &rows, head);
        let got = v.failure.clone().zip(v.first_bad_seq);
        assert_eq!(got, *want, "{name}: {v:?}");
        assert_eq!(v.ok, want.is_none(), "{name}");
        assert_eq!(v.detail.is_some(), want.is_some(), "{name}");
        assert_eq!(v.entries, rows.len() as i64, "{name}: every row is counted");
    }
}

#[test]
fn beyond_head_detail_and_reasons() {
    let rows = chain(6);
    let v = verify_entries(&keys(), Vec::new(), &rows, head_of(&rows[..5]));
    assert_eq!(v.detail.as_deref(), Some("entries beyond the recorded head"));
    let reasons = [
        (Failure::HashMismatch, "hash mismatch"),
        (Failure::BrokenLink, "broken link"),
        (Failure::Gap, "gap"),
        (Failure::Reorder, "reorder"),
        (Failure::TailMissing, "tail missing"),
        (Failure::UnknownKey, "unknown key"),
    ];
    for (f, s) in reasons {
        assert_eq!((f.reason(), f.to_string()), (s, s.to_string()));
    }
}

fn seal(rows: &[StoredEntry]) -> Seal {
    let hashes: Vec<[u8; 32]> = rows.iter().map(|e| to_array(&e.entry_hash)).collect();
    Seal {
        first_seq: rows[0].seq,
        last_seq: rows[rows.len() - 1].seq,
        last_entry_hash: hashes[hashes.len() - 1],
        merkle_root: merkle_root(&hashes),
    }
}

#[test]
fn seals_bridge_pruned_ranges() {
    use Failure::*;
    let rows = chain(10);
    let head = head_of(&rows);
    let bad_hash = |mut s: Seal| {
        s.last_entry_hash[0] ^= 1;
        s
    };
    // (name, seals, rows kept as [start, end) index pairs, pruned, expected failure)
    type Case<'a> = (&'a str, Vec<Seal>, &'a [(usize, usize)], i64, Expect);
    let cases: Vec<Case> = vec![
        ("dropped beginning", vec![seal(&rows[..4])], &[(4, 10)], 4, None),
        ("dropped beginning, no seal", vec![], &[(4, 10)], 0, Some((Gap, 1))),
        ("consecutive seals", vec![seal(&rows[2..4]), seal(&rows[..2])], &[(4, 10)], 4, None),
        ("middle range", vec![seal(&rows[3..6])], &[(0, 3), (6, 10)], 3, None),
        ("uncovered gap after a seal", vec![seal(&rows[..4])], &[(4, 6), (7, 10)], 4, Some((Gap, 7))),
        ("seal with wrong hash", vec![bad_hash(seal(&rows[..4]))], &[(4, 10)], 4, Some((BrokenLink, 5))),
        ("seal over rows still present", vec![seal(&rows[..4])], &[(0, 10)], 0, None),
        ("seal overlapping a present row", vec![seal(&rows[..6])], &[(4, 10)], 0, Some((Gap, 1))),
        ("seal not starting at the gap", vec![seal(&rows[1..4])], &[(4, 10)], 0, Some((Gap, 1))),
        ("everything sealed", vec![seal(&rows[..10])], &[], 10, None),
        ("sealed tail still needs the head", vec![seal(&rows[..8])], &[], 8, Some((TailMissing, 9))),
    ];
    let keys = keys();
    for (name, seals, kept, pruned, want) in cases {
        let present: Vec<StoredEntry> = kept.iter().flat_map(|&(a, b)| rows[a..b].to_vec()).collect();
        let v = verify_entries(&keys, seals, &present, head);
        assert_eq!(v.failure.clone().zip(v.first_bad_seq), want, "{name}: {v:?}");
        assert_eq!((v.pruned, v.entries), (pruned, present.len() as i64), "{name}");
    }
}

#[test]
fn streaming_verifier_matches_batch() {
    let rows = chain(7);
    let keys = keys();
    let mut v = Verifier::new(&keys, Vec::new());
    rows.iter().for_each(|e| v.push(e));
    let got = v.finish(head_of(&rows));
    let want = Verdict { entries: 7, pruned: 0, ok: true, first_bad_seq: None, failure: None, detail: None };
    assert_eq!(got, want);
    assert!(verify_entries(&keys, Vec::new(), &[], None).ok);
    assert!(verify_entries(&keys, Vec::new(), &[], Some((0, ZERO_HASH))).ok);
}

mod props {
    use super::*;
    use proptest::prelude::*;

    /// Text biased towards what JCS treats specially: escapes, controls, and the characters
    /// where UTF-16 and UTF-8 orders disagree.
    fn tricky_string() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-c\"\\\\/\\x00-\\x1f\\x7f\u{e9}\u{2028}\u{20ac}\u{e000}\u{fb33}\u{ffff}\u{10000}\u{1f600}]{0,6}",
            any::<String>(),
        ]
    }

    fn any_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            (-(1i64 << 54)..(1i64 << 54)).prop_map(Value::from),
            any::<f64>().prop_filter_map("finite", |f| Number::from_f64(f).map(Value::Number)),
            tricky_string().prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                prop::collection::vec((tricky_string(), inner), 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    fn parse_timestamp(s: &str) -> i64 {
        let (sign, rest) = match s.as_bytes()[0] {
            b'+' => (1, &s[1..]),
            b'-' => (-1, &s[1..]),
            _ => (1, s),
        };
        let (date, time) = rest.split_once('T').expect("T");
        let mut d = date.split('-').map(|p| p.parse::<i64>().expect("digits"));
        let (y, m, day) = (sign * d.next().expect("y"), d.next().expect("m"), d.next().expect("d"));
        // Hinnant's days_from_civil: the inverse algorithm, so the round trip checks both.
        let y = if m <= 2 { y - 1 } else { y };
        let era = y.div_euclid(400);
        let yoe = y.rem_euclid(400);
        let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + day - 1;
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        let days = era * 146_097 + doe - 719_468;
        let t = time.trim_end_matches('Z');
        let (hms, frac) = t.split_once('.').expect("fraction");
        let mut p = hms.split(':').map(|x| x.parse::<i64>().expect("digits"));
        let secs = p.next().expect("h") * 3600 + p.next().expect("m") * 60 + p.next().expect("s");
        (days as i128 * 86_400_000_000 + secs as i128 * 1_000_000 + frac.parse::<i128>().expect("frac")) as i64
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        // A flat payload hashes exactly as the equal Value object: same JCS bytes, same entry
        // hash; and only strictly ordered keys make a FlatPayload.
        #[test]
        fn flat_payload_hashes_as_its_value(members in prop::collection::vec((tricky_string(), prop::option::of(tricky_string())), 0..8)) {
            let value = Value::Object(members.iter().map(|(k, v)| (k.clone(), v.clone().map_or(Value::Null, Value::String))).collect());
            let mut sorted: Vec<(&str, Option<&str>)> = Vec::new();
            if let Value::Object(m) = &value {
                for (k, v) in m {
                    sorted.push((k.as_str(), v.as_str()));
                }
            }
            sorted.sort_by(|a, b| utf16_cmp(a.0, b.0));
            let flat = FlatPayload::new(&sorted).expect("sorted unique keys");
            prop_assert_eq!(flat.to_value(), value.clone());
            let ev = |payload| Event { payload, ..kat_event(&Value::Null) };
            prop_assert_eq!(canonical_event(&ev(Payload::Flat(flat))), canonical_event(&ev(Payload::Json(&value))));
            let mut shuffled = sorted.clone();
            shuffled.reverse();
            prop_assert_eq!(FlatPayload::sorted(&mut shuffled).map(|f| f.members().to_vec()), Some(sorted.clone()));
            if sorted.len() >= 2 {
                let mut reversed = sorted.clone();
                reversed.reverse();
                prop_assert!(FlatPayload::new(&reversed).is_none());
                let dup = [sorted[0], sorted[0]];
                prop_assert!(FlatPayload::new(&dup).is_none());
            }
        }

        #[test]
        fn jcs_matches_canonicalizer(v in any_json()) {
            let mut ours = Vec::new();
            write_value(&mut ours, &v);
            let reference = serde_json_canonicalizer::to_vec(&v).expect("canonicalizes");
            prop_assert_eq!(String::from_utf8_lossy(&ours), String::from_utf8_lossy(&reference));
        }

        #[test]
        fn utf16_order(a in tricky_string(), b in tricky_string()) {
            prop_assert_eq!(utf16_cmp(&a, &b), a.encode_utf16().cmp(b.encode_utf16()));
        }

        #[test]
        fn canonical_event_matches_canonicalizer(
            chain_id in tricky_string(), seq in any::<i64>(), prev in any::<[u8; 32]>(),
            event_type in tricky_string(), micros in any::<i64>(), actor in proptest::option::of(tricky_string()),
            org in proptest::option::of(tricky_string()), key_id in any::<i32>(), payload in any_json(),
        ) {
            let ev = Event {
                chain_id: &chain_id, seq, prev_hash: prev, event_type: &event_type, recorded_at_micros: micros,
                actor_id: actor.as_deref(), org_id: org.as_deref(), project_id: None, workspace_id: Some("w"),
                key_id, payload: Payload::Json(&payload),
            };
            let reference = json!({
                "chain_id": chain_id, "seq": seq, "prev_hash": hex::encode(prev), "event_type": event_type,
                "recorded_at": format_timestamp(micros), "actor_id": actor, "org_id": org, "project_id": null,
                "workspace_id": "w", "key_id": key_id, "payload": payload,
            });
            prop_assert_eq!(canonical_event(&ev), serde_json_canonicalizer::to_vec(&reference).expect("canonicalizes"));
        }

        #[test]
        fn timestamps_round_trip(micros in any::<i64>()) {
            let s = format_timestamp(micros);
            prop_assert_eq!(parse_timestamp(&s), micros, "{}", s);
            let fixed = s.len() == 27 && s.as_bytes()[4] == b'-' && s.ends_with('Z');
            prop_assert_eq!(fixed, (-62_167_219_200_000_000..253_402_300_800_000_000).contains(&micros));
        }

        #[test]
        fn merkle_streaming_matches_definition(leaves in prop::collection::vec(any::<[u8; 32]>(), 0..70)) {
            prop_assert_eq!(merkle_root(&leaves), merkle_reference(&leaves));
        }

        #[test]
        fn chains_verify_and_any_flipped_byte_is_found(
            events in prop::collection::vec((tricky_string(), any::<i64>(), proptest::option::of("[a-z]{1,4}"), 1..3i32, any_json()), 1..12),
            pick in any::<prop::sample::Index>(), in_entry_hash in any::<bool>(), byte in 0usize..32, bit in 0u8..8,
        ) {
            let keys = keys();
            let mut chainer = Chainer::new(0, ZERO_HASH);
            let mut rows: Vec<StoredEntry> = events.iter().map(|(t, micros, actor, key_id, payload)| {
                let mut ev = Event {
                    chain_id: "c", seq: 0, prev_hash: ZERO_HASH, event_type: t, recorded_at_micros: *micros,
                    actor_id: actor.as_deref(), org_id: None, project_id: None, workspace_id: None,
                    key_id: *key_id, payload: Payload::Json(payload),
                };
                let (_, _, h) = chainer.append(&keys[key_id], &mut ev);
                StoredEntry::from_event(&ev, h)
            }).collect();
            let head = Some(chainer.head());
            prop_assert!(verify_entries(&keys, Vec::new(), &rows, head).ok);

            let i = pick.index(rows.len());
            let field = if in_entry_hash { &mut rows[i].entry_hash } else { &mut rows[i].prev_hash };
            field[byte] ^= 1 << bit;
            let v = verify_entries(&keys, Vec::new(), &rows, head);
            prop_assert_eq!((v.failure, v.first_bad_seq), (Some(Failure::HashMismatch), Some(i as i64 + 1)));
        }
    }
}

#[test]
fn merkle_frontier_round_trips_and_keeps_growing() {
    let leaves: Vec<[u8; 32]> = (0u8..37).map(|i| [i; 32]).collect();
    for cut in [0usize, 1, 2, 3, 8, 13, 36] {
        let mut a = MerkleBuilder::new();
        for l in &leaves[..cut] {
            a.push(l);
        }
        let mut b = MerkleBuilder::from_bytes(&a.to_bytes()).expect("valid frontier");
        assert_eq!(b.root(), a.root(), "root after restoring at {cut}");
        for l in &leaves[cut..] {
            b.push(l);
        }
        assert_eq!(b.root(), merkle_root(&leaves), "growing a restored frontier from {cut}");
    }
    assert!(MerkleBuilder::from_bytes(&[0, 0, 0, 0, 0, 0, 0, 3, 1]).is_none());
    assert_eq!(MerkleBuilder::from_bytes(&[]).map(|b| b.len()), Some(0));
}

#[test]
fn sha256_hex_known_answer() {
    // FIPS 180-2 test vector.
    assert_eq!(sha256_hex(b"abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    let mut buf = [0u8; 64];
    assert_eq!(sha256_hex_in(b"", &mut buf), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

#[test]
fn pending_hash_binds_the_id_and_differs_from_any_chained_hash() {
    let key = [7u8; 32];
    let payload = json!({"a": "b"});
    let ev = Event {
        chain_id: "acme",
        seq: 0,
        prev_hash: ZERO_HASH,
        event_type: "memory.store",
        recorded_at_micros: 1_700_000_000_000_000,
        actor_id: Some("role:app"),
        org_id: Some("acme"),
        project_id: None,
        workspace_id: None,
        key_id: 1,
        payload: Payload::Json(&payload),
    };
    let mut signer = PendingSigner::new();
    let (mut a, mut b) = (ev, ev);
    let h1 = signer.sign(&key, &mut a, 1).unwrap();
    let h2 = signer.sign(&key, &mut b, 2).unwrap();
    assert_ne!(h1, h2, "the id is bound into the hash");
    assert_eq!(a.seq, -1);
    // The same as entry_hash with seq = -id and a zero prev_hash: a third party can check it.
    assert_eq!(h1, entry_hash(&key, &a));
    // Never the hash the event gets in a chain.
    let mut c = ev;
    let (_, _, chained) = Chainer::new(0, ZERO_HASH).append(&key, &mut c);
    assert_ne!(h1, chained);
    // Another key or a changed field gives another hash.
    let mut d = ev;
    assert_ne!(signer.sign(&[8u8; 32], &mut d, 1).unwrap(), h1);
    let mut e = ev;
    e.event_type = "memory.delete";
    assert_ne!(signer.sign(&key, &mut e, 1).unwrap(), h1);
    assert!(signer.sign(&key, &mut e, 0).is_none());
    assert!(signer.sign(&key, &mut e, -5).is_none());
    // Up to 2^53 every id hashes apart; beyond, JCS doubles would merge neighbours: refused.
    let top = 1i64 << 53;
    let (mut f, mut g) = (ev, ev);
    assert_ne!(signer.sign(&key, &mut f, top - 1), signer.sign(&key, &mut g, top));
    assert!(signer.sign(&key, &mut f, top + 1).is_none());
}

#[test]
fn uuid_text_is_uuid_out() {
    let b: [u8; 16] = [0x0b, 0x5e, 0x2c, 0x1a, 0x9a, 0x43, 0x4f, 0x56, 0x8d, 0x7e, 0x3c, 0x2b, 0x1a, 0x0f, 0x9e, 0x8d];
    let mut out = b"x".to_vec();
    write_uuid(&b, &mut out);
    assert_eq!(out, b"x0b5e2c1a-9a43-4f56-8d7e-3c2b1a0f9e8d");
    let mut z = Vec::new();
    write_uuid(&[0xff; 16], &mut z);
    assert_eq!(z, b"ffffffff-ffff-ffff-ffff-ffffffffffff");
}

proptest::proptest! {
    #[test]
    fn uuid_text_round_trips(b in proptest::array::uniform16(proptest::num::u8::ANY)) {
        let mut out = Vec::new();
        write_uuid(&b, &mut out);
        let s = String::from_utf8(out).unwrap();
        proptest::prop_assert_eq!(s.len(), 36);
        proptest::prop_assert_eq!(hex::decode(s.replace('-', "")).unwrap(), b.to_vec());
        let shaped = s.chars().enumerate().all(|(k, c)| if matches!(k, 8 | 13 | 18 | 23) { c == '-' } else { c.is_ascii_hexdigit() && !c.is_ascii_uppercase() });
        proptest::prop_assert!(shaped, "not 8-4-4-4-12 lowercase hex: {}", s);
    }
}

proptest::proptest! {
    /// The sequencer's shortcut: a pending entry's signature made with `sign_sharing` equals
    /// `sign`'s, and chaining from its shared prefix gives the entry hash `append` gives, for any
    /// payload, ids, times and chain position; another key or key id falls back to the whole hash.
    #[test]
    fn chaining_from_a_shared_prefix_is_chaining(
        note in "\\PC{0,80}", actor in proptest::option::of("[a-z:;0-9]{1,20}"), project in proptest::option::of("[a-z0-9]{1,8}"),
        id in 1i64..(1i64 << 53), written in 0i64..4_000_000_000_000_000, recorded in 0i64..4_000_000_000_000_000,
        head_seq in 0i64..1_000_000, head in proptest::array::uniform32(proptest::num::u8::ANY), other_key in proptest::bool::ANY,
    ) {
        let payload = json!({"note": note, "n": 3});
        let mut ev = Event {
            chain_id: "org-1", seq: 0, prev_hash: ZERO_HASH, event_type: "memory.store", recorded_at_micros: written,
            actor_id: actor.as_deref(), org_id: Some("org-1"), project_id: project.as_deref(), workspace_id: None,
            key_id: 1, payload: Payload::Json(&payload),
        };
        let key = b"key-one".to_vec();
        let plain = PendingSigner::new().sign(&key, &mut ev.clone(), id).unwrap();
        let (signed, prefix) = PendingSigner::new().sign_sharing(&key, &mut ev, id).unwrap();
        proptest::prop_assert_eq!(plain, signed);
        ev.recorded_at_micros = recorded;
        let chain_key: &[u8] = if other_key { b"key-two-after-rotation" } else { &key };
        let mut a = Chainer::new(head_seq, head);
        let mut b = Chainer::new(head_seq, head);
        let whole = a.append(chain_key, &mut ev.clone());
        let shared = b.append_from(chain_key, &mut ev, Some(&prefix));
        proptest::prop_assert_eq!(whole, shared);
        proptest::prop_assert_eq!(whole.2, entry_hash(chain_key, &ev));
        // Given with another event (another payload, another actor), the
        // prefix is not used: the hash is the whole one.
        let twin = json!({"note": note, "n": 4});
        let mut other = ev;
        other.payload = Payload::Json(&twin);
        let mut c = Chainer::new(head_seq, head);
        let mut d = Chainer::new(head_seq, head);
        proptest::prop_assert_eq!(c.append(chain_key, &mut other.clone()), d.append_from(chain_key, &mut other, Some(&prefix)));
        let mut renamed = ev;
        renamed.actor_id = Some("h:someone-else");
        let mut e = Chainer::new(head_seq, head);
        let mut f = Chainer::new(head_seq, head);
        proptest::prop_assert_eq!(e.append(chain_key, &mut renamed.clone()), f.append_from(chain_key, &mut renamed, Some(&prefix)));
    }
}

#[test]
fn chain_share_is_fnv1a_scaled_to_the_workers() {
    // FNV-1a 64 of "a" is 0xaf63dc4c8601ec8c (the algorithm's published test vector); of "",
    // the offset basis. Then MurmurHash3's fmix64.
    let fmix = |mut h: u64| {
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    };
    assert_eq!(chain_share(b"a", 7), ((fmix(0xaf63_dc4c_8601_ec8c) as u128 * 7) >> 64) as u32);
    assert_eq!(chain_share(b"", 5), ((fmix(0xcbf2_9ce4_8422_2325) as u128 * 5) >> 64) as u32);
    // Not the parity of the bytes: chains whose bytes have the same parity still spread.
    let same_parity: Vec<u32> = ["org-aa", "org-bb", "org-cc", "org-dd", "org-ee", "org-ff"].iter().map(|c| chain_share(c.as_bytes(), 2)).collect();
    assert!(same_parity.contains(&0) && same_parity.contains(&1), "{same_parity:?}");
    assert_eq!(chain_share(b"org-1", 1), 0);
    assert_eq!(chain_share(b"org-1", 0), 0);
    // Tenants named alike spread over two, three and four workers.
    for n in [2u32, 3, 4] {
        let mut per = vec![0; n as usize];
        for t in 0..64 {
            per[chain_share(format!("org-{t}").as_bytes(), n) as usize] += 1;
        }
        assert!(per.iter().all(|&c| c >= 64 / n as usize / 2), "{n} workers: {per:?}");
    }
}

proptest::proptest! {
    /// Every chain has exactly one integrator among n, the same each time it is asked.
    #[test]
    fn chain_share_is_one_of_n(chain in proptest::collection::vec(proptest::num::u8::ANY, 0..80), n in 1u32..16) {
        let k = chain_share(&chain, n);
        proptest::prop_assert!(k < n);
        proptest::prop_assert_eq!(k, chain_share(&chain, n));
    }
}
