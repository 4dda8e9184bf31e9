//! Appending to the audit trail: `Appender` chains a statement's events (immediate mode) or
//! signs them as pending entries (deferred mode), with the per-backend caches that make an
//! append cheap (head versions, the key and salt, pending ids, the log's partitions). The SQL
//! functions over it are in `audit` (mod.rs), the statement trigger in `audit::trigger`.
//!
//! This file is long because `Appender` is one state machine over both modes and the Citus
//! placement of its rows; splitting it would scatter the ordering rules its comments explain.

use crate::errors::{code, MxError, OrRaise};
use super::jsonb;
use super::storage::{self, run, run_in};
use super::wake;
use crate::pg::bulk::Cell;
use memory_core::audit::{pseudonymize, Chainer, Event, MerkleBuilder, Payload, PendingSigner};
use pgrx::prelude::*;
use pgrx::spi::SpiClient;
use serde_json::Value;
use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};


/// The jsonb root container (the bytes after the varlena header) of `value`, laid out as
/// `jsonb_in` would lay it out, when it is a flat object of strings, booleans or nulls (for
/// `pg::bulk::Cell::Varlena`); None for anything else (which then goes through `jsonb_in`).
pub(crate) fn flat_jsonb(value: &serde_json::Value) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    jsonb::write_flat_container(Payload::Json(value), &mut out).then_some(out)
}


/// Microseconds from the Unix epoch to the PostgreSQL epoch (2000-01-01).
pub(crate) const PG_EPOCH_UNIX_MICROS: i64 = 946_684_800_000_000;
/// Rows per INSERT when a statement appends many events.
pub(crate) const CHUNK: usize = 10_000;
/// Longest org, project, workspace or actor id an event may carry, in bytes: every one of them
/// must fit the log's index entries, or one writer's event could make integration fail for all.
pub(crate) const MAX_ID_BYTES: usize = 512;
/// Largest payload `memory.audit_append` takes, in bytes of JSON text (events name and hash
/// content; they do not carry it).
pub(crate) const MAX_PAYLOAD_BYTES: usize = 64 * 1024;

/// `Err(22023)` for an id longer than MAX_ID_BYTES.
fn check_id(what: &str, v: Option<&str>) -> Result<(), MxError> {
    match v {
        Some(s) if s.len() > MAX_ID_BYTES => Err(MxError::bad_argument(format!(
            "{what} of an audit event is {} bytes long; at most {MAX_ID_BYTES} are allowed",
            s.len()
        ))),
        _ => Ok(()),
    }
}

/// An event waiting for its place in a chain.
pub struct Pending {
    pub event_type: Cow<'static, str>,
    pub org_id: Option<String>,
    pub project_id: Option<String>,
    pub workspace_id: Option<String>,
    pub actor_id: Option<String>,
    pub payload: Value,
    /// The payload exactly as the caller gave it, stored verbatim (the hash covers `payload`,
    /// which is what reading the stored text back yields). None: store `payload` serialized.
    pub payload_text: Option<String>,
}

/// An event borrowed from wherever it was read: what the statement trigger builds per row
/// without allocating.
pub struct EventRef<'a> {
    pub event_type: &'a str,
    pub org_id: Option<&'a str>,
    pub project_id: Option<&'a str>,
    pub workspace_id: Option<&'a str>,
    pub actor_id: Option<&'a str>,
    pub payload: Payload<'a>,
    /// As `Pending::payload_text`.
    pub payload_text: Option<&'a str>,
    /// The payload as a stored jsonb root container (a pending entry's, copied as is); the
    /// hash covers `payload`, which reading it back yields.
    pub payload_jsonb: Option<&'a [u8]>,
    /// The sequencer's: the hashing its check of the pending signature shares with the entry
    /// hash (made from this very event, under the key it was signed with).
    pub prefix: Option<&'a memory_core::audit::SharedPrefix<'a, 'a>>,
}

struct Head {
    /// ctid of the head row version this transaction holds locked.
    tid: String,
    /// Where the chain is (its shard group on Citus).
    tables: std::rc::Rc<storage::Tables>,
    /// The seq the head had when locked: a head no event was appended to is not written.
    locked_seq: i64,
    chainer: Chainer,
    tree: MerkleBuilder,
    recorded_at: i64,
}

impl Head {
    /// A head as the lock statements read it (seq, entry_hash, merkle_frontier, last_recorded_at,
    /// ctid), locked by this transaction.
    fn read(
        chain: &str,
        tables: std::rc::Rc<storage::Tables>,
        seq: Option<i64>,
        hash: Option<Vec<u8>>,
        frontier: Option<Vec<u8>>,
        last: Option<TimestampWithTimeZone>,
        tid: Option<String>,
    ) -> Result<Head, MxError> {
        let last = last.map(|t| if t.is_infinity() || t.is_neg_infinity() { i64::MIN } else { pg_sys::TimestampTz::from(t) });
        Head::from_parts(chain, tables, seq.unwrap_or_default(), hash.unwrap_or_default(), &frontier.unwrap_or_default(), last, tid.unwrap_or_default())
    }

    /// A head from its values: `last`, its last_recorded_at in microseconds since the PostgreSQL
    /// epoch (i64::MIN for an infinity, None for NULL).
    fn from_parts(chain: &str, tables: std::rc::Rc<storage::Tables>, seq: i64, hash: Vec<u8>, frontier: &[u8], last: Option<i64>, tid: String) -> Result<Head, MxError> {
        let hash: [u8; 32] = hash.try_into().map_err(|_| {
            MxError::new(code::AUDIT_APPEND_ONLY, format!("audit head of chain \"{chain}\" is damaged")).hint("Run memory.audit_verify.")
        })?;
        let tree = MerkleBuilder::from_bytes(frontier)
            .ok_or_else(|| MxError::new(code::AUDIT_APPEND_ONLY, format!("Merkle frontier of chain \"{chain}\" is damaged")))?;
        let last = last.map(|t| if t == i64::MIN || t == i64::MAX { i64::MIN } else { t + PG_EPOCH_UNIX_MICROS }).unwrap_or(i64::MIN);
        // Under the head lock the clock only moves forward, so each month partition holds a
        // contiguous range of every chain (which sealing relies on).
        let now = crate::pg::xact::now_micros() + PG_EPOCH_UNIX_MICROS;
        Ok(Head { tid, tables, locked_seq: seq, chainer: Chainer::new(seq, hash), tree, recorded_at: now.max(last) })
    }
}

/// Appends events to their chains within the current transaction.
pub struct Appender {
    /// Appends run as the extension owner with the pinned search_path (the log, heads and keys
    /// are closed to everyone else); dropped with the Appender.
    _owner: crate::trust::AsOwner,
    /// Events not chosen by the caller (DDL and maintenance records): no org check.
    system: bool,
    key_id: i32,
    key: Vec<u8>,
    salt: Vec<u8>,
    /// Whether the database encoding is UTF-8 (payloads can then be laid out as jsonb here).
    utf8: bool,
    heads: BTreeMap<String, Head>,
    rows: Rows,
    /// Deferred mode: events become pending entries; `lock` only checks orgs.
    deferred: bool,
    /// Chained in the statement because the caller said so (the sequencer), not by the mode.
    sequencer: bool,
    /// Deferred mode: chains whose org was checked.
    checked: BTreeSet<String>,
    /// Immediate mode on Citus: chains placed on another node, recorded as pending entries.
    remote: BTreeSet<String>,
    signer: PendingSigner,
    /// Deferred mode: the time every pending entry of this appender carries (Unix microseconds).
    written_at: i64,
    /// On a hot standby nothing can be written: the events this appender could not record, by
    /// type, logged by `finish` (docs/design.md#operations: read-only work runs there; what it cannot audit is logged).
    standby: Option<BTreeMap<String, u64>>,
}

