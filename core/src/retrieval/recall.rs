//! `memory.recall`'s own rules (sql/recall.sql, docs/design.md#agent-memory-api), run by the shell's
//! `memory_internal._recall` in one call: the argument checks (22023 / 0A000 with hints), the
//! filters, the columns of memory.observations, the plan the engine reads (`Plan::from_json`'s
//! form), the plan read as of a time (SPEC §17), and the read event's payload (ids, count, k,
//! filter keys, hashes; never content, the query or the embedding). What needs the database
//! (the org, the clearance, a governed table's mapping, a timestamp's parsing, the words of the
//! query) stays in the shell.

use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};
use super::filter::kind as type_of;

/// The most rows one pass reads for a tenant's memories (no user, session or task filter): a
/// tenant of up to this many live rows has both lists read exactly from its rows in one pass
/// (cheaper than the two index lists at that size); a larger one has its overflow remembered per
/// backend and reads the two lists.
pub const TENANT_ONE_PASS_ROWS: u32 = 1_000;

/// The labels of memory.classification, memory.source_type and memory.memory_type in their enum
/// order (sql/types.sql).
pub const CLASSIFICATIONS: [&str; 4] = ["public", "internal", "confidential", "restricted"];
pub const SOURCE_TYPES: [&str; 4] = ["decision", "fact", "preference", "tool_result"];
pub const MEMORY_TYPES: [&str; 7] = ["working", "short_term", "long_term", "persona", "episodic", "entity", "structured"];

/// A refused call: its SQLSTATE, message and hint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub code: &'static str,
    pub message: String,
    pub hint: Option<String>,
}

impl Refusal {
    fn bad(message: String, hint: impl Into<String>) -> Refusal {
        Refusal { code: "22023", message, hint: Some(hint.into()) }
    }
}

/// Whether a text argument is missing: NULL, empty, or only white space (memory_internal._blank).
pub fn blank(s: Option<&str>) -> bool {
    s.is_none_or(|s| s.chars().all(char::is_whitespace))
}

/// The arguments recall and retrieve share (memory_internal._check_read_args): an org, and k in
/// [1, 1000].
pub fn check_read_args(func: &str, org: Option<&str>, k: Option<i32>) -> Result<(), Refusal> {
    if blank(org) {
        return Err(Refusal::bad(format!("{func} needs an org_id"), "Pass the org to read from (one of memory.my_orgs())."));
    }
    match k {
        Some(k) if (1..=1000).contains(&k) => Ok(()),
        _ => Err(Refusal::bad(
            format!("{func}: k must be between 1 and 1000, got {}", k.map_or("NULL".to_owned(), |k| k.to_string())),
            "Ask for 1 to 1000 rows; recall pages with its created_before filter.",
        )),
    }
}

/// jsonb's `v ? key`: an object's key, an array's string element, or the string itself.
fn has_key(v: &Value, key: &str) -> bool {
    match v {
        Value::Object(m) => m.contains_key(key),
        Value::Array(a) => a.iter().any(|x| x.as_str() == Some(key)),
        Value::String(s) => s == key,
        _ => false,
    }
}

/// A point-in-time read of memory.observations swaps in each memory's content, words and tier of
/// then; its metadata filter and its vector would still read today's row, so they are refused
/// with as_of (0A000).
pub fn check_as_of_with(as_of: bool, source: bool, embedding: bool, filters: Option<&Value>) -> Result<(), Refusal> {
    if as_of && !source && (embedding || filters.is_some_and(|f| has_key(f, "metadata"))) {
        return Err(Refusal {
            code: "0A000",
            message: "memory.recall: as_of cannot be combined with a metadata filter or a query_embedding yet".into(),
            hint: Some("Recall as of a time by its words (and the other filters); drop the metadata filter and query_embedding.".into()),
        });
    }
    Ok(())
}

pub const FILTERS_HINT: &str = "filters is an object of user_id, session_id, task_id (strings), memory_type, source_type, max_tier (their enum labels), \
                                created_after, created_before (timestamps) and metadata (an object the row's metadata contains).";


const FILTER_KEYS: [&str; 9] = ["user_id", "session_id", "task_id", "memory_type", "source_type", "max_tier", "created_after", "created_before", "metadata"];

