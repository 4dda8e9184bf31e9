//! The current transaction: its id, its clock, and random bytes from PostgreSQL.

use pgrx::prelude::*;

/// Assigns the transaction an id now (so pgrx runs later SPI writes as read-write statements).
pub fn ensure_xid() {
    // SAFETY: assigns (or returns) the current transaction's id; no pointers involved.
    unsafe { pg_sys::GetCurrentTransactionId() };
}

/// The top-level transaction's id, or InvalidTransactionId before it has one.
pub fn top_xid_if_any() -> pg_sys::TransactionId {
    // SAFETY: reads the transaction state.
    unsafe { pg_sys::GetTopTransactionIdIfAny() }
}

/// The current time, microseconds since the PostgreSQL epoch (2000-01-01 UTC).
pub fn now_micros() -> i64 {
    // SAFETY: reads the clock.
    unsafe { pg_sys::GetCurrentTimestamp() }
}

/// A timestamptz as JSON writes it (`jsonb_build_object`, `to_json`): ISO 8601 in the
/// session's time zone.
pub fn json_timestamptz(micros: i64) -> String {
    // SAFETY: JsonEncodeDateTime with no buffer returns a palloc'd C string for a timestamptz
    // datum (it raises on an infinite value), copied and freed.
    unsafe {
        let p = pg_sys::JsonEncodeDateTime(std::ptr::null_mut(), pg_sys::Datum::from(micros), pg_sys::TIMESTAMPTZOID, std::ptr::null());
        let s = std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned();
        pg_sys::pfree(p.cast());
        s
    }
}

/// `to_char(timestamptz, format)` in the session's time zone.
pub fn to_char(micros: i64, format: &str) -> String {
    // SAFETY: timestamptz_to_char of a timestamptz datum and a text built here; the result text
    // is copied out.
    unsafe {
        let f = pg_sys::cstring_to_text_with_len(format.as_ptr().cast(), format.len() as i32);
        match pgrx::direct_function_call_as_datum(pg_sys::timestamptz_to_char, &[Some(pg_sys::Datum::from(micros)), Some(pg_sys::Datum::from(f))]) {
            Some(t) => String::from_utf8_lossy(super::varlena::text_bytes(t)).into_owned(),
            None => String::new(),
        }
    }
}

/// The start of the current transaction, microseconds since the PostgreSQL epoch.
pub fn xact_start_micros() -> i64 {
    // SAFETY: reads the transaction state.
    unsafe { pg_sys::GetCurrentTransactionStartTimestamp() }
}

/// Fills `buf` from PostgreSQL's strong random source; false when it failed.
pub fn strong_random(buf: &mut [u8]) -> bool {
    // SAFETY: writes exactly buf.len() bytes into buf.
    unsafe { pg_sys::pg_strong_random(buf.as_mut_ptr().cast(), buf.len()) }
}

/// Whether this backend is running an extension's install or update script.
pub fn creating_extension() -> bool {
    // SAFETY: reads a backend global.
    unsafe { pg_sys::creating_extension }
}

/// Whether this transaction may write tables and take row locks on a fresh snapshot: not in
/// recovery, not READ ONLY, and READ COMMITTED (at REPEATABLE READ or SERIALIZABLE the
/// transaction's snapshot would hide rows committed since it began).
pub fn can_write_fresh() -> bool {
    // SAFETY: reads backend globals of the transaction state.
    unsafe {
        !pg_sys::RecoveryInProgress()
            && !pg_sys::XactReadOnly
            && pg_sys::XactIsoLevel < pg_sys::XACT_REPEATABLE_READ as i32
    }
}

/// Whether this transaction reads under one snapshot (REPEATABLE READ or SERIALIZABLE): a row
/// another transaction commits after it is never seen, whatever locks it waits for.
pub fn uses_xact_snapshot() -> bool {
    // SAFETY: reads a backend global of the transaction state.
    unsafe { pg_sys::XactIsoLevel >= pg_sys::XACT_REPEATABLE_READ as i32 }
}

/// Whether the library is being loaded by shared_preload_libraries (the only time background
/// workers can be registered statically).
pub fn preloading() -> bool {
    // SAFETY: reads a postmaster global.
    unsafe { pg_sys::process_shared_preload_libraries_in_progress }
}

/// The server's max_worker_processes (background worker slots).
pub fn max_worker_processes() -> usize {
    // SAFETY: reads a setting's global, fixed at server start.
    unsafe { pg_sys::max_worker_processes }.max(0) as usize
}

/// Re-reads the configuration files (a background worker's answer to SIGHUP).
pub fn reload_config() {
    // SAFETY: called from a background worker's main loop, outside any transaction.
    unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
}

/// Ends a background worker with exit code 1, so that the postmaster starts it again after its
/// restart interval (exit code 0 would unregister it). At server shutdown nothing is restarted.
pub fn exit_to_be_restarted() -> ! {
    // SAFETY: called at the end of a background worker's main function, outside any transaction;
    // proc_exit runs the exit callbacks and does not return.
    unsafe { pg_sys::proc_exit(1) };
    #[allow(unreachable_code)]
    {
        unreachable!("proc_exit returned")
    }
}

/// Waits `d` (at most a second) on this process's latch without ending when it is set, and
/// without resetting it: the next wait sees it set. Ends the process if the postmaster dies.
pub fn sleep_ignoring_latch(d: std::time::Duration) {
    let ms = d.as_millis().clamp(1, 1000) as std::ffi::c_long;
    // SAFETY: waits on the process's own latch, with a timeout; WL_EXIT_ON_PM_DEATH exits the
    // process cleanly on the postmaster's death.
    unsafe {
        pg_sys::WaitLatch(
            pg_sys::MyLatch,
            (pg_sys::WL_TIMEOUT | pg_sys::WL_EXIT_ON_PM_DEATH) as i32,
            ms,
            pg_sys::PG_WAIT_EXTENSION,
        );
    }
}

