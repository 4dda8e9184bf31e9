//! memory.remember's near neighbour by embedding among a user's memories without the executor
//! (memory_internal._remember_nearest, called by _remember_near in sql/remember.sql): an index
//! scan of observations_user under the snapshot a statement takes, each row's conditions tested
//! as the statement tests them, each distance by pgvector's own cosine_distance (issue 49: the
//! statement's planning, executor and sort were a fifth of a merge at a million memories).

use crate::errors::{MxError, OrRaise};
use crate::pg::polymorphic::{array_argument, relation_oid};
use crate::pg::scan::{self, Key, Lookup};
use crate::pg::spi::read_latest;
use memory_core::retrieval::recall::CLASSIFICATIONS;
use pgrx::prelude::*;
use std::cell::Cell;

/// memory.observations, its index observations_user (user_id, org_id) and the columns of the near
/// neighbour's pass, by number, with pgvector's `cosine_distance(vector, vector)`: what
/// `nearest_direct` reads.
#[derive(Clone, Copy)]
struct NearRel {
    heap: pg_sys::Oid,
    index: pg_sys::Oid,
    id: i16,
    row: super::RowTest,
    created_at: i16,
    embedding: i16,
    distance: pg_sys::Oid,
}

thread_local! {
    // The pass's relations as read at an invalidation generation (`callbacks::Fill`): any
    // relcache or role invalidation since reads them again. None inside: not as memory_ext made
    // them, or no pgvector (the statement then).
    static NEAR_REL: Cell<Option<(u64, Option<NearRel>)>> = const { Cell::new(None) };
}

fn near_rel() -> Result<Option<NearRel>, MxError> {
    let fill = crate::pg::callbacks::Fill::begin();
    if let Some((g, r)) = NEAR_REL.with(Cell::get) {
        if g == fill.generation() {
            return Ok(r);
        }
    }
    let r = read_near_rel()?;
    if fill.keep() {
        NEAR_REL.with(|c| c.set(Some((fill.generation(), r))));
    }
    Ok(r)
}

fn read_near_rel() -> Result<Option<NearRel>, MxError> {
    let heap = relation_oid(c"memory", c"observations");
    let index = relation_oid(c"memory", c"observations_user");
    if heap == pg_sys::InvalidOid || index == pg_sys::InvalidOid {
        return Ok(None);
    }
    // pgvector's vector type and cosine_distance(vector, vector), in the schema it was created in.
    const SQL: &std::ffi::CStr = c"SELECT t.oid, pg_catalog.to_regprocedure(pg_catalog.format('%I.cosine_distance(%I.vector, %I.vector)', n.nspname, n.nspname, n.nspname))::pg_catalog.oid \
        FROM pg_catalog.pg_extension e JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) e.extnamespace \
        JOIN pg_catalog.pg_type t ON t.typnamespace OPERATOR(pg_catalog.=) n.oid AND t.typname OPERATOR(pg_catalog.=) 'vector' \
        WHERE e.extname OPERATOR(pg_catalog.=) 'vector'";
    let (vector, distance) = Spi::connect(|client| {
        let r = read_latest(&client, SQL, &[])?;
        if r.len() == 0 {
            return Ok::<_, MxError>((None, None));
        }
        Ok((r.get::<pg_sys::Oid>(0, 1)?, r.get::<pg_sys::Oid>(0, 2)?))
    })?;
    let (Some(vector), Some(distance)) = (vector, distance) else { return Ok(None) };
    let col = |name: &std::ffi::CStr, typ: pg_sys::Oid| scan::attnum(heap, name).filter(|&n| scan::atttype(heap, n) == typ);
    let (text, tz) = (pg_sys::TEXTOID, pg_sys::TIMESTAMPTZOID);
    let Some(keys) = scan::index_key_columns(index) else { return Ok(None) };
    if keys.len() < 2 || Some(keys[0]) != col(c"user_id", text) || Some(keys[1]) != col(c"org_id", text) {
        return Ok(None);
    }
    Ok((|| {
        Some(NearRel {
            heap,
            index,
            id: col(c"id", pg_sys::UUIDOID)?,
            row: super::RowTest::read(heap)?,
            created_at: col(c"created_at", tz)?,
            embedding: col(c"embedding", vector)?,
            distance,
        })
    })())
}

