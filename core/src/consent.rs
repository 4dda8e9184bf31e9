//! Consent and user contexts (docs/design.md#consent-and-drift): the rules the SQL layer (sql/consent.sql) and the drift
//! detectors share. A context's fields, which of them onboarding takes as preferences, which
//! speak of a position, what each slice of `memory.load_slices` loads and under which scopes,
//! the scope each context write needs, and what revoking each scope does are listed here once;
//! SQL reads them through thin immutable functions (src/consent.rs).
//!
//! One rule is not data and is written twice, for speed: the consent *in force* for
//! (org, user) is the `scopes` of its latest version (highest `version`) in memory.consents,
//! none when there is no version. SQL reads it in `memory_internal._consent_scopes` (and
//! under a share lock in `_consent_scopes_locked`), the drift detectors by an index scan with a
//! per-backend cache in src/drift.rs (`consent_in_force`).

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

/// A field list by name, as SQL asks for it (`known`, `preferences`, `position`).
pub fn fields(kind: &str) -> Option<&'static [&'static str]> {
    match kind {
        "known" => Some(&CONTEXT_FIELDS),
        "preferences" => Some(&PREFERENCE_FIELDS),
        "position" => Some(&POSITION_FIELDS),
        _ => None,
    }
}

/// The field that carries a user's explicit consent to keep a position outside one task.
pub const POSITION_CONSENT_FIELD: &str = "position_consent";

/// A consent scope (`memory.consent_scope`), in the enum's order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scope {
    CreateTask,
    SaveToThread,
    SaveToProfile,
    TrainingUseAllowed,
}

/// Every consent scope, in `memory.consent_scope`'s order.
pub const SCOPES: [Scope; 4] = [Scope::CreateTask, Scope::SaveToThread, Scope::SaveToProfile, Scope::TrainingUseAllowed];

impl Scope {
    /// The label of `memory.consent_scope`.
    pub const fn name(self) -> &'static str {
        match self {
            Scope::CreateTask => "create_task",
            Scope::SaveToThread => "save_to_thread",
            Scope::SaveToProfile => "save_to_profile",
            Scope::TrainingUseAllowed => "training_use_allowed",
        }
    }

    pub fn parse(label: &str) -> Option<Scope> {
        SCOPES.into_iter().find(|s| s.name() == label)
    }
}

/// The scope of a user context (`memory.context_scope`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContextScope {
    Task,
    Thread,
    Profile,
}

/// Every context scope, in `memory.context_scope`'s order (which is also the priority of
/// `memory.load_slices`: a task's context before the thread's before the profile).
pub const CONTEXT_SCOPES: [ContextScope; 3] = [ContextScope::Task, ContextScope::Thread, ContextScope::Profile];

impl ContextScope {
    pub const fn name(self) -> &'static str {
        match self {
            ContextScope::Task => "task",
            ContextScope::Thread => "thread",
            ContextScope::Profile => "profile",
        }
    }

    pub fn parse(label: &str) -> Option<ContextScope> {
        CONTEXT_SCOPES.into_iter().find(|s| s.name() == label)
    }

    /// The consent scope under which a context of this scope is written and loaded: none for a
    /// task's context (it lives and dies with its task), save_to_thread for a thread's,
    /// save_to_profile for the profile.
    pub const fn needs(self) -> Option<Scope> {
        match self {
            ContextScope::Task => None,
            ContextScope::Thread => Some(Scope::SaveToThread),
            ContextScope::Profile => Some(Scope::SaveToProfile),
        }
    }
}

/// The scope that position fields ([`POSITION_FIELDS`]) outside a task need, with
/// `"position_consent": true` on the row.
pub const POSITION_NEEDS: Scope = Scope::SaveToProfile;

/// The sources a profile context is written from: no implicit learning, a profile changes only
/// at onboarding or by the user's own review.
pub const PROFILE_SOURCES: [&str; 2] = ["onboarding", "user_review"];

/// The scope under which the drift detectors observe a user: the drift log lives and dies with
/// it (slice S9 reads it under it, its revocation stamps the log for purge).
pub const DRIFT_NEEDS: Scope = Scope::SaveToProfile;

