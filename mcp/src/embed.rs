//! Embeddings from an OpenAI-compatible endpoint (`POST {url}` with `{"model", "input"}`, answered
//! `{"data": [{"embedding": [...]}]}`). A failure or a timeout is an `Err` with the reason, never a
//! panic: the caller stores the memory without a vector (it waits in `memory.embedding_backlog`)
//! or recalls by full text and says so.

use std::time::Duration;

use serde_json::{json, Value};

pub struct Embedder {
    client: reqwest::Client,
    url: String,
    model: String,
    key: Option<String>,
    /// The dimensions of the database's embedding column.
    pub dims: usize,
}

impl Embedder {
    pub fn new(url: String, model: String, key: Option<String>, timeout: Duration, dims: usize) -> Result<Embedder, String> {
        let parsed: http::Uri = url.parse().map_err(|_| format!("--embeddings-url {url}: not a URL"))?;
        if !matches!(parsed.scheme_str(), Some("http" | "https")) || parsed.host().is_none() {
            return Err(format!("--embeddings-url {url}: not an absolute http(s) URL (e.g. https://api.openai.com/v1/embeddings)"));
        }
        // Memories and the key go to it: in the clear only to this machine.
        let local = parsed.host().is_some_and(|h| h == "localhost" || h.trim_matches(['[', ']']).parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback()));
        if parsed.scheme_str() == Some("http") && !local {
            return Err(format!("--embeddings-url {url}: must be https (http only on loopback): memories and the key are sent to it"));
        }
        let client = reqwest::Client::builder().timeout(timeout).redirect(reqwest::redirect::Policy::none()).build().map_err(|e| e.to_string())?;
        Ok(Embedder { client, url, model, key, dims })
    }

    /// The endpoint's vector for one text, of any length (the start's dimension check reads it).
    pub async fn raw(&self, text: &str) -> Result<Vec<f32>, String> {
        let mut req = self
            .client
            .post(&self.url)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(json!({"model": self.model, "input": [text]}).to_string());
        if let Some(k) = &self.key {
            req = req.bearer_auth(k);
        }
        // Errors are told to MCP clients (`embedding_error`, `fallback`): without the URL, which may
        // name internal hosts or carry a key in its query.
        let resp = req.send().await.map_err(|e| if e.is_timeout() { "the embedder timed out".to_string() } else { format!("the embedder is unreachable: {}", crate::causes(&e.without_url())) })?;
        let status = resp.status();
        if !status.is_success() {
            return Err(format!("the embedder answered HTTP {}", status.as_u16()));
        }
        let body = resp.bytes().await.map_err(|e| if e.is_timeout() { "the embedder timed out".to_string() } else { format!("the embedder's answer was cut: {}", e.without_url()) })?;
        parse_embedding(&body)
    }

    /// The vector for one text, checked against the column: its dimensions, finite, not all zero.
    pub async fn embed(&self, text: &str) -> Result<Vec<f32>, String> {
        let v = self.raw(text).await?;
        check(&v, self.dims)?;
        Ok(v)
    }
}

/// The first embedding of an OpenAI-compatible answer.
pub fn parse_embedding(body: &[u8]) -> Result<Vec<f32>, String> {
    let v: Value = serde_json::from_slice(body).map_err(|_| "the embedder's answer is not JSON".to_string())?;
    let arr = v
        .get("data")
        .and_then(|d| d.get(0))
        .and_then(|d| d.get("embedding"))
        .and_then(Value::as_array)
        .ok_or("the embedder's answer has no data[0].embedding array")?;
    arr.iter()
        .map(|x| x.as_f64().map(|f| f as f32))
        .collect::<Option<Vec<f32>>>()
        .ok_or_else(|| "the embedder's embedding holds a non-number".to_string())
}

/// A vector the column takes: `dims` finite components, not all zero (cosine has no direction).
pub fn check(v: &[f32], dims: usize) -> Result<(), String> {
    if v.len() != dims {
        return Err(format!("the embedder returned {} dimensions, the column has {dims}", v.len()));
    }
    if v.iter().any(|x| !x.is_finite()) {
        return Err("the embedder returned a non-finite component".into());
    }
    if v.iter().all(|x| *x == 0.0) {
        return Err("the embedder returned a zero vector".into());
    }
    Ok(())
}

/// An item's text to embed: the strings of its value (keys and string leaves), in order.
pub fn item_text(v: &Value) -> String {
    fn walk(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::String(s) => out.push(s.clone()),
            Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
            Value::Object(m) => m.iter().for_each(|(k, x)| {
                out.push(k.clone());
                walk(x, out)
            }),
            Value::Number(n) => out.push(n.to_string()),
            Value::Bool(_) | Value::Null => {}
        }
    }
    let mut out = vec![];
    walk(v, &mut out);
    out.join(" ")
}

/// pgvector's text form of a vector.
pub fn vector_text(v: &[f32]) -> String {
    format!("[{}]", v.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_an_openai_answer() {
        let body = br#"{"object": "list", "data": [{"object": "embedding", "index": 0, "embedding": [0.5, -1, 2e-3]}], "model": "m"}"#;
        assert_eq!(parse_embedding(body).unwrap(), vec![0.5, -1.0, 0.002]);
        for bad in [&b"not json"[..], br#"{"data": []}"#, br#"{"data": [{"embedding": [1, "x"]}]}"#, br#"{"error": "x"}"#] {
            assert!(parse_embedding(bad).is_err());
        }
    }

    #[test]
    fn checks_dimensions_and_values() {
        assert!(check(&[1.0, 0.0], 2).is_ok());
        assert!(check(&[1.0], 2).unwrap_err().contains("1 dimensions"));
        assert!(check(&[f32::NAN, 1.0], 2).is_err());
        assert!(check(&[0.0, 0.0], 2).is_err());
    }

    #[test]
    fn item_text_and_vector_text() {
        assert_eq!(item_text(&json!({"likes": ["tea", "jazz"], "n": 3, "ok": true})), "likes tea jazz n 3 ok");
        assert_eq!(vector_text(&[1.0, -0.5]), "[1,-0.5]");
    }
}
