//! Per-transaction gates that memory_ext's own functions open for their own statements and its
//! triggers read: backend memory, never a setting a session could set itself. Every gate closes
//! at the end of its transaction; a subtransaction that aborts puts every gate back as it was
//! when that subtransaction started (so a failure inside a gate's window closes it again, and an
//! error caught by code running inside the window, a table owner's trigger, does not close the
//! gate of the memory_ext function that opened it).
//!
//! - downgrade: `memory.reclassify` lets its UPDATE lower one relation's tier, with a reason the
//!   audit trigger records;
//! - knowledge: `memory.run_decay` may redact claim content and delete hypotheses;
//! - superseding: the claim a `memory.claims` insert is superseding, so the audit trigger of the
//!   old claim's update names it `memory.claim.supersede`;
//! - audit move: `memory.audit_ensure_partitions` moves rows, unchanged, out of the default
//!   partition of the log into the month partition it creates.
//! - integrating: the sequencer deletes the pending audit entries it has just chained.
//! - consent: `memory.revoke_consent` and maintenance change the append-only consent-era rows
//!   (thread contexts blocked, drift rows stamped or purged).

use crate::pg::callbacks;
use pgrx::prelude::*;
use std::cell::{Cell, RefCell};

thread_local! {
    static DOWNGRADE_ALLOWED_ON: Cell<pg_sys::Oid> = const { Cell::new(pg_sys::InvalidOid) };
    static DOWNGRADE_REASON: RefCell<Option<String>> = const { RefCell::new(None) };
    static KNOWLEDGE_OPEN: Cell<bool> = const { Cell::new(false) };
    static SUPERSEDING: RefCell<Option<String>> = const { RefCell::new(None) };
    static AUDIT_MOVE: Cell<bool> = const { Cell::new(false) };
    static INTEGRATING: Cell<bool> = const { Cell::new(false) };
    static CONSENT_OPEN: Cell<bool> = const { Cell::new(false) };
    static HOLD_OPEN: Cell<bool> = const { Cell::new(false) };
    static LINEAGE_OPEN: Cell<bool> = const { Cell::new(false) };
    static HOLD_ERASING: RefCell<Option<(pg_sys::Oid, String)>> = const { RefCell::new(None) };
}

/// Every gate's state, saved when a subtransaction starts.
struct Saved {
    downgrade_on: pg_sys::Oid,
    downgrade_reason: Option<String>,
    knowledge: bool,
    superseding: Option<String>,
    audit_move: bool,
    integrating: bool,
    consent: bool,
    hold: bool,
    lineage: bool,
    erasing: Option<(pg_sys::Oid, String)>,
}

thread_local! {
    // (subtransaction id, the gates as they were when it started), innermost last.
    static SAVED: RefCell<Vec<(pg_sys::SubTransactionId, Saved)>> = const { RefCell::new(Vec::new()) };
}

fn save(id: pg_sys::SubTransactionId) {
    let s = Saved {
        downgrade_on: DOWNGRADE_ALLOWED_ON.with(Cell::get),
        downgrade_reason: DOWNGRADE_REASON.with(|r| r.borrow().clone()),
        knowledge: KNOWLEDGE_OPEN.with(Cell::get),
        superseding: SUPERSEDING.with(|r| r.borrow().clone()),
        audit_move: AUDIT_MOVE.with(Cell::get),
        integrating: INTEGRATING.with(Cell::get),
        consent: CONSENT_OPEN.with(Cell::get),
        hold: HOLD_OPEN.with(Cell::get),
        lineage: LINEAGE_OPEN.with(Cell::get),
        erasing: HOLD_ERASING.with(|r| r.borrow().clone()),
    };
    SAVED.with(|v| v.borrow_mut().push((id, s)));
}

/// The saved state of subtransaction `id`, and of every one started inside it, dropped.
fn take(id: pg_sys::SubTransactionId) -> Option<Saved> {
    SAVED.with(|v| {
        let mut v = v.borrow_mut();
        let at = v.iter().rposition(|(i, _)| *i == id)?;
        let (_, s) = v.drain(at..).next()?;
        Some(s)
    })
}

fn committed(id: pg_sys::SubTransactionId) {
    take(id);
}