/// How long after a revocation of [`DRIFT_NEEDS`] maintenance purges the drift log (48 hours),
/// in microseconds.
pub const DRIFT_PURGE_DELAY_US: i64 = 48 * 3600 * 1_000_000;

/// Why a user context write is refused: MX003 with this message and `required_scopes: <needs>`.
#[derive(Debug, PartialEq, Eq)]
pub struct WriteRefusal {
    pub message: String,
    pub needs: Scope,
}

/// The consent check of a new user context (`memory_internal._user_context_rules`), in order:
/// the scope its context scope needs ([`ContextScope::needs`]), a profile's source
/// ([`PROFILE_SOURCES`]), then position fields outside a task ([`POSITION_NEEDS`] and
/// `position_consent`). `in_force`: the scopes of the consent in force. None: allowed.
pub fn context_write_refusal(
    scope: ContextScope,
    source: &str,
    states_position: bool,
    position_consent: bool,
    in_force: &[Scope],
) -> Option<WriteRefusal> {
    let refuse = |message: String, needs: Scope| Some(WriteRefusal { message, needs });
    if let Some(needs) = scope.needs().filter(|s| !in_force.contains(s)) {
        return refuse("profile_consent_required".into(), needs);
    }
    if scope == ContextScope::Profile && !PROFILE_SOURCES.contains(&source) {
        return refuse(
            format!("a profile context is written only from {}, not {source}", PROFILE_SOURCES.join(" or ")),
            Scope::SaveToProfile,
        );
    }
    if scope != ContextScope::Task && states_position && !(in_force.contains(&POSITION_NEEDS) && position_consent) {
        return refuse(
            format!("position fields outside a task need {} and \"{POSITION_CONSENT_FIELD}\": true", POSITION_NEEDS.name()),
            POSITION_NEEDS,
        );
    }
    None
}

/// Where a slice of `memory.load_slices` comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SliceSource {
    /// A field of the user's contexts, task > thread > profile.
    Field(&'static str),
    /// The titles of the user's latest active threads that no revocation blocked.
    ActiveThreads,
    /// The count of the user's drift log rows of the last 30 days.
    DriftCount,
}

/// A slice of `memory.load_slices`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slice {
    pub name: &'static str,
    pub source: SliceSource,
    /// The scopes, any one of which lets the slice load from outside a task: not loaded with
    /// none of them in force, it is reported blocked by consent (not missing). A slice that is not
    /// a field loads only with one of them in force. Empty: never blocked (task-only slices).
    pub needs: &'static [Scope],
    /// The value a cold start (no profile and no thread context) gives it when nothing holds it.
    pub cold_default: Option<&'static str>,
    /// Not loaded while the request's thread context was blocked by a revocation: blocked by
    /// consent.
    pub thread_blocks: bool,
}

impl Slice {
    /// Position fields are loaded from the task's context only.
    pub fn task_only(&self) -> bool {
        matches!(self.source, SliceSource::Field(f) if POSITION_FIELDS.contains(&f))
    }

    /// The contexts a field slice loads from, first first, under the scopes `in_force`: the
    /// task's, then (unless task-only) each other context whose scope ([`ContextScope::needs`])
    /// is in force. Empty for a slice that is not a field.
    pub fn contexts(&self, in_force: &[Scope]) -> Vec<ContextScope> {
        if !matches!(self.source, SliceSource::Field(_)) {
            return Vec::new();
        }
        CONTEXT_SCOPES
            .into_iter()
            .filter(|c| *c == ContextScope::Task || (!self.task_only() && c.needs().is_none_or(|s| in_force.contains(&s))))
            .collect()
    }

    /// Whether the slice, not loaded, is blocked by consent (else it is missing): none of
    /// `needs` in force, or (`thread_blocks`) the request's thread context blocked.
    pub fn blocked(&self, in_force: &[Scope], thread_context_blocked: bool) -> bool {
        (!self.needs.is_empty() && !self.needs.iter().any(|s| in_force.contains(s))) || (self.thread_blocks && thread_context_blocked)
    }
}

