//! Every setting of the extension, registered from `_PG_init`.

use pgrx::{GucContext, GucFlags, GucRegistry, GucSetting};

/// Deterministic detectors (Luhn card numbers, SSNs, PEM keys, AWS key ids, JWTs) on top of the
/// seed's rules. Superuser-only: turning detectors off lowers tiers, so a session must not be
/// able to do it for itself.
pub static CLASSIFY_DETECTORS: GucSetting<bool> = GucSetting::<bool>::new(true);

/// EMA learning rates (SPEC §3); per-org overrides live in memory.org_settings.
pub static ALPHA_SUCCESS: GucSetting<f64> = GucSetting::<f64>::new(0.1);
pub static ALPHA_FAILURE: GucSetting<f64> = GucSetting::<f64>::new(0.15);

/// The org a session acts for, among its role's orgs (SPEC §8; see memory.acting_org()). Setting
/// it to an org the role may not act for grants nothing.
pub static ORG_ID: GucSetting<Option<std::ffi::CString>> = GucSetting::<Option<std::ffi::CString>>::new(None);

/// The application's actor, recorded pseudonymised in audit events beside the writing role.
pub static ACTOR_ID: GucSetting<Option<std::ffi::CString>> = GucSetting::<Option<std::ffi::CString>>::new(None);

pub fn init() {
    GucRegistry::define_float_guc(
        c"memory.alpha_success",
        c"EMA alpha for accepted outcomes.",
        c"new = previous * (1 - alpha) + alpha for an accepted session. Must be in (0, 1].",
        &ALPHA_SUCCESS,
        1e-6,
        1.0,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_float_guc(
        c"memory.alpha_failure",
        c"EMA alpha for rejected and rework outcomes.",
        c"new = previous * (1 - alpha) for a failed session (doubled, capped at 1, for misleading observations). Must be in (0, 1].",
        &ALPHA_FAILURE,
        1e-6,
        1.0,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_string_guc(
        c"memory.org_id",
        c"The org this session acts for (one of its role's orgs).",
        c"Row-level security shows and accepts only the acting org's rows; an org the role may not act for grants nothing. Bind roles to orgs with memory.grant_org.",
        &ORG_ID,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_string_guc(
        c"memory.actor_id",
        c"The application's actor for audit events.",
        c"Recorded pseudonymised (h:<hex>) in actor_id, beside the writing role.",
        &ACTOR_ID,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_bool_guc(
        c"memory.classify_detectors",
        c"Raise classification tiers with deterministic detectors.",
        c"Luhn-valid card numbers and SSN patterns raise to restricted; PEM private keys, AWS access key ids and JWTs raise to confidential.",
        &CLASSIFY_DETECTORS,
        GucContext::Suset,
        GucFlags::default(),
    );
}
