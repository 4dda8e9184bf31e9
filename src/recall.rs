//! The retrieval engine's shell (sql/recall.sql, docs/vector.md): the query embedding's check
//! (the rule is `memory_core::vector`), and the statements `memory_core::retrieval` renders, run
//! through plans kept per backend.

pub(crate) mod body;
pub(crate) mod search;

use crate::errors::{MxError, OrRaise};
use crate::pg::identity::LocalSetting;
use crate::pg::receive::Candidates;
use crate::pg::spi::kept_text;
use crate::pg::input;
use memory_core::fusion::{coverage_cut, fuse_lists, Candidate};
use memory_core::retrieval::words::Match;
use memory_core::retrieval::{namespace_path, render, render_one_pass, ParamType, Plan, PlanError};
use memory_core::vector::{parse_query_vector, query_vector_text, to_f32, QueryVectorError};
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::CString;
use std::time::{Duration, Instant};
use pgrx::datum::DatumWithOid;
use pgrx::prelude::*;

/// An item namespace as the text of its prefix index (memory_core::retrieval::namespace_path;
/// memory.search's prefix condition reads that index); NULL for a NULL label (never an item's).
#[pg_extern(immutable, parallel_safe, strict, schema = "memory_internal", name = "_item_ns_path")]
fn item_ns_path(namespace: Array<&str>) -> Option<String> {
    let labels: Option<Vec<&str>> = namespace.iter().collect();
    labels.map(namespace_path)
}

/// The query embedding's refusal: 22023, with a hint for the wrong dimensions.
fn refuse(e: QueryVectorError) -> MxError {
    let err = MxError::bad_argument(e.to_string());
    match e {
        QueryVectorError::Dimensions { .. } => err.hint("Embed the query with the model that embedded the memories."),
        QueryVectorError::NotOneDimensional | QueryVectorError::NotANumber(_) => {
            err.hint("Pass float8[] (e.g. a Python list), real[], a pgvector vector, or the text [1,2,3].")
        }
        _ => err,
    }
}

/// pgvector's text form of a query embedding given as numbers (float8[], one-dimensional: checked
/// by memory_internal._query_vector), or 22023 unless it has `dims` components (NULL: a column
/// of no fixed size), each finite as a real, not all zero (`memory_core::vector`).
#[pg_extern(immutable, parallel_safe, schema = "memory_internal", name = "_query_vector_floats")]
fn query_vector_floats(query_embedding: Option<Array<f64>>, dims: Option<i32>) -> String {
    let Some(query_embedding) = query_embedding else { refuse(QueryVectorError::NotOneDimensional).raise() };
    let components: Vec<Option<f64>> = query_embedding.iter().collect();
    query_vector_text(&to_f32(&components), dims.and_then(|d| usize::try_from(d).ok())).map_err(refuse).or_raise()
}

/// The fillfactor memory.enable_embeddings gives memory.observations for embeddings of `dims`
/// dimensions (`memory_core::vector::observations_fillfactor`: room on each page for one more
/// version of a row, so memory.remember's merge is a HOT update). NULL for dims outside 1..2000.
#[pg_extern(immutable, parallel_safe, schema = "memory_internal", name = "_observations_fillfactor")]
fn observations_fillfactor(dims: i32) -> Option<i32> {
    let dims = usize::try_from(dims).ok().filter(|d| (1..=2000).contains(d))?;
    Some(i32::from(memory_core::vector::observations_fillfactor(dims)))
}

/// 0.3.0's `memory_internal._query_vector_check(real[], int)` by its C symbol, which the scripts
/// of earlier releases declare (an update from them runs with this library before 0.4.0's
/// definitions replace it, and the upgrade drops it). No SQL of 0.4.0 declares it: 22023 unless
/// the embedding passes `memory_core::vector`'s check, as `_query_vector_floats`.
#[pg_extern(immutable, parallel_safe, sql = false)]
fn query_vector_check(query_embedding: Option<Array<f32>>, dims: Option<i32>) -> bool {
    let Some(query_embedding) = query_embedding else { refuse(QueryVectorError::NotOneDimensional).raise() };
    let components: Vec<Option<f32>> = query_embedding.iter().collect();
    query_vector_text(&components, dims.and_then(|d| usize::try_from(d).ok())).map_err(refuse).or_raise();
    true
}