const fn field(name: &'static str, field: &'static str, needs: &'static [Scope], cold_default: Option<&'static str>, thread_blocks: bool) -> Slice {
    Slice { name, source: SliceSource::Field(field), needs, cold_default, thread_blocks }
}

const PROFILE: &[Scope] = &[Scope::SaveToProfile];
const THREAD: &[Scope] = &[Scope::SaveToThread];

/// The slices `memory.load_slices` knows (memory.route_slices' slice names).
pub const SLICES: [Slice; 9] = [
    field("S1_language_pref", "language_preference", PROFILE, Some("English"), false),
    field("S2_research_depth", "research_depth", PROFILE, Some("standard"), false),
    field("S3_risk_prompt_pref", "risk_prompt_preference", PROFILE, Some("balanced"), false),
    field("S4_user_focus_reason", "user_focus_reason", &[Scope::SaveToProfile, Scope::SaveToThread], None, true),
    field("S5_research_style", "research_style", THREAD, None, true),
    Slice { name: "S6_recent_active_threads_titles", source: SliceSource::ActiveThreads, needs: THREAD, cold_default: None, thread_blocks: false },
    field("S7_user_stated_position_context", "user_stated_position_context", &[], None, false),
    field("S8_constraints", "constraints", &[], None, false),
    Slice { name: "S9_persona_drift_recent", source: SliceSource::DriftCount, needs: &[DRIFT_NEEDS], cold_default: None, thread_blocks: false },
];

pub fn slice(name: &str) -> Option<&'static Slice> {
    SLICES.iter().find(|s| s.name == name)
}

/// What revoking a scope does to the rows kept under it (`memory_internal._revoke_consent_in`
/// applies each; the user's rows of governed application tables follow their own `on_revoke`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RevokeEffect {
    /// The user's profile contexts are deleted at once.
    DeleteProfileContexts,
    /// The user's drift log is stamped for purge [`DRIFT_PURGE_DELAY_US`] later.
    PurgeDriftLog,
    /// The user's thread contexts stay (readable by the user) but are blocked from loading.
    BlockThreadContexts,
    /// The user's threads are blocked from slice S6.
    BlockThreads,
    /// The user's training candidates are marked revoked.
    RevokeTrainingCandidates,
}

/// Every effect, in the order they are applied.
pub const REVOKE_EFFECTS: [RevokeEffect; 5] = [
    RevokeEffect::DeleteProfileContexts,
    RevokeEffect::PurgeDriftLog,
    RevokeEffect::BlockThreadContexts,
    RevokeEffect::BlockThreads,
    RevokeEffect::RevokeTrainingCandidates,
];

impl RevokeEffect {
    /// The effect's name, which is also the count `memory.revoke_consent` reports for it.
    pub const fn name(self) -> &'static str {
        match self {
            RevokeEffect::DeleteProfileContexts => "profile_contexts_deleted",
            RevokeEffect::PurgeDriftLog => "drift_rows_to_purge",
            RevokeEffect::BlockThreadContexts => "thread_contexts_blocked",
            RevokeEffect::BlockThreads => "threads_blocked",
            RevokeEffect::RevokeTrainingCandidates => "training_candidates_revoked",
        }
    }
}

/// What revoking `scope` does (nothing for create_task: a task's contexts end with the task).
pub const fn revoke_effects(scope: Scope) -> &'static [RevokeEffect] {
    match scope {
        Scope::CreateTask => &[],
        Scope::SaveToThread => &[RevokeEffect::BlockThreadContexts, RevokeEffect::BlockThreads],
        Scope::SaveToProfile => &[RevokeEffect::DeleteProfileContexts, RevokeEffect::PurgeDriftLog],
        Scope::TrainingUseAllowed => &[RevokeEffect::RevokeTrainingCandidates],
    }
}

