//! Duplicates at write and context packing (sql/remember.sql, SPEC §17): the shell of
//! `memory_core::dedup` (the normalised text's hash, the org's setting, memory.remember's checks
//! and lock) and `memory_core::packing` (near-duplicates, MMR, the token budget); memory.remember's
//! default (exact) mode in one call (`memory_internal._remember`).

use crate::errors::{MxError, OrRaise};
use crate::pg::locks::advisory_xact_lock;
use crate::pg::polymorphic::{again, array_argument, jsonb_argument, relation_oid};
use crate::pg::scan::{self, Key, Lookup};
use memory_core::retrieval::recall::CLASSIFICATIONS;
use crate::pg::spi::read_latest;
use memory_core::dedup::{check_setting, lock_key, norm_hash, surely_valid};
use memory_core::packing::{line_for, pack, Candidate};
use memory_core::vector::check_query_vector;
use pgrx::prelude::*;
use pgrx::datum::{AnyElement, DatumWithOid, TimestampWithTimeZone};
use pgrx::JsonB;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;

pub(crate) mod near;

/// SHA-256 (hex) of the normalised text: NFKC, case-folded, white space collapsed and trimmed.
#[pg_extern(immutable, parallel_safe, strict, schema = "memory_internal", name = "_dedup_hash")]
fn dedup_hash(content: &str) -> String {
    norm_hash(content)
}

thread_local! {
    // org -> its dedup mode (memory.org_settings.dedup; exact without a row), and the OID of
    // memory.org_settings: its row and TRUNCATE triggers invalidate its relcache entry, which
    // drops the cache (sql/retention.sql, memory_rules_changed).
    static MODES: RefCell<HashMap<String, String>> = RefCell::new(HashMap::new());
    static SETTINGS: Cell<pg_sys::Oid> = const { Cell::new(pg_sys::InvalidOid) };
    // Whether memory.org_settings is a Citus table (None: not asked since its last change). Its
    // rows then change on the shards' placements, whose triggers invalidate nothing here: no
    // mode is kept.
    static DISTRIBUTED: Cell<Option<bool>> = const { Cell::new(None) };
}

fn relcache(relid: pg_sys::Oid) {
    if relid == pg_sys::InvalidOid || relid == SETTINGS.with(Cell::get) {
        MODES.with(|m| m.borrow_mut().clear());
        DISTRIBUTED.with(|d| d.set(None));
    }
    DEDUP_REL.with(|d| {
        let drop = match d.get() {
            None => false,
            // (Not as memory_ext made them: asked again after any change of a relation.)
            Some(None) => true,
            Some(Some(r)) => relid == pg_sys::InvalidOid || relid == r.heap || relid == r.index,
        };
        if drop {
            d.set(None);
        }
    });
}

pub fn init() {
    crate::pg::callbacks::on_relcache(relcache);
}

/// The org's dedup mode for memory.remember: off, exact or near (exact when the org has no
/// settings row). Read once per backend and org, as the extension owner under a snapshot taken
/// now, until memory.org_settings changes: memory.remember's hot path then runs one statement
/// fewer. Not kept where memory.org_settings is a Citus table (its changes invalidate nothing on
/// the coordinator).
#[pg_extern(stable, parallel_restricted, schema = "memory_internal", name = "_dedup_mode")]
fn dedup_mode(org: Option<&str>) -> String {
    let key = org.unwrap_or("").to_string();
    if let Some(m) = MODES.with(|m| m.borrow().get(&key).cloned()) {
        return m;
    }
    (|| {
        let fill = crate::pg::callbacks::Fill::begin();
        let _owner = crate::trust::AsOwner::enter()?;
        let oid = crate::pg::spi::read_one::<pg_sys::Oid>("SELECT pg_catalog.to_regclass('memory.org_settings')::pg_catalog.oid", &[])
            .map_err(MxError::spi_in("remember"))?;
        let oid = oid.unwrap_or(pg_sys::InvalidOid);
        SETTINGS.with(|c| c.set(oid));
        let distributed = match DISTRIBUTED.with(Cell::get) {
            Some(d) => d,
            None => {
                let citus = crate::pg::spi::read_one::<bool>("SELECT pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL", &[])
                    .map_err(MxError::spi_in("remember"))?
                    .unwrap_or(false);
                // (pg_dist_partition exists only where Citus is installed: asked only then.)
                let d = citus
                    && crate::pg::spi::read_one::<bool>(
                        "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition WHERE logicalrelid OPERATOR(pg_catalog.=) $1)",
                        &[oid.into()],
                    )
                    .map_err(MxError::spi_in("remember"))?
                    .unwrap_or(false);
                DISTRIBUTED.with(|c| c.set(Some(d)));
                d
            }
        };
        let mode = Spi::connect(|client| {
            let r = read_latest(
                client,
                c"SELECT s.dedup FROM memory.org_settings s WHERE s.org_id OPERATOR(pg_catalog.=) $1",
                &[org.into()],
            )?;
            if r.len() == 0 {
                return Ok::<_, MxError>(None);
            }
            r.get::<String>(0, 1)
        })?
        .unwrap_or_else(|| "exact".to_string());
        if fill.keep() && !distributed {
            MODES.with(|m| m.borrow_mut().insert(key, mode.clone()));
        }
        Ok::<_, MxError>(mode)
    })()
    .or_raise()
}

