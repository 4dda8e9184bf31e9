//! The persona drift detectors (SPEC §6 "Persona drift"; seed §4, §5.5, §9).
//!
//! `memory._feedback_polarity()` (BEFORE INSERT on `memory.user_feedback`) fixes a comment's
//! lexicon polarity when it is written; `memory._detect_drift()` (AFTER INSERT on
//! `memory.user_feedback`, `memory.thread_refreshes` and `memory.watch_question_updates`) runs the
//! four detectors in the writing transaction. The rules are `memory_core::drift`; this module
//! reads what a detector needs (the consent in force and the one earlier row, in one statement
//! per row through a kept plan) and appends what is found to `memory.persona_drift_log` and to the
//! org's audit chain (`memory.drift.detected`, naming the kind, never the signals' text).
//!
//! Both triggers are SECURITY INVOKER C functions that run only on those tables (39P01 elsewhere):
//! what they send runs as the extension owner (`trust::AsOwner`, pinned `search_path`), fixed
//! statements with the row's own column values as parameters. The writer's org was checked by
//! the tables' row-level security before the row got here. The lexicon and the thresholds are
//! cached per backend and dropped when their tables change (their statement triggers send a
//! relcache invalidation), so a row reads neither table.

use crate::errors::{code, MxError, OrRaise};
use crate::pg::spi::{kept, read_latest};
use crate::pg::tuple::InsertedRow;
use memory_core::drift::{self as rules, Lexicon, Thresholds};
use pgrx::datum::DatumWithOid;
use pgrx::prelude::*;
use pgrx::spi::SpiClient;
use std::cell::RefCell;
use std::rc::Rc;

/// The lexicon, the thresholds, and the oids of the tables the triggers belong to.
struct Settings {
    lexicon_rel: pg_sys::Oid,
    thresholds_rel: pg_sys::Oid,
    feedback: pg_sys::Oid,
    refreshes: pg_sys::Oid,
    watch: pg_sys::Oid,
    lexicon: Lexicon,
    thresholds: Thresholds,
}

thread_local! {
    static SETTINGS: RefCell<Option<Rc<Settings>>> = const { RefCell::new(None) };
}

fn forget(relid: pg_sys::Oid) {
    SETTINGS.with(|s| {
        let mut s = s.borrow_mut();
        let stale = s.as_ref().is_some_and(|x| {
            relid == pg_sys::InvalidOid
                || [x.lexicon_rel, x.thresholds_rel, x.feedback, x.refreshes, x.watch].contains(&relid)
        });
        if stale {
            *s = None;
        }
    });
}

pub fn init() {
    crate::pg::callbacks::on_relcache(forget);
}

fn cached() -> Option<Rc<Settings>> {
    SETTINGS.with(|s| s.borrow().clone())
}

/// The settings, read as the extension owner when not cached.
fn settings(client: &SpiClient) -> Result<Rc<Settings>, MxError> {
    if let Some(s) = cached() {
        return Ok(s);
    }
    let fill = crate::pg::callbacks::Fill::begin();
    let err = MxError::spi_in("drift");
    let row = client
        .select(
            "SELECT 'memory.drift_lexicon'::pg_catalog.regclass::pg_catalog.oid, 'memory.drift_thresholds'::pg_catalog.regclass::pg_catalog.oid,
                    'memory.user_feedback'::pg_catalog.regclass::pg_catalog.oid, 'memory.thread_refreshes'::pg_catalog.regclass::pg_catalog.oid,
                    'memory.watch_question_updates'::pg_catalog.regclass::pg_catalog.oid",
            Some(1),
            &[],
        )
        .map_err(&err)?
        .first();
    let oid = |i: usize| -> Result<pg_sys::Oid, MxError> { Ok(row.get::<pg_sys::Oid>(i).map_err(&err)?.unwrap_or(pg_sys::InvalidOid)) };
    let (lexicon_rel, thresholds_rel, feedback, refreshes, watch) = (oid(1)?, oid(2)?, oid(3)?, oid(4)?, oid(5)?);
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
    let s = Rc::new(Settings { lexicon_rel, thresholds_rel, feedback, refreshes, watch, lexicon: Lexicon::new(words), thresholds });
    if fill.keep() {
        SETTINGS.with(|c| *c.borrow_mut() = Some(s.clone()));
    }
    Ok(s)
}

