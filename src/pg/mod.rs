//! The low-level layer: the only place that holds raw-pointer code (unsafe). Capability modules
//! (classify, retention, audit, lifecycle, feedback, trust, gates) are safe code over it.

pub mod bulk;
pub mod callbacks;
pub mod citus;
pub mod compat;
pub mod error;
pub mod identity;
pub mod input;
pub mod locks;
pub mod polymorphic;
pub mod receive;
pub mod scan;
pub mod shmem;
pub mod spi;
pub mod thread;
pub mod transition;
pub mod trigger;
pub mod tuple;
pub mod varlena;
pub mod vector;
pub mod xact;

/// MAXALIGN of this platform (8 bytes): where PostgreSQL aligns tuple data and palloc'd chunks.
pub fn maxalign(n: usize) -> usize {
    (n + 7) & !7
}

/// The `i`th (0-based) attribute of a tuple descriptor, as PostgreSQL's `TupleDescAttr`: an
/// array member `attrs` up to PostgreSQL 17; from 18 the `FormData_pg_attribute` array follows
/// the `CompactAttribute` array `compact_attrs` (cfg `pg_tupdesc_compact_attrs`, build.rs).
///
/// # Safety
/// `desc` is a valid tuple descriptor and `i` is below its `natts`.
pub(crate) unsafe fn tupdesc_attr(desc: pgrx::pg_sys::TupleDesc, i: usize) -> *mut pgrx::pg_sys::FormData_pg_attribute {
    #[cfg(not(pg_tupdesc_compact_attrs))]
    // SAFETY: as the function's contract: attrs holds natts entries.
    unsafe {
        (*desc).attrs.as_mut_ptr().add(i)
    }
    #[cfg(pg_tupdesc_compact_attrs)]
    // SAFETY: as the function's contract: natts CompactAttributes, then natts FormData_pg_attribute
    // (TupleDescAttrAddress of access/tupdesc.h).
    unsafe {
        let attrs = (*desc).compact_attrs.as_mut_ptr().add((*desc).natts as usize).cast::<pgrx::pg_sys::FormData_pg_attribute>();
        attrs.add(i)
    }
}
