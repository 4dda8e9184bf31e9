"""Re-check leases are held, not taken (issue 34 item 21), as two workers see them: each logs in as
its own tenant-bound writer role. The superuser (`conn`) only enqueues tasks, moves a lease's end
into the past (instead of waiting for it), and reads what happened.
"""
import psycopg
import pytest

from conftest import connect, ensure_role

ENTITY = "e0000000-0000-0000-0000-0000000000c1"


@pytest.fixture
def workers(dsn, conn):
    """Five open re-check tasks of acme and one of globex; workers wa and wb bound to acme."""
    conn.execute("SELECT memory.setup_roles()")
    for role in ("wa", "wb"):
        ensure_role(conn, role, "memory_writer")
        conn.execute("SELECT memory.grant_org(%s, 'acme')", (role,))
    for org, n in (("acme", 5), ("globex", 1)):
        ent = ENTITY if org == "acme" else ENTITY.replace("c1", "c2")
        conn.execute("INSERT INTO memory.entities (id, org_id, entity_type, name) VALUES (%s, %s, 'problem', 'x')", (ent, org))
        for i in range(n):
            conn.execute("INSERT INTO memory.claims (org_id, entity_id, claim_text, source, confidence_score) "
                         "VALUES (%s, %s, %s, 'PubMed', 0.1)", (org, ent, f"claim {i}"))
    conn.execute("UPDATE memory.claims SET lifecycle_state = 'active'")
    assert conn.execute("SELECT count(*) FROM memory.freshness_recheck()").fetchone() == (6,)
    with connect(dsn, "wa") as a, connect(dsn, "wb") as b:
        yield a, b


def claim(c, worker, n=1, lease="15 minutes"):
    return [r[0] for r in c.execute("SELECT task_id FROM memory.claim_recheck_tasks(%s, %s, %s::interval)",
                                    (worker, n, lease)).fetchall()]


def complete(c, task, worker, outcome="still_supported"):
    return c.execute("SELECT memory.complete_recheck_task(%s, %s, %s)", (task, worker, outcome)).fetchone()[0]


def state(conn, task):
    return conn.execute("SELECT claimed_by, completed_at IS NOT NULL, outcome FROM memory.recheck_tasks WHERE task_id = %s",
                        (task,)).fetchone()


def expire(conn, task):
    """The task's lease ends two minutes ago (as if its holder had been gone that long)."""
    conn.execute("UPDATE memory.recheck_tasks SET claimed_at = claimed_at - (lease_until - clock_timestamp()) - interval '2 minutes', "
                 "lease_until = clock_timestamp() - interval '2 minutes' WHERE task_id = %s", (task,))


def test_a_short_lease_does_not_take_a_held_task(workers, conn):
    a, b = workers
    held = claim(a, "wa", 5, "1 hour")
    assert len(held) == 5
    assert claim(b, "wb", 5, "1 microsecond") == [], "a second worker's own lease length does not matter"
    assert claim(b, "wb", 5) == []
    assert [state(conn, t)[0] for t in held] == ["wa"] * 5


def test_a_lease_is_the_one_its_claimer_took(workers, conn):
    a, b = workers
    (t,) = claim(a, "wa", 1, "1 microsecond")
    until = conn.execute("SELECT lease_until - claimed_at FROM memory.recheck_tasks WHERE task_id = %s", (t,)).fetchone()[0]
    assert until.total_seconds() == pytest.approx(1e-6)
    # Its holder's lease is (long) over: another worker takes it over, whatever lease it asks for.
    assert t in claim(b, "wb", 5, "10 minutes")
    assert state(conn, t)[0] == "wb"


@pytest.mark.parametrize("lease", ["0", "-1 second", "24 hours 1 microsecond", "2 days", "1 mon", "1 year -359 days 12 hours", None])
def test_absurd_leases_are_refused(workers, conn, lease):
    a, _ = workers
    with pytest.raises(psycopg.errors.InvalidParameterValue):
        claim(a, "wa", 1, lease)
    assert conn.execute("SELECT count(*) FROM memory.recheck_tasks WHERE claimed_at IS NOT NULL").fetchone() == (0,)


def test_the_longest_lease_is_a_day(workers, conn):
    a, _ = workers
    (t,) = claim(a, "wa", 1, "1 day")
    until = conn.execute("SELECT lease_until - claimed_at FROM memory.recheck_tasks WHERE task_id = %s", (t,)).fetchone()[0]
    assert until.total_seconds() == 86400


def test_only_the_holder_completes(workers, conn):
    a, b = workers
    (t,) = claim(a, "wa", 1, "1 hour")
    with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState) as e:
        complete(b, t, "wb")
    assert e.value.diag.message_hint and "claim" in e.value.diag.message_hint
    # Nor by naming the holder's task from its own connection under another name.
    with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState):
        complete(a, t, "wb")
    assert state(conn, t) == ("wa", False, None), "a refused completion changes nothing"
    assert complete(a, t, "wa") is True
    assert state(conn, t) == ("wa", True, "still_supported")
    assert complete(a, t, "wa") is False, "a closed task is not closed again"
    assert complete(b, t, "wb") is False


def test_an_unclaimed_task_is_not_completed(workers, conn):
    a, _ = workers
    t = conn.execute("SELECT min(task_id) FROM memory.recheck_tasks WHERE org_id = 'acme'").fetchone()[0]
    with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState):
        complete(a, t, "wa")
    assert state(conn, t) == (None, False, None)


def test_a_lease_taken_over_is_lost(workers, conn):
    a, b = workers
    (t,) = claim(a, "wa", 1, "1 minute")
    expire(conn, t)
    assert claim(b, "wb", 1, "1 hour") == [t], "an expired lease is taken over"
    with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState):
        complete(a, t, "wa")
    assert state(conn, t) == ("wb", False, None)
    assert t not in claim(a, "wa", 5, "1 microsecond"), "the new holder's lease holds against the first worker"
    assert complete(b, t, "wb") is True


def test_an_expired_lease_nobody_took_is_still_completed(workers, conn):
    a, _ = workers
    (t,) = claim(a, "wa", 1, "1 minute")
    expire(conn, t)
    assert complete(a, t, "wa") is True


def test_another_orgs_task_is_not_found(workers, conn):
    a, _ = workers
    t = conn.execute("SELECT task_id FROM memory.recheck_tasks WHERE org_id = 'globex'").fetchone()[0]
    conn.execute("UPDATE memory.recheck_tasks SET claimed_by = 'wa', claimed_at = now(), lease_until = now() + interval '1 hour' "
                 "WHERE task_id = %s", (t,))
    assert complete(a, t, "wa") is False
    assert state(conn, t) == ("wa", False, None)
