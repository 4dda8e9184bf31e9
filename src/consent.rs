//! Consent's rules for SQL (docs/design.md#consent-and-drift): thin functions over `memory_core::consent`, so that
//! sql/consent.sql takes a context's fields, the slices' rules, the scope a context write needs
//! and what a revocation does from the one table.

use crate::errors::{MxError, OrRaise};
use pgrx::prelude::*;

/// The context fields of a kind (`known`: every field; `preferences`: those onboarding takes;
/// `position`: those that state a position).
#[pg_extern(immutable, parallel_safe, strict, schema = "memory_internal", name = "_context_fields")]
fn context_fields(kind: &str) -> Vec<&'static str> {
    memory_core::consent::fields(kind)
        .ok_or_else(|| MxError::bad_argument(format!("unknown context field list \"{kind}\"")).hint("Use known, preferences or position."))
        .or_raise()
        .to_vec()
}

/// `{slice: rule}` of every slice `memory.load_slices` knows (`memory_core::consent::SLICES`):
/// `source` (field, active_threads or drift_count), `field` (of a field slice), `task_only`,
/// `needs` (the scopes any one of which lets it load from outside a task; none in force: blocked
/// by consent), `cold_default` (when it has one) and `thread_blocks` (blocked while the request's
/// thread context is blocked by a revocation). Read once per call of `memory.load_slices`.
#[pg_extern(immutable, parallel_safe, schema = "memory_internal", name = "_slice_rules")]
fn slice_rules() -> pgrx::JsonB {
    use memory_core::consent::{SliceSource, SLICES};
    use serde_json::{json, Map, Value};
    let map: Map<String, Value> = SLICES
        .iter()
        .map(|s| {
            let mut r = json!({
                "source": match s.source { SliceSource::Field(_) => "field", SliceSource::ActiveThreads => "active_threads", SliceSource::DriftCount => "drift_count" },
                "task_only": s.task_only(),
                "needs": s.needs.iter().map(|n| n.name()).collect::<Vec<_>>(),
                "thread_blocks": s.thread_blocks,
            });
            if let SliceSource::Field(f) = s.source {
                r["field"] = f.into();
            }
            if let Some(d) = s.cold_default {
                r["cold_default"] = d.into();
            }
            (s.name.to_string(), r)
        })
        .collect();
    pgrx::JsonB(Value::Object(map))
}

/// `{context scope: consent scope}`: the scope under which a context of each scope is written and
/// loaded (`memory_core::consent::ContextScope::needs`; a task's context needs none and is absent).
#[pg_extern(immutable, parallel_safe, schema = "memory_internal", name = "_context_needs")]
fn context_needs() -> pgrx::JsonB {
    let map: serde_json::Map<String, serde_json::Value> = memory_core::consent::CONTEXT_SCOPES
        .iter()
        .filter_map(|c| Some((c.name().to_string(), serde_json::Value::from(c.needs()?.name()))))
        .collect();
    pgrx::JsonB(serde_json::Value::Object(map))
}

fn scopes_of(labels: &[Option<String>]) -> Vec<memory_core::consent::Scope> {
    labels
        .iter()
        .map(|l| {
            l.as_deref()
                .and_then(memory_core::consent::Scope::parse)
                .ok_or_else(|| MxError::bad_argument(format!("unknown consent scope {l:?}")))
                .or_raise()
        })
        .collect()
}

/// Why a new user context is refused (`memory_core::consent::context_write_refusal`): NULL when
/// allowed, else {message, the scope it needs} (MX003, `required_scopes: <scope>`). Not strict:
/// a NULL never reads as "allowed" (NULL source: none of the profile's sources; NULL for whether
/// it states a position: it does; NULL position consent: not given; NULL scopes: none in force).
#[pg_extern(immutable, parallel_safe, schema = "memory_internal", name = "_context_write_refusal")]
fn context_write_refusal(
    scope: Option<&str>,
    source: Option<&str>,
    states_position: Option<bool>,
    position_consent: Option<bool>,
    in_force: Option<Vec<Option<String>>>,
) -> Option<Vec<String>> {
    let scope = scope
        .and_then(memory_core::consent::ContextScope::parse)
        .ok_or_else(|| MxError::bad_argument(format!("unknown context scope {scope:?}")))
        .or_raise();
    memory_core::consent::context_write_refusal(
        scope,
        source.unwrap_or(""),
        states_position.unwrap_or(true),
        position_consent.unwrap_or(false),
        &scopes_of(&in_force.unwrap_or_default()),
    )
    .map(|r| vec![r.message, r.needs.name().to_string()])
}

/// What revoking `scopes` does (`memory_core::consent::revoke_effects_of`): the effects'
/// names, each the count `memory.revoke_consent` reports for it.
#[pg_extern(immutable, parallel_safe, strict, schema = "memory_internal", name = "_revoke_effects")]
fn revoke_effects(scopes: Vec<Option<String>>) -> Vec<&'static str> {
    memory_core::consent::revoke_effects_of(&scopes_of(&scopes)).into_iter().map(|e| e.name()).collect()
}

/// How long after a revocation of save_to_profile maintenance purges the drift log
/// (`memory_core::consent::DRIFT_PURGE_DELAY_US`, 48 hours).
#[pg_extern(immutable, parallel_safe, schema = "memory_internal", name = "_drift_purge_delay")]
fn drift_purge_delay() -> Interval {
    Interval::from_micros(memory_core::consent::DRIFT_PURGE_DELAY_US)
}
