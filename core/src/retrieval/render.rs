//! A plan rendered to one SQL statement. Every identifier goes through `quote_ident`; every value
//! (the org, the query, the vector, filter values and paths, the tier labels, k, offset) is a
//! bind parameter `$n` of the type it is read as (`ParamType`: the statement declares it, the
//! caller binds a value of it; a cast where it is read is then none), so that a generic plan
//! evaluates no input function per row (a `$n::jsonb` of a text parameter parses the text again
//! for every row the filter reads). The query vector, of a type without a fixed OID, is text,
//! cast once in a sub-select. The statement's text and its parameters' types depend on the
//! plan's shape only (a filter's field of one label that cannot be an array's index is a shape
//! of its own: read by `->`, or by containment when compared for equality with a scalar), so
//! PostgreSQL keeps one plan per shape.
//!
//! The statement returns one jsonb array (as text) of rows, best first, each row
//! `[id, content, tier, weight, score, created_at, user_id, session_id, memory_type,
//! lexical_rank, vector_rank, metadata]`:
//! - no query and no vector: the newest first (ties first when the plan has them), no score;
//! - a query alone: by coverage of the query's words, then ts_rank_cd × weight (`words`);
//! - a vector: the lexical list (`depth` long) and the vector list (`Plan::vector_len` long:
//!   `vector_depth`, else `k + offset`; the HNSW index's order, and an exact pass when the index
//!   scan comes back short, so rows other tenants store never push a tenant's nearest out)
//!   fused by `fusion`'s rule × weight; the page is `k` from `offset` of the fused list.

use super::filter::{Filter, Op};
use super::plan::{Columns, Condition, History, Plan, Tier};
use super::words::Match;
use crate::fusion;

/// An identifier as SQL reads it: always double-quoted, a double quote doubled.
pub fn quote_ident(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

/// An item namespace as its prefix index holds it (SPEC §16): each label followed by '.'. Labels
/// hold no '.', so the path of a prefix starts the path of exactly the namespaces under it
/// (`users.u1.` starts `users.u1.x.`, never `users.u10.`). memory_internal._item_ns_path.
pub fn namespace_path<'a>(labels: impl IntoIterator<Item = &'a str>) -> String {
    labels.into_iter().map(|l| format!("{l}.")).collect()
}

/// The end of the paths under a prefix's path (`namespace_path`, non-empty: it ends with '.'):
/// its final '.' replaced by '/', the next byte. In byte order (collation "C"), a path is at or
/// after the prefix's and before this exactly when it starts with the prefix's path.
pub fn namespace_path_end(path: &str) -> String {
    format!("{}/", path.strip_suffix('.').unwrap_or(path))
}

/// A text array's literal (`{"a","b"}`), bound as one text parameter and cast to `text[]`.
pub fn text_array_literal(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))).collect();
    format!("{{{}}}", quoted.join(","))
}

/// The type a parameter is declared and bound as. Its value is the type's text form (what the
/// type's input function reads, as a cast from text would): the caller converts it once a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ParamType {
    Text,
    /// `text[]`, an array literal (`text_array_literal`).
    TextArray,
    Jsonb,
    Numeric,
    Int8,
    Timestamptz,
}

/// A rendered statement: its text and its parameters, in order (None: NULL), with their types.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Statement {
    pub sql: String,
    pub params: Vec<Option<String>>,
    pub types: Vec<ParamType>,
}

struct Binds {
    params: Vec<Option<String>>,
    types: Vec<ParamType>,
}

impl Binds {
    fn new() -> Binds {
        Binds { params: Vec::new(), types: Vec::new() }
    }

    /// A text parameter.
    fn bind(&mut self, v: Option<String>) -> String {
        self.typed(v, ParamType::Text)
    }

    /// A parameter of type `t`.
    fn typed(&mut self, v: Option<String>, t: ParamType) -> String {
        self.params.push(v);
        self.types.push(t);
        format!("${}", self.params.len())
    }
}

fn col(c: &str) -> String {
    format!("t.{}", quote_ident(c))
}

fn opt_col(c: &Option<String>, null_type: &str, cast: &str) -> String {
    match c {
        Some(c) => format!("{}{}", col(c), cast),
        None => format!("NULL::{null_type}"),
    }
}

const CFG: &str = "'english'::pg_catalog.regconfig";

/// The expressions of a query's words, each computed once (sub-selects on the parameter).
struct Words {
    /// The row's words (tsvector).
    w: String,
    /// The tsquery a row must match, and the one of every word (websearch syntax).
    matches: String,
    all: String,
    /// How many of the query's lexemes the row has, and how many it has (any-word reads).
    m: String,
    n: String,
    /// The row's relevance (float4): ts_rank_cd against every word when it has them all, else
    /// against any.
    rank: String,
    any: bool,
    /// The query's parameter and how its words match.
    q: String,
    how: Match,
}

fn words(cols: &Columns, q: &str, how: Match) -> Words {
    let w = match &cols.words {
        Some(c) => col(c),
        None => format!("pg_catalog.to_tsvector({CFG}, {}::pg_catalog.text)", col(&cols.content)),
    };
    words_over(w, q, how)
}

