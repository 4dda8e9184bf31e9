//! Audit hashing (docs/design.md#audit-chain): the pure logic of the tamper-evident, hash-chained audit log.
//!
//! Each tenant has one chain. An entry's hash is an HMAC over the RFC 8785 (JCS) form of its
//! event, and the event embeds the previous entry's hash, so editing, deleting, reordering or
//! inserting a row shows up at that row when the chain is replayed. Pruned ranges are replaced
//! by [`Seal`]s carrying the chain state at their end, so verification resumes after them, and
//! their RFC 9162 Merkle root lets an auditor check an archived copy of the dropped rows.
//!
//! Everything here is deterministic and free of I/O: the extension shell moves rows between SQL
//! and these functions, so the rules test and bench without Postgres.
//!
//! This file is long because the chain's canonical form, its HMAC, seals, Merkle roots and the
//! verifier are one format: each part's rules refer to the others' byte layouts.

use hmac::{Hmac, Mac};
use serde_json::{Number, Value};
use sha2::{Digest, Sha256};
use std::cmp::Ordering;
use std::collections::HashMap;

type HmacSha256 = Hmac<Sha256>;

/// `prev_hash` of the first entry of every chain.
pub const ZERO_HASH: [u8; 32] = [0; 32];

/// Largest integer an IEEE double holds exactly. JCS formats every number as a double, so only
/// integers within this bound may take the plain decimal shortcut.
const MAX_SAFE_INTEGER: u64 = 1 << 53;

const HEX: &[u8; 16] = b"0123456789abcdef";

/// One audit event as the extension appends it. `seq` and `prev_hash` are overwritten by
/// [`Chainer::append`]; they are fields so that [`canonical_event`] hashes exactly what is stored.
#[derive(Debug, Clone, Copy)]
pub struct Event<'a> {
    pub chain_id: &'a str,
    pub seq: i64,
    pub prev_hash: [u8; 32],
    pub event_type: &'a str,
    pub recorded_at_micros: i64,
    pub actor_id: Option<&'a str>,
    pub org_id: Option<&'a str>,
    pub project_id: Option<&'a str>,
    pub workspace_id: Option<&'a str>,
    pub key_id: i32,
    pub payload: Payload<'a>,
}

/// An event's payload: any JSON value, or a flat object given member by member.
#[derive(Debug, Clone, Copy)]
pub enum Payload<'a> {
    Json(&'a Value),
    Flat(FlatPayload<'a>),
}

impl Payload<'_> {
    /// Whether `self` and `other` are the same payload value (the same borrowed object or
    /// members), not merely equal ones: cheap, and what [`SharedPrefix`] ties itself to.
    pub fn same(&self, other: &Payload) -> bool {
        match (self, other) {
            (Payload::Json(a), Payload::Json(b)) => std::ptr::eq(*a, *b),
            (Payload::Flat(a), Payload::Flat(b)) => std::ptr::eq(a.0, b.0),
            _ => false,
        }
    }
}

impl<'a> From<&'a Value> for Payload<'a> {
    fn from(v: &'a Value) -> Self {
        Payload::Json(v)
    }
}

/// A JSON object whose members are strings or nulls, with its keys strictly increasing in the
/// RFC 8785 order. It hashes exactly as the equal `serde_json::Value` object, without building
/// one: the extension's per-row events use it.
#[derive(Debug, Clone, Copy)]
pub struct FlatPayload<'a>(&'a [(&'a str, Option<&'a str>)]);

impl<'a> FlatPayload<'a> {
    /// None unless the keys are strictly increasing in RFC 8785 order (so also unique).
    pub fn new(members: &'a [(&'a str, Option<&'a str>)]) -> Option<Self> {
        members.windows(2).all(|w| utf16_cmp(w[0].0, w[1].0) == Ordering::Less).then_some(FlatPayload(members))
    }

    /// Sort `members` into RFC 8785 key order (for members read in another order, e.g. from
    /// jsonb); None when two keys are equal.
    pub fn sorted(members: &'a mut [(&'a str, Option<&'a str>)]) -> Option<Self> {
        members.sort_unstable_by(|a, b| utf16_cmp(a.0, b.0));
        FlatPayload::new(members)
    }

    pub fn members(&self) -> &'a [(&'a str, Option<&'a str>)] {
        self.0
    }

    /// The equal `serde_json::Value`.
    pub fn to_value(&self) -> Value {
        Value::Object(self.0.iter().map(|(k, v)| ((*k).to_owned(), v.map_or(Value::Null, |s| Value::String(s.to_owned())))).collect())
    }
}

/// An entry's hashed fields but the payload, borrowed from an [`Event`], a [`StoredEntry`] or
/// wherever a row was read, so that all go through one serializer. `prev_hash` is a slice because
/// a stored row may hold bytes of any length.
#[derive(Debug, Clone, Copy)]
pub struct EntryRef<'a> {
    pub chain_id: &'a str,
    pub seq: i64,
    pub prev_hash: &'a [u8],
    pub event_type: &'a str,
    pub recorded_at_micros: i64,
    pub actor_id: Option<&'a str>,
    pub org_id: Option<&'a str>,
    pub project_id: Option<&'a str>,
    pub workspace_id: Option<&'a str>,
    pub key_id: i32,
}

