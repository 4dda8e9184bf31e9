//! The classify trigger's lineage pass on an INSERT into memory.observations (SPEC §18,
//! docs/reference.md#lineage): the row's `derived_from` checked (memory_core::lineage), the
//! sources locked (advisory locks taken directly) and read by their primary key under a new
//! snapshot without a statement (crate::pg::scan), and the floors taken in
//! the same pass as the tier and the stamps. An UPDATE keeps the PL/pgSQL triggers of
//! sql/lineage.sql (memory_ancestry, memory_lineage), which apply the same rules to what it adds.

use crate::errors::{code, MxError};
use crate::pg::tuple::{Column, Deformed, RowTrigger};
use memory_core::classify::Tier;
use memory_core::lineage::{self, SourcesError};
use pgrx::prelude::*;

/// memory.observations' lineage columns (on a Citus shard of it: `shard`, and lineage refused).
pub struct LineageColumns {
    derived_from: Column,
    id: Column,
    shard: bool,
    /// How the sources are read (not on a shard).
    read: Option<SourceRead>,
}

/// memory.observations read by its primary key without a statement (crate::pg::scan): the
/// table, its primary key index, the columns read (attribute numbers) and the label OIDs of the
/// tiers and source types, in order. Resolved with the mapping, dropped with it on a change of
/// the table (a relcache invalidation, an index's included).
struct SourceRead {
    rel: pg_sys::Oid,
    pkey: pg_sys::Oid,
    org: i16,
    tier: i16,
    source_type: i16,
    deleted: i16,
    expires: i16,
    purge: i16,
    tiers: [pg_sys::Oid; 4],
    source_types: [pg_sys::Oid; 4],
}

/// What the sources of a new derived memory give it.
pub struct Floors {
    /// The strictest source's tier.
    pub tier: Option<Tier>,
    /// The least trusted source's trust rank (1..=5).
    pub worst: Option<i32>,
    /// The earliest expires_at and purge_after of the sources (microseconds).
    pub expires: Option<i64>,
    pub purge: Option<i64>,
}

impl LineageColumns {
    /// memory.observations' (or a Citus shard's of it) derived_from and id columns; None for any
    /// other table (a governed table's lineage is its own triggers').
    pub fn resolve(row: &RowTrigger) -> Result<Option<Self>, MxError> {
        let name = row.relname();
        let shard = name != "memory.observations";
        if shard && !(name.starts_with("memory.observations_") && crate::pg::citus::logical_table(row.relid()).is_some()) {
            return Ok(None);
        }
        // (No such column: an earlier release's memory.observations, before ALTER EXTENSION
        // memory_ext UPDATE adds it; its writes are refused with 55000 further on.)
        if row.find_column("derived_from").is_none() {
            return Ok(None);
        }
        let derived_from = row.column("derived_from", "derived_from")?;
        let id = row.column("id", "id")?;
        if derived_from.typoid != pg_sys::UUIDARRAYOID || id.typoid != pg_sys::UUIDOID {
            return Ok(None);
        }
        let read = if shard { None } else { Some(SourceRead::resolve(row)?) };
        Ok(Some(LineageColumns { derived_from, id, shard, read }))
    }

    /// The new row's sources, checked and each once (None: none); the column rewritten when that
    /// changed it (whether it did, second).
    pub fn sources(&self, new: &mut Deformed) -> Result<(Option<Vec<pgrx::Uuid>>, bool), MxError> {
        let Some((ndims, ids)) = new.uuid_array(&self.derived_from) else { return Ok((None, false)) };
        if self.shard {
            return Err(MxError::new(code::FEATURE_NOT_SUPPORTED, "derived_from is not supported on a distributed store (memory.distribute)")
                .hint("Write the memory without derived_from; lineage runs on a single node."));
        }
        let own = new.uuid(&self.id);
        let got = lineage::sources(own, &ids, ndims).map_err(|e: SourcesError| {
            MxError::bad_argument(e.message(&own.map(|u| u.to_string()).unwrap_or_default())).hint(e.hint())
        })?;
        let changed = got.as_ref().map_or(true, |g| g.len() != ids.len());
        if changed {
            match &got {
                None => new.set_null(&self.derived_from),
                Some(g) => new.set(&self.derived_from, g.clone().into_datum().expect("uuid[] datum")),
            }
        }
        Ok((got, changed))
    }
}

