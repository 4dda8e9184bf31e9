//! SPI results read in place: a fetched batch of a cursor, deformed once, whose text and varlena
//! columns are borrowed without copying; trigger data registered for transition tables.

use super::error::{code, MxError};
use pgrx::datum::DatumWithOid;
use pgrx::prelude::*;
use pgrx::spi::SpiClient;
use std::cell::RefCell;
use std::collections::HashMap;

thread_local! {
    // Plans of memory_ext's fixed statements, prepared once per backend (SPI_keepplan). The plan
    // cache re-plans them by itself after DDL, e.g. when partitions are added.
    static PLANS: RefCell<HashMap<&'static str, pgrx::spi::OwnedPreparedStatement>> = RefCell::new(HashMap::new());
}

/// Runs one of memory_ext's fixed statements (a constant, schema-qualified SQL text) through its
/// kept plan, preparing it on first use with parameters of `types`.
pub fn kept<'conn>(
    client: &SpiClient<'conn>,
    sql: &'static str,
    types: &[pg_sys::Oid],
    args: &[DatumWithOid],
    limit: Option<std::ffi::c_long>,
) -> Result<pgrx::spi::SpiTupleTable<'conn>, pgrx::spi::Error> {
    if !PLANS.with(|p| p.borrow().contains_key(sql)) {
        let oids: Vec<pgrx::PgOid> = types.iter().map(|t| pgrx::PgOid::from(*t)).collect();
        let plan = client.prepare(sql, &oids)?.keep();
        PLANS.with(|p| p.borrow_mut().insert(sql, plan));
    }
    PLANS.with(|p| {
        let plans = p.borrow();
        let plan = plans.get(sql).expect("prepared above");
        client.select(plan, limit, args)
    })
}

/// As `kept`, for a fixed statement that writes (its plan prepared as a writing one, run with
/// a new snapshot and command id, as PL/pgSQL runs a statement of a VOLATILE function).
pub fn kept_mut<'conn>(
    client: &mut SpiClient<'conn>,
    sql: &'static str,
    types: &[pg_sys::Oid],
    args: &[DatumWithOid],
) -> Result<pgrx::spi::SpiTupleTable<'conn>, pgrx::spi::Error> {
    if !MUT_PLANS.with(|p| p.borrow().contains_key(sql)) {
        let oids: Vec<pgrx::PgOid> = types.iter().map(|t| pgrx::PgOid::from(*t)).collect();
        let plan = client.prepare_mut(sql, &oids)?.keep();
        MUT_PLANS.with(|p| p.borrow_mut().insert(sql, plan));
    }
    MUT_PLANS.with(|p| {
        let plans = p.borrow();
        let plan = plans.get(sql).expect("prepared above");
        client.update(plan, None, args)
    })
}

thread_local! {
    // Plans of memory_ext's fixed writing statements (`kept_mut`).
    static MUT_PLANS: RefCell<HashMap<&'static str, pgrx::spi::OwnedPreparedStatement>> = RefCell::new(HashMap::new());
}

thread_local! {
    // Plans of statements built at run time from fixed parts (recall's, whose conditions depend
    // on the filters given), kept per backend by their text; at most KEPT_TEXTS of them.
    static TEXT_PLANS: RefCell<HashMap<String, pgrx::spi::OwnedPreparedStatement>> = RefCell::new(HashMap::new());
    // Their texts, oldest first: the oldest makes room for a new one.
    static TEXT_ORDER: RefCell<std::collections::VecDeque<String>> = RefCell::new(std::collections::VecDeque::new());
}
const KEPT_TEXTS: usize = 64;

/// Runs a read-only statement built at run time through a plan kept per backend by its text,
/// prepared on first use with parameters of `types`. PostgreSQL's plan cache decides between a
/// plan for the values (the first five runs, and whenever it is cheaper) and a generic one, and
/// re-plans after DDL. A text beyond KEPT_TEXTS drops the oldest kept plan.
pub fn kept_text<'conn>(
    client: &SpiClient<'conn>,
    sql: &str,
    types: &[pg_sys::Oid],
    args: &[DatumWithOid],
) -> Result<pgrx::spi::SpiTupleTable<'conn>, pgrx::spi::Error> {
    keep_text(client, sql, types)?;
    TEXT_PLANS.with(|p| client.select(p.borrow().get(sql).expect("kept above"), None, args))
}