/// recall's filters checked (memory_internal._recall_filters): Ok(Some(filters)) unchanged when
/// valid; Ok(None) when they hold created_after or created_before, whose timestamps the database
/// parses (the shell then asks memory_internal._recall_filters); 22023 with a hint otherwise.
/// NULL is no filter.
pub fn check_filters(filters: Option<&Value>) -> Result<Option<Map<String, Value>>, Refusal> {
    let Some(filters) = filters else { return Ok(Some(Map::new())) };
    let Value::Object(m) = filters else {
        return Err(Refusal::bad(format!("memory.recall filters must be a JSON object, not {}", type_of(filters)), FILTERS_HINT));
    };
    if m.contains_key("created_after") || m.contains_key("created_before") {
        return Ok(None);
    }
    let mut keys: Vec<&String> = m.keys().collect();
    keys.sort();
    for key in keys {
        let v = &m[key];
        if !FILTER_KEYS.contains(&key.as_str()) {
            return Err(Refusal::bad(format!("unknown memory.recall filter \"{key}\""), FILTERS_HINT));
        }
        if key == "metadata" {
            if !v.is_object() {
                return Err(Refusal::bad(format!("memory.recall filter \"metadata\" must be a JSON object, not {}", type_of(v)), FILTERS_HINT));
            }
            continue;
        }
        let Some(s) = v.as_str() else {
            return Err(Refusal::bad(format!("memory.recall filter \"{key}\" must be a string, not {}", type_of(v)), FILTERS_HINT));
        };
        let (labels, what): (&[&str], &str) = match key.as_str() {
            "memory_type" => (&MEMORY_TYPES, "memory type"),
            "source_type" => (&SOURCE_TYPES, "source type"),
            "max_tier" => (&CLASSIFICATIONS, "tier"),
            _ => continue,
        };
        if !labels.contains(&s) {
            return Err(Refusal::bad(format!("memory.recall filter \"{key}\": unknown {what} \"{s}\""), format!("One of {}.", labels.join(", "))));
        }
    }
    Ok(Some(m.clone()))
}

/// The order of a classification label (None: not one).
fn tier_rank(t: &str) -> Option<usize> {
    CLASSIFICATIONS.iter().position(|c| *c == t)
}

/// The tier recall reads up to: the caller's clearance lowered by a max_tier filter (SQL's
/// `least`, which skips a NULL).
pub fn effective_tier<'a>(clearance: Option<&'a str>, max_tier: Option<&'a str>) -> Option<&'a str> {
    match (clearance, max_tier) {
        (Some(c), Some(m)) => Some(if tier_rank(m) < tier_rank(c) { m } else { c }),
        (c, m) => c.or(m),
    }
}

/// memory.observations' columns by role (memory_internal._recall_columns without a source):
/// `embedding` Some(dims) when the table has an embedding column (dims: its dimensions, None
/// for a vector of no fixed size).
pub fn observation_columns(embedding: Option<Option<i64>>) -> Map<String, Value> {
    let mut c = Map::new();
    for (role, col) in [
        ("content", "content"),
        ("org", "org_id"),
        ("id", "id"),
        ("user", "user_id"),
        ("project", "project_id"),
        ("weight", "weight"),
        ("tier", "classification"),
        ("source_type", "source_type"),
        ("created_at", "created_at"),
        ("expires_at", "expires_at"),
        ("soft_deleted_at", "soft_deleted_at"),
        ("memory_type", "memory_type"),
        ("session_id", "session_id"),
        ("task_id", "task_id"),
        ("metadata", "metadata"),
        ("words", "content_tsv"),
        ("tier_kind", "column"),
    ] {
        c.insert(role.into(), Value::String(col.into()));
    }
    if let Some(dims) = embedding {
        c.insert("embedding".into(), "embedding".into());
        c.insert("dims".into(), dims.map_or(Value::Null, Value::from));
    }
    c
}