impl Drop for Appender {
    fn drop(&mut self) {
        // The signer goes back for the next statement, with its buffer and keyed state.
        let signer = std::mem::take(&mut self.signer);
        SIGNER.with(|s| *s.borrow_mut() = signer);
    }
}

thread_local! {
    // The pending signer of this backend, lent to each Appender: the HMAC state keyed with the
    // current key (keying hashes two blocks) and the buffer of the event's bytes outlive a
    // statement, and an agent's statement signs one event. It keeps the key it was keyed with and
    // compares it on every use, so a rotated key is keyed anew.
    static SIGNER: RefCell<PendingSigner> = RefCell::new(PendingSigner::new());
}

/// Where bytes are in `Rows::arena`.
#[derive(Clone, Copy)]
struct Span {
    at: usize,
    len: usize,
}

/// A payload as it will be stored.
#[derive(Clone, Copy)]
enum StoredPayload {
    /// A jsonb root container laid out by memory_ext.
    Jsonb(Span),
    /// JSON text for `jsonb_in`: the caller's own text, verbatim, or a value that is not flat.
    Text(Span),
}

/// One chained event waiting to be written. Its chain is its org (`''` without one).
struct Row {
    /// The seq; for a pending entry, its id.
    seq: i64,
    /// A pending entry's place in its writer's order (0 for chained rows).
    ord: i64,
    /// A pending entry (deferred mode, or a chain placed on another Citus node), not a chained row.
    pending: bool,
    recorded_at: i64,
    event_type: Span,
    actor: Option<Span>,
    org: Option<Span>,
    project: Option<Span>,
    workspace: Option<Span>,
    payload: StoredPayload,
    prev: [u8; 32],
    hash: [u8; 32],
}

/// Events chained but not yet written: fixed-size rows, and one arena for all their text (no
/// allocation per event).
#[derive(Default)]
struct Rows {
    rows: Vec<Row>,
    arena: Vec<u8>,
}

/// The columns of memory.audit_log in the order `Rows::cells` gives them.
const LOG_COLUMNS: [&str; 12] = [
    "chain_id", "seq", "event_type", "recorded_at", "actor_id", "org_id", "project_id", "workspace_id", "payload",
    "key_id", "prev_hash", "entry_hash",
];

/// The columns of memory.audit_pending in the order `Rows::pending_cells` gives them.
const PENDING_COLUMNS: [&str; 12] = [
    "id", "ord", "chain_id", "event_type", "written_at", "actor_id", "org_id", "project_id", "workspace_id", "payload",
    "key_id", "pending_hash",
];

impl Rows {
    /// Row `i` as the cells of PENDING_COLUMNS.
    fn pending_cells(&self, i: usize, key_id: i32) -> [Cell<'_>; 12] {
        let [chain, _seq, event_type, recorded_at, actor, org, project, workspace, payload, key, _prev, hash] = self.cells(i, key_id);
        let row = &self.rows[i];
        [Cell::Int8(row.seq), Cell::Int8(row.ord), chain, event_type, recorded_at, actor, org, project, workspace, payload, key, hash]
    }

    /// Row `i` as the cells of LOG_COLUMNS.
    fn cells(&self, i: usize, key_id: i32) -> [Cell<'_>; 12] {
        let row = &self.rows[i];
        let text = |s: Option<Span>| s.map(|s| Cell::Varlena(self.get(s))).unwrap_or(Cell::Null);
        let payload = match row.payload {
            StoredPayload::Jsonb(s) => Cell::Varlena(self.get(s)),
            StoredPayload::Text(s) => Cell::JsonText(std::str::from_utf8(self.get(s)).unwrap_or("null")),
        };
        [
            Cell::Varlena(self.chain(row)),
            Cell::Int8(row.seq),
            text(Some(row.event_type)),
            Cell::Timestamptz(row.recorded_at - PG_EPOCH_UNIX_MICROS),
            text(row.actor),
            text(row.org),
            text(row.project),
            text(row.workspace),
            payload,
            Cell::Int4(key_id),
            Cell::Varlena(&row.prev),
            Cell::Varlena(&row.hash),
        ]
    }
    fn put(&mut self, s: &str) -> Span {
        let at = self.arena.len();
        self.arena.extend_from_slice(s.as_bytes());
        Span { at, len: s.len() }
    }

    fn get(&self, s: Span) -> &[u8] {
        &self.arena[s.at..s.at + s.len]
    }

    /// The chain of `row`: its org, or `''`.
    fn chain(&self, row: &Row) -> &[u8] {
        row.org.map_or(&[][..], |s| self.get(s))
    }

    fn clear(&mut self) {
        self.rows.clear();
        self.arena.clear();
    }
}

thread_local! {
    // Head rows this transaction already updated: chain -> ctid of the newest version. Every
    // update of a row leaves a version that a lookup by key must walk past until the
    // transaction ends, so many appends in one transaction would grow quadratically; going
    // straight to the newest version by ctid keeps each append constant. Keyed by the top
    // transaction id; a version from an aborted subtransaction is invisible, and the lookup then
    // falls back to the key.
    static HEAD_TIDS: std::cell::RefCell<(pg_sys::TransactionId, HashMap<String, String>)> =
        std::cell::RefCell::new((pg_sys::InvalidTransactionId, HashMap::new()));
}

thread_local! {
    // Chains whose heads this backend locked in a transaction that committed (the sequencer's
    // rounds), with where it last wrote each one's head in such a transaction: `lock_together`
    // does not ask whether they exist, and locks the heads it wrote from where it wrote them
    // (`pg::bulk::lock_rows`, which follows any later update and checks the row is the chain's),
    // with no statement. Emptied by any relcache invalidation (a TRUNCATE or rewrite of the heads
    // sends one) and when a head turns out to be missing.
    static KNOWN_HEADS: RefCell<HashMap<String, Option<String>>> = RefCell::new(HashMap::new());
    // Chains locked by the current transaction; and the chains locked and the heads written (from
    // HEAD_TIDS) by the last transaction that committed, moved there at its end and merged into
    // KNOWN_HEADS by the next `lock_together`. A rolled-back transaction's or savepoint's never count.
    static HEADS_SEEN: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
    static HEADS_COMMITTED: RefCell<(Vec<String>, HashMap<String, String>)> = RefCell::new((Vec::new(), HashMap::new()));
}

/// At a transaction's end: what it locked and wrote becomes known after a commit, nothing of it
/// otherwise. (Nothing here allocates: after a commit nothing may fail.)
fn heads_outcome(committed: bool) {
    let seen = HEADS_SEEN.with(|k| std::mem::take(&mut *k.borrow_mut()));
    let written = HEAD_TIDS.with(|c| std::mem::take(&mut c.borrow_mut().1));
    if committed {
        HEADS_COMMITTED.with(|c| {
            let mut c = c.borrow_mut();
            if c.0.is_empty() && c.1.is_empty() {
                *c = (seen, written);
            }
        });
    }
}

