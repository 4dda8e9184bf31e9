//! The library's shared memory, requested while the postmaster preloads the library and absent
//! otherwise (`available` says which). Two generic structures; what they carry is their users'
//! business (the audit trail's denied-attempt hand-over and integrator wake-ups, `audit::denied`
//! and `audit::wake`):
//! - a ring of fixed-size message slots, each tagged with its database: a backend puts a
//!   message (kind, key, body) in, a background worker of that database takes it out;
//! - a queue of byte records, each tagged with its database, whose slots a backend reserves
//!   first and fills later (at a rollback: `audit::reads`), and a worker claims, then frees
//!   when its transaction commits or gives back when it aborts;
//! - wake-up slots of background workers, by group (a database's entry in a list fixed at server
//!   start) and member: a worker registers its latch, a backend sets the latches of the members
//!   it names (and counts the wake-up), so that they wake at once.

use pgrx::atomics::PgAtomic;
use pgrx::lwlock::PgLwLock;
use pgrx::prelude::*;
use pgrx::shmem::PGRXSharedMemory;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// Message slots of the ring, and the longest kind, key and body a slot holds (bytes).
pub const SLOTS: usize = 64;
pub const KIND_MAX: usize = 64;
pub const KEY_MAX: usize = 128;
pub const BODY_MAX: usize = 1024;

#[derive(Clone, Copy)]
struct Slot {
    used: bool,
    db: u32,
    kind_len: usize,
    kind: [u8; KIND_MAX],
    key_len: usize,
    key: [u8; KEY_MAX],
    body_len: usize,
    body: [u8; BODY_MAX],
}

