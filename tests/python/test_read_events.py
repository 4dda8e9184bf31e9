"""Read events survive the rollback of the reading transaction or savepoint (issue 53, finding 4;
docs/audit.md#read-events): memory.recall, memory.retrieve and memory.export_subject as the
application's tenant-bound reader and admin, in transactions and savepoints that roll back or
commit. Each read leaves exactly one event in the verified chain, with the fields a committed read
gives (ids, count, k, filter keys, query hash; never content). The superuser (`conn`) sets up
roles and data and reads what happened."""
import json
import os
import pathlib
import subprocess
import sys

import psycopg
import pytest
from psycopg import errors

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from conftest import wait_until, CLUSTER, cluster_dir, connect, ensure_role, fresh_database, integrator_cluster  # noqa: E402
import verify_chain  # noqa: E402

READER, ADMIN = "rde_reader", "rde_admin"
U = "00000000-0000-0000-0000-0000000000{:02x}".format
RECALL = "SELECT id::text, content FROM memory.recall('acme', 'roadmap ssn')"
RETRIEVE = "SELECT id::text FROM memory.retrieve('acme', 'aspirin stroke')"


def setup(dsn, conn, mode="deferred"):
    conn.execute("SELECT memory.setup_roles()")
    ensure_role(conn, READER, "memory_reader")
    ensure_role(conn, ADMIN, "memory_admin")
    conn.execute("SELECT memory.grant_org(%s, 'acme'), memory.grant_org(%s, 'acme')", (READER, ADMIN))
    db = conn.execute("SELECT current_database()").fetchone()[0]
    conn.execute(f"ALTER DATABASE {db} SET memory.audit_mode = '{mode}'")
    conn.execute("INSERT INTO memory.observations (id, org_id, content, user_id) VALUES (%s, 'acme', 'roadmap ssn 123-45-6789', 'u1'), "
                 "(%s, 'acme', 'the roadmap for q3', 'u1')", (U(1), U(2)))
    conn.execute("INSERT INTO memory.entities (id, org_id, entity_type, name) VALUES (%s, 'acme', 'intervention', 'aspirin')", (U(0xe1),))
    conn.execute("INSERT INTO memory.claims (id, org_id, entity_id, claim_text, confidence_score) VALUES (%s, 'acme', %s, "
                 "'aspirin lowers stroke risk', 0.9)", (U(3), U(0xe1)))
    conn.execute("UPDATE memory.claims SET lifecycle_state = 'active'")
    conn.execute("SELECT memory.audit_integrate()")


@pytest.fixture(params=["deferred", "immediate"])
def app(request, dsn, conn):
    setup(dsn, conn, request.param)
    return dsn


def offline_ok(conn, chain="acme"):
    """The standalone checker's verdict on the chain (tests/python/verify_chain.py)."""
    rows, keys, head = verify_chain.load(conn, chain)
    return verify_chain.verify(rows, keys, head)[0]


def events(dsn, conn, event_type):
    """The chain's events of this type, after the tenant admin's audit_verify (which integrates
    what is pending and what rolled-back reads handed over) found the chain intact."""
    with connect(dsn, ADMIN) as a:
        assert all(ok for (ok,) in a.execute("SELECT ok FROM memory.audit_verify('acme')").fetchall())
    return conn.execute("SELECT payload, actor_id, project_id FROM memory.audit_log WHERE chain_id = 'acme' AND event_type = %s ORDER BY seq",
                        (event_type,)).fetchall()


def reader(dsn):
    c = psycopg.connect(dsn.replace("user=postgres", f"user={READER}"))
    c.execute("SELECT set_config('memory.org_id', 'acme', false)")
    c.commit()
    return c


