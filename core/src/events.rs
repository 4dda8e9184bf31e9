//! The catalogue of audit event types memory_ext writes itself (docs/design.md#audit-chain). The Rust
//! shell uses these constants; the SQL files name the same strings, and a test here reads every
//! SQL file and fails on an event type they append that is not in the catalogue.

pub const STORE: &str = "memory.store";
pub const DELETE: &str = "memory.delete";
/// A governed row's content changed by UPDATE (a correction): the new content's hash.
pub const UPDATE: &str = "memory.update";
pub const RECLASSIFY: &str = "memory.reclassify";
pub const FEEDBACK: &str = "memory.feedback";
pub const RECALL: &str = "memory.recall";
pub const PURGE: &str = "memory.purge";
pub const PURGE_DENIED: &str = "memory.purge.denied";
pub const ARCHIVE: &str = "memory.archive";
pub const FORGET: &str = "memory.forget";
/// An erasure receipt's event (docs/audit.md#erasure-receipts): `event_id`, `ids_sha256`, `count`.
pub const FORGET_RECEIPT: &str = "memory.forget.receipt";
pub const EXPORT: &str = "memory.export";
pub const TRANSFER: &str = "memory.transfer";
pub const ENTITY_CREATE: &str = "memory.entity.create";
pub const ENTITY_STATE_TRANSITION: &str = "memory.entity.state_transition";
pub const RETIRE_ATTEMPT: &str = "memory.govern.retire_attempt";
pub const CLAIM_CREATE: &str = "memory.claim.create";
pub const CLAIM_SUPERSEDE: &str = "memory.claim.supersede";
pub const CLAIM_STATE_TRANSITION: &str = "memory.claim.state_transition";
pub const RELATIONSHIP_CREATED: &str = "memory.relationship.created";
pub const RELATIONSHIP_DELETED: &str = "memory.relationship.deleted";
pub const DECAY_STARTED: &str = "memory.job.decay.started";
pub const DECAY_ANONYMIZED: &str = "memory.job.decay.anonymized";
pub const DECAY_DELETED: &str = "memory.job.decay.deleted";
pub const DECAY_COMPLETED: &str = "memory.job.decay.completed";
pub const RECHECK_ENQUEUED: &str = "research.freshness_confidence.enqueued";
pub const RECHECK_TICK: &str = "research.freshness_confidence.tick";
pub const GOVERN_ATTACH: &str = "memory.govern.attach";
pub const GOVERN_UNGOVERN: &str = "memory.govern.ungovern";
pub const GOVERN_TRUNCATE: &str = "memory.govern.truncate";
pub const GOVERN_DROP_TABLE: &str = "memory.govern.drop_table";
pub const ORG_GRANT: &str = "memory.org.grant";
pub const ORG_REVOKE: &str = "memory.org.revoke";
pub const CONSENT_GRANT: &str = "memory.consent.grant";
pub const CONSENT_REVOKE: &str = "memory.consent.revoke";
pub const CONTEXT_WRITE: &str = "memory.context.write";
pub const CONTEXT_DELETE: &str = "memory.context.delete";
pub const ROUTE_SLICES_CHANGE: &str = "memory.route_slices.change";
pub const DRIFT_DETECTED: &str = "memory.drift.detected";
pub const USER_DELETE: &str = "memory.user.delete";
pub const GOVERN_STILL_SUPPORTED: &str = "memory.govern.still_supported";
pub const GOVERN_ERODED: &str = "memory.govern.eroded";
pub const GOVERN_RETRACTED_SOURCE: &str = "memory.govern.retracted_source";
pub const GOVERN_BROKEN_PROVENANCE: &str = "memory.govern.broken_provenance";
pub const TASK_ENQUEUED: &str = "research.task.enqueued";
pub const RETENTION_DISPOSED: &str = "memory.govern.retention_disposed";
pub const INGEST_BATCH: &str = "memory.ingest.batch";
pub const UNAUTHORIZED_ACCESS_ATTEMPT: &str = "memory.govern.unauthorized_access_attempt";
pub const DECAY_ERROR: &str = "memory.job.decay.error";
pub const DISTRIBUTE: &str = "memory.distribute";
pub const RETRIEVAL_HYBRID: &str = "memory.retrieval.hybrid";
pub const EMBEDDINGS_ENABLE: &str = "memory.embeddings.enable";
pub const MCP_TOOL_INVOKED: &str = "memory.mcp.tool_invoked";
pub const SUPERSEDE: &str = "memory.supersede";
/// memory.remember kept a near-duplicate (dedup mode `near`): ids and hashes only.
pub const MERGE: &str = "memory.merge";

