//! memory-mcp: an MCP server that gives agents memory_ext's governed memory without SQL.
//!
//! Every tool is one transaction that sets `memory.org_id` and `memory.actor_id` locally and calls
//! memory_ext's own functions (or inserts into `memory.observations`); every rule (classification,
//! tenancy, clearance, holds, consent, audit) stays in the database. A refused call is an MCP tool
//! error (`isError`) carrying the SQLSTATE, message, detail and hint, and changes nothing.

mod auth;
mod conninfo;
mod embed;
mod http_server;
mod tls;

use std::borrow::Cow;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use clap::Parser;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, JsonObject, ListToolsResult, PaginatedRequestParams,
    RequestMetaObject, ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, ServiceExt};
use serde_json::{json, Value};
use tokio_postgres::types::ToSql;

use crate::auth::{Authenticator, JwksSource, Jwt, Principal};

#[derive(Parser, Debug)]
#[command(name = "memory-mcp", version, about = "MCP server for memory_ext: remember, recall, forget, retrieve, claim_chain, context, items, history, supersede, lineage")]
struct Args {
    /// PostgreSQL connection string (URL or key=value) of a tenant-bound login role; sslmode,
    /// sslrootcert, sslcert and sslkey as libpq reads them.
    #[arg(long, env = "MEMORY_MCP_DATABASE_URL", hide_env_values = true)]
    database_url: String,
    /// The org to act for (stdio and --auth none; required for a role bound to '*' or to several orgs).
    #[arg(long)]
    org: Option<String>,
    /// Expose only the reading tools (recall, retrieve, claim_chain, context, search, get, history, lineage).
    #[arg(long)]
    read_only: bool,
    /// Serve streamable HTTP on ADDR (e.g. 127.0.0.1:8765, path /mcp) instead of stdio; needs --auth.
    #[arg(long, value_name = "ADDR")]
    http: Option<SocketAddr>,
    /// How HTTP clients are authorized: jwt (bearer JWTs of --issuer), tokens (--token-file), or
    /// none (loopback addresses only).
    #[arg(long, value_enum)]
    auth: Option<AuthMode>,
    /// The issuer's JWK set, fetched over HTTPS (http only on loopback); again for an unknown key id.
    #[arg(long, value_name = "URL")]
    jwks_url: Option<String>,
    /// The issuer's JWK set, from a file.
    #[arg(long, value_name = "FILE")]
    jwks_file: Option<PathBuf>,
    /// The `iss` the JWTs must carry (an authorization server of the protected-resource metadata).
    #[arg(long, value_name = "URL")]
    issuer: Option<String>,
    /// This server's resource URL: the `aud` its JWTs must carry, and the `resource` of its
    /// metadata (default http://ADDR/mcp on loopback; required otherwise).
    #[arg(long, value_name = "URL")]
    resource_url: Option<String>,
    /// The JWT claim naming the org a request acts for.
    #[arg(long, default_value = "org", value_name = "CLAIM")]
    org_claim: String,
    /// --auth tokens: a JSON array of {"sha256", "name", "org", "scopes"}.
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// A browser origin allowed to call (repeatable; "null" for Origin: null). Requests without
    /// an Origin always pass. Default: this server's own loopback origins and its resource URL's.
    #[arg(long = "allowed-origin", value_name = "ORIGIN")]
    allowed_origins: Vec<String>,
    /// The most open HTTP sessions; a new one beyond is answered 503 with Retry-After.
    #[arg(long, default_value_t = 200, value_name = "N")]
    max_sessions: usize,
    /// With --auth jwt or tokens: the most open HTTP sessions of one subject and org; a new one
    /// beyond is answered 429 with Retry-After.
    #[arg(long, default_value_t = 50, value_name = "N")]
    max_sessions_per_subject: usize,
    /// Seconds after which an idle HTTP session is closed.
    #[arg(long, default_value_t = 120, value_name = "SECS")]
    session_idle_timeout: u64,
    /// Streamable HTTP without sessions: every POST is answered on its own, with a plain JSON
    /// response (no SSE stream, no Mcp-Session-Id, no server task kept between calls); GET and
    /// DELETE are 405. --max-sessions then caps the requests in flight (503 with Retry-After) and
    /// --max-sessions-per-subject those of one subject and org (429). Calls are not named by the
    /// client's `initialize` (no session keeps it): the audit records the client as "unknown"
    /// unless a request carries its clientInfo in `_meta`.
    #[arg(long, requires = "http")]
    stateless: bool,
    /// --stateless: every call through rmcp's stateless path (no direct tools/call): the tests
    /// compare the two paths with it.
    #[arg(long, hide = true)]
    no_direct_calls: bool,
    /// Seconds a request's body may take to arrive (it is read whole, to check the token's scopes
    /// against the tools it calls); past them the request is answered 408 and its connection closed.
    /// An answer the client leaves unread as long (a write that makes no progress) closes its
    /// connection too.
    #[arg(long, default_value_t = 30.0, value_name = "SECS")]
    request_body_timeout: f64,
    /// Request body bytes in flight at once, over all requests (at least 4 MiB, the largest body):
    /// a body read holds its size until its tool call ends, as parsing it can take ~100 times that
    /// in memory; a request past the budget is answered 503 with Retry-After.
    #[arg(long, default_value_t = 16 * 1024 * 1024, value_name = "BYTES")]
    max_body_bytes_in_flight: usize,
    /// Seconds a client may take to send a request's headers, and a connection may stay idle
    /// between requests; past them the connection is closed.
    #[arg(long, default_value_t = 10.0, value_name = "SECS")]
    header_read_timeout: f64,
    /// The most open HTTP connections; beyond them a new connection waits until one closes.
    #[arg(long, default_value_t = 512, value_name = "N")]
    max_connections: usize,
    /// Threads serving HTTP (default: the host's cores, at most 4). Each accepts connections and
    /// serves them whole on its own event loop, with its own database pool (4 connections shared
    /// out, at least 2 a worker): a call's request, tool handler and database connection stay on
    /// one thread (no hand-off between threads per call).
    #[arg(long, value_name = "N")]
    http_workers: Option<usize>,
    /// An OpenAI-compatible embeddings endpoint (POST, e.g. https://api.openai.com/v1/embeddings):
    /// remember and put store the vector, recall, retrieve and search rank by it too. Its key, if
    /// any, from the environment variable MEMORY_MCP_EMBEDDINGS_KEY. Needs memory.enable_embeddings.
    #[arg(long, value_name = "URL")]
    embeddings_url: Option<String>,
    /// The model named in each embeddings request.
    #[arg(long, value_name = "NAME", default_value = "text-embedding-3-small")]
    embeddings_model: String,
    /// Seconds to wait for the embedder; past them the memory is stored without a vector and a
    /// search is lexical.
    #[arg(long, value_name = "SECS", default_value_t = 5.0)]
    embeddings_timeout: f64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum AuthMode {
    None,
    Jwt,
    Tokens,
}

/// The database connections of the server (over HTTP, shared among its worker threads' pools).
const POOL_SIZE: usize = 4;

const WRITE_TOOLS: [&str; 6] = ["remember", "forget", "put", "delete", "supersede", "record_outcome"];

#[derive(Clone)]
pub struct MemoryServer {
    pool: Pool,
    /// The org of stdio and --auth none; with tokens, each request's token names its org.
    org: Option<Arc<str>>,
    read_only: bool,
    /// The embedder (--embeddings-url), and pgvector's type as the column names it (schema-qualified).
    embedder: Option<Arc<embed::Embedder>>,
    vector_type: Option<Arc<str>>,
    /// The answer to `initialize` (server_info).
    info: Arc<ServerConfig>,
    /// remember's statement for each set of arguments given (Call::given), built once.
    remember_sql: Arc<[OnceLock<String>; 1 << REMEMBER_ARGS]>,
}

/// The arguments remember may give its INSERT (the embedding included).
const REMEMBER_ARGS: usize = 7;

/// Why a call failed: the database's answer, a lost connection, or arguments that do not fit the
/// tool's schema (an MCP protocol error, not a tool result).
enum Failure {
    Db(tokio_postgres::Error),
    Pool(String),
    Args(String),
    /// A refusal of the server's own, shaped as the database's (a memory outside the token's org).
    Refused(Value),
}

impl From<tokio_postgres::Error> for Failure {
    fn from(e: tokio_postgres::Error) -> Self {
        Failure::Db(e)
    }
}

fn schema(v: Value) -> Arc<JsonObject> {
    match v {
        Value::Object(m) => Arc::new(m),
        _ => unreachable!("tool schemas are objects"),
    }
}

/// The output schema of a tool answering a list under `key`, with how it searched when `searched`.
fn list_output(key: &str, row: Value, searched: bool) -> Arc<JsonObject> {
    let mut props = serde_json::Map::new();
    props.insert(key.into(), json!({"type": "array", "items": row}));
    let mut required = vec![json!(key)];
    if searched {
        props.insert("search".into(), json!({"type": "string", "enum": ["lexical", "hybrid"],
            "description": "hybrid: full text and the query's embedding; lexical: full text only."}));
        props.insert("fallback".into(), json!({"type": "string",
            "description": "Present when an embedder is configured but failed: why this search is lexical only."}));
        required.push(json!("search"));
    }
    schema(json!({"type": "object", "properties": props, "required": required}))
}

/// The output schema of a write storing a vector: the id, and whether its embedding was stored.
fn stored_output(extra: Value) -> Arc<JsonObject> {
    let mut props = json!({
        "id": {"type": "string", "format": "uuid"},
        "embedded": {"type": "boolean", "description": "Whether its embedding was stored (false: none configured, or it waits in memory.embedding_backlog)."},
        "embedding_error": {"type": "string", "description": "Why the embedder gave no vector; the memory is stored all the same."}
    });
    if let (Value::Object(p), Value::Object(e)) = (&mut props, extra) {
        p.extend(e);
    }
    schema(json!({"type": "object", "properties": props, "required": ["id", "embedded"]}))
}

fn object_with(props: Value) -> Value {
    json!({"type": "object", "properties": props})
}

/// The tools of a server (read-only or not), built once: their schemas never change, and a tool
/// call asks for them (its name checked, its output schema) on every request.
fn tool_list(read_only: bool) -> &'static [Tool] {
    static ALL: OnceLock<Vec<Tool>> = OnceLock::new();
    static READ_ONLY: OnceLock<Vec<Tool>> = OnceLock::new();
    if read_only {
        READ_ONLY.get_or_init(|| tools(true))
    } else {
        ALL.get_or_init(|| tools(false))
    }
}

