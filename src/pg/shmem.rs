//! The library's shared memory, requested while the postmaster preloads the library and absent
//! otherwise (`available` says which):
//! - a ring of fixed-size slots through which a backend hands events of denied attempts to its
//!   database's background integrators (`audit::denied`);
//! - the integrators' latches, by database, which a backend sets when it commits pending entries
//!   (or hands an event over), so that the integrator of their chains wakes at once.

use pgrx::atomics::PgAtomic;
use pgrx::lwlock::PgLwLock;
use pgrx::prelude::*;
use pgrx::shmem::PGRXSharedMemory;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

pub const SLOTS: usize = 64;
pub const EVENT_MAX: usize = 64;
pub const ORG_MAX: usize = 128;
pub const PAYLOAD_MAX: usize = 1024;
/// Slots one database may hold at a time.
pub const PER_DATABASE: usize = SLOTS / 4;

#[derive(Clone, Copy)]
struct Slot {
    used: bool,
    db: u32,
    event_len: usize,
    event: [u8; EVENT_MAX],
    org_len: usize,
    org: [u8; ORG_MAX],
    payload_len: usize,
    payload: [u8; PAYLOAD_MAX],
}

impl Slot {
    const EMPTY: Slot = Slot {
        used: false,
        db: 0,
        event_len: 0,
        event: [0; EVENT_MAX],
        org_len: 0,
        org: [0; ORG_MAX],
        payload_len: 0,
        payload: [0; PAYLOAD_MAX],
    };
}

#[derive(Clone, Copy)]
pub struct Ring {
    slots: [Slot; SLOTS],
}

impl Default for Ring {
    fn default() -> Self {
        Ring { slots: [Slot::EMPTY; SLOTS] }
    }
}

// SAFETY: plain bytes and integers, no pointers: the same in every process that maps it.
unsafe impl PGRXSharedMemory for Ring {}

// SAFETY: the name is a static C string; the lock is initialised by pg_shmem_init! in `init`
// while shared_preload_libraries load, and used only when PRELOADED says so.
static RING: PgLwLock<Ring> = unsafe { PgLwLock::new(c"memory_ext_denied_events") };

/// Set in the postmaster while it preloads the library; backends inherit it (fork).
static PRELOADED: AtomicBool = AtomicBool::new(false);

/// Databases whose integrators' latches are kept: the first this many of
/// memory.integrator_databases (those after them are served all the same: their integrators wake
/// every `memory.integrator_naptime`).
pub const DATABASES: usize = 64;
/// Integrators per database (memory.integrator_workers' maximum).
pub const PER_DATABASE_INTEGRATORS: usize = 16;

/// The latches of one database's integrators: entry `i` is the `i`th database of
/// memory.integrator_databases (a list fixed at server start), so a database dropped and made
/// again under the same name takes the same entry.
pub struct Integrators {
    /// The database's oid, written by its integrators when they start; 0 until then.
    db: AtomicU32,
    /// The address of integrator k's latch (its PGPROC's, in shared memory: the same address in
    /// every process); 0 while it is not running.
    latch: [AtomicUsize; PER_DATABASE_INTEGRATORS],
    /// Wake-ups sent to integrator k, counted: the latch is only a hint (code the round runs may
    /// wait on it and reset it, a heavyweight lock wait for one), the count is what the
    /// integrator compares across a round.
    announced: [AtomicU64; PER_DATABASE_INTEGRATORS],
}

pub struct Wakers {
    dbs: [Integrators; DATABASES],
    /// Slots of the denied-event ring in use (changed under its lock): an integrator's round
    /// reads it without taking the lock, which every round of every database's integrators would
    /// otherwise take.
    ring_used: AtomicU32,
}

impl Default for Wakers {
    fn default() -> Self {
        Wakers {
            dbs: std::array::from_fn(|_| Integrators {
                db: AtomicU32::new(0),
                latch: std::array::from_fn(|_| AtomicUsize::new(0)),
                announced: std::array::from_fn(|_| AtomicU64::new(0)),
            }),
            ring_used: AtomicU32::new(0),
        }
    }
}

// SAFETY: atomics only; the addresses stored are of shared memory, the same in every process.
unsafe impl PGRXSharedMemory for Wakers {}

// SAFETY: the name is a static C string; the struct is initialised by pg_shmem_init! in `init`
// while shared_preload_libraries load, and used only when PRELOADED says so.
static WAKERS: PgAtomic<Wakers> = unsafe { PgAtomic::new(c"memory_ext_integrator_latches") };

/// Requests the ring and the latches (only while the postmaster preloads the library). (pgrx's macro names the
/// features of every PostgreSQL version it supports; this crate declares only its own.)
#[allow(unexpected_cfgs)]
pub fn init() {
    if super::xact::preloading() {
        pgrx::pg_shmem_init!(RING);
        pgrx::pg_shmem_init!(WAKERS);
        PRELOADED.store(true, Ordering::Relaxed);
    }
}

/// Whether the ring exists (the library was preloaded).
pub fn available() -> bool {
    PRELOADED.load(Ordering::Relaxed)
}

fn my_database() -> u32 {
    // SAFETY: reads a global set at backend start.
    unsafe { pg_sys::MyDatabaseId }.to_u32()
}

