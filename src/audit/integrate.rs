//! The sequencer (docs/design.md#integration): chains committed pending entries.
//!
//! Writers in deferred mode record pending entries in `memory.audit_pending`, each signed on its
//! own (`memory_core::audit::PendingSigner`), and take no chain lock. Integration reads the
//! pending entries its snapshot sees (committed ones, and the calling transaction's own), checks
//! each signature, chains the good ones through an immediate `Appender` (head lock, seq,
//! prev_hash, entry_hash, one head update per chain), and deletes them, all in one transaction:
//! a failure leaves them pending, and two integrators never chain the same entry (they serialize
//! on memory_ext's integration lock, which no SQL function can take, or, as background integrators,
//! take shares of the chains that do not overlap; a READ COMMITTED statement after the lock sees
//! what the other one deleted). Entries whose signature does not check stay pending and are reported by
//! `memory.audit_verify`.
//!
//! This file is long because reading, checking, chaining and deleting one batch is one
//! transaction's sequence, and its Citus variants (per shard group, on every node) share it.

use super::append::{Appender, EventRef, PG_EPOCH_UNIX_MICROS};
use crate::errors::{code, MxError, OrRaise};
use crate::pg::spi::Fetched;
use super::jsonb;
use memory_core::audit::{Event, FlatPayload, Payload, PendingSigner, SharedPrefix};
use pgrx::prelude::*;
use pgrx::spi::SpiClient;
use serde_json::Value;
use std::collections::HashMap;

/// Pending rows per fetch: payloads of up to MAX_PAYLOAD_BYTES keep a batch's memory bounded.
const FETCH: usize = 2_000;
/// Columns of `PENDING_QUERY` (the sort keys other than the first are fixed-width and come first,
/// so the sort reads them at fixed offsets).
pub(super) const COLS: usize = 13;
/// Pending entries of every chain, in the order they are chained: chain by chain (bytewise, the
/// order `Appender::lock` locks heads in), each in its writers' order.
const PENDING_QUERY: &str = "SELECT ord, id, chain_id, ctid, event_type, written_at, actor_id, org_id, project_id,
                                    workspace_id, payload, key_id, pending_hash
                               FROM memory.audit_pending
                              ORDER BY chain_id COLLATE \"C\", ord, id";

/// One pending entry as read, borrowed from its batch.
pub(super) struct PendingRef<'a> {
    pub id: i64,
    pub chain_id: &'a str,
    pub event_type: &'a str,
    /// Unix microseconds.
    pub written_at: i64,
    pub actor_id: Option<&'a str>,
    pub org_id: Option<&'a str>,
    pub project_id: Option<&'a str>,
    pub workspace_id: Option<&'a str>,
    /// The stored jsonb root container (copied as is into the chained entry).
    pub payload_jsonb: &'a [u8],
    pub key_id: i32,
    pub pending_hash: &'a [u8],
}

