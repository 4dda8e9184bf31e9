#!/usr/bin/env python3
"""The extension crate's layout rules, checked by `make test`:

1. no import cycle between FILES, in src/ and in core/src/: a file (a module or a submodule,
   mod.rs included) never imports, directly or through others, a file that imports it back.
   A file's own `mod x;` declarations are not imports; `use super::...` in a child is. The crate
   roots (lib.rs) wire everything and are left out as importers;
2. `unsafe` code lives in the low-level layer src/pg/ only;
3. every `unsafe fn` has a `# Safety` section in its doc comment;
4. src/pg/ is generic: it imports nothing of the crate outside src/pg/ (no capability code), and
   nothing of memory_core but the few pure text helpers of PG_CORE_HELPERS (no core types, no
   rules);
5. capability modules (CAPABILITIES) do not import each other sideways, save the edges of
   SIDEWAYS, each with its reason; they share the pg layer and the shared modules (errors,
   gucs, gates, trust) instead;
6. a file of src/ or core/src/ longer than LONG_LINES lines says why in its header comment (a
   sentence with "long" in it);
7. no PL/pgSQL function of sql/*.sql is longer than PLPGSQL_LINES lines of body (SPEC §20): a
   longer one is cut into functions of its steps. The longest are printed on every run;
8. docs/contributing.md's layout block holds against the tree: every file of src/, core/src/,
   sql/, scripts/, mcp/src/ and every folder of src/ and tests/ is named in it (by name, with or
   without its extension), and every file name it gives (name.rs, .sql, .py, .sh) exists.

Comments and string literals (raw strings, byte strings, char literals) are stripped before
looking, so prose and SQL in strings never count. Prints the module dependency graph; exits 1
with the findings otherwise.
"""
import argparse
import pathlib
import re
import sys


