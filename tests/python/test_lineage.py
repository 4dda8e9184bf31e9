"""Lineage (issue 50, SPEC §18; docs/reference.md#lineage), as the application runs it: tenant-bound
writer, reader and admin roles through a psycopg pool, memory.org_id set per transaction. A summary
of a restricted memory is restricted; forgetting a source takes its summaries with it and the
receipt verifies, then fails once tampered or once a forgotten id exists again. The superuser
(`conn`) sets up roles and re-inserts a forgotten row (tampering)."""
import json

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from conftest import wait_until, connect, ensure_role, fresh_database, integrator_cluster
from test_lock_races import Background, wait_until_blocked

WRITER, READER, ADMIN, GLOBEX = "ln_writer", "ln_internal_reader", "ln_admin", "ln_globex"


@pytest.fixture
def app(dsn, conn):
    conn.execute("SELECT memory.setup_roles()")
    ensure_role(conn, WRITER, "memory_writer")
    ensure_role(conn, READER, "memory_reader")
    ensure_role(conn, ADMIN, "memory_admin")
    ensure_role(conn, GLOBEX, "memory_writer")
    conn.execute("SELECT memory.grant_org(%s, 'acme'), memory.grant_org(%s, 'acme', 'internal'), "
                 "memory.grant_org(%s, 'acme'), memory.grant_org(%s, 'globex')", (WRITER, READER, ADMIN, GLOBEX))
    return dsn


def pool(dsn, role):
    return ConnectionPool(dsn.replace("user=postgres", f"user={role}"), min_size=1, max_size=2, open=True)


def call(p, sql, args=(), org="acme"):
    """One transaction of the pool, acting for `org` (SET LOCAL, as a pooled service does)."""
    with p.connection() as c, c.transaction():
        c.execute("SELECT set_config('memory.org_id', %s, true)", (org,))
        cur = c.execute(sql, args)
        return cur.fetchall() if cur.description else None


def test_summary_of_restricted_memory_is_restricted_and_forgotten_with_it(app, conn):
    with pool(app, WRITER) as w, pool(app, READER) as r, pool(app, ADMIN) as a, pool(app, GLOBEX) as g:
        note = str(call(w, "INSERT INTO memory.observations (org_id, user_id, content) VALUES ('acme', 'alice', 'Alice asked about mortgage rates') RETURNING id")[0][0])
        secret = str(call(w, "INSERT INTO memory.observations (org_id, user_id, content, classification) "
                         "VALUES ('acme', 'alice', 'Alice disclosed a medical condition', 'restricted') RETURNING id")[0][0])
        res = call(w, "SELECT memory.remember('acme', 'Alice: mortgage questions and a personal matter', 'alice', derived_from => %s::uuid[])",
                   ([note, secret],))[0][0]
        summary = res["id"]
        assert res["classification"] == "restricted"
        # The internal reader reads the plain source, never the restricted summary, by SELECT, recall or lineage.
        assert call(r, "SELECT count(*) FROM memory.observations WHERE id = %s", (summary,))[0][0] == 0
        assert call(r, "SELECT count(*) FROM memory.recall('acme', 'Alice mortgage', 10) x WHERE x.id = %s", (summary,))[0][0] == 0
        assert call(r, "SELECT count(*) FROM memory.lineage(%s, 'down')", (note,))[0][0] == 0
        assert [str(row[0]) for row in call(w, "SELECT id FROM memory.lineage(%s) ORDER BY id", (summary,))] == sorted([note, secret])
        # Another org's memory is not a source, told as a missing one.
        gid = call(g, "INSERT INTO memory.observations (org_id, content) VALUES ('globex', 'Globex plan') RETURNING id", org="globex")[0][0]
        for bad in (gid, "00000000-0000-0000-0000-00000000dead"):
            with pytest.raises(psycopg.errors.InvalidParameterValue) as e:
                call(w, "SELECT memory.remember('acme', 'x', derived_from => ARRAY[%s::uuid])", (str(bad),))
            assert e.value.diag.message_primary == f'derived_from names memory {bad}, which is not a memory of org "acme"'
        # Forgetting the plain source takes the summary with it; the receipt covers both.
        out = call(w, "SELECT memory.forget(ARRAY[%s::uuid], 'user request 7')", (note,))[0][0]
        assert out["forgotten"] == [note] and out["derived_forgotten"] == [summary]
        assert conn.execute("SELECT count(*) FROM memory.observations WHERE id = ANY(%s)", ([note, summary],)).fetchone()[0] == 0
        receipt = out["receipt"]
        assert receipt["count"] == 2
        checks = dict((c, ok) for c, ok, _ in call(a, "SELECT * FROM memory.verify_receipt(%s::jsonb)", (json.dumps(receipt),)))
        assert checks and all(checks.values()), checks
        tampered = dict(receipt, count=1)
        assert not all(ok for _, ok, _ in call(a, "SELECT * FROM memory.verify_receipt(%s::jsonb)", (json.dumps(tampered),)))
        # The summary's id exists again: the proof fails on `absent`.
        conn.execute("INSERT INTO memory.observations (id, org_id, content) VALUES (%s, 'acme', 'back again')", (summary,))
        checks = dict((c, ok) for c, ok, _ in call(a, "SELECT * FROM memory.verify_receipt(%s::jsonb)", (json.dumps(receipt),)))
        assert checks["absent"] is False and checks["signature"] is True


