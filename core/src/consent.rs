//! Consent and user contexts (docs/design.md#consent-and-drift): the rules the SQL layer (sql/consent.sql) and the drift
//! detectors share. A context's fields, which of them onboarding takes as preferences, which
//! speak of a position, and which field each context slice loads are listed here once.

/// The fields a user context may hold (`memory.user_contexts.fields`).
pub const CONTEXT_FIELDS: [&str; 9] = [
    "language_preference",
    "research_depth",
    "risk_prompt_preference",
    "user_focus_reason",
    "research_style",
    "user_stated_position_context",
    "constraints",
    "time_horizon",
    "position_consent",
];

/// The fields `memory.grant_consent(..., preferences)` turns into the profile context.
pub const PREFERENCE_FIELDS: [&str; 4] = ["language_preference", "research_depth", "risk_prompt_preference", "user_focus_reason"];

/// The fields that state a position: outside one task they need save_to_profile and the user's
/// explicit `position_consent`.
pub const POSITION_FIELDS: [&str; 3] = ["user_stated_position_context", "constraints", "time_horizon"];

/// The context slice each field-backed slice of `memory.load_slices` loads.
pub const SLICE_FIELDS: [(&str, &str); 7] = [
    ("S1_language_pref", "language_preference"),
    ("S2_research_depth", "research_depth"),
    ("S3_risk_prompt_pref", "risk_prompt_preference"),
    ("S4_user_focus_reason", "user_focus_reason"),
    ("S5_research_style", "research_style"),
    ("S7_user_stated_position_context", "user_stated_position_context"),
    ("S8_constraints", "constraints"),
];

/// A field list by name, as SQL asks for it (`known`, `preferences`, `position`).
pub fn fields(kind: &str) -> Option<&'static [&'static str]> {
    match kind {
        "known" => Some(&CONTEXT_FIELDS),
        "preferences" => Some(&PREFERENCE_FIELDS),
        "position" => Some(&POSITION_FIELDS),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_field_is_a_context_field() {
        for f in PREFERENCE_FIELDS.iter().chain(&POSITION_FIELDS).chain(SLICE_FIELDS.iter().map(|(_, f)| f)) {
            assert!(CONTEXT_FIELDS.contains(f), "{f}");
        }
        assert_eq!(fields("known"), Some(&CONTEXT_FIELDS[..]));
        assert_eq!(fields("position"), Some(&POSITION_FIELDS[..]));
        assert_eq!(fields("nonsense"), None);
    }
}
