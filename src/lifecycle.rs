//! SQL surface of the knowledge lifecycle (SPEC §5): the attachable state-machine trigger and the
//! rule functions the SQL in `sql/knowledge.sql` builds on. The rules are `memory_core::lifecycle`.

use crate::errors::{code, MxError, OrRaise};
use crate::tuple;
use memory_core::lifecycle::{self as rules, Contender, PiiField, State};
use pgrx::prelude::*;
use pgrx::{JsonB, Uuid};
use std::cell::RefCell;
use std::ffi::CStr;

fn parse_state(label: &str, what: &str) -> Result<State, MxError> {
    State::parse(label).ok_or_else(|| {
        MxError::new(code::INVALID_TEXT, format!("invalid lifecycle state \"{label}\" ({what})"))
            .hint("Use one of: pending, active, superseded, retracted, archived.")
    })
}

fn transition_error(from: State, to: &str, relname: &str, column: &str) -> MxError {
    MxError::new(code::INVALID_TRANSITION, format!("invalid lifecycle transition from {} to {to}", from.as_str()))
        .detail(format!("column \"{column}\" of {relname}"))
        .hint("Legal: pending -> active, retracted, archived; active -> superseded, retracted, archived; superseded -> archived; retracted -> archived. archived is terminal.")
}

#[pg_extern(immutable, parallel_safe, strict, name = "_can_transition")]
fn can_transition(from: &str, to: &str) -> bool {
    let (f, t) = (parse_state(from, "from").or_raise(), parse_state(to, "to").or_raise());
    rules::can_transition(f, t)
}

#[pg_extern(immutable, parallel_safe, name = "_source_tier")]
fn source_tier(source: Option<&str>) -> i32 {
    rules::source_tier(source)
}

#[pg_extern(immutable, parallel_safe, name = "_supersession_tier_allowed")]
fn supersession_tier_allowed(new_source: Option<&str>, old_source: Option<&str>) -> bool {
    rules::supersession_tier_allowed(new_source, old_source)
}

fn micros(t: TimestampWithTimeZone) -> Result<i64, MxError> {
    if t.is_infinity() || t.is_neg_infinity() {
        return Err(MxError::bad_argument("timestamps must be finite"));
    }
    Ok(pg_sys::TimestampTz::from(t))
}

#[pg_extern(immutable, parallel_safe, strict, name = "_is_stale")]
fn is_stale(t_created: TimestampWithTimeZone, freshness_days: i32, at: TimestampWithTimeZone) -> bool {
    if freshness_days < 0 {
        MxError::bad_argument(format!("freshness_days must be >= 0, got {freshness_days}")).raise();
    }
    let age = micros(at).or_raise().saturating_sub(micros(t_created).or_raise());
    rules::is_stale(age, freshness_days as i64)
}

/// The re-check reason of an active claim, or NULL.
#[pg_extern(immutable, parallel_safe, strict, name = "_recheck_reason")]
fn recheck_reason(confidence: f64, threshold: f64, t_created: TimestampWithTimeZone, max_age_us: i64, at: TimestampWithTimeZone) -> Option<&'static str> {
    let age = micros(at).or_raise().saturating_sub(micros(t_created).or_raise());
    rules::recheck_reason(confidence, threshold, age, max_age_us).map(|r| r.as_str())
}

/// Whether b loses against a (lower confidence, then newer, then greater id).
#[pg_extern(immutable, parallel_safe, strict, name = "_conflict_loser_is_b")]
fn conflict_loser_is_b(a_conf: f64, a_created: TimestampWithTimeZone, a_id: Uuid, b_conf: f64, b_created: TimestampWithTimeZone, b_id: Uuid) -> bool {
    let a = Contender { confidence: a_conf, created_us: micros(a_created).or_raise(), id: a_id.as_bytes() };
    let b = Contender { confidence: b_conf, created_us: micros(b_created).or_raise(), id: b_id.as_bytes() };
    rules::conflict_loser_is_b(&a, &b)
}

/// The first name in `fields` that decay does not know, or NULL.
#[pg_extern(immutable, parallel_safe, name = "_pii_unknown")]
fn pii_unknown(fields: Option<Array<&str>>) -> Option<String> {
    rules::first_unknown_pii_field(fields?.iter())
}

