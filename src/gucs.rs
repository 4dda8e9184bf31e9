//! Every setting of the extension, registered from `_PG_init`.

use pgrx::{GucContext, GucFlags, GucRegistry, GucSetting, PostgresGucEnum};

/// Which validated detectors (memory_core::detect) raise tiers on top of the built-in rules: `on`
/// (all of them, the default), `first_generation` (0.1.0's set: card numbers, SSNs, PEM keys, AWS
/// key ids, JWTs) or `off`. The boolean spellings of 0.1.0's setting are kept. Superuser-only:
/// fewer detectors lower tiers, so a session must not be able to choose for itself.
#[derive(PostgresGucEnum, Clone, Copy, PartialEq, Eq, Debug)]
pub enum Detectors {
    #[name = c"on"]
    On,
    #[name = c"off"]
    Off,
    #[name = c"first_generation"]
    FirstGeneration,
    #[name = c"true"]
    True,
    #[name = c"false"]
    False,
    #[name = c"yes"]
    Yes,
    #[name = c"no"]
    No,
    #[name = c"1"]
    One,
    #[name = c"0"]
    Zero,
}

pub static CLASSIFY_DETECTORS: GucSetting<Detectors> = GucSetting::<Detectors>::new(Detectors::On);

/// The detector set the setting selects.
pub fn detector_set() -> memory_core::detect::Set {
    use memory_core::detect::Set;
    match CLASSIFY_DETECTORS.get() {
        Detectors::On | Detectors::True | Detectors::Yes | Detectors::One => Set::all(),
        Detectors::FirstGeneration => Set::first_generation(),
        Detectors::Off | Detectors::False | Detectors::No | Detectors::Zero => Set::NONE,
    }
}

/// The setting's name for the set it selects (`on`, `first_generation` or `off`).
pub fn detector_setting() -> &'static str {
    use memory_core::detect::Set;
    let s = detector_set();
    if s == Set::all() {
        "on"
    } else if s.is_empty() {
        "off"
    } else {
        "first_generation"
    }
}

/// EMA learning rates (docs/design.md#feedback-weights); per-org overrides live in memory.org_settings.
pub static ALPHA_SUCCESS: GucSetting<f64> = GucSetting::<f64>::new(0.1);
pub static ALPHA_FAILURE: GucSetting<f64> = GucSetting::<f64>::new(0.15);

/// The org a session acts for, among its role's orgs (docs/design.md#trust-boundary; see memory.acting_org()). Setting
/// it to an org the role may not act for grants nothing.
pub static ORG_ID: GucSetting<Option<std::ffi::CString>> =
    GucSetting::<Option<std::ffi::CString>>::new(None);

/// The application's actor, recorded pseudonymised in audit events beside the writing role.
pub static ACTOR_ID: GucSetting<Option<std::ffi::CString>> =
    GucSetting::<Option<std::ffi::CString>>::new(None);

/// memory-mcp's tool call (`TOOL:CLIENT`, set locally with the org and actor): the audit event of
/// the write that performs the tool carries it (memory_core::events::mcp_call_recorded_by).
pub static MCP_CALL: GucSetting<Option<std::ffi::CString>> =
    GucSetting::<Option<std::ffi::CString>>::new(None);

/// The reason of the changes a transaction makes to memories (`SET LOCAL memory.change_reason`),
/// kept with each revision (memory.revisions.reason; sql/revisions.sql reads it).
pub static CHANGE_REASON: GucSetting<Option<std::ffi::CString>> =
    GucSetting::<Option<std::ffi::CString>>::new(None);

/// Restoring a dump: rows written while on are taken as they come back (no classification, no
/// stamps, no lifecycle entry checks, no audit events). Superuser-only. Read it through
/// [`restore_mode`].
pub static RESTORE_MODE: GucSetting<bool> = GucSetting::<bool>::new(false);