thread_local! {
    // memory.remember's exact statements, prepared once per backend as writing plans (SPI then
    // takes a snapshot for each, after the advisory lock). The plan cache re-plans them after DDL.
    static EXACT: RefCell<HashMap<&'static str, pgrx::spi::OwnedPreparedStatement>> = RefCell::new(HashMap::new());
}

fn spi(e: pgrx::spi::Error) -> MxError {
    MxError::spi("remember", e)
}

/// Runs one of remember's writing statements through its kept plan.
fn kept_write<'conn>(
    client: &mut pgrx::spi::SpiClient<'conn>,
    sql: &'static str,
    types: &[pg_sys::Oid],
    args: &[DatumWithOid],
) -> Result<pgrx::spi::SpiTupleTable<'conn>, MxError> {
    if !EXACT.with(|p| p.borrow().contains_key(sql)) {
        let oids: Vec<pgrx::PgOid> = types.iter().map(|t| pgrx::PgOid::from(*t)).collect();
        let plan = client.prepare_mut(sql, &oids).map_err(spi)?.keep();
        EXACT.with(|p| p.borrow_mut().insert(sql, plan));
    }
    EXACT.with(|p| {
        let plans = p.borrow();
        client.update(plans.get(sql).expect("prepared above"), None, args).map_err(spi)
    })
}

/// The same text: the live memories of this org, user and namespace the caller is cleared for,
/// judged on their final content (a hash left behind by an UPDATE of the content is no match).
/// No order or limit (there is one at most unless the org's mode was once off): the oldest is
/// taken here, and the statement's plan is the index scan alone. $1 org, $2 hash, $3 user, $4
/// namespace, $5 tier.
const LOOKUP_C: &std::ffi::CStr = c"SELECT o.id::pg_catalog.text, o.classification::pg_catalog.text, o.created_at FROM memory.observations o
 WHERE o.org_id OPERATOR(pg_catalog.=) $1 AND o.content_sha256 OPERATOR(pg_catalog.=) $2
   AND o.user_id IS NOT DISTINCT FROM $3 AND o.namespace IS NOT DISTINCT FROM $4
   AND o.key IS NULL AND o.soft_deleted_at IS NULL AND o.superseded_at IS NULL
   AND (o.expires_at IS NULL OR o.expires_at OPERATOR(pg_catalog.>) pg_catalog.now())
   AND o.classification OPERATOR(pg_catalog.<=) $5::memory.classification
   AND memory_internal._dedup_hash(o.content) OPERATOR(pg_catalog.=) $2";
const LOOKUP_SQL: &str = match LOOKUP_C.to_str() {
    Ok(s) => s,
    Err(_) => panic!("the lookup is UTF-8"),
};

