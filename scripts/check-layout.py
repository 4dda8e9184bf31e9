#!/usr/bin/env python3
"""Layout check for the memory_ext crate (run by `make test`).

Checks, on the Rust sources under <root>/src:

1. The dependency graph between the crate's top-level modules (the `mod` items of src/lib.rs)
   has no cycle. Module A depends on B when code in A (src/A.rs, src/A/mod.rs, src/A/**/*.rs)
   names `crate::B` (a `use`, grouped or not, or a path expression), or reaches the crate root
   through `super::` and names B there. Names at the crate root that are not declared modules
   (macros, functions, re-exports) are ignored. lib.rs is the root, not a node.
2. The `unsafe` keyword appears only in the low-level layer, src/pg/ (src/pg/mod.rs, src/pg/*.rs,
   or src/pg.rs), or in files exempted with `--allow-unsafe PATH` (repeatable).
3. Every `unsafe fn` item (anywhere, src/pg/ included) has a `# Safety` section in its doc comment.

Comments and string/char literals are removed by a small Rust tokenizer first (raw strings,
byte/C strings, char literals vs lifetimes, nested block comments).

Prints the module graph; prints `layout ok` and exits 0 when every check passes, exits 1
otherwise (2 on bad usage). Standard library only.
"""

from __future__ import annotations

import argparse
import bisect
import re
import sys
from collections import defaultdict, deque
from dataclasses import dataclass
from pathlib import Path

# --------------------------------------------------------------------------------------------
# Tokenizer
# --------------------------------------------------------------------------------------------

IDENT, PUNCT, LIT, LIFETIME, COMMENT, DOC, INNER_DOC = (
    "ident", "punct", "lit", "lifetime", "comment", "doc", "inner_doc")
TRIVIA = (COMMENT, DOC, INNER_DOC)


@dataclass(frozen=True)
class Tok:
    kind: str
    text: str  # identifier name, punctuation, literal source text, or comment/doc body
    line: int
    col: int


class LexError(Exception):
    pass


_RAW_STR = re.compile(r'(?:b|c)?r(#*)"')  # r"..", r#".."#, br#".."#, cr".."
_PREFIXED = re.compile(r'(?:b|c)"|b\'')  # b"..", c"..", b'.'


def _is_ident_start(ch: str) -> bool:
    return ch == "_" or ch.isalpha()


def _is_ident_char(ch: str) -> bool:
    return ch == "_" or ch.isalnum()


