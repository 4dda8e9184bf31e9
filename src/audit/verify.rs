//! Chain verification: reads a chain in seq order and feeds `memory_core::audit::Verifier`.

use super::{spi_err, PG_EPOCH_UNIX_MICROS};
use crate::errors::{MxError, OrRaise};
use memory_core::audit::{Seal, StoredEntry, Verifier};
use pgrx::prelude::*;
use pgrx::spi::SpiClient;
use serde_json::Value;
use std::collections::HashMap;

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
    loop {
        let batch = cursor.fetch(10_000).map_err(spi_err)?;
        if batch.is_empty() {
            break;
        }
        for row in batch {
            let recorded = row
                .get::<TimestampWithTimeZone>(5)
                .map_err(spi_err)?
                .map(|t| pg_sys::TimestampTz::from(t).saturating_add(PG_EPOCH_UNIX_MICROS))
                .unwrap_or(i64::MIN);
            let payload_text: &str = row.get(11).map_err(spi_err)?.unwrap_or("null");
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
                payload: serde_json::from_str(payload_text).unwrap_or(Value::Null),
            };
            verifier.push(&entry);
        }
    }
    let v = verifier.finish(head);
    let reason = v.failure.as_ref().map(|f| match &v.detail {
        Some(d) => format!("{}: {d}", f.reason()),
        None => f.reason().to_string(),
    });
    Ok((chain.to_string(), v.entries, v.ok, v.first_bad_seq, reason, v.pruned))
}
