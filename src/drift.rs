//! The persona drift detectors (docs/design.md#consent-and-drift).
//!
//! `memory_internal._feedback_polarity()` (BEFORE INSERT on `memory.user_feedback`) fixes a comment's
//! lexicon polarity when it is written; `memory_internal._detect_drift()` (AFTER INSERT on
//! `memory.user_feedback`, `memory.thread_refreshes` and `memory.watch_question_updates`) runs the
//! four detectors in the writing transaction. The rules are `memory_core::drift`; this module
//! reads what a detector needs (the consent in force and the same user's earlier rows: every
//! lookup is keyed by the new row's org and user first, `of_user`) by backward scans of
//! the tables' own indexes (`pg::scan`: no statement is parsed, planned or started per row) and
//! appends what is found to `memory.persona_drift_log` and to the org's audit chain
//! (`memory.drift.detected`, naming the kind, never the signals' text).
//!
//! Both triggers are SECURITY INVOKER C functions that run only on those tables (39P01 elsewhere).
//! They send no SQL per row: the lookups are index scans, a finding is written straight into
//! `memory.persona_drift_log` (`pg::bulk`, as the audit log is written) and its event through the
//! audit `Appender` (as the extension owner, pinned `search_path`). The writer's org was checked
//! by the tables' row-level security before the row got here. The lexicon, the thresholds and
//! the tables' and indexes' oids are cached per backend and dropped when those change (their
//! row and TRUNCATE triggers send a relcache invalidation), so a row reads neither settings table; each
//! user's consent is cached too (`ConsentCache`), read under a snapshot taken then and dropped
//! when consent rows change (`memory_internal._consents_changed()`).
//!
//! This file is long because each of the four detectors reads its own rows by index scan here;
//! the reads share the settings, the consent check and the recording of findings.

use crate::errors::{code, MxError, OrRaise};
use crate::pg::scan::{self, Key, Lookup};
use crate::pg::spi::read_latest;
use crate::pg::tuple::InsertedRow;
use memory_core::drift::{self as rules, Lexicon, Thresholds};
use pgrx::prelude::*;
use pgrx::spi::SpiClient;
use std::cell::RefCell;
use std::rc::Rc;

/// The lexicon, the thresholds, the oids of the tables the triggers belong to and of the
/// indexes the detectors read (backward, latest first), and the column numbers they read.
struct Settings {
    lexicon_rel: pg_sys::Oid,
    thresholds_rel: pg_sys::Oid,
    feedback: pg_sys::Oid,
    refreshes: pg_sys::Oid,
    watch: pg_sys::Oid,
    consents: pg_sys::Oid,
    /// memory.consents (org_id, user_id, version)
    consents_key: pg_sys::Oid,
    /// memory.consents' receipt index: not read, only invalidated by `memory_internal._consents_changed()`
    /// when consent rows change, so that a new consent version drops the cached consents
    /// (`CONSENT`) without the DDL signal (an invalidation of the table itself) that drops these
    /// settings. InvalidOid (consents are then not cached) when the index is missing, or the two
    /// invalidating triggers are not both there and enabled ALWAYS.
    consents_signal: pg_sys::Oid,
    /// memory.user_feedback (org_id, user_id, related_object_ref, created_at, id)
    feedback_by_object: pg_sys::Oid,
    /// memory.user_feedback (org_id, user_id, comment_polarity, created_at, id) WHERE comment_polarity IS NOT NULL
    feedback_by_polarity: pg_sys::Oid,
    /// memory.thread_refreshes (org_id, user_id, thread_id, created_at, id)
    refreshes_by_thread: pg_sys::Oid,
    /// memory.watch_question_updates (org_id, user_id, watch_question_id, created_at, id)
    watch_by_question: pg_sys::Oid,
    /// memory.consent_scope and its label save_to_profile (`memory_core::consent::DRIFT_NEEDS`).
    scope_type: pg_sys::Oid,
    save_to_profile: pg_sys::Oid,
    /// memory.persona_drift_log, and the memory.drift_signal labels' oids.
    drift_log: pg_sys::Oid,
    signal_kinds: Vec<(String, pg_sys::Oid)>,
    col: Columns,
    lexicon: Lexicon,
    thresholds: Thresholds,
}

/// The scans' keys and the columns they read assume the tables and indexes as memory_ext makes
/// them (column types, each index's leading key columns): anything else is refused (55000)
/// rather than read with the wrong comparison.
fn changed(what: String) -> MxError {
    MxError::new(code::NOT_INSTALLED, format!("memory_ext's drift detectors cannot read {what}"))
        .hint("The table or index was changed from what memory_ext made; restore it as docs/reference.md \"Consent and user contexts\" lists it.")
}

/// The number of column `name` of `rel`, which must be of type `typ`.
fn column(rel: pg_sys::Oid, name: &std::ffi::CStr, typ: pg_sys::Oid) -> Result<i16, MxError> {
    let n = scan::attnum(rel, name).ok_or_else(|| changed(format!("column {name:?} of relation {}", rel.to_u32())))?;
    if scan::atttype(rel, n) != typ {
        return Err(changed(format!("column {name:?} of relation {} (not of the type memory_ext made it)", rel.to_u32())));
    }
    Ok(n)
}

/// The key columns every lookup of a user's earlier rows starts with: a detector compares a user's
/// activity only with the same user's earlier activity in the same org (`of_user`).
const USER_KEY: [(&std::ffi::CStr, pg_sys::Oid); 2] = [(c"org_id", pg_sys::TEXTOID), (c"user_id", pg_sys::TEXTOID)];