/// The same for a query embedding given as text: pgvector's `[1,2,3]` (a vector's text) or an
/// array's `{1,2,3}` (an untyped literal, numeric[] or integer[]).
#[pg_extern(immutable, parallel_safe, schema = "memory_internal", name = "_query_vector_parse")]
fn query_vector_parse(query_embedding: Option<&str>, dims: Option<i32>) -> String {
    let Some(query_embedding) = query_embedding else { refuse(QueryVectorError::NotOneDimensional).raise() };
    parse_query_vector(query_embedding)
        .and_then(|v| query_vector_text(&v, dims.and_then(|d| usize::try_from(d).ok())))
        .map_err(refuse)
        .or_raise()
}

/// Rows the one pass may read (a plan may bound it lower: `Plan::one_pass_rows`); more, and
/// memory.recall reads the two index lists instead.
const ONE_PASS_ROWS: usize = 10_000;
/// How many overflowed scopes a backend remembers, and for how long.
const OVERFLOWED_SCOPES: usize = 1024;
const OVERFLOW_MEMORY: Duration = Duration::from_secs(600);

thread_local! {
    // The scopes (the conditions and their values, as memory.recall names them) that left more
    // rows than one pass takes in this backend, and when: for OVERFLOW_MEMORY their calls read
    // the two lists at once instead of reading ONE_PASS_ROWS rows first. (Only the way of
    // reading changes: both give the governed answer. Rows rolled back or forgotten since count
    // again once the memory expires.)
    static OVERFLOWED: RefCell<HashMap<String, Instant>> = RefCell::new(HashMap::new());
}

/// Whether `scope` overflowed within OVERFLOW_MEMORY in this backend.
fn overflowed(scope: &str) -> bool {
    OVERFLOWED.with(|o| {
        let mut o = o.borrow_mut();
        match o.get(scope) {
            Some(at) if at.elapsed() < OVERFLOW_MEMORY => true,
            Some(_) => {
                o.remove(scope);
                false
            }
            None => false,
        }
    })
}

fn remember_overflow(scope: &str) {
    OVERFLOWED.with(|o| {
        let mut o = o.borrow_mut();
        if o.len() >= OVERFLOWED_SCOPES {
            o.retain(|_, at| at.elapsed() < OVERFLOW_MEMORY);
            if o.len() >= OVERFLOWED_SCOPES {
                o.clear();
            }
        }
        o.insert(scope.to_owned(), Instant::now());
    });
}

/// Runs a retrieval plan (`memory_core::retrieval`, built by memory.recall and memory.retrieve
/// from checked arguments) and returns its rows as one jsonb array, best first (see
/// `memory_core::retrieval::render`). The plan's statement, rendered by the core with identifiers
/// quoted and values as bind parameters, runs through a plan kept per backend by its text, in
/// the caller's snapshot; `as_caller`: as the calling role (a governed table: its privileges and
/// policies apply), else as the function's caller (memory_ext's owner inside recall). A plan with
/// `one_pass` reads every row under its conditions once (at most ONE_PASS_ROWS) and fuses the
/// two lists with `memory_core::fusion`; more rows, and it reads the two lists instead. Not for
/// PUBLIC: the plan names the relation it reads.
#[pg_extern(volatile, schema = "memory_internal", name = "_retrieve")]
fn retrieve_plan(plan: &str, as_caller: bool) -> String {
    let plan = serde_json::from_str::<serde_json::Value>(plan)
        .map_err(|e| PlanError(format!("retrieval plan is not JSON: {e}")))
        .and_then(|v| Plan::from_json(&v))
        .map_err(|e| {
            let filter = e.0.contains("filter");
            let err = MxError::bad_argument(e.0);
            if filter { err.hint(memory_core::retrieval::filter::HINT) } else { err }
        })
        .or_raise();
    run_plan(&plan, as_caller)
}

/// Runs a checked plan (see `retrieve_plan`): its rows as one JSON array's text, best first.
pub(crate) fn run_plan(plan: &Plan, as_caller: bool) -> String {
    let _role = if as_caller {
        let who = crate::trust::caller();
        if who == pg_sys::InvalidOid {
            MxError::new(crate::errors::code::NO_PRIVILEGE, "no caller inside a security-restricted operation").raise()
        }
        Some(crate::trust::AsRole::enter(who))
    } else {
        None
    };
    read(plan)
}