fn tools(read_only: bool) -> Vec<Tool> {
    let ro = |title: &str| ToolAnnotations::with_title(title).read_only(true).destructive(false);
    let uuid = json!({"type": "string", "format": "uuid"});
    let text = json!({"type": "string"});
    let text_or_null = json!({"type": ["string", "null"]});
    let num_or_null = json!({"type": ["number", "null"]});
    let namespace = json!({"type": "array", "items": {"type": "string"}, "minItems": 1,
                           "description": "The item's namespace, e.g. [\"users\", \"u1\", \"prefs\"]."});
    let item_row = object_with(json!({
        "id": uuid, "namespace": {"type": "array", "items": text}, "key": text, "value": {"type": "object"},
        "classification": text, "created_at": text, "updated_at": text_or_null, "expires_at": text_or_null
    }));
    let mut out = vec![
        Tool::new(
            "remember",
            "Store one memory (an observation) for the current org. The database classifies it (public, internal, \
             confidential or restricted) from its content and returns the id and the tier; secrets and personal data \
             are classified high, never refused here. Use user_id/session_id to scope it, derived_from to name the \
             memories it was made from. With an embedder configured its embedding is stored too; when the embedder fails the memory is stored all the same (embedded: false).",
            schema(json!({
                "type": "object",
                "properties": {
                    "content": {"type": "string", "description": "The text to remember."},
                    "user_id": {"type": "string", "description": "The end user this memory is about, if any."},
                    "session_id": {"type": "string", "description": "The session or conversation it comes from."},
                    "memory_type": {"type": "string", "enum": ["working", "short_term", "long_term", "persona", "episodic", "entity", "structured"],
                                    "description": "Retention class (default long_term)."},
                    "metadata": {"type": "object", "description": "Free-form JSON object stored with the memory."},
                    "derived_from": {"type": "array", "items": {"type": "string", "format": "uuid"}, "maxItems": 1000,
                                     "description": "The memories of this org it was made from (a summary's sources): its tier, trust and retention follow theirs; lineage lists them."}
                },
                "required": ["content"],
                "additionalProperties": false
            })),
        )
        .with_raw_output_schema(stored_output(json!({"classification": text_or_null})))
        .with_annotations(ToolAnnotations::with_title("Remember").read_only(false).destructive(false)),
        Tool::new(
            "recall",
            "Search the current org's live memories (full text, and by meaning when an embedder is configured: \
             ranked by relevance x weight) and return the top k the login role is cleared to read: {memories: [{id, \
             content, classification, weight, score}], search, fallback}. An empty query with filters lists the newest \
             matching memories.",
            schema(json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "Words to search for (web-search syntax: quotes, or, -word), or a plain question."},
                    "k": {"type": "integer", "minimum": 1, "maximum": 1000, "description": "How many memories at most (default 10)."},
                    "filters": {"type": "object", "description": "Optional, all ANDed: user_id, session_id, task_id (strings); memory_type, \
                        source_type, max_tier (labels); created_after, created_before (ISO timestamps); metadata (an object the memory's metadata contains)."}
                },
                "required": ["query"],
                "additionalProperties": false
            })),
        )
        .with_raw_output_schema(list_output(
            "memories",
            object_with(json!({"id": uuid, "content": text, "classification": text_or_null, "weight": {"type": "number"}, "score": num_or_null})),
            true,
        ))
        .with_annotations(ro("Recall")),
        Tool::new(
            "forget",
            "Delete memories of the current org by id, for good (their content is kept nowhere; the audit trail keeps \
             only hashes). Returns {forgotten, held, not_found}: ids under a legal hold stay; ids of other orgs are \
             not found. Give the reason (name the request, not the content).",
            schema(json!({
                "type": "object",
                "properties": {
                    "ids": {"type": "array", "items": {"type": "string", "format": "uuid"}, "description": "Memory ids (from remember or recall)."},
                    "reason": {"type": "string", "description": "Why they are forgotten, e.g. 'user request #123'."}
                },
                "required": ["ids", "reason"],
                "additionalProperties": false
            })),
        )
        .with_raw_output_schema(schema(json!({
            "type": "object",
            "properties": {"forgotten": {"type": "array", "items": uuid}, "held": {"type": "array", "items": uuid}, "not_found": {"type": "array", "items": uuid},
                           "derived_forgotten": {"type": "array", "items": uuid}},
            "required": ["forgotten", "held", "not_found"]
        })))
        .with_annotations(ToolAnnotations::with_title("Forget").read_only(false).destructive(true)),
        Tool::new(
            "retrieve",
            "Retrieve the current org's active knowledge claims relevant to a query (full text, and by meaning when an \
             embedder is configured; ranked by relevance, then confidence, then the newest), within the login role's \
             clearance: {claims: [{id, entity, claim_text, field, kind, source, supports, subject_id, confidence_score, \
             classification, score, t_created, decay_at, stale_fields, lexical_rank, vector_rank}], search, fallback}. \
             entity_id keeps one entity's claims (an empty query then lists them, most confident first); user_id adds \
             the claims about that end user, only while the user's save_to_profile consent is in force; screen_profile \
             names a screening profile, and stale_fields then lists the claim's field when its answer is too old.",
            schema(json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "What the claims should be about."},
                    "k": {"type": "integer", "minimum": 1, "maximum": 1000, "description": "How many claims at most (default 10)."},
                    "entity_id": {"type": "string", "format": "uuid", "description": "Only claims about this entity."},
                    "user_id": {"type": "string", "description": "The end user the answer is for (needs the user's save_to_profile consent)."},
                    "screen_profile": {"type": "string", "description": "A screening profile (memory.screen_profiles) to mark stale fields by."}
                },
                "required": ["query"],
                "additionalProperties": false
            })),
        )
        .with_raw_output_schema(list_output(
            "claims",
            object_with(json!({"id": uuid, "entity": uuid, "claim_text": text, "confidence_score": num_or_null, "classification": text_or_null, "score": num_or_null})),
            true,
        ))
        .with_annotations(ro("Retrieve claims")),
        Tool::new(
            "claim_chain",
            "The provenance trail of a knowledge claim: {chain: [...]}, depth 0 is the claim, then the claim it \
             superseded, and so on back, each with its lifecycle state and validity times.",
            schema(json!({
                "type": "object",
                "properties": {"claim_id": {"type": "string", "format": "uuid", "description": "The claim's id."}},
                "required": ["claim_id"],
                "additionalProperties": false
            })),
        )
        .with_raw_output_schema(list_output("chain", object_with(json!({"depth": {"type": "integer"}, "claim_id": uuid, "lifecycle_state": text})), false))
        .with_annotations(ro("Claim chain")),
        Tool::new(
            "context",
            "A prompt-ready block of the current org's memories for a query, within a token budget: what recall finds \
             (full text, and by meaning when an embedder is configured), near-duplicates dropped, varied by maximal \
             marginal relevance: {context: {text, ids, tokens, omitted}, search, fallback}. Put context.text in the prompt.",
            schema(json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "What the agent is about to do or answer."},
                    "token_budget": {"type": "integer", "minimum": 1, "maximum": 100000, "description": "Tokens the block may take (default 2000)."},
                    "filters": {"type": "object", "description": "recall's filters (user_id, session_id, memory_type, ...)."},
                    "diversity": {"type": "number", "minimum": 0, "maximum": 1, "description": "0 keeps relevance order; higher prefers unlike memories (default 0.3)."}
                },
                "required": ["query"],
                "additionalProperties": false
            })),
        )
        .with_raw_output_schema(schema(json!({
            "type": "object",
            "properties": {
                "context": {"type": "object", "required": ["text", "ids"],
                            "properties": {"text": text, "ids": {"type": "array", "items": uuid}, "tokens": {"type": "integer"}, "omitted": {"type": "integer"}}},
                "search": {"type": "string", "enum": ["lexical", "hybrid"]},
                "fallback": {"type": "string"}
            },
            "required": ["context", "search"]
        })))
        .with_annotations(ro("Context block")),
        Tool::new(
            "search",
            "Search the current org's live items (key-value memories under a namespace) the login role is cleared to \
             read: filter over the value ({\"field\": value} or {\"field\": {\"$gt\": 3}}, $in, $contains, $and/$or/$not, \
             dotted paths), ranked by the query (full text, and by meaning when an embedder is configured), else the \
             most recently updated first: {items: [{id, namespace, key, value, classification, created_at, updated_at, \
             expires_at, score}], search, fallback}.",
            schema(json!({
                "type": "object",
                "properties": {
                    "namespace_prefix": {"type": "array", "items": {"type": "string"}, "description": "Only items under this namespace prefix (default: all)."},
                    "query": {"type": "string", "description": "Words or a plain question to rank by."},
                    "filter": {"type": "object", "description": "Conditions over the item's value."},
                    "k": {"type": "integer", "minimum": 1, "maximum": 1000, "description": "How many items at most (default 10)."},
                    "offset": {"type": "integer", "minimum": 0, "description": "How many to skip (default 0)."}
                },
                "additionalProperties": false
            })),
        )
        .with_raw_output_schema(list_output("items", item_row.clone(), true))
        .with_annotations(ro("Search items")),
        Tool::new(
            "get",
            "The current org's item at (namespace, key) when it is live and the login role is cleared to read it: \
             {item: {id, namespace, key, value, classification, created_at, updated_at, expires_at}}, else {item: null}.",
            schema(json!({
                "type": "object",
                "properties": {"namespace": namespace, "key": {"type": "string", "description": "The item's key."}},
                "required": ["namespace", "key"],
                "additionalProperties": false
            })),
        )
        .with_raw_output_schema(schema(json!({
            "type": "object",
            "properties": {"item": {"anyOf": [item_row, {"type": "null"}]}},
            "required": ["item"]
        })))
        .with_annotations(ro("Get item")),
        Tool::new(
            "put",
            "Create or replace the current org's item at (namespace, key) with a JSON object value. The database \
             classifies it over every key and value (a change never lowers its tier), stamps its retention (ttl only \
             shortens it) and refuses it under a legal hold. With an embedder configured the value's text is embedded; \
             when the embedder fails the item is stored all the same (embedded: false). Returns {id, embedded}.",
            schema(json!({
                "type": "object",
                "properties": {
                    "namespace": namespace,
                    "key": {"type": "string", "description": "The item's key."},
                    "value": {"type": "object", "description": "The item (a JSON object)."},
                    "index": {"type": "array", "items": {"type": "string"}, "description": "JSON paths whose text is searchable (default: the whole value; []: none)."},
                    "ttl": {"type": "string", "description": "How long it lives at most, e.g. '7 days'."},
                    "user_id": {"type": "string", "description": "The end user it is about, if any."}
                },
                "required": ["namespace", "key", "value"],
                "additionalProperties": false
            })),
        )
        .with_raw_output_schema(stored_output(json!({})))
        .with_annotations(ToolAnnotations::with_title("Put item").read_only(false).destructive(true)),
        Tool::new(
            "delete",
            "Delete the current org's item at (namespace, key) for good, as forget does (refused under a legal hold): \
             {deleted: true} when there was one.",
            schema(json!({
                "type": "object",
                "properties": {"namespace": namespace, "key": {"type": "string", "description": "The item's key."}},
                "required": ["namespace", "key"],
                "additionalProperties": false
            })),
        )
        .with_raw_output_schema(schema(json!({"type": "object", "properties": {"deleted": {"type": "boolean"}}, "required": ["deleted"]})))
        .with_annotations(ToolAnnotations::with_title("Delete item").read_only(false).destructive(true)),
        Tool::new(
            "history",
            "The versions of one of the current org's memories, newest first: {versions: [{rev, content, metadata, \
             classification, valid_from, valid_to, actor, reason}]}; the current one has valid_to null, each earlier \
             one the time it was replaced, who changed it (pseudonymised) and why. A superseded memory keeps its \
             history. Versions above the login role's clearance are left out; an unknown id has none.",
            schema(json!({
                "type": "object",
                "properties": {"id": {"type": "string", "format": "uuid", "description": "The memory's id (from remember or recall)."}},
                "required": ["id"],
                "additionalProperties": false
            })),
        )
        .with_raw_output_schema(list_output(
            "versions",
            object_with(json!({"rev": {"type": "integer"}, "content": text_or_null, "metadata": {"type": ["object", "null"]},
                               "classification": text_or_null, "valid_from": text_or_null, "valid_to": text_or_null,
                               "actor": text_or_null, "reason": text_or_null})),
            false,
        ))
        .with_annotations(ro("Memory history")),
        Tool::new(
            "lineage",
            "Where one of the current org's memories came from (direction up: the memories it was made from, and \
             theirs) or what was made from it (down): {lineage: [{id, depth, classification, source_type, content, \
             created_at, live}]}, depth 1 the direct ones. Within the login role's clearance; nothing for a memory it \
             may not read.",
            schema(json!({
                "type": "object",
                "properties": {
                    "id": {"type": "string", "format": "uuid", "description": "The memory's id."},
                    "direction": {"type": "string", "enum": ["up", "down"], "description": "up (default): its sources; down: what was made from it."}
                },
                "required": ["id"],
                "additionalProperties": false
            })),
        )
        .with_raw_output_schema(list_output(
            "lineage",
            object_with(json!({"id": uuid, "depth": {"type": "integer"}, "classification": text_or_null, "source_type": text_or_null,
                               "content": text_or_null, "created_at": text_or_null, "live": {"type": "boolean"}})),
            false,
        ))
        .with_annotations(ro("Memory lineage")),
        Tool::new(
            "supersede",
            "Correct one of the current org's memories: store the corrected text as a new memory (classified, never \
             below the old tier; it keeps the old one's weight and user) and mark the old one superseded, so recall \
             no longer finds it (history still shows it). Give the reason (recorded with the change). Returns {id, \
             supersedes, embedded}. A memory already superseded or not live: 22023; one of another org or forgotten: P0002; \
             one under a legal hold: MX006. With an embedder configured the corrected text's embedding is stored \
             too; when the embedder fails the memory is stored all the same (embedded: false).",
            schema(json!({
                "type": "object",
                "properties": {
                    "id": {"type": "string", "format": "uuid", "description": "The memory it replaces."},
                    "content": {"type": "string", "description": "The corrected memory's text."},
                    "reason": {"type": "string", "description": "Why it is corrected, e.g. 'the user moved to Lyon'."},
                    "metadata": {"type": "object", "description": "The new memory's metadata (default {})."}
                },
                "required": ["id", "content", "reason"],
                "additionalProperties": false
            })),
        )
        .with_raw_output_schema(stored_output(json!({"supersedes": uuid})))
        .with_annotations(ToolAnnotations::with_title("Supersede memory").read_only(false).destructive(true)),
        Tool::new(
            "record_outcome",
            "Tell how a session went with the memories it used: accepted raises their weights, rejected and rework \
             lower them (once per session and memory). Returns {results: [{observation_id, previous_weight, new_weight, \
             alpha, applied, reason}]}; reason says why one was not applied (already_recorded, not_found, ...).",
            schema(json!({
                "type": "object",
                "properties": {
                    "session_id": {"type": "string", "description": "The session the outcome is of."},
                    "outcome": {"type": "string", "enum": ["accepted", "rejected", "rework"]},
                    "observation_ids": {"type": "array", "items": {"type": "string", "format": "uuid"}, "description": "The memories (from recall) the session used."}
                },
                "required": ["session_id", "outcome", "observation_ids"],
                "additionalProperties": false
            })),
        )
        .with_raw_output_schema(list_output(
            "results",
            object_with(json!({"observation_id": uuid, "previous_weight": num_or_null, "new_weight": num_or_null, "alpha": num_or_null,
                               "applied": {"type": "boolean"}, "reason": text})),
            false,
        ))
        .with_annotations(ToolAnnotations::with_title("Record outcome").read_only(false).destructive(false)),
    ];
    if read_only {
        out.retain(|t| !WRITE_TOOLS.contains(&t.name.as_ref()));
    }
    out
}