/// The expressions of the query's words over the row's words `w` (an expression or a column of
/// a sub-select).
fn words_over(w: String, q: &str, how: Match) -> Words {
    let all = format!("(SELECT pg_catalog.websearch_to_tsquery({CFG}, {q}::pg_catalog.text))");
    match how {
        Match::Websearch => Words {
            matches: all.clone(),
            all: all.clone(),
            m: "1".into(),
            n: "1".into(),
            rank: format!("pg_catalog.ts_rank_cd({w}, {all})"),
            w,
            any: false,
            q: q.to_owned(),
            how,
        },
        Match::AnyWord => {
            let any = format!(
                "(SELECT pg_catalog.replace(pg_catalog.plainto_tsquery({CFG}, {q}::pg_catalog.text)::pg_catalog.text, ' & ', ' | ')::pg_catalog.tsquery)"
            );
            let lex = format!("(SELECT pg_catalog.tsvector_to_array(pg_catalog.to_tsvector({CFG}, {q}::pg_catalog.text)))");
            let m = format!("(pg_catalog.length({w}) OPERATOR(pg_catalog.-) pg_catalog.length(pg_catalog.ts_delete({w}, {lex})))");
            let n = format!("pg_catalog.cardinality({lex})");
            Words {
                rank: format!(
                    "CASE WHEN {m} OPERATOR(pg_catalog.>=) {n} THEN pg_catalog.ts_rank_cd({w}, {all}) ELSE pg_catalog.ts_rank_cd({w}, {any}) END"
                ),
                matches: any,
                all,
                w,
                m,
                n,
                any: true,
                q: q.to_owned(),
                how,
            }
        }
    }
}

impl Words {
    /// The relevance (as `rank`) with the coverage read from `m` (a column computed once a row).
    fn rank_with(&self, m: &str) -> String {
        if self.any {
            format!(
                "CASE WHEN {m} OPERATOR(pg_catalog.>=) {n} THEN pg_catalog.ts_rank_cd({w}, {all}) ELSE pg_catalog.ts_rank_cd({w}, {any}) END",
                n = self.n,
                w = self.w,
                all = self.all,
                any = self.matches
            )
        } else {
            self.rank.clone()
        }
    }

    /// The full-text score × weight: ts_rank_cd for a row with every word (as before any-word
    /// matching), scaled by its coverage otherwise.
    fn score(&self, weight: &str) -> String {
        if self.any {
            format!(
                "(CASE WHEN {m} OPERATOR(pg_catalog.>=) {n} THEN pg_catalog.ts_rank_cd({w}, {all_q})::pg_catalog.float8 \
                 ELSE pg_catalog.ts_rank_cd({w}, {any})::pg_catalog.float8 OPERATOR(pg_catalog.*) {m}::pg_catalog.float8 \
                 OPERATOR(pg_catalog./) GREATEST({n}, 1)::pg_catalog.float8 END OPERATOR(pg_catalog.*) {weight})",
                m = self.m,
                n = self.n,
                w = self.w,
                all_q = self.all,
                any = self.matches,
            )
        } else {
            format!("({}::pg_catalog.float8 OPERATOR(pg_catalog.*) {weight})", self.rank)
        }
    }
}

fn tier_expr(plan: &Plan, org: &mut Option<String>, b: &mut Binds) -> String {
    match &plan.tier {
        Tier::None => "NULL::pg_catalog.text".into(),
        Tier::Column(c) => format!("{}::pg_catalog.text", col(c)),
        Tier::Json(c) => format!("({} OPERATOR(pg_catalog.->>) 'classification')", col(c)),
        Tier::Claim => {
            let o = match org {
                Some(p) => p.clone(),
                None => {
                    let p = b.bind(None);
                    *org = Some(p.clone());
                    p
                }
            };
            format!(
                "memory_internal._claim_tier({}, {}, {}, {o}::pg_catalog.text)::pg_catalog.text",
                col("claim_text"),
                col("subject_id"),
                col("pii_fields")
            )
        }
    }
}

/// Whether jsonb's path operators (`#>`, `#>>`) can never read `label` as an array's index: an
/// index is what `strtol` reads, i.e. optional white space, an optional sign, then digits; a
/// label starting with an ASCII letter or '_' is none. For such a label, `x #> '{label}'` is
/// `x -> 'label'` whatever `x` holds (an object's member; NULL for an array or a scalar).
pub fn never_an_index(label: &str) -> bool {
    label.bytes().next().is_some_and(|c| c.is_ascii_alphabetic() || c == b'_')
}