impl<'a> PendingRef<'a> {
    /// Row `i` of a batch fetched with the columns of `PENDING_QUERY`.
    pub fn read(b: &'a Fetched, i: usize) -> PendingRef<'a> {
        PendingRef {
            id: b.int8(i, 1).unwrap_or(0),
            chain_id: b.text(i, 2).unwrap_or_default(),
            event_type: b.text(i, 4).unwrap_or_default(),
            written_at: b.int8(i, 5).unwrap_or(0).saturating_add(PG_EPOCH_UNIX_MICROS),
            actor_id: b.text(i, 6),
            org_id: b.text(i, 7),
            project_id: b.text(i, 8),
            workspace_id: b.text(i, 9),
            payload_jsonb: b.bytes(i, 10).unwrap_or_default(),
            key_id: b.int4(i, 11).unwrap_or(0),
            pending_hash: b.bytes(i, 12).unwrap_or_default(),
        }
    }

    /// `f(payload)` with the payload as the hash covers it (what reading the stored jsonb back
    /// yields): a flat object of strings and nulls straight from its jsonb bytes, anything else
    /// parsed. None when it cannot be read.
    pub fn with_payload<R>(&self, utf8: bool, f: impl FnOnce(Option<Payload>) -> R) -> R {
        let c = self.payload_jsonb;
        let flat_bytes = utf8 && jsonb::is_flat_object(c);
        let mut members = [("", None); jsonb::MAX_MEMBERS];
        let n = if flat_bytes { jsonb::flat_string_members(c, &mut members) } else { None };
        if let Some(flat) = n.and_then(|n| FlatPayload::sorted(&mut members[..n])) {
            return f(Some(Payload::Flat(flat)));
        }
        let parsed: Option<Value> = if flat_bytes {
            jsonb::decode_flat_object(c)
        } else {
            let mut text = Vec::new();
            crate::pg::varlena::jsonb_container_text(c, &mut text).then(|| serde_json::from_slice(&text).ok()).flatten()
        };
        f(parsed.as_ref().map(Payload::Json))
    }

    /// Whether the entry's signature checks under its key, with `payload` as read, and its chain
    /// is its org's.
    pub fn checks(&self, payload: Payload, keys: &HashMap<i32, Vec<u8>>, signer: &mut PendingSigner) -> bool {
        self.checks_sharing(payload, keys, signer).is_some()
    }

    /// Whether the entry is one a writer can make: its chain is its org's, and no id or event type
    /// is longer than `Appender::push_ref` takes. Another (one that got here otherwise) is
    /// parked, never allowed to fail the integration of every chain.
    pub fn well_formed(&self) -> bool {
        let too_long = |v: Option<&str>| v.is_some_and(|s| s.len() > super::append::MAX_ID_BYTES);
        self.chain_id == self.org_id.unwrap_or("")
            && !(too_long(self.org_id) || too_long(self.project_id) || too_long(self.workspace_id) || too_long(self.actor_id)
                || self.event_type.chars().count() > 200)
    }

    /// `checks`, and when the signature checks, the hashing state it shares with the entry hash
    /// of the event chained (`memory_core::audit::SharedPrefix`).
    pub fn checks_sharing<'k, 'p>(&'p self, payload: Payload<'p>, keys: &'k HashMap<i32, Vec<u8>>, signer: &mut PendingSigner) -> Option<SharedPrefix<'k, 'p>> {
        if !self.well_formed() {
            return None;
        }
        let key = keys.get(&self.key_id)?;
        let mut ev = Event {
            chain_id: self.chain_id,
            seq: 0,
            prev_hash: [0; 32],
            event_type: self.event_type,
            recorded_at_micros: self.written_at,
            actor_id: self.actor_id,
            org_id: self.org_id,
            project_id: self.project_id,
            workspace_id: self.workspace_id,
            key_id: self.key_id,
            payload,
        };
        signer.sign_sharing(key, &mut ev, self.id).filter(|(h, _)| h.as_slice() == self.pending_hash).map(|(_, prefix)| prefix)
    }
}

/// The pending entries of one table read straight from its heap (no statement, no sort node):
/// every row the transaction's snapshot sees, copied into one buffer. `integrate_in` reads a
/// backlog so when its table fits in `memory.integration_memory`.
struct Stored {
    buf: Vec<u8>,
    rows: Vec<StoredRow>,
}

/// Where a text or bytea value of a stored row is in `Stored::buf` (None: NULL).
type Span = Option<(usize, usize)>;

struct StoredRow {
    ord: i64,
    id: i64,
    /// Microseconds since the PostgreSQL epoch.
    written_at: i64,
    key_id: i32,
    tid: pg_sys::ItemPointerData,
    /// chain_id, event_type, actor_id, org_id, project_id, workspace_id, payload (its jsonb root
    /// container), pending_hash.
    spans: [Span; 8],
}

impl Stored {
    /// The columns read, by name, with their types.
    const COLUMNS: [(&'static std::ffi::CStr, pg_sys::Oid); 12] = [
        (c"ord", pg_sys::INT8OID),
        (c"id", pg_sys::INT8OID),
        (c"written_at", pg_sys::TIMESTAMPTZOID),
        (c"key_id", pg_sys::INT4OID),
        (c"chain_id", pg_sys::TEXTOID),
        (c"event_type", pg_sys::TEXTOID),
        (c"actor_id", pg_sys::TEXTOID),
        (c"org_id", pg_sys::TEXTOID),
        (c"project_id", pg_sys::TEXTOID),
        (c"workspace_id", pg_sys::TEXTOID),
        (c"payload", pg_sys::JSONBOID),
        (c"pending_hash", pg_sys::BYTEAOID),
    ];

    /// Every pending row of `relid` whose chain is in `share`, or None when holding them (their
    /// values detoasted, and the sort keys) would take more than `budget` bytes.
    fn read(relid: pg_sys::Oid, budget: u64, share: Share) -> Result<Option<Stored>, MxError> {
        let mut at = [0i16; 12];
        for (k, (name, _)) in Self::COLUMNS.iter().enumerate() {
            at[k] = crate::pg::scan::attnum(relid, name)
                .ok_or_else(|| MxError::new(code::INTERNAL, format!("the pending table lacks column {}", name.to_string_lossy())))?;
        }
        // Per row: the row itself, and its share of the sort vectors of `order`.
        const PER_ROW: u64 = (std::mem::size_of::<StoredRow>() + 48) as u64;
        // What an SPI statement of this READ COMMITTED transaction would see, its own rows too.
        let lookup = crate::pg::scan::Lookup::begin();
        let mut scan = lookup.all_kept(relid)?;
        if Self::COLUMNS.iter().enumerate().any(|(k, &(_, typ))| !scan.column_is(at[k], typ)) {
            return Err(MxError::new(code::INTERNAL, "the pending table's columns have unexpected types"));
        }
        // Room for what the pages hold, up to the budget: the buffer is not regrown row by row.
        let (taken, shares) = share.part();
        let room = (scan.pages() * pg_sys::BLCKSZ as u64 / shares * taken).min(budget) as usize;
        let mut st = Stored { buf: Vec::new(), rows: Vec::new() };
        if st.buf.try_reserve(room).is_err() {
            // Memory the system will not give: the query's sort, in work_mem, instead.
            return Ok(None);
        }
        while scan.next() {
            pgrx::check_for_interrupts!();
            if !share.has_row(&scan, at[4]) {
                continue;
            }
            let int = |k: usize| scan.datum(at[k]).map(|d| d.value() as i64);
            let mut spans: [Span; 8] = [None; 8];
            // A toasted value is detoasted in a scratch context reset after the row: only the
            // copy in `buf` is kept.
            crate::pg::scan::in_scratch(|| {
                for (j, span) in spans.iter_mut().enumerate() {
                    *span = scan.bytes(at[4 + j]).map(|b| {
                        let start = st.buf.len();
                        st.buf.extend_from_slice(b);
                        (start, b.len())
                    });
                }
            });
            st.rows.push(StoredRow {
                ord: int(0).unwrap_or(0),
                id: int(1).unwrap_or(0),
                written_at: int(2).unwrap_or(0),
                key_id: int(3).unwrap_or(0) as i32,
                tid: scan.tid(),
                spans,
            });
            if st.buf.len() as u64 + st.rows.len() as u64 * PER_ROW > budget {
                return Ok(None);
            }
        }
        Ok(Some(st))
    }

    fn get(&self, s: Span) -> Option<&[u8]> {
        s.map(|(a, n)| &self.buf[a..a + n])
    }

    fn chain(&self, k: usize) -> &[u8] {
        self.get(self.rows[k].spans[0]).unwrap_or_default()
    }

    /// The rows to chain, in the order PENDING_QUERY gives them (chain bytewise, then the
    /// writer's order, then id), without copies: entries whose (chain, id) occurs more than once
    /// (the id is bound into the signature, so a copy signs like its original). Neither is
    /// chained; audit_verify reports them.
    fn order(&self) -> Vec<usize> {
        // Each chain's rank in bytewise order, so the sorts below compare integers (a backlog
        // has many rows and few chains: the chains are found first, and only they are sorted).
        let mut rank_of: HashMap<&[u8], u32> = HashMap::new();
        for k in 0..self.rows.len() {
            rank_of.entry(self.chain(k)).or_insert(0);
        }
        let mut chains: Vec<&[u8]> = rank_of.keys().copied().collect();
        chains.sort_unstable();
        for (r, c) in chains.iter().enumerate() {
            rank_of.insert(c, r as u32);
        }
        // (chain, ord, id, row)
        let mut keys: Vec<(u32, i64, i64, u32)> =
            self.rows.iter().enumerate().map(|(k, r)| (rank_of[self.chain(k)], r.ord, r.id, k as u32)).collect();
        let mut by_id: Vec<(u32, i64, u32)> = keys.iter().map(|&(c, _, id, k)| (c, id, k)).collect();
        by_id.sort_unstable();
        let mut copy = vec![false; self.rows.len()];
        for w in by_id.windows(2) {
            if (w[0].0, w[0].1) == (w[1].0, w[1].1) {
                copy[w[0].2 as usize] = true;
                copy[w[1].2 as usize] = true;
            }
        }
        keys.retain(|k| !copy[k.3 as usize]);
        keys.sort_unstable();
        keys.into_iter().map(|k| k.3 as usize).collect()
    }

    fn tid(&self, k: usize) -> pg_sys::ItemPointerData {
        self.rows[k].tid
    }

    /// Row `k` as PendingRef reads a fetched one.
    fn row(&self, k: usize, utf8: bool) -> PendingRef<'_> {
        let r = &self.rows[k];
        let text = |j: usize| self.get(r.spans[j]).map(|b| crate::pg::varlena::as_str(b, utf8));
        PendingRef {
            id: r.id,
            chain_id: text(0).unwrap_or_default(),
            event_type: text(1).unwrap_or_default(),
            written_at: r.written_at.saturating_add(PG_EPOCH_UNIX_MICROS),
            actor_id: text(2),
            org_id: text(3),
            project_id: text(4),
            workspace_id: text(5),
            payload_jsonb: self.get(r.spans[6]).unwrap_or_default(),
            key_id: r.key_id,
            pending_hash: self.get(r.spans[7]).unwrap_or_default(),
        }
    }
}

/// Whether the transaction sees a pending row of `share` in `relid` (read as `Stored::read` does,
/// up to the first one).
fn any_pending(relid: pg_sys::Oid, share: Share) -> Result<bool, MxError> {
    let chain = crate::pg::scan::attnum(relid, c"chain_id")
        .ok_or_else(|| MxError::new(code::INTERNAL, "the pending table lacks column chain_id"))?;
    let lookup = crate::pg::scan::Lookup::begin();
    let mut scan = lookup.all(relid)?;
    while scan.next() {
        pgrx::check_for_interrupts!();
        if share.has_row(&scan, chain) {
            return Ok(true);
        }
    }
    Ok(false)
}

thread_local! {
    // Every key, as integrations check pending signatures with them, with the invalidation
    // generation it was read at (`pg::callbacks::Fill`): read again only after a relcache
    // invalidation (a change to memory.audit_keys sends one for it: at its commit to the other
    // backends, at the next command to its own, and again to its own when it rolls back), not
    // at every round.
    static KEYS: std::cell::RefCell<Option<(u64, std::rc::Rc<HashMap<i32, Vec<u8>>>)>> = const { std::cell::RefCell::new(None) };
}

/// Every key, for checking signatures: `read_keys`, kept until the next invalidation.
fn keys_kept(client: &SpiClient) -> Result<std::rc::Rc<HashMap<i32, Vec<u8>>>, MxError> {
    let fill = crate::pg::callbacks::Fill::begin();
    if let Some(keys) = KEYS.with(|k| k.borrow().as_ref().filter(|(g, _)| *g == fill.generation()).map(|(_, keys)| keys.clone())) {
        return Ok(keys);
    }
    let keys = std::rc::Rc::new(read_keys(client)?);
    if fill.keep() {
        KEYS.with(|k| *k.borrow_mut() = Some((fill.generation(), keys.clone())));
    }
    Ok(keys)
}

/// Every key, for checking signatures (read as the extension owner).
pub(super) fn read_keys(client: &SpiClient) -> Result<HashMap<i32, Vec<u8>>, MxError> {
    let mut keys = HashMap::new();
    for row in client
        .select("SELECT key_id, key FROM memory.audit_keys", None, &[])
        .map_err(MxError::spi_in("audit"))?
    {
        keys.insert(
            row.get::<i32>(1)
                .map_err(MxError::spi_in("audit"))?
                .unwrap_or_default(),
            row.get::<Vec<u8>>(2)
                .map_err(MxError::spi_in("audit"))?
                .unwrap_or_default(),
        );
    }
    Ok(keys)
}

/// The chains an integration takes: all of them (share 0 of 1), or, for a background
/// integrator (one of `memory.integrator_workers`), those `memory_core::audit::chain_share`
/// gives to the shares in `mask` (its own, and for the first integrator those of others that are
/// not running).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Share {
    n: u32,
    mask: u32,
}

