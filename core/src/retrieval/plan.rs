//! A retrieval plan, as the SQL callers describe it in one JSON object (built by
//! `memory_internal._recall_plan` and `memory.retrieve` from checked arguments and the source's
//! mapping). Names are identifiers the core quotes; values travel as bind parameters.
//!
//! ```json
//! {"relation": ["memory", "observations"],
//!  "columns": {"id": "id", "content": "content", "weight": "weight", "tier": "classification",
//!              "created_at": ..., "user": ..., "session": ..., "memory_type": ..., "metadata": ...,
//!              "embedding": ..., "words": "content_tsv"},
//!  "tier_kind": "column" | "json" | "claim",
//!  "conditions": [{"eq": ["org_id", "acme"]}, {"active": ["lifecycle_state", "memory", "lifecycle_state"]}, ...],
//!  "query": "words" | null, "vector": "[1,0,0]" | null, "vector_schema": "public",
//!  "k": 10, "offset": 0, "depth": 40, "vector_depth": null, "ties": [["confidence_score", "desc"], ...], "one_pass": false,
//!  "one_pass_rows": null, "history": {"relation": ["memory", "revisions"], "at": "2026-03-03T00:00:00Z"} | null}
//! ```
//!
//! `history` (point-in-time reads, SPEC §17): each row is read as it was at `at`, its content,
//! tier, metadata and words those of the revision valid then (`valid_from <= at < valid_to`) when
//! one is, else the row's own. The liveness at `at` is the callers' conditions.

use super::filter::{self, Filter};
use super::words::{match_of, Match};
use serde_json::{Map, Value};

/// How a row's tier is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tier {
    /// No tier: every row is for roles cleared to restricted only.
    None,
    /// A column holding the tier's label (an enum or text).
    Column(String),
    /// A jsonb column holding it under "classification".
    Json(String),
    /// A knowledge claim's tier, computed from its text, subject and PII fields.
    Claim,
}

/// The source's columns by role (None: the source has none).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Columns {
    pub id: String,
    pub content: String,
    pub weight: Option<String>,
    pub created_at: Option<String>,
    pub user: Option<String>,
    pub session: Option<String>,
    pub memory_type: Option<String>,
    pub metadata: Option<String>,
    pub embedding: Option<String>,
    /// A tsvector column of the content's words (None: parsed from `content`).
    pub words: Option<String>,
}

/// One condition on a row `t`.
#[derive(Debug, Clone, PartialEq)]
pub enum Condition {
    /// `t.col::text = value`, or `t.col = value::type` when a type is named.
    Eq { col: String, value: String, typ: Option<(String, String)> },
    /// `t.col IS NULL OR t.col::text = value` (value None: `t.col IS NULL`).
    NullOrEq { col: String, value: Option<String> },
    /// `t.col = 'active'::schema.type`: the row is in the lifecycle state `active`, written as a
    /// constant (not a bind parameter) so that the indexes made for active rows only (`WHERE
    /// lifecycle_state = 'active'`) serve the statement's generic plan too. The label is the
    /// core's, never a caller's value.
    Active { col: String, typ: (String, String) },
    IsNull { col: String },
    IsNotNull { col: String },
    /// The text[] column starts with these labels (`t.col[1:n] = labels`). With `path` (an
    /// IMMUTABLE function `schema.fn(text[]) -> text` joining labels, each followed by '.'; NULL
    /// for a NULL label), and labels of which none holds a '.', neither in the prefix nor in
    /// the column (memory.observations' CHECK holds every namespace to that), the condition is
    /// `'l1.l2.' <= schema.fn(t.col) COLLATE "C" < 'l1.l2/'` alone: the same rows (a path starting
    /// with 'l1.l2.' splits into labels at its '.'s, the first two l1 and l2), in a form a btree
    /// index on that expression (C collation) serves, and no array compared on every row it reads.
    /// With no labels, every non-NULL column (`t.col[1:0] = '{}'`).
    Prefix { col: String, labels: Vec<String>, path: Option<(String, String)> },
    /// `t.col IS NULL OR t.col > at` (at None: now()).
    NullOrAfter { col: String, at: Option<String> },
    /// `t.col >= at`.
    AtOrAfter { col: String, at: String },
    /// `t.col < at`.
    Before { col: String, at: String },
    /// `t.col <= at`.
    AtOrBefore { col: String, at: String },
    /// The row's tier is one of these labels.
    TierIn { labels: Vec<String>, org: String },
    /// `t.col @> doc` (jsonb containment).
    Contains { col: String, doc: String },
    /// The §16 filter over the jsonb column `col`.
    Filter { col: String, filter: Filter },
}

