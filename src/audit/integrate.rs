//! The sequencer (SPEC §2 "Integration"): chains committed pending entries.
//!
//! Writers in deferred mode record pending entries in `memory.audit_pending`, each signed on its
//! own (`memory_core::audit::PendingSigner`), and take no chain lock. Integration reads the
//! pending entries its snapshot sees (committed ones, and the calling transaction's own), checks
//! each signature, chains the good ones through an immediate `Appender` (head lock, seq,
//! prev_hash, entry_hash, one head update per chain), and deletes them, all in one transaction:
//! a failure leaves them pending, and two integrators never chain the same entry (they serialize
//! on a transaction-level advisory lock; a READ COMMITTED statement after the lock sees what the
//! other one deleted). Entries whose signature does not check stay pending and are reported by
//! `memory.audit_verify`.

use super::{Appender, Pending, CHUNK, PG_EPOCH_UNIX_MICROS};
use crate::errors::{code, MxError, OrRaise};
use crate::pg::spi::Fetched;
use memory_core::audit::{Event, Payload, PendingSigner};
use pgrx::prelude::*;
use pgrx::spi::SpiClient;
use serde_json::Value;
use std::borrow::Cow;
use std::collections::HashMap;

/// The advisory lock key integrators serialize on (the bytes of "memx_int").
const LOCK_KEY: i64 = 0x6d65_6d78_5f69_6e74;

/// Columns of `PENDING_QUERY`.
const COLS: usize = 12;
/// Pending entries of every chain, in the order they are chained: chain by chain (bytewise, the
/// order `Appender::lock` locks heads in), each in its writers' order.
const PENDING_QUERY: &str = "SELECT ctid::pg_catalog.text, id, chain_id, event_type, written_at, actor_id, org_id, project_id,
                                    workspace_id, payload, key_id, pending_hash
                               FROM memory.audit_pending
                              ORDER BY chain_id COLLATE \"C\", ord, id";

/// One pending entry as read back.
pub(super) struct PendingRow {
    pub ctid: String,
    pub id: i64,
    pub chain_id: String,
    pub event_type: String,
    /// Unix microseconds.
    pub written_at: i64,
    pub actor_id: Option<String>,
    pub org_id: Option<String>,
    pub project_id: Option<String>,
    pub workspace_id: Option<String>,
    pub payload_text: Vec<u8>,
    pub key_id: i32,
    pub pending_hash: Vec<u8>,
}

impl PendingRow {
    /// Row `i` of a batch fetched with the columns of `PENDING_QUERY`.
    pub fn read(b: &Fetched, i: usize) -> PendingRow {
        let s = |c: usize| b.text(i, c).map(str::to_string);
        let mut payload_text = Vec::new();
        b.jsonb_text_into(i, 9, &mut payload_text);
        PendingRow {
            ctid: s(0).unwrap_or_default(),
            id: b.int8(i, 1).unwrap_or(0),
            chain_id: s(2).unwrap_or_default(),
            event_type: s(3).unwrap_or_default(),
            written_at: b
                .int8(i, 4)
                .unwrap_or(0)
                .saturating_add(PG_EPOCH_UNIX_MICROS),
            actor_id: s(5),
            org_id: s(6),
            project_id: s(7),
            workspace_id: s(8),
            payload_text,
            key_id: b.int4(i, 10).unwrap_or(0),
            pending_hash: b.bytes(i, 11).map(<[u8]>::to_vec).unwrap_or_default(),
        }
    }

