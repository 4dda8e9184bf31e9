//! Recall's one pass without SPI's tuple table: its candidates statement runs through
//! `SPI_execute_plan_extended` with a DestReceiver of its own, which takes each row's values
//! straight from the executor's slot (no `heap_form_tuple` copy of ~1,000 rows into SPI's table,
//! and no deform of them again in Rust). The row shape is the one `memory_core::retrieval::
//! render_one_pass` renders: (uuid, float8, float8, tsvector, int4).

use super::error::{code, MxError};
use pgrx::datum::DatumWithOid;
use pgrx::prelude::*;
use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};

/// The candidates statement's column types, in order: id, weight, distance, words, coverage.
const SHAPE: [pg_sys::Oid; 5] = [pg_sys::UUIDOID, pg_sys::FLOAT8OID, pg_sys::FLOAT8OID, pg_sys::TSVECTOROID, pg_sys::INT4OID];

/// One row of the candidates statement.
pub struct CandidateRow {
    pub id: [u8; 16],
    pub weight: Option<f64>,
    pub distance: Option<f64>,
    /// How many of the query's lexemes the row holds (None: it does not match).
    pub coverage: Option<i32>,
    /// The row's words (a matching row's), an index into `Candidates::words`.
    words: Option<usize>,
}

/// The rows of a candidates statement, at most the limit it was run with, and whether it had more.
#[derive(Default)]
pub struct Candidates {
    pub rows: Vec<CandidateRow>,
    pub overflow: bool,
    /// The words of the matching rows: each a detoasted tsvector's bytes (a 4-byte-header
    /// varlena), copied into 8-byte-aligned memory owned here.
    words: Vec<Vec<u64>>,
    shape_ok: bool,
    limit: usize,
    /// Rows the executor handed over (kept or not).
    seen: usize,
}

impl Candidates {
    /// `ts_rank_cd(words, query)` of row `i`'s words (None for a row without), its working memory
    /// (ts_rank_cd's arrays) in `cx`, reset once the float4 is out.
    pub fn ts_rank_cd(&self, i: usize, query: super::input::TsQuery, cx: &mut pgrx::PgMemoryContexts) -> Option<f32> {
        let w = self.words.get(self.rows.get(i)?.words?)?;
        let d = pg_sys::Datum::from(w.as_ptr());
        // SAFETY: `w` holds a whole plain tsvector varlena (copied in `receive_slot`), alive while
        // `self` is; the tsquery is alive in its context (`TsQuery`); nothing else allocates in
        // `cx`, reset after the call.
        unsafe {
            let r = cx.switch_to(|_| super::input::ts_rank_cd(d, query));
            cx.reset();
            Some(r)
        }
    }
}

/// The receiver the executor calls: PostgreSQL's DestReceiver first (the executor sees a
/// pointer to it), then where the rows go.
#[repr(C)]
struct Receiver {
    base: pg_sys::DestReceiver,
    out: *mut Candidates,
}

