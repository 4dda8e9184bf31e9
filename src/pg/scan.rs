//! Index scans without the executor: what a row trigger reads many times a second (the drift
//! detectors' "latest earlier row" lookups) as a btree scan of a known index with equality and
//! range keys, read backward, the rows' columns taken from the heap tuple in place. No statement
//! is parsed, planned or started, so a lookup costs its index descent and heap fetches.
//!
//! A `Lookup` sees what an SPI statement sent from the trigger would see: the command counter is
//! advanced and the snapshot taken as `_SPI_execute_plan` takes it for a read-write statement
//! (a new one per lookup at READ COMMITTED, the transaction's at REPEATABLE READ or above, with
//! this command's rows visible). Neither privileges nor row-level security are checked: callers
//! read memory_ext's own closed tables, with keys taken from a row that already passed the
//! table's row-level security, and use what they read only to decide what to record.

use super::error::{code, MxError};
use pgrx::pg_sys;

/// One scan key: index column `attno` (1-based) compared by `strategy` (a btree strategy
/// number) through the operator function `proc` with `arg`.
#[derive(Clone, Copy)]
pub struct Key {
    pub attno: i16,
    pub strategy: u32,
    pub proc: u32,
    pub arg: pg_sys::Datum,
}

impl Key {
    pub fn eq(attno: i16, proc: u32, arg: pg_sys::Datum) -> Key {
        Key { attno, strategy: pg_sys::BTEqualStrategyNumber, proc, arg }
    }
}

/// The snapshot lookups read under, pushed as the active snapshot while alive.
pub struct Lookup {
    snapshot: pg_sys::Snapshot,
}

