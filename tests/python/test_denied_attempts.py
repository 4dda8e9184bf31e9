"""Denied attempts are audited although the statement fails (seed §2; issue 18 item 6): the event is
handed to shared memory before the error, survives the rollback, and the background integrator
appends it to the org's chain. No timing is asserted: the worker is given a generous deadline.
"""
import time

import psycopg
import pytest

from conftest import integrator_cluster


@pytest.fixture(scope="module")
def cluster():
    """A cluster whose background integrator serves database 'denied'."""
    with integrator_cluster("pytest-denied", "denied") as dsn:
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute("SELECT * FROM memory.setup_roles()")
            c.execute("CREATE ROLE denied_writer LOGIN IN ROLE memory_writer")
            c.execute("SELECT memory.grant_org('denied_writer', 'acme')")
            c.execute("INSERT INTO memory.entities (id, org_id, entity_type, name, lifecycle_state) VALUES "
                      "('e5000000-0000-0000-0000-000000000001', 'acme', 'problem', 'Asthma', 'active'), "
                      "('e5000000-0000-0000-0000-000000000002', 'acme', 'problem', 'Old', 'archived')")
            c.execute("INSERT INTO memory.claims (id, org_id, entity_id, claim_text) VALUES "
                      "('c5000000-0000-0000-0000-000000000001', 'acme', 'e5000000-0000-0000-0000-000000000001', 'x')")
        yield dsn


def _events(c, event_type):
    return c.execute("SELECT chain_id, payload FROM memory.audit_log WHERE event_type = %s ORDER BY seq",
                     (event_type,)).fetchall()


def _wait_for(c, event_type, n=1, seconds=30.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        rows = _events(c, event_type)
        if len(rows) >= n:
            return rows
        time.sleep(0.1)
    return _events(c, event_type)


def test_a_non_admin_claim_state_change_is_audited_after_its_rollback(cluster):
    writer = cluster.replace("user=postgres", "user=denied_writer")
    with psycopg.connect(writer) as w:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            w.execute("UPDATE memory.claims SET lifecycle_state = 'active' WHERE id = 'c5000000-0000-0000-0000-000000000001'")
        w.rollback()
    with psycopg.connect(cluster, autocommit=True) as c:
        assert c.execute("SELECT lifecycle_state::text FROM memory.claims WHERE id = 'c5000000-0000-0000-0000-000000000001'"
                         ).fetchone() == ("pending",)
        rows = _wait_for(c, "memory.govern.unauthorized_access_attempt")
        assert len(rows) == 1
        chain, payload = rows[0]
        assert chain == "acme"
        assert payload == {"claimId": "c5000000-0000-0000-0000-000000000001", "fromState": "pending", "toState": "active",
                           "deniedRole": "denied_writer", "action": "claim.state_transition"}
        assert c.execute("SELECT bool_and(ok) FROM memory.audit_verify('acme')").fetchone() == (True,)


def test_a_denied_retirement_is_audited(cluster):
    writer = cluster.replace("user=postgres", "user=denied_writer")
    with psycopg.connect(writer, autocommit=True) as w:
        with pytest.raises(psycopg.Error) as e:
            w.execute("UPDATE memory.entities SET lifecycle_state = 'retracted' WHERE id = 'e5000000-0000-0000-0000-000000000002'")
        assert e.value.sqlstate == "MX001"
    with psycopg.connect(cluster, autocommit=True) as c:
        rows = [p for _, p in _wait_for(c, "memory.govern.retire_attempt") if p.get("actionDetail") == "denied"]
        assert rows == [{"entityId": "e5000000-0000-0000-0000-000000000002", "actionDetail": "denied", "fromState": "archived",
                         "toState": "retracted", "deniedRole": "denied_writer"}]


def test_a_failed_decay_run_is_audited(cluster):
    with psycopg.connect(cluster, autocommit=True) as c:
        # A claim that names an unknown PII field can only come back from a restore.
        c.execute("SET memory.restore_mode = on")
        c.execute("INSERT INTO memory.claims (org_id, entity_id, claim_text, pii_fields, decay_at, lifecycle_state) VALUES "
                  "('acme', 'e5000000-0000-0000-0000-000000000001', 'y', '{shoe_size}', now() - interval '1 day', 'active')")
        c.execute("RESET memory.restore_mode")
        with pytest.raises(psycopg.Error) as e:
            c.execute("SELECT memory.run_decay()")
        assert e.value.sqlstate == "22023"
        rows = _wait_for(c, "memory.job.decay.error")
        assert len(rows) == 1
        chain, payload = rows[0]
        # On the chain of the org the run was scoped to (the platform chain '' for an unscoped run).
        scope = c.execute("SELECT coalesce(memory_internal._scope_org(), '')").fetchone()[0]
        assert chain == scope and payload["sqlstate"] == "22023" and "shoe_size" in payload["error"]


def test_no_role_can_hand_over_an_event_of_its_own(cluster):
    writer = cluster.replace("user=postgres", "user=denied_writer")
    with psycopg.connect(writer, autocommit=True) as w:
        for event in ("memory.govern.unauthorized_access_attempt", "memory.job.decay.error", "memory.store"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                w.execute("SELECT memory_internal._audit_denied(%s, '{\"forged\": true}', 'acme')", (event,))
        # Nor through a function of its own that calls it.
        with psycopg.connect(cluster, autocommit=True) as c:
            c.execute("GRANT CREATE ON SCHEMA public TO denied_writer")
        w.execute("CREATE FUNCTION public.sneak() RETURNS void LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog AS "
                  "$$ SELECT memory_internal._audit_denied('memory.govern.unauthorized_access_attempt', '{\"forged\": true}', 'acme') $$")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            w.execute("SELECT public.sneak()")
    with psycopg.connect(cluster, autocommit=True) as c:
        time.sleep(0.5)
        assert not any(p.get("forged") for _, p in _events(c, "memory.govern.unauthorized_access_attempt"))