fn filter_sql(x: &str, f: &Filter, b: &mut Binds) -> String {
    match f {
        Filter::And(parts) if parts.is_empty() => "true".into(),
        Filter::Or(parts) if parts.is_empty() => "false".into(),
        Filter::And(parts) => format!("({})", parts.iter().map(|p| filter_sql(x, p, b)).collect::<Vec<_>>().join(" AND ")),
        Filter::Or(parts) => format!("({})", parts.iter().map(|p| filter_sql(x, p, b)).collect::<Vec<_>>().join(" OR ")),
        Filter::Not(p) => format!("(NOT {})", filter_sql(x, p, b)),
        Filter::Field { path, op } => {
            // A one-key field equal to a scalar: `x @> {"key": scalar}` (one jsonb parameter),
            // true exactly when x is an object whose member `key` is that scalar (containment
            // compares scalars as equality does: numbers numerically, strings bytewise; an array
            // or an object member contains a scalar only at a document's top level), as
            // `x -> 'key' = scalar`, without copying the member out and comparing containers on
            // every row. NULL x: false, as the equality's coalesce.
            if let (Op::Eq(val) | Op::Ne(val), [key]) = (op, path.as_slice()) {
                if never_an_index(key) && !val.is_array() && !val.is_object() {
                    let doc = serde_json::Value::Object([(key.clone(), val.clone())].into_iter().collect());
                    let has = format!("coalesce({x} OPERATOR(pg_catalog.@>) {}::pg_catalog.jsonb, false)", b.typed(Some(doc.to_string()), ParamType::Jsonb));
                    return if matches!(op, Op::Eq(_)) { has } else { format!("(NOT {has})") };
                }
            }
            let v = match path.as_slice() {
                // One key that cannot be an array's index: `->`, the same value as `#>` of the
                // one-label path (which reads a label as an index in an array, where `->` finds
                // nothing), without the path array's deconstruction on every row.
                [key] if never_an_index(key) => format!("({x} OPERATOR(pg_catalog.->) {}::pg_catalog.text)", b.bind(Some(key.clone()))),
                _ => {
                    let p = b.typed(Some(text_array_literal(path)), ParamType::TextArray);
                    format!("({x} OPERATOR(pg_catalog.#>) {p}::pg_catalog.text[])")
                }
            };
            let jv = |b: &mut Binds, val: &serde_json::Value| format!("{}::pg_catalog.jsonb", b.typed(Some(val.to_string()), ParamType::Jsonb));
            match op {
                Op::Eq(val) => format!("coalesce({v} OPERATOR(pg_catalog.=) {}, false)", jv(b, val)),
                Op::Ne(val) => format!("(NOT coalesce({v} OPERATOR(pg_catalog.=) {}, false))", jv(b, val)),
                Op::Cmp(c, val) => {
                    let o = c.sql();
                    match val {
                        serde_json::Value::Number(_) => format!(
                            "coalesce(CASE WHEN pg_catalog.jsonb_typeof({v}) OPERATOR(pg_catalog.=) 'number' \
                             THEN {v}::pg_catalog.numeric OPERATOR(pg_catalog.{o}) {}::pg_catalog.numeric END, false)",
                            b.typed(Some(val.to_string()), ParamType::Numeric)
                        ),
                        _ => format!(
                            "coalesce(CASE WHEN pg_catalog.jsonb_typeof({v}) OPERATOR(pg_catalog.=) 'string' \
                             THEN ({v} OPERATOR(pg_catalog.#>>) '{{}}'::pg_catalog.text[]) COLLATE pg_catalog.\"C\" \
                             OPERATOR(pg_catalog.{o}) {}::pg_catalog.text COLLATE pg_catalog.\"C\" END, false)",
                            b.bind(Some(val.as_str().unwrap_or_default().to_owned()))
                        ),
                    }
                }
                Op::In(vals) | Op::Nin(vals) => {
                    let set = b.typed(Some(serde_json::Value::Array(vals.clone()).to_string()), ParamType::Jsonb);
                    let any = format!(
                        "coalesce({v} OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT pg_catalog.jsonb_array_elements({set}::pg_catalog.jsonb))), false)"
                    );
                    if matches!(op, Op::In(_)) { any } else { format!("(NOT {any})") }
                }
                Op::Exists(true) => format!("({v} IS NOT NULL)"),
                Op::Exists(false) => format!("({v} IS NULL)"),
                Op::Contains(val) => {
                    let s = jv(b, val);
                    format!(
                        "coalesce(CASE pg_catalog.jsonb_typeof({v}) \
                         WHEN 'array' THEN {v} OPERATOR(pg_catalog.@>) pg_catalog.jsonb_build_array({s}) \
                         WHEN 'string' THEN pg_catalog.jsonb_typeof({s}) OPERATOR(pg_catalog.=) 'string' \
                         AND pg_catalog.strpos({v} OPERATOR(pg_catalog.#>>) '{{}}'::pg_catalog.text[], {s} OPERATOR(pg_catalog.#>>) '{{}}'::pg_catalog.text[]) \
                         OPERATOR(pg_catalog.>) 0 END, false)"
                    )
                }
            }
        }
    }
}