/// What revoking `scopes` together does: each effect once, in [`REVOKE_EFFECTS`]' order.
pub fn revoke_effects_of(scopes: &[Scope]) -> Vec<RevokeEffect> {
    REVOKE_EFFECTS.into_iter().filter(|e| scopes.iter().any(|s| revoke_effects(*s).contains(e))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn every_listed_field_is_a_context_field() {
        let slice_fields = SLICES.iter().filter_map(|s| match s.source {
            SliceSource::Field(f) => Some(f),
            _ => None,
        });
        for f in PREFERENCE_FIELDS.iter().copied().chain(POSITION_FIELDS).chain(slice_fields).chain([POSITION_CONSENT_FIELD]) {
            assert!(CONTEXT_FIELDS.contains(&f), "{f}");
        }
        assert_eq!(fields("known"), Some(&CONTEXT_FIELDS[..]));
        assert_eq!(fields("position"), Some(&POSITION_FIELDS[..]));
        assert_eq!(fields("nonsense"), None);
    }

    #[test]
    fn labels_round_trip() {
        for s in SCOPES {
            assert_eq!(Scope::parse(s.name()), Some(s));
        }
        for c in CONTEXT_SCOPES {
            assert_eq!(ContextScope::parse(c.name()), Some(c));
        }
        assert_eq!(Scope::parse("save_to_cloud"), None);
        assert_eq!(ContextScope::parse("global"), None);
    }

    #[test]
    fn the_slices() {
        let names: Vec<_> = SLICES.iter().map(|s| s.name).collect();
        assert_eq!(names.len(), 9);
        assert!(names.windows(2).all(|w| w[0] < w[1]), "sorted, each once");
        let task_only: Vec<_> = SLICES.iter().filter(|s| s.task_only()).map(|s| s.name).collect();
        assert_eq!(task_only, ["S7_user_stated_position_context", "S8_constraints"]);
        // Task-only slices are never blocked by consent; every other slice is, by some scope.
        for s in &SLICES {
            assert_eq!(s.needs.is_empty(), s.task_only(), "{}", s.name);
            assert!(s.cold_default.is_none() || matches!(s.source, SliceSource::Field(_)) && !s.task_only(), "{}", s.name);
        }
        let cold: Vec<_> = SLICES.iter().filter_map(|s| Some((s.name, s.cold_default?))).collect();
        assert_eq!(cold, [("S1_language_pref", "English"), ("S2_research_depth", "standard"), ("S3_risk_prompt_pref", "balanced")]);
        assert_eq!(slice("S9_persona_drift_recent").map(|s| s.needs), Some(&[Scope::SaveToProfile][..]));
        assert_eq!(slice("S10"), None);
    }

    #[test]
    fn slice_contexts_and_blocks() {
        let s4 = slice("S4_user_focus_reason").unwrap();
        let s7 = slice("S7_user_stated_position_context").unwrap();
        let s1 = slice("S1_language_pref").unwrap();
        let all = [Scope::SaveToThread, Scope::SaveToProfile];
        assert_eq!(s4.contexts(&all), [ContextScope::Task, ContextScope::Thread, ContextScope::Profile]);
        assert_eq!(s4.contexts(&[Scope::SaveToProfile]), [ContextScope::Task, ContextScope::Profile]);
        assert_eq!(s4.contexts(&[]), [ContextScope::Task]);
        assert_eq!(s7.contexts(&all), [ContextScope::Task]);
        assert!(slice("S6_recent_active_threads_titles").unwrap().contexts(&all).is_empty());
        assert!(s1.blocked(&[Scope::SaveToThread], false));
        assert!(!s1.blocked(&[Scope::SaveToProfile], true));
        assert!(!s4.blocked(&[Scope::SaveToThread], false));
        assert!(s4.blocked(&[Scope::CreateTask], false));
        assert!(s4.blocked(&all, true), "its thread context blocked by a revocation");
        assert!(!s7.blocked(&[], true));
    }

    #[test]
    fn context_writes() {
        use ContextScope::*;
        let all = SCOPES;
        assert_eq!(context_write_refusal(Task, "task", true, false, &[]), None, "a task's context needs no scope");
        let r = context_write_refusal(Thread, "save_as_thread", false, false, &[Scope::SaveToProfile]).unwrap();
        assert_eq!((r.message.as_str(), r.needs), ("profile_consent_required", Scope::SaveToThread));
        let r = context_write_refusal(Profile, "user_review", false, false, &[Scope::SaveToThread]).unwrap();
        assert_eq!((r.message.as_str(), r.needs), ("profile_consent_required", Scope::SaveToProfile));
        let r = context_write_refusal(Profile, "refresh", false, false, &all).unwrap();
        assert_eq!(r.message, "a profile context is written only from onboarding or user_review, not refresh");
        let r = context_write_refusal(Thread, "refresh", true, false, &all).unwrap();
        assert_eq!(r.message, "position fields outside a task need save_to_profile and \"position_consent\": true");
        assert_eq!(r.needs, Scope::SaveToProfile);
        assert!(context_write_refusal(Thread, "refresh", true, true, &[Scope::SaveToThread]).is_some());
        assert_eq!(context_write_refusal(Thread, "refresh", true, true, &all), None);
        assert_eq!(context_write_refusal(Profile, "onboarding", false, false, &[Scope::SaveToProfile]), None);
    }

    #[test]
    fn revocations() {
        assert_eq!(revoke_effects_of(&SCOPES), REVOKE_EFFECTS, "revoking everything does everything");
        assert!(revoke_effects_of(&[Scope::CreateTask]).is_empty());
        assert_eq!(RevokeEffect::PurgeDriftLog.name(), "drift_rows_to_purge");
        // A revocation reaches what the revoked scope kept: its contexts, the drift log, the threads.
        for c in CONTEXT_SCOPES {
            let touched = c.needs().map(|s| revoke_effects(s).to_vec()).unwrap_or_default();
            match c {
                ContextScope::Task => assert!(touched.is_empty()),
                ContextScope::Thread => assert!(touched.contains(&RevokeEffect::BlockThreadContexts)),
                ContextScope::Profile => assert!(touched.contains(&RevokeEffect::DeleteProfileContexts)),
            }
        }
        assert!(revoke_effects(DRIFT_NEEDS).contains(&RevokeEffect::PurgeDriftLog));
        let s6 = slice("S6_recent_active_threads_titles").unwrap();
        assert!(s6.needs.iter().all(|s| revoke_effects(*s).contains(&RevokeEffect::BlockThreads)));
    }

    fn scopes() -> impl Strategy<Value = Vec<Scope>> {
        proptest::collection::vec(proptest::sample::select(SCOPES.to_vec()), 0..6)
    }

    proptest! {
        #[test]
        fn revoke_effects_are_the_union(a in scopes(), b in scopes()) {
            let both: Vec<Scope> = a.iter().chain(&b).copied().collect();
            let mut union = revoke_effects_of(&a);
            union.extend(revoke_effects_of(&b));
            union.sort();
            union.dedup();
            let mut got = revoke_effects_of(&both);
            got.sort();
            prop_assert_eq!(got, union);
            let mut rev = both.clone();
            rev.reverse();
            prop_assert_eq!(revoke_effects_of(&rev), revoke_effects_of(&both));
        }

        #[test]
        fn more_consent_never_blocks_more(a in scopes(), extra in scopes(), thread_blocked in any::<bool>()) {
            let more: Vec<Scope> = a.iter().chain(&extra).copied().collect();
            for s in &SLICES {
                prop_assert!(!s.blocked(&more, thread_blocked) || s.blocked(&a, thread_blocked), "{}", s.name);
                prop_assert!(s.contexts(&a).iter().all(|c| s.contexts(&more).contains(c)), "{}", s.name);
            }
        }

        #[test]
        fn granting_what_a_refusal_names_ends_the_refusals(c in proptest::sample::select(CONTEXT_SCOPES.to_vec()), position in any::<bool>(), mut have in scopes()) {
            // With its source and position_consent right, a write is refused only for a missing
            // scope, and granting the scopes it names (at most one per check) lets it through.
            let source = if c == ContextScope::Profile { "user_review" } else { "refresh" };
            for _ in 0..3 {
                match context_write_refusal(c, source, position, true, &have) {
                    None => break,
                    Some(r) => {
                        prop_assert!(!have.contains(&r.needs));
                        have.push(r.needs);
                    }
                }
            }
            prop_assert_eq!(context_write_refusal(c, source, position, true, &have), None);
        }
    }
}