impl SourceRead {
    fn resolve(row: &RowTrigger) -> Result<Self, MxError> {
        let at = |name: &str| -> Result<i16, MxError> { Ok(row.column(name, "lineage")?.idx as i16 + 1) };
        let e = MxError::spi_in("lineage");
        let pkey = crate::pg::spi::read_one::<pg_sys::Oid>(
            "SELECT i.indexrelid FROM pg_catalog.pg_index i WHERE i.indrelid OPERATOR(pg_catalog.=) $1 AND i.indisprimary",
            &[row.relid().into()],
        )
        .map_err(&e)?
        .ok_or_else(|| MxError::new(code::NOT_INSTALLED, "memory.observations has no primary key").hint("Reinstall memory_ext."))?;
        let labels = |typ: &str, names: [&str; 4]| -> Result<[pg_sys::Oid; 4], MxError> {
            let mut out = [pg_sys::InvalidOid; 4];
            for (k, n) in names.iter().enumerate() {
                out[k] = crate::pg::spi::read_one::<pg_sys::Oid>(
                    "SELECT e.oid FROM pg_catalog.pg_enum e WHERE e.enumtypid OPERATOR(pg_catalog.=) $1::pg_catalog.regtype AND e.enumlabel OPERATOR(pg_catalog.=) $2",
                    &[typ.into(), (*n).into()],
                )
                .map_err(&e)?
                .ok_or_else(|| MxError::new(code::NOT_INSTALLED, format!("{typ} lacks the label {n}")))?;
            }
            Ok(out)
        };
        Ok(SourceRead {
            rel: row.relid(),
            pkey,
            org: at("org_id")?,
            tier: at("classification")?,
            source_type: at("source_type")?,
            deleted: at("soft_deleted_at")?,
            expires: at("expires_at")?,
            purge: at("purge_after")?,
            tiers: labels("memory.classification", ["public", "internal", "confidential", "restricted"])?,
            source_types: labels("memory.source_type", ["decision", "fact", "preference", "tool_result"])?,
        })
    }
}

impl LineageColumns {
    /// The sources `ids` of a new memory of `org`: each a live memory of the org within the
    /// writer's clearance there (22023 otherwise, a missing id and another org's alike, the first
    /// in the order given), locked shared until commit; their floors. The org's lineage lock,
    /// then each source's, in the order memory_internal._lineage_floor takes them (the org's, then
    /// the sources' by id): a forget or a tightening source that holds one exclusively is waited
    /// for; the sources are read after, by their primary key under a snapshot taken then
    /// (`Lookup::latest`, at every isolation level), without a statement.
    pub fn floors(&self, org: &str, ids: &[pgrx::Uuid]) -> Result<Floors, MxError> {
        crate::trust::require_org(Some(org))?;
        let cl = crate::trust::clearance(Some(org))?.as_deref().and_then(Tier::parse).unwrap_or(Tier::Public);
        crate::pg::locks::advisory_xact_shared_text(&format!("{}{org}", lineage::LOCK_PREFIX));
        let mut order: Vec<&[u8; 16]> = ids.iter().map(|id| id.as_bytes()).collect();
        order.sort_unstable();
        for id in order {
            let key = lineage::lock_key(id);
            crate::pg::locks::advisory_xact_shared_text(std::str::from_utf8(&key).expect("ASCII"));
        }
        let r = self.read.as_ref().ok_or_else(|| MxError::new(code::FEATURE_NOT_SUPPORTED, "derived_from is not supported on a distributed store"))?;
        // A snapshot taken now, after the locks, at every isolation level: at REPEATABLE READ the
        // transaction's would still show a source a forget removed and committed since.
        let lk = crate::pg::scan::Lookup::latest();
        let mut f = Floors { tier: None, worst: None, expires: None, purge: None };
        // One scan of the primary key, begun for the first source and started again for each
        // next one (a descent each; the relations and the scan opened once). Each key points at
        // the id's bytes in `ids`, which outlive the scan.
        let mut scan: Option<crate::pg::scan::Scan<'_>> = None;
        for id in ids {
            let arg = pg_sys::Datum::from(id.as_bytes().as_ptr());
            let s = match scan.as_mut() {
                Some(s) => {
                    s.rescan(&[arg]);
                    s
                }
                None => scan.insert(lk.backward(r.rel, r.pkey, &[crate::pg::scan::Key::eq(1, pg_sys::F_UUID_EQ, arg)])?),
            };
            let mut found = false;
            while s.next() {
                let live = s.bytes(r.org) == Some(org.as_bytes()) && s.datum(r.deleted).is_none();
                let tier = s.datum(r.tier).and_then(|d| r.tiers.iter().position(|o| o.to_u32() == d.value() as u32)).map(|i| Tier::ALL[i]);
                let Some(tier) = tier.filter(|t| live && *t <= cl) else { continue };
                let rank = s.datum(r.source_type).and_then(|d| r.source_types.iter().position(|o| o.to_u32() == d.value() as u32)).map_or(5, |i| i as i32 + 1);
                f.tier = f.tier.max(Some(tier));
                f.worst = f.worst.max(Some(rank));
                f.expires = lineage::ceiling(f.expires, s.datum(r.expires).map(|d| d.value() as i64));
                f.purge = lineage::ceiling(f.purge, s.datum(r.purge).map(|d| d.value() as i64));
                found = true;
                break;
            }
            if !found {
                return Err(MxError::bad_argument(format!("derived_from names memory {id}, which is not a memory of org \"{org}\""))
                    .hint("A memory is derived from live memories of its own org that the writer may read."));
            }
        }
        drop(scan);
        Ok(f)
    }
}