/// Each index's leading key columns are the table's columns named (of the types the scan keys
/// compare): `USER_KEY`, then the columns listed.
fn check_indexes(indexes: &[(pg_sys::Oid, pg_sys::Oid, &[(&std::ffi::CStr, pg_sys::Oid)])]) -> Result<(), MxError> {
    for &(index, rel, rest) in indexes {
        let keys = scan::index_key_columns(index).ok_or_else(|| changed(format!("index {}", index.to_u32())))?;
        let cols: Vec<(&std::ffi::CStr, pg_sys::Oid)> = USER_KEY.iter().chain(rest).copied().collect();
        let want: Vec<i16> = cols.iter().map(|&(c, t)| column(rel, c, t)).collect::<Result<_, _>>()?;
        if keys.len() < want.len() || keys[..want.len()] != want[..] {
            let names: Vec<String> = cols.iter().map(|(c, _)| c.to_string_lossy().into_owned()).collect();
            return Err(changed(format!("index {} (its key columns are not ({}))", index.to_u32(), names.join(", "))));
        }
    }
    Ok(())
}

/// Column numbers of what the lookups read.
struct Columns {
    consent_scopes: i16,
    fb_id: i16,
    fb_rating: i16,
    fb_created_at: i16,
    fb_object: i16,
    fb_cognition: i16,
    rf_id: i16,
    rf_thesis: i16,
    rf_created_at: i16,
    wq_id: i16,
    wq_status: i16,
    wq_created_at: i16,
}

impl Columns {
    fn read(consents: pg_sys::Oid, feedback: pg_sys::Oid, refreshes: pg_sys::Oid, watch: pg_sys::Oid, scope_type: pg_sys::Oid) -> Result<Columns, MxError> {
        let (text, tz, uuid) = (pg_sys::TEXTOID, pg_sys::TIMESTAMPTZOID, pg_sys::UUIDOID);
        let scopes = scan::array_type_of(scope_type);
        if scope_type == pg_sys::InvalidOid || scopes == pg_sys::InvalidOid {
            return Err(changed("memory.consents.scopes (not memory.consent_scope[])".into()));
        }
        Ok(Columns {
            consent_scopes: column(consents, c"scopes", scopes)?,
            fb_id: column(feedback, c"id", uuid)?,
            fb_rating: column(feedback, c"rating", text)?,
            fb_created_at: column(feedback, c"created_at", tz)?,
            fb_object: column(feedback, c"related_object_ref", text)?,
            fb_cognition: column(feedback, c"cognition_object", pg_sys::JSONBOID)?,
            rf_id: column(refreshes, c"id", uuid)?,
            rf_thesis: column(refreshes, c"main_thesis", text)?,
            rf_created_at: column(refreshes, c"created_at", tz)?,
            wq_id: column(watch, c"id", uuid)?,
            wq_status: column(watch, c"status", text)?,
            wq_created_at: column(watch, c"created_at", tz)?,
        })
    }
}

/// Whether the latest consent of (org, user) holds save_to_profile, as read under a snapshot
/// taken then (`Lookup::latest`), for the oids it was read with. Dropped on an invalidation of
/// memory.consents or of its signal index (every change of consent rows sends one, at commit to
/// the other backends and at the next command to this one), or of every relation.
struct ConsentCache {
    consents: pg_sys::Oid,
    signal: pg_sys::Oid,
    held: std::collections::HashMap<(Vec<u8>, Vec<u8>), bool>,
    /// The keys' bytes.
    bytes: usize,
}

/// At most this many users' consents, and this many bytes of their keys, are kept per backend
/// (then the cache starts afresh); a key longer than `CONSENT_KEY_MAX` is not kept at all.
const CONSENT_CACHE_MAX: usize = 16_384;
const CONSENT_CACHE_BYTES: usize = 2 << 20;
const CONSENT_KEY_MAX: usize = 512;

thread_local! {
    // By the relation a trigger fired on: on a single node every table shares one; on Citus
    // each shard group has its own (the tables' and indexes' shards on this node).
    static SETTINGS: RefCell<std::collections::HashMap<pg_sys::Oid, Rc<Settings>>> = RefCell::new(std::collections::HashMap::new());
    static CONSENT: RefCell<Option<ConsentCache>> = const { RefCell::new(None) };
}

fn forget(relid: pg_sys::Oid) {
    SETTINGS.with(|s| {
        let mut s = s.borrow_mut();
        if relid == pg_sys::InvalidOid {
            s.clear();
            return;
        }
        s.retain(|_, x| {
            ![x.lexicon_rel, x.thresholds_rel, x.feedback, x.refreshes, x.watch, x.consents, x.consents_key, x.consents_signal,
              x.feedback_by_object, x.feedback_by_polarity, x.refreshes_by_thread, x.watch_by_question, x.drift_log]
                .contains(&relid)
        });
    });
    CONSENT.with(|c| {
        let mut c = c.borrow_mut();
        if c.as_ref().is_some_and(|x| relid == pg_sys::InvalidOid || relid == x.consents || relid == x.signal) {
            *c = None;
        }
    });
}

pub fn init() {
    crate::pg::callbacks::on_relcache(forget);
}

fn cached(fired: pg_sys::Oid) -> Option<Rc<Settings>> {
    SETTINGS.with(|s| s.borrow().get(&fired).cloned())
}