/// `details` with the `details.<key>` fields of `fields` replaced by "[redacted]".
#[pg_extern(immutable, parallel_safe, strict, name = "_redact_details")]
fn redact_details(details: JsonB, fields: Array<&str>) -> JsonB {
    let parsed: Vec<PiiField> = fields.iter().flatten().filter_map(PiiField::parse).collect();
    let mut d = details.0;
    rules::redact_details(&mut d, &parsed);
    JsonB(d)
}


// ---------------------------------------------------------------------------------------------
// The attachable trigger.

/// How a firing trigger reads its state column; resolved once per trigger and relation layout.
struct StateColumn {
    tgoid: pg_sys::Oid,
    tupdesc: pg_sys::TupleDesc,
    attnum: i32,
    typoid: pg_sys::Oid,
    name: String,
    /// For an enum column: the OID of each label's pg_enum row, by state.
    enum_oids: Option<Vec<(pg_sys::Oid, State)>>,
}

thread_local! {
    static STATE_COLUMN: RefCell<Option<StateColumn>> = const { RefCell::new(None) };
}

impl StateColumn {
    fn still_valid(&self, td: &pg_sys::TriggerData) -> bool {
        unsafe {
            let desc = (*td.tg_relation).rd_att;
            if (*td.tg_trigger).tgoid != self.tgoid || desc != self.tupdesc || self.attnum > (*desc).natts {
                return false;
            }
            let a = &*(*desc).attrs.as_ptr().add(self.attnum as usize - 1);
            !a.attisdropped && a.atttypid == self.typoid && CStr::from_ptr(a.attname.data.as_ptr()).to_bytes() == self.name.as_bytes()
        }
    }

    fn resolve(td: &pg_sys::TriggerData) -> Result<StateColumn, MxError> {
        let tg = unsafe { &*td.tg_trigger };
        let name = if tg.tgnargs >= 1 {
            unsafe { CStr::from_ptr(*tg.tgargs) }.to_string_lossy().into_owned()
        } else {
            "lifecycle_state".to_string()
        };
        let rel = td.tg_relation;
        let desc = unsafe { (*rel).rd_att };
        let natts = unsafe { (*desc).natts };
        let mut found = None;
        for i in 0..natts {
            let a = unsafe { &*(*desc).attrs.as_ptr().add(i as usize) };
            if !a.attisdropped && unsafe { CStr::from_ptr(a.attname.data.as_ptr()) }.to_bytes() == name.as_bytes() {
                found = Some((i + 1, a.atttypid));
            }
        }
        let Some((attnum, typoid)) = found else {
            return Err(MxError::bad_argument(format!("table {} has no column \"{name}\" (the state column)", tuple::relation_name(rel)))
                .hint("Pass the state column as the trigger's argument, or use memory.govern(table, '{\"state\": \"<column>\"}')."));
        };
        let enum_oids = if typoid == pg_sys::TEXTOID || typoid == pg_sys::VARCHAROID {
            None
        } else {
            let labels: Vec<(pg_sys::Oid, String)> = Spi::connect(|c| {
                let rows = c.select(
                    "SELECT oid, enumlabel::text FROM pg_catalog.pg_enum WHERE enumtypid = $1",
                    None,
                    &[typoid.into()],
                )?;
                let mut v = Vec::new();
                for r in rows {
                    if let (Some(o), Some(l)) = (r.get::<pg_sys::Oid>(1)?, r.get::<String>(2)?) {
                        v.push((o, l));
                    }
                }
                Ok::<_, pgrx::spi::Error>(v)
            })
            .map_err(|e| MxError::spi("lifecycle", e))?;
            if labels.is_empty() {
                return Err(MxError::bad_argument(format!(
                    "the state column \"{name}\" of {} must be memory.lifecycle_state, an enum of its labels, or text",
                    tuple::relation_name(rel)
                )));
            }
            let mut map = Vec::new();
            for (o, l) in labels {
                if let Some(s) = State::parse(&l) {
                    map.push((o, s));
                }
            }
            Some(map)
        };
        Ok(StateColumn { tgoid: tg.tgoid, tupdesc: desc, attnum, typoid, name, enum_oids })
    }

