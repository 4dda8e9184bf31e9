//! The engine's tests: a statement per combination of lists and sources, the filter language, and
//! properties (values and identifiers never change the statement's shape, no value is spliced).
//! Long: one file for the renderer's statements, whose checks read best side by side.

use super::filter;
use super::plan::Plan;
use super::render::{quote_ident, render, render_one_pass, ParamType};
use super::words::Match;
use proptest::prelude::*;
use serde_json::{json, Value};

fn observations(extra: Value) -> Value {
    let mut p = json!({
        "relation": ["memory", "observations"],
        "columns": {"id": "id", "content": "content", "weight": "weight", "tier": "classification",
                    "created_at": "created_at", "user": "user_id", "session": "session_id", "memory_type": "memory_type",
                    "metadata": "metadata", "embedding": "embedding", "words": "content_tsv"},
        "conditions": [{"eq": ["org_id", "acme"]}, {"is_null": "soft_deleted_at"}, {"null_or_after": ["expires_at", null]},
                       {"tier_in": [["public", "internal"], "acme"]}],
        "k": 10
    });
    for (k, v) in extra.as_object().unwrap() {
        p[k] = v.clone();
    }
    p
}

fn plan(v: Value) -> Plan {
    Plan::from_json(&v).unwrap()
}

/// The statement with every double-quoted identifier and every `$n` replaced by a marker.
fn skeleton(sql: &str) -> String {
    let mut out = String::new();
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '"' {
            loop {
                match chars.next() {
                    Some('"') if chars.peek() == Some(&'"') => {
                        chars.next();
                    }
                    Some('"') | None => break,
                    Some(_) => {}
                }
            }
            out.push_str("<ident>");
        } else {
            out.push(c);
        }
    }
    out
}

#[test]
fn quote_ident_doubles_quotes() {
    assert_eq!(quote_ident("a"), "\"a\"");
    assert_eq!(quote_ident("we\"ird"), "\"we\"\"ird\"");
}

#[test]
fn newest_first_without_query_or_vector() {
    let s = render(&plan(observations(json!({}))));
    assert!(s.sql.contains("ORDER BY created_at DESC NULLS LAST, id LIMIT"), "{}", s.sql);
    assert!(!s.sql.contains("@@"));
    assert_eq!(s.params, vec![Some("acme".into()), Some("{\"public\",\"internal\"}".into()), Some("10".into()), Some("0".into())]);
    assert!(s.sql.contains("t.\"org_id\"::pg_catalog.text OPERATOR(pg_catalog.=) $1"));
    assert!(s.sql.contains("t.\"soft_deleted_at\" IS NULL"));
    assert!(s.sql.contains("(t.\"expires_at\" IS NULL OR t.\"expires_at\" OPERATOR(pg_catalog.>) pg_catalog.now())"));
}

#[test]
fn full_text_any_word() {
    let s = render(&plan(observations(json!({"query": "how does the customer like to pay?"}))));
    assert!(s.sql.contains("plainto_tsquery"), "any-word reads OR the query's lexemes");
    assert!(s.sql.contains("ts_delete"), "coverage counts the words a row has");
    assert!(s.sql.contains("ORDER BY m DESC, score DESC NULLS LAST, id"));
    assert!(s.params.contains(&Some("how does the customer like to pay?".into())));
    assert!(!s.sql.contains("customer"));
}

#[test]
fn full_text_websearch() {
    let p = plan(observations(json!({"query": "\"bank transfer\" -card"})));
    assert_eq!(p.query.as_ref().unwrap().1, Match::Websearch);
    let s = render(&p);
    assert!(!s.sql.contains("plainto_tsquery"));
    assert!(s.sql.contains("websearch_to_tsquery"));
    assert!(!s.sql.contains("bank"));
}

#[test]
fn hybrid_has_both_lists_an_exact_pass_and_one_rrf_rule() {
    let s = render(&plan(observations(json!({"query": "pay", "vector": "[1,0,0]", "vector_schema": "public"}))));
    for part in ["lex AS MATERIALIZED", "vscan AS MATERIALIZED", "vexact AS MATERIALIZED", "FULL JOIN vec", "OPERATOR(\"public\".<=>)"] {
        assert!(s.sql.contains(part), "{part} in {}", s.sql);
    }
    assert!(s.sql.contains(&crate::fusion::rrf_sql("lex.r", "vec.r")));
    // The exact pass runs only when the index scan came back short, and is not the index's order.
    assert!(s.sql.contains("(SELECT pg_catalog.count(*) FROM vscan) OPERATOR(pg_catalog.<)"));
    assert!(s.sql.contains("OPERATOR(pg_catalog.+) 0, 3 DESC, 1"));
    assert!(s.params.contains(&Some("[1,0,0]".into())));
    assert!(s.sql.contains("ORDER BY x.score DESC, x.best, x.id"));
}

