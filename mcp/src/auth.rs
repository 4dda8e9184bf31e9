//! Who calls over HTTP: memory-mcp as an OAuth 2.1 resource server (MCP authorization,
//! protocol 2025-06-18). A bearer token is a JWT checked against the issuer's JWKS (RS256/ES256,
//! `iss`, `aud` = this server's resource URL, `exp`/`nbf`) or a static token whose SHA-256 is in
//! the token file. Either names the subject, the org it acts for and its scopes; the database
//! decides whether the login role may act for that org.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use jsonwebtoken::jwk::{AlgorithmParameters, Jwk, JwkSet, KeyAlgorithm, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::sync::RwLock;

pub const READ: &str = "memory:read";
pub const WRITE: &str = "memory:write";

/// The scope a tool needs: the reading tools of SPEC §19 need `memory:read`, every other name
/// `memory:write` (closed by default: a tool added later and not listed here is a writer).
pub fn scope_of(tool: &str) -> &'static str {
    match tool {
        "recall" | "retrieve" | "claim_chain" | "search" | "get" | "history" | "lineage" | "context" => READ,
        _ => WRITE,
    }
}

/// An authenticated caller, as the request's extension: the token's subject, its org and scopes.
#[derive(Clone, Debug)]
pub struct Principal {
    pub sub: String,
    pub org: String,
    pub scopes: HashSet<String>,
}

/// Why a request is not authenticated: no token (401 without an error code), or a token that is
/// not valid (401 `invalid_token`, with the reason).
#[derive(Debug)]
pub enum Denied {
    Missing,
    Invalid(String),
}

pub enum Authenticator {
    Jwt(Jwt),
    Tokens(HashMap<String, Principal>),
}

impl Authenticator {
    pub async fn check(&self, token: &str) -> Result<Principal, Denied> {
        match self {
            Authenticator::Jwt(j) => j.check(token).await,
            Authenticator::Tokens(t) => t
                .get(&sha256_hex(token))
                .cloned()
                .ok_or_else(|| Denied::Invalid("unknown token".into())),
        }
    }

    /// The authorization servers the protected-resource metadata names.
    pub fn issuer(&self) -> Option<&str> {
        match self {
            Authenticator::Jwt(j) => Some(&j.issuer),
            Authenticator::Tokens(_) => None,
        }
    }
}

pub fn sha256_hex(token: &str) -> String {
    Sha256::digest(token.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// The token file: a JSON array of `{"sha256", "name", "org", "scopes"}`, one per token; the
/// token itself is stored nowhere.
pub fn load_tokens(path: &PathBuf) -> Result<HashMap<String, Principal>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("--token-file {}: {e}", path.display()))?;
    let entries: Vec<Value> = serde_json::from_str(&text).map_err(|e| format!("--token-file {}: not a JSON array: {e}", path.display()))?;
    let mut out = HashMap::new();
    let mut names = HashSet::new();
    for (i, e) in entries.iter().enumerate() {
        let field = |k: &str| e.get(k).and_then(Value::as_str).map(str::trim).filter(|s| !s.is_empty());
        let bad = |why: &str| format!("--token-file {}: entry {i}: {why}", path.display());
        let hash = field("sha256").map(str::to_ascii_lowercase).ok_or_else(|| bad("sha256 is required"))?;
        if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad("sha256 must be 64 hex digits (printf %s \"$TOKEN\" | sha256sum)"));
        }
        let name = field("name").ok_or_else(|| bad("name is required (the actor's subject)"))?;
        let org = field("org").ok_or_else(|| bad("org is required"))?;
        let scopes: HashSet<String> = match e.get("scopes") {
            Some(Value::Array(a)) => a.iter().map(|s| s.as_str().map(str::to_string)).collect::<Option<_>>().ok_or_else(|| bad("scopes must be strings"))?,
            _ => return Err(bad("scopes is required: [\"memory:read\"] and/or \"memory:write\"")),
        };
        if let Some(s) = scopes.iter().find(|s| *s != READ && *s != WRITE) {
            return Err(bad(&format!("unknown scope {s} (memory:read, memory:write)")));
        }
        if !names.insert(name.to_string()) {
            return Err(bad(&format!("name {name} is used twice")));
        }
        if out.insert(hash, Principal { sub: name.into(), org: org.into(), scopes }).is_some() {
            return Err(bad("the same token hash is listed twice"));
        }
    }
    if out.is_empty() {
        return Err(format!("--token-file {}: no tokens", path.display()));
    }
    Ok(out)
}