/// Chains locked, and heads written, in a committed transaction, as KNOWN_HEADS keeps them.
fn known_heads_merge() {
    let (locked, written) = HEADS_COMMITTED.with(|c| std::mem::take(&mut *c.borrow_mut()));
    if locked.is_empty() && written.is_empty() {
        return;
    }
    KNOWN_HEADS.with(|k| {
        let mut k = k.borrow_mut();
        // (A bound, should a backend ever see many thousands of chains.)
        if k.len() + locked.len() + written.len() > 100_000 {
            k.clear();
        }
        // A head locked and not moved stays where it was written.
        for chain in locked {
            k.entry(chain).or_insert(None);
        }
        for (chain, tid) in written {
            k.insert(chain, Some(tid));
        }
    });
}

fn cached_tid(chain: &str) -> Option<String> {
    let xid = crate::pg::xact::top_xid_if_any();
    HEAD_TIDS.with(|c| {
        let c = c.borrow();
        if c.0 == xid {
            c.1.get(chain).cloned()
        } else {
            None
        }
    })
}

fn remember_tid(chain: &str, tid: String) {
    let xid = crate::pg::xact::top_xid_if_any();
    HEAD_TIDS.with(|c| {
        let mut c = c.borrow_mut();
        if c.0 != xid {
            *c = (xid, HashMap::new());
        }
        c.1.insert(chain.to_string(), tid);
    });
}


impl Appender {
    /// Reads the current key. The transaction gets its xid here, so that pgrx runs the writes
    /// below as read-write statements even through `select` (which keeps the client shareable
    /// with an open cursor).
    pub fn new(client: &SpiClient) -> Result<Self, MxError> {
        let owner = crate::trust::AsOwner::enter_for_appends()?;
        let standby = crate::pg::xact::in_recovery();
        if !standby {
            crate::pg::xact::ensure_xid();
        }
        let (key_id, key, salt) = current_key(client)?;
        Ok(Appender {
            _owner: owner,
            system: false,
            key_id,
            key,
            salt,
            utf8: crate::pg::varlena::database_is_utf8(),
            heads: BTreeMap::new(),
            rows: Rows::default(),
            deferred: crate::gucs::AUDIT_MODE.get() == crate::gucs::AuditMode::Deferred,
            sequencer: false,
            checked: BTreeSet::new(),
            remote: BTreeSet::new(),
            signer: SIGNER.with(|s| std::mem::take(&mut *s.borrow_mut())),
            written_at: crate::pg::xact::now_micros() + PG_EPOCH_UNIX_MICROS,
            standby: standby.then(BTreeMap::new),
        })
    }

    /// Chain in the statement whatever `memory.audit_mode` says (the sequencer itself).
    pub fn immediate(mut self) -> Self {
        self.deferred = false;
        self.sequencer = true;
        self
    }

    /// Mark the events of this appender as memory_ext's own records (no org check).
    pub fn system(mut self, system: bool) -> Self {
        self.system = system;
        self
    }

    /// Pseudonym of an actor or user id, as payloads and actor_id carry them.
    pub fn pseudonym(&self, id: &str) -> String {
        // An agent's session writes for the same user statement after statement: the HMAC is
        // kept per backend, for the salt it was made with (a new salt empties the cache).
        PSEUDONYMS.with(|c| {
            let mut c = c.borrow_mut();
            if c.0 != self.salt || c.1.len() >= 4096 {
                c.0.clone_from(&self.salt);
                c.1.clear();
            }
            c.1.entry(id.to_string()).or_insert_with(|| pseudonymize(&self.salt, id)).clone()
        })
    }

    /// Vouch for the platform chain: a governed table without an org column audits there for every
    /// role that may write the table (docs/design.md#application-roles); the table's own trigger is the authority, as
    /// memory_ext's own records are. `audit_append` to the platform chain stays with unrestricted roles.
    pub fn vouch_platform_chain(&mut self) {
        self.checked.insert(String::new());
    }