#[test]
fn hybrid_reads_the_vector_once_and_hides_the_lengths_from_the_estimates() {
    // One generic plan serves every call (docs/vector.md): the vector is an InitPlan, never a
    // cast in a scan's ORDER BY that a generic plan would evaluate per row, and no LIMIT takes a
    // bare parameter (whose value only a custom plan sees).
    let s = render(&plan(observations(json!({"query": "pay", "vector": "[1,0,0]", "vector_schema": "public"}))));
    let v = s.params.iter().position(|p| p.as_deref() == Some("[1,0,0]")).unwrap() + 1;
    let cast = format!("${v}::\"public\".vector");
    assert_eq!(s.sql.matches(&cast).count(), s.sql.matches(&format!("(SELECT {cast})")).count(), "{}", s.sql);
    assert!(s.sql.contains(&format!("ORDER BY t.\"embedding\" OPERATOR(\"public\".<=>) (SELECT ${v}::\"public\".vector) LIMIT (SELECT $")), "{}", s.sql);
    for (i, _) in s.sql.match_indices("LIMIT ") {
        assert!(s.sql[i..].starts_with("LIMIT (SELECT $"), "{}", &s.sql[i..]);
    }
    assert!(s.sql.contains("OFFSET (SELECT $"));
}

#[test]
fn the_vector_list_is_vector_depth_long_else_the_page_s_end() {
    // memory.recall: k + offset; memory.search: vector_depth, the same for every page.
    let hybrid = json!({"query": "pay", "vector": "[1,0,0]", "vector_schema": "public", "k": 2, "offset": 4});
    let p = plan(observations(hybrid.clone()));
    assert_eq!((p.vector_depth, p.vector_len()), (None, 6));
    let mut with = hybrid.clone();
    with["vector_depth"] = json!(40);
    let p = plan(observations(with));
    assert_eq!((p.vector_depth, p.vector_len()), (Some(40), 40));
    let s = render(&p);
    assert!(s.params.contains(&Some("40".into())) && !s.params.contains(&Some("6".into())), "{:?}", s.params);
    // The page is still k from offset of the fused list.
    assert!(s.params.contains(&Some("2".into())) && s.params.contains(&Some("4".into())));
    for bad in [json!(0), json!(-1), json!("40"), json!(super::plan::VECTOR_DEPTH_MAX as u64 + 1)] {
        let mut v = hybrid.clone();
        v["vector_depth"] = bad.clone();
        assert!(Plan::from_json(&observations(v)).is_err(), "{bad}");
    }
}

#[test]
fn vector_alone_has_an_empty_lexical_list() {
    let s = render(&plan(observations(json!({"vector": "[1,0,0]", "vector_schema": "vs"}))));
    assert!(s.sql.contains("WHERE false"));
    assert!(!s.sql.contains("tsquery"));
}

#[test]
fn a_source_table_parses_its_words_and_reads_a_json_tier() {
    let s = render(&plan(json!({
        "relation": ["app", "notes"], "columns": {"id": "nid", "content": "body", "tier": "meta"}, "tier_kind": "json",
        "conditions": [{"eq": ["tenant", "acme"]}, {"tier_in": [["public"], "acme"]}], "query": "pay", "k": 5})));
    assert!(s.sql.contains("pg_catalog.to_tsvector('english'::pg_catalog.regconfig, t.\"body\"::pg_catalog.text)"));
    assert!(s.sql.contains("(t.\"meta\" OPERATOR(pg_catalog.->>) 'classification')"));
    assert!(s.sql.contains("1.0::pg_catalog.float8 AS weight"));
    assert!(s.sql.contains("FROM \"app\".\"notes\" t"));
}

#[test]
fn claims_rank_ties_by_confidence_then_newest() {
    let s = render(&plan(json!({
        "relation": ["memory", "claims"], "columns": {"id": "id", "content": "claim_text", "created_at": "t_created", "embedding": "embedding"},
        "tier_kind": "claim", "ties": ["confidence_score", "t_created"],
        "conditions": [{"eq": ["org_id", "acme"]}, {"eq": ["lifecycle_state", "active", "memory", "lifecycle_state"]},
                       {"at_or_before": ["t_created", "2026-01-01"]}, {"null_or_after": ["decay_at", "2026-01-01"]},
                       {"null_or_eq": ["subject_id", null]}, {"tier_in": [["public"], "acme"]}],
        "query": "aspirin", "vector": "[1,0]", "vector_schema": "public", "k": 3})));
    assert!(s.sql.contains("memory_internal._claim_tier(t.\"claim_text\", t.\"subject_id\", t.\"pii_fields\", $1::pg_catalog.text)"));
    assert!(s.sql.contains("t.\"lifecycle_state\" OPERATOR(pg_catalog.=) $2::\"memory\".\"lifecycle_state\""));
    assert!(s.sql.contains("ORDER BY x.score DESC, x.tie0 DESC, x.tie1 DESC, x.id"));
    assert!(s.params.contains(&None), "a NULL user is a NULL parameter");
}

