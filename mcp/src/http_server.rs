//! The HTTP face of memory-mcp: streamable HTTP on `/mcp` behind three checks, outermost first:
//!
//! 1. `Origin`: absent, or one of the allowed origins (403 otherwise; DNS rebinding);
//! 2. authorization: a bearer token (401 with `WWW-Authenticate: Bearer resource_metadata=...`
//!    without one or with an invalid one; 403 `insufficient_scope` for a tool beyond its scopes),
//!    unless the server runs `--auth none` on loopback;
//! 3. the session caps: a new session over `--max-sessions` open ones is 503 with `Retry-After`,
//!    over `--max-sessions-per-subject` of the token's subject and org 429 with `Retry-After`;
//!    with `--stateless` (no sessions: each POST answered on its own, in plain JSON) the same caps
//!    bound the requests in flight.
//!
//! and `/.well-known/oauth-protected-resource` (RFC 9728), which needs no token. Past them, with
//! `--stateless`, a `tools/call` that rmcp would take as it is gets answered without rmcp's
//! per-request service ([`direct_call`]); every other request is rmcp's.
//!
//! Before any of them, the connections are bounded (`serve_connections`): request headers within
//! `--header-read-timeout`, which also closes a connection idle between requests, and at most
//! `--max-connections` open; a `POST`'s body must arrive within `--request-body-timeout` (408), and
//! an answer the client leaves unread (a write that makes no progress) that long closes its
//! connection.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::{from_fn_with_state, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use http::{header, HeaderValue, Method, StatusCode, Uri};
use http_body_util::BodyExt;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{json, Value};

use crate::auth::{scope_of, Authenticator, Denied, READ, WRITE};
use crate::MemoryServer;

/// Seconds a client is told to wait when the server holds `--max-sessions` open sessions.
const RETRY_AFTER_SECS: u32 = 5;
/// The largest request body read to find the tool a call names (rmcp's own limit is the same).
const MAX_BODY: usize = 4 * 1024 * 1024;

pub struct HttpOptions {
    pub addr: std::net::SocketAddr,
    /// This server's resource URL (the `aud` of its tokens), e.g. https://mcp.example.com/mcp.
    pub resource: Uri,
    /// The same, as given (the metadata's `resource`, compared with `aud` as a string).
    pub resource_url: String,
    pub allowed_origins: Vec<String>,
    pub auth: Option<Authenticator>,
    pub max_sessions: usize,
    /// With authorization: the most open sessions of one subject and org.
    pub max_sessions_per_subject: usize,
    pub idle_timeout: Duration,
    /// No sessions: rmcp's stateless mode with JSON responses.
    pub stateless: bool,
    /// The longest a POST's body may take to arrive (408 past it).
    pub body_timeout: Duration,
    /// The request bytes that may be in flight at once (bodies read and not yet answered); at least
    /// the largest body.
    pub max_body_bytes_in_flight: usize,
    /// The longest a client may take to send a request's headers, and a connection may stay idle
    /// between requests (closed past it).
    pub header_read_timeout: Duration,
    /// The most open connections; beyond them a new connection waits (in the listen backlog)
    /// until one closes.
    pub max_connections: usize,
    /// --stateless: a `tools/call` rmcp would serve answered by [`direct_call`] (off only to
    /// compare the two paths).
    pub direct_calls: bool,
}

/// Marks a request served without a session (`--stateless`), for the handlers: the client's
/// `initialize` is not known to them.
#[derive(Clone, Copy, Debug)]
pub struct Stateless;

/// An origin as (scheme, host, port), RFC 6454, the port made explicit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Origin(String, String, u16);

impl Origin {
    pub fn parse(s: &str) -> Option<Origin> {
        let uri: Uri = s.parse().ok()?;
        let scheme = uri.scheme_str()?.to_ascii_lowercase();
        let host = uri.host()?.to_ascii_lowercase();
        if !matches!(uri.path(), "" | "/") || uri.query().is_some() || uri.authority()?.as_str().contains('@') {
            return None;
        }
        let port = uri.port_u16().or(match scheme.as_str() {
            "http" => Some(80),
            "https" => Some(443),
            _ => None,
        })?;
        Some(Origin(scheme, host, port))
    }
}

/// The resource URL: absolute (http or https), without query or fragment, a path of plain
/// characters (it names a route of the metadata).
pub fn resource_uri(u: &str) -> Result<Uri, String> {
    let bad = || format!("--resource-url {u}: not an absolute http(s) URL without query (e.g. https://mcp.example.com/mcp)");
    let uri: Uri = u.parse().map_err(|_| bad())?;
    let plain = uri.path().bytes().all(|b| b.is_ascii_alphanumeric() || b"/-._~".contains(&b));
    if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() || uri.query().is_some() || !plain || u.contains('#') {
        return Err(bad());
    }
    Ok(uri)
}

/// The server's own origins: its loopback names on its port, and its resource URL's origin.
pub fn default_origins(port: u16, resource: &Uri) -> Vec<String> {
    let mut v: Vec<String> = ["127.0.0.1", "localhost", "[::1]"].iter().map(|h| format!("http://{h}:{port}")).collect();
    if let (Some(s), Some(a)) = (resource.scheme_str(), resource.authority()) {
        v.push(format!("{s}://{a}"));
    }
    v
}

struct Guard {
    origins: Vec<Origin>,
    allow_null: bool,
    auth: Option<Authenticator>,
    metadata_url: String,
    metadata: Value,
    sessions: Arc<LocalSessionManager>,
    max_sessions: usize,
    max_per_subject: usize,
    /// The caller (subject and org) each session was opened by: another token's requests do not
    /// reach it.
    owners: std::sync::Mutex<HashMap<String, String>>,
    stateless: bool,
    /// --stateless: the requests in flight, and those of each caller (subject and org).
    in_flight: AtomicUsize,
    in_flight_of: std::sync::Mutex<HashMap<String, usize>>,
    body_timeout: Duration,
    /// The bytes of the bodies in flight (--max-body-bytes-in-flight): a body read holds its size
    /// until its request and the tool call it runs are done, since parsing one costs up to ~100
    /// times its size in memory.
    body_bytes: Arc<tokio::sync::Semaphore>,
    max_body_bytes: usize,
}

