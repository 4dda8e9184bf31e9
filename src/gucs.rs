//! Every setting of the extension, registered from `_PG_init`.

use pgrx::{GucContext, GucFlags, GucRegistry, GucSetting};

/// Deterministic detectors (Luhn card numbers, SSNs, PEM keys, AWS key ids, JWTs) on top of the
/// seed's rules. Superuser-only: turning detectors off lowers tiers, so a session must not be
/// able to do it for itself.
pub static CLASSIFY_DETECTORS: GucSetting<bool> = GucSetting::<bool>::new(true);

pub fn init() {
    GucRegistry::define_bool_guc(
        c"memory.classify_detectors",
        c"Raise classification tiers with deterministic detectors.",
        c"Luhn-valid card numbers and SSN patterns raise to restricted; PEM private keys, AWS access key ids and JWTs raise to confidential.",
        &CLASSIFY_DETECTORS,
        GucContext::Suset,
        GucFlags::default(),
    );
}