/// Whether the server is in recovery (a hot standby): nothing can be written.
pub fn in_recovery() -> bool {
    // SAFETY: reads shared state.
    unsafe { pg_sys::RecoveryInProgress() }
}

/// Runs `sql`, one VACUUM statement, as a top-level command of a background worker: it starts
/// and commits its own transactions, as autovacuum's calls do, so that the worker clears the
/// dead rows of a table it deletes from without waiting for autovacuum's next visit.
///
/// Only in a background worker connected to a database, between its transactions (checked: it
/// does nothing elsewhere). An error longjmps to the worker's guard (the worker then exits and
/// is restarted), like any error in its loop.
pub fn vacuum_in_worker(sql: &std::ffi::CStr) {
    // SAFETY: reads of process-local state. MyBackendType rather than IsBackgroundWorker, which
    // PostgreSQL 17 removed.
    let between_transactions =
        unsafe { pg_sys::MyBackendType == pg_sys::BackendType::B_BG_WORKER && !pg_sys::IsTransactionState() };
    if !between_transactions {
        return;
    }
    // SAFETY: no transaction is open (checked), so this starts one; the statement and its parse
    // state live in a context of their own that outlives the transactions vacuum() commits and
    // starts (as a portal's context does for a client's VACUUM), deleted after.
    unsafe {
        pg_sys::StartTransactionCommand();
        let cxt = pg_sys::AllocSetContextCreateInternal(
            pg_sys::TopMemoryContext,
            c"memory_ext worker vacuum".as_ptr(),
            pg_sys::ALLOCSET_DEFAULT_MINSIZE as usize,
            pg_sys::ALLOCSET_DEFAULT_INITSIZE as usize,
            pg_sys::ALLOCSET_DEFAULT_MAXSIZE as usize,
        );
        let old = pg_sys::MemoryContextSwitchTo(cxt);
        let parsed = pg_sys::raw_parser(sql.as_ptr(), pg_sys::RawParseMode::RAW_PARSE_DEFAULT);
        assert!(!parsed.is_null() && (*parsed).length == 1, "vacuum_in_worker takes one statement");
        let raw = (*(*parsed).elements).ptr_value as *mut pg_sys::RawStmt;
        let stmt = (*raw).stmt;
        assert!((*stmt).type_ == pg_sys::NodeTag::T_VacuumStmt, "vacuum_in_worker takes a VACUUM statement");
        let pstate = pg_sys::make_parsestate(std::ptr::null_mut());
        let old_portal = pg_sys::PortalContext;
        pg_sys::PortalContext = cxt;
        pg_sys::ExecVacuum(pstate, stmt as *mut pg_sys::VacuumStmt, true);
        pg_sys::PortalContext = old_portal;
        pg_sys::MemoryContextSwitchTo(old);
        pg_sys::CommitTransactionCommand();
        pg_sys::MemoryContextDelete(cxt);
    }
}

/// Makes this command's writes visible to the statements that follow (rows inserted straight
/// into a table, then read by SQL).
pub fn command_counter_increment() {
    // SAFETY: advances the transaction's command counter, as between statements.
    unsafe { pg_sys::CommandCounterIncrement() };
}

/// Whether a database with oid `db` exists now (a catalog cache lookup after reading the
/// invalidations other backends sent, so a database made since is seen; in a transaction).
pub fn database_exists(db: u32) -> bool {
    // SAFETY: processes pending invalidation messages, then a syscache existence probe by a
    // plain oid key, inside a transaction.
    unsafe {
        pg_sys::AcceptInvalidationMessages();
        pg_sys::SearchSysCacheExists(
            pg_sys::SysCacheIdentifier::DATABASEOID as _,
            pg_sys::Datum::from(db),
            pg_sys::Datum::from(0),
            pg_sys::Datum::from(0),
            pg_sys::Datum::from(0),
        )
    }
}

/// Whether a database named `name` exists (pg_database is shared: this works in a background
/// worker connected to no database; in a transaction).
pub fn database_named_exists(name: &std::ffi::CStr) -> bool {
    // SAFETY: get_database_oid reads pg_database by name with missing_ok = true: no error.
    unsafe { pg_sys::get_database_oid(name.as_ptr(), true) != pg_sys::InvalidOid }
}

/// Whether an extension named `name` exists in the current database (pg_extension read through
/// its name index under the catalog snapshot, as CREATE EXTENSION checks it; in a transaction).
pub fn extension_exists(name: &std::ffi::CStr) -> bool {
    // SAFETY: get_extension_oid reads pg_extension by name with missing_ok = true: no error.
    unsafe { pg_sys::get_extension_oid(name.as_ptr(), true) != pg_sys::InvalidOid }
}

/// Sleeps about `ms` milliseconds on this process's latch, answering a cancel or termination
/// request first (CHECK_FOR_INTERRUPTS). For waits inside a statement.
pub fn sleep_interruptibly(ms: i64) {
    // SAFETY: the interrupt check may raise (a cancel), as in any statement; the wait is on the
    // process's own latch with a timeout, reset afterwards.
    unsafe {
        pgrx::check_for_interrupts!();
        pg_sys::WaitLatch(
            pg_sys::MyLatch,
            (pg_sys::WL_LATCH_SET | pg_sys::WL_TIMEOUT | pg_sys::WL_EXIT_ON_PM_DEATH) as i32,
            ms as std::ffi::c_long,
            pg_sys::PG_WAIT_EXTENSION,
        );
        pg_sys::ResetLatch(pg_sys::MyLatch);
        pgrx::check_for_interrupts!();
    }
}