/// Where a point-in-time read finds the versions a row replaced: a table of
/// `(org_id, memory_id, rev, content, content_tsv, classification, metadata, valid_from, valid_to)` (memory.revisions),
/// and the time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct History {
    pub relation: (String, String),
    pub at: String,
}

/// A retrieval plan.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub relation: (String, String),
    pub columns: Columns,
    pub tier: Tier,
    pub conditions: Vec<Condition>,
    /// The query text (None: no lexical list) and how its words match.
    pub query: Option<(String, Match)>,
    /// The query vector in pgvector's text form, and pgvector's schema.
    pub vector: Option<(String, String)>,
    pub k: u32,
    pub offset: u32,
    /// The lexical list's length in a hybrid read.
    pub depth: u32,
    /// The vector list's length in a hybrid read (None: `k + offset`, the page's end). A caller
    /// that pages (memory.search) gives a length that is the same for every page, so that each
    /// page is a slice of one fused ranking (see `Plan::vector_len`).
    pub vector_depth: Option<u32>,
    /// Columns whose greater value ranks first among rows of equal relevance (retrieve:
    /// confidence, then the newest); the first also breaks ties inside each list.
    pub ties: Vec<String>,
    /// Read every row under the conditions in one pass (bounded candidates) and fuse in the core.
    pub one_pass: bool,
    /// The most rows that one pass reads (None: the shell's own bound); more, and the plan is read
    /// as two index lists instead.
    pub one_pass_rows: Option<u32>,
    /// Read rows as they were at a time (None: as they are).
    pub history: Option<History>,
}

/// The longest vector list a plan may ask for: k's and offset's maxima together.
pub const VECTOR_DEPTH_MAX: u32 = 1_100_000;

impl Plan {
    /// The vector list's length: `vector_depth`, else the page's end (`k + offset`).
    pub fn vector_len(&self) -> u64 {
        self.vector_depth.map_or(u64::from(self.k) + u64::from(self.offset), u64::from)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanError(pub String);

impl std::fmt::Display for PlanError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PlanError {}

impl From<filter::FilterError> for PlanError {
    fn from(e: filter::FilterError) -> Self {
        PlanError(e.0)
    }
}

fn name(v: Option<&Value>, what: &str) -> Result<String, PlanError> {
    match v {
        Some(Value::String(s)) if !s.is_empty() && !s.contains('\0') => Ok(s.clone()),
        _ => Err(PlanError(format!("retrieval plan: {what} must be a non-empty name"))),
    }
}

fn opt_name(m: &Map<String, Value>, key: &str) -> Result<Option<String>, PlanError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        v => name(v, key).map(Some),
    }
}

fn text(v: &Value, what: &str) -> Result<String, PlanError> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Number(n) => Ok(n.to_string()),
        Value::Object(_) | Value::Array(_) => Ok(v.to_string()),
        _ => Err(PlanError(format!("retrieval plan: {what} must be a value"))),
    }
}

fn count(m: &Map<String, Value>, key: &str, default: u32, max: u32) -> Result<u32, PlanError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(Value::Number(n)) => n
            .as_u64()
            .filter(|&v| v <= u64::from(max))
            .map(|v| v as u32)
            .ok_or_else(|| PlanError(format!("retrieval plan: {key} must be between 0 and {max}"))),
        _ => Err(PlanError(format!("retrieval plan: {key} must be a number"))),
    }
}

fn pair<'a>(v: &'a Value, what: &str) -> Result<(&'a Value, &'a Value), PlanError> {
    match v {
        Value::Array(a) if a.len() == 2 || a.len() == 4 => Ok((&a[0], &a[1])),
        _ => Err(PlanError(format!("retrieval plan: condition {what} takes [column, value]"))),
    }
}