/// A request body's bytes, held in the budget of bytes in flight (through the request's
/// extensions, which rmcp hands on to the tool call) until the last holder is gone.
#[derive(Clone)]
struct BodyBytes(#[allow(dead_code)] Arc<tokio::sync::OwnedSemaphorePermit>);

/// Holds `len` bytes of the server's budget of body bytes in flight for the request `extensions`
/// belong to, else 503 with Retry-After: a request that would take the budget past its size waits
/// for the client's retry, not in the server's memory.
fn hold_body_bytes(g: &Guard, extensions: &mut http::Extensions, len: usize) -> Result<(), Response> {
    match u32::try_from(len).ok().and_then(|n| g.body_bytes.clone().try_acquire_many_owned(n).ok()) {
        Some(permit) => {
            extensions.insert(BodyBytes(Arc::new(permit)));
            Ok(())
        }
        None => {
            let mut r = json_response(
                StatusCode::SERVICE_UNAVAILABLE,
                json!({"error": "too many request bytes in flight", "error_description": format!(
                    "this server has its maximum of {} request body bytes in flight (--max-body-bytes-in-flight); retry later", g.max_body_bytes)}),
            );
            r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
            Err(r)
        }
    }
}

/// A request counted in flight (`--stateless`): in the server's count (`caller` None) or in its
/// caller's, until the last of its holders is gone: the middleware that counted it (its response
/// produced, or the request dropped) and the request's extensions, which rmcp hands on to the tool
/// call it runs. A client that hangs up does not stop the call it started (it runs on, to its
/// commit), so its place is not freed before the call ends: else dropped requests would pile up
/// calls beyond the caps.
struct InFlight {
    g: Arc<Guard>,
    caller: Option<String>,
}

/// The caller's and the server's places of a request, in its extensions.
#[derive(Clone)]
struct SubjectPlace(#[allow(dead_code)] Arc<InFlight>);
#[derive(Clone)]
struct ServerPlace(#[allow(dead_code)] Arc<InFlight>);

impl Drop for InFlight {
    fn drop(&mut self) {
        match &self.caller {
            None => {
                self.g.in_flight.fetch_sub(1, Ordering::AcqRel);
            }
            Some(c) => {
                let mut m = self.g.in_flight_of.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(n) = m.get_mut(c) {
                    *n -= 1;
                    if *n == 0 {
                        m.remove(c);
                    }
                }
            }
        }
    }
}

fn json_response(status: StatusCode, body: Value) -> Response {
    (status, [(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], body.to_string()).into_response()
}

async fn check_origin(State(g): State<Arc<Guard>>, req: Request, next: Next) -> Response {
    if let Some(o) = req.headers().get(header::ORIGIN) {
        let text = o.to_str().unwrap_or("");
        let ok = if text == "null" { g.allow_null } else { Origin::parse(text).is_some_and(|o| g.origins.contains(&o)) };
        if !ok {
            return json_response(
                StatusCode::FORBIDDEN,
                json!({"error": "forbidden", "error_description": format!("Origin {} is not allowed (--allowed-origin)", text.chars().take(200).collect::<String>())}),
            );
        }
    }
    next.run(req).await
}

/// A header parameter value: no quote or backslash can end it early.
fn quoted(s: &str) -> String {
    s.chars().filter(|c| !c.is_control()).map(|c| if c == '"' || c == '\\' { '\'' } else { c }).take(300).collect()
}

fn unauthorized(g: &Guard, d: Denied) -> Response {
    let mut challenge = format!("Bearer resource_metadata=\"{}\", scope=\"{READ} {WRITE}\"", g.metadata_url);
    let description = match d {
        Denied::Missing => "a bearer token is required".to_string(),
        Denied::Invalid(why) => {
            challenge.push_str(&format!(", error=\"invalid_token\", error_description=\"{}\"", quoted(&why)));
            why
        }
    };
    let mut r = json_response(StatusCode::UNAUTHORIZED, json!({"error": "unauthorized", "error_description": description}));
    if let Ok(v) = HeaderValue::from_str(&challenge) {
        r.headers_mut().insert(header::WWW_AUTHENTICATE, v);
    }
    r
}

/// The tools a JSON-RPC body calls (one message or a batch): of each message, only its `method`
/// and `params.name` are read; everything else is skipped by the parser (serde's `IgnoredAny`), so
/// no tree is built, whatever the body's shape (a 4 MB `[1,1,...]` costs no more than its bytes).
/// The read is lenient: a value of another type than expected is skipped, never an error, so a
/// call is never let through unchecked because its shape is odd. A `tools/call` whose name is not
/// a string (or missing) needs the scope of an unknown tool (`memory:write`); a key given twice is
/// read every time (each name is checked). A body that is not JSON at all is no call: rmcp, which
/// parses with the same serde_json, refuses it.
fn tools_called(body: &[u8]) -> Vec<String> {
    serde_json::from_slice::<Messages>(body).map(|b| b.0).unwrap_or_default()
}

/// A whole body: a message (an object), a batch (an array of them) or any other value (no call).
#[derive(Default)]
struct Messages(Vec<String>);
/// One message: whether its `method` is `tools/call` (any of them, when repeated), and each
/// `params` given: its names (a name that is not a string is None).
#[derive(Default)]
struct Message {
    call: bool,
    params: Vec<Vec<Option<String>>>,
}
/// A `params`: the `name` keys of an object (none for any other value).
#[derive(Default)]
struct Params(Vec<Option<String>>);
/// A string, or None for a value of any other type.
#[derive(Default)]
struct Lenient(Option<String>);

impl Message {
    fn tools(self, out: &mut Vec<String>) {
        if !self.call {
            return;
        }
        // No params, or a params without a name: the call of an unknown tool.
        if self.params.is_empty() {
            out.push(String::new());
        }
        for names in self.params {
            if names.is_empty() {
                out.push(String::new());
            }
            out.extend(names.into_iter().map(Option::unwrap_or_default));
        }
    }
}

/// Visitor methods that accept any scalar as the type's default (`Lenient(None)`, no call, ...)
/// and skip the elements of an array.
macro_rules! lenient_scalars {
    () => {
        fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
        fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
        fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
        fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
    };
}

macro_rules! skip_seq {
    () => {
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
            Ok(Default::default())
        }
    };
}

macro_rules! skip_str {
    () => {
        fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
    };
}

/// An object's key, as far as the reader cares.
enum Key {
    Method,
    Params,
    Name,
    Other,
}

impl<'de> serde::Deserialize<'de> for Key {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Key, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Key;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a key")
            }
            fn visit_str<E: serde::de::Error>(self, k: &str) -> Result<Key, E> {
                Ok(match k {
                    "method" => Key::Method,
                    "params" => Key::Params,
                    "name" => Key::Name,
                    _ => Key::Other,
                })
            }
        }
        d.deserialize_str(V)
    }
}

impl<'de> serde::Deserialize<'de> for Lenient {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Lenient, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Lenient;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("any value")
            }
            lenient_scalars!();
            skip_seq!();
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Lenient, E> {
                Ok(Lenient(Some(v.to_owned())))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Lenient, A::Error> {
                while map.next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?.is_some() {}
                Ok(Lenient(None))
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de> serde::Deserialize<'de> for Params {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Params, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Params;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("any value")
            }
            lenient_scalars!();
            skip_seq!();
            skip_str!();
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Params, A::Error> {
                let mut names = vec![];
                while let Some(k) = map.next_key::<Key>()? {
                    match k {
                        Key::Name => names.push(map.next_value::<Lenient>()?.0),
                        _ => {
                            map.next_value::<serde::de::IgnoredAny>()?;
                        }
                    }
                }
                Ok(Params(names))
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de> serde::Deserialize<'de> for Message {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Message, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Message;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("any value")
            }
            lenient_scalars!();
            skip_seq!();
            skip_str!();
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Message, A::Error> {
                let mut m = Message::default();
                while let Some(k) = map.next_key::<Key>()? {
                    match k {
                        Key::Method => m.call |= map.next_value::<Lenient>()?.0.as_deref() == Some("tools/call"),
                        Key::Params => m.params.push(map.next_value::<Params>()?.0),
                        _ => {
                            map.next_value::<serde::de::IgnoredAny>()?;
                        }
                    }
                }
                Ok(m)
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de> serde::Deserialize<'de> for Messages {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Messages, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Messages;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON-RPC message or batch")
            }
            lenient_scalars!();
            skip_str!();
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Messages, A::Error> {
                // Each message is read and dropped in turn: only the names of calls are kept.
                let mut out = vec![];
                while let Some(m) = seq.next_element::<Message>()? {
                    m.tools(&mut out);
                }
                Ok(Messages(out))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Messages, A::Error> {
                let mut out = vec![];
                <Message as serde::Deserialize>::deserialize(serde::de::value::MapAccessDeserializer::new(map))?.tools(&mut out);
                Ok(Messages(out))
            }
        }
        d.deserialize_any(V)
    }
}

