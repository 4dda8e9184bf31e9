"""Deferred audit (SPEC §2 "Integration", memory.audit_mode = deferred, the default): writers record
pending entries and take no chain lock; the sequencer chains them after commit.

No timing is asserted: "does not wait" is checked with lock_timeout (a wait on any lock fails the
statement), and the background worker with a generous deadline on what it must have done.
"""
import concurrent.futures
import json
import pathlib
import random
import subprocess
import sys
import threading
import time

import psycopg
import pytest
from psycopg import errors

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from conftest import CLUSTER, wait_until, cluster_dir, fresh_database, integrator_cluster  # noqa: E402
import verify_chain  # noqa: E402



def governed(conn):
    conn.execute("CREATE TABLE gov (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), org_id text NOT NULL, content text NOT NULL,"
                 " classification memory.classification)")
    conn.execute("""SELECT memory.govern('gov', '{"audit": true}')""")


def py_verify(conn, chain):
    rows, keys, head = verify_chain.load(conn, chain)
    return verify_chain.verify(rows, keys, head)


def assert_chains_whole(conn, like="%"):
    """Every chain named LIKE `like`: seqs 1..n with none twice (gapless, no fork), and verified
    offline."""
    for (chain,) in conn.execute("SELECT DISTINCT chain_id FROM memory.audit_log WHERE chain_id LIKE %s", (like,)).fetchall():
        n, lo, hi, distinct = conn.execute("SELECT count(*), min(seq), max(seq), count(DISTINCT seq) FROM memory.audit_log WHERE chain_id = %s",
                                           (chain,)).fetchone()
        assert (lo, hi, distinct) == (1, n, n), chain
        assert py_verify(conn, chain) == (True, None, None)


def test_deferred_is_the_default(conn):
    assert conn.execute("SHOW memory.audit_mode").fetchone() == ("deferred",)
    conn.execute("INSERT INTO memory.observations (org_id, content) VALUES ('acme', 'x')")
    assert conn.execute("SELECT count(*) FROM memory.audit_pending").fetchone() == (1,)
    assert conn.execute("SELECT count(*) FROM memory.audit_log").fetchone() == (0,)
    # audit_verify integrates first, then verifies; nothing is left pending.
    assert conn.execute("SELECT entries, ok, pending FROM memory.audit_verify('acme')").fetchone() == (1, True, 0)
    assert conn.execute("SELECT count(*) FROM memory.audit_pending").fetchone() == (0,)


def test_an_open_transaction_does_not_hold_up_another_writer_of_its_org(dsn, conn):
    governed(conn)
    with psycopg.connect(dsn) as a, psycopg.connect(dsn, autocommit=True) as b:
        a.execute("INSERT INTO gov (org_id, content) VALUES ('org_1', 'a')")  # left open, as during a model call
        # Any lock wait would fail the statement: the other writer, and the same org's recall,
        # go straight through.
        b.execute("SET lock_timeout = '100ms'")
        b.execute("INSERT INTO gov (org_id, content) VALUES ('org_1', 'b')")
        b.execute("SELECT memory.audit_append('app.note', '{}', 'org_1')")
        b.execute("SELECT * FROM memory.recall('org_1', 'b')")
        a.commit()
    assert conn.execute("SELECT entries, ok, pending FROM memory.audit_verify('org_1')").fetchone() == (4, True, 0)
    assert py_verify(conn, "org_1") == (True, None, None)


def test_two_orgs_in_opposite_orders_do_not_deadlock(dsn, conn):
    governed(conn)
    with psycopg.connect(dsn) as a, psycopg.connect(dsn) as b:
        for c in (a, b):
            c.execute("SET lock_timeout = '200ms'")
        a.execute("INSERT INTO gov (org_id, content) VALUES ('org_a', '1')")
        b.execute("INSERT INTO gov (org_id, content) VALUES ('org_b', '1')")
        a.execute("INSERT INTO gov (org_id, content) VALUES ('org_b', '2')")
        b.execute("INSERT INTO gov (org_id, content) VALUES ('org_a', '2')")
        a.commit()
        b.commit()
    rows = conn.execute("SELECT chain_id, entries, ok FROM memory.audit_verify() WHERE chain_id IN ('org_a', 'org_b')").fetchall()
    assert rows == [("org_a", 2, True), ("org_b", 2, True)]


@pytest.mark.parametrize("level", ["READ ONLY", "ISOLATION LEVEL REPEATABLE READ", "ISOLATION LEVEL SERIALIZABLE"])
def test_recall_in_read_only_and_snapshot_transactions_during_writes(dsn, conn, level):
    conn.execute("INSERT INTO memory.observations (org_id, content) VALUES ('acme', 'falcon notes')")
    with psycopg.connect(dsn) as r, psycopg.connect(dsn, autocommit=True) as w:
        r.execute(f"BEGIN {level}")
        assert len(r.execute("SELECT * FROM memory.recall('acme', 'falcon')").fetchall()) == 1
        for i in range(5):  # concurrent writes to the same tenant
            w.execute("INSERT INTO memory.observations (org_id, content) VALUES ('acme', %s)", (f"falcon {i}",))
            w.execute("SELECT memory.audit_integrate()")
        # READ ONLY at READ COMMITTED sees the new rows; a snapshot transaction does not.
        seen = 6 if level == "READ ONLY" else 1
        assert len(r.execute("SELECT * FROM memory.recall('acme', 'falcon')").fetchall()) == seen
        # audit_verify in such a transaction integrates nothing; it checks and counts what is pending.
        row = r.execute("SELECT ok, pending FROM memory.audit_verify('acme')").fetchone()
        assert row[0] is True and row[1] >= 1, row
        r.commit()
    conn.execute("SELECT memory.audit_integrate()")
    events = conn.execute("SELECT count(*) FROM memory.audit_log WHERE chain_id = 'acme' AND event_type = 'memory.recall'").fetchone()[0]
    assert events == 2  # both recalls were recorded and chained
    assert conn.execute("SELECT ok, pending FROM memory.audit_verify('acme')").fetchone() == (True, 0)


def test_explicit_integrate_refuses_where_it_cannot_chain(dsn):
    with psycopg.connect(dsn) as c:
        c.execute("BEGIN READ ONLY")
        with pytest.raises(errors.ReadOnlySqlTransaction):
            c.execute("SELECT memory.audit_integrate()")


def test_rollback_leaves_nothing_commit_loses_nothing(dsn, conn):
    with psycopg.connect(dsn) as c:
        c.execute("SELECT memory.audit_append('app.gone', '{}', 'acme')")
        c.execute("INSERT INTO memory.observations (org_id, content) VALUES ('acme', 'rolled back')")
        c.rollback()
        c.execute("SELECT memory.audit_append('app.kept', '{}', 'acme')")
        with pytest.raises(psycopg.DatabaseError):
            with c.transaction():
                c.execute("SELECT memory.audit_append('app.savepoint_gone', '{}', 'acme')")
                c.execute("SELECT 1/0")
        c.commit()
    assert conn.execute("SELECT count(*) FROM memory.audit_pending").fetchone() == (1,)
    assert conn.execute("SELECT memory.audit_integrate()").fetchone() == (1,)
    assert conn.execute("SELECT seq, event_type FROM memory.audit_log WHERE chain_id = 'acme'").fetchall() == [(1, "app.kept")]


