//! Consent's rules for SQL (docs/design.md#consent-and-drift): thin functions over `memory_core::consent`, so that
//! sql/consent.sql names a context's fields from the one list.

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

/// `{slice: field}` of the context slices `memory.load_slices` loads from a context's fields.
#[pg_extern(immutable, parallel_safe, schema = "memory_internal", name = "_slice_fields")]
fn slice_fields() -> pgrx::JsonB {
    let map: serde_json::Map<String, serde_json::Value> =
        memory_core::consent::SLICE_FIELDS.iter().map(|(s, f)| (s.to_string(), serde_json::Value::from(*f))).collect();
    pgrx::JsonB(serde_json::Value::Object(map))
}