impl Slot {
    const EMPTY: Slot = Slot {
        used: false,
        db: 0,
        kind_len: 0,
        kind: [0; KIND_MAX],
        key_len: 0,
        key: [0; KEY_MAX],
        body_len: 0,
        body: [0; BODY_MAX],
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

/// Groups of wake-up slots (one per database of a list fixed at server start).
pub const GROUPS: usize = 64;
/// Members (latches) per group.
pub const MEMBERS: usize = 16;

/// The latches of one group's workers: entry `i` is the `i`th database of the users' list, so a
/// database dropped and made again under the same name takes the same entry.
pub struct Group {
    /// The database's oid, written by its workers when they start; 0 until then.
    db: AtomicU32,
    /// The address of member k's latch (its PGPROC's, in shared memory: the same address in
    /// every process); 0 while it is not running.
    latch: [AtomicUsize; MEMBERS],
    /// Wake-ups sent to member k, counted: the latch is only a hint (code the worker runs may
    /// wait on it and reset it, a heavyweight lock wait for one), the count is what the worker
    /// compares across a round.
    announced: [AtomicU64; MEMBERS],
    /// Member k last tried to connect and did not get in (its database did not exist): it
    /// then waits for the database before it connects again (see `set_connecting`).
    connecting: [AtomicBool; MEMBERS],
}

pub struct Wakers {
    dbs: [Group; GROUPS],
    /// Slots of the ring in use (changed under its lock): a worker's round reads it without
    /// taking the lock, which every round of every database's workers would otherwise take.
    ring_used: AtomicU32,
    /// Filled slots of the queue (changed under its lock), read the same way.
    queue_filled: AtomicU32,
}

impl Default for Wakers {
    fn default() -> Self {
        Wakers {
            dbs: std::array::from_fn(|_| Group {
                db: AtomicU32::new(0),
                latch: std::array::from_fn(|_| AtomicUsize::new(0)),
                announced: std::array::from_fn(|_| AtomicU64::new(0)),
                connecting: std::array::from_fn(|_| AtomicBool::new(false)),
            }),
            ring_used: AtomicU32::new(0),
            queue_filled: AtomicU32::new(0),
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
        pgrx::pg_shmem_init!(QUEUE);
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

/// Puts a message (kind, key, body) for this database into a free slot; false when the ring is
/// absent, full, holds `per_database` of this database's messages already, or a part is longer
/// than its slot.
pub fn push(kind: &str, key: &str, body: &str, per_database: usize) -> bool {
    let (e, o, p) = (kind.as_bytes(), key.as_bytes(), body.as_bytes());
    if !available() || e.len() > KIND_MAX || o.len() > KEY_MAX || p.len() > BODY_MAX {
        return false;
    }
    let db = my_database();
    let mut ring = RING.exclusive();
    if ring.slots.iter().filter(|s| s.used && s.db == db).count() >= per_database {
        return false;
    }
    match ring.slots.iter_mut().find(|s| !s.used) {
        Some(s) => {
            WAKERS.get().ring_used.fetch_add(1, Ordering::AcqRel);
            s.used = true;
            s.db = db;
            s.kind[..e.len()].copy_from_slice(e);
            s.kind_len = e.len();
            s.key[..o.len()].copy_from_slice(o);
            s.key_len = o.len();
            s.body[..p.len()].copy_from_slice(p);
            s.body_len = p.len();
            true
        }
        None => false,
    }
}

/// Takes this database's messages whose key `wanted` says out of the ring: (kind, key, body).
pub fn take(wanted: impl Fn(&str) -> bool) -> Vec<(String, String, String)> {
    if !available() || WAKERS.get().ring_used.load(Ordering::Acquire) == 0 {
        return Vec::new();
    }
    let db = my_database();
    let mut ring = RING.exclusive();
    let mut out = Vec::new();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    for s in ring.slots.iter_mut().filter(|s| s.used && s.db == db) {
        let key = text(&s.key[..s.key_len]);
        if !wanted(&key) {
            continue;
        }
        out.push((text(&s.kind[..s.kind_len]), key, text(&s.body[..s.body_len])));
        s.used = false;
        WAKERS.get().ring_used.fetch_sub(1, Ordering::AcqRel);
    }
    out
}

/// This database's group of wake-up slots, if its workers have started.
fn group_of(db: u32) -> Option<&'static Group> {
    WAKERS.get().dbs.iter().find(|i| i.db.load(Ordering::Acquire) == db)
}

/// Makes this process's latch the one of member `k` of group `at` (its database's), until it
/// exits (a callback clears it then). Called once, by a background worker, after it connects.
pub fn register_waker(at: usize, k: u32) {
    let k = k as usize;
    if !available() || at >= GROUPS || k >= MEMBERS {
        return;
    }
    let entry = &WAKERS.get().dbs[at];
    // SAFETY: registers a plain function with a by-value argument, run by proc_exit before the
    // process detaches from shared memory (first, so that a latch stored below is always cleared).
    unsafe { pg_sys::before_shmem_exit(Some(forget_waker), pg_sys::Datum::from((at << 8) | k)) };
    // SAFETY: MyProc is this process's PGPROC, in shared memory for the process's life; its latch
    // is the one WaitLatch(MyLatch) waits on in a background worker.
    let latch = unsafe { std::ptr::addr_of_mut!((*pg_sys::MyProc).procLatch) } as usize;
    entry.latch[k].store(latch, Ordering::Release);
    entry.db.store(my_database(), Ordering::Release);
}

/// # Safety
/// Called by proc_exit in the worker that registered itself, with the argument it gave.
#[pg_guard]
unsafe extern "C-unwind" fn forget_waker(_code: std::ffi::c_int, arg: pg_sys::Datum) {
    let (at, k) = (arg.value() >> 8, arg.value() & 0xff);
    // SAFETY: as the function's contract: MyProc is still this process's.
    let mine = unsafe { std::ptr::addr_of_mut!((*pg_sys::MyProc).procLatch) } as usize;
    if let Some(latch) = WAKERS.get().dbs.get(at).and_then(|e| e.latch.get(k)) {
        // Only its own: a successor that already registered keeps its latch.
        let _ = latch.compare_exchange(mine, 0, Ordering::AcqRel, Ordering::Acquire);
    }
}

/// Marks member `k` of group `at` as connecting (before it connects to its database) or in (after):
/// a member still marked when it starts again did not get in. False when there is no such slot.
pub fn set_connecting(at: usize, k: u32, connecting: bool) -> bool {
    if !available() {
        return false;
    }
    match WAKERS.get().dbs.get(at).and_then(|e| e.connecting.get(k as usize)) {
        Some(c) => {
            c.store(connecting, Ordering::Release);
            true
        }
        None => false,
    }
}

/// Whether member `k` of group `at` is still marked connecting (its last start did not get in).
pub fn was_connecting(at: usize, k: u32) -> bool {
    available() && WAKERS.get().dbs.get(at).and_then(|e| e.connecting.get(k as usize)).is_some_and(|c| c.load(Ordering::Acquire))
}

/// The wake-ups sent to member `k` of group `at` so far.
pub fn announced(at: usize, k: u32) -> u64 {
    if !available() {
        return 0;
    }
    WAKERS.get().dbs.get(at).and_then(|e| e.announced.get(k as usize)).map_or(0, |a| a.load(Ordering::Acquire))
}

/// Wakes the members of this database's group named in `members` (bit k: member k); for one
/// not running, member 0 is woken in its stead. Cannot fail (it runs after commits).
pub fn wake(members: u32) {
    if !available() || members == 0 {
        return;
    }
    let Some(entry) = group_of(my_database()) else { return };
    let mut woken = 0u32;
    for k in 0..MEMBERS {
        if members & (1 << k) == 0 {
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
            // should its worker have exited meanwhile, the PGPROC's next owner gets a
            // spurious wakeup, which every waiter on a latch tolerates. SetLatch raises no error.
            unsafe { pg_sys::SetLatch(latch as *mut pg_sys::Latch) };
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The queue of records (reserve, fill, claim, free).

/// Slots of the queue, and the bytes of a record each holds (a record longer than that takes
/// several).
pub const QUEUE_SLOTS: usize = 1024;
pub const QUEUE_BYTES: usize = 1024;

const FREE: u8 = 0;
const RESERVED: u8 = 1;
const FILLED: u8 = 2;
const CLAIMED: u8 = 3;

#[derive(Clone, Copy)]
struct QueueHead {
    state: u8,
    db: u32,
    /// The process that reserved or claimed it.
    owner: i32,
    /// The record it holds part of, the part's place and the record's parts.
    record: u64,
    part: u16,
    parts: u16,
    len: u16,
}

impl QueueHead {
    const EMPTY: QueueHead = QueueHead { state: FREE, db: 0, owner: 0, record: 0, part: 0, parts: 0, len: 0 };
}

#[derive(Clone, Copy)]
pub struct Queue {
    /// The states apart from the bytes, so a scan touches only these.
    heads: [QueueHead; QUEUE_SLOTS],
    bodies: [[u8; QUEUE_BYTES]; QUEUE_SLOTS],
    next_record: u64,
}

impl Default for Queue {
    fn default() -> Self {
        Queue { heads: [QueueHead::EMPTY; QUEUE_SLOTS], bodies: [[0; QUEUE_BYTES]; QUEUE_SLOTS], next_record: 1 }
    }
}

// SAFETY: plain bytes and integers, no pointers: the same in every process that maps it.
unsafe impl PGRXSharedMemory for Queue {}

// SAFETY: as RING's.
static QUEUE: PgLwLock<Queue> = unsafe { PgLwLock::new(c"memory_ext_read_events") };

fn my_pid() -> i32 {
    // SAFETY: reads a global set at process start.
    unsafe { pg_sys::MyProcPid }
}

/// Why a reservation failed.
#[derive(Debug, PartialEq, Eq)]
pub enum Full {
    /// This database holds `per_database` slots already (reserved, filled or claimed).
    Database,
    /// No free slot is left.
    Queue,
}

/// Reserves `n` slots for this process and database; their indexes, or why not. At most
/// `per_database` slots of one database are in use at a time.
pub fn queue_reserve(n: usize, per_database: usize) -> Result<Vec<usize>, Full> {
    let db = my_database();
    let mut q = QUEUE.exclusive();
    let mine = q.heads.iter().filter(|h| h.state != FREE && h.db == db).count();
    if mine + n > per_database {
        return Err(Full::Database);
    }
    let free: Vec<usize> = q.heads.iter().enumerate().filter(|(_, h)| h.state == FREE).map(|(i, _)| i).take(n).collect();
    if free.len() < n {
        return Err(Full::Queue);
    }
    let owner = my_pid();
    for &i in &free {
        q.heads[i] = QueueHead { state: RESERVED, db, owner, ..QueueHead::EMPTY };
    }
    Ok(free)
}

/// Frees slots this process reserved (and did not fill).
pub fn queue_release(slots: &[usize]) {
    if slots.is_empty() || !available() {
        return;
    }
    let owner = my_pid();
    let mut q = QUEUE.exclusive();
    for &i in slots {
        if let Some(h) = q.heads.get_mut(i).filter(|h| h.state == RESERVED && h.owner == owner) {
            *h = QueueHead::EMPTY;
        }
    }
}

/// Fills slots this process reserved with `record` (split across them in order); false (and the
/// slots freed) when they do not hold it or are not this process's reservation. Cannot fail
/// otherwise: it runs in abort callbacks.
pub fn queue_fill(slots: &[usize], record: &[u8]) -> bool {
    if slots.is_empty() || !available() {
        return false;
    }
    let owner = my_pid();
    let mut q = QUEUE.exclusive();
    let ours = slots.iter().all(|&i| q.heads.get(i).is_some_and(|h| h.state == RESERVED && h.owner == owner));
    if !ours || record.len() > slots.len() * QUEUE_BYTES || slots.len() > u16::MAX as usize {
        for &i in slots {
            if let Some(h) = q.heads.get_mut(i).filter(|h| h.state == RESERVED && h.owner == owner) {
                *h = QueueHead::EMPTY;
            }
        }
        return false;
    }
    let id = q.next_record;
    q.next_record += 1;
    let parts = slots.len() as u16;
    for (part, &i) in slots.iter().enumerate() {
        let chunk = record.get(part * QUEUE_BYTES..record.len().min((part + 1) * QUEUE_BYTES)).unwrap_or(&[]);
        q.bodies[i][..chunk.len()].copy_from_slice(chunk);
        let h = &mut q.heads[i];
        h.state = FILLED;
        h.owner = 0;
        h.record = id;
        h.part = part as u16;
        h.parts = parts;
        h.len = chunk.len() as u16;
    }
    WAKERS.get().queue_filled.fetch_add(slots.len() as u32, Ordering::AcqRel);
    true
}

/// Claims this database's filled records that `wanted` takes, oldest first: (their slots, the
/// record's bytes). Claimed slots are the caller's until `queue_finish`.
pub fn queue_claim(wanted: impl Fn(&[u8]) -> bool) -> Vec<(Vec<usize>, Vec<u8>)> {
    if !available() || WAKERS.get().queue_filled.load(Ordering::Acquire) == 0 {
        return Vec::new();
    }
    let db = my_database();
    let owner = my_pid();
    let mut q = QUEUE.exclusive();
    // Records of this database, by id: (part, slot) lists.
    let mut records: std::collections::BTreeMap<u64, Vec<(u16, usize)>> = std::collections::BTreeMap::new();
    for (i, h) in q.heads.iter().enumerate() {
        if h.state == FILLED && h.db == db {
            records.entry(h.record).or_default().push((h.part, i));
        }
    }
    let mut out = Vec::new();
    for (_, mut parts) in records {
        parts.sort_unstable();
        if parts.len() != q.heads[parts[0].1].parts as usize {
            continue;
        }
        let mut bytes = Vec::new();
        for &(_, i) in &parts {
            bytes.extend_from_slice(&q.bodies[i][..q.heads[i].len as usize]);
        }
        if !wanted(&bytes) {
            continue;
        }
        let slots: Vec<usize> = parts.iter().map(|p| p.1).collect();
        for &i in &slots {
            q.heads[i].state = CLAIMED;
            q.heads[i].owner = owner;
        }
        WAKERS.get().queue_filled.fetch_sub(slots.len() as u32, Ordering::AcqRel);
        out.push((slots, bytes));
    }
    out
}

/// Ends this process's claim of `slots`: frees them when `done` (what they held is recorded),
/// gives them back filled otherwise (for the next claim). Cannot fail: it runs in transaction
/// callbacks.
pub fn queue_finish(slots: &[usize], done: bool) {
    if slots.is_empty() || !available() {
        return;
    }
    let owner = my_pid();
    let mut q = QUEUE.exclusive();
    let mut back = 0u32;
    for &i in slots {
        if let Some(h) = q.heads.get_mut(i).filter(|h| h.state == CLAIMED && h.owner == owner) {
            if done {
                *h = QueueHead::EMPTY;
            } else {
                h.state = FILLED;
                h.owner = 0;
                back += 1;
            }
        }
    }
    WAKERS.get().queue_filled.fetch_add(back, Ordering::AcqRel);
}

/// Frees the filled slots of databases `exists` says are gone (dropped with records nobody
/// claimed); returns how many. (`exists` runs without the queue's lock held: it reads catalogs.)
pub fn queue_forget_databases(exists: impl Fn(u32) -> bool) -> usize {
    if !available() {
        return 0;
    }
    let mut dbs: Vec<u32> = QUEUE.share().heads.iter().filter(|h| h.state == FILLED).map(|h| h.db).collect();
    dbs.sort_unstable();
    dbs.dedup();
    let gone: Vec<u32> = dbs.into_iter().filter(|&d| !exists(d)).collect();
    if gone.is_empty() {
        return 0;
    }
    let mut q = QUEUE.exclusive();
    let mut n = 0;
    for h in q.heads.iter_mut().filter(|h| h.state == FILLED && gone.contains(&h.db)) {
        *h = QueueHead::EMPTY;
        n += 1;
    }
    WAKERS.get().queue_filled.fetch_sub(n as u32, Ordering::AcqRel);
    n
}
