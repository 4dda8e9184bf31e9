"""Feedback weights and recall as a Python application sees them."""
import uuid

import pytest
from psycopg import errors


def _obs(conn, org, content):
    return conn.execute("INSERT INTO memory.observations (org_id, content) VALUES (%s, %s) RETURNING id",
                        (org, content)).fetchone()[0]


def test_record_outcome_round_trip(conn):
    a = _obs(conn, "acme", "use exponential backoff for the payments worker")
    b = _obs(conn, "globex", "unrelated note")
    missing = uuid.uuid4()
    rows = conn.execute("SELECT observation_id, previous_weight, new_weight, alpha, applied, reason "
                        "FROM memory.record_outcome(%s, 'rejected', %s)", ("sess-py", [a, b, missing])).fetchall()
    assert [(r[0], r[4], r[5]) for r in rows] == [(a, True, "applied"), (b, True, "applied"), (missing, False, "not_found")]
    assert rows[0][2] == pytest.approx(0.85) and rows[0][3] == pytest.approx(0.15)
    again = conn.execute("SELECT applied, reason FROM memory.record_outcome(%s, 'accepted', %s)", ("sess-py", [a])).fetchall()
    assert again == [(False, "already_recorded")]
    conn.execute("SELECT memory.audit_integrate()")
    events = conn.execute("SELECT chain_id, payload FROM memory.audit_log WHERE event_type = 'memory.feedback' ORDER BY chain_id").fetchall()
    assert [e[0] for e in events] == ["acme", "globex"]
    assert events[0][1]["weightDeltasById"][str(a)] == {"previous": 1.0, "new": 0.85}


def test_bad_inputs(conn):
    with pytest.raises(errors.InvalidParameterValue):
        conn.execute("SELECT * FROM memory.record_outcome(NULL, 'accepted', ARRAY[gen_random_uuid()])")
    with pytest.raises(errors.InvalidParameterValue):
        conn.execute("SELECT memory.ema(0.5, 'accepted', 0, 0.15)")
    with pytest.raises(errors.InvalidParameterValue):
        conn.execute("SELECT * FROM memory.recall('acme', 'x', 0)")
    assert conn.execute("SELECT count(*) FROM memory.record_outcome('s', 'accepted', '{}')").fetchone() == (0,)


def test_recall_is_tenant_scoped_and_weighted(conn):
    good = _obs(conn, "acme", "retry the payments worker with backoff")
    bad = _obs(conn, "acme", "retry the payments worker without backoff")
    _obs(conn, "globex", "retry the payments worker with backoff")
    for s in ("s1", "s2", "s3"):
        conn.execute("SELECT * FROM memory.record_outcome(%s, 'rejected', %s)", (s, [bad]))
    ids = [r[0] for r in conn.execute("SELECT id FROM memory.recall('acme', 'payments backoff', 10)")]
    assert ids == [good, bad]


def test_record_outcome_with_an_acting_org_touches_that_org_only(dsn, conn):
    """A role bound to two orgs (memory-mcp's per-token org, a pool shared by tenants) acting for
    acme: a globex id is not_found and its weight untouched, as forget does."""
    from conftest import connect, ensure_role
    conn.execute("SELECT memory.setup_roles()")
    ensure_role(conn, "fb_two_orgs", "memory_writer")
    conn.execute("SELECT memory.grant_org('fb_two_orgs', 'acme'), memory.grant_org('fb_two_orgs', 'globex')")
    a = _obs(conn, "acme", "acme's note on retries")
    g = _obs(conn, "globex", "globex's note on retries")
    with connect(dsn, "fb_two_orgs", org="acme") as c:
        rows = c.execute("SELECT observation_id, applied, reason FROM memory.record_outcome('s-two', 'rejected', %s)",
                         ([a, g],)).fetchall()
    assert rows == [(a, True, "applied"), (g, False, "not_found")]
    assert conn.execute("SELECT weight FROM memory.observations WHERE id = %s", (g,)).fetchone()[0] == pytest.approx(1.0)
    with connect(dsn, "fb_two_orgs") as c:   # no acting org: every org the role may act for
        rows = c.execute("SELECT applied FROM memory.record_outcome('s-two-b', 'rejected', %s)", ([g],)).fetchall()
    assert rows == [(True,)]
