//! The jsonb on-disk layout (utils/jsonb.h) for the flat objects the extension writes: objects
//! whose values are strings, booleans or nulls. Writing them skips `jsonb_in`; reading them back
//! skips `jsonb_out` and JSON parsing. Anything else goes through Postgres' own functions.

use pgrx::prelude::*;
use serde_json::{Map, Value};

// JSONB on-disk layout (utils/jsonb.h).
const JB_FOBJECT: u32 = 0x2000_0000;
const JENTRY_HAS_OFF: u32 = 0x8000_0000;
const JENTRY_ISSTRING: u32 = 0x0000_0000;
const JENTRY_ISBOOL_FALSE: u32 = 0x2000_0000;
const JENTRY_ISBOOL_TRUE: u32 = 0x3000_0000;
const JENTRY_ISNULL: u32 = 0x4000_0000;
const JB_OFFSET_STRIDE: usize = 32;

/// A jsonb datum for an object whose values are strings, booleans or nulls, laid out exactly as
/// `jsonb_in` would lay it out (keys ordered by length then bytes, an offset in every 32nd
/// entry). None for anything else (numbers, nested values), which then go through `jsonb_in`.
///
/// # Safety
/// Allocates with palloc in the current memory context.
pub(super) unsafe fn flat_object_jsonb(v: &Value) -> Option<pg_sys::Datum> {
    let obj = v.as_object()?;
    // Text is stored as UTF-8 bytes, so only in a UTF-8 database; jsonb refuses NUL characters,
    // and jsonb_in says so.
    if unsafe { pg_sys::GetDatabaseEncoding() } != pg_sys::pg_enc::PG_UTF8 as i32 {
        return None;
    }
    let mut pairs: Vec<(&str, &Value)> = Vec::with_capacity(obj.len());
    for (k, v) in obj {
        let plain = |s: &str| !s.contains('\0');
        match v {
            Value::String(s) if plain(s) => {}
            Value::Null | Value::Bool(_) => {}
            _ => return None,
        }
        if !plain(k) {
            return None;
        }
        pairs.push((k.as_str(), v));
    }
    pairs.sort_by(|a, b| a.0.len().cmp(&b.0.len()).then_with(|| a.0.as_bytes().cmp(b.0.as_bytes())));
    let n = pairs.len();
    let data: usize = pairs.iter().map(|(k, v)| k.len() + v.as_str().map_or(0, str::len)).sum();
    let size = pg_sys::VARHDRSZ + 4 + 8 * n + data;
    if size > 0x0FFF_FFFF {
        return None;
    }
    // Written straight into the palloc'd datum: header, entries, keys, then values.
    let out: &mut [u8] = unsafe { std::slice::from_raw_parts_mut(pg_sys::palloc(size).cast::<u8>(), size) };
    let mut at = pg_sys::VARHDRSZ;
    let mut put = |bytes: &[u8]| {
        out[at..at + bytes.len()].copy_from_slice(bytes);
        at += bytes.len();
    };
    put(&((n as u32) | JB_FOBJECT).to_ne_bytes());
    let mut total = 0u32;
    let mut entry = |idx: usize, kind: u32, len: usize, put: &mut dyn FnMut(&[u8])| {
        total += len as u32;
        let e = if idx % JB_OFFSET_STRIDE == 0 { kind | total | JENTRY_HAS_OFF } else { kind | len as u32 };
        put(&e.to_ne_bytes());
    };
    for (i, (k, _)) in pairs.iter().enumerate() {
        entry(i, JENTRY_ISSTRING, k.len(), &mut put);
    }
    for (i, (_, v)) in pairs.iter().enumerate() {
        let (kind, len) = match v {
            Value::String(s) => (JENTRY_ISSTRING, s.len()),
            Value::Bool(true) => (JENTRY_ISBOOL_TRUE, 0),
            Value::Bool(false) => (JENTRY_ISBOOL_FALSE, 0),
            _ => (JENTRY_ISNULL, 0),
        };
        entry(i + n, kind, len, &mut put);
    }
    for (k, _) in &pairs {
        put(k.as_bytes());
    }
    for (_, v) in &pairs {
        if let Value::String(s) = v {
            put(s.as_bytes());
        }
    }
    debug_assert_eq!(at, size);
    unsafe { pgrx::varlena::set_varsize_4b(out.as_mut_ptr().cast(), size as i32) };
    Some(pg_sys::Datum::from(out.as_mut_ptr()))
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

/// The value of a flat object's root container, as parsing its text would give it. None when
/// the bytes are not a well-formed flat object (the caller then treats the entry as damaged).
pub(super) fn decode_flat_object(c: &[u8]) -> Option<Value> {
    let header = u32_at(c, 0)?;
    if header & !JB_CMASK != JB_FOBJECT {
        return None;
    }
    let n = (header & JB_CMASK) as usize;
    let data = 4 + 8 * n;
    let mut spans = Vec::with_capacity(2 * n);
    let mut end = 0usize;
    for i in 0..2 * n {
        let e = u32_at(c, 4 + 4 * i)?;
        let start = end;
        end = if e & JENTRY_HAS_OFF != 0 { (e & JENTRY_OFFLENMASK) as usize } else { start + (e & JENTRY_OFFLENMASK) as usize };
        if end < start {
            return None;
        }
        spans.push((e & JENTRY_TYPEMASK, data + start, data + end));
    }
    if c.len() < data + end {
        return None;
    }
    let text = |s: usize, e: usize| std::str::from_utf8(&c[s..e]).ok().map(str::to_string);
    let mut map = Map::with_capacity(n);
    for i in 0..n {
        let (kt, ks, ke) = spans[i];
        let (vt, vs, ve) = spans[n + i];
        if kt != JENTRY_ISSTRING {
            return None;
        }
        let value = match vt {
            JENTRY_ISSTRING => Value::String(text(vs, ve)?),
            JENTRY_ISBOOL_TRUE => Value::Bool(true),
            JENTRY_ISBOOL_FALSE => Value::Bool(false),
            JENTRY_ISNULL => Value::Null,
            _ => return None,
        };
        map.insert(text(ks, ke)?, value);
    }
    Some(Value::Object(map))
}