fn condition(v: &Value) -> Result<Condition, PlanError> {
    let Value::Object(m) = v else { return Err(PlanError("retrieval plan: a condition must be an object".into())) };
    let (op, arg) = m.iter().next().filter(|_| m.len() == 1).ok_or_else(|| PlanError("retrieval plan: a condition has one key".into()))?;
    Ok(match op.as_str() {
        "eq" => {
            let (c, val) = pair(arg, op)?;
            let typ = match arg.as_array().map(Vec::as_slice) {
                Some([_, _, s, t]) => Some((name(Some(s), "type schema")?, name(Some(t), "type")?)),
                _ => None,
            };
            Condition::Eq { col: name(Some(c), "column")?, value: text(val, op)?, typ }
        }
        "null_or_eq" => {
            let (c, val) = pair(arg, op)?;
            Condition::NullOrEq { col: name(Some(c), "column")?, value: if val.is_null() { None } else { Some(text(val, op)?) } }
        }
        "active" => {
            // [column, type schema, type]
            let a = arg
                .as_array()
                .filter(|a| a.len() == 3)
                .ok_or_else(|| PlanError("retrieval plan: active takes [column, type schema, type]".into()))?;
            Condition::Active { col: name(Some(&a[0]), "column")?, typ: (name(Some(&a[1]), "type schema")?, name(Some(&a[2]), "type")?) }
        }
        "is_null" => Condition::IsNull { col: name(Some(arg), "column")? },
        "is_not_null" => Condition::IsNotNull { col: name(Some(arg), "column")? },
        "prefix" => {
            // [column, labels] or [column, labels, [schema, path function]]
            let bad = || PlanError("retrieval plan: prefix takes [column, labels] or [column, labels, [schema, function]]".into());
            let a = arg.as_array().filter(|a| a.len() == 2 || a.len() == 3).ok_or_else(bad)?;
            let labels = a[1].as_array().ok_or_else(bad)?.iter().map(|l| text(l, op)).collect::<Result<Vec<_>, _>>()?;
            let path = match a.get(2) {
                None => None,
                Some(f) => {
                    let f = f.as_array().filter(|f| f.len() == 2).ok_or_else(bad)?;
                    if labels.iter().any(|l| l.contains('.')) {
                        return Err(PlanError("retrieval plan: a prefix with a path function takes labels without '.'".into()));
                    }
                    Some((name(Some(&f[0]), "schema")?, name(Some(&f[1]), "function")?))
                }
            };
            Condition::Prefix { col: name(Some(&a[0]), "column")?, labels, path }
        }
        "null_or_after" => {
            let (c, val) = pair(arg, op)?;
            Condition::NullOrAfter { col: name(Some(c), "column")?, at: if val.is_null() { None } else { Some(text(val, op)?) } }
        }
        "at_or_after" | "before" | "at_or_before" => {
            let (c, val) = pair(arg, op)?;
            let (col, at) = (name(Some(c), "column")?, text(val, op)?);
            match op.as_str() {
                "at_or_after" => Condition::AtOrAfter { col, at },
                "before" => Condition::Before { col, at },
                _ => Condition::AtOrBefore { col, at },
            }
        }
        "tier_in" => {
            let (labels, org) = pair(arg, op)?;
            let labels = labels
                .as_array()
                .ok_or_else(|| PlanError("retrieval plan: tier_in takes [labels, org]".into()))?
                .iter()
                .map(|l| text(l, op))
                .collect::<Result<Vec<_>, _>>()?;
            Condition::TierIn { labels, org: text(org, op)? }
        }
        "contains" => {
            let (c, doc) = pair(arg, op)?;
            Condition::Contains { col: name(Some(c), "column")?, doc: doc.to_string() }
        }
        "filter" => {
            let (c, f) = pair(arg, op)?;
            Condition::Filter { col: name(Some(c), "column")?, filter: filter::parse(f)? }
        }
        other => return Err(PlanError(format!("retrieval plan: unknown condition {}", other.chars().take(32).collect::<String>()))),
    })
}