/// The settings, read as the extension owner when not cached.
/// The settings for a trigger that fired on `fired`: the tables and indexes of its shard group
/// when it is a Citus shard (`memory_internal._in_group`), else memory_ext's tables themselves.
fn settings(client: &SpiClient, fired: pg_sys::Oid) -> Result<Rc<Settings>, MxError> {
    if let Some(s) = cached(fired) {
        return Ok(s);
    }
    let fill = crate::pg::callbacks::Fill::begin();
    let err = MxError::spi_in("drift");
    let row = client
        .select(
            "SELECT 'memory.drift_lexicon'::pg_catalog.regclass::pg_catalog.oid, 'memory.drift_thresholds'::pg_catalog.regclass::pg_catalog.oid,
                    memory_internal._in_group('memory.user_feedback', $1), memory_internal._in_group('memory.thread_refreshes', $1),
                    memory_internal._in_group('memory.watch_question_updates', $1), memory_internal._in_group('memory.consents', $1),
                    memory_internal._in_group('memory.consents_pkey', $1), memory_internal._in_group('memory.user_feedback_user', $1),
                    memory_internal._in_group('memory.user_feedback_polarity', $1),
                    memory_internal._in_group('memory.thread_refreshes_thread', $1),
                    memory_internal._in_group('memory.watch_question_updates_question', $1),
                    'memory.consent_scope'::pg_catalog.regtype::pg_catalog.oid,
                    (SELECT e.oid FROM pg_catalog.pg_enum e
                      WHERE e.enumtypid OPERATOR(pg_catalog.=) 'memory.consent_scope'::pg_catalog.regtype
                        AND e.enumlabel OPERATOR(pg_catalog.=) $2),
                    memory_internal._in_group('memory.persona_drift_log', $1),
                    (SELECT memory_internal._in_group(pg_catalog.to_regclass('memory.consents_receipt_id_key'), $1)
                      WHERE (SELECT pg_catalog.count(*) FROM pg_catalog.pg_trigger tg
                              WHERE tg.tgrelid OPERATOR(pg_catalog.=) memory_internal._in_group('memory.consents', $1)
                                AND tg.tgname OPERATOR(pg_catalog.=) ANY ('{memory_consents_changed,memory_consents_changed_truncate}'::pg_catalog.name[])
                                AND tg.tgenabled OPERATOR(pg_catalog.=) 'A') OPERATOR(pg_catalog.=) 2)",
            Some(1),
            &[fired.into(), memory_core::consent::DRIFT_NEEDS.name().into()],
        )
        .map_err(&err)?
        .first();
    let oid = |i: usize| -> Result<pg_sys::Oid, MxError> { Ok(row.get::<pg_sys::Oid>(i).map_err(&err)?.unwrap_or(pg_sys::InvalidOid)) };
    let (lexicon_rel, thresholds_rel, feedback, refreshes, watch) = (oid(1)?, oid(2)?, oid(3)?, oid(4)?, oid(5)?);
    let (consents, consents_key, feedback_by_object, feedback_by_polarity) = (oid(6)?, oid(7)?, oid(8)?, oid(9)?);
    let (refreshes_by_thread, watch_by_question, scope_type, save_to_profile) = (oid(10)?, oid(11)?, oid(12)?, oid(13)?);
    let (drift_log, consents_signal) = (oid(14)?, oid(15)?);
    let mut signal_kinds = Vec::new();
    for r in client
        .select(
            "SELECT e.enumlabel::pg_catalog.text, e.oid FROM pg_catalog.pg_enum e
              WHERE e.enumtypid OPERATOR(pg_catalog.=) 'memory.drift_signal'::pg_catalog.regtype",
            None,
            &[],
        )
        .map_err(&err)?
    {
        if let (Some(l), Some(o)) = (r.get::<String>(1).map_err(&err)?, r.get::<pg_sys::Oid>(2).map_err(&err)?) {
            signal_kinds.push((l, o));
        }
    }
    let col = Columns::read(consents, feedback, refreshes, watch, scope_type)?;
    let (text, tz, int2) = (pg_sys::TEXTOID, pg_sys::TIMESTAMPTZOID, pg_sys::INT2OID);
    check_indexes(&[
        (consents_key, consents, &[(c"version", pg_sys::INT4OID)]),
        (feedback_by_object, feedback, &[(c"related_object_ref", text), (c"created_at", tz)]),
        (feedback_by_polarity, feedback, &[(c"comment_polarity", int2), (c"created_at", tz)]),
        (refreshes_by_thread, refreshes, &[(c"thread_id", text), (c"created_at", tz)]),
        (watch_by_question, watch, &[(c"watch_question_id", text), (c"created_at", tz)]),
    ])?;
    // Under a snapshot taken now: a cache dropped by another session's change is never refilled
    // with the rows that change replaced (spi::read_latest).
    let mut words: Vec<(String, i16)> = Vec::new();
    let lex = read_latest(client, c"SELECT l.word, l.polarity FROM memory.drift_lexicon l", &[])?;
    for i in 0..lex.len() {
        if let (Some(w), Some(p)) = (lex.get::<String>(i, 1)?, lex.get::<i16>(i, 2)?) {
            words.push((w, p));
        }
    }
    let mut thresholds = Thresholds::missing();
    let th = read_latest(client, c"SELECT t.name, t.value::pg_catalog.float8 FROM memory.drift_thresholds t", &[])?;
    for i in 0..th.len() {
        if let (Some(n), Some(v)) = (th.get::<String>(i, 1)?, th.get::<f64>(i, 2)?) {
            thresholds.set(&n, v);
        }
    }
    let s = Rc::new(Settings {
        lexicon_rel,
        thresholds_rel,
        feedback,
        refreshes,
        watch,
        consents,
        consents_key,
        consents_signal,
        feedback_by_object,
        feedback_by_polarity,
        refreshes_by_thread,
        watch_by_question,
        scope_type,
        save_to_profile,
        drift_log,
        signal_kinds,
        col,
        lexicon: Lexicon::new(words),
        thresholds,
    });
    if fill.keep() {
        SETTINGS.with(|c| {
            let mut c = c.borrow_mut();
            // (Bounded: a backend on a worker may see many shard groups.)
            if c.len() >= 1024 {
                c.clear();
            }
            c.insert(fired, s.clone());
        });
    }
    Ok(s)
}