pub enum JwksSource {
    Url(reqwest::Client, String),
    File(PathBuf),
}

pub struct Jwt {
    pub issuer: String,
    audience: String,
    org_claim: String,
    source: JwksSource,
    keys: RwLock<(JwkSet, Instant)>,
    verified: Verified,
}

/// Tokens whose signature, `iss`, `aud`, `nbf` and claims were checked, by their SHA-256, with their
/// `exp`: a client sends the same token on every call of a session, and verifying an RS256 signature
/// and decoding the JWK again costs more than the rest of a ping. A token is found here only
/// before its `exp` (without the leeway the full check allows: after it, the token is checked again,
/// and then refused), the set is emptied whenever the key set is fetched again (a key withdrawn by the
/// issuer is not trusted through the cache), and it holds at most [`VERIFIED_MAX`] tokens.
pub struct Verified(Mutex<Kept>);

/// The verified tokens by their SHA-256 with their principal and `exp`, and how many times the set
/// was emptied (a verification's [`Verified::ticket`]).
struct Kept {
    tokens: HashMap<[u8; 32], (Principal, u64)>,
    generation: u64,
}

/// The most verified tokens remembered (a full set is emptied of expired ones, else entirely).
pub const VERIFIED_MAX: usize = 4096;

fn now_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

impl Verified {
    pub fn new() -> Verified {
        Verified(Mutex::new(Kept { tokens: HashMap::new(), generation: 0 }))
    }

    fn kept(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Taken before a token's verification reads a key, and given to [`Verified::put`] with its
    /// result.
    pub fn ticket(&self) -> u64 {
        self.kept().generation
    }

    /// The principal of a token verified before, while `now` is before its `exp`.
    pub fn get(&self, digest: &[u8; 32], now: u64) -> Option<Principal> {
        let map = &mut self.kept().tokens;
        match map.get(digest) {
            Some((p, exp)) if now < *exp => Some(p.clone()),
            Some(_) => {
                map.remove(digest);
                None
            }
            None => None,
        }
    }

    /// Keeps a verified token until `exp`, unless the set was emptied since its verification took
    /// its `ticket` (the key set was fetched again meanwhile: the key it was verified with may be
    /// withdrawn, and the next call checks it against the new set).
    pub fn put(&self, ticket: u64, digest: [u8; 32], p: Principal, exp: u64, now: u64) {
        if now >= exp {
            return;
        }
        let mut kept = self.kept();
        if kept.generation != ticket {
            return;
        }
        let map = &mut kept.tokens;
        if map.len() >= VERIFIED_MAX {
            map.retain(|_, (_, e)| now < *e);
            if map.len() >= VERIFIED_MAX {
                map.clear();
            }
        }
        map.insert(digest, (p, exp));
    }

    pub fn clear(&self) {
        let mut k = self.kept();
        k.tokens.clear();
        k.generation += 1;
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.kept().tokens.len()
    }
}

/// A key set is fetched again for an unknown key id (a rotation), at most this often.
const REFETCH_AFTER: Duration = Duration::from_secs(30);

impl Jwt {
    pub async fn new(issuer: String, audience: String, org_claim: String, source: JwksSource) -> Result<Jwt, String> {
        let keys = fetch(&source).await?;
        Ok(Jwt { issuer, audience, org_claim, source, keys: RwLock::new((keys, Instant::now())), verified: Verified::new() })
    }

    async fn key(&self, kid: Option<&str>) -> Result<DecodingKey, Denied> {
        let pick = |set: &JwkSet| -> Option<Result<DecodingKey, Denied>> {
            let jwk = match kid {
                Some(k) => set.find(k)?,
                None if set.keys.len() == 1 => &set.keys[0],
                None => return Some(Err(Denied::Invalid("the token names no key (kid) and the key set has several".into()))),
            };
            Some(DecodingKey::from_jwk(jwk).map_err(|e| Denied::Invalid(format!("key {}: {e}", kid.unwrap_or("")))))
        };
        {
            let guard = self.keys.read().await;
            if let Some(k) = pick(&guard.0) {
                return k;
            }
            if guard.1.elapsed() < REFETCH_AFTER || matches!(self.source, JwksSource::File(_)) {
                return Err(Denied::Invalid(format!("unknown key id {}", kid.unwrap_or(""))));
            }
        }
        let mut guard = self.keys.write().await;
        if guard.1.elapsed() >= REFETCH_AFTER {
            match fetch(&self.source).await {
                Ok(set) => {
                    *guard = (set, Instant::now());
                    self.verified.clear();
                }
                Err(e) => {
                    eprintln!("memory-mcp: refreshing the JWKS: {e}");
                    guard.1 = Instant::now();
                }
            }
        }
        pick(&guard.0).unwrap_or_else(|| Err(Denied::Invalid(format!("unknown key id {}", kid.unwrap_or("")))))
    }