impl Lookup {
    /// Advances the command counter and pushes the snapshot of a read-write SPI statement.
    pub fn begin() -> Lookup {
        // SAFETY: what _SPI_execute_plan does before a read-write statement, inside the trigger's
        // transaction; popped in Drop (on an error, the abort pops it).
        unsafe {
            pg_sys::CommandCounterIncrement();
            pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot());
            pg_sys::UpdateActiveSnapshotCommandId();
            Lookup { snapshot: pg_sys::GetActiveSnapshot() }
        }
    }

    /// Like `begin`, but under a snapshot taken now (`GetLatestSnapshot`, with this command's
    /// rows visible) rather than the transaction's: what a per-backend cache fills from, so that
    /// at REPEATABLE READ it never keeps rows a change committed since the transaction began
    /// has replaced (as `spi::read_latest` reads for the SQL-filled caches).
    pub fn latest() -> Lookup {
        // SAFETY: as in `begin`; PushActiveSnapshot copies the static latest snapshot.
        unsafe {
            pg_sys::CommandCounterIncrement();
            pg_sys::PushActiveSnapshot(pg_sys::GetLatestSnapshot());
            Lookup { snapshot: pg_sys::GetActiveSnapshot() }
        }
    }

    /// A backward scan (latest first, in the index's order) of `index` on `heap` with `keys`.
    pub fn backward(&self, heap: pg_sys::Oid, index: pg_sys::Oid, keys: &[Key]) -> Result<Scan<'_>, MxError> {
        // SAFETY: the relations are opened with AccessShareLock (kept to the transaction's end,
        // as the executor keeps them; relation_close and index_close do the same for a relation
        // opened either way); the index must belong to the heap and be a btree, which is
        // checked before the scan starts; scan keys take the index column's collation; the scan
        // and its slot are ended in Scan's Drop, before this Lookup pops the snapshot.
        unsafe {
            // A relation dropped since its oid was cached (DROP INDEX, the end of REINDEX
            // CONCURRENTLY): the cache is dropped by now, and the statement can be retried.
            let gone = || {
                MxError::new(code::SERIALIZATION_FAILURE, "a table or index memory_ext reads was dropped or replaced concurrently")
                    .hint("Retry the transaction.")
            };
            let h = pg_sys::try_relation_open(heap, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
            if h.is_null() {
                return Err(gone());
            }
            let i = pg_sys::try_relation_open(index, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
            if i.is_null() {
                pg_sys::table_close(h, pg_sys::NoLock as pg_sys::LOCKMODE);
                return Err(gone());
            }
            let ok = !(*i).rd_index.is_null()
                && (*(*i).rd_index).indrelid == heap
                && (*i).rd_rel.as_ref().is_some_and(|r| r.relam == pg_sys::BTREE_AM_OID);
            if !ok {
                pg_sys::index_close(i, pg_sys::NoLock as pg_sys::LOCKMODE);
                pg_sys::table_close(h, pg_sys::NoLock as pg_sys::LOCKMODE);
                return Err(MxError::new(code::INTERNAL, format!("index {} is not a btree of relation {}", index.to_u32(), heap.to_u32())));
            }
            // An index left invalid (a failed CREATE INDEX CONCURRENTLY under the same name) would
            // miss rows: refused, as the planner would not use it either.
            if !((*(*i).rd_index).indisvalid && (*(*i).rd_index).indisready) {
                let name = std::ffi::CStr::from_ptr((*(*i).rd_rel).relname.data.as_ptr()).to_string_lossy().into_owned();
                pg_sys::index_close(i, pg_sys::NoLock as pg_sys::LOCKMODE);
                pg_sys::table_close(h, pg_sys::NoLock as pg_sys::LOCKMODE);
                return Err(MxError::new(code::NOT_INSTALLED, format!("index memory.{name} is not valid"))
                    .hint("REINDEX it (memory_ext's detectors read it)."));
            }
            let nkeyatts = (*(*i).rd_index).indnkeyatts as i16;
            let mut sk: Vec<pg_sys::ScanKeyData> = vec![std::mem::zeroed(); keys.len()];
            for (k, key) in keys.iter().enumerate() {
                if key.attno < 1 || key.attno > nkeyatts {
                    pg_sys::index_close(i, pg_sys::NoLock as pg_sys::LOCKMODE);
                    pg_sys::table_close(h, pg_sys::NoLock as pg_sys::LOCKMODE);
                    return Err(MxError::new(code::INTERNAL, "a scan key names a column the index does not have"));
                }
                let collation = *(*i).rd_indcollation.add(key.attno as usize - 1);
                pg_sys::ScanKeyEntryInitialize(
                    &mut sk[k],
                    0,
                    key.attno,
                    key.strategy as pg_sys::StrategyNumber,
                    pg_sys::InvalidOid,
                    collation,
                    pg_sys::Oid::from(key.proc),
                    key.arg,
                );
            }
            // PostgreSQL 18 added the instrumentation argument (cfg `pg_index_scan_instrument`).
            #[cfg(not(pg_index_scan_instrument))]
            let scan = pg_sys::index_beginscan(h, i, self.snapshot, keys.len() as i32, 0);
            #[cfg(pg_index_scan_instrument)]
            let scan = pg_sys::index_beginscan(h, i, self.snapshot, std::ptr::null_mut(), keys.len() as i32, 0);
            pg_sys::index_rescan(scan, sk.as_mut_ptr(), keys.len() as i32, std::ptr::null_mut(), 0);
            let slot = pg_sys::table_slot_create(h, std::ptr::null_mut());
            Ok(Scan { heap: h, index: i, scan, slot, tuple: std::ptr::null_mut(), _keys: sk, _lookup: std::marker::PhantomData })
        }
    }
}

impl Lookup {
    /// A sequential scan of every row of `heap` this lookup's snapshot sees, in physical order
    /// (a big table through a small ring of buffers, as any sequential scan).
    pub fn all(&self, heap: pg_sys::Oid) -> Result<HeapScan<'_>, MxError> {
        self.scan(heap, true)
    }

    /// `all`, its pages read into the shared buffers as any other read (no ring), starting at
    /// the first page: for a scan whose rows the transaction goes on to change (the sequencer
    /// deletes what it read; through a ring, a table bigger than a quarter of shared_buffers
    /// would be read from the kernel twice).
    pub fn all_kept(&self, heap: pg_sys::Oid) -> Result<HeapScan<'_>, MxError> {
        self.scan(heap, false)
    }

    fn scan(&self, heap: pg_sys::Oid, ring: bool) -> Result<HeapScan<'_>, MxError> {
        // SAFETY: the table is opened with AccessShareLock (kept to the transaction's end); the
        // scan and its slot are ended in HeapScan's Drop, before this Lookup pops the snapshot.
        unsafe {
            let h = pg_sys::try_relation_open(heap, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
            if h.is_null() {
                return Err(MxError::new(code::SERIALIZATION_FAILURE, "a table memory_ext reads was dropped concurrently").hint("Retry the transaction."));
            }
            let scan = pg_sys::table_beginscan_strat(h, self.snapshot, 0, std::ptr::null_mut(), ring, ring);
            let slot = pg_sys::table_slot_create(h, std::ptr::null_mut());
            Ok(HeapScan { heap: h, scan, slot, on_row: false, _lookup: std::marker::PhantomData })
        }
    }
}

