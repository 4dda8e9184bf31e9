//! memory.recall in one call (issue 47): a C function (`recall_typed`, declared by sql/recall.sql)
//! checks the arguments, the org, the clearance and the source, builds the plan, runs it through
//! the engine, appends the read event and returns the typed rows. The rules are
//! `memory_core::retrieval::recall`'s; here only what needs the database: the org and clearance
//! (`trust`), a governed table's mapping and a timestamp filter's parsing (their SQL functions,
//! memory_internal._recall_columns and _recall_filters), the query's words, and the embedding
//! column's dimensions (kept per backend until an invalidation).

use super::{refuse, run_plan};
use crate::errors::{code, MxError, OrRaise};
use crate::pg::input;
use crate::pg::polymorphic::{self, regclass_text, relation_names};
use crate::pg::spi::kept;
use memory_core::retrieval::recall::{self as rc, RecallArgs, Refusal};
use memory_core::retrieval::Plan;
use memory_core::vector::{parse_query_vector, query_vector_text, to_f32, QueryVectorError};
use pgrx::datum::{AnyElement, DatumWithOid, TimestampWithTimeZone};
use pgrx::prelude::*;
use serde_json::{Map, Value};

const FN: &str = "memory.recall";

pub(super) fn refusal(r: Refusal) -> MxError {
    let e = MxError::new(r.code, r.message);
    match r.hint {
        Some(h) => e.hint(h),
        None => e,
    }
}

fn spi(e: pgrx::spi::Error) -> MxError {
    MxError::spi("recall", e)
}

/// One row of memory.recall, each value of its column's type: uuid, text, memory.classification
/// and memory.memory_type (an enum value is its label's oid), float8, timestamptz, int4 and jsonb
/// (`AnyElement`: a datum and its type, as the type's input function made it).
type RecallRow = (
    Option<AnyElement>,
    Option<String>,
    Option<pg_sys::Oid>,
    Option<f64>,
    Option<f64>,
    Option<AnyElement>,
    Option<String>,
    Option<String>,
    Option<pg_sys::Oid>,
    Option<i32>,
    Option<i32>,
    Option<AnyElement>,
);

/// A row as the engine returns it: its values as text where memory.recall's columns have other
/// types (the uuid, the enums' labels, the time, the metadata's JSON text).
type EngineRow = (
    Option<String>,
    Option<String>,
    Option<String>,
    Option<f64>,
    Option<f64>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<i32>,
    Option<i32>,
    Option<String>,
);

/// memory.recall itself: sql/recall.sql declares it (`LANGUAGE c`, SECURITY DEFINER, its
/// arguments, defaults and columns); this entry point has no SQL of its own. `filters` is the
/// jsonb argument, `source` a regclass's oid, `query_embedding` of any of the types
/// memory_internal._query_vector takes. Its rows in order, each value made by its type's input
/// function from the engine's text as a cast from text makes it (uuid, timestamptz, the enums,
/// jsonb); a label that is not the enum's is NULL. (Was: a PL/pgSQL wrapper casting the text
/// rows of memory_internal._recall, a statement and two tuplestores a call.)
#[allow(clippy::too_many_arguments)]
#[pg_extern(volatile, parallel_unsafe, sql = false)]
fn recall_typed(
    org_id: Option<&str>,
    query: Option<&str>,
    k: Option<i32>,
    project_id: Option<&str>,
    filters: Option<AnyElement>,
    query_embedding: Option<AnyElement>,
    source: Option<pg_sys::Oid>,
    as_of: Option<TimestampWithTimeZone>,
) -> TableIterator<
    'static,
    (
        name!(id, Option<AnyElement>),
        name!(content, Option<String>),
        name!(classification, Option<pg_sys::Oid>),
        name!(weight, Option<f64>),
        name!(score, Option<f64>),
        name!(created_at, Option<AnyElement>),
        name!(user_id, Option<String>),
        name!(session_id, Option<String>),
        name!(memory_type, Option<pg_sys::Oid>),
        name!(lexical_rank, Option<i32>),
        name!(vector_rank, Option<i32>),
        name!(metadata, Option<AnyElement>),
    ),