impl Event<'_> {
    fn entry_ref(&self) -> EntryRef<'_> {
        EntryRef {
            chain_id: self.chain_id,
            seq: self.seq,
            prev_hash: &self.prev_hash,
            event_type: self.event_type,
            recorded_at_micros: self.recorded_at_micros,
            actor_id: self.actor_id,
            org_id: self.org_id,
            project_id: self.project_id,
            workspace_id: self.workspace_id,
            key_id: self.key_id,
        }
    }
}

/// `recorded_at` as hashed: UTC `YYYY-MM-DDTHH:MM:SS.ffffffZ`, always six fractional digits.
///
/// Years outside 0000..=9999 (reachable from i64 microseconds but not from Postgres in practice)
/// use the ECMAScript expanded form `±YYYYYY` so that every input still has one spelling.
pub fn format_timestamp(micros: i64) -> String {
    let mut out = Vec::with_capacity(27);
    write_timestamp(&mut out, micros);
    // Only ASCII digits and punctuation were written.
    String::from_utf8_lossy(&out).into_owned()
}

/// Proleptic Gregorian (year, month, day) of a day count from 1970-01-01 (Howard Hinnant's
/// `civil_from_days`): shift to eras of 400 years starting on March 1st, where leap days fall
/// at the end of the year and month lengths follow a linear pattern.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468; // 0000-03-01 is day 0
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // [0, 146096]
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365; // [0, 399]
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // [0, 365], from March 1st
    let mp = (5 * doy + 2) / 153; // [0, 11], March = 0
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = era * 400 + yoe + i64::from(month <= 2);
    (year, month as u32, day as u32)
}

fn write_timestamp(out: &mut Vec<u8>, micros: i64) {
    let secs = micros.div_euclid(1_000_000);
    let frac = micros.rem_euclid(1_000_000) as u64;
    let (year, month, day) = civil_from_days(secs.div_euclid(86_400));
    let sod = secs.rem_euclid(86_400) as u64;
    if (0..=9999).contains(&year) {
        write_padded(out, year as u64, 4);
    } else {
        out.push(if year < 0 { b'-' } else { b'+' });
        write_padded(out, year.unsigned_abs(), 6);
    }
    out.push(b'-');
    write_padded(out, month.into(), 2);
    out.push(b'-');
    write_padded(out, day.into(), 2);
    out.push(b'T');
    write_padded(out, sod / 3600, 2);
    out.push(b':');
    write_padded(out, sod / 60 % 60, 2);
    out.push(b':');
    write_padded(out, sod % 60, 2);
    out.push(b'.');
    write_padded(out, frac, 6);
    out.push(b'Z');
}

/// Decimal digits of `v`, left-padded with zeros to at least `width`.
fn write_padded(out: &mut Vec<u8>, mut v: u64, width: usize) {
    let mut digits = [b'0'; 20];
    let mut i = digits.len();
    while v > 0 || i == digits.len() {
        i -= 1;
        digits[i] = b'0' + (v % 10) as u8;
        v /= 10;
    }
    let start = i.min(digits.len().saturating_sub(width));
    out.extend_from_slice(&digits[start..]);
}

fn write_hex(out: &mut Vec<u8>, bytes: &[u8]) {
    let mut pair = [0u8; 2];
    let mut chunk = [0u8; 64];
    for part in bytes.chunks(32) {
        for (dst, &b) in chunk.chunks_exact_mut(2).zip(part) {
            pair[0] = HEX[usize::from(b >> 4)];
            pair[1] = HEX[usize::from(b & 15)];
            dst.copy_from_slice(&pair);
        }
        out.extend_from_slice(&chunk[..part.len() * 2]);
    }
}

