//! Retention stamps (SPEC §4): when a memory expires, when it may be purged, when it moves to the
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const HOUR: i64 = 3_600_000_000;

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
