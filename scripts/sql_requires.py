#!/usr/bin/env python3
"""Which Rust functions each sql/*.sql file needs created before it.

pgrx orders the install script by a dependency graph whose ties fall in link order, which can
change from one build to the next: a SQL file that calls a Rust function at install time (a SQL
function body, a view, a policy, a DO block) must name that function in its
`extension_sql_file!(..., requires = [...])` in src/lib.rs, or a build may place the file first and
CREATE EXTENSION fail with "function ... does not exist".

    sql_requires.py           prints, per file, the Rust paths it references
    sql_requires.py --check   exits 1 naming every reference src/lib.rs does not require
    sql_requires.py --write   adds the missing references to src/lib.rs's requires lists
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
ATTR = re.compile(r"#\[pg_(?:extern|trigger)(\((?:[^()]|\([^()]*\))*\))?\]\s*(?:///[^\n]*\n\s*|#\[[^\]]*\]\s*)*"
                   r"(?:pub(?:\([a-z]+\))?\s+)?fn\s+([a-z_0-9]+)", re.S)


def rust_functions():
    """SQL name -> Rust path (module::fn) of every #[pg_extern] / #[pg_trigger] outside tests."""
    out = {}
    for f in sorted((ROOT / "src").rglob("*.rs")):
        rel = f.relative_to(ROOT / "src").with_suffix("")
        if rel.parts[0] == "tests":
            continue
        parts = [p for p in rel.parts if p not in ("mod", "lib")]
        module = "::".join(parts)
        text = f.read_text()
        for m in ATTR.finditer(text):
            args, fn = m.group(1) or "", m.group(2)
            name = re.search(r'name\s*=\s*"([^"]+)"', args)
            sql = re.search(r'CREATE FUNCTION (?:memory_internal\.)?"?([A-Za-z_0-9]+)"?\(', args)
            sql_name = name.group(1) if name else (sql.group(1) if sql else fn)
            out[sql_name] = f"{module}::{fn}" if module else fn
    return out


def references(funcs):
    """sql file stem -> sorted Rust paths the file calls."""
    out = {}
    for f in sorted((ROOT / "sql").glob("*.sql")):
        if f.name.startswith("memory_ext--"):
            continue
        text = re.sub(r"--[^\n]*", "", f.read_text())
        used = set()
        for m in re.finditer(r"\bmemory(?:_internal)?\.\"?([A-Za-z_0-9]+)\"?\s*\(", text):
            if m.group(1) in funcs:
                used.add(funcs[m.group(1)])
        out[f.stem] = sorted(used)
    return out


def main():
    funcs = rust_functions()
    refs = references(funcs)
    if "--check" not in sys.argv and "--write" not in sys.argv:
        for stem, paths in refs.items():
            print(f"{stem}: {', '.join(paths)}")
        return
    lib = (ROOT / "src" / "lib.rs").read_text()
    if "--write" in sys.argv:
        def fix(m):
            decl, stem = m.group(0), m.group(1)
            if "bootstrap" in decl or "finalize" in decl:
                return decl
            items = [x.strip() for x in re.search(r"requires = \[(.*)\]\);", decl).group(1).split(",") if x.strip()]
            items += [p for p in refs.get(stem, []) if p not in items]
            named = [x for x in items if x.startswith('"')]
            paths = sorted({x for x in items if not x.startswith('"')})
            return re.sub(r"requires = \[.*\]\);", "requires = [" + ", ".join(named + paths) + "]);", decl)
        lib = re.sub(r'extension_sql_file!\("\.\./sql/([a-z_]+)\.sql"[^\n]*\);', fix, lib)
        (ROOT / "src" / "lib.rs").write_text(lib)
    missing = []
    for stem, paths in refs.items():
        m = re.search(r'extension_sql_file!\("\.\./sql/' + re.escape(stem) + r'\.sql"[^;]*\);', lib)
        if not m:
            missing.append(f"sql/{stem}.sql is not pulled in by src/lib.rs")
            continue
        decl = m.group(0)
        if "bootstrap" in decl or "finalize" in decl:
            continue  # first (no Rust function exists yet, none referenced) / last (after everything)
        for p in paths:
            if not re.search(r"(?<![A-Za-z0-9_:])" + re.escape(p) + r"(?![A-Za-z0-9_])", decl):
                missing.append(f"sql/{stem}.sql calls {p} but its extension_sql_file! does not require it")
    if missing:
        print("\n".join(missing), file=sys.stderr)
        sys.exit(1)
    print(f"sql requires ok ({sum(len(v) for v in refs.values())} references in {len(refs)} files)")


if __name__ == "__main__":
    main()