def test_a_tampered_pending_entry_is_reported_and_never_chained(conn):
    conn.execute("SELECT memory.audit_append('app.one', '{\"n\": 1}', 'acme')")
    conn.execute("SELECT memory.audit_append('app.two', '{\"n\": 2}', 'acme')")
    with pytest.raises(psycopg.DatabaseError) as e:
        conn.execute("UPDATE memory.audit_pending SET payload = '{\"n\": 3}'")
    assert e.value.sqlstate == "MX002"
    with pytest.raises(psycopg.DatabaseError) as e:
        conn.execute("DELETE FROM memory.audit_pending")
    assert e.value.sqlstate == "MX002"
    # A superuser in replica mode (triggers off) edits one entry's payload.
    with conn.transaction():
        conn.execute("SET LOCAL session_replication_role = replica")
        conn.execute("UPDATE memory.audit_pending SET payload = '{\"n\": 3}' WHERE event_type = 'app.two'")
    row = conn.execute("SELECT entries, ok, first_bad_seq, reason, pending FROM memory.audit_verify('acme')").fetchone()
    assert row[:3] == (1, False, None) and row[3].startswith("pending hash mismatch") and row[4] == 1, row
    assert conn.execute("SELECT event_type FROM memory.audit_log").fetchall() == [("app.one",)]
    # A copied row under a new id: its hash no longer checks either.
    with conn.transaction():
        conn.execute("SET LOCAL session_replication_role = replica")
        conn.execute("DELETE FROM memory.audit_pending")
        conn.execute("SELECT memory.audit_append('app.three', '{}', 'acme')")
        conn.execute("INSERT INTO memory.audit_pending SELECT id + 1, ord + 1, chain_id, event_type, written_at, actor_id, org_id,"
                     " project_id, workspace_id, payload, key_id, pending_hash FROM memory.audit_pending")
    assert conn.execute("SELECT memory.audit_integrate()").fetchone() == (1,)
    row = conn.execute("SELECT entries, ok, pending FROM memory.audit_verify('acme')").fetchone()
    assert row == (2, False, 1), row


def test_the_sequencer_killed_mid_integration_loses_nothing(dsn, conn):
    for i in range(200):
        conn.execute("SELECT memory.audit_append('app.n', jsonb_build_object('i', %s), 'acme')", (i,))
    victim = psycopg.connect(dsn)
    pid = victim.execute("SELECT pg_backend_pid()").fetchone()[0]
    victim.execute("SELECT memory.audit_integrate()")  # chained, deleted, not committed
    assert conn.execute("SELECT count(*) FROM memory.audit_pending").fetchone() == (200,)
    conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
    try:
        victim.close()
    except psycopg.Error:
        pass
    assert conn.execute("SELECT memory.audit_integrate()").fetchone() == (200,)
    assert conn.execute("SELECT entries, ok, pending FROM memory.audit_verify('acme')").fetchone() == (200, True, 0)
    seen = sorted(r[0] for r in conn.execute("SELECT (payload->>'i')::int FROM memory.audit_log WHERE chain_id = 'acme'"))
    assert seen == list(range(200))


WRITERS = 16
TXNS = 25
LEVELS = ["READ COMMITTED", "REPEATABLE READ", "SERIALIZABLE"]


def _writer(dsn, w, start, killed):
    """One writer: single-row transactions at its isolation level; every 5th rolls back; its
    connection is killed partway (by the main thread) and reopened. Returns the marks it committed."""
    committed = []
    level = LEVELS[w % len(LEVELS)]
    start.wait()
    c = psycopg.connect(dsn)
    for t in range(TXNS):
        mark = f"w{w}-t{t}"
        org = f"org_{(w + t) % 4}"
        try:
            c.execute(f"BEGIN ISOLATION LEVEL {level}")
            c.execute("INSERT INTO memory.observations (org_id, content) VALUES (%s, %s)", (org, mark))
            c.execute("SELECT memory.audit_append('app.mark', jsonb_build_object('mark', %s::text), %s)", (mark, org))
            if t % 5 == 4:
                c.rollback()
                continue
            if t == 10 and w % 4 == 0:
                killed.put(c.execute("SELECT pg_backend_pid()").fetchone()[0])
                time.sleep(0.3)  # killed meanwhile, before its commit
            c.commit()
            committed.append(mark)
        except psycopg.OperationalError:
            c = psycopg.connect(dsn)
        except psycopg.errors.SerializationFailure:
            c.rollback()
    c.close()
    return committed


def test_many_writers_every_level_rollbacks_and_kills(dsn, conn):
    import queue
    start = threading.Barrier(WRITERS + 1)
    killed = queue.Queue()
    with concurrent.futures.ThreadPoolExecutor(WRITERS) as pool:
        futures = [pool.submit(_writer, dsn, w, start, killed) for w in range(WRITERS)]
        start.wait()
        done = 0
        while done < WRITERS // 4:
            pid = killed.get(timeout=60)
            conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
            done += 1
        # Integrate while they write, too.
        for _ in range(5):
            conn.execute("SELECT memory.audit_integrate()")
        marks = [m for f in futures for m in f.result()]
    conn.execute("SELECT memory.audit_integrate()")
    rows = conn.execute("SELECT chain_id, entries, ok, pending FROM memory.audit_verify() WHERE chain_id LIKE 'org_%' ORDER BY 1").fetchall()
    assert all(r[2] and r[3] == 0 for r in rows), rows
    assert_chains_whole(conn, "org_%")
    logged = [r[0] for r in conn.execute("SELECT payload->>'mark' FROM memory.audit_log WHERE event_type = 'app.mark'")]
    assert sorted(logged) == sorted(marks)  # every committed event exactly once, nothing else
    stored = conn.execute("SELECT count(*) FROM memory.audit_log WHERE event_type = 'memory.store'").fetchone()[0]
    assert stored == len(marks)
    assert len(marks) >= WRITERS * TXNS * 3 // 5


@pytest.fixture(scope="module")
def worker_cluster():
    """A cluster whose background integrator serves database 'integrated'."""
    with integrator_cluster("pytest-worker", "integrated") as dsn:
        yield dsn


def test_background_worker_integrates_and_survives_being_killed(worker_cluster):
    with psycopg.connect(worker_cluster, autocommit=True) as c:
        # The worker started before the database existed: its first start failed, the next waited for it (docs/audit.md).
        q = "SELECT pid FROM pg_stat_activity WHERE backend_type = 'memory_ext integrator' AND datname = 'integrated'"
        assert wait_until(lambda: len(c.execute(q).fetchall()) == 1)
        workers = c.execute(q).fetchall()
        for i in range(100):
            c.execute("INSERT INTO memory.observations (org_id, content) VALUES (%s, 'x')", (f"org_{i % 3}",))
        # Nobody calls the sequencer here: the worker chains what was committed.
        assert wait_until(lambda: c.execute("SELECT count(*) FROM memory.audit_pending").fetchone()[0] == 0)
        assert c.execute("SELECT count(*) FROM memory.audit_log").fetchone()[0] == 100
        # Killed, it is restarted by the postmaster and carries on; nothing is lost.
        c.execute("SELECT pg_terminate_backend(%s)", (workers[0][0],))
        for i in range(50):
            c.execute("INSERT INTO memory.observations (org_id, content) VALUES ('org_0', 'y')")
        assert wait_until(lambda: c.execute("SELECT count(*) FROM memory.audit_log").fetchone()[0] == 150)
        rows = c.execute("SELECT bool_and(ok), sum(entries), sum(pending) FROM memory.audit_verify()").fetchone()
        assert rows == (True, 150, 0)