fn insufficient_scope(g: &Guard, need: &str, why: String) -> Response {
    let challenge = format!("Bearer error=\"insufficient_scope\", scope=\"{need}\", resource_metadata=\"{}\"", g.metadata_url);
    let mut r = json_response(StatusCode::FORBIDDEN, json!({"error": "insufficient_scope", "error_description": why}));
    if let Ok(v) = HeaderValue::from_str(&challenge) {
        r.headers_mut().insert(header::WWW_AUTHENTICATE, v);
    }
    r
}

/// The token's check, then the caps: one middleware (each layer costs a request a copy of the
/// service it wraps and a future of its own).
async fn authorize_and_cap(State(g): State<Arc<Guard>>, req: Request, next: Next) -> Response {
    authorize(g, req, next).await
}

/// The token's check; the request then goes on to the caps (cap_sessions).
async fn authorize(g: Arc<Guard>, mut req: Request, next: Next) -> Response {
    let Some(auth) = &g.auth else {
        // No token to check: the body is read by cap_sessions, once the request holds its place.
        return cap_sessions(g.clone(), req, next).await;
    };
    let bearer = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, t)| t.trim().to_string())
        .filter(|t| !t.is_empty());
    let principal = match bearer {
        None => return unauthorized(&g, Denied::Missing),
        Some(t) => match auth.check(&t).await {
            Ok(p) => p,
            Err(d) => return unauthorized(&g, d),
        },
    };
    // A session belongs to the caller that opened it (the same subject and org).
    let caller = format!("{}\u{0}{}", principal.sub, principal.org);
    // --stateless: no sessions, so the caller's requests in flight are capped instead, counted
    // from here (a body still arriving counts) to the end of the tool call (the server's, by
    // cap_sessions, once the body is read: one subject's slow bodies hold only its own places).
    let _flight = if g.stateless {
        let mut m = g.in_flight_of.lock().unwrap_or_else(|p| p.into_inner());
        let n = m.entry(caller.clone()).or_insert(0);
        if *n >= g.max_per_subject {
            drop(m);
            return too_many_of_subject(&g);
        }
        *n += 1;
        drop(m);
        let place = Arc::new(InFlight { g: g.clone(), caller: Some(caller.clone()) });
        req.extensions_mut().insert(SubjectPlace(place.clone()));
        Some(place)
    } else {
        None
    };
    if req.method() == Method::POST {
        let (mut parts, body) = req.into_parts();
        let bytes = match read_body(body, g.body_timeout).await {
            Ok(b) => b,
            Err(r) => return r,
        };
        if let Err(r) = hold_body_bytes(&g, &mut parts.extensions, bytes.len()) {
            return r;
        }
        for tool in tools_called(&bytes) {
            let need = scope_of(&tool);
            if !principal.scopes.contains(need) {
                return insufficient_scope(&g, need, format!("tool {} needs scope {need}", quoted(&tool)));
            }
        }
        req = Request::from_parts(parts, Body::from(bytes));
    }
    if !principal.scopes.contains(READ) && !principal.scopes.contains(WRITE) {
        return insufficient_scope(&g, READ, format!("the token has neither {READ} nor {WRITE}"));
    }
    if g.stateless {
        req.extensions_mut().insert(principal);
        return cap_sessions(g.clone(), req, next).await;
    }
    let session = req.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()).map(str::to_string);
    if let Some(sid) = &session {
        let owner = g.owners.lock().unwrap_or_else(|p| p.into_inner()).get(sid).cloned();
        if owner.is_some_and(|o| o != caller) {
            return json_response(StatusCode::NOT_FOUND, json!({"error": "session not found"}));
        }
    }
    if session.is_none() && req.method() == Method::POST {
        // A new session: at most --max-sessions-per-subject open ones for this subject and org.
        let open: std::collections::HashSet<String> = g.sessions.sessions.read().await.keys().map(|k| k.to_string()).collect();
        let mut owners = g.owners.lock().unwrap_or_else(|p| p.into_inner());
        owners.retain(|k, _| open.contains(k));
        if owners.values().filter(|c| **c == caller).count() >= g.max_per_subject {
            return too_many_of_subject(&g);
        }
    }
    req.extensions_mut().insert(principal);
    let resp = cap_sessions(g.clone(), req, next).await;
    if session.is_none() {
        if let Some(sid) = resp.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()) {
            g.owners.lock().unwrap_or_else(|p| p.into_inner()).insert(sid.to_string(), caller);
        }
    }
    resp
}

/// A request's body, read whole (for the scope check) within `timeout` and [`MAX_BODY`]: else the
/// answer, 408 past the timeout (a body that never finishes would hold its subject's places for
/// ever), 413 over the limit, 400 when the body cannot be read (the client's stream broke off or
/// is malformed). The connection is closed after an answer that leaves a body unread. The body is
/// copied into one buffer of its declared length as its pieces arrive (collecting the pieces and
/// then joining them held it twice).
async fn read_body<B>(body: B, timeout: Duration) -> Result<Bytes, Response>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let refused = |status, body| {
        let mut r = json_response(status, body);
        r.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
        r
    };
    enum Unread {
        TooLarge,
        Broken,
    }
    let read = async {
        let declared = http_body::Body::size_hint(&body).lower();
        if declared > MAX_BODY as u64 {
            return Err(Unread::TooLarge);
        }
        let mut buf = bytes::BytesMut::with_capacity(declared as usize);
        let mut body = std::pin::pin!(body);
        while let Some(frame) = body.frame().await {
            if let Ok(data) = frame.map_err(|_| Unread::Broken)?.into_data() {
                if buf.len() + data.len() > MAX_BODY {
                    return Err(Unread::TooLarge);
                }
                buf.extend_from_slice(&data);
            }
        }
        Ok(buf.freeze())
    };
    match tokio::time::timeout(timeout, read).await {
        Ok(Ok(b)) => Ok(b),
        Ok(Err(Unread::TooLarge)) => Err(refused(
            StatusCode::PAYLOAD_TOO_LARGE,
            json!({"error": "request body too large", "error_description": format!("a request body is at most {MAX_BODY} bytes")}),
        )),
        Ok(Err(Unread::Broken)) => Err(refused(StatusCode::BAD_REQUEST, json!({"error": "bad request", "error_description": "the request body could not be read"}))),
        Err(_) => Err(refused(
            StatusCode::REQUEST_TIMEOUT,
            json!({"error": "request timeout", "error_description": format!(
                "the request body did not arrive within {} s (--request-body-timeout)", timeout.as_secs_f64())}),
        )),
    }
}

fn too_many_of_subject(g: &Guard) -> Response {
    let mut r = if g.stateless {
        json_response(
            StatusCode::TOO_MANY_REQUESTS,
            json!({"error": "too many requests in flight for this subject", "error_description": format!(
                "the token's subject has its maximum of {} requests in flight (--max-sessions-per-subject); retry later",
                g.max_per_subject)}),
        )
    } else {
        json_response(
            StatusCode::TOO_MANY_REQUESTS,
            json!({"error": "too many open sessions for this subject", "error_description": format!(
                "the token's subject holds its maximum of {} open sessions (--max-sessions-per-subject); close one (HTTP DELETE) or retry later",
                g.max_per_subject)}),
        )
    };
    r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
    r
}