def tokenize(src: str) -> list[Tok]:
    """Tokens of Rust source, comments included (kinds COMMENT, DOC for `///` and `/** */`,
    INNER_DOC for `//!` and `/*! */`). Raises LexError on an unterminated literal or comment."""
    newlines = [i for i, ch in enumerate(src) if ch == "\n"]

    def pos(i: int) -> tuple[int, int]:
        ln = bisect.bisect_left(newlines, i)  # newlines before offset i
        start = newlines[ln - 1] + 1 if ln else 0
        return ln + 1, i - start + 1

    toks: list[Tok] = []

    def emit(kind: str, text: str, at: int) -> None:
        line, col = pos(at)
        toks.append(Tok(kind, text, line, col))

    def scan_quoted(start: int, quote: str) -> int:
        """`start` is just after the opening quote; returns the offset after the closing one."""
        j = start
        while j < n:
            ch = src[j]
            if ch == "\\":
                j += 2
            elif ch == quote:
                return j + 1
            else:
                j += 1
        raise LexError("unterminated %s literal at line %d" % (
            "string" if quote == '"' else "char", pos(start - 1)[0]))

    n = len(src)
    i = 0
    if src.startswith("#!") and not src.startswith("#!["):  # shebang line
        i = src.find("\n")
        i = n if i < 0 else i
    while i < n:
        ch = src[i]
        if ch.isspace():
            i += 1
            continue
        # comments
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            body = src[i:j]
            if body.startswith("///") and not body.startswith("////"):
                emit(DOC, body[3:], i)
            elif body.startswith("//!"):
                emit(INNER_DOC, body[3:], i)
            else:
                emit(COMMENT, body, i)
            i = j
            continue
        if src.startswith("/*", i):
            depth, j = 0, i
            while True:
                if j >= n:
                    raise LexError("unterminated block comment at line %d" % pos(i)[0])
                if src.startswith("/*", j):
                    depth += 1
                    j += 2
                elif src.startswith("*/", j):
                    depth -= 1
                    j += 2
                    if depth == 0:
                        break
                else:
                    j += 1
            body = src[i:j]
            if body.startswith("/**") and not body.startswith("/***") and body != "/**/":
                emit(DOC, body[3:-2], i)
            elif body.startswith("/*!"):
                emit(INNER_DOC, body[3:-2], i)
            else:
                emit(COMMENT, body, i)
            i = j
            continue
        # raw strings (r"..", r#".."#, br.., cr..) and prefixed strings/bytes
        m = _RAW_STR.match(src, i)
        if m:
            close = '"' + m.group(1)
            j = src.find(close, m.end())
            if j < 0:
                raise LexError("unterminated raw string at line %d" % pos(i)[0])
            emit(LIT, src[i:j + len(close)], i)
            i = j + len(close)
            continue
        m = _PREFIXED.match(src, i)
        if m:
            j = scan_quoted(m.end(), src[m.end() - 1])
            emit(LIT, src[i:j], i)
            i = j
            continue
        if ch == '"':
            j = scan_quoted(i + 1, '"')
            emit(LIT, src[i:j], i)
            i = j
            continue
        # char literal or lifetime/label
        if ch == "'":
            if i + 1 < n and src[i + 1] == "\\":  # '\n', '\'', '\\', '\u{..}'
                j = src.find("'", i + 3)
                if j < 0:
                    raise LexError("unterminated char literal at line %d" % pos(i)[0])
                emit(LIT, src[i:j + 1], i)
                i = j + 1
            elif i + 2 < n and src[i + 2] == "'" and src[i + 1] != "\n":  # 'a', '"', ' '
                emit(LIT, src[i:i + 3], i)
                i += 3
            elif i + 1 < n and _is_ident_start(src[i + 1]):  # 'a, 'static, '_, 'outer:
                j = i + 1
                while j < n and _is_ident_char(src[j]):
                    j += 1
                emit(LIFETIME, src[i:j], i)
                i = j
            else:
                emit(PUNCT, ch, i)
                i += 1
            continue
        # raw identifier r#name (a keyword written this way is not a keyword)
        if src.startswith("r#", i) and i + 2 < n and _is_ident_start(src[i + 2]):
            j = i + 2
            while j < n and _is_ident_char(src[j]):
                j += 1
            emit(IDENT, src[i:j], i)
            i = j
            continue
        if _is_ident_start(ch):
            j = i + 1
            while j < n and _is_ident_char(src[j]):
                j += 1
            emit(IDENT, src[i:j], i)
            i = j
            continue
        if ch.isdigit():
            j = i + 1
            while j < n and (_is_ident_char(src[j])):
                j += 1
            emit(LIT, src[i:j], i)
            i = j
            continue
        if src.startswith("::", i):
            emit(PUNCT, "::", i)
            i += 2
            continue
        emit(PUNCT, ch, i)
        i += 1
    return toks


def string_value(lit: str) -> str | None:
    """The (roughly unescaped) content of a string literal token, or None."""
    m = re.fullmatch(r'(?:b|c)?r(#*)"(.*)"\1', lit, re.S)
    if m:
        return m.group(2)
    m = re.fullmatch(r'(?:b|c)?"(.*)"', lit, re.S)
    if m:
        return m.group(1).replace("\\n", "\n").replace('\\"', '"').replace("\\\\", "\\")
    return None


def is_p(t: Tok | None, text: str) -> bool:
    return t is not None and t.kind == PUNCT and t.text == text


def is_id(t: Tok | None, text: str) -> bool:
    return t is not None and t.kind == IDENT and t.text == text


def code_only(toks: list[Tok]) -> list[Tok]:
    return [t for t in toks if t.kind not in TRIVIA]


def matching_close(code: list[Tok], i: int) -> int:
    """Index of the bracket closing the one at code[i] (or len(code))."""
    pairs = {"(": ")", "[": "]", "{": "}"}
    stack = [pairs[code[i].text]]
    j = i + 1
    while j < len(code) and stack:
        t = code[j]
        if t.kind == PUNCT:
            if t.text in pairs:
                stack.append(pairs[t.text])
            elif t.text in ")]}" and t.text == stack[-1]:
                stack.pop()
                if not stack:
                    return j
        j += 1
    return len(code)


# --------------------------------------------------------------------------------------------
# Crate structure
# --------------------------------------------------------------------------------------------

