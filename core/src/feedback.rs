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

/// What is known about one memory when an outcome is recorded for it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Observed {
    pub weight: f64,
    pub soft_deleted: bool,
    /// This session's outcome was recorded for it already.
    pub already_recorded: bool,
    /// Distinct sessions recorded so far, failed and successful (without this one).
    pub failed_sessions: i64,
    pub successful_sessions: i64,
}

/// What recording one outcome does to one memory.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Decision {
    /// The new weight and the α it took.
    Applied { new: f64, alpha: f64 },
    /// Left as it is, for this reason (`soft_deleted`, `already_recorded`, `non_finite_weight`).
    Skipped(&'static str),
}

/// The rule of `memory.record_outcome` for one memory: a soft-deleted memory, one this session
/// already moved, or one without a finite weight is left; otherwise one EMA step with the α of
/// `alpha_for`, counting the session being recorded.
pub fn decide(seen: &Observed, outcome: Outcome, alpha_success: f64, alpha_failure: f64) -> Result<Decision, FeedbackError> {
    if seen.soft_deleted {
        return Ok(Decision::Skipped("soft_deleted"));
    }
    if seen.already_recorded {
        return Ok(Decision::Skipped("already_recorded"));
    }
    if !seen.weight.is_finite() {
        return Ok(Decision::Skipped("non_finite_weight"));
    }
    check_alpha(alpha_success)?;
    check_alpha(alpha_failure)?;
    let (failed, ok) = if outcome.is_success() {
        (seen.failed_sessions, seen.successful_sessions + 1)
    } else {
        (seen.failed_sessions + 1, seen.successful_sessions)
    };
    let alpha = alpha_for(outcome, alpha_success, alpha_failure, failed, ok);
    Ok(Decision::Applied { new: step(seen.weight, outcome, alpha), alpha })
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
    fn decide_skips_then_steps_counting_this_session() {
        let seen = Observed { weight: 0.5, soft_deleted: false, already_recorded: false, failed_sessions: 2, successful_sessions: 0 };
        assert_eq!(decide(&Observed { soft_deleted: true, already_recorded: true, ..seen }, Outcome::Rejected, 0.1, 0.15), Ok(Decision::Skipped("soft_deleted")));
        assert_eq!(decide(&Observed { already_recorded: true, ..seen }, Outcome::Rejected, 0.1, 0.15), Ok(Decision::Skipped("already_recorded")));
        assert_eq!(decide(&Observed { weight: f64::NAN, ..seen }, Outcome::Rejected, 0.1, 0.15), Ok(Decision::Skipped("non_finite_weight")));
        assert_eq!(decide(&seen, Outcome::Rejected, 0.1, 0.0), Err(FeedbackError::Alpha(0.0)));
        // The third failed session makes it misleading: twice alpha_failure.
        assert_eq!(decide(&seen, Outcome::Rejected, 0.1, 0.15), Ok(Decision::Applied { new: step(0.5, Outcome::Rejected, 0.3), alpha: 0.3 }));
        assert_eq!(decide(&seen, Outcome::Accepted, 0.1, 0.15), Ok(Decision::Applied { new: step(0.5, Outcome::Accepted, 0.1), alpha: 0.1 }));
    }

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
