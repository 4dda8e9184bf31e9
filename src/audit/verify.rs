//! Chain verification: reads a chain in seq order and feeds `memory_core::audit::Verifier`.

use super::{spi_err, PG_EPOCH_UNIX_MICROS};
use crate::errors::{MxError, OrRaise};
use memory_core::audit::{EntryHasher, Seal, StoredEntry, Verifier};
use pgrx::prelude::*;
use pgrx::spi::SpiClient;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{mpsc, Arc};

/// Rows per fetch (and per batch handed to the hashing thread).
const BATCH: std::ffi::c_long = 10_000;

#[pg_extern(volatile, name = "_audit_verify")]
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
    ),
> {
    let rows = verify_all(chain_id).or_raise();
    TableIterator::new(rows)
}

type VerifyRow = (String, i64, bool, Option<i64>, Option<String>, i64);

fn verify_all(chain_id: Option<String>) -> Result<Vec<VerifyRow>, MxError> {
    Spi::connect(|client| {
        let mut keys: HashMap<i32, Vec<u8>> = HashMap::new();
        for row in client.select("SELECT key_id, key FROM memory.audit_keys", None, &[]).map_err(spi_err)? {
            keys.insert(row.get::<i32>(1).map_err(spi_err)?.unwrap_or_default(), row.get::<Vec<u8>>(2).map_err(spi_err)?.unwrap_or_default());
        }
        let chains: Vec<String> = match chain_id {
            Some(c) => vec![c],
            None => {
                let mut v = Vec::new();
                for row in client
                    .select("SELECT chain_id FROM memory.audit_heads UNION SELECT DISTINCT chain_id FROM memory.audit_log ORDER BY 1", None, &[])
                    .map_err(spi_err)?
                {
                    v.push(row.get::<String>(1).map_err(spi_err)?.unwrap_or_default());
                }
                v
            }
        };
        let mut out = Vec::with_capacity(chains.len());
        for chain in chains {
            out.push(verify_chain(client, &keys, &chain)?);
        }
        Ok(out)
    })
}

fn hash32(v: Option<Vec<u8>>) -> [u8; 32] {
    v.and_then(|b| b.try_into().ok()).unwrap_or([0xff; 32])
}

fn verify_chain(client: &SpiClient, keys: &HashMap<i32, Vec<u8>>, chain: &str) -> Result<VerifyRow, MxError> {
    let mut seals = Vec::new();
    for row in client
        .select(
            "SELECT first_seq, last_seq, last_entry_hash, merkle_root FROM memory.audit_seals
              WHERE chain_id = $1 AND entries > 0 ORDER BY first_seq",
            None,
            &[chain.into()],
        )
        .map_err(spi_err)?
    {
        seals.push(Seal {
            first_seq: row.get::<i64>(1).map_err(spi_err)?.unwrap_or_default(),
            last_seq: row.get::<i64>(2).map_err(spi_err)?.unwrap_or_default(),
            last_entry_hash: hash32(row.get::<Vec<u8>>(3).map_err(spi_err)?),
            merkle_root: hash32(row.get::<Vec<u8>>(4).map_err(spi_err)?),
        });
    }
    let head = client
        .select("SELECT seq, entry_hash FROM memory.audit_heads WHERE chain_id = $1", Some(1), &[chain.into()])
        .map_err(spi_err)?;
    let head = if head.is_empty() {
        None
    } else {
        let h = head.first();
        Some((h.get::<i64>(1).map_err(spi_err)?.unwrap_or_default(), hash32(h.get::<Vec<u8>>(2).map_err(spi_err)?)))
    };

    let mut verifier = Verifier::new(keys, seals);
    let mut cursor = client.open_cursor(
        "SELECT seq, prev_hash, entry_hash, event_type, recorded_at, actor_id, org_id, project_id, workspace_id, key_id, payload::text
           FROM memory.audit_log WHERE chain_id = $1 COLLATE \"C\" ORDER BY seq",
        &[chain.into()],
    );
    // Reading rows (SPI, this thread) and hashing them (pure Rust) overlap: a helper thread parses
    // and hashes batch k while this thread fetches batch k+1; the checks, which are sequential,
    // stay here in seq order. The helper never calls into Postgres.
    // Each batch is allocated and freed on this thread; the helper borrows it through an Arc and
    // returns only hashes (its own allocations, the parsed payloads, stay on its side).
    let (to_helper, helper_in) = mpsc::sync_channel::<Arc<Vec<(StoredEntry, String)>>>(1);
    let (helper_out, from_helper) = mpsc::sync_channel::<Vec<Option<[u8; 32]>>>(1);
    let mut pending: std::collections::VecDeque<Arc<Vec<(StoredEntry, String)>>> = Default::default();
    std::thread::scope(|scope| -> Result<(), MxError> {
        let helper = spawn_without_signals(scope, move || {
            let mut hasher = EntryHasher::new(keys);
            for batch in helper_in {
                let hashes: Vec<_> = batch
                    .iter()
                    .map(|(e, payload)| {
                        let value = serde_json::from_str(payload).unwrap_or(Value::Null);
                        hasher.hash_with_payload(e, &value)
                    })
                    .collect();
                drop(batch);
                if helper_out.send(hashes).is_err() {
                    break;
                }
            }
        });
        let mut in_flight = 0usize;
        let fetched = (|| -> Result<(), MxError> {
            loop {
                let batch = cursor.fetch(BATCH).map_err(spi_err)?;
                if batch.is_empty() {
                    return Ok(());
                }
                let mut rows = Vec::with_capacity(batch.len());
                for row in batch {
                    rows.push(read_row(&row, chain)?);
                }
                let rows = Arc::new(rows);
                pending.push_back(Arc::clone(&rows));
                if to_helper.send(rows).is_err() {
                    return Err(MxError::new("XX000", "audit verification helper stopped"));
                }
                in_flight += 1;
                if in_flight == 2 {
                    check(&mut verifier, &from_helper, &mut pending)?;
                    in_flight -= 1;
                }
            }
        })();
        drop(to_helper);
        let mut result = fetched;
        while in_flight > 0 {
            if result.is_ok() {
                result = check(&mut verifier, &from_helper, &mut pending);
            } else {
                let _ = from_helper.recv();
            }
            in_flight -= 1;
        }
        drop(from_helper);
        helper.join().map_err(|_| MxError::new("XX000", "audit verification helper failed"))?;
        result
    })?;
    let v = verifier.finish(head);
    let reason = v.failure.as_ref().map(|f| match &v.detail {
        Some(d) => format!("{}: {d}", f.reason()),
        None => f.reason().to_string(),
    });
    Ok((chain.to_string(), v.entries, v.ok, v.first_bad_seq, reason, v.pruned))
}