> {
    // (filters as jsonb's text: serde reads no number past f64's range and no nesting past 128
    // levels, and says so as a 22023 rather than failing inside pgrx.)
    let filters = filters
        .map(|f| {
            serde_json::from_str::<Value>(&input::jsonb_text(&f))
                .map_err(|e| MxError::bad_argument(format!("memory.recall filters cannot be read: {e}")).hint(rc::FILTERS_HINT))
        })
        .transpose()
        .or_raise();
    TableIterator::new(recall(org_id, query, k, project_id, filters, query_embedding, source, as_of).or_raise())
}

/// The engine's rows as memory.recall's typed rows.
fn typed_rows(rows: Vec<EngineRow>) -> Result<Vec<RecallRow>, MxError> {
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let class = input::type_oid(c"memory.classification")?;
    let mtype = input::type_oid(c"memory.memory_type")?;
    let label = |t: String, typoid| input::from_text(pg_sys::enum_in, &t, typoid).map(input::oid_of);
    rows.into_iter()
        .map(|(id, content, tier, weight, score, created_at, user_id, session_id, memory_type, lexical_rank, vector_rank, metadata)| {
            Ok((
                id.map(|t| input::value_from_text(pg_sys::uuid_in, &t, pg_sys::UUIDOID)).transpose()?,
                content,
                tier.map(|t| label(t, class)).transpose()?,
                weight,
                score,
                created_at.map(|t| input::value_from_text(pg_sys::timestamptz_in, &t, pg_sys::TIMESTAMPTZOID)).transpose()?,
                user_id,
                session_id,
                memory_type.map(|t| label(t, mtype)).transpose()?,
                lexical_rank,
                vector_rank,
                metadata.map(|t| input::value_from_text(pg_sys::jsonb_in, &t, pg_sys::JSONBOID)).transpose()?,
            ))
        })
        .collect()
}

/// The one pass's typed rows as memory.recall's rows: the values as they are (a uuid, a time, the
/// metadata's jsonb), the enums' labels by their input function (a label that is not the enum's
/// NULL, as `typed_rows` gives); a metadata of JSON null is SQL NULL, as the engine's JSON row
/// gives it.
fn rows_of_typed(rows: Vec<super::TypedRow>) -> Result<Vec<RecallRow>, MxError> {
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let class = input::type_oid(c"memory.classification")?;
    let mtype = input::type_oid(c"memory.memory_type")?;
    let label = |t: Option<String>, labels: &[&str], typoid| {
        t.filter(|t| labels.contains(&t.as_str())).map(|t| input::from_text(pg_sys::enum_in, &t, typoid).map(input::oid_of)).transpose()
    };
    rows.into_iter()
        .map(|r| {
            Ok((
                r.id.and_then(input::value_of),
                r.content,
                label(r.tier, &rc::CLASSIFICATIONS, class)?,
                r.weight,
                r.score,
                r.created_at.and_then(input::value_of),
                r.user_id,
                r.session_id,
                label(r.memory_type, &rc::MEMORY_TYPES, mtype)?,
                r.lexical_rank,
                r.vector_rank,
                r.metadata.filter(|m| !input::jsonb_is_null(m)),
            ))
        })
        .collect()
}

/// quote_literal's form of a text.
fn quote_literal(s: &str) -> String {
    let q = s.replace('\'', "''");
    if q.contains('\\') {
        format!("E'{}'", q.replace('\\', "\\\\"))
    } else {
        format!("'{q}'")
    }
}

fn observations_oid() -> pg_sys::Oid {
    polymorphic::relation_oid(c"memory", c"observations")
}