@dataclass
class Module:
    name: str
    root_file: Path | None  # None: inline `mod name { ... }` in lib.rs
    base_dir: Path | None  # where its submodule files live
    inline_body: list[Tok] | None = None  # code tokens of an inline module


def preceding_attrs(code: list[Tok], i: int) -> list[list[Tok]]:
    """Outer attributes (`#[...]` token lists, inside the brackets) written before the item whose
    first non-visibility token is code[i]; visibility (`pub`, `pub(...)`) is skipped."""
    j = i - 1
    if is_p(code[j] if j >= 0 else None, ")"):  # pub(crate) / pub(in path)
        depth = 0
        while j >= 0:
            if is_p(code[j], ")"):
                depth += 1
            elif is_p(code[j], "("):
                depth -= 1
                if depth == 0:
                    break
            j -= 1
        j -= 1
    if j >= 0 and is_id(code[j], "pub"):
        j -= 1
    attrs = []
    while j >= 0 and is_p(code[j], "]"):
        depth, k = 0, j
        while k >= 0:
            if is_p(code[k], "]"):
                depth += 1
            elif is_p(code[k], "["):
                depth -= 1
                if depth == 0:
                    break
            k -= 1
        if k < 1 or not is_p(code[k - 1], "#"):
            break
        attrs.append(code[k + 1:j])
        j = k - 2
    return attrs


def declared_modules(lib: Path, src_dir: Path) -> list[Module]:
    code = code_only(tokenize(lib.read_text(encoding="utf-8")))
    mods: list[Module] = []
    depth = 0
    for i, t in enumerate(code):
        if t.kind == PUNCT and t.text in "([{":
            depth += 1
        elif t.kind == PUNCT and t.text in ")]}":
            depth -= 1
        elif depth == 0 and is_id(t, "mod") and i + 2 < len(code) and code[i + 1].kind == IDENT:
            name = code[i + 1].text.removeprefix("r#")
            after = code[i + 2]
            if is_p(after, "{"):
                end = matching_close(code, i + 2)
                mods.append(Module(name, None, None, code[i + 3:end]))
                continue
            if not is_p(after, ";"):
                continue
            path_attr = None
            for attr in preceding_attrs(code, i):
                if len(attr) == 3 and is_id(attr[0], "path") and is_p(attr[1], "=") \
                        and attr[2].kind == LIT:
                    path_attr = string_value(attr[2].text)
            if path_attr is not None:
                f = src_dir / path_attr
                base = f.parent if f.name == "mod.rs" else f.parent / f.stem
                mods.append(Module(name, f, base))
            elif (src_dir / (name + ".rs")).is_file():
                mods.append(Module(name, src_dir / (name + ".rs"), src_dir / name))
            else:
                mods.append(Module(name, src_dir / name / "mod.rs", src_dir / name))
    return mods


def module_files(m: Module) -> list[Path]:
    files = []
    if m.root_file is not None and m.root_file.is_file():
        files.append(m.root_file)
    if m.base_dir is not None and m.base_dir.is_dir():
        files += sorted(p for p in m.base_dir.rglob("*.rs") if p.is_file() and p not in files)
    return files


def module_path_of(m: Module, f: Path) -> list[str]:
    """The module path (from the crate root) of the file f of top-level module m."""
    if f == m.root_file or m.base_dir is None:
        return [m.name]
    parts = list(f.relative_to(m.base_dir).with_suffix("").parts)
    if parts and parts[-1] == "mod":
        parts.pop()
    return [m.name] + parts


# --------------------------------------------------------------------------------------------
# Dependencies
# --------------------------------------------------------------------------------------------

def group_heads(code: list[Tok], j: int) -> tuple[list[Tok], int]:
    """code[j] is the `{` of a use group; returns the first segment of every item (nested groups
    without a prefix flattened) and the index after the closing `}`."""
    heads: list[Tok] = []
    j += 1
    item_start = True
    while j < len(code):
        t = code[j]
        if is_p(t, "}"):
            return heads, j + 1
        if is_p(t, ","):
            item_start = True
            j += 1
            continue
        if is_p(t, "{"):
            sub, j = group_heads(code, j)
            if item_start:
                heads += sub
            item_start = False
            continue
        if item_start and t.kind == IDENT:
            heads.append(t)
        item_start = False
        j += 1
    return heads, j