/// A subtransaction aborted: the gates as they were when it started; all closed when that is not
/// known (it started before memory_ext was loaded in this backend).
fn restore() {
    let Some(s) = take(callbacks::aborting_subtransaction()) else {
        close_all();
        return;
    };
    DOWNGRADE_ALLOWED_ON.with(|c| c.set(s.downgrade_on));
    DOWNGRADE_REASON.with(|r| r.replace(s.downgrade_reason));
    KNOWLEDGE_OPEN.with(|g| g.set(s.knowledge));
    SUPERSEDING.with(|r| r.replace(s.superseding));
    AUDIT_MOVE.with(|g| g.set(s.audit_move));
    INTEGRATING.with(|g| g.set(s.integrating));
    CONSENT_OPEN.with(|g| g.set(s.consent));
    HOLD_OPEN.with(|g| g.set(s.hold));
    LINEAGE_OPEN.with(|g| g.set(s.lineage));
    HOLD_ERASING.with(|r| r.replace(s.erasing));
}

fn end_of_transaction() {
    SAVED.with(|v| v.borrow_mut().clear());
    close_all();
}

fn close_all() {
    DOWNGRADE_ALLOWED_ON.with(|c| c.set(pg_sys::InvalidOid));
    DOWNGRADE_REASON.with(|r| r.replace(None));
    KNOWLEDGE_OPEN.with(|g| g.set(false));
    HOLD_OPEN.with(|g| g.set(false));
    LINEAGE_OPEN.with(|g| g.set(false));
    HOLD_ERASING.with(|r| r.replace(None));
    SUPERSEDING.with(|s| s.replace(None));
    AUDIT_MOVE.with(|g| g.set(false));
    INTEGRATING.with(|g| g.set(false));
    CONSENT_OPEN.with(|g| g.set(false));
}

pub fn init() {
    callbacks::on_transaction_end(end_of_transaction);
    callbacks::on_subtransaction_start(save);
    callbacks::on_subtransaction_commit(committed);
    callbacks::on_subtransaction_abort(restore);
}

/// The relation whose tier memory.reclassify may lower now (InvalidOid: none).
pub fn downgrade_allowed_on() -> pg_sys::Oid {
    DOWNGRADE_ALLOWED_ON.with(Cell::get)
}

/// The reason given to memory.reclassify while its UPDATE runs (for the audit event).
pub fn downgrade_reason() -> Option<String> {
    DOWNGRADE_REASON.with(|r| r.borrow().clone())
}

/// Lets the next UPDATEs of `tbl` in this (sub)transaction lower a tier. Not granted to PUBLIC:
/// only memory.reclassify (SECURITY DEFINER) calls it.
#[pg_extern(volatile, schema = "memory_internal", name = "_allow_downgrade")]
fn allow_downgrade(tbl: Option<pg_sys::Oid>, reason: default!(Option<String>, "NULL")) -> bool {
    match tbl {
        Some(t) => {
            DOWNGRADE_ALLOWED_ON.with(|c| c.set(t));
            DOWNGRADE_REASON.with(|r| r.replace(reason));
        }
        None => {
            DOWNGRADE_ALLOWED_ON.with(|c| c.set(pg_sys::InvalidOid));
            DOWNGRADE_REASON.with(|r| r.replace(None));
        }
    }
    true
}

/// Opens or closes the knowledge gate; returns the previous state. Not granted to PUBLIC.
#[pg_extern(volatile, schema = "memory_internal", name = "_knowledge_gate")]
fn knowledge_gate(open: bool) -> bool {
    KNOWLEDGE_OPEN.with(|g| g.replace(open))
}

/// Whether memory.run_decay holds the knowledge gate open (the invoker triggers of the knowledge
/// tables ask it).
#[pg_extern(volatile, schema = "memory_internal", name = "_knowledge_gate_open")]
fn knowledge_gate_open() -> bool {
    KNOWLEDGE_OPEN.with(Cell::get)
}

/// Opens or closes the hold gate around memory_ext's own moves of held rows (retention's archive
/// step); returns the previous state. Not granted to PUBLIC.
#[pg_extern(volatile, schema = "memory_internal", name = "_hold_gate")]
fn hold_gate(open: bool) -> bool {
    HOLD_OPEN.with(|g| g.replace(open))
}

/// Names the one table, and the one subject (the value of its user column, as text), whose rows
/// memory.erase_subject or a consent revocation deletes through legal holds now (NULL: none);
/// returns whether one was named before. Unlike the hold gate, it lets only a DELETE of that
/// subject's rows of that table through (memory_internal._hold_guard asks
/// memory_internal._hold_erasing): a trigger of the table's owner that those DELETEs fire meets
/// every other hold. Not granted to PUBLIC.
#[pg_extern(volatile, schema = "memory_internal", name = "_hold_erase_gate")]
fn hold_erase_gate(tbl: Option<pg_sys::Oid>, subject: Option<String>) -> bool {
    let v = match (tbl, subject) {
        (Some(t), Some(s)) => Some((t, s)),
        _ => None,
    };
    HOLD_ERASING.with(|r| r.replace(v)).is_some()
}