/// memory.remember's near neighbour by embedding of a user's memories without the executor: an
/// index scan of observations_user (the user and the org) under the snapshot a statement would
/// take, each row's conditions tested as memory_internal._remember_near's statement tests them
/// (live, no key, its namespace, an embedding, within the clearance `tier`), each distance by
/// pgvector's own cosine_distance; the nearest (NaN last), then the oldest, then the smallest id.
/// One row: (id, similarity, true), (NULL, NULL, true) when there is none, or (NULL, NULL, false)
/// where the relations are not as memory_ext made them, pgvector is not there or Citus is (the
/// statement then; also for a NULL org, user or embedding). Called by _remember_near as memory.remember's definer; not for PUBLIC.
#[pg_extern(volatile, parallel_unsafe, schema = "memory_internal", name = "_remember_nearest")]
fn remember_nearest(
    org: Option<&str>,
    user_id: Option<&str>,
    namespace: Option<pgrx::datum::Array<'_, &str>>,
    embedding: Option<pgrx::datum::Array<'_, f32>>,
    tier: Option<&str>,
) -> TableIterator<'static, (name!(id, Option<pgrx::Uuid>), name!(similarity, Option<f64>), name!(direct, bool))> {
    // No org, user or embedding: not a read this path makes (the statement's, as without a user).
    let (Some(org), Some(user_id), Some(embedding)) = (org, user_id, embedding) else {
        return TableIterator::once((None, None, false));
    };
    let found = nearest_direct(org, user_id, namespace, embedding, tier).or_raise();
    let row = match found {
        None => (None, None, false),
        Some(None) => (None, None, true),
        Some(Some((id, sim))) => (Some(pgrx::Uuid::from_bytes(id)), Some(sim), true),
    };
    TableIterator::once(row)
}

/// ORDER BY distance (NaN after every number), created_at, id: whether `a` comes before `b`.
fn before(a: (f64, i64, [u8; 16]), b: (f64, i64, [u8; 16])) -> bool {
    let by = match (a.0.is_nan(), b.0.is_nan()) {
        (true, true) => std::cmp::Ordering::Equal,
        (true, false) => std::cmp::Ordering::Greater,
        (false, true) => std::cmp::Ordering::Less,
        (false, false) => a.0.partial_cmp(&b.0).unwrap_or(std::cmp::Ordering::Equal),
    };
    by.then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)).is_lt()
}

fn nearest_direct(
    org: &str,
    user_id: &str,
    namespace: Option<pgrx::datum::Array<'_, &str>>,
    embedding: pgrx::datum::Array<'_, f32>,
    tier: Option<&str>,
) -> Result<Option<Option<([u8; 16], f64)>>, MxError> {
    if crate::pg::citus::installed() {
        return Ok(None);
    }
    let Some(r) = near_rel()? else { return Ok(None) };
    let components: Option<Vec<f32>> = embedding.iter().collect();
    let Some(components) = components else { return Ok(None) };
    let rank = |l: &str| CLASSIFICATIONS.iter().position(|c| *c == l);
    // (A NULL clearance clears no tier: `classification <= NULL` holds for no row.)
    let Some(limit) = tier.and_then(rank) else { return Ok(Some(None)) };
    let ns = namespace.map(|a| array_argument(a, pg_sys::TEXTARRAYOID).0);
    let ns = ns.as_ref().and_then(|d| d.datum().map(pgrx::datum::Datum::sans_lifetime));
    let (Some(org_d), Some(user_d)) = (org.into_datum(), user_id.into_datum()) else { return Ok(None) };
    let query = crate::pg::vector::vector_datum(&components);
    let mut distance = crate::pg::vector::Distance::new(r.distance);
    let lookup = Lookup::begin();
    let mut scan = match lookup.backward(r.heap, r.index, &[Key::eq(1, pg_sys::F_TEXTEQ, user_d), Key::eq(2, pg_sys::F_TEXTEQ, org_d)]) {
        Ok(scan) => scan,
        Err(e) if e.sqlstate != crate::errors::code::SERIALIZATION_FAILURE => return Ok(None),
        Err(e) => return Err(e),
    };
    let now = crate::pg::xact::xact_start_micros();
    // (distance, created_at, id) of the best so far.
    let mut best: Option<(f64, i64, [u8; 16])> = None;
    while scan.next() {
        if r.row.tier(&scan, now, ns, limit).is_none() {
            continue;
        }
        let Some(e) = scan.datum(r.embedding) else { continue };
        let (Some(id), Some(at)) = (scan.uuid(r.id), scan.datum(r.created_at)) else { continue };
        let cand = (distance.between(e, query), at.value() as i64, id);
        if best.is_none_or(|b| before(cand, b)) {
            best = Some(cand);
        }
    }
    Ok(Some(best.map(|(d, _, id)| (id, 1.0 - d))))
}