/// The plan's conditions on `t`, joined by AND (`true` when there are none).
fn conditions(plan: &Plan, org: &mut Option<String>, b: &mut Binds) -> String {
    let mut out = Vec::with_capacity(plan.conditions.len());
    for c in &plan.conditions {
        out.push(match c {
            Condition::Eq { col: c, value, typ: None } => {
                let p = b.bind(Some(value.clone()));
                if org.is_none() && c == &plan_org_col(plan) {
                    *org = Some(p.clone());
                }
                format!("{}::pg_catalog.text OPERATOR(pg_catalog.=) {p}", col(c))
            }
            Condition::Eq { col: c, value, typ: Some((s, t)) } => {
                format!("{} OPERATOR(pg_catalog.=) {}::{}.{}", col(c), b.bind(Some(value.clone())), quote_ident(s), quote_ident(t))
            }
            Condition::NullOrEq { col: c, value } => {
                format!("({0} IS NULL OR {0}::pg_catalog.text OPERATOR(pg_catalog.=) {1})", col(c), b.bind(value.clone()))
            }
            Condition::Active { col: c, typ: (s, t) } => {
                format!("{} OPERATOR(pg_catalog.=) 'active'::{}.{}", col(c), quote_ident(s), quote_ident(t))
            }
            Condition::IsNull { col: c } => format!("{} IS NULL", col(c)),
            Condition::IsNotNull { col: c } => format!("{} IS NOT NULL", col(c)),
            Condition::Prefix { col: c, labels, path } => {
                match path {
                    Some((s, f)) if !labels.is_empty() => {
                        // The paths starting with the prefix's, as a range (`namespace_path_end`):
                        // an index condition in a generic plan too (`^@` is one only for a
                        // constant), so the statement's kept plan is not made again every call.
                        let start = namespace_path(labels.iter().map(String::as_str));
                        let end = namespace_path_end(&start);
                        let e = format!("{}.{}({}) COLLATE \"C\"", quote_ident(s), quote_ident(f), col(c));
                        // The range alone: the column's labels hold no '.' either (the path
                        // function's contract, `Condition::Prefix`), so a path in it is a
                        // namespace starting with these labels, and comparing the labels too
                        // would only do it again on every row the index range reads.
                        let (q, u) = (b.bind(Some(start)), b.bind(Some(end)));
                        format!("({e} OPERATOR(pg_catalog.>=) {q}::pg_catalog.text AND {e} OPERATOR(pg_catalog.<) {u}::pg_catalog.text)")
                    }
                    _ => {
                        let p = b.typed(Some(text_array_literal(labels)), ParamType::TextArray);
                        format!(
                            "{0}[1:pg_catalog.cardinality({p}::pg_catalog.text[])] OPERATOR(pg_catalog.=) {p}::pg_catalog.text[]",
                            col(c)
                        )
                    }
                }
            }
            Condition::NullOrAfter { col: c, at } => {
                let at = match at {
                    None => "pg_catalog.now()".to_owned(),
                    Some(v) => format!("{}::pg_catalog.timestamptz", b.typed(Some(v.clone()), ParamType::Timestamptz)),
                };
                format!("({0} IS NULL OR {0} OPERATOR(pg_catalog.>) {at})", col(c))
            }
            Condition::AtOrAfter { col: c, at } => format!("{} OPERATOR(pg_catalog.>=) {}::pg_catalog.timestamptz", col(c), b.typed(Some(at.clone()), ParamType::Timestamptz)),
            Condition::Before { col: c, at } => format!("{} OPERATOR(pg_catalog.<) {}::pg_catalog.timestamptz", col(c), b.typed(Some(at.clone()), ParamType::Timestamptz)),
            Condition::AtOrBefore { col: c, at } => {
                format!("{} OPERATOR(pg_catalog.<=) {}::pg_catalog.timestamptz", col(c), b.typed(Some(at.clone()), ParamType::Timestamptz))
            }
            Condition::TierIn { labels, org: o } => {
                if org.is_none() {
                    *org = Some(b.bind(Some(o.clone())));
                }
                let t = tier_expr(plan, org, b);
                // (An expression around the sub-select: `= ANY ((SELECT ...))` would read as ANY
                // over a sub-query. The array is parsed once.)
                format!("{t} OPERATOR(pg_catalog.=) ANY (coalesce((SELECT {}::pg_catalog.text[])))", b.typed(Some(text_array_literal(labels)), ParamType::TextArray))
            }
            Condition::Contains { col: c, doc } => format!("{} OPERATOR(pg_catalog.@>) {}::pg_catalog.jsonb", col(c), b.typed(Some(doc.clone()), ParamType::Jsonb)),
            Condition::Filter { col: c, filter } => filter_sql(&col(c), filter, b),
        });
    }
    if out.is_empty() { "true".into() } else { out.join(" AND ") }
}

/// The first equality condition's column: the tenant's (the plan's first condition, by the
/// callers' convention), reused by the claim tier expression.
fn plan_org_col(plan: &Plan) -> String {
    match plan.conditions.first() {
        Some(Condition::Eq { col, .. }) => col.clone(),
        _ => String::new(),
    }
}

fn relation(plan: &Plan) -> String {
    format!("{}.{}", quote_ident(&plan.relation.0), quote_ident(&plan.relation.1))
}