/// A sequential scan in progress; `next` moves to the next visible row.
pub struct HeapScan<'l> {
    heap: pg_sys::Relation,
    scan: pg_sys::TableScanDesc,
    slot: *mut pg_sys::TupleTableSlot,
    /// Whether the slot holds a row (the last `next` found one).
    on_row: bool,
    _lookup: std::marker::PhantomData<&'l Lookup>,
}

impl HeapScan<'_> {
    /// The next row visible to the lookup's snapshot, false when there is none.
    pub fn next(&mut self) -> bool {
        // SAFETY: the scan and slot made in `all`; the slot's values stay valid until the next
        // call or the end of the scan.
        // The row is deformed once, into the slot's arrays (by-reference values point into the
        // buffer page the slot pins): reading its columns one by one would walk the tuple from its
        // start for each column after the first variable-width one.
        unsafe {
            self.on_row = pg_sys::table_scan_getnextslot(self.scan, pg_sys::ScanDirection::ForwardScanDirection, self.slot);
            if self.on_row {
                pg_sys::slot_getallattrs(self.slot);
            }
            self.on_row
        }
    }

    /// Column `attno` (1-based) of the current row; None for NULL (or no row).
    pub fn datum(&self, attno: i16) -> Option<pg_sys::Datum> {
        // SAFETY: after slot_getallattrs the slot's arrays hold tts_nvalid (= natts) entries;
        // attno is checked against it.
        unsafe {
            if !self.on_row || attno < 1 || attno as i32 > (*self.slot).tts_nvalid as i32 {
                return None;
            }
            let k = attno as usize - 1;
            (!*(*self.slot).tts_isnull.add(k)).then(|| *(*self.slot).tts_values.add(k))
        }
    }

    /// The varlena column `attno` of the current row as bytes after its header (None for NULL),
    /// valid until `next`; a toasted value is detoasted into the current memory context.
    pub fn bytes(&self, attno: i16) -> Option<&[u8]> {
        // SAFETY: a non-NULL varlena datum of the current row, not used after the row changes.
        self.datum(attno).map(|d| unsafe { super::varlena::text_bytes(d) })
    }

    /// Pages of the table's main fork (what the scan reads).
    pub fn pages(&self) -> u64 {
        // SAFETY: the open relation of the scan.
        unsafe { pg_sys::RelationGetNumberOfBlocksInFork(self.heap, pg_sys::ForkNumber::MAIN_FORKNUM) as u64 }
    }

    /// The current row's place in the table.
    pub fn tid(&self) -> pg_sys::ItemPointerData {
        // SAFETY: the slot holds the current row (tts_tid is set by the scan).
        unsafe { (*self.slot).tts_tid }
    }

    /// Whether the type of column `attno` is `typ` (a scan reads columns by number; callers check
    /// the table's shape first).
    pub fn column_is(&self, attno: i16, typ: pg_sys::Oid) -> bool {
        // SAFETY: the open relation's descriptor; attno is checked against natts.
        unsafe {
            let desc = (*self.heap).rd_att;
            attno >= 1 && (attno as i32) <= (*desc).natts && {
                let a = &*crate::pg::tupdesc_attr(desc, attno as usize - 1);
                !a.attisdropped && a.atttypid == typ
            }
        }
    }
}

impl Drop for HeapScan<'_> {
    fn drop(&mut self) {
        // On an error the transaction's abort ends the scan and releases the relation.
        if !std::thread::panicking() {
            // SAFETY: ends what `all` began; the lock stays to the end of the transaction.
            unsafe {
                pg_sys::ExecDropSingleTupleTableSlot(self.slot);
                pg_sys::table_endscan(self.scan);
                pg_sys::table_close(self.heap, pg_sys::NoLock as pg_sys::LOCKMODE);
            }
        }
    }
}