/// Without an authenticator (which reads a POST's body for the scope check, within the timeout),
/// the body is read here within --request-body-timeout all the same: a body that never finishes
/// would hold its connection, and with --stateless a place of --max-sessions, for ever.
async fn body_in_time(g: &Guard, req: Request) -> Result<Request, Response> {
    if g.auth.is_some() || req.method() != Method::POST {
        return Ok(req);
    }
    let (mut parts, body) = req.into_parts();
    let bytes = read_body(body, g.body_timeout).await?;
    hold_body_bytes(g, &mut parts.extensions, bytes.len())?;
    Ok(Request::from_parts(parts, Body::from(bytes)))
}

async fn cap_sessions(g: Arc<Guard>, mut req: Request, next: Next) -> Response {
    if g.stateless {
        // No sessions: at most --max-sessions requests in flight (the place held by the tool call
        // too, through the request's extensions).
        let place = Arc::new(InFlight { g: g.clone(), caller: None });
        if g.in_flight.fetch_add(1, Ordering::AcqRel) >= g.max_sessions {
            let mut r = json_response(
                StatusCode::SERVICE_UNAVAILABLE,
                json!({"error": "too many requests in flight", "error_description": format!(
                    "this server has its maximum of {} requests in flight (--max-sessions); retry later", g.max_sessions)}),
            );
            r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
            return r;
        }
        req.extensions_mut().insert(Stateless);
        req.extensions_mut().insert(ServerPlace(place));
        return match body_in_time(&g, req).await {
            Ok(req) => next.run(req).await,
            Err(r) => r,
        };
    }
    let req = match body_in_time(&g, req).await {
        Ok(req) => req,
        Err(r) => return r,
    };
    let opens_session = req.method() == Method::POST && !req.headers().contains_key("mcp-session-id");
    if opens_session && g.sessions.sessions.read().await.len() >= g.max_sessions {
        let mut r = json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            json!({"error": "too many open sessions", "error_description": format!(
                "this server holds its maximum of {} open sessions (--max-sessions); retry later, or close sessions (HTTP DELETE)", g.max_sessions)}),
        );
        r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
        return r;
    }
    next.run(req).await
}

async fn metadata(State(g): State<Arc<Guard>>) -> Response {
    json_response(StatusCode::OK, g.metadata.clone())
}

/// Serves HTTP with one worker thread per server of `servers` (each with its own database pool):
/// every worker runs a single-threaded event loop that accepts connections from the one listening
/// socket and serves them whole, so a request, the tool call it makes and its database I/O never
/// pass between threads. The checks, the caps (sessions, requests in flight, connections) and the
/// sessions themselves are shared by all workers.
pub async fn serve(servers: Vec<MemoryServer>, o: HttpOptions) -> Result<(), String> {
    let mut origins = vec![];
    let mut allow_null = false;
    for s in &o.allowed_origins {
        if s == "null" {
            allow_null = true;
        } else {
            origins.push(Origin::parse(s).ok_or_else(|| format!("--allowed-origin {s}: not an origin (scheme://host[:port])"))?);
        }
    }
    let mut manager = LocalSessionManager::default();
    manager.session_config.keep_alive = Some(o.idle_timeout);
    let sessions = Arc::new(manager);
    let resource = o.resource_url.clone();
    let (scheme, authority) = (o.resource.scheme_str().unwrap_or("http"), o.resource.authority().map(|a| a.as_str()).unwrap_or(""));
    let path = o.resource.path().trim_end_matches('/');
    let metadata_url = format!("{scheme}://{authority}/.well-known/oauth-protected-resource{path}");
    let mut meta = json!({
        "resource": resource,
        "resource_name": "memory-mcp",
        "scopes_supported": [READ, WRITE],
        "bearer_methods_supported": ["header"],
    });
    if let Some(iss) = o.auth.as_ref().and_then(Authenticator::issuer) {
        meta["authorization_servers"] = json!([iss]);
    }
    let mut hosts: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "::1".into()];
    if let Some(h) = o.resource.host() {
        hosts.push(h.trim_start_matches('[').trim_end_matches(']').to_string());
    }
    let guard = Arc::new(Guard {
        origins,
        allow_null,
        auth: o.auth,
        metadata_url,
        metadata: meta,
        sessions: sessions.clone(),
        max_sessions: o.max_sessions,
        max_per_subject: o.max_sessions_per_subject,
        owners: Default::default(),
        stateless: o.stateless,
        in_flight: AtomicUsize::new(0),
        in_flight_of: Default::default(),
        body_timeout: o.body_timeout,
        body_bytes: Arc::new(tokio::sync::Semaphore::new(o.max_body_bytes_in_flight.max(MAX_BODY))),
        max_body_bytes: o.max_body_bytes_in_flight.max(MAX_BODY),
    });
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(hosts.clone())
        .with_legacy_session_mode(!o.stateless)
        .with_json_response(o.stateless);
    // One app a worker: the same checks and caps (the guard, the sessions), the worker's own server.
    let app = |server: MemoryServer| {
        let direct = (o.stateless && o.direct_calls).then(|| Arc::new(Direct { server: server.clone(), allowed_hosts: hosts.clone() }));
        let service = Shared(Arc::new(StreamableHttpService::new(move || Ok(server.clone()), sessions.clone(), config.clone())), direct);
        let mcp = Router::new()
            .nest_service("/mcp", service)
            .layer(from_fn_with_state(guard.clone(), authorize_and_cap));
        let mut well_known = Router::new().route("/.well-known/oauth-protected-resource", get(metadata));
        if !path.is_empty() {
            well_known = well_known.route(&format!("/.well-known/oauth-protected-resource{path}"), get(metadata));
        }
        let well_known = well_known.with_state(guard.clone());
        mcp.merge(well_known).layer(from_fn_with_state(guard.clone(), check_origin))
    };
    let addr = o.addr;
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let listener = listener.into_std().map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let limits = ConnectionLimits { header_read_timeout: o.header_read_timeout, max_connections: o.max_connections, write_timeout: o.body_timeout };
    let places = Arc::new(tokio::sync::Semaphore::new(limits.max_connections.max(1)));
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let (ended_tx, mut ended) = tokio::sync::mpsc::unbounded_channel::<Result<(), String>>();
    let mut workers = vec![];
    for (i, server) in servers.into_iter().enumerate() {
        let listener = listener.try_clone().map_err(|e| format!("cannot listen on {addr}: {e}"))?;
        let (app, places, mut stopped, ended_tx) = (app(server), places.clone(), stopped.clone(), ended_tx.clone());
        let worker = std::thread::Builder::new().name(format!("memory-mcp-http-{i}")).spawn(move || {
            // A worker that ends (a panic included) ends the server: the others are stopped.
            let ended = Ended(Some(ended_tx));
            let served = (|| {
                let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| format!("cannot start an HTTP worker: {e}"))?;
                rt.block_on(async move {
                    let listener = tokio::net::TcpListener::from_std(listener).map_err(|e| format!("cannot listen on {addr}: {e}"))?;
                    serve_connections(listener, app, places, limits, async move {
                        let _ = stopped.wait_for(|s| *s).await;
                    })
                    .await;
                    Ok(())
                })
            })();
            ended.send(served);
        });
        workers.push(worker.map_err(|e| format!("cannot start an HTTP worker: {e}"))?);
    }
    drop((listener, ended_tx));
    let mode = if o.stateless { ", stateless" } else { "" };
    eprintln!("memory-mcp: serving streamable HTTP on http://{addr}/mcp (resource {resource}{mode}, {} workers)", workers.len());
    // Until SIGINT, or a worker that could not serve (then the others are stopped too).
    let failed = tokio::select! {
        _ = tokio::signal::ctrl_c() => None,
        e = ended.recv() => e.and_then(Result::err),
    };
    let _ = stop.send(true);
    let mut result = failed.map_or(Ok(()), Err);
    for _ in 0..workers.len() {
        if let Some(Err(e)) = ended.recv().await {
            result = result.and(Err(e));
        }
    }
    result
}