// Argument readers: the shape of the JSON only; the values are the database's to judge.
fn opt_str(a: &JsonObject, k: &str) -> Result<Option<String>, Failure> {
    match a.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(Failure::Args(format!("{k} must be a string"))),
    }
}
fn req_str(a: &JsonObject, k: &str) -> Result<String, Failure> {
    opt_str(a, k)?.ok_or_else(|| Failure::Args(format!("{k} is required")))
}
fn opt_int(a: &JsonObject, k: &str) -> Result<Option<i32>, Failure> {
    match a.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_i64()
            .and_then(|n| i32::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| Failure::Args(format!("{k} must be an integer"))),
    }
}
fn opt_strs(a: &JsonObject, k: &str) -> Result<Option<Vec<String>>, Failure> {
    match a.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(v)) => v
            .iter()
            .map(|x| x.as_str().map(str::to_string))
            .collect::<Option<Vec<String>>>()
            .map(Some)
            .ok_or_else(|| Failure::Args(format!("{k} must be an array of strings"))),
        Some(_) => Err(Failure::Args(format!("{k} must be an array of strings"))),
    }
}
fn req_strs(a: &JsonObject, k: &str) -> Result<Vec<String>, Failure> {
    opt_strs(a, k)?.ok_or_else(|| Failure::Args(format!("{k} is required: an array of strings")))
}
/// A JSON value passed to SQL as its text (cast to jsonb there).
fn opt_json(a: &JsonObject, k: &str) -> Option<String> {
    a.get(k).filter(|v| !v.is_null()).map(Value::to_string)
}