/// A JSON string as RFC 8785 §3.2.2.2 spells it: only `"`, `\` and C0 controls are escaped, the
/// five with short forms use them, the rest `\u00xx` in lowercase; everything else is literal.
fn write_str(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    let bytes = s.as_bytes();
    // Most strings need no escape; a branch-free scan lets the compiler vectorize the check.
    if !bytes.iter().fold(false, |any, &b| any | (b < 0x20) | (b == b'"') | (b == b'\\')) {
        out.extend_from_slice(bytes);
        out.push(b'"');
        return;
    }
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let short: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            0x08 => b"\\b",
            0x09 => b"\\t",
            0x0a => b"\\n",
            0x0c => b"\\f",
            0x0d => b"\\r",
            0x00..=0x1f => b"",
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        if short.is_empty() {
            out.extend_from_slice(&[b'\\', b'u', b'0', b'0', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
        } else {
            out.extend_from_slice(short);
        }
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

fn write_opt_str(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        Some(s) => write_str(out, s),
        None => out.extend_from_slice(b"null"),
    }
}

/// A number the ECMAScript way (RFC 8785 §3.2.2.3). Safe integers print as plain decimals, which
/// is what the double formatting yields for them; everything else (fractions, exponents, integers
/// beyond 2^53) goes to `serde_json_canonicalizer`, which owns the shortest-round-trip algorithm.
fn write_number(out: &mut Vec<u8>, n: &Number) {
    if let Some(i) = n.as_i64().filter(|i| i.unsigned_abs() <= MAX_SAFE_INTEGER) {
        if i < 0 {
            out.push(b'-');
        }
        write_padded(out, i.unsigned_abs(), 1);
        return;
    }
    let mark = out.len();
    if serde_json_canonicalizer::to_writer(n, out).is_err() {
        // Unreachable: a serde_json Number is always finite and a Vec never fails to grow. Should
        // that change, write what serde_json writes for a non-finite double instead of panicking.
        out.truncate(mark);
        out.extend_from_slice(b"null");
    }
}

/// Order of object members in RFC 8785 §3.2.3: by UTF-16 code units. That agrees with UTF-8
/// byte order except when a supplementary-plane character meets one in U+E000..=U+FFFF (lead
/// bytes 0xEE and above), so the byte comparison decides whenever the first difference is below.
fn utf16_cmp(a: &str, b: &str) -> Ordering {
    let (x, y) = (a.as_bytes(), b.as_bytes());
    match x.iter().zip(y).position(|(p, q)| p != q) {
        None => x.len().cmp(&y.len()),
        Some(i) if x[i] < 0xee && y[i] < 0xee => x[i].cmp(&y[i]),
        Some(_) => a.encode_utf16().cmp(b.encode_utf16()),
    }
}

/// RFC 8785 form of any JSON value. Written here rather than through the canonicalizer's
/// serializer because that one allocates several buffers per member and re-parses every key;
/// the equivalence is a property test against `serde_json_canonicalizer::to_vec`.
fn write_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => write_number(out, n),
        Value::String(s) => write_str(out, s),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_value(out, item);
            }
            out.push(b']');
        }
        Value::Object(map) => {
            let write_member = |out: &mut Vec<u8>, i: usize, k: &str, v: &Value| {
                if i > 0 {
                    out.push(b',');
                }
                write_str(out, k);
                out.push(b':');
                write_value(out, v);
            };
            out.push(b'{');
            // serde_json's map already iterates in byte order (or insertion order with the
            // `preserve_order` feature), so sorting is only needed when that is not UTF-16 order.
            let in_order = map.keys().zip(map.keys().skip(1)).all(|(a, b)| utf16_cmp(a, b) == Ordering::Less);
            if in_order {
                for (i, (k, v)) in map.iter().enumerate() {
                    write_member(out, i, k, v);
                }
            } else {
                let mut members: Vec<(&String, &Value)> = map.iter().collect();
                members.sort_unstable_by(|a, b| utf16_cmp(a.0, b.0));
                for (i, (k, v)) in members.into_iter().enumerate() {
                    write_member(out, i, k, v);
                }
            }
            out.push(b'}');
        }
    }
}

fn write_payload(out: &mut Vec<u8>, payload: Payload) {
    match payload {
        Payload::Json(v) => write_value(out, v),
        Payload::Flat(f) => {
            // Keys are in RFC 8785 order by construction.
            out.push(b'{');
            for (i, (k, v)) in f.0.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_str(out, k);
                out.push(b':');
                write_opt_str(out, *v);
            }
            out.push(b'}');
        }
    }
}

/// JCS of the event object. The member names are ASCII, so this fixed order is the RFC 8785
/// order; writing them directly avoids building a `serde_json::Value` (and cloning the payload).
fn write_event(out: &mut Vec<u8>, f: &EntryRef, payload: Payload) {
    write_event_head(out, f, payload);
    write_event_tail(out, f);
}

/// The members of the event object up to and including `payload` (RFC 8785 order): what does
/// not change when a pending entry is chained (see [`SharedPrefix`]).
fn write_event_head(out: &mut Vec<u8>, f: &EntryRef, payload: Payload) {
    out.extend_from_slice(b"{\"actor_id\":");
    write_opt_str(out, f.actor_id);
    out.extend_from_slice(b",\"chain_id\":");
    write_str(out, f.chain_id);
    out.extend_from_slice(b",\"event_type\":");
    write_str(out, f.event_type);
    out.extend_from_slice(b",\"key_id\":");
    write_number(out, &Number::from(f.key_id));
    out.extend_from_slice(b",\"org_id\":");
    write_opt_str(out, f.org_id);
    out.extend_from_slice(b",\"payload\":");
    write_payload(out, payload);
}

/// The members after `payload`: prev_hash, project_id, recorded_at, seq, workspace_id.
fn write_event_tail(out: &mut Vec<u8>, f: &EntryRef) {
    out.extend_from_slice(b",\"prev_hash\":\"");
    write_hex(out, f.prev_hash);
    out.extend_from_slice(b"\",\"project_id\":");
    write_opt_str(out, f.project_id);
    out.extend_from_slice(b",\"recorded_at\":\"");
    write_timestamp(out, f.recorded_at_micros);
    out.extend_from_slice(b"\",\"seq\":");
    write_number(out, &Number::from(f.seq));
    out.extend_from_slice(b",\"workspace_id\":");
    write_opt_str(out, f.workspace_id);
    out.push(b'}');
}

/// RFC 8785 (JCS) bytes of any JSON value (an erasure receipt's signed form: [`receipt`]).
pub fn canonical_json(v: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    write_value(&mut out, v);
    out
}

