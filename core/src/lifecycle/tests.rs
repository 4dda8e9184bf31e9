use super::*;
use proptest::prelude::*;
use State::*;

/// The transition table, row by row: from pending, active, superseded, retracted, archived to
/// active, superseded, retracted, archived (pending is never a target).
#[test]
fn transition_table_is_the_seeds() {
    let table = [
        (Pending, [true, false, true, true]),
        (Active, [false, true, true, true]),
        (Superseded, [false, false, false, true]),
        (Retracted, [false, false, false, true]),
        (Archived, [false, false, false, false]),
    ];
    for (from, row) in table {
        for (to, want) in [Active, Superseded, Retracted, Archived].into_iter().zip(row) {
            assert_eq!(can_transition(from, to), want, "{from:?} -> {to:?}");
        }
        assert!(!can_transition(from, Pending), "nothing returns to pending");
    }
}

#[test]
fn same_state_is_a_no_op_not_a_transition() {
    for s in State::ALL {
        assert!(!can_transition(s, s));
        assert!(update_allowed(s, s));
    }
}

#[test]
fn labels_round_trip_and_unknown_is_refused() {
    for s in State::ALL {
        assert_eq!(State::parse(s.as_str()), Some(s));
    }
    assert_eq!(State::parse("Active"), None);
    assert_eq!(State::parse("deleted"), None);
    assert_eq!(State::parse(""), None);
}

#[test]
fn retirement_is_active_to_retracted_or_archived() {
    assert!(is_retirement(Active, Retracted));
    assert!(is_retirement(Active, Archived));
    assert!(!is_retirement(Pending, Archived));
    assert!(!is_retirement(Active, Superseded));
}

#[test]
fn tiers_follow_the_seed_map() {
    for s in ["NEJM", "jama", "Cochrane", "NCCN"] {
        assert_eq!(source_tier(Some(s)), 1, "{s}");
    }
    for s in ["PubMed", "Elsevier", "Wiley", "LWW", "ClinicalTrials.gov", "clinicaltrials_gov", "ClinVar", "DrugBank"] {
        assert_eq!(source_tier(Some(s)), 2, "{s}");
    }
    for s in ["patient-note", "open-web", "clinical-narrative", "blog.example", "", "nejm2"] {
        assert_eq!(source_tier(Some(s)), 3, "{s}");
    }
    assert_eq!(source_tier(None), 3);
}

#[test]
fn tier_three_may_not_supersede_tier_one() {
    assert!(!supersession_tier_allowed(Some("open-web"), Some("NEJM")));
    assert!(!supersession_tier_allowed(None, Some("JAMA")));
    assert!(supersession_tier_allowed(Some("PubMed"), Some("NEJM")));
    assert!(supersession_tier_allowed(Some("open-web"), Some("PubMed")));
    assert!(supersession_tier_allowed(Some("NEJM"), Some("open-web")));
}

#[test]
fn staleness_counts_whole_days() {
    assert!(!is_stale(30 * DAY_US, 30));
    assert!(!is_stale(31 * DAY_US - 1, 30));
    assert!(is_stale(31 * DAY_US, 30));
    // A future t_created is -1 days old, as Python's timedelta.days says.
    assert_eq!(age_days(-1), -1);
    assert!(!is_stale(-1, 0));
    assert!(is_stale(DAY_US, 0));
}

#[test]
fn recheck_reasons() {
    let max = 90 * DAY_US;
    assert_eq!(recheck_reason(0.4, 0.5, DAY_US, max), Some(RecheckReason::BelowConfidence));
    assert_eq!(recheck_reason(0.5, 0.5, DAY_US, max), None, "strictly below");
    assert_eq!(recheck_reason(0.9, 0.5, max + 1, max), Some(RecheckReason::Aged));
    assert_eq!(recheck_reason(0.9, 0.5, max, max), None);
    assert_eq!(recheck_reason(0.1, 0.5, max + 1, max).map(RecheckReason::as_str), Some("below_confidence_and_aged"));
}

#[test]
fn conflict_loser() {
    let a = Contender { confidence: 0.9, created_us: 10, id: b"a" };
    let b = Contender { confidence: 0.4, created_us: 5, id: b"b" };
    assert!(conflict_loser_is_b(&a, &b), "lower confidence loses");
    assert!(!conflict_loser_is_b(&b, &a));
    let c = Contender { confidence: 0.9, created_us: 20, id: b"c" };
    assert!(conflict_loser_is_b(&a, &c), "tie: the newer loses");
    assert!(!conflict_loser_is_b(&c, &a));
    let d = Contender { confidence: 0.9, created_us: 10, id: b"d" };
    assert!(conflict_loser_is_b(&a, &d), "full tie: the greater id loses");
}

#[test]
fn pii_field_names() {
    assert_eq!(PiiField::parse("claim_text"), Some(PiiField::ClaimText));
    assert_eq!(PiiField::parse("details.mrn"), Some(PiiField::Detail("mrn".into())));
    assert_eq!(PiiField::parse("details."), None);
    assert_eq!(PiiField::parse("name"), None);
    assert_eq!(first_unknown_pii_field([Some("claim_text"), Some("subject_id")]), None);
    assert_eq!(first_unknown_pii_field([Some("claim_text"), Some("ssn")]), Some("ssn".into()));
    assert_eq!(first_unknown_pii_field([None]), Some("NULL".into()));
}

fn state() -> impl Strategy<Value = State> {
    prop::sample::select(State::ALL.to_vec())
}

proptest! {
    /// Every walk through legal transitions ends in archived within four steps, and nothing
    /// leaves archived: the machine has no loops.
    #[test]
    fn no_loops(path in prop::collection::vec(state(), 1..12)) {
        let mut cur = Pending;
        let mut steps = 0;
        for next in path {
            if can_transition(cur, next) {
                prop_assert!(next > cur, "{:?} -> {:?} goes backwards", cur, next);
                cur = next;
                steps += 1;
            }
        }
        prop_assert!(steps <= 3);
    }

    /// The loser is one of the two, independent of argument order.
    #[test]
    fn loser_is_symmetric(ca in 0.0f64..=1.0, cb in 0.0f64..=1.0, ta in 0i64..5, tb in 0i64..5, ia in 0u8..3, ib in 0u8..3) {
        prop_assume!(ia != ib);
        let (ida, idb) = ([ia], [ib]);
        let a = Contender { confidence: ca, created_us: ta, id: &ida };
        let b = Contender { confidence: cb, created_us: tb, id: &idb };
        prop_assert_eq!(conflict_loser_is_b(&a, &b), !conflict_loser_is_b(&b, &a));
    }
}

#[test]
fn out_of_circulation_states_stamp_t_invalid() {
    use State::*;
    let stamped: Vec<State> = State::ALL.into_iter().filter(|s| stamps_t_invalid(*s)).collect();
    assert_eq!(stamped, vec![Superseded, Retracted, Archived]);
}