/// A named-argument call or column list, built from fixed names only; every value is a parameter.
struct Call {
    names: Vec<&'static str>,
    casts: Vec<Cow<'static, str>>,
    params: Vec<Box<dyn ToSql + Sync + Send>>,
    /// Which of the arguments offered (in the order of the `arg` calls) were given: a bit each.
    given: usize,
    offered: usize,
}

impl Call {
    fn new() -> Self {
        Call { names: vec![], casts: vec![], params: vec![], given: 0, offered: 0 }
    }
    fn arg<T: ToSql + Sync + Send + 'static>(&mut self, name: &'static str, cast: impl Into<Cow<'static, str>>, v: Option<T>) -> &mut Self {
        self.offered += 1;
        if let Some(v) = v {
            self.given |= 1 << (self.offered - 1);
            self.names.push(name);
            self.casts.push(cast.into());
            self.params.push(Box::new(v));
        }
        self
    }
    fn placeholders(&self) -> Vec<String> {
        self.placeholders_from(0)
    }
    /// The placeholders when `before` parameters come first.
    fn placeholders_from(&self, before: usize) -> Vec<String> {
        self.casts.iter().enumerate().map(|(i, c)| format!("${}{c}", before + i + 1)).collect()
    }
    fn named(&self) -> String {
        self.names.iter().zip(self.placeholders()).map(|(n, p)| format!("{n} => {p}")).collect::<Vec<_>>().join(", ")
    }
    fn refs(&self) -> Vec<&(dyn ToSql + Sync)> {
        self.params.iter().map(|p| p.as_ref() as &(dyn ToSql + Sync)).collect()
    }
}

/// The org, the actor and the tool call of a statement run in its own (implicit) transaction, set
/// locally before the rest of it: `s.org` is the org set, and naming it where the statement needs
/// the org makes the settings come first. Parameters $1 (org), $2 (actor), $3 (`TOOL:CLIENT`).
const SETTINGS: &str = "WITH s AS MATERIALIZED (SELECT pg_catalog.set_config('memory.org_id', $1, true) AS org, \
                        pg_catalog.set_config('memory.actor_id', $2, true) AS actor, pg_catalog.set_config('memory.mcp_call', $3, true) AS call)";
const SETTINGS_PARAMS: usize = 3;

/// The org, the actor and the call (`TOOL:CLIENT`) of a tool's transaction.
const SET_CALL: &str = "SELECT pg_catalog.set_config('memory.org_id', $1, true), pg_catalog.set_config('memory.actor_id', $2, true), \
                        pg_catalog.set_config('memory.mcp_call', $3, true)";

/// The columns of a rows_sql statement, and its count: its second column.
const ROWS: (&str, &str) = ("j, c", "x.c");

/// A tool's transaction (every tool but remember), in one round trip to the database: BEGIN, the
/// settings (SET_CALL), the tool's statement and COMMIT are sent together (pipelined) and run in
/// that order. The statement records the call itself: it is wrapped so that its row also calls
/// `memory_internal._mcp_tool_invoked(tool, client, count)`, the count computed from the row (no
/// record when it is NULL). A statement that fails aborts the transaction, the later ones fail
/// with it, and COMMIT then rolls it back: nothing is written and no record kept. The error
/// returned is the first one's. Each statement is prepared once per pooled connection.
struct ToolTx<'a> {
    tx: &'a deadpool_postgres::ClientWrapper,
    settings: [&'a (dyn ToSql + Sync); 3],
    tool: &'a str,
    client: &'a str,
}

impl ToolTx<'_> {
    /// The tool's statement `sql` (its columns named by `shape.0`, the first one `j`, the answer;
    /// `shape.1` the call's count, an int expression of them as `x.*`) with the call's record:
    /// a row of (j, the count).
    async fn one(&self, sql: &str, shape: (&str, &str), params: &[&(dyn ToSql + Sync)]) -> Result<tokio_postgres::Row, tokio_postgres::Error> {
        let (cols, count) = shape;
        let n = params.len();
        // OFFSET 0 keeps each level a subquery of its own: the tool's statement runs once, before its record.
        let wrapped = format!(
            "SELECT t.j, t.n, CASE WHEN t.n IS NOT NULL THEN memory_internal._mcp_tool_invoked(${}::text, ${}::text, t.n) END \
               FROM (SELECT x.j, ({count})::int AS n FROM ({sql} OFFSET 0) x({cols}) OFFSET 0) t",
            n + 1,
            n + 2
        );
        let (set, st) = tokio::try_join!(self.tx.prepare_cached(SET_CALL), self.tx.prepare_cached(&wrapped))?;
        let mut all: Vec<&(dyn ToSql + Sync)> = params.to_vec();
        all.push(&self.tool);
        all.push(&self.client);
        let (begun, set, row, committed) = tokio::join!(
            self.tx.batch_execute("BEGIN"),
            self.tx.execute(&set, &self.settings),
            self.tx.query_one(&st, &all),
            self.tx.batch_execute("COMMIT")
        );
        begun.and(set).and(row).and_then(|row| committed.map(|_| row))
    }
}

/// Rows of a set-returning memory_ext function as a JSON array of objects by column name, in order.
fn rows_sql(call: &str) -> String {
    format!(
        "SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.to_jsonb(r) OPERATOR(pg_catalog.-) 'ordinality' ORDER BY r.ordinality), '[]')::text, \
         pg_catalog.count(*)::int FROM {call} WITH ORDINALITY AS r"
    )
}

impl MemoryServer {
    /// remember: one statement, in its own (implicit) transaction, one round trip to the database.
    /// Its first part (SETTINGS) sets the org, the actor and the call (`memory.mcp_call`,
    /// `remember:<client>`) locally, then the INSERT writes the row whose org is the one set (so
    /// the settings are in force before the row is made: row-level security, the classifier and
    /// the audit trigger read them). The row's `memory.store` audit event carries the call
    /// (`mcp_tool`, `mcp_client`): it is the call's record, written by the write itself, so no
    /// separate record is appended. A statement that fails stores nothing and records nothing.
    /// Prepared once per pooled connection: a cache hit, no round trip, after the first call.
    async fn remember(&self, a: &JsonObject, org: &str, actor: &str, client: &str, vector: Option<&[f32]>) -> Result<tokio_postgres::Row, Failure> {
        let mut c = Call::new();
        c.arg("content", "::text", Some(req_str(a, "content")?))
            .arg("user_id", "::text", opt_str(a, "user_id")?)
            .arg("session_id", "::text", opt_str(a, "session_id")?)
            .arg("memory_type", "::text::memory.memory_type", opt_str(a, "memory_type")?)
            .arg("metadata", "::text::jsonb", opt_json(a, "metadata"))
            .arg("derived_from", "::text[]::uuid[]", opt_strs(a, "derived_from")?);
        let embedding = vector.zip(self.vector_type.as_deref());
        let cast: Cow<'static, str> = embedding.map_or(Cow::Borrowed(""), |(_, t)| format!("::text::{t}").into());
        c.arg("embedding", cast, embedding.map(|(v, _)| embed::vector_text(v)));
        // The statement depends only on which arguments are given: built once for each set.
        let sql = self.remember_sql[c.given].get_or_init(|| {
            format!(
                "{SETTINGS} INSERT INTO memory.observations (org_id, {}) SELECT s.org, {} FROM s RETURNING id::text, classification::text",
                c.names.join(", "),
                c.placeholders_from(SETTINGS_PARAMS).join(", ")
            )
        });
        let call = format!("remember:{client}");
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![&org, &actor, &call];
        params.extend(c.refs());
        let conn = Pooled(Some(self.pool.get().await.map_err(|e| Failure::Pool(causes(&e)))?));
        let tx = conn.client();
        let st = tx.prepare_cached(sql).await?;
        let row = tx.query_one(&st, &params).await;
        // A refused statement has rolled its transaction back: the connection is idle again. A
        // lost one is closed (Pooled's drop).
        if row.as_ref().map_or_else(|e| e.as_db_error().is_some(), |_| true) {
            conn.release();
        }
        Ok(row?)
    }

    /// The arguments recall and retrieve share: the org, the query and k.
    fn search(org: &str, a: &JsonObject) -> Result<Call, Failure> {
        let mut c = Call::new();
        c.arg("org_id", "::text", Some(org.to_string()))
            .arg("query", "::text", Some(req_str(a, "query")?))
            .arg("k", "::int", opt_int(a, "k")?);
        Ok(c)
    }

    /// The embedding of a text when an embedder is configured: None without one, else the vector
    /// or why there is none (the call goes on without it).
    async fn embedding(&self, text: Option<&str>) -> Option<Result<Vec<f32>, String>> {
        let e = self.embedder.as_ref()?;
        let t = text.filter(|t| !t.trim().is_empty())?;
        Some(e.embed(t).await)
    }

