//! `memory.search`'s own rules (SPEC §16, sql/recall.sql), run by the shell's
//! `memory_internal._search` in one call: the argument checks (22023 / 0A000 with hints, in the
//! order memory.search made them), the plan the engine reads over items (`Plan::from_json`'s
//! form: the org, the live items under the namespace prefix, the clearance, the §16 filter over
//! the value), and the read event's payload (ids, count, k; never values or the query). What
//! needs the database (the org, the clearance, the query's words, the embeddings' dimensions,
//! the TTL refresh and the read-back of the items) stays in the shell.

use super::recall::{check_read_args, plan_as_of, Refusal, CLASSIFICATIONS};
use serde_json::{json, Map, Value};
use super::filter::kind as type_of;

/// The function's name in its messages.
pub const FN: &str = "memory.search";

/// The largest offset memory.search takes.
pub const OFFSET_MAX: i32 = 1_000_000;

/// The arguments checked before anything is read or written, in memory.search's order: the org
/// and k (`check_read_args`); as_of a finite time (`as_of_infinite`: Some("infinity") or
/// Some("-infinity") for one that is not); as_of with a filter or a query embedding (0A000); the
/// offset in [0, 1,000,000]; the filter a JSON object.
pub fn check_args(
    org: Option<&str>,
    k: Option<i32>,
    as_of: bool,
    as_of_infinite: Option<&str>,
    offset: Option<i32>,
    filter: Option<&Value>,
    embedding: bool,
) -> Result<(), Refusal> {
    check_read_args(FN, org, k)?;
    if let Some(t) = as_of_infinite {
        return Err(Refusal {
            code: "22023",
            message: format!("{FN}: as_of must be a finite time, got {t}"),
            hint: Some("Pass the time to read the memories as of, or NULL for now.".into()),
        });
    }
    // A filter or a vector would read today's value, not the value of then.
    if as_of && (embedding || filter.is_some()) {
        return Err(Refusal {
            code: "0A000",
            message: format!("{FN}: as_of cannot be combined with a filter or a query_embedding yet"),
            hint: Some("Search as of a time by the query's words; drop the filter and query_embedding.".into()),
        });
    }
    match offset {
        Some(o) if (0..=OFFSET_MAX).contains(&o) => {}
        _ => {
            return Err(Refusal {
                code: "22023",
                message: format!("{FN}: offset must be between 0 and {OFFSET_MAX}, got {}", offset.map_or("NULL".to_owned(), |o| o.to_string())),
                hint: Some("Pass the number of items to skip.".into()),
            })
        }
    }
    if let Some(f) = filter.filter(|f| !f.is_object()) {
        return Err(Refusal {
            code: "22023",
            message: format!("{FN}: filter must be a JSON object, not {}", type_of(f)),
            hint: Some("An object of fields (dotted paths) to a value or to {\"$op\": value}; NULL for none.".into()),
        });
    }
    Ok(())
}

/// The refusal of a query embedding when the items have none (no memory.ann_settings row).
pub fn no_embeddings() -> Refusal {
    Refusal {
        code: "22023",
        message: format!("{FN}: items have no embeddings to compare query_embedding with"),
        hint: Some("Call memory.enable_embeddings(dimensions) (pgvector) and put items with embeddings, or pass query_embedding => NULL.".into()),
    }
}

/// What memory.search's plan is built from (the checked arguments and what the database said).
#[derive(Debug, Clone)]
pub struct SearchArgs<'a> {
    pub org: &'a str,
    /// The namespace prefix's labels (None: a NULL label; no labels: every item of the org).
    pub prefix: &'a [Option<String>],
    /// The query when it has words to search for (None: no lexical list).
    pub query: Option<&'a str>,
    /// The checked filter (a JSON object), if any.
    pub filter: Option<&'a Value>,
    pub k: i32,
    pub offset: i32,
    /// The caller's clearance in the org (None: not cleared for any tier).
    pub tier: Option<&'a str>,
    /// The query vector (pgvector's text form) and pgvector's schema.
    pub vector: Option<(&'a str, Option<&'a str>)>,
    /// The time read as of (memory_internal._utc_text's form).
    pub as_of: Option<&'a str>,
}

