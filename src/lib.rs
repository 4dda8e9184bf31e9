//! memory_ext: governance of AI-agent memory inside PostgreSQL.
//!
//! A thin shell over `memory_core`: SQL functions, triggers and settings. Tables, enums, views
//! and grants are SQL in `sql/`, pulled in below in dependency order.

use pgrx::prelude::*;

mod audit;
mod classify;
mod consent;
mod errors;
mod feedback;
mod gates;
mod gucs;
mod lifecycle;
mod pg;
mod recall;
mod remember;
mod retention;
mod drift;
mod trust;

/// Schema `memory_internal`: memory_ext's internal functions (`#[pg_extern(schema =
/// "memory_internal", ...)]`), kept out of the API schema `memory`. sql/types.sql creates it
/// first; pgrx needs to know it.
#[pg_schema]
mod memory_internal {}

::pgrx::pg_module_magic!(name, version);

extension_sql_file!("../sql/types.sql", name = "types", bootstrap);
extension_sql_file!("../sql/tenancy.sql", name = "tenancy_sql", requires = ["types", classify::rules_changed, retention::max_clock_skew, trust::blank, trust::caller_sql, trust::check_org_setting, trust::clearance_sql, trust::exec_as_table_owner, trust::may_act_for_sql, trust::open_governance_gate]);
extension_sql_file!("../sql/classify.sql", name = "classify_sql", requires = ["tenancy_sql", audit::trigger::audit_trigger, audit::trigger::audit_trigger_args, classify::check_rule_pattern, classify::classify_explain, classify::classify_label, classify::classify_trigger, classify::classify_trigger_argv, classify::column_type_message, classify::derive_label, classify::detect_names, classify::detectors_table, classify::risk_band, classify::rules_changed, feedback::check_weight, gates::allow_downgrade, gates::creating_extension, gates::hold_gate_open, lifecycle::lifecycle_trigger, trust::blank, trust::caller_sql, trust::close_governance_gate, trust::exec_as_caller, trust::may_act_for_sql, trust::open_governance_gate]);
extension_sql_file!("../sql/audit.sql", name = "audit_sql", requires = ["classify_sql", audit::audit_append, audit::reads::audit_read, audit::audit_append_many, audit::audit_append_system, audit::integrate::audit_integrate_sql, audit::merkle_frontier_root, audit::merkle_root, audit::pseudonym_sql, audit::random_bytes, audit::trigger::audit_trigger, audit::verify::audit_backlog_chains, audit::verify::audit_verify, classify::rules_changed, gates::audit_integrating, gates::audit_move_gate, gates::audit_move_gate_open, trust::caller_sql, trust::may_act_for_sql]);
extension_sql_file!("../sql/feedback.sql", name = "feedback_sql", requires = ["audit_sql", audit::audit_append, feedback::ema_sql, feedback::is_misleading_sql, feedback::record_outcome, trust::blank, trust::caller_sql, trust::clearance_sql, trust::read_as_caller]);
extension_sql_file!("../sql/retention.sql", name = "retention_sql", requires = ["feedback_sql", classify::restore_mode, classify::rules_changed, gates::hold_erasing, gates::hold_gate, gates::hold_gate_open, retention::hold_matches, retention::is_expired, retention::purge_due, retention::resolve_retention, trust::caller_sql, trust::exec_as_table_owner, trust::may_act_for_sql]);
extension_sql_file!("../sql/vector.sql", name = "vector_sql", requires = ["retention_sql", classify::rules_changed, recall::observations_fillfactor, recall::query_vector_floats, recall::query_vector_parse, trust::caller_sql, trust::clearance_sql, trust::may_act_for_sql]);
extension_sql_file!("../sql/subject.sql", name = "subject_sql", requires = ["vector_sql", audit::integrate::audit_integrate_sql, audit::pseudonym_sql, audit::reads::audit_read, audit::receipt::audit_entry_hash, audit::receipt::ids_sha256, audit::receipt::receipt_shape_error, audit::receipt::receipt_sign, audit::receipt::receipt_signature_ok, gates::hold_erase_gate, gates::hold_gate, gates::lineage_gate, trust::blank, trust::caller_sql, trust::check_org_setting, trust::clearance_sql, trust::exec_as_table_owner, trust::may_act_for_sql, trust::read_as_caller, trust::write_as_caller]);
extension_sql_file!("../sql/items.sql", name = "items_sql", requires = ["subject_sql", audit::reads::audit_read, recall::query_vector_floats, recall::item_ns_path, trust::blank, trust::caller_sql, trust::clearance_sql]);
extension_sql_file!("../sql/revisions.sql", name = "revisions_sql", requires = ["items_sql", audit::pseudonym_sql, recall::item_ns_path, retention::hold_matches, trust::blank, trust::caller_sql, trust::clearance_sql, trust::exec_as_caller, trust::may_act_for_sql]);
extension_sql_file!("../sql/lineage.sql", name = "lineage_sql", requires = ["revisions_sql", classify::restore_mode, gates::hold_gate, gates::lineage_gate, gates::lineage_gate_open, trust::caller_sql, trust::check_org_setting, trust::clearance_sql, trust::exec_as_table_owner, trust::read_as_caller, trust::write_as_caller]);
extension_sql_file!("../sql/knowledge.sql", name = "knowledge_sql", requires = ["subject_sql", audit::audit_append, audit::denied::audit_denied, audit::pseudonym_sql, classify::restore_mode, gates::knowledge_gate, gates::knowledge_gate_open, gates::set_superseding, gates::superseding, lifecycle::can_transition, lifecycle::conflict_loser_is_b, lifecycle::is_retirement, lifecycle::is_stale, lifecycle::lifecycle_trigger, lifecycle::pii_unknown, lifecycle::recheck_reason, lifecycle::redacted_marker, lifecycle::source_tier, lifecycle::stamps_t_invalid, lifecycle::supersession_tier_allowed, lifecycle::table_of, trust::blank, trust::caller_sql, trust::may_act_for_sql]);
extension_sql_file!("../sql/consent.sql", name = "consent_sql", requires = ["knowledge_sql", audit::pseudonym_sql, classify::detect_fields, classify::render_context_value, classify::restore_mode, classify::rules_changed, consent::context_fields, consent::context_needs, consent::context_write_refusal, consent::drift_purge_delay, consent::revoke_effects, consent::slice_rules, drift::consents_changed, drift::detect_drift, drift::feedback_polarity, gates::consent_gate, gates::consent_gate_open, gates::creating_extension, gates::hold_erase_gate, gates::hold_gate, lifecycle::table_of, retention::max_clock_skew, trust::blank, trust::caller_sql, trust::exec_as_caller, trust::exec_as_table_owner]);
extension_sql_file!("../sql/recall.sql", name = "recall_sql", requires = ["consent_sql", audit::audit_append, audit::reads::audit_read, recall::search::search_body, recall::retrieve_plan, trust::blank, trust::caller_sql, trust::clearance_sql]);
extension_sql_file!("../sql/remember.sql", name = "remember_sql", requires = ["recall_sql", "items_sql", "lineage_sql", recall::query_vector_check, remember::context_pack, remember::dedup_hash, remember::dedup_mode, remember::dedup_setting_check, remember::remember, remember::near::remember_nearest, trust::blank, trust::caller_sql, trust::clearance_sql, trust::may_act_for_sql, trust::check_org_setting]);
extension_sql_file!("../sql/scaleout.sql", name = "scaleout_sql", requires = ["remember_sql", lifecycle::table_of, trust::caller_sql, trust::delegated_caller]);
extension_sql_file!("../sql/security.sql", name = "security_sql", requires = ["scaleout_sql", "items_sql", "remember_sql", "revisions_sql", "lineage_sql", remember::context_pack, remember::remember, classify::restore_mode_on, feedback::record_outcome, gates::creating_extension, trust::governance_gate_open]);
extension_sql_file!("../sql/finalize.sql", name = "finalize_sql", finalize);

#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    pg::error::quiet_backtraces();
    // The callback registry first: every module below registers its own functions with it.
    pg::callbacks::init();
    gucs::init();
    gates::init();
    trust::init();
    classify::init();
    retention::init();
    remember::init();
    drift::init();
    audit::init();
}

#[cfg(any(test, feature = "pg_test"))]
mod tests;


/// Required by `cargo pgrx test`.
#[cfg(test)]
pub mod pg_test {
    pub fn setup(_options: Vec<&str>) {}

    pub fn postgresql_conf_options() -> Vec<&'static str> {
        vec![]
    }
}