    /// One tool call: one transaction acting for the org (the token's, or the server's) as
    /// `mcp:<client>[:<subject>]`, ending with the call's audit record, as the login role. The
    /// embedder is asked first, holding no connection.
    async fn run(&self, tool: &str, a: &JsonObject, client: &str, who: Option<&Principal>) -> Result<Value, Failure> {
        let (org, actor) = match (who, &self.org) {
            (Some(p), _) => (p.org.clone(), format!("mcp:{client}:{}", p.sub.chars().filter(|c| !c.is_control()).take(200).collect::<String>())),
            (None, Some(o)) => (o.to_string(), format!("mcp:{client}")),
            (None, None) => return Err(Failure::Args("this request carries no authorized org".into())),
        };
        let emb = match tool {
            "remember" | "supersede" => self.embedding(Some(&req_str(a, "content")?)).await,
            "put" => match a.get("value") {
                Some(v @ Value::Object(_)) => self.embedding(Some(&embed::item_text(v))).await,
                _ => return Err(Failure::Args("value is required: a JSON object".into())),
            },
            "recall" | "retrieve" | "search" | "context" => self.embedding(opt_str(a, "query")?.as_deref()).await,
            _ => None,
        };
        // How a search ran: hybrid with the query's embedding, else lexical (and why, when an
        // embedder is configured but gave none).
        let (vector, fallback) = match emb {
            Some(Ok(v)) => (Some(v), None),
            Some(Err(why)) => (None, Some(why)),
            None => (None, None),
        };
        let searched = |mut out: Value| {
            out["search"] = json!(if vector.is_some() { "hybrid" } else { "lexical" });
            if let Some(why) = &fallback {
                out["fallback"] = json!(format!("{why}: searched by full text only"));
            }
            out
        };
        let stored = |mut out: Value| {
            out["embedded"] = json!(vector.is_some());
            if let Some(why) = &fallback {
                out["embedding_error"] = json!(format!("{why}: stored without an embedding (memory.embedding_backlog lists it)"));
            }
            out
        };
        if tool == "remember" {
            let row = self.remember(a, &org, &actor, client, vector.as_deref()).await?;
            return Ok(stored(json!({"id": row.get::<_, String>(0), "classification": row.get::<_, Option<String>>(1)})));
        }
        let conn = Pooled(Some(self.pool.get().await.map_err(|e| Failure::Pool(causes(&e)))?));
        let call_name = format!("{tool}:{client}");
        let call = ToolTx { tx: conn.client(), settings: [&org, &actor, &call_name], tool, client };
        let called = async { Ok::<(Value, i32), Failure>(match tool {
            "recall" => {
                let mut c = Self::search(&org, a)?;
                c.arg("filters", "::text::jsonb", opt_json(a, "filters"))
                    .arg("query_embedding", "::float8[]", vector.as_ref().map(|v| v.iter().map(|x| *x as f64).collect::<Vec<f64>>()));
                let sql = format!(
                    "SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object('id', r.id, 'content', r.content, \
                     'classification', r.classification, 'weight', r.weight, 'score', r.score) ORDER BY r.ordinality), '[]')::text, \
                     pg_catalog.count(*)::int FROM memory.recall({}) WITH ORDINALITY AS r",
                    c.named()
                );
                let row = call.one(&sql, ROWS, &c.refs()).await?;
                (searched(json!({"memories": parse(row.get(0))})), row.get(1))
            }
            "forget" => {
                let ids = req_strs(a, "ids")?;
                let reason = req_str(a, "reason")?;
                // Only the token's org: memory.forget(ids) forgets an id in any org the login
                // role may act for (a role bound to several orgs serves each to its own tokens),
                // so ids the role reads in this org are forgotten, any other is not_found.
                let row = call.one(
                        "WITH w AS (SELECT w.u, w.n FROM pg_catalog.unnest($1::text[]::uuid[]) WITH ORDINALITY w(u, n)), \
                         mine AS (SELECT w.u FROM w WHERE EXISTS (SELECT FROM memory.observations o WHERE o.id = w.u AND o.org_id = $3) \
                                     OR EXISTS (SELECT FROM memory.observations_archive a WHERE a.id = w.u AND a.org_id = $3)), \
                         f AS (SELECT memory.forget(ids => ARRAY(SELECT mine.u FROM mine), reason => $2) AS r) \
                         SELECT (f.r || pg_catalog.jsonb_build_object('not_found', (f.r -> 'not_found') || coalesce( \
                                    (SELECT pg_catalog.jsonb_agg(w.u ORDER BY w.n) FROM w WHERE w.u NOT IN (SELECT mine.u FROM mine)), '[]')))::text \
                           FROM f",
                        ("j", "CASE pg_catalog.jsonb_typeof(x.j::jsonb OPERATOR(pg_catalog.->) 'forgotten') WHEN 'array' THEN pg_catalog.jsonb_array_length(x.j::jsonb OPERATOR(pg_catalog.->) 'forgotten') ELSE 0 END"),
                        &[&ids, &reason, &org],
                    )
                    .await?;
                (parse(row.get(0)), row.get(1))
            }
            "retrieve" => {
                let mut c = Self::search(&org, a)?;
                c.arg("entity_id", "::text::uuid", opt_str(a, "entity_id")?)
                    .arg("screen_profile", "::text", opt_str(a, "screen_profile")?)
                    .arg("user_id", "::text", opt_str(a, "user_id")?)
                    .arg("query_embedding", "::real[]", vector.clone());
                let row = call.one(&rows_sql(&format!("memory.retrieve({})", c.named())), ROWS, &c.refs()).await?;
                (searched(json!({"claims": parse(row.get(0))})), row.get(1))
            }
            "claim_chain" => {
                let mut c = Call::new();
                c.arg("claim_id", "::text::uuid", Some(req_str(a, "claim_id")?));
                let row = call.one(&rows_sql(&format!("memory.claim_chain({})", c.named())), ROWS, &c.refs()).await?;
                (json!({"chain": parse(row.get(0))}), row.get(1))
            }
            "search" => {
                let mut c = Call::new();
                c.arg("org_id", "::text", Some(org.clone()))
                    .arg("namespace_prefix", "::text[]", Some(opt_strs(a, "namespace_prefix")?.unwrap_or_default()))
                    .arg("query", "::text", opt_str(a, "query")?)
                    .arg("filter", "::text::jsonb", opt_json(a, "filter"))
                    .arg("k", "::int", opt_int(a, "k")?)
                    .arg("\"offset\"", "::int", opt_int(a, "offset")?)
                    .arg("query_embedding", "::real[]", vector.clone());
                let row = call.one(&rows_sql(&format!("memory.search({})", c.named())), ROWS, &c.refs()).await?;
                (searched(json!({"items": parse(row.get(0))})), row.get(1))
            }
            "context" => {
                let diversity = match a.get("diversity") {
                    None | Some(Value::Null) => None,
                    Some(v) => Some(v.as_f64().ok_or_else(|| Failure::Args("diversity must be a number".into()))?),
                };
                let mut c = Call::new();
                c.arg("org_id", "::text", Some(org.clone()))
                    .arg("query", "::text", Some(req_str(a, "query")?))
                    .arg("token_budget", "::int", opt_int(a, "token_budget")?)
                    .arg("filters", "::text::jsonb", opt_json(a, "filters"))
                    .arg("query_embedding", "::real[]", vector.clone())
                    .arg("diversity", "::float8", diversity);
                let row = call.one(&format!("SELECT memory.context({})::text", c.named()), ("j", "CASE pg_catalog.jsonb_typeof(x.j::jsonb OPERATOR(pg_catalog.->) 'ids') WHEN 'array' THEN pg_catalog.jsonb_array_length(x.j::jsonb OPERATOR(pg_catalog.->) 'ids') ELSE 0 END"), &c.refs()).await?;
                (searched(json!({"context": parse(row.get(0))})), row.get(1))
            }
            "get" => {
                let mut c = Call::new();
                c.arg("org_id", "::text", Some(org.clone()))
                    .arg("namespace", "::text[]", Some(req_strs(a, "namespace")?))
                    .arg("key", "::text", Some(req_str(a, "key")?));
                let row = call.one(&rows_sql(&format!("memory.get({})", c.named())), ROWS, &c.refs()).await?;
                let item = parse(row.get(0)).get(0).cloned().unwrap_or(Value::Null);
                (json!({"item": item}), row.get(1))
            }
            "put" => {
                let mut c = Call::new();
                c.arg("org_id", "::text", Some(org.clone()))
                    .arg("namespace", "::text[]", Some(req_strs(a, "namespace")?))
                    .arg("key", "::text", Some(req_str(a, "key")?))
                    .arg("value", "::text::jsonb", opt_json(a, "value"))
                    .arg("index", "::text[]", opt_strs(a, "index")?)
                    .arg("ttl", "::text::interval", opt_str(a, "ttl")?)
                    .arg("embedding", "::real[]", vector.clone())
                    .arg("user_id", "::text", opt_str(a, "user_id")?);
                let row = call.one(&format!("SELECT memory.put({})::text", c.named()), ("j", "1"), &c.refs()).await?;
                (stored(json!({"id": row.get::<_, String>(0)})), 1)
            }
            "delete" => {
                let mut c = Call::new();
                c.arg("org_id", "::text", Some(org.clone()))
                    .arg("namespace", "::text[]", Some(req_strs(a, "namespace")?))
                    .arg("key", "::text", Some(req_str(a, "key")?));
                let row = call.one(&format!("SELECT memory.delete({})", c.named()), ("j", "x.j::int"), &c.refs()).await?;
                let deleted: bool = row.get(0);
                (json!({"deleted": deleted}), i32::from(deleted))
            }
            "history" => {
                // Under row-level security: the versions of the token's org only.
                let mut c = Call::new();
                c.arg("memory_id", "::text::uuid", Some(req_str(a, "id")?));
                let row = call.one(&rows_sql(&format!("memory.history({})", c.named())), ROWS, &c.refs()).await?;
                (json!({"versions": parse(row.get(0))}), row.get(1))
            }
            "lineage" => {
                // memory.lineage finds the id in any org the login role may act for (memory.org_id
                // first); a token reads its own org's lineage only, so another org's id has none.
                let row = call.one(
                        "SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.to_jsonb(r) OPERATOR(pg_catalog.-) 'ordinality' ORDER BY r.ordinality), '[]')::text, \
                                pg_catalog.count(*)::int \
                           FROM (SELECT $1::text::uuid AS id) x \
                           CROSS JOIN LATERAL memory.lineage(memory_id => x.id, direction => coalesce($2, 'up')) WITH ORDINALITY AS r \
                          WHERE EXISTS (SELECT FROM memory.observations o WHERE o.org_id OPERATOR(pg_catalog.=) $3 AND o.id OPERATOR(pg_catalog.=) x.id)",
                        ROWS,
                        &[&req_str(a, "id")?, &opt_str(a, "direction")?, &org],
                    )
                    .await?;
                (json!({"lineage": parse(row.get(0))}), row.get(1))
            }
            "supersede" => {
                // memory.supersede finds the old memory in any org the login role may act for; a
                // token supersedes its own org's only: another org's id is not found (P0002, as
                // the database answers for a memory it may not read).
                let old = req_str(a, "id")?;
                let row = call.one(
                        "SELECT CASE WHEN EXISTS (SELECT FROM memory.observations o WHERE o.org_id OPERATOR(pg_catalog.=) $5 AND o.id OPERATOR(pg_catalog.=) $1::text::uuid) \
                                THEN memory.supersede(old_id => $1::text::uuid, content => $2, reason => $3, metadata => coalesce($4::text::jsonb, '{}'), \
                                                      embedding => $6::real[])::text END",
                        // No record when nothing was superseded (the call is refused below).
                        ("j", "CASE WHEN x.j IS NULL THEN NULL ELSE 1 END"),
                        &[&old, &req_str(a, "content")?, &req_str(a, "reason")?, &opt_json(a, "metadata"), &org, &vector],
                    )
                    .await?;
                match row.get::<_, Option<String>>(0) {
                    Some(id) => (stored(json!({"id": id, "supersedes": old})), 1),
                    None => {
                        return Err(Failure::Refused(json!({
                            "sqlstate": "P0002",
                            "message": format!("memory {old} does not exist in org {org}"),
                            "detail": null,
                            "hint": "Supersede a live memory of the org you write for (a forgotten one is gone).",
                        })))
                    }
                }
            }
            "record_outcome" => {
                let mut c = Call::new();
                c.arg("session_id", "::text", Some(req_str(a, "session_id")?))
                    .arg("outcome", "::text::memory.outcome", Some(req_str(a, "outcome")?))
                    .arg("observation_ids", "::text[]::uuid[]", Some(req_strs(a, "observation_ids")?));
                let row = call.one(&rows_sql(&format!("memory.record_outcome({})", c.named())), ROWS, &c.refs()).await?;
                (json!({"results": parse(row.get(0))}), row.get(1))
            }
            other => return Err(Failure::Args(format!("unknown tool {other}"))),
        }) }
        .await;
        match called {
            Ok((value, _)) => {
                conn.release();
                Ok(value)
            }
            // A refused statement's transaction was rolled back by its COMMIT: the connection is
            // idle. A lost one is closed (Pooled's drop).
            Err(Failure::Db(e)) if e.as_db_error().is_none() => Err(Failure::Db(e)),
            Err(f) => {
                conn.release();
                Err(f)
            }
        }
    }
}

