//! memory.search in one call (issue 48): `memory_internal._search` checks the arguments, the org
//! and the clearance, builds the plan over items, runs it through the engine, refreshes the TTL
//! of what it returns when asked, reads the items back and appends the read event; memory.search
//! (sql/recall.sql) is its typed face. The rules are `memory_core::retrieval::search`'s; here only
//! what needs the database: the org and clearance (`trust`), the embeddings' dimensions and
//! pgvector's schema, the query's words, the TTL refresh (memory_internal._item_refresh) and the
//! read-back, each a statement kept per backend.

use super::body::{query_vector, refusal, utc_text};
use super::run_plan;
use crate::errors::{code, MxError, OrRaise};
use crate::pg::identity::LocalSetting;
use crate::pg::spi::{kept, kept_mut};
use memory_core::retrieval::recall::{blank, jsonb_text};
use memory_core::retrieval::search::{self as sr, SearchArgs, FN};
use memory_core::retrieval::{filter, Plan};
use pgrx::datum::{AnyElement, DatumWithOid, TimestampWithTimeZone};
use pgrx::prelude::*;
use serde_json::value::RawValue;
use serde_json::Value;

fn spi(e: pgrx::spi::Error) -> MxError {
    MxError::spi("search", e)
}

type SearchRow = (
    pgrx::Uuid,
    Vec<Option<String>>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<TimestampWithTimeZone>,
    Option<TimestampWithTimeZone>,
    Option<TimestampWithTimeZone>,
    Option<f64>,
);

/// memory.search's body (sql/recall.sql; its arguments as memory.search takes them, `filter` as
/// jsonb's text, `query_embedding` of any of the types memory_internal._query_vector takes). Its
/// rows in order, the value and the classification as text (memory.search casts them). Runs as
/// memory.search's definer: not for PUBLIC.
#[allow(clippy::too_many_arguments)]
#[pg_extern(volatile, parallel_unsafe, schema = "memory_internal", name = "_search")]
fn search_body(
    org_id: Option<&str>,
    namespace_prefix: Option<Vec<Option<String>>>,
    query: Option<&str>,
    filter: Option<&str>,
    k: Option<i32>,
    offset: Option<i32>,
    query_embedding: Option<AnyElement>,
    refresh_ttl: Option<bool>,
    as_of: Option<TimestampWithTimeZone>,
) -> TableIterator<
    'static,
    (
        name!(id, pgrx::Uuid),
        name!(namespace, Vec<Option<String>>),
        name!(key, Option<String>),
        name!(value, Option<String>),
        name!(classification, Option<String>),
        name!(created_at, Option<TimestampWithTimeZone>),
        name!(updated_at, Option<TimestampWithTimeZone>),
        name!(expires_at, Option<TimestampWithTimeZone>),
        name!(score, Option<f64>),
    ),
> {
    // (The filter arrives as jsonb's text: serde reads no number past f64's range and no nesting
    // past 128 levels, and says so as a 22023.)
    let filter = filter
        .map(|t| {
            serde_json::from_str::<Value>(t).map_err(|e| MxError::bad_argument(format!("{FN}: filter cannot be read: {e}")).hint(filter::HINT))
        })
        .transpose()
        .or_raise();
    let prefix = namespace_prefix.unwrap_or_default();
    TableIterator::new(search(org_id, &prefix, query, filter.as_ref(), k, offset, query_embedding, refresh_ttl.unwrap_or(false), as_of).or_raise())
}

/// A plan the engine refuses (a filter's operator or value): 22023, with the filter language's
/// hint for the filter's (as memory_internal._retrieve says it).
fn plan_error(e: memory_core::retrieval::PlanError) -> MxError {
    let hint = e.0.contains("filter");
    let err = MxError::bad_argument(e.0);
    if hint {
        err.hint(filter::HINT)
    } else {
        err
    }
}

/// The items' embeddings' dimensions (memory.ann_settings; None: no embeddings) and pgvector's schema.
fn vector_setup() -> Result<(Option<i32>, Option<String>), MxError> {
    const SQL: &str = "SELECT (SELECT e.dimensions FROM memory.ann_settings e), \
                       (SELECT n.nspname::pg_catalog.text FROM pg_catalog.pg_extension e JOIN pg_catalog.pg_namespace n \
                            ON n.oid OPERATOR(pg_catalog.=) e.extnamespace WHERE e.extname OPERATOR(pg_catalog.=) 'vector')";
    Spi::connect(|client| {
        let t = kept(&client, SQL, &[], &[], None).map_err(spi)?;
        let r = t.first();
        Ok((r.get::<i32>(1).map_err(spi)?, r.get::<String>(2).map_err(spi)?))
    })
}