impl Plan {
    /// Reads a plan from its JSON form (see the module's documentation).
    pub fn from_json(v: &Value) -> Result<Plan, PlanError> {
        let Value::Object(m) = v else { return Err(PlanError("retrieval plan must be an object".into())) };
        let relation = match m.get("relation") {
            Some(Value::Array(r)) if r.len() == 2 => (name(r.first(), "relation schema")?, name(r.get(1), "relation")?),
            _ => return Err(PlanError("retrieval plan: relation is [schema, name]".into())),
        };
        let Some(Value::Object(c)) = m.get("columns") else { return Err(PlanError("retrieval plan: columns is an object".into())) };
        let columns = Columns {
            id: name(c.get("id"), "columns.id")?,
            content: name(c.get("content"), "columns.content")?,
            weight: opt_name(c, "weight")?,
            created_at: opt_name(c, "created_at")?,
            user: opt_name(c, "user")?,
            session: opt_name(c, "session")?,
            memory_type: opt_name(c, "memory_type")?,
            metadata: opt_name(c, "metadata")?,
            embedding: opt_name(c, "embedding")?,
            words: opt_name(c, "words")?,
        };
        let tier = match (m.get("tier_kind").and_then(Value::as_str), opt_name(c, "tier")?) {
            (Some("claim"), _) => Tier::Claim,
            (_, None) => Tier::None,
            (Some("json"), Some(t)) => Tier::Json(t),
            (None | Some("column"), Some(t)) => Tier::Column(t),
            (Some(_), _) => return Err(PlanError("retrieval plan: tier_kind is column, json or claim".into())),
        };
        let conditions = match m.get("conditions") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(cs)) => cs.iter().map(condition).collect::<Result<_, _>>()?,
            _ => return Err(PlanError("retrieval plan: conditions is an array".into())),
        };
        let query = match m.get("query") {
            None | Some(Value::Null) => None,
            Some(Value::String(q)) => Some((q.clone(), match_of(q))),
            _ => return Err(PlanError("retrieval plan: query is text".into())),
        };
        let vector = match m.get("vector") {
            None | Some(Value::Null) => None,
            Some(Value::String(v)) => {
                if columns.embedding.is_none() {
                    return Err(PlanError("retrieval plan: a query vector needs an embedding column".into()));
                }
                Some((v.clone(), name(m.get("vector_schema"), "vector_schema")?))
            }
            _ => return Err(PlanError("retrieval plan: vector is pgvector's text form".into())),
        };
        let ties = match m.get("ties") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(t)) => t.iter().map(|x| name(Some(x), "ties")).collect::<Result<_, _>>()?,
            _ => return Err(PlanError("retrieval plan: ties is an array of columns".into())),
        };
        let history = match m.get("history") {
            None | Some(Value::Null) => None,
            Some(Value::Object(h)) => {
                let relation = match h.get("relation") {
                    Some(Value::Array(r)) if r.len() == 2 => (name(r.first(), "history schema")?, name(r.get(1), "history relation")?),
                    _ => return Err(PlanError("retrieval plan: history.relation is [schema, name]".into())),
                };
                let at = match h.get("at") {
                    Some(Value::String(a)) if !a.is_empty() => a.clone(),
                    _ => return Err(PlanError("retrieval plan: history.at is a time".into())),
                };
                Some(History { relation, at })
            }
            _ => return Err(PlanError("retrieval plan: history is an object".into())),
        };
        let k = count(m, "k", 10, 100_000)?;
        if k == 0 {
            return Err(PlanError("retrieval plan: k must be at least 1".into()));
        }
        Ok(Plan {
            relation,
            columns,
            tier,
            conditions,
            query,
            vector,
            k,
            offset: count(m, "offset", 0, 1_000_000)?,
            depth: count(m, "depth", 40, 100_000)?,
            vector_depth: match m.get("vector_depth") {
                None | Some(Value::Null) => None,
                Some(_) => match count(m, "vector_depth", 1, VECTOR_DEPTH_MAX)? {
                    0 => return Err(PlanError("retrieval plan: vector_depth must be at least 1".into())),
                    d => Some(d),
                },
            },
            ties,
            one_pass: matches!(m.get("one_pass"), Some(Value::Bool(true))),
            one_pass_rows: match m.get("one_pass_rows") {
                None | Some(Value::Null) => None,
                Some(_) => Some(count(m, "one_pass_rows", 1, 1_000_000)?),
            },
            history,
        })
    }
}
