//! memory_ext's own heavyweight locks. Each is an advisory lock tag of a class no SQL function
//! can name: `pg_advisory_lock` and its kin set the tag's fourth field to 1 or 2, these to
//! `CLASS`. So no role can take one or wait in its queue by itself (a table's lock any role can
//! reach by parsing a statement that names it: the parser locks a DML target before privileges
//! are checked); only memory_ext's own code takes them, and a transaction that integrated audit
//! entries (an integration run for `audit_verify`, `consent_receipt`, ...) holds the integration
//! lock until it ends, and cannot be prepared (`audit` refuses it). They show in `pg_locks` as
//! advisory locks with `objsubid` = `CLASS`.

use pgrx::prelude::*;

/// The tag's fourth field ("mx").
pub const CLASS: u16 = 0x6d78;
/// The tag's second field ("memx"): memory_ext's name space within the class.
const SPACE: u32 = 0x6d65_6d78;

/// What is locked, per database.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lock {
    /// Integration: taken by every integrator, SHARE ROW EXCLUSIVE by one that takes every chain
    /// (alone), ROW EXCLUSIVE by the background integrators (beside each other).
    Integration,
    /// Share `k` of the chains is served: held for its life by the background integrator of that
    /// share (a session lock), or for a round by one that serves it in its stead.
    Served(u32),
}

/// How long a lock is held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hold {
    /// Until the transaction ends.
    Transaction,
    /// Until the backend exits.
    Session,
}

fn tag(lock: Lock) -> pg_sys::LOCKTAG {
    pg_sys::LOCKTAG {
        // SAFETY: reads a global set at backend start.
        locktag_field1: unsafe { pg_sys::MyDatabaseId }.to_u32(),
        locktag_field2: SPACE,
        locktag_field3: match lock {
            Lock::Integration => 0,
            Lock::Served(k) => 1 + k,
        },
        locktag_field4: CLASS,
        locktag_type: pg_sys::LockTagType::LOCKTAG_ADVISORY as u8,
        locktag_lockmethodid: pg_sys::USER_LOCKMETHOD as u8,
    }
}

/// Takes `lock` in `mode`; with `wait` false gives up at once when a conflicting lock is held or
/// waited for. Returns whether it is held. A wait obeys `lock_timeout` and the deadlock detector
/// (an error).
pub fn take(lock: Lock, mode: u32, hold: Hold, wait: bool) -> bool {
    let tag = tag(lock);
    // SAFETY: the tag is a plain value on the stack, copied by the lock manager; the lock method
    // is the user (advisory) one, whose modes go up to ExclusiveLock (every mode used here).
    let got = unsafe { pg_sys::LockAcquire(&tag, mode as pg_sys::LOCKMODE, hold == Hold::Session, !wait) };
    got != pg_sys::LockAcquireResult::LOCKACQUIRE_NOT_AVAIL
}

/// Whether this backend holds `lock` in `mode` (in its transaction or its session).
pub fn held(lock: Lock, mode: u32) -> bool {
    let tag = tag(lock);
    // SAFETY: as in `take`; only reads this backend's lock table.
    #[cfg(not(pg_lock_held_or_stronger))]
    let held = unsafe { pg_sys::LockHeldByMe(&tag, mode as pg_sys::LOCKMODE) };
    // PostgreSQL 17 added `orstronger` (cfg `pg_lock_held_or_stronger`): false asks for `mode` exactly.
    #[cfg(pg_lock_held_or_stronger)]
    // SAFETY: as above.
    let held = unsafe { pg_sys::LockHeldByMe(&tag, mode as pg_sys::LOCKMODE, false) };
    held
}

/// Releases `lock` held in `mode` once (a lock taken more than once in the transaction stays
/// held until its last release or the transaction's end).
pub fn release(lock: Lock, mode: u32, hold: Hold) {
    let tag = tag(lock);
    // SAFETY: as in `take`; releasing a lock not held only warns.
    unsafe { pg_sys::LockRelease(&tag, mode as pg_sys::LOCKMODE, hold == Hold::Session) };
}

/// `pg_advisory_xact_lock_shared(hashtextextended(key, 0))` of SQL, taken without a statement: the
/// same lock (the int8 advisory tag of the key's hash, as `SET_LOCKTAG_INT64` makes it), shared,
/// until the transaction ends. A wait obeys `lock_timeout` and the deadlock detector.
pub fn advisory_xact_shared_text(key: &str) {
    let tag = advisory_int8_tag(hash_text(key));
    // SAFETY: a plain tag on the stack, copied by the lock manager; ShareLock of the user method.
    unsafe { pg_sys::LockAcquire(&tag, pg_sys::ShareLock as pg_sys::LOCKMODE, false, false) };
}

// common/hashfn.h (exported by the server; not in pgrx's bindings): what hash_any_extended calls.
unsafe extern "C-unwind" {
    fn hash_bytes_extended(k: *const u8, keylen: std::ffi::c_int, seed: u64) -> u64;
}

/// `hashtextextended(key, 0)` as SQL computes it under the default collation, without a call
/// through fmgr or a text datum: the default collation is deterministic (PostgreSQL has no
/// nondeterministic default collation), and hashtextextended hashes a deterministic collation's
/// text as `hash_any_extended` of its bytes.
fn hash_text(key: &str) -> u64 {
    // SAFETY: hash_bytes_extended reads `len` bytes from the pointer and keeps nothing.
    unsafe { hash_bytes_extended(key.as_ptr(), key.len() as std::ffi::c_int, 0) }
}

/// The tag of an int8 advisory lock on `key` in this database, as `SET_LOCKTAG_INT64` makes it
/// (what pg_advisory_xact_lock(bigint) takes).
fn advisory_int8_tag(key: u64) -> pg_sys::LOCKTAG {
    pg_sys::LOCKTAG {
        // SAFETY: reads a global set at backend start.
        locktag_field1: unsafe { pg_sys::MyDatabaseId }.to_u32(),
        locktag_field2: (key >> 32) as u32,
        locktag_field3: key as u32,
        // (1: the int8 form's class.)
        locktag_field4: 1,
        locktag_type: pg_sys::LockTagType::LOCKTAG_ADVISORY as u8,
        locktag_lockmethodid: pg_sys::USER_LOCKMETHOD as u8,
    }
}

/// pg_advisory_xact_lock(key) (the SQL function's tag: any role can take the same lock by it),
/// held until the transaction ends. A wait obeys `lock_timeout` and the deadlock detector (an
/// error).
pub fn advisory_xact_lock(key: i64) {
    let tag = advisory_int8_tag(key as u64);
    // SAFETY: the tag is a plain value on the stack, copied by the lock manager; ExclusiveLock is
    // a mode of the user (advisory) lock method.
    unsafe { pg_sys::LockAcquire(&tag, pg_sys::ExclusiveLock as pg_sys::LOCKMODE, false, false) };
}