/// The items' plan (memory.search's, as it was built in PL/pgSQL): the org, keyed rows only, live
/// (not soft-deleted, expired or superseded), under the namespace prefix (through the index on
/// memory_internal._item_ns_path when no label holds a '.' or is NULL: such labels name no item),
/// within the clearance, the filter over the value; ranked by hybrid relevance × weight with the
/// newest update breaking ties, or the newest update first. Both hybrid lists are as long for
/// every page inside the first 40 results (each page a slice of one fused ranking); as of a time,
/// the liveness then (`plan_as_of`). With a vector under a namespace prefix of labels, the engine's
/// one pass (`one_pass`): the prefix's rows read once through the prefix index, each row's distance
/// and words computed together and the two lists fused in Rust (the same rule, lists and order; the
/// vector list exact), instead of a full-text list through the words' GIN index (for common words,
/// a bitmap of a large part of the org's items, ANDed with the prefix's) and a second read of the
/// same rows for the vector list. A prefix of more rows than the one pass takes reads the two lists.
pub fn search_plan(a: &SearchArgs<'_>) -> Value {
    let labels: Vec<Value> = a.prefix.iter().map(|l| l.as_deref().map_or(Value::Null, |s| Value::String(s.into()))).collect();
    let indexable = a.prefix.iter().all(|l| l.as_deref().is_some_and(|s| !s.contains('.')));
    let prefix = if indexable {
        json!({"prefix": ["namespace", labels, ["memory_internal", "_item_ns_path"]]})
    } else {
        json!({"prefix": ["namespace", labels]})
    };
    let mut conds = vec![
        json!({"eq": ["org_id", a.org]}),
        json!({"is_not_null": "key"}),
        json!({"is_null": "soft_deleted_at"}),
        json!({"null_or_after": ["expires_at", null]}),
        json!({"is_null": "superseded_at"}),
        prefix,
    ];
    // A row without a known tier is for roles cleared to restricted only.
    if a.tier != Some("restricted") {
        let up_to = a.tier.and_then(|t| CLASSIFICATIONS.iter().position(|c| *c == t));
        let labels: Vec<&str> = CLASSIFICATIONS.iter().enumerate().filter(|(i, _)| up_to.is_some_and(|u| *i <= u)).map(|(_, t)| *t).collect();
        conds.push(json!({"tier_in": [labels, a.org]}));
    }
    if let Some(f) = a.filter {
        conds.push(json!({"filter": ["value", f]}));
    }
    let end = i64::from(a.k) + i64::from(a.offset);
    let plan = json!({
        "relation": ["memory", "observations"], "tier_kind": "column",
        "columns": {"id": "id", "content": "content", "weight": "weight", "tier": "classification", "created_at": "updated_at",
                    "words": "search_tsv", "embedding": if a.vector.is_some() { Value::from("embedding") } else { Value::Null }},
        "conditions": conds, "query": a.query,
        "vector": a.vector.map(|(v, _)| v), "vector_schema": a.vector.and_then(|(_, s)| s),
        "k": a.k, "offset": a.offset, "depth": end.clamp(40, 2000), "vector_depth": end.max(40),
        "one_pass": a.vector.is_some() && indexable && !a.prefix.is_empty(),
    });
    plan_as_of(plan, a.as_of, Some("created_at"))
}