def test_reclassify_raises_what_was_made_from_it(app, conn):
    with pool(app, WRITER) as w, pool(app, ADMIN) as a:
        src = call(w, "INSERT INTO memory.observations (org_id, content, classification) VALUES ('acme', 'Carol likes hiking', 'public') RETURNING id")[0][0]
        d1 = call(w, "INSERT INTO memory.observations (org_id, content, derived_from) VALUES ('acme', 'Carol: outdoors', ARRAY[%s::uuid]) RETURNING id", (src,))[0][0]
        d2 = call(w, "SELECT memory.put('acme', ARRAY['profiles'], 'carol', '{\"summary\": \"outdoor person\"}', derived_from => ARRAY[%s::uuid])", (d1,))[0][0]
        conn.execute("GRANT EXECUTE ON FUNCTION memory.reclassify(uuid, memory.classification, text) TO memory_admin")
        call(a, "SELECT memory.reclassify(%s, 'confidential', 'names a person')", (src,))
        tiers = dict(conn.execute("SELECT id, classification::text FROM memory.observations WHERE id = ANY(%s)", ([d1, d2],)).fetchall())
        assert tiers == {d1: "confidential", d2: "confidential"}
        assert [row[0] for row in call(w, "SELECT depth FROM memory.lineage(%s)", (d2,))] == [1, 2]


def test_the_python_client_writes_and_forgets_lineage(app, conn):
    """memory_ext.Memory: remember(..., derived_from=[...]) and forget's derived_forgotten."""
    import memory_ext
    with psycopg.connect(app.replace("user=postgres", f"user={WRITER}"), autocommit=True) as c:
        m = memory_ext.Memory(c, org="acme", actor="agent-7")
        src = m.remember("Board minutes of March", user_id="ann")
        summary = m.remember("The board met in March", user_id="ann", derived_from=[src.id])
        assert summary.classification == src.classification
        f = m.forget([src.id], "user request 9")
        assert f.forgotten == [str(src.id)] and f.derived_forgotten == [str(summary.id)]