/// RFC 8785 (JCS) bytes of the event object: exactly what [`entry_hash`] authenticates.
pub fn canonical_event(ev: &Event) -> Vec<u8> {
    let mut out = Vec::with_capacity(512);
    write_event(&mut out, &ev.entry_ref(), ev.payload);
    out
}

fn keyed(key: &[u8]) -> HmacSha256 {
    HmacSha256::new_from_slice(key).expect("HMAC accepts keys of any length")
}

/// The keyed HMAC state for `key`, from `cache` when it holds the same key (keying hashes the key
/// into two blocks; a batch signs many events with one key).
fn cached_mac(cache: &mut Option<(Vec<u8>, HmacSha256)>, key: &[u8]) -> HmacSha256 {
    match cache {
        Some((k, mac)) if k.as_slice() == key => mac.clone(),
        _ => {
            let mac = keyed(key);
            *cache = Some((key.to_vec(), mac.clone()));
            mac
        }
    }
}

fn finish_mac(mut mac: HmacSha256, data: &[u8]) -> [u8; 32] {
    mac.update(data);
    mac.finalize().into_bytes().into()
}

/// HMAC-SHA256 (RFC 2104), exposed so the extension and its tests share one implementation.
pub fn hmac_sha256(key: &[u8], data: &[u8]) -> [u8; 32] {
    finish_mac(keyed(key), data)
}

/// `HMAC-SHA256(key, canonical_event(ev))`.
pub fn entry_hash(key: &[u8], ev: &Event) -> [u8; 32] {
    hmac_sha256(key, &canonical_event(ev))
}

/// Lowercase hex SHA-256, used for `content_sha256` so payloads reference content without
/// carrying it.
pub fn sha256_hex(data: &[u8]) -> String {
    let mut buf = [0u8; 64];
    sha256_hex_in(data, &mut buf).to_owned()
}

/// [`sha256_hex`] written into `buf`, for per-row callers that should not allocate.
pub fn sha256_hex_in<'b>(data: &[u8], buf: &'b mut [u8; 64]) -> &'b str {
    let digest = Sha256::digest(data);
    for (pair, b) in buf.chunks_exact_mut(2).zip(digest.iter()) {
        pair[0] = HEX[usize::from(b >> 4)];
        pair[1] = HEX[usize::from(b & 15)];
    }
    // Only ASCII hex digits were written.
    std::str::from_utf8(buf).unwrap_or_default()
}

/// `"h:"` + lowercase hex of `HMAC-SHA256(salt, id)`: a stable pseudonym for actor and user ids
/// in payloads. Keyed rather than a bare hash so ids cannot be recovered by hashing guesses.
pub fn pseudonymize(salt: &[u8], id: &str) -> String {
    format!("h:{}", hex::encode(hmac_sha256(salt, id.as_bytes())))
}

fn leaf_hash(data: &[u8]) -> [u8; 32] {
    Sha256::new().chain_update([0u8]).chain_update(data).finalize().into()
}

fn node_hash(left: &[u8; 32], right: &[u8; 32]) -> [u8; 32] {
    Sha256::new().chain_update([1u8]).chain_update(left).chain_update(right).finalize().into()
}

/// Streaming RFC 9162 Merkle tree hash in O(log n) memory, for sealing millions of entries.
///
/// The stack holds the roots of complete subtrees of strictly decreasing size (the binary
/// digits of the leaf count). RFC 9162 splits n leaves at the largest power of two below n,
/// which is exactly the first of those subtrees, so the root is the stack folded right to left.
#[derive(Debug, Clone, Default)]
pub struct MerkleBuilder {
    stack: Vec<([u8; 32], u64)>,
    leaves: u64,
}

impl MerkleBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds the next leaf; `leaf_data` is hashed as `SHA-256(0x00 || leaf_data)`.
    pub fn push(&mut self, leaf_data: &[u8]) {
        let (mut hash, mut size) = (leaf_hash(leaf_data), 1u64);
        while let Some(&(left, left_size)) = self.stack.last() {
            if left_size != size {
                break;
            }
            self.stack.pop();
            hash = node_hash(&left, &hash);
            size *= 2;
        }
        self.stack.push((hash, size));
        self.leaves += 1;
    }

    pub fn len(&self) -> u64 {
        self.leaves
    }

    pub fn is_empty(&self) -> bool {
        self.leaves == 0
    }

    /// The frontier as bytes, to keep a chain's tree in its head row: the leaf count (8 bytes,
    /// big-endian), then the root of each complete subtree, largest first. Subtree sizes are the
    /// set bits of the count, so they are not stored.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(8 + 32 * self.stack.len());
        out.extend_from_slice(&self.leaves.to_be_bytes());
        for (hash, _) in &self.stack {
            out.extend_from_slice(hash);
        }
        out
    }

    /// Inverse of [`MerkleBuilder::to_bytes`]; None when the bytes are not a frontier. Empty
    /// input is the empty tree.
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        if bytes.is_empty() {
            return Some(Self::new());
        }
        let count = u64::from_be_bytes(bytes.get(..8)?.try_into().ok()?);
        let hashes = &bytes[8..];
        if hashes.len() != 32 * count.count_ones() as usize {
            return None;
        }
        let sizes = (0..64).rev().map(|bit| 1u64 << bit).filter(|s| count & s != 0);
        let stack = hashes
            .chunks_exact(32)
            .zip(sizes)
            .map(|(h, size)| (h.try_into().expect("32-byte chunk"), size))
            .collect();
        Some(MerkleBuilder { stack, leaves: count })
    }

    /// Root of the leaves pushed so far; the empty tree is `SHA-256("")`.
    pub fn root(&self) -> [u8; 32] {
        let mut rest = self.stack.iter().rev();
        let Some(&(mut acc, _)) = rest.next() else {
            return Sha256::digest(b"").into();
        };
        for (left, _) in rest {
            acc = node_hash(left, &acc);
        }
        acc
    }
}

