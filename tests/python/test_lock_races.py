"""Races between sessions (issue 34 items 16 and 18), as the application's tenant-bound roles.

16: a write gated on consent either commits before a revocation's effects are applied (and is then
removed or blocked by them) or fails: a REPEATABLE READ writer whose snapshot predates the
revocation gets 40001, a READ COMMITTED writer waits and gets MX003; a revocation that waits for a
writer sees what it wrote.

18: maintenance never waits on one tenant: a governed application table another session holds
locked is skipped and reported (locked_tables) by run_retention, run_maintenance and another org's
erase_subject, and processed by the next run once free.
"""
import threading
import time

import psycopg
import pytest

from conftest import connect
from test_app_roles import ADMIN, GLOBEX, OWNER, WRITER, app  # noqa: F401 (the fixture)

PROFILE = "INSERT INTO memory.user_contexts (org_id, user_id, scope, source, fields) " \
          "VALUES ('acme', %s, 'profile', 'user_review', '{\"research_depth\": \"deep\"}')"


def wait_until_blocked(conn, pid):
    """Until backend `pid` waits on a lock (a condition, not a duration: 60 s is only a bound)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        row = conn.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
        if row and row[0] == "Lock":
            return
        time.sleep(0.05)
    raise AssertionError(f"backend {pid} never waited on a lock")


class Background:
    """One statement run in a thread; .result() is its first row (its status without rows) or the
    error it raised."""

    def __init__(self, c, sql, args=()):
        self.out = None
        self.t = threading.Thread(target=self._run, args=(c, sql, args))
        self.t.start()

    def _run(self, c, sql, args):
        try:
            cur = c.execute(sql, args)
            self.out = cur.fetchone() if cur.description else cur.statusmessage
        except psycopg.Error as e:
            self.out = e

    def result(self):
        self.t.join(60)
        assert not self.t.is_alive(), "the statement never finished"
        return self.out


def profiles(conn, user):
    return conn.execute("SELECT count(*) FROM memory.user_contexts WHERE org_id = 'acme' AND user_id = %s AND scope = 'profile'",
                        (user,)).fetchone()[0]


def writer(dsn, isolation):
    c = connect(dsn, WRITER, "acme")
    c.autocommit = False
    c.execute(f"BEGIN ISOLATION LEVEL {isolation}")
    return c


# -- 16: revocation races --------------------------------------------------------------------------

@pytest.mark.parametrize("stmt", [PROFILE, "INSERT INTO memory.threads (org_id, user_id, thread_id) VALUES ('acme', %s, 'th-1')"])
def test_a_repeatable_read_writer_cannot_write_under_a_consent_revoked_after_its_snapshot(app, conn, stmt):
    with connect(app, WRITER, "acme") as r:
        r.execute("SELECT memory.grant_consent('acme', 'u1', '{save_to_profile,save_to_thread}')")
        w = writer(app, "REPEATABLE READ")
        w.execute("SELECT count(*) FROM memory.consents")  # the snapshot: both scopes in force
        r.execute("SELECT memory.revoke_consent('acme', 'u1')")
        with pytest.raises(psycopg.errors.SerializationFailure):
            w.execute(stmt, ("u1",))
        w.rollback()
        w.close()
        # A later re-grant serves nothing written under the revoked consent.
        r.execute("SELECT memory.grant_consent('acme', 'u1', '{save_to_profile,save_to_thread}')")
    assert profiles(conn, "u1") == 0
    assert conn.execute("SELECT count(*) FROM memory.threads WHERE user_id = 'u1'").fetchone() == (0,)


@pytest.mark.parametrize("isolation,expected", [("READ COMMITTED", "MX003"), ("REPEATABLE READ", "40001")])
def test_a_writer_waits_for_a_revocation_under_way(app, conn, isolation, expected):
    """The revocation holds the consent when the writer asks for it: the writer waits, then a READ
    COMMITTED writer reads the revocation (MX003), a REPEATABLE READ one fails (40001)."""
    with connect(app, WRITER, "acme") as r:
        r.execute("SELECT memory.grant_consent('acme', 'u2', '{save_to_profile}')")
        w = writer(app, isolation)
        w.execute("SELECT count(*) FROM memory.consents")
        r.execute("BEGIN")
        r.execute("SELECT memory.revoke_consent('acme', 'u2')")
        bg = Background(w, PROFILE, ("u2",))
        wait_until_blocked(conn, w.info.backend_pid)
        r.execute("COMMIT")
        out = bg.result()
        assert isinstance(out, psycopg.Error) and out.sqlstate == expected, out
        w.rollback()
        w.close()
    assert profiles(conn, "u2") == 0


@pytest.mark.parametrize("isolation", ["READ COMMITTED", "REPEATABLE READ"])
def test_a_revocation_waits_for_a_write_under_way_and_removes_it(app, conn, isolation):
    with connect(app, WRITER, "acme") as r:
        r.execute("SELECT memory.grant_consent('acme', 'u3', '{save_to_profile}')")
        w = writer(app, isolation)
        w.execute(PROFILE, ("u3",))  # holds the consent version
        bg = Background(r, "SELECT memory.revoke_consent('acme', 'u3')")
        wait_until_blocked(conn, r.info.backend_pid)
        w.commit()
        out = bg.result()
        assert not isinstance(out, Exception), out
        assert out[0]["profile_contexts_deleted"] == 1, out
        w.close()
    assert profiles(conn, "u3") == 0


def test_a_repeatable_read_revocation_that_waited_fails_and_its_retry_removes_the_write(app, conn):
    """A revocation at REPEATABLE READ whose snapshot cannot see the write it waited for: 40001,
    and the retry removes what the write committed."""
    with connect(app, WRITER, "acme") as r:
        r.execute("SELECT memory.grant_consent('acme', 'u4', '{save_to_profile}')")
        w = writer(app, "READ COMMITTED")
        w.execute(PROFILE, ("u4",))
        r.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        r.execute("SELECT count(*) FROM memory.user_contexts")  # the revocation's snapshot
        bg = Background(r, "SELECT memory.revoke_consent('acme', 'u4')")
        wait_until_blocked(conn, r.info.backend_pid)
        w.commit()
        out = bg.result()
        assert isinstance(out, psycopg.Error) and out.sqlstate == "40001", out
        assert "Retry" in (out.diag.message_hint or "")
        r.execute("ROLLBACK")
        assert profiles(conn, "u4") == 1
        (counts,) = r.execute("SELECT memory.revoke_consent('acme', 'u4')").fetchone()
        assert counts["profile_contexts_deleted"] == 1
        w.close()
    assert profiles(conn, "u4") == 0


def test_consent_versions_stay_unchanged(app, conn):
    """The rewrite of the latest version is memory_ext's alone and changes nothing."""
    with connect(app, WRITER, "acme") as r:
        r.execute("SELECT memory.grant_consent('acme', 'u5', '{save_to_profile}')")
        before = conn.execute("SELECT to_jsonb(c) FROM memory.consents c WHERE user_id = 'u5'").fetchone()[0]
        r.execute("SELECT memory.revoke_consent('acme', 'u5')")
    assert conn.execute("SELECT to_jsonb(c) FROM memory.consents c WHERE user_id = 'u5' AND version = 1").fetchone()[0] == before
    # Not even a superuser other than the table's owner.
    if not conn.execute("SELECT 1 FROM pg_roles WHERE rolname = 'lock_races_super'").fetchone():
        conn.execute("CREATE ROLE lock_races_super SUPERUSER")
    conn.execute("SET ROLE lock_races_super")
    try:
        with pytest.raises(psycopg.DatabaseError) as e:
            conn.execute("UPDATE memory.consents SET scopes = scopes")
        assert e.value.sqlstate == "MX002", "only the table's owner may rewrite a version unchanged"
    finally:
        conn.execute("RESET ROLE")