def test_governed_table_rows_made_from_memories_keep_their_floors_and_go_with_them(app, conn):
    """memory.govern's "derived_from": a login owner that is not a superuser governs its table; the
    tenant-bound writer's rows made from memories keep the restricted tier (its internal reader does
    not see them through the table's row-level security), a bad source is 22023, and forgetting the
    source deletes the row as the writer (derived_forgotten), covered by a receipt that verifies."""
    ensure_role(conn, "ln_owner", "memory_writer")
    conn.execute("SELECT memory.grant_org('ln_owner', 'acme')")
    conn.execute("GRANT CREATE ON SCHEMA public TO ln_owner")
    with connect(app, "ln_owner", "acme") as o:
        o.execute("CREATE TABLE public.digests (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), org_id text NOT NULL, user_id text, "
                  "content text NOT NULL, classification memory.classification, derived_from uuid[], created_at timestamptz NOT NULL DEFAULT now(), "
                  "expires_at timestamptz, purge_after timestamptz, archive_at timestamptz)")
        o.execute("CREATE INDEX ON public.digests USING gin (derived_from)")
        eff = o.execute("SELECT memory.govern('public.digests', '{\"audit\": true, \"tenant_policy\": true, \"stamps\": true, "
                        "\"derived_from\": \"derived_from\"}')").fetchone()[0]
        assert eff["derived_from"] == "derived_from" and eff["id"] == "id"
        o.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON public.digests TO {WRITER}")
        o.execute(f"GRANT SELECT ON public.digests TO {READER}")
    with pool(app, WRITER) as w, pool(app, READER) as r, pool(app, ADMIN) as a, pool(app, GLOBEX) as g:
        note = str(call(w, "INSERT INTO memory.observations (org_id, user_id, content) VALUES ('acme', 'dan', 'Dan asked about savings') RETURNING id")[0][0])
        secret = str(call(w, "INSERT INTO memory.observations (org_id, user_id, content, classification) "
                         "VALUES ('acme', 'dan', 'Dan disclosed his debts', 'restricted') RETURNING id")[0][0])
        row = str(call(w, "INSERT INTO public.digests (org_id, user_id, content, derived_from) VALUES ('acme', 'dan', 'Dan: savings and a private matter', %s::uuid[]) "
                       "RETURNING id", ([note, secret],))[0][0])
        assert call(w, "SELECT classification::text FROM public.digests WHERE id = %s", (row,))[0][0] == "restricted"
        assert call(r, "SELECT count(*) FROM public.digests WHERE id = %s", (row,))[0][0] == 0
        gid = call(g, "INSERT INTO memory.observations (org_id, content) VALUES ('globex', 'Globex budget') RETURNING id", org="globex")[0][0]
        for bad in (gid, "00000000-0000-0000-0000-00000000beef"):
            with pytest.raises(psycopg.errors.InvalidParameterValue) as e:
                call(w, "INSERT INTO public.digests (org_id, content, derived_from) VALUES ('acme', 'x', ARRAY[%s::uuid])", (str(bad),))
            assert e.value.diag.message_primary == f'derived_from names memory {bad}, which is not a memory of org "acme"'
        out = call(w, "SELECT memory.forget(ARRAY[%s::uuid], 'user request 11')", (note,))[0][0]
        assert out["forgotten"] == [note] and out["derived_forgotten"] == [row]
        assert conn.execute("SELECT count(*) FROM public.digests WHERE id = %s", (row,)).fetchone()[0] == 0
        receipt = out["receipt"]
        assert receipt["count"] == 2
        checks = dict((c, ok) for c, ok, _ in call(a, "SELECT * FROM memory.verify_receipt(%s::jsonb)", (json.dumps(receipt),)))
        assert checks and all(checks.values()), checks
        # The row's id exists again: the proof fails on `absent`.
        conn.execute("INSERT INTO public.digests (id, org_id, content) VALUES (%s, 'acme', 'back again')", (row,))
        checks = dict((c, ok) for c, ok, _ in call(a, "SELECT * FROM memory.verify_receipt(%s::jsonb)", (json.dumps(receipt),)))
        assert checks["absent"] is False and checks["signature"] is True