/// A jsonb value through SQL: `sql` of one jsonb argument and the others, answering jsonb.
fn jsonb_call(sql: &'static str, types: &[pg_sys::Oid], args: &[DatumWithOid]) -> Result<Value, MxError> {
    Spi::connect(|client| {
        let t = kept(&client, sql, types, args, None).map_err(spi)?;
        Ok(t.first().get::<pgrx::JsonB>(1).map_err(spi)?.map_or(Value::Null, |j| j.0))
    })
}

/// What the words of the query and the source's vector setup say: whether the query has words
/// (websearch_to_tsquery's nodes), and, when asked, memory.observations' embedding column
/// (Some(dims)) and pgvector's schema.
struct Context {
    has_words: bool,
    embedding: Option<Option<i64>>,
    vector_schema: Option<String>,
}

/// memory.observations' vector setup as `context` reads it: memory.ann_settings' dimensions,
/// whether the table has its embedding column, and pgvector's `vector` type (InvalidOid: no
/// pgvector).
#[derive(Clone, Copy)]
struct VectorSetup {
    dims: Option<i32>,
    has_col: bool,
    vector_type: pg_sys::Oid,
}

thread_local! {
    // The vector setup this backend read last, and the invalidation generation it was read at
    // (`callbacks::Fill`): any relcache or role invalidation since (DDL on memory.observations,
    // a row of memory.ann_settings written, through its memory_rules_changed trigger) reads it
    // again. pgvector's schema is looked up from the type's oid on every call (it moves with
    // ALTER EXTENSION vector SET SCHEMA, which invalidates no relation).
    static SETUP: std::cell::Cell<Option<(u64, VectorSetup)>> = const { std::cell::Cell::new(None) };
}

/// Whether a query has words to search for: websearch_to_tsquery('english', query) has nodes.
fn has_words(query: Option<&str>) -> bool {
    // A blank query has no words: not parsed (websearch_to_tsquery says so with a NOTICE to the
    // client on every vector-only call).
    let Some(q) = query.filter(|q| !q.trim().is_empty()) else { return false };
    input::websearch_has_nodes(c"pg_catalog.english", q)
}

/// memory.observations' vector setup: kept per backend (`SETUP`), read again after an invalidation.
fn vector_setup() -> Result<VectorSetup, MxError> {
    let generation = crate::pg::callbacks::Fill::begin();
    if let Some((g, s)) = SETUP.with(std::cell::Cell::get) {
        if generation.generation() == g {
            return Ok(s);
        }
    }
    const SQL: &std::ffi::CStr = c"SELECT (SELECT e.dimensions FROM memory.ann_settings e), \
        EXISTS (SELECT FROM pg_catalog.pg_attribute a \
                 WHERE a.attrelid OPERATOR(pg_catalog.=) 'memory.observations'::pg_catalog.regclass \
                   AND a.attname OPERATOR(pg_catalog.=) 'embedding' AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped), \
        (SELECT t.oid FROM pg_catalog.pg_extension e JOIN pg_catalog.pg_type t ON t.typnamespace OPERATOR(pg_catalog.=) e.extnamespace \
          WHERE e.extname OPERATOR(pg_catalog.=) 'vector' AND t.typname OPERATOR(pg_catalog.=) 'vector')";
    let s = Spi::connect(|client| {
        let r = crate::pg::spi::read_latest(&client, SQL, &[])?;
        Ok::<_, MxError>(VectorSetup {
            dims: r.get::<i32>(0, 1)?,
            has_col: r.get::<bool>(0, 2)?.unwrap_or(false),
            vector_type: r.get::<pg_sys::Oid>(0, 3)?.unwrap_or(pg_sys::InvalidOid),
        })
    })?;
    if generation.keep() {
        SETUP.with(|c| c.set(Some((generation.generation(), s))));
    }
    Ok(s)
}

