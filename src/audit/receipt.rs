//! Erasure receipts' SQL door (docs/audit.md#erasure-receipts): signing, checking and hashing for
//! memory.forget, memory.erase_subject and memory.verify_receipt (sql/subject.sql). The rules are
//! memory_core::audit::receipt's; these functions take the key from their SECURITY DEFINER
//! callers and are not granted to PUBLIC (sql/finalize.sql).

use crate::errors::{MxError, OrRaise};
use memory_core::audit::{self, receipt};
use pgrx::prelude::*;
use serde_json::Value;

/// The receipt's signature under `key` (lowercase hex HMAC-SHA256 of its JCS form without
/// "signature").
#[pg_extern(immutable, strict, parallel_safe, schema = "memory_internal", name = "_receipt_sign")]
fn receipt_sign(receipt: pgrx::JsonB, key: &[u8]) -> String {
    receipt::signature(key, &receipt.0)
}

/// Whether the receipt's "signature" is its signature under `key` (constant-time comparison).
#[pg_extern(immutable, strict, parallel_safe, schema = "memory_internal", name = "_receipt_signature_ok")]
fn receipt_signature_ok(receipt: pgrx::JsonB, key: &[u8]) -> bool {
    receipt::signature_ok(key, &receipt.0)
}

/// Why the value is not a well-formed receipt (naming the member), or NULL.
#[pg_extern(immutable, strict, parallel_safe, schema = "memory_internal", name = "_receipt_shape_error")]
fn receipt_shape_error(receipt: pgrx::JsonB) -> Option<String> {
    receipt::shape_error(&receipt.0)
}

/// `ids_sha256` of the ids (NULL elements are not ids and are skipped).
#[pg_extern(immutable, strict, parallel_safe, schema = "memory_internal", name = "_ids_sha256")]
fn ids_sha256(ids: Vec<Option<String>>) -> String {
    let ids: Vec<String> = ids.into_iter().flatten().collect();
    receipt::ids_sha256(&ids)
}

/// The entry hash of one audit_log row as the chain defines it (docs/audit.md#hash-format):
/// memory.verify_receipt recomputes the receipt event's entry. `recorded_at_micros` is
/// microseconds since the Unix epoch; `payload` the row's payload as text.
#[pg_extern(immutable, parallel_safe, schema = "memory_internal", name = "_audit_entry_hash")]
#[allow(clippy::too_many_arguments)]
fn audit_entry_hash(
    chain_id: &str,
    seq: i64,
    prev_hash: &[u8],
    event_type: &str,
    recorded_at_micros: i64,
    actor_id: Option<&str>,
    org_id: Option<&str>,
    project_id: Option<&str>,
    workspace_id: Option<&str>,
    key_id: i32,
    payload: &str,
    key: &[u8],
) -> Vec<u8> {
    (|| -> Result<Vec<u8>, MxError> {
        let payload: Value = serde_json::from_str(payload).map_err(|e| MxError::bad_argument(format!("payload cannot be hashed: {e}")))?;
        let prev: [u8; 32] = prev_hash.try_into().map_err(|_| MxError::bad_argument("prev_hash must be 32 bytes"))?;
        let ev = audit::Event {
            chain_id,
            seq,
            prev_hash: prev,
            event_type,
            recorded_at_micros,
            actor_id,
            org_id,
            project_id,
            workspace_id,
            key_id,
            payload: (&payload).into(),
        };
        Ok(audit::entry_hash(key, &ev).to_vec())
    })()
    .or_raise()
}