/// A pooled connection inside a tool call's transaction. Released to the pool once the call has
/// committed or rolled back; dropped before that (the call cancelled in flight, or a connection
/// error), the connection is closed instead, so no open transaction ever goes back to the pool.
struct Pooled(Option<deadpool_postgres::Object>);

impl Pooled {
    fn client(&self) -> &deadpool_postgres::ClientWrapper {
        self.0.as_ref().expect("a pooled connection until released")
    }
    fn release(mut self) {
        self.0.take();
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        if let Some(c) = self.0.take() {
            drop(deadpool_postgres::Object::take(c));
        }
    }
}


/// An error with its causes (a TLS handshake's names the certificate problem).
pub(crate) fn causes(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(c) = next {
        let s = c.to_string();
        if !out.contains(&s) {
            out.push_str(": ");
            out.push_str(&s);
        }
        next = c.source();
    }
    out
}

fn parse(text: String) -> Value {
    serde_json::from_str(&text).unwrap_or(Value::String(text))
}

/// The database's refusal as an MCP tool error: SQLSTATE, message, detail and hint.
fn tool_error(f: Failure) -> Result<CallToolResult, McpError> {
    let v = match f {
        Failure::Args(m) => return Err(McpError::invalid_params(m, None)),
        Failure::Db(e) => match e.as_db_error() {
            Some(db) => json!({
                "sqlstate": db.code().code(),
                "message": db.message(),
                "detail": db.detail(),
                "hint": db.hint(),
            }),
            None => json!({"sqlstate": null, "message": format!("database connection: {e}")}),
        },
        Failure::Pool(m) => json!({"sqlstate": null, "message": format!("database connection: {m}")}),
        Failure::Refused(v) => v,
    };
    Ok(CallToolResult::structured_error(v))
}

/// The client's name (from initialize, or the request's metadata in stateless protocol versions),
/// as the actor and the audit record name it.
fn client_name(ctx: &RequestContext<RoleServer>) -> String {
    // A stateless HTTP request has no session's `initialize`: rmcp's stand-in would name rmcp
    // itself, so only the request's own `_meta` names its client.
    let stateless = ctx.extensions.get::<http::request::Parts>().is_some_and(|p| p.extensions.get::<http_server::Stateless>().is_some());
    if stateless {
        return stateless_client_name(&ctx.meta);
    }
    clean_client_name(&ctx.client_info().map(|i| i.name).unwrap_or_default())
}

/// The client's name of a stateless HTTP request: its own `_meta`'s clientInfo, if any.
pub(crate) fn stateless_client_name(meta: &RequestMetaObject) -> String {
    clean_client_name(&meta.client_info().map(|i| i.name).unwrap_or_default())
}

/// A client's self-declared name as the actor and the audit record carry it: at most 100
/// characters, without control characters or invisible formatting ones (zero-width, bidi
/// overrides: a name reads as what it is, and a blank one is "unknown"), and with `:` made `_`
/// (the actor `mcp:<client>:<sub>` then ends its client at its second colon, so no name can
/// reach into the subject's part: a client of subject `b` naming itself `x:a` would otherwise
/// act as the `mcp:x:a:b` of a client `x` of subject `a:b`).
fn clean_client_name(raw: &str) -> String {
    let name: String = raw
        .chars()
        .filter(|&c| !c.is_control() && !invisible(c))
        .map(|c| if c == ':' { '_' } else { c })
        .take(100)
        .collect();
    if name.trim().is_empty() {
        "unknown".into()
    } else {
        name
    }
}

/// Unicode format characters that show nothing or reorder what follows (Cf: soft hyphen, Arabic
/// letter mark, Mongolian vowel separator, zero-width and directional marks, bidi embeddings and
/// overrides, word joiner and invisible operators, bidi isolates, BOM, interlinear annotations, tags).
fn invisible(c: char) -> bool {
    matches!(c, '\u{00AD}' | '\u{061C}' | '\u{180E}' | '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2060}'..='\u{206F}'
        | '\u{FEFF}' | '\u{FFF9}'..='\u{FFFB}' | '\u{E0000}'..='\u{E007F}')
}

/// The authorized caller of an HTTP request (none over stdio or with --auth none).
fn principal(ctx: &RequestContext<RoleServer>) -> Option<&Principal> {
    ctx.extensions.get::<http::request::Parts>().and_then(|p| p.extensions.get::<Principal>())
}

/// What `initialize` answers: the capabilities, the server's name and the instructions.
fn server_info(org: Option<&str>, read_only: bool) -> ServerConfig {
    ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
        .with_server_info(Implementation::new("memory-mcp", env!("CARGO_PKG_VERSION")))
        .with_instructions(format!(
            "Governed memory of {} (memory_ext). remember stores a memory (classified by the database), recall \
             searches memories, forget deletes them by id, retrieve finds knowledge claims, claim_chain shows a \
             claim's provenance; put, get, search and delete keep items (JSON objects) by namespace and key; \
             record_outcome tells how a session went with the memories it used; context packs memories for a prompt; \
             supersede corrects a memory, history shows its versions, lineage what it was made from.{} Refusals come back as errors with a SQLSTATE and a hint: follow the hint.",
            org.map_or("the org your token names".to_string(), |o| format!("org {o}")),
            if read_only { " This server is read-only: remember, forget, put, delete, supersede and record_outcome are not available." } else { "" }
        ))
}

impl ServerHandler for MemoryServer {
    fn get_info(&self) -> ServerConfig {
        // Built once (rmcp asks for it on every stateless HTTP request).
        (*self.info).clone()
    }