/// Every event type of the catalogue.
pub const ALL: &[&str] = &[
    STORE, DELETE, UPDATE, RECLASSIFY, FEEDBACK, RECALL, PURGE, PURGE_DENIED, ARCHIVE, FORGET, FORGET_RECEIPT, EXPORT, TRANSFER, ENTITY_CREATE,
    ENTITY_STATE_TRANSITION, RETIRE_ATTEMPT, CLAIM_CREATE, CLAIM_SUPERSEDE, CLAIM_STATE_TRANSITION, RELATIONSHIP_CREATED,
    RELATIONSHIP_DELETED, DECAY_STARTED, DECAY_ANONYMIZED, DECAY_DELETED, DECAY_COMPLETED, RECHECK_ENQUEUED, RECHECK_TICK,
    GOVERN_ATTACH, GOVERN_UNGOVERN, GOVERN_TRUNCATE, GOVERN_DROP_TABLE, ORG_GRANT, ORG_REVOKE, CONSENT_GRANT, CONSENT_REVOKE,
    CONTEXT_WRITE, CONTEXT_DELETE, ROUTE_SLICES_CHANGE, DRIFT_DETECTED, USER_DELETE, GOVERN_STILL_SUPPORTED, GOVERN_ERODED,
    GOVERN_RETRACTED_SOURCE, GOVERN_BROKEN_PROVENANCE, TASK_ENQUEUED, RETENTION_DISPOSED, INGEST_BATCH,
    UNAUTHORIZED_ACCESS_ATTEMPT, DECAY_ERROR, DISTRIBUTE, RETRIEVAL_HYBRID, EMBEDDINGS_ENABLE, MCP_TOOL_INVOKED, MERGE,
    SUPERSEDE,
];

/// Whether an event type is one memory_ext reserves: its own namespaces (application events
/// name their own prefix).
pub fn is_reserved(event_type: &str) -> bool {
    let t = event_type.trim().to_ascii_lowercase();
    t.starts_with("memory.") || t.starts_with("research.")
}

/// memory-mcp's tools (the `memory.mcp_call` setting names one of them).
pub const MCP_TOOLS: &[&str] = &[
    "remember", "recall", "forget", "retrieve", "claim_chain", "search", "get", "put", "delete", "record_outcome", "context",
    "history", "supersede", "lineage",
];

/// The tool and client a `memory.mcp_call` setting names, `TOOL:CLIENT` (the client is everything
/// after the first colon): `Ok(None)` when the setting is empty; an error (for a `22023`) when the
/// tool is not one of [`MCP_TOOLS`] or the client is not 1 to 200 characters without control
/// characters (the checks `memory_internal._mcp_tool_invoked` makes of its arguments).
pub fn mcp_call(setting: &str) -> Result<Option<(&str, &str)>, String> {
    if setting.is_empty() {
        return Ok(None);
    }
    let Some((tool, client)) = setting.split_once(':') else {
        return Err(format!("memory.mcp_call must be TOOL:CLIENT, got \"{}\"", setting.chars().take(60).collect::<String>()));
    };
    if !MCP_TOOLS.contains(&tool) {
        return Err(format!("memory.mcp_call names an unknown memory-mcp tool \"{}\"", tool.chars().take(60).collect::<String>()));
    }
    let n = client.chars().count();
    if n == 0 || n > 200 || client.chars().any(char::is_control) {
        return Err("memory.mcp_call's client must be a name of 1 to 200 characters without control characters".into());
    }
    Ok(Some((tool, client)))
}

/// Whether an event (its type, and the table a governed table's event names) is the write of a
/// call of memory-mcp's `tool`, and so carries the call (`mcp_tool`, `mcp_client`) as its record:
/// `remember` is an INSERT into memory.observations, recorded by its `memory.store`. An event of
/// another kind never carries a call, whatever the setting says: a role records only a call whose
/// write it performs (a reader inserts nothing, so it records no call at all this way).
pub fn mcp_call_recorded_by(tool: &str, event_type: &str, table: &str) -> bool {
    matches!((tool, event_type, table), ("remember", STORE, "memory.observations"))
}