#[test]
fn active_claims_are_a_constant_and_their_words_are_parsed_once() {
    // memory.retrieve's plan: the lifecycle state is the core's constant, so that the indexes of
    // active claims (`WHERE lifecycle_state = 'active'`) serve the statement's generic plan.
    let s = render(&plan(json!({
        "relation": ["memory", "claims"], "columns": {"id": "id", "content": "claim_text", "created_at": "t_created", "embedding": "embedding"},
        "tier_kind": "claim", "ties": ["confidence_score", "t_created"],
        "conditions": [{"eq": ["org_id", "acme"]}, {"active": ["lifecycle_state", "memory", "lifecycle_state"]},
                       {"null_or_eq": ["subject_id", null]}],
        "query": "aspirin dose", "vector": "[1,0]", "vector_schema": "public", "k": 3})));
    assert!(s.sql.contains("t.\"lifecycle_state\" OPERATOR(pg_catalog.=) 'active'::\"memory\".\"lifecycle_state\""), "{}", s.sql);
    assert!(!s.params.iter().any(|p| p.as_deref() == Some("active")), "no parameter holds the label");
    // The lexical list parses a claim's text once (`u`), its coverage once (`s`): to_tsvector of
    // the row twice in it (the match, which its index reads, and the words), ts_delete once.
    let lex = &s.sql[..s.sql.find("vscan AS").unwrap()];
    assert_eq!(lex.matches("pg_catalog.to_tsvector('english'::pg_catalog.regconfig, t.").count(), 2, "{lex}");
    assert_eq!(lex.matches("ts_delete").count(), 1, "{lex}");
    assert!(lex.contains("pg_catalog.ts_rank_cd(s.w, "), "{lex}");
    let bad = |a: Value| Plan::from_json(&json!({"relation": ["memory", "claims"], "columns": {"id": "id", "content": "claim_text"},
                                                   "conditions": [{"active": a}], "k": 3}));
    assert!(bad(json!(["lifecycle_state"])).is_err());
    assert!(bad(json!(["lifecycle_state", "memory", ""])).is_err());
}

#[test]
fn one_pass_reads_candidates_and_rows() {
    let p = plan(observations(json!({"query": "pay", "vector": "[1,0,0]", "vector_schema": "public", "one_pass": true})));
    let o = render_one_pass(&p, 10001).unwrap();
    assert!(o.candidates.ends_with("LIMIT 10001) s"), "{}", o.candidates);
    // The rows are read once (no second read for the list's cut) and the words go out for the
    // rows that match only; the relevance is the caller's (no ts_rank_cd in the statement).
    assert!(!o.candidates.contains("MATERIALIZED"), "{}", o.candidates);
    assert!(o.candidates.starts_with("SELECT s.id, s.weight, s.d, CASE WHEN s.m IS NOT NULL THEN s.w END, s.m FROM (SELECT"), "{}", o.candidates);
    assert!(!o.candidates.contains("ts_rank_cd"), "{}", o.candidates);
    assert!(o.candidates.contains("(SELECT $3::\"public\".vector)"), "{}", o.candidates);
    assert!(o.rows.contains(&format!("jsonb_to_recordset(${}::pg_catalog.jsonb)", o.params.len() + 1)));
    // The typed rows: the same join and conditions, the items then score and ranks as columns, in the list's order.
    let from = |r: &str| r[r.find("FROM pg_catalog.jsonb_to_recordset").unwrap()..].to_owned();
    assert_eq!(from(&o.rows_typed), format!("{} ORDER BY f.o", from(&o.rows).trim_end_matches(") x")), "{}", o.rows_typed);
    assert!(o.rows_typed.starts_with("SELECT t.\"id\" AS id, ") && o.rows_typed.contains(" AS metadata, f.score, f.lexical_rank, f.vector_rank FROM"));
    assert!(render_one_pass(&plan(observations(json!({"query": "pay"}))), 10).is_none());
    // The row's coverage of the query (ts_delete) and its match are computed once a row; the rank
    // reads them from the sub-select.
    assert_eq!(o.candidates.matches("ts_delete").count(), 1, "{}", o.candidates);
    assert_eq!(o.candidates.matches("OPERATOR(pg_catalog.@@)").count(), 1, "{}", o.candidates);
    let v = render_one_pass(&plan(observations(json!({"vector": "[1,0,0]", "vector_schema": "public", "one_pass": true}))), 10).unwrap();
    assert!(v.candidates.contains("NULL::pg_catalog.tsvector AS w, NULL::pg_catalog.int4 AS m FROM"), "no query: no words, {}", v.candidates);
    // The scope's parameters come first: the vector and the words after them.
    assert_eq!(o.params[..o.scope_params].iter().flatten().filter(|p| p.as_str() == "pay" || p.as_str() == "[1,0,0]").count(), 0);
    assert_eq!(&o.params[o.scope_params..o.scope_params + 2], &[Some("[1,0,0]".to_owned()), Some("pay".to_owned())]);
    assert!(o.params[..o.scope_params].contains(&Some("acme".to_owned())), "{:?}", o.params);
}

