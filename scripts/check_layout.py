#!/usr/bin/env python3
"""The extension crate's layout rules, checked by `make test`:

1. the top-level modules of src/ (those lib.rs declares) depend on each other one way only:
   no import cycle;
2. `unsafe` code lives in the low-level layer src/pg/ only;
3. every `unsafe fn` has a `# Safety` section in its doc comment.

Comments and string literals (raw strings, byte strings, char literals) are stripped before
looking, so prose and SQL in strings never count. Prints the dependency graph; exits 1 with the
findings otherwise.
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
    src = pathlib.Path(args.root) / "src"
    graph = dependencies(modules(src))
    for name in sorted(graph):
        print(f"{name} -> {', '.join(sorted(graph[name])) or '(none)'}")
    problems = [f"import cycle: {' -> '.join(c + [c[0]])}" for c in cycles(graph)]
    problems += unsafe_findings(src, set(args.allow_unsafe))
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        print(f"layout: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print("layout ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