/// The new memory. $1 org, $2 hash, $3 user, $4 session, $5 memory_type, $6 metadata, $7
/// namespace, $8 content, $9 derived_from. The tier returned by comparisons, not the enum's
/// output function: Citus allows only IMMUTABLE functions in a RETURNING clause (enum_out is STABLE),
/// and a searched CASE (Citus deparses `CASE x WHEN` for its workers as a comparison with a boolean).
const INSERT_SQL: &str = "INSERT INTO memory.observations AS o (org_id, user_id, session_id, memory_type, metadata, content, namespace, content_sha256, last_seen_at, derived_from)
VALUES ($1, $3, $4, $5::memory.memory_type, $6, $8, $7, $2, pg_catalog.now(), $9)
RETURNING o.id::pg_catalog.text,
          CASE WHEN o.classification OPERATOR(pg_catalog.=) 'public'::memory.classification THEN 'public'
               WHEN o.classification OPERATOR(pg_catalog.=) 'internal'::memory.classification THEN 'internal'
               WHEN o.classification OPERATOR(pg_catalog.=) 'confidential'::memory.classification THEN 'confidential'
               WHEN o.classification OPERATOR(pg_catalog.=) 'restricted'::memory.classification THEN 'restricted' END";

/// memory.observations, its index observations_dedup (org_id, content_sha256) and the columns of
/// the exact lookup, by number: what `lookup_direct` reads.
#[derive(Clone, Copy)]
struct DedupRel {
    heap: pg_sys::Oid,
    index: pg_sys::Oid,
    id: i16,
    user_id: i16,
    row: RowTest,
    content: i16,
    created_at: i16,
}

/// The columns both direct lookups (the exact one here, the near one in `near`) test a row by:
/// liveness, namespace and clearance, of the types their statements read them as.
#[derive(Clone, Copy)]
pub(crate) struct RowTest {
    namespace: i16,
    key: i16,
    soft_deleted_at: i16,
    superseded_at: i16,
    expires_at: i16,
    classification: i16,
}

impl RowTest {
    /// `heap`'s columns (None where one is missing or of another type).
    pub(crate) fn read(heap: pg_sys::Oid) -> Option<RowTest> {
        let col = |name: &std::ffi::CStr, typ: pg_sys::Oid| scan::attnum(heap, name).filter(|&n| scan::atttype(heap, n) == typ);
        let tz = pg_sys::TIMESTAMPTZOID;
        Some(RowTest {
            namespace: col(c"namespace", pg_sys::TEXTARRAYOID)?,
            key: col(c"key", pg_sys::TEXTOID)?,
            soft_deleted_at: col(c"soft_deleted_at", tz)?,
            superseded_at: col(c"superseded_at", tz)?,
            expires_at: col(c"expires_at", tz)?,
            classification: scan::attnum(heap, c"classification").filter(|&n| crate::pg::varlena::type_is_enum(scan::atttype(heap, n)))?,
        })
    }

    /// The tier of the scan's row when it is a live memory (no key, neither deleted nor
    /// superseded, not expired at `now`) of namespace `ns` (NULL only with NULL) within the
    /// clearance of rank `limit` (`CLASSIFICATIONS`' order), as the statements test it; else None.
    pub(crate) fn tier(&self, scan: &scan::Scan<'_>, now: i64, ns: Option<pg_sys::Datum>, limit: usize) -> Option<String> {
        if scan.datum(self.key).is_some() || scan.datum(self.soft_deleted_at).is_some() || scan.datum(self.superseded_at).is_some() {
            return None;
        }
        if scan.datum(self.expires_at).is_some_and(|d| d.value() as i64 <= now) {
            return None;
        }
        match (scan.datum(self.namespace), ns) {
            (None, None) => {}
            (Some(a), Some(b)) if scan::arrays_equal(a, b, pg_sys::DEFAULT_COLLATION_OID) => {}
            _ => return None,
        }
        let c = scan.datum(self.classification)?;
        let label = pgrx::enum_helper::lookup_enum_by_oid(pg_sys::Oid::from(c.value() as u32)).0;
        CLASSIFICATIONS.iter().position(|t| *t == label).is_some_and(|x| x <= limit).then_some(label)
    }
}

thread_local! {
    // None: not read since the table or its index last changed; Some(None): they are not as
    // memory_ext made them (the lookup stays the statement).
    static DEDUP_REL: Cell<Option<Option<DedupRel>>> = const { Cell::new(None) };
}

fn dedup_rel() -> Option<DedupRel> {
    if let Some(r) = DEDUP_REL.with(Cell::get) {
        return r;
    }
    let fill = crate::pg::callbacks::Fill::begin();
    let r = read_dedup_rel();
    if fill.keep() {
        DEDUP_REL.with(|d| d.set(Some(r)));
    }
    r
}