def strip(src: str) -> str:
    """Source with comments and string/char literals blanked (newlines kept for line numbers)."""
    out, i, n = [], 0, len(src)
    keep = lambda s: "".join("\n" if c == "\n" else " " for c in s)  # noqa: E731
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(keep(src[i:j]))
            i = j
        elif src.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(keep(src[i:j]))
            i = j
        elif re.match(r'b?r#*"', src[i:i + 40]) and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            m = re.match(r'(b?r)(#*)"', src[i:])
            close = '"' + m.group(2)
            j = src.find(close, i + len(m.group(0)))
            j = n if j < 0 else j + len(close)
            out.append(keep(src[i:j]))
            i = j
        elif c == '"' or (c == "b" and src.startswith('b"', i) and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_"))):
            j = i + (2 if c == "b" else 1)
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            out.append(keep(src[i:j + 1]))
            i = j + 1
        elif c == "'":
            # A char literal ('x', '\n', '\'', '\u{..}'), or a lifetime ('a), which is kept.
            m = re.match(r"'(\\(u\{[0-9a-fA-F]+\}|x[0-9a-fA-F]{2}|.)|[^\\'])'", src[i:])
            if m:
                out.append(keep(m.group(0)))
                i += len(m.group(0))
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def modules(src_dir: pathlib.Path) -> dict:
    lib = strip((src_dir / "lib.rs").read_text())
    names = re.findall(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+([a-z_][a-z0-9_]*)\s*;", lib, re.M)
    out = {}
    for name in names:
        files = []
        if (src_dir / f"{name}.rs").exists():
            files.append(src_dir / f"{name}.rs")
        if (src_dir / name).is_dir():
            files.extend(sorted((src_dir / name).rglob("*.rs")))
        out[name] = files
    return out


def dependencies(mods: dict) -> dict:
    graph = {}
    names = set(mods)
    for name, files in mods.items():
        deps = set()
        for f in files:
            code = strip(f.read_text())
            for m in re.finditer(r"\bcrate\s*::\s*(\{[^}]*\}|[a-z_][a-z0-9_]*)", code, re.S):
                target = m.group(1)
                if target.startswith("{"):
                    heads = re.findall(r"(?:^|[{,])\s*([a-z_][a-z0-9_]*)", target)
                else:
                    heads = [target]
                deps.update(h for h in heads if h in names and h != name)
        graph[name] = deps
    return graph


def cycles(graph: dict) -> list:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


IDENT = r"[A-Za-z_][A-Za-z0-9_]*"

class Crate:
    def __init__(self, root_dir):
        self.root = root_dir
        self.files = {}   # module path tuple -> file
        self._walk((), root_dir / "lib.rs")
        # #[macro_export] macros live at the crate root but are written in their own file.
        self.macros = {}
        for mp, f in self.files.items():
            for m in re.finditer(r"#\[macro_export\]\s*macro_rules!\s*(" + IDENT + ")", strip(f.read_text())):
                self.macros[m.group(1)] = mp

    def _walk(self, path, f):
        self.files[path] = f
        code = strip(f.read_text())
        code = blank_inline(code)
        for m in re.finditer(r"^\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+(" + IDENT + r")\s*;", code, re.M):
            name = m.group(1)
            base = f.parent if f.name in ("lib.rs", "mod.rs") else f.parent / f.stem
            for cand in (base / f"{name}.rs", base / name / "mod.rs"):
                if cand.exists():
                    self._walk(path + (name,), cand)
                    break

def inline_mods(code):
    """(start, end) spans of `mod x { ... }` blocks."""
    spans = []
    for m in re.finditer(r"\bmod\s+" + IDENT + r"\s*\{", code):
        depth, j = 1, m.end()
        while j < len(code) and depth:
            if code[j] == "{": depth += 1
            elif code[j] == "}": depth -= 1
            j += 1
        spans.append((m.start(), j))
    return spans

def blank_inline(code):
    out = list(code)
    for s, e in inline_mods(code):
        for i in range(s, e):
            if out[i] != "\n": out[i] = " "
    return "".join(out)

def expand_use(tree):
    """`a::{b, c::{d, e}}` -> [[a,b],[a,c,d],[a,c,e]] (segments only; `as` dropped)."""
    tree = re.sub(r"\s+", "", tree)
    def parse(s, i):
        # returns (list of paths, index)
        paths, prefix = [], []
        seg = ""
        while i < len(s):
            c = s[i]
            if s.startswith("::", i):
                prefix.append(seg); seg = ""; i += 2; continue
            if c == "{":
                subs, i = parse_list(s, i + 1)
                paths.extend(prefix + p for p in subs)
                return paths, i
            if c in ",}":
                break
            seg += c; i += 1
        if seg:
            paths.append(prefix + [seg])
        elif prefix:
            paths.append(prefix)
        return paths, i
    def parse_list(s, i):
        out = []
        while i < len(s) and s[i] != "}":
            p, i = parse(s, i)
            out.extend(p)
            if i < len(s) and s[i] == ",": i += 1
        return out, i + 1
    return parse(tree, 0)[0]

def edges_of(crate, mpath, f):
    code = strip(f.read_text())
    spans = inline_mods(code)
    children = {p[-1] for p in crate.files if len(p) == len(mpath) + 1 and p[:len(mpath)] == mpath}
    paths = []  # (pos, [segments])
    for m in re.finditer(r"\buse\s+([^;]+);", code):
        for p in expand_use(m.group(1)):
            p = [re.split(r"(?<=[a-z0-9_])as(?=[A-Za-z_])", s)[0] if " " not in s else s for s in p]
            paths.append((m.start(), p))
    for m in re.finditer(r"(\$?\b" + IDENT + r")((?:\s*::\s*" + IDENT + r")+)", code):
        if code[:m.start()].rstrip().endswith("::"): continue
        paths.append((m.start(), [m.group(1)] + re.findall(IDENT, m.group(2))))
    deps = set()
    for pos, p in paths:
        if not p: continue
        head = p[0]
        depth_inline = sum(1 for s, e in spans if s <= pos < e)
        if head in ("crate", "$crate"):
            cur, rest = (), p[1:]
        elif head == "super":
            n = 0
            while n < len(p) and p[n] == "super": n += 1
            up = max(0, n - depth_inline)
            cur, rest = mpath[:len(mpath) - up], p[n:]
        elif head == "self":
            cur, rest = mpath, p[1:]
        elif head in children:
            cur, rest = mpath, p
        else:
            continue
        for seg in rest:
            if cur + (seg,) in crate.files:
                cur = cur + (seg,)
            else:
                break
        if cur == () and rest and rest[0] in crate.macros:
            cur = crate.macros[rest[0]]
        if cur != mpath and mpath != ():
            deps.add(cur)
    return deps

def file_graph(root_dir: pathlib.Path):
    """The crate at `root_dir` (its lib.rs): {file: files it imports}, paths relative to the root's parent's parent."""
    c = Crate(root_dir)
    name = lambda mp: c.files[mp].as_posix()  # noqa: E731
    return {name(mp): {name(d) for d in edges_of(c, mp, f)} for mp, f in c.files.items()}


# Capability modules of src/ (top-level modules): each holds one capability and its SQL surface.
CAPABILITIES = {"audit", "classify", "consent", "drift", "feedback", "lifecycle", "recall", "retention"}
# Sideways imports between capabilities that are allowed, and why.
SIDEWAYS = {
    ("classify", "retention"): "the classify trigger stamps retention on the row it classifies (retention::stamp)",
    ("drift", "audit"): "a detected drift is appended to the org's audit chain through audit's Appender",
    ("feedback", "audit"): "an outcome is appended to the org's audit chain through audit's Appender",
    ("recall", "audit"): "memory.recall's read event goes through audit's one door of read events (audit::reads::append_read)",
}
# memory_core functions src/pg/ may call: text formats, no rule and no type.
PG_CORE_HELPERS = {"memory_core::audit::write_uuid", "memory_core::shards::shard_id_suffix"}
LONG_LINES = 600


def file_cycles(root: pathlib.Path) -> list:
    found = []
    for crate in (root / "src", root / "core" / "src"):
        if not (crate / "lib.rs").exists():
            continue
        graph = {pathlib.Path(k).relative_to(root).as_posix(): {pathlib.Path(d).relative_to(root).as_posix() for d in v}
                 for k, v in file_graph(crate).items()}
        for c in cycles(graph):
            found.append(f"import cycle between files: {', '.join(c)} import each other")
    return found


def pg_findings(root: pathlib.Path) -> list:
    found = []
    src = root / "src"
    graph = file_graph(src)
    pg = (src / "pg").as_posix() + "/"
    for f, deps in sorted(graph.items()):
        if not f.startswith(pg):
            continue
        rel = pathlib.Path(f).relative_to(root).as_posix()
        for d in sorted(deps):
            if not d.startswith(pg) and not d.endswith("/lib.rs"):
                found.append(f"{rel}: src/pg/ imports {pathlib.Path(d).relative_to(root).as_posix()} (capability code above the pg layer)")
        code = strip(pathlib.Path(f).read_text())
        for m in re.finditer(r"\bmemory_core((?:\s*::\s*[A-Za-z_][A-Za-z0-9_]*)+|\s*::\s*\{)", code):
            path = re.sub(r"\s+", "", m.group(0))
            if path not in PG_CORE_HELPERS:
                line = code.count("\n", 0, m.start()) + 1
                found.append(f"{rel}:{line}: src/pg/ uses {path} (core types and rules belong to the capability modules)")
    return found


def sideways_findings(graph: dict) -> list:
    found = []
    for a in sorted(graph):
        for b in sorted(graph[a]):
            if a in CAPABILITIES and b in CAPABILITIES and (a, b) not in SIDEWAYS:
                found.append(f"sideways import between capabilities: {a} -> {b}")
    return found


def long_files(root: pathlib.Path) -> list:
    found = []
    for crate in (root / "src", root / "core" / "src"):
        for f in sorted(crate.rglob("*.rs")):
            lines = f.read_text().splitlines()
            if len(lines) <= LONG_LINES:
                continue
            header = []
            for line in lines:
                t = line.strip()
                if t.startswith("//"):
                    header.append(t)
                elif t:
                    break
            if not re.search(r"\blong\b", " ".join(header), re.I):
                found.append(f"{f.relative_to(root).as_posix()}: {len(lines)} lines, and its header comment does not say why it is long")
    return found


PLPGSQL_LINES = 80


def plpgsql_lengths(root: pathlib.Path) -> dict:
    """{function name: the body lines of its longest PL/pgSQL overload} over sql/*.sql (the
    released scripts under sql/released/ are history, not code)."""
    sys.path.insert(0, str(root / "scripts"))
    from gen_upgrade import statements
    out = {}
    for f in sorted((root / "sql").glob("*.sql")):
        for st in statements(f.read_text()):
            m = re.search(r"CREATE\s+(?:OR\s+REPLACE\s+)?(?:FUNCTION|PROCEDURE)\s+([\w.]+)\s*\(", st)
            if not m or not re.search(r"LANGUAGE\s+plpgsql", st, re.I):
                continue
            body = re.search(r"AS\s+(\$\w*\$)(.*?)\1", st, re.S)
            if body:
                out[m.group(1)] = max(out.get(m.group(1), 0), body.group(2).count("\n"))
    return out


def plpgsql_findings(root: pathlib.Path) -> list:
    lengths = plpgsql_lengths(root)
    longest = sorted(lengths.items(), key=lambda kv: -kv[1])[:5]
    print("longest PL/pgSQL functions: " + ", ".join(f"{n} {k}" for n, k in longest))
    found = []
    for name, n in sorted(lengths.items()):
        if n > PLPGSQL_LINES:
            found.append(f"{name}: a PL/pgSQL function of {n} lines (at most {PLPGSQL_LINES}: cut it into functions of its steps)")
    return found


LAYOUT_GLOBS = ["src/*.rs", "src/*/", "core/src/*.rs", "sql/*.sql", "scripts/*", "tests/*/", "mcp/src/*.rs"]


def contributing_findings(root: pathlib.Path) -> list:
    doc = (root / "docs" / "contributing.md").read_text()
    parts = doc.split("## Layout", 1)
    if len(parts) < 2 or parts[1].count("```") < 2:
        return ["docs/contributing.md: no ## Layout section with a fenced block"]
    block = parts[1].split("```", 2)[1]
    words = set(re.findall(r"[\w.-]+", block))
    found = []
    for pattern in LAYOUT_GLOBS:
        for p in sorted(root.glob(pattern)):
            if p.name not in words and p.name.split(".")[0] not in words:
                found.append(f"docs/contributing.md: the layout block does not name {p.relative_to(root).as_posix()}")
    names = {p.name for p in root.rglob("*") if not {".git", "target", ".venv", "node_modules"} & set(p.parts)}
    for w in sorted(words):
        if re.fullmatch(r"[\w-]+\.(rs|sql|py|sh)", w) and w not in names:
            found.append(f"docs/contributing.md: the layout block names {w}, which is not in the tree")
    return found


def unsafe_findings(src_dir: pathlib.Path, allow: set) -> list:
    found = []
    for f in sorted(src_dir.rglob("*.rs")):
        rel = f.relative_to(src_dir.parent).as_posix()
        raw = f.read_text()
        code = strip(raw)
        lines = raw.splitlines()
        in_pg = f.is_relative_to(src_dir / "pg")
        for m in re.finditer(r"\bunsafe\b", code):
            line = code.count("\n", 0, m.start()) + 1
            if not in_pg and rel not in allow:
                found.append(f"{rel}:{line}: unsafe outside src/pg/")
        for m in re.finditer(r"\bunsafe\s+(?:extern\s+\"[^\"]*\"\s+)?fn\b", code):
            line = code.count("\n", 0, m.start()) + 1
            # The doc comment above, skipping attributes and the visibility on the same line.
            k, doc = line - 2, []
            while k >= 0 and (lines[k].strip().startswith("#[") or lines[k].strip().startswith("///")):
                if lines[k].strip().startswith("///"):
                    doc.append(lines[k])
                k -= 1
            if not any("# Safety" in d for d in doc):
                found.append(f"{rel}:{line}: unsafe fn without a `# Safety` section")
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=str(pathlib.Path(__file__).resolve().parents[1]))
    ap.add_argument("--allow-unsafe", action="append", default=[], metavar="PATH",
                    help="a file (relative to the root, e.g. src/x.rs) allowed to hold unsafe code outside src/pg/")
    args = ap.parse_args()
    root = pathlib.Path(args.root)
    src = root / "src"
    graph = dependencies(modules(src))
    for name in sorted(graph):
        print(f"{name} -> {', '.join(sorted(graph[name])) or '(none)'}")
    problems = [f"import cycle: {' -> '.join(c + [c[0]])}" for c in cycles(graph)]
    problems += file_cycles(root)
    problems += unsafe_findings(src, set(args.allow_unsafe))
    problems += pg_findings(root)
    problems += sideways_findings(graph)
    problems += long_files(root)
    problems += plpgsql_findings(root)
    problems += contributing_findings(root)
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        print(f"layout: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print("layout ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
