//! Every setting of the extension, registered from `_PG_init`.

use pgrx::{GucContext, GucFlags, GucRegistry, GucSetting};

/// Deterministic detectors (Luhn card numbers, SSNs, PEM keys, AWS key ids, JWTs) on top of the
/// seed's rules. Superuser-only: turning detectors off lowers tiers, so a session must not be
/// able to do it for itself.
pub static CLASSIFY_DETECTORS: GucSetting<bool> = GucSetting::<bool>::new(true);

/// EMA learning rates (SPEC §3); per-org overrides live in memory.org_settings.
pub static ALPHA_SUCCESS: GucSetting<f64> = GucSetting::<f64>::new(0.1);
pub static ALPHA_FAILURE: GucSetting<f64> = GucSetting::<f64>::new(0.15);

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
    GucRegistry::define_bool_guc(
        c"memory.classify_detectors",
        c"Raise classification tiers with deterministic detectors.",
        c"Luhn-valid card numbers and SSN patterns raise to restricted; PEM private keys, AWS access key ids and JWTs raise to confidential.",
        &CLASSIFY_DETECTORS,
        GucContext::Suset,
        GucFlags::default(),
    );
}
