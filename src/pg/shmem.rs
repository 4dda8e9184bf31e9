//! The library's shared memory: a ring of fixed-size slots through which a backend hands events
//! of denied attempts to its database's background integrators (`audit::denied`). Requested while
//! the postmaster preloads the library; absent otherwise (`available` says which).

use pgrx::lwlock::PgLwLock;
use pgrx::prelude::*;
use pgrx::shmem::PGRXSharedMemory;
use std::sync::atomic::{AtomicBool, Ordering};

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

/// Requests the ring (only while the postmaster preloads the library). (pgrx's macro names the
/// features of every PostgreSQL version it supports; this crate declares only its own.)
#[allow(unexpected_cfgs)]
pub fn init() {
    if super::xact::preloading() {
        pgrx::pg_shmem_init!(RING);
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
    if !available() {
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
    }
    out
}