fn settings_as_owner(fired: pg_sys::Oid) -> Result<Rc<Settings>, MxError> {
    if let Some(s) = cached(fired) {
        return Ok(s);
    }
    Spi::connect(|client| {
        let _owner = crate::trust::AsOwner::enter()?;
        settings(client, fired)
    })
}

fn wrong_table(fname: &str, relid: pg_sys::Oid, tables: &str) -> MxError {
    MxError::new(code::TRIGGER_PROTOCOL, format!("{fname} fired on relation {} instead of {tables}", relid.to_u32()))
}

// ---------------------------------------------------------------------------------------------
// The comment's polarity.

/// `memory_internal._feedback_polarity()`: BEFORE INSERT FOR EACH ROW on memory.user_feedback. Sets
/// `comment_polarity` from the comment by the lexicon of this moment (NULL for no comment, no
/// match or a tie); a restore (`memory.restore_mode`) keeps the stored value.
#[pg_trigger(sql = r#"
CREATE FUNCTION memory_internal."_feedback_polarity"() RETURNS TRIGGER LANGUAGE c AS 'MODULE_PATHNAME', 'memory_feedback_polarity_checked';
"#)]
fn feedback_polarity<'a>(
    trigger: &'a PgTrigger<'a>,
) -> Result<Option<PgHeapTuple<'a, AllocatedByPostgres>>, std::convert::Infallible> {
    Ok(Some(polarity_row(trigger.trigger_data()).or_raise()))
}

fn polarity_row(td: &pg_sys::TriggerData) -> Result<PgHeapTuple<'static, AllocatedByPostgres>, MxError> {
    const NAME: &str = "memory_internal._feedback_polarity()";
    let row = InsertedRow::new(td, NAME, true)?;
    let s = settings_as_owner(row.relid())?;
    if row.relid() != s.feedback {
        return Err(wrong_table(NAME, row.relid(), "memory.user_feedback"));
    }
    if crate::gucs::restore_mode() {
        return Ok(row.unchanged());
    }
    let polarity = row.text("comment")?.and_then(|c| s.lexicon.polarity(&c));
    let stored = row.int("comment_polarity")?.map(|p| p as i16);
    if stored == polarity {
        return Ok(row.unchanged());
    }
    row.with_int2("comment_polarity", polarity)
}

crate::checked_trigger_entry!(memory_feedback_polarity_checked, pg_finfo_memory_feedback_polarity_checked, "memory_internal._feedback_polarity()", feedback_polarity_wrapper);

// ---------------------------------------------------------------------------------------------
// The detectors.

/// `memory_internal._detect_drift()`: AFTER INSERT FOR EACH ROW on memory.user_feedback,
/// memory.thread_refreshes and memory.watch_question_updates. Only users whose latest consent
/// holds `save_to_profile` are observed; nothing runs in `memory.restore_mode`.
#[pg_trigger(sql = r#"
CREATE FUNCTION memory_internal."_detect_drift"() RETURNS TRIGGER LANGUAGE c AS 'MODULE_PATHNAME', 'memory_detect_drift_checked';
"#)]
fn detect_drift<'a>(
    trigger: &'a PgTrigger<'a>,
) -> Result<Option<PgHeapTuple<'a, AllocatedByPostgres>>, std::convert::Infallible> {
    detect(trigger.trigger_data()).or_raise();
    Ok(None)
}

crate::checked_trigger_entry!(memory_detect_drift_checked, pg_finfo_memory_detect_drift_checked, "memory_internal._detect_drift()", detect_drift_wrapper);

/// `memory_internal._consents_changed()`: BEFORE INSERT OR UPDATE OR DELETE FOR EACH ROW, and AFTER
/// TRUNCATE, on memory.consents (row triggers, which logical replication's apply fires too):
/// every backend drops its cached consents (`ConsentCache`), through the receipt index, so the
/// detectors' settings (dropped on DDL of the table itself) stay. Before the row is written, so
/// that a detector reading it later in the same statement (after advancing the command counter,
/// which processes this backend's pending invalidations) neither uses nor keeps an older copy.
#[pg_trigger(sql = r#"
CREATE FUNCTION memory_internal."_consents_changed"() RETURNS TRIGGER LANGUAGE c AS 'MODULE_PATHNAME', 'memory_consents_changed_checked';
"#)]
fn consents_changed<'a>(
    trigger: &'a PgTrigger<'a>,
) -> Result<Option<PgHeapTuple<'a, AllocatedByPostgres>>, std::convert::Infallible> {
    if let Ok(relid) = trigger.relid() {
        crate::pg::callbacks::invalidate_rows(relid, CONSENTS_SIGNAL);
    }
    // The row goes on unchanged (NULL for the TRUNCATE statement trigger, where it is ignored).
    Ok(trigger.new().or_else(|| trigger.old()))
}

crate::checked_trigger_entry!(memory_consents_changed_checked, pg_finfo_memory_consents_changed_checked, "memory_internal._consents_changed()", consents_changed_wrapper);

/// The index of memory.consents that `memory_internal._consents_changed()` invalidates.
const CONSENTS_SIGNAL: &std::ffi::CStr = c"consents_receipt_id_key";