/// Whether the query has words to search for (numnode of websearch_to_tsquery).
fn has_words(query: &str) -> Result<bool, MxError> {
    const SQL: &str = "SELECT pg_catalog.numnode(pg_catalog.websearch_to_tsquery('english', $1)) OPERATOR(pg_catalog.>) 0";
    Spi::connect(|client| {
        let t = kept(&client, SQL, &[pg_sys::TEXTOID], &[DatumWithOid::from(query)], None).map_err(spi)?;
        Ok(t.first().get::<bool>(1).map_err(spi)?.unwrap_or(false))
    })
}

/// The returned items' TTL re-stamped (memory_internal._item_refresh, each with a ttl), of those
/// live now only: as of a time, an item expired, soft-deleted or superseded since is returned as
/// it was then, and re-stamping its expiry would bring it back to life for every reader.
fn refresh(org: &str, ids: &[String]) -> Result<(), MxError> {
    const SQL: &str = "SELECT memory_internal._item_refresh($1, o.id, o.ttl) FROM memory.observations o \
                       WHERE o.id OPERATOR(pg_catalog.=) ANY ($2::pg_catalog.uuid[]) AND o.org_id OPERATOR(pg_catalog.=) $1 AND o.ttl IS NOT NULL \
                         AND o.soft_deleted_at IS NULL AND o.superseded_at IS NULL \
                         AND (o.expires_at IS NULL OR o.expires_at OPERATOR(pg_catalog.>) pg_catalog.now())";
    Spi::connect_mut(|client| {
        kept_mut(client, SQL, &[pg_sys::TEXTOID, pg_sys::TEXTARRAYOID], &[DatumWithOid::from(org), DatumWithOid::from(ids.to_vec())]).map_err(spi)?;
        Ok(())
    })
}

/// The items read back by primary key, put in the engine's order with its scores (as of a time:
/// the value and tier of the revision valid then, when there is one). One table read by
/// `id = ANY`, whose kept plan is generic (a join of the ids' array was planned anew each call).
fn read_back(org: &str, ids: Vec<String>, scores: Vec<Option<f64>>, as_of: Option<TimestampWithTimeZone>) -> Result<Vec<SearchRow>, MxError> {
    const NOW: &str = "SELECT o.id, o.namespace, o.key, o.value::pg_catalog.text, o.classification::pg_catalog.text, \
                              o.created_at, o.updated_at, o.expires_at \
                         FROM memory.observations o \
                        WHERE o.id OPERATOR(pg_catalog.=) ANY ($2::pg_catalog.uuid[]) AND o.org_id OPERATOR(pg_catalog.=) $1";
    const THEN: &str = "SELECT o.id, o.namespace, o.key, (CASE WHEN r.rev IS NULL THEN o.value ELSE r.value END)::pg_catalog.text, \
                               (CASE WHEN r.rev IS NULL THEN o.classification ELSE r.classification END)::pg_catalog.text, \
                               o.created_at, o.updated_at, o.expires_at \
                          FROM memory.observations o \
                          LEFT JOIN LATERAL (SELECT v.rev, v.value, v.classification FROM memory.revisions v \
                                              WHERE v.org_id OPERATOR(pg_catalog.=) $1 AND v.memory_id OPERATOR(pg_catalog.=) o.id \
                                                AND v.valid_from OPERATOR(pg_catalog.<=) $3 AND v.valid_to OPERATOR(pg_catalog.>) $3 \
                                              ORDER BY v.rev DESC LIMIT 1) r ON true \
                         WHERE o.id OPERATOR(pg_catalog.=) ANY ($2::pg_catalog.uuid[]) AND o.org_id OPERATOR(pg_catalog.=) $1";
    let order: std::collections::HashMap<&str, usize> = ids.iter().enumerate().map(|(i, id)| (id.as_str(), i)).collect();
    let mut found: Vec<Option<SearchRow>> = (0..ids.len()).map(|_| None).collect();
    Spi::connect(|client| {
        let mut types = vec![pg_sys::TEXTOID, pg_sys::TEXTARRAYOID];
        let mut args = vec![DatumWithOid::from(org), DatumWithOid::from(ids.clone())];
        let sql = match as_of {
            None => NOW,
            Some(at) => {
                types.push(pg_sys::TIMESTAMPTZOID);
                args.push(DatumWithOid::from(at));
                THEN
            }
        };
        let t = kept(&client, sql, &types, &args, None).map_err(spi)?;
        for r in t {
            let Some(id) = r.get::<pgrx::Uuid>(1).map_err(spi)? else { continue };
            let Some(&i) = order.get(id.to_string().as_str()) else { continue };
            found[i] = Some((
                id,
                r.get::<Vec<Option<String>>>(2).map_err(spi)?.unwrap_or_default(),
                r.get::<String>(3).map_err(spi)?,
                r.get::<String>(4).map_err(spi)?,
                r.get::<String>(5).map_err(spi)?,
                r.get::<TimestampWithTimeZone>(6).map_err(spi)?,
                r.get::<TimestampWithTimeZone>(7).map_err(spi)?,
                r.get::<TimestampWithTimeZone>(8).map_err(spi)?,
                scores[i],
            ));
        }
        Ok::<_, MxError>(())
    })?;
    Ok(found.into_iter().flatten().collect())
}