/// What recall's plan is built from.
#[derive(Debug, Clone)]
pub struct RecallArgs<'a> {
    pub org: &'a str,
    /// The query (None: no lexical list: a blank query, or stop words only).
    pub query: Option<&'a str>,
    pub k: i32,
    pub project_id: Option<&'a str>,
    /// The checked filters.
    pub filters: &'a Map<String, Value>,
    /// The tier read up to (`effective_tier`).
    pub tier: Option<&'a str>,
    /// The source's columns (`observation_columns`, or memory_internal._recall_columns').
    pub columns: &'a Map<String, Value>,
    /// The relation read: (schema, name).
    pub relation: (&'a str, &'a str),
    /// Whether it is a governed table (a source), not memory.observations.
    pub source: bool,
    /// The query vector (pgvector's text form) and pgvector's schema.
    pub vector: Option<(&'a str, Option<&'a str>)>,
}

fn col<'a>(c: &'a Map<String, Value>, role: &str) -> Value {
    c.get(role).and_then(Value::as_str).map_or(Value::Null, |s| Value::String(s.into()))
}

/// recall's plan (memory_internal._recall_plan): the org, the live rows, the clearance, the
/// project and the filters as conditions on the source's columns, in `Plan::from_json`'s form.
pub fn recall_plan(a: &RecallArgs<'_>) -> Value {
    let c = a.columns;
    let f = a.filters;
    let mut conds = vec![json!({"eq": [col(c, "org"), a.org]})];
    if !col(c, "soft_deleted_at").is_null() {
        conds.push(json!({"is_null": col(c, "soft_deleted_at")}));
    }
    if !col(c, "expires_at").is_null() {
        conds.push(json!({"null_or_after": [col(c, "expires_at"), null]}));
    }
    // A superseded memory is never recalled (SPEC §17).
    if !a.source {
        conds.push(json!({"is_null": "superseded_at"}));
    }
    // A row without a known tier is for roles cleared to restricted only.
    if a.tier != Some("restricted") {
        let up_to = a.tier.and_then(tier_rank);
        let labels: Vec<&str> = CLASSIFICATIONS.iter().enumerate().filter(|(i, _)| up_to.is_some_and(|u| *i <= u)).map(|(_, t)| *t).collect();
        conds.push(json!({"tier_in": [labels, a.org]}));
    }
    if let Some(p) = a.project_id {
        conds.push(json!({"eq": [col(c, "project"), p]}));
    }
    for key in ["memory_type", "session_id", "source_type", "task_id", "user_id"] {
        if let Some(v) = f.get(key) {
            let role = if key == "user_id" { "user" } else { key };
            conds.push(json!({"eq": [col(c, role), v.as_str().map_or(Value::Null, |s| Value::String(s.into()))]}));
        }
    }
    if let Some(v) = f.get("created_after") {
        conds.push(json!({"at_or_after": [col(c, "created_at"), v]}));
    }
    if let Some(v) = f.get("created_before") {
        conds.push(json!({"before": [col(c, "created_at"), v]}));
    }
    if let Some(v) = f.get("metadata") {
        conds.push(json!({"contains": [col(c, "metadata"), v]}));
    }
    let qv = a.vector.map(|(v, _)| v);
    let k = i64::from(a.k);
    let scoped = f.contains_key("user_id") || f.contains_key("session_id") || f.contains_key("task_id");
    json!({
        "relation": [a.relation.0, a.relation.1],
        "columns": {"id": col(c, "id"), "content": col(c, "content"), "weight": col(c, "weight"), "tier": col(c, "tier"),
                    "created_at": col(c, "created_at"), "user": col(c, "user"), "session": col(c, "session_id"),
                    "memory_type": col(c, "memory_type"), "metadata": col(c, "metadata"), "words": col(c, "words"),
                    "embedding": if qv.is_some() { col(c, "embedding") } else { Value::Null }},
        "tier_kind": col(c, "tier_kind"), "conditions": conds, "query": a.query, "vector": qv,
        "vector_schema": a.vector.and_then(|(_, s)| s),
        "k": k, "depth": (2 * k).clamp(40, 2000),
        // memory.observations with a vector: one pass over the rows under the conditions gives
        // both lists exactly, fused in the core. Filtered to a user's, a session's or a task's
        // memories, up to the shell's bound (10,000 rows); a tenant's memories up to
        // TENANT_ONE_PASS_ROWS, past which reading every row's distance costs more than the
        // vector index. More rows: the two index lists.
        "one_pass": qv.is_some() && !a.source,
        "one_pass_rows": if scoped { Value::Null } else { Value::from(TENANT_ONE_PASS_ROWS) },
    })
}