/// The result row's columns on `t` (id, content, tier, weight, created_at, user_id, session_id,
/// memory_type, metadata), as select items.
fn row_items(plan: &Plan, tier: &str, weight: &str) -> Vec<String> {
    let c = &plan.columns;
    vec![
        format!("{} AS id", col(&c.id)),
        format!("{}::pg_catalog.text AS content", col(&c.content)),
        format!("{tier} AS tier"),
        format!("{weight} AS weight"),
        format!("{} AS created_at", opt_col(&c.created_at, "pg_catalog.timestamptz", "")),
        format!("{} AS user_id", opt_col(&c.user, "pg_catalog.text", "::pg_catalog.text")),
        format!("{} AS session_id", opt_col(&c.session, "pg_catalog.text", "::pg_catalog.text")),
        format!("{} AS memory_type", opt_col(&c.memory_type, "pg_catalog.text", "::pg_catalog.text")),
        format!("{} AS metadata", opt_col(&c.metadata, "pg_catalog.jsonb", "")),
    ]
}

fn weight_expr(plan: &Plan) -> String {
    opt_col(&plan.columns.weight, "pg_catalog.float8", "").replace("NULL::pg_catalog.float8", "1.0::pg_catalog.float8")
}

/// The rows as one jsonb array in `order` (select items of the sub-select `x`).
fn agg(order: &str) -> String {
    let order_x: Vec<String> = order.split(", ").map(|t| format!("x.{t}")).collect();
    format!(
        "SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_array(x.id, x.content, x.tier, x.weight, x.score, \
         x.created_at, x.user_id, x.session_id, x.memory_type, x.lexical_rank, x.vector_rank, x.metadata) ORDER BY {}), '[]')::pg_catalog.text FROM (",
        order_x.join(", ")
    )
}

/// The names a point-in-time read gives the row's content, tier, words and metadata as they were.
const AS_OF_CONTENT: &str = "memory_as_of_content";
const AS_OF_TIER: &str = "memory_as_of_tier";
const AS_OF_WORDS: &str = "memory_as_of_words";
const AS_OF_METADATA: &str = "memory_as_of_metadata";

/// A point-in-time read (`plan.history`): the source as a derived table whose rows carry, beside
/// their own columns, the content, tier, words and metadata of the revision valid at the time
/// (else their own), and the plan reading those. The time is bound once.
fn as_of(plan: &Plan, h: &History, b: &mut Binds) -> (Plan, String) {
    let at = format!("(SELECT {}::pg_catalog.timestamptz)", b.typed(Some(h.at.clone()), ParamType::Timestamptz));
    let s = |c: &str| format!("s.{}", quote_ident(c));
    let org = plan_org_col(plan);
    let c = &plan.columns;
    let mine_words = match &c.words {
        Some(w) => s(w),
        None => format!("pg_catalog.to_tsvector({CFG}, {}::pg_catalog.text)", s(&c.content)),
    };
    // Two arms, so that each keeps its indexes: the rows no revision covers at the time (their own
    // words, through the source's full-text and vector indexes), and the rows a revision covers
    // (found from the revisions valid then). Conditions on `t` reach both arms.
    let revs = format!("{}.{}", quote_ident(&h.relation.0), quote_ident(&h.relation.1));
    let covers = format!(
        "r.org_id OPERATOR(pg_catalog.=) {o} AND r.memory_id OPERATOR(pg_catalog.=) {id} \
         AND r.valid_from OPERATOR(pg_catalog.<=) {at} AND r.valid_to OPERATOR(pg_catalog.>) {at}",
        o = s(&org),
        id = s(&c.id),
    );
    let (mine_tier, their_tier) = match &plan.tier {
        Tier::Column(t) => (format!("{}::pg_catalog.text", s(t)), "r.classification::pg_catalog.text".to_owned()),
        Tier::Json(t) => (format!("({} OPERATOR(pg_catalog.->>) 'classification')", s(t)), "r.classification::pg_catalog.text".to_owned()),
        Tier::None | Tier::Claim => ("NULL::pg_catalog.text".to_owned(), "NULL::pg_catalog.text".to_owned()),
    };
    let (mine_meta, their_meta) = match &c.metadata {
        Some(m) => (format!(", {} AS {}", s(m), quote_ident(AS_OF_METADATA)), format!(", r.metadata AS {}", quote_ident(AS_OF_METADATA))),
        None => (String::new(), String::new()),
    };
    // The rows no revision covers: with the plan's org, the ids the revisions valid then cover,
    // sorted, read once (an InitPlan) and searched per row (memory_internal._sorted_uuids_hold,
    // a binary search), instead of a probe of the revisions' index for every row the words
    // match (at 10,000 memories, 6,000 probes were most of what as_of cost over recall).
    let org_value = plan.conditions.iter().find_map(|c| match c {
        Condition::Eq { col, value, typ: None } if *col == org => Some(value.clone()),
        _ => None,
    });
    let uncovered = match org_value {
        Some(v) => format!(
            "NOT memory_internal._sorted_uuids_hold((SELECT pg_catalog.array_agg(r.memory_id ORDER BY r.memory_id) FROM {revs} r \
              WHERE r.org_id OPERATOR(pg_catalog.=) {o}::pg_catalog.text AND r.valid_from OPERATOR(pg_catalog.<=) {at} \
                AND r.valid_to OPERATOR(pg_catalog.>) {at}), {id})",
            o = b.bind(Some(v)),
            id = s(&c.id),
        ),
        None => format!("NOT EXISTS (SELECT 1 FROM {revs} r WHERE {covers})"),
    };
    let rel = format!(
        "(SELECT s.*, {mine_content} AS {ac}, {mine_tier} AS {at_}, {mine_words} AS {aw}{mine_meta} FROM {src} s \
          WHERE {uncovered} \
         UNION ALL \
         SELECT s.*, r.content AS {ac}, {their_tier} AS {at_}, r.content_tsv AS {aw}{their_meta} \
          FROM {src} s JOIN {revs} r ON {covers})",
        mine_content = format!("{}::pg_catalog.text", s(&c.content)),
        ac = quote_ident(AS_OF_CONTENT),
        at_ = quote_ident(AS_OF_TIER),
        aw = quote_ident(AS_OF_WORDS),
        src = relation(plan),
    );
    let mut p = plan.clone();
    p.history = None;
    p.columns.content = AS_OF_CONTENT.into();
    p.columns.words = Some(AS_OF_WORDS.into());
    if c.metadata.is_some() {
        p.columns.metadata = Some(AS_OF_METADATA.into());
    }
    if matches!(plan.tier, Tier::Column(_) | Tier::Json(_)) {
        p.tier = Tier::Column(AS_OF_TIER.into());
    }
    (p, rel)
}