def test_the_backlog_shows_the_integrators_to_a_tenant_admin():
    """memory.audit_backlog as a tenant-bound admin: the integrator running (counted by the lock of
    its share in pg_locks, which any extension owner sees; pg_stat_activity hides other roles'
    backend_type from an owner that is no superuser), its own chain's backlog drained by it."""
    with integrator_cluster("pytest-backlog", "backlogged") as dsn:
        with psycopg.connect(dsn, autocommit=True) as c:
            q = "SELECT pid FROM pg_stat_activity WHERE backend_type = 'memory_ext integrator' AND datname = 'backlogged'"
            assert wait_until(lambda: len(c.execute(q).fetchall()) == 1)
            c.execute("SELECT memory.setup_roles()")
            c.execute("DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'bk_admin') THEN "
                      "CREATE ROLE bk_admin LOGIN IN ROLE memory_admin; END IF; END $$")
            c.execute("SELECT memory.grant_org('bk_admin', 'org_bk')")
            c.execute("INSERT INTO memory.observations (org_id, content) VALUES ('org_bk', 'x'), ('org_other', 'y')")
            assert wait_until(lambda: c.execute("SELECT count(*) FROM memory.audit_pending").fetchone()[0] == 0)
        with psycopg.connect(dsn.replace("user=postgres", "user=bk_admin"), autocommit=True) as a:
            row = a.execute("SELECT chains, pending, parked, oldest_pending_at, integrators_running, last_integration_at IS NOT NULL"
                            " FROM memory.audit_backlog").fetchone()
            assert row == ("own", 0, 0, None, 1, True), row
            assert a.execute("SELECT bool_and(seq IS NOT NULL), count(*) FILTER (WHERE event_type = 'memory.store')"
                             " FROM memory.audit_events(org_id => 'org_bk')").fetchone() == (True, 1)


def test_the_worker_is_not_steered_by_database_settings(worker_cluster):
    """The worker runs as the bootstrap superuser; what a database owner sets for the database
    (a search path with its own operators, read-only transactions) must not run its code or stop
    it (an attacker's review found both)."""
    with psycopg.connect(worker_cluster, autocommit=True) as c:
        c.execute("CREATE SCHEMA IF NOT EXISTS evil")
        c.execute("CREATE TABLE IF NOT EXISTS public.hits (who text)")
        c.execute("CREATE OR REPLACE FUNCTION evil.eq(a name, b name) RETURNS bool LANGUAGE plpgsql AS "
                  "$$BEGIN INSERT INTO public.hits VALUES (current_user); RETURN a OPERATOR(pg_catalog.=) b; END$$")
        c.execute("DROP OPERATOR IF EXISTS evil.= (name, name)")
        c.execute("CREATE OPERATOR evil.= (leftarg = name, rightarg = name, function = evil.eq)")
        c.execute("ALTER DATABASE integrated SET search_path = evil, pg_catalog")
        c.execute("ALTER DATABASE integrated SET default_transaction_read_only = on")
        try:
            q = "SELECT pid FROM pg_stat_activity WHERE backend_type = 'memory_ext integrator' AND datname = 'integrated'"
            assert wait_until(lambda: len(c.execute(q).fetchall()) == 1)
            c.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE backend_type = 'memory_ext integrator'")
            # It comes back under the database's settings, and still integrates.
            c.execute("BEGIN READ WRITE")
            c.execute("INSERT INTO memory.observations (org_id, content) VALUES ('org_9', 'after the settings')")
            c.execute("COMMIT")
            assert wait_until(lambda: c.execute("SELECT count(*) FROM memory.audit_pending").fetchone()[0] == 0)
            assert c.execute("SELECT count(*) FROM public.hits").fetchone() == (0,)
        finally:
            c.execute("ALTER DATABASE integrated RESET search_path")
            c.execute("ALTER DATABASE integrated RESET default_transaction_read_only")


def test_the_worker_clears_the_rows_it_chained(worker_cluster):
    """After a backlog the worker vacuums memory.audit_pending itself (autovacuum comes by once a
    minute at best), so the dead rows of what it chained do not slow its later rounds."""
    with psycopg.connect(worker_cluster, autocommit=True) as c:
        vacuums = "SELECT vacuum_count FROM pg_stat_user_tables WHERE relid = 'memory.audit_pending'::regclass"
        before = c.execute(vacuums).fetchone()[0]
        c.execute("INSERT INTO memory.observations (org_id, content) SELECT 'org_' || (g % 8), 'backlog ' || g FROM generate_series(1, 30000) g")
        assert wait_until(lambda: c.execute("SELECT count(*) FROM memory.audit_pending").fetchone()[0] == 0, 60)
        # The next round after the backlog vacuums (at most a second after the last one).
        c.execute("INSERT INTO memory.observations (org_id, content) VALUES ('org_0', 'after the backlog')")
        assert wait_until(lambda: c.execute(vacuums).fetchone()[0] > before, 30)
        assert wait_until(lambda: c.execute("SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = 'memory.audit_pending'::regclass").fetchone()[0] < 1000, 30)
        # The vacuum may be the one after the backlog's last round, before the row above is
        # chained; audit_verify gives way to a worker's round (and reports what it left pending).
        assert wait_until(lambda: c.execute("SELECT count(*) FROM memory.audit_pending").fetchone()[0] == 0, 30)
        rows = c.execute("SELECT ok, pending FROM memory.audit_verify()").fetchall()
        assert rows and all(r[0] and r[1] == 0 for r in rows), rows


def chain_share(chain, n):
    """memory_core::audit::chain_share, written again: FNV-1a 64 of the chain's bytes, mixed by
    MurmurHash3's fmix64, scaled to n by its high bits."""
    if n <= 1:
        return 0
    m = (1 << 64) - 1
    h = 0xcbf29ce484222325
    for b in chain.encode():
        h = ((h ^ b) * 0x100000001b3) & m
    h ^= h >> 33
    h = (h * 0xff51afd7ed558ccd) & m
    h ^= h >> 33
    h = (h * 0xc4ceb9fe1a85ec53) & m
    h ^= h >> 33
    return (h * n) >> 64


@pytest.fixture(scope="module")
def workers_cluster():
    """A cluster with three background integrators for database 'integrated'
    (memory.integrator_workers = 3; the database is named twice, and gets its three once)."""
    with integrator_cluster("pytest-workers", "integrated,integrated",
                            "-c memory.integrator_workers=3 -c max_prepared_transactions=4") as dsn:
        yield dsn