#[pg_guard]
unsafe extern "C-unwind" fn startup(this: *mut pg_sys::DestReceiver, _operation: std::ffi::c_int, desc: pg_sys::TupleDesc) {
    // SAFETY: `this` is the `Receiver` `candidates` made, alive for the statement; `desc` the
    // statement's result descriptor, its attributes read below natts only.
    unsafe {
        let out = &mut *(*this.cast::<Receiver>()).out;
        out.shape_ok = (*desc).natts as usize == SHAPE.len()
            && SHAPE.iter().enumerate().all(|(i, t)| (*super::tupdesc_attr(desc, i)).atttypid == *t);
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn receive_slot(slot: *mut pg_sys::TupleTableSlot, this: *mut pg_sys::DestReceiver) -> bool {
    // SAFETY: `this` as in `startup`; the slot holds a row of the checked shape (startup ran
    // first), all its attributes made valid by slot_getallattrs; a uuid datum points at its 16
    // bytes, float8 and int4 are by value; a tsvector datum is detoasted into a plain varlena
    // (4-byte header) of varsize_any bytes, copied out, and the detoasted copy freed.
    unsafe {
        let out = &mut *(*this.cast::<Receiver>()).out;
        if !out.shape_ok {
            return false;
        }
        if out.seen >= out.limit {
            out.overflow = true;
            return false;
        }
        out.seen += 1;
        pg_sys::slot_getallattrs(slot);
        let values = std::slice::from_raw_parts((*slot).tts_values, SHAPE.len());
        let nulls = std::slice::from_raw_parts((*slot).tts_isnull, SHAPE.len());
        let get = |c: usize| (!nulls[c]).then(|| values[c]);
        let Some(id) = get(0) else { return true };
        let words = match (get(3), get(4)) {
            (Some(w), Some(_)) => {
                let raw = w.cast_mut_ptr::<pg_sys::varlena>();
                let plain = pg_sys::pg_detoast_datum(raw);
                let size = pgrx::varlena::varsize_any(plain);
                let mut buf = vec![0u64; size.div_ceil(8)];
                std::ptr::copy_nonoverlapping(plain.cast::<u8>(), buf.as_mut_ptr().cast::<u8>(), size);
                if plain != raw {
                    pg_sys::pfree(plain.cast());
                }
                out.words.push(buf);
                Some(out.words.len() - 1)
            }
            _ => None,
        };
        out.rows.push(CandidateRow {
            id: std::ptr::read_unaligned(id.cast_mut_ptr::<[u8; 16]>()),
            weight: get(1).map(|d| f64::from_bits(d.value() as u64)),
            distance: get(2).map(|d| f64::from_bits(d.value() as u64)),
            coverage: get(4).map(|d| d.value() as i32),
            words,
        });
        true
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn shutdown(_this: *mut pg_sys::DestReceiver) {}

#[pg_guard]
unsafe extern "C-unwind" fn destroy(_this: *mut pg_sys::DestReceiver) {}

thread_local! {
    // The candidates statements' plans, prepared once per backend by their text (SPI_keepplan);
    // at most KEPT of them, the oldest dropped for a new one.
    static PLANS: RefCell<(HashMap<String, pg_sys::SPIPlanPtr>, VecDeque<String>)> = RefCell::new((HashMap::new(), VecDeque::new()));
}
const KEPT: usize = 64;

/// The kept plan of `sql` (prepared with parameters of `types` on first use). Inside an SPI
/// connection.
fn plan(sql: &str, types: &[pg_sys::Oid]) -> Result<pg_sys::SPIPlanPtr, MxError> {
    if let Some(p) = PLANS.with(|p| p.borrow().0.get(sql).copied()) {
        return Ok(p);
    }
    let c = std::ffi::CString::new(sql).map_err(|_| MxError::new(code::INTERNAL, "a statement holds a NUL byte"))?;
    let mut types = types.to_vec();
    // SAFETY: inside an SPI connection (the caller's); a NUL-terminated text and one type per
    // parameter; the plan is moved out of SPI's procedure memory by SPI_keepplan and freed by
    // SPI_freeplan when it is dropped from PLANS.
    unsafe {
        let p = pg_sys::SPI_prepare(c.as_ptr(), types.len() as i32, types.as_mut_ptr());
        if p.is_null() {
            return Err(MxError::new(code::INTERNAL, format!("memory_ext recall: preparing the one pass failed (SPI code {})", std::ptr::addr_of!(pg_sys::SPI_result).read())));
        }
        pg_sys::SPI_keepplan(p);
        PLANS.with(|plans| {
            let (map, order) = &mut *plans.borrow_mut();
            if map.len() >= KEPT {
                if let Some(old) = order.pop_front().and_then(|o| map.remove(&o)) {
                    pg_sys::SPI_freeplan(old);
                }
            }
            map.insert(sql.to_owned(), p);
            order.push_back(sql.to_owned());
        });
        Ok(p)
    }
}

/// Runs the one pass's candidates statement `sql` (parameters of `types`, bound to `args`)
/// through its plan kept per backend (PostgreSQL's plan cache: custom or generic as the caller's
/// plan_cache_mode says, re-planned after DDL), in the caller's snapshot as pgrx's reads take it
/// (read-only until the transaction has written), its rows taken from the executor's slots: at
/// most `limit` of them, `overflow` when there were more. Inside an SPI connection.
pub fn candidates(sql: &str, types: &[pg_sys::Oid], args: &[DatumWithOid], limit: usize) -> Result<Candidates, MxError> {
    let plan = plan(sql, types)?;
    let mut out = Candidates { limit, ..Default::default() };
    let mut receiver = Receiver {
        base: pg_sys::DestReceiver {
            receiveSlot: Some(receive_slot),
            rStartup: Some(startup),
            rShutdown: Some(shutdown),
            rDestroy: Some(destroy),
            mydest: pg_sys::CommandDest::DestTuplestore,
        },
        out: std::ptr::addr_of_mut!(out),
    };
    // SAFETY: inside an SPI connection; the parameter list (palloc'd in SPI's procedure memory,
    // freed with it) has one entry per argument, each of its declared type; the receiver and the
    // rows it fills live across the call (the executor calls it only within it); read_only as
    // pgrx passes it (false once the transaction has a transaction id: a new snapshot and command
    // id, so the rows written by this transaction are seen).
    let rc = unsafe {
        let params = pg_sys::makeParamList(args.len() as i32);
        for (i, a) in args.iter().enumerate() {
            let p = (*params).params.as_mut_ptr().add(i);
            (*p).value = a.datum().map_or(pg_sys::Datum::from(0usize), |d| d.sans_lifetime());
            (*p).isnull = a.datum().is_none();
            (*p).pflags = pg_sys::PARAM_FLAG_CONST as u16;
            (*p).ptype = a.oid();
        }
        let options = pg_sys::SPIExecuteOptions {
            params,
            read_only: pg_sys::GetCurrentTransactionIdIfAny() == pg_sys::InvalidTransactionId,
            allow_nonatomic: false,
            must_return_tuples: false,
            tcount: 0,
            dest: std::ptr::addr_of_mut!(receiver.base),
            owner: std::ptr::null_mut(),
        };
        pg_sys::SPI_execute_plan_extended(plan, &options)
    };
    if rc != pg_sys::SPI_OK_SELECT as i32 {
        return Err(MxError::new(code::INTERNAL, format!("memory_ext recall: the one pass failed (SPI code {rc})")));
    }
    if !out.shape_ok {
        return Err(MxError::new(code::INTERNAL, "a query returned an unexpected row shape"));
    }
    Ok(out)
}