/// A row of memory.recall read typed from the one pass's rows statement (`OnePass::rows_typed`
/// over memory.observations): the row's items, then its score and ranks.
pub(crate) struct TypedRow {
    pub id: Option<pgrx::Uuid>,
    pub content: Option<String>,
    pub tier: Option<String>,
    pub weight: Option<f64>,
    pub created_at: Option<pgrx::datum::TimestampWithTimeZone>,
    pub user_id: Option<String>,
    pub session_id: Option<String>,
    pub memory_type: Option<String>,
    /// The jsonb datum, copied out of the SPI connection.
    pub metadata: Option<pgrx::datum::AnyElement>,
    pub score: Option<f64>,
    pub lexical_rank: Option<i32>,
    pub vector_rank: Option<i32>,
}

/// A plan's answer: the engine's rows as one JSON array's text, or the one pass's rows typed.
pub(crate) enum Answer {
    Json(String),
    Typed(Vec<TypedRow>),
}

/// As `run_plan`, as the function's caller, for memory.recall over memory.observations: the one
/// pass's rows typed when the plan reads one pass (no JSON made and parsed again), else the
/// engine's JSON text.
pub(crate) fn run_plan_typed(plan: &Plan) -> Answer {
    if plan.one_pass {
        if let Some(rows) = one_pass(plan, true).or_raise() {
            return rows;
        }
    }
    Answer::Json(read(plan))
}

/// The plan's rows: the one pass when it applies, else the rendered statement.
fn read(plan: &Plan) -> String {
    if plan.one_pass {
        if let Some(Answer::Json(rows)) = one_pass(plan, false).or_raise() {
            return rows;
        }
    }
    // pgvector's iterative index scan (relaxed order: the vector list is re-sorted by distance)
    // and ef_search for a list of the plan's depth (100 to 1000), for this statement only (the
    // one pass reads no vector index): set as a function's SET clause sets them, and put back
    // when they drop (the later first; an error ends the transaction, which drops them too).
    let vector = plan.vector.is_some();
    let depth = plan.depth.max(u32::try_from(plan.vector_len()).unwrap_or(u32::MAX)).clamp(100, 1000);
    let _iterative = vector.then(|| LocalSetting::set(c"hnsw.iterative_scan", c"relaxed_order"));
    let _ef = vector.then(|| LocalSetting::set(c"hnsw.ef_search", &CString::new(depth.to_string()).unwrap_or_default()));
    let st = render(plan);
    let (types, args) = typed_args(&st.params, &st.types);
    let out: Option<String> = Spi::connect(|client| {
        let t = kept_text(&client, &st.sql, &types, &args).map_err(MxError::spi_in("recall"))?;
        if t.is_empty() {
            return Ok::<_, MxError>(None);
        }
        t.first().get::<String>(1).map_err(MxError::spi_in("recall"))
    })
    .or_raise();
    out.unwrap_or_else(|| "[]".to_owned())
}

/// A rendered statement's parameters as SPI takes them: each declared as its `ParamType`'s type
/// and bound as a value of that type, read from its text by the type's input function here, once
/// a call (what a cast from a text parameter does, but in a generic plan once for every row it
/// is read for). An invalid value is the input function's error, as the cast's was.
fn typed_args(params: &[Option<String>], types: &[ParamType]) -> (Vec<pg_sys::Oid>, Vec<DatumWithOid<'static>>) {
    let oids: Vec<pg_sys::Oid> = types
        .iter()
        .map(|t| match t {
            ParamType::Text => pg_sys::TEXTOID,
            ParamType::TextArray => pg_sys::TEXTARRAYOID,
            ParamType::Jsonb => pg_sys::JSONBOID,
            ParamType::Numeric => pg_sys::NUMERICOID,
            ParamType::Int8 => pg_sys::INT8OID,
            ParamType::Timestamptz => pg_sys::TIMESTAMPTZOID,
        })
        .collect();
    let args = params
        .iter()
        .zip(types.iter().zip(&oids))
        .map(|(v, (t, &oid))| match (v, t) {
            (Some(s), ParamType::Text) => DatumWithOid::from(s.clone()),
            _ => crate::pg::spi::datum_from_text(oid, v.as_deref()),
        })
        .collect();
    (oids, args)
}