def test_a_derived_insert_waiting_for_a_forget_of_its_source_is_refused(app, conn):
    """A derived INSERT that names a source being forgotten waits for the forget (the lineage locks)
    and then reads the sources afresh: the source is gone, so the insert is refused (22023) and
    nothing derived outlives its source."""
    import threading
    with connect(app, WRITER, "acme") as a, connect(app, WRITER, "acme") as b:
        src = str(a.execute("INSERT INTO memory.observations (org_id, content) VALUES ('acme', 'Order 12 was late') RETURNING id").fetchone()[0])
        a.execute("BEGIN")
        assert a.execute("SELECT memory.forget(ARRAY[%s::uuid], 'user request 12')", (src,)).fetchone()[0]["forgotten"] == [src]
        out = {}

        def insert():
            try:
                b.execute("INSERT INTO memory.observations (org_id, content, derived_from) VALUES ('acme', 'Orders are late', ARRAY[%s::uuid])", (src,))
                out["ok"] = True
            except psycopg.Error as e:
                out["err"] = e
        bpid = b.execute("SELECT pg_backend_pid()").fetchone()[0]
        t = threading.Thread(target=insert)
        t.start()
        # It waits on the forget's lineage lock (an advisory lock), whatever the machine's speed.
        for _ in range(200):
            if conn.execute("SELECT count(*) FROM pg_locks WHERE pid = %s AND locktype = 'advisory' AND NOT granted", (bpid,)).fetchone()[0]:
                break
            t.join(0.05)
        else:
            raise AssertionError("the derived insert never waited for the forget")
        a.execute("COMMIT")
        t.join(10)
        assert isinstance(out.get("err"), psycopg.errors.InvalidParameterValue), out
        assert conn.execute("SELECT count(*) FROM memory.observations WHERE content = 'Orders are late'").fetchone()[0] == 0


@pytest.mark.parametrize("target", ["memory.observations", "public.rr_digests"])
def test_a_repeatable_read_derived_write_never_names_a_source_forgotten_since_its_snapshot(app, conn, target):
    """A writer in a REPEATABLE READ transaction whose snapshot is older than a committed forget of
    a source (the lineage locks are free by then) still sees the source in that snapshot: its
    derived write is refused (22023, or 40001 as any write of a row changed since the snapshot),
    never stored beside the forget, which removed what was made from the source and nothing
    later. Memories and the rows of a governed table alike."""
    ensure_role(conn, "rr_owner", "memory_writer")
    conn.execute("SELECT memory.grant_org('rr_owner', 'acme')")
    conn.execute("GRANT CREATE ON SCHEMA public TO rr_owner")
    with connect(app, "rr_owner", "acme") as o:
        o.execute("CREATE TABLE public.rr_digests (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), org_id text NOT NULL, "
                  "content text NOT NULL, classification memory.classification, derived_from uuid[])")
        o.execute("SELECT memory.govern('public.rr_digests', '{\"tenant_policy\": true, \"derived_from\": \"derived_from\"}')")
        o.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON public.rr_digests TO {WRITER}")
    with connect(app, WRITER, "acme") as a, connect(app, WRITER, "acme") as b:
        src = str(a.execute("INSERT INTO memory.observations (org_id, content) VALUES ('acme', 'Order 13 was late') RETURNING id").fetchone()[0])
        b.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        assert b.execute("SELECT count(*) FROM memory.observations WHERE id = %s", (src,)).fetchone()[0] == 1
        assert a.execute("SELECT memory.forget(ARRAY[%s::uuid], 'user request 13')", (src,)).fetchone()[0]["forgotten"] == [src]
        with pytest.raises((psycopg.errors.InvalidParameterValue, psycopg.errors.SerializationFailure)):
            b.execute(f"INSERT INTO {target} (org_id, content, derived_from) VALUES ('acme', 'Orders are late', ARRAY[%s::uuid])", (src,))
        b.execute("ROLLBACK")
    assert conn.execute("SELECT count(*) FROM memory.observations WHERE content = 'Orders are late' OR derived_from IS NOT NULL").fetchone()[0] == 0
    assert conn.execute("SELECT count(*) FROM public.rr_digests").fetchone()[0] == 0


