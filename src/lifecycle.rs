//! SQL surface of the knowledge lifecycle (docs/design.md#knowledge-lifecycle): the attachable state-machine trigger and the
//! rule functions the SQL in `sql/knowledge.sql` builds on. The rules are `memory_core::lifecycle`.

use crate::errors::{code, MxError, OrRaise};
use crate::pg::tuple;
use memory_core::lifecycle::{self as rules, Contender, State};
use pgrx::prelude::*;
use pgrx::Uuid;
use std::cell::RefCell;

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

/// `memory_internal._table_of(rel)`: the table a trigger fired on as the knowledge triggers check it: on
/// Citus the distributed table whose shard `rel` is, elsewhere `rel` itself.
#[pg_extern(stable, strict, schema = "memory_internal", name = "_table_of")]
fn table_of(rel: pg_sys::Oid) -> pg_sys::Oid {
    crate::pg::citus::logical_table(rel).unwrap_or(rel)
}

#[pg_extern(immutable, parallel_safe, strict, schema = "memory_internal", name = "_can_transition")]
fn can_transition(from: &str, to: &str) -> bool {
    let (f, t) = (parse_state(from, "from").or_raise(), parse_state(to, "to").or_raise());
    rules::can_transition(f, t)
}

/// Whether `from` -> `to` retires an entity (memory.govern.retire_attempt).
#[pg_extern(immutable, parallel_safe, strict, schema = "memory_internal", name = "_is_retirement")]
fn is_retirement(from: &str, to: &str) -> bool {
    rules::is_retirement(parse_state(from, "from").or_raise(), parse_state(to, "to").or_raise())
}

/// Whether entering `to` stamps t_invalid (superseded, retracted, archived).
#[pg_extern(immutable, parallel_safe, strict, schema = "memory_internal", name = "_stamps_t_invalid")]
fn stamps_t_invalid(to: &str) -> bool {
    rules::stamps_t_invalid(parse_state(to, "to").or_raise())
}

#[pg_extern(immutable, parallel_safe, schema = "memory_internal", name = "_source_tier")]
fn source_tier(source: Option<&str>) -> i32 {
    rules::source_tier(source)
}

#[pg_extern(immutable, parallel_safe, schema = "memory_internal", name = "_supersession_tier_allowed")]
fn supersession_tier_allowed(new_source: Option<&str>, old_source: Option<&str>) -> bool {
    rules::supersession_tier_allowed(new_source, old_source)
}

fn micros(t: TimestampWithTimeZone) -> Result<i64, MxError> {
    if t.is_infinity() || t.is_neg_infinity() {
        return Err(MxError::bad_argument("timestamps must be finite"));
    }
    Ok(pg_sys::TimestampTz::from(t))
}

#[pg_extern(immutable, parallel_safe, strict, schema = "memory_internal", name = "_is_stale")]
fn is_stale(t_created: TimestampWithTimeZone, freshness_days: i32, at: TimestampWithTimeZone) -> bool {
    if freshness_days < 0 {
        MxError::bad_argument(format!("freshness_days must be >= 0, got {freshness_days}")).raise();
    }
    let age = micros(at).or_raise().saturating_sub(micros(t_created).or_raise());
    rules::is_stale(age, freshness_days as i64)
}

/// The re-check reason of an active claim, or NULL.
#[pg_extern(immutable, parallel_safe, strict, schema = "memory_internal", name = "_recheck_reason")]
fn recheck_reason(confidence: f64, threshold: f64, t_created: TimestampWithTimeZone, max_age_us: i64, at: TimestampWithTimeZone) -> Option<&'static str> {
    let age = micros(at).or_raise().saturating_sub(micros(t_created).or_raise());
    rules::recheck_reason(confidence, threshold, age, max_age_us).map(|r| r.as_str())
}

/// Whether b loses against a (lower confidence, then newer, then greater id).
#[pg_extern(immutable, parallel_safe, strict, schema = "memory_internal", name = "_conflict_loser_is_b")]
fn conflict_loser_is_b(a_conf: f64, a_created: TimestampWithTimeZone, a_id: Uuid, b_conf: f64, b_created: TimestampWithTimeZone, b_id: Uuid) -> bool {
    let a = Contender { confidence: a_conf, created_us: micros(a_created).or_raise(), id: a_id.as_bytes() };
    let b = Contender { confidence: b_conf, created_us: micros(b_created).or_raise(), id: b_id.as_bytes() };
    rules::conflict_loser_is_b(&a, &b)
}

/// The first name in `fields` that decay does not know, or NULL.
#[pg_extern(immutable, parallel_safe, schema = "memory_internal", name = "_pii_unknown")]
fn pii_unknown(fields: Option<Array<&str>>) -> Option<String> {
    rules::first_unknown_pii_field(fields?.iter())
}

/// The marker redacted fields get (memory_internal._redact_details, in SQL so that jsonb of any depth or
/// number range is redacted without being parsed).
#[pg_extern(immutable, parallel_safe, schema = "memory_internal", name = "_redacted_marker")]
fn redacted_marker() -> &'static str {
    rules::REDACTED
}


// ---------------------------------------------------------------------------------------------
// The attachable trigger.