/// Whether rows are being restored (`memory.restore_mode`). A session named `pg_restore` without
/// the setting is refused (55000) at the first row a memory_ext trigger sees: a plain restore would
/// re-stamp and re-classify the rows it loads, so it fails at once rather than change them.
pub fn restore_mode() -> bool {
    if RESTORE_MODE.get() {
        return true;
    }
    if crate::pg::identity::application_name_is("pg_restore") {
        crate::errors::MxError::new(
            crate::errors::code::OBJECT_NOT_IN_STATE,
            "pg_restore without memory.restore_mode would re-stamp and re-classify memory_ext's rows",
        )
        .hint("Restore as docs/operations.md \"Backup and restore\" says: PGOPTIONS='-c memory.restore_mode=on' pg_restore --single-transaction ... (a superuser).")
        .raise();
    }
    false
}

/// How a writing transaction records its audit events (docs/design.md#integration).
#[derive(PostgresGucEnum, Clone, Copy, PartialEq, Eq, Debug)]
pub enum AuditMode {
    /// Pending entries, each with its own HMAC, in the writing transaction; no chain lock. The
    /// sequencer chains them after commit.
    #[name = c"deferred"]
    Deferred,
    /// Chained in the statement, under the chain's head lock until the transaction ends.
    #[name = c"immediate"]
    Immediate,
}

/// Superuser-only: a deployment's choice (ALTER SYSTEM, ALTER DATABASE or ALTER ROLE ... SET).
pub static AUDIT_MODE: GucSetting<AuditMode> = GucSetting::<AuditMode>::new(AuditMode::Deferred);

/// Databases the background integrator serves (comma-separated; read at server start, when the
/// library is in shared_preload_libraries).
pub static INTEGRATOR_DATABASES: GucSetting<Option<std::ffi::CString>> =
    GucSetting::<Option<std::ffi::CString>>::new(None);

/// Background integrators per database named in INTEGRATOR_DATABASES (read at server start):
/// each takes the chains `memory_core::audit::chain_share` gives it, so a backlog is integrated
/// on that many cores at once.
pub static INTEGRATOR_WORKERS: GucSetting<i32> = GucSetting::<i32>::new(1);

/// Memory (kB) the sequencer may hold a backlog of pending entries in: a backlog whose rows (as
/// read, detoasted) fit is read straight from the heap and sorted in memory; a larger one is
/// sorted by a query with this much work_mem, at least 4MB (spilling to disk beyond it). 0:
/// always by a query. Superuser-only: it sizes what SECURITY DEFINER integrations hold.
pub static INTEGRATION_MEMORY: GucSetting<i32> = GucSetting::<i32>::new(262_144);

/// Milliseconds a background integrator waits, at most, after a round that found less than a
/// full batch (a commit of pending entries of its chains wakes it sooner).
pub static INTEGRATOR_NAPTIME: GucSetting<i32> = GucSetting::<i32>::new(100);

/// Milliseconds from the start of a background integrator's round before its next round may
/// start, when commits of pending entries wake it.
pub static INTEGRATOR_DELAY: GucSetting<i32> = GucSetting::<i32>::new(100);

