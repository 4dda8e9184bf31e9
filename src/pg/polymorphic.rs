//! Catalog names and polymorphic arguments for the capability modules: a relation's schema and
//! name, a regclass's text, a relation's oid by name, and a value of a polymorphic argument
//! (`AnyElement`) read as numbers or text.

use pgrx::datum::{AnyElement, DatumWithOid};
use pgrx::prelude::*;
use std::ffi::CStr;

fn owned(p: *const std::ffi::c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: a non-null, NUL-terminated string the catalog lookups palloc'd.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// A relation's (schema, name); empty texts for a relation that is gone.
pub fn relation_names(rel: pg_sys::Oid) -> (String, String) {
    // SAFETY: catalog lookups by oid; each answers NULL for an unknown oid.
    unsafe {
        let name = pg_sys::get_rel_name(rel);
        let ns = pg_sys::get_rel_namespace(rel);
        let ns = if ns == pg_sys::InvalidOid { std::ptr::null_mut() } else { pg_sys::get_namespace_name(ns) };
        (owned(ns), owned(name))
    }
}

/// A regclass's text as `::text` gives it under the current search_path.
pub fn regclass_text(rel: pg_sys::Oid) -> String {
    // SAFETY: regclassout takes any oid (an unknown one prints as its number).
    unsafe { pgrx::direct_function_call::<&CStr>(pg_sys::regclassout, &[rel.into_datum()]) }
        .map(|c| c.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The oid of `schema.name`, InvalidOid when there is none.
pub fn relation_oid(schema: &CStr, name: &CStr) -> pg_sys::Oid {
    // SAFETY: lookups by NUL-terminated names; missing_ok.
    unsafe {
        let ns = pg_sys::get_namespace_oid(schema.as_ptr(), true);
        if ns == pg_sys::InvalidOid {
            return pg_sys::InvalidOid;
        }
        pg_sys::get_relname_relid(name.as_ptr(), ns)
    }
}

/// A float8[] or real[] value's components as float8 (None: another type; Some(Err): an array of
/// other than one dimension).
pub fn float_array(e: &AnyElement) -> Option<Result<Vec<Option<f64>>, ()>> {
    let t = e.oid();
    if t != pg_sys::FLOAT8ARRAYOID && t != pg_sys::FLOAT4ARRAYOID {
        return None;
    }
    // SAFETY: the datum is a non-null array of the type its oid names (pgrx read both from the call).
    let ndim = unsafe { (*(pg_sys::pg_detoast_datum(e.datum().cast_mut_ptr()) as *mut pg_sys::ArrayType)).ndim };
    if ndim != 1 {
        return Some(Err(()));
    }
    // SAFETY: as above; the type is checked.
    Some(Ok(unsafe {
        if t == pg_sys::FLOAT8ARRAYOID {
            e.into::<Array<f64>>().map(|a| a.iter().collect()).unwrap_or_default()
        } else {
            e.into::<Array<f32>>().map(|a| a.iter().map(|x| x.map(f64::from)).collect()).unwrap_or_default()
        }
    }))
}

/// A text or varchar value (None: another type).
pub fn text_value(e: &AnyElement) -> Option<String> {
    let t = e.oid();
    if t != pg_sys::TEXTOID && t != pg_sys::VARCHAROID {
        return None;
    }
    // SAFETY: a non-null text datum (varchar has text's representation).
    unsafe { e.into::<String>() }
}

/// The value as an SPI argument of its own type.
pub fn argument(e: &AnyElement) -> DatumWithOid<'static> {
    // SAFETY: the datum is of the type its oid names, alive for the call.
    unsafe { DatumWithOid::new(e.datum(), e.oid()) }
}

/// A second SPI argument of the same value and type.
pub fn again<'a>(d: &DatumWithOid<'a>) -> DatumWithOid<'a> {
    // SAFETY: the same datum and type, alive as long as the first.
    unsafe { DatumWithOid::new_from_datum(d.datum(), d.oid()) }
}

/// An array argument as an SPI argument of the array type `oid` (the value pgrx read, passed on
/// as it is), and its number of dimensions.
pub fn array_argument<'a, T: pgrx::datum::UnboxDatum>(a: Array<'a, T>, oid: pg_sys::Oid) -> (DatumWithOid<'a>, i32) {
    let p = a.into_array_type();
    // SAFETY: the (detoasted) array pgrx read, alive for the call, of the type `oid` names.
    unsafe { (DatumWithOid::new(pg_sys::Datum::from(p), oid), (*p).ndim) }
}

/// A function's jsonb argument read as AnyElement (passed on as it is, never parsed): the SPI
/// argument of type jsonb and whether it is an object (its root container's flag). The type is
/// the declared one, not the call's (a call without an expression, such as the fast-path
/// protocol's, tells none).
pub fn jsonb_argument(e: &AnyElement) -> (DatumWithOid<'static>, bool) {
    // SAFETY: a non-null datum of the function's jsonb argument, alive for the call.
    unsafe { (DatumWithOid::new(e.datum(), pg_sys::JSONBOID), super::varlena::jsonb_is_object(e.datum())) }
}

/// Whether a uuid[] value sorted ascending by bytes (one dimension, no NULLs) holds `id`: a
/// binary search over its elements in place. False for an array of another type or shape.
pub fn sorted_uuid_array_holds(a: &pgrx::datum::AnyArray, id: &[u8; 16]) -> bool {
    if a.oid() != pg_sys::UUIDARRAYOID {
        return false;
    }
    // SAFETY: a non-null uuid[] datum (its type checked above), detoasted here; a one-dimensional
    // array without a NULL bitmap holds its elements as consecutive 16-byte values (uuid's
    // alignment is 1) after the header.
    unsafe {
        let arr = pg_sys::pg_detoast_datum(a.datum().cast_mut_ptr()) as *const pg_sys::ArrayType;
        if (*arr).ndim != 1 || (*arr).dataoffset != 0 {
            return false;
        }
        // (ARR_DIMS: the int after the 16-byte header; ARR_DATA_PTR of one dimension without
        // NULLs: MAXALIGN(16 + 2 ints) = 24 bytes in.)
        let base = arr as *const u8;
        let n = (*base.add(16).cast::<i32>()).max(0) as usize;
        let elems = std::slice::from_raw_parts(base.add(24), n * 16);
        let (mut lo, mut hi) = (0usize, n);
        while lo < hi {
            let mid = (lo + hi) / 2;
            match elems[mid * 16..mid * 16 + 16].cmp(&id[..]) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return true,
            }
        }
        false
    }
}
