//! Retention stamps (docs/design.md#retention): when a memory expires, when it may be purged, when it moves to the
//! archive. Times are microseconds; `None` means never.

/// Microseconds in a day.
pub const DAY_US: i64 = 86_400_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamps {
    pub expires_at: Option<i64>,
    pub purge_after: Option<i64>,
    pub archive_at: Option<i64>,
}

/// `expires_at` is the earlier of the classification's retention and the memory type's TTL;
/// `purge_after` adds the soft-delete grace; `archive_at` is the memory type's archive age.
pub fn stamps(created: i64, retention: Option<i64>, grace: i64, ttl: Option<i64>, archive_after: Option<i64>) -> Stamps {
    let expires_at = match (retention, ttl) {
        (Some(r), Some(t)) => Some(created.saturating_add(r.min(t))),
        (Some(d), None) | (None, Some(d)) => Some(created.saturating_add(d)),
        (None, None) => None,
    };
    Stamps {
        expires_at,
        purge_after: expires_at.map(|e| e.saturating_add(grace.max(0))),
        archive_at: archive_after.map(|a| created.saturating_add(a)),
    }
}

/// BFSI strict mode keeps restricted memories 7 years (SR 11-7), whatever else says.
/// How far a client-written time may run ahead of the transaction's (clock skew between an
/// application server and the database): 5 minutes. A creation time or a maintenance run's `at`
/// further ahead would lengthen retention or travel in time (docs/design.md#application-roles).
pub const MAX_CLOCK_SKEW_US: i64 = 5 * 60 * 1_000_000;

/// Whether a client-written creation time `created` is acceptable at transaction time `now`: any
/// past time (an import backdates, which only shortens retention), and at most
/// [`MAX_CLOCK_SKEW_US`] ahead.
pub fn created_at_allowed(created: i64, now: i64) -> bool {
    created <= now.saturating_add(MAX_CLOCK_SKEW_US)
}

/// Whether a legal hold covers an observation (docs/design.md#retention): a hold names one
/// observation (`hold_observation`), or every observation of one subject (`hold_user`), or, with
/// neither, the whole org (the org is matched by the caller). Ids are compared as text.
pub fn hold_covers(hold_observation: Option<&str>, hold_user: Option<&str>, observation: Option<&str>, user: Option<&str>) -> bool {
    match (hold_observation, hold_user) {
        (Some(h), _) => observation == Some(h),
        (None, None) => true,
        (None, Some(u)) => user == Some(u),
    }
}

pub const BFSI_RESTRICTED_DAYS: i32 = 2555;
/// The grace of the BFSI rule when no policy row names one.
pub const BFSI_DEFAULT_GRACE_DAYS: i32 = 7;

/// A tier's retention (None: indefinite) and soft-delete grace, in days.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    pub retention_days: Option<i32>,
    pub grace_days: i32,
}

/// Where the policy that applies came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicySource {
    Org,
    Platform,
    Bfsi,
}

impl PolicySource {
    pub fn as_str(self) -> &'static str {
        match self {
            PolicySource::Org => "org",
            PolicySource::Platform => "platform",
            PolicySource::Bfsi => "bfsi",
        }
    }
}

/// The override order of docs/design.md#retention: BFSI mode decides a restricted tier (2555 days, the grace of
/// the org's or platform's row, else 7); otherwise the org's row, else the platform's, else
/// indefinite with no grace.
pub fn resolve_policy(restricted: bool, bfsi: bool, org: Option<Policy>, platform: Option<Policy>) -> (Policy, PolicySource) {
    let row = org.map(|p| (p, PolicySource::Org)).or(platform.map(|p| (p, PolicySource::Platform)));
    if restricted && bfsi {
        let grace = row.map(|(p, _)| p.grace_days).unwrap_or(BFSI_DEFAULT_GRACE_DAYS);
        return (Policy { retention_days: Some(BFSI_RESTRICTED_DAYS), grace_days: grace }, PolicySource::Bfsi);
    }
    row.unwrap_or((Policy { retention_days: None, grace_days: 0 }, PolicySource::Platform))
}

/// Whether a row created at `created` (microseconds) has expired at `at` under `retention_days`
/// (None: never): at or past created + the days.
pub fn is_expired(created: i64, retention_days: Option<i32>, at: i64) -> bool {
    match retention_days {
        None => false,
        Some(d) => at >= created.saturating_add(i64::from(d).saturating_mul(DAY_US)),
    }
}

