"""The knowledge lifecycle under concurrency, as worker processes and agents see it."""
import threading
import uuid

import psycopg
import pytest

ENTITY = "e0000000-0000-0000-0000-000000000001"


def _setup(conn, n_claims):
    conn.execute("INSERT INTO memory.entities (id, org_id, entity_type, name) VALUES (%s, 'acme', 'problem', 'x')", (ENTITY,))
    ids = [uuid.uuid4() for _ in range(n_claims)]
    with conn.transaction():
        for i, cid in enumerate(ids):
            conn.execute("INSERT INTO memory.claims (id, org_id, entity_id, claim_text, source, confidence_score) "
                         "VALUES (%s, 'acme', %s, %s, 'PubMed', %s)", (cid, ENTITY, f"claim {i}", 0.1 + (i % 5) * 0.01))
        conn.execute("UPDATE memory.claims SET lifecycle_state = 'active'")
    return ids


def test_workers_never_share_a_task(dsn, conn):
    _setup(conn, 200)
    enqueued = conn.execute("SELECT count(*) FROM memory.freshness_recheck(sample_limit => 200)").fetchone()[0]
    assert enqueued == 200
    taken, errs = [], []
    barrier = threading.Barrier(8)

    def worker(name):
        try:
            with psycopg.connect(dsn) as c:
                barrier.wait()
                while True:
                    with c.transaction():
                        rows = c.execute("SELECT task_id FROM memory.claim_recheck_tasks(%s, 7)", (name,)).fetchall()
                        if not rows:
                            return
                        for (t,) in rows:
                            assert c.execute("SELECT memory.complete_recheck_task(%s, %s, 'still_supported')", (t, name)).fetchone()[0]
                        taken.extend(t for (t,) in rows)
        except Exception as e:  # noqa: BLE001 - reported below
            errs.append(e)

    threads = [threading.Thread(target=worker, args=(f"w{i}",)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errs
    assert len(taken) == 200 and len(set(taken)) == 200, "every task was taken exactly once"
    assert conn.execute("SELECT count(*) FROM memory.recheck_tasks WHERE completed_at IS NULL").fetchone() == (0,)


def test_concurrent_ticks_do_not_double_enqueue(dsn, conn):
    _setup(conn, 100)
    barrier = threading.Barrier(4)
    counts, errs = [], []

    def tick():
        try:
            with psycopg.connect(dsn, autocommit=True) as c:
                barrier.wait()
                counts.append(c.execute("SELECT count(*) FROM memory.freshness_recheck(sample_limit => 60)").fetchone()[0])
        except Exception as e:  # noqa: BLE001
            errs.append(e)

    threads = [threading.Thread(target=tick) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errs
    assert sum(counts) == 100, counts
    assert conn.execute("SELECT count(DISTINCT claim_id), count(*) FROM memory.recheck_tasks").fetchone() == (100, 100)


def test_one_of_two_concurrent_supersessions_wins(dsn, conn):
    (old,) = _setup(conn, 1)
    results, barrier = [], threading.Barrier(2)

    def supersede(i):
        with psycopg.connect(dsn) as c:
            try:
                with c.transaction():
                    barrier.wait()
                    c.execute("INSERT INTO memory.claims (org_id, entity_id, claim_text, source, supersedes) "
                              "VALUES ('acme', %s, %s, 'PubMed', %s)", (ENTITY, f"correction {i}", old))
                results.append("ok")
            except psycopg.Error as e:
                results.append(e.sqlstate)

    threads = [threading.Thread(target=supersede, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == ["MX005", "ok"]
    row = conn.execute("SELECT lifecycle_state::text, cardinality(superseded_by) FROM memory.claims WHERE id = %s", (old,)).fetchone()
    assert row == ("superseded", 1)
    assert conn.execute("SELECT bool_and(ok) FROM memory.audit_verify()").fetchone() == (True,)


def test_errors_reach_the_client_with_their_sqlstate(conn):
    (cid,) = _setup(conn, 1)
    with pytest.raises(psycopg.Error) as e:
        conn.execute("UPDATE memory.claims SET lifecycle_state = 'pending' WHERE id = %s", (cid,))
    assert e.value.sqlstate == "MX001"
    assert "from active to pending" in str(e.value)
    with pytest.raises(psycopg.Error) as e:
        conn.execute("DELETE FROM memory.claims WHERE id = %s", (cid,))
    assert e.value.sqlstate == "MX006"
    with pytest.raises(psycopg.Error) as e:
        conn.execute("SELECT * FROM memory.claim_chain(%s)", (uuid.uuid4(),))
    assert e.value.sqlstate == "P0002"
