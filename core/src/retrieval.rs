//! The retrieval engine (SPEC §20, docs/design.md#agent-memory-api): every reader of memory_ext
//! (`recall`, `retrieve`, and `search` over items) describes what it reads as a typed `Plan` —
//! the source and its columns, the conditions (tenant, clearance, liveness, filters in the §16
//! language), the lists (lexical, vector, or the newest first) and `k`/`offset` — and `render`
//! turns it into ONE SQL statement whose identifiers are quoted here and whose values are bind
//! parameters only, never spliced. Reciprocal rank fusion is `fusion`'s one rule.
//!
//! - `plan`: the plan, read from the JSON object the SQL callers build;
//! - `filter`: the §16 filter language over a jsonb column, parsed into a tree;
//! - `words`: how a query's words are matched (any word, or websearch syntax);
//! - `recall`: memory.recall's argument checks, plan and read event;
//! - `search`: memory.search's argument checks, plan over items and read event;
//! - `render`: the plan to a statement and its parameters.

pub mod filter;
pub mod plan;
pub mod recall;
pub mod render;
pub mod search;
pub mod words;

pub use plan::{Plan, PlanError};
pub use render::{namespace_path, namespace_path_end, render, render_one_pass, OnePass, ParamType, Statement};

#[cfg(test)]
mod tests;