/// The relevance of each candidate of the one pass (`render_one_pass`: the words column 3, the
/// coverage column 4, both NULL for a row that does not match): ts_rank_cd of the row's words as
/// `render`'s statement computes it, against the query's every word (websearch_to_tsquery), or,
/// in an any-word read, against the any-word tsquery for a row with fewer than all of the
/// query's lexemes; only for the rows of at least the full-text list's cut
/// (`fusion::coverage_cut`), None for the others (out of the list whatever their relevance).
fn relevances(plan: &Plan, batch: &Candidates) -> Vec<Option<f32>> {
    let Some((q, how)) = &plan.query else { return Vec::new() };
    let rows = &batch.rows;
    let cut = coverage_cut(rows.iter().filter_map(|r| r.coverage).collect(), plan.depth as usize);
    let cfg = input::regconfig(c"pg_catalog.english");
    let all = input::websearch_tsquery(cfg, q);
    // The any-word read's: the query's lexemes, and its tsquery once a row needs it.
    let any_word = *how == Match::AnyWord;
    let lexemes = if any_word { input::lexeme_count(cfg, q) } else { 0 };
    let mut any: Option<Option<input::TsQuery>> = None;
    // Each rank in a memory context reset after it (ts_rank_cd's working arrays).
    let mut cx = pgrx::PgMemoryContexts::new("memory_ext relevance");
    (0..rows.len())
        .map(|i| {
            let m = rows[i].coverage.filter(|&m| m >= cut)?;
            let query = if !any_word || m >= lexemes { all } else { *any.get_or_insert_with(|| input::any_word_tsquery(cfg, q)) }?;
            batch.ts_rank_cd(i, query, &mut cx)
        })
        .collect()
}

/// A plan's query vector (pgvector's text, checked by `memory_core::vector`) as a value of
/// `schema`.vector: the components its text reads as (each the float4 vector_in's strtof reads:
/// both round to nearest), or vector_in's refusal (22P02) for a text it would not read.
fn vector_param(text: &str, schema: &str) -> Result<(pg_sys::Oid, DatumWithOid<'static>), MxError> {
    let name = CString::new(format!("{}.vector", memory_core::retrieval::render::quote_ident(schema))).unwrap_or_default();
    let oid = input::type_oid(&name)?;
    let components: Option<Vec<f32>> = parse_query_vector(text).ok().and_then(|c| c.into_iter().collect());
    let Some(components) = components.filter(|c| !c.is_empty() && c.len() <= 16_000 && c.iter().all(|x| x.is_finite())) else {
        return Err(MxError::new(crate::errors::code::INVALID_TEXT, format!("invalid input syntax for type vector: \"{text}\"")));
    };
    Ok((oid, crate::pg::vector::vector_arg(&components, oid)))
}