/// Renders the plan to one statement (see the module's documentation).
pub fn render(plan: &Plan) -> Statement {
    let mut b = Binds::new();
    let owned;
    let (plan, rel) = match &plan.history {
        Some(h) => {
            let (p, rel) = as_of(plan, h, &mut b);
            owned = p;
            (&owned, rel)
        }
        None => (plan, relation(plan)),
    };
    let mut org: Option<String> = None;
    let conds = conditions(plan, &mut org, &mut b);
    let tier = tier_expr(plan, &mut org, &mut b);
    let weight = weight_expr(plan);
    let k = b.typed(Some(plan.k.to_string()), ParamType::Int8);
    let off = b.typed(Some(plan.offset.to_string()), ParamType::Int8);
    let ties: Vec<String> = plan.ties.iter().map(|t| col(t)).collect();
    let items = row_items(plan, &tier, &weight).join(", ");
    let words = plan.query.as_ref().map(|(q, how)| {
        let q = b.bind(Some(q.clone()));
        words(&plan.columns, &q, *how)
    });
    let tie_items: String = ties.iter().enumerate().map(|(i, t)| format!(", {t} AS tie{i}")).collect();
    let tie_order: String = (0..ties.len()).map(|i| format!("tie{i} DESC, ")).collect();

    let sql = match (&plan.vector, &words) {
        (None, None) => {
            let order = format!("{tie_order}created_at DESC NULLS LAST, id");
            format!(
                "{agg}SELECT {items}, NULL::pg_catalog.float8 AS score, NULL::pg_catalog.int4 AS lexical_rank, NULL::pg_catalog.int4 AS vector_rank{tie_items} \
                 FROM {rel} t WHERE {conds} ORDER BY {order} LIMIT {k}::pg_catalog.int8 OFFSET {off}::pg_catalog.int8) x",
                agg = agg(&order),
            )
        }
        (None, Some(w)) => {
            // The lexical rank: the row's place in this order (after offset).
            let order = format!("m DESC, score DESC NULLS LAST, {tie_order}id");
            let order_y: Vec<String> = order.split(", ").map(|t| format!("y.{t}")).collect();
            format!(
                "{agg}SELECT y.*, (pg_catalog.row_number() OVER (ORDER BY {order_y}))::pg_catalog.int4 OPERATOR(pg_catalog.+) {off}::pg_catalog.int4 AS lexical_rank \
                 FROM (SELECT {items}, {score} AS score, {m} AS m, NULL::pg_catalog.int4 AS vector_rank{tie_items} \
                 FROM {rel} t WHERE {conds} AND {words} OPERATOR(pg_catalog.@@) {matches} ORDER BY {order} \
                 LIMIT {k}::pg_catalog.int8 OFFSET {off}::pg_catalog.int8) y) x",
                agg = agg(&order),
                order_y = order_y.join(", "),
                score = w.score(&weight),
                m = w.m,
                words = w.w,
                matches = w.matches,
            )
        }
        (Some((v, vs)), _) => {
            let v = b.bind(Some(v.clone()));
            let depth = b.typed(Some(plan.depth.to_string()), ParamType::Int8);
            let vk = b.typed(Some(plan.vector_len().to_string()), ParamType::Int8);
            let emb = col(plan.columns.embedding.as_deref().expect("checked by Plan::from_json"));
            let vty = format!("{}.vector", quote_ident(vs));
            let id = col(&plan.columns.id);
            let tb = ties.first().cloned().unwrap_or_else(|| "NULL::pg_catalog.int4".into());
            let lex = match &words {
                None => format!("SELECT {id} AS id, NULL::pg_catalog.int8 AS r FROM {rel} t WHERE false"),
                Some(w) => {
                    // The row's words are computed once (`u`), their coverage of the query once
                    // (`s`), the relevance from both: a source without a words column (claims)
                    // parses its text once a row, not once per expression. (OFFSET 0: each
                    // level stays a sub-select the planner does not fold into the next.)
                    let (wu, ws) = (words_over("u.w".into(), &w.q, w.how), words_over("s.w".into(), &w.q, w.how));
                    format!(
                        "SELECT l.id, pg_catalog.row_number() OVER (ORDER BY l.m DESC, l.rel DESC, l.tb DESC, l.id) AS r \
                         FROM (SELECT s.id, s.m, {rank} AS rel, s.tb FROM (SELECT u.id, u.w, {m} AS m, u.tb \
                         FROM (SELECT {id} AS id, {words} AS w, {tb} AS tb FROM {rel} t \
                         WHERE {conds} AND {words} OPERATOR(pg_catalog.@@) {matches} OFFSET 0) u OFFSET 0) s \
                         ORDER BY 2 DESC, 3 DESC, 4 DESC, 1 LIMIT (SELECT {depth}::pg_catalog.int8)) l",
                        m = wu.m,
                        rank = ws.rank_with("s.m"),
                        words = w.w,
                        matches = w.matches,
                    )
                }
            };
            // The query vector is read once ((SELECT $n::vector), an InitPlan the HNSW index scan
            // takes as its order-by argument), and the lengths are (SELECT $n::int8): the plan's
            // estimates are then the same for every call, so PostgreSQL's plan cache keeps one
            // generic plan after its first five (as for a hand-written prepared statement with
            // literal lengths) instead of planning this statement again on every call; a generic
            // plan with `$n::vector` in ORDER BY would parse the vector's text on every row.
            let dist_once = format!("{emb} OPERATOR({}.<=>) (SELECT {v}::{vty})", quote_ident(vs));
            let (k, off) = (format!("(SELECT {k}::pg_catalog.int8)"), format!("(SELECT {off}::pg_catalog.int8)"));
            let vk_limit = format!("(SELECT {vk}::pg_catalog.int8)");
            let best = if ties.is_empty() { "best, " } else { "" };
            // The page (k rows from offset of the fused list, ordered by score × weight) is taken
            // before the rows' columns are read: content, tier (a claim's is classified) and
            // metadata for the page's rows only, not for every row of both lists. Both reads of
            // the source are under the plan's conditions.
            let order = format!("score DESC, {tie_order}{best}id");
            format!(
                "WITH lex AS MATERIALIZED ({lex}), \
                 vscan AS MATERIALIZED (SELECT {id} AS id, {dist_once} AS d, {tb} AS tb FROM {rel} t \
                   WHERE {conds} AND {emb} IS NOT NULL ORDER BY {dist_once} LIMIT {vk_limit}), \
                 vexact AS MATERIALIZED (SELECT {id} AS id, {dist_once} AS d, {tb} AS tb FROM {rel} t \
                   WHERE (SELECT pg_catalog.count(*) FROM vscan) OPERATOR(pg_catalog.<) {vk}::pg_catalog.int8 AND {conds} AND {emb} IS NOT NULL \
                   ORDER BY ({dist_once}) OPERATOR(pg_catalog.+) 0, 3 DESC, 1 LIMIT {vk_limit}), \
                 vec AS (SELECT v.id, pg_catalog.row_number() OVER (ORDER BY v.d, v.tb DESC, v.id) AS r \
                   FROM (SELECT * FROM vexact UNION ALL SELECT * FROM vscan WHERE NOT EXISTS (SELECT FROM vexact)) v), \
                 fused AS (SELECT coalesce(lex.id, vec.id) AS id, lex.r::pg_catalog.int4 AS lexical_rank, vec.r::pg_catalog.int4 AS vector_rank, \
                   {rrf} AS rrf FROM lex FULL JOIN vec ON lex.id OPERATOR(pg_catalog.=) vec.id), \
                 page AS MATERIALIZED (SELECT fused.id, fused.rrf OPERATOR(pg_catalog.*) {weight} AS score, fused.lexical_rank, fused.vector_rank{tie_items}, \
                   LEAST(coalesce(fused.lexical_rank, 2147483647), coalesce(fused.vector_rank, 2147483647)) AS best \
                   FROM fused JOIN {rel} t ON {id} OPERATOR(pg_catalog.=) fused.id WHERE {conds} \
                   ORDER BY {order} LIMIT {k} OFFSET {off}) \
                 {agg}SELECT {items}, page.score, page.lexical_rank, page.vector_rank{page_ties}, page.best \
                   FROM page JOIN {rel} t ON {id} OPERATOR(pg_catalog.=) page.id WHERE {conds}) x",
                rrf = fusion::rrf_sql("lex.r", "vec.r"),
                agg = agg(&order),
                page_ties = (0..ties.len()).map(|i| format!(", page.tie{i}")).collect::<String>(),
            )
        }
    };
    Statement { sql, params: b.params, types: b.types }
}