    async fn check(&self, token: &str) -> Result<Principal, Denied> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(p) = self.verified.get(&digest, now_secs()) {
            return Ok(p);
        }
        let ticket = self.verified.ticket();
        let (p, exp) = self.verify(token).await?;
        self.verified.put(ticket, digest, p.clone(), exp, now_secs());
        Ok(p)
    }

    /// The full check of a token: its principal and `exp`.
    async fn verify(&self, token: &str) -> Result<(Principal, u64), Denied> {
        let header = jsonwebtoken::decode_header(token).map_err(|e| Denied::Invalid(format!("malformed token: {e}")))?;
        if !matches!(header.alg, Algorithm::RS256 | Algorithm::ES256) {
            return Err(Denied::Invalid(format!("algorithm {:?} is not accepted (RS256, ES256)", header.alg)));
        }
        let key = self.key(header.kid.as_deref()).await?;
        let mut v = Validation::new(header.alg);
        v.set_issuer(&[&self.issuer]);
        v.set_audience(&[&self.audience]);
        v.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        v.validate_nbf = true;
        v.leeway = 30;
        let data = jsonwebtoken::decode::<Value>(token, &key, &v).map_err(|e| Denied::Invalid(e.to_string()))?;
        let c = data.claims;
        let sub = c.get("sub").and_then(Value::as_str).filter(|s| !s.is_empty()).ok_or_else(|| Denied::Invalid("sub must be a string".into()))?;
        let org = c
            .get(&self.org_claim)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| Denied::Invalid(format!("the token has no org (claim {})", self.org_claim)))?;
        // RFC 9068 `scope` (space-separated), or `scp` (an array or a string) as some issuers write it.
        let mut scopes = HashSet::new();
        for claim in ["scope", "scp"] {
            match c.get(claim) {
                Some(Value::String(s)) => scopes.extend(s.split_whitespace().map(str::to_string)),
                Some(Value::Array(a)) => scopes.extend(a.iter().filter_map(Value::as_str).map(str::to_string)),
                _ => {}
            }
        }
        // Required and checked by the validation above (a number): the cache keeps the token until then.
        let exp = c.get("exp").and_then(Value::as_u64).unwrap_or(0);
        Ok((Principal { sub: sub.into(), org: org.into(), scopes }, exp))
    }
}

async fn fetch(source: &JwksSource) -> Result<JwkSet, String> {
    let (text, whence) = match source {
        JwksSource::File(p) => (std::fs::read_to_string(p).map_err(|e| format!("--jwks-file {}: {e}", p.display()))?, p.display().to_string()),
        JwksSource::Url(client, url) => {
            let resp = client.get(url).send().await.map_err(|e| format!("--jwks-url {url}: {e}"))?;
            if !resp.status().is_success() {
                return Err(format!("--jwks-url {url}: HTTP {}", resp.status()));
            }
            (resp.text().await.map_err(|e| format!("--jwks-url {url}: {e}"))?, url.clone())
        }
    };
    let v: Value = serde_json::from_str(&text).map_err(|e| format!("{whence}: not JSON: {e}"))?;
    let all = v.get("keys").and_then(Value::as_array).ok_or_else(|| format!("{whence}: not a JWK set (no \"keys\" array)"))?;
    // Keys this server cannot use (encryption keys, other algorithms, key types unknown to the
    // JWT crate) are left out rather than failing the set.
    let keys: Vec<Jwk> = all.iter().filter_map(|k| serde_json::from_value::<Jwk>(k.clone()).ok()).filter(verifies_signatures).collect();
    if keys.is_empty() {
        return Err(format!("{whence}: the JWK set has no RS256 or ES256 signature key"));
    }
    Ok(JwkSet { keys })
}