    async fn list_tools(&self, _: Option<PaginatedRequestParams>, ctx: RequestContext<RoleServer>) -> Result<ListToolsResult, McpError> {
        // An authorized caller sees the tools its scopes allow.
        let who = principal(&ctx);
        let mut list = tool_list(self.read_only).to_vec();
        list.retain(|t| who.is_none_or(|p| p.scopes.contains(auth::scope_of(&t.name))));
        Ok(ListToolsResult::with_all_items(list))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        tool_list(self.read_only).iter().find(|t| t.name == name).cloned()
    }

    async fn call_tool(&self, req: CallToolRequestParams, ctx: RequestContext<RoleServer>) -> Result<CallToolResponse, McpError> {
        let args = req.arguments.unwrap_or_default();
        self.call(&req.name, &args, principal(&ctx), &client_name(&ctx)).await.map(Into::into)
    }
}

impl MemoryServer {
    /// A tool call, from plain values: rmcp's `call_tool` and the HTTP server's direct stateless
    /// path (http_server::direct_call) both make it here, so a tool answers alike on either.
    pub(crate) async fn call(&self, name: &str, args: &JsonObject, who: Option<&Principal>, client: &str) -> Result<CallToolResult, McpError> {
        if !tool_list(self.read_only).iter().any(|t| t.name == name) {
            let why = if self.read_only && WRITE_TOOLS.contains(&name) { " (this server runs --read-only)" } else { "" };
            return Err(McpError::invalid_params(format!("tool {name} is not available{why}"), None));
        }
        if let Some(p) = who {
            // The HTTP layer answered 403 insufficient_scope already; this holds without it too.
            let need = auth::scope_of(name);
            if !p.scopes.contains(need) {
                return Err(McpError::invalid_request(format!("tool {name} needs scope {need}"), None));
            }
        }
        match self.run(name, args, client, who).await {
            Ok(v) if v.is_object() => Ok(CallToolResult::structured(v)),
            Ok(v) => Ok(CallToolResult::success(vec![ContentBlock::text(v.to_string())])),
            Err(f) => tool_error(f),
        }
    }
}

/// The org this server acts for, or why it must not start: the login role must be bound to
/// tenants (memory.grant_org), and never be a superuser, a BYPASSRLS role, or the extension's owner
/// or a role with its privileges (a member that inherits them: memory_ext and row-level security
/// treat it as the owner).
async fn startup_org(pool: &Pool, org: Option<&str>, per_token: bool) -> Result<Option<String>, String> {
    let mut conn = pool.get().await.map_err(|e| format!("cannot connect to the database: {}", causes(&e)))?;
    let row = conn
        .query_one(
            "SELECT r.rolname::text, r.rolsuper, r.rolbypassrls, coalesce(pg_catalog.pg_has_role(r.oid, e.extowner, 'USAGE'), false), e.oid IS NOT NULL \
             FROM pg_catalog.pg_roles r LEFT JOIN pg_catalog.pg_extension e ON e.extname OPERATOR(pg_catalog.=) 'memory_ext' \
             WHERE r.rolname OPERATOR(pg_catalog.=) current_user",
            &[],
        )
        .await
        .map_err(|e| format!("cannot read the login role: {e}"))?;
    let (role, sup, bypass, owner, installed): (String, bool, bool, bool, bool) = (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4));
    let how = "log in as a tenant-bound role instead: CREATE ROLE agent_mcp LOGIN PASSWORD '...'; GRANT memory_writer TO agent_mcp; \
               SELECT memory.grant_org('agent_mcp', 'acme'); (see docs/mcp.md)";
    if !installed {
        return Err("memory_ext is not installed in this database (CREATE EXTENSION memory_ext)".into());
    }
    // remember's call is recorded by its own memory.store, through memory.mcp_call, which memory_ext
    // 0.4.0's library defines (loaded by the classifier call): an older one would store unrecorded.
    let knows_calls: bool = conn
        .query_one("SELECT pg_catalog.current_setting('memory.mcp_call', true) IS NOT NULL FROM (SELECT memory.classify('') OFFSET 0) c", &[])
        .await
        .map_err(|e| format!("cannot read memory_ext's settings: {e}"))?
        .get(0);
    if !knows_calls {
        return Err("refusing to start: the memory_ext library of this database predates memory.mcp_call (0.4.0), so remember's calls \
                    would go unrecorded; install memory_ext 0.4.0 or later and run ALTER EXTENSION memory_ext UPDATE"
            .into());
    }
    if sup {
        return Err(format!("refusing to start: role {role} is a superuser, which bypasses row-level security and acts for every org; {how}"));
    }
    if bypass {
        return Err(format!("refusing to start: role {role} has BYPASSRLS, so tenant isolation would not hold; {how}"));
    }
    if owner {
        return Err(format!("refusing to start: role {role} owns memory_ext or has its owner's privileges, and is unrestricted; {how}"));
    }
    let orgs: Vec<String> = conn
        .query("SELECT o FROM memory.my_orgs() o", &[])
        .await
        .map_err(|e| format!("cannot read the role's orgs (memory.my_orgs()): {e}"))?
        .iter()
        .map(|r| r.get(0))
        .collect();
    if orgs.is_empty() {
        return Err(format!("refusing to start: role {role} is bound to no org (memory.my_orgs() is empty); bind it with SELECT memory.grant_org('{role}', 'ORG')"));
    }
    if per_token {
        // Each token names its org; the database answers 42501 for one the role lacks.
        return Ok(None);
    }
    // The database decides whether the role may act for the org: memory.acting_org() answers
    // 42501 for an org the role lacks, and NULL for '*' or several orgs without one named.
    let tx = conn.transaction().await.map_err(|e| e.to_string())?;
    let acting: Option<String> = tx.query_one("SELECT pg_catalog.set_config('memory.org_id', coalesce($1, ''), true), memory.acting_org()", &[&org])
        .await
        .map_err(|e| match e.as_db_error() {
            Some(db) => format!("refusing to start: {} (SQLSTATE {}){}", db.message(), db.code().code(), db.hint().map(|h| format!("; {h}")).unwrap_or_default()),
            None => e.to_string(),
        })?
        .get(1);
    drop(tx);
    match acting {
        Some(o) => Ok(Some(o)),
        None if orgs.iter().any(|o| o == "*") => Err(format!(
            "refusing to start: role {role} is bound to '*' (every org); pass --org ORG so this server acts for one tenant"
        )),
        None => Err(format!(
            "refusing to start: role {role} is bound to several orgs ({}); pass --org ORG to choose one",
            orgs.join(", ")
        )),
    }
}

/// The embedder of --embeddings-url, checked against the database's embedding column: the column
/// must be there (memory.enable_embeddings), and a vector the embedder returns now must have its
/// dimensions. An embedder that does not answer now is not a reason to refuse to start (every
/// answer is checked again); one that answers with other dimensions is. Also pgvector's type, as a
/// cast names it.
async fn embeddings(pool: &Pool, args: &Args, url: &str) -> Result<(embed::Embedder, String), String> {
    if !(args.embeddings_timeout.is_finite() && args.embeddings_timeout > 0.0 && args.embeddings_timeout <= 600.0) {
        return Err(format!("--embeddings-timeout {}: seconds between 0 and 600", args.embeddings_timeout));
    }
    let key = std::env::var("MEMORY_MCP_EMBEDDINGS_KEY").ok().filter(|k| !k.is_empty());
    let mut e = embed::Embedder::new(url.to_string(), args.embeddings_model.clone(), key, Duration::from_secs_f64(args.embeddings_timeout), 0)?;
    let conn = pool.get().await.map_err(|e| format!("cannot connect to the database: {}", causes(&e)))?;
    let row = conn
        .query_opt(
            "SELECT pg_catalog.quote_ident(n.nspname::text) OPERATOR(pg_catalog.||) '.vector', a.atttypmod \
               FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_type t ON t.oid OPERATOR(pg_catalog.=) a.atttypid \
               JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) t.typnamespace \
              WHERE a.attrelid OPERATOR(pg_catalog.=) 'memory.observations'::pg_catalog.regclass \
                AND a.attname OPERATOR(pg_catalog.=) 'embedding' AND NOT a.attisdropped",
            &[],
        )
        .await
        .map_err(|e| format!("cannot read memory.observations' embedding column: {e}"))?;
    let (vtype, dims): (String, i32) = match row {
        Some(r) => (r.get(0), r.get(1)),
        None => {
            return Err("refusing to start: --embeddings-url is given but embeddings are not enabled in this database; \
                        a platform admin runs SELECT memory.enable_embeddings(DIMENSIONS) with the model's dimensions (pgvector)"
                .into())
        }
    };
    let dims = usize::try_from(dims).map_err(|_| "memory.observations.embedding has no fixed dimensions".to_string())?;
    e.dims = dims;
    match e.raw("dimension check").await {
        Ok(v) if v.len() != dims => {
            return Err(format!(
                "refusing to start: the embedder's model {} returns {} dimensions, the database's embeddings have {dims}; use a model of {dims} dimensions",
                args.embeddings_model,
                v.len()
            ))
        }
        Ok(_) => eprintln!("memory-mcp: embeddings of {dims} dimensions from {url}"),
        Err(why) => eprintln!("memory-mcp: {why}; memories are stored without embeddings (memory.embedding_backlog) until it answers"),
    }
    Ok((e, vtype))
}