@pytest.mark.parametrize("target", ["memory.observations", "public.rr_notes"])
def test_a_repeatable_read_derived_write_takes_the_tier_a_source_was_raised_to_since_its_snapshot(app, conn, target):
    """A writer in a REPEATABLE READ transaction whose snapshot is older than a committed
    reclassify of a source to restricted: the raise reached what was made from the source then,
    so the derived write either takes the raised tier or is refused (40001, as any write of a row
    changed since the snapshot); never stored at the old tier (a restricted text laundered)."""
    ensure_role(conn, "rr_owner", "memory_writer")
    conn.execute("SELECT memory.grant_org('rr_owner', 'acme')")
    conn.execute("GRANT CREATE ON SCHEMA public TO rr_owner")
    conn.execute(f"GRANT EXECUTE ON FUNCTION memory.reclassify(uuid, memory.classification, text) TO {ADMIN}")
    with connect(app, "rr_owner", "acme") as o:
        o.execute("CREATE TABLE public.rr_notes (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), org_id text NOT NULL, "
                  "content text NOT NULL, classification memory.classification, derived_from uuid[])")
        o.execute("SELECT memory.govern('public.rr_notes', '{\"tenant_policy\": true, \"derived_from\": \"derived_from\"}')")
        o.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON public.rr_notes TO {WRITER}")
    with connect(app, WRITER, "acme") as a, connect(app, WRITER, "acme") as b, connect(app, ADMIN, "acme") as adm:
        src = str(a.execute("INSERT INTO memory.observations (org_id, content) VALUES ('acme', 'Order 14 shipped') RETURNING id").fetchone()[0])
        b.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        assert b.execute("SELECT count(*) FROM memory.observations WHERE id = %s", (src,)).fetchone()[0] == 1
        adm.execute("SELECT memory.reclassify(%s, 'restricted', 'contains a diagnosis')", (src,))
        try:
            b.execute(f"INSERT INTO {target} (org_id, content, derived_from) VALUES ('acme', 'Order 14 summary', ARRAY[%s::uuid])", (src,))
            b.execute("COMMIT")
        except psycopg.errors.SerializationFailure:
            b.execute("ROLLBACK")
    tiers = [r[0] for r in conn.execute(f"SELECT classification::text FROM {target} WHERE content = 'Order 14 summary'").fetchall()]
    assert tiers in ([], ["restricted"]), tiers


def test_a_hold_placed_while_forget_waits_for_a_derived_memory_keeps_it(app, conn):
    """READ COMMITTED: forget reads a source's derived memory, then waits for another session's
    lock of it; meanwhile an admin places a legal hold on it. The hold is asked after the wait
    (as the memory_hold trigger asked it, after the row was locked): the derived memory stays and
    is reported held, never deleted under a committed hold."""
    with connect(app, WRITER, "acme") as w, connect(app, WRITER, "acme") as locker, \
            connect(app, WRITER, "acme") as f, connect(app, ADMIN, "acme") as adm:
        src = str(w.execute("INSERT INTO memory.observations (org_id, user_id, content) VALUES ('acme', 'dora', 'Dora asked for a refund') RETURNING id").fetchone()[0])
        d = str(w.execute("INSERT INTO memory.observations (org_id, user_id, content, derived_from) "
                          "VALUES ('acme', 'dora', 'Dora: refund case', ARRAY[%s::uuid]) RETURNING id", (src,)).fetchone()[0])
        locker.execute("BEGIN")
        locker.execute("SELECT 1 FROM memory.observations WHERE id = %s FOR UPDATE", (d,))
        bg = Background(f, "SELECT memory.forget(ARRAY[%s::uuid], 'user request 12')", (src,))
        wait_until_blocked(conn, f.info.backend_pid)
        adm.execute("INSERT INTO memory.legal_holds (org_id, observation_id, reason) VALUES ('acme', %s, 'litigation 4')", (d,))
        locker.execute("COMMIT")
        out = bg.result()
        assert not isinstance(out, Exception), out
        out = out[0]
        assert out["forgotten"] == [src] and out["derived_forgotten"] == [], out
        assert d in out["held"], out
    assert conn.execute("SELECT count(*) FROM memory.observations WHERE id = %s", (d,)).fetchone()[0] == 1