/// Tells the server that an HTTP worker ended, and how: sent by the worker, or on its drop (a
/// panic unwinding the worker's thread).
struct Ended(Option<tokio::sync::mpsc::UnboundedSender<Result<(), String>>>);

impl Ended {
    fn send(mut self, how: Result<(), String>) {
        if let Some(tx) = self.0.take() {
            let _ = tx.send(how);
        }
    }
}

impl Drop for Ended {
    fn drop(&mut self) {
        if let Some(tx) = self.0.take() {
            let _ = tx.send(Err("an HTTP worker stopped unexpectedly".into()));
        }
    }
}

/// rmcp's service, shared by the requests it serves: the router hands each request a copy of its
/// service, and rmcp's own copies itself again (its configuration, the allowed hosts' strings
/// included), twice a request; this one copies a pointer. With `--stateless`, a POST that is one
/// `tools/call` rmcp would serve is answered by [`direct_call`] instead (`Direct`).
#[derive(Clone)]
struct Shared(Arc<StreamableHttpService<MemoryServer, LocalSessionManager>>, Option<Arc<Direct>>);

/// What the direct stateless path needs: the worker's server and rmcp's allowed hosts (the same
/// list rmcp's configuration is given).
struct Direct {
    server: MemoryServer,
    allowed_hosts: Vec<String>,
}

impl tower_service::Service<Request> for Shared {
    type Response = Response;
    type Error = std::convert::Infallible;
    type Future = std::pin::Pin<Box<dyn std::future::Future<Output = Result<Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request) -> Self::Future {
        let (service, direct) = (self.0.clone(), self.1.clone());
        Box::pin(async move {
            let req = match direct {
                Some(d) if req.method() == Method::POST => match direct_call(&d, req).await {
                    Ok(answered) => return Ok(answered),
                    Err(req) => req,
                },
                _ => req,
            };
            Ok(service.handle(req).await.map(Body::new))
        })
    }
}

/// rmcp's `normalize_host` (streamable_http_server/tower.rs:1068).
fn normalize_host(host: &str) -> String {
    host.trim_matches('[').trim_matches(']').to_ascii_lowercase()
}

/// rmcp's `parse_allowed_authority` and `host_is_allowed` (tower.rs:1087, 1100): a host and an
/// optional port; an allowed entry without a port allows any.
fn host_is_allowed(host: &str, port: Option<u16>, allowed_hosts: &[String]) -> bool {
    if allowed_hosts.is_empty() {
        return true;
    }
    allowed_hosts.iter().any(|allowed| {
        let allowed = allowed.trim();
        if allowed.is_empty() {
            return false;
        }
        let (h, p) = match http::uri::Authority::try_from(allowed) {
            Ok(a) => (normalize_host(a.host()), a.port_u16()),
            Err(_) => (normalize_host(allowed), None),
        };
        h == host && p.is_none_or(|p| port == Some(p))
    })
}

/// rmcp's `split_unquoted` (tower.rs:59).
fn split_unquoted(value: &str, delimiter: char) -> impl Iterator<Item = &str> {
    let mut quoted = false;
    let mut escaped = false;
    value.split(move |character| {
        if escaped {
            escaped = false;
        } else if quoted && character == '\\' {
            escaped = true;
        } else if character == '"' {
            quoted = !quoted;
        } else if !quoted && character == delimiter {
            return true;
        }
        false
    })
}

/// rmcp's `accepted_media_types` (tower.rs:77).
fn accepted_media_types(headers: &http::HeaderMap) -> impl Iterator<Item = &str> {
    headers.get_all(header::ACCEPT).iter().filter_map(|value| value.to_str().ok()).flat_map(|value| split_unquoted(value, ',')).filter_map(|entry| {
        let mut parts = split_unquoted(entry, ';');
        let essence = parts.next()?.trim();
        parts
            .all(|parameter| {
                let Some((name, value)) = parameter.split_once('=') else {
                    return true;
                };
                !name.trim().eq_ignore_ascii_case("q") || quality_is_acceptable(value.trim())
            })
            .then_some(essence)
    })
}

/// rmcp's `quality_is_acceptable` (tower.rs:101).
fn quality_is_acceptable(quality: &str) -> bool {
    let (whole, fraction) = quality.split_once('.').unwrap_or((quality, ""));
    if fraction.len() > 3 || !fraction.bytes().all(|digit| digit.is_ascii_digit()) {
        return true;
    }
    whole != "0" || fraction.bytes().any(|digit| digit != b'0')
}

/// Whether rmcp's stateless POST (tower.rs: `handle` 1955, `handle_post` 2129, its stateless
/// branch 2376) would take this request's headers and hand the request on to its handler without
/// an error: the Host allowed, no Origin (rmcp's own Origin check is left to rmcp), Accept with
/// both JSON and SSE, Content-Type JSON, and an MCP-Protocol-Version absent or a version rmcp knows
/// that is older than 2026-07-28 (from which rmcp checks the SEP-2243 headers and the request's
/// `_meta`). Anything else is rmcp's to answer.
fn headers_as_rmcp_takes_them(h: &http::HeaderMap, allowed_hosts: &[String]) -> bool {
    use rmcp::model::ProtocolVersion;
    // Host (tower.rs:1313 parse_host_header, 1340 validate_dns_rebinding_headers); a request
    // without one (rmcp then reads the URI's authority) is left to rmcp.
    let host_ok = h
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| http::uri::Authority::try_from(v).ok())
        .is_some_and(|a| host_is_allowed(&normalize_host(a.host()), a.port_u16(), allowed_hosts));
    // Origin (tower.rs:1357 validate_origin_header): left to rmcp whenever one is sent.
    let no_origin = !h.contains_key(header::ORIGIN);
    // Accept (tower.rs:2135-2146).
    let (mut json, mut sse) = (false, false);
    for essence in accepted_media_types(h) {
        json |= essence.eq_ignore_ascii_case("application/json");
        sse |= essence.eq_ignore_ascii_case("text/event-stream");
    }
    // Content-Type (tower.rs:2149-2169).
    let content_type_ok = h.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).is_some_and(|v| {
        let essence = v.split_once(';').map_or(v, |(essence, _)| essence);
        essence.trim().eq_ignore_ascii_case("application/json")
    });
    // MCP-Protocol-Version (tower.rs:434 validate_protocol_version_header, 990
    // validate_standard_headers, 671 validate_request_protocol_version_meta).
    let version_ok = match h.get("mcp-protocol-version") {
        None => true,
        Some(v) => v.to_str().is_ok_and(|v| {
            v < ProtocolVersion::V_2026_07_28.as_str() && v < ProtocolVersion::STANDARD_HEADERS.as_str() && ProtocolVersion::KNOWN_VERSIONS.iter().any(|k| k.as_str() == v)
        }),
    };
    host_ok && no_origin && json && sse && content_type_ok && version_ok
}

