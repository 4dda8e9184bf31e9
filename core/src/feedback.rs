//! Feedback weights (docs/design.md#feedback-weights): asymmetric EMA and the
//! misleading-observation rule.

/// A session's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Accepted,
    Rejected,
    Rework,
}

impl Outcome {
    pub fn parse(s: &str) -> Option<Outcome> {
        match s {
            "accepted" => Some(Outcome::Accepted),
            "rejected" => Some(Outcome::Rejected),
            "rework" => Some(Outcome::Rework),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Accepted => "accepted",
            Outcome::Rejected => "rejected",
            Outcome::Rework => "rework",
        }
    }

    pub fn is_success(self) -> bool {
        self == Outcome::Accepted
    }

    /// The EMA target: 1 for accepted, 0 for rejected or rework.
    pub fn signal(self) -> f64 {
        if self.is_success() {
            1.0
        } else {
            0.0
        }
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FeedbackError {
    #[error("alpha must be in (0, 1], got {0}")]
    Alpha(f64),
    #[error("weight must be a finite number, got {0}")]
    Weight(f64),
}

pub fn check_alpha(alpha: f64) -> Result<f64, FeedbackError> {
    if alpha > 0.0 && alpha <= 1.0 {
        Ok(alpha)
    } else {
        Err(FeedbackError::Alpha(alpha))
    }
}

/// Whether a weight a client writes is one memory_ext keeps: finite and in [0, 1] (1, the
/// default, is the most any memory starts with; outcomes move it by EMA within the range).
pub fn weight_allowed(w: f64) -> bool {
    (0.0..=1.0).contains(&w)
}

/// `new = previous × (1 − α) + signal × α`, with α by direction of the outcome.
pub fn ema(previous: f64, outcome: Outcome, alpha_success: f64, alpha_failure: f64) -> Result<f64, FeedbackError> {
    check_alpha(alpha_success)?;
    check_alpha(alpha_failure)?;
    if !previous.is_finite() {
        return Err(FeedbackError::Weight(previous));
    }
    let alpha = if outcome.is_success() { alpha_success } else { alpha_failure };
    Ok(step(previous, outcome, alpha))
}

/// One EMA step with a given α.
pub fn step(previous: f64, outcome: Outcome, alpha: f64) -> f64 {
    previous * (1.0 - alpha) + outcome.signal() * alpha
}

/// Misleading: at least 3 distinct failed sessions and no successful one.
pub const MISLEADING_FAILED_SESSIONS: i64 = 3;

pub fn is_misleading(failed_sessions: i64, successful_sessions: i64) -> bool {
    failed_sessions >= MISLEADING_FAILED_SESSIONS && successful_sessions == 0
}

/// The α for one update. `failed_sessions` and `successful_sessions` count distinct sessions
/// *including the one being recorded*: a negative update of a misleading observation uses
/// 2 × alpha_failure, capped at 1 (the aggressive downweight).
pub fn alpha_for(outcome: Outcome, alpha_success: f64, alpha_failure: f64, failed_sessions: i64, successful_sessions: i64) -> f64 {
    if outcome.is_success() {
        alpha_success
    } else if is_misleading(failed_sessions, successful_sessions) {
        (2.0 * alpha_failure).min(1.0)
    } else {
        alpha_failure
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn seed_formula() {
        assert!((ema(1.0, Outcome::Accepted, 0.1, 0.15).unwrap() - 1.0).abs() < 1e-12);
        assert!((ema(1.0, Outcome::Rejected, 0.1, 0.15).unwrap() - 0.85).abs() < 1e-12);
        assert!((ema(0.5, Outcome::Accepted, 0.1, 0.15).unwrap() - 0.55).abs() < 1e-12);
        assert!((ema(0.5, Outcome::Rework, 0.1, 0.15).unwrap() - 0.425).abs() < 1e-12);
    }

    #[test]
    fn alpha_bounds() {
        for bad in [0.0, -0.1, 1.0000001, f64::NAN, f64::INFINITY] {
            assert!(ema(0.5, Outcome::Accepted, bad, 0.15).is_err(), "{bad}");
            assert!(ema(0.5, Outcome::Accepted, 0.1, bad).is_err(), "{bad}");
        }
        assert_eq!(ema(0.5, Outcome::Rejected, 0.1, 1.0).unwrap(), 0.0);
        assert!(ema(f64::NAN, Outcome::Accepted, 0.1, 0.15).is_err());
        assert!(ema(f64::INFINITY, Outcome::Accepted, 0.1, 0.15).is_err());
    }

    #[test]
    fn misleading_doubles_failure_alpha_only() {
        assert_eq!(alpha_for(Outcome::Rejected, 0.1, 0.15, 3, 0), 0.3);
        assert_eq!(alpha_for(Outcome::Rejected, 0.1, 0.15, 2, 0), 0.15);
        assert_eq!(alpha_for(Outcome::Rejected, 0.1, 0.15, 5, 1), 0.15);
        assert_eq!(alpha_for(Outcome::Accepted, 0.1, 0.15, 9, 0), 0.1);
        assert_eq!(alpha_for(Outcome::Rework, 0.1, 0.6, 3, 0), 1.0);
    }

    #[test]
    fn labels() {
        for o in [Outcome::Accepted, Outcome::Rejected, Outcome::Rework] {
            assert_eq!(Outcome::parse(o.as_str()), Some(o));
        }
        assert_eq!(Outcome::parse("Accepted"), None);
    }

    proptest! {
        #[test]
        fn stays_in_unit_interval(prev in 0.0f64..=1.0, a in 0.0001f64..=1.0, b in 0.0001f64..=1.0, ok in any::<bool>()) {
            let o = if ok { Outcome::Accepted } else { Outcome::Rejected };
            let w = ema(prev, o, a, b).unwrap();
            prop_assert!((0.0..=1.0).contains(&w));
            if ok { prop_assert!(w >= prev - 1e-12) } else { prop_assert!(w <= prev + 1e-12) }
        }

        #[test]
        fn converges_towards_signal(prev in 0.0f64..=1.0, a in 0.01f64..=1.0) {
            let mut w = prev;
            for _ in 0..2000 { w = step(w, Outcome::Rejected, a); }
            prop_assert!(w < 1e-6);
        }
    }
}