# -- 18: maintenance and erasure never wait on another session's lock --------------------------------

@pytest.fixture
def stamped(app, conn):
    """app.st: a governed table with stamps and a soft-delete column, written by acme and globex;
    acme's u1 has an expired row, globex's g1 one. Its owner may act for both orgs."""
    with connect(app, OWNER) as c:
        c.execute("CREATE TABLE app.st (id bigserial PRIMARY KEY, tenant text, uid text, body text, tier memory.classification, "
                  "created_at timestamptz NOT NULL DEFAULT now(), expires_at timestamptz, purge_after timestamptz, "
                  "archive_at timestamptz, soft_deleted_at timestamptz)")
        c.execute("""SELECT memory.govern('app.st', '{"content": "body", "target": "tier", "org": "tenant", "user": "uid",
                     "id": "id", "stamps": true}')""")
        c.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON app.st TO {WRITER}, {GLOBEX}")
        c.execute(f"GRANT USAGE ON SEQUENCE app.st_id_seq TO {WRITER}, {GLOBEX}")
    conn.execute("SELECT memory.grant_org(%s, 'globex')", (OWNER,))  # the owner sweeps both orgs' rows
    with connect(app, WRITER, "acme") as c:
        c.execute("INSERT INTO app.st (tenant, uid, body, created_at) VALUES ('acme', 'u1', 'my ssn 123-45-6789', now() - interval '400 days')")
    with connect(app, GLOBEX, "globex") as c:
        c.execute("INSERT INTO app.st (tenant, uid, body, created_at) VALUES ('globex', 'g1', 'ssn 123-45-6789', now() - interval '400 days')")
    assert conn.execute("SELECT count(*) FROM app.st WHERE expires_at < now()").fetchone() == (2,)
    return app


