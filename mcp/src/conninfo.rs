//! The TLS options of a libpq connection string (URL or `key=value`): `sslmode`, `sslrootcert`,
//! `sslcert`, `sslkey`, read as libpq reads them and taken out of the string, which then goes to
//! tokio-postgres (it knows only `disable`, `prefer` and `require`).

use std::path::PathBuf;

/// libpq's `sslmode`, `prefer` when absent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

/// Where the server's certificate is checked against: a CA file, or the system's roots
/// (`sslrootcert=system`, as libpq 16).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RootCert {
    File(PathBuf),
    System,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SslOptions {
    pub mode: SslMode,
    pub root: Option<RootCert>,
    /// The client certificate and its key, when one is presented.
    pub client: Option<(PathBuf, PathBuf)>,
}

const SSL_KEYS: [&str; 4] = ["sslmode", "sslrootcert", "sslcert", "sslkey"];

/// The connection string without its TLS options, and those options, resolved as libpq resolves
/// them: `sslrootcert` defaults to `~/.postgresql/root.crt` when that file exists (and then
/// `require` verifies the chain, as `verify-ca`), `sslcert`/`sslkey` to `~/.postgresql/postgresql.crt`
/// and `.key` when the certificate exists; `verify-ca`/`verify-full` need a root certificate, and
/// `sslrootcert=system` only goes with `verify-full`.
pub fn split_ssl(dsn: &str, home: Option<PathBuf>) -> Result<(String, SslOptions), String> {
    let (rest, found) = if is_url(dsn) { split_url(dsn)? } else { split_keywords(dsn)? };
    let get = |k: &str| found.iter().rev().find(|(key, _)| key == k).map(|(_, v)| v.clone());
    let mode = match get("sslmode").as_deref() {
        None | Some("prefer") => SslMode::Prefer,
        Some("disable") => SslMode::Disable,
        Some("require") => SslMode::Require,
        Some("verify-ca") => SslMode::VerifyCa,
        Some("verify-full") => SslMode::VerifyFull,
        Some("allow") => return Err("sslmode=allow is not supported: use prefer (or require)".into()),
        Some(other) => return Err(format!("invalid sslmode value: \"{other}\" (disable, prefer, require, verify-ca or verify-full)")),
    };
    let dot = home.map(|h| h.join(".postgresql"));
    let root = match get("sslrootcert") {
        Some(s) if s == "system" => Some(RootCert::System),
        Some(s) => Some(RootCert::File(PathBuf::from(s))),
        None => dot.as_ref().map(|d| d.join("root.crt")).filter(|p| p.exists()).map(RootCert::File),
    };
    if root == Some(RootCert::System) && mode != SslMode::VerifyFull && mode != SslMode::Disable {
        return Err("weak sslmode may not be used with sslrootcert=system (use verify-full)".into());
    }
    if matches!(mode, SslMode::VerifyCa | SslMode::VerifyFull) && root.is_none() {
        return Err(format!(
            "sslmode={} needs the CA to check the server's certificate against: sslrootcert=FILE (or sslrootcert=system, \
             or ~/.postgresql/root.crt)",
            if mode == SslMode::VerifyCa { "verify-ca" } else { "verify-full" }
        ));
    }
    let cert = get("sslcert").map(PathBuf::from).or_else(|| dot.as_ref().map(|d| d.join("postgresql.crt")).filter(|p| p.exists()));
    let client = match cert {
        None => None,
        Some(c) => {
            let key = get("sslkey").map(PathBuf::from).or_else(|| dot.as_ref().map(|d| d.join("postgresql.key")));
            match key {
                Some(k) => Some((c, k)),
                None => return Err(format!("certificate {} given without its key (sslkey)", c.display())),
            }
        }
    };
    Ok((rest, SslOptions { mode, root, client }))
}

fn is_url(s: &str) -> bool {
    s.starts_with("postgres://") || s.starts_with("postgresql://")
}

type Found = Vec<(String, String)>;

/// A URL's query parameters: the TLS ones taken out (percent-decoded), the others kept as written.
fn split_url(url: &str) -> Result<(String, Found), String> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_string(), vec![]));
    };
    let mut kept = vec![];
    let mut found = vec![];
    for part in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = part.split_once('=').unwrap_or((part, ""));
        let key = percent_decode(k)?;
        if SSL_KEYS.contains(&key.as_str()) {
            found.push((key, percent_decode(v)?));
        } else {
            kept.push(part);
        }
    }
    let rest = if kept.is_empty() { base.to_string() } else { format!("{base}?{}", kept.join("&")) };
    Ok((rest, found))
}

fn percent_decode(s: &str) -> Result<String, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s.get(i + 1..i + 3).ok_or_else(|| format!("invalid percent-encoding in the connection URL: {s}"))?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| format!("invalid percent-encoding in the connection URL: {s}"))?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "the connection URL is not UTF-8 once decoded".into())
}