/// Prepares `sql` with parameters of `types` and keeps its plan, unless kept already.
fn keep_text(client: &SpiClient<'_>, sql: &str, types: &[pg_sys::Oid]) -> Result<(), pgrx::spi::Error> {
    if !TEXT_PLANS.with(|p| p.borrow().contains_key(sql)) {
        let oids: Vec<pgrx::PgOid> = types.iter().map(|t| pgrx::PgOid::from(*t)).collect();
        let plan = client.prepare(sql, &oids)?.keep();
        TEXT_PLANS.with(|p| {
            let mut p = p.borrow_mut();
            if p.len() >= KEPT_TEXTS {
                if let Some(oldest) = TEXT_ORDER.with(|o| o.borrow_mut().pop_front()) {
                    p.remove(&oldest);
                }
            }
            p.insert(sql.to_owned(), plan);
        });
        TEXT_ORDER.with(|o| o.borrow_mut().push_back(sql.to_owned()));
    }
    Ok(())
}

/// A value of the built-in type `oid` read from its text by the type's input function (what a
/// cast from text does), in the current memory context; SQL NULL for None. An invalid text is the
/// input function's error.
pub fn datum_from_text(oid: pg_sys::Oid, text: Option<&str>) -> DatumWithOid<'static> {
    let Some(text) = text else { return DatumWithOid::null_oid(oid) };
    // (A text from SQL or from JSON holds no NUL: JSON escapes it.)
    let c = std::ffi::CString::new(text).unwrap_or_default();
    // SAFETY: a built-in type's input function, given a NUL-terminated string; the value it
    // returns is of `oid` and lives in the current memory context, which outlives the statement
    // it is bound to (run within the caller's call).
    unsafe {
        let (mut input, mut ioparam) = (pg_sys::InvalidOid, pg_sys::InvalidOid);
        pg_sys::getTypeInputInfo(oid, &mut input, &mut ioparam);
        let d = pg_sys::OidInputFunctionCall(input, c.as_ptr() as *mut std::ffi::c_char, ioparam, -1);
        DatumWithOid::new(d, oid)
    }
}

/// Column `ordinal` (1-based) of the current row of `t`, a varlena of type `typ` (jsonb), as a
/// value copied into the memory context the SPI connection was made from (SPI_datumTransfer): it
/// outlives the connection. None for NULL; an error for a column of another type.
pub fn varlena_out_of_spi(t: &pgrx::spi::SpiTupleTable<'_>, ordinal: usize, typ: pg_sys::Oid) -> Result<Option<pgrx::datum::AnyElement>, MxError> {
    let e = |e: pgrx::spi::Error| MxError::spi("read", e);
    if t.column_type_oid(ordinal).map_err(e)?.value() != typ {
        return Err(MxError::new(code::INTERNAL, "a query returned an unexpected row shape"));
    }
    let Some(d) = t.get_datum_by_ordinal(ordinal).map_err(e)? else { return Ok(None) };
    // SAFETY: a non-NULL varlena datum of `typ` (checked above) in the current row of the
    // connection's tuple table, detoasted (a copy in the connection's memory when it was
    // compressed or stored out of line); SPI_datumTransfer copies that plain value into the upper
    // executor context, which outlives the connection.
    unsafe {
        let plain = pg_sys::pg_detoast_datum(d.cast_mut_ptr());
        let copy = pg_sys::SPI_datumTransfer(pg_sys::Datum::from(plain), false, -1);
        Ok(pgrx::datum::AnyElement::from_polymorphic_datum(copy, false, typ))
    }
}

/// The first column of the first row of a read-only query (None: no row, or NULL). pgrx's
/// `Spi::get_one` runs its query as a writing statement, which takes a transaction id: that
/// fails in a parallel worker (memory.classify is PARALLEL SAFE) and makes a read write.
pub fn read_one<T: pgrx::FromDatum + pgrx::IntoDatum>(sql: &str, args: &[DatumWithOid]) -> Result<Option<T>, pgrx::spi::Error> {
    Spi::connect(|c| {
        let t = c.select(sql, Some(1), args)?;
        if t.is_empty() {
            return Ok(None);
        }
        t.first().get_one::<T>()
    })
}

/// Makes a statement trigger's transition tables visible to the queries it sends through SPI.
pub fn register_trigger_data(td: &pg_sys::TriggerData) {
    // SAFETY: the trigger data is valid for the trigger call, which outlives this SPI connection.
    unsafe { pg_sys::SPI_register_trigger_data(td as *const _ as *mut _) };
}

/// One fetched batch of a cursor, deformed once; text columns are read in place.
#[derive(Default)]
pub struct Fetched {
    /// The SPI tuple table of the batch (freed by the next fetch and on drop).
    table: Option<*mut pg_sys::SPITupleTable>,
    cols: usize,
    utf8: bool,
    values: Vec<pg_sys::Datum>,
    nulls: Vec<bool>,
}