/// The one-pass read of a bounded candidate set (memory.observations filtered to a user's,
/// a session's or a task's rows): `candidates` gives `(id uuid, weight float8, distance float8,
/// words tsvector, coverage int4)` of every row under the conditions (at most `limit`): the words
/// and the coverage (how many of the query's lexemes the row has; 1 for a websearch query) of the
/// rows that match the query only, NULL for the others and without a query. The caller computes
/// the relevance, `ts_rank_cd(words, q)` as `render`'s statement does (`q`: the query's every
/// word, websearch_to_tsquery; for an any-word read of a row with fewer than all of its lexemes,
/// the any-word tsquery), of the rows of at least `fusion::coverage_cut`, and fuses the lists by
/// `fusion::fuse_lists`; `rows` gives the rows as `render`'s statement does (one jsonb array as
/// text) of the fused list, the parameter after `params`: a JSON array of objects `id`, `score`,
/// `lexical_rank`, `vector_rank`, `o` (the place), read again under the same conditions.
/// `types`: the parameters' types (`rows`' last, the fused list, is jsonb).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OnePass {
    pub candidates: String,
    pub rows: String,
    /// `rows` without the JSON: the same rows as columns (the row's items, then score,
    /// lexical_rank and vector_rank) in the fused list's order, for a caller that reads them typed.
    pub rows_typed: String,
    pub params: Vec<Option<String>>,
    /// How many of `params`, from the first, are the scope's (the time and the conditions): the
    /// rows `candidates` reads depend on those alone, not on the query's vector or words.
    pub scope_params: usize,
    pub types: Vec<ParamType>,
}

