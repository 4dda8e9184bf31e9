//! Values made and read by PostgreSQL's own functions, called directly rather than through a
//! statement: a type's input function as a cast from text calls it, jsonb's text, a type's oid and
//! schema, and whether a text-search query has nodes. For memory.recall's typed rows and its
//! query's words (src/recall/body.rs).

use super::error::{code, MxError};
use pgrx::datum::AnyElement;
use pgrx::prelude::*;
use std::ffi::{CStr, CString};

/// A type's input function (uuid_in, timestamptz_in, enum_in, jsonb_in, ...).
///
/// # Safety
/// Called by `from_text` only, with the arguments a cast from text passes.
pub type InputFn = unsafe fn(pg_sys::FunctionCallInfo) -> pg_sys::Datum;

fn internal(what: &str) -> MxError {
    MxError::new(code::INTERNAL, format!("memory_ext: {what}"))
}

/// A datum from its text by the type's input function `input`, called as a cast from text calls
/// it (the text, the type's I/O parameter `ioparam`, no typmod): the same value and the same
/// errors. Allocated in the current memory context.
pub fn from_text(input: InputFn, text: &str, ioparam: pg_sys::Oid) -> Result<pg_sys::Datum, MxError> {
    let c = CString::new(text).map_err(|_| internal("a value holds a NUL byte"))?;
    // SAFETY: the input function's three arguments (a C string alive for the call, an oid, an
    // int4; a function of fewer reads fewer); it returns a datum of its type or raises.
    unsafe {
        pgrx::direct_function_call_as_datum(input, &[Some(pg_sys::Datum::from(c.as_ptr())), Some(ioparam.into()), Some(pg_sys::Datum::from(-1i32))])
            .ok_or_else(|| internal("an input function returned NULL"))
    }
}

/// `from_text` as a value of type `typoid` (its own I/O parameter).
pub fn value_from_text(input: InputFn, text: &str, typoid: pg_sys::Oid) -> Result<AnyElement, MxError> {
    let d = from_text(input, text, typoid)?;
    // SAFETY: a non-null datum of `typoid`, made above.
    unsafe { AnyElement::from_polymorphic_datum(d, false, typoid) }.ok_or_else(|| internal("no value"))
}

/// A value of a built-in type as an `AnyElement` of its type (palloc'd in the current memory
/// context for a type passed by reference).
pub fn value_of<T: IntoDatum>(v: T) -> Option<AnyElement> {
    let d = v.into_datum()?;
    // SAFETY: a non-null datum of T's type, just made.
    unsafe { AnyElement::from_polymorphic_datum(d, false, T::type_oid()) }
}

/// Whether a jsonb value is JSON's `null` (a scalar: its root a one-element array flagged
/// scalar, the element's entry of type null; jsonb.h's JB_FSCALAR, JENTRY_ISNULL).
pub fn jsonb_is_null(e: &AnyElement) -> bool {
    if e.oid() != pg_sys::JSONBOID {
        return false;
    }
    const JB_FSCALAR: u32 = 0x1000_0000;
    const JB_CMASK: u32 = 0x0FFF_FFFF;
    const JENTRY_TYPEMASK: u32 = 0x7000_0000;
    const JENTRY_ISNULL: u32 = 0x4000_0000;
    // SAFETY: a non-null jsonb datum (its type checked), detoasted (a copy when it was toasted or
    // had a short header) before its root container's header and first entry are read: a jsonb
    // holds at least its header, and a scalar one entry after it.
    unsafe {
        let v = pg_sys::pg_detoast_datum(e.datum().cast_mut_ptr());
        let root = v.cast::<u8>().add(4).cast::<u32>();
        let header = std::ptr::read_unaligned(root);
        header & JB_FSCALAR != 0 && header & JB_CMASK == 1 && std::ptr::read_unaligned(root.add(1)) & JENTRY_TYPEMASK == JENTRY_ISNULL
    }
}

/// An oid-valued datum's oid (an enum value is its label's).
pub fn oid_of(d: pg_sys::Datum) -> pg_sys::Oid {
    pg_sys::Oid::from(u32::try_from(d.value() & 0xffff_ffff).unwrap_or(0))
}

/// The type a schema-qualified name names (regtypein: an error for no such type).
pub fn type_oid(name: &CStr) -> Result<pg_sys::Oid, MxError> {
    // SAFETY: regtypein of a NUL-terminated name.
    let d = unsafe { pgrx::direct_function_call_as_datum(pg_sys::regtypein, &[Some(pg_sys::Datum::from(name.as_ptr()))]) };
    d.map(oid_of).ok_or_else(|| internal("no type oid"))
}

/// The schema of type `typ` (None: no such type).
pub fn type_schema(typ: pg_sys::Oid) -> Option<String> {
    if typ == pg_sys::InvalidOid {
        return None;
    }
    // SAFETY: a syscache lookup by oid, released before the name is read; get_namespace_name
    // returns a palloc'd copy or NULL, copied at once.
    unsafe {
        let tup = pg_sys::SearchSysCache1(pg_sys::SysCacheIdentifier::TYPEOID as _, typ.into());
        if tup.is_null() {
            return None;
        }
        let nsp = (*(pg_sys::GETSTRUCT(tup) as *const pg_sys::FormData_pg_type)).typnamespace;
        pg_sys::ReleaseSysCache(tup);
        let name = pg_sys::get_namespace_name(nsp);
        (!name.is_null()).then(|| CStr::from_ptr(name).to_string_lossy().into_owned())
    }
}