/// The relations and columns as memory_ext makes them (the columns of the types the lookup reads
/// them as, the index's leading keys org_id and content_sha256), else None.
fn read_dedup_rel() -> Option<DedupRel> {
    let heap = relation_oid(c"memory", c"observations");
    let index = relation_oid(c"memory", c"observations_dedup");
    if heap == pg_sys::InvalidOid || index == pg_sys::InvalidOid {
        return None;
    }
    let col = |name: &std::ffi::CStr, typ: pg_sys::Oid| scan::attnum(heap, name).filter(|&n| scan::atttype(heap, n) == typ);
    let (text, tz) = (pg_sys::TEXTOID, pg_sys::TIMESTAMPTZOID);
    let keys = scan::index_key_columns(index)?;
    if keys.len() < 2 || Some(keys[0]) != col(c"org_id", text) || Some(keys[1]) != col(c"content_sha256", text) {
        return None;
    }
    Some(DedupRel {
        heap,
        index,
        id: col(c"id", pg_sys::UUIDOID)?,
        user_id: col(c"user_id", text)?,
        row: RowTest::read(heap)?,
        content: col(c"content", text)?,
        created_at: col(c"created_at", tz)?,
    })
}

/// A uuid's text (as uuid_out writes it).
fn uuid_text(b: &[u8; 16]) -> String {
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32])
}

/// The exact lookup (LOOKUP_SQL's rows: id, tier, created_at in microseconds) without the
/// executor: an index scan of observations_dedup under the snapshot a writing statement would
/// take now (`scan::Lookup::begin`, after the advisory lock), each row tested here as the
/// statement's conditions test it. None where it does not apply: Citus in this database (its
/// tables' rows are on the workers), or the table or index not as memory_ext made them; the
/// statement reads then. Reads as the definer (memory_ext's own table: no privilege or row-level
/// security to check, as for the statement run by the table's owner).
fn lookup_direct(org: &str, h: &str, user: Option<&str>, ns: Option<pg_sys::Datum>, tier: Option<&str>) -> Result<Option<Vec<(i64, String, Option<String>)>>, MxError> {
    if crate::pg::citus::installed() {
        return Ok(None);
    }
    let Some(r) = dedup_rel() else { return Ok(None) };
    let rank = |l: &str| CLASSIFICATIONS.iter().position(|c| *c == l);
    // (A NULL clearance clears no tier: `classification <= NULL` holds for no row.)
    let Some(limit) = tier.and_then(rank) else { return Ok(Some(Vec::new())) };
    let (Some(org_d), Some(h_d)) = (org.into_datum(), h.into_datum()) else { return Ok(None) };
    let lookup = Lookup::begin();
    let mut scan = match lookup.backward(r.heap, r.index, &[Key::eq(1, pg_sys::F_TEXTEQ, org_d), Key::eq(2, pg_sys::F_TEXTEQ, h_d)]) {
        Ok(scan) => scan,
        // An index left invalid (a failed CREATE INDEX CONCURRENTLY under its name) or made
        // another way (not a btree): the statement, which the planner plans as it may. (A
        // relation dropped meanwhile is 40001, as the statement would meet it.)
        Err(e) if e.sqlstate != crate::errors::code::SERIALIZATION_FAILURE => return Ok(None),
        Err(e) => return Err(e),
    };
    let now = crate::pg::xact::xact_start_micros();
    let mut out = Vec::new();
    while scan.next() {
        if scan.bytes(r.user_id) != user.map(str::as_bytes) {
            continue;
        }
        let Some(label) = r.row.tier(&scan, now, ns, limit) else { continue };
        // A hash left behind by an UPDATE of the content is no match.
        if scan.bytes(r.content).is_none_or(|t| norm_hash(&String::from_utf8_lossy(t)) != h) {
            continue;
        }
        let (Some(id), Some(at)) = (scan.uuid(r.id), scan.datum(r.created_at)) else { continue };
        out.push((at.value() as i64, uuid_text(&id), Some(label)));
    }
    Ok(Some(out))
}

/// A duplicate met again.
const SEEN_SQL: &str = "UPDATE memory.observations o SET last_seen_at = pg_catalog.now(), seen_count = o.seen_count OPERATOR(pg_catalog.+) 1
 WHERE o.org_id OPERATOR(pg_catalog.=) $1 AND o.id OPERATOR(pg_catalog.=) $2::pg_catalog.uuid";