/// Whether the latest consent of the row's user holds save_to_profile
/// (`memory_core::consent::DRIFT_NEEDS`): the consent in force is the latest version's scopes,
/// the one rule SQL reads in `memory_internal._consent_scopes` (see memory_core::consent's
/// notes), read here by an index scan for speed. memory.consents read
/// backward by (org_id, user_id, version), the first row being the latest version, under a
/// snapshot taken now (a revocation committed after the writing transaction began is in force
/// for it too), and kept per backend until consent rows change (`ConsentCache`).
fn consent_in_force(s: &Settings, row: &InsertedRow, org: pg_sys::Datum, user: pg_sys::Datum) -> Result<bool, MxError> {
    let key = (row.bytes("org_id")?.unwrap_or_default(), row.bytes("user_id")?.unwrap_or_default());
    let cacheable = s.consents_signal != pg_sys::InvalidOid;
    if cacheable {
        let hit = CONSENT.with(|c| {
            c.borrow().as_ref().filter(|x| x.consents == s.consents && x.signal == s.consents_signal).and_then(|x| x.held.get(&key).copied())
        });
        if let Some(held) = hit {
            return Ok(held);
        }
    }
    let fill = crate::pg::callbacks::Fill::begin();
    let (held, written_here) = {
        let lk = Lookup::latest();
        let mut c = lk.backward(s.consents, s.consents_key, &of_user(org, user, []))?;
        let found = c.next();
        (found && c.datum(s.col.consent_scopes).is_some_and(|d| scan::array_holds(d, s.scope_type, pg_sys::Datum::from(s.save_to_profile))),
         c.written_here())
    };
    // A consent version this transaction wrote may still roll back (with the statement that wrote
    // it, before its invalidation was sent): used, not kept.
    let size = key.0.len() + key.1.len();
    if cacheable && !written_here && size <= CONSENT_KEY_MAX && fill.keep() {
        CONSENT.with(|c| {
            let mut c = c.borrow_mut();
            let fresh = c.as_ref().is_none_or(|x| {
                x.consents != s.consents || x.signal != s.consents_signal || x.held.len() >= CONSENT_CACHE_MAX || x.bytes + size > CONSENT_CACHE_BYTES
            });
            if fresh {
                *c = Some(ConsentCache { consents: s.consents, signal: s.consents_signal, held: Default::default(), bytes: 0 });
            }
            if let Some(x) = c.as_mut() {
                if x.held.insert(key, held).is_none() {
                    x.bytes += size;
                }
            }
        });
    }
    Ok(held)
}

/// Where a row stands in the order rows were written: its created_at, then (for rows that share
/// it, as the rows of one transaction share `now()`) rows of other transactions first, then this
/// transaction's by the command that inserted them, then by id (the rows of one statement, whose
/// triggers all fire after every row is in). The detectors compare a new row with the rows before
/// it in this order, so a reversal inside one multi-row statement is one finding, not one per row.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Written {
    at: i64,
    here: Option<pg_sys::CommandId>,
    id: [u8; 16],
}

impl Written {
    fn of(f: &scan::Scan, created_at: i16, id: i16) -> Option<Written> {
        Some(Written { at: f.datum(created_at)?.value() as i64, here: f.inserting_command(), id: f.uuid(id)? })
    }
}

/// Reads a backward scan (latest created_at first, then descending id) for the rows before
/// `new` in `Written` order: `visit(row, its place, shares new's created_at)`. The rows sharing
/// the new row's created_at come first, in any order among themselves (what `visit` returns for
/// them is not asked), then each earlier row in order, until `visit` returns false.
fn rows_before(f: &mut scan::Scan, created_at: i16, id: i16, new: Written, mut visit: impl FnMut(&scan::Scan, Written, bool) -> bool) {
    while f.next() {
        let Some(w) = Written::of(f, created_at, id) else { continue };
        if w >= new {
            continue;
        }
        let same = w.at == new.at;
        if !visit(f, w, same) && !same {
            break;
        }
    }
}

/// The keys of a lookup of the user's own earlier rows: the index's first two columns are
/// (org_id, user_id) (`USER_KEY`, checked when the settings are read), equal to the new row's,
/// then the keys given (from the third column on). Every detector reads its earlier rows through
/// this, so no user's drift is ever built from another user's activity (issue 34 item 17).
fn of_user<const N: usize>(org: pg_sys::Datum, user: pg_sys::Datum, rest: [Key; N]) -> Vec<Key> {
    let mut keys = Vec::with_capacity(2 + N);
    keys.push(Key::eq(1, pg_sys::F_TEXTEQ, org));
    keys.push(Key::eq(2, pg_sys::F_TEXTEQ, user));
    keys.extend(rest);
    keys
}

fn at_or_before(attno: i16, at: pg_sys::Datum) -> Key {
    Key { attno, strategy: pg_sys::BTLessEqualStrategyNumber, proc: pg_sys::F_TIMESTAMPTZ_LE, arg: at }
}

fn after(attno: i16, at: pg_sys::Datum) -> Key {
    Key { attno, strategy: pg_sys::BTGreaterStrategyNumber, proc: pg_sys::F_TIMESTAMPTZ_GT, arg: at }
}

fn timestamptz(d: Option<pg_sys::Datum>) -> Option<TimestampWithTimeZone> {
    d.and_then(|d| TimestampWithTimeZone::try_from(d.value() as i64).ok())
}

/// A finding, as the drift row and its event carry it. The current signal was captured in the
/// new row (its time, and `object_ref`).
struct Finding {
    kind: &'static str,
    object_ref: String,
    /// The new row's cognition object (feedback only).
    cognition_object: bool,
    prior_value: String,
    prior_at: Option<TimestampWithTimeZone>,
    /// The object the prior signal was captured in (None: no earlier signal, as when
    /// feedback_conflict_min is 0).
    prior_ref: Option<String>,
    current_value: String,
    changed_inferences: Option<i32>,
    /// A `format` template: `%1$s` the prior time, `%2$s` the current time (as `time_format`).
    summary: String,
    time_format: &'static str,
}

/// Text put into a `format` template as it is.
fn literal(s: &str) -> String {
    s.replace('%', "%%")
}

/// The new row as every detector sees it.
struct NewRow<'a> {
    s: &'a Settings,
    row: &'a InsertedRow<'a>,
    org: pg_sys::Datum,
    user: pg_sys::Datum,
    at: pg_sys::Datum,
    new: Written,
    new_id: Option<[u8; 16]>,
}