#[test]
fn filters_render_each_operator() {
    let f = json!({"a.b": 1, "s": {"$gt": "m", "$lte": 5}, "t": {"$in": [1, "x"], "$nin": [2]}, "e": {"$exists": false},
                   "c": {"$contains": "sub"}, "$or": [{"x": {"$ne": null}}, {"$not": {"y": true}}]});
    let s = render(&plan(observations(json!({"conditions": [{"eq": ["org_id", "acme"]}, {"filter": ["metadata", f]}]}))));
    for part in ["::pg_catalog.numeric", "COLLATE pg_catalog.\"C\"", "jsonb_array_elements", "IS NULL)", "strpos", " OR ", "(NOT "] {
        assert!(s.sql.contains(part), "{part} in {}", s.sql);
    }
    assert!(s.params.contains(&Some("{\"a\",\"b\"}".into())));
    assert!(!s.sql.contains("sub"));
}

/// Every `$n` of `sql` (n in 1..=count) read as its declared type: each cast on it (`$n::T`) is
/// to `types[n-1]` (a no-op for PostgreSQL), or to int4 from int8 (the offset added to a rank);
/// a bare `$n` is text, and (`all`) every parameter is read.
fn casts_match_types(sql: &str, types: &[ParamType], count: usize, all: bool) {
    assert_eq!(types.len(), count, "a type per parameter");
    let name = |t: ParamType| match t {
        ParamType::Text => "pg_catalog.text",
        ParamType::TextArray => "pg_catalog.text[]",
        ParamType::Jsonb => "pg_catalog.jsonb",
        ParamType::Numeric => "pg_catalog.numeric",
        ParamType::Int8 => "pg_catalog.int8",
        ParamType::Timestamptz => "pg_catalog.timestamptz",
    };
    let bytes = sql.as_bytes();
    let mut used = vec![false; count];
    let mut i = 0;
    while let Some(at) = sql[i..].find('$') {
        let start = i + at + 1;
        let end = start + bytes[start..].iter().take_while(|b| b.is_ascii_digit()).count();
        i = end;
        let Ok(n) = sql[start..end].parse::<usize>() else { continue };
        assert!((1..=count).contains(&n), "${n} in {sql}");
        used[n - 1] = true;
        let t = types[n - 1];
        let rest = &sql[end..];
        match rest.strip_prefix("::") {
            Some(cast) => {
                let ok = cast.starts_with(name(t))
                    && !(t == ParamType::Text && cast.starts_with("pg_catalog.text[]"))
                    || (t == ParamType::Int8 && cast.starts_with("pg_catalog.int4"))
                    || (t == ParamType::Text && cast.starts_with('"'));
                assert!(ok, "${n} is {t:?} but read as {}", &cast[..cast.len().min(30)]);
            }
            None => assert_eq!(t, ParamType::Text, "${n} is read bare: {}", &rest[..rest.len().min(30)]),
        }
    }
    assert!(!all || used.iter().all(|u| *u), "every parameter is read: {used:?}");
}

#[test]
fn parameters_are_declared_as_they_are_read() {
    let f = json!({"a.b": 1, "s": {"$gt": "m", "$lte": 5}, "t": {"$in": [1, "x"], "$nin": [2]}, "e": {"$exists": false},
                   "c": {"$contains": "sub"}, "$or": [{"x": {"$ne": null}}, {"$not": {"y": true}}]});
    let conds = json!([{"eq": ["org_id", "acme"]}, {"is_not_null": "key"}, {"null_or_after": ["expires_at", "2026-01-01"]},
                       {"at_or_after": ["created_at", "2025-01-01"]}, {"before": ["created_at", "2027-01-01"]},
                       {"prefix": ["namespace", ["users", "u1"], ["memory_internal", "_item_ns_path"]]},
                       {"tier_in": [["public", "internal"], "acme"]}, {"contains": ["metadata", {"a": 1}]},
                       {"filter": ["value", f]}]);
    let plans = [
        json!({"conditions": conds}),
        json!({"conditions": conds, "query": "pay by card"}),
        json!({"conditions": conds, "query": "pay", "vector": "[1,0,0]", "vector_schema": "public"}),
        json!({"conditions": conds, "vector": "[1,0,0]", "vector_schema": "public"}),
        json!({"history": {"relation": ["memory", "revisions"], "at": "2026-03-03"}, "query": "pay"}),
        json!({"history": {"relation": ["memory", "revisions"], "at": "2026-03-03"}, "vector": "[1,0,0]", "vector_schema": "public"}),
    ];
    for p in plans {
        let p = plan(observations(p));
        let s = render(&p);
        // (A vector without a query binds the lexical list's depth, unread.)
        casts_match_types(&s.sql, &s.types, s.params.len(), p.vector.is_none() || p.query.is_some());
        if let Some(o) = render_one_pass(&p, 100) {
            casts_match_types(&o.candidates, &o.types, o.params.len(), false);
            // The rows' statement: the same parameters and the fused list, a jsonb.
            for rows in [&o.rows, &o.rows_typed] {
                casts_match_types(rows, &[o.types.clone(), vec![ParamType::Jsonb]].concat(), o.params.len() + 1, false);
            }
        }
    }
    // The filter's values as the types they are compared as: the path a text[], a JSON value
    // jsonb, a number numeric, a string compared bytewise text; k and offset int8.
    let s = render(&plan(observations(json!({"conditions": [{"eq": ["org_id", "acme"]}, {"filter": ["value", {"n": {"$gt": 500}}]}]}))));
    assert_eq!(s.types, vec![ParamType::Text, ParamType::Text, ParamType::Numeric, ParamType::Int8, ParamType::Int8]);
    assert_eq!(s.params[1..3], [Some("n".into()), Some("500".into())]);
    let s = render(&plan(observations(json!({"conditions": [{"eq": ["org_id", "acme"]}, {"filter": ["value", {"a.b": 1}]}]}))));
    assert_eq!(s.types[1..3], [ParamType::TextArray, ParamType::Jsonb]);
    assert_eq!(s.params[1], Some("{\"a\",\"b\"}".into()));
}