def _pending(c, index="memory.observations_derived_from"):
    """Entries in GIN's pending list of `index` (pageinspect, read without moving them)."""
    return c.execute("SELECT n_pending_tuples FROM gin_metapage_info(get_raw_page(%s, 0))", (index,)).fetchone()[0]


def test_derived_inserts_append_to_the_pending_list_that_the_integrator_and_forget_move():
    """The derived_from index keeps GIN's pending list (sql/lineage.sql): a derived insert appends its
    entries; where an integrator serves the database it moves them into the tree, and where none does,
    forget moves them before it searches; lineage reads them either way. As tenant-bound roles."""
    with integrator_cluster("pytest-lineage-flush", "lineage_served") as served:
        port = int(served.split("port=")[1].split()[0])
        unserved = fresh_database(port, "lineage_unserved")
        for db in (served, unserved):
            with psycopg.connect(db, autocommit=True) as su:
                su.execute("CREATE EXTENSION IF NOT EXISTS pageinspect")
                su.execute("SELECT memory.setup_roles()")
                ensure_role(su, WRITER, "memory_writer")
                ensure_role(su, READER, "memory_reader")
                su.execute("SELECT memory.grant_org(%s, 'acme'), memory.grant_org(%s, 'acme')", (WRITER, READER))
        # Served: 20 summaries of 10 sources each are moved into the tree by the integrator.
        with connect(served, WRITER, "acme") as w, connect(served, READER, "acme") as r, psycopg.connect(served, autocommit=True) as su:
            src = [w.execute("INSERT INTO memory.observations (org_id, content) VALUES ('acme', %s) RETURNING id", (f"Note {i}",)).fetchone()[0]
                   for i in range(10)]
            for i in range(20):
                w.execute("INSERT INTO memory.observations (org_id, content, derived_from) VALUES ('acme', %s, %s)", (f"Summary {i}", src))
            assert wait_until(lambda: _pending(su) == 0), "the integrator moves the pending entries into the tree"
            assert r.execute("SELECT count(*) FROM memory.lineage(%s, 'down')", (src[0],)).fetchone()[0] == 20
        # Unserved: the entries stay pending, lineage reads them, forget moves them and follows them.
        with connect(unserved, WRITER, "acme") as w, connect(unserved, READER, "acme") as r, psycopg.connect(unserved, autocommit=True) as su:
            src = w.execute("INSERT INTO memory.observations (org_id, content) VALUES ('acme', 'Board minutes') RETURNING id").fetchone()[0]
            kids = [w.execute("INSERT INTO memory.observations (org_id, content, derived_from) VALUES ('acme', %s, ARRAY[%s::uuid]) RETURNING id",
                              (f"Minutes, part {i}", src)).fetchone()[0] for i in range(5)]
            assert _pending(su) == 5
            assert sorted(x[0] for x in r.execute("SELECT id FROM memory.lineage(%s, 'down')", (src,))) == sorted(kids)
            out = w.execute("SELECT memory.forget(ARRAY[%s::uuid], 'user request')", (src,)).fetchone()[0]
            assert sorted(out["derived_forgotten"]) == sorted(str(k) for k in kids)
            assert _pending(su) == 0