impl Share {
    pub const ALL: Share = Share { n: 1, mask: 1 };

    /// Share `k` of `n` (at most 32).
    pub fn one(k: u32, n: u32) -> Share {
        Share { n: n.clamp(1, 32), mask: 1 << k.min(31) }
    }

    /// No share of `n`.
    pub fn none(n: u32) -> Share {
        Share { n: n.clamp(1, 32), mask: 0 }
    }

    /// Whether any chain is taken.
    pub fn is_some(&self) -> bool {
        self.mask != 0
    }

    /// This share and share `k`.
    pub fn with(self, k: u32) -> Share {
        Share { mask: self.mask | 1 << k.min(31), ..self }
    }

    pub fn takes(&self, chain: &[u8]) -> bool {
        self.n <= 1 || self.mask & 1 << memory_core::audit::chain_share(chain, self.n) != 0
    }

    /// Whether the current row of `scan` (a pending table's, its chain_id at `chain_at`) is in
    /// this share.
    fn has_row(&self, scan: &crate::pg::scan::HeapScan, chain_at: i16) -> bool {
        self.n <= 1 || crate::pg::scan::in_scratch(|| scan.bytes(chain_at).is_some_and(|c| self.takes(c)))
    }

    /// The fraction of the chains taken, as (shares taken, shares).
    fn part(&self) -> (u64, u64) {
        if self.n <= 1 { (1, 1) } else { (self.mask.count_ones() as u64, self.n as u64) }
    }
}