/// The heap tuple a buffer slot holds, read in place (valid while the slot keeps it).
///
/// # Safety
/// `slot` is a buffer heap tuple slot holding a row.
unsafe fn slot_tuple(slot: *mut pg_sys::TupleTableSlot) -> pg_sys::HeapTuple {
    let mut should_free = false;
    unsafe { pg_sys::ExecFetchSlotHeapTuple(slot, false, &mut should_free) }
}

impl Drop for Lookup {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            // SAFETY: pops the snapshot pushed in `begin` (every Scan borrowing it is gone).
            unsafe { pg_sys::PopActiveSnapshot() };
        }
    }
}

/// An index scan in progress; `next` moves to the next visible row.
pub struct Scan<'l> {
    heap: pg_sys::Relation,
    index: pg_sys::Relation,
    scan: pg_sys::IndexScanDesc,
    slot: *mut pg_sys::TupleTableSlot,
    tuple: pg_sys::HeapTuple,
    // The keys the scan reads (index_rescan keeps a copy; kept alive to be safe).
    _keys: Vec<pg_sys::ScanKeyData>,
    _lookup: std::marker::PhantomData<&'l Lookup>,
}

impl Scan<'_> {
    /// The next row visible to the lookup's snapshot, false when there is none.
    pub fn next(&mut self) -> bool {
        // SAFETY: the scan and slot made in `backward`; the heap tuple of a buffer slot is read in
        // place (should_free stays false) and is valid until the next call or the end of the scan.
        unsafe {
            let found = pg_sys::index_getnext_slot(self.scan, pg_sys::ScanDirection::BackwardScanDirection, self.slot);
            self.tuple = if found { slot_tuple(self.slot) } else { std::ptr::null_mut() };
            found
        }
    }

    /// The same scan again from its start with the keys' arguments `args` (in the keys' order;
    /// the index, the keys' columns and operators stay): one scan opened for a series of lookups
    /// of the same shape, each a new index descent. The arguments must stay valid while read.
    pub fn rescan(&mut self, args: &[pg_sys::Datum]) {
        assert_eq!(args.len(), self._keys.len(), "one argument a key");
        for (k, a) in self._keys.iter_mut().zip(args) {
            k.sk_argument = *a;
        }
        self.tuple = std::ptr::null_mut();
        // SAFETY: the scan made in `backward`, its keys changed in their arguments only;
        // index_rescan copies them (btrescan) and drops the scan's position and heap fetch state.
        unsafe { pg_sys::index_rescan(self.scan, self._keys.as_mut_ptr(), self._keys.len() as i32, std::ptr::null_mut(), 0) };
    }

    /// Column `attno` (1-based, of the table) of the current row; None for NULL (or no row).
    /// The row is deformed in the slot as far as the columns read (once for several columns: a
    /// column read by itself walks the tuple from its start after a variable-width column).
    pub fn datum(&self, attno: i16) -> Option<pg_sys::Datum> {
        if self.tuple.is_null() {
            return None;
        }
        // SAFETY: the slot holds the current row (the buffer tuple `next` found, pinned by the
        // slot); slot_getsomeattrs_int deforms it up to attno, checked against the descriptor;
        // by-reference values point into the pinned tuple, valid until the next call.
        unsafe {
            let slot = self.slot;
            if attno < 1 || attno as i32 > (*(*slot).tts_tupleDescriptor).natts {
                return None;
            }
            if ((*slot).tts_nvalid as i32) < attno as i32 {
                pg_sys::slot_getsomeattrs_int(slot, attno as i32);
            }
            let k = attno as usize - 1;
            (!*(*slot).tts_isnull.add(k)).then(|| *(*slot).tts_values.add(k))
        }
    }

    /// The text column `attno` of the current row as bytes (None for NULL), valid until `next`.
    pub fn bytes(&self, attno: i16) -> Option<&[u8]> {
        // SAFETY: a non-NULL text datum of the current row (or its detoasted copy in the current
        // memory context), not used after the row changes (the borrow of self).
        self.datum(attno).map(|d| unsafe { super::varlena::text_bytes(d) })
    }

    /// Whether the current row was written by this transaction (or one of its subtransactions):
    /// such a row may yet be rolled back, so what is read from it is not for a cache.
    pub fn written_here(&self) -> bool {
        if self.tuple.is_null() {
            return false;
        }
        // SAFETY: the current tuple's header (see `next`); its raw xmin is a plain field. A row
        // known committed (or frozen, whose raw xmin may be any old number) is not this
        // transaction's.
        unsafe {
            let h = (*self.tuple).t_data;
            (u32::from((*h).t_infomask) & pg_sys::HEAP_XMIN_COMMITTED) == 0
                && pg_sys::TransactionIdIsCurrentTransactionId((*h).t_choice.t_heap.t_xmin)
        }
    }

    /// The command of this transaction that inserted the current row (its cmin, through a combo
    /// command id when the row was also updated or deleted, even in a rolled-back
    /// subtransaction); None for a row of another transaction.
    pub fn inserting_command(&self) -> Option<pg_sys::CommandId> {
        // SAFETY: HeapTupleHeaderGetCmin reads the header of a tuple inserted by this transaction.
        self.written_here().then(|| unsafe { pg_sys::HeapTupleHeaderGetCmin((*self.tuple).t_data) })
    }

    /// The 16 bytes of the uuid column `attno` of the current row.
    pub fn uuid(&self, attno: i16) -> Option<[u8; 16]> {
        // SAFETY: a non-NULL uuid datum points at its 16 bytes.
        self.datum(attno).map(|d| unsafe { std::ptr::read_unaligned(d.cast_mut_ptr::<[u8; 16]>()) })
    }
}