def test_integrators_share_the_chains(workers_cluster):
    """memory.integrator_workers = 3: each worker chains only the tenants chain_share gives it,
    beside the others and beside explicit memory.audit_integrate() calls; with one of them
    killed, the first serves its share until it is back; in the end every committed event is
    chained exactly once, gapless, and verifies."""
    orgs = [f"org_{i}" for i in range(16)]
    workers = ("SELECT application_name, pid FROM pg_stat_activity"
               " WHERE backend_type = 'memory_ext integrator' AND datname = 'integrated' ORDER BY 1")
    with psycopg.connect(workers_cluster, autocommit=True) as c:
        # Each names itself in pg_stat_activity.
        assert wait_until(lambda: [r[0] for r in c.execute(workers)] == [f"memory_ext integrator {k}/3" for k in (1, 2, 3)], seconds=90)
        c.execute("CREATE TABLE notes (id bigserial PRIMARY KEY, org_id text NOT NULL, content text NOT NULL,"
                  " classification memory.classification)")
        c.execute("""SELECT memory.govern('notes', '{"audit": true}')""")
        stop = threading.Event()
        committed = []
        lock = threading.Lock()

        def writer(w):
            with psycopg.connect(workers_cluster, autocommit=True) as wc:
                for i in range(300):
                    mark = f"w{w}-{i}"
                    wc.execute("BEGIN")
                    wc.execute("INSERT INTO notes (org_id, content) VALUES (%s, %s)", (orgs[(w * 7 + i) % len(orgs)], mark))
                    if i % 5 == 4:
                        wc.execute("ROLLBACK")
                        continue
                    wc.execute("COMMIT")
                    with lock:
                        committed.append(mark)

        def explicit():
            with psycopg.connect(workers_cluster, autocommit=True) as ec:
                while not stop.is_set():
                    ec.execute("SELECT memory.audit_integrate()")
                    time.sleep(0.05)

        with concurrent.futures.ThreadPoolExecutor(max_workers=7) as pool:
            writers = [pool.submit(writer, w) for w in range(6)]
            caller = pool.submit(explicit)
            for f in writers:
                f.result()
            stop.set()
            caller.result()
        pending = "SELECT chain_id, count(*) FROM memory.audit_pending GROUP BY 1"
        assert wait_until(lambda: c.execute(pending).fetchall() == [])

        # The split: with one tenant's head held (a superuser's row lock), the worker of its share
        # waits on it; the other two chain every tenant of theirs meanwhile.
        theirs = {o for o in orgs if chain_share(o, 3) == 1}
        held = sorted(theirs)[0]
        with psycopg.connect(workers_cluster) as blocker:
            blocker.execute("SELECT 1 FROM memory.audit_heads WHERE chain_id = %s FOR UPDATE", (held,))
            for o in orgs:
                c.execute("INSERT INTO notes (org_id, content) VALUES (%s, 'one head held')", (o,))
            assert wait_until(lambda: {r[0] for r in c.execute(pending)} <= theirs and held in {r[0] for r in c.execute(pending)})
            time.sleep(0.5)  # a few more rounds: still only that share waits
            left = {r[0] for r in c.execute(pending)}
            assert held in left and left <= theirs, left
            blocker.rollback()
        assert wait_until(lambda: c.execute(pending).fetchall() == [])

        # Worker 2 of 3 killed (the postmaster restarts it after 5 s), then a write to every
        # tenant: worker 1 serves worker 2's share while it is away (and says so in the server
        # log), so every tenant is chained, and worker 2 takes its share back when it returns.
        assert theirs and len(theirs) < len(orgs)
        log = cluster_dir("pytest-workers") / "server.log"
        victim = dict(c.execute(workers).fetchall())["memory_ext integrator 2/3"]
        c.execute("SELECT pg_terminate_backend(%s)", (victim,))
        assert wait_until(lambda: victim not in [r[1] for r in c.execute(workers)])
        for o in orgs:
            c.execute("INSERT INTO notes (org_id, content) VALUES (%s, 'while 2/3 is away')", (o,))
        assert wait_until(lambda: c.execute(pending).fetchall() == [])
        assert wait_until(lambda: "integrator 2/3 is not running: integrator 1/3 integrates its share" in log.read_text())
        # Back (a new process), it serves its share again: worker 1 leaves it.
        assert wait_until(lambda: "memory_ext integrator 2/3" in dict(c.execute(workers).fetchall()))
        assert wait_until(lambda: "integrator 2/3 is back: integrator 1/3 leaves its share to it" in log.read_text())
        for o in orgs:
            c.execute("INSERT INTO notes (org_id, content) VALUES (%s, 'after 2/3 is back')", (o,))
        assert wait_until(lambda: c.execute(pending).fetchall() == [])

        # Every committed event exactly once, each chain gapless, and every chain verifies (here
        # and in the Python verifier).
        logged = [r[0] for r in c.execute("SELECT payload->>'id' FROM memory.audit_log WHERE event_type = 'memory.store'")]
        assert len(logged) == len(set(logged)) == len(committed) + 3 * len(orgs)
        for (chain,) in c.execute("SELECT DISTINCT chain_id FROM memory.audit_log").fetchall():
            n, lo, hi = c.execute("SELECT count(*), min(seq), max(seq) FROM memory.audit_log WHERE chain_id = %s", (chain,)).fetchone()
            assert (lo, hi) == (1, n), chain
            assert py_verify(c, chain) == (True, None, None)
        total = c.execute("SELECT count(*) FROM memory.audit_log").fetchone()[0]
        rows = c.execute("SELECT bool_and(ok), sum(entries), sum(pending) FROM memory.audit_verify()").fetchone()
        assert rows == (True, total, 0)

        # Idle, the three take no transaction ids (rounds that find nothing of their share
        # pending commit nothing): 2 s are some 60 rounds.
        next_xid = "SELECT pg_catalog.pg_snapshot_xmax(pg_catalog.pg_current_snapshot())::text::bigint"
        before = c.execute(next_xid).fetchone()[0]
        time.sleep(2)
        assert c.execute(next_xid).fetchone()[0] - before <= 2


def test_denied_attempts_go_to_the_integrator_of_their_share(workers_cluster):
    """With three integrators each appends only the denied-attempt events of its own share's orgs
    (it locks their heads; taking another's could deadlock two workers and lose an event)."""
    orgs = [f"den_{i}" for i in range(12)]
    assert len({chain_share(o, 3) for o in orgs}) == 3
    with psycopg.connect(workers_cluster, autocommit=True) as c:
        c.execute("SELECT * FROM memory.setup_roles()")
        c.execute("DROP ROLE IF EXISTS share_writer")
        c.execute("CREATE ROLE share_writer LOGIN IN ROLE memory_writer")
        for i, o in enumerate(orgs):
            c.execute("SELECT memory.grant_org('share_writer', %s)", (o,))
            c.execute("INSERT INTO memory.entities (id, org_id, entity_type, name, lifecycle_state) VALUES (%s, %s, 'problem', 'x', 'active')",
                      (f"e6000000-0000-0000-0000-{i:012d}", o))
            c.execute("INSERT INTO memory.claims (id, org_id, entity_id, claim_text) VALUES (%s, %s, %s, 'x')",
                      (f"c6000000-0000-0000-0000-{i:012d}", o, f"e6000000-0000-0000-0000-{i:012d}"))
    with psycopg.connect(workers_cluster.replace("user=postgres", "user=share_writer")) as w:
        for i, o in enumerate(orgs):
            w.execute("SELECT pg_catalog.set_config('memory.org_id', %s, false)", (o,))
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                w.execute("UPDATE memory.claims SET lifecycle_state = 'active' WHERE id = %s", (f"c6000000-0000-0000-0000-{i:012d}",))
            w.rollback()
    with psycopg.connect(workers_cluster, autocommit=True) as c:
        q = ("SELECT chain_id FROM memory.audit_log WHERE event_type = 'memory.govern.unauthorized_access_attempt'"
             " AND chain_id LIKE 'den\\_%' ORDER BY 1")
        assert wait_until(lambda: [r[0] for r in c.execute(q)] == sorted(orgs))
        for o in orgs:
            assert py_verify(c, o) == (True, None, None)


