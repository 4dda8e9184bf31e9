"""Every SQL snippet of the documentation runs: each ```sql block of README.md and docs/*.md, file by
file in a fresh database, in order (a file's later blocks use what its earlier ones made), as the
superuser unless the block's first line is `-- as <role>`. A statement followed on its line by
`-- ERROR <SQLSTATE>` must fail with that SQLSTATE; a block whose first line is `-- not run: <why>`
is skipped (it needs another cluster, pg_cron preloaded, Citus). A block whose first line is
`-- needs pgvector` (every block that creates it must be) runs where pgvector is installed; where
it is not, that block and the file's later ones (which use what it made) are not run and the test
says so as a skip. Also: every function of schema memory is documented, and every relative link of
the docs reaches a file and a heading."""
import re

import psycopg
import pytest

from conftest import ROOT

DOCS = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
BLOCK = re.compile(r"^```sql\n(.*?)^```", re.S | re.M)
ROLE = re.compile(r"--\s*as\s+([a-z_][a-z0-9_]*)\b")
NOT_RUN = re.compile(r"--\s*not run:\s*(\S.*)")
ERROR = re.compile(r"--\s*ERROR\s+([0-9A-Z]{5})\b")
NEEDS_VECTOR = re.compile(r"--\s*needs pgvector\b")
CREATES_VECTOR = re.compile(r"CREATE\s+EXTENSION\s+(IF\s+NOT\s+EXISTS\s+)?vector\b", re.I)


def statements(sql):
    """[(statement, expected SQLSTATE or None)]: split at a `;` that ends its line (or is followed
    only by a line comment), outside quotes, dollar quotes and comments."""
    out, start, i, n = [], 0, 0, len(sql)
    while i < n:
        c = sql[i]
        if sql.startswith("--", i):
            i = sql.find("\n", i)
            i = n if i < 0 else i
            continue
        if sql.startswith("/*", i):
            i = sql.index("*/", i) + 2
            continue
        if c in "'\"":
            i = sql.index(c, i + 1) + 1
            continue
        m = re.match(r"\$[A-Za-z_]*\$", sql[i:])
        if m:
            i = sql.index(m.group(0), i + len(m.group(0))) + len(m.group(0))
            continue
        if c == ";":
            eol = sql.find("\n", i)
            eol = n if eol < 0 else eol
            rest = sql[i + 1:eol].strip()
            if not rest or rest.startswith("--"):
                body = re.sub(r"^(\s*--[^\n]*\n|\s*\n)*", "", sql[start:i + 1])
                if re.sub(r"--[^\n]*", "", body).strip(" \n;"):
                    m = ERROR.match(rest)
                    out.append((body.strip(), m.group(1) if m else None))
                start = i = eol
                continue
        i += 1
    tail = re.sub(r"--[^\n]*", "", sql[start:]).strip()
    assert not tail, f"a statement without its closing semicolon: {sql[start:].strip()!r}"
    return out


def blocks(path):
    return BLOCK.findall(path.read_text())


def test_the_splitter():
    sql = ("SELECT 1;  -- ERROR 22023 (why)\nDO $$ BEGIN PERFORM 1; END $$;\n"
           "SELECT ';' -- a; comment\n  , 2;\n-- only a comment;\nSELECT $t$a;\n$t$;\n")
    assert statements(sql) == [("SELECT 1;", "22023"), ("DO $$ BEGIN PERFORM 1; END $$;", None),
                               ("SELECT ';' -- a; comment\n  , 2;", None), ("SELECT $t$a;\n$t$;", None)]


@pytest.mark.parametrize("path", [p for p in DOCS if blocks(p)], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_sql_snippet_runs(dsn, path):
    text_blocks = blocks(path)
    # Every block that creates pgvector says so on its first line, whether or not the blocks
    # before it run here.
    for k, block in enumerate(text_blocks, 1):
        first = block.split("\n", 1)[0].strip()
        assert first.startswith("-- not run") or NEEDS_VECTOR.match(first) or not CREATES_VECTOR.search(block), \
            f"block {k} creates pgvector: its first line is `-- needs pgvector`"
    created = sorted({r for b in text_blocks for r in re.findall(r"CREATE ROLE ([a-z_][a-z0-9_]*)", b)})
    with psycopg.connect(dsn, autocommit=True) as c:
        have_vector = c.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'").fetchone() is not None
        not_run = None
        # Roles are cluster-wide: the docs create theirs anew, and they are dropped again after.
        for r in created:
            c.execute(f"DROP ROLE IF EXISTS {r}")
        try:
            for k, block in enumerate(text_blocks, 1):
                first = block.split("\n", 1)[0]
                if first.lstrip().startswith("-- not run"):
                    assert NOT_RUN.match(first.strip()), f"block {k}: `-- not run: <why>` gives a reason"
                    continue
                needs_vector = NEEDS_VECTOR.match(first.strip())
                if needs_vector and not have_vector:
                    not_run = k
                    break
                role = ROLE.match(first.strip())
                if role:
                    c.execute(f"SET ROLE {role.group(1)}")
                try:
                    for stmt, sqlstate in statements(block):
                        where = f"{path.name}, block {k}: {stmt}"
                        if sqlstate:
                            with pytest.raises(psycopg.Error) as e:
                                c.execute(stmt)
                            assert e.value.sqlstate == sqlstate, f"{where}\nfailed with {e.value.sqlstate}: {e.value}"
                        else:
                            try:
                                c.execute(stmt)
                            except psycopg.Error as e:
                                pytest.fail(f"{where}\nfailed with {e.sqlstate}: {e}")
                finally:
                    c.execute("RESET ROLE")
            if not_run:
                pytest.skip(f"{path.name}: blocks {not_run} to {len(text_blocks)} need pgvector, which is not installed "
                            "(scripts/pgvector.sh install builds it from ../shared/vendor/pgvector)")
        finally:
            for r in created:
                if c.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (r,)).fetchone():
                    c.execute(f"DROP OWNED BY {r}")
                    c.execute(f"DROP ROLE {r}")


def test_every_function_of_schema_memory_is_documented(conn):
    docs = "\n".join(p.read_text() for p in DOCS)
    names = [n for (n,) in conn.execute(
        "SELECT DISTINCT proname FROM pg_proc WHERE pronamespace = 'memory'::regnamespace ORDER BY 1")]
    assert len(names) > 50, names
    missing = [n for n in names if not re.search(rf"memory\.{n}\b|`{n}[`(]", docs)]
    assert not missing, f"functions of schema memory the docs do not name: {missing}"


def slug(heading):
    """GitHub's anchor of a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_relative_links_reach_a_file_and_a_heading():
    broken = []
    for path in DOCS:
        for target in re.findall(r"\]\(([^)\s]+)\)", path.read_text()):
            if re.match(r"[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            dest = (path.parent / file).resolve() if file else path
            if not dest.exists():
                broken.append(f"{path.name}: {target}")
            elif anchor and dest.suffix == ".md":
                anchors = {slug(h) for h in re.findall(r"^#+ (.*)$", dest.read_text(), re.M)}
                if anchor not in anchors:
                    broken.append(f"{path.name}: {target}")
    assert not broken, broken
