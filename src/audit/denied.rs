//! Denied attempts, audited although the statement fails (docs/design.md#denied-attempts: a non-admin's claim state
//! change emits `memory.govern.unauthorized_access_attempt`, a denied retirement
//! `memory.govern.retire_attempt` with `denied`, the decay job's failure `memory.job.decay.error`).
//!
//! The failing transaction rolls back everything it wrote, so the event cannot be written in it.
//! It is handed instead to shared memory (a ring of `SLOTS` slots, taken under an LWLock), which a
//! rollback does not touch; the background integrator of the database that integrates the org's
//! chain appends it to that chain in its own transaction on its next round (woken by the hand-over,
//! at most `memory.integrator_naptime` later). When the
//! library is not preloaded (no shared memory, no integrator) or the ring is full, the event goes
//! to the server log as a line in pgaudit's format instead: it is never dropped silently.
//!
//! Guarantee: an event handed over is in the chain once the integrator's next round commits; if
//! the server stops first, it is lost from the chain (shared memory does not survive a restart)
//! but its server-log line is not: every event is also logged when it is handed over.

use crate::errors::{code, MxError, OrRaise};
use crate::pg::shmem;
use pgrx::prelude::*;

/// The events that may be handed over through `memory_internal._audit_denied`, and the memory_ext
/// functions that may hand each over (the innermost running memory_ext function must be one of
/// them).
const ALLOWED: [(&str, &[&str]); 3] = [
    ("memory.govern.unauthorized_access_attempt", &["_claims_guard"]),
    ("memory.govern.retire_attempt", &["_entities_guard"]),
    ("memory.job.decay.error", &["run_decay"]),
];

/// Ring slots one database may hold at a time: a quarter of the ring, so a database whose roles
/// provoke denials in a loop (or that no integrator serves) cannot starve the others.
const PER_DATABASE: usize = shmem::SLOTS / 4;

/// Requests the shared memory the hand-over uses (while the postmaster preloads the library).
pub fn init() {
    shmem::init();
}

/// Hands an event over to the integrator (see the module notes), and logs it in pgaudit's
/// format: the line is the fallback when there is no ring or it is full, and a record of the
/// hand-over otherwise. `payload` is a JSON object's text.
pub fn hand_over(event: &str, org: &str, payload: &str) {
    let payload = if payload.len() > shmem::BODY_MAX { "{\"truncated\": true}" } else { payload };
    let why = if shmem::push(event, org, payload, PER_DATABASE) {
        super::wake::wake_integrators(super::wake::integrator_bit(org.as_bytes()));
        "handed to the integrator"
    } else if shmem::available() {
        "ring full (or this database's share of it): server log only"
    } else {
        "library not preloaded: server log only"
    };
    log!("AUDIT: SESSION,0,0,MEMORY_EXT,DENIED,,,\"{event} org={org} payload={payload} ({why})\",<not logged>");
}

/// The events handed over in this database whose org `wanted` says, taken out of the ring (an
/// integrator's: each takes those of the chains it integrates).
pub fn take_for_database(wanted: impl Fn(&str) -> bool) -> Vec<(String, String, String)> {
    shmem::take(wanted)
}

/// `memory_internal._audit_denied(event_type, payload, org)`: for memory_ext's own guards, right before
/// they raise. Refused (42501) unless the innermost running memory_ext function is one that may
/// hand this event over (checked before anything else is read): a role cannot call it to write an
/// event of its choosing. `payload` is a JSON object's text.
#[pg_extern(volatile, parallel_unsafe, schema = "memory_internal", name = "_audit_denied")]
fn audit_denied(event_type: Option<&str>, payload: Option<&str>, org: Option<&str>) {
    let allowed = event_type.and_then(|e| ALLOWED.iter().find(|(a, _)| *a == e)).map(|(_, f)| *f);
    let caller = crate::trust::innermost_memory_function_except("_audit_denied");
    let ok = matches!((allowed, caller.as_deref()), (Some(fs), Some(f)) if fs.contains(&f));
    if !ok {
        Err::<(), _>(MxError::new(code::NO_PRIVILEGE, "memory_internal._audit_denied is for memory_ext's own guards")).or_raise();
    }
    let payload = payload.unwrap_or("");
    if !matches!(serde_json::from_str::<serde_json::Value>(payload), Ok(serde_json::Value::Object(_))) {
        Err::<(), _>(MxError::bad_argument("payload must be a JSON object's text")).or_raise();
    }
    hand_over(event_type.unwrap_or_default(), org.unwrap_or(""), payload);
}