/// The dimensions of memory.observations' embedding column (memory.ann_settings'), None while
/// the table has none: what memory.remember checks a given embedding against (kept per backend).
pub(crate) fn observations_dims() -> Result<Option<i32>, MxError> {
    let s = vector_setup()?;
    Ok(s.dims.filter(|_| s.has_col))
}

fn context(query: Option<&str>, observations_embedding: bool, want_schema: bool) -> Result<Context, MxError> {
    let has_words = has_words(query);
    let setup = if observations_embedding || want_schema { Some(vector_setup()?) } else { None };
    let schema = if want_schema { setup.and_then(|s| input::type_schema(s.vector_type)) } else { None };
    let (dims, has_col) = match setup {
        Some(s) if observations_embedding => (s.dims, s.has_col),
        _ => (None, false),
    };
    // (The embedding column comes with memory.ann_settings' row; the column's own type without one.)
    let embedding = if !observations_embedding || (dims.is_none() && !has_col) {
        None
    } else if let Some(d) = dims {
        Some(Some(i64::from(d)))
    } else {
        let d = Spi::connect(|client| {
            let t = kept(&client, "SELECT memory_internal._embedding_dims('memory.observations'::pg_catalog.regclass, 'embedding')", &[], &[], None)
                .map_err(spi)?;
            t.first().get::<i32>(1).map_err(spi)
        })?;
        Some(d.map(i64::from))
    };
    Ok(Context { has_words, embedding, vector_schema: schema })
}

/// The query embedding as pgvector's text, checked against `dims` (memory_internal._query_vector's
/// rules: float8[] and real[] and text here, the other types through that function).
pub(super) fn query_vector(e: &AnyElement, dims: Option<i64>) -> Result<String, MxError> {
    let want = dims.and_then(|d| usize::try_from(d).ok());
    if let Some(components) = polymorphic::float_array(e) {
        let components = components.map_err(|()| refuse(QueryVectorError::NotOneDimensional))?;
        return query_vector_text(&to_f32(&components), want).map_err(refuse);
    }
    if let Some(s) = polymorphic::text_value(e) {
        return parse_query_vector(&s).and_then(|v| query_vector_text(&v, want)).map_err(refuse);
    }
    Spi::connect(|client| {
        let args = [polymorphic::argument(e), DatumWithOid::from(dims.and_then(|d| i32::try_from(d).ok()))];
        let r = client.select("SELECT memory_internal._query_vector($1, $2)", None, &args).map_err(spi)?;
        Ok(r.first().get::<String>(1).map_err(spi)?.unwrap_or_default())
    })
}

pub(super) fn utc_text(at: TimestampWithTimeZone) -> Result<String, MxError> {
    Spi::connect(|client| {
        let t = kept(&client, "SELECT memory_internal._utc_text($1)", &[pg_sys::TIMESTAMPTZOID], &[DatumWithOid::from(at)], None).map_err(spi)?;
        Ok(t.first().get::<String>(1).map_err(spi)?.unwrap_or_default())
    })
}

fn text_of(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    }
}