def run(c, how, sql):
    """Reads with `sql` in a transaction ended as `how` says; returns the rows the reader got."""
    if how == "commit":
        rows = c.execute(sql).fetchall()
        c.commit()
    elif how == "rollback":
        rows = c.execute(sql).fetchall()
        c.rollback()
    elif how == "savepoint, then commit":
        c.execute("SAVEPOINT s")
        rows = c.execute(sql).fetchall()
        c.execute("ROLLBACK TO SAVEPOINT s")
        c.commit()
    elif how == "savepoint, then rollback":
        c.execute("SAVEPOINT s")
        rows = c.execute(sql).fetchall()
        c.execute("ROLLBACK TO SAVEPOINT s")
        c.rollback()
    elif how == "released savepoint, then rollback":
        c.execute("SAVEPOINT s")
        rows = c.execute(sql).fetchall()
        c.execute("RELEASE SAVEPOINT s")
        c.rollback()
    elif how == "nested savepoints":
        c.execute("SAVEPOINT a")
        c.execute("SAVEPOINT b")
        rows = c.execute(sql).fetchall()
        c.execute("RELEASE SAVEPOINT b")
        c.execute("ROLLBACK TO SAVEPOINT a")
        c.commit()
    elif how == "error after the read":
        rows = c.execute(sql).fetchall()
        with pytest.raises(errors.DivisionByZero):
            c.execute("SELECT 1 / 0")
        c.rollback()
    elif how == "plpgsql exception block":
        # The read runs in the block's subtransaction, which the RAISE rolls back.
        c.execute(f"""DO $$ BEGIN PERFORM * FROM ({sql}) r; RAISE EXCEPTION 'after the read';
                      EXCEPTION WHEN raise_exception THEN NULL; END $$""")
        rows = None
        c.commit()
    return rows


HOWS = ["commit", "rollback", "savepoint, then commit", "savepoint, then rollback", "released savepoint, then rollback",
        "nested savepoints", "error after the read", "plpgsql exception block"]


@pytest.mark.parametrize("how", HOWS)
def test_a_recall_leaves_one_event_however_its_transaction_ends(app, conn, how):
    with reader(app) as c:
        committed = run(c, "commit", RECALL)
        assert committed and any("ssn" in content for _, content in committed), "the restricted row is read"
        rows = run(c, how, RECALL)
        assert rows is None or rows == committed
    got = events(app, conn, "memory.recall")
    assert len(got) == 2, f"{how}: {got}"
    # The same fields as the committed read's event (ids, count, k, filter keys, query hash), the
    # reader as actor; never the content.
    assert got[1] == got[0]
    payload, actor, _ = got[1]
    assert sorted(payload) == ["count", "filter_keys", "ids", "k", "query_sha256"]
    assert payload["ids"] == [r[0] for r in committed] and payload["count"] == len(committed)
    assert actor == f"role:{READER}"
    assert "roadmap" not in json.dumps(payload)
    assert offline_ok(conn), "the offline checker agrees"


@pytest.mark.parametrize("how", ["commit", "rollback", "savepoint, then commit", "savepoint, then rollback"])
def test_a_retrieve_leaves_one_event_however_its_transaction_ends(app, conn, how):
    with reader(app) as c:
        assert run(c, how, RETRIEVE) == [(U(3),)]
    got = events(app, conn, "memory.retrieval.hybrid")
    assert [(p, a) for p, a, _ in got] == [({"count": 1}, f"role:{READER}")]


def test_an_export_rolled_back_is_audited(app, conn):
    with psycopg.connect(app.replace("user=postgres", f"user={ADMIN}")) as a:
        a.execute("SELECT set_config('memory.org_id', 'acme', false)")
        export = a.execute("SELECT memory.export_subject('u1', true)").fetchone()[0]
        assert export["manifest"]["observations"]["count"] == 2
        a.rollback()
    got = events(app, conn, "memory.export")
    assert len(got) == 1 and got[0][0]["manifest"] == export["manifest"] and got[0][1] == f"role:{ADMIN}"


def test_many_reads_in_savepoints_each_once(app, conn):
    with reader(app) as c:
        for i in range(20):
            c.execute(f"SAVEPOINT s{i}")
            c.execute(RECALL).fetchall()
            if i % 2:
                c.execute(f"ROLLBACK TO SAVEPOINT s{i}")
        c.commit()
    assert len(events(app, conn, "memory.recall")) == 20


