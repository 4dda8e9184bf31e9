//! Read events that survive the reader's rollback (docs/audit.md#read-events). `memory.recall`,
//! `memory.retrieval.hybrid` and `memory.export` are appended in the reading transaction as every
//! event is (a committed read records its event with its commit, exactly once), and each is also
//! kept here with a reservation of shared-memory slots (`pg::shmem`'s queue) taken before the
//! read returns. When the transaction commits, the reservation is freed. When it (or the
//! savepoint the read ran in) rolls back, its append goes with it, and the same event (same
//! fields and actor) fills the reserved slots instead: the background integrator of the database,
//! or the next integration run in it (`audit_integrate`, `audit_verify`, `audit_head`,
//! `run_maintenance`), claims it and appends it in its own transaction; the slots are freed when
//! that transaction commits and given back when it aborts. Every hand-over is also logged in
//! pgaudit's format.
//!
//! A read that cannot reserve (the database holds its share of the queue: no integration has
//! run for that many rolled-back reads) waits up to `WAIT_MS` for one, waking the integrators, then
//! is refused (`53000`), so no read is returned that could go unrecorded. On a hot standby
//! nothing is written, and the event goes to the server log as before; without the library
//! preloaded (no shared memory) a rolled-back read's event goes to the server log only.

use super::append::{default_actor, Appender, Pending, MAX_PAYLOAD_BYTES};
use crate::errors::{code, MxError, OrRaise};
use crate::pg::callbacks;
use crate::pg::shmem;
use memory_core::handover::{self, ReadEvent};
use pgrx::prelude::*;
use serde_json::Value;
use std::borrow::Cow;
use std::cell::RefCell;

/// Slots of the queue one database may hold at a time (reserved, handed over or being
/// appended): a quarter, so that a database nobody integrates cannot take the others' room.
pub const PER_DATABASE: usize = shmem::QUEUE_SLOTS / 4;
/// How long a read waits for room before it is refused.
const WAIT_MS: i64 = 2_000;

/// A read event of this transaction, with its reservation.
struct Held {
    /// The subtransaction it was appended in.
    subxact: pg_sys::SubTransactionId,
    slots: Vec<usize>,
    record: Vec<u8>,
    event: ReadEvent,
}

thread_local! {
    static HELD: RefCell<Vec<Held>> = const { RefCell::new(Vec::new()) };
    // Queue slots this transaction claimed (to append what they hold), by subtransaction.
    static CLAIMED: RefCell<Vec<(pg_sys::SubTransactionId, Vec<usize>)>> = const { RefCell::new(Vec::new()) };
}

/// `memory_internal._audit_read(event_type, payload, org_id, project_id)`: the one door of read
/// events (see the module notes). `payload` is a JSON object's text. Not granted to PUBLIC: it is
/// for memory_ext's own read functions, which run as the extension owner.
#[pg_extern(volatile, parallel_unsafe, schema = "memory_internal", name = "_audit_read")]
fn audit_read(event_type: Option<&str>, payload: Option<&str>, org_id: Option<String>, project_id: Option<String>) {
    append_read(event_type, payload, org_id, project_id).or_raise()
}

pub(crate) fn append_read(event_type: Option<&str>, payload: Option<&str>, org_id: Option<String>, project_id: Option<String>) -> Result<(), MxError> {
    let event_type = match event_type {
        Some(e) if handover::is_read_event(e) => e.to_string(),
        other => {
            return Err(MxError::bad_argument(format!("\"{}\" is not a read event", other.unwrap_or("NULL")))
                .hint("memory_internal._audit_read takes memory.recall, memory.retrieval.hybrid and memory.export; other events go through memory_internal._audit."))
        }
    };
    let text = payload.unwrap_or("null");
    if text.len() > MAX_PAYLOAD_BYTES {
        return Err(MxError::bad_argument(format!("payload is {} bytes of JSON; at most {MAX_PAYLOAD_BYTES} are allowed", text.len())));
    }
    let value: Value = serde_json::from_str(text).map_err(|e| MxError::bad_argument(format!("payload cannot be hashed: {e}")))?;
    if !value.is_object() {
        return Err(MxError::bad_argument("payload must be a JSON object"));
    }
    append_event(event_type, value, text.to_string(), org_id, project_id)
}