def crate_root_refs(code: list[Tok], file_mod_path: list[str]):
    """Yields the tokens naming an item at the crate root: `crate::X`, `crate::{X, ..}`,
    `$crate::X`, and `super::...::X` / `self::super::X` chains that climb to the root (inline
    `mod x { .. }` blocks are tracked, so `super::` in a `mod tests` stays in the file's module)."""
    inline: list[tuple[str, int]] = []  # (name, brace depth inside it)
    depth = 0
    n = len(code)
    for k, t in enumerate(code):
        if t.kind == PUNCT:
            if t.text == "{":
                depth += 1
                if k >= 2 and is_id(code[k - 2], "mod") and code[k - 1].kind == IDENT:
                    inline.append((code[k - 1].text, depth))
            elif t.text == "}":
                depth -= 1
                while inline and inline[-1][1] > depth:
                    inline.pop()
            continue
        if t.kind != IDENT or t.text not in ("crate", "super", "self"):
            continue
        if k + 1 >= n or not is_p(code[k + 1], "::") or (k > 0 and is_p(code[k - 1], "::")):
            continue
        if t.text == "crate":
            at: list[str] | None = []
            j = k + 2
        else:
            at = file_mod_path + [name for name, _ in inline]
            j = k
            while j + 1 < n and code[j].kind == IDENT and code[j].text in ("super", "self") \
                    and is_p(code[j + 1], "::"):
                if code[j].text == "super":
                    if not at:
                        at = None
                        break
                    at = at[:-1]
                j += 2
        if at != [] or j >= n:
            continue  # still inside this module (or an invalid path)
        nxt = code[j]
        if nxt.kind == IDENT:
            yield nxt
        elif is_p(nxt, "{"):
            yield from group_heads(code, j)[0]


def dependency_graph(mods: list[Module], rel):
    names = {m.name for m in mods}
    graph: dict[str, set[str]] = {m.name: set() for m in mods}
    where: dict[tuple[str, str], list[str]] = defaultdict(list)
    for m in mods:
        sources: list[tuple[str, list[Tok], list[str]]] = []
        if m.inline_body is not None:
            sources.append(("src/lib.rs (mod %s)" % m.name, m.inline_body, [m.name]))
        for f in module_files(m):
            sources.append((rel(f), code_only(tokenize_file(f)), module_path_of(m, f)))
        for label, code, mpath in sources:
            for tok in crate_root_refs(code, mpath):
                dep = tok.text.removeprefix("r#")
                if dep in names and dep != m.name:
                    graph[m.name].add(dep)
                    where[(m.name, dep)].append("%s:%d" % (label, tok.line))
    return graph, where