/// How an integration is asked for.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    /// `memory.audit_integrate()`: waits for another integrator; a transaction that cannot
    /// integrate (read-only, REPEATABLE READ or SERIALIZABLE, a standby) is an error.
    Explicit,
    /// Before audit_verify, audit_head, sealing and maintenance: waits for another
    /// integrator; does nothing where it cannot integrate.
    Reader,
    /// A background worker, for the chains of its share: gives way to any integrator of every
    /// chain, and runs beside the other workers (their shares do not overlap).
    Worker(Share),
}

/// Integrate the pending entries this transaction sees; returns how many were chained.
///
/// On Citus (docs/design.md#scale-out) each node integrates the shard groups it holds: the background worker of
/// a node and `memory_internal._audit_integrate_local` do that; anything else asks every node to
/// (`run_command_on_all_nodes`, each node in its own transaction) and sums their counts.
pub fn integrate(caller: Caller) -> Result<i64, MxError> {
    integrate_where(caller, false)
}

fn integrate_where(caller: Caller, local_only: bool) -> Result<i64, MxError> {
    if !crate::pg::xact::can_write_fresh() {
        return match caller {
            Caller::Explicit => Err(MxError::new(
                code::READ_ONLY_TRANSACTION,
                "memory.audit_integrate needs a read-write, READ COMMITTED transaction on a primary",
            )
            .hint("Call it in its own transaction; audit_verify reports pending entries wherever it runs.")),
            _ => Ok(0),
        };
    }
    // Read events of rolled-back reads handed over in this database (audit::reads), those of the
    // caller's chains: appended first, in this transaction (chained with what is pending).
    let share = match caller {
        Caller::Worker(share) => share,
        _ => Share::ALL,
    };
    super::reads::drain(|chain| share.takes(chain))?;
    Spi::connect(|client| {
        if !super::storage::distributed(client)? {
            let tables = super::storage::local(client)?;
            return integrate_in(client, caller, &tables);
        }
        if local_only || matches!(caller, Caller::Worker(_)) {
            // A reader's integration, asked for by the coordinator, waits at most a second for a
            // chain's head: the reader's own transaction may hold it (an immediate-mode write on
            // this node), and its wait on this node would be one no deadlock detector sees. The
            // reader then goes on without it (the coordinator warns; audit_verify counts what is
            // still pending).
            let _bounded = (local_only && caller == Caller::Reader)
                .then(|| crate::pg::identity::LocalSetting::set(c"lock_timeout", c"1s"));
            let mut done = 0;
            // (Groups whose shards are not all here are left for later; audit_verify names them.)
            for tables in super::storage::local_groups(client)?.0 {
                done += integrate_in(client, caller, &tables)?;
            }
            return Ok(done);
        }
        let command = format!("SELECT memory_internal._audit_integrate_local({})", caller == Caller::Explicit);
        let mut done = 0i64;
        for (node, ok, result) in super::storage::on_all_nodes(client, &command)? {
            match (ok, result.parse::<i64>()) {
                (true, Ok(n)) => done += n,
                // Readers go on without what a node could not integrate (audit_verify counts
                // it as pending); an explicit call reports it.
                _ if caller != Caller::Explicit => {
                    pgrx::warning!("memory_ext: audit integration on Citus node {node} failed: {result}")
                }
                _ => {
                    return Err(MxError::new(code::INTERNAL, format!("audit integration on Citus node {node} failed: {result}")))
                }
            }
        }
        Ok(done)
    })
}

