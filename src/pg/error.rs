//! The one error type of the extension and the SQLSTATE table (docs/design.md#shape-and-errors).
//!
//! pgrx reports errors through `PgSqlErrorCode`, a closed enum that cannot carry our own class
//! `MX`, and a Postgres error that passes back through pgrx is re-reported with an unknown code
//! collapsed to XX000. So errors are raised here with the raw `ereport` API, after the function
//! body has returned and dropped its values. An error of class MX raised under one of our own
//! SPI calls (a legal hold's MX006 under a statement run as a table's owner) would lose its code
//! on the way out through pgrx; `keep_sqlstate` around such a call notes the code when the error
//! is raised and raises it again with it.

use pgrx::pg_sys;
use std::ffi::{c_char, c_int, CString};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MxError {
    pub sqlstate: &'static str,
    pub message: String,
    pub detail: Option<String>,
    pub hint: Option<String>,
}

/// Every SQLSTATE memory_ext raises (docs/reference.md#errors-sqlstates), in one place.
// Some codes are raised only by the SQL files (ERRCODE = '...') or reserved by the contract (MX003,
// consent); core/tests/sqlstates.rs checks that every code raised anywhere is here and that the
// docs/reference.md documents exactly this table.
#[allow(dead_code)]
pub mod code {
    pub const INVALID_TRANSITION: &str = "MX001";
    pub const AUDIT_APPEND_ONLY: &str = "MX002";
    pub const CONSENT_REQUIRED: &str = "MX003";
    pub const DOWNGRADE: &str = "MX004";
    pub const SUPERSESSION: &str = "MX005";
    pub const HOLD_OR_HARD_DELETE: &str = "MX006";
    pub const SENSITIVE_INPUT: &str = "MX007";
    pub const BAD_ARGUMENT: &str = "22023";
    /// An unknown state text (memory.lifecycle_state or a text state column).
    pub const INVALID_TEXT: &str = "22P02";
    pub const NOT_FOUND: &str = "23503";
    /// memory.claim_chain of a claim that does not exist.
    pub const NO_DATA_FOUND: &str = "P0002";
    /// A row no audit partition can hold.
    pub const CHECK_VIOLATION: &str = "23514";
    pub const NO_PRIVILEGE: &str = "42501";
    pub const UNDEFINED_TABLE: &str = "42P01";
    /// A memory_ext trigger function attached or fired the wrong way.
    pub const TRIGGER_PROTOCOL: &str = "39P01";
    /// memory_ext is not installed in this database.
    pub const NOT_INSTALLED: &str = "55000";
    /// A mapped column renamed or dropped, a plain pg_restore without memory.restore_mode.
    pub const OBJECT_NOT_IN_STATE: &str = "55000";
    /// CREATE EXTENSION (or the upgrade) in a database that is not UTF-8 (raised by the scripts).
    pub const FEATURE_NOT_SUPPORTED: &str = "0A000";
    /// memory.audit_integrate() where it cannot chain (read-only or snapshot transaction, standby).
    pub const READ_ONLY_TRANSACTION: &str = "25006";
    /// A consent change that lost a race it cannot read past (snapshot isolation): retry.
    pub const SERIALIZATION_FAILURE: &str = "40001";
    /// A shared resource is exhausted (the queue of read events handed over at rollbacks).
    pub const INSUFFICIENT_RESOURCES: &str = "53000";
    /// A fault inside memory_ext (never a user's input).
    pub const INTERNAL: &str = "XX000";
}

impl MxError {
    pub fn new(sqlstate: &'static str, message: impl Into<String>) -> Self {
        MxError { sqlstate, message: message.into(), detail: None, hint: None }
    }

    pub fn bad_argument(message: impl Into<String>) -> Self {
        Self::new(code::BAD_ARGUMENT, message)
    }

    /// An SPI failure inside one of our functions (an internal error, naming where).
    pub fn spi(context: &str, e: pgrx::spi::Error) -> Self {
        Self::new(code::INTERNAL, format!("memory_ext {context}: {e}"))
    }

    /// `map_err` adapter: an SPI failure in the named capability.
    pub fn spi_in(context: &'static str) -> impl Fn(pgrx::spi::Error) -> Self {
        move |e| Self::spi(context, e)
    }

    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    pub fn detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }

    /// Raise as an ERROR with this SQLSTATE. Does not return.
    pub fn raise(self) -> ! {
        let sqlstate = make_sqlstate(self.sqlstate);
        // Copy the texts into palloc'd memory and drop every Rust allocation before the longjmp.
        let message = pg_cstr(&self.message);
        let detail = self.detail.as_deref().map(pg_cstr);
        let hint = self.hint.as_deref().map(pg_cstr);
        drop(self);
        unsafe { raw_ereport(sqlstate, message, detail, hint) }
    }
}

