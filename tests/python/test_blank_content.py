"""Blank memories (issue 46) from a client, as a tenant-bound writer: COPY and batched inserts into
memory.observations stop at a blank content with 22023 and write nothing; a governed table refuses
one only when its mapping says "content_required"."""
import psycopg
import pytest

from conftest import connect, ensure_role

WRITER, OWNER = "blank_writer", "blank_owner"


@pytest.fixture
def app(dsn, conn):
    conn.execute("SELECT memory.setup_roles()")
    ensure_role(conn, WRITER, "memory_writer")
    ensure_role(conn, OWNER, "memory_writer")
    for r in (WRITER, OWNER):
        conn.execute("SELECT memory.grant_org(%s, 'acme')", (r,))
    conn.execute(f"CREATE SCHEMA app AUTHORIZATION {OWNER}")
    return dsn


def count(conn):
    return conn.execute("SELECT count(*) FROM memory.observations").fetchone()[0]


def test_copy_and_batches_refuse_a_blank_memory_whole(app, conn):
    # COPY FROM is PostgreSQL's only for roles row-level security does not apply to (a load by the
    # owner or a superuser): the exception, run as the superuser.
    with pytest.raises(psycopg.errors.InvalidParameterValue) as e:
        with conn.cursor().copy("COPY memory.observations (org_id, content) FROM STDIN") as cp:
            for text in ("first", "second", " \t ", "fourth"):
                cp.write_row(("acme", text))
    assert "empty or blank" in e.value.diag.message_primary and e.value.diag.message_hint
    assert count(conn) == 0, "the COPY wrote nothing"
    with connect(app, WRITER) as c:
        with pytest.raises(psycopg.errors.InvalidParameterValue):
            with c.transaction():
                c.cursor().executemany("INSERT INTO memory.observations (org_id, content) VALUES ('acme', %s)", [("a",), ("",), ("c",)])
        assert count(conn) == 0, "the batch wrote nothing"
        c.cursor().executemany("INSERT INTO memory.observations (org_id, content) VALUES ('acme', %s)", [("a real memory",)])
    assert count(conn) == 1


def test_a_governed_table_refuses_blank_content_when_its_mapping_says_so(app):
    with connect(app, OWNER) as c:
        c.execute("CREATE TABLE app.notes (id bigserial PRIMARY KEY, org_id text, body text, classification memory.classification)")
        c.execute("""SELECT memory.govern('app.notes', '{"content": "body"}')""")
        c.execute("INSERT INTO app.notes (org_id, body) VALUES ('acme', '  ')")  # without the option: taken
        c.execute("""SELECT memory.govern('app.notes', '{"content": "body", "content_required": true}')""")
        with pytest.raises(psycopg.errors.InvalidParameterValue):
            c.execute("INSERT INTO app.notes (org_id, body) VALUES ('acme', '  ')")
        with pytest.raises(psycopg.errors.InvalidParameterValue):
            c.execute("UPDATE app.notes SET body = '' WHERE body = '  '")
        # The row written blank before keeps its other columns writable.
        c.execute("UPDATE app.notes SET org_id = 'acme' WHERE body = '  '")
        assert c.execute("SELECT count(*) FROM app.notes").fetchone() == (1,)