/// A `key=value` string (values bare or single-quoted, `\` escaping): the TLS keys taken out, the
/// others written back quoted.
fn split_keywords(s: &str) -> Result<(String, Found), String> {
    let mut kept = vec![];
    let mut found = vec![];
    let mut it = s.chars().peekable();
    loop {
        while it.peek().is_some_and(|c| c.is_whitespace()) {
            it.next();
        }
        if it.peek().is_none() {
            break;
        }
        let mut key = String::new();
        while let Some(&c) = it.peek() {
            if c == '=' || c.is_whitespace() {
                break;
            }
            key.push(c);
            it.next();
        }
        while it.peek().is_some_and(|c| c.is_whitespace()) {
            it.next();
        }
        if it.next() != Some('=') {
            return Err(format!("invalid connection string: \"{key}\" is not followed by \"=\""));
        }
        while it.peek().is_some_and(|c| c.is_whitespace()) {
            it.next();
        }
        let mut value = String::new();
        if it.peek() == Some(&'\'') {
            it.next();
            loop {
                match it.next() {
                    None => return Err(format!("invalid connection string: unterminated quoted value of {key}")),
                    Some('\\') => value.push(it.next().ok_or("invalid connection string: a trailing \\")?),
                    Some('\'') => break,
                    Some(c) => value.push(c),
                }
            }
        } else {
            while let Some(&c) = it.peek() {
                if c.is_whitespace() {
                    break;
                }
                it.next();
                if c == '\\' {
                    value.push(it.next().ok_or("invalid connection string: a trailing \\")?);
                } else {
                    value.push(c);
                }
            }
        }
        if SSL_KEYS.contains(&key.as_str()) {
            found.push((key, value));
        } else {
            kept.push(format!("{key}='{}'", value.replace('\\', "\\\\").replace('\'', "\\'")));
        }
    }
    Ok((kept.join(" "), found))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(s: &str) -> (String, SslOptions) {
        split_ssl(s, None).unwrap()
    }

    #[test]
    fn keywords_lose_their_tls_options_and_keep_the_rest() {
        let (rest, o) = split("host=db.example port=5432 user=app sslmode=verify-full sslrootcert='/etc/ca dir/ca.pem'");
        assert_eq!(o.mode, SslMode::VerifyFull);
        assert_eq!(o.root, Some(RootCert::File("/etc/ca dir/ca.pem".into())));
        assert!(rest.starts_with("host='db.example' port='5432' user='app'"), "{rest}");
        let (rest, _) = split(r"password='a\'b\\c' dbname = x");
        assert_eq!(rest, r"password='a\'b\\c' dbname='x'");
        let cfg: tokio_postgres::Config = rest.parse().unwrap();
        assert_eq!(cfg.get_password(), Some(&b"a'b\\c"[..]));
    }

    #[test]
    fn urls_lose_their_tls_options_and_keep_the_rest() {
        let (rest, o) = split("postgresql://app:pw@db.example:5432/app?sslmode=require&application_name=x&sslcert=%2Ftmp%2Fc.pem&sslkey=/tmp/k.pem");
        assert_eq!(rest, "postgresql://app:pw@db.example:5432/app?application_name=x");
        assert_eq!((o.mode, o.root), (SslMode::Require, None));
        assert_eq!(o.client, Some(("/tmp/c.pem".into(), "/tmp/k.pem".into())));
        assert_eq!(split("postgres://h/db").0, "postgres://h/db");
        assert_eq!(split("postgres://h/db?sslmode=disable").0, "postgres://h/db");
    }

    #[test]
    fn libpq_defaults_and_refusals() {
        assert_eq!(split("host=h").1.mode, SslMode::Prefer);
        for bad in ["host=h sslmode=verify-full", "host=h sslmode=verify-ca", "host=h sslmode=allow", "host=h sslmode=strict",
                    "host=h sslmode=require sslrootcert=system", "host=h sslcert=/c.pem", "host=h sslmode='x", "host"] {
            assert!(split_ssl(bad, None).is_err(), "{bad}");
        }
        assert_eq!(split("host=h sslmode=verify-full sslrootcert=system").1.root, Some(RootCert::System));
    }

    #[test]
    fn home_files_are_the_defaults() {
        let home = std::env::temp_dir().join(format!("memory-mcp-conninfo-{}", std::process::id()));
        std::fs::create_dir_all(home.join(".postgresql")).unwrap();
        assert_eq!(split_ssl("host=h", Some(home.clone())).unwrap().1.root, None);
        std::fs::write(home.join(".postgresql/root.crt"), "x").unwrap();
        std::fs::write(home.join(".postgresql/postgresql.crt"), "x").unwrap();
        let o = split_ssl("host=h sslmode=verify-full", Some(home.clone())).unwrap().1;
        assert_eq!(o.root, Some(RootCert::File(home.join(".postgresql/root.crt"))));
        assert_eq!(o.client, Some((home.join(".postgresql/postgresql.crt"), home.join(".postgresql/postgresql.key"))));
        std::fs::remove_dir_all(&home).unwrap();
    }
}