    /// Lock the heads of these chains for the rest of the transaction, in sorted order.
    pub fn lock<'c>(&mut self, client: &SpiClient, chains: impl IntoIterator<Item = &'c str>) -> Result<(), MxError> {
        let mut wanted: Vec<&str> = chains.into_iter().filter(|c| !self.heads.contains_key(*c)).collect();
        wanted.sort_unstable();
        wanted.dedup();
        // A chain is opened only for a caller who may act for its org (docs/design.md#trust-boundary): owning a table
        // or holding audit_append never opens another tenant's chain.
        if !self.system {
            for chain in &wanted {
                if !self.checked.contains(*chain) {
                    crate::trust::require_org(Some(chain))?;
                }
            }
        }
        if self.deferred || self.standby.is_some() {
            // No chain lock: the sequencer orders pending entries after commit (and a standby
            // records nothing).
            self.checked.extend(wanted.into_iter().map(str::to_string));
            return Ok(());
        }
        // The sequencer's round over several chains of this node's own tables: locked in one
        // statement. (Not where this transaction already moved a head: its cached ctid goes
        // straight to the newest version, where a lookup by key walks every dead one.)
        if self.sequencer && wanted.len() > 1 && !wanted.iter().any(|c| cached_tid(c).is_some()) {
            self.lock_together(client, &wanted)?;
        }
        for chain in wanted {
            if self.heads.contains_key(chain) {
                continue;
            }
            const BY_TID: &str = "SELECT seq, entry_hash, merkle_frontier, last_recorded_at, ctid::text FROM memory.audit_heads
                                   WHERE ctid = $1::tid AND chain_id = $2 FOR UPDATE";
            const BY_KEY: &str = "SELECT seq, entry_hash, merkle_frontier, last_recorded_at, ctid::text FROM memory.audit_heads
                                   WHERE chain_id = $1 FOR UPDATE";
            const NEW_HEAD: &str = "INSERT INTO memory.audit_heads (chain_id) VALUES ($1) ON CONFLICT (chain_id) DO NOTHING";
            let tables = match storage::for_chain(client, chain)? {
                Some(t) => t,
                // Immediate mode on Citus for a chain placed on another node (an event appended
                // on the coordinator, which holds no shards, or on a worker for another worker's
                // tenant): its head cannot be locked here, so its events become pending entries
                // (through the outbox), chained by the sequencer of the chain's node.
                None if !self.sequencer => {
                    self.remote.insert(chain.to_string());
                    continue;
                }
                None => {
                    return Err(MxError::new(code::INTERNAL, format!("the audit shards of chain \"{chain}\" are not on this node"))
                        .hint("Integrate on the node that holds them: memory.audit_integrate() on the coordinator does."))
                }
            };
            let mut rows = match cached_tid(chain) {
                Some(tid) => run_in(client, &tables, BY_TID, &[pg_sys::TEXTOID, pg_sys::TEXTOID], &[tid.as_str().into(), chain.into()], Some(1))?,
                None => run_in(client, &tables, BY_KEY, &[pg_sys::TEXTOID], &[chain.into()], Some(1))?,
            };
            if rows.is_empty() {
                run_in(client, &tables, NEW_HEAD, &[pg_sys::TEXTOID], &[chain.into()], None)?;
                rows = run_in(client, &tables, BY_KEY, &[pg_sys::TEXTOID], &[chain.into()], Some(1))?;
            }
            let row = rows.first();
            let e = MxError::spi_in("audit");
            let head = Head::read(chain, tables, row.get(1).map_err(&e)?, row.get(2).map_err(&e)?, row.get(3).map_err(&e)?, row.get(4).map_err(&e)?, row.get(5).map_err(&e)?)?;
            self.heads.insert(chain.to_string(), head);
        }
        Ok(())
    }

    /// Locks the heads of `chains` (sorted, distinct) in one statement, in the order `lock` takes
    /// them one by one (bytewise by chain, so two transactions locking overlapping chains never
    /// wait on each other in a cycle), when every chain is on this node's own tables (not a
    /// Citus shard group) and every head exists (asked first, without a lock). Otherwise it locks
    /// nothing and `lock` takes them one by one, creating the missing heads in their turn: a
    /// chain new to the log, or placed on another node, never fails here.
    fn lock_together(&mut self, client: &SpiClient, chains: &[&str]) -> Result<(), MxError> {
        const EXISTING: &str = "SELECT pg_catalog.count(*) FROM memory.audit_heads WHERE chain_id OPERATOR(pg_catalog.=) ANY ($1)";
        const BY_KEYS: &str = "SELECT seq, entry_hash, merkle_frontier, last_recorded_at, ctid::text, chain_id FROM memory.audit_heads
                                WHERE chain_id OPERATOR(pg_catalog.=) ANY ($1) ORDER BY chain_id COLLATE \"C\" FOR UPDATE";
        let mut tables = None;
        for chain in chains {
            match storage::for_chain(client, chain)? {
                Some(t) if !t.is_shard_group() => tables = Some(t),
                _ => return Ok(()),
            }
        }
        let Some(tables) = tables else { return Ok(()) };
        // The chains (from the first, in order) whose heads this backend wrote in a committed
        // round: locked from where it wrote them, with no statement (an integrator's round over
        // many tenants locks every head each round, and the statement by key cost it a sixth of
        // its CPU, issue 54). The rest, from the first not locked so, by the statement below:
        // the order of the locks is the chains' order either way.
        known_heads_merge();
        let known: Vec<pg_sys::ItemPointerData> = KNOWN_HEADS.with(|k| {
            let k = k.borrow();
            chains.iter().map_while(|c| k.get(*c).and_then(|t| t.as_deref()).and_then(crate::pg::bulk::parse_tid)).collect()
        });
        let mut first = 0;
        if !known.is_empty() && tables.heads != pg_sys::InvalidOid {
            use crate::pg::bulk::Value;
            let keys: Vec<&[u8]> = chains[..known.len()].iter().map(|c| c.as_bytes()).collect();
            let locked = crate::pg::bulk::lock_rows(tables.heads, "chain_id", &keys, &known, &["seq", "entry_hash", "merkle_frontier", "last_recorded_at"])?;
            for (chain, (tid, [seq, hash, frontier, last])) in chains.iter().zip(locked) {
                let (Value::Int(seq), Value::Bytes(hash), Value::Bytes(frontier)) = (seq, hash, frontier) else {
                    return Err(MxError::new(code::AUDIT_APPEND_ONLY, format!("audit head of chain \"{chain}\" is damaged")).hint("Run memory.audit_verify."));
                };
                let last = match last {
                    Value::Int(t) => Some(t),
                    _ => None,
                };
                let head = Head::from_parts(chain, tables.clone(), seq, hash, &frontier, last, crate::pg::bulk::tid_text(&tid))?;
                self.heads.insert(chain.to_string(), head);
                first += 1;
            }
            HEADS_SEEN.with(|k| k.borrow_mut().extend(chains[..first].iter().map(|c| c.to_string())));
        }
        let chains = &chains[first..];
        if chains.is_empty() {
            return Ok(());
        }
        let names: Vec<String> = chains.iter().map(|c| c.to_string()).collect();
        // Whether every head exists is asked only for chains this backend has not yet seen locked
        // in a committed round: heads are never deleted (the integrator's next round over the
        // same chains, ten a second under load, skips the question).
        if !KNOWN_HEADS.with(|k| chains.iter().all(|c| k.borrow().contains_key(*c))) {
            let existing = run(client, EXISTING, &[pg_sys::TEXTARRAYOID], &[names.clone().into()], Some(1))?
                .first()
                .get::<i64>(1)
                .map_err(MxError::spi_in("audit"))?
                .unwrap_or_default();
            if existing != chains.len() as i64 {
                return Ok(());
            }
        }
        let locked = run(client, BY_KEYS, &[pg_sys::TEXTARRAYOID], &[names.clone().into()], None)?;
        // Heads are never deleted: one missing now went between the two statements, or since a
        // round of this backend saw it (by hand, or a distribution truncating them), and taking it
        // after the others would break the order. The round fails; the next one asks again.
        if locked.len() != chains.len() {
            KNOWN_HEADS.with(|k| k.borrow_mut().clear());
            return Err(MxError::new(code::INTERNAL, "an audit head disappeared while its chain was being locked")
                .hint("Retry; memory.audit_verify reports the chains."));
        }
        // Known once this transaction commits (a head it made itself could still be rolled back).
        HEADS_SEEN.with(|k| k.borrow_mut().extend(names));
        for row in locked {
            let e = MxError::spi_in("audit");
            let chain: String = row.get(6).map_err(&e)?.unwrap_or_default();
            let head = Head::read(&chain, tables.clone(), row.get(1).map_err(&e)?, row.get(2).map_err(&e)?, row.get(3).map_err(&e)?, row.get(4).map_err(&e)?, row.get(5).map_err(&e)?)?;
            self.heads.insert(chain, head);
        }
        Ok(())
    }

    /// Room for `n` more events before the next flush.
    pub fn reserve(&mut self, n: usize) {
        let n = n.min(CHUNK);
        self.rows.rows.reserve(n);
        self.rows.arena.reserve(n * 160);
    }

    /// Chain one event (its chain must be locked); returns its seq, or None for a pending entry
    /// (its seq is assigned when it is integrated).
    pub fn push(&mut self, client: &SpiClient, ev: Pending) -> Result<Option<i64>, MxError> {
        self.push_ref(
            client,
            EventRef {
                event_type: &ev.event_type,
                org_id: ev.org_id.as_deref(),
                project_id: ev.project_id.as_deref(),
                workspace_id: ev.workspace_id.as_deref(),
                actor_id: ev.actor_id.as_deref(),
                payload: Payload::Json(&ev.payload),
                payload_text: ev.payload_text.as_deref(),
                payload_jsonb: None,
                prefix: None,
            },
        )
    }

    /// `push` of a borrowed event.
    pub fn push_ref(&mut self, client: &SpiClient, ev: EventRef) -> Result<Option<i64>, MxError> {
        check_id("org_id", ev.org_id)?;
        check_id("project_id", ev.project_id)?;
        check_id("workspace_id", ev.workspace_id)?;
        check_id("actor_id", ev.actor_id)?;
        let chain = ev.org_id.unwrap_or("");
        let known = if self.deferred || self.standby.is_some() {
            self.checked.contains(chain)
        } else {
            self.heads.contains_key(chain) || self.remote.contains(chain)
        };
        if !known {
            self.lock(client, [chain])?;
        }
        if let Some(missed) = &mut self.standby {
            *missed.entry(ev.event_type.to_string()).or_default() += 1;
            return Ok(None);
        }
        let mut event = Event {
            chain_id: chain,
            seq: 0,
            prev_hash: [0; 32],
            event_type: ev.event_type,
            recorded_at_micros: self.written_at,
            actor_id: ev.actor_id,
            org_id: ev.org_id,
            project_id: ev.project_id,
            workspace_id: ev.workspace_id,
            key_id: self.key_id,
            payload: ev.payload,
        };
        let pending = self.deferred || self.remote.contains(chain);
        let (seq, ord, recorded_at, prev, hash, result) = if pending {
            let (id, ord) = next_pending_id();
            let hash = self.signer.sign(&self.key, &mut event, id).ok_or_else(|| MxError::new(code::INTERNAL, "pending id out of range"))?;
            (id, ord, self.written_at, [0u8; 32], hash, None)
        } else {
            let head = self.heads.get_mut(chain).expect("locked above");
            event.recorded_at_micros = head.recorded_at;
            let (seq, prev, hash) = head.chainer.append_from(&self.key, &mut event, ev.prefix);
            head.tree.push(&hash);
            (seq, 0, head.recorded_at, prev, hash, Some(seq))
        };
        let r = &mut self.rows;
        let payload = match (ev.payload_jsonb, ev.payload_text) {
            (Some(j), _) if self.utf8 => {
                let at = r.arena.len();
                r.arena.extend_from_slice(j);
                StoredPayload::Jsonb(Span { at, len: j.len() })
            }
            (_, Some(t)) => StoredPayload::Text(r.put(t)),
            _ => {
                let at = r.arena.len();
                if self.utf8 && jsonb::write_flat_container(ev.payload, &mut r.arena) {
                    StoredPayload::Jsonb(Span { at, len: r.arena.len() - at })
                } else {
                    let text = match ev.payload {
                        Payload::Json(v) => v.to_string(),
                        Payload::Flat(f) => f.to_value().to_string(),
                    };
                    StoredPayload::Text(r.put(&text))
                }
            }
        };
        let row = Row {
            seq,
            ord,
            pending,
            recorded_at,
            event_type: r.put(ev.event_type),
            actor: ev.actor_id.map(|s| r.put(s)),
            org: ev.org_id.map(|s| r.put(s)),
            project: ev.project_id.map(|s| r.put(s)),
            workspace: ev.workspace_id.map(|s| r.put(s)),
            payload,
            prev,
            hash,
        };
        r.rows.push(row);
        if r.rows.len() >= CHUNK {
            self.flush(client)?;
        }
        Ok(result)
    }

    fn flush(&mut self, client: &SpiClient) -> Result<(), MxError> {
        if self.rows.rows.is_empty() {
            return Ok(());
        }
        let r = &self.rows;
        let key_id = self.key_id;
        // Pending entries (deferred mode, or chains placed on another Citus node) and chained rows.
        let (pending, chained): (Vec<usize>, Vec<usize>) = (0..r.rows.len()).partition(|&i| r.rows[i].pending);
        if !pending.is_empty() {
            if !storage::distributed(client)? {
                let opened = crate::pg::bulk::Opened::open(&[storage::local(client)?.pending]);
                opened.insert(0, &PENDING_COLUMNS, &pending, |i| r.pending_cells(i, key_id))?;
                drop(opened);
                // The integrators of these chains are woken when the transaction commits.
                let shares = pending.iter().fold(0u32, |m, &i| m | wake::integrator_bit(r.chain(&r.rows[i])));
                WAKE_AT_COMMIT.with(|w| w.set(w.get() | shares));
            } else {
                // Citus: each entry into its chain's pending shard when that is on this node (a
                // trigger on a worker's shard: the co-located shard beside it), else through the outbox.
                let mut groups: Vec<(pg_sys::Oid, Vec<usize>)> = Vec::new();
                let mut outbox = false;
                for &i in &pending {
                    let chain = std::str::from_utf8(r.chain(&r.rows[i])).unwrap_or_default();
                    let oid = match storage::for_chain(client, chain)? {
                        Some(t) => t.pending,
                        None => {
                            outbox = true;
                            storage::outbox(client)?
                        }
                    };
                    match groups.iter_mut().find(|g| g.0 == oid) {
                        Some(g) => g.1.push(i),
                        None => groups.push((oid, vec![i])),
                    }
                }
                let opened = crate::pg::bulk::Opened::open(&groups.iter().map(|g| g.0).collect::<Vec<_>>());
                for (k, (_, which)) in groups.iter().enumerate() {
                    opened.insert(k, &PENDING_COLUMNS, which, |i| r.pending_cells(i, key_id))?;
                }
                drop(opened);
                if outbox {
                    crate::pg::xact::command_counter_increment();
                    storage::ship_outbox(client)?;
                }
            }
        }
        // Each chained row goes into the month partition of its recorded_at (or the default one),
        // the way COPY writes: straight into the table and its indexes, no statement per chunk, no
        // arrays to build and unnest.
        while !chained.is_empty() {
            // Creating a partition locks the parent exclusively, so with the parent locked the
            // cached partition list cannot go stale under this flush; an attach (which does not)
            // invalidates it, and opening the partitions below then shows it.
            let mut logs: Vec<(pg_sys::Oid, Partitions)> = Vec::new();
            for head in self.heads.values() {
                if !logs.iter().any(|l| l.0 == head.tables.log) {
                    let log = head.tables.log;
                    let parts = partitions_of(client, log)?;
                    crate::pg::bulk::lock_for_insert(parts.0);
                    logs.push((log, partitions_of(client, log)?));
                }
            }
            let mut groups: Vec<(pg_sys::Oid, Vec<usize>)> = Vec::new();
            for &i in &chained {
                let row = &r.rows[i];
                let pg_at = row.recorded_at - PG_EPOCH_UNIX_MICROS;
                let chain = std::str::from_utf8(r.chain(row)).unwrap_or_default();
                let log = self.heads.get(chain).map(|h| h.tables.log).unwrap_or(pg_sys::InvalidOid);
                let parts = &logs.iter().find(|l| l.0 == log).ok_or_else(|| MxError::new(code::INTERNAL, format!("chain \"{chain}\" is not locked")))?.1;
                let oid = parts
                    .1
                    .iter()
                    .find(|p| p.1.is_some_and(|(lo, hi)| lo <= pg_at && pg_at < hi))
                    .or_else(|| parts.1.iter().find(|p| p.1.is_none()))
                    .map(|p| p.0)
                    .ok_or_else(|| {
                        MxError::new(code::CHECK_VIOLATION, "no partition of memory.audit_log holds this month")
                            .hint("Run memory.audit_ensure_partitions().")
                    })?;
                match groups.iter_mut().find(|g| g.0 == oid) {
                    Some(g) => g.1.push(i),
                    None => groups.push((oid, vec![i])),
                }
            }
            let opened = crate::pg::bulk::Opened::open(&groups.iter().map(|g| g.0).collect::<Vec<_>>());
            if logs.iter().any(|l| !partitions_current(l.0, &l.1)) {
                continue;
            }
            for (k, (_, which)) in groups.iter().enumerate() {
                // Chain by chain, in seq order: each chain's index entries go in one after another
                // into the same leaf pages, and the heap keeps a chain's entries together.
                let mut order: Vec<usize> = which.clone();
                order.sort_unstable_by(|&x, &y| r.chain(&r.rows[x]).cmp(r.chain(&r.rows[y])).then(r.rows[x].seq.cmp(&r.rows[y].seq)));
                opened.insert(k, &LOG_COLUMNS, &order, |i| r.cells(i, key_id))?;
            }
            drop(opened);
            break;
        }
        // The buffers stay allocated for the next chunk.
        self.rows.clear();
        Ok(())
    }

    /// Insert what is pending and write every touched head once.
    pub fn finish(mut self, client: &SpiClient) -> Result<(), MxError> {
        if let Some(missed) = self.standby.take() {
            if !missed.is_empty() {
                let list: Vec<String> = missed.iter().map(|(t, n)| format!("{t} x{n}")).collect();
                pgrx::log!("memory_ext: audit events not recorded on a hot standby (read-only): {}", list.join(", "));
            }
            return Ok(());
        }
        self.flush(client)?;
        if self.deferred {
            return Ok(());
        }
        // A head nothing was appended to stays as it was. Several of this node's own tables (an
        // integrator's round): updated in one statement.
        let moved: Vec<(&String, &Head)> = self.heads.iter().filter(|(_, h)| h.chainer.head().0 != h.locked_seq).collect();
        if moved.len() > 1 && moved.iter().all(|(_, h)| !h.tables.is_shard_group()) {
            return update_heads(client, &moved);
        }
        for (chain, head) in moved {
            let (seq, hash) = head.chainer.head();
            let updated = run_in(
                client,
                &head.tables,
                "UPDATE memory.audit_heads SET seq = $2, entry_hash = $3, merkle_frontier = $4,
                        last_recorded_at = 'epoch'::timestamptz + $5 * interval '1 microsecond', updated_at = now()
                  WHERE ctid = $6::tid AND chain_id = $1 RETURNING ctid::text",
                &[pg_sys::TEXTOID, pg_sys::INT8OID, pg_sys::BYTEAOID, pg_sys::BYTEAOID, pg_sys::INT8OID, pg_sys::TEXTOID],
                &[chain.as_str().into(), seq.into(), hash.to_vec().into(), head.tree.to_bytes().into(), head.recorded_at.into(), head.tid.as_str().into()],
                Some(1),
            )?;
            if updated.is_empty() {
                return Err(MxError::new(code::AUDIT_APPEND_ONLY, format!("audit head of chain \"{chain}\" moved while locked")));
            }
            remember_tid(chain, updated.first().get::<String>(1).map_err(MxError::spi_in("audit"))?.unwrap_or_default());
        }
        Ok(())
    }
}