/// The one-pass statements of a plan with a vector (None without one).
pub fn render_one_pass(plan: &Plan, limit: usize) -> Option<OnePass> {
    let (v, vs) = plan.vector.as_ref()?;
    let mut b = Binds::new();
    let owned;
    let (plan, rel) = match &plan.history {
        Some(h) => {
            let (p, rel) = as_of(plan, h, &mut b);
            owned = p;
            (&owned, rel)
        }
        None => (plan, relation(plan)),
    };
    let mut org: Option<String> = None;
    let conds = conditions(plan, &mut org, &mut b);
    let tier = tier_expr(plan, &mut org, &mut b);
    let weight = weight_expr(plan);
    let scope_params = b.params.len();
    let v = b.bind(Some(v.clone()));
    let emb = col(plan.columns.embedding.as_deref().expect("checked by Plan::from_json"));
    // The row's words and how many of the query's lexemes they hold (NULL: the row does not
    // match), computed once a row; the words go out for the rows that match only. The relevance
    // (ts_rank_cd) is the caller's, for the rows that can be in the full-text list (see
    // `OnePass`): no second read of the rows for the list's cut, and no rank of a row below it.
    let (words_e, cov_e) = match &plan.query {
        None => ("NULL::pg_catalog.tsvector".to_owned(), "NULL::pg_catalog.int4".to_owned()),
        Some((q, how)) => {
            let q = b.bind(Some(q.clone()));
            let w = words(&plan.columns, &q, *how);
            let cov = format!("CASE WHEN {} OPERATOR(pg_catalog.@@) {} THEN ({})::pg_catalog.int4 END", w.w, w.matches, w.m);
            (w.w, cov)
        }
    };
    let fused = format!("${}", b.params.len() + 1);
    let items = row_items(plan, &tier, &weight).join(", ");
    let scan = format!(
        "SELECT {id} AS id, {weight} AS weight, {emb} OPERATOR({sch}.<=>) (SELECT {v}::{sch}.vector) AS d, {words_e} AS w, {cov_e} AS m \
         FROM {rel} t WHERE {conds} LIMIT {limit}",
        id = col(&plan.columns.id),
        sch = quote_ident(vs),
    );
    Some(OnePass {
        candidates: match plan.query {
            None => format!("SELECT s.id, s.weight, s.d, s.w, s.m FROM ({scan}) s"),
            Some(_) => format!("SELECT s.id, s.weight, s.d, CASE WHEN s.m IS NOT NULL THEN s.w END, s.m FROM ({scan}) s"),
        },
        rows: format!(
            "{agg}SELECT {items}, f.score, f.lexical_rank, f.vector_rank, f.o \
             FROM pg_catalog.jsonb_to_recordset({fused}::pg_catalog.jsonb) f(id pg_catalog.uuid, score pg_catalog.float8, \
             lexical_rank pg_catalog.int4, vector_rank pg_catalog.int4, o pg_catalog.int4) \
             JOIN {rel} t ON {id} OPERATOR(pg_catalog.=) f.id WHERE {conds}) x",
            agg = agg("o"),
            id = col(&plan.columns.id),
        ),
        rows_typed: format!(
            "SELECT {items}, f.score, f.lexical_rank, f.vector_rank \
             FROM pg_catalog.jsonb_to_recordset({fused}::pg_catalog.jsonb) f(id pg_catalog.uuid, score pg_catalog.float8, \
             lexical_rank pg_catalog.int4, vector_rank pg_catalog.int4, o pg_catalog.int4) \
             JOIN {rel} t ON {id} OPERATOR(pg_catalog.=) f.id WHERE {conds} ORDER BY f.o",
            id = col(&plan.columns.id),
        ),
        params: b.params,
        scope_params,
        types: b.types,
    })
}