/// `append_read` of a payload memory_ext built: the JSON object `payload` and its text `text` (as
/// jsonb prints it: `memory_core::retrieval::recall::jsonb_text`), not parsed again.
pub(crate) fn append_read_value(event_type: &str, payload: Value, text: String, org_id: Option<String>, project_id: Option<String>) -> Result<(), MxError> {
    if !handover::is_read_event(event_type) || !payload.is_object() {
        return Err(MxError::new(code::INTERNAL, format!("memory_ext: {event_type} is not a read event with an object payload")));
    }
    if text.len() > MAX_PAYLOAD_BYTES {
        return Err(MxError::bad_argument(format!("payload is {} bytes of JSON; at most {MAX_PAYLOAD_BYTES} are allowed", text.len())));
    }
    append_event(event_type.to_string(), payload, text, org_id, project_id)
}

fn append_event(event_type: String, value: Value, text: String, org_id: Option<String>, project_id: Option<String>) -> Result<(), MxError> {
    let actor = Spi::connect(|client| {
        let mut ap = Appender::new(client)?;
        let actor = default_actor(&ap);
        ap.push(
            client,
            Pending {
                event_type: Cow::Owned(event_type.clone()),
                org_id: org_id.clone(),
                project_id: project_id.clone(),
                workspace_id: None,
                actor_id: Some(actor.clone()),
                payload: value,
                payload_text: Some(text.clone()),
            },
        )?;
        ap.finish(client)?;
        Ok::<_, MxError>(actor)
    })?;
    // A standby records nothing (the appender logged the event): nothing to hand over.
    if crate::pg::xact::in_recovery() {
        return Ok(());
    }
    hold(ReadEvent { event_type, org_id, project_id, actor_id: Some(actor), payload: text })
}

/// Keeps `event` for this transaction with a reservation of the slots its record needs.
fn hold(event: ReadEvent) -> Result<(), MxError> {
    let record = event.encode();
    let subxact = callbacks::current_subtransaction();
    if !shmem::available() {
        HELD.with(|h| h.borrow_mut().push(Held { subxact, slots: Vec::new(), record, event }));
        return Ok(());
    }
    let n = handover::slots_for(record.len(), shmem::QUEUE_BYTES);
    let mut waited = 0;
    let mut forgot = false;
    loop {
        match shmem::queue_reserve(n, PER_DATABASE) {
            Ok(slots) => {
                HELD.with(|h| h.borrow_mut().push(Held { subxact, slots, record, event }));
                return Ok(());
            }
            Err(full) => {
                // Records of databases dropped since they were handed over are nobody's.
                if !forgot {
                    forgot = true;
                    if shmem::queue_forget_databases(crate::pg::xact::database_exists) > 0 {
                        continue;
                    }
                }
                if waited >= WAIT_MS {
                    let what = match full {
                        shmem::Full::Database => format!("this database holds its {PER_DATABASE} slots"),
                        shmem::Full::Queue => format!("all {} slots are in use", shmem::QUEUE_SLOTS),
                    };
                    return Err(MxError::new(
                        code::INSUFFICIENT_RESOURCES,
                        format!("{} is refused: its audit event could not be reserved a place outside the transaction ({what})", event.event_type),
                    )
                    .hint("Read events of rolled-back reads wait for an integration: name this database in memory.integrator_databases, or run SELECT memory.audit_integrate(); then retry."));
                }
                super::wake::wake_integrators(u32::MAX);
                crate::pg::xact::sleep_interruptibly(10);
                waited += 10;
            }
        }
    }
}

/// Hands a rolled-back read's event over (fills its reservation) and logs it. Cannot fail: it
/// runs in abort callbacks.
fn hand_over(h: Held) {
    let why = if shmem::queue_fill(&h.slots, &h.record) {
        super::wake::wake_integrators(super::wake::integrator_bit(h.event.chain().as_bytes()));
        "handed to the integrator"
    } else if shmem::available() {
        "no reservation: server log only"
    } else {
        "library not preloaded: server log only"
    };
    log!(
        "AUDIT: SESSION,0,0,MEMORY_EXT,READ,,,\"{} org={} actor={} payload={} (read rolled back; {why})\",<not logged>",
        h.event.event_type,
        h.event.chain(),
        h.event.actor_id.as_deref().unwrap_or(""),
        h.event.payload
    );
}

/// At a transaction's end: a commit frees the reservations (its events committed with it) and
/// the slots it claimed (their events committed too); an abort hands its read events over and
/// gives the claimed slots back. (A prepared transaction was settled by `at_prepare`.)
fn at_outcome(committed: bool) {
    let held = HELD.with(|h| std::mem::take(&mut *h.borrow_mut()));
    for h in held {
        if committed {
            shmem::queue_release(&h.slots);
        } else {
            hand_over(h);
        }
    }
    let claimed = CLAIMED.with(|c| std::mem::take(&mut *c.borrow_mut()));
    for (_, slots) in claimed {
        shmem::queue_finish(&slots, committed);
    }
}