/// `memory_internal._detect_drift()`: the detectors of the table the row was written to, then
/// the findings recorded.
fn detect(td: &pg_sys::TriggerData) -> Result<(), MxError> {
    const NAME: &str = "memory_internal._detect_drift()";
    let row = InsertedRow::new(td, NAME, false)?;
    if crate::gucs::restore_mode() {
        return Ok(());
    }
    let s = settings_as_owner(row.relid())?;
    let relid = row.relid();
    if relid != s.feedback && relid != s.refreshes && relid != s.watch {
        return Err(wrong_table(NAME, relid, "memory.user_feedback, memory.thread_refreshes or memory.watch_question_updates"));
    }
    let (Some(org), Some(user), Some(at)) = (row.datum("org_id")?, row.datum("user_id")?, row.datum("created_at")?) else {
        return Ok(());
    };
    let new_id = row.uuid("id")?;
    let new = Written { at: at.value() as i64, here: Some(row.command_id()), id: new_id.unwrap_or([0xff; 16]) };
    let n = NewRow { s: &s, row: &row, org, user, at, new, new_id };
    // The lookups read memory_ext's closed tables directly (as the extension owner would: the
    // writer's org was checked by row-level security before the row got here).
    let found = if relid == s.feedback {
        on_feedback(&n)?
    } else if relid == s.refreshes {
        refresh_stance_flip(&n)?.into_iter().collect()
    } else {
        reopened(&n)?.into_iter().collect()
    };
    if found.is_empty() {
        return Ok(());
    }
    Spi::connect(|client| {
        let _owner = crate::trust::AsOwner::enter()?;
        record(client, &s, &row, found)
    })
}

/// The consent check every detector makes before it reads: the command counter first (a consent
/// version written earlier in this statement has queued its invalidation, which this processes
/// before the cache is asked); None when save_to_profile is not in force.
fn consented(n: &NewRow) -> Result<Option<Lookup>, MxError> {
    let lk = Lookup::begin();
    Ok(consent_in_force(n.s, n.row, n.org, n.user)?.then_some(lk))
}

/// A feedback row: grade_reversal and feedback_conflict.
fn on_feedback(n: &NewRow) -> Result<Vec<Finding>, MxError> {
    let (row, t) = (n.row, &n.s.thresholds);
    let rating_polarity = row.text("rating")?.as_deref().and_then(rules::rating_polarity);
    let comment_polarity = row.int("comment_polarity")?.map(|p| p as i32);
    let grade_days = (!t.grade_reversal_days.is_nan()).then(|| Thresholds::whole(t.grade_reversal_days));
    let object = row.datum("related_object_ref")?;
    let look_grade = rating_polarity.filter(|_| grade_days.is_some() && object.is_some());
    let look_conflict = comment_polarity.filter(|_| !t.feedback_conflict_min.is_nan());
    if look_grade.is_none() && look_conflict.is_none() {
        return Ok(Vec::new());
    }
    let Some(lk) = consented(n)? else { return Ok(Vec::new()) };
    let mut found = Vec::new();
    if let (Some(pol), Some(days), Some(object)) = (look_grade, grade_days, object) {
        found.extend(grade_reversal(n, &lk, pol, days, object)?);
    }
    if let Some(pol) = look_conflict {
        found.extend(feedback_conflict(n, &lk, pol)?);
    }
    Ok(found)
}

/// grade_reversal: the latest earlier rating of the same object within the window, of the other
/// polarity.
fn grade_reversal(n: &NewRow, lk: &Lookup, pol: i16, days: i32, object: pg_sys::Datum) -> Result<Option<Finding>, MxError> {
    let NewRow { s, row, org, user, at, new, .. } = *n;
    let c = &s.col;
    // The window counts calendar days in the session's time zone (timestamptz - interval).
    let since = scan::minus_days(at, days);
    let mut f = lk.backward(
        s.feedback,
        s.feedback_by_object,
        &of_user(org, user, [Key::eq(3, pg_sys::F_TEXTEQ, object), at_or_before(4, at), after(4, since)]),
    )?;
    // The latest rating before the new row: the greatest among those sharing its
    // created_at, else the first of the earlier ones.
    let mut latest: Option<(Written, String, Option<TimestampWithTimeZone>)> = None;
    let rating = |f: &scan::Scan| f.bytes(c.fb_rating).map(|b| String::from_utf8_lossy(b).into_owned());
    rows_before(&mut f, c.fb_created_at, c.fb_id, new, |f, w, same| {
        let Some(r) = rating(f) else { return true };
        if same {
            if latest.as_ref().is_none_or(|l| w > l.0) {
                latest = Some((w, r, timestamptz(f.datum(c.fb_created_at))));
            }
            return true;
        }
        if latest.is_none() {
            latest = Some((w, r, timestamptz(f.datum(c.fb_created_at))));
        }
        false
    });
    drop(f);
    if let Some((_, prior, prior_at)) = latest {
        if rules::is_grade_reversal(&prior, pol) {
            let new_rating = row.text("rating")?.unwrap_or_default();
            let object_ref = row.text("related_object_ref")?.unwrap_or_default();
            return Ok(Some(Finding {
                kind: "grade_reversal",
                object_ref: object_ref.clone(),
                cognition_object: true,
                prior_value: prior.clone(),
                prior_at,
                prior_ref: Some(object_ref),
                current_value: new_rating.clone(),
                changed_inferences: None,
                summary: format!("%1$s graded {}, then %2$s graded {}", literal(&prior), literal(&new_rating)),
                time_format: "YYYY-MM-DD",
            }));
        }
    }
    Ok(None)
}