/// The read event memory.search appends (as memory.recall, call memory.search): the ids in
/// order, their count and k.
pub fn read_event(ids: Vec<Value>, k: i32) -> Value {
    let mut m = Map::new();
    m.insert("call".into(), FN.into());
    m.insert("count".into(), Value::from(ids.len()));
    m.insert("ids".into(), Value::Array(ids));
    m.insert("k".into(), Value::from(k));
    Value::Object(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retrieval::recall::jsonb_text;
    use crate::retrieval::{plan::Condition, Plan};

    fn ok(org: Option<&str>, k: Option<i32>, offset: Option<i32>) -> Result<(), Refusal> {
        check_args(org, k, false, None, offset, None, false)
    }

    #[test]
    fn arguments_are_checked_in_order() {
        assert!(ok(Some("acme"), Some(10), Some(0)).is_ok());
        assert!(ok(Some("acme"), Some(1000), Some(OFFSET_MAX)).is_ok());
        let e = ok(Some(" "), None, None).unwrap_err();
        assert_eq!((e.code, e.message.as_str()), ("22023", "memory.search needs an org_id"));
        assert_eq!(ok(Some("acme"), Some(0), None).unwrap_err().message, "memory.search: k must be between 1 and 1000, got 0");
        let e = ok(Some("acme"), Some(10), None).unwrap_err();
        assert_eq!(e.message, "memory.search: offset must be between 0 and 1000000, got NULL");
        assert_eq!(e.hint.as_deref(), Some("Pass the number of items to skip."));
        assert_eq!(ok(Some("acme"), Some(10), Some(-1)).unwrap_err().message, "memory.search: offset must be between 0 and 1000000, got -1");
        assert_eq!(ok(Some("acme"), Some(10), Some(OFFSET_MAX + 1)).unwrap_err().code, "22023");
        // as_of: finite first, then neither a filter nor an embedding with it.
        let f = json!({"a": 1});
        let e = check_args(Some("acme"), Some(10), true, Some("-infinity"), Some(0), Some(&f), true).unwrap_err();
        assert_eq!((e.code, e.message.as_str()), ("22023", "memory.search: as_of must be a finite time, got -infinity"));
        let e = check_args(Some("acme"), Some(10), true, None, Some(-5), Some(&f), false).unwrap_err();
        assert_eq!(e.code, "0A000");
        assert_eq!(check_args(Some("acme"), Some(10), true, None, Some(0), None, true).unwrap_err().code, "0A000");
        assert!(check_args(Some("acme"), Some(10), true, None, Some(0), None, false).is_ok());
        // The filter: an object (checked after the offset).
        let e = check_args(Some("acme"), Some(10), false, None, Some(0), Some(&json!([1])), false).unwrap_err();
        assert_eq!(e.message, "memory.search: filter must be a JSON object, not array");
        assert!(e.hint.unwrap().contains("dotted paths"));
        assert_eq!(check_args(Some("acme"), Some(10), false, None, None, Some(&json!(1)), false).unwrap_err().message,
                   "memory.search: offset must be between 0 and 1000000, got NULL");
        assert_eq!(no_embeddings().code, "22023");
    }

    fn args<'a>(prefix: &'a [Option<String>], filter: Option<&'a Value>, tier: Option<&'a str>) -> SearchArgs<'a> {
        SearchArgs { org: "acme", prefix, query: None, filter, k: 10, offset: 0, tier, vector: None, as_of: None }
    }

    #[test]
    fn the_plan_of_items() {
        let prefix = vec![Some("users".to_owned()), Some("u1".to_owned())];
        let f = json!({"kind": "note", "n": {"$gt": 500}});
        let p = search_plan(&args(&prefix, Some(&f), Some("internal")));
        assert_eq!(
            p["conditions"],
            json!([{"eq": ["org_id", "acme"]}, {"is_not_null": "key"}, {"is_null": "soft_deleted_at"},
                   {"null_or_after": ["expires_at", null]}, {"is_null": "superseded_at"},
                   {"prefix": ["namespace", ["users", "u1"], ["memory_internal", "_item_ns_path"]]},
                   {"tier_in": [["public", "internal"], "acme"]}, {"filter": ["value", {"kind": "note", "n": {"$gt": 500}}]}])
        );
        assert_eq!((p["k"].clone(), p["offset"].clone(), p["depth"].clone(), p["vector_depth"].clone()), (json!(10), json!(0), json!(40), json!(40)));
        assert_eq!(p["columns"]["created_at"], json!("updated_at"));
        assert_eq!(p["columns"]["embedding"], Value::Null);
        let plan = Plan::from_json(&p).unwrap();
        assert!(plan.query.is_none() && plan.vector.is_none() && plan.history.is_none());
        assert!(matches!(&plan.conditions[5], Condition::Prefix { path: Some(_), labels, .. } if labels == &["users", "u1"]));
        // Restricted: no tier condition; no clearance: no tier is read; no labels: the whole org.
        let p = search_plan(&args(&[], None, Some("restricted")));
        assert!(!p["conditions"].as_array().unwrap().iter().any(|c| c.get("tier_in").is_some() || c.get("filter").is_some()));
        assert_eq!(p["conditions"][5], json!({"prefix": ["namespace", [], ["memory_internal", "_item_ns_path"]]}));
        assert!(search_plan(&args(&[], None, None))["conditions"].as_array().unwrap().contains(&json!({"tier_in": [[], "acme"]})));
    }

    #[test]
    fn labels_that_name_no_item_skip_the_index() {
        let dotted = vec![Some("a.b".to_owned())];
        let p = search_plan(&args(&dotted, None, Some("restricted")));
        assert_eq!(p["conditions"][5], json!({"prefix": ["namespace", ["a.b"]]}));
        assert!(Plan::from_json(&p).is_ok());
        // A NULL label: the engine refuses it, as it did memory.search's plan.
        let null = vec![None];
        let p = search_plan(&args(&null, None, Some("restricted")));
        assert_eq!(p["conditions"][5], json!({"prefix": ["namespace", [null]]}));
        assert_eq!(Plan::from_json(&p).unwrap_err().0, "retrieval plan: prefix must be a value");
    }

    #[test]
    fn pages_and_vectors_and_as_of() {
        let prefix = vec![Some("docs".to_owned())];
        let mut a = args(&prefix, None, Some("restricted"));
        a.query = Some("green tea");
        a.vector = Some(("[1,0]", Some("public")));
        a.k = 30;
        a.offset = 25;
        let p = search_plan(&a);
        assert_eq!((p["depth"].clone(), p["vector_depth"].clone()), (json!(55), json!(55)));
        assert_eq!(p["columns"]["embedding"], json!("embedding"));
        let plan = Plan::from_json(&p).unwrap();
        assert_eq!(plan.vector, Some(("[1,0]".into(), "public".into())));
        assert_eq!(plan.vector_len(), 55);
        // A vector under a prefix: the one pass; the whole org, or no vector, the two lists.
        assert!(plan.one_pass);
        a.prefix = &[];
        assert!(!Plan::from_json(&search_plan(&a)).unwrap().one_pass);
        a.prefix = &prefix;
        a.vector = None;
        assert!(!Plan::from_json(&search_plan(&a)).unwrap().one_pass);
        a.vector = Some(("[1,0]", Some("public")));
        a.offset = 1_000_000;
        a.k = 1000;
        let p = search_plan(&a);
        assert_eq!((p["depth"].clone(), p["vector_depth"].clone()), (json!(2000), json!(1_001_000)));
        assert!(Plan::from_json(&p).is_ok());
        // As of a time: liveness then, created by then, each item as its revision of then.
        let mut a = args(&prefix, None, Some("restricted"));
        a.as_of = Some("2026-02-01T00:00:00.000000Z");
        let p = search_plan(&a);
        let t = "2026-02-01T00:00:00.000000Z";
        assert_eq!(p["conditions"][2], json!({"null_or_after": ["soft_deleted_at", t]}));
        assert_eq!(p["conditions"][3], json!({"null_or_after": ["expires_at", t]}));
        assert_eq!(p["conditions"][4], json!({"null_or_after": ["superseded_at", t]}));
        assert_eq!(p["conditions"].as_array().unwrap().last(), Some(&json!({"at_or_before": ["created_at", t]})));
        assert_eq!(p["history"], json!({"relation": ["memory", "revisions"], "at": t}));
    }

    #[test]
    fn the_read_event_is_ids_count_and_k() {
        let e = read_event(vec![json!("a"), json!("b")], 10);
        assert_eq!(jsonb_text(&e), "{\"k\": 10, \"ids\": [\"a\", \"b\"], \"call\": \"memory.search\", \"count\": 2}");
        assert_eq!(jsonb_text(&read_event(vec![], 3)), "{\"k\": 3, \"ids\": [], \"call\": \"memory.search\", \"count\": 0}");
    }
}