#[test]
fn a_one_key_field_is_read_by_its_key() {
    // `x #> '{k}'` reads k as an index in an array (`'[5]' #> '{0}'` is 5), `x -> 'k'` never: the
    // same only for a key that cannot be an index (strtol: optional blanks and sign, digits).
    let field = |f: Value| render(&plan(observations(json!({"conditions": [{"eq": ["org_id", "acme"]}, {"filter": ["value", f]}]}))));
    let s = field(json!({"kind": ["note"]}));
    assert!(s.sql.contains("coalesce((t.\"value\" OPERATOR(pg_catalog.->) $2::pg_catalog.text) OPERATOR(pg_catalog.=) $3::pg_catalog.jsonb, false)"), "{}", s.sql);
    assert_eq!(s.params[1..3], [Some("kind".into()), Some("[\"note\"]".into())]);
    assert!(!s.sql.contains("#>"));
    // Equal to a scalar: containment of {key: scalar}, one jsonb parameter.
    for (f, doc, not) in [(json!({"kind": "note"}), r#"{"kind":"note"}"#, false), (json!({"n": {"$eq": 7.5}}), r#"{"n":7.5}"#, false),
                          (json!({"b": {"$ne": null}}), r#"{"b":null}"#, true), (json!({"t": {"$ne": true}}), r#"{"t":true}"#, true)] {
        let s = field(f);
        let has = "coalesce(t.\"value\" OPERATOR(pg_catalog.@>) $2::pg_catalog.jsonb, false)";
        assert!(s.sql.contains(&if not { format!("(NOT {has})") } else { format!("AND {has}") }), "{}", s.sql);
        assert_eq!((s.params[1].as_deref(), s.types[1]), (Some(doc), ParamType::Jsonb));
    }
    // Not for a path, a key that may be an index, or an object or array value.
    for f in [json!({"a.b": 1}), json!({"0": 1}), json!({"k": {"x": 1}}), json!({"k": {"$ne": [1]}})] {
        assert!(!field(f.clone()).sql.contains("@>"), "{f}");
    }
    for key in ["0", "12", "-1", "+1", " 1", "\t1", "\u{e9}t\u{e9}", "1abc"] {
        let s = field(json!({key: 1}));
        assert!(s.sql.contains("OPERATOR(pg_catalog.#>) $2::pg_catalog.text[]") && !s.sql.contains("->"), "{key:?}: {}", s.sql);
        assert_eq!(s.types[1], ParamType::TextArray);
    }
    for key in ["kind", "_id", "n", "Z9", "a-b", "x 1"] {
        assert!(super::render::never_an_index(key), "{key:?}");
    }
    // Every operator reads the one-key field the same way.
    let s = field(json!({"s": {"$gt": "m"}, "t": {"$in": [1]}, "e": {"$exists": true}, "c": {"$contains": "x"}, "$not": {"y": {"$ne": 2}}}));
    assert!(!s.sql.contains("#>)"), "{}", s.sql);
}

#[test]
fn items_under_a_namespace_prefix() {
    let s = render(&plan(observations(json!({"conditions": [{"eq": ["org_id", "acme"]}, {"is_not_null": "key"},
                                                            {"prefix": ["namespace", ["users", "u.1"]]}]}))));
    assert!(s.sql.contains("t.\"key\" IS NOT NULL"));
    assert!(s.sql.contains("t.\"namespace\"[1:pg_catalog.cardinality($2::pg_catalog.text[])] OPERATOR(pg_catalog.=) $2::pg_catalog.text[]"));
    assert_eq!(s.params[1], Some("{\"users\",\"u.1\"}".into()));
}

#[test]
fn a_prefix_with_a_path_function_is_also_an_index_prefix_match() {
    let with = |labels: Value| {
        render(&plan(observations(json!({"conditions": [{"eq": ["org_id", "acme"]},
                                                         {"prefix": ["namespace", labels, ["memory_internal", "_item_ns_path"]]}]}))))
    };
    let s = with(json!(["users", "u1"]));
    // The range alone: no label holds a '.', so a path in it is a namespace starting with the
    // labels (the labels are not compared again on every row).
    assert!(s.sql.contains("(\"memory_internal\".\"_item_ns_path\"(t.\"namespace\") COLLATE \"C\" OPERATOR(pg_catalog.>=) $2::pg_catalog.text AND \
                            \"memory_internal\".\"_item_ns_path\"(t.\"namespace\") COLLATE \"C\" OPERATOR(pg_catalog.<) $3::pg_catalog.text)"), "{}", s.sql);
    assert!(!s.sql.contains("cardinality"), "{}", s.sql);
    assert_eq!(s.params[1], Some("users.u1.".into()), "each label followed by '.', so u1 never matches u10");
    assert_eq!(s.params[2], Some("users.u1/".into()));
    assert_eq!(s.types[1..3], [ParamType::Text, ParamType::Text]);
    // No labels: every namespace, the labels' comparison (true for any namespace), no path condition.
    let s = with(json!([]));
    assert!(!s.sql.contains("_item_ns_path"));
    assert!(s.sql.contains("t.\"namespace\"[1:pg_catalog.cardinality($2::pg_catalog.text[])] OPERATOR(pg_catalog.=) $2::pg_catalog.text[]"));
    // A label with '.' would make the path ambiguous: refused.
    assert!(Plan::from_json(&observations(json!({"conditions": [{"prefix": ["namespace", ["a.b"], ["s", "f"]]}]}))).is_err());
    assert!(Plan::from_json(&observations(json!({"conditions": [{"prefix": ["namespace", ["a"], ["s"]]}]}))).is_err());
}

#[test]
fn the_paths_under_a_prefix_are_a_byte_range() {
    let start = super::namespace_path(["users", "u1"]);
    let end = super::namespace_path_end(&start);
    let under = |p: &str| p.as_bytes() >= start.as_bytes() && p.as_bytes() < end.as_bytes();
    for p in ["users.u1.", "users.u1.x.", "users.u1.~.", "users.u1.\u{10ffff}."] {
        assert!(under(p) && p.starts_with(&start), "{p}");
    }
    for p in ["users.u10.", "users.u1", "users.u1-.", "users.u1/.", "users.u2.", "users.", "users.u0.z."] {
        assert!(!under(p) && !p.starts_with(&start), "{p}");
    }
}

#[test]
fn a_namespace_path_is_each_label_and_a_period() {
    assert_eq!(super::namespace_path(["users", "u1"]), "users.u1.");
    assert_eq!(super::namespace_path([]), "");
    assert!(!super::namespace_path(["users", "u10"]).starts_with(&super::namespace_path(["users", "u1"])));
    assert!(super::namespace_path(["users", "u1", "x"]).starts_with(&super::namespace_path(["users", "u1"])));
}

#[test]
fn unknown_operators_and_bad_values_are_refused() {
    for bad in [json!({"a": {"$regex": "x"}}), json!({"$nor": []}), json!({"a": {"$in": 1}}), json!({"a": {"$exists": 1}}),
                json!({"a": {"$gt": true}}), json!([1]), json!({"$and": {}}), json!({"": 1}), json!({"a..b": 1})] {
        assert!(filter::parse(&bad).is_err(), "{bad}");
    }
    let e = filter::parse(&json!({"a": {"$regex": "secret"}})).unwrap_err();
    assert!(e.0.contains("$regex") && !e.0.contains("secret"));
    let mut deep = json!({"a": 1});
    for _ in 0..40 {
        deep = json!({"$not": deep});
    }
    assert!(filter::parse(&deep).is_err());
}

#[test]
fn filter_meaning() {
    let doc = json!({"n": 5, "s": "beta", "tags": ["x", "y"], "o": {"p": 1.0}, "z": null});
    let yes = [json!({"n": 5.0}), json!({"n": {"$gt": 4, "$lte": 5}}), json!({"s": {"$gt": "alpha"}}), json!({"tags": {"$contains": "x"}}),
               json!({"s": {"$contains": "et"}}), json!({"o.p": 1}), json!({"z": {"$exists": true}}), json!({"q": {"$exists": false}}),
               json!({"n": {"$in": [1, 5]}}), json!({"n": {"$nin": [1]}}), json!({"q": {"$ne": 1}}),
               json!({"$or": [{"n": 1}, {"s": "beta"}]}), json!({"$not": {"n": 1}}), json!({})];
    let no = [json!({"n": "5"}), json!({"n": {"$gt": 5}}), json!({"s": {"$lt": "B"}}), json!({"tags": {"$contains": "q"}}),
              json!({"n": {"$in": []}}), json!({"$or": []}), json!({"q": 1}), json!({"q": {"$gt": 0}})];
    for f in yes {
        assert!(filter::holds(&filter::parse(&f).unwrap(), &doc), "{f}");
    }
    for f in no {
        assert!(!filter::holds(&filter::parse(&f).unwrap(), &doc), "{f}");
    }
}

#[test]
fn bad_plans_are_refused() {
    for bad in [json!({}), json!({"relation": ["a"], "columns": {}}),
                observations(json!({"k": 0})), observations(json!({"conditions": [{"drop": "x"}]})),
                json!({"relation": ["a", "b"], "columns": {"id": "id", "content": "c"}, "vector": "[1]", "vector_schema": "p"})] {
        assert!(Plan::from_json(&bad).is_err(), "{bad}");
    }
}

fn label() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z]{1,8}".prop_map(String::from),
        any::<String>().prop_filter("a label", |s| !s.is_empty() && !s.contains('.') && !s.starts_with('$') && !s.contains('\0')),
    ]
}

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![any::<i32>().prop_map(Value::from), any::<String>().prop_map(Value::from)]
}

