//! Varlena and jsonb access: text bytes without copies, text[] elements in place, jsonb output
//! and the few jsonb functions the triggers call.

use super::maxalign;
use pgrx::prelude::*;
use pgrx::{direct_function_call_as_datum, varlena, IntoDatum};
use std::ffi::CStr;

/// Whether a type is text or varchar.
pub fn is_text(typoid: pg_sys::Oid) -> bool {
    typoid == pg_sys::TEXTOID || typoid == pg_sys::VARCHAROID
}

/// Whether a type is an enum (a catalog lookup).
pub fn type_is_enum(typoid: pg_sys::Oid) -> bool {
    // SAFETY: a syscache lookup of a type oid; an unknown oid raises an ERROR.
    unsafe { pg_sys::type_is_enum(typoid) }
}

/// Bytes of a text (or any varlena) datum, detoasting only when it is compressed or out of line.
///
/// # Safety
/// `d` is a non-NULL varlena datum, and the returned slice is not used after the memory holding
/// it (the row, or the detoasted copy in the current memory context) is freed: the caller picks
/// the lifetime `'a` to match.
pub(crate) unsafe fn text_bytes<'a>(d: pg_sys::Datum) -> &'a [u8] {
    unsafe {
        let mut v = d.cast_mut_ptr::<pg_sys::varlena>();
        if !(varlena::varatt_is_4b_u(v) || (varlena::varatt_is_1b(v) && !varlena::varatt_is_1b_e(v))) {
            v = pg_sys::pg_detoast_datum_packed(v);
        }
        varlena::varlena_to_byte_slice(v)
    }
}

/// The JSON text (jsonb_out) of a jsonb value given by its root container (the bytes after the
/// varlena header, as `text_bytes` returns them), appended to `out`; false when it cannot be
/// made.
pub(crate) fn jsonb_container_text(container: &[u8], out: &mut Vec<u8>) -> bool {
    // SAFETY: a palloc'd 4-byte-header varlena holding a copy of the container is a jsonb datum
    // (the container is one that a jsonb column stored), freed once read.
    unsafe {
        let len = container.len() + pg_sys::VARHDRSZ;
        let v = pg_sys::palloc(len).cast::<u8>();
        varlena::set_varsize_4b(v.cast(), len as i32);
        std::ptr::copy_nonoverlapping(container.as_ptr(), v.add(pg_sys::VARHDRSZ), container.len());
        let made = jsonb_out_into(pg_sys::Datum::from(v), out);
        pg_sys::pfree(v.cast());
        made
    }
}

/// The JSON text (jsonb_out) of the jsonb datum `d`, appended to `out`; false when it cannot be
/// made.
///
/// # Safety
/// `d` is a non-NULL jsonb datum.
pub(crate) unsafe fn jsonb_out_into(d: pg_sys::Datum, out: &mut Vec<u8>) -> bool {
    // jsonb_out returns a palloc'd C string, copied out and freed.
    unsafe {
        let Some(text) = direct_function_call_as_datum(pg_sys::jsonb_out, &[Some(d)]).filter(|t| !t.is_null()) else { return false };
        let p = text.cast_mut_ptr::<std::ffi::c_char>();
        out.extend_from_slice(CStr::from_ptr(p).to_bytes());
        pg_sys::pfree(p.cast());
        true
    }
}

/// Visit the non-NULL elements of a text[] datum without copying them (the walk of
/// array_iter_next in arrayaccess.h: elements are varlenas, each followed by int alignment).
///
/// A small array stored in a tuple has a 1-byte varlena header and is read in place: its bytes
/// after the header are those of the 4-byte-header array that detoasting would make, so offsets
/// and alignment are counted from where that array would start (3 bytes before this one).
///
/// # Safety
/// `d` is a non-NULL datum of a one-dimensional text[] (or varchar[]), and `visit` keeps the
/// element slices no longer than the array's memory lives (the caller picks `'a`).
pub(crate) unsafe fn text_array_elements<'a>(d: pg_sys::Datum, mut visit: impl FnMut(&'a [u8])) {
    unsafe {
        let mut v = d.cast_mut_ptr::<pg_sys::varlena>();
        let shift = if varlena::varatt_is_4b_u(v) {
            0
        } else if varlena::varatt_is_1b(v) && !varlena::varatt_is_1b_e(v) {
            3
        } else {
            v = pg_sys::pg_detoast_datum(v);
            0
        };
        let start = v as *const u8;
        // The byte at offset `o` of the unpacked array.
        let at = |o: usize| start.add(o - shift);
        let int = |o: usize| std::ptr::read_unaligned(at(o) as *const i32);
        let ndim = int(4) as usize;
        if ndim == 0 {
            return;
        }
        // ArrayType is vl_len_, ndim, dataoffset, elemtype; then dims, lower bounds, bitmap.
        let header = std::mem::size_of::<pg_sys::ArrayType>();
        let nitems: usize = (0..ndim).map(|i| int(header + 4 * i) as usize).product();
        let dataoffset = int(8) as usize;
        let bitmap = if dataoffset != 0 { Some(header + 8 * ndim) } else { None };
        let mut o = if dataoffset != 0 { dataoffset } else { maxalign(header + 8 * ndim) };
        for i in 0..nitems {
            if let Some(bm) = bitmap {
                if *at(bm + i / 8) & (1 << (i % 8)) == 0 {
                    continue;
                }
            }
            let (bytes, len) = element(at(o));
            visit(bytes);
            o = (o + len + 3) & !3;
        }
    }
}

