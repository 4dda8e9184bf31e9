//! The sequencer (SPEC §2 "Integration"): chains committed pending entries.
//!
//! Writers in deferred mode record pending entries in `memory.audit_pending`, each signed on its
//! own (`memory_core::audit::PendingSigner`), and take no chain lock. Integration reads the
//! pending entries its snapshot sees (committed ones, and the calling transaction's own), checks
//! each signature, chains the good ones through an immediate `Appender` (head lock, seq,
//! prev_hash, entry_hash, one head update per chain), and deletes them, all in one transaction:
//! a failure leaves them pending, and two integrators never chain the same entry (they serialize
//! on a lock of memory.audit_integration_lock only the owner can take; a READ COMMITTED statement after the lock sees what the
//! other one deleted). Entries whose signature does not check stay pending and are reported by
//! `memory.audit_verify`.

use super::{Appender, EventRef, PG_EPOCH_UNIX_MICROS};
use crate::errors::{code, MxError, OrRaise};
use crate::pg::spi::Fetched;
use super::jsonb;
use memory_core::audit::{Event, FlatPayload, Payload, PendingSigner};
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

/// One pending entry as fetched, borrowed from its batch.
pub(super) struct PendingRef<'a> {
    b: &'a Fetched,
    i: usize,
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
            b,
            i,
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
            self.b.jsonb_text_into(self.i, 10, &mut text).then(|| serde_json::from_slice(&text).ok()).flatten()
        };
        f(parsed.as_ref().map(Payload::Json))
    }

    /// Whether the entry's signature checks under its key, with `payload` as read, and its chain
    /// is its org's.
    pub fn checks(&self, payload: Payload, keys: &HashMap<i32, Vec<u8>>, signer: &mut PendingSigner) -> bool {
        if self.chain_id != self.org_id.unwrap_or("") {
            return false;
        }
        // No writer can make such an entry (Appender::push_ref refuses it); one that got here
        // otherwise is parked, never allowed to fail the integration of every chain.
        let too_long = |v: Option<&str>| v.is_some_and(|s| s.len() > super::MAX_ID_BYTES);
        if too_long(self.org_id) || too_long(self.project_id) || too_long(self.workspace_id) || too_long(self.actor_id)
            || self.event_type.chars().count() > 200
        {
            return false;
        }
        let Some(key) = keys.get(&self.key_id) else { return false };
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
        signer.sign(key, &mut ev, self.id).is_some_and(|h| h.as_slice() == self.pending_hash)
    }
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

/// How an integration is asked for.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    /// `memory.audit_integrate()`: waits for another integrator; a transaction that cannot
    /// integrate (read-only, REPEATABLE READ or SERIALIZABLE, a standby) is an error.
    Explicit,
    /// Before audit_verify, audit_head, audit_events, sealing and maintenance: waits for another
    /// integrator; does nothing where it cannot integrate.
    Reader,
    /// The background worker: gives way to any other integrator.
    Worker,
}

/// Integrate the pending entries this transaction sees; returns how many were chained.
///
/// On Citus (SPEC §10) each node integrates the shard groups it holds: the background worker of
/// a node and `memory._audit_integrate_local` do that; anything else asks every node to
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
    Spi::connect(|client| {
        if !super::storage::distributed(client)? {
            let tables = super::storage::local(client)?;
            return integrate_in(client, caller, &tables);
        }
        if local_only || caller == Caller::Worker {
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
        let command = format!("SELECT memory._audit_integrate_local({})", caller == Caller::Explicit);
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
        // The appender first: it runs everything below as the extension owner.
        let mut ap = Appender::new(client)?.immediate().system(true);
        // Integrators serialize on a lock of memory.audit_integration_lock, an empty table only
        // the extension owner can lock (an advisory lock any role could hold forever; a lock of
        // memory.audit_pending would conflict with its autovacuum). Only an explicit call waits;
        // readers and the worker give way and leave what is pending to the next integration.
        let got = crate::pg::bulk::lock_self_exclusive(super::integration_lock_relid(client)?, caller == Caller::Explicit);
        if !got {
            return Ok(0);
        }
        let keys = read_keys(client)?;
        let mut signer = PendingSigner::new();
        let mut done: i64 = 0;
        let utf8 = crate::pg::tuple::database_is_utf8();
        let mut ctids: Vec<pg_sys::ItemPointerData> = Vec::new();
        {
            // The sort of the backlog in memory rather than in temporary files.
            let _work_mem = crate::pg::identity::LocalSetting::set(c"work_mem", c"256MB");
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
                    if !copies.is_empty() && copies.contains(&(row.chain_id.to_string(), row.id)) {
                        continue;
                    }
                    // Heads are locked as their chains come, which is in chain order. An entry
                    // whose signature does not check stays pending (audit_verify names it).
                    let pushed = row.with_payload(utf8, |payload| -> Result<bool, MxError> {
                        let Some(payload) = payload else { return Ok(false) };
                        if !row.checks(payload, &keys, &mut signer) {
                            return Ok(false);
                        }
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
                            },
                        )?;
                        Ok(true)
                    })?;
                    if pushed {
                        if let Some(t) = batch.tid(i, 3) {
                            ctids.push(t);
                        }
                    }
                }
            }
        }

        // One pass over the table deletes what was chained (the rows stay where they were read:
        // only an integrator deletes them, and integrators hold the lock above).
        if !ctids.is_empty() {
            crate::gates::set_integrating(true);
            let deleted = super::run_in(
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

/// `memory.audit_integrate()` and the readers' integration (not granted to PUBLIC; the SQL
/// wrappers are SECURITY DEFINER).
#[pg_extern(volatile, name = "_audit_integrate")]
fn audit_integrate_sql(explicit: bool) -> i64 {
    integrate(if explicit {
        Caller::Explicit
    } else {
        Caller::Reader
    })
    .or_raise()
}

/// On Citus, a node's share of an integration: the shard groups it holds (not granted to PUBLIC;
/// called by `memory._audit_integrate` on the coordinator through `run_command_on_all_nodes`).
#[pg_extern(volatile, name = "_audit_integrate_local")]
fn audit_integrate_local_sql(explicit: bool) -> i64 {
    integrate_where(if explicit { Caller::Explicit } else { Caller::Reader }, true).or_raise()
}
