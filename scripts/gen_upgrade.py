#!/usr/bin/env python3
"""Generates an upgrade script memory_ext--FROM--TO.sql (docs/operations.md, "Releases").

    gen_upgrade.py FROM TO INSTALL_SQL HAND_WRITTEN > memory_ext--FROM--TO.sql

When HAND_WRITTEN.post.sql exists (sql/updates/FROM--TO.post.sql), it runs last, after the
definitions: what needs this release's functions (a CHECK calling a new function, re-attaching
triggers to governed tables with the new memory.govern).

INSTALL_SQL is release TO's install script as pgrx generates it (`cargo pgrx package` writes it
as memory_ext--TO.sql: sql/*.sql and the C functions' declarations, in dependency order).
HAND_WRITTEN is sql/updates/FROM--TO.sql: what only an upgrade does (new tables and columns,
data moves, drops of functions whose signature or result changed, policies), run first.

Then every re-appliable statement of the install script follows, in install order:
  - CREATE FUNCTION / PROCEDURE      -> CREATE OR REPLACE (Rust and SQL functions alike)
  - CREATE VIEW                      -> CREATE OR REPLACE VIEW
  - CREATE TRIGGER (not constraint)  -> CREATE OR REPLACE TRIGGER
  - COMMENT ON, GRANT, REVOKE, ALTER FUNCTION, ALTER VIEW, ALTER TABLE .. ENABLE/DISABLE .. TRIGGER
    (CREATE OR REPLACE resets a view's options and a trigger's firing mode: these set them again)
  - a DO block or SELECT whose leading comment has the line `-- upgrade: reapply` (idempotent
    statements the install script runs, such as pinning search_path on every function).
Everything else (tables, types, indexes, policies, event triggers, data) runs once, at install;
a change to it goes into the hand-written file. tests/upgrade/run.sh compares the upgraded
catalog with a fresh install, so a change left out of the hand-written file fails there.
"""
import re
import sys

MARK = "-- upgrade: reapply"


def statements(sql):
    """Splits SQL text into statements (each with the comments before it), honouring quotes,
    dollar quotes, comments and psql backslash lines. Yields the text of each, `;` included."""
    i, n, start = 0, len(sql), 0
    dollar = re.compile(r"\$([A-Za-z_][A-Za-z_0-9]*)?\$")
    while i < n:
        c = sql[i]
        if c == "-" and sql.startswith("--", i):
            j = sql.find("\n", i)
            i = n if j < 0 else j + 1
        elif c == "/" and sql.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if sql.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif sql.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif c == "'":
            escapes = i > 0 and sql[i - 1] in "eE" and (i < 2 or not (sql[i - 2].isalnum() or sql[i - 2] == "_"))
            i += 1
            while i < n:
                if escapes and sql[i] == "\\":
                    i += 2
                elif sql[i] == "'":
                    if sql.startswith("''", i):
                        i += 2
                    else:
                        i += 1
                        break
                else:
                    i += 1
        elif c == '"':
            j = sql.find('"', i + 1)
            while j >= 0 and sql.startswith('""', j):
                j = sql.find('"', j + 2)
            i = n if j < 0 else j + 1
        elif c == "$" and (i == 0 or not (sql[i - 1].isalnum() or sql[i - 1] == "_")):
            m = dollar.match(sql, i)
            if m:
                end = sql.find(m.group(0), m.end())
                if end < 0:
                    raise SystemExit(f"gen_upgrade: unterminated {m.group(0)} quote at offset {i}")
                i = end + len(m.group(0))
            else:
                i += 1
        elif c == "\\" and (i == 0 or sql[i - 1] == "\n"):
            j = sql.find("\n", i)  # a psql meta-command line
            yield sql[start:(n if j < 0 else j + 1)]
            i = start = n if j < 0 else j + 1
        elif c == ";":
            i += 1
            yield sql[start:i]
            start = i
        else:
            i += 1
    if sql[start:].strip():
        yield sql[start:]


def strip_comments(stmt):
    """The statement without its leading comments and blank lines."""
    s = stmt
    while True:
        s = s.lstrip()
        if s.startswith("--"):
            s = s[s.find("\n") + 1:] if "\n" in s else ""
        elif s.startswith("/*"):
            s = s[s.find("*/") + 2:]
        else:
            return s


CREATE = re.compile(r"CREATE\s+(OR\s+REPLACE\s+)?(FUNCTION|PROCEDURE|VIEW|TRIGGER)\b", re.I)
ALWAYS = re.compile(r"(COMMENT\s+ON|GRANT|REVOKE|ALTER\s+FUNCTION|ALTER\s+VIEW"
                    r"|ALTER\s+TABLE\s+\S+\s+(ENABLE|DISABLE)\s+(ALWAYS\s+|REPLICA\s+)?TRIGGER)\b", re.I)
MARKABLE = re.compile(r"(DO|SELECT)\b", re.I)


def reapplied(stmt):
    """The statement as the upgrade re-applies it, or None when it runs once (at install)."""
    body = strip_comments(stmt)
    m = CREATE.match(body)
    if m:
        return body[:m.start()] + f"CREATE OR REPLACE {m.group(2).upper()}" + body[m.end():]
    if ALWAYS.match(body):
        return body
    if MARKABLE.match(body) and any(line.strip() == MARK for line in stmt[:len(stmt) - len(body)].splitlines()):
        return body
    return None


def main(argv):
    if len(argv) != 5:
        raise SystemExit(__doc__)
    old, new, install, hand = argv[1:]
    install_sql = open(install, encoding="utf-8").read()
    hand_sql = open(hand, encoding="utf-8").read()
    out = [
        f"-- memory_ext {old} -> {new}. GENERATED by scripts/gen_upgrade.py from sql/updates/{old}--{new}.sql\n",
        f"-- and the {new} install script: edit those, never this file.\n",
        f"\\echo Use \"ALTER EXTENSION memory_ext UPDATE TO '{new}'\" to load this file. \\quit\n\n",
        f"-- ==== sql/updates/{old}--{new}.sql (what only this upgrade does)\n",
        hand_sql.rstrip() + "\n\n",
        f"-- ==== the definitions of {new}, re-applied\n",
    ]
    kept = 0
    for stmt in statements(install_sql):
        r = reapplied(stmt)
        if r is not None:
            out.append(r.rstrip() + "\n\n")
            kept += 1
    post = hand[:-len(".sql")] + ".post.sql" if hand.endswith(".sql") else hand + ".post"
    try:
        post_sql = open(post, encoding="utf-8").read()
        out += [f"-- ==== sql/updates/{old}--{new}.post.sql (after the definitions)\n", post_sql.rstrip() + "\n"]
    except FileNotFoundError:
        pass
    sys.stdout.write("".join(out))
    print(f"gen_upgrade: {old} -> {new}: {kept} statements re-applied after the hand-written part", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv)