/// Puts an event for this database into a free slot; false when the ring is absent, full, or a
/// part is longer than its slot (the caller logs it instead).
pub fn push(event: &str, org: &str, payload: &str) -> bool {
    let (e, o, p) = (event.as_bytes(), org.as_bytes(), payload.as_bytes());
    if !available() || e.len() > EVENT_MAX || o.len() > ORG_MAX || p.len() > PAYLOAD_MAX {
        return false;
    }
    let db = my_database();
    let mut ring = RING.exclusive();
    // One database may hold at most a quarter of the ring: a database whose roles provoke denials
    // in a loop (or that no integrator serves) cannot starve the others.
    if ring.slots.iter().filter(|s| s.used && s.db == db).count() >= PER_DATABASE {
        return false;
    }
    match ring.slots.iter_mut().find(|s| !s.used) {
        Some(s) => {
            WAKERS.get().ring_used.fetch_add(1, Ordering::AcqRel);
            s.used = true;
            s.db = db;
            s.event[..e.len()].copy_from_slice(e);
            s.event_len = e.len();
            s.org[..o.len()].copy_from_slice(o);
            s.org_len = o.len();
            s.payload[..p.len()].copy_from_slice(p);
            s.payload_len = p.len();
            true
        }
        None => false,
    }
}

/// Takes this database's events whose org `wanted` says out of the ring: (event, org, payload).
pub fn take(wanted: impl Fn(&str) -> bool) -> Vec<(String, String, String)> {
    if !available() || WAKERS.get().ring_used.load(Ordering::Acquire) == 0 {
        return Vec::new();
    }
    let db = my_database();
    let mut ring = RING.exclusive();
    let mut out = Vec::new();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    for s in ring.slots.iter_mut().filter(|s| s.used && s.db == db) {
        let org = text(&s.org[..s.org_len]);
        if !wanted(&org) {
            continue;
        }
        out.push((text(&s.event[..s.event_len]), org, text(&s.payload[..s.payload_len])));
        s.used = false;
        WAKERS.get().ring_used.fetch_sub(1, Ordering::AcqRel);
    }
    out
}

/// This database's entry of the latches, if its integrators have started.
fn integrators(db: u32) -> Option<&'static Integrators> {
    WAKERS.get().dbs.iter().find(|i| i.db.load(Ordering::Acquire) == db)
}

/// Makes this process's latch the one of integrator `k` of its database, the `at`th of
/// memory.integrator_databases, until it exits (a callback clears it then). Called once, by the
/// background integrator, after it connects.
pub fn register_integrator(at: usize, k: u32) {
    let k = k as usize;
    if !available() || at >= DATABASES || k >= PER_DATABASE_INTEGRATORS {
        return;
    }
    let entry = &WAKERS.get().dbs[at];
    // SAFETY: registers a plain function with a by-value argument, run by proc_exit before the
    // process detaches from shared memory (first, so that a latch stored below is always cleared).
    unsafe { pg_sys::before_shmem_exit(Some(forget_integrator), pg_sys::Datum::from((at << 8) | k)) };
    // SAFETY: MyProc is this process's PGPROC, in shared memory for the process's life; its latch
    // is the one WaitLatch(MyLatch) waits on in a background worker.
    let latch = unsafe { std::ptr::addr_of_mut!((*pg_sys::MyProc).procLatch) } as usize;
    entry.latch[k].store(latch, Ordering::Release);
    entry.db.store(my_database(), Ordering::Release);
}

/// # Safety
/// Called by proc_exit in the integrator that registered itself, with the argument it gave.
#[pg_guard]
unsafe extern "C-unwind" fn forget_integrator(_code: std::ffi::c_int, arg: pg_sys::Datum) {
    let (at, k) = (arg.value() >> 8, arg.value() & 0xff);
    // SAFETY: as the function's contract: MyProc is still this process's.
    let mine = unsafe { std::ptr::addr_of_mut!((*pg_sys::MyProc).procLatch) } as usize;
    if let Some(latch) = WAKERS.get().dbs.get(at).and_then(|e| e.latch.get(k)) {
        // Only its own: a successor that already registered keeps its latch.
        let _ = latch.compare_exchange(mine, 0, Ordering::AcqRel, Ordering::Acquire);
    }
}

/// The wake-ups sent to integrator `k` of the `at`th database so far (it compares them across a
/// round: a change means something committed that the round may not have seen).
pub fn announced(at: usize, k: u32) -> u64 {
    if !available() {
        return 0;
    }
    WAKERS.get().dbs.get(at).and_then(|e| e.announced.get(k as usize)).map_or(0, |a| a.load(Ordering::Acquire))
}

/// Wakes the integrators of this database whose shares are in `shares` (bit k: integrator k);
/// those not running are the first one's to serve, so it is woken in their stead. Cannot fail:
/// it runs after a commit.
pub fn wake_integrators(shares: u32) {
    if !available() || shares == 0 {
        return;
    }
    let Some(entry) = integrators(my_database()) else { return };
    let mut woken = 0u32;
    for k in 0..PER_DATABASE_INTEGRATORS {
        if shares & (1 << k) == 0 {
            continue;
        }
        let mut at = k;
        let mut latch = entry.latch[k].load(Ordering::Acquire);
        if latch == 0 {
            at = 0;
            latch = entry.latch[0].load(Ordering::Acquire);
        }
        if latch != 0 && woken & (1 << at) == 0 {
            woken |= 1 << at;
            entry.announced[at].fetch_add(1, Ordering::AcqRel);
            // SAFETY: a registered latch is a PGPROC's, in shared memory for the server's life;
            // should its integrator have exited meanwhile, the PGPROC's next owner gets a
            // spurious wakeup, which every waiter on a latch tolerates. SetLatch raises no error.
            unsafe { pg_sys::SetLatch(latch as *mut pg_sys::Latch) };
        }
    }
}