/// RFC 9162 Merkle root over entry hashes (each 32-byte hash is one leaf's data).
pub fn merkle_root(leaves: &[[u8; 32]]) -> [u8; 32] {
    let mut tree = MerkleBuilder::new();
    for leaf in leaves {
        tree.push(leaf);
    }
    tree.root()
}

/// Chains many appends in memory: given the chain head (last seq and entry_hash), produce
/// seq/prev/entry hash for each new event in order. Keeps its serialization buffer and the
/// keyed HMAC state between calls, so a batch costs one allocation-free hash per event.
pub struct Chainer {
    last_seq: i64,
    last_hash: [u8; 32],
    buf: Vec<u8>,
    mac: Option<(Vec<u8>, HmacSha256)>,
}

impl Chainer {
    /// `Chainer::new(0, ZERO_HASH)` starts an empty chain.
    pub fn new(head_seq: i64, head_hash: [u8; 32]) -> Self {
        Chainer { last_seq: head_seq, last_hash: head_hash, buf: Vec::with_capacity(512), mac: None }
    }

    /// Assigns seq and prev_hash to `ev` (overwriting those fields), computes its entry_hash with
    /// key, advances; returns (seq, prev_hash, entry_hash). A head at `i64::MAX` has no successor;
    /// the seq saturates there, giving a duplicate that the store must reject.
    pub fn append(&mut self, key: &[u8], ev: &mut Event) -> (i64, [u8; 32], [u8; 32]) {
        self.append_from(key, ev, None)
    }

    /// `append`, hashing from `prefix` when it was made under the same key and `ev` has the
    /// members it covers (a pending entry chained by the sequencer: only prev_hash,
    /// recorded_at and seq change, and they come after the payload).
    pub fn append_from(&mut self, key: &[u8], ev: &mut Event, prefix: Option<&SharedPrefix>) -> (i64, [u8; 32], [u8; 32]) {
        let (seq, prev) = (self.last_seq.saturating_add(1), self.last_hash);
        ev.seq = seq;
        ev.prev_hash = prev;
        self.buf.clear();
        let hash = match prefix.filter(|p| p.covers(key, ev)) {
            Some(p) => {
                write_event_tail(&mut self.buf, &ev.entry_ref());
                let hash = finish_mac(p.mac.clone(), &self.buf);
                // A prefix is only ever passed with the event it was made from; a debug build
                // checks it against the whole hash.
                debug_assert_eq!(hash, entry_hash(key, ev), "a shared prefix of another event");
                hash
            }
            None => {
                write_event(&mut self.buf, &ev.entry_ref(), ev.payload);
                finish_mac(cached_mac(&mut self.mac, key), &self.buf)
            }
        };
        self.last_seq = seq;
        self.last_hash = hash;
        (seq, prev, hash)
    }

    pub fn head(&self) -> (i64, [u8; 32]) {
        (self.last_seq, self.last_hash)
    }
}

/// The HMAC state of an event's canonical bytes up to and including its payload, under one key:
/// what a pending entry's signature and the entry hash it gets when chained have in common (the
/// sequencer checks the one and makes the other, and the payload is most of the bytes). Only
/// valid for the event it was made from; `Chainer::append_from` uses it for a chained event of
/// the same key and the same members before prev_hash.
pub struct SharedPrefix<'k, 'p> {
    key: &'k [u8],
    key_id: i32,
    // The members the state covers, as the event signed had them; the payload is the very value
    // (borrowed, so it cannot have gone and another taken its place).
    actor_id: Option<&'p str>,
    chain_id: &'p str,
    event_type: &'p str,
    org_id: Option<&'p str>,
    payload: Payload<'p>,
    mac: HmacSha256,
}

impl SharedPrefix<'_, '_> {
    /// Whether the state stands for `ev`'s members up to its payload under `key`: the same key
    /// and key id, equal short members, the same payload value. Anything else is hashed whole.
    fn covers(&self, key: &[u8], ev: &Event) -> bool {
        self.key == key
            && self.key_id == ev.key_id
            && self.chain_id == ev.chain_id
            && self.event_type == ev.event_type
            && self.actor_id == ev.actor_id
            && self.org_id == ev.org_id
            && self.payload.same(&ev.payload)
    }
}

/// Signs pending entries (docs/design.md#integration): an event a writing transaction records before
/// it has a place in its chain. Its `pending_hash` is the entry hash of the event with
/// `seq = -id` (the pending entry's random id, ≥ 1) and `prev_hash` = 32 zero bytes. Chained
/// entries have `seq ≥ 1`, so no pending hash is ever a valid entry hash, and the id is bound
/// into the hash: a copied row needs a new id, and with it a new hash only the key can make.
#[derive(Default)]
pub struct PendingSigner {
    buf: Vec<u8>,
    mac: Option<(Vec<u8>, HmacSha256)>,
}