impl Drop for Scan<'_> {
    fn drop(&mut self) {
        // On an error the transaction's abort ends the scan and releases the relations.
        if !std::thread::panicking() {
            // SAFETY: ends what `backward` began, in reverse order; the locks stay to the end of
            // the transaction.
            unsafe {
                pg_sys::ExecDropSingleTupleTableSlot(self.slot);
                pg_sys::index_endscan(self.scan);
                pg_sys::index_close(self.index, pg_sys::NoLock as pg_sys::LOCKMODE);
                pg_sys::table_close(self.heap, pg_sys::NoLock as pg_sys::LOCKMODE);
            }
        }
    }
}

/// The table columns (attribute numbers) of `index`'s key columns, in order (0 for an
/// expression), or None when it is not an index.
pub fn index_key_columns(index: pg_sys::Oid) -> Option<Vec<i16>> {
    // SAFETY: the index is opened with AccessShareLock for the read and closed at once; indkey
    // has indnkeyatts valid entries.
    unsafe {
        let rel = pg_sys::try_relation_open(index, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
        if rel.is_null() {
            return None;
        }
        let out = if (*rel).rd_index.is_null() {
            None
        } else {
            let ix = (*rel).rd_index;
            let n = (*ix).indnkeyatts as usize;
            Some((0..n).map(|k| *(*ix).indkey.values.as_ptr().add(k)).collect())
        };
        pg_sys::relation_close(rel, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
        out
    }
}

/// The type of column `attno` of relation `relid` (InvalidOid when there is none).
pub fn atttype(relid: pg_sys::Oid, attno: i16) -> pg_sys::Oid {
    // SAFETY: a syscache lookup by relation oid and attribute number.
    unsafe { pg_sys::get_atttype(relid, attno) }
}

/// The array type of `elem` (InvalidOid when it has none).
pub fn array_type_of(elem: pg_sys::Oid) -> pg_sys::Oid {
    // SAFETY: a syscache lookup by type oid.
    unsafe { pg_sys::get_array_type(elem) }
}

/// Column number (1-based) of `name` in relation `relid`, None when it has none.
pub fn attnum(relid: pg_sys::Oid, name: &std::ffi::CStr) -> Option<i16> {
    // SAFETY: a syscache lookup by relation oid and name; InvalidAttrNumber (0) when absent.
    let n = unsafe { pg_sys::get_attnum(relid, name.as_ptr()) };
    (n > 0).then_some(n)
}

/// Whether two non-NULL array datums are equal as `=` compares them (array_eq: the same
/// dimensions and bounds, the elements equal by their type's default equality, under `collation`).
pub fn arrays_equal(a: pg_sys::Datum, b: pg_sys::Datum, collation: pg_sys::Oid) -> bool {
    // SAFETY: array_eq called through the function manager (it caches its type information in
    // the FmgrInfo OidFunctionCall2Coll sets up) with two non-NULL array datums; an error (arrays
    // of different element types) is raised as PostgreSQL raises it.
    unsafe { pg_sys::OidFunctionCall2Coll(pg_sys::Oid::from(pg_sys::F_ARRAY_EQ), collation, a, b).value() != 0 }
}

/// Whether the array datum `d` (of 4-byte by-value elements of type `elemtype`, such as an enum
/// array) holds `value`.
pub fn array_holds(d: pg_sys::Datum, elemtype: pg_sys::Oid, value: pg_sys::Datum) -> bool {
    // SAFETY: `d` is a non-NULL array datum of a column of type elemtype[] (detoasted into the
    // current memory context); its element type is checked before it is taken apart.
    unsafe {
        let arr = pg_sys::pg_detoast_datum(d.cast_mut_ptr()) as *mut pg_sys::ArrayType;
        if (*arr).elemtype != elemtype {
            return false;
        }
        let mut elems: *mut pg_sys::Datum = std::ptr::null_mut();
        let mut nulls: *mut bool = std::ptr::null_mut();
        let mut n: std::ffi::c_int = 0;
        pg_sys::deconstruct_array(arr, elemtype, 4, true, pg_sys::TYPALIGN_INT as std::ffi::c_char, &mut elems, &mut nulls, &mut n);
        (0..n as usize).any(|k| !*nulls.add(k) && (*elems.add(k)).value() as u32 == value.value() as u32)
    }
}

/// `at - make_interval(days => days)` for a timestamptz `at` (calendar days in the session's
/// time zone, as the SQL expression computes it).
pub fn minus_days(at: pg_sys::Datum, days: i32) -> pg_sys::Datum {
    // SAFETY: timestamptz_mi_interval of a timestamptz datum and a palloc'd interval; the
    // result is a by-value timestamptz.
    unsafe {
        let iv = pg_sys::palloc0(std::mem::size_of::<pg_sys::Interval>()) as *mut pg_sys::Interval;
        (*iv).day = days;
        pgrx::direct_function_call_as_datum(pg_sys::timestamptz_mi_interval, &[Some(at), Some(pg_sys::Datum::from(iv))])
            .unwrap_or(at)
    }
}

thread_local! {
    // A memory context for what one call below allocates (a detoasted jsonb, its field), reset
    // after each call, so a loop over many rows does not keep every row's copy to its end.
    static SCRATCH: std::cell::Cell<pg_sys::MemoryContext> = const { std::cell::Cell::new(std::ptr::null_mut()) };
}

/// Runs `f` with the scratch context current, then resets it; `f` returns owned Rust data (what
/// it allocates in Postgres memory, such as detoasted values, is gone when it returns).
pub(crate) fn in_scratch<R>(f: impl FnOnce() -> R) -> R {
    // SAFETY: the scratch context is a child of TopMemoryContext made once per backend; the
    // previous context is current again before the reset (an error in `f` leaves the switch to
    // the abort, which makes another context current, and the next call resets the scratch).
    unsafe {
        let mut cx = SCRATCH.with(std::cell::Cell::get);
        if cx.is_null() {
            cx = pg_sys::AllocSetContextCreateExtended(
                pg_sys::TopMemoryContext,
                c"memory_ext scan scratch".as_ptr(),
                pg_sys::ALLOCSET_DEFAULT_MINSIZE as usize,
                pg_sys::ALLOCSET_DEFAULT_INITSIZE as usize,
                pg_sys::ALLOCSET_DEFAULT_MAXSIZE as usize,
            );
            SCRATCH.with(|c| c.set(cx));
        }
        let prev = pg_sys::MemoryContextSwitchTo(cx);
        let r = f();
        pg_sys::MemoryContextSwitchTo(prev);
        pg_sys::MemoryContextReset(cx);
        r
    }
}

/// `j ->> key` of a jsonb datum as bytes (None: NULL, not an object, no such key).
pub fn jsonb_field_text(j: Option<pg_sys::Datum>, key: &str) -> Option<Vec<u8>> {
    let j = j?;
    // SAFETY: a non-NULL jsonb datum and a text key built here; the detoasted jsonb and the
    // result live in the scratch context and the result is copied out before it is reset.
    in_scratch(|| unsafe {
        let k = pg_sys::cstring_to_text_with_len(key.as_ptr().cast(), key.len() as i32);
        let t = pgrx::direct_function_call_as_datum(pg_sys::jsonb_object_field_text, &[Some(j), Some(pg_sys::Datum::from(k))])?;
        Some(super::varlena::text_bytes(t).to_vec())
    })
}