def test_a_commit_wakes_the_integrator_of_its_chains(workers_cluster):
    """With memory.integrator_naptime at a minute, committed pending entries are chained at once
    all the same: the commit wakes the integrator of their chains (each of the three shares), also
    while that integrator's round waits for a lock; with that integrator gone, the first one in
    its stead; a denied attempt's hand-over wakes its chain's integrator too. An entry committed by
    COMMIT PREPARED, which nothing announces, waits meanwhile."""
    orgs = [f"wake_{i}" for i in range(9)]
    assert len({chain_share(o, 3) for o in orgs}) == 3
    workers = ("SELECT application_name, pid FROM pg_stat_activity"
               " WHERE backend_type = 'memory_ext integrator' AND datname = 'integrated'")
    with psycopg.connect(workers_cluster, autocommit=True) as c:
        assert wait_until(lambda: len(c.execute(workers).fetchall()) == 3)
        c.execute("DROP TABLE IF EXISTS wake_notes")
        c.execute("CREATE TABLE wake_notes (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), org_id text NOT NULL, content text NOT NULL, classification memory.classification)")
        c.execute("""SELECT memory.govern('wake_notes', '{"audit": true}')""")
        c.execute("SELECT * FROM memory.setup_roles()")
        c.execute("DROP ROLE IF EXISTS wake_writer")
        c.execute("CREATE ROLE wake_writer LOGIN IN ROLE memory_writer")
        c.execute("SELECT memory.grant_org('wake_writer', 'wake_den')")
        c.execute("INSERT INTO memory.entities (id, org_id, entity_type, name, lifecycle_state) VALUES"
                  " ('e7000000-0000-0000-0000-000000000001', 'wake_den', 'problem', 'x', 'active')")
        c.execute("INSERT INTO memory.claims (id, org_id, entity_id, claim_text) VALUES"
                  " ('c7000000-0000-0000-0000-000000000001', 'wake_den', 'e7000000-0000-0000-0000-000000000001', 'x')")
        c.execute("SELECT memory.audit_integrate()")
        c.execute("ALTER SYSTEM SET memory.integrator_naptime = '60s'")
        c.execute("SELECT pg_reload_conf()")
        try:
            # The reload wakes each worker once; then they wait a minute for what no commit
            # announces.
            time.sleep(1.5)
            seq = "SELECT coalesce((SELECT seq FROM memory.audit_heads WHERE chain_id = %s), 0)"
            # The control: an entry committed by COMMIT PREPARED is announced by nobody, so it
            # waits for the minute's naptime (or for the next wake-up of its chain's integrator).
            pending = "SELECT count(*) FROM memory.audit_pending WHERE chain_id = %s"
            c.execute("BEGIN")
            c.execute("INSERT INTO wake_notes (org_id, content) VALUES (%s, 'prepared')", (orgs[0],))
            c.execute("PREPARE TRANSACTION 'wake_control'")
            c.execute("COMMIT PREPARED 'wake_control'")
            time.sleep(2)
            assert c.execute(pending, (orgs[0],)).fetchone()[0] == 1
            for o in orgs:
                before = c.execute(seq, (o,)).fetchone()[0]
                c.execute("INSERT INTO wake_notes (org_id, content) VALUES (%s, 'woken')", (o,))
                assert wait_until(lambda: c.execute(seq, (o,)).fetchone()[0] > before, 10), o
            assert c.execute(pending, (orgs[0],)).fetchone()[0] == 0
            # A wake-up that comes while the round waits for a head (held by an immediate-mode
            # writer; the lock wait uses, and resets, the integrator's latch) is not lost: the
            # integrator counts wake-ups, and goes again after the round.
            x, y = next((a, b) for a in orgs for b in orgs if a != b and chain_share(a, 3) == chain_share(b, 3))
            holder = psycopg.connect(workers_cluster)
            holder.execute("SET memory.audit_mode = immediate")
            holder.execute("INSERT INTO wake_notes (org_id, content) VALUES (%s, 'holds the head')", (x,))
            before_y = c.execute(seq, (y,)).fetchone()[0]
            c.execute("INSERT INTO wake_notes (org_id, content) VALUES (%s, 'waits for the head')", (x,))
            waiting = ("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'memory_ext integrator'"
                       " AND datname = 'integrated' AND wait_event_type = 'Lock'")
            assert wait_until(lambda: c.execute(waiting).fetchone()[0] == 1, 10)
            c.execute("INSERT INTO wake_notes (org_id, content) VALUES (%s, 'during the wait')", (y,))
            time.sleep(0.5)
            holder.commit()
            holder.close()
            assert wait_until(lambda: c.execute(seq, (y,)).fetchone()[0] > before_y, 5)
            assert c.execute(pending, (x,)).fetchone()[0] == 0
            # Integrator 3/3 gone (restarted only after 5 s): the commit wakes the first one,
            # which serves its share meanwhile.
            gone = next(o for o in orgs if chain_share(o, 3) == 2)
            pid = next(p for a, p in c.execute(workers).fetchall() if a.endswith(" 3/3"))
            c.execute("SELECT pg_terminate_backend(%s)", (pid,))
            assert wait_until(lambda: pid not in [p for _, p in c.execute(workers).fetchall()], 2)
            before = c.execute(seq, (gone,)).fetchone()[0]
            c.execute("INSERT INTO wake_notes (org_id, content) VALUES (%s, 'covered')", (gone,))
            assert wait_until(lambda: c.execute(seq, (gone,)).fetchone()[0] > before, 3)
            assert wait_until(lambda: len(c.execute(workers).fetchall()) == 3)
            # A denied attempt's event, handed over by the failing transaction.
            with psycopg.connect(workers_cluster.replace("user=postgres", "user=wake_writer")) as w:
                w.execute("SELECT pg_catalog.set_config('memory.org_id', 'wake_den', false)")
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    w.execute("UPDATE memory.claims SET lifecycle_state = 'active' WHERE id = 'c7000000-0000-0000-0000-000000000001'")
                w.rollback()
            denied = ("SELECT count(*) FROM memory.audit_log WHERE chain_id = 'wake_den'"
                      " AND event_type = 'memory.govern.unauthorized_access_attempt'")
            assert wait_until(lambda: c.execute(denied).fetchone()[0] == 1, 10)
        finally:
            c.execute("ALTER SYSTEM RESET memory.integrator_naptime")
            c.execute("SELECT pg_reload_conf()")
        for o in orgs + ["wake_den"]:
            assert py_verify(c, o) == (True, None, None)
        assert c.execute("SELECT count(*) FROM memory.audit_log WHERE event_type = 'memory.store'"
                         " AND chain_id LIKE 'wake\\_%'").fetchone()[0] == len(orgs) + 5


def test_a_transaction_that_integrated_cannot_be_prepared(workers_cluster):
    """A transaction that integrated holds the integration lock (and so every background
    integrator of the database) until it ends; prepared, it would hold them across a restart.
    PREPARE TRANSACTION is refused (0A000); one that found nothing to integrate let the lock go
    and prepares."""
    port = psycopg.conninfo.conninfo_to_dict(workers_cluster)["port"]
    dsn = fresh_database(port, "unserved")  # no integrator serves it
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SELECT memory.audit_append('app.before', '{}', 'org_p')")
        c.execute("BEGIN")
        assert c.execute("SELECT sum(entries) FROM memory.audit_verify()").fetchone()[0] >= 1
        with pytest.raises(psycopg.errors.FeatureNotSupported):
            c.execute("PREPARE TRANSACTION 'held'")
        c.execute("ROLLBACK")
        assert c.execute("SELECT count(*) FROM pg_prepared_xacts").fetchone() == (0,)
        # Rolled back: the entry is still pending, and a later integration chains it.
        assert c.execute("SELECT memory.audit_integrate()").fetchone()[0] >= 1
        # Nothing pending: audit_verify let the lock go, and the transaction prepares.
        c.execute("BEGIN")
        c.execute("SELECT * FROM memory.audit_verify()")
        held = c.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 28024"
                         " AND pid = pg_backend_pid()").fetchone()[0]
        assert held == 0
        c.execute("PREPARE TRANSACTION 'idle'")
        c.execute("ROLLBACK PREPARED 'idle'")