impl PendingSigner {
    pub fn new() -> Self {
        PendingSigner { buf: Vec::with_capacity(512), mac: None }
    }

    /// The pending hash of `ev` under pending id `id` (sets `ev.seq` and `ev.prev_hash`).
    /// Ids are in [1, 2^53]: JCS writes numbers as IEEE doubles, so beyond 2^53 neighbouring ids
    /// would canonicalize alike. Any other id has no pending hash (`None`).
    pub fn sign(&mut self, key: &[u8], ev: &mut Event, id: i64) -> Option<[u8; 32]> {
        pending_position(ev, id)?;
        self.buf.clear();
        write_event(&mut self.buf, &ev.entry_ref(), ev.payload);
        let mac = cached_mac(&mut self.mac, key);
        Some(finish_mac(mac, &self.buf))
    }

    /// `sign`, also returning the state its hash shares with the entry hash the event gets
    /// when chained under the same key (see [`SharedPrefix`]).
    pub fn sign_sharing<'k, 'p>(&mut self, key: &'k [u8], ev: &mut Event<'p>, id: i64) -> Option<([u8; 32], SharedPrefix<'k, 'p>)> {
        pending_position(ev, id)?;
        self.buf.clear();
        write_event_head(&mut self.buf, &ev.entry_ref(), ev.payload);
        let mut mac = cached_mac(&mut self.mac, key);
        mac.update(&self.buf);
        let prefix = SharedPrefix {
            key,
            key_id: ev.key_id,
            actor_id: ev.actor_id,
            chain_id: ev.chain_id,
            event_type: ev.event_type,
            org_id: ev.org_id,
            payload: ev.payload,
            mac: mac.clone(),
        };
        self.buf.clear();
        write_event_tail(&mut self.buf, &ev.entry_ref());
        Some((finish_mac(mac, &self.buf), prefix))
    }
}

/// Puts `ev` where a pending entry of id `id` is hashed (`seq = -id`, a zero `prev_hash`); None
/// for an id outside [1, 2^53].
fn pending_position(ev: &mut Event, id: i64) -> Option<()> {
    if !(1..=MAX_SAFE_INTEGER as i64).contains(&id) {
        return None;
    }
    ev.seq = -id;
    ev.prev_hash = ZERO_HASH;
    Some(())
}

/// One stored row as read back for verification, in the order the verifier reads them (ORDER BY seq).
#[derive(Debug, Clone, PartialEq)]
pub struct StoredEntry {
    pub chain_id: String,
    pub seq: i64,
    pub prev_hash: Vec<u8>,
    pub entry_hash: Vec<u8>,
    pub event_type: String,
    pub recorded_at_micros: i64,
    pub actor_id: Option<String>,
    pub org_id: Option<String>,
    pub project_id: Option<String>,
    pub workspace_id: Option<String>,
    pub key_id: i32,
    pub payload: Value,
}

impl StoredEntry {
    pub fn entry_ref(&self) -> EntryRef<'_> {
        EntryRef {
            chain_id: &self.chain_id,
            seq: self.seq,
            prev_hash: &self.prev_hash,
            event_type: &self.event_type,
            recorded_at_micros: self.recorded_at_micros,
            actor_id: self.actor_id.as_deref(),
            org_id: self.org_id.as_deref(),
            project_id: self.project_id.as_deref(),
            workspace_id: self.workspace_id.as_deref(),
            key_id: self.key_id,
        }
    }

    /// The row an appended event becomes (for tests and tools that build chains in memory).
    pub fn from_event(ev: &Event, entry_hash: [u8; 32]) -> Self {
        StoredEntry {
            chain_id: ev.chain_id.to_owned(),
            seq: ev.seq,
            prev_hash: ev.prev_hash.to_vec(),
            entry_hash: entry_hash.to_vec(),
            event_type: ev.event_type.to_owned(),
            recorded_at_micros: ev.recorded_at_micros,
            actor_id: ev.actor_id.map(str::to_owned),
            org_id: ev.org_id.map(str::to_owned),
            project_id: ev.project_id.map(str::to_owned),
            workspace_id: ev.workspace_id.map(str::to_owned),
            key_id: ev.key_id,
            payload: match ev.payload {
                Payload::Json(v) => v.clone(),
                Payload::Flat(f) => f.to_value(),
            },
        }
    }
}

/// A seal: the state of the chain at the end of a pruned (sealed-and-dropped) range.
/// `merkle_root` covers the entry hashes of `first_seq..=last_seq`; the verifier cannot check it
/// (the rows are gone) but it anchors an archived copy of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seal {
    pub first_seq: i64,
    pub last_seq: i64,
    pub last_entry_hash: [u8; 32],
    pub merkle_root: [u8; 32],
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    HashMismatch,
    BrokenLink,
    Gap,
    Reorder,
    TailMissing,
    UnknownKey,
}