/// The new seq, hash, Merkle frontier and time of several heads of this node's own tables, locked by
/// this transaction: written straight into the heap (`pg::bulk::update_rows`: an integrator's round
/// over many tenants writes every head it moved each round, and one statement for them cost a
/// sixth of its CPU, issue 54), or by one statement where the heads table is not a plain heap.
fn update_heads(client: &SpiClient, heads: &[(&String, &Head)]) -> Result<(), MxError> {
    let relid = heads[0].1.tables.heads;
    let tids: Option<Vec<pg_sys::ItemPointerData>> = heads.iter().map(|(_, h)| crate::pg::bulk::parse_tid(&h.tid)).collect();
    if let Some(tids) = tids.filter(|_| heads.iter().all(|(_, h)| h.tables.heads == relid && relid != pg_sys::InvalidOid)) {
        // updated_at = now(): the transaction's start, as the statement below writes it.
        let now = crate::pg::xact::xact_start_micros();
        let cells: Vec<(i64, [u8; 32], Vec<u8>, i64)> = heads
            .iter()
            .map(|(_, h)| {
                let (seq, hash) = h.chainer.head();
                (seq, hash, h.tree.to_bytes(), h.recorded_at.saturating_sub(PG_EPOCH_UNIX_MICROS))
            })
            .collect();
        let written = crate::pg::bulk::update_rows(
            relid,
            "chain_id",
            &["seq", "entry_hash", "merkle_frontier", "last_recorded_at", "updated_at"],
            &tids,
            |i| heads[i].0.as_bytes(),
            |i| {
                let (seq, hash, frontier, recorded) = &cells[i];
                [Cell::Int8(*seq), Cell::Varlena(hash), Cell::Varlena(frontier), Cell::Timestamptz(*recorded), Cell::Timestamptz(now)]
            },
        )
        .map_err(|e| MxError::new(code::AUDIT_APPEND_ONLY, format!("an audit head moved while locked: {}", e.message)))?;
        if let Some(new_tids) = written {
            for ((chain, _), t) in heads.iter().zip(new_tids) {
                remember_tid(chain, crate::pg::bulk::tid_text(&t));
            }
            return Ok(());
        }
    }
    const UPDATE: &str = "UPDATE memory.audit_heads h SET seq = u.seq, entry_hash = u.entry_hash, merkle_frontier = u.frontier,
                                 last_recorded_at = 'epoch'::timestamptz + u.recorded * interval '1 microsecond', updated_at = now()
                            FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2), pg_catalog.unnest($3), pg_catalog.unnest($4),
                                           pg_catalog.unnest($5), pg_catalog.unnest($6::tid[]))
                                 AS u(chain_id, seq, entry_hash, frontier, recorded, tid)
                           WHERE h.ctid = u.tid AND h.chain_id = u.chain_id RETURNING h.chain_id, h.ctid::text";
    let mut chains = Vec::with_capacity(heads.len());
    let (mut seqs, mut hashes, mut frontiers, mut times, mut tids) = (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (chain, head) in heads {
        let (seq, hash) = head.chainer.head();
        chains.push(chain.to_string());
        seqs.push(seq);
        hashes.push(hash.to_vec());
        frontiers.push(head.tree.to_bytes());
        times.push(head.recorded_at);
        tids.push(head.tid.clone());
    }
    let types = [pg_sys::TEXTARRAYOID, pg_sys::INT8ARRAYOID, pg_sys::BYTEAARRAYOID, pg_sys::BYTEAARRAYOID, pg_sys::INT8ARRAYOID, pg_sys::TEXTARRAYOID];
    let updated = run(client, UPDATE, &types, &[chains.into(), seqs.into(), hashes.into(), frontiers.into(), times.into(), tids.into()], None)?;
    if updated.len() != heads.len() {
        return Err(MxError::new(code::AUDIT_APPEND_ONLY, "an audit head moved while locked"));
    }
    for row in updated {
        let e = MxError::spi_in("audit");
        let chain: String = row.get(1).map_err(&e)?.unwrap_or_default();
        remember_tid(&chain, row.get(2).map_err(&e)?.unwrap_or_default());
    }
    Ok(())
}