def tarjan_scc(graph: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = [0]

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return out


def shortest_cycle(graph: dict[str, set[str]], comp: set[str], start: str) -> list[str]:
    """Shortest cycle start -> ... -> start inside the component."""
    prev: dict[str, str] = {}
    queue = deque([start])
    seen = {start}
    while queue:
        v = queue.popleft()
        for w in sorted(graph[v] & comp):
            if w == start:
                path = [v]
                while path[-1] != start:
                    path.append(prev[path[-1]])
                return list(reversed(path)) + [start]
            if w not in seen:
                seen.add(w)
                prev[w] = v
                queue.append(w)
    return [start]


# --------------------------------------------------------------------------------------------
# unsafe
# --------------------------------------------------------------------------------------------

_TOKEN_CACHE: dict[Path, list[Tok]] = {}


def tokenize_file(f: Path) -> list[Tok]:
    if f not in _TOKEN_CACHE:
        try:
            _TOKEN_CACHE[f] = tokenize(f.read_text(encoding="utf-8"))
        except LexError as e:
            raise LexError("%s: %s" % (f, e)) from None
    return _TOKEN_CACHE[f]


def unsafe_kind(code: list[Tok], k: int) -> str:
    nxt = code[k + 1] if k + 1 < len(code) else None
    if is_p(nxt, "{"):
        return "unsafe block"
    if is_p(nxt, "("):
        return "unsafe attribute"
    if nxt is not None and nxt.kind == IDENT and nxt.text in ("fn", "extern", "impl", "trait"):
        return "unsafe " + nxt.text
    return "unsafe"


def is_unsafe_fn_item(code: list[Tok], k: int) -> int | None:
    """If code[k] (`unsafe`) starts the qualifiers of a fn item (`unsafe fn name`, `unsafe extern
    "C" fn name`), the index of the name; fn pointer types (`unsafe fn(..)`) are not items."""
    j = k + 1
    if is_id(code[j] if j < len(code) else None, "extern"):
        j += 1
        if j < len(code) and code[j].kind == LIT:
            j += 1
    if j + 1 < len(code) and is_id(code[j], "fn") and code[j + 1].kind == IDENT:
        return j + 1
    return None


_SAFETY_HEADING = re.compile(r"^\s*\*?\s*#+\s*Safety\s*:?\s*$", re.M)


def doc_before(toks: list[Tok], k: int) -> str:
    """Doc text attached to the fn item whose `unsafe` keyword is toks[k] (full token list):
    walks back over fn qualifiers and visibility, then over outer attributes, doc comments and
    plain comments, collecting `///`, `/** */` and `#[doc = ".."]`."""
    j = k - 1
    while j >= 0 and toks[j].kind == IDENT and toks[j].text in ("const", "async", "default"):
        j -= 1
    if j >= 0 and is_p(toks[j], ")"):  # pub(crate), pub(in path)
        d, m = 0, j
        while m >= 0:
            if is_p(toks[m], ")"):
                d += 1
            elif is_p(toks[m], "("):
                d -= 1
                if d == 0:
                    break
            m -= 1
        if m >= 1 and is_id(toks[m - 1], "pub"):
            j = m - 1
    if j >= 0 and is_id(toks[j], "pub"):
        j -= 1
    docs: list[str] = []
    while j >= 0:
        t = toks[j]
        if t.kind == DOC:
            docs.append(t.text)
            j -= 1
        elif t.kind == COMMENT:
            j -= 1
        elif is_p(t, "]"):
            d, m = 0, j
            while m >= 0:
                if is_p(toks[m], "]"):
                    d += 1
                elif is_p(toks[m], "["):
                    d -= 1
                    if d == 0:
                        break
                m -= 1
            if m < 1 or not is_p(toks[m - 1], "#"):
                break
            body = [x for x in toks[m + 1:j] if x.kind not in TRIVIA]
            if len(body) == 3 and is_id(body[0], "doc") and is_p(body[1], "=") \
                    and body[2].kind == LIT:
                docs.append(string_value(body[2].text) or "")
            j = m - 2
        else:
            break
    return "\n".join(reversed(docs))


# --------------------------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description="Check the module layout of the memory_ext crate: no import cycles between "
                    "top-level modules, `unsafe` only in src/pg/, `# Safety` docs on unsafe fns.")
    ap.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent,
                    help="checkout to check (default: the repository holding this script)")
    ap.add_argument("--allow-unsafe", action="append", default=[], metavar="PATH",
                    help="exempt this file (or directory) from the unsafe-outside-src/pg/ rule; "
                         "relative to --root or the current directory; repeatable")
    args = ap.parse_args(argv)

    root = args.root.resolve()
    src_dir = root / "src"
    lib = src_dir / "lib.rs"
    if not lib.is_file():
        print("check-layout: %s not found" % lib, file=sys.stderr)
        return 2

    def rel(p: Path) -> str:
        try:
            return p.resolve().relative_to(root).as_posix()
        except ValueError:
            return str(p)

    problems: list[str] = []
    notes: list[str] = []

    # ---- module graph
    try:
        mods = declared_modules(lib, src_dir)
        graph, where = dependency_graph(mods, rel)
    except LexError as e:
        print("check-layout: cannot tokenize %s" % e, file=sys.stderr)
        return 1
    for m in mods:
        if m.inline_body is None and not module_files(m):
            problems.append("module `%s` is declared in src/lib.rs but %s does not exist"
                            % (m.name, rel(m.root_file)))

    print("module graph (src/lib.rs modules; A -> B: A uses crate::B):")
    for name in sorted(graph):
        deps = sorted(graph[name])
        print("  %s -> %s" % (name, ", ".join(deps) if deps else "(none)"))

    for comp in sorted(tarjan_scc(graph)):
        if len(comp) < 2:
            continue
        cset = set(comp)
        cycles: list[list[str]] = []
        seen: set[tuple[str, ...]] = set()
        for v in comp:
            cyc = shortest_cycle(graph, cset, v)
            body = cyc[:-1]
            r = body.index(min(body))
            key = tuple(body[r:] + body[:r])
            if key not in seen:
                seen.add(key)
                cycles.append(list(key) + [key[0]])
        msg = ["import cycle: %s" % " -> ".join(c) for c in cycles]
        if len(comp) > 2:
            msg.append("  strongly connected: %s" % ", ".join(comp))
        for a in comp:
            for b in sorted(graph[a] & cset):
                locs = where[(a, b)]
                more = " (+%d more)" % (len(locs) - 3) if len(locs) > 3 else ""
                msg.append("  %s -> %s at %s%s" % (a, b, ", ".join(locs[:3]), more))
        problems.append("\n".join(msg))

    # ---- unsafe outside src/pg/, and # Safety docs
    allowed: list[tuple[str, list[Path]]] = []
    for a in args.allow_unsafe:
        p = Path(a)
        cands = [p] if p.is_absolute() else [root / p, Path.cwd() / p]
        allowed.append((a, [c.resolve() for c in cands if c.exists()]))
    used_allow: set[str] = set()

    def exemption(f: Path) -> str | None:
        fr = f.resolve()
        for a, paths in allowed:
            if any(fr == p or p in fr.parents for p in paths):
                return a
        return None

    all_files = sorted(p for p in src_dir.rglob("*.rs") if p.is_file())
    owned = {f.resolve() for m in mods for f in module_files(m)} | {lib.resolve()}
    for f in all_files:
        if f.resolve() not in owned and f.relative_to(src_dir).parts[0] != "bin":
            notes.append("note: %s is not under any module declared in src/lib.rs "
                          "(not in the graph)" % rel(f))

    unsafe_hits: list[str] = []
    undocumented: list[str] = []
    exempt_hits: dict[str, int] = defaultdict(int)
    for f in all_files:
        try:
            toks = tokenize_file(f)
        except LexError as e:
            problems.append("cannot tokenize %s" % e)
            continue
        code = code_only(toks)
        parts = f.relative_to(src_dir).parts
        in_pg = (len(parts) > 1 and parts[0] == "pg") or parts == ("pg.rs",)
        ex = None if in_pg else exemption(f)
        lines = f.read_text(encoding="utf-8").splitlines()
        full_index = {id(t): i for i, t in enumerate(toks)}
        for k, t in enumerate(code):
            if not is_id(t, "unsafe"):
                continue
            if not in_pg:
                if ex is not None:
                    used_allow.add(ex)
                    exempt_hits[rel(f)] += 1
                else:
                    src_line = lines[t.line - 1].strip() if t.line <= len(lines) else ""
                    if len(src_line) > 90:
                        src_line = src_line[:87] + "..."
                    unsafe_hits.append("  %s:%d: %s: %s" % (rel(f), t.line, unsafe_kind(code, k),
                                                           src_line))
            name_at = is_unsafe_fn_item(code, k)
            if name_at is not None:
                doc = doc_before(toks, full_index[id(t)])
                if not _SAFETY_HEADING.search(doc):
                    undocumented.append("  %s:%d: unsafe fn %s" % (rel(f), t.line,
                                                                  code[name_at].text))

    if unsafe_hits:
        nfiles = len({h.split(":")[0] for h in unsafe_hits})
        problems.append("`unsafe` outside src/pg/ (%d in %d file(s); move it into the pg layer, "
                        "or exempt a file with --allow-unsafe PATH while it is moved):\n%s"
                        % (len(unsafe_hits), nfiles, "\n".join(unsafe_hits)))
    if undocumented:
        problems.append("unsafe fn without a `# Safety` section in its doc comment (%d):\n%s"
                        % (len(undocumented), "\n".join(undocumented)))
    for a, paths in allowed:
        if not paths:
            notes.append("warning: --allow-unsafe %s: no such file or directory" % a)
        elif a not in used_allow:
            notes.append("note: --allow-unsafe %s is not needed (no unsafe there)" % a)
    for f, count in sorted(exempt_hits.items()):
        notes.append("note: %s: %d unsafe use(s) exempted by --allow-unsafe" % (f, count))

    for note in notes:
        print(note)
    sys.stdout.flush()
    if problems:
        for p in problems:
            for line in p.splitlines():
                print(line if line.startswith(" ") else "check-layout: " + line, file=sys.stderr)
        print("check-layout: FAILED (%d problem(s))" % len(problems), file=sys.stderr)
        return 1
    print("layout ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