/// A filter tree of one shape (`shape` picks the operators) with arbitrary labels and values.
fn tree(depth: u32) -> impl Strategy<Value = (Value, String)> {
    let leaf = (label(), scalar(), 0usize..6).prop_map(|(l, v, op)| {
        let (f, kind) = match op {
            0 => (json!({ l.clone(): v.clone() }), "eq"),
            1 => (json!({ l.clone(): {"$ne": v.clone()} }), "ne"),
            2 => (json!({ l.clone(): {"$in": [v.clone()]} }), "in"),
            3 => (json!({ l.clone(): {"$exists": true} }), "exists"),
            4 => (json!({ l.clone(): {"$contains": v.clone()} }), "contains"),
            _ => (json!({ l.clone(): {"$gte": v.clone()} }), if v.is_number() { "gte-n" } else { "gte-s" }),
        };
        (f, kind.to_string())
    });
    leaf.prop_recursive(depth, 16, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 1..3).prop_map(|v| {
                let kinds: Vec<String> = v.iter().map(|x| x.1.clone()).collect();
                (json!({"$and": v.into_iter().map(|x| x.0).collect::<Vec<_>>()}), format!("and({})", kinds.join(",")))
            }),
            prop::collection::vec(inner.clone(), 1..3).prop_map(|v| {
                let kinds: Vec<String> = v.iter().map(|x| x.1.clone()).collect();
                (json!({"$or": v.into_iter().map(|x| x.0).collect::<Vec<_>>()}), format!("or({})", kinds.join(",")))
            }),
            inner.prop_map(|x| (json!({"$not": x.0}), format!("not({})", x.1))),
        ]
    })
}