impl Failure {
    /// Stable wording reported by the SQL verification functions.
    pub fn reason(&self) -> &'static str {
        match self {
            Failure::HashMismatch => "hash mismatch",
            Failure::BrokenLink => "broken link",
            Failure::Gap => "gap",
            Failure::Reorder => "reorder",
            Failure::TailMissing => "tail missing",
            Failure::UnknownKey => "unknown key",
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.reason())
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub entries: i64,
    pub pruned: i64,
    pub ok: bool,
    pub first_bad_seq: Option<i64>,
    pub failure: Option<Failure>,
    pub detail: Option<String>,
}

/// Recomputes entry hashes: the HMAC under the entry's key of the JCS of its event. Keyed MAC
/// states are made once per key and cloned per entry.
pub struct EntryHasher<'k> {
    keys: &'k HashMap<i32, Vec<u8>>,
    macs: Vec<(i32, HmacSha256)>,
    buf: Vec<u8>,
}

impl<'k> EntryHasher<'k> {
    pub fn new(keys: &'k HashMap<i32, Vec<u8>>) -> Self {
        EntryHasher { keys, macs: Vec::new(), buf: Vec::with_capacity(512) }
    }

    /// The entry's hash, or None when its key is unknown.
    pub fn hash(&mut self, e: &StoredEntry) -> Option<[u8; 32]> {
        self.hash_with_payload(e, &e.payload)
    }

    /// The hash of `e` with `payload` in place of `e.payload` (for callers that parse payloads
    /// elsewhere than where entries live).
    pub fn hash_with_payload(&mut self, e: &StoredEntry, payload: &Value) -> Option<[u8; 32]> {
        self.hash_ref(&e.entry_ref(), Payload::Json(payload))
    }

    /// The hash of a borrowed entry with its payload.
    pub fn hash_ref(&mut self, e: &EntryRef, payload: Payload) -> Option<[u8; 32]> {
        let mac = match self.macs.iter().find(|(id, _)| *id == e.key_id) {
            Some((_, mac)) => mac.clone(),
            None => {
                let mac = keyed(self.keys.get(&e.key_id)?);
                self.macs.push((e.key_id, mac.clone()));
                mac
            }
        };
        self.buf.clear();
        write_event(&mut self.buf, e, payload);
        Some(finish_mac(mac, &self.buf))
    }
}

/// Streaming verifier for one chain: feed entries in seq order; seals (sorted by first_seq) let
/// it skip ranges that were sealed and dropped; finish() compares against the recorded head
/// (seq, entry_hash) if any. Only the first failure is reported, at the seq where it shows.
///
/// Checks per entry, in order:
/// 1. seq continuity: a seq above the expected one is first bridged by seals that start exactly
///    at the expected seq and end before the entry; what remains is a `Gap` at the first missing
///    seq. A seq below the expected one (duplicate or backwards) is a `Reorder` at that seq.
/// 2. `UnknownKey` when the row names a key the verifier was not given (nothing to hash with).
/// 3. `HashMismatch` when the HMAC over the row's own fields differs from its `entry_hash`.
/// 4. `BrokenLink` when `prev_hash` differs from the previous entry's (or seal's) hash.
///
/// The hash comes before the link because `prev_hash` is itself hashed: an edited row, including
/// an edited `prev_hash`, is then reported as what it is, an edit of that row. A `BrokenLink`
/// means a row that is internally consistent but chained elsewhere: a wrong seal, a row spliced
/// from another chain, or one forged by someone holding the key.
///
/// At `finish`, with a head: entries ending before it are `TailMissing` at the first missing seq;
/// entries beyond it are `BrokenLink` at head seq + 1 (detail "entries beyond the recorded head":
/// the head no longer links to the end of the chain); a head hash differing from the last
/// entry's is `HashMismatch` at the head seq. Without a head a truncated tail is undetectable.
pub struct Verifier<'k> {
    hasher: EntryHasher<'k>,
    seals: Vec<Seal>,
    next_seal: usize,
    last_seq: i64,
    last_hash: [u8; 32],
    entries: i64,
    pruned: i64,
    failure: Option<(i64, Failure, String)>,
}

impl<'k> Verifier<'k> {
    pub fn new(keys: &'k HashMap<i32, Vec<u8>>, mut seals: Vec<Seal>) -> Self {
        seals.sort_by_key(|s| (s.first_seq, s.last_seq));
        Verifier {
            hasher: EntryHasher::new(keys),
            seals,
            next_seal: 0,
            last_seq: 0,
            last_hash: ZERO_HASH,
            entries: 0,
            pruned: 0,
            failure: None,
        }
    }

    /// Applies consecutive seals starting right after the last verified seq, as long as they end
    /// before `before` (the next present entry, or no bound at the end of the chain). Seals over
    /// ranges whose rows are still present are stepped over.
    fn bridge_seals(&mut self, before: Option<i64>) {
        while let Some(s) = self.seals.get(self.next_seal) {
            if s.last_seq <= self.last_seq {
                self.next_seal += 1;
                continue;
            }
            let fits = s.first_seq == self.last_seq + 1
                && s.last_seq >= s.first_seq
                && before.is_none_or(|b| s.last_seq < b);
            if !fits {
                break;
            }
            self.pruned += s.last_seq - s.first_seq + 1;
            self.last_seq = s.last_seq;
            self.last_hash = s.last_entry_hash;
            self.next_seal += 1;
        }
    }


