//! Chain verification: reads a chain in seq order and feeds `memory_core::audit::Verifier`.

use super::append::PG_EPOCH_UNIX_MICROS;
use super::jsonb;
use crate::pg::spi::Fetched;
use crate::errors::{code, MxError, OrRaise};
use memory_core::audit::{EntryHasher, EntryRef, FlatPayload, Payload, Seal, Verifier};
use pgrx::prelude::*;
use pgrx::spi::SpiClient;
use serde_json::Value;
use std::collections::{HashMap, VecDeque};
use std::sync::{mpsc, Arc};

/// Rows per fetch (and per batch handed to the hashing thread).
const BATCH: std::ffi::c_long = 10_000;

#[pg_extern(volatile, schema = "memory_internal", name = "_audit_verify")]
fn audit_verify(
    chain_id: Option<String>,
) -> TableIterator<
    'static,
    (
        name!(chain_id, String),
        name!(entries, i64),
        name!(ok, bool),
        name!(first_bad_seq, Option<i64>),
        name!(reason, Option<String>),
        name!(pruned, i64),
        name!(pending, i64),
    ),
> {
    let rows = verify_all(chain_id).or_raise();
    TableIterator::new(rows)
}

type VerifyRow = (String, i64, bool, Option<i64>, Option<String>, i64, i64);

/// Every chain of one place (or only `chain_id` if it is there), in chain order.
const CHAINS: &str = "SELECT chain_id FROM memory.audit_heads UNION SELECT DISTINCT chain_id FROM memory.audit_log
                       UNION SELECT DISTINCT chain_id FROM memory.audit_pending ORDER BY 1";

fn verify_all(chain_id: Option<String>) -> Result<Vec<VerifyRow>, MxError> {
    verify_where(chain_id, false)
}

/// On Citus (docs/design.md#scale-out) each node verifies the chains of the shard groups it holds
/// (`memory_internal._audit_verify_local`); elsewhere the coordinator asks every node and merges.
fn verify_where(chain_id: Option<String>, local_only: bool) -> Result<Vec<VerifyRow>, MxError> {
    Spi::connect(|client| {
        let keys = super::integrate::read_keys(client)?;
        let places = if !super::storage::distributed(client)? {
            vec![super::storage::local(client)?]
        } else if !local_only {
            return verify_on_nodes(client, chain_id);
        } else if let Some(c) = &chain_id {
            // One chain: its group only, if it is on this node.
            match super::storage::for_chain(client, c)? {
                Some(t) => vec![t],
                None if super::storage::missing_here(client, c)? => {
                    return Err(MxError::new(
                        code::AUDIT_APPEND_ONLY,
                        format!("the audit shards of chain \"{c}\" are placed on this node but missing: it cannot be verified"),
                    )
                    .hint("A shard move in progress ends by itself; otherwise the audit shards were dropped or renamed."))
                }
                None => Vec::new(),
            }
        } else {
            let (groups, missing) = super::storage::local_groups(client)?;
            if !missing.is_empty() {
                // Never a silent gap: chains whose shards are missing cannot be verified.
                return Err(MxError::new(
                    code::AUDIT_APPEND_ONLY,
                    format!(
                        "audit shard groups placed on this node are missing shards (hash ranges from {}): their chains cannot be verified",
                        missing.join(", ")
                    ),
                )
                .hint("A shard move in progress ends by itself; otherwise the audit shards were dropped or renamed."));
            }
            groups
        };
        let mut out = Vec::new();
        for tables in places {
            let chains: Vec<String> = match &chain_id {
                // (On Citus `places` is then the chain's own group.)
                Some(c) => vec![c.clone()],
                None => {
                    let mut v = Vec::new();
                    for row in client.select(tables.sql(CHAINS).as_str(), None, &[]).map_err(MxError::spi_in("audit"))? {
                        v.push(row.get::<String>(1).map_err(MxError::spi_in("audit"))?.unwrap_or_default());
                    }
                    v
                }
            };
            for chain in chains {
                out.push(verify_chain(client, &keys, &chain, &tables)?);
            }
        }
        Ok(out)
    })
}