/// memory.remember (SECURITY DEFINER, SET search_path; declared in sql/remember.sql, not for
/// PUBLIC): the arguments (memory_internal._remember_check raises what is wrong, called only when
/// `memory_core::dedup::surely_valid` is not sure), the org (memory_internal._require_org's 42501
/// likewise), then in the exact mode (the default) the clearance, the hash, the advisory lock on
/// the org and hash, the lookup and the INSERT (kept statements), the seen_count of a duplicate and
/// a given embedding; in the org's other modes (near, off), memory_internal._remember_other.
/// `memory_type` is the memory.memory_type value (an enum's oid); `metadata` jsonb.
#[allow(clippy::too_many_arguments)]
#[pg_extern(volatile, parallel_unsafe, sql = false)]
fn remember(
    org: Option<&str>,
    content: Option<&str>,
    user_id: Option<&str>,
    session_id: Option<&str>,
    memory_type: Option<pg_sys::Oid>,
    metadata: Option<AnyElement>,
    embedding: Option<pgrx::datum::Array<'_, f32>>,
    namespace: Option<pgrx::datum::Array<'_, &str>>,
    derived_from: Option<pgrx::datum::Array<'_, pgrx::Uuid>>,
) -> Option<JsonB> {
    let label = memory_type.map(|t| pgrx::enum_helper::lookup_enum_by_oid(t).0);
    remember_call(org, content, user_id, session_id, label.as_deref(), metadata.as_ref(), embedding, namespace, derived_from).or_raise()
}

/// memory.remember's near and off modes, after the checks: $5 the memory type's label.
const OTHER_SQL: &str = "SELECT memory_internal._remember_other($1, $2, $3, $4, $5::memory.memory_type, $6, $7, $8, $9)";

