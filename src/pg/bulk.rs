//! Bulk insert the way COPY does it: rows go straight into a table through its access method's
//! multi-insert (one WAL record per heap page rather than per row), then into its indexes, with
//! no SQL statement per batch. The audit log's partitions are written this way.

use super::error::{code, MxError};
use super::maxalign;
use pgrx::prelude::*;

/// One value of a row to insert.
#[derive(Clone, Copy)]
pub enum Cell<'a> {
    Null,
    /// The bytes of a varlena value (text, bytea, or a jsonb root container laid out already).
    Varlena(&'a [u8]),
    /// JSON text for jsonb_in.
    JsonText(&'a str),
    Int8(i64),
    Int4(i32),
    /// Microseconds since the PostgreSQL epoch.
    Timestamptz(i64),
    Bool(bool),
    /// An oid (as an enum value is stored).
    Oid(pg_sys::Oid),
}

fn varlena_size(len: usize) -> usize {
    maxalign(pg_sys::VARHDRSZ + len)
}

/// The room a row's varlenas take laid out by `store_row`.
fn row_varlena_size(row: &[Cell]) -> usize {
    row.iter().map(|c| if let Cell::Varlena(b) = c { varlena_size(b.len()) } else { 0 }).sum()
}

/// Tables opened for a bulk insert, kept open (RowExclusiveLock) until closed.
pub struct Opened(Vec<pg_sys::Relation>);

/// Locks `relid` with RowExclusiveLock for the rest of the transaction (the way an INSERT does).
pub fn lock_for_insert(relid: pg_sys::Oid) {
    // SAFETY: takes a heavyweight lock on a plain oid, released at transaction end.
    unsafe { pg_sys::LockRelationOid(relid, pg_sys::RowExclusiveLock as pg_sys::LOCKMODE) };
}

/// Whether no vacuum of `relid` is running: SHARE UPDATE EXCLUSIVE, which every VACUUM holds, is
/// free (it is then held until the transaction ends).
pub fn nobody_vacuums(relid: pg_sys::Oid) -> bool {
    // SAFETY: a heavyweight lock on a plain oid, released at transaction end.
    unsafe { pg_sys::ConditionalLockRelationOid(relid, pg_sys::ShareUpdateExclusiveLock as pg_sys::LOCKMODE) }
}

/// Where each of `columns` is in the table of `desc` (an attached partition may order them
/// differently), named in their table's order: each is looked for from the last one's next.
///
/// # Safety
/// `desc` is the open relation `rel`'s tuple descriptor.
unsafe fn columns_at<const N: usize>(rel: pg_sys::Relation, desc: pg_sys::TupleDesc, columns: &[&str; N]) -> Result<[usize; N], MxError> {
    let mut at = [0usize; N];
    for (c, name) in columns.iter().enumerate() {
        let next = if c == 0 { 0 } else { at[c - 1] + 1 };
        // SAFETY: as the function's contract.
        match unsafe { super::tuple::find_attr_from(desc, name, next) } {
            Some(i) => at[c] = i,
            None => return Err(MxError::new(code::INTERNAL, format!("table {} lacks column {name}", unsafe { super::tuple::relation_name(rel) }))),
        }
    }
    Ok(at)
}

impl Opened {
    /// Opens each table with RowExclusiveLock.
    pub fn open(relids: &[pg_sys::Oid]) -> Opened {
        // SAFETY: table_open raises (does not return) on a missing table; the relations are
        // closed in Drop.
        Opened(relids.iter().map(|&r| unsafe { pg_sys::table_open(r, pg_sys::RowExclusiveLock as pg_sys::LOCKMODE) }).collect())
    }

    /// Inserts the rows `rows.len()` of table `k` (one of those opened), in the given order, with
    /// columns named `columns`; `row(i)` gives row `i`'s cells in the same order.
    pub fn insert<'a, const N: usize>(
        &self,
        k: usize,
        columns: &[&str; N],
        rows: &[usize],
        mut row: impl FnMut(usize) -> [Cell<'a>; N],
    ) -> Result<(), MxError> {
        // Rows per multi-insert, in as many slots, made once per call and reused batch after
        // batch. The integrator writes a round's events (≈1,000 under load) in one call: a slot
        // per row cost it 7% of its CPU (perf, issue 54); 100 rows already fill several pages.
        const BATCH: usize = 100;
        // Up to this many rows, one plain tuple insert each, without a bulk-insert state.
        const SMALL: usize = 8;
        let rel = self.0[k];
        // SAFETY: `rel` is open with RowExclusiveLock for this transaction; every pointer below is
        // created, used and freed here, on this backend; datums point into one palloc'd chunk per
        // batch (in the per-tuple memory context, reset after the batch is inserted) and into
        // values jsonb_in returned there.
        unsafe {
            let desc = (*rel).rd_att;
            let natts = (*desc).natts as usize;
            let at = columns_at(rel, desc, columns)?;
            // An agent's single-row transaction writes one pending entry into a table with no
            // index: a slot and the tuple insert, without an executor state or index bookkeeping
            // (its values allocated in the caller's context, as small as the rows).
            if rows.len() <= SMALL && !(*(*rel).rd_rel).relhasindex {
                let slot = pg_sys::table_slot_create(rel, std::ptr::null_mut());
                let cid = pg_sys::GetCurrentCommandId(true);
                for &i in rows {
                    let row = row(i);
                    let mem = pg_sys::palloc(row_varlena_size(&row).max(1)).cast::<u8>();
                    store_row(slot, natts, &at, &row, mem);
                    pg_sys::table_tuple_insert(rel, slot, cid, 0, std::ptr::null_mut());
                    pg_sys::ExecClearTuple(slot);
                    pg_sys::pfree(mem.cast());
                }
                pg_sys::ExecDropSingleTupleTableSlot(slot);
                return Ok(());
            }
            let rri: *mut pg_sys::ResultRelInfo = pg_sys::palloc0(std::mem::size_of::<pg_sys::ResultRelInfo>()).cast();
            (*rri).type_ = pg_sys::NodeTag::T_ResultRelInfo;
            pg_sys::InitResultRelInfo(rri, rel, 1, std::ptr::null_mut(), 0);
            pg_sys::ExecOpenIndices(rri, false);
            let estate = pg_sys::CreateExecutorState();
            let econtext = pg_sys::MakePerTupleExprContext(estate);
            let mut slots: Vec<*mut pg_sys::TupleTableSlot> =
                (0..rows.len().min(BATCH)).map(|_| pg_sys::table_slot_create(rel, std::ptr::null_mut())).collect();
            // A bulk-insert state (a ring of buffers, kept across batches) pays off for many
            // rows; an agent's single-row transaction inserts one or two, as INSERT does.
            let bulk = rows.len() > SMALL;
            let bistate = if bulk { pg_sys::GetBulkInsertState() } else { std::ptr::null_mut() };
            let cid = pg_sys::GetCurrentCommandId(true);
            for batch in rows.chunks(BATCH) {
                let old = pg_sys::MemoryContextSwitchTo((*econtext).ecxt_per_tuple_memory);
                // One allocation holds every varlena of the batch (a first pass sizes it; building
                // a row's cells only borrows, so asking twice costs no copy).
                let size: usize = batch.iter().map(|&i| row_varlena_size(&row(i))).sum();
                let mem = pg_sys::palloc(size.max(1)).cast::<u8>();
                let mut used = 0usize;
                for (k, &i) in batch.iter().enumerate() {
                    let row = row(i);
                    let slot = slots[k];
                    pg_sys::ExecClearTuple(slot);
                    used += store_row(slot, natts, &at, &row, mem.add(used));
                }
                debug_assert!(used <= size.max(1));
                if bulk {
                    pg_sys::table_multi_insert(rel, slots.as_mut_ptr(), batch.len() as i32, cid, 0, bistate);
                } else {
                    for &slot in &slots[..batch.len()] {
                        pg_sys::table_tuple_insert(rel, slot, cid, 0, std::ptr::null_mut());
                    }
                }
                for &slot in &slots[..batch.len()] {
                    insert_index_tuples(rri, slot, estate);
                }
                pg_sys::MemoryContextSwitchTo(old);
                pg_sys::MemoryContextReset((*econtext).ecxt_per_tuple_memory);
            }
            if bulk {
                pg_sys::FreeBulkInsertState(bistate);
            }
            for slot in slots {
                pg_sys::ExecDropSingleTupleTableSlot(slot);
            }
            pg_sys::ExecCloseIndices(rri);
            pg_sys::FreeExecutorState(estate);
        }
        Ok(())
    }
}

/// Stores `row` (cells of the columns at `at`) in the empty slot `slot` as a virtual tuple, its
/// varlenas laid out from `mem`; returns the bytes of `mem` used.
///
/// # Safety
/// `slot` is an empty slot of a relation of `natts` columns, each `at` below `natts`; `mem` has
/// room for the row's varlenas (`varlena_size` of each) and outlives the slot's tuple; JSON text
/// is parsed by jsonb_in in the current memory context.
unsafe fn store_row<const N: usize>(slot: *mut pg_sys::TupleTableSlot, natts: usize, at: &[usize; N], row: &[Cell; N], mem: *mut u8) -> usize {
    let mut used = 0usize;
    // SAFETY: as the function's contract.
    unsafe {
        let values = std::slice::from_raw_parts_mut((*slot).tts_values, natts);
        let nulls = std::slice::from_raw_parts_mut((*slot).tts_isnull, natts);
        nulls.fill(true);
        for (c, cell) in row.iter().enumerate() {
            let d = match *cell {
                Cell::Null => None,
                Cell::Varlena(bytes) => {
                    let p = mem.add(used);
                    pgrx::varlena::set_varsize_4b(p.cast(), (bytes.len() + pg_sys::VARHDRSZ) as i32);
                    std::ptr::copy_nonoverlapping(bytes.as_ptr(), p.add(pg_sys::VARHDRSZ), bytes.len());
                    used += varlena_size(bytes.len());
                    Some(pg_sys::Datum::from(p))
                }
                Cell::JsonText(t) => {
                    let text = std::ffi::CString::new(t).unwrap_or_default();
                    pgrx::direct_function_call_as_datum(pg_sys::jsonb_in, &[Some(pg_sys::Datum::from(text.as_ptr()))])
                }
                Cell::Int8(v) => Some(pg_sys::Datum::from(v)),
                Cell::Int4(v) => Some(pg_sys::Datum::from(v)),
                Cell::Timestamptz(v) => Some(pg_sys::Datum::from(v)),
                Cell::Bool(v) => Some(pg_sys::Datum::from(v)),
                Cell::Oid(v) => Some(pg_sys::Datum::from(v)),
            };
            if let Some(d) = d {
                values[at[c]] = d;
                nulls[at[c]] = false;
            }
        }
        pg_sys::ExecStoreVirtualTuple(slot);
    }
    used
}

/// ExecInsertIndexTuples for a plain insert (no conflict handling), into every index or, with
/// `only_summarizing`, only the summarizing ones (BRIN: what a HOT update still feeds, 16+);
/// PostgreSQL 16 added that argument (cfg `pg_insert_index_summarizing`, build.rs; unchanged in 18).
///
/// # Safety
/// `rri` has its indexes open, `slot` holds a tuple just written into its relation (its tid
/// set), `estate` is the executor state they were made in.
unsafe fn insert_index_tuples(rri: *mut pg_sys::ResultRelInfo, slot: *mut pg_sys::TupleTableSlot, estate: *mut pg_sys::EState) {
    // SAFETY: as the function's contract.
    unsafe { insert_index_entries(rri, slot, estate, false) }
}

/// # Safety
/// As `insert_index_tuples`; `only_summarizing` is false before PostgreSQL 16.
unsafe fn insert_index_entries(rri: *mut pg_sys::ResultRelInfo, slot: *mut pg_sys::TupleTableSlot, estate: *mut pg_sys::EState, only_summarizing: bool) {
    #[cfg(not(pg_insert_index_summarizing))]
    // SAFETY: as the function's contract.
    unsafe {
        debug_assert!(!only_summarizing);
        pg_sys::ExecInsertIndexTuples(rri, slot, estate, false, false, std::ptr::null_mut(), std::ptr::null_mut());
    }
    #[cfg(pg_insert_index_summarizing)]
    // SAFETY: as the function's contract.
    unsafe {
        pg_sys::ExecInsertIndexTuples(rri, slot, estate, false, false, std::ptr::null_mut(), std::ptr::null_mut(), only_summarizing);
    }
}

/// `(block,offset)`, as `tid` text reads and writes it.
pub fn tid_text(t: &pg_sys::ItemPointerData) -> String {
    let (block, offset) = pgrx::itemptr::item_pointer_get_both(*t);
    format!("({block},{offset})")
}

/// A tid from its text `(block,offset)`; None for anything else.
pub fn parse_tid(s: &str) -> Option<pg_sys::ItemPointerData> {
    let (b, o) = s.strip_prefix('(')?.strip_suffix(')')?.split_once(',')?;
    let (b, o): (u32, u16) = (b.trim().parse().ok()?, o.trim().parse().ok()?);
    let mut tid = pg_sys::ItemPointerData::default();
    pgrx::itemptr::item_pointer_set_all(&mut tid, b, o);
    Some(tid)
}

/// A value read by `lock_rows`: a by-value column's datum (an int8, a timestamptz), or a varlena's bytes.
pub enum Value {
    Null,
    Int(i64),
    Bytes(Vec<u8>),
}

/// Locks rows of the heap table `relid` as `SELECT ... FOR UPDATE` would, with no statement,
/// in the order given: for each version at `tids[i]`, the newest version of its row (followed
/// through updates committed since, waiting for one in progress). Stops at the first that cannot
/// be locked this way, having locked the ones before it: a tid past the table's end or holding no
/// row, a row whose `key_at` column is not `keys[i]` (a tid that came to hold another row), or one
/// deleted. Returns, for each row locked, its newest version's tid and its values of `columns`.
/// A row whose key changed between the version checked and the one locked is an error (it is
/// locked out of the caller's order). No privilege is checked: the caller owns the rows. Empty
/// when the table is not a heap.
pub fn lock_rows<const N: usize>(
    relid: pg_sys::Oid,
    key_at: &str,
    keys: &[&[u8]],
    tids: &[pg_sys::ItemPointerData],
    columns: &[&str; N],
) -> Result<Vec<(pg_sys::ItemPointerData, [Value; N])>, MxError> {
    let mut out = Vec::with_capacity(tids.len());
    // SAFETY: the table is opened with RowShareLock (as SELECT ... FOR UPDATE takes it, kept to the
    // transaction's end) and closed here; its access method is checked to be heap before any
    // row is read; a tid's page is read (pinned for the pruning, then released) and the tid
    // fetched only below the table's end; the fetched version stays pinned
    // (so it cannot be pruned away) until its row is locked; values are copied out of the slot
    // before it is cleared.
    unsafe {
        let rel = pg_sys::table_open(relid, pg_sys::RowShareLock as pg_sys::LOCKMODE);
        if (*(*rel).rd_rel).relam != pg_sys::HEAP_TABLE_AM_OID {
            pg_sys::table_close(rel, pg_sys::NoLock as pg_sys::LOCKMODE);
            return Ok(out);
        }
        let desc = (*rel).rd_att;
        let key_col = super::tuple::find_attr_from(desc, key_at, 0);
        let at: Option<Vec<usize>> = columns.iter().map(|name| super::tuple::find_attr_from(desc, name, 0)).collect();
        let (Some(key_col), Some(at)) = (key_col, at) else {
            pg_sys::table_close(rel, pg_sys::NoLock as pg_sys::LOCKMODE);
            return Err(MxError::new(code::INTERNAL, format!("table {} lacks a column to lock by", super::tuple::relation_name(rel))));
        };
        let blocks = pg_sys::RelationGetNumberOfBlocksInFork(rel, pg_sys::ForkNumber::MAIN_FORKNUM);
        let fetched = pg_sys::table_slot_create(rel, std::ptr::null_mut());
        let locked = pg_sys::table_slot_create(rel, std::ptr::null_mut());
        // (As SELECT ... FOR UPDATE's executor takes it.)
        let cid = pg_sys::GetCurrentCommandId(true);
        // (The heap ignores it: a following lock reads the newer versions with a dirty snapshot.)
        let snapshot = pg_sys::GetLatestSnapshot();
        let mut failed = None;
        let key_of = |slot: *mut pg_sys::TupleTableSlot| -> Option<&[u8]> {
            let mut isnull = false;
            let d = pg_sys::slot_getattr(slot, key_col as i32 + 1, &mut isnull);
            (!isnull).then(|| super::varlena::text_bytes(d))
        };
        for (i, tid) in tids.iter().enumerate() {
            pgrx::check_for_interrupts!();
            let (block, _) = pgrx::itemptr::item_pointer_get_both(*tid);
            if block >= blocks {
                break;
            }
            // Its page pruned first where that pays (as an index scan's fetch does): the versions
            // each update leaves behind are removed, and the next update stays on the page (HOT).
            let buf = pg_sys::ReadBuffer(rel, block);
            pg_sys::heap_page_prune_opt(rel, buf);
            pg_sys::ReleaseBuffer(buf);
            let mut t = *tid;
            if !pg_sys::table_tuple_fetch_row_version(rel, &mut t, &raw mut pg_sys::SnapshotAnyData, fetched) {
                break;
            }
            if key_of(fetched) != Some(keys[i]) {
                pg_sys::ExecClearTuple(fetched);
                break;
            }
            let mut tmfd: pg_sys::TM_FailureData = std::mem::zeroed();
            let result = pg_sys::table_tuple_lock(
                rel,
                &mut t,
                snapshot,
                locked,
                cid,
                pg_sys::LockTupleMode::LockTupleExclusive,
                pg_sys::LockWaitPolicy::LockWaitBlock,
                pg_sys::TUPLE_LOCK_FLAG_FIND_LAST_VERSION as u8,
                &mut tmfd,
            );
            pg_sys::ExecClearTuple(fetched);
            if result != pg_sys::TM_Result::TM_Ok {
                break;
            }
            if key_of(locked) != Some(keys[i]) {
                // The row's key changed since the version checked (an UPDATE of the key by its
                // owner): it is locked now, out of the caller's order, so nothing more is locked and
                // the transaction fails (its locks go with it).
                pg_sys::ExecClearTuple(locked);
                failed = Some(MxError::new(code::INTERNAL, format!("the key of the row at {} of {} changed while it was being locked", tid_text(tid), super::tuple::relation_name(rel))));
                break;
            }
            let values: [Value; N] = std::array::from_fn(|c| {
                let mut isnull = false;
                let d = pg_sys::slot_getattr(locked, at[c] as i32 + 1, &mut isnull);
                let a = &*super::tupdesc_attr(desc, at[c]);
                if isnull {
                    Value::Null
                } else if a.attbyval {
                    Value::Int(d.value() as i64)
                } else {
                    Value::Bytes(super::varlena::text_bytes(d).to_vec())
                }
            });
            out.push(((*locked).tts_tid, values));
            pg_sys::ExecClearTuple(locked);
        }
        pg_sys::ExecDropSingleTupleTableSlot(fetched);
        pg_sys::ExecDropSingleTupleTableSlot(locked);
        pg_sys::table_close(rel, pg_sys::NoLock as pg_sys::LOCKMODE);
        if let Some(e) = failed {
            return Err(e);
        }
    }
    Ok(out)
}

/// Updates rows of the heap table `relid` as an `UPDATE ... SET` of the columns named would, with
/// no statement: the version at `tids[i]`, which this transaction holds locked (`SELECT ... FOR
/// UPDATE`), gets `row(i)`'s values in those columns and keeps its others; the new version goes
/// on the same page when it fits (HOT), and gets index entries when it does not. `key(i)` names
/// the value column `key_at` (a column not updated) must still hold, so a tid that came to hold
/// another row is never written. No triggers fire and no privilege is checked: the caller owns
/// the rows. Returns the new versions' tids in the order of `tids`; None, having written nothing,
/// when the table is not a heap or has triggers or rules, or the transaction is read-only (the
/// caller then updates with a statement, which refuses what an UPDATE refuses). A row gone or
/// changed since it was locked is an ERROR (the transaction rolls back), as is a key that does not
/// match.
pub fn update_rows<'a, const N: usize>(
    relid: pg_sys::Oid,
    key_at: &str,
    columns: &[&str; N],
    tids: &[pg_sys::ItemPointerData],
    key: impl Fn(usize) -> &'a [u8],
    mut row: impl FnMut(usize) -> [Cell<'a>; N],
) -> Result<Option<Vec<pg_sys::ItemPointerData>>, MxError> {
    // SAFETY: the table is opened with RowExclusiveLock (kept to the transaction's end, as an
    // UPDATE keeps it) and closed here; its access method is checked to be heap and it has no
    // trigger or rule before anything is written; each tid is a version this transaction locked
    // (simple_heap_update raises on one that is gone or changed); every pointer below is made,
    // used and freed here, its values in a memory context deleted at the end.
    unsafe {
        let rel = pg_sys::table_open(relid, pg_sys::RowExclusiveLock as pg_sys::LOCKMODE);
        if (*(*rel).rd_rel).relam != pg_sys::HEAP_TABLE_AM_OID || !(*rel).trigdesc.is_null() || (*(*rel).rd_rel).relhasrules || pg_sys::XactReadOnly {
            pg_sys::table_close(rel, pg_sys::NoLock as pg_sys::LOCKMODE);
            return Ok(None);
        }
        let desc = (*rel).rd_att;
        let natts = (*desc).natts as usize;
        let at = match columns_at(rel, desc, columns) {
            Ok(at) => at,
            Err(e) => {
                pg_sys::table_close(rel, pg_sys::NoLock as pg_sys::LOCKMODE);
                return Err(e);
            }
        };
        let Some(key_col) = super::tuple::find_attr_from(desc, key_at, 0) else {
            pg_sys::table_close(rel, pg_sys::NoLock as pg_sys::LOCKMODE);
            return Err(MxError::new(code::INTERNAL, format!("the updated table lacks column {key_at}")));
        };
        pg_sys::CheckCmdReplicaIdentity(rel, pg_sys::CmdType::CMD_UPDATE);
        let mcx = pg_sys::AllocSetContextCreateExtended(
            pg_sys::CurrentMemoryContext,
            c"memory_ext update_rows".as_ptr(),
            pg_sys::ALLOCSET_DEFAULT_MINSIZE as usize,
            pg_sys::ALLOCSET_DEFAULT_INITSIZE as usize,
            pg_sys::ALLOCSET_DEFAULT_MAXSIZE as usize,
        );
        let old_cx = pg_sys::MemoryContextSwitchTo(mcx);
        let rri: *mut pg_sys::ResultRelInfo = pg_sys::palloc0(std::mem::size_of::<pg_sys::ResultRelInfo>()).cast();
        (*rri).type_ = pg_sys::NodeTag::T_ResultRelInfo;
        pg_sys::InitResultRelInfo(rri, rel, 1, std::ptr::null_mut(), 0);
        pg_sys::ExecOpenIndices(rri, false);
        let estate = pg_sys::CreateExecutorState();
        let old = pg_sys::table_slot_create(rel, std::ptr::null_mut());
        let new = pg_sys::MakeSingleTupleTableSlot(desc, &raw const pg_sys::TTSOpsHeapTuple);
        let mut values = vec![pg_sys::Datum::from(0usize); natts];
        let mut nulls = vec![true; natts];
        let mut out = Vec::with_capacity(tids.len());
        let mut failed = None;
        for (i, tid) in tids.iter().enumerate() {
            pgrx::check_for_interrupts!();
            let mut t = *tid;
            if !pg_sys::table_tuple_fetch_row_version(rel, &mut t, &raw mut pg_sys::SnapshotAnyData, old) {
                failed = Some(MxError::new(code::INTERNAL, format!("no row version at {} of {}", tid_text(tid), super::tuple::relation_name(rel))));
                break;
            }
            pg_sys::slot_getallattrs(old);
            values.copy_from_slice(std::slice::from_raw_parts((*old).tts_values, natts));
            nulls.copy_from_slice(std::slice::from_raw_parts((*old).tts_isnull, natts));
            let held = (!nulls[key_col]).then(|| super::varlena::text_bytes(values[key_col]));
            if held != Some(key(i)) {
                failed = Some(MxError::new(code::INTERNAL, format!("the row at {} of {} is not the one locked", tid_text(tid), super::tuple::relation_name(rel))));
                break;
            }
            // The new values: in the update's context, freed with it.
            let cells = row(i);
            let mem = pg_sys::palloc(row_varlena_size(&cells).max(1)).cast::<u8>();
            pg_sys::ExecClearTuple(new);
            store_row(new, natts, &at, &cells, mem);
            for (k, (v, n)) in values.iter_mut().zip(nulls.iter_mut()).enumerate() {
                if at.contains(&k) {
                    *v = *(*new).tts_values.add(k);
                    *n = *(*new).tts_isnull.add(k);
                }
            }
            pg_sys::ExecClearTuple(new);
            let tuple = pg_sys::heap_form_tuple(desc, values.as_mut_ptr(), nulls.as_mut_ptr());
            #[cfg(not(pg_insert_index_summarizing))]
            let (all, summarizing) = {
                pg_sys::simple_heap_update(rel, &mut t, tuple);
                ((*(*tuple).t_data).t_infomask2 as u32 & pg_sys::HEAP_ONLY_TUPLE == 0, false)
            };
            #[cfg(pg_insert_index_summarizing)]
            let (all, summarizing) = {
                let mut which = pg_sys::TU_UpdateIndexes::TU_None;
                pg_sys::simple_heap_update(rel, &mut t, tuple, &mut which);
                (which == pg_sys::TU_UpdateIndexes::TU_All, which == pg_sys::TU_UpdateIndexes::TU_Summarizing)
            };
            if all || summarizing {
                pg_sys::ExecStoreHeapTuple(tuple, new, false);
                (*new).tts_tid = (*tuple).t_self;
                insert_index_entries(rri, new, estate, summarizing);
                pg_sys::ExecClearTuple(new);
            }
            out.push((*tuple).t_self);
            pg_sys::ExecClearTuple(old);
        }
        pg_sys::ExecDropSingleTupleTableSlot(old);
        pg_sys::ExecDropSingleTupleTableSlot(new);
        pg_sys::ExecCloseIndices(rri);
        pg_sys::FreeExecutorState(estate);
        pg_sys::MemoryContextSwitchTo(old_cx);
        pg_sys::MemoryContextDelete(mcx);
        pg_sys::table_close(rel, pg_sys::NoLock as pg_sys::LOCKMODE);
        if let Some(e) = failed {
            return Err(e);
        }
        // What this transaction's later statements read sees the new versions.
        pg_sys::CommandCounterIncrement();
        Ok(Some(out))
    }
}

/// Deletes the rows at `tids` of the heap table `relid` one by one with simple_heap_delete: no
/// statement, no triggers, no privilege check; the caller must own the rows (the sequencer, which
/// alone deletes pending entries, under its lock). As a DELETE would, it refuses a table a
/// publication publishes deletes of without a replica identity (55000), so a subscriber never
/// keeps rows the publisher deleted. A row already deleted or updated by another transaction is
/// an ERROR (and the whole transaction rolls back). `relid` must be a heap table (`is_heap`).
pub fn delete_rows(relid: pg_sys::Oid, tids: &[pg_sys::ItemPointerData]) -> Result<(), MxError> {
    // SAFETY: the table is opened with RowExclusiveLock (kept to the transaction's end, as a
    // DELETE keeps it) and closed here; its access method is checked to be heap before
    // simple_heap_delete touches it; each tid is a row read under this transaction's snapshot
    // (simple_heap_delete raises on one that is gone or changed).
    unsafe {
        let rel = pg_sys::table_open(relid, pg_sys::RowExclusiveLock as pg_sys::LOCKMODE);
        if (*(*rel).rd_rel).relam != pg_sys::HEAP_TABLE_AM_OID {
            pg_sys::table_close(rel, pg_sys::NoLock as pg_sys::LOCKMODE);
            return Err(MxError::new(code::INTERNAL, "a direct delete from a table that is not a heap"));
        }
        pg_sys::CheckCmdReplicaIdentity(rel, pg_sys::CmdType::CMD_DELETE);
        for tid in tids {
            pgrx::check_for_interrupts!();
            let mut t = *tid;
            pg_sys::simple_heap_delete(rel, &mut t);
        }
        pg_sys::table_close(rel, pg_sys::NoLock as pg_sys::LOCKMODE);
    }
    Ok(())
}

/// Whether `relid` is a table stored by the heap access method.
pub fn is_heap(relid: pg_sys::Oid) -> bool {
    // SAFETY: a syscache-backed open with AccessShareLock (kept to the transaction's end).
    unsafe {
        let rel = pg_sys::try_relation_open(relid, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
        if rel.is_null() {
            return false;
        }
        let heap = (*(*rel).rd_rel).relam == pg_sys::HEAP_TABLE_AM_OID;
        pg_sys::relation_close(rel, pg_sys::NoLock as pg_sys::LOCKMODE);
        heap
    }
}

impl Drop for Opened {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return; // the transaction's abort closes them
        }
        for &rel in &self.0 {
            // SAFETY: opened in `open`, closed once; the lock stays until transaction end.
            unsafe { pg_sys::table_close(rel, pg_sys::NoLock as pg_sys::LOCKMODE) };
        }
    }
}