/// feedback_conflict: the latest earlier comments of the other polarity on objects of the same
/// kind, at most as many as the threshold asks for.
fn feedback_conflict(n: &NewRow, lk: &Lookup, pol: i32) -> Result<Option<Finding>, MxError> {
    let NewRow { s, row, org, user, at, new, .. } = *n;
    let (c, t) = (&s.col, &s.thresholds);
    let cognition = row.datum("cognition_object")?;
    let kind = scan::jsonb_field_text(cognition, "type");
    let limit = rules::conflict_lookups(t);
    let mut n = 0i64;
    let mut latest: Option<(Written, Option<TimestampWithTimeZone>, Option<String>)> = None;
    let mut f = lk.backward(
        s.feedback,
        s.feedback_by_polarity,
        &of_user(org, user, [Key::eq(3, pg_sys::F_INT2EQ, pg_sys::Datum::from((-pol) as i16 as isize as usize)), at_or_before(4, at)]),
    )?;
    // Every opposing comment sharing the new row's created_at that comes before it, then
    // earlier ones until the threshold is reached; the latest is the greatest of them.
    let same_kind = |f: &scan::Scan| scan::jsonb_field_text(f.datum(c.fb_cognition), "type") == kind;
    let at_ref = |f: &scan::Scan| (timestamptz(f.datum(c.fb_created_at)), f.bytes(c.fb_object).map(|b| String::from_utf8_lossy(b).into_owned()));
    if limit > 0 {
        rows_before(&mut f, c.fb_created_at, c.fb_id, new, |f, w, same| {
            if !same && n >= limit {
                return false;
            }
            if same_kind(f) {
                n += 1;
                if latest.as_ref().is_none_or(|l| w > l.0) {
                    let (a, r) = at_ref(f);
                    latest = Some((w, a, r));
                }
            }
            same || n < limit
        });
    }
    drop(f);
    let (latest_at, latest_ref) = latest.map_or((None, None), |l| (l.1, l.2));
    if rules::is_feedback_conflict(n, t) {
        let kind = kind.map(|k| String::from_utf8_lossy(&k).into_owned());
        return Ok(Some(Finding {
            kind: "feedback_conflict",
            object_ref: row.text("related_object_ref")?.unwrap_or_default(),
            cognition_object: true,
            prior_value: if pol > 0 { "negative" } else { "positive" }.to_string(),
            prior_at: latest_at,
            prior_ref: latest_ref,
            current_value: if pol > 0 { "positive" } else { "negative" }.to_string(),
            changed_inferences: None,
            summary: format!(
                "at least {n} earlier comments on {} objects point the other way, the latest on %1$s",
                literal(kind.as_deref().unwrap_or("untyped"))
            ),
            time_format: "YYYY-MM-DD",
        }));
    }
    Ok(None)
}

/// refresh_stance_flip: the user's latest refresh of the thread of at least
/// refresh_lookback_days before, with another thesis.
fn refresh_stance_flip(n: &NewRow) -> Result<Option<Finding>, MxError> {
    let NewRow { s, row, org, user, at, new_id, .. } = *n;
    let (c, t) = (&s.col, &s.thresholds);
    let changed = row.int("changed_inferences")?.unwrap_or(0) as i32;
    let Some(thread) = row.datum("thread_id")? else { return Ok(None) };
    if !rules::refresh_may_flip(changed, t) || t.refresh_lookback_days.is_nan() {
        return Ok(None);
    }
    let Some(lk) = consented(n)? else { return Ok(None) };
    // The user's latest refresh of the thread of at least refresh_lookback_days before.
    let before = scan::minus_days(at, Thresholds::whole(t.refresh_lookback_days) as i32);
    let mut r = lk.backward(
        s.refreshes,
        s.refreshes_by_thread,
        &of_user(org, user, [Key::eq(3, pg_sys::F_TEXTEQ, thread), at_or_before(4, before)]),
    )?;
    while r.next() {
        if r.uuid(c.rf_id) == new_id {
            continue;
        }
        let prior_thesis = r.bytes(c.rf_thesis).map(|b| String::from_utf8_lossy(b).into_owned()).unwrap_or_default();
        if rules::is_stance_flip(&prior_thesis, &row.text("main_thesis")?.unwrap_or_default(), t) {
            let thread = row.text("thread_id")?.unwrap_or_default();
            return Ok(Some(Finding {
                kind: "refresh_stance_flip",
                object_ref: format!("thread:{thread}"),
                cognition_object: false,
                prior_value: "thesis".into(),
                prior_at: timestamptz(r.datum(c.rf_created_at)),
                prior_ref: Some(format!("thread:{thread}")),
                current_value: "thesis".into(),
                changed_inferences: Some(changed),
                summary: format!("thesis of thread {} changed ({changed} inferences) since %1$s", literal(&thread)),
                time_format: "YYYY-MM-DD",
            }));
        }
        break;
    }
    Ok(None)
}

/// watch_question_resolved_then_reopened: a reopened question, against the user's latest
/// resolution of it.
fn reopened(n: &NewRow) -> Result<Option<Finding>, MxError> {
    let NewRow { s, row, org, user, at, new_id, .. } = *n;
    let (c, t) = (&s.col, &s.thresholds);
    if row.text("status")?.as_deref() != Some("reopened") {
        return Ok(None);
    }
    let Some(question) = row.datum("watch_question_id")? else { return Ok(None) };
    let Some(lk) = consented(n)? else { return Ok(None) };
    // The user's latest resolution of the question.
    let mut w = lk.backward(
        s.watch,
        s.watch_by_question,
        &of_user(org, user, [Key::eq(3, pg_sys::F_TEXTEQ, question), at_or_before(4, at)]),
    )?;
    while w.next() {
        if w.uuid(c.wq_id) == new_id || w.bytes(c.wq_status) != Some(b"resolved".as_slice()) {
            continue;
        }
        let resolved = w.datum(c.wq_created_at).map(|d| d.value() as i64);
        if let Some(resolved) = resolved {
            if rules::is_reopen_drift((at.value() as i64).saturating_sub(resolved), t) {
                let question = row.text("watch_question_id")?.unwrap_or_default();
                return Ok(Some(Finding {
                    kind: "watch_question_resolved_then_reopened",
                    object_ref: format!("watch_question:{question}"),
                    cognition_object: false,
                    prior_value: "resolved".into(),
                    prior_at: timestamptz(Some(pg_sys::Datum::from(resolved as usize))),
                    prior_ref: Some(format!("watch_question:{question}")),
                    current_value: "reopened".into(),
                    changed_inferences: None,
                    summary: format!("watch question {} resolved %1$s, reopened %2$s", literal(&question)),
                    time_format: "YYYY-MM-DD HH24:MI",
                }));
            }
        }
        break;
    }
    Ok(None)
}