fn float_of(v: Option<&Value>) -> Option<f64> {
    match v? {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

fn label_of(v: Option<&Value>, labels: &[&str]) -> Option<String> {
    v.and_then(Value::as_str).filter(|s| labels.contains(s)).map(str::to_owned)
}

#[allow(clippy::too_many_arguments)]
fn recall(
    org: Option<&str>,
    query: Option<&str>,
    k: Option<i32>,
    project_id: Option<&str>,
    filters: Option<Value>,
    embedding: Option<AnyElement>,
    source: Option<pg_sys::Oid>,
    as_of: Option<TimestampWithTimeZone>,
) -> Result<Vec<RecallRow>, MxError> {
    // Input first: nothing is read or written for a call that is refused.
    rc::check_read_args(FN, org, k).map_err(refusal)?;
    let (org, k) = (org.unwrap_or_default(), k.unwrap_or_default());
    if let Some(at) = as_of {
        let raw: i64 = at.into();
        if raw == i64::MAX || raw == i64::MIN {
            return Err(MxError::bad_argument(format!("{FN}: as_of must be a finite time, got {}", if raw == i64::MAX { "infinity" } else { "-infinity" }))
                .hint("Pass the time to read the memories as of, or NULL for now."));
        }
    }
    let tbl = source.filter(|&s| s != observations_oid());
    // The invalid regclass ('-', 0) is no table: refused as one that is not governed (an oid 0
    // would reach memory_internal._recall_columns as NULL, memory.observations).
    if tbl == Some(pg_sys::InvalidOid) {
        return Err(MxError::bad_argument(format!("{FN}: - is not governed"))
            .hint("source is a table governed by memory.govern with a content mapping, an org column and a uuid id column, which the caller may SELECT; omit it to recall from memory.observations."));
    }
    rc::check_as_of_with(as_of.is_some(), tbl.is_some(), embedding.is_some(), filters.as_ref()).map_err(refusal)?;
    let f: Map<String, Value> = match rc::check_filters(filters.as_ref()).map_err(refusal)? {
        Some(f) => f,
        // Timestamps: parsed by the database (memory_internal._recall_filters, which checks all).
        None => match jsonb_call("SELECT memory_internal._recall_filters($1)", &[pg_sys::JSONBOID], &[DatumWithOid::from(filters.map(pgrx::JsonB))])? {
            Value::Object(m) => m,
            _ => Map::new(),
        },
    };
    // Definer: the org is checked against the calling role here.
    crate::trust::require_org(Some(org))?;
    // Clearance: the caller's in this org, lowered by a max_tier filter.
    let clearance = crate::trust::clearance(Some(org))?;
    let tier = rc::effective_tier(clearance.as_deref(), f.get("max_tier").and_then(Value::as_str));
    let want_embedding = embedding.is_some();
    let ctx = context(query, tbl.is_none() && want_embedding, want_embedding)?;
    let columns: Map<String, Value> = match tbl {
        None => rc::observation_columns(ctx.embedding),
        Some(t) => match jsonb_call(
            "SELECT memory_internal._recall_columns($1, $2, $3, $4)",
            &[pg_sys::REGCLASSOID, pg_sys::JSONBOID, pg_sys::TEXTOID, pg_sys::BOOLOID],
            &[DatumWithOid::from(t), DatumWithOid::from(pgrx::JsonB(Value::Object(f.clone()))), DatumWithOid::from(project_id), DatumWithOid::from(want_embedding)],
        )? {
            Value::Object(m) => m,
            _ => Map::new(),
        },
    };
    // The query embedding: only for a source with embeddings, of their dimensions, finite.
    let qv = match &embedding {
        None => None,
        Some(e) => {
            if columns.get("embedding").and_then(Value::as_str).is_none() {
                let err = MxError::bad_argument(format!(
                    "{FN}: {} has no embeddings to compare query_embedding with",
                    tbl.map_or_else(|| "memory.observations".to_owned(), regclass_text)
                ));
                return Err(match tbl {
                    None => err.hint("Call memory.enable_embeddings(dimensions) (pgvector) and write embeddings with the memories, or pass query_embedding => NULL."),
                    Some(t) => err.hint(format!(
                        "Map the table's vector column with memory.govern({}, '{{\"embedding\": \"<column>\", ...}}') (pgvector), or pass query_embedding => NULL.",
                        quote_literal(&regclass_text(t))
                    )),
                });
            }
            Some(query_vector(e, columns.get("dims").and_then(Value::as_i64))?)
        }
    };
    // A blank query (or one of stop words only) without filters matches nothing: no rows, no
    // event. With filters it lists the newest matching memories.
    if !ctx.has_words && f.is_empty() && qv.is_none() {
        return Ok(Vec::new());
    }
    let relation = match tbl {
        None => ("memory".to_owned(), "observations".to_owned()),
        Some(t) => relation_names(t),
    };
    let at = as_of.map(utc_text).transpose()?;
    let plan = rc::recall_plan(&RecallArgs {
        org,
        query: if ctx.has_words { query } else { None },
        k,
        project_id,
        filters: &f,
        tier,
        columns: &columns,
        relation: (&relation.0, &relation.1),
        source: tbl.is_some(),
        vector: qv.as_deref().map(|v| (v, ctx.vector_schema.as_deref())),
    });
    let plan = rc::plan_as_of(plan, at.as_deref(), columns.get("created_at").and_then(Value::as_str));
    let plan = Plan::from_json(&plan).map_err(|e| MxError::new(code::INTERNAL, format!("memory_ext recall: {}", e.0)))?;
    // memory.observations' one pass: its rows typed (no JSON made and read again).
    let text = match tbl {
        None => match super::run_plan_typed(&plan) {
            super::Answer::Json(text) => text,
            super::Answer::Typed(rows) => {
                let ids: Vec<Value> = rows.iter().map(|r| r.id.map_or(Value::Null, |id| Value::String(id.to_string()))).collect();
                let event = rc::read_event(ids, k, &f, query, qv.as_deref(), None, at.as_deref());
                let out = rows_of_typed(rows)?;
                let payload = rc::jsonb_text(&event);
                crate::audit::reads::append_read_value(FN, event, payload, Some(org.to_owned()), project_id.map(str::to_owned))?;
                return Ok(out);
            }
        },
        Some(_) => run_plan(&plan, true),
    };
    // Each row's fields but the metadata as values; the metadata as the JSON text the engine wrote
    // (numbers past f64 and deep nesting come back exactly as stored, cast to jsonb by memory.recall).
    let raw: Vec<Vec<Box<serde_json::value::RawValue>>> = serde_json::from_str(&text)
        .map_err(|e| MxError::new(code::INTERNAL, format!("memory_ext recall: the engine's rows are not a JSON array of arrays: {e}")))?;
    let mut rows: Vec<Value> = Vec::with_capacity(raw.len());
    let mut metas: Vec<Option<String>> = Vec::with_capacity(raw.len());
    for r in raw {
        let mut fields = Vec::with_capacity(11);
        let mut meta = None;
        for (i, f) in r.into_iter().enumerate() {
            if i == 11 {
                meta = (f.get() != "null").then(|| f.get().to_owned());
            } else {
                fields.push(serde_json::from_str::<Value>(f.get()).map_err(|e| MxError::new(code::INTERNAL, format!("memory_ext recall: a row's field {i}: {e}")))?);
            }
        }
        rows.push(Value::Array(fields));
        metas.push(meta);
    }
    let ids: Vec<Value> = rows.iter().map(|r| r.get(0).cloned().unwrap_or(Value::Null)).collect();
    let event = rc::read_event(ids, k, &f, query, qv.as_deref(), tbl.map(regclass_text).as_deref(), at.as_deref());
    let out = rows
        .into_iter()
        .zip(metas)
        .map(|(r, meta)| {
            let x = |i: usize| r.get(i);
            (
                text_of(x(0)),
                text_of(x(1)),
                label_of(x(2), &rc::CLASSIFICATIONS),
                float_of(x(3)),
                float_of(x(4)),
                text_of(x(5)),
                text_of(x(6)),
                text_of(x(7)),
                label_of(x(8), &rc::MEMORY_TYPES),
                x(9).and_then(Value::as_i64).and_then(|v| i32::try_from(v).ok()),
                x(10).and_then(Value::as_i64).and_then(|v| i32::try_from(v).ok()),
                meta,
            )
        })
        .collect();
    let payload = rc::jsonb_text(&event);
    crate::audit::reads::append_read_value(FN, event, payload, Some(org.to_owned()), project_id.map(str::to_owned))?;
    typed_rows(out)
}