/// Who is acting, as `actor_id` records it: `role:<the writing role>`, and when the application
/// names an actor (`memory.actor_id`, or audit_append's argument) its pseudonym first:
/// `h:<hex>;role:<name>`. The role is the session's (docs/design.md#trust-boundary: events record the database role
/// that wrote them), not the owner of a SECURITY DEFINER function on the way.
pub fn default_actor(appender: &Appender) -> String {
    let app_actor: Option<String> =
        crate::gucs::ACTOR_ID.get().map(|c| c.to_string_lossy().into_owned()).filter(|s| !s.is_empty());
    actor_for(appender, app_actor.as_deref())
}

/// `actor_id` for an application actor (pseudonymised) or none, with the writing role.
pub fn actor_for(appender: &Appender, app_actor: Option<&str>) -> String {
    let mut who = crate::trust::caller();
    if who == pg_sys::InvalidOid {
        who = crate::pg::identity::outer_user();
    }
    // An agent's session writes as the same role and actor statement after statement: the last
    // actor_id is kept per backend, for its role, application actor and salt (a role renamed
    // empties it, see `init`).
    let hit = LAST_ACTOR.with(|l| {
        l.borrow().as_ref().filter(|c| c.role == who && c.app.as_deref() == app_actor && c.salt == appender.salt).map(|c| c.actor.clone())
    });
    if let Some(actor) = hit {
        return actor;
    }
    let role = format!("role:{}", crate::trust::role_name(who));
    let actor = match app_actor {
        Some(a) => format!("{};{role}", appender.pseudonym(a)),
        None => role,
    };
    LAST_ACTOR.with(|l| {
        *l.borrow_mut() = Some(LastActor { role: who, app: app_actor.map(str::to_string), salt: appender.salt.clone(), actor: actor.clone() })
    });
    actor
}