@pytest.fixture(scope="module")
def short_cluster():
    """memory.integrator_workers = 3 where max_worker_processes leaves room for fewer: the
    logical replication launcher and pg_cron's (where it is installed) register first."""
    with integrator_cluster("pytest-short", "integrated", "-c memory.integrator_workers=3 -c max_worker_processes=3") as dsn:
        yield dsn


def test_the_first_integrator_serves_the_shares_of_those_that_never_started(short_cluster):
    """Integrators max_worker_processes has no slot for never start (the server warns); the first
    one integrates their shares, so no tenant waits for an integrator that will never come."""
    orgs = [f"org_{i}" for i in range(16)]
    workers = ("SELECT application_name FROM pg_stat_activity"
               " WHERE backend_type = 'memory_ext integrator' AND datname = 'integrated' ORDER BY 1")
    with psycopg.connect(short_cluster, autocommit=True) as c:
        assert wait_until(lambda: "memory_ext integrator 1/3" in [r[0] for r in c.execute(workers)])
        running = [r[0] for r in c.execute(workers)]
        assert len(running) < 3, running
        c.execute("CREATE TABLE notes (id bigserial PRIMARY KEY, org_id text NOT NULL, content text NOT NULL,"
                  " classification memory.classification)")
        c.execute("""SELECT memory.govern('notes', '{"audit": true}')""")
        for o in orgs:
            c.execute("INSERT INTO notes (org_id, content) VALUES (%s, 'x')", (o,))
        # Nobody calls the sequencer here.
        assert wait_until(lambda: c.execute("SELECT count(*) FROM memory.audit_pending").fetchone()[0] == 0)
        rows = c.execute("SELECT bool_and(ok), count(*) FILTER (WHERE entries > 0), sum(pending) FROM memory.audit_verify()").fetchone()
        assert rows[0] is True and rows[2] == 0 and rows[1] >= len(orgs)


@pytest.mark.parametrize("memory", ["256MB", "0"])
def test_both_integration_paths_chain_alike(conn, memory):
    """A backlog within memory.integration_memory is read from the heap and sorted in memory; 0
    makes the sequencer sort it by a query. Both chain the same entries in the same order: by
    chain, then each writer's order; a copied entry and its original and a forged entry stay
    pending."""
    conn.execute(f"SET memory.integration_memory = '{memory}'")
    for n in range(5):
        for org in ("b_org", "a_org"):
            conn.execute("SELECT memory.audit_append('app.n', jsonb_build_object('n', %s::int), %s)", (n, org))
    with conn.transaction():
        conn.execute("SET LOCAL session_replication_role = replica")
        conn.execute("INSERT INTO memory.audit_pending SELECT * FROM memory.audit_pending WHERE chain_id = 'a_org' AND payload->>'n' = '2'")
        conn.execute("UPDATE memory.audit_pending SET payload = '{\"n\": 33}' WHERE chain_id = 'b_org' AND payload->>'n' = '3'")
    assert conn.execute("SELECT memory.audit_integrate()").fetchone() == (8,)
    chained = conn.execute("SELECT chain_id, seq, (payload->>'n')::int FROM memory.audit_log WHERE event_type = 'app.n'"
                           " ORDER BY chain_id, seq").fetchall()
    assert chained == [("a_org", 1, 0), ("a_org", 2, 1), ("a_org", 3, 3), ("a_org", 4, 4),
                       ("b_org", 1, 0), ("b_org", 2, 1), ("b_org", 3, 2), ("b_org", 4, 4)], chained
    assert conn.execute("SELECT chain_id, count(*) FROM memory.audit_pending GROUP BY 1 ORDER BY 1").fetchall() == [("a_org", 2), ("b_org", 1)]
    for chain, pending in (("a_org", 2), ("b_org", 1)):
        row = conn.execute("SELECT entries, ok, pending FROM memory.audit_verify(%s)", (chain,)).fetchone()
        assert row == (4, False, pending), (chain, row)  # the parked entries are reported
        assert py_verify(conn, chain) == (True, None, None)  # the chained ones verify


def test_a_round_of_many_chains_moves_each_head_it_chains_into_once(conn):
    """A round over many chains locks their heads in one statement and writes them in one (when
    every head exists; a chain new to the log sends the round the one-by-one way, which creates
    its head). Each head it chained into ends at its chain's last entry; a chain whose only entry
    is forged is locked but its head stays as it was, and chains the round did not touch too."""
    chains = [f"m_{i:02}" for i in range(40)]

    def append(chain, n):
        conn.execute("SELECT memory.audit_append('app.m', jsonb_build_object('n', %s::int), %s)", (n, chain))

    def heads():
        return dict((c, (s, h, u)) for c, s, h, u in conn.execute(
            "SELECT chain_id, seq, entry_hash, updated_at FROM memory.audit_heads WHERE chain_id LIKE 'm\\_%'").fetchall())

    for c in chains:
        append(c, 0)
    assert conn.execute("SELECT memory.audit_integrate()").fetchone() == (40,)
    before = heads()
    assert len(before) == 40
    # Round two: three entries in each of 30 chains (heads all exist: one lock, one update), and
    # one forged entry in a 31st.
    for n in (1, 2, 3):
        for c in chains[:30]:
            append(c, n)
    append(chains[35], 1)
    with conn.transaction():
        conn.execute("SET LOCAL session_replication_role = replica")
        conn.execute("UPDATE memory.audit_pending SET payload = '{\"n\": 9}' WHERE chain_id = %s", (chains[35],))
    assert conn.execute("SELECT memory.audit_integrate()").fetchone() == (90,)
    after = heads()
    for c in chains[:30]:
        last = conn.execute("SELECT seq, entry_hash FROM memory.audit_log WHERE chain_id = %s ORDER BY seq DESC LIMIT 1", (c,)).fetchone()
        assert last[0] == 4 and after[c][:2] == last, c
        assert after[c][2] > before[c][2], c
    for c in chains[30:]:
        assert after[c] == before[c], c
    # Round three: existing chains and one new to the log, in one round.
    for c in chains[:3] + ["m_new"]:
        append(c, 4)
    assert conn.execute("SELECT memory.audit_integrate()").fetchone() == (4,)
    final = heads()
    assert [final[c][0] for c in chains[:3] + ["m_new"]] == [5, 5, 5, 1]
    assert_chains_whole(conn, "m\\_%")
    row = conn.execute("SELECT entries, ok, pending FROM memory.audit_verify(%s)", (chains[35],)).fetchone()
    assert row == (1, False, 1), row