    fn fail(&mut self, seq: i64, failure: Failure, detail: String) {
        self.failure = Some((seq, failure, detail));
    }

    /// After the first failure, only counts entries.
    pub fn push(&mut self, e: &StoredEntry) {
        let hash = if self.failure.is_some() { None } else { self.hasher.hash(e) };
        self.push_hashed(e, hash);
    }

    /// `push` with the entry's HMAC computed beforehand by an `EntryHasher` over the same keys
    /// (None: its key is unknown), so that hashing can run apart from the checks, which are
    /// sequential.
    pub fn push_hashed(&mut self, e: &StoredEntry, computed: Option<[u8; 32]>) {
        self.push_link(e.seq, e.key_id, &e.prev_hash, &e.entry_hash, computed);
    }

    /// `push_hashed` from the link fields alone.
    pub fn push_link(&mut self, seq: i64, key_id: i32, prev_hash: &[u8], entry_hash: &[u8], computed: Option<[u8; 32]>) {
        struct Link<'a> {
            seq: i64,
            key_id: i32,
            prev_hash: &'a [u8],
            entry_hash: &'a [u8],
        }
        let e = Link { seq, key_id, prev_hash, entry_hash };
        self.entries += 1;
        if self.failure.is_some() {
            return;
        }
        let Some(mut expected) = self.last_seq.checked_add(1) else {
            return self.fail(e.seq, Failure::Reorder, format!("seq {} after seq {}", e.seq, self.last_seq));
        };
        if e.seq > expected {
            self.bridge_seals(Some(e.seq));
            expected = self.last_seq + 1; // seals end before `e.seq`, so this cannot overflow
        }
        if e.seq > expected {
            return self.fail(expected, Failure::Gap, format!("seq {expected} is missing; next present is {}", e.seq));
        }
        if e.seq < expected {
            return self.fail(e.seq, Failure::Reorder, format!("seq {} after seq {}", e.seq, self.last_seq));
        }
        let Some(hash) = computed else {
            return self.fail(e.seq, Failure::UnknownKey, format!("key_id {} is not available", e.key_id));
        };
        if e.entry_hash != hash {
            return self.fail(e.seq, Failure::HashMismatch, "entry_hash does not match the entry's fields".into());
        }
        if e.prev_hash != self.last_hash {
            return self.fail(e.seq, Failure::BrokenLink, format!("prev_hash does not match the hash of seq {}", self.last_seq));
        }
        self.last_seq = e.seq;
        self.last_hash = hash;
    }

    pub fn finish(mut self, head: Option<(i64, [u8; 32])>) -> Verdict {
        if self.failure.is_none() {
            self.bridge_seals(None);
            if let Some((head_seq, head_hash)) = head {
                let last = self.last_seq;
                match head_seq.cmp(&last) {
                    Ordering::Greater => self.fail(
                        last + 1,
                        Failure::TailMissing,
                        format!("entries end at seq {last} but the recorded head is seq {head_seq}"),
                    ),
                    Ordering::Less => {
                        self.fail(head_seq.saturating_add(1), Failure::BrokenLink, "entries beyond the recorded head".into())
                    }
                    Ordering::Equal if head_hash != self.last_hash => self.fail(
                        head_seq,
                        Failure::HashMismatch,
                        "recorded head hash differs from the last entry's".into(),
                    ),
                    Ordering::Equal => {}
                }
            }
        }
        let (first_bad_seq, failure, detail) = match self.failure {
            Some((seq, f, d)) => (Some(seq), Some(f), Some(d)),
            None => (None, None, None),
        };
        Verdict { entries: self.entries, pruned: self.pruned, ok: failure.is_none(), first_bad_seq, failure, detail }
    }
}

/// Verifies a whole chain held in memory.
pub fn verify_entries(
    keys: &HashMap<i32, Vec<u8>>,
    seals: Vec<Seal>,
    entries: &[StoredEntry],
    head: Option<(i64, [u8; 32])>,
) -> Verdict {
    let mut v = Verifier::new(keys, seals);
    for e in entries {
        v.push(e);
    }
    v.finish(head)
}

/// Appends `bytes` as PostgreSQL's uuid_out writes a uuid: lowercase hex in groups of 8-4-4-4-12.
pub fn write_uuid(bytes: &[u8; 16], out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for (k, b) in bytes.iter().enumerate() {
        if matches!(k, 4 | 6 | 8 | 10) {
            out.push(b'-');
        }
        out.push(HEX[(b >> 4) as usize]);
        out.push(HEX[(b & 15) as usize]);
    }
}

/// Which of `n` background integrators takes the chain named `chain` (0 when `n` is 0 or 1):
/// FNV-1a (64 bits) of its bytes, mixed by MurmurHash3's 64-bit finalizer (FNV alone spreads
/// names that differ in their last bytes badly: its lowest bit is the parity of the bytes, its
/// high bits barely move), scaled to `n` by the high bits (`h * n >> 64`). Stable across
/// processes and releases, so every integrator of a database agrees on it without talking to
/// the others.
pub fn chain_share(chain: &[u8], n: u32) -> u32 {
    if n <= 1 {
        return 0;
    }
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in chain {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^= h >> 33;
    ((h as u128 * n as u128) >> 64) as u32
}

pub mod receipt;

#[cfg(test)]
mod tests;