/// A plan read as of a time (memory_internal._plan_as_of; `at` as memory_internal._utc_text
/// writes it): its liveness conditions at `at` instead of now, created by then (`created_col`),
/// and for memory.observations each row as the revision valid at `at`. `at` None: unchanged.
pub fn plan_as_of(mut plan: Value, at: Option<&str>, created_col: Option<&str>) -> Value {
    let Some(t) = at else { return plan };
    let Some(m) = plan.as_object_mut() else { return plan };
    let mut conds: Vec<Value> = Vec::new();
    for c in m.get("conditions").and_then(Value::as_array).cloned().unwrap_or_default() {
        let is_null = c.get("is_null").and_then(Value::as_str);
        let noa = c.get("null_or_after").and_then(Value::as_array);
        conds.push(match (is_null, noa) {
            (Some(col @ ("soft_deleted_at" | "superseded_at")), _) => json!({"null_or_after": [col, t]}),
            (_, Some(a)) if a.get(1) == Some(&Value::Null) => json!({"null_or_after": [a.first().and_then(Value::as_str), t]}),
            _ => c,
        });
    }
    if let Some(created) = created_col {
        conds.push(json!({"at_or_before": [created, t]}));
    }
    m.insert("conditions".into(), Value::Array(conds));
    if m.get("relation") == Some(&json!(["memory", "observations"])) {
        m.insert("history".into(), json!({"relation": ["memory", "revisions"], "at": t}));
    }
    plan
}

fn sha256_hex(s: &str) -> String {
    hex::encode(Sha256::digest(s.as_bytes()))
}

/// The read event memory.recall appends: the ids in order, their count, k, the filter keys
/// (sorted), the hashes of the query (a NULL query hashes as '') and of the query vector's text,
/// the source (a governed table) and the time read as of. Never content, the query or the vector.
pub fn read_event(ids: Vec<Value>, k: i32, filters: &Map<String, Value>, query: Option<&str>, vector: Option<&str>, source: Option<&str>, as_of: Option<&str>) -> Value {
    let mut keys: Vec<&String> = filters.keys().collect();
    keys.sort();
    let mut m = Map::new();
    m.insert("count".into(), Value::from(ids.len()));
    m.insert("ids".into(), Value::Array(ids));
    m.insert("k".into(), Value::from(k));
    m.insert("filter_keys".into(), json!(keys));
    m.insert("query_sha256".into(), Value::String(sha256_hex(query.unwrap_or(""))));
    if let Some(v) = vector {
        m.insert("query_embedding_sha256".into(), Value::String(sha256_hex(v)));
    }
    if let Some(s) = source {
        m.insert("source".into(), Value::String(s.into()));
    }
    if let Some(a) = as_of {
        m.insert("as_of".into(), Value::String(a.into()));
    }
    Value::Object(m)
}

/// A JSON value as PostgreSQL's jsonb prints it: an object's keys shortest first, then by their
/// bytes; ", " and ": " between items (so the event's text is the one jsonb's cast gave).
pub fn jsonb_text(v: &Value) -> String {
    let mut out = String::new();
    write_jsonb(v, &mut out);
    out
}