def test_a_head_made_by_a_rolled_back_round_is_made_again(dsn):
    """A round over several chains asks whether their heads exist only for chains this backend has
    locked in no committed round. A head made and then locked with another in one statement by a
    transaction (or a savepoint) that rolls back is not taken for known: the next round over the
    same chains, in the same session, makes it again and chains into it."""
    with psycopg.connect(dsn, autocommit=True) as c:
        def append(chain, n):
            c.execute("SELECT memory.audit_append('app.k', jsonb_build_object('n', %s::int), %s)", (n, chain))

        def integrate():
            return c.execute("SELECT memory.audit_integrate()").fetchone()[0]

        for chain in ("k_a", "k_b"):
            append(chain, 0)
        assert integrate() == 2

        def made_and_locked_with_another(fresh):
            # The new chain's head is made one by one beside k_a's; its only entry is forged, so
            # the head is locked but not moved (the transaction keeps no position of it). The next
            # round locks it with k_b's in one statement.
            append(fresh, 1)
            append("k_a", 1)
            c.execute("SET LOCAL session_replication_role = replica")
            c.execute("UPDATE memory.audit_pending SET payload = '{\"n\": 9}' WHERE chain_id = %s", (fresh,))
            c.execute("SET LOCAL session_replication_role = origin")
            assert integrate() == 1
            append("k_b", 2)
            assert integrate() == 1
            assert c.execute("SELECT seq FROM memory.audit_heads WHERE chain_id = %s", (fresh,)).fetchone() == (0,)

        with c.transaction() as top:
            made_and_locked_with_another("k_new_0")
            raise psycopg.Rollback(top)
        with c.transaction():
            with c.transaction() as savepoint:
                made_and_locked_with_another("k_new_1")
                raise psycopg.Rollback(savepoint)
        # Rounds over exactly the chains the rolled-back statement locked: were they taken for known,
        # nobody would ask whether the new one's head exists, and locking would find it missing.
        for fresh in ("k_new_0", "k_new_1"):
            assert c.execute("SELECT count(*) FROM memory.audit_heads WHERE chain_id = %s", (fresh,)).fetchone() == (0,)
            for chain in ("k_b", fresh):
                append(chain, 3)
            assert integrate() == 2
            assert c.execute("SELECT seq FROM memory.audit_heads WHERE chain_id = %s", (fresh,)).fetchone() == (1,)
        assert_chains_whole(c, "k\\_%")


def test_a_round_locks_the_heads_where_it_last_wrote_them(dsn):
    """A round over several chains locks the heads this backend wrote in a committed round from
    where it wrote them (no statement): a head moved since by another session (immediate mode) is
    followed to its newest version; a round that rolled back (or a savepoint) leaves the positions
    of the last committed one; a rewritten heads table sends the round back to the lookup by key.
    Every chain stays whole and gapless through all of it."""
    chains = ("l_a", "l_b", "l_c")
    with psycopg.connect(dsn, autocommit=True) as c, psycopg.connect(dsn, autocommit=True) as w:
        w.execute("SET memory.audit_mode = immediate")
        n = iter(range(1000))

        def append_all():
            for chain in chains:
                c.execute("SELECT memory.audit_append('app.l', jsonb_build_object('n', %s::int), %s)", (next(n), chain))

        def integrate():
            return c.execute("SELECT memory.audit_integrate()").fetchone()[0]

        def seqs():
            return dict(c.execute("SELECT chain_id, seq FROM memory.audit_heads WHERE chain_id LIKE 'l\\_%'").fetchall())

        append_all()
        assert integrate() == 3
        assert integrate() == 0
        # Another session moves l_b's head twice: the version this session wrote is no longer the newest.
        for k in range(2):
            w.execute("SELECT memory.audit_append('app.l', jsonb_build_object('w', %s::int), 'l_b')", (k,))
        assert seqs() == {"l_a": 1, "l_b": 3, "l_c": 1}
        append_all()
        with c.transaction():
            # Locked and written with no statement: the heads table is not scanned at all.
            scans = "SELECT seq_scan + idx_scan FROM pg_stat_xact_user_tables WHERE relid = 'memory.audit_heads'::regclass"
            before = c.execute(scans).fetchone()
            assert integrate() == 3
            assert c.execute(scans).fetchone() == before
        assert seqs() == {"l_a": 2, "l_b": 4, "l_c": 2}
        # A round that rolls back, then one inside a savepoint that rolls back.
        with c.transaction() as top:
            append_all()
            assert integrate() == 3
            raise psycopg.Rollback(top)
        with c.transaction():
            with c.transaction() as savepoint:
                append_all()
                assert integrate() == 3
                raise psycopg.Rollback(savepoint)
            w.execute("SELECT memory.audit_append('app.l', '{\"w\": 9}', 'l_c')")
            append_all()
            assert integrate() == 3
        assert seqs() == {"l_a": 3, "l_b": 5, "l_c": 4}
        append_all()
        assert integrate() == 3
        # The heads table rewritten: every head at a new place.
        c.execute("VACUUM FULL memory.audit_heads")
        append_all()
        assert integrate() == 3
        w.execute("SELECT memory.audit_append('app.l', '{\"w\": 10}', 'l_a')")
        append_all()
        assert integrate() == 3
        assert seqs() == {"l_a": 7, "l_b": 8, "l_c": 7}
        # The heads' index has every version written (after the rewrite the pages are full, and
        # the new versions went to other pages, each with its index entry): looked up by key.
        with c.transaction():
            c.execute("SET LOCAL enable_seqscan = off")
            c.execute("SET LOCAL enable_bitmapscan = off")
            by_key = "SELECT seq FROM memory.audit_heads WHERE chain_id = %s"
            assert "Index" in c.execute("EXPLAIN SELECT seq FROM memory.audit_heads WHERE chain_id = 'l_a'").fetchone()[0]
            assert {ch: c.execute(by_key, (ch,)).fetchone()[0] for ch in chains} == seqs()
        assert_chains_whole(c, "l\\_%")


def test_a_key_rotated_by_another_session_is_known_to_the_next_round(dsn):
    """Integrations keep the keys they check signatures with across rounds: a key made since by
    another session (memory.audit_rotate_key) is read again, so entries signed with it are
    chained, never parked; a rotation rolled back leaves nothing behind."""
    with psycopg.connect(dsn, autocommit=True) as c, psycopg.connect(dsn, autocommit=True) as o:
        def append(s, n):
            s.execute("SELECT memory.audit_append('app.r', jsonb_build_object('n', %s::int), 'r_a')", (n,))

        append(c, 0)
        assert c.execute("SELECT memory.audit_integrate()").fetchone() == (1,)
        with o.transaction() as rolled_back:
            o.execute("SELECT memory.audit_rotate_key()")
            append(o, 1)
            raise psycopg.Rollback(rolled_back)
        (new,) = o.execute("SELECT memory.audit_rotate_key()").fetchone()
        append(o, 2)
        assert c.execute("SELECT key_id FROM memory.audit_pending WHERE chain_id = 'r_a'").fetchall() == [(new,)]
        assert c.execute("SELECT memory.audit_integrate()").fetchone() == (1,)
        assert c.execute("SELECT count(*) FROM memory.audit_pending WHERE chain_id = 'r_a'").fetchone() == (0,)
        assert_chains_whole(c, "r\\_a")


def test_a_malformed_entry_never_stops_a_round_over_many_chains(conn):
    """An entry no writer can make (an org id past what the heads' index holds, or a chain other
    than its org's), put in by a superuser with triggers off, is parked: the round still locks and
    chains every other chain, and never creates or holds a head for it."""
    chains = [f"w_{i:02}" for i in range(8)]
    for n in (0, 1):
        for c in chains:
            conn.execute("SELECT memory.audit_append('app.w', jsonb_build_object('n', %s::int), %s)", (n, c))
        if n == 0:
            assert conn.execute("SELECT memory.audit_integrate()").fetchone() == (8,)
    # Incompressible and longer than a btree entry may be (about 2,700 bytes).
    huge = conn.execute("SELECT string_agg(md5(g::text), '') FROM generate_series(1, 100) g").fetchone()[0]
    with conn.transaction():
        conn.execute("SET LOCAL session_replication_role = replica")
        conn.execute("INSERT INTO memory.audit_pending SELECT id + 100000, ord, %s, event_type, written_at, actor_id, %s, project_id,"
                     " workspace_id, payload, key_id, pending_hash FROM memory.audit_pending WHERE chain_id = 'w_00'", (huge, huge))
        conn.execute("INSERT INTO memory.audit_pending SELECT id + 200000, ord, 'w_01', event_type, written_at, actor_id, 'w_02', project_id,"
                     " workspace_id, payload, key_id, pending_hash FROM memory.audit_pending WHERE chain_id = 'w_01'")
    assert conn.execute("SELECT memory.audit_integrate()").fetchone() == (8,)
    assert conn.execute("SELECT chain_id, seq FROM memory.audit_heads WHERE chain_id LIKE 'w\\_%' ORDER BY 1").fetchall() == \
        [(c, 2) for c in chains]
    assert conn.execute("SELECT count(*) FROM memory.audit_heads WHERE chain_id = %s", (huge,)).fetchone() == (0,)
    assert conn.execute("SELECT count(*) FROM memory.audit_pending").fetchone() == (2,)
    assert_chains_whole(conn, "w\\_%")