/// At a subtransaction's abort: the read events of it and of its children (ids at least its own:
/// everything begun while it ran) are handed over, their claims given back.
fn at_subtransaction_abort() {
    let s = callbacks::aborting_subtransaction();
    let held = HELD.with(|h| {
        let mut h = h.borrow_mut();
        let (gone, kept): (Vec<Held>, Vec<Held>) = std::mem::take(&mut *h).into_iter().partition(|x| x.subxact >= s);
        *h = kept;
        gone
    });
    for h in held {
        hand_over(h);
    }
    let claimed = CLAIMED.with(|c| {
        let mut c = c.borrow_mut();
        let (gone, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut *c).into_iter().partition(|x| x.0 >= s);
        *c = kept;
        gone
    });
    for (_, slots) in claimed {
        shmem::queue_finish(&slots, false);
    }
}

/// Before PREPARE TRANSACTION: a transaction that claimed handed-over events cannot be prepared
/// (`0A000`: it would hold them across a restart). Its own read events are in the prepared
/// transaction: chained when COMMIT PREPARED commits it; ROLLBACK PREPARED leaves them in the
/// server log, logged here.
fn at_prepare() {
    if CLAIMED.with(|c| !c.borrow().is_empty()) {
        Err::<(), _>(
            MxError::new(code::FEATURE_NOT_SUPPORTED, "cannot PREPARE a transaction that integrated audit entries")
                .hint("memory.audit_verify, audit_head, audit_seal, run_maintenance and audit_integrate integrate pending entries first; run them in a transaction of their own."),
        )
        .or_raise();
    }
    let held = HELD.with(|h| std::mem::take(&mut *h.borrow_mut()));
    for h in held {
        shmem::queue_release(&h.slots);
        log!(
            "AUDIT: SESSION,0,0,MEMORY_EXT,READ,,,\"{} org={} actor={} payload={} (in a prepared transaction: chained at COMMIT PREPARED)\",<not logged>",
            h.event.event_type,
            h.event.chain(),
            h.event.actor_id.as_deref().unwrap_or(""),
            h.event.payload
        );
    }
}

/// Appends, in this transaction, the read events handed over in this database whose chains
/// `takes` takes (the caller's share of the chains); returns how many. Their slots are this transaction's until it ends: freed at
/// its commit, given back at its abort (so an integration that rolls back loses nothing).
pub fn drain(takes: impl Fn(&[u8]) -> bool) -> Result<i64, MxError> {
    let claimed = shmem::queue_claim(|b| ReadEvent::decode(b).is_none_or(|e| takes(e.chain().as_bytes())));
    if claimed.is_empty() {
        return Ok(0);
    }
    let subxact = callbacks::current_subtransaction();
    let mut events = Vec::with_capacity(claimed.len());
    for (slots, bytes) in claimed {
        CLAIMED.with(|c| c.borrow_mut().push((subxact, slots)));
        match ReadEvent::decode(&bytes) {
            Some(e) => events.push(e),
            None => warning!("memory_ext: a handed-over read event of {} bytes could not be read; it is in the server log", bytes.len()),
        }
    }
    // In chain order: the order every integrator locks heads in.
    events.sort_by(|a, b| a.chain().as_bytes().cmp(b.chain().as_bytes()));
    let n = events.len() as i64;
    Spi::connect(|client| {
        let mut ap = Appender::new(client)?.system(true);
        let chains: Vec<String> = events.iter().map(|e| e.chain().to_string()).collect();
        ap.lock(client, chains.iter().map(String::as_str))?;
        for e in events {
            let payload: Value = serde_json::from_str(&e.payload).map_err(|err| MxError::new(code::INTERNAL, format!("handed-over read event: {err}")))?;
            ap.push(
                client,
                Pending {
                    event_type: Cow::Owned(e.event_type),
                    org_id: e.org_id,
                    project_id: e.project_id,
                    workspace_id: None,
                    actor_id: e.actor_id,
                    payload,
                    payload_text: Some(e.payload),
                },
            )?;
        }
        ap.finish(client)
    })?;
    Ok(n)
}

/// Registers the transaction callbacks.
pub fn init() {
    callbacks::on_outcome(at_outcome);
    callbacks::on_subtransaction_abort(at_subtransaction_abort);
    callbacks::on_prepare(at_prepare);
}
