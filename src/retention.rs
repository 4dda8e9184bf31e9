//! Retention stamps at write (docs/design.md#retention). Policies are read once per backend and (org, tier) or
//! memory type, and dropped with the org-rule cache whenever a policy table changes (their
//! row and TRUNCATE triggers invalidate the relcache; see `classify::rules_inval`).

use crate::errors::{code, MxError, OrRaise};
use crate::pg::spi::read_latest;
use memory_core::classify::Tier;
use pgrx::prelude::*;
use std::cell::RefCell;
use std::collections::HashMap;

pub mod stamp;

thread_local! {
    // (org, tier) -> (retention, grace) in microseconds.
    static TIER_POLICIES: RefCell<HashMap<(String, Tier), (Option<i64>, i64)>> = RefCell::new(HashMap::new());
    // memory type label -> (ttl, archive_after) in microseconds.
    static TYPE_POLICIES: RefCell<HashMap<String, (Option<i64>, Option<i64>)>> = RefCell::new(HashMap::new());
}

thread_local! {
    // memory.retention_policies, memory.org_settings, memory.memory_type_policies: a change to any
    // (their row and TRUNCATE triggers invalidate them) drops both caches.
    static WATCHED: RefCell<Vec<pg_sys::Oid>> = const { RefCell::new(Vec::new()) };
}

fn clear() {
    TIER_POLICIES.with(|m| m.borrow_mut().clear());
    TYPE_POLICIES.with(|m| m.borrow_mut().clear());
}

fn relcache(relid: pg_sys::Oid) {
    if relid == pg_sys::InvalidOid || WATCHED.with(|w| w.borrow().contains(&relid)) {
        clear();
    }
}

pub fn init() {
    crate::pg::callbacks::on_relcache(relcache);
}

/// Learn the OIDs of the policy tables (on every cache miss: cheap, and it follows a re-created
/// extension).
fn watch_policy_tables() -> Result<(), MxError> {
    let mut watched = Vec::new();
    for t in ["memory.retention_policies", "memory.org_settings", "memory.memory_type_policies"] {
        let oid = crate::pg::spi::read_one::<pg_sys::Oid>("SELECT pg_catalog.to_regclass($1)::pg_catalog.oid", &[t.into()])
            .map_err(MxError::spi_in("retention"))?;
        watched.extend(oid);
    }
    WATCHED.with(|w| *w.borrow_mut() = watched);
    Ok(())
}

/// Retention and grace of a tier in an org (`memory.retention_policy`, BFSI included).
pub fn tier_policy(org: Option<&str>, tier: Tier) -> Result<(Option<i64>, i64), MxError> {
    let key = (org.unwrap_or("").to_string(), tier);
    if let Some(p) = TIER_POLICIES.with(|m| m.borrow().get(&key).copied()) {
        return Ok(p);
    }
    // The policy tables are closed; read them as the extension owner with a pinned search_path,
    // so neither the writer's rights nor its operators matter.
    let fill = crate::pg::callbacks::Fill::begin();
    let _owner = crate::trust::AsOwner::enter()?;
    watch_policy_tables()?;
    // Under a snapshot taken now, so a dropped cache is never refilled from an older snapshot.
    let (days, grace) = Spi::connect(|client| {
        let r = read_latest(
            client,
            c"SELECT p.retention_days::pg_catalog.int8 OPERATOR(pg_catalog.*) 86400000000,
                     p.soft_delete_grace_days::pg_catalog.int8 OPERATOR(pg_catalog.*) 86400000000
                FROM memory_internal._retention_policy($1, $2::memory.classification) p",
            &[org.into(), tier.as_str().into()],
        )?;
        if r.len() == 0 {
            return Err(MxError::new(code::INTERNAL, "memory_internal._retention_policy returned no row"));
        }
        Ok::<_, MxError>((r.get::<i64>(0, 1)?, r.get::<i64>(0, 2)?))
    })?;
    let p = (days, grace.unwrap_or(0));
    if fill.keep() {
        TIER_POLICIES.with(|m| m.borrow_mut().insert(key, p));
    }
    Ok(p)
}

/// TTL and archive age of a memory type (`memory.memory_type_policies`); unknown → none.
pub fn type_policy(label: &str) -> Result<(Option<i64>, Option<i64>), MxError> {
    if let Some(p) = TYPE_POLICIES.with(|m| m.borrow().get(label).copied()) {
        return Ok(p);
    }
    let fill = crate::pg::callbacks::Fill::begin();
    let _owner = crate::trust::AsOwner::enter()?;
    watch_policy_tables()?;
    let p = Spi::connect(|client| {
        let r = read_latest(
            client,
            c"SELECT (pg_catalog.date_part('epoch', p.ttl) OPERATOR(pg_catalog.*) 1000000)::pg_catalog.int8,
                     (pg_catalog.date_part('epoch', p.archive_after) OPERATOR(pg_catalog.*) 1000000)::pg_catalog.int8
                FROM memory.memory_type_policies p WHERE p.memory_type::pg_catalog.text OPERATOR(pg_catalog.=) $1",
            &[label.into()],
        )?;
        if r.len() == 0 {
            return Ok::<_, MxError>((None, None));
        }
        Ok((r.get::<i64>(0, 1)?, r.get::<i64>(0, 2)?))
    })?;
    if fill.keep() {
        TYPE_POLICIES.with(|m| m.borrow_mut().insert(label.to_string(), p));
    }
    Ok(p)
}

