//! SQL surface of the audit trail (docs/design.md#audit-chain): appends, the statement trigger of governed tables,
//! verification, Merkle helpers. The hashing and verification rules are in `memory_core::audit`.
//!
//! Two modes (`memory.audit_mode`, docs/design.md#integration):
//! - deferred (the default): a writing transaction records its events as pending entries in
//!   `memory.audit_pending`, each signed on its own (`PendingSigner`), and takes no chain lock;
//!   the sequencer (`integrate`) chains committed pending entries later, in batches.
//! - immediate: appends lock each touched chain's head row (in chain order, so writers never
//!   deadlock on each other), chain the statement's events in memory, insert them in chunks,
//!   and write each head once. A statement of a million rows costs one head update, not a million.

pub mod denied;
mod integrate;
pub(crate) mod reads;
mod jsonb;
pub mod storage;
mod trigger;
mod verify;
mod receipt;
pub mod worker;
mod append;
mod wake;

pub(crate) use append::{default_actor, flat_jsonb, Appender, Pending, PG_EPOCH_UNIX_MICROS};
use append::{actor_for, MAX_PAYLOAD_BYTES};
use crate::errors::{code, MxError, OrRaise};
use memory_core::audit::MerkleBuilder;
use pgrx::prelude::*;
use serde_json::Value;
use std::borrow::Cow;
// ---------------------------------------------------------------------------------------------
// SQL functions (wrapped by SECURITY DEFINER SQL functions in sql/audit.sql).

#[pg_extern(volatile, schema = "memory_internal", name = "_audit_append")]
fn audit_append(
    event_type: Option<&str>,
    payload: Option<&str>,
    org_id: Option<String>,
    project_id: Option<String>,
    workspace_id: Option<String>,
    actor_id: Option<String>,
) -> Option<i64> {
    append_one(event_type, payload, org_id, project_id, workspace_id, actor_id).or_raise()
}

fn append_one(
    event_type: Option<&str>,
    payload: Option<&str>,
    org_id: Option<String>,
    project_id: Option<String>,
    workspace_id: Option<String>,
    actor_id: Option<String>,
) -> Result<Option<i64>, MxError> {
    // Stored exactly as checked: no leading or trailing whitespace of any kind (audit_append's
    // reserved-name check reads the same string).
    let event_type = match event_type {
        Some(e) if e != e.trim() => {
            return Err(MxError::bad_argument("event_type must not begin or end with whitespace"));
        }
        Some(e) if !e.is_empty() && e.chars().count() <= 200 => e.to_string(),
        _ => return Err(MxError::bad_argument("event_type must be a non-empty text of at most 200 characters")),
    };
    let text = payload.unwrap_or("null");
    if text.len() > MAX_PAYLOAD_BYTES {
        return Err(MxError::bad_argument(format!("payload is {} bytes of JSON; at most {MAX_PAYLOAD_BYTES} are allowed", text.len()))
            .hint("Audit events name and hash what they are about (content_sha256); they do not carry it."));
    }
    // serde_json's limits (numbers beyond a double, nesting deeper than 128) are refused here
    // rather than stored and unverifiable.
    let value: Value = serde_json::from_str(text)
        .map_err(|e| MxError::bad_argument(format!("payload cannot be hashed: {e}")).hint("Numbers must fit a double and nesting stay under 128 levels."))?;
    if !value.is_object() {
        return Err(MxError::bad_argument("payload must be a JSON object").hint("Wrap other values, e.g. {\"value\": ...}."));
    }
    Spi::connect(|client| {
        let mut ap = Appender::new(client)?;
        let actor = match actor_id {
            Some(a) => actor_for(&ap, Some(&a)),
            None => default_actor(&ap),
        };
        let ev = Pending {
            event_type: Cow::Owned(event_type),
            org_id,
            project_id,
            workspace_id,
            actor_id: Some(actor),
            payload: value,
            payload_text: Some(text.to_string()),
        };
        let seq = ap.push(client, ev)?;
        ap.finish(client)?;
        Ok(seq)
    })
}

/// memory_ext's own records (governance DDL, org grants): appended to `org_id`'s chain (the
/// platform chain when NULL) whoever triggered them. Not granted to PUBLIC.
/// (memory_internal._audit_append_system(text, jsonb, text) passes the payload as text: JSON serde cannot
/// read is then a clean 22023 rather than a failure to decode the argument.)
#[pg_extern(volatile, schema = "memory_internal", name = "_audit_append_system_text")]
fn audit_append_system(event_type: Option<&str>, payload: Option<&str>, org_id: Option<String>) -> Option<i64> {
    let run = || -> Result<Option<i64>, MxError> {
        let event_type = event_type.filter(|e| !e.trim().is_empty()).ok_or_else(|| MxError::bad_argument("event_type must not be empty"))?;
        let payload: Value = serde_json::from_str(payload.unwrap_or("null"))
            .map_err(|e| MxError::bad_argument(format!("payload cannot be hashed: {e}")))?;
        if !payload.is_object() {
            return Err(MxError::bad_argument("payload must be a JSON object"));
        }
        Spi::connect(|client| {
            let mut ap = Appender::new(client)?.system(true);
            let actor = default_actor(&ap);
            let seq = ap.push(
                client,
                Pending {
                    event_type: Cow::Owned(event_type.to_string()),
                    org_id,
                    project_id: None,
                    workspace_id: None,
                    actor_id: Some(actor),
                    payload,
                    payload_text: None,
                },
            )?;
            ap.finish(client)?;
            Ok(seq)
        })
    };
    run().or_raise()
}

