//! The jsonb on-disk layout (utils/jsonb.h) for the flat objects the extension writes: objects
//! whose values are strings, booleans or nulls. Writing them skips `jsonb_in`; reading them back
//! skips `jsonb_out` and JSON parsing. Anything else goes through Postgres' own functions.

use pgrx::prelude::*;
use memory_core::audit::Payload;
use serde_json::{Map, Value};

// JSONB on-disk layout (utils/jsonb.h).
const JB_FOBJECT: u32 = 0x2000_0000;
const JENTRY_HAS_OFF: u32 = 0x8000_0000;
const JENTRY_ISSTRING: u32 = 0x0000_0000;
const JENTRY_ISBOOL_FALSE: u32 = 0x2000_0000;
const JENTRY_ISBOOL_TRUE: u32 = 0x3000_0000;
const JENTRY_ISNULL: u32 = 0x4000_0000;
const JB_OFFSET_STRIDE: usize = 32;

/// A member value of a flat object.
#[derive(Clone, Copy)]
pub(super) enum Scalar<'a> {
    Str(&'a str),
    Bool(bool),
    Null,
}

/// Append to `out` the jsonb root container (the bytes after the varlena header) of a payload
/// that is a flat object (strings, booleans or nulls), laid out exactly as `jsonb_in` would lay
/// it out: keys ordered by length then bytes, an offset in every 32nd entry. False, with `out`
/// unchanged, for anything else (numbers, nested values, NUL characters, which jsonb refuses),
/// which then goes through `jsonb_in`. Strings are stored as UTF-8, so only for a UTF-8 database.
pub(super) fn write_flat_container(payload: Payload, out: &mut Vec<u8>) -> bool {
    match payload {
        Payload::Flat(f) => {
            let m = f.members();
            with_members(m.len(), m.iter().map(|(k, v)| (*k, v.map_or(Scalar::Null, Scalar::Str))), out)
        }
        Payload::Json(Value::Object(obj)) => {
            let scalar = |v: &Value| matches!(v, Value::String(_) | Value::Bool(_) | Value::Null);
            if !obj.values().all(scalar) {
                return false;
            }
            let members = obj.iter().map(|(k, v)| {
                let s = match v {
                    Value::String(s) => Scalar::Str(s),
                    Value::Bool(b) => Scalar::Bool(*b),
                    _ => Scalar::Null,
                };
                (k.as_str(), s)
            });
            with_members(obj.len(), members, out)
        }
        Payload::Json(_) => false,
    }
}

/// Sort `n` members (on the stack when few) into jsonb order and write them.
fn with_members<'a>(n: usize, members: impl Iterator<Item = (&'a str, Scalar<'a>)>, out: &mut Vec<u8>) -> bool {
    const STACK: usize = 16;
    let mut stack = [("", Scalar::Null); STACK];
    let mut heap = Vec::new();
    let pairs: &mut [(&str, Scalar)] = if n <= STACK {
        let mut k = 0;
        for m in members.take(STACK) {
            stack[k] = m;
            k += 1;
        }
        &mut stack[..k]
    } else {
        heap.extend(members);
        &mut heap
    };
    let plain = |s: &str| !s.as_bytes().contains(&0);
    if !pairs.iter().all(|(k, v)| plain(k) && !matches!(v, Scalar::Str(s) if !plain(s))) {
        return false;
    }
    pairs.sort_unstable_by(|a, b| a.0.len().cmp(&b.0.len()).then_with(|| a.0.as_bytes().cmp(b.0.as_bytes())));
    let n = pairs.len();
    let data: usize = pairs.iter().map(|(k, v)| k.len() + if let Scalar::Str(s) = v { s.len() } else { 0 }).sum();
    if pg_sys::VARHDRSZ + 4 + 8 * n + data > 0x0FFF_FFFF {
        return false;
    }
    out.reserve(4 + 8 * n + data);
    out.extend_from_slice(&((n as u32) | JB_FOBJECT).to_ne_bytes());
    let mut total = 0u32;
    let mut entry = |out: &mut Vec<u8>, idx: usize, kind: u32, len: usize| {
        total += len as u32;
        let e = if idx % JB_OFFSET_STRIDE == 0 { kind | total | JENTRY_HAS_OFF } else { kind | len as u32 };
        out.extend_from_slice(&e.to_ne_bytes());
    };
    for (i, (k, _)) in pairs.iter().enumerate() {
        entry(out, i, JENTRY_ISSTRING, k.len());
    }
    for (i, (_, v)) in pairs.iter().enumerate() {
        let (kind, len) = match v {
            Scalar::Str(s) => (JENTRY_ISSTRING, s.len()),
            Scalar::Bool(true) => (JENTRY_ISBOOL_TRUE, 0),
            Scalar::Bool(false) => (JENTRY_ISBOOL_FALSE, 0),
            Scalar::Null => (JENTRY_ISNULL, 0),
        };
        entry(out, i + n, kind, len);
    }
    for (k, _) in pairs.iter() {
        out.extend_from_slice(k.as_bytes());
    }
    for (_, v) in pairs.iter() {
        if let Scalar::Str(s) = v {
            out.extend_from_slice(s.as_bytes());
        }
    }
    true
}