/// A jsonb value's text (jsonb_out).
pub fn jsonb_text(e: &AnyElement) -> String {
    if e.oid() != pg_sys::JSONBOID {
        return String::new();
    }
    // SAFETY: a non-null jsonb datum (its type checked); jsonb_out detoasts it and returns a
    // palloc'd C string, copied at once.
    unsafe {
        pgrx::direct_function_call::<&CStr>(pg_sys::jsonb_out, &[Some(e.datum())]).map(|c| c.to_string_lossy().into_owned()).unwrap_or_default()
    }
}

/// A text-search configuration's oid from its qualified name (regconfigin: raises for none).
pub fn regconfig(config: &CStr) -> pg_sys::Datum {
    // SAFETY: regconfigin of a NUL-terminated name; it returns the oid (or raises).
    unsafe { pgrx::direct_function_call_as_datum(pg_sys::regconfigin, &[Some(pg_sys::Datum::from(config.as_ptr()))]).unwrap_or(pg_sys::Datum::from(0usize)) }
}

/// A tsquery made by `websearch_tsquery` or `any_word_tsquery`, palloc'd in the memory context
/// current then: used while that context lives (within the SPI connection it was made in).
#[derive(Clone, Copy)]
pub struct TsQuery(pg_sys::Datum);

/// `websearch_to_tsquery(cfg, query)`, a tsquery palloc'd in the current memory context.
pub fn websearch_tsquery(cfg: pg_sys::Datum, query: &str) -> Option<TsQuery> {
    // SAFETY: websearch_to_tsquery_byid of a regconfig oid and a text datum.
    unsafe { pgrx::direct_function_call_as_datum(pg_sys::websearch_to_tsquery_byid, &[Some(cfg), query.into_datum()]).map(TsQuery) }
}

/// The any-word tsquery of memory_core::retrieval::render's SQL:
/// `replace(plainto_tsquery(cfg, query)::text, ' & ', ' | ')::tsquery`, each step the function the
/// SQL calls (tsqueryout, then tsqueryin), palloc'd in the current memory context.
pub fn any_word_tsquery(cfg: pg_sys::Datum, query: &str) -> Option<TsQuery> {
    // SAFETY: plainto_tsquery_byid of a regconfig oid and a text datum; tsqueryout of the
    // tsquery it returns gives a palloc'd C string, copied at once; tsqueryin of a NUL-terminated
    // string (a NUL cannot come out of tsqueryout) gives the tsquery.
    unsafe {
        let q = pgrx::direct_function_call_as_datum(pg_sys::plainto_tsquery_byid, &[Some(cfg), query.into_datum()])?;
        let text = pgrx::direct_function_call::<&CStr>(pg_sys::tsqueryout, &[Some(q)])?.to_bytes().to_vec();
        let ors = String::from_utf8_lossy(&text).replace(" & ", " | ");
        let c = std::ffi::CString::new(ors).ok()?;
        pgrx::direct_function_call_as_datum(pg_sys::tsqueryin, &[Some(pg_sys::Datum::from(c.as_ptr()))]).map(TsQuery)
    }
}

/// How many distinct lexemes `to_tsvector(cfg, query)` has
/// (`cardinality(tsvector_to_array(to_tsvector(cfg, query)))`).
pub fn lexeme_count(cfg: pg_sys::Datum, query: &str) -> i32 {
    // SAFETY: to_tsvector_byid of a regconfig oid and a text datum returns a fresh tsvector,
    // detoasted before its header's lexeme count is read.
    unsafe {
        let Some(v) = pgrx::direct_function_call_as_datum(pg_sys::to_tsvector_byid, &[Some(cfg), query.into_datum()]) else { return 0 };
        let v = pg_sys::pg_detoast_datum(v.cast_mut_ptr()) as *const pg_sys::TSVectorData;
        (*v).size
    }
}

/// `ts_rank_cd(words, query)` (the float4 ts_rankcd_tt returns, normalisation 0).
///
/// # Safety
/// `words` is a tsvector datum alive for the call (`query`'s context too: see `TsQuery`).
pub unsafe fn ts_rank_cd(words: pg_sys::Datum, query: TsQuery) -> f32 {
    // SAFETY: the caller's; ts_rankcd_tt detoasts both and returns a float4 by value.
    unsafe { pgrx::direct_function_call_as_datum(pg_sys::ts_rankcd_tt, &[Some(words), Some(query.0)]).map_or(0.0, |d| f32::from_bits(d.value() as u32)) }
}

/// Whether `websearch_to_tsquery(config, query)` has nodes (numnode > 0), `config` a text-search
/// configuration's qualified name.
pub fn websearch_has_nodes(config: &CStr, query: &str) -> bool {
    // SAFETY: regconfigin of a NUL-terminated name (it raises for none), then
    // websearch_to_tsquery_byid of that oid and a text datum; the tsquery it returns is a fresh
    // varlena, detoasted before its header's node count is read.
    unsafe {
        let cfg = pgrx::direct_function_call_as_datum(pg_sys::regconfigin, &[Some(pg_sys::Datum::from(config.as_ptr()))]);
        let Some(q) = pgrx::direct_function_call_as_datum(pg_sys::websearch_to_tsquery_byid, &[cfg, query.into_datum()]) else {
            return false;
        };
        let q = pg_sys::pg_detoast_datum(q.cast_mut_ptr()) as *const pg_sys::TSQueryData;
        (*q).size > 0
    }
}