fn internal(what: &str, e: serde_json::Error) -> MxError {
    MxError::new(code::INTERNAL, format!("memory_ext search: {what}: {e}"))
}

#[allow(clippy::too_many_arguments)]
fn search(
    org: Option<&str>,
    prefix: &[Option<String>],
    query: Option<&str>,
    filter: Option<&Value>,
    k: Option<i32>,
    offset: Option<i32>,
    embedding: Option<AnyElement>,
    refresh_ttl: bool,
    as_of: Option<TimestampWithTimeZone>,
) -> Result<Vec<SearchRow>, MxError> {
    // Input first: nothing is read or written for a call that is refused.
    let infinite = as_of.and_then(|at| match i64::from(at) {
        i64::MAX => Some("infinity"),
        i64::MIN => Some("-infinity"),
        _ => None,
    });
    sr::check_args(org, k, as_of.is_some(), infinite, offset, filter, embedding.is_some()).map_err(refusal)?;
    let (org, k, offset) = (org.unwrap_or_default(), k.unwrap_or_default(), offset.unwrap_or_default());
    // The query embedding: only once items have embeddings, of their dimensions, finite.
    let (qv, schema) = match &embedding {
        None => (None, None),
        Some(e) => {
            let (dims, schema) = vector_setup()?;
            let Some(dims) = dims else { return Err(refusal(sr::no_embeddings())) };
            (Some(query_vector(e, Some(i64::from(dims)))?), schema)
        }
    };
    // Definer: the org is checked against the calling role here.
    crate::trust::require_org(Some(org))?;
    let tier = crate::trust::clearance(Some(org))?;
    let words = match query {
        Some(q) if !blank(Some(q)) => has_words(q)?,
        _ => false,
    };
    let at = as_of.map(utc_text).transpose()?;
    let plan = sr::search_plan(&SearchArgs {
        org,
        prefix,
        query: if words { query } else { None },
        filter,
        k,
        offset,
        tier: tier.as_deref(),
        vector: qv.as_deref().map(|v| (v, schema.as_deref())),
        as_of: at.as_deref(),
    });
    let plan = Plan::from_json(&plan).map_err(plan_error)?;
    let text = run_plan(&plan, false);
    // The engine's rows: [id, content, tier, weight, score, ...]; the id and the score kept.
    let rows: Vec<Vec<&RawValue>> = serde_json::from_str(&text).map_err(|e| internal("the engine's rows", e))?;
    let mut ids = Vec::with_capacity(rows.len());
    let mut scores = Vec::with_capacity(rows.len());
    for r in &rows {
        let field = |i: usize| r.get(i).map_or("null", |f| f.get());
        ids.push(serde_json::from_str::<String>(field(0)).map_err(|e| internal("a row's id", e))?);
        scores.push(serde_json::from_str::<Option<f64>>(field(4)).map_err(|e| internal("a row's score", e))?);
    }
    drop(rows);
    let event = sr::read_event(ids.iter().map(|i| Value::String(i.clone())).collect(), k);
    let out = if ids.is_empty() {
        Vec::new()
    } else {
        // The refresh and the read-back by their generic plans (by id, through the primary key,
        // whatever the ids): PostgreSQL's plan cache, costing a custom plan of a few ids below
        // the generic one, would plan both anew on every call. For these two statements only, and
        // not where Citus is installed (a distributed plan needs the values).
        let _generic = (!crate::pg::citus::installed()).then(|| LocalSetting::set(c"plan_cache_mode", c"force_generic_plan"));
        if refresh_ttl {
            refresh(org, &ids)?;
        }
        read_back(org, ids, scores, as_of)?
    };
    crate::audit::reads::append_read(Some("memory.recall"), Some(&jsonb_text(&event)), Some(org.to_owned()), None)?;
    Ok(out)
}
