//! What memory_ext needs to know of Citus inside a backend: whether a relation a trigger fired on
//! is a shard (or a reference table's copy), and of which table. Citus names a shard
//! `<table>_<shardid>` in its table's schema and records it in `pg_catalog.pg_dist_shard`, which
//! every node with metadata holds (Citus 11 and later); without Citus nothing is looked up.

use pgrx::prelude::*;

/// Whether Citus's catalog is in this database (pg_catalog.pg_dist_partition): a syscache lookup.
/// memory_ext's kept generic plans are not forced there, since Citus plans a distributed
/// statement for its parameters' values.
pub fn installed() -> bool {
    // SAFETY: a catalog lookup by name inside a transaction; the name is a NUL-terminated literal.
    unsafe { pg_sys::get_relname_relid(c"pg_dist_partition".as_ptr(), pg_sys::Oid::from(pg_sys::PG_CATALOG_NAMESPACE)) != pg_sys::InvalidOid }
}

/// The table whose shard `relid` is, when Citus is in this database and `relid` is one of its
/// shards: the shard id its name ends in is recorded for a table of the same schema (not the
/// relation itself: on the coordinator a table may keep its own name), and its name is that
/// shard's. None otherwise (also where Citus's catalog cannot be read).
pub fn logical_table(relid: pg_sys::Oid) -> Option<pg_sys::Oid> {
    let shard = memory_core::shards::shard_id_suffix(&super::callbacks::relation_name(relid)?)?;
    // SAFETY: catalog lookups by name and by oid, inside a transaction; the name is a
    // NUL-terminated literal.
    let (dist_shard, ns) = unsafe {
        (pg_sys::get_relname_relid(c"pg_dist_shard".as_ptr(), pg_sys::Oid::from(pg_sys::PG_CATALOG_NAMESPACE)), pg_sys::get_rel_namespace(relid))
    };
    if dist_shard == pg_sys::InvalidOid {
        return None;
    }
    // The relation's name must be exactly the one Citus gives that shard (`shard_name`, which
    // also covers the hashed form of long names): a table merely named like a shard (`x_102041`)
    // is not one.
    Spi::get_one_with_args::<pg_sys::Oid>(
        "SELECT s.logicalrelid::pg_catalog.oid FROM pg_catalog.pg_dist_shard s
           JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) s.logicalrelid
           JOIN pg_catalog.pg_class r ON r.oid OPERATOR(pg_catalog.=) $3
           JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) r.relnamespace
          WHERE s.shardid OPERATOR(pg_catalog.=) $1 AND c.relnamespace OPERATOR(pg_catalog.=) $2
            AND c.oid OPERATOR(pg_catalog.<>) $3
            AND pg_catalog.shard_name(s.logicalrelid, s.shardid, false) OPERATOR(pg_catalog.=)
                pg_catalog.format('%I.%I', n.nspname, r.relname)",
        &[shard.into(), ns.into(), relid.into()],
    )
    .ok()
    .flatten()
}

/// `schema.table` of `relid`, unquoted (the form audit events and messages use); None when there
/// is no such relation.
pub fn qualified_name(relid: pg_sys::Oid) -> Option<String> {
    let name = super::callbacks::relation_name(relid)?;
    // SAFETY: catalog lookups by oid; get_namespace_name returns a palloc'd copy or NULL, copied
    // at once.
    let ns = unsafe {
        let p = pg_sys::get_namespace_name(pg_sys::get_rel_namespace(relid));
        (!p.is_null()).then(|| std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned())
    };
    Some(match ns {
        Some(ns) => format!("{ns}.{name}"),
        None => name,
    })
}