fn write_jsonb(v: &Value, out: &mut String) {
    match v {
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_jsonb(x, out);
            }
            out.push(']');
        }
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort_by(|a, b| a.len().cmp(&b.len()).then_with(|| a.as_bytes().cmp(b.as_bytes())));
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push_str(": ");
                write_jsonb(&m[key], out);
            }
            out.push('}');
        }
        other => out.push_str(&other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retrieval::Plan;

    #[test]
    fn read_args_are_checked() {
        assert!(check_read_args("memory.recall", Some("acme"), Some(10)).is_ok());
        let e = check_read_args("memory.recall", Some(" \t"), Some(10)).unwrap_err();
        assert_eq!((e.code, e.message.as_str()), ("22023", "memory.recall needs an org_id"));
        let e = check_read_args("memory.recall", Some("acme"), None).unwrap_err();
        assert_eq!(e.message, "memory.recall: k must be between 1 and 1000, got NULL");
        assert_eq!(check_read_args("memory.recall", Some("acme"), Some(1001)).unwrap_err().message, "memory.recall: k must be between 1 and 1000, got 1001");
        assert!(check_read_args("memory.recall", Some("acme"), Some(0)).is_err());
    }

    #[test]
    fn as_of_refuses_metadata_and_vectors_of_observations() {
        let f = json!({"metadata": {"a": 1}});
        assert_eq!(check_as_of_with(true, false, false, Some(&f)).unwrap_err().code, "0A000");
        assert_eq!(check_as_of_with(true, false, true, None).unwrap_err().code, "0A000");
        assert!(check_as_of_with(true, true, true, Some(&f)).is_ok());
        assert!(check_as_of_with(false, false, true, Some(&f)).is_ok());
        // jsonb's ? on an array reads its string elements.
        assert!(check_as_of_with(true, false, false, Some(&json!(["metadata"]))).is_err());
    }

    #[test]
    fn filters_are_checked_in_key_order() {
        assert_eq!(check_filters(None).unwrap(), Some(Map::new()));
        let ok = json!({"user_id": "u1", "memory_type": "episodic", "max_tier": "internal", "metadata": {"a": 1}});
        assert_eq!(check_filters(Some(&ok)).unwrap().unwrap().len(), 4);
        assert_eq!(check_filters(Some(&json!([]))).unwrap_err().message, "memory.recall filters must be a JSON object, not array");
        assert_eq!(check_filters(Some(&json!({"zz": 1, "aa": 1}))).unwrap_err().message, "unknown memory.recall filter \"aa\"");
        assert_eq!(check_filters(Some(&json!({"user_id": 3}))).unwrap_err().message, "memory.recall filter \"user_id\" must be a string, not number");
        assert_eq!(check_filters(Some(&json!({"metadata": "x"}))).unwrap_err().message, "memory.recall filter \"metadata\" must be a JSON object, not string");
        let e = check_filters(Some(&json!({"memory_type": "dream"}))).unwrap_err();
        assert_eq!(e.message, "memory.recall filter \"memory_type\": unknown memory type \"dream\"");
        assert_eq!(e.hint.as_deref(), Some("One of working, short_term, long_term, persona, episodic, entity, structured."));
        assert_eq!(check_filters(Some(&json!({"max_tier": "secret"}))).unwrap_err().message, "memory.recall filter \"max_tier\": unknown tier \"secret\"");
        assert_eq!(check_filters(Some(&json!({"source_type": "x"}))).unwrap_err().hint.as_deref(), Some("One of decision, fact, preference, tool_result."));
        // Timestamps are the database's to parse.
        assert_eq!(check_filters(Some(&json!({"created_after": "2025-01-01", "bogus": 1}))).unwrap(), None);
    }

    #[test]
    fn the_tier_is_the_lower_of_clearance_and_max_tier() {
        assert_eq!(effective_tier(Some("confidential"), Some("internal")), Some("internal"));
        assert_eq!(effective_tier(Some("internal"), Some("restricted")), Some("internal"));
        assert_eq!(effective_tier(Some("restricted"), None), Some("restricted"));
        assert_eq!(effective_tier(None, Some("public")), Some("public"));
        assert_eq!(effective_tier(None, None), None);
    }

    fn args<'a>(f: &'a Map<String, Value>, c: &'a Map<String, Value>, tier: Option<&'a str>, vector: Option<(&'a str, Option<&'a str>)>) -> RecallArgs<'a> {
        RecallArgs { org: "acme", query: Some("pay"), k: 10, project_id: None, filters: f, tier, columns: c, relation: ("memory", "observations"), source: false, vector }
    }

    #[test]
    fn the_plan_of_observations() {
        let c = observation_columns(Some(Some(3)));
        let f = check_filters(Some(&json!({"user_id": "u1", "memory_type": "episodic", "metadata": {"a": 1}}))).unwrap().unwrap();
        let p = recall_plan(&args(&f, &c, Some("internal"), Some(("[1,0,0]", Some("public")))));
        assert_eq!(
            p["conditions"],
            json!([{"eq": ["org_id", "acme"]}, {"is_null": "soft_deleted_at"}, {"null_or_after": ["expires_at", null]},
                   {"is_null": "superseded_at"}, {"tier_in": [["public", "internal"], "acme"]},
                   {"eq": ["memory_type", "episodic"]}, {"eq": ["user_id", "u1"]}, {"contains": ["metadata", {"a": 1}]}])
        );
        assert_eq!(p["one_pass"], json!(true));
        assert_eq!(p["one_pass_rows"], Value::Null);
        assert_eq!(p["depth"], json!(40));
        assert_eq!(p["columns"]["embedding"], json!("embedding"));
        let plan = Plan::from_json(&p).unwrap();
        assert_eq!(plan.k, 10);
        assert!(plan.vector.is_some());
        // Without a vector: no embedding column, no one pass; restricted: no tier condition.
        let p = recall_plan(&args(&f, &c, Some("restricted"), None));
        assert_eq!(p["columns"]["embedding"], Value::Null);
        assert_eq!(p["one_pass"], json!(false));
        assert!(!p["conditions"].as_array().unwrap().iter().any(|x| x.get("tier_in").is_some()));
        // A tenant's memories (no user, session or task filter) with a vector: one pass of at
        // most TENANT_ONE_PASS_ROWS rows; a governed table (source): none.
        let tenant = check_filters(Some(&json!({"memory_type": "episodic"}))).unwrap().unwrap();
        let p = recall_plan(&args(&tenant, &c, Some("internal"), Some(("[1,0,0]", Some("public")))));
        assert_eq!((&p["one_pass"], &p["one_pass_rows"]), (&json!(true), &json!(TENANT_ONE_PASS_ROWS)));
        assert_eq!(Plan::from_json(&p).unwrap().one_pass_rows, Some(TENANT_ONE_PASS_ROWS));
        let mut a = args(&tenant, &c, Some("internal"), Some(("[1,0,0]", Some("public"))));
        a.source = true;
        assert_eq!(recall_plan(&a)["one_pass"], json!(false));
        // No clearance: no tier is read.
        let p = recall_plan(&args(&f, &c, None, None));
        assert!(p["conditions"].as_array().unwrap().contains(&json!({"tier_in": [[], "acme"]})));
        assert!(Plan::from_json(&p).is_ok());
    }

    #[test]
    fn as_of_moves_liveness_to_then() {
        let c = observation_columns(None);
        let f = Map::new();
        let p = plan_as_of(recall_plan(&args(&f, &c, Some("restricted"), None)), Some("2026-01-01 00:00:00.000000 AD +00"), Some("created_at"));
        let t = "2026-01-01 00:00:00.000000 AD +00";
        assert_eq!(
            p["conditions"],
            json!([{"eq": ["org_id", "acme"]}, {"null_or_after": ["soft_deleted_at", t]}, {"null_or_after": ["expires_at", t]},
                   {"null_or_after": ["superseded_at", t]}, {"at_or_before": ["created_at", t]}])
        );
        assert_eq!(p["history"], json!({"relation": ["memory", "revisions"], "at": t}));
        assert!(Plan::from_json(&p).unwrap().history.is_some());
        let q = recall_plan(&args(&f, &c, Some("restricted"), None));
        assert_eq!(plan_as_of(q.clone(), None, Some("created_at")), q);
    }

    #[test]
    fn the_read_event_is_jsonb_text() {
        let f = check_filters(Some(&json!({"user_id": "u", "max_tier": "public"}))).unwrap().unwrap();
        let e = read_event(vec![json!("a"), json!("b")], 10, &f, None, Some("[1,0]"), None, None);
        assert_eq!(
            jsonb_text(&e),
            format!(
                "{{\"k\": 10, \"ids\": [\"a\", \"b\"], \"count\": 2, \"filter_keys\": [\"max_tier\", \"user_id\"], \"query_sha256\": \"{}\", \"query_embedding_sha256\": \"{}\"}}",
                "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
                sha256_hex("[1,0]")
            )
        );
        let e = read_event(vec![], 3, &Map::new(), Some("pay"), None, Some("public.notes"), Some("t"));
        assert_eq!(e["source"], json!("public.notes"));
        assert_eq!(e["as_of"], json!("t"));
        assert_eq!(e["count"], json!(0));
        assert_eq!(e["query_sha256"], json!(sha256_hex("pay")));
    }
}