/// An element varlena of an array (1- or 4-byte header, never toasted) at an address that may
/// be unaligned: its bytes and its whole size.
///
/// # Safety
/// `e` points at an element inside a live array; the caller picks `'a` no longer than it lives.
unsafe fn element<'a>(e: *const u8) -> (&'a [u8], usize) {
    unsafe {
        // The 1-byte header tests read one byte; the 4-byte header is copied out before use.
        if varlena::varatt_is_1b(e.cast()) {
            let size = varlena::varsize_1b(e.cast());
            (std::slice::from_raw_parts(e.add(1), size.saturating_sub(1)), size)
        } else {
            let header = std::ptr::read_unaligned(e as *const u32);
            let size = varlena::varsize_4b((&header as *const u32).cast());
            (std::slice::from_raw_parts(e.add(4), size.saturating_sub(4)), size)
        }
    }
}

pub(crate) fn database_is_utf8() -> bool {
    thread_local! {
        // A backend serves one database for its life, and a database's encoding never changes:
        // asked once (0: not yet, 1: no, 2: yes), not through an FFI call on every append.
        static UTF8: std::cell::Cell<u8> = const { std::cell::Cell::new(0) };
    }
    match UTF8.with(|u| u.get()) {
        1 => false,
        2 => true,
        _ => {
            // SAFETY: reads the encoding of the database this backend is connected to.
            let utf8 = unsafe { pg_sys::GetDatabaseEncoding() == pg_sys::pg_enc::PG_UTF8 as i32 };
            // Before a database is chosen (a background worker not yet connected) the encoding is
            // SQL_ASCII's: not kept, asked again once connected.
            if unsafe { pg_sys::MyDatabaseId } != pg_sys::InvalidOid {
                UTF8.with(|u| u.set(if utf8 { 2 } else { 1 }));
            }
            utf8
        }
    }
}

/// Text bytes of a datum as `&str`. PostgreSQL validates text against the database encoding,
/// so in a UTF-8 database (`utf8`) the bytes are valid UTF-8; elsewhere bytes that are not stand
/// in as a replacement character (paths and ids are matched as ASCII, which such text cannot be).
pub(crate) fn as_str(bytes: &[u8], utf8: bool) -> &str {
    if utf8 {
        // SAFETY: text of a UTF-8 database is valid UTF-8 (checked on input by PostgreSQL).
        unsafe { std::str::from_utf8_unchecked(bytes) }
    } else {
        std::str::from_utf8(bytes).unwrap_or("\u{fffd}")
    }
}

// JB_FOBJECT from utils/jsonb.h: the root container of a jsonb value is an object.
const JB_FOBJECT: u32 = 0x2000_0000;

/// Whether a jsonb datum's root is an object.
///
/// # Safety
/// `datum` is a non-NULL jsonb datum.
pub(crate) unsafe fn jsonb_is_object(datum: pg_sys::Datum) -> bool {
    unsafe {
        let v = pg_sys::pg_detoast_datum(datum.cast_mut_ptr());
        let header = *(varlena::vardata_any(v) as *const u32);
        header & JB_FOBJECT != 0
    }
}

/// `d->>key`: a text datum in the current memory context, None when absent or JSON null.
///
/// # Safety
/// `d` is a non-NULL jsonb datum.
pub(crate) unsafe fn jsonb_field_text(d: pg_sys::Datum, key: &str) -> Option<pg_sys::Datum> {
    unsafe { direct_function_call_as_datum(pg_sys::jsonb_object_field_text, &[Some(d), key.into_datum()]) }
}

/// `a || b` of two jsonb datums (a new datum in the current memory context).
///
/// # Safety
/// `a` and `b` are non-NULL jsonb datums.
pub(crate) unsafe fn jsonb_concat(a: pg_sys::Datum, b: pg_sys::Datum) -> Option<pg_sys::Datum> {
    unsafe { direct_function_call_as_datum(pg_sys::jsonb_concat, &[Some(a), Some(b)]) }
}

/// Whether two datums of one column have the same stored image (datum_image_eq in C, which pgrx
/// does not bind). Differently compressed copies of one value count as different; the caller
/// then re-classifies, which is merely redundant.
///
/// # Safety
/// `x` and `y` are non-NULL datums of one column whose type is by value (`byval`) or of length
/// `len` (-1: varlena), pointing at values of its type when not by value.
pub(crate) unsafe fn same_image(x: pg_sys::Datum, y: pg_sys::Datum, byval: bool, len: i16) -> bool {
    if byval {
        return x.value() == y.value();
    }
    unsafe {
        let (a, b): (&[u8], &[u8]) = if len == -1 {
            let (pa, pb) = (x.cast_mut_ptr::<pg_sys::varlena>(), y.cast_mut_ptr::<pg_sys::varlena>());
            (
                std::slice::from_raw_parts(pa as *const u8, varlena::varsize_any(pa)),
                std::slice::from_raw_parts(pb as *const u8, varlena::varsize_any(pb)),
            )
        } else if len > 0 {
            let n = len as usize;
            (std::slice::from_raw_parts(x.cast_mut_ptr::<u8>(), n), std::slice::from_raw_parts(y.cast_mut_ptr::<u8>(), n))
        } else {
            return false;
        };
        a == b
    }
}
