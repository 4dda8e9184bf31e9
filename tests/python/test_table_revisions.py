"""Revisions of a governed application table (issue 49, SPEC §17: memory.govern's "revisions";
docs/reference.md#memory-over-time), as an application runs it: a login table owner that is not a
superuser governs its own table, tenant-bound writers change rows through a psycopg pool from
concurrent sessions, readers read memory.history(table, row_id) acting for their org. The
superuser (`conn`) only sets up roles."""
import threading

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from conftest import connect, ensure_role

OWNER, WRITER, READER, GLOBEX = "trv_owner", "trv_writer", "trv_reader", "trv_globex"


@pytest.fixture
def app(dsn, conn):
    conn.execute("SELECT memory.setup_roles()")
    ensure_role(conn, OWNER, "memory_writer")
    ensure_role(conn, WRITER, "memory_writer")
    ensure_role(conn, READER, "memory_reader")
    ensure_role(conn, GLOBEX, "memory_reader")
    conn.execute("SELECT memory.grant_org(%s, 'acme'), memory.grant_org(%s, 'acme'), memory.grant_org(%s, 'acme', 'internal'), "
                 "memory.grant_org(%s, 'globex')", (OWNER, WRITER, READER, GLOBEX))
    conn.execute(f"GRANT CREATE ON SCHEMA public TO {OWNER}")
    with connect(dsn, OWNER, "acme") as o:
        assert o.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()[0] is False
        o.execute("CREATE TABLE public.tickets (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), org_id text NOT NULL, "
                  "user_id text, content text NOT NULL, classification memory.classification)")
        eff = o.execute("SELECT memory.govern('public.tickets', '{\"audit\": true, \"tenant_policy\": true, \"revisions\": true}')").fetchone()[0]
        assert eff["revisions"] is True and eff["id"] == "id"
        o.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON public.tickets TO {WRITER}")
        o.execute(f"GRANT SELECT ON public.tickets TO {READER}, {GLOBEX}")
    return dsn


def pool(dsn, role):
    return ConnectionPool(dsn.replace("user=postgres", f"user={role}"), min_size=1, max_size=4, open=True)


def call(p, sql, args=(), org="acme"):
    """One transaction of the pool, acting for `org` (SET LOCAL, as a pooled service does)."""
    with p.connection() as c, c.transaction():
        c.execute("SELECT set_config('memory.org_id', %s, true)", (org,))
        cur = c.execute(sql, args)
        return cur.fetchall() if cur.description else None


def test_concurrent_corrections_are_each_kept_once_in_order(app, conn):
    with pool(app, WRITER) as w, pool(app, READER) as r, pool(app, GLOBEX) as g:
        tid = str(call(w, "INSERT INTO public.tickets (org_id, user_id, content) VALUES ('acme', 'dave', 'v0') RETURNING id")[0][0])
        errors = []

        def correct(n):
            try:
                for i in range(5):
                    call(w, "UPDATE public.tickets SET content = %s WHERE id = %s", (f"t{n}-{i}", tid))
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=correct, args=(n,)) for n in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        rows = call(r, "SELECT rev, content, valid_from, valid_to FROM memory.history('public.tickets', %s)", (tid,))
        # 15 changes: 15 revisions and the current row, numbered 16..1 newest first (one each,
        # none lost to the concurrency), the first one the row as written; each valid up to its
        # change (transaction times: a change that waited for the row lock may carry an earlier
        # time than the one it waited for, so the ends are not in rev order).
        assert [x[0] for x in rows] == list(range(16, 0, -1))
        assert rows[-1][1] == "v0"
        assert rows[0][3] is None and all(x[3] is not None for x in rows[1:])
        assert all(x[2] is not None and x[2] <= x[3] for x in rows[1:-1])
        assert rows[-1][2] is None  # (no created_at stamp: the first version's start is unknown)
        assert len({x[1] for x in rows}) == 16
        current = call(r, "SELECT content FROM public.tickets WHERE id = %s", (tid,))[0][0]
        assert rows[0][1] == current
        # Another org's reader gets nothing of it, by history or directly.
        assert call(g, "SELECT count(*) FROM memory.history('public.tickets', %s)", (tid,), org="globex")[0][0] == 0
        assert call(g, "SELECT count(*) FROM memory.table_revisions", org="globex")[0][0] == 0
        # The writer forgets the row: every revision goes with it.
        out = call(w, "SELECT memory.forget('public.tickets', ARRAY[%s], 'closed')", (tid,))[0][0]
        assert out["forgotten"] == [tid]
        assert conn.execute("SELECT count(*) FROM memory.table_revisions WHERE row_id = %s", (tid,)).fetchone()[0] == 0


def test_owner_cannot_turn_off_revisions_of_a_held_row(app, conn):
    with pool(app, WRITER) as w:
        tid = str(call(w, "INSERT INTO public.tickets (org_id, user_id, content) VALUES ('acme', 'erin', 'first') RETURNING id")[0][0])
        call(w, "UPDATE public.tickets SET content = 'second' WHERE id = %s", (tid,))
    conn.execute("INSERT INTO memory.legal_holds (org_id, observation_id, reason) VALUES ('acme', %s, 'litigation')", (tid,))
    with connect(app, OWNER, "acme") as o:
        with pytest.raises(psycopg.Error) as e:
            o.execute("SELECT memory.govern('public.tickets', '{\"audit\": true, \"tenant_policy\": true}')")
        assert e.value.sqlstate == "MX006"
        with pytest.raises(psycopg.Error) as e:
            o.execute("SELECT memory.govern('public.tickets', '{\"audit\": true, \"revisions\": true, \"id\": \"nope\"}')")
        assert e.value.sqlstate == "22023"
    assert conn.execute("SELECT count(*) FROM memory.table_revisions WHERE row_id = %s", (tid,)).fetchone()[0] == 1
