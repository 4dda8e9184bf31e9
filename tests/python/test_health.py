"""memory.health (issue 46): a tenant admin's dashboard, one row per org the caller may act for,
counts only. As memory_admin roles: an admin of bank_a sees bank_a's row only."""
import psycopg
import pytest

from conftest import connect, ensure_role

ADMIN_A, ADMIN_B, WRITER_A, READER_A = "h_admin_a", "h_admin_b", "h_writer_a", "h_reader_a"


@pytest.fixture
def banks(dsn, conn):
    conn.execute("SELECT memory.setup_roles()")
    for role, group, org in [(ADMIN_A, "memory_admin", "bank_a"), (ADMIN_B, "memory_admin", "bank_b"),
                             (WRITER_A, "memory_writer", "bank_a"), (READER_A, "memory_reader", "bank_a")]:
        ensure_role(conn, role, group)
        conn.execute("SELECT memory.grant_org(%s, %s)", (role, org))
    return dsn


def health(dsn, role, org=None):
    with connect(dsn, role, org) as c:
        cur = c.execute("SELECT * FROM memory.health")
        names = [d.name for d in cur.description]
        return [dict(zip(names, r)) for r in cur.fetchall()]


def test_health_counts_an_admins_own_org(banks, conn):
    with connect(banks, WRITER_A) as c:
        # Backdated past the internal tier's 365 days: expired when written.
        c.execute("INSERT INTO memory.observations (org_id, content, created_at) VALUES ('bank_a', 'old note', now() - interval '400 days')")
        c.execute("INSERT INTO memory.observations (org_id, content) VALUES ('bank_a', 'fresh note')")
    # Rows in every state, made by the superuser (a soft delete and an archive as retention makes them).
    conn.execute("INSERT INTO memory.observations (org_id, content) VALUES ('bank_b', 'b note'), ('bank_b', 'b note 2')")
    conn.execute("UPDATE memory.observations SET soft_deleted_at = now(), soft_delete_reason = 'test' WHERE content = 'fresh note'")
    conn.execute("INSERT INTO memory.observations_archive (id, org_id, content, classification, archived_at) "
                 "VALUES (gen_random_uuid(), 'bank_a', 'cold', 'internal', '2026-01-02'), "
                 "(gen_random_uuid(), 'bank_a', 'colder', 'internal', '2025-06-01'), (gen_random_uuid(), 'bank_b', 'x', 'internal', now())")
    conn.execute("SELECT memory.run_maintenance()")
    (a,) = health(banks, ADMIN_A)
    assert a["org_id"] == "bank_a"
    assert a["expired_unswept"] == 0 and a["awaiting_purge"] >= 1  # maintenance swept the expired note
    assert a["archived"] == 2 and str(a["oldest_archived_at"].date()) == "2025-06-01"
    assert a["without_embedding"] is None  # embeddings are not enabled
    assert a["recheck_open"] == 0
    assert a["last_maintenance_outcome"] == "ok" and a["last_maintenance_at"] is not None
    assert isinstance(a["audit_pending"], int)
    # No content anywhere: every column is a count, a time, an org or the outcome.
    assert set(a) == {"org_id", "expired_unswept", "awaiting_purge", "archived", "oldest_archived_at", "without_embedding",
                      "recheck_open", "last_maintenance_at", "last_maintenance_outcome", "audit_pending"}
    (b,) = health(banks, ADMIN_B)
    assert b["org_id"] == "bank_b" and b["archived"] == 1 and b["awaiting_purge"] == 0
    # Naming another org is refused, as everywhere.
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        health(banks, ADMIN_A, "bank_b")
    # The superuser (every org) sees both; with memory.org_id, that org.
    rows = conn.execute("SELECT org_id FROM memory.health").fetchall()
    assert rows == [("bank_a",), ("bank_b",)]


def test_expired_rows_not_yet_swept_and_a_failed_run(banks, conn):
    with connect(banks, WRITER_A) as c:
        c.execute("INSERT INTO memory.observations (org_id, content, created_at) VALUES ('bank_a', 'n', now() - interval '400 days')")
    conn.execute("INSERT INTO memory.maintenance_runs (at, finished_at, sqlstate, error) VALUES (now(), now(), '55P03', 'lock')")
    (a,) = health(banks, ADMIN_A)
    assert a["expired_unswept"] == 1
    assert a["last_maintenance_outcome"] == "failed: 55P03"


def test_health_is_for_admins(banks):
    for role in (WRITER_A, READER_A):
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            health(banks, role)
