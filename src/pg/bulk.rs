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
            // Where each column is in this table (an attached partition may order them differently).
            let mut at = [0usize; N];
            for (c, name) in columns.iter().enumerate() {
                // (Columns are named in their table's order: each is where the last one's next is.)
                let next = if c == 0 { 0 } else { at[c - 1] + 1 };
                match super::tuple::find_attr_from(desc, name, next) {
                    Some(i) => at[c] = i,
                    None => return Err(MxError::new(code::INTERNAL, format!("table {} lacks column {name}", super::tuple::relation_name(rel)))),
                }
            }
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

/// ExecInsertIndexTuples for a plain insert (no conflict handling); PostgreSQL 16 added the
/// `onlySummarizing` argument (cfg `pg_insert_index_summarizing`, build.rs; unchanged in 18).
///
/// # Safety
/// `rri` has its indexes open, `slot` holds a tuple just inserted into its relation, `estate` is
/// the executor state they were made in.
unsafe fn insert_index_tuples(rri: *mut pg_sys::ResultRelInfo, slot: *mut pg_sys::TupleTableSlot, estate: *mut pg_sys::EState) {
    #[cfg(not(pg_insert_index_summarizing))]
    // SAFETY: as the function's contract.
    unsafe {
        pg_sys::ExecInsertIndexTuples(rri, slot, estate, false, false, std::ptr::null_mut(), std::ptr::null_mut());
    }
    #[cfg(pg_insert_index_summarizing)]
    // SAFETY: as the function's contract.
    unsafe {
        pg_sys::ExecInsertIndexTuples(rri, slot, estate, false, false, std::ptr::null_mut(), std::ptr::null_mut(), false);
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