struct LastActor {
    role: pg_sys::Oid,
    app: Option<String>,
    salt: Vec<u8>,
    actor: String,
}

thread_local! {
    static LAST_ACTOR: RefCell<Option<LastActor>> = const { RefCell::new(None) };
}

thread_local! {
    // Pending ids: a random start per backend, then consecutive; and the writer's order, the
    // clock made strictly increasing within the backend.
    static PENDING_SEQ: std::cell::Cell<(i64, i64)> = const { std::cell::Cell::new((0, i64::MIN)) };
}

thread_local! {
    // Pseudonyms made in this backend: (the salt they were made with, id -> pseudonym).
    static PSEUDONYMS: RefCell<(Vec<u8>, HashMap<String, String>)> = RefCell::new((Vec::new(), HashMap::new()));
}

thread_local! {
    // The integrators (bit k: integrator k of the database) whose chains this transaction wrote
    // pending entries of.
    static WAKE_AT_COMMIT: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// At a transaction's end: after a commit, wakes the integrators of the chains it wrote pending
/// entries of (they would otherwise find them within `memory.integrator_naptime`). A prepared
/// transaction's entries are found so when COMMIT PREPARED commits them.
fn wake_at_commit(committed: bool) {
    let shares = WAKE_AT_COMMIT.with(|w| w.replace(0));
    if committed {
        wake::wake_integrators(shares);
    }
}

/// (id, ord) of the next pending entry written by this backend.
fn next_pending_id() -> (i64, i64) {
    PENDING_SEQ.with(|c| {
        let (mut id, last_ord) = c.get();
        // Ids stay in [1, 2^53] (PendingSigner binds them exactly there): a random start below
        // 2^52, then consecutive, and a new random start should a backend ever reach 2^53.
        if id <= 0 || id >= 1 << 53 {
            let mut b = [0u8; 8];
            crate::pg::xact::strong_random(&mut b);
            id = ((u64::from_le_bytes(b) >> 12) as i64).max(1);
        } else {
            id += 1;
        }
        let ord = (crate::pg::xact::now_micros() + PG_EPOCH_UNIX_MICROS).max(last_ord.saturating_add(1));
        c.set((id, ord));
        (id, ord)
    })
}

thread_local! {
    // The current key and the pseudonym salt, with the oids of the tables they come from: kept
    // until either table's relcache entry is invalidated (their statement triggers invalidate it
    // on every change, e.g. memory.audit_rotate_key) or everything is.
    static KEY_CACHE: RefCell<Option<CachedKey>> = const { RefCell::new(None) };
    static KEY_MADE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// At the end of a transaction or subtransaction that made the key or salt: forget the cache.
fn key_xact_end() {
    if KEY_MADE.with(|m| m.replace(false)) {
        KEY_CACHE.with(|c| *c.borrow_mut() = None);
    }
}

struct CachedKey {
    tables: [pg_sys::Oid; 2],
    key_id: i32,
    key: Vec<u8>,
    salt: Vec<u8>,
}

/// (key_id, key, salt) for new entries: cached per backend, read (and made on first use) through
/// memory_internal._audit_current_key() otherwise.
fn current_key(client: &SpiClient) -> Result<(i32, Vec<u8>, Vec<u8>), MxError> {
    if let Some(k) = KEY_CACHE.with(|c| c.borrow().as_ref().map(|k| (k.key_id, k.key.clone(), k.salt.clone()))) {
        return Ok(k);
    }
    // The key in force and the salt as of now (a key retired by a rotation that committed after
    // this transaction's snapshot is never cached again); made by the function below only when
    // there is none yet.
    let fill = crate::pg::callbacks::Fill::begin();
    {
        let now = crate::pg::spi::read_latest(
            client,
            c"SELECT k.key_id, k.key, s.value, 'memory.audit_keys'::pg_catalog.regclass::pg_catalog.oid,
                     'memory.audit_secrets'::pg_catalog.regclass::pg_catalog.oid
                FROM memory.audit_keys k, memory.audit_secrets s
               WHERE k.retired_at IS NULL AND s.name OPERATOR(pg_catalog.=) 'pseudonym_salt'
               ORDER BY k.key_id DESC LIMIT 1",
            &[],
        )?;
        if now.len() == 1 {
            let key_id = now.get::<i32>(0, 1)?.unwrap_or_default();
            let key = now.get::<Vec<u8>>(0, 2)?.unwrap_or_default();
            let salt = now.get::<Vec<u8>>(0, 3)?.unwrap_or_default();
            let tables = [now.get::<pg_sys::Oid>(0, 4)?.unwrap_or(pg_sys::InvalidOid), now.get::<pg_sys::Oid>(0, 5)?.unwrap_or(pg_sys::InvalidOid)];
            if !key.is_empty() && !salt.is_empty() {
                if fill.keep() {
                    KEY_CACHE.with(|c| *c.borrow_mut() = Some(CachedKey { tables, key_id, key: key.clone(), salt: salt.clone() }));
                }
                return Ok((key_id, key, salt));
            }
        }
    }
    let row = run(
        client,
        "SELECT k.key_id, k.key, k.salt, 'memory.audit_keys'::pg_catalog.regclass::pg_catalog.oid,
                'memory.audit_secrets'::pg_catalog.regclass::pg_catalog.oid, k.made FROM memory_internal._audit_current_key() k",
        &[],
        &[],
        Some(1),
    )?
    .first();
    let key_id = row.get::<i32>(1).map_err(MxError::spi_in("audit"))?.unwrap_or_default();
    let key = row.get::<Vec<u8>>(2).map_err(MxError::spi_in("audit"))?.unwrap_or_default();
    let salt = row.get::<Vec<u8>>(3).map_err(MxError::spi_in("audit"))?.unwrap_or_default();
    let keys = row.get::<pg_sys::Oid>(4).map_err(MxError::spi_in("audit"))?.unwrap_or(pg_sys::InvalidOid);
    let secrets = row.get::<pg_sys::Oid>(5).map_err(MxError::spi_in("audit"))?.unwrap_or(pg_sys::InvalidOid);
    // A key or salt made by this transaction could still be rolled back: the cache is then
    // dropped when the transaction (or subtransaction) ends, and read again.
    if row.get::<bool>(6).map_err(MxError::spi_in("audit"))?.unwrap_or(true) {
        KEY_MADE.with(|m| m.set(true));
    }
    if !key.is_empty() && !salt.is_empty() {
        KEY_CACHE.with(|c| *c.borrow_mut() = Some(CachedKey { tables: [keys, secrets], key_id, key: key.clone(), salt: salt.clone() }));
    }
    Ok((key_id, key, salt))
}

/// memory.audit_log's oid and its partitions.
type Partitions = std::rc::Rc<(pg_sys::Oid, Vec<(pg_sys::Oid, Option<(i64, i64)>)>)>;

thread_local! {
    // The partitions of memory.audit_log (and, on Citus, of this node's shards of it) by the
    // log's oid, kept until a relcache invalidation of that log (attaching or detaching a
    // partition invalidates the parent) or of everything.
    static PARTITIONS: std::cell::RefCell<HashMap<pg_sys::Oid, Partitions>> = std::cell::RefCell::new(HashMap::new());
}

fn partitions_inval(relid: pg_sys::Oid) {
    KNOWN_HEADS.with(|k| k.borrow_mut().clear());
    HEADS_COMMITTED.with(|k| {
        let mut k = k.borrow_mut();
        k.0.clear();
        k.1.clear();
    });
    KEY_CACHE.with(|c| {
        let mut c = c.borrow_mut();
        if relid == pg_sys::InvalidOid || c.as_ref().is_some_and(|k| k.tables.contains(&relid)) {
            *c = None;
        }
    });
    PARTITIONS.with(|p| {
        let mut p = p.borrow_mut();
        if relid == pg_sys::InvalidOid {
            p.clear();
        } else {
            p.remove(&relid);
        }
    });
    storage::forget(relid);
}
/// Registers the appender's cache and transaction callbacks.
pub fn init() {
    crate::pg::callbacks::on_relcache(partitions_inval);
    crate::pg::callbacks::on_transaction_end(key_xact_end);
    crate::pg::callbacks::on_subtransaction_abort(key_xact_end);
    crate::pg::callbacks::on_role_change(|| LAST_ACTOR.with(|l| *l.borrow_mut() = None));
    crate::pg::callbacks::on_prepare(refuse_prepare_after_integrating);
    crate::pg::callbacks::on_outcome(wake_at_commit);
    crate::pg::callbacks::on_outcome(heads_outcome);
    // A head locked in a subtransaction that rolled back may have been made there.
    crate::pg::callbacks::on_subtransaction_abort(|| {
        HEADS_SEEN.with(|k| k.borrow_mut().clear());
        // (A head version a rolled-back savepoint wrote is gone: the rest of the transaction
        // finds its heads by key, and none of its tids outlives it.)
        HEAD_TIDS.with(|c| c.borrow_mut().1.clear());
    });
}

/// A transaction that integrated audit entries holds the integration lock until it ends, and
/// with it every background integrator of the database: prepared, it would hold them across a
/// restart, with no timeout to end it. PREPARE TRANSACTION is refused (`0A000`).
fn refuse_prepare_after_integrating() {
    use crate::pg::locks::{held, Lock};
    if held(Lock::Integration, pg_sys::ShareRowExclusiveLock) || held(Lock::Integration, pg_sys::RowExclusiveLock) {
        Err::<(), _>(
            MxError::new(code::FEATURE_NOT_SUPPORTED, "cannot PREPARE a transaction that integrated audit entries")
                .hint("memory.audit_verify, audit_head, audit_seal, run_maintenance and audit_integrate integrate pending entries first; run them in a transaction of their own."),
        )
        .or_raise();
    }
}

/// The partitions of the log `log` (memory.audit_log, or a shard of it on Citus): (oid, [lo, hi)
/// in Postgres microseconds, None for the default partition). Read once, then from the cache.
fn partitions_of(client: &SpiClient, log: pg_sys::Oid) -> Result<Partitions, MxError> {
    if let Some(p) = PARTITIONS.with(|p| p.borrow().get(&log).cloned()) {
        return Ok(p);
    }
    let parts: Partitions = std::rc::Rc::new((log, read_partitions(client, log)?));
    PARTITIONS.with(|p| p.borrow_mut().insert(log, parts.clone()));
    Ok(parts)
}

/// Whether `parts` is still the cached partition list of `log` (no invalidation since).
fn partitions_current(log: pg_sys::Oid, parts: &Partitions) -> bool {
    PARTITIONS.with(|p| p.borrow().get(&log).is_some_and(|c| std::rc::Rc::ptr_eq(c, parts)))
}

fn read_partitions(client: &SpiClient, log: pg_sys::Oid) -> Result<Vec<(pg_sys::Oid, Option<(i64, i64)>)>, MxError> {
    // Citus hides shards from queries of pg_class in sessions it does not recognise as its own
    // (a background worker's, a client's): the partitions of a log shard are read with them shown.
    let _shards_shown = if storage::distributed(client)? {
        Some(crate::pg::identity::LocalSetting::set(c"citus.override_table_visibility", c"off"))
    } else {
        None
    };
    // (No backslash in the query: under standard_conforming_strings = off, which a database owner
    // may set, one would be an escape.)
    // The bounds are printed by pg_get_expr and read back as timestamptz: both under ISO and UTC,
    // whatever the session has (under SQL style an abbreviation such as CST would be read back
    // as another zone's).
    let _datestyle = crate::pg::identity::LocalSetting::set(c"DateStyle", c"ISO, MDY");
    let _timezone = crate::pg::identity::LocalSetting::set(c"TimeZone", c"UTC");
    let rows = run(
        client,
        "SELECT c.oid, extract(epoch FROM b.m[1]::timestamptz)::float8, extract(epoch FROM b.m[2]::timestamptz)::float8
           FROM pg_catalog.pg_inherits i JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid,
                LATERAL (SELECT regexp_match(pg_catalog.pg_get_expr(c.relpartbound, c.oid),
                                             'FROM [(]''([^'']+)''[)] TO [(]''([^'']+)''[)]') AS m) b
          WHERE i.inhparent = $1",
        &[pg_sys::OIDOID],
        &[log.into()],
        None,
    )?;
    let mut out = Vec::new();
    for row in rows {
        let oid = row.get::<pg_sys::Oid>(1).map_err(MxError::spi_in("audit"))?.unwrap_or(pg_sys::InvalidOid);
        let lo = row.get::<f64>(2).map_err(MxError::spi_in("audit"))?;
        let hi = row.get::<f64>(3).map_err(MxError::spi_in("audit"))?;
        let to_pg = |s: f64| (s * 1e6).round() as i64 - PG_EPOCH_UNIX_MICROS;
        out.push((oid, lo.zip(hi).map(|(l, h)| (to_pg(l), to_pg(h)))));
    }
    Ok(out)
}