/// The same tree with its labels and values replaced (operators kept).
fn relabel(v: &Value, n: &mut u32) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, x)| {
                    if k.starts_with('$') {
                        (k.clone(), relabel(x, n))
                    } else {
                        // (The same shape: a field of one label that cannot be an array's index
                        // is read by `->`, any other by `#>`.)
                        *n += 1;
                        let label = match k.split('.').count() {
                            1 if super::render::never_an_index(k) => format!("f{n}"),
                            1 => format!("{n}"),
                            _ => format!("f{n}.g"),
                        };
                        (label, relabel(x, n))
                    }
                })
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(|x| relabel(x, n)).collect()),
        Value::Number(_) => Value::from(7),
        Value::String(_) => Value::from("v"),
        other => other.clone(),
    }
}

proptest! {
    /// Filter labels and values never change the statement (beyond whether a field of one label
    /// can be an array's index): they are parameters, and no value appears in the text.
    #[test]
    fn filter_values_are_never_spliced((f, _kind) in tree(3), org in any::<String>(), q in "[a-z ]{1,20}") {
        let with = |f: Value, org: &str| {
            render(&plan(observations(json!({"query": q.clone(),
                "conditions": [{"eq": ["org_id", org]}, {"filter": ["metadata", f]}]}))))
        };
        let a = with(f.clone(), &org);
        let mut n = 0;
        let b = with(relabel(&f, &mut n), "other");
        prop_assert_eq!(&a.sql, &b.sql);
        prop_assert_eq!(a.params.len(), b.params.len());
        prop_assert_eq!(&a.types, &b.types, "the parameters' types are the shape's");
        prop_assert!(!a.sql.contains('\0'));
        casts_match_types(&a.sql, &a.types, a.params.len(), true);
    }

    /// Identifiers change only the quoted names: the statement's skeleton is the same, and a
    /// name never closes its quotes.
    #[test]
    fn identifiers_never_change_the_shape(names in prop::collection::vec(any::<String>().prop_filter("a name", |s| !s.is_empty() && !s.contains('\0')), 6),
                                          vector in any::<bool>(), query in any::<bool>()) {
        let mk = |n: &[String]| {
            let mut p = json!({
                "relation": [n[0].clone(), n[1].clone()],
                "columns": {"id": n[2].clone(), "content": n[3].clone(), "embedding": n[4].clone(), "tier": n[5].clone()},
                "conditions": [{"eq": [n[5].clone(), "acme"]}, {"tier_in": [["public"], "acme"]}], "k": 3});
            if vector { p["vector"] = json!("[1,2]"); p["vector_schema"] = json!(n[0].clone()); }
            if query { p["query"] = json!("pay"); }
            render(&plan(p))
        };
        let plain: Vec<String> = (0..6).map(|i| format!("n{i}")).collect();
        prop_assert_eq!(skeleton(&mk(&names).sql), skeleton(&mk(&plain).sql));
    }
}