/// A drift signal's cell: its jsonb laid out already, or JSON text for jsonb_in.
fn json_cell(j: &Result<Vec<u8>, String>) -> crate::pg::bulk::Cell<'_> {
    match j {
        Ok(laid_out) => crate::pg::bulk::Cell::Varlena(laid_out),
        Err(text) => crate::pg::bulk::Cell::JsonText(text),
    }
}

/// Appends the findings to the drift log and one `memory.drift.detected` event each to the org's
/// chain (the user pseudonymized).
fn record(client: &SpiClient, s: &Settings, row: &InsertedRow, found: Vec<Finding>) -> Result<(), MxError> {
    if found.is_empty() {
        return Ok(());
    }
    let org = row.text("org_id")?.unwrap_or_default();
    let user = row.text("user_id")?.unwrap_or_default();
    let at = row.int("created_at")?.unwrap_or_else(crate::pg::xact::xact_start_micros);
    let cognition = if found.iter().any(|f| f.cognition_object) { row.bytes("cognition_object")? } else { None };
    let now = crate::pg::xact::xact_start_micros();
    let mut ap = crate::audit::Appender::new(client)?;
    let actor = crate::audit::default_actor(&ap);
    // The drift rows go straight into the table (no statement per finding): values made here,
    // as the INSERT through SQL made them (jsonb_build_object's timestamps, to_char, format).
    let log = crate::pg::bulk::Opened::open(&[s.drift_log]);
    for f in found {
        let mut random = [0u8; 3];
        if !crate::pg::xact::strong_random(&mut random) {
            return Err(MxError::new(code::INTERNAL, "could not generate random bytes for a drift id"));
        }
        let id = rules::drift_id(crate::pg::xact::now_micros() + crate::audit::PG_EPOCH_UNIX_MICROS, random);
        let alert = f.kind == "grade_reversal" || f.kind == "refresh_stance_flip";
        let kind = s.signal_kinds.iter().find(|(l, _)| l == f.kind).map(|(_, o)| *o).ok_or_else(|| {
            MxError::new(code::NOT_INSTALLED, format!("memory.drift_signal has no label {}", f.kind))
        })?;
        let prior_at = f.prior_at.map(|t| pg_sys::TimestampTz::from(t));
        let signal = |value: &str, at: Option<i64>, object: Option<&str>, changed: Option<i32>| {
            let mut m = serde_json::Map::new();
            m.insert("value".into(), value.into());
            if let Some(at) = at {
                m.insert("captured_at".into(), crate::pg::xact::json_timestamptz(at).into());
            }
            if let Some(o) = object {
                m.insert("captured_in_object_ref".into(), o.into());
            }
            if let Some(c) = changed {
                m.insert("changed_inferences".into(), c.into());
            }
            let v = serde_json::Value::Object(m);
            // Laid out here when flat (strings only), else JSON text for jsonb_in.
            crate::audit::flat_jsonb(&v).ok_or_else(|| v.to_string())
        };

        let prior = signal(&f.prior_value, prior_at, f.prior_ref.as_deref(), None);
        let current = signal(&f.current_value, Some(at), Some(&f.object_ref), f.changed_inferences);
        let summary = rules::fill_summary(
            &f.summary,
            prior_at.map(|t| crate::pg::xact::to_char(t, f.time_format)).as_deref(),
            Some(&crate::pg::xact::to_char(at, f.time_format)),
        );
        use crate::pg::bulk::Cell;
        log.insert(
            0,
            &["drift_id", "org_id", "user_id", "object_ref", "cognition_object", "signal_kind", "prior_signal", "current_signal",
              "delta_summary", "triggers_alert", "schema_version", "created_at"],
            &[0],
            |_| {
                [
                    Cell::Varlena(id.as_bytes()),
                    Cell::Varlena(org.as_bytes()),
                    Cell::Varlena(user.as_bytes()),
                    Cell::Varlena(f.object_ref.as_bytes()),
                    match (&cognition, f.cognition_object) {
                        (Some(c), true) => Cell::Varlena(c),
                        _ => Cell::Null,
                    },
                    Cell::Oid(kind),
                    json_cell(&prior),
                    json_cell(&current),
                    Cell::Varlena(summary.as_bytes()),
                    Cell::Bool(alert),
                    Cell::Varlena(b"1.0"),
                    Cell::Timestamptz(now),
                ]
            },
        )?;
        ap.push(
            client,
            crate::audit::Pending {
                event_type: std::borrow::Cow::Borrowed(memory_core::events::DRIFT_DETECTED),
                org_id: Some(org.clone()),
                project_id: None,
                workspace_id: None,
                actor_id: Some(actor.clone()),
                payload: serde_json::json!({
                    "userId": ap.pseudonym(&user), "driftId": id, "signalKind": f.kind, "triggersAlert": alert,
                }),
                payload_text: None,
            },
        )?;
    }
    drop(log);
    ap.finish(client)
}