/// Integration of the pending entries of one place (the node's own tables, or one shard group).
fn integrate_in(client: &SpiClient, caller: Caller, tables: &super::storage::Tables) -> Result<i64, MxError> {
    {
        // Integrators serialize on memory_ext's integration lock (crate::pg::locks: an advisory
        // lock of a class no SQL function can name, so no role takes it but through memory_ext's
        // integrations, and a transaction that integrated cannot be prepared). One
        // that takes every chain holds it alone (SHARE ROW EXCLUSIVE); background integrators,
        // whose shares do not overlap, hold it beside each other (ROW EXCLUSIVE). Only an
        // explicit call waits; readers and the workers give way and leave what is pending to
        // the next integration.
        let share = match caller {
            Caller::Worker(share) => share,
            _ => Share::ALL,
        };
        let mode = if matches!(caller, Caller::Worker(_)) { pg_sys::RowExclusiveLock } else { pg_sys::ShareRowExclusiveLock };
        if !crate::pg::locks::take(crate::pg::locks::Lock::Integration, mode, crate::pg::locks::Hold::Transaction, caller == Caller::Explicit) {
            REFUSED.with(|r| r.set(true));
            return Ok(0);
        }
        // Nothing of its share pending (a background integrator's idle round, most of them): no
        // appender, so no transaction id and no commit record; and the lock goes at once, having
        // guarded nothing (a reader's transaction would otherwise hold every worker up until it
        // ends).
        if crate::pg::bulk::is_heap(tables.pending) && !any_pending(tables.pending, share)? {
            crate::pg::locks::release(crate::pg::locks::Lock::Integration, mode, crate::pg::locks::Hold::Transaction);
            return Ok(0);
        }
        // The appender: it runs everything below as the extension owner.
        let mut ap = Appender::new(client)?.immediate().system(true);
        let keys = keys_kept(client)?;
        let mut signer = PendingSigner::new();
        let mut done: i64 = 0;
        let utf8 = crate::pg::varlena::database_is_utf8();
        let mut ctids: Vec<pg_sys::ItemPointerData> = Vec::new();
        // Chain one entry, unless its signature does not check (it then stays pending, and
        // audit_verify names it). Heads are locked as their chains come, in chain order.
        let mut chain_one = |ap: &mut Appender, row: &PendingRef, tid: Option<pg_sys::ItemPointerData>| -> Result<(), MxError> {
            let pushed = row.with_payload(utf8, |payload| -> Result<bool, MxError> {
                let Some(payload) = payload else { return Ok(false) };
                let Some(prefix) = row.checks_sharing(payload, &keys, &mut signer) else {
                    return Ok(false);
                };
                ap.push_ref(
                    client,
                    EventRef {
                        event_type: row.event_type,
                        org_id: row.org_id,
                        project_id: row.project_id,
                        workspace_id: row.workspace_id,
                        actor_id: row.actor_id,
                        payload,
                        payload_text: None,
                        payload_jsonb: Some(row.payload_jsonb),
                        prefix: Some(&prefix),
                    },
                )?;
                Ok(true)
            })?;
            if pushed {
                if let Some(t) = tid {
                    ctids.push(t);
                }
            }
            Ok(())
        };
        // A backlog that fits in memory.integration_memory (its rows as read, detoasted) is read
        // straight from the heap and sorted here; a bigger one is sorted by a query, in that much
        // work_mem.
        // A background integrator's part of it: the workers of a database share it.
        let (taken, shares) = share.part();
        let budget = crate::gucs::INTEGRATION_MEMORY.get().max(0) as u64 * 1024 / shares * taken;
        let stored = if budget > 0 && crate::pg::bulk::is_heap(tables.pending) { Stored::read(tables.pending, budget, share)? } else { None };
        let direct = stored.is_some();
        if let Some(stored) = stored {
            let order = stored.order();
            // The heads of the round's chains, locked together (one statement, where one a chain
            // cost a round of many small tenants more than their entries): those of entries that
            // can be chained at all (`PendingRef::well_formed`; a malformed one is parked and must
            // never fail the round). A chain whose entries then fail their signature check keeps
            // its head unwritten; one with no head yet, or on another node, sends the round the
            // one-by-one way (locked as its first entry comes).
            ap.lock(client, order.iter().map(|&k| stored.row(k, utf8)).filter(|r| r.well_formed()).map(|r| r.chain_id))?;
            for k in order {
                chain_one(&mut ap, &stored.row(k, utf8), Some(stored.tid(k)))?;
            }
        } else {
            let work_mem = std::ffi::CString::new(format!("{}kB", (budget / 1024).max(4096))).unwrap_or_default();
            let _work_mem = crate::pg::identity::LocalSetting::set(c"work_mem", &work_mem);
            let pending_query = tables.sql(PENDING_QUERY);
            let mut cursor = client.open_cursor(pending_query.as_str(), &[]);
            let mut batch = Fetched::default();
            // Entries whose (chain, id) occurs more than once: copies (the id is bound into the
            // signature, so a copy signs like its original). Neither is chained; audit_verify
            // reports them.
            let mut copies: std::collections::HashSet<(String, i64)> = std::collections::HashSet::new();
            for row in client
                .select(
                    tables.sql("SELECT chain_id, id FROM memory.audit_pending GROUP BY 1, 2 HAVING pg_catalog.count(*) OPERATOR(pg_catalog.>) 1").as_str(),
                    None,
                    &[],
                )
                .map_err(MxError::spi_in("audit"))?
            {
                let chain = row.get::<String>(1).map_err(MxError::spi_in("audit"))?.unwrap_or_default();
                let id = row.get::<i64>(2).map_err(MxError::spi_in("audit"))?.unwrap_or_default();
                copies.insert((chain, id));
            }
            while batch.fetch(&mut cursor, FETCH, COLS)? {
                for i in 0..batch.len() {
                    let row = PendingRef::read(&batch, i);
                    if !share.takes(row.chain_id.as_bytes()) {
                        continue;
                    }
                    if !copies.is_empty() && copies.contains(&(row.chain_id.to_string(), row.id)) {
                        continue;
                    }
                    chain_one(&mut ap, &row, batch.tid(i, 3))?;
                }
            }
        }
        drop(chain_one);

        // One pass over the table deletes what was chained (the rows stay where they were read:
        // only an integrator deletes them, and integrators hold the lock above).
        if !ctids.is_empty() && direct {
            // In the table's order: each page is visited once, in turn.
            ctids.sort_unstable_by_key(|t| pgrx::itemptr::item_pointer_to_u64(*t));
            crate::pg::bulk::delete_rows(tables.pending, &ctids)?;
            done = ctids.len() as i64;
        } else if !ctids.is_empty() {
            crate::gates::set_integrating(true);
            let deleted = super::storage::run_in(
                client,
                tables,
                "DELETE FROM memory.audit_pending WHERE ctid OPERATOR(pg_catalog.=) ANY ($1)",
                &[pg_sys::TIDARRAYOID],
                &[ctids.clone().into()],
                None,
            );
            crate::gates::set_integrating(false);
            let deleted = deleted?.len();
            if deleted != ctids.len() {
                return Err(MxError::new(code::INTERNAL, format!("integrated {} pending entries but deleted {deleted}", ctids.len())));
            }
            done = ctids.len() as i64;
        }
        ap.finish(client)?;
        Ok(done)
    }
}