/// Whether a soft-deleted row may be hard-deleted at `at`: past `purge_after`, and soft-deleted
/// for at least its grace (purge_after - expires_at), so a late retention run still leaves the
/// full grace after the soft delete.
pub fn purge_due(soft_deleted_at: i64, purge_after: i64, expires_at: Option<i64>, at: i64) -> bool {
    let grace = purge_after.saturating_sub(expires_at.unwrap_or(purge_after));
    purge_after <= at && soft_deleted_at.saturating_add(grace) <= at
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_hold_covers_its_observation_its_subject_or_its_org() {
        use super::hold_covers;
        // One observation.
        assert!(hold_covers(Some("o1"), None, Some("o1"), Some("u")));
        assert!(!hold_covers(Some("o1"), None, Some("o2"), Some("u")));
        assert!(!hold_covers(Some("o1"), Some("u"), None, Some("u")));
        // One subject.
        assert!(hold_covers(None, Some("u"), Some("o"), Some("u")));
        assert!(!hold_covers(None, Some("u"), Some("o"), Some("v")));
        assert!(!hold_covers(None, Some("u"), Some("o"), None));
        // The whole org.
        assert!(hold_covers(None, None, None, None));
    }

    #[test]
    fn created_at_may_lag_but_not_lead_by_more_than_the_skew() {
        let now = 1_000_000_000_000;
        assert!(super::created_at_allowed(now - 50 * 365 * super::DAY_US, now));
        assert!(super::created_at_allowed(now + super::MAX_CLOCK_SKEW_US, now));
        assert!(!super::created_at_allowed(now + super::MAX_CLOCK_SKEW_US + 1, now));
        assert!(!super::created_at_allowed(i64::MAX - 1, now));
        assert!(super::created_at_allowed(now, i64::MAX));
    }

    use super::*;
    use proptest::prelude::*;

    const HOUR: i64 = 3_600_000_000;

    #[test]
    fn override_order() {
        let org = Some(Policy { retention_days: Some(10), grace_days: 1 });
        let platform = Some(Policy { retention_days: Some(30), grace_days: 7 });
        assert_eq!(resolve_policy(false, false, org, platform), (org.unwrap(), PolicySource::Org));
        assert_eq!(resolve_policy(false, false, None, platform), (platform.unwrap(), PolicySource::Platform));
        assert_eq!(resolve_policy(false, true, None, platform).1, PolicySource::Platform, "BFSI only decides restricted");
        assert_eq!(
            resolve_policy(true, true, org, platform),
            (Policy { retention_days: Some(2555), grace_days: 1 }, PolicySource::Bfsi)
        );
        assert_eq!(resolve_policy(true, true, None, None), (Policy { retention_days: Some(2555), grace_days: 7 }, PolicySource::Bfsi));
        assert_eq!(resolve_policy(true, false, None, None), (Policy { retention_days: None, grace_days: 0 }, PolicySource::Platform));
    }

    #[test]
    fn expiry_and_purge() {
        assert!(!is_expired(0, None, i64::MAX));
        assert!(!is_expired(0, Some(1), DAY_US - 1));
        assert!(is_expired(0, Some(1), DAY_US));
        assert!(is_expired(0, Some(0), 0));
        // Grace 2 days: expired at day 10, purge after day 12; a soft delete on day 20 waits to day 22.
        let (exp, purge) = (10 * DAY_US, 12 * DAY_US);
        assert!(!purge_due(20 * DAY_US, purge, Some(exp), 21 * DAY_US));
        assert!(purge_due(20 * DAY_US, purge, Some(exp), 22 * DAY_US));
        assert!(purge_due(exp, purge, Some(exp), purge));
        assert!(!purge_due(exp, purge, Some(exp), purge - 1));
    }

    proptest! {
        #[test]
        fn purge_never_before_grace_or_purge_after(sd in 0i64..1_000_000, exp in 0i64..1_000_000, grace in 0i64..1_000, at in 0i64..3_000_000) {
            let purge = exp + grace;
            if purge_due(sd, purge, Some(exp), at) {
                prop_assert!(at >= purge && at >= sd + grace);
            }
        }
    }

    #[test]
    fn seed_schedules() {
        // internal, long_term: 365 days, grace 30, archive after 365 days.
        let s = stamps(0, Some(365 * DAY_US), 30 * DAY_US, None, Some(365 * DAY_US));
        assert_eq!(s, Stamps { expires_at: Some(365 * DAY_US), purge_after: Some(395 * DAY_US), archive_at: Some(365 * DAY_US) });
        // public, persona: kept forever.
        assert_eq!(stamps(5, None, 0, None, None), Stamps { expires_at: None, purge_after: None, archive_at: None });
        // internal, short_term: the 1-hour TTL comes first.
        assert_eq!(stamps(0, Some(365 * DAY_US), 30 * DAY_US, Some(HOUR), None).expires_at, Some(HOUR));
        // public, episodic: only the TTL.
        assert_eq!(stamps(0, None, 0, Some(90 * DAY_US), Some(90 * DAY_US)).purge_after, Some(90 * DAY_US));
    }

    #[test]
    fn far_future_saturates() {
        assert_eq!(stamps(i64::MAX - 1, Some(DAY_US), DAY_US, None, None).purge_after, Some(i64::MAX));
    }

    proptest! {
        #[test]
        fn expiry_is_the_earlier_limit(created in -1_000_000_000_000_000i64..1_000_000_000_000_000, r in proptest::option::of(0i64..36500 * DAY_US),
                                       g in 0i64..3650 * DAY_US, t in proptest::option::of(0i64..3650 * DAY_US)) {
            let s = stamps(created, r, g, t, None);
            if let Some(e) = s.expires_at {
                prop_assert!(r.map_or(true, |r| e <= created + r));
                prop_assert!(t.map_or(true, |t| e <= created + t));
                prop_assert!(e >= created);
                prop_assert_eq!(s.purge_after, Some(e + g));
            } else {
                prop_assert!(r.is_none() && t.is_none());
            }
        }
    }
}