def bounded(c):
    """A regression fails (57014) instead of hanging."""
    c.execute("SET statement_timeout = '10s'")
    return c


def test_a_locked_table_is_skipped_by_maintenance_and_another_orgs_erasure(stamped, conn):
    g = connect(stamped, GLOBEX, "globex")
    g.autocommit = False
    g.execute("LOCK TABLE app.st IN ACCESS EXCLUSIVE MODE")  # globex's writer, in an open transaction
    try:
        with psycopg.connect(stamped, autocommit=True) as su:
            bounded(su)
            (ret,) = su.execute("SELECT memory.run_retention()").fetchone()
            assert ret["locked_tables"] == ["app.st"] and "app.st" not in ret["tables"], ret
            assert ret["failed_tables"] == {}, ret
            (dry,) = su.execute("SELECT memory.run_retention(true)").fetchone()
            assert dry["locked_tables"] == ["app.st"], dry
            (m,) = su.execute("SELECT memory.run_maintenance()").fetchone()
            assert "error" not in m and m["retention"]["locked_tables"] == ["app.st"], m
        with bounded(connect(stamped, ADMIN, "acme")) as a:
            (erased,) = a.execute("SELECT memory.erase_subject('u1')").fetchone()
            assert erased["locked_tables"] == ["app.st"] and "app.st" not in erased.get("tables", {}), erased
            assert erased["tables"]["app.notes"] == 0, erased  # the other tables were erased
    finally:
        g.rollback()
        g.close()
    assert conn.execute("SELECT count(*) FROM app.st WHERE soft_deleted_at IS NULL").fetchone() == (2,), "nothing done while locked"
    # Released: the next runs process the table.
    with psycopg.connect(stamped, autocommit=True) as su:
        (ret,) = bounded(su).execute("SELECT memory.run_retention()").fetchone()
        assert ret["locked_tables"] == [] and ret["tables"]["app.st"]["soft_deleted"] == 2, ret
    with bounded(connect(stamped, ADMIN, "acme")) as a:
        (erased,) = a.execute("SELECT memory.erase_subject('u1')").fetchone()
        assert "locked_tables" not in erased and erased["tables"]["app.st"] == 1, erased
    assert conn.execute("SELECT tenant, uid FROM app.st").fetchall() == [("globex", "g1")]


def test_maintenance_skips_rows_a_writer_holds_locked(stamped, conn):
    """Row locks too: the sweep leaves rows another session holds (SKIP LOCKED) for the next run."""
    g = connect(stamped, GLOBEX, "globex")
    g.autocommit = False
    g.execute("SELECT 1 FROM app.st WHERE tenant = 'globex' FOR UPDATE")
    try:
        with psycopg.connect(stamped, autocommit=True) as su:
            (ret,) = bounded(su).execute("SELECT memory.run_retention()").fetchone()
            assert ret["tables"]["app.st"]["soft_deleted"] == 1, ret
    finally:
        g.rollback()
        g.close()
    with psycopg.connect(stamped, autocommit=True) as su:
        (ret,) = bounded(su).execute("SELECT memory.run_retention()").fetchone()
        assert ret["tables"]["app.st"]["soft_deleted"] == 1, ret
    assert conn.execute("SELECT count(*) FROM app.st WHERE soft_deleted_at IS NULL").fetchone() == (0,)
