//! The classify trigger's lineage pass on an INSERT into memory.observations (SPEC §18,
//! docs/reference.md#lineage): the row's `derived_from` checked (memory_core::lineage), the
//! sources locked (advisory locks taken directly) and read in one kept statement under a new
//! snapshot as the extension owner, and the floors taken in
//! the same pass as the tier and the stamps. An UPDATE keeps the PL/pgSQL triggers of
//! sql/lineage.sql (memory_ancestry, memory_lineage), which apply the same rules to what it adds.

use crate::errors::{code, MxError};
use crate::pg::tuple::{Column, Deformed, RowTrigger};
use memory_core::classify::Tier;
use memory_core::lineage::{self, SourcesError};
use pgrx::datum::DatumWithOid;
use pgrx::prelude::*;

/// memory.observations' lineage columns (on a Citus shard of it: `shard`, and lineage refused).
pub struct LineageColumns {
    derived_from: Column,
    id: Column,
    shard: bool,
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

// The sources that are live memories of the org within the writer's clearance ($3), and their floors.
const SOURCES: &str = "SELECT pg_catalog.count(*)::pg_catalog.int4, pg_catalog.max(s.classification)::pg_catalog.text,
       pg_catalog.max(coalesce(pg_catalog.array_position('{decision,fact,preference,tool_result}'::memory.source_type[], s.source_type), 5))::pg_catalog.int4,
       pg_catalog.min(s.expires_at), pg_catalog.min(s.purge_after)
  FROM memory.observations s
 WHERE s.org_id OPERATOR(pg_catalog.=) $1 AND s.id OPERATOR(pg_catalog.=) ANY ($2) AND s.soft_deleted_at IS NULL
   AND s.classification OPERATOR(pg_catalog.<=) $3::memory.classification";

// The first source named that is not one (the refusal's message).
const MISSING: &str = "SELECT u.x FROM pg_catalog.unnest($2) WITH ORDINALITY u(x, n)
  WHERE NOT EXISTS (SELECT 1 FROM memory.observations s WHERE s.org_id OPERATOR(pg_catalog.=) $1 AND s.id OPERATOR(pg_catalog.=) u.x
                       AND s.soft_deleted_at IS NULL AND s.classification OPERATOR(pg_catalog.<=) $3::memory.classification)
  ORDER BY u.n LIMIT 1";

impl LineageColumns {
    /// memory.observations' (or a Citus shard's of it) derived_from and id columns; None for any
    /// other table (a governed table's lineage is its own triggers').
    pub fn resolve(row: &RowTrigger) -> Result<Option<Self>, MxError> {
        let name = row.relname();
        let shard = name != "memory.observations";
        if shard && !(name.starts_with("memory.observations_") && crate::pg::citus::logical_table(row.relid()).is_some()) {
            return Ok(None);
        }
        let derived_from = row.column("derived_from", "derived_from")?;
        let id = row.column("id", "id")?;
        if derived_from.typoid != pg_sys::UUIDARRAYOID || id.typoid != pg_sys::UUIDOID {
            return Ok(None);
        }
        Ok(Some(LineageColumns { derived_from, id, shard }))
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

/// The sources `ids` of a new memory of `org`: each a live memory of the org within the writer's
/// clearance there (22023 otherwise, a missing id and another org's alike), locked shared until
/// commit; their floors. Read as the extension owner (the writer may not read its sources).
pub fn floors(org: &str, mut ids: Vec<pgrx::Uuid>) -> Result<Floors, MxError> {
    crate::trust::require_org(Some(org))?;
    let cl = crate::trust::clearance(Some(org))?.unwrap_or_else(|| "public".into());
    let n = ids.len();
    // The org's lineage lock, then each source's, shared, in the order memory_internal._lineage_floor
    // takes them (the org's, then the sources' by id): a forget or a tightening source that holds
    // one exclusively is waited for; the sources are read after, under a new snapshot.
    crate::pg::locks::advisory_xact_shared_text(&format!("memory_ext.lineage:{org}"));
    let mut order = ids.clone();
    order.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
    for id in &order {
        crate::pg::locks::advisory_xact_shared_text(&format!("memory_ext.lineage:{id}"));
    }
    let _owner = crate::trust::AsOwner::enter()?;
    let e = MxError::spi_in("lineage");
    let types = [pg_sys::TEXTOID, pg_sys::UUIDARRAYOID, pg_sys::TEXTOID];
    Spi::connect(|client| {
        let args: [DatumWithOid; 3] = [org.into(), std::mem::take(&mut ids).into(), cl.as_str().into()];
        let row = crate::pg::spi::kept_fresh(&client, SOURCES, &types, &args).map_err(&e)?.first();
        let found = row.get::<i32>(1).map_err(&e)?.unwrap_or(0);
        if usize::try_from(found).unwrap_or(0) < n {
            let oids: Vec<pgrx::PgOid> = types.iter().map(|t| pgrx::PgOid::from(*t)).collect();
            let plan = client.prepare_mut(MISSING, &oids).map_err(&e)?;
            let miss = client.select(&plan, Some(1), &args).map_err(&e)?.first().get::<pgrx::Uuid>(1).map_err(&e)?;
            return Err(MxError::bad_argument(format!(
                "derived_from names memory {}, which is not a memory of org \"{org}\"",
                miss.map(|u| u.to_string()).unwrap_or_default()
            ))
            .hint("A memory is derived from live memories of its own org that the writer may read."));
        }
        Ok(Floors {
            tier: row.get::<String>(2).map_err(&e)?.as_deref().and_then(Tier::parse),
            worst: row.get::<i32>(3).map_err(&e)?,
            expires: row.get::<pgrx::datum::TimestampWithTimeZone>(4).map_err(&e)?.map(|t| t.into_inner()),
            purge: row.get::<pgrx::datum::TimestampWithTimeZone>(5).map_err(&e)?.map(|t| t.into_inner()),
        })
    })
}
