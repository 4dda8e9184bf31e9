"""One event per committed row of a governed table, in the order written, describing the row as
stored (issue 54): savepoints rolled back and released, statements that fail, multi-row statements,
and a BEFORE trigger of the owner's that rewrites or skips rows. In both audit modes, as the
application's roles (the owner governs, a tenant-bound writer writes); the superuser (`conn`) only
sets up roles and reads what happened.
"""
import hashlib

import psycopg
import pytest

from conftest import connect, ensure_role

OWNER, WRITER = "app_owner", "app_writer"


@pytest.fixture(params=["deferred", "immediate"])
def app(request, dsn, conn):
    """app.notes of app_owner, governed with audit; app_writer bound to acme writes it. The
    database's memory.audit_mode is the parameter (new sessions take it)."""
    db = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
    conn.execute(f"ALTER DATABASE {db} SET memory.audit_mode = {request.param}")
    conn.execute("SELECT memory.setup_roles()")
    ensure_role(conn, OWNER, "memory_writer")
    ensure_role(conn, WRITER, "memory_writer")
    for role in (OWNER, WRITER):
        conn.execute("SELECT memory.grant_org(%s, 'acme')", (role,))
    conn.execute(f"CREATE SCHEMA app AUTHORIZATION {OWNER}")
    conn.execute(f"GRANT USAGE ON SCHEMA app TO {WRITER}")
    with connect(dsn, OWNER) as c:
        assert c.execute("SHOW memory.audit_mode").fetchone() == (request.param,)
        c.execute("CREATE TABLE app.notes (id bigserial PRIMARY KEY, tenant text, uid text, body text, meta jsonb)")
        c.execute("""SELECT memory.govern('app.notes', '{"content": "body", "target": "meta", "org": "tenant",
                     "user": "uid", "id": "id", "audit": true}')""")
        c.execute(f"GRANT SELECT, INSERT ON app.notes TO {WRITER}")
        c.execute(f"GRANT USAGE ON SEQUENCE app.notes_id_seq TO {WRITER}")
    return dsn


def stored_events(conn):
    """(id, content_sha256) of app.notes' memory.store events on acme's chain, in chain order."""
    conn.execute("SELECT memory.audit_integrate()")
    assert all(ok for (ok,) in conn.execute("SELECT ok FROM memory.audit_verify()").fetchall())
    return conn.execute("SELECT payload->>'id', payload->>'content_sha256' FROM memory.audit_log WHERE chain_id = 'acme'"
                        " AND event_type = 'memory.store' AND payload->>'table' = 'app.notes' ORDER BY seq").fetchall()


def sha(text):
    return hashlib.sha256(text.encode()).hexdigest()


def test_exactly_the_rows_that_stayed_in_the_order_written(app, conn):
    def insert(c, *bodies):
        rows = c.execute("INSERT INTO app.notes (tenant, uid, body) SELECT 'acme', 'u1', b FROM unnest(%s::text[]) WITH ORDINALITY x(b, n)"
                         " ORDER BY n RETURNING id", (list(bodies),)).fetchall()
        return [str(r[0]) for r in rows]

    kept = []
    with psycopg.connect(app.replace("user=postgres", f"user={WRITER}")) as c:
        kept += insert(c, "first")
        c.execute("SAVEPOINT a")
        insert(c, "rolled back to a")
        c.execute("ROLLBACK TO SAVEPOINT a")
        c.execute("SAVEPOINT b")
        kept += insert(c, "released b")
        c.execute("RELEASE SAVEPOINT b")
        kept += insert(c, "many one", "many two", "many three")
        with pytest.raises(psycopg.errors.DivisionByZero):
            with c.transaction():
                insert(c, "in a failed savepoint")
                c.execute("SELECT 1/0")
        with pytest.raises(psycopg.errors.UniqueViolation):
            with c.transaction():
                # A statement that fails after its first row was written: the second repeats its key.
                (n,) = c.execute("SELECT nextval('app.notes_id_seq')").fetchone()
                c.execute("INSERT INTO app.notes (id, tenant, uid, body) VALUES (%s, 'acme', 'u1', 'half'), (%s, 'acme', 'u1', 'half')",
                          (n, n))
        kept += insert(c, "last")
        c.commit()
    with psycopg.connect(app.replace("user=postgres", f"user={WRITER}")) as c:
        insert(c, "in a transaction rolled back")
        c.rollback()
    bodies = ["first", "released b", "many one", "many two", "many three", "last"]
    assert stored_events(conn) == [(i, sha(b)) for i, b in zip(kept, bodies)]


def test_the_event_describes_the_row_a_before_trigger_left(app, conn):
    with connect(app, OWNER) as c:
        # Sorts before memory_classify, so the row memory_ext governs is the one it leaves.
        c.execute("""CREATE FUNCTION app.fix() RETURNS trigger LANGUAGE plpgsql AS $$
                     BEGIN
                       IF NEW.body = 'skip me' THEN RETURN NULL; END IF;
                       IF NEW.body = 'draft' THEN NEW.body := 'final text'; END IF;
                       RETURN NEW;
                     END $$""")
        c.execute("CREATE TRIGGER app_fix BEFORE INSERT ON app.notes FOR EACH ROW EXECUTE FUNCTION app.fix()")
    with connect(app, WRITER) as c:
        ids = []
        for body in ("draft", "skip me", "plain"):
            ids += [str(r[0]) for r in c.execute("INSERT INTO app.notes (tenant, uid, body) VALUES ('acme', 'u1', %s) RETURNING id",
                                                 (body,)).fetchall()]
        ids += [str(r[0]) for r in c.execute("INSERT INTO app.notes (tenant, uid, body) VALUES ('acme', 'u1', 'skip me'), "
                                             "('acme', 'u1', 'draft') RETURNING id").fetchall()]
    assert len(ids) == 3, "the skipped rows were not written"
    assert conn.execute("SELECT count(*) FROM app.notes WHERE body = 'final text'").fetchone() == (2,)
    assert stored_events(conn) == [(ids[0], sha("final text")), (ids[1], sha("plain")), (ids[2], sha("final text"))]