fn settings_as_owner() -> Result<Rc<Settings>, MxError> {
    if let Some(s) = cached() {
        return Ok(s);
    }
    Spi::connect(|client| {
        let _owner = crate::trust::AsOwner::enter()?;
        settings(client)
    })
}

fn wrong_table(fname: &str, relid: pg_sys::Oid, tables: &str) -> MxError {
    MxError::new(code::TRIGGER_PROTOCOL, format!("{fname} fired on relation {} instead of {tables}", relid.to_u32()))
}

// ---------------------------------------------------------------------------------------------
// The comment's polarity.

/// `memory._feedback_polarity()`: BEFORE INSERT FOR EACH ROW on memory.user_feedback. Sets
/// `comment_polarity` from the comment by the lexicon of this moment (NULL for no comment, no
/// match or a tie); a restore (`memory.restore_mode`) keeps the stored value.
#[pg_trigger(sql = r#"
CREATE FUNCTION "_feedback_polarity"() RETURNS TRIGGER LANGUAGE c AS 'MODULE_PATHNAME', 'memory_feedback_polarity_checked';
"#)]
fn feedback_polarity<'a>(
    trigger: &'a PgTrigger<'a>,
) -> Result<Option<PgHeapTuple<'a, AllocatedByPostgres>>, std::convert::Infallible> {
    Ok(Some(polarity_row(trigger.trigger_data()).or_raise()))
}

fn polarity_row(td: &pg_sys::TriggerData) -> Result<PgHeapTuple<'static, AllocatedByPostgres>, MxError> {
    const NAME: &str = "memory._feedback_polarity()";
    let row = InsertedRow::new(td, NAME, true)?;
    let s = settings_as_owner()?;
    if row.relid() != s.feedback {
        return Err(wrong_table(NAME, row.relid(), "memory.user_feedback"));
    }
    if crate::gucs::RESTORE_MODE.get() {
        return Ok(row.unchanged());
    }
    let polarity = row.text("comment")?.and_then(|c| s.lexicon.polarity(&c));
    let stored = row.int("comment_polarity")?.map(|p| p as i16);
    if stored == polarity {
        return Ok(row.unchanged());
    }
    row.with_int2("comment_polarity", polarity)
}

crate::checked_trigger_entry!(memory_feedback_polarity_checked, pg_finfo_memory_feedback_polarity_checked, "memory._feedback_polarity()", feedback_polarity_wrapper);

// ---------------------------------------------------------------------------------------------
// The detectors.

/// `memory._detect_drift()`: AFTER INSERT FOR EACH ROW on memory.user_feedback,
/// memory.thread_refreshes and memory.watch_question_updates. Only users whose latest consent
/// holds `save_to_profile` are observed; nothing runs in `memory.restore_mode`.
#[pg_trigger(sql = r#"
CREATE FUNCTION "_detect_drift"() RETURNS TRIGGER LANGUAGE c AS 'MODULE_PATHNAME', 'memory_detect_drift_checked';
"#)]
fn detect_drift<'a>(
    trigger: &'a PgTrigger<'a>,
) -> Result<Option<PgHeapTuple<'a, AllocatedByPostgres>>, std::convert::Infallible> {
    detect(trigger.trigger_data()).or_raise();
    Ok(None)
}

crate::checked_trigger_entry!(memory_detect_drift_checked, pg_finfo_memory_detect_drift_checked, "memory._detect_drift()", detect_drift_wrapper);