pub fn init() {
    GucRegistry::define_bool_guc(
        c"memory.restore_mode",
        c"Take rows as they come back from a dump (pg_restore / psql of a dump).",
        c"While on, memory_ext's triggers accept rows unchanged: no classification, no retention stamps, claims in any state, and no audit events for the loaded rows (the log is restored with them). Superuser-only; set it for the restore session only: PGOPTIONS='-c memory.restore_mode=on' pg_restore ...",
        &RESTORE_MODE,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_enum_guc(
        c"memory.audit_mode",
        c"deferred: audit events are pending entries chained after commit; immediate: chained in the statement.",
        c"Deferred takes no chain lock in any write or read; the sequencer (background integrator, audit_verify, audit_head, maintenance, memory.audit_integrate) chains committed pending entries. Immediate locks the chain head until the transaction ends.",
        &AUDIT_MODE,
        GucContext::Suset,
        GucFlags::default(),
    );
    // A server-start setting can only be defined while the postmaster loads the library.
    if crate::pg::xact::preloading() {
        GucRegistry::define_string_guc(
        c"memory.integrator_databases",
        c"Databases whose pending audit entries a background worker integrates (comma-separated).",
        c"Needs memory_ext in shared_preload_libraries; memory.integrator_workers workers per database, started with the server. Empty: no worker (integration then happens on audit_verify, audit_head, maintenance and memory.audit_integrate()).",
        &INTEGRATOR_DATABASES,
        GucContext::Postmaster,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"memory.integrator_workers",
        c"Background integrators per database in memory.integrator_databases.",
        c"Each integrates the chains (tenants) a hash of the chain name gives it, in parallel with the others; memory.audit_integrate() and the readers' integrations wait for or give way to all of them. Each is a background worker: max_worker_processes must leave room for them.",
        &INTEGRATOR_WORKERS,
        1,
        16,
        GucContext::Postmaster,
        GucFlags::default(),
    );
    }
    GucRegistry::define_int_guc(
        c"memory.integration_memory",
        c"Memory the audit sequencer may hold a backlog of pending entries in.",
        c"A backlog whose rows fit is read and sorted in memory; a larger one is sorted by a query with this much work_mem (at least 4MB). 0: always by a query.",
        &INTEGRATION_MEMORY,
        0,
        i32::MAX,
        GucContext::Suset,
        GucFlags::UNIT_KB,
    );
    GucRegistry::define_int_guc(
        c"memory.integrator_naptime",
        c"Longest a background integrator waits after a round that found less than a full batch.",
        c"A commit of pending entries of its chains, or a denied attempt's event handed over, wakes it sooner; it finds what no wake-up announced (a prepared transaction committed by COMMIT PREPARED, a database after the first 64 of memory.integrator_databases) within this time.",
        &INTEGRATOR_NAPTIME,
        10,
        60_000,
        GucContext::Sighup,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"memory.integrator_delay",
        c"Least time from the start of a background integrator's round that chained entries (or was refused the integration lock) to the start of its next one.",
        c"A commit of pending entries wakes the integrator of their chains; under a steady stream of commits it chains what committed during this time in one round. 0: a round as soon as anything commits (as often as commits arrive, each round paying its fixed cost).",
        &INTEGRATOR_DELAY,
        0,
        1_000,
        GucContext::Sighup,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_float_guc(
        c"memory.alpha_success",
        c"EMA alpha for accepted outcomes.",
        c"new = previous * (1 - alpha) + alpha for an accepted session. Must be in (0, 1].",
        &ALPHA_SUCCESS,
        1e-6,
        1.0,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_float_guc(
        c"memory.alpha_failure",
        c"EMA alpha for rejected and rework outcomes.",
        c"new = previous * (1 - alpha) for a failed session (doubled, capped at 1, for misleading observations). Must be in (0, 1].",
        &ALPHA_FAILURE,
        1e-6,
        1.0,
        GucContext::Suset,
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
    GucRegistry::define_string_guc(
        c"memory.mcp_call",
        c"memory-mcp's tool call in this transaction, TOOL:CLIENT (set_config(..., true)).",
        c"The audit event of the write that performs the tool (remember: the memory.store of its INSERT into memory.observations) carries it as mcp_tool and mcp_client; events of other kinds never do.",
        &MCP_CALL,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_string_guc(
        c"memory.change_reason",
        c"Why the memories changed by this transaction changed (SET LOCAL).",
        c"Kept as the reason of each revision an UPDATE of a memory keeps (memory.revisions, memory.history).",
        &CHANGE_REASON,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_enum_guc(
        c"memory.classify_detectors",
        c"Raise classification tiers with validated detectors: on, first_generation or off.",
        c"on: every detector of memory.detectors() (personal data restricted, secrets confidential); first_generation: 0.1.0's card, SSN, PEM, AWS and JWT detectors; off: the built-in rules only.",
        &CLASSIFY_DETECTORS,
        GucContext::Suset,
        GucFlags::default(),
    );
}