/// A `--stateless` POST answered without rmcp's per-request machinery (its one-shot transport,
/// service loop, tasks and channels), when it is exactly a request rmcp would take and hand to
/// `call_tool`: the headers as [`headers_as_rmcp_takes_them`], and a body that rmcp's own message
/// type reads as ONE JSON-RPC request `tools/call` without a protocol version in its `_meta`
/// (one with it is negotiated per request: tower.rs:2412). Everything else, errors included, goes
/// on to rmcp unchanged (`Err`, the request rebuilt). The call is the one rmcp's `call_tool` makes
/// ([`MemoryServer::call`], the same plain values: the tool's name and arguments, the request's
/// principal, the client named by its `_meta`), run as its own task as rmcp runs a handler (a
/// client that hangs up does not stop it; the request's places in flight are held until it ends),
/// and its answer is rmcp's: the result with rmcp's legacy-peer shaping (handler/server.rs:308-325),
/// or the error, as a JSON-RPC message, 200 `application/json` (tower.rs:2472-2483).
async fn direct_call(d: &Direct, req: Request) -> Result<Response, Request> {
    use rmcp::model::{CallToolResponse, ServerJsonRpcMessage, ServerResult};
    if !headers_as_rmcp_takes_them(req.headers(), &d.allowed_hosts) {
        return Err(req);
    }
    let (parts, body) = req.into_parts();
    // The body has been read whole (and within MAX_BODY, rmcp's limit too) by authorize or
    // body_in_time: here it is one buffer.
    let bytes = match body.collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return Ok(rmcp_internal_error("read request body", e)),
    };
    let Some((id, params, client)) = call_rmcp_would_serve(&bytes) else {
        return Err(Request::from_parts(parts, Body::from(bytes)));
    };
    let server = d.server.clone();
    let task = tokio::spawn(async move {
        let principal = parts.extensions.get::<crate::auth::Principal>();
        let args = params.arguments.unwrap_or_default();
        let result = server.call(&params.name, &args, principal, &client).await;
        // The request's parts (its places in flight) are held until the call ends.
        drop(parts);
        result
    });
    let message = match task.await {
        Ok(Ok(result)) => {
            let mut result = ServerResult::from(CallToolResponse::from(result));
            result.strip_result_type_for_legacy_peer();
            result.strip_non_object_output_for_legacy_peer();
            ServerJsonRpcMessage::response(result, id)
        }
        Ok(Err(error)) => ServerJsonRpcMessage::error(error, Some(id)),
        // A handler that panicked sends rmcp no message (tower.rs:2455-2470).
        Err(_) => return Ok(rmcp_internal_error("empty response", "no response message received from handler")),
    };
    match serde_json::to_vec(&message) {
        Ok(body) => Ok((StatusCode::OK, [(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], body).into_response()),
        Err(e) => Ok(rmcp_internal_error("serialize json response", e)),
    }
}

/// The `tools/call` of a body, when rmcp's own message type reads it (server_side_http.rs:256
/// expect_json) as ONE JSON-RPC request `tools/call` without a protocol version in its `_meta`:
/// its id, its parameters and the client its `_meta` names (as rmcp's context gives them to
/// `call_tool`: handler/server.rs, service.rs:1653-1665). None for anything else.
fn call_rmcp_would_serve(body: &[u8]) -> Option<(rmcp::model::RequestId, rmcp::model::CallToolRequestParams, String)> {
    use rmcp::model::{ClientJsonRpcMessage, ClientRequest, GetMeta, JsonRpcRequest};
    // Any other message (a ping, tools/list, initialize) is not parsed twice: a body without the
    // bytes `tools/call` (a method spelled with escapes included) goes to rmcp straight away.
    if !body.windows(10).any(|w| w == b"tools/call") {
        return None;
    }
    let Ok(ClientJsonRpcMessage::Request(JsonRpcRequest { id, request: call @ ClientRequest::CallToolRequest(_), .. })) = serde_json::from_slice::<ClientJsonRpcMessage>(body) else {
        return None;
    };
    if call.get_meta().protocol_version().is_some() {
        return None;
    }
    let client = crate::stateless_client_name(call.get_meta());
    let ClientRequest::CallToolRequest(call) = call else { return None };
    Some((id, call.params, client))
}

/// rmcp's `internal_error_response` (transport/common/server_side_http.rs:181): its text, and no
/// Content-Type (a `(StatusCode, String)` answer would add `text/plain`).
fn rmcp_internal_error(context: &str, error: impl std::fmt::Display) -> Response {
    let mut r = Response::new(Body::from(format!("Encounter an error when {context}: {error}")));
    *r.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
    r
}

/// What bounds the server's connections (axum::serve sets no timeout and no cap).
#[derive(Clone, Copy)]
pub struct ConnectionLimits {
    pub header_read_timeout: Duration,
    pub max_connections: usize,
    /// The longest a write to the client may wait (its answer unread, the socket's buffers full):
    /// past it the connection is closed ([`WriteDeadline`]).
    pub write_timeout: Duration,
}

/// A connection's socket whose writes cannot wait for ever: hyper sets no time on writing an
/// answer, so a client that sends requests with large answers (a search's items) and never reads
/// them would hold its connection, its place of `--max-connections` and the answer's bytes for as
/// long as it stays connected. A write (or flush) that makes no progress for `timeout` fails
/// instead, and hyper closes the connection. Reads are left as they are (the header and body
/// timeouts bound them).
struct WriteDeadline<T> {
    io: T,
    timeout: Duration,
    /// Armed while a write waits, from its first wait; disarmed by any progress.
    stalled: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
}

impl<T> WriteDeadline<T> {
    fn waited<R>(&mut self, cx: &mut std::task::Context<'_>, r: std::task::Poll<std::io::Result<R>>) -> std::task::Poll<std::io::Result<R>> {
        use std::future::Future;
        use std::task::Poll;
        if r.is_ready() {
            self.stalled = None;
            return r;
        }
        let timeout = self.timeout;
        let stalled = self.stalled.get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        if stalled.as_mut().poll(cx).is_ready() {
            self.stalled = None;
            return Poll::Ready(Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "the client did not read its answer in time")));
        }
        Poll::Pending
    }
}