    /// The payload, when the entry's signature checks under its key and its chain is its org's.
    pub fn checked(
        &self,
        keys: &HashMap<i32, Vec<u8>>,
        signer: &mut PendingSigner,
    ) -> Option<Value> {
        if self.chain_id != self.org_id.as_deref().unwrap_or("") {
            return None;
        }
        let key = keys.get(&self.key_id)?;
        let payload: Value = serde_json::from_slice(&self.payload_text).ok()?;
        let mut ev = Event {
            chain_id: &self.chain_id,
            seq: 0,
            prev_hash: [0; 32],
            event_type: &self.event_type,
            recorded_at_micros: self.written_at,
            actor_id: self.actor_id.as_deref(),
            org_id: self.org_id.as_deref(),
            project_id: self.project_id.as_deref(),
            workspace_id: self.workspace_id.as_deref(),
            key_id: self.key_id,
            payload: Payload::Json(&payload),
        };
        let hash = signer.sign(key, &mut ev, self.id)?;
        (hash.as_slice() == self.pending_hash.as_slice()).then_some(payload)
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
pub fn integrate(caller: Caller) -> Result<i64, MxError> {
    if !crate::pg::xact::can_write_fresh() {
        return match caller {
            Caller::Explicit => Err(MxError::new(
                "25006",
                "memory.audit_integrate needs a read-write, READ COMMITTED transaction on a primary",
            )
            .hint("Call it in its own transaction; audit_verify reports pending entries wherever it runs.")),
            _ => Ok(0),
        };
    }
    Spi::connect(|client| {
        // The appender first: it runs everything below as the extension owner.
        let mut ap = Appender::new(client)?.immediate().system(true);
        let got = if caller == Caller::Worker {
            client
                .select(
                    "SELECT pg_catalog.pg_try_advisory_xact_lock($1)",
                    Some(1),
                    &[LOCK_KEY.into()],
                )
                .map_err(MxError::spi_in("audit"))?
                .first()
                .get::<bool>(1)
                .map_err(MxError::spi_in("audit"))?
                .unwrap_or(false)
        } else {
            client
                .select(
                    "SELECT pg_catalog.pg_advisory_xact_lock($1)",
                    Some(1),
                    &[LOCK_KEY.into()],
                )
                .map_err(MxError::spi_in("audit"))?;
            true
        };
        if !got {
            return Ok(0);
        }
        let keys = read_keys(client)?;
        let mut signer = PendingSigner::new();
        let mut cursor = client.open_cursor(PENDING_QUERY, &[]);
        let mut batch = Fetched::default();
        let mut done: i64 = 0;
        let mut ctids: Vec<String> = Vec::with_capacity(CHUNK);
        while batch.fetch(&mut cursor, CHUNK, COLS)? {
            let mut good: Vec<(PendingRow, Value)> = Vec::with_capacity(batch.len());
            for i in 0..batch.len() {
                let row = PendingRow::read(&batch, i);
                // An entry whose signature does not check stays pending (audit_verify names it).
                if let Some(payload) = row.checked(&keys, &mut signer) {
                    good.push((row, payload));
                }
            }
            ap.lock(client, good.iter().map(|(r, _)| r.chain_id.as_str()))?;
            ap.reserve(good.len());
            ctids.clear();
            for (row, payload) in good {
                // The payload is stored as the writer stored it (its jsonb text, which jsonb_in
                // makes into the same jsonb); the hash covers what reading it back yields.
                let text = String::from_utf8(row.payload_text).map_err(|_| MxError::new(code::INTERNAL, "pending payload is not UTF-8"))?;
                ap.push(
                    client,
                    Pending {
                        event_type: Cow::Owned(row.event_type),
                        org_id: row.org_id,
                        project_id: row.project_id,
                        workspace_id: row.workspace_id,
                        actor_id: row.actor_id,
                        payload,
                        payload_text: Some(text),
                    },
                )?;
                ctids.push(row.ctid);
            }
            if !ctids.is_empty() {
                crate::gates::set_integrating(true);
                let deleted = super::run(
                    client,
                    "DELETE FROM memory.audit_pending WHERE ctid OPERATOR(pg_catalog.=) ANY ($1::pg_catalog.text[]::pg_catalog.tid[])",
                    &[pg_sys::TEXTARRAYOID],
                    &[ctids.clone().into()],
                    None,
                );
                crate::gates::set_integrating(false);
                let deleted = deleted?.len();
                if deleted != ctids.len() {
                    return Err(MxError::new(
                        code::INTERNAL,
                        format!(
                            "integrated {} pending entries but deleted {deleted}",
                            ctids.len()
                        ),
                    ));
                }
                done += ctids.len() as i64;
            }
        }
        drop(batch);
        ap.finish(client)?;
        Ok(done)
    })
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