thread_local! {
    // Whether an integration of this backend found the integration lock held by another
    // transaction since `lock_was_refused` last asked.
    static REFUSED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether an integration found the integration lock taken since the last call (and forgets it):
/// a background integrator then waits `memory.integrator_delay` before its next round instead of
/// trying again at every commit's wake-up while the lock's holder stays open.
pub fn lock_was_refused() -> bool {
    REFUSED.with(|r| r.replace(false))
}

/// `memory.audit_integrate()` and the readers' integration (not granted to PUBLIC; the SQL
/// wrappers are SECURITY DEFINER).
#[pg_extern(volatile, schema = "memory_internal", name = "_audit_integrate")]
fn audit_integrate_sql(explicit: bool) -> i64 {
    integrate(if explicit {
        Caller::Explicit
    } else {
        Caller::Reader
    })
    .or_raise()
}

/// On Citus, a node's share of an integration: the shard groups it holds (not granted to PUBLIC;
/// called by `memory_internal._audit_integrate` on the coordinator through `run_command_on_all_nodes`).
#[pg_extern(volatile, schema = "memory_internal", name = "_audit_integrate_local")]
fn audit_integrate_local_sql(explicit: bool) -> i64 {
    integrate_where(if explicit { Caller::Explicit } else { Caller::Reader }, true).or_raise()
}
