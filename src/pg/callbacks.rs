//! The backend's callback registry: one relcache callback, one syscache callback for roles, one
//! for schemas, one transaction callback (transaction end, its outcome, and before a PREPARE) and one subtransaction callback
//! are registered with PostgreSQL, and each
//! capability module registers plain functions here from its own `init`, so no module flushes
//! another's state.

use pgrx::prelude::*;
use std::cell::RefCell;

type RelFn = fn(pg_sys::Oid);
type Fn0 = fn();
type OutcomeFn = fn(bool);
type SubFn = fn(pg_sys::SubTransactionId);

thread_local! {
    static RELCACHE: RefCell<Vec<RelFn>> = const { RefCell::new(Vec::new()) };
    static ROLES: RefCell<Vec<Fn0>> = const { RefCell::new(Vec::new()) };
    static SCHEMAS: RefCell<Vec<Fn0>> = const { RefCell::new(Vec::new()) };
    static XACT_END: RefCell<Vec<Fn0>> = const { RefCell::new(Vec::new()) };
    static SUBXACT_ABORT: RefCell<Vec<Fn0>> = const { RefCell::new(Vec::new()) };
    static SUBXACT_START: RefCell<Vec<SubFn>> = const { RefCell::new(Vec::new()) };
    static SUBXACT_COMMIT: RefCell<Vec<SubFn>> = const { RefCell::new(Vec::new()) };
    static PREPARE: RefCell<Vec<Fn0>> = const { RefCell::new(Vec::new()) };
    static OUTCOME: RefCell<Vec<OutcomeFn>> = const { RefCell::new(Vec::new()) };
    // The subtransaction whose abort the SUBXACT_ABORT functions are running for.
    static ABORTING: std::cell::Cell<pg_sys::SubTransactionId> = const { std::cell::Cell::new(0) };
    // Bumped by every relcache and role invalidation this backend processes (see `Fill`).
    static GENERATION: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// A cache fill in progress: taken before a cache reads its table (under a snapshot taken now,
/// `spi::read_latest`), asked after. An invalidation processed in between (a change that
/// committed after the snapshot was taken sends it when the read first locks something) means
/// the rows read may be older than the change, so they are used for this call but not kept; in
/// parallel mode (where a snapshot cannot be taken now) nothing is kept either.
pub struct Fill(u64);

impl Fill {
    pub fn begin() -> Fill {
        Fill(GENERATION.with(std::cell::Cell::get))
    }

    /// The invalidation generation it began at: a cache keyed by it is current while no
    /// invalidation has been processed since.
    pub fn generation(&self) -> u64 {
        self.0
    }

    /// Whether what was read may be cached.
    pub fn keep(&self) -> bool {
        // SAFETY: reads a backend-local flag.
        GENERATION.with(std::cell::Cell::get) == self.0 && !unsafe { pg_sys::IsInParallelMode() }
    }
}

fn bump() {
    GENERATION.with(|g| g.set(g.get().wrapping_add(1)));
}

/// `f(relid)` on every relcache invalidation (`InvalidOid`: every relation).
pub fn on_relcache(f: RelFn) {
    RELCACHE.with(|v| v.borrow_mut().push(f));
}

/// `f()` when a role, or a role membership, changes.
pub fn on_role_change(f: Fn0) {
    ROLES.with(|v| v.borrow_mut().push(f));
}

/// `f()` when a schema is created, renamed or dropped (also by this backend, at its next command,
/// and when a transaction that changed one aborts).
pub fn on_schema_change(f: Fn0) {
    SCHEMAS.with(|v| v.borrow_mut().push(f));
}

/// `f()` at the end of every transaction (commit or abort).
pub fn on_transaction_end(f: Fn0) {
    XACT_END.with(|v| v.borrow_mut().push(f));
}

/// `f()` before a transaction is prepared (PREPARE TRANSACTION); an error it raises refuses it.
pub fn on_prepare(f: Fn0) {
    PREPARE.with(|v| v.borrow_mut().push(f));
}

/// `f(committed)` once a transaction has ended: `f(true)` after it committed (its changes are
/// visible to new snapshots), `f(false)` after it aborted or was prepared.
pub fn on_outcome(f: OutcomeFn) {
    OUTCOME.with(|v| v.borrow_mut().push(f));
}

/// `f()` when a subtransaction aborts.
pub fn on_subtransaction_abort(f: Fn0) {
    SUBXACT_ABORT.with(|v| v.borrow_mut().push(f));
}

/// `f(id)` when subtransaction `id` starts (a savepoint, a PL/pgSQL block with EXCEPTION).
pub fn on_subtransaction_start(f: SubFn) {
    SUBXACT_START.with(|v| v.borrow_mut().push(f));
}

/// `f(id)` when subtransaction `id` commits into its parent.
pub fn on_subtransaction_commit(f: SubFn) {
    SUBXACT_COMMIT.with(|v| v.borrow_mut().push(f));
}

fn run0(list: &'static std::thread::LocalKey<RefCell<Vec<Fn0>>>) {
    let fs: Vec<Fn0> = list.with(|v| v.borrow().clone());
    for f in fs {
        f();
    }
}

/// # Safety
/// Called by PostgreSQL's relcache invalidation machinery with its own arguments, on the backend
/// thread, outside any Rust borrow of the registry.
#[pg_guard]
unsafe extern "C-unwind" fn relcache_cb(_arg: pg_sys::Datum, relid: pg_sys::Oid) {
    bump();
    let fs: Vec<RelFn> = RELCACHE.with(|v| v.borrow().clone());
    for f in fs {
        f(relid);
    }
}

/// # Safety
/// Called by PostgreSQL's syscache invalidation machinery (roles and memberships), on the backend
/// thread.
#[pg_guard]
unsafe extern "C-unwind" fn syscache_cb(_arg: pg_sys::Datum, _cacheid: std::ffi::c_int, _hash: u32) {
    bump();
    run0(&ROLES);
}

/// # Safety
/// Called by PostgreSQL's syscache invalidation machinery (schemas), on the backend thread.
#[pg_guard]
unsafe extern "C-unwind" fn namespace_cb(_arg: pg_sys::Datum, _cacheid: std::ffi::c_int, _hash: u32) {
    run0(&SCHEMAS);
}

/// # Safety
/// Called by PostgreSQL at transaction end, on the backend thread.
#[pg_guard]
unsafe extern "C-unwind" fn xact_cb(event: pg_sys::XactEvent::Type, _arg: *mut std::ffi::c_void) {
    if event == pg_sys::XactEvent::XACT_EVENT_PRE_PREPARE {
        run0(&PREPARE);
    }
    run0(&XACT_END);
    let outcome = match event {
        pg_sys::XactEvent::XACT_EVENT_COMMIT => Some(true),
        pg_sys::XactEvent::XACT_EVENT_ABORT | pg_sys::XactEvent::XACT_EVENT_PREPARE => Some(false),
        _ => None,
    };
    if let Some(committed) = outcome {
        // (No copy of the list: after a commit nothing here may allocate or fail; the functions
        // register nothing.)
        OUTCOME.with(|v| {
            for f in v.borrow().iter() {
                f(committed);
            }
        });
    }
}

/// # Safety
/// Called by PostgreSQL at subtransaction events, on the backend thread.
#[pg_guard]
unsafe extern "C-unwind" fn subxact_cb(
    event: pg_sys::SubXactEvent::Type,
    _my: pg_sys::SubTransactionId,
    _parent: pg_sys::SubTransactionId,
    _arg: *mut std::ffi::c_void,
) {
    if event == pg_sys::SubXactEvent::SUBXACT_EVENT_ABORT_SUB {
        ABORTING.with(|a| a.set(_my));
        run0(&SUBXACT_ABORT);
    } else if event == pg_sys::SubXactEvent::SUBXACT_EVENT_START_SUB {
        SUBXACT_START.with(|v| v.borrow().iter().for_each(|f| f(_my)));
    } else if event == pg_sys::SubXactEvent::SUBXACT_EVENT_COMMIT_SUB {
        SUBXACT_COMMIT.with(|v| v.borrow().iter().for_each(|f| f(_my)));
    }
}

/// The id of the subtransaction being aborted, for the functions `on_subtransaction_abort` runs.
pub fn aborting_subtransaction() -> pg_sys::SubTransactionId {
    ABORTING.with(std::cell::Cell::get)
}

/// The id of the current subtransaction (1: the top level).
pub fn current_subtransaction() -> pg_sys::SubTransactionId {
    // SAFETY: reads the backend's transaction state.
    unsafe { pg_sys::GetCurrentSubTransactionId() }
}

/// Tells every backend (at commit) and this one (at the next command) that `relid` changed: the
/// row and TRUNCATE triggers of memory_ext's rule and policy tables call it, and the modules' relcache
/// functions drop what they cached from that table.
pub fn invalidate_relation(relid: pg_sys::Oid) {
    if relid != pg_sys::InvalidOid {
        // SAFETY: queues an invalidation message for a plain oid.
        unsafe { pg_sys::CacheInvalidateRelcacheByRelid(relid) };
    }
}

/// Tells every backend (at commit) and this one (at the next command) that the rows of `relid`
/// changed, through its signal relation `signal` (a relation of the same schema, e.g. one of its
/// indexes): caches of those rows are dropped on the signal, caches of `relid`'s definition (which
/// drop on `relid` itself) are kept. Without such a relation, `relid` itself is invalidated.
pub fn invalidate_rows(relid: pg_sys::Oid, signal: &std::ffi::CStr) {
    // SAFETY: catalog lookups by oid and by a NUL-terminated name, inside a transaction. Only an
    // index of `relid` by that name is its signal.
    let sig = unsafe {
        let ns = pg_sys::get_rel_namespace(relid);
        let sig = if ns == pg_sys::InvalidOid { pg_sys::InvalidOid } else { pg_sys::get_relname_relid(signal.as_ptr(), ns) };
        if sig != pg_sys::InvalidOid && pg_sys::IndexGetRelation(sig, true) == relid { sig } else { pg_sys::InvalidOid }
    };
    invalidate_relation(if sig != pg_sys::InvalidOid { sig } else { relid });
}

/// The name of relation `relid` (None when there is none).
pub fn relation_name(relid: pg_sys::Oid) -> Option<String> {
    // SAFETY: get_rel_name returns a palloc'd copy or NULL; it is copied at once.
    unsafe {
        let p = pg_sys::get_rel_name(relid);
        (!p.is_null()).then(|| std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned())
    }
}

/// Registers the callbacks with PostgreSQL; called once from `_PG_init`, before any module
/// registers its functions.
pub fn init() {
    // SAFETY: each registration stores a pointer to a static function and a null argument, as
    // the PostgreSQL API expects; they stay valid for the life of the backend.
    unsafe {
        pg_sys::CacheRegisterRelcacheCallback(Some(relcache_cb), pg_sys::Datum::from(0));
        pg_sys::CacheRegisterSyscacheCallback(pg_sys::SysCacheIdentifier::AUTHMEMMEMROLE as _, Some(syscache_cb), pg_sys::Datum::from(0));
        pg_sys::CacheRegisterSyscacheCallback(pg_sys::SysCacheIdentifier::AUTHOID as _, Some(syscache_cb), pg_sys::Datum::from(0));
        pg_sys::CacheRegisterSyscacheCallback(pg_sys::SysCacheIdentifier::NAMESPACEOID as _, Some(namespace_cb), pg_sys::Datum::from(0));
        pg_sys::RegisterXactCallback(Some(xact_cb), std::ptr::null_mut());
        pg_sys::RegisterSubXactCallback(Some(subxact_cb), std::ptr::null_mut());
    }
}