/// The latest consent of ($1 org, $2 user) holds save_to_profile: the first relation of every
/// detector's statement.
macro_rules! consent_in_force {
    () => {
        "(SELECT COALESCE((SELECT 'save_to_profile'::memory.consent_scope OPERATOR(pg_catalog.=) ANY (s.scopes)
                                        FROM memory.consents s
                                       WHERE s.org_id OPERATOR(pg_catalog.=) $1 AND s.user_id OPERATOR(pg_catalog.=) $2
                                       ORDER BY s.version DESC LIMIT 1), false) AS ok) c"
    };
}

/// The latest earlier rating of the same object within the window ($6: the new rating's
/// polarity; $7: the window in days).
macro_rules! grade_lookup {
    () => {
        "
      LEFT JOIN LATERAL (
            SELECT f.rating, f.created_at FROM memory.user_feedback f
             WHERE c.ok AND $6::pg_catalog.int4 IS NOT NULL
               AND f.org_id OPERATOR(pg_catalog.=) $1 AND f.user_id OPERATOR(pg_catalog.=) $2
               AND f.related_object_ref OPERATOR(pg_catalog.=) $3
               AND f.id OPERATOR(pg_catalog.<>) $4 AND f.rating IS NOT NULL
               AND f.created_at OPERATOR(pg_catalog.<=) $5
               AND f.created_at OPERATOR(pg_catalog.>) ($5 OPERATOR(pg_catalog.-) pg_catalog.make_interval(days => $7))
             ORDER BY f.created_at DESC, f.id DESC LIMIT 1) g ON true"
    };
}

/// The latest earlier comments on the same kind of object of the other polarity, at most $10 of
/// them (the threshold: the detector needs to know whether there are that many, so its cost
/// does not grow with the user's history): how many were found, the latest one's time and
/// object ($8: the new comment's polarity; $9: the new row's cognition object, whose `type` is
/// the kind of object).
macro_rules! conflict_lookup {
    () => {
        "
      LEFT JOIN LATERAL (
            SELECT pg_catalog.count(*) AS opposing, pg_catalog.max(o.created_at) AS latest_at,
                   (pg_catalog.array_agg(o.related_object_ref ORDER BY o.created_at DESC, o.id DESC))[1] AS latest_ref
              FROM (SELECT f.created_at, f.id, f.related_object_ref FROM memory.user_feedback f
                     WHERE c.ok AND $8::pg_catalog.int4 IS NOT NULL
                       AND f.org_id OPERATOR(pg_catalog.=) $1 AND f.user_id OPERATOR(pg_catalog.=) $2
                       AND f.comment_polarity OPERATOR(pg_catalog.=) (OPERATOR(pg_catalog.-) $8::pg_catalog.int4)
                       AND f.id OPERATOR(pg_catalog.<>) $4 AND f.created_at OPERATOR(pg_catalog.<=) $5
                       AND (f.cognition_object OPERATOR(pg_catalog.->>) 'type') IS NOT DISTINCT FROM ($9 OPERATOR(pg_catalog.->>) 'type')
                     ORDER BY f.created_at DESC, f.id DESC LIMIT $10) o) n ON true"
    };
}

/// Feedback: the consent, then the lookups the row needs, one statement each way (a plan with a
/// lookup the row does not need would still open its index scan). Every variant is prepared with
/// the same ten parameters (those a variant does not read are unused) and returns: consent in force, prior rating and its time, opposing comments
/// found, the latest one's time and object, the new row's kind of object.
const FEEDBACK_BOTH: &str = concat!(
    "SELECT c.ok, g.rating, g.created_at, n.opposing, n.latest_at, n.latest_ref, $9 OPERATOR(pg_catalog.->>) 'type' FROM ",
    consent_in_force!(),
    grade_lookup!(),
    conflict_lookup!()
);
const FEEDBACK_GRADE: &str = concat!(
    "SELECT c.ok, g.rating, g.created_at, NULL::pg_catalog.int8, NULL::pg_catalog.timestamptz, NULL::pg_catalog.text, NULL::pg_catalog.text FROM ",
    consent_in_force!(),
    grade_lookup!()
);
const FEEDBACK_CONFLICT: &str = concat!(
    "SELECT c.ok, NULL::pg_catalog.text, NULL::pg_catalog.timestamptz, n.opposing, n.latest_at, n.latest_ref,
            $9 OPERATOR(pg_catalog.->>) 'type' FROM ",
    consent_in_force!(),
    conflict_lookup!()
);