/// The one pass (None: more rows than it takes; read the two lists instead).
/// `typed`: the rows as `Answer::Typed` (the plan is memory.recall's over memory.observations,
/// whose columns have the types `TypedRow` reads), else as the engine's JSON text.
fn one_pass(plan: &Plan, typed: bool) -> Result<Option<Answer>, MxError> {
    let bound = plan.one_pass_rows.map_or(ONE_PASS_ROWS, |r| (r as usize).min(ONE_PASS_ROWS));
    let Some(op) = render_one_pass(plan, bound + 1) else { return Ok(None) };
    // (The scope: the statement and the conditions' values. The query's vector and words change
    // no row count: a scope that overflowed once is read through the two lists for every query.)
    let scope = format!("{}\u{0}{:?}", op.candidates, &op.params[..op.scope_params]);
    if overflowed(&scope) {
        return Ok(None);
    }
    let (mut types, mut args) = typed_args(&op.params, &op.types);
    // The query vector (bound right after the scope's values) as pgvector's `vector`, made here
    // from its text rather than read by vector_in in the statement.
    if let Some((v, vs)) = &plan.vector {
        let (oid, d) = vector_param(v, vs)?;
        types[op.scope_params] = oid;
        args[op.scope_params] = d;
    }
    let k = plan.k as usize + plan.offset as usize;
    Spi::connect(|client| {
        // Both statements run their kept generic plan (planned once per backend): their plan is
        // the same for every scope (the scope's index, then the rows by id), while a plan for the
        // values cost a planning a call, and PostgreSQL's plan cache kept choosing one, the
        // estimates of a value and of the average being within its planning allowance.
        // (Not where Citus is installed: a distributed plan needs the values.) Set once for both
        // statements (nothing else is planned between them).
        let _generic = (!crate::pg::citus::installed()).then(|| LocalSetting::set(c"plan_cache_mode", c"force_generic_plan"));
        // The candidates from the executor's slots (no SPI tuple table; their types checked
        // before any value is read).
        let batch = crate::pg::receive::candidates(&op.candidates, &types, &args, bound)?;
        if batch.overflow {
            remember_overflow(&scope);
            return Ok(None);
        }
        let relevance = relevances(plan, &batch);
        let cands: Vec<Candidate> = batch
            .rows
            .iter()
            .zip(relevance.into_iter().chain(std::iter::repeat(None)))
            .map(|(r, relevance)| Candidate { id: r.id, weight: r.weight.unwrap_or(1.0), distance: r.distance, relevance, coverage: r.coverage.unwrap_or(0) })
            .collect();
        drop(batch);
        let vector_len = usize::try_from(plan.vector_len()).unwrap_or(usize::MAX);
        let mut fused = fuse_lists(&cands, k, plan.depth as usize, vector_len);
        fused.drain(..fused.len().min(plan.offset as usize));
        if fused.is_empty() {
            return Ok(Some(if typed { Answer::Typed(Vec::new()) } else { Answer::Json("[]".to_owned()) }));
        }
        // The fused list, best first, read again under the same conditions in that order.
        let list: Vec<serde_json::Value> = fused
            .iter()
            .enumerate()
            .map(|(o, f)| {
                serde_json::json!({"id": pgrx::Uuid::from_bytes(f.id).to_string(), "score": f.score,
                                   "lexical_rank": f.lexical_rank, "vector_rank": f.vector_rank, "o": o})
            })
            .collect();
        let (t, a) = typed_args(&[Some(serde_json::Value::Array(list).to_string())], &[ParamType::Jsonb]);
        types.extend(t);
        args.extend(a);
        if typed {
            let e = MxError::spi_in("recall");
            let mut t = kept_text(&client, &op.rows_typed, &types, &args).map_err(&e)?;
            let mut rows = Vec::with_capacity(t.len());
            while t.next().is_some() {
                rows.push(TypedRow {
                    id: t.get(1).map_err(&e)?,
                    content: t.get(2).map_err(&e)?,
                    tier: t.get(3).map_err(&e)?,
                    weight: t.get(4).map_err(&e)?,
                    created_at: t.get(5).map_err(&e)?,
                    user_id: t.get(6).map_err(&e)?,
                    session_id: t.get(7).map_err(&e)?,
                    memory_type: t.get(8).map_err(&e)?,
                    metadata: crate::pg::spi::varlena_out_of_spi(&t, 9, pg_sys::JSONBOID)?,
                    score: t.get(10).map_err(&e)?,
                    lexical_rank: t.get(11).map_err(&e)?,
                    vector_rank: t.get(12).map_err(&e)?,
                });
            }
            return Ok(Some(Answer::Typed(rows)));
        }
        let t = kept_text(&client, &op.rows, &types, &args).map_err(MxError::spi_in("recall"))?;
        let rows: Option<String> = if t.is_empty() { None } else { t.first().get::<String>(1).map_err(MxError::spi_in("recall"))? };
        Ok(Some(Answer::Json(rows.unwrap_or_else(|| "[]".to_owned()))))
    })
}

/// Whether `ids`, a uuid array sorted ascending (uuid's order: by bytes; no NULLs), holds `id`:
/// a binary search, for the engine's point-in-time reads (the memories a revision covers at the
/// time, read once). False for a NULL array or id.
#[pg_extern(immutable, parallel_safe, schema = "memory_internal", name = "_sorted_uuids_hold")]
fn sorted_uuids_hold(ids: Option<pgrx::datum::AnyArray>, id: Option<pgrx::Uuid>) -> bool {
    match (ids, id) {
        (Some(a), Some(id)) => crate::pg::polymorphic::sorted_uuid_array_holds(&a, id.as_bytes()),
        _ => false,
    }
}
