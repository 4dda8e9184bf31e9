//! One error table: every SQLSTATE memory_ext raises (the Rust shell through `code::*`, the SQL
//! files through `ERRCODE = '...'`) is in the shell's table (src/pg/error.rs), and the SQLSTATE
//! table of docs/reference.md documents exactly that table.

use std::collections::BTreeSet;
use std::path::Path;

fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// Five-character codes in `text` that follow `prefix` and are quoted with `quote`.
fn codes_after(text: &str, prefix: &str, quote: char) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find(prefix) {
        rest = &rest[i + prefix.len()..];
        let tail = rest.trim_start();
        if let Some(t) = tail.strip_prefix(quote) {
            let code: String = t.chars().take(5).collect();
            if code.len() == 5 && t[5..].starts_with(quote) && code.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit()) {
                out.insert(code);
            }
        }
    }
    out
}

fn table() -> BTreeSet<String> {
    let src = std::fs::read_to_string(root().join("src/pg/error.rs")).expect("src/pg/error.rs");
    let module = &src[src.find("pub mod code {").expect("the code table")..];
    let module = &module[..module.find("\n}").expect("end of the table")];
    codes_after(module, "&str =", '"')
}

fn sql_codes() -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for e in std::fs::read_dir(root().join("sql")).expect("sql/") {
        let p = e.expect("entry").path();
        if p.extension().is_some_and(|x| x == "sql") {
            out.extend(codes_after(&std::fs::read_to_string(&p).expect("sql file"), "ERRCODE =", '\''));
        }
    }
    out
}

fn documented_codes() -> BTreeSet<String> {
    let doc = std::fs::read_to_string(root().join("docs/reference.md")).expect("docs/reference.md");
    doc
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.get(..6))
        .filter(|c| c.ends_with('`'))
        .map(|c| c[..5].to_string())
        .filter(|c| c.chars().all(|x| x.is_ascii_uppercase() || x.is_ascii_digit()))
        .collect()
}

#[test]
fn every_sqlstate_raised_is_in_the_table_and_documented() {
    let table = table();
    assert!(table.len() >= 15, "the table was read: {table:?}");
    let sql = sql_codes();
    assert!(sql.len() >= 8, "the SQL was scanned: {sql:?}");
    let missing: Vec<_> = sql.difference(&table).collect();
    assert!(missing.is_empty(), "SQLSTATEs raised in sql/ but not in the error table: {missing:?}");
    let documented = documented_codes();
    assert_eq!(documented, table, "the SQLSTATE table of docs/reference.md and src/pg/error.rs differ");
}