/// How a firing trigger reads its state column; resolved once per trigger and relation layout.
struct StateColumn {
    tgoid: pg_sys::Oid,
    /// Identity of the descriptor the column was found in.
    tupdesc: usize,
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
    fn still_valid(&self, row: &tuple::RowTrigger) -> bool {
        row.tgoid() == self.tgoid && row.tupdesc_key() == self.tupdesc && row.column_is(self.attnum, self.typoid, &self.name)
    }

    fn resolve(row: &tuple::RowTrigger) -> Result<StateColumn, MxError> {
        let name = row.first_arg().unwrap_or_else(|| "lifecycle_state".to_string());
        let Some((attnum, typoid)) = row.find_column(&name) else {
            return Err(MxError::bad_argument(format!("table {} has no column \"{name}\" (the state column)", row.relname()))
                .hint("Pass the state column as the trigger's argument, or use memory.govern(table, '{\"state\": \"<column>\"}')."));
        };
        let enum_oids = if typoid == pg_sys::TEXTOID || typoid == pg_sys::VARCHAROID {
            None
        } else {
            let labels: Vec<(pg_sys::Oid, String)> = Spi::connect(|c| {
                let rows = c.select(
                    "SELECT e.oid, e.enumlabel::pg_catalog.text FROM pg_catalog.pg_enum e WHERE e.enumtypid OPERATOR(pg_catalog.=) $1",
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
                    row.relname()
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
        Ok(StateColumn { tgoid: row.tgoid(), tupdesc: row.tupdesc_key(), attnum, typoid, name, enum_oids })
    }

    /// The state of the new (or old) row; None for NULL.
    fn state(&self, row: &tuple::RowTrigger, old: bool) -> Result<Option<State>, MxError> {
        let what = if old { "old" } else { "new" };
        match &self.enum_oids {
            Some(map) => {
                let Some(d) = row.value(old, self.attnum) else { return Ok(None) };
                let oid = pg_sys::Oid::from(d.value() as u32);
                match map.iter().find(|(o, _)| *o == oid) {
                    Some((_, s)) => Ok(Some(*s)),
                    None => Err(MxError::new(code::INVALID_TEXT, format!("the {what} value of column \"{}\" is not a lifecycle state", self.name))
                        .hint("Use one of: pending, active, superseded, retracted, archived.")),
                }
            }
            None => match row.text_value(old, self.attnum) {
                None => Ok(None),
                Some(text) => parse_state(text, what).map(Some),
            },
        }
    }
}

/// `memory.lifecycle_trigger()`: BEFORE INSERT OR UPDATE FOR EACH ROW; TG_ARGV[0] names the state
/// column (default `lifecycle_state`), of type `memory.lifecycle_state`, an enum with its labels, or
/// text. UPDATE: keeping the state is a no-op, a transition outside the transition table raises MX001,
/// clearing it raises MX001. INSERT: a text state must be a known label (22P02).
#[pg_trigger(sql = r#"
CREATE FUNCTION "lifecycle_trigger"() RETURNS TRIGGER LANGUAGE c AS 'MODULE_PATHNAME', 'memory_lifecycle_trigger_checked';
"#)]
fn lifecycle_trigger<'a>(
    trigger: &'a PgTrigger<'a>,
) -> Result<Option<PgHeapTuple<'a, AllocatedByPostgres>>, std::convert::Infallible> {
    Ok(Some(check_row(trigger.trigger_data()).or_raise()))
}

fn check_row(td: &pg_sys::TriggerData) -> Result<PgHeapTuple<'static, AllocatedByPostgres>, MxError> {
    let row = tuple::RowTrigger::new(td, "memory.lifecycle_trigger")?;
    let cached = STATE_COLUMN.with(|c| c.borrow_mut().take());
    let col = match cached {
        Some(c) if c.still_valid(&row) => c,
        _ => StateColumn::resolve(&row)?,
    };
    let result = (|| {
        if !row.is_update() {
            if col.enum_oids.is_none() {
                col.state(&row, false)?;
            }
            return Ok(());
        }
        let (vold, vnew) = (row.value(true, col.attnum), row.value(false, col.attnum));
        // The common case, and the cheapest: an enum state that did not change.
        if col.enum_oids.is_some() && vold.is_some() && vold == vnew {
            return Ok(());
        }
        let (from, to) = (col.state(&row, true)?, col.state(&row, false)?);
        let refused = |f: State, to: &str| transition_error(f, to, &row.relname(), &col.name);
        match (from, to) {
            (Some(f), None) => Err(refused(f, "NULL")),
            (Some(f), Some(t)) if !rules::update_allowed(f, t) => Err(refused(f, t.as_str())),
            _ => Ok(()),
        }
    })();
    STATE_COLUMN.with(|c| *c.borrow_mut() = Some(col));
    result.map(|()| row.unchanged())
}

// The SQL entry point: `39P01` when called other than as a trigger (see src/pg/trigger.rs).
crate::checked_trigger_entry!(memory_lifecycle_trigger_checked, pg_finfo_memory_lifecycle_trigger_checked, "memory.lifecycle_trigger()", lifecycle_trigger_wrapper);