/// Whether an event of this kind carries some memory-mcp call (see [`mcp_call_recorded_by`]): only
/// such a statement reads the `memory.mcp_call` setting, so a malformed one fails the write it
/// would mark and never another table's write, a delete or an update.
pub fn mcp_call_recordable(event_type: &str, table: &str) -> bool {
    MCP_TOOLS.iter().any(|t| mcp_call_recorded_by(t, event_type, table))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// Event types the SQL files append: the first argument of memory_internal._audit,
    /// memory_internal._audit_append, memory_internal._audit_append_system and memory_internal._audit_read, and the values given for
    /// 'event_type' in the arrays passed to memory_internal._audit_append_many.
    fn sql_event_types() -> BTreeSet<String> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../sql");
        let mut out = BTreeSet::new();
        for entry in std::fs::read_dir(&dir).expect("sql directory") {
            let path = entry.expect("entry").path();
            if path.extension().is_none_or(|e| e != "sql") {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("sql file");
            for marker in ["memory_internal._audit('", "memory_internal._audit_append('", "memory_internal._audit_append_system('", "memory_internal._audit_read('", "'event_type', '", "THEN '", "ELSE '"] {
                let mut rest = text.as_str();
                while let Some(i) = rest.find(marker) {
                    rest = &rest[i + marker.len()..];
                    let name: String = rest.chars().take_while(|c| *c != '\'').collect();
                    if is_reserved(&name) && name.matches('.').count() >= 1 && !name.contains(' ') {
                        out.insert(name);
                    }
                }
            }
        }
        out
    }

    #[test]
    fn every_event_the_sql_appends_is_in_the_catalogue() {
        let found = sql_event_types();
        assert!(found.len() >= 20, "the scan found the SQL's events: {found:?}");
        let known: BTreeSet<String> = ALL.iter().map(|s| s.to_string()).collect();
        let unknown: Vec<&String> = found.difference(&known).collect();
        assert!(unknown.is_empty(), "event types in sql/ missing from memory_core::events: {unknown:?}");
    }

    #[test]
    fn catalogue_is_reserved_and_unique() {
        let set: BTreeSet<&str> = ALL.iter().copied().collect();
        assert_eq!(set.len(), ALL.len());
        assert!(ALL.iter().all(|e| is_reserved(e)));
        assert!(is_reserved(" Memory.purge") && !is_reserved("app.memory.purge"));
    }

    #[test]
    fn mcp_call_setting() {
        assert_eq!(mcp_call(""), Ok(None));
        assert_eq!(mcp_call("remember:claude-code"), Ok(Some(("remember", "claude-code"))));
        // The client is everything after the first colon.
        assert_eq!(mcp_call("recall:a:b"), Ok(Some(("recall", "a:b"))));
        assert!(mcp_call("remember").is_err());
        assert!(mcp_call("audit_append:x").is_err());
        assert!(mcp_call("Remember:x").is_err());
        assert!(mcp_call("remember:").is_err());
        assert!(mcp_call("remember:bad\nname").is_err());
        assert!(mcp_call(&format!("remember:{}", "x".repeat(201))).is_err());
        assert_eq!(mcp_call(&format!("remember:{}", "é".repeat(200))).map(|c| c.map(|(t, _)| t)), Ok(Some("remember")));
    }

    #[test]
    fn mcp_call_recorded_only_by_its_own_write() {
        assert!(mcp_call_recorded_by("remember", STORE, "memory.observations"));
        assert!(!mcp_call_recorded_by("remember", STORE, "app.notes"));
        assert!(!mcp_call_recorded_by("remember", DELETE, "memory.observations"));
        assert!(!mcp_call_recorded_by("forget", STORE, "memory.observations"));
        assert!(!mcp_call_recorded_by("forget", DELETE, "memory.observations"));
        assert!(!mcp_call_recorded_by("recall", RECALL, "memory.observations"));
    }

    #[test]
    fn mcp_call_read_only_where_recordable() {
        assert!(mcp_call_recordable(STORE, "memory.observations"));
        assert!(!mcp_call_recordable(STORE, "app.notes"));
        assert!(!mcp_call_recordable(DELETE, "memory.observations"));
        assert!(!mcp_call_recordable(DELETE, "app.notes"));
    }
}
