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