// ---------------------------------------------------------------------------------------------
// Many audit events in one call: the door memory_ext's PL/pgSQL functions and the statement
// triggers of the knowledge tables append through (not granted to PUBLIC).

/// Append a JSON array of `{"event_type", "org_id", "payload"}` objects, chain by chain, in
/// array order; returns how many. The actor is the caller (or `memory.actor_id`).
/// (memory_internal._audit_append_many(jsonb) passes the array as text, for the reason above.)
#[pg_extern(volatile, schema = "memory_internal", name = "_audit_append_events")]
fn audit_append_many(events: Option<&str>) -> i32 {
    let parsed = events
        .map(|t| serde_json::from_str::<Value>(t).map_err(|e| MxError::bad_argument(format!("events cannot be hashed: {e}"))))
        .transpose();
    parsed.and_then(append_many).or_raise()
}

fn append_many(events: Option<Value>) -> Result<i32, MxError> {
    let Some(Value::Array(items)) = events else { return Ok(0) };
    if items.is_empty() {
        return Ok(0);
    }
    let mut pending = Vec::with_capacity(items.len());
    for it in items {
        let Value::Object(mut o) = it else { return Err(MxError::bad_argument("each event must be an object")) };
        let event_type = match o.remove("event_type") {
            Some(Value::String(s)) if !s.is_empty() => s,
            _ => return Err(MxError::bad_argument("each event needs an event_type")),
        };
        let org_id = match o.remove("org_id") {
            Some(Value::String(s)) => Some(s),
            _ => None,
        };
        let payload = match o.remove("payload") {
            Some(p @ Value::Object(_)) => p,
            _ => return Err(MxError::bad_argument("each event needs an object payload")),
        };
        pending.push((event_type, org_id, payload));
    }
    Spi::connect(|client| {
        let mut ap = Appender::new(client)?;
        let actor = default_actor(&ap);
        ap.lock(client, pending.iter().map(|p| p.1.as_deref().unwrap_or("")))?;
        let n = pending.len() as i32;
        for (event_type, org_id, payload) in pending {
            ap.push(
                client,
                Pending {
                    event_type: Cow::Owned(event_type),
                    org_id,
                    project_id: None,
                    workspace_id: None,
                    actor_id: Some(actor.clone()),
                    payload,
                    payload_text: None,
                },
            )?;
        }
        ap.finish(client)?;
        Ok(n)
    })
}

#[pg_extern(volatile, parallel_unsafe, schema = "memory_internal", name = "_random_bytes")]
fn random_bytes(n: i32) -> Vec<u8> {
    if !(1..=1024).contains(&n) {
        MxError::bad_argument(format!("byte count must be in [1, 1024], got {n}")).raise();
    }
    let mut buf = vec![0u8; n as usize];
    if !crate::pg::xact::strong_random(&mut buf) {
        MxError::new(code::INTERNAL, "could not generate random bytes").raise();
    }
    buf
}

#[pg_extern(immutable, parallel_safe, strict, schema = "memory_internal", name = "_merkle_root")]
fn merkle_root(hashes: Array<&[u8]>) -> Vec<u8> {
    let mut tree = MerkleBuilder::new();
    for h in hashes.iter() {
        match h {
            Some(h) if h.len() == 32 => tree.push(h),
            _ => MxError::bad_argument("Merkle leaves must be non-NULL 32-byte hashes").raise(),
        }
    }
    tree.root().to_vec()
}

#[pg_extern(immutable, parallel_safe, strict, schema = "memory_internal", name = "_merkle_frontier_root")]
fn merkle_frontier_root(frontier: &[u8]) -> Vec<u8> {
    MerkleBuilder::from_bytes(frontier)
        .map(|t| t.root().to_vec())
        .ok_or_else(|| MxError::bad_argument("not a Merkle frontier"))
        .or_raise()
}

/// The pseudonym payloads use for a user or actor id (for erasure and export events). Not
/// granted to PUBLIC: with it, anyone could link ids to the pseudonyms in the log.
#[pg_extern(volatile, strict, schema = "memory_internal", name = "_pseudonym")]
fn pseudonym_sql(id: &str) -> String {
    Spi::connect(|client| Appender::new(client).map(|ap| ap.pseudonym(id))).or_raise()
}

pub fn init() {
    append::init();
    crate::pg::callbacks::on_relcache(trigger::forget_plans);
    worker::register();
    denied::init();
    reads::init();
}