def test_an_integration_that_rolls_back_gives_the_events_back(app, conn):
    with reader(app) as c:
        run(c, "rollback", RECALL)
    with psycopg.connect(app.replace("user=postgres", f"user={ADMIN}")) as a:
        a.execute("SELECT * FROM memory.audit_verify('acme')").fetchall()
        assert a.execute("SELECT count(*) FROM memory.audit_events(event_type => 'memory.recall', org_id => 'acme')").fetchone()[0] == 1
        a.rollback()
    assert len(events(app, conn, "memory.recall")) == 1


def test_the_rollback_is_in_the_server_log(app, conn):
    with reader(app) as c:
        run(c, "rollback", RETRIEVE)
    log = (cluster_dir(os.environ.get("MEMORY_EXT_CLUSTER", "pytest")) / "server.log").read_text()
    assert f'AUDIT: SESSION,0,0,MEMORY_EXT,READ,,,"memory.retrieval.hybrid org=acme actor=role:{READER} payload={{"count": 1}} (read rolled back; handed to the integrator)' in log


def test_reads_are_refused_when_the_database_holds_its_share_of_the_queue(dsn, conn):
    """No integration runs in this database: after its share of the queue is held by rolled-back
    reads, a read is refused (53000, no rows) rather than returned unrecorded; an integration
    frees the share and records every one."""
    setup(dsn, conn)
    n = 0
    with reader(dsn) as c:
        while True:
            try:
                c.execute(RECALL).fetchall()
            except errors.InsufficientResources as e:
                assert "memory.recall is refused" in str(e) and "memory.audit_integrate" in e.diag.message_hint
                c.rollback()
                break
            c.rollback()
            n += 1
            assert n <= 1024, "the queue has 1024 slots"
        assert n >= 64
    conn.execute("SELECT memory.audit_integrate()")
    with reader(dsn) as c:
        assert run(c, "commit", RECALL)
    assert len(events(dsn, conn, "memory.recall")) == n + 1


def test_the_background_integrator_records_a_rolled_back_read():
    with integrator_cluster("pytest-reads", "reads") as dsn, psycopg.connect(dsn, autocommit=True) as conn:
        setup(dsn, conn)
        with reader(dsn) as c:
            run(c, "rollback", RECALL)
            run(c, "savepoint, then commit", RETRIEVE)
        # Nobody integrates here: the worker appends both in its own transactions.
        q = "SELECT event_type FROM memory.audit_log WHERE chain_id = 'acme' AND event_type IN ('memory.recall', 'memory.retrieval.hybrid') ORDER BY 1"
        assert wait_until(lambda: conn.execute(q).fetchall() == [("memory.recall",), ("memory.retrieval.hybrid",)], 60.0)
        assert offline_ok(conn)


def test_an_integrator_waits_quietly_for_a_database_that_does_not_exist_yet():
    """Issue 46: a database named in memory.integrator_databases that does not exist yet. The
    integrator logs once that it waits, and serves the database once it and the extension exist."""
    name = "pytest-bank"
    env = dict(os.environ, MEMORY_EXT_INTEGRATOR_DATABASES="bank")
    port = int(subprocess.check_output([str(CLUSTER), "start", name], text=True, env=env).strip())
    log = cluster_dir(name) / "server.log"
    try:
        waiting = 'database "bank" (memory.integrator_databases) does not exist; waiting for it'
        assert wait_until(lambda: waiting in log.read_text(), 60.0)
        dsn = fresh_database(port, "bank")
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute("INSERT INTO memory.observations (org_id, content) VALUES ('acme', 'x')")
            # Nobody integrates here: the integrator, once serving the database, chains the entry.
            assert wait_until(lambda: c.execute("SELECT count(*) FROM memory.audit_log").fetchone()[0] == 1, 60.0)
            assert c.execute("SELECT count(*) FROM memory.audit_pending").fetchone()[0] == 0
        text = log.read_text()
        assert text.count(waiting) == 1, "logged once"
        assert text.count('FATAL:  database "bank" does not exist') <= 1, "no start after the first fails for it"
    finally:
        subprocess.run([str(CLUSTER), "stop", name], check=False)