fn verifies_signatures(k: &Jwk) -> bool {
    !matches!(k.common.public_key_use, Some(PublicKeyUse::Encryption))
        && matches!(k.common.key_algorithm, None | Some(KeyAlgorithm::RS256 | KeyAlgorithm::ES256))
        && matches!(k.algorithm, AlgorithmParameters::RSA(_) | AlgorithmParameters::EllipticCurve(_))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_of_tools() {
        assert_eq!(scope_of("remember"), WRITE);
        assert_eq!(scope_of("forget"), WRITE);
        for t in ["put", "delete", "supersede", "record_outcome"] {
            assert_eq!(scope_of(t), WRITE);
        }
        for t in ["recall", "retrieve", "claim_chain", "search", "get", "history", "lineage", "context"] {
            assert_eq!(scope_of(t), READ);
        }
        for t in ["a_tool_added_later", "Recall", ""] {
            assert_eq!(scope_of(t), WRITE, "a name not listed as a reader needs memory:write");
        }
    }

    #[test]
    fn token_file() {
        let dir = std::env::temp_dir().join(format!("memory-mcp-tokens-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("t.json");
        let h = sha256_hex("s3cret");
        std::fs::write(&p, format!(r#"[{{"sha256": "{}", "name": "ci", "org": "acme", "scopes": ["memory:read"]}}]"#, h.to_uppercase())).unwrap();
        let t = load_tokens(&p).unwrap();
        assert_eq!(t[&h].org, "acme");
        for bad in [
            r#"[{"sha256": "abc", "name": "ci", "org": "acme", "scopes": []}]"#.to_string(),
            format!(r#"[{{"sha256": "{h}", "name": "ci", "org": "acme", "scopes": ["admin"]}}]"#),
            format!(r#"[{{"sha256": "{h}", "name": "ci", "scopes": []}}]"#),
            "[]".into(),
            "{}".into(),
        ] {
            std::fs::write(&p, bad).unwrap();
            assert!(load_tokens(&p).is_err());
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn verified_tokens_are_kept_until_their_exp_and_bounded() {
        let v = Verified::new();
        let p = |s: &str| Principal { sub: s.into(), org: "acme".into(), scopes: HashSet::from([READ.to_string()]) };
        let d = |i: u32| -> [u8; 32] { Sha256::digest(i.to_be_bytes()).into() };
        v.put(0, d(1), p("a"), 1000, 900);
        assert_eq!(v.get(&d(1), 999).map(|p| p.sub), Some("a".into()));
        assert!(v.get(&d(1), 1000).is_none(), "not at its exp");
        assert!(v.get(&d(1), 999).is_none(), "an expired token is dropped, checked again next time");
        v.put(0, d(2), p("b"), 1000, 1000);
        assert_eq!(v.len(), 0, "a token already expired is not kept");
        assert!(v.get(&d(3), 0).is_none());
        for i in 0..VERIFIED_MAX as u32 {
            v.put(0, d(i), p("x"), if i % 2 == 0 { 1100 } else { 2000 }, 1000);
        }
        assert_eq!(v.len(), VERIFIED_MAX);
        v.put(0, d(u32::MAX), p("y"), 2000, 1200);
        assert_eq!(v.len(), VERIFIED_MAX / 2 + 1, "a full set is emptied of expired tokens first");
        for i in 0..VERIFIED_MAX as u32 {
            v.put(0, d(i + 1_000_000), p("z"), 3000, 1200);
        }
        assert!(v.len() <= VERIFIED_MAX);
        v.clear();
        assert_eq!(v.len(), 0);
    }

    #[test]
    fn a_token_verified_while_the_key_set_is_fetched_again_is_not_kept() {
        // A verification reads its key from the old set; meanwhile another call fetches the set
        // again (a key withdrawn) and empties the cache; then the first verification ends. Its
        // token, signed by the withdrawn key, must not be kept: it would be accepted until its
        // exp (which its signer chose) without its key being asked again.
        let v = Verified::new();
        let p = Principal { sub: "a".into(), org: "acme".into(), scopes: HashSet::from([READ.to_string()]) };
        let d: [u8; 32] = Sha256::digest(b"token").into();
        let ticket = v.ticket();
        v.clear();
        v.put(ticket, d, p.clone(), u64::MAX, 1000);
        assert!(v.get(&d, 1001).is_none(), "a token verified with a key of the set fetched before is not kept");
        // A verification begun after the fetch is kept.
        let ticket = v.ticket();
        v.put(ticket, d, p, u64::MAX, 1000);
        assert_eq!(v.get(&d, 1001).map(|p| p.sub), Some("a".into()));
    }

    #[test]
    fn sha256_of_a_token() {
        assert_eq!(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    }
}