/// Thread refresh: the consent; the thread's latest refresh of at least $6 days before ($3: thread).
const REFRESH_QUERY: &str = concat!(
    "SELECT c.ok, r.main_thesis, r.created_at FROM ",
    consent_in_force!(),
    "
      LEFT JOIN LATERAL (
            SELECT r.main_thesis, r.created_at FROM memory.thread_refreshes r
             WHERE c.ok AND r.org_id OPERATOR(pg_catalog.=) $1 AND r.thread_id OPERATOR(pg_catalog.=) $3
               AND r.id OPERATOR(pg_catalog.<>) $4
               AND r.created_at OPERATOR(pg_catalog.<=) ($5 OPERATOR(pg_catalog.-) pg_catalog.make_interval(days => $6))
             ORDER BY r.created_at DESC, r.id DESC LIMIT 1) r ON true"
);

/// Watch question reopened: the consent; the question's latest resolution ($3: question).
const WATCH_QUERY: &str = concat!(
    "SELECT c.ok, w.created_at FROM ",
    consent_in_force!(),
    "
      LEFT JOIN LATERAL (
            SELECT w.created_at FROM memory.watch_question_updates w
             WHERE c.ok AND w.org_id OPERATOR(pg_catalog.=) $1 AND w.watch_question_id OPERATOR(pg_catalog.=) $3
               AND w.status OPERATOR(pg_catalog.=) 'resolved'
               AND w.id OPERATOR(pg_catalog.<>) $4 AND w.created_at OPERATOR(pg_catalog.<=) $5
             ORDER BY w.created_at DESC, w.id DESC LIMIT 1) w ON true"
);

/// One drift row. The signals are the seed's `{value, captured_at, captured_in_object_ref}` ($7-$9
/// prior, $10-$12 current, plus `changed_inferences` $13 for a refresh; NULL members left out);
/// the summary is `pg_catalog.format($14, <prior time>, <current time>)` with both times as
/// `to_char(.., $15)` in the session's time zone.
const RECORD: &str = "INSERT INTO memory.persona_drift_log (drift_id, org_id, user_id, object_ref, cognition_object, signal_kind,
                                                   prior_signal, current_signal, delta_summary, triggers_alert)
     VALUES ($1, $2, $3, $4, $5, $6::memory.drift_signal,
             pg_catalog.jsonb_strip_nulls(pg_catalog.jsonb_build_object('value', $7::pg_catalog.text, 'captured_at', $8::pg_catalog.timestamptz,
                 'captured_in_object_ref', $9::pg_catalog.text)),
             pg_catalog.jsonb_strip_nulls(pg_catalog.jsonb_build_object('value', $10::pg_catalog.text, 'captured_at', $11::pg_catalog.timestamptz,
                 'captured_in_object_ref', $12::pg_catalog.text, 'changed_inferences', $13::pg_catalog.int4)),
             pg_catalog.format($14, pg_catalog.to_char($8, $15), pg_catalog.to_char($11, $15)),
             $16)";