    /// The column's value in `tuple`, None for NULL.
    fn value(&self, tuple: pg_sys::HeapTuple) -> Option<pg_sys::Datum> {
        let mut isnull = false;
        let d = unsafe { pg_sys::heap_getattr(tuple, self.attnum, self.tupdesc, &mut isnull) };
        (!isnull).then_some(d)
    }

    /// The state a value names; None for NULL.
    fn state(&self, value: Option<pg_sys::Datum>, what: &str) -> Result<Option<State>, MxError> {
        let Some(d) = value else { return Ok(None) };
        match &self.enum_oids {
            Some(map) => {
                let oid = pg_sys::Oid::from(d.value() as u32);
                match map.iter().find(|(o, _)| *o == oid) {
                    Some((_, s)) => Ok(Some(*s)),
                    None => Err(MxError::new(code::INVALID_TEXT, format!("the {what} value of column \"{}\" is not a lifecycle state", self.name))
                        .hint("Use one of: pending, active, superseded, retracted, archived.")),
                }
            }
            None => {
                let text = unsafe { pgrx::text_to_rust_str(d.cast_mut_ptr()) }.map_err(|_| MxError::bad_argument("state text is not UTF-8"))?;
                parse_state(text, what).map(Some)
            }
        }
    }
}

/// `memory.lifecycle_trigger()`: BEFORE INSERT OR UPDATE FOR EACH ROW; TG_ARGV[0] names the state
/// column (default `lifecycle_state`), of type `memory.lifecycle_state`, an enum with its labels, or
/// text. UPDATE: keeping the state is a no-op, a transition outside the seed's table raises MX001,
/// clearing it raises MX001. INSERT: a text state must be a known label (22P02).
#[pg_trigger]
fn lifecycle_trigger<'a>(
    trigger: &'a PgTrigger<'a>,
) -> Result<Option<PgHeapTuple<'a, AllocatedByPostgres>>, std::convert::Infallible> {
    let td = trigger.trigger_data();
    let tuple = check_row(td).or_raise();
    let desc = unsafe { (*td.tg_relation).rd_att };
    Ok(Some(unsafe { PgHeapTuple::from_heap_tuple(pgrx::PgTupleDesc::from_pg_unchecked(desc), tuple) }))
}

fn check_row(td: &pg_sys::TriggerData) -> Result<pg_sys::HeapTuple, MxError> {
    let ev = td.tg_event;
    let op = ev & pg_sys::TRIGGER_EVENT_OPMASK;
    if ev & pg_sys::TRIGGER_EVENT_TIMINGMASK != pg_sys::TRIGGER_EVENT_BEFORE
        || ev & pg_sys::TRIGGER_EVENT_ROW == 0
        || !(op == pg_sys::TRIGGER_EVENT_INSERT || op == pg_sys::TRIGGER_EVENT_UPDATE)
    {
        return Err(MxError::new(code::TRIGGER_PROTOCOL, "memory.lifecycle_trigger must be fired BEFORE INSERT OR UPDATE FOR EACH ROW"));
    }
    let cached = STATE_COLUMN.with(|c| c.borrow_mut().take());
    let col = match cached {
        Some(c) if c.still_valid(td) => c,
        _ => StateColumn::resolve(td)?,
    };
    let result = (|| {
        if op == pg_sys::TRIGGER_EVENT_INSERT {
            if col.enum_oids.is_none() {
                col.state(col.value(td.tg_trigtuple), "new")?;
            }
            return Ok(td.tg_trigtuple);
        }
        let (old, new) = (td.tg_trigtuple, td.tg_newtuple);
        let (vold, vnew) = (col.value(old), col.value(new));
        // The common case, and the cheapest: an enum state that did not change.
        if col.enum_oids.is_some() && vold.is_some() && vold == vnew {
            return Ok(new);
        }
        let (from, to) = (col.state(vold, "old")?, col.state(vnew, "new")?);
        let refused = |f: State, to: &str| transition_error(f, to, &tuple::relation_name(td.tg_relation), &col.name);
        match (from, to) {
            (Some(f), None) => Err(refused(f, "NULL")),
            (Some(f), Some(t)) if !rules::update_allowed(f, t) => Err(refused(f, t.as_str())),
            _ => Ok(new),
        }
    })();
    STATE_COLUMN.with(|c| *c.borrow_mut() = Some(col));
    result
}