impl<T: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for WriteDeadline<T> {
    fn poll_read(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>, buf: &mut tokio::io::ReadBuf<'_>) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for WriteDeadline<T> {
    fn poll_write(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>, buf: &[u8]) -> std::task::Poll<std::io::Result<usize>> {
        let r = std::pin::Pin::new(&mut self.io).poll_write(cx, buf);
        self.waited(cx, r)
    }
    fn poll_write_vectored(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>, bufs: &[std::io::IoSlice<'_>]) -> std::task::Poll<std::io::Result<usize>> {
        let r = std::pin::Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.waited(cx, r)
    }
    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
    fn poll_flush(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<std::io::Result<()>> {
        let r = std::pin::Pin::new(&mut self.io).poll_flush(cx);
        self.waited(cx, r)
    }
    fn poll_shutdown(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<std::io::Result<()>> {
        let r = std::pin::Pin::new(&mut self.io).poll_shutdown(cx);
        self.waited(cx, r)
    }
}

/// Serves `app` on the connections of `listener` (HTTP/1.1) until `shutdown`, then waits for the
/// open connections to finish their requests (graceful shutdown, as axum::serve does). Each
/// connection: its request headers must arrive within `header_read_timeout`, and while it is idle
/// between requests (keep-alive) the same timer runs, so a half-sent request or an idle
/// connection is closed then (hyper starts the header timer when it waits for a request's head).
/// At most `max_connections` are open (`places` holds them, shared by the workers that accept
/// from the same socket: each takes a place before it accepts): the next is accepted once one
/// closes (it waits in the listen backlog meanwhile), so held connections cannot take the
/// process's file descriptors.
pub async fn serve_connections(
    listener: tokio::net::TcpListener,
    app: Router,
    places: Arc<tokio::sync::Semaphore>,
    limits: ConnectionLimits,
    shutdown: impl std::future::Future<Output = ()>,
) {
    use hyper_util::rt::{TokioIo, TokioTimer};
    // hyper arms a header-read timer after every response. Tokio's timer wheel wakes its event
    // loop (a write to its eventfd, and one more return from epoll_wait) whenever a timer armed is
    // the earliest of all, as each such timer is when none other is armed (while a call waits on
    // the database): a timer that is always armed and always earlier spares every request that.
    let tick = (limits.header_read_timeout / 2).min(Duration::from_secs(1)).max(Duration::from_millis(10));
    let ticker = tokio::spawn(async move {
        let mut every = tokio::time::interval(tick);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
        }
    });
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut http1 = hyper::server::conn::http1::Builder::new();
    http1.timer(TokioTimer::new()).header_read_timeout(limits.header_read_timeout).keep_alive(true);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let place = tokio::select! {
            p = places.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
            _ = &mut shutdown => break,
        };
        let tcp = tokio::select! {
            r = listener.accept() => match r {
                Ok((tcp, _)) => tcp,
                Err(e) => {
                    // Out of file descriptors and the like: wait a little rather than spin; a
                    // connection reset before it was accepted is nothing.
                    if !matches!(e.kind(), std::io::ErrorKind::ConnectionAborted | std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::ConnectionRefused) {
                        eprintln!("memory-mcp: accept: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        // TCP_NODELAY: a response is written in pieces (headers, then each SSE event); with Nagle's
        // algorithm the last piece waits for the client's delayed ACK (tens of milliseconds a call).
        let _ = tcp.set_nodelay(true);
        let service = hyper_util::service::TowerToHyperService::new(app.clone());
        let io = WriteDeadline { io: tcp, timeout: limits.write_timeout, stalled: None };
        let conn = graceful.watch(http1.serve_connection(TokioIo::new(io), service));
        tokio::spawn(async move {
            let _ = conn.await;
            drop(place);
        });
    }
    drop(listener);
    graceful.shutdown().await;
    ticker.abort();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard_with_budget(bytes: usize) -> Guard {
        Guard {
            origins: vec![],
            allow_null: false,
            auth: None,
            metadata_url: String::new(),
            metadata: Value::Null,
            sessions: Arc::new(LocalSessionManager::default()),
            max_sessions: 1,
            max_per_subject: 1,
            owners: Default::default(),
            stateless: true,
            in_flight: AtomicUsize::new(0),
            in_flight_of: Default::default(),
            body_timeout: Duration::from_secs(1),
            body_bytes: Arc::new(tokio::sync::Semaphore::new(bytes)),
            max_body_bytes: bytes,
        }
    }

    #[test]
    fn body_bytes_in_flight_are_held_until_the_request_is_done() {
        let g = guard_with_budget(MAX_BODY);
        let mut first = http::Extensions::new();
        assert!(hold_body_bytes(&g, &mut first, MAX_BODY - 10).is_ok());
        // The request's extensions hand the hold on (rmcp gives them to the tool call): a copy keeps it.
        let handed_on = first.clone();
        drop(first);
        let mut second = http::Extensions::new();
        let refused = hold_body_bytes(&g, &mut second, 11).expect_err("past the budget");
        assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(refused.headers().get(header::RETRY_AFTER), Some(&HeaderValue::from(RETRY_AFTER_SECS)));
        assert!(second.get::<BodyBytes>().is_none());
        assert!(hold_body_bytes(&g, &mut second, 10).is_ok(), "what is left of the budget is taken");
        drop(handed_on);
        let mut third = http::Extensions::new();
        assert!(hold_body_bytes(&g, &mut third, MAX_BODY - 10).is_ok(), "released with the last holder");
        assert!(hold_body_bytes(&g, &mut http::Extensions::new(), usize::MAX).is_err(), "more than a u32 is refused, not wrapped");
    }

    #[test]
    fn origins_compare_by_scheme_host_and_port() {
        assert_eq!(Origin::parse("http://LOCALHOST:8765"), Origin::parse("http://localhost:8765"));
        assert_eq!(Origin::parse("https://app.example"), Origin::parse("https://app.example:443"));
        assert_ne!(Origin::parse("http://app.example"), Origin::parse("https://app.example"));
        assert_eq!(Origin::parse("http://[::1]:80"), Some(Origin("http".into(), "[::1]".into(), 80)));
        for bad in ["evil", "", "http://a.example/path", "http://user@a.example", "ftp://a.example"] {
            assert_eq!(Origin::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn resource_urls() {
        for ok in ["https://mcp.example.com/mcp", "http://127.0.0.1:8765/mcp", "https://mcp.example.com", "https://h/a-b/c_d.e~"] {
            assert!(resource_uri(ok).is_ok(), "{ok}");
        }
        for bad in ["mcp.example.com/mcp", "ftp://h/mcp", "https://h/mcp?x=1", "https://h/{x}", "https://h/*rest", "https://h/mcp#f", "/mcp"] {
            assert!(resource_uri(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_tools_a_body_calls() {
        assert_eq!(tools_called(br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"remember"}}"#), ["remember"]);
        assert_eq!(tools_called(br#"[{"method":"tools/list"},{"method":"tools/call","params":{"name":"forget"}}]"#), ["forget"]);
        assert!(tools_called(b"not json").is_empty());
    }

    #[test]
    fn the_tools_of_odd_bodies() {
        // Escapes are decoded as rmcp decodes them: the scope checked is the tool's that runs.
        assert_eq!(tools_called(br#"{"method":"tools/call","params":{"name":"re\u006dember","arguments":{"content":"a \"b\""}}}"#), ["remember"]);
        assert_eq!(tools_called(br#"{"method":"tools/call","params":{"arguments":{"name":"recall"},"name":"forget"}}"#), ["forget"]);
        // Shapes the typed read refuses are read loosely: a call is never let through unnamed.
        assert_eq!(tools_called(br#"{"method":"tools/call","params":{"name":7}}"#), [""]);
        assert_eq!(tools_called(br#"[{"method":"tools/call","params":"remember"},{"method":"ping"}]"#), [""]);
        assert!(tools_called(br#"{"method":"ping","id":1}"#).is_empty());
    }

    #[test]
    fn the_lenient_reader_reads_every_shape_without_a_tree() {
        // Values of other types than a message's are skipped, at any depth, never an error.
        assert!(tools_called(b"[1,1,1,null,true,\"x\",[[]],{}]").is_empty());
        assert!(tools_called(b"7").is_empty() && tools_called(b"\"tools/call\"").is_empty());
        assert_eq!(tools_called(br#"[1,{"method":"tools/call","params":{"name":"recall","x":[1,{"name":"forget"}]}},[2]]"#), ["recall"]);
        assert_eq!(tools_called(br#"{"method":"tools/call"}"#), [""]);
        assert_eq!(tools_called(br#"{"method":"tools/call","params":[{"name":"recall"}]}"#), [""]);
        assert_eq!(tools_called(br#"{"method":"tools/call","params":{"name":{"a":"recall"}}}"#), [""]);
        assert!(tools_called(br#"{"method":["tools/call"],"params":{"name":"forget"}}"#).is_empty(), "not a call rmcp serves");
        // Keys given twice: each is read (a call if any method is; every name is checked).
        assert_eq!(tools_called(br#"{"method":"tools/call","method":"ping","params":{"name":"recall","name":"forget"}}"#), ["recall", "forget"]);
        assert_eq!(tools_called(br#"{"method":"tools/call","params":{"name":"recall"},"params":{}}"#), ["recall", ""]);
        assert_eq!(tools_called(br#"{"meth\u006fd":"tools/call","p\u0061rams":{"n\u0061me":"forget"}}"#), ["forget"]);
        // A big batch of non-messages: read in one pass, nothing kept.
        let mut big = b"[".to_vec();
        big.extend(b"1,".repeat(1 << 20));
        big.extend(br#"{"method":"tools/call","params":{"name":"forget"}}]"#);
        assert_eq!(tools_called(&big), ["forget"]);
        // Too deep for serde_json (as for rmcp, which parses with it): no call read, rmcp refuses it.
        assert!(tools_called(&[b"[".repeat(200), b"]".repeat(200)].concat()).is_empty());
    }

    /// A body that sends `first` (if any) and then never finishes, or breaks off with an error.
    struct Stalled {
        first: Option<Bytes>,
        then_fail: bool,
    }

    impl http_body::Body for Stalled {
        type Data = Bytes;
        type Error = std::io::Error;
        fn poll_frame(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, std::io::Error>>> {
            if let Some(b) = self.first.take() {
                return std::task::Poll::Ready(Some(Ok(http_body::Frame::data(b))));
            }
            if self.then_fail {
                return std::task::Poll::Ready(Some(Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "connection closed"))));
            }
            std::task::Poll::Pending
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_is_read_within_its_limit_and_timeout() {
        let t = Duration::from_secs(30);
        assert_eq!(read_body(Body::from("{}"), t).await.ok(), Some(Bytes::from("{}")));
        let status = |r: Result<Bytes, Response>| r.err().map(|r| (r.status(), r.headers().get(header::CONNECTION).cloned()));
        let close = Some(HeaderValue::from_static("close"));
        // A body that never finishes: 408 once the (paused, auto-advanced) clock passes the timeout.
        let stalled = Stalled { first: Some(Bytes::from(r#"{"jsonrpc": "2.0", "#)), then_fail: false };
        assert_eq!(status(read_body(stalled, t).await), Some((StatusCode::REQUEST_TIMEOUT, close.clone())));
        // A body that breaks off is not "too large".
        let broken = Stalled { first: Some(Bytes::from("{")), then_fail: true };
        assert_eq!(status(read_body(broken, t).await), Some((StatusCode::BAD_REQUEST, close.clone())));
        assert_eq!(status(read_body(Body::from(vec![b' '; MAX_BODY + 1]), t).await), Some((StatusCode::PAYLOAD_TOO_LARGE, close)));
        assert!(read_body(Body::from(vec![b' '; MAX_BODY]), t).await.is_ok());
        // Over the limit without a declared length (a chunked body): refused as it arrives.
        let chunked = Stalled { first: Some(Bytes::from(vec![b' '; MAX_BODY + 1])), then_fail: false };
        assert_eq!(status(read_body(chunked, t).await).map(|s| s.0), Some(StatusCode::PAYLOAD_TOO_LARGE));
    }

    fn headers(pairs: &[(&str, &str)]) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        for (k, v) in pairs {
            h.append(http::HeaderName::from_bytes(k.as_bytes()).unwrap(), HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn the_direct_path_takes_only_headers_rmcp_takes() {
        let hosts: Vec<String> = ["localhost", "127.0.0.1", "::1", "mcp.example.com"].map(String::from).to_vec();
        let good = [("host", "127.0.0.1:8765"), ("accept", "application/json, text/event-stream"), ("content-type", "application/json")];
        let takes = |extra: &[(&str, &str)], drop: &str| {
            let mut pairs: Vec<(&str, &str)> = good.iter().copied().filter(|(k, _)| *k != drop).collect();
            pairs.extend(extra);
            headers_as_rmcp_takes_them(&headers(&pairs), &hosts)
        };
        assert!(takes(&[], ""));
        assert!(takes(&[("mcp-protocol-version", "2025-06-18")], "") && takes(&[("mcp-protocol-version", "2024-11-05")], ""));
        assert!(takes(&[("host", "[::1]:1")], "host") && takes(&[("host", "MCP.Example.com")], "host"));
        assert!(takes(&[("accept", "application/json;q=0.5, text/event-stream;q=0.9")], "accept"));
        assert!(takes(&[("content-type", "Application/JSON; charset=utf-8")], "content-type"));
        // Left to rmcp: its errors, and what it checks further (an Origin, versions from 2026-07-28).
        for (extra, drop) in [
            (("host", "evil.example"), "host"),
            (("host", "127.0.0.1.evil.example"), "host"),
            (("x", "no host"), "host"),
            (("origin", "http://127.0.0.1:8765"), ""),
            (("accept", "application/json"), "accept"),
            (("accept", "application/json, text/event-stream;q=0"), "accept"),
            (("accept", "*/*"), "accept"),
            (("content-type", "text/plain"), "content-type"),
            (("x", "no content type"), "content-type"),
            (("mcp-protocol-version", "1999-01-01"), ""),
            (("mcp-protocol-version", "2026-07-28"), ""),
        ] {
            assert!(!takes(&[extra], drop), "{extra:?} without {drop}");
        }
    }

    #[test]
    fn the_direct_path_takes_only_one_tools_call() {
        let (id, params, client) = call_rmcp_would_serve(br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"recall","arguments":{"query":"q"}}}"#).unwrap();
        assert_eq!((id, params.name.as_ref(), params.arguments.unwrap()["query"].as_str(), client.as_str()), (rmcp::model::RequestId::Number(7), "recall", Some("q"), "unknown"));
        let named = br#"{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"recall","_meta":{"io.modelcontextprotocol/clientInfo":{"name":"x:y","version":"1"}}}}"#;
        assert_eq!(call_rmcp_would_serve(named).map(|c| c.2), Some("x_y".to_string()));
        for other in [
            &br#"[{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"recall"}}]"#[..],
            br#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"recall"}}"#,
            br#"{"jsonrpc":"2.0","id":7,"method":"tools/list"}"#,
            br#"{"jsonrpc":"2.0","id":7,"method":"tools\/call","params":{"name":"recall"}}"#,
            br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"recall","_meta":{"io.modelcontextprotocol/protocolVersion":"2025-06-18"}}}"#,
            br#"{"id":7,"method":"tools/call","params":{"name":"recall"}}"#,
            br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":7}}"#,
            b"not json",
        ] {
            assert!(call_rmcp_would_serve(other).is_none(), "{}", String::from_utf8_lossy(other));
        }
    }

    #[test]
    fn an_internal_error_is_answered_as_rmcp_answers_it() {
        let r = rmcp_internal_error("empty response", "no response message received from handler");
        assert_eq!(r.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(r.headers().get(header::CONTENT_TYPE), None, "rmcp's answer has no Content-Type");
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_left_unread_fails_and_one_read_slowly_does_not() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (io, _unread) = tokio::io::duplex(16);
        let mut w = WriteDeadline { io, timeout: Duration::from_secs(5), stalled: None };
        assert_eq!(w.write_all(&[0; 64]).await.unwrap_err().kind(), std::io::ErrorKind::TimedOut);
        let (io, mut reader) = tokio::io::duplex(16);
        let mut w = WriteDeadline { io, timeout: Duration::from_secs(5), stalled: None };
        let read = tokio::spawn(async move {
            let mut got = vec![];
            let mut buf = [0; 16];
            while got.len() < 64 {
                tokio::time::sleep(Duration::from_secs(4)).await;
                let n = reader.read(&mut buf).await.unwrap();
                got.extend_from_slice(&buf[..n]);
            }
            got
        });
        w.write_all(&[1; 64]).await.unwrap();
        assert_eq!(read.await.unwrap(), vec![1; 64]);
    }

    #[test]
    fn header_values_cannot_be_broken_out_of() {
        assert_eq!(quoted("a\"b\\c\nd"), "a'b'cd");
    }
}
