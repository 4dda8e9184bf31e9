//! Knowledge lifecycle rules (docs/design.md#knowledge-lifecycle): the state machine, source
//! authority tiers, staleness, re-check reasons, conflict resolution and the PII field names a
//! claim may list for decay. Times are microseconds.

use crate::retention::DAY_US;

/// A lifecycle state of an entity or a claim, in the order of the SQL enum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum State {
    Pending,
    Active,
    Superseded,
    Retracted,
    Archived,
}

impl State {
    pub const ALL: [State; 5] = [State::Pending, State::Active, State::Superseded, State::Retracted, State::Archived];

    pub fn as_str(self) -> &'static str {
        match self {
            State::Pending => "pending",
            State::Active => "active",
            State::Superseded => "superseded",
            State::Retracted => "retracted",
            State::Archived => "archived",
        }
    }

    /// The exact label (as the enum spells it); anything else is unknown.
    pub fn parse(s: &str) -> Option<State> {
        State::ALL.into_iter().find(|st| st.as_str() == s)
    }
}

/// The transition table. A state to itself is not a transition (an UPDATE that keeps the
/// state is a no-op the trigger lets through); `archived` is terminal.
pub fn can_transition(from: State, to: State) -> bool {
    use State::*;
    matches!(
        (from, to),
        (Pending, Active | Retracted | Archived) | (Active, Superseded | Retracted | Archived) | (Superseded | Retracted, Archived)
    )
}

/// What an UPDATE of a state column may do: keep it, or make a legal transition.
pub fn update_allowed(from: State, to: State) -> bool {
    from == to || can_transition(from, to)
}

/// Retiring an entity (`memory.govern.retire_attempt`): active to retracted or archived.
pub fn is_retirement(from: State, to: State) -> bool {
    from == State::Active && matches!(to, State::Retracted | State::Archived)
}

/// Whether entering `to` takes a row out of circulation, which stamps `t_invalid`: superseded,
/// retracted and archived.
pub fn stamps_t_invalid(to: State) -> bool {
    matches!(to, State::Superseded | State::Retracted | State::Archived)
}

/// Source authority tier (docs/design.md#knowledge-lifecycle): 1 for NEJM, JAMA, Cochrane and NCCN; 2 for
/// PubMed, Elsevier, Wiley, LWW, ClinicalTrials.gov, ClinVar and DrugBank; 3 for patient notes,
/// the open web, clinical narrative and anything unknown (fail-safe low). Matching ignores case
/// and every character that is not a letter or digit, so `ClinicalTrials.gov`,
/// `clinicaltrials_gov` and `clinical-trials-gov` are one source.
pub fn source_tier(source: Option<&str>) -> i32 {
    let Some(source) = source else { return 3 };
    let key: String = source.chars().filter(char::is_ascii_alphanumeric).map(|c| c.to_ascii_lowercase()).collect();
    match key.as_str() {
        "nejm" | "jama" | "cochrane" | "nccn" => 1,
        "pubmed" | "elsevier" | "wiley" | "lww" | "clinicaltrialsgov" | "clinvar" | "drugbank" => 2,
        _ => 3,
    }
}

/// A tier-3 source may not supersede a tier-1 claim (docs/design.md#knowledge-lifecycle).
pub fn supersession_tier_allowed(new_source: Option<&str>, old_source: Option<&str>) -> bool {
    !(source_tier(new_source) == 3 && source_tier(old_source) == 1)
}

/// Whole days elapsed, rounded down (as Python's `timedelta.days`).
pub fn age_days(age_us: i64) -> i64 {
    age_us.div_euclid(DAY_US)
}

/// Staleness: older than `freshness_days` whole days.
pub fn is_stale(age_us: i64, freshness_days: i64) -> bool {
    age_days(age_us) > freshness_days
}

/// Why an active claim is due for a re-check (the freshness re-check).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecheckReason {
    BelowConfidence,
    Aged,
    BelowConfidenceAndAged,
}

impl RecheckReason {
    pub fn as_str(self) -> &'static str {
        match self {
            RecheckReason::BelowConfidence => "below_confidence",
            RecheckReason::Aged => "aged",
            RecheckReason::BelowConfidenceAndAged => "below_confidence_and_aged",
        }
    }
}

/// Strictly below the threshold, and/or created before `now - max_age` (age above `max_age`).
pub fn recheck_reason(confidence: f64, threshold: f64, age_us: i64, max_age_us: i64) -> Option<RecheckReason> {
    let below = confidence < threshold;
    let aged = age_us > max_age_us;
    match (below, aged) {
        (true, true) => Some(RecheckReason::BelowConfidenceAndAged),
        (true, false) => Some(RecheckReason::BelowConfidence),
        (false, true) => Some(RecheckReason::Aged),
        (false, false) => None,
    }
}

/// One side of a conflict.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Contender<'a> {
    pub confidence: f64,
    pub created_us: i64,
    /// A stable last resort when confidence and creation time are equal (the claim id).
    pub id: &'a [u8],
}

/// Which of two conflicting claims loses (`false`: a, `true`: b): the lower confidence; on a tie
/// the newer (older wins); on a tie of both, the greater id.
pub fn conflict_loser_is_b(a: &Contender, b: &Contender) -> bool {
    if a.confidence != b.confidence {
        return b.confidence < a.confidence;
    }
    if a.created_us != b.created_us {
        return b.created_us > a.created_us;
    }
    b.id > a.id
}

/// A name a claim's `pii_fields` may hold: a column that decay redacts, or one top-level key of
/// the `details` object (`details.<key>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PiiField {
    ClaimText,
    SubjectId,
    Supports,
    Source,
    Detail(String),
}

/// The text that replaces a redacted value.
pub const REDACTED: &str = "[redacted]";

impl PiiField {
    pub fn parse(name: &str) -> Option<PiiField> {
        match name {
            "claim_text" => Some(PiiField::ClaimText),
            "subject_id" => Some(PiiField::SubjectId),
            "supports" => Some(PiiField::Supports),
            "source" => Some(PiiField::Source),
            _ => name.strip_prefix("details.").filter(|k| !k.is_empty()).map(|k| PiiField::Detail(k.to_string())),
        }
    }
}

/// The first name that is not a known PII field (None: all are known).
pub fn first_unknown_pii_field<'a>(names: impl IntoIterator<Item = Option<&'a str>>) -> Option<String> {
    names.into_iter().find_map(|n| match n {
        Some(n) if PiiField::parse(n).is_some() => None,
        Some(n) => Some(n.to_string()),
        None => Some("NULL".to_string()),
    })
}

#[cfg(test)]
mod tests;