impl Fetched {
    /// Fetch the next `n` rows of `cursor`, whose query returns `cols` columns; false when there
    /// are none.
    pub fn fetch(&mut self, cursor: &mut pgrx::spi::SpiCursor, n: usize, cols: usize) -> Result<bool, MxError> {
        self.free();
        if cursor.fetch(n as std::ffi::c_long).map_err(|e| MxError::spi("fetch", e))?.is_empty() {
            return Ok(false);
        }
        // SAFETY: the fetch above left its result in SPI_tuptable (its column count is checked
        // against `cols` below); the table is ours until freed.
        unsafe {
            let tt = pg_sys::SPI_tuptable;
            pg_sys::SPI_tuptable = std::ptr::null_mut();
            self.table = Some(tt);
            let n = (*tt).numvals as usize;
            let desc = (*tt).tupdesc;
            if (*desc).natts as usize != cols {
                return Err(MxError::new(code::INTERNAL, "a query returned an unexpected row shape"));
            }
            self.cols = cols;
            self.utf8 = super::varlena::database_is_utf8();
            self.values.resize(n * cols, pg_sys::Datum::from(0usize));
            self.nulls.resize(n * cols, true);
            for i in 0..n {
                let (v, nl) = (self.values[i * cols..].as_mut_ptr(), self.nulls[i * cols..].as_mut_ptr());
                pg_sys::heap_deform_tuple(*(*tt).vals.add(i), desc, v, nl);
            }
            self.values.truncate(n * cols);
            self.nulls.truncate(n * cols);
        }
        Ok(true)
    }

    pub fn len(&self) -> usize {
        if self.cols == 0 {
            0
        } else {
            self.values.len() / self.cols
        }
    }

    /// Bytes of the text column `c` of row `i` (None for NULL).
    pub fn bytes(&self, i: usize, c: usize) -> Option<&[u8]> {
        let k = i * self.cols + c;
        // SAFETY: a non-NULL text datum of the batch, alive until the batch is freed.
        (!self.nulls[k]).then(|| unsafe { super::varlena::text_bytes(self.values[k]) })
    }

    /// The datum of column `c` of row `i` (None for NULL), alive until the batch is freed.
    fn datum(&self, i: usize, c: usize) -> Option<pg_sys::Datum> {
        let k = i * self.cols + c;
        (!self.nulls[k]).then(|| self.values[k])
    }

    /// An int8 (or timestamptz) column `c` of row `i`.
    pub fn int8(&self, i: usize, c: usize) -> Option<i64> {
        self.datum(i, c).map(|d| d.value() as i64)
    }

    /// A tid column `c` of row `i`.
    pub fn tid(&self, i: usize, c: usize) -> Option<pg_sys::ItemPointerData> {
        // SAFETY: a non-NULL tid datum of the batch points at its 6 bytes, alive until the batch
        // is freed; they are copied out.
        self.datum(i, c).map(|d| unsafe { std::ptr::read_unaligned(d.cast_mut_ptr::<pg_sys::ItemPointerData>()) })
    }

    /// An int4 column `c` of row `i`.
    pub fn int4(&self, i: usize, c: usize) -> Option<i32> {
        self.datum(i, c).map(|d| d.value() as i32)
    }

    /// The jsonb column `c` of row `i` as JSON text (jsonb_out), appended to `out`; false for NULL.
    pub fn jsonb_text_into(&self, i: usize, c: usize, out: &mut Vec<u8>) -> bool {
        let Some(d) = self.datum(i, c) else { return false };
        // SAFETY: a non-NULL jsonb datum of the batch.
        unsafe { super::varlena::jsonb_out_into(d, out) }
    }

    /// The text column `c` of row `i` (see `varlena::as_str`).
    pub fn text(&self, i: usize, c: usize) -> Option<&str> {
        self.bytes(i, c).map(|b| super::varlena::as_str(b, self.utf8))
    }

    fn free(&mut self) {
        if let Some(tt) = self.table.take() {
            // SAFETY: the table came from SPI in `fetch` and nothing borrows from it any more.
            unsafe { pg_sys::SPI_freetuptable(tt) };
        }
        self.values.clear();
        self.nulls.clear();
    }
}

impl Drop for Fetched {
    fn drop(&mut self) {
        // On an error the transaction's abort releases SPI memory; no call into Postgres then.
        if !std::thread::panicking() {
            self.free();
        }
    }
}