/// Moves the pending entries of the GIN indexes `names` of schema `schema` into their trees, as
/// `SELECT gin_clean_pending_list(index)` does for each (called directly: no statement; an empty
/// list costs a metapage read). Each found by name in the syscache; one that does not exist, or
/// is not a GIN index, is skipped (an extension not yet updated has none). In the caller's
/// transaction; the caller must own them (the background integrator runs as the bootstrap
/// superuser), else the builtin's error.
pub fn gin_clean_pending_lists(schema: &std::ffi::CStr, names: &[&std::ffi::CStr]) {
    // SAFETY: syscache lookups by name (InvalidOid for a missing one); the index is opened and
    // locked (try_relation_open: NULL for one dropped while the lock was awaited) to read its
    // access method, the lock kept to the transaction's end, then cleaned by the builtin.
    unsafe {
        let ns = pg_sys::get_namespace_oid(schema.as_ptr(), true);
        if ns == pg_sys::InvalidOid {
            return;
        }
        for name in names {
            let idx = pg_sys::get_relname_relid(name.as_ptr(), ns);
            if idx == pg_sys::InvalidOid {
                continue;
            }
            let rel = pg_sys::try_relation_open(idx, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
            if rel.is_null() {
                continue;
            }
            let gin = (*(*rel).rd_rel).relkind == pg_sys::RELKIND_INDEX as std::ffi::c_char && (*(*rel).rd_rel).relam == pg_sys::GIN_AM_OID;
            pg_sys::relation_close(rel, pg_sys::NoLock as pg_sys::LOCKMODE);
            if gin {
                pgrx::direct_function_call_as_datum(pg_sys::gin_clean_pending_list, &[Some(pg_sys::Datum::from(idx))]);
            }
        }
    }
}