/// A finding, as the drift row and its event carry it.
struct Finding<'a> {
    kind: &'static str,
    object_ref: String,
    cognition_object: DatumWithOid<'a>,
    prior_value: String,
    prior_at: Option<TimestampWithTimeZone>,
    /// The object the prior signal was captured in (None: no earlier signal, as when
    /// feedback_conflict_min is 0).
    prior_ref: Option<String>,
    current_value: String,
    current_at: DatumWithOid<'a>,
    changed_inferences: Option<i32>,
    /// A `format` template: `%1$s` the prior time, `%2$s` the current time (as `time_format`).
    summary: String,
    time_format: &'static str,
}

/// Text put into a `format` template as it is.
fn literal(s: &str) -> String {
    s.replace('%', "%%")
}

fn detect(td: &pg_sys::TriggerData) -> Result<(), MxError> {
    const NAME: &str = "memory._detect_drift()";
    let row = InsertedRow::new(td, NAME, false)?;
    if crate::gucs::RESTORE_MODE.get() {
        return Ok(());
    }
    let s = settings_as_owner()?;
    let t = &s.thresholds;
    let relid = row.relid();
    if relid == s.feedback {
        let rating_polarity = row.text("rating")?.as_deref().and_then(rules::rating_polarity);
        let comment_polarity = row.int("comment_polarity")?.map(|p| p as i32);
        let grade_days = (!t.grade_reversal_days.is_nan()).then(|| Thresholds::whole(t.grade_reversal_days));
        let look_grade = rating_polarity.filter(|_| grade_days.is_some());
        let look_conflict = comment_polarity.filter(|_| !t.feedback_conflict_min.is_nan());
        if look_grade.is_none() && look_conflict.is_none() {
            return Ok(());
        }
        return Spi::connect(|client| {
            let _owner = crate::trust::AsOwner::enter()?;
            let err = MxError::spi_in("drift");
            let (ok, prior_rating, prior_at, opposing, latest_at, latest_ref, kind) = {
                let query = match (look_grade, look_conflict) {
                    (Some(_), Some(_)) => FEEDBACK_BOTH,
                    (Some(_), None) => FEEDBACK_GRADE,
                    _ => FEEDBACK_CONFLICT,
                };
                let r = kept(
                    client,
                    query,
                    &[pg_sys::TEXTOID, pg_sys::TEXTOID, pg_sys::TEXTOID, pg_sys::UUIDOID, pg_sys::TIMESTAMPTZOID,
                      pg_sys::INT4OID, pg_sys::INT4OID, pg_sys::INT4OID, pg_sys::JSONBOID, pg_sys::INT8OID],
                    &[row.arg("org_id")?, row.arg("user_id")?, row.arg("related_object_ref")?, row.arg("id")?, row.arg("created_at")?,
                      look_grade.map(|p| p as i32).into(), grade_days.unwrap_or(0).into(), look_conflict.into(), row.arg("cognition_object")?,
                      rules::conflict_lookups(t).into()],
                    Some(1),
                )
                .map_err(&err)?
                .first();
                (
                    r.get::<bool>(1).map_err(&err)?.unwrap_or(false),
                    r.get::<String>(2).map_err(&err)?,
                    r.get::<TimestampWithTimeZone>(3).map_err(&err)?,
                    r.get::<i64>(4).map_err(&err)?,
                    r.get::<TimestampWithTimeZone>(5).map_err(&err)?,
                    r.get::<String>(6).map_err(&err)?,
                    r.get::<String>(7).map_err(&err)?,
                )
            };
            if !ok {
                return Ok(());
            }
            let mut found = Vec::new();
            let new_rating = row.text("rating")?.unwrap_or_default();
            if let (Some(pol), Some(prior), Some(at)) = (look_grade, prior_rating.as_deref(), prior_at) {
                if rules::is_grade_reversal(prior, pol) {
                    found.push(Finding {
                        kind: "grade_reversal",
                        object_ref: row.text("related_object_ref")?.unwrap_or_default(),
                        cognition_object: row.arg("cognition_object")?,
                        prior_value: prior.to_string(),
                        prior_at: Some(at),
                        prior_ref: row.text("related_object_ref")?,
                        current_value: new_rating.clone(),
                        current_at: row.arg("created_at")?,
                        changed_inferences: None,
                        summary: format!("%1$s graded {}, then %2$s graded {}", literal(prior), literal(&new_rating)),
                        time_format: "YYYY-MM-DD",
                    });
                }
            }
            if let (Some(pol), Some(n)) = (look_conflict, opposing) {
                if rules::is_feedback_conflict(n, t) {
                    found.push(Finding {
                        kind: "feedback_conflict",
                        object_ref: row.text("related_object_ref")?.unwrap_or_default(),
                        cognition_object: row.arg("cognition_object")?,
                        prior_value: if pol > 0 { "negative" } else { "positive" }.to_string(),
                        prior_at: latest_at,
                        prior_ref: latest_ref.clone(),
                        current_value: if pol > 0 { "positive" } else { "negative" }.to_string(),
                        current_at: row.arg("created_at")?,
                        changed_inferences: None,
                        summary: format!(
                            "at least {n} earlier comments on {} objects point the other way, the latest on %1$s",
                            literal(kind.as_deref().unwrap_or("untyped"))
                        ),
                        time_format: "YYYY-MM-DD",
                    });
                }
            }
            record(client, &row, found)
        });
    }
    if relid == s.refreshes {
        let changed = row.int("changed_inferences")?.unwrap_or(0) as i32;
        if !rules::refresh_may_flip(changed, t) || t.refresh_lookback_days.is_nan() {
            return Ok(());
        }
        return Spi::connect(|client| {
            let _owner = crate::trust::AsOwner::enter()?;
            let err = MxError::spi_in("drift");
            let r = kept(
                client,
                REFRESH_QUERY,
                &[pg_sys::TEXTOID, pg_sys::TEXTOID, pg_sys::TEXTOID, pg_sys::UUIDOID, pg_sys::TIMESTAMPTZOID, pg_sys::INT4OID],
                &[row.arg("org_id")?, row.arg("user_id")?, row.arg("thread_id")?, row.arg("id")?, row.arg("created_at")?,
                  Thresholds::whole(t.refresh_lookback_days).into()],
                Some(1),
            )
            .map_err(&err)?
            .first();
            let (ok, prior_thesis, prior_at) =
                (r.get::<bool>(1).map_err(&err)?.unwrap_or(false), r.get::<String>(2).map_err(&err)?, r.get::<TimestampWithTimeZone>(3).map_err(&err)?);
            let (Some(prior_thesis), Some(prior_at)) = (prior_thesis, prior_at) else { return Ok(()) };
            if !ok || !rules::is_stance_flip(&prior_thesis, &row.text("main_thesis")?.unwrap_or_default(), t) {
                return Ok(());
            }
            let thread = row.text("thread_id")?.unwrap_or_default();
            record(
                client,
                &row,
                vec![Finding {
                    kind: "refresh_stance_flip",
                    object_ref: format!("thread:{thread}"),
                    cognition_object: DatumWithOid::null_oid(pg_sys::JSONBOID),
                    prior_value: "thesis".into(),
                    prior_at: Some(prior_at),
                    prior_ref: Some(format!("thread:{thread}")),
                    current_value: "thesis".into(),
                    current_at: row.arg("created_at")?,
                    changed_inferences: Some(changed),
                    summary: format!("thesis of thread {} changed ({changed} inferences) since %1$s", literal(&thread)),
                    time_format: "YYYY-MM-DD",
                }],
            )
        });
    }
    if relid == s.watch {
        if row.text("status")?.as_deref() != Some("reopened") {
            return Ok(());
        }
        let at = row.int("created_at")?.unwrap_or(0);
        return Spi::connect(|client| {
            let _owner = crate::trust::AsOwner::enter()?;
            let err = MxError::spi_in("drift");
            let r = kept(
                client,
                WATCH_QUERY,
                &[pg_sys::TEXTOID, pg_sys::TEXTOID, pg_sys::TEXTOID, pg_sys::UUIDOID, pg_sys::TIMESTAMPTZOID],
                &[row.arg("org_id")?, row.arg("user_id")?, row.arg("watch_question_id")?, row.arg("id")?, row.arg("created_at")?],
                Some(1),
            )
            .map_err(&err)?
            .first();
            let (ok, resolved) = (r.get::<bool>(1).map_err(&err)?.unwrap_or(false), r.get::<TimestampWithTimeZone>(2).map_err(&err)?);
            let Some(resolved) = resolved else { return Ok(()) };
            if !ok || !rules::is_reopen_drift(at.saturating_sub(pg_sys::TimestampTz::from(resolved)), t) {
                return Ok(());
            }
            let question = row.text("watch_question_id")?.unwrap_or_default();
            record(
                client,
                &row,
                vec![Finding {
                    kind: "watch_question_resolved_then_reopened",
                    object_ref: format!("watch_question:{question}"),
                    cognition_object: DatumWithOid::null_oid(pg_sys::JSONBOID),
                    prior_value: "resolved".into(),
                    prior_at: Some(resolved),
                    prior_ref: Some(format!("watch_question:{question}")),
                    current_value: "reopened".into(),
                    current_at: row.arg("created_at")?,
                    changed_inferences: None,
                    summary: format!("watch question {} resolved %1$s, reopened %2$s", literal(&question)),
                    time_format: "YYYY-MM-DD HH24:MI",
                }],
            )
        });
    }
    Err(wrong_table(NAME, relid, "memory.user_feedback, memory.thread_refreshes or memory.watch_question_updates"))
}