#[allow(clippy::too_many_arguments)]
fn remember_call(
    org: Option<&str>,
    content: Option<&str>,
    user_id: Option<&str>,
    session_id: Option<&str>,
    memory_type: Option<&str>,
    metadata: Option<&AnyElement>,
    embedding: Option<pgrx::datum::Array<'_, f32>>,
    namespace: Option<pgrx::datum::Array<'_, &str>>,
    derived_from: Option<pgrx::datum::Array<'_, pgrx::Uuid>>,
) -> Result<Option<JsonB>, MxError> {
    // The namespace's labels (pgrx flattens an array of more than one dimension: the checks judge that).
    let (labels, ns) = match namespace {
        None => (None, DatumWithOid::null_oid(pg_sys::TEXTARRAYOID)),
        Some(a) => {
            let labels: Vec<Option<String>> = a.iter().map(|l| l.map(str::to_owned)).collect();
            let (arg, dims) = array_argument(a, pg_sys::TEXTARRAYOID);
            (Some((labels, dims == 1)), arg)
        }
    };
    let flat: Option<Vec<Option<&str>>> = labels.as_ref().map(|(l, _)| l.iter().map(Option::as_deref).collect());
    let (meta, object) = match metadata {
        None => (DatumWithOid::null_oid(pg_sys::JSONBOID), false),
        Some(m) => jsonb_argument(m),
    };
    // An embedding is surely valid when the table has its column and it is one-dimensional, of the
    // column's dimensions, finite and not all zero (`memory_core::vector`, as _embedding_check).
    let (emb, emb_unsure) = match embedding {
        None => (DatumWithOid::null_oid(pg_sys::FLOAT4ARRAYOID), false),
        Some(a) => {
            let components: Vec<Option<f32>> = a.iter().collect();
            let (arg, ndims) = array_argument(a, pg_sys::FLOAT4ARRAYOID);
            let dims = crate::recall::body::observations_dims()?.and_then(|d| usize::try_from(d).ok());
            (arg, !(ndims == 1 && dims.is_some() && check_query_vector(components.into_iter(), dims).is_ok()))
        }
    };
    let sure = labels.as_ref().is_none_or(|(_, one)| *one)
        && surely_valid(org, content, user_id, memory_type.is_some(), object, emb_unsure, flat.as_deref());
    let derived = derived_from.map_or(DatumWithOid::null_oid(pg_sys::UUIDARRAYOID), |a| array_argument(a, pg_sys::UUIDARRAYOID).0);
    Spi::connect_mut(|client| {
        // The arguments first (22023: nothing is written for a call that is refused), then the org (42501).
        if !sure {
            client
                .select(
                    "SELECT memory_internal._remember_check($1, $2, $3, $4::memory.memory_type, $5, $6, $7)",
                    None,
                    &[org.into(), content.into(), user_id.into(), memory_type.into(), again(&meta), again(&emb), again(&ns)],
                )
                .map_err(spi)?;
        }
        if !(crate::trust::require_org_setting().is_ok() && crate::trust::may_act_for(org)?) {
            client.select("SELECT memory_internal._require_org($1)", None, &[org.into()]).map_err(spi)?;
        }
        let org = org.unwrap_or_default();
        if dedup_mode(Some(org)) != "exact" {
            let t = kept_write(
                client,
                OTHER_SQL,
                &[
                    pg_sys::TEXTOID,
                    pg_sys::TEXTOID,
                    pg_sys::TEXTOID,
                    pg_sys::TEXTOID,
                    pg_sys::TEXTOID,
                    pg_sys::JSONBOID,
                    pg_sys::FLOAT4ARRAYOID,
                    pg_sys::TEXTARRAYOID,
                    pg_sys::UUIDARRAYOID,
                ],
                &[org.into(), content.into(), user_id.into(), session_id.into(), memory_type.into(), meta, emb, ns, derived],
            )?;
            return t.first().get::<JsonB>(1).map_err(spi);
        }
        let tier = crate::trust::clearance(Some(org))?;
        let content = content.unwrap_or_default();
        let h = norm_hash(content);
        advisory_xact_lock(lock_key(org, &h));
        // (Each statement takes its snapshot after the lock: a writing plan.)
        let rows = match lookup_direct(org, &h, user_id, ns.datum().map(pgrx::datum::Datum::sans_lifetime), tier.as_deref())? {
            Some(rows) => rows,
            None => {
                let t = kept_write(
                    client,
                    LOOKUP_SQL,
                    &[pg_sys::TEXTOID, pg_sys::TEXTOID, pg_sys::TEXTOID, pg_sys::TEXTARRAYOID, pg_sys::TEXTOID],
                    &[org.into(), h.as_str().into(), user_id.into(), again(&ns), tier.as_deref().into()],
                )?;
                let mut rows = Vec::new();
                for row in t {
                    let (id, cls, at) = (row.get::<String>(1).map_err(spi)?, row.get::<String>(2).map_err(spi)?, row.get::<TimestampWithTimeZone>(3).map_err(spi)?);
                    if let (Some(id), Some(at)) = (id, at) {
                        rows.push((i64::from(at), id, cls));
                    }
                }
                rows
            }
        };
        let mut hit: Option<(i64, String, Option<String>)> = None;
        for (at, id, cls) in rows {
            // The oldest, then the least id (uuid's text orders as its bytes).
            if hit.as_ref().is_none_or(|(a, i, _)| (at, &id) < (*a, i)) {
                hit = Some((at, id, cls));
            }
        }
        if let Some((_, id, cls)) = hit {
            kept_write(client, SEEN_SQL, &[pg_sys::TEXTOID, pg_sys::TEXTOID], &[org.into(), id.as_str().into()])?;
            return Ok(Some(JsonB(serde_json::json!({ "id": id, "classification": cls, "status": "duplicate", "duplicate_of": id }))));
        }
        // At REPEATABLE READ or SERIALIZABLE the lookup reads under the transaction's snapshot: a
        // duplicate committed since (by a call this one waited for on the lock, or before it) is
        // not seen, and would be stored a second time. Asked again under a snapshot taken now, it
        // is a serialization failure (as INSERT ... ON CONFLICT meets an invisible conflict).
        if crate::pg::xact::uses_xact_snapshot()
            && read_latest(client, LOOKUP_C, &[org.into(), h.as_str().into(), user_id.into(), again(&ns), tier.as_deref().into()])?.len() > 0
        {
            return Err(MxError::new(
                crate::errors::code::SERIALIZATION_FAILURE,
                "memory.remember: another transaction remembered the same text after this transaction's snapshot was taken",
            )
            .hint("Retry the transaction: at REPEATABLE READ or SERIALIZABLE it cannot see the memory to return it as a duplicate."));
        }
        let t = kept_write(
            client,
            INSERT_SQL,
            &[
                pg_sys::TEXTOID,
                pg_sys::TEXTOID,
                pg_sys::TEXTOID,
                pg_sys::TEXTOID,
                pg_sys::TEXTOID,
                pg_sys::JSONBOID,
                pg_sys::TEXTARRAYOID,
                pg_sys::TEXTOID,
                pg_sys::UUIDARRAYOID,
            ],
            &[org.into(), h.as_str().into(), user_id.into(), session_id.into(), memory_type.into(), meta, ns, content.into(), derived],
        )?;
        let row = t.first();
        let (id, cls) = (row.get::<String>(1).map_err(spi)?, row.get::<String>(2).map_err(spi)?);
        let id = id.ok_or_else(|| MxError::new(crate::errors::code::INTERNAL, "memory.remember: the INSERT returned no row"))?;
        if emb.datum().is_some() {
            let schema = crate::pg::spi::read_one::<String>("SELECT memory_internal._vector_schema()", &[]).map_err(spi)?.unwrap_or_default();
            let sql = format!(
                "UPDATE memory.observations o SET embedding = $1::{}.vector WHERE o.org_id OPERATOR(pg_catalog.=) $2 AND o.id OPERATOR(pg_catalog.=) $3::pg_catalog.uuid",
                pgrx::spi::quote_identifier(&schema)
            );
            client.update(sql.as_str(), None, &[emb, org.into(), id.as_str().into()]).map_err(spi)?;
        }
        Ok(Some(JsonB(serde_json::json!({ "id": id, "classification": cls, "status": "created", "duplicate_of": null }))))
    })
}