/// Keep Rust backtraces out of error reports. pgrx attaches `Backtrace::capture()` to the DETAIL
/// of every PostgreSQL error that passes back through a Rust frame (an error under our SPI calls),
/// and `capture` honours `RUST_BACKTRACE`: a server started with it set would send a kilobyte of
/// frames to the client with every such error. `RUST_LIB_BACKTRACE` takes precedence for
/// `capture` (not for panic messages), so it is set to 0 unless the operator set it: a developer
/// who wants the frames starts the server with `RUST_LIB_BACKTRACE=1`.
/// Runs in `_PG_init`, before any backtrace is captured (the setting is read once) and before this
/// library starts any thread.
pub fn quiet_backtraces() {
    if std::env::var_os("RUST_LIB_BACKTRACE").is_none() {
        std::env::set_var("RUST_LIB_BACKTRACE", "0");
    }
}

/// Unwrap a result whose error is an `MxError`, raising it.
pub trait OrRaise<T> {
    fn or_raise(self) -> T;
}

impl<T> OrRaise<T> for Result<T, MxError> {
    fn or_raise(self) -> T {
        match self {
            Ok(v) => v,
            Err(e) => e.raise(),
        }
    }
}

thread_local! {
    /// The SQLSTATE (one of `MX_CODES`) and message of the last error of class MX raised under
    /// `keep_sqlstate`, noted by `note_mx_error` while PostgreSQL raised it.
    static NOTED: std::cell::RefCell<Option<(&'static str, String)>> = const { std::cell::RefCell::new(None) };
}

/// memory_ext's own class of SQLSTATEs, the codes `keep_sqlstate` restores.
const MX_CODES: [&str; 7] = [
    code::INVALID_TRANSITION,
    code::AUDIT_APPEND_ONLY,
    code::CONSENT_REQUIRED,
    code::DOWNGRADE,
    code::SUPERSESSION,
    code::HOLD_OR_HARD_DELETE,
    code::SENSITIVE_INPUT,
];

/// Runs `f`, whose SPI statements may raise memory_ext's own SQLSTATEs (class MX, e.g. a legal
/// hold's MX006 from a trigger of the table the statement changes). pgrx re-raises an error that
/// passes back through a Rust frame with an unknown SQLSTATE collapsed to XX000; here the code is
/// noted when PostgreSQL raises the error (an error context callback, which `errfinish` calls for
/// every report) and the error raised again with it, its message, detail and hint. Any other
/// error goes on unchanged. The raise is a longjmp past the caller's frame, whose values are never
/// dropped: pass a `move` closure that owns the call's arguments (a `Vec<String>` left in the
/// caller leaked its heap at every error, review of issue 51).
pub fn keep_sqlstate<T>(f: impl FnOnce() -> T) -> T {
    NOTED.with(|n| n.borrow_mut().take());
    let result = {
        let _callback = ContextCallback::push();
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
    };
    let payload = match result {
        Ok(v) => return v,
        Err(payload) => payload,
    };
    let noted = NOTED.with(|n| n.borrow_mut().take());
    let restored = match (payload.downcast_ref::<pg_sys::panic::CaughtError>(), noted) {
        (Some(pg_sys::panic::CaughtError::PostgresError(report)), Some((sqlstate, message)))
            if report.sql_error_code() == pgrx::PgSqlErrorCode::ERRCODE_INTERNAL_ERROR
                && report.message() == message =>
        {
            Some(MxError {
                sqlstate,
                message,
                detail: report.detail().map(str::to_owned),
                hint: report.hint().map(str::to_owned),
            })
        }
        _ => None,
    };
    match restored {
        Some(e) => {
            drop(payload);
            e.raise()
        }
        None => std::panic::resume_unwind(payload),
    }
}

/// An entry of PostgreSQL's `error_context_stack` for `keep_sqlstate`, taken off again when it is
/// dropped (also while a caught error unwinds: pgrx's FFI guard puts the stack back as it was
/// when the call began, with this entry on top).
struct ContextCallback {
    entry: Box<pg_sys::ErrorContextCallback>,
}

impl ContextCallback {
    fn push() -> Self {
        // SAFETY: the entry is boxed, so its address is stable while it is on the stack, and it
        // is taken off in `drop`, before the box is freed.
        unsafe {
            let mut entry = Box::new(pg_sys::ErrorContextCallback {
                previous: pg_sys::error_context_stack,
                callback: Some(note_mx_error),
                arg: std::ptr::null_mut(),
            });
            pg_sys::error_context_stack = &mut *entry;
            ContextCallback { entry }
        }
    }
}

impl Drop for ContextCallback {
    fn drop(&mut self) {
        // SAFETY: restores the stack this entry was pushed on. Entries pushed above it were
        // taken off by their owners (PostgreSQL's callers restore it, pgrx's guard too).
        unsafe {
            if pg_sys::error_context_stack == &mut *self.entry as *mut _ {
                pg_sys::error_context_stack = self.entry.previous;
            }
        }
    }
}

/// The error context callback: notes an MX error's code and message as it is raised.
///
/// # Safety
/// Called by PostgreSQL's `errfinish` with an error being reported (`geterrcode` and
/// `CopyErrorData` read it); it must not raise, and allocates only in a context it switches to.
unsafe extern "C-unwind" fn note_mx_error(_arg: *mut std::ffi::c_void) {
    unsafe {
        let raw = pg_sys::geterrcode();
        let Some(sqlstate) = MX_CODES.iter().copied().find(|c| make_sqlstate(c) == raw) else {
            return;
        };
        // errfinish runs the callbacks in ErrorContext, where CopyErrorData may not allocate.
        let old = pg_sys::MemoryContextSwitchTo(pg_sys::TopTransactionContext);
        let data = pg_sys::CopyErrorData();
        pg_sys::MemoryContextSwitchTo(old);
        let message = if (*data).message.is_null() {
            String::new()
        } else {
            std::ffi::CStr::from_ptr((*data).message).to_string_lossy().into_owned()
        };
        pg_sys::FreeErrorData(data);
        NOTED.with(|n| *n.borrow_mut() = Some((sqlstate, message)));
    }
}

fn make_sqlstate(s: &str) -> c_int {
    let b = s.as_bytes();
    assert!(b.len() == 5, "SQLSTATE must be five characters");
    let six = |c: u8| ((c.wrapping_sub(b'0')) & 0x3F) as c_int;
    six(b[0]) + (six(b[1]) << 6) + (six(b[2]) << 12) + (six(b[3]) << 18) + (six(b[4]) << 24)
}

fn pg_cstr(s: &str) -> *mut c_char {
    // Interior NULs cannot occur in SQL text; replace them rather than fail while failing.
    let c = CString::new(s.replace('\0', "\\0")).unwrap_or_default();
    unsafe { pg_sys::pstrdup(c.as_ptr()) }
}

mod raw {
    use std::ffi::{c_char, c_int};
    // Declared here, unwrapped, so the longjmp of errfinish reaches Postgres' own handler with
    // the SQLSTATE intact instead of pgrx's FFI guard.
    unsafe extern "C-unwind" {
        pub fn errstart(elevel: c_int, domain: *const c_char) -> bool;
        pub fn errcode(sqlerrcode: c_int) -> c_int;
        pub fn errmsg(fmt: *const c_char, ...) -> c_int;
        pub fn errdetail(fmt: *const c_char, ...) -> c_int;
        pub fn errhint(fmt: *const c_char, ...) -> c_int;
        pub fn errfinish(filename: *const c_char, lineno: c_int, funcname: *const c_char);
    }
}

/// ereport(ERROR) with our SQLSTATE and texts; does not return (longjmps to PostgreSQL's handler).
///
/// # Safety
/// The texts are palloc'd, NUL-terminated strings, and no Rust value with a destructor may still
/// be alive on the stack between here and the nearest PostgreSQL error handler (the caller drops
/// its values first).
unsafe fn raw_ereport(
    sqlstate: c_int,
    message: *mut c_char,
    detail: Option<*mut c_char>,
    hint: Option<*mut c_char>,
) -> ! {
    const PCT_S: &[u8] = b"%s\0";
    const FILE: &[u8] = b"memory_ext\0";
    const FUNC: &[u8] = b"memory_ext\0";
    unsafe {
        if raw::errstart(pgrx::PgLogLevel::ERROR as c_int, std::ptr::null()) {
            raw::errcode(sqlstate);
            raw::errmsg(PCT_S.as_ptr().cast(), message);
            if let Some(d) = detail {
                raw::errdetail(PCT_S.as_ptr().cast(), d);
            }
            if let Some(h) = hint {
                raw::errhint(PCT_S.as_ptr().cast(), h);
            }
            raw::errfinish(FILE.as_ptr().cast(), 0, FUNC.as_ptr().cast());
        }
    }
    unreachable!("ereport(ERROR) returned")
}