#[test]
fn point_in_time_reads_the_revision_valid_then() {
    let at = "2026-03-03T00:00:00Z";
    let h = json!({"history": {"relation": ["memory", "revisions"], "at": at}, "query": "pay by card"});
    let s = render(&plan(observations(h)));
    // The time is one bind parameter, never spliced; the revision covering it replaces content,
    // tier, words and metadata, and every read goes through them.
    assert_eq!(s.params.first(), Some(&Some(at.to_string())));
    assert!(!s.sql.contains("2026-03-03"));
    // The rows no revision covers: the covered ids of the plan's org read once, sorted, and
    // searched per row (the org a bind parameter too).
    assert!(
        s.sql.contains("WHERE NOT memory_internal._sorted_uuids_hold((SELECT pg_catalog.array_agg(r.memory_id ORDER BY r.memory_id) FROM \"memory\".\"revisions\" r WHERE r.org_id OPERATOR(pg_catalog.=) $"),
        "{}",
        s.sql
    );
    assert!(s.sql.contains("::pg_catalog.timestamptz)), s.\"id\")"), "{}", s.sql);
    assert!(s.sql.contains("UNION ALL SELECT s.*, r.content AS \"memory_as_of_content\""), "{}", s.sql);
    assert!(s.sql.contains("JOIN \"memory\".\"revisions\" r ON r.org_id"), "{}", s.sql);
    // The time is cast once per execution (an InitPlan), not parsed again for each row compared.
    assert!(s.sql.contains("r.valid_from OPERATOR(pg_catalog.<=) (SELECT $1::pg_catalog.timestamptz) AND r.valid_to OPERATOR(pg_catalog.>) (SELECT $1::pg_catalog.timestamptz)"));
    assert_eq!(s.sql.matches("$1::pg_catalog.timestamptz").count(), s.sql.matches("(SELECT $1::pg_catalog.timestamptz)").count(), "{}", s.sql);
    assert!(s.sql.contains("t.\"memory_as_of_words\" OPERATOR(pg_catalog.@@)"));
    assert!(s.sql.contains("t.\"memory_as_of_tier\"::pg_catalog.text OPERATOR(pg_catalog.=) ANY"), "clearance is the revision's tier");
    assert!(s.sql.contains("t.\"memory_as_of_content\"::pg_catalog.text AS content"));
    assert!(s.sql.contains("t.\"memory_as_of_metadata\" AS metadata"));
    assert!(!s.sql.contains("t.\"content_tsv\""), "the row's own words are read only through the revision's choice");
    // The same with a vector, and in one pass.
    let hv = json!({"history": {"relation": ["memory", "revisions"], "at": at}, "vector": "[1,0,0]", "vector_schema": "public"});
    let v = render(&plan(observations(hv.clone())));
    assert!(v.sql.matches("UNION ALL").count() >= 3, "every read of the source is as of the time");
    let one = render_one_pass(&plan(observations(hv)), 100).unwrap();
    assert!(one.candidates.contains("UNION ALL") && one.rows.contains("UNION ALL") && one.rows_typed.contains("UNION ALL"));
    assert_eq!(one.params.first(), Some(&Some(at.to_string())));
}

#[test]
fn history_needs_a_relation_and_a_time() {
    for bad in [json!({"history": {"at": "2026-01-01"}}), json!({"history": {"relation": ["memory", "revisions"]}}), json!({"history": 3})] {
        assert!(Plan::from_json(&observations(bad)).is_err());
    }
}

proptest! {
    #[test]
    fn the_time_never_changes_the_statement(at in "\\PC{1,40}") {
        let a = render(&plan(observations(json!({"history": {"relation": ["memory", "revisions"], "at": "2026-01-01"}, "query": "x"}))));
        let b = render(&plan(observations(json!({"history": {"relation": ["memory", "revisions"], "at": at.clone()}, "query": "x"}))));
        prop_assert_eq!(skeleton(&a.sql), skeleton(&b.sql));
        prop_assert_eq!(&b.params[0], &Some(at));
    }
}