/// The coordinator's verification on Citus: every node verifies the chains it holds, in its own
/// transaction; the rows come back as JSON and are merged in chain order. A chain no node holds
/// has no entries (as on a single node).
fn verify_on_nodes(client: &SpiClient, chain_id: Option<String>) -> Result<Vec<VerifyRow>, MxError> {
    let command = format!(
        "SELECT COALESCE(pg_catalog.json_agg(v), '[]'::pg_catalog.json) FROM memory_internal._audit_verify_local({}) v",
        chain_id.as_deref().map_or_else(|| "NULL".to_string(), pgrx::spi::quote_literal)
    );
    let mut out: Vec<VerifyRow> = Vec::new();
    for (node, ok, result) in super::storage::on_all_nodes(client, &command)? {
        if !ok {
            return Err(MxError::new(code::INTERNAL, format!("audit verification on Citus node {node} failed: {result}")));
        }
        let rows: Vec<Value> = serde_json::from_str(&result)
            .map_err(|e| MxError::new(code::INTERNAL, format!("audit verification on Citus node {node} answered {e}")))?;
        for r in rows {
            let s = |k: &str| r.get(k).and_then(Value::as_str).map(str::to_string);
            let n = |k: &str| r.get(k).and_then(Value::as_i64);
            out.push((
                s("chain_id").unwrap_or_default(),
                n("entries").unwrap_or(0),
                r.get("ok").and_then(Value::as_bool).unwrap_or(false),
                n("first_bad_seq"),
                s("reason"),
                n("pruned").unwrap_or(0),
                n("pending").unwrap_or(0),
            ));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    if let Some(c) = chain_id {
        if out.is_empty() {
            out.push((c, 0, true, None, None, 0, 0));
        }
    }
    Ok(out)
}

/// `memory_internal._audit_verify` on one node of a Citus cluster: the chains of the shard groups it
/// holds (called by the coordinator's verification through `run_command_on_all_nodes`).
#[pg_extern(volatile, schema = "memory_internal", name = "_audit_verify_local")]
fn audit_verify_local(
    chain_id: Option<String>,
) -> TableIterator<
    'static,
    (
        name!(chain_id, String),
        name!(entries, i64),
        name!(ok, bool),
        name!(first_bad_seq, Option<i64>),
        name!(reason, Option<String>),
        name!(pruned, i64),
        name!(pending, i64),
    ),
> {
    TableIterator::new(verify_where(chain_id, true).or_raise())
}

fn hash32(v: Option<Vec<u8>>) -> [u8; 32] {
    v.and_then(|b| b.try_into().ok()).unwrap_or([0xff; 32])
}

fn verify_chain(client: &SpiClient, keys: &HashMap<i32, Vec<u8>>, chain: &str, tables: &super::storage::Tables) -> Result<VerifyRow, MxError> {
    let mut seals = Vec::new();
    for row in client
        .select(
            tables
                .sql(
                    "SELECT first_seq, last_seq, last_entry_hash, merkle_root FROM memory.audit_seals
              WHERE chain_id = $1 AND entries > 0 ORDER BY first_seq",
                )
                .as_str(),
            None,
            &[chain.into()],
        )
        .map_err(MxError::spi_in("audit"))?
    {
        seals.push(Seal {
            first_seq: row.get::<i64>(1).map_err(MxError::spi_in("audit"))?.unwrap_or_default(),
            last_seq: row.get::<i64>(2).map_err(MxError::spi_in("audit"))?.unwrap_or_default(),
            last_entry_hash: hash32(row.get::<Vec<u8>>(3).map_err(MxError::spi_in("audit"))?),
            merkle_root: hash32(row.get::<Vec<u8>>(4).map_err(MxError::spi_in("audit"))?),
        });
    }
    let head = client
        .select(tables.sql("SELECT seq, entry_hash FROM memory.audit_heads WHERE chain_id = $1").as_str(), Some(1), &[chain.into()])
        .map_err(MxError::spi_in("audit"))?;
    let head = if head.is_empty() {
        None
    } else {
        let h = head.first();
        Some((h.get::<i64>(1).map_err(MxError::spi_in("audit"))?.unwrap_or_default(), hash32(h.get::<Vec<u8>>(2).map_err(MxError::spi_in("audit"))?)))
    };

    let mut verifier = Verifier::new(keys, seals);
    let log_query = tables.sql(
        "SELECT seq, prev_hash, entry_hash, event_type, recorded_at, actor_id, org_id, project_id, workspace_id, key_id, payload
           FROM memory.audit_log WHERE chain_id = $1 COLLATE \"C\" ORDER BY seq",
    );
    let mut cursor = client.open_cursor(log_query.as_str(), &[chain.into()]);
    // Reading rows (SPI, this thread) and hashing them (pure Rust) overlap: a helper thread parses
    // and hashes batch k while this thread fetches batch k+1; the checks, which are sequential,
    // stay here in seq order. The helper never calls into Postgres.
    // Rows are copied out of each fetched SPI batch into one buffer, and the batch's tuples are
    // freed at once (SPI would otherwise keep every batch until the function returns). A helper
    // thread parses and hashes batch k while this thread fetches batch k+1; the checks, which are
    // sequential, stay here in seq order. The helper never calls into Postgres, and each batch
    // is allocated and freed on this thread (the helper borrows it through an Arc).
    let (to_helper, helper_in) = mpsc::sync_channel::<Arc<Batch>>(1);
    let (helper_out, from_helper) = mpsc::sync_channel::<Vec<Option<[u8; 32]>>>(1);
    let mut pending: VecDeque<Arc<Batch>> = VecDeque::new();
    std::thread::scope(|scope| -> Result<(), MxError> {
        let helper = crate::pg::thread::spawn_without_signals(scope, move || {
            let mut hasher = EntryHasher::new(keys);
            for batch in helper_in {
                let hashes: Vec<_> = batch.rows.iter().map(|r| batch.hash(r, chain, &mut hasher)).collect();
                drop(batch);
                if helper_out.send(hashes).is_err() {
                    break;
                }
            }
        });
        let mut in_flight = 0usize;
        // Buffers of checked batches, reused: fresh multi-megabyte buffers would fault their
        // pages in again for every batch.
        let mut spare: Vec<Batch> = Vec::new();
        let mut fetched = Fetched::default();
        let fetched = (|| -> Result<(), MxError> {
            loop {
                if !fetched.fetch(&mut cursor, BATCH as usize, 11)? {
                    return Ok(());
                }
                let batch = Arc::new(Batch::copy_from(&fetched, spare.pop()));
                pending.push_back(Arc::clone(&batch));
                if to_helper.send(batch).is_err() {
                    return Err(MxError::new(code::INTERNAL, "audit verification helper stopped"));
                }
                in_flight += 1;
                if in_flight == 2 {
                    spare.extend(check(&mut verifier, &from_helper, &mut pending)?);
                    in_flight -= 1;
                }
            }
        })();
        drop(to_helper);
        let mut result = fetched;
        while in_flight > 0 {
            if result.is_ok() {
                result = check(&mut verifier, &from_helper, &mut pending).map(drop);
            } else {
                let _ = from_helper.recv();
            }
            in_flight -= 1;
        }
        drop(from_helper);
        helper.join().map_err(|_| MxError::new(code::INTERNAL, "audit verification helper failed"))?;
        result
    })?;
    let v = verifier.finish(head);
    let mut reason = v.failure.as_ref().map(|f| match &v.detail {
        Some(d) => format!("{}: {d}", f.reason()),
        None => f.reason().to_string(),
    });
    let (pending, bad) = check_pending(client, keys, chain, tables)?;
    let mut ok = v.ok;
    if ok && bad > 0 {
        ok = false;
        reason = Some(format!("pending hash mismatch: {bad} of {pending} pending entries"));
    }
    Ok((chain.to_string(), v.entries, ok, v.first_bad_seq, reason, v.pruned, pending))
}

/// The chain's pending entries (not yet integrated): how many, and how many fail their signature.
fn check_pending(client: &SpiClient, keys: &HashMap<i32, Vec<u8>>, chain: &str, tables: &super::storage::Tables) -> Result<(i64, i64), MxError> {
    let query = tables.sql(
        "SELECT ord, id, chain_id, ctid, event_type, written_at, actor_id, org_id, project_id,
                workspace_id, payload, key_id, pending_hash
           FROM memory.audit_pending WHERE chain_id = $1 COLLATE \"C\"",
    );
    let mut cursor = client.open_cursor(query.as_str(), &[chain.into()]);
    let mut signer = memory_core::audit::PendingSigner::new();
    let utf8 = crate::pg::varlena::database_is_utf8();
    let mut batch = Fetched::default();
    let (mut n, mut bad) = (0i64, 0i64);
    // A second entry with an id already seen is a copy (it signs like the original).
    let mut ids = std::collections::HashSet::new();
    while batch.fetch(&mut cursor, BATCH as usize, super::integrate::COLS)? {
        for i in 0..batch.len() {
            n += 1;
            let row = super::integrate::PendingRef::read(&batch, i);
            if !ids.insert(row.id) || !row.with_payload(utf8, |p| p.is_some_and(|p| row.checks(p, keys, &mut signer))) {
                bad += 1;
            }
        }
    }
    Ok((n, bad))
}

/// The backlog of `chains` (every chain when None), chain by chain: entries waiting to be chained,
/// entries parked (integration will never chain them: a signature that does not check, a chain
/// that is not its org's, ids longer than writers may write, or two entries with one id, both
/// parked as the sequencer parks them), and the unix microseconds of the oldest waiting entry.
/// What this transaction sees: committed entries and its own. For `memory.audit_backlog`, through
/// its SECURITY DEFINER reader (not granted to PUBLIC: it reads every chain asked for).
#[pg_extern(volatile, schema = "memory_internal", name = "_audit_backlog_chains")]
fn audit_backlog_chains(
    chains: Option<Vec<Option<String>>>,
) -> TableIterator<'static, (name!(chain_id, String), name!(pending, i64), name!(parked, i64), name!(oldest_pending_micros, Option<i64>))> {
    // A NULL element names no chain (it equals nothing), so it is left out.
    let chains = chains.map(|v| v.into_iter().flatten().collect::<Vec<String>>());
    TableIterator::new(backlog_chains(chains).or_raise())
}

fn backlog_chains(chains: Option<Vec<String>>) -> Result<Vec<(String, i64, i64, Option<i64>)>, MxError> {
    Spi::connect(|client| {
        let keys = super::integrate::read_keys(client)?;
        // (The ctid column is not read: a NULL keeps PendingRef's column places.)
        let query = "SELECT ord, id, chain_id, NULL::pg_catalog.tid, event_type, written_at, actor_id, org_id, project_id,
                            workspace_id, payload, key_id, pending_hash
                       FROM memory.audit_pending
                      WHERE $1::pg_catalog.text[] IS NULL OR chain_id OPERATOR(pg_catalog.=) ANY ($1::pg_catalog.text[])";
        let mut cursor = client.open_cursor(query, &[chains.into()]);
        let mut signer = memory_core::audit::PendingSigner::new();
        let utf8 = crate::pg::varlena::database_is_utf8();
        let mut batch = Fetched::default();
        // chain -> id -> (entries with that id, whether one of them fails, oldest written_at)
        let mut seen: HashMap<String, HashMap<i64, (u32, bool, i64)>> = HashMap::new();
        while batch.fetch(&mut cursor, BATCH as usize, super::integrate::COLS)? {
            for i in 0..batch.len() {
                pgrx::check_for_interrupts!();
                let row = super::integrate::PendingRef::read(&batch, i);
                let good = row.with_payload(utf8, |p| p.is_some_and(|p| row.checks(p, &keys, &mut signer)));
                let e = seen.entry(row.chain_id.to_string()).or_default().entry(row.id).or_insert((0, false, i64::MAX));
                e.0 += 1;
                e.1 |= !good;
                e.2 = e.2.min(row.written_at);
            }
        }
        let mut out: Vec<(String, i64, i64, Option<i64>)> = seen
            .into_iter()
            .map(|(chain, ids)| {
                let (mut pending, mut parked, mut oldest) = (0i64, 0i64, None::<i64>);
                for (n, bad, at) in ids.into_values() {
                    if bad || n > 1 {
                        parked += n as i64;
                    } else {
                        pending += 1;
                        oldest = Some(oldest.map_or(at, |o| o.min(at)));
                    }
                }
                (chain, pending, parked, oldest)
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    })
}

type Span = (usize, usize);

/// One row of the log: fixed fields, and spans of the batch buffer for the rest.
struct Row {
    seq: i64,
    recorded_at_micros: i64,
    key_id: i32,
    prev_hash: Span,
    entry_hash: Span,
    event_type: Span,
    actor_id: Option<Span>,
    org_id: Option<Span>,
    project_id: Option<Span>,
    workspace_id: Option<Span>,
    /// The payload: the jsonb root container of a flat object (decoded on the helper), or the
    /// text of any other.
    payload: (Span, bool),
}

/// Up to BATCH rows of one chain, copied out of SPI.
struct Batch {
    bytes: Vec<u8>,
    rows: Vec<Row>,
}

/// Copy the payload (column 10 of row `i`) into `bytes`: the container of a flat object as is,
/// anything else as text. `utf8`: the database encoding is UTF-8 (strings in jsonb are then UTF-8
/// as stored).
fn payload(f: &Fetched, i: usize, utf8: bool, bytes: &mut Vec<u8>) -> (Span, bool) {
    let start = bytes.len();
    let Some(container) = f.bytes(i, 10) else {
        bytes.extend_from_slice(b"null");
        return ((start, 4), false);
    };
    // (Strings are UTF-8 only in a UTF-8 database; elsewhere jsonb_out converts them.)
    if utf8 && jsonb::is_flat_object(container) {
        bytes.extend_from_slice(container);
        return ((start, container.len()), true);
    }
    if !f.jsonb_text_into(i, 10, bytes) {
        bytes.extend_from_slice(b"null");
    }
    ((start, bytes.len() - start), false)
}

impl Batch {
    /// Copy the rows of a fetched batch of the verification query (columns seq, prev_hash,
    /// entry_hash, event_type, recorded_at, actor_id, org_id, project_id, workspace_id, key_id,
    /// payload) into one buffer.
    fn copy_from(f: &Fetched, reuse: Option<Batch>) -> Batch {
        let n = f.len();
        let mut b = reuse.unwrap_or(Batch { bytes: Vec::with_capacity(n * 320), rows: Vec::with_capacity(n) });
        b.bytes.clear();
        b.rows.clear();
        let utf8 = crate::pg::varlena::database_is_utf8();
        for i in 0..n {
            let mut text = |k: usize| -> Option<Span> {
                let v = f.bytes(i, k)?;
                let start = b.bytes.len();
                b.bytes.extend_from_slice(v);
                Some((start, v.len()))
            };
            let row = Row {
                prev_hash: text(1).unwrap_or_default(),
                entry_hash: text(2).unwrap_or_default(),
                event_type: text(3).unwrap_or_default(),
                actor_id: text(5),
                org_id: text(6),
                project_id: text(7),
                workspace_id: text(8),
                payload: payload(f, i, utf8, &mut b.bytes),
                seq: f.int8(i, 0).unwrap_or(0),
                recorded_at_micros: f.int8(i, 4).map(|t| t.saturating_add(PG_EPOCH_UNIX_MICROS)).unwrap_or(i64::MIN),
                key_id: f.int4(i, 9).unwrap_or(0),
            };
            b.rows.push(row);
        }
        b
    }

    fn get(&self, s: Span) -> &[u8] {
        &self.bytes[s.0..s.0 + s.1]
    }

    /// Text as stored; bytes that are not UTF-8 cannot have been hashed, so they stand in as
    /// replacement characters and the entry fails its hash.
    fn text(&self, s: Span) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(self.get(s))
    }

    /// Parse the payload and recompute the row's hash (on the helper thread).
    fn hash(&self, r: &Row, chain: &str, hasher: &mut EntryHasher) -> Option<[u8; 32]> {
        let (span, raw) = r.payload;
        // Flat payloads of strings and nulls (those memory_ext writes per row) are hashed from
        // their jsonb bytes as they are; others are parsed into a Value first.
        let mut members = [("", None); jsonb::MAX_MEMBERS];
        let n = if raw { jsonb::flat_string_members(self.get(span), &mut members) } else { None };
        let flat = n.and_then(|n| FlatPayload::sorted(&mut members[..n]));
        let parsed: Value;
        let payload = match flat {
            Some(f) => Payload::Flat(f),
            None => {
                parsed = if raw {
                    jsonb::decode_flat_object(self.get(span)).unwrap_or(Value::Null)
                } else {
                    serde_json::from_slice(self.get(span)).unwrap_or(Value::Null)
                };
                Payload::Json(&parsed)
            }
        };
        let (event_type, actor, org, project, workspace) =
            (self.text(r.event_type), r.actor_id.map(|s| self.text(s)), r.org_id.map(|s| self.text(s)),
             r.project_id.map(|s| self.text(s)), r.workspace_id.map(|s| self.text(s)));
        let e = EntryRef {
            chain_id: chain,
            seq: r.seq,
            prev_hash: self.get(r.prev_hash),
            event_type: &event_type,
            recorded_at_micros: r.recorded_at_micros,
            actor_id: actor.as_deref(),
            org_id: org.as_deref(),
            project_id: project.as_deref(),
            workspace_id: workspace.as_deref(),
            key_id: r.key_id,
        };
        hasher.hash_ref(&e, payload)
    }
}

/// Apply the next hashed batch to the verifier, in seq order; returns the batch for reuse.
fn check(
    verifier: &mut Verifier,
    from_helper: &mpsc::Receiver<Vec<Option<[u8; 32]>>>,
    pending: &mut VecDeque<Arc<Batch>>,
) -> Result<Option<Batch>, MxError> {
    let hashes = from_helper.recv().map_err(|_| MxError::new(code::INTERNAL, "audit verification helper failed"))?;
    let batch = pending.pop_front().ok_or_else(|| MxError::new(code::INTERNAL, "audit verification lost a batch"))?;
    for (r, h) in batch.rows.iter().zip(hashes) {
        verifier.push_link(r.seq, r.key_id, batch.get(r.prev_hash), batch.get(r.entry_hash), h);
    }
    // The helper dropped its handle before sending the hashes, so this is the last one.
    Ok(Arc::try_unwrap(batch).ok())
}