/// Whether the rows of `tbl` whose user column reads `subject` are being erased through legal
/// holds (memory_internal._hold_erase_gate). Asked by memory_internal._hold_guard.
#[pg_extern(volatile, schema = "memory_internal", name = "_hold_erasing")]
fn hold_erasing(tbl: Option<pg_sys::Oid>, subject: Option<String>) -> bool {
    match (tbl, subject) {
        (Some(t), Some(s)) => HOLD_ERASING.with(|r| r.borrow().as_ref().is_some_and(|(gt, gs)| *gt == t && *gs == s)),
        _ => false,
    }
}

/// Whether memory_ext holds the hold gate open (the WHEN clause of the memory_hold triggers).
#[pg_extern(volatile, schema = "memory_internal", name = "_hold_gate_open")]
fn hold_gate_open() -> bool {
    HOLD_OPEN.with(Cell::get)
}

/// Opens or closes the lineage gate while memory_internal._lineage_down raises every memory made
/// from a changed one in one statement (their own memory_lineage_down triggers then stay quiet:
/// nothing is left for them to raise); returns the previous state. Not granted to PUBLIC.
#[pg_extern(volatile, schema = "memory_internal", name = "_lineage_gate")]
fn lineage_gate(open: bool) -> bool {
    LINEAGE_OPEN.with(|g| g.replace(open))
}

/// Whether memory_ext holds the lineage gate open (the WHEN clause of memory_lineage_down).
#[pg_extern(volatile, schema = "memory_internal", name = "_lineage_gate_open")]
fn lineage_gate_open() -> bool {
    LINEAGE_OPEN.with(Cell::get)
}

/// Names the claim an insert into memory.claims is superseding (NULL: none). Not granted to PUBLIC:
/// only the definer trigger of memory.claims calls it.
#[pg_extern(volatile, schema = "memory_internal", name = "_set_superseding")]
fn set_superseding(claim: Option<pgrx::Uuid>) -> bool {
    SUPERSEDING.with(|s| s.replace(claim.map(|c| c.to_string())));
    true
}

/// The claim being superseded by the insert in progress, or NULL. Not granted to PUBLIC.
#[pg_extern(volatile, schema = "memory_internal", name = "_superseding")]
fn superseding() -> Option<String> {
    SUPERSEDING.with(|s| s.borrow().clone())
}

/// Opens or closes the audit-move gate; returns the previous state. Not granted to PUBLIC.
#[pg_extern(volatile, schema = "memory_internal", name = "_audit_move_gate")]
fn audit_move_gate(open: bool) -> bool {
    AUDIT_MOVE.with(|g| g.replace(open))
}

/// Whether memory.audit_ensure_partitions is moving rows out of the default partition.
#[pg_extern(volatile, schema = "memory_internal", name = "_audit_move_gate_open")]
fn audit_move_gate_open() -> bool {
    AUDIT_MOVE.with(Cell::get)
}

/// Whether CREATE EXTENSION (or ALTER EXTENSION UPDATE) is running its script.
#[pg_extern(volatile, schema = "memory_internal", name = "_creating_extension")]
fn creating_extension() -> bool {
    crate::pg::xact::creating_extension()
}

/// Opened by the sequencer (Rust only) around its DELETE of the pending entries it chained.
pub fn set_integrating(open: bool) {
    INTEGRATING.with(|g| g.set(open));
}

/// Whether the sequencer is deleting pending entries it chained (the append-only trigger of
/// memory.audit_pending asks). Not granted to PUBLIC.
#[pg_extern(volatile, schema = "memory_internal", name = "_audit_integrating")]
fn audit_integrating() -> bool {
    INTEGRATING.with(Cell::get)
}

/// Opens or closes the consent gate; returns the previous state. Not granted to PUBLIC: only
/// memory_ext's definer functions (revocation, maintenance) call it.
#[pg_extern(volatile, schema = "memory_internal", name = "_consent_gate")]
fn consent_gate(open: bool) -> bool {
    CONSENT_OPEN.with(|g| g.replace(open))
}

/// Whether a memory_ext function holds the consent gate open (the guards of the append-only
/// consent-era tables ask it).
#[pg_extern(volatile, schema = "memory_internal", name = "_consent_gate_open")]
fn consent_gate_open() -> bool {
    CONSENT_OPEN.with(Cell::get)
}