/// One row of the log, its payload still text (the helper parses it).
fn read_row(row: &pgrx::spi::SpiHeapTupleData, chain: &str) -> Result<(StoredEntry, String), MxError> {
    let recorded = row
        .get::<TimestampWithTimeZone>(5)
        .map_err(spi_err)?
        .map(|t| pg_sys::TimestampTz::from(t).saturating_add(PG_EPOCH_UNIX_MICROS))
        .unwrap_or(i64::MIN);
    let payload: String = row.get(11).map_err(spi_err)?.unwrap_or_else(|| "null".to_string());
    let entry = StoredEntry {
        chain_id: chain.to_string(),
        seq: row.get::<i64>(1).map_err(spi_err)?.unwrap_or_default(),
        prev_hash: row.get::<Vec<u8>>(2).map_err(spi_err)?.unwrap_or_default(),
        entry_hash: row.get::<Vec<u8>>(3).map_err(spi_err)?.unwrap_or_default(),
        event_type: row.get::<String>(4).map_err(spi_err)?.unwrap_or_default(),
        recorded_at_micros: recorded,
        actor_id: row.get::<String>(6).map_err(spi_err)?,
        org_id: row.get::<String>(7).map_err(spi_err)?,
        project_id: row.get::<String>(8).map_err(spi_err)?,
        workspace_id: row.get::<String>(9).map_err(spi_err)?,
        key_id: row.get::<i32>(10).map_err(spi_err)?.unwrap_or_default(),
        payload: Value::Null,
    };
    Ok((entry, payload))
}

/// Apply the next hashed batch to the verifier, in seq order.
fn check(
    verifier: &mut Verifier,
    from_helper: &mpsc::Receiver<Vec<Option<[u8; 32]>>>,
    pending: &mut std::collections::VecDeque<Arc<Vec<(StoredEntry, String)>>>,
) -> Result<(), MxError> {
    let hashes = from_helper.recv().map_err(|_| MxError::new("XX000", "audit verification helper failed"))?;
    let batch = pending.pop_front().ok_or_else(|| MxError::new("XX000", "audit verification lost a batch"))?;
    for ((e, _), h) in batch.iter().zip(hashes) {
        verifier.push_hashed(e, h);
    }
    Ok(())
}

/// Start a scoped thread with every signal blocked, so that Postgres' signal handlers keep
/// running on the backend's own thread.
fn spawn_without_signals<'scope, 'env, F>(scope: &'scope std::thread::Scope<'scope, 'env>, f: F) -> std::thread::ScopedJoinHandle<'scope, ()>
where
    F: FnOnce() + Send + 'scope,
{
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut old);
        let handle = scope.spawn(f);
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        handle
    }
}