/// Why the HTTP flags do not fit together, or the authenticator they describe.
async fn http_auth(args: &Args, addr: SocketAddr) -> Result<(Option<Authenticator>, String), String> {
    let loopback = addr.ip().is_loopback();
    // Kept as written: it is compared with the tokens' aud as a string.
    let resource = match &args.resource_url {
        Some(u) => u.clone(),
        None if loopback => format!("http://{addr}/mcp"),
        None => return Err(format!("--http {addr} is not a loopback address: give --resource-url, the URL clients reach this server at (the audience of its tokens)")),
    };
    http_server::resource_uri(&resource)?;
    let mode = args.auth.ok_or("--http needs --auth: jwt (bearer JWTs, --issuer and --jwks-url or --jwks-file), tokens (--token-file), or none (loopback only)")?;
    if mode != AuthMode::Jwt && (args.jwks_url.is_some() || args.jwks_file.is_some() || args.issuer.is_some()) {
        return Err("--jwks-url, --jwks-file and --issuer go with --auth jwt".into());
    }
    if mode != AuthMode::Tokens && args.token_file.is_some() {
        return Err("--token-file goes with --auth tokens".into());
    }
    if mode != AuthMode::None && args.org.is_some() {
        return Err("--org goes with stdio or --auth none: with --auth jwt or tokens each token names its org".into());
    }
    let auth = match mode {
        AuthMode::None if !loopback => {
            return Err(format!("refusing to start: --auth none serves anyone who reaches {addr}; bind a loopback address (127.0.0.1, ::1) or use --auth jwt or --auth tokens"))
        }
        AuthMode::None => None,
        AuthMode::Tokens => Some(Authenticator::Tokens(auth::load_tokens(args.token_file.as_ref().ok_or("--auth tokens needs --token-file FILE")?)?)),
        AuthMode::Jwt => {
            let issuer = args.issuer.clone().ok_or("--auth jwt needs --issuer URL (the iss of the tokens)")?;
            let source = match (&args.jwks_url, &args.jwks_file) {
                (Some(u), None) => {
                    let parsed: http::Uri = u.parse().map_err(|_| format!("--jwks-url {u}: not a URL"))?;
                    let local = parsed.host().is_some_and(|h| h == "localhost" || h.trim_matches(['[', ']']).parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback()));
                    if parsed.scheme_str() != Some("https") && !(parsed.scheme_str() == Some("http") && local) {
                        return Err(format!("--jwks-url {u}: must be https (http only on loopback)"));
                    }
                    let client = reqwest::Client::builder().timeout(Duration::from_secs(10)).redirect(reqwest::redirect::Policy::none()).build().map_err(|e| e.to_string())?;
                    JwksSource::Url(client, u.clone())
                }
                (None, Some(f)) => JwksSource::File(f.clone()),
                _ => return Err("--auth jwt needs one of --jwks-url URL or --jwks-file FILE".into()),
            };
            Some(Authenticator::Jwt(Jwt::new(issuer, resource.clone(), args.org_claim.clone(), source).await?))
        }
    };
    Ok((auth, resource))
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let fail = |why: String| {
        eprintln!("memory-mcp: {why}");
        ExitCode::from(2)
    };
    if args.http.is_none() && (args.auth.is_some() || args.token_file.is_some() || args.jwks_url.is_some() || args.jwks_file.is_some()) {
        return fail("--auth and its flags go with --http (stdio serves the local process that started it)".into());
    }
    let http = match args.http {
        None => None,
        Some(addr) => match http_auth(&args, addr).await {
            Ok(a) => Some((addr, a)),
            Err(why) => return fail(why),
        },
    };
    let (dsn, ssl) = match conninfo::split_ssl(&args.database_url, std::env::var_os("HOME").map(PathBuf::from)) {
        Ok(x) => x,
        Err(e) => return fail(format!("--database-url: {e}")),
    };
    let mut cfg: tokio_postgres::Config = match dsn.parse() {
        Ok(c) => c,
        Err(e) => return fail(format!("--database-url: {e}")),
    };
    if cfg.get_application_name().is_none() {
        cfg.application_name("memory-mcp");
    }
    let (mode, tls) = match tls::connector(&ssl) {
        Ok(x) => x,
        Err(e) => return fail(format!("--database-url: {e}")),
    };
    // As libpq: no TLS over Unix sockets.
    let unix_only = !cfg.get_hosts().is_empty() && cfg.get_hosts().iter().all(|h| !matches!(h, tokio_postgres::config::Host::Tcp(_)));
    cfg.ssl_mode(if unix_only { tokio_postgres::config::SslMode::Disable } else { mode });
    let new_pool = |size: usize| Pool::builder(Manager::from_config(cfg.clone(), tls.clone(), ManagerConfig { recycling_method: RecyclingMethod::Fast })).max_size(size).build();
    let pool = match new_pool(POOL_SIZE) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("memory-mcp: {e}");
            return ExitCode::from(2);
        }
    };
    let per_token = http.as_ref().is_some_and(|(_, (a, _))| a.is_some());
    let org = match startup_org(&pool, args.org.as_deref(), per_token).await {
        Ok(o) => o,
        Err(why) => return fail(why),
    };
    let ro = if args.read_only { " (read-only)" } else { "" };
    match &org {
        Some(o) => eprintln!("memory-mcp: acting for org {o}{ro}"),
        None => eprintln!("memory-mcp: acting for the org each token names{ro}"),
    }
    let (embedder, vector_type) = match &args.embeddings_url {
        None => (None, None),
        Some(u) => match embeddings(&pool, &args, u).await {
            Ok((e, t)) => (Some(Arc::new(e)), Some(t.into())),
            Err(why) => return fail(why),
        },
    };
    let info = Arc::new(server_info(org.as_deref(), args.read_only));
    let server = MemoryServer {
        pool,
        org: org.map(Into::into),
        read_only: args.read_only,
        embedder,
        vector_type,
        info,
        remember_sql: Arc::new(std::array::from_fn(|_| OnceLock::new())),
    };
    let result = match http {
        None => serve_stdio(server).await,
        Some((addr, (auth, resource_url))) => {
            let port = addr.port();
            let resource = match http_server::resource_uri(&resource_url) {
                Ok(r) => r,
                Err(e) => return fail(e),
            };
            let allowed_origins = if args.allowed_origins.is_empty() { http_server::default_origins(port, &resource) } else { args.allowed_origins.clone() };
            // Each HTTP worker thread gets a pool of its own (its connections' I/O driven by that
            // thread's event loop), POOL_SIZE connections shared out, at least 2 a worker (a call
            // waiting on a lock leaves its worker another). By default no more workers than
            // POOL_SIZE: a worker costs a call far less than its database round trip.
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            let workers = args.http_workers.unwrap_or(cores.min(POOL_SIZE)).clamp(1, 1024);
            let per_worker = POOL_SIZE.div_ceil(workers).max(2);
            let servers = match (0..workers).map(|_| new_pool(per_worker).map(|pool| MemoryServer { pool, ..server.clone() })).collect::<Result<Vec<_>, _>>() {
                Ok(s) => s,
                Err(e) => return fail(e.to_string()),
            };
            // The startup checks' connection is not used again.
            server.pool.close();
            drop(server);
            http_server::serve(
                servers,
                http_server::HttpOptions {
                    addr,
                    resource,
                    resource_url,
                    allowed_origins,
                    auth,
                    max_sessions: args.max_sessions.max(1),
                    max_sessions_per_subject: args.max_sessions_per_subject.max(1),
                    idle_timeout: Duration::from_secs(args.session_idle_timeout.max(1)),
                    stateless: args.stateless,
                    body_timeout: Duration::try_from_secs_f64(args.request_body_timeout.clamp(0.1, 86400.0)).unwrap_or(Duration::from_secs(30)),
                    max_body_bytes_in_flight: args.max_body_bytes_in_flight,
                    header_read_timeout: Duration::try_from_secs_f64(args.header_read_timeout.clamp(0.1, 86400.0)).unwrap_or(Duration::from_secs(10)),
                    max_connections: args.max_connections.max(1),
                    direct_calls: !args.no_direct_calls,
                },
            )
            .await
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("memory-mcp: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn serve_stdio(server: MemoryServer) -> Result<(), String> {
    let running = server.serve(rmcp::transport::stdio()).await.map_err(|e| e.to_string())?;
    running.waiting().await.map_err(|e| e.to_string())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_names_are_plain_and_cannot_reach_into_the_subject() {
        assert_eq!(clean_client_name("claude-code"), "claude-code");
        assert_eq!(clean_client_name("evil\u{1b}[31m\nagent\u{0}"), "evil[31magent");
        assert_eq!(clean_client_name("good\u{202e}liam\u{200b}\u{2066}"), "goodliam");
        assert_eq!(clean_client_name("unknown:alice"), "unknown_alice");
        assert_eq!(clean_client_name(&"n".repeat(5000)).chars().count(), 100);
        assert_eq!(clean_client_name("Agent \u{00e9}t\u{00e9} \u{6f22}"), "Agent \u{00e9}t\u{00e9} \u{6f22}");
        for blank in ["", "  ", "\u{200b}", "\u{feff}\u{202e}", "\n\t"] {
            assert_eq!(clean_client_name(blank), "unknown", "{blank:?}");
        }
    }
}