def test_a_backlog_of_toasted_payloads_is_bounded_by_what_it_holds(conn):
    """The direct read counts the payloads as detoasted, not the table's pages: compressible
    payloads that make a small table but a large backlog go to the sorting query."""
    rows = 40
    for n in range(rows):
        conn.execute("SELECT memory.audit_append('app.big', jsonb_build_object('n', %s::int, 'p', repeat('a', 60000)), 'big_org')", (n,))
    (pages,) = conn.execute("SELECT pg_relation_size('memory.audit_pending') / 8192").fetchone()
    assert pages * 8 < 2048, pages  # compressed inline: the table is far smaller than 2MB
    for memory in ("2MB", "256MB"):  # 40 x 60 kB > 2MB: the query; then the heap read
        conn.execute(f"SET memory.integration_memory = '{memory}'")
        conn.execute("SELECT memory.audit_append('app.big', jsonb_build_object('n', -1, 'p', repeat('b', 60000)), 'big_org')")
        before = conn.execute("SELECT count(*) FROM memory.audit_pending").fetchone()[0]
        assert conn.execute("SELECT memory.audit_integrate()").fetchone() == (before,)
    assert conn.execute("SELECT count(*), count(DISTINCT payload->>'n') FROM memory.audit_log WHERE chain_id = 'big_org'").fetchone() == (rows + 2, rows + 1)
    assert conn.execute("SELECT bool_and(length(payload->>'p') = 60000) FROM memory.audit_log WHERE chain_id = 'big_org'").fetchone() == (True,)
    assert py_verify(conn, "big_org") == (True, None, None)
    assert conn.execute("SELECT ok, pending FROM memory.audit_verify('big_org')").fetchone() == (True, 0)


@pytest.mark.parametrize("memory", ["256MB", "0"])
def test_integration_refuses_to_delete_what_a_publication_would_not_replicate(conn, memory):
    """memory.audit_pending has no replica identity: a publication of its deletes would leave a
    subscriber with entries already chained, so integration refuses, as a DELETE would."""
    conn.execute(f"SET memory.integration_memory = '{memory}'")
    conn.execute("SELECT memory.audit_append('app.pub', '{}', 'pub_org')")
    conn.execute("CREATE PUBLICATION pending_pub FOR TABLE memory.audit_pending WITH (publish = 'delete')")
    try:
        with pytest.raises(psycopg.DatabaseError) as e:
            conn.execute("SELECT memory.audit_integrate()")
        assert e.value.sqlstate == "55000", e.value
        assert conn.execute("SELECT count(*) FROM memory.audit_log WHERE chain_id = 'pub_org'").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM memory.audit_pending WHERE chain_id = 'pub_org'").fetchone() == (1,)
    finally:
        conn.execute("DROP PUBLICATION pending_pub")
    assert conn.execute("SELECT memory.audit_integrate()").fetchone() == (1,)


def _crash_writer(dsn, w, stop, acked):
    """Single-row governed inserts of writer `w` into org_{w % 3}, one a transaction, until the
    server goes away: every 3rd also writes a row in a savepoint it rolls back, every 7th rolls
    back whole. `acked` gets (w, n, id) of each insert whose COMMIT the server acknowledged."""
    org = f"org_{w % 3}"
    try:
        c = psycopg.connect(dsn)
        n = 0
        while not stop.is_set():
            n += 1
            (rid,) = c.execute("INSERT INTO gov (org_id, content) VALUES (%s, %s) RETURNING id", (org, f"w{w} n{n}")).fetchone()
            if n % 3 == 0:
                c.execute("SAVEPOINT s")
                c.execute("INSERT INTO gov (org_id, content) VALUES (%s, 'in a rolled-back savepoint')", (org,))
                c.execute("ROLLBACK TO SAVEPOINT s")
            if n % 7 == 0:
                c.rollback()
                continue
            c.commit()
            acked.append((w, n, str(rid)))
    except psycopg.OperationalError:
        pass  # the crash


def test_a_server_crash_mid_run_loses_doubles_and_reorders_no_event():
    """Issue 54's crash mid-run: writers of single-row governed inserts (deferred, the background
    integrator chaining while they write) when the server crashes (pg_ctl -m immediate: no shutdown
    checkpoint; the next server recovers from the WAL). Afterwards every row of the table has
    exactly one memory.store event and no event names a row that is not there, every
    acknowledged insert is there, each chain's seqs run 1..n, each writer's events are chained in
    the order it committed them, and every chain verifies, in SQL and offline."""
    name = "pytest-crash"
    with integrator_cluster(name, "crashed") as dsn:
        with psycopg.connect(dsn, autocommit=True) as c:
            governed(c)
            q = "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'memory_ext integrator' AND datname = 'crashed'"
            assert wait_until(lambda: c.execute(q).fetchone()[0] == 1)
        stop, acked = threading.Event(), []
        writers = [threading.Thread(target=_crash_writer, args=(dsn, w, stop, acked)) for w in range(6)]
        for t in writers:
            t.start()
        try:
            with psycopg.connect(dsn, autocommit=True) as c:
                # Mid-run: some events chained by the worker, others still pending.
                assert wait_until(lambda: len(acked) >= 600 and c.execute("SELECT count(*) FROM memory.audit_log"
                                                                         " WHERE event_type = 'memory.store'").fetchone()[0] >= 100, 60)
            subprocess.run([str(CLUSTER), "crash", name], check=True, capture_output=True)
        finally:
            stop.set()
            for t in writers:
                t.join(60)
        assert "database system was interrupted" in (cluster_dir(name) / "server.log").read_text()
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute("SELECT memory.audit_integrate()")
            rows = {r[0] for r in c.execute("SELECT id::text FROM gov")}
            assert {a[2] for a in acked} <= rows  # nothing acknowledged was lost
            events = c.execute("SELECT payload->>'id', seq FROM memory.audit_log WHERE event_type = 'memory.store'").fetchall()
            ids = [e[0] for e in events]
            assert len(ids) == len(set(ids))  # no event doubled
            assert set(ids) == rows  # one event per row that stayed, none for a row that did not
            assert c.execute("SELECT count(*) FROM memory.audit_pending").fetchone() == (0,)
            seq_of = dict(events)
            for w in range(6):
                mine = sorted((n, rid) for (ww, n, rid) in acked if ww == w)
                seqs = [seq_of[rid] for _, rid in mine]
                assert seqs == sorted(seqs), f"writer {w}'s events out of its commit order"
            assert_chains_whole(c)
            assert c.execute("SELECT bool_and(ok), sum(pending) FROM memory.audit_verify()").fetchone() == (True, 0)
