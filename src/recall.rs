//! Rust helpers of recall (sql/feedback.sql, docs/vector.md): the query embedding's check (the
//! rule is `memory_core::vector`), and recall's statements run through plans kept per backend.

use crate::errors::{MxError, OrRaise};
use crate::pg::spi::{kept_text, kept_text_cursor, Fetched};
use memory_core::fusion::{fuse, Candidate};
use memory_core::vector::check_query_vector;
use std::cell::RefCell;
use std::collections::HashMap;
use std::time::{Duration, Instant};
use pgrx::datum::DatumWithOid;
use pgrx::prelude::*;

/// 22023 unless the query embedding (one-dimensional, not empty: checked by the caller; NULL is
/// refused here) has
/// `dims` components (NULL: a column of no fixed size), each finite, not all zero.
#[pg_extern(immutable, parallel_safe, schema = "memory_internal", name = "_query_vector_check")]
fn query_vector_check(query_embedding: Option<Array<f32>>, dims: Option<i32>) -> bool {
    let Some(query_embedding) = query_embedding else {
        MxError::bad_argument("query_embedding must be a one-dimensional array of numbers").raise()
    };
    let components: Vec<Option<f32>> = query_embedding.iter().collect();
    let dims = dims.and_then(|d| usize::try_from(d).ok());
    check_query_vector(components.into_iter(), dims)
        .map_err(|e| {
            let hint = matches!(e, memory_core::vector::QueryVectorError::Dimensions { .. });
            let err = MxError::bad_argument(e.to_string());
            if hint { err.hint("Embed the query with the model that embedded the memories.") } else { err }
        })
        .or_raise();
    true
}

/// Rows the one pass may read; more, and memory.recall reads the two index lists instead.
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

type RecallRow = (
    Option<pgrx::Uuid>,
    Option<String>,
    Option<String>,
    Option<f64>,
    Option<f64>,
    Option<pgrx::datum::TimestampWithTimeZone>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<i32>,
    Option<i32>,
    bool,
);

/// Hybrid recall in one pass (docs/vector.md). `candidates`: memory.recall's statement giving
/// `(id uuid, weight float8, distance float8, relevance float4)` of every row under the call's
/// conditions (at most ONE_PASS_ROWS + 1 of them); `rows`: its statement giving the result's
/// columns `(id, content, classification, weight, created_at, user_id, session_id,
/// memory_type)` of the ids `$2 uuid[]` under the same conditions. Both are memory_ext's own
/// text, built by memory.recall from fixed parts and identifiers it checked, read-only, run with
/// `args` as `$1 text[]` through plans kept per backend, in the caller's snapshot. The two lists
/// are cut and fused by `memory_core::fusion` (k, depth); the rows come back best first. More
/// candidates than ONE_PASS_ROWS: one row, `overflow`. Not for PUBLIC: it runs what it is given,
/// as the calling role.
#[pg_extern(volatile, schema = "memory_internal", name = "_kept_recall")]
fn kept_recall(
    candidates: &str,
    rows: &str,
    args: Vec<Option<String>>,
    k: i32,
    depth: i32,
    scope: &str,
) -> TableIterator<
    'static,
    (
        name!(id, Option<pgrx::Uuid>),
        name!(content, Option<String>),
        name!(classification, Option<String>),
        name!(weight, Option<f64>),
        name!(score, Option<f64>),
        name!(created_at, Option<pgrx::datum::TimestampWithTimeZone>),
        name!(user_id, Option<String>),
        name!(session_id, Option<String>),
        name!(memory_type, Option<String>),
        name!(lexical_rank, Option<i32>),
        name!(vector_rank, Option<i32>),
        name!(overflow, bool),
    ),
> {
    let k = usize::try_from(k).unwrap_or(0);
    let depth = usize::try_from(depth).unwrap_or(0);
    let overflow = || vec![(None, None, None, None, None, None, None, None, None, None, None, true)];
    if overflowed(scope) {
        return TableIterator::new(overflow());
    }
    let out: Vec<RecallRow> = Spi::connect(|client| {
        let mut cursor = kept_text_cursor(&client, candidates, &[pg_sys::TEXTARRAYOID], &[DatumWithOid::from(args.clone())])
            .map_err(MxError::spi_in("recall"))?;
        let mut batch = Fetched::default();
        // (The columns' types are checked before any value is read.)
        batch.fetch_typed(&mut cursor, ONE_PASS_ROWS + 1, &[pg_sys::UUIDOID, pg_sys::FLOAT8OID, pg_sys::FLOAT8OID, pg_sys::FLOAT4OID])?;
        if batch.len() > ONE_PASS_ROWS {
            remember_overflow(scope);
            return Ok(overflow());
        }
        let cands: Vec<Candidate> = (0..batch.len())
            .filter_map(|i| {
                Some(Candidate {
                    id: batch.uuid(i, 0)?,
                    weight: batch.float8(i, 1).unwrap_or(1.0),
                    distance: batch.float8(i, 2),
                    relevance: batch.float4(i, 3),
                })
            })
            .collect();
        drop(batch);
        drop(cursor);
        let fused = fuse(&cands, k, depth);
        if fused.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<pgrx::Uuid> = fused.iter().map(|f| pgrx::Uuid::from_bytes(f.id)).collect();
        let t = kept_text(
            &client,
            rows,
            &[pg_sys::TEXTARRAYOID, pg_sys::UUIDARRAYOID],
            &[DatumWithOid::from(args), DatumWithOid::from(ids)],
        )
        .map_err(MxError::spi_in("recall"))?;
        let mut found: HashMap<[u8; 16], RecallRow> = HashMap::with_capacity(fused.len());
        for r in t {
            let row = (|| -> Result<Option<RecallRow>, pgrx::spi::Error> {
                let Some(id) = r.get::<pgrx::Uuid>(1)? else { return Ok(None) };
                Ok(Some((Some(id), r.get(2)?, r.get(3)?, r.get(4)?, None, r.get(5)?, r.get(6)?, r.get(7)?, r.get(8)?, None, None, false)))
            })()
            .map_err(MxError::spi_in("recall"))?;
            if let Some(row) = row {
                found.insert(*row.0.expect("an id").as_bytes(), row);
            }
        }
        // Best first; a row gone from the conditions since (not in this snapshot) is left out.
        Ok::<_, MxError>(fused
            .iter()
            .filter_map(|f| {
                found.remove(&f.id).map(|mut row| {
                    row.4 = Some(f.score);
                    row.9 = f.lexical_rank;
                    row.10 = f.vector_rank;
                    row
                })
            })
            .collect())
    })
    .or_raise();
    TableIterator::new(out)
}