/// 22023 unless `mode` is off, exact or near and `threshold` is in (0, 1].
#[pg_extern(immutable, parallel_safe, schema = "memory_internal", name = "_dedup_setting_check")]
fn dedup_setting_check(mode: Option<&str>, threshold: Option<f64>) -> bool {
    check_setting(mode.unwrap_or("NULL"), threshold.unwrap_or(f64::NAN))
        .map_err(|e| MxError::bad_argument(format!("memory.org_settings: {e}")).hint(
            "dedup is off, exact (the default) or near; dedup_threshold a number in (0, 1] (default 0.95).",
        ))
        .or_raise();
    true
}

fn candidate(v: &serde_json::Value) -> Option<Candidate> {
    let id = v.get("id")?.as_str()?;
    let content = v.get("content")?.as_str()?;
    let date = v.get("date").and_then(|d| d.as_str()).unwrap_or("");
    let embedding = v
        .get("embedding")
        .and_then(|e| e.as_array())
        .and_then(|a| a.iter().map(|x| x.as_f64().map(|f| f as f32)).collect::<Option<Vec<f32>>>());
    Some(Candidate {
        id: id.to_string(),
        line: line_for(id, date, content),
        text: content.to_string(),
        score: v.get("score").and_then(|s| s.as_f64()).unwrap_or(0.0),
        embedding,
    })
}

/// memory.context's block from recall's rows (a JSON array of {id, date, content, score,
/// embedding}, best first, as text: any jsonb is then a clean 22023 or a block): {text, ids,
/// tokens, omitted}. The budget and diversity are checked by the caller.
#[pg_extern(immutable, parallel_safe, strict, schema = "memory_internal", name = "_context_pack")]
fn context_pack(candidates: &str, budget: i32, diversity: f64, near: f64) -> JsonB {
    let rows: Vec<serde_json::Value> = serde_json::from_str(candidates)
        .map_err(|e| MxError::bad_argument(format!("memory_internal._context_pack: the candidates are not a JSON array ({e})")))
        .or_raise();
    let Some(cands) = rows.iter().map(candidate).collect::<Option<Vec<Candidate>>>() else {
        MxError::bad_argument("memory_internal._context_pack: a candidate lacks its id or content").raise()
    };
    let p = pack(&cands, usize::try_from(budget).unwrap_or(0), diversity.clamp(0.0, 1.0), near);
    JsonB(serde_json::json!({ "text": p.text, "ids": p.ids, "tokens": p.tokens, "omitted": p.omitted }))
}