// ---------------------------------------------------------------------------------------------
// The retention rules (memory_core::retention) for SQL.

fn finite_micros(t: TimestampWithTimeZone, what: &str) -> Result<i64, MxError> {
    if t.is_infinity() || t.is_neg_infinity() {
        return Err(MxError::bad_argument(format!("{what} must be a finite time")));
    }
    Ok(pg_sys::TimestampTz::from(t))
}

/// The policy that applies: BFSI for a restricted tier in BFSI mode, else the org's row, else the
/// platform's (the override order of docs/design.md#retention).
#[allow(clippy::too_many_arguments)]
#[pg_extern(immutable, parallel_safe, schema = "memory_internal", name = "_resolve_retention")]
fn resolve_retention(
    restricted: Option<bool>,
    bfsi: Option<bool>,
    has_org: Option<bool>,
    org_days: Option<i32>,
    org_grace: Option<i32>,
    has_platform: Option<bool>,
    platform_days: Option<i32>,
    platform_grace: Option<i32>,
) -> TableIterator<'static, (name!(retention_days, Option<i32>), name!(soft_delete_grace_days, i32), name!(source, &'static str))> {
    use memory_core::retention::{resolve_policy, Policy};
    // No tier (a NULL `restricted`): no policy.
    let Some(restricted) = restricted else { return TableIterator::new(Vec::new()) };
    let org = has_org.unwrap_or(false).then_some(Policy { retention_days: org_days, grace_days: org_grace.unwrap_or(0) });
    let platform = has_platform.unwrap_or(false).then_some(Policy { retention_days: platform_days, grace_days: platform_grace.unwrap_or(0) });
    let (p, source) = resolve_policy(restricted, bfsi.unwrap_or(false), org, platform);
    TableIterator::new(vec![(p.retention_days, p.grace_days, source.as_str())])
}

/// How far a client-written time may run ahead of the transaction's (`memory_core::retention::
/// MAX_CLOCK_SKEW_US`), for SQL's checks of `at` and `created_at`.
#[pg_extern(immutable, parallel_safe, schema = "memory_internal", name = "_max_clock_skew")]
fn max_clock_skew() -> Interval {
    Interval::from_micros(memory_core::retention::MAX_CLOCK_SKEW_US)
}

/// Whether a legal hold (its observation id and user id, as text) covers an observation of its
/// org (`memory_core::retention::hold_covers`): the one hold match of SQL's retention, erasure and
/// hold guards. Immutable, so Citus runs it inside statements that change distributed rows.
#[pg_extern(immutable, parallel_safe, schema = "memory_internal", name = "_hold_matches")]
fn hold_matches(hold_observation: Option<&str>, hold_user: Option<&str>, observation: Option<&str>, user: Option<&str>) -> bool {
    memory_core::retention::hold_covers(hold_observation, hold_user, observation, user)
}

/// at >= created_at + retention_days (false for indefinite retention).
#[pg_extern(immutable, parallel_safe, schema = "memory_internal", name = "_is_expired")]
fn is_expired(created_at: Option<TimestampWithTimeZone>, retention_days: Option<i32>, at: Option<TimestampWithTimeZone>) -> Option<bool> {
    let (c, a) = (created_at?, at?);
    let (c, a) = (finite_micros(c, "created_at").or_raise(), finite_micros(a, "at").or_raise());
    Some(memory_core::retention::is_expired(c, retention_days, a))
}

/// Whether a soft-deleted row may be hard-deleted at `at` (past purge_after, and soft-deleted for
/// its whole grace).
#[pg_extern(immutable, parallel_safe, schema = "memory_internal", name = "_purge_due")]
fn purge_due(
    soft_deleted_at: Option<TimestampWithTimeZone>,
    purge_after: Option<TimestampWithTimeZone>,
    expires_at: Option<TimestampWithTimeZone>,
    at: Option<TimestampWithTimeZone>,
) -> Option<bool> {
    let at = at?;
    let (Some(sd), Some(p)) = (soft_deleted_at, purge_after) else { return Some(false) };
    // Infinite stamps never come due (and are refused on write).
    let m = |t: TimestampWithTimeZone| (!t.is_infinity() && !t.is_neg_infinity()).then(|| pg_sys::TimestampTz::from(t));
    Some(match (m(sd), m(p), m(at)) {
        (Some(sd), Some(p), Some(at)) => memory_core::retention::purge_due(sd, p, expires_at.and_then(m), at),
        _ => false,
    })
}