/// Appends the findings to the drift log and one `memory.drift.detected` event each to the org's
/// chain (the user pseudonymized).
fn record(client: &SpiClient, row: &InsertedRow, found: Vec<Finding>) -> Result<(), MxError> {
    if found.is_empty() {
        return Ok(());
    }
    let err = MxError::spi_in("drift");
    let org = row.text("org_id")?.unwrap_or_default();
    let user = row.text("user_id")?.unwrap_or_default();
    let mut ap = crate::audit::Appender::new(client)?;
    let actor = crate::audit::default_actor(&ap);
    for f in found {
        let mut random = [0u8; 3];
        if !crate::pg::xact::strong_random(&mut random) {
            return Err(MxError::new(code::INTERNAL, "could not generate random bytes for a drift id"));
        }
        let id = rules::drift_id(crate::pg::xact::now_micros() + crate::audit::PG_EPOCH_UNIX_MICROS, random);
        let alert = f.kind == "grade_reversal" || f.kind == "refresh_stance_flip";
        kept(
            client,
            RECORD,
            &[pg_sys::TEXTOID, pg_sys::TEXTOID, pg_sys::TEXTOID, pg_sys::TEXTOID, pg_sys::JSONBOID, pg_sys::TEXTOID,
              pg_sys::TEXTOID, pg_sys::TIMESTAMPTZOID, pg_sys::TEXTOID,
              pg_sys::TEXTOID, pg_sys::TIMESTAMPTZOID, pg_sys::TEXTOID, pg_sys::INT4OID,
              pg_sys::TEXTOID, pg_sys::TEXTOID, pg_sys::BOOLOID],
            &[id.as_str().into(), row.arg("org_id")?, row.arg("user_id")?, f.object_ref.as_str().into(), f.cognition_object, f.kind.into(),
              f.prior_value.as_str().into(), f.prior_at.into(), f.prior_ref.as_deref().into(),
              f.current_value.as_str().into(), f.current_at, f.object_ref.as_str().into(), f.changed_inferences.into(),
              f.summary.as_str().into(), f.time_format.into(), alert.into()],
            None,
        )
        .map_err(&err)?;
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
    ap.finish(client)
}