const JB_CMASK: u32 = 0x0FFF_FFFF;
const JENTRY_OFFLENMASK: u32 = 0x0FFF_FFFF;
const JENTRY_TYPEMASK: u32 = 0x7000_0000;

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// Whether a jsonb root container (the bytes after the varlena header) is a flat object.
pub(super) fn is_flat_object(c: &[u8]) -> bool {
    let Some(header) = u32_at(c, 0) else { return false };
    if header & !JB_CMASK != JB_FOBJECT {
        return false;
    }
    let n = (header & JB_CMASK) as usize;
    (n..2 * n).all(|i| {
        matches!(u32_at(c, 4 + 4 * i).map(|e| e & JENTRY_TYPEMASK),
                 Some(JENTRY_ISSTRING | JENTRY_ISBOOL_FALSE | JENTRY_ISBOOL_TRUE | JENTRY_ISNULL))
    })
}

/// Most members `flat_string_members` reads.
pub(super) const MAX_MEMBERS: usize = 16;

/// The members of a flat object's root container, each key and value as (type bits, start, end)
/// within `c`, passed to `visit` in stored order. None when `c` is not a well-formed object
/// root, when a key is not a string, or when `visit` refuses a member.
fn visit_members(c: &[u8], mut visit: impl FnMut(usize, usize, (u32, usize, usize)) -> Option<()>) -> Option<usize> {
    let header = u32_at(c, 0)?;
    if header & !JB_CMASK != JB_FOBJECT {
        return None;
    }
    let n = (header & JB_CMASK) as usize;
    let data = 4 + 8 * n;
    // Entry i's end offset (offsets are cumulative, stored in every JB_OFFSET_STRIDE-th entry).
    let entry = |i: usize, start: usize| -> Option<(u32, usize)> {
        let e = u32_at(c, 4 + 4 * i)?;
        let end = if e & JENTRY_HAS_OFF != 0 { (e & JENTRY_OFFLENMASK) as usize } else { start + (e & JENTRY_OFFLENMASK) as usize };
        (end >= start && data + end <= c.len()).then_some((e & JENTRY_TYPEMASK, end))
    };
    // Values follow all keys: find where the keys end, then walk keys and values side by side.
    let mut keys_end = 0usize;
    for i in 0..n {
        let (t, end) = entry(i, keys_end)?;
        if t != JENTRY_ISSTRING {
            return None;
        }
        keys_end = end;
    }
    let (mut key_end, mut value_end) = (0usize, keys_end);
    for i in 0..n {
        let (_, ke) = entry(i, key_end)?;
        let (vt, ve) = entry(n + i, value_end)?;
        visit(data + key_end, data + ke, (vt, data + value_end, data + ve))?;
        (key_end, value_end) = (ke, ve);
    }
    Some(n)
}

/// The members of a flat object's root container whose values are all strings or nulls, in
/// stored (jsonb) order, borrowed from `c`: the number written to `out`. None for anything else
/// (booleans, more than `MAX_MEMBERS` members, bytes that are not a well-formed flat object or
/// not UTF-8), which the caller decodes with `decode_flat_object`.
pub(super) fn flat_string_members<'a>(c: &'a [u8], out: &mut [(&'a str, Option<&'a str>); MAX_MEMBERS]) -> Option<usize> {
    if u32_at(c, 0)? & JB_CMASK > MAX_MEMBERS as u32 {
        return None;
    }
    let text = |s: usize, e: usize| std::str::from_utf8(&c[s..e]).ok();
    let mut k = 0;
    visit_members(c, |ks, ke, (vt, vs, ve)| {
        let value = match vt {
            JENTRY_ISSTRING => Some(text(vs, ve)?),
            JENTRY_ISNULL => None,
            _ => return None,
        };
        out[k] = (text(ks, ke)?, value);
        k += 1;
        Some(())
    })
}

/// The value of a flat object's root container, as parsing its text would give it. None when
/// the bytes are not a well-formed flat object (the caller then treats the entry as damaged).
pub(super) fn decode_flat_object(c: &[u8]) -> Option<Value> {
    let text = |s: usize, e: usize| std::str::from_utf8(&c[s..e]).ok().map(str::to_string);
    let mut map = Map::new();
    visit_members(c, |ks, ke, (vt, vs, ve)| {
        let value = match vt {
            JENTRY_ISSTRING => Value::String(text(vs, ve)?),
            JENTRY_ISBOOL_TRUE => Value::Bool(true),
            JENTRY_ISBOOL_FALSE => Value::Bool(false),
            JENTRY_ISNULL => Value::Null,
            _ => return None,
        };
        map.insert(text(ks, ke)?, value);
        Some(())
    })?;
    Some(Value::Object(map))
}