/// The rows of a read of memory_ext's rule and policy tables under a snapshot taken now (see
/// `read_latest`), read by column with pgrx's datum conversions.
pub struct Latest<'conn> {
    table: *mut pg_sys::SPITupleTable,
    rows: usize,
    _conn: std::marker::PhantomData<&'conn SpiClient<'conn>>,
}

impl Latest<'_> {
    pub fn len(&self) -> usize {
        self.rows
    }

    /// Column `col` (1-based) of row `row` (0-based), converted as `T`.
    pub fn get<T: pgrx::FromDatum + pgrx::IntoDatum + 'static>(&self, row: usize, col: usize) -> Result<Option<T>, MxError> {
        if row >= self.rows {
            return Err(MxError::new(code::INTERNAL, "a settings read past its rows"));
        }
        // SAFETY: `table` is the SPI tuple table of this read, alive until dropped (or until the
        // SPI connection `'conn` ends); `row` is in range; SPI_getbinval checks the column number.
        unsafe {
            let desc = (*self.table).tupdesc;
            if col == 0 || col > (*desc).natts as usize {
                return Err(MxError::new(code::INTERNAL, "a settings read asked for a column it does not have"));
            }
            let typ = pg_sys::SPI_gettypeid(desc, col as i32);
            if !T::is_compatible_with(typ) {
                return Err(MxError::new(code::INTERNAL, "a settings read asked for a column of another type"));
            }
            let mut isnull = false;
            let d = pg_sys::SPI_getbinval(*(*self.table).vals.add(row), desc, col as i32, &mut isnull);
            Ok(T::from_polymorphic_datum(d, isnull, typ))
        }
    }
}

impl Drop for Latest<'_> {
    fn drop(&mut self) {
        // On an error the transaction's abort releases SPI memory; no call into Postgres then.
        if !std::thread::panicking() && !self.table.is_null() {
            // SAFETY: the table came from SPI in `read_latest`; nothing borrows from it any more.
            unsafe { pg_sys::SPI_freetuptable(self.table) };
        }
    }
}

/// Runs the fixed read-only query `sql` under a snapshot taken now, not the statement's or the
/// transaction's: what memory_ext caches per backend (rules, policies, thresholds, org grants)
/// is read this way, so a cache dropped by another session's committed change is never refilled
/// from a snapshot older than that change (at REPEATABLE READ, or inside a statement that began
/// before it) and kept after this transaction ends. PostgreSQL's foreign-key checks read the
/// referenced table the same way. Must run inside `client`'s SPI connection. In parallel mode
/// (no new snapshot can be taken there) it reads under the query's snapshot, and
/// `callbacks::Fill::keep` says not to cache the result.
pub fn read_latest<'conn>(_client: &SpiClient<'conn>, sql: &'static std::ffi::CStr, args: &[DatumWithOid]) -> Result<Latest<'conn>, MxError> {
    let mut types: Vec<pg_sys::Oid> = args.iter().map(|a| a.oid()).collect();
    let mut values: Vec<pg_sys::Datum> =
        args.iter().map(|a| a.datum().map(|d| d.sans_lifetime()).unwrap_or(pg_sys::Datum::from(0usize))).collect();
    let nulls: Vec<std::ffi::c_char> = args.iter().map(|a| if a.datum().is_some() { b' ' } else { b'n' } as std::ffi::c_char).collect();
    // SAFETY: inside an SPI connection (the `client` borrow); the snapshot pushed is popped on
    // the normal path, and an error's abort unwinds the active-snapshot stack; the arrays live
    // across the call and have one entry per argument; read_only = true makes SPI run the query
    // under the pushed (active) snapshot rather than taking its own.
    unsafe {
        let latest = !pg_sys::IsInParallelMode();
        if latest {
            pg_sys::PushActiveSnapshot(pg_sys::GetLatestSnapshot());
        }
        let rc = pg_sys::SPI_execute_with_args(
            sql.as_ptr(),
            args.len() as i32,
            types.as_mut_ptr(),
            values.as_mut_ptr(),
            nulls.as_ptr(),
            true,
            0,
        );
        if latest {
            pg_sys::PopActiveSnapshot();
        }
        if rc != pg_sys::SPI_OK_SELECT as i32 {
            return Err(MxError::new(code::INTERNAL, format!("a settings read failed (SPI code {rc})")));
        }
        let table = pg_sys::SPI_tuptable;
        pg_sys::SPI_tuptable = std::ptr::null_mut();
        let rows = if table.is_null() { 0 } else { (*table).numvals as usize };
        Ok(Latest { table, rows, _conn: std::marker::PhantomData })
    }
}
