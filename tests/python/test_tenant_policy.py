"""Tenancy on governed application tables (issue 46): `"tenant_policy": true` gives a governed table
with an org column the row-level security memory_ext's own tables have (by org, and clearance), the
owner keeping access; without it `govern` says, in a NOTICE, that plain SELECTs cross orgs. As the
application's roles: a non-superuser owner, readers bound to bank_a (one cleared to internal)."""
import psycopg
import pytest

from conftest import connect, ensure_role

OWNER, READER, LOW, WRITER = "tp_owner", "tp_reader", "tp_low", "tp_writer"
MAPPING = '"content": "body", "org": "tenant", "target": "tier", "audit": true'


@pytest.fixture
def bank(dsn, conn):
    conn.execute("SELECT memory.setup_roles()")
    ensure_role(conn, OWNER, "memory_writer")
    ensure_role(conn, READER, "memory_reader")
    ensure_role(conn, LOW, "memory_reader")
    ensure_role(conn, WRITER, "memory_writer")
    conn.execute("SELECT memory.grant_org(%s, 'bank_a')", (OWNER,))
    conn.execute("SELECT memory.grant_org(%s, 'bank_b')", (OWNER,))
    conn.execute("SELECT memory.grant_org(%s, 'bank_a')", (READER,))
    conn.execute("SELECT memory.grant_org(%s, 'bank_a', 'internal')", (LOW,))
    conn.execute("SELECT memory.grant_org(%s, 'bank_a')", (WRITER,))
    conn.execute(f"CREATE SCHEMA app AUTHORIZATION {OWNER}")
    conn.execute(f"GRANT USAGE ON SCHEMA app TO {READER}, {LOW}, {WRITER}")
    with connect(dsn, OWNER) as c:
        c.execute("CREATE TABLE app.agent_notes (id bigserial PRIMARY KEY, tenant text, body text, tier memory.classification)")
        c.execute(f"GRANT SELECT ON app.agent_notes TO {READER}, {LOW}")
        c.execute(f"GRANT SELECT, INSERT ON app.agent_notes TO {WRITER}")
        c.execute(f"GRANT USAGE ON SEQUENCE app.agent_notes_id_seq TO {WRITER}")
    return dsn


def fill(dsn):
    for org in ("bank_a", "bank_b"):
        with connect(dsn, OWNER, org) as c:
            c.execute("INSERT INTO app.agent_notes (tenant, body) VALUES (%s, 'quarterly plan'), (%s, 'the api_key is in the vault')",
                      (org, org))


def orgs_seen(dsn, role):
    with connect(dsn, role) as c:
        return sorted({r[0] for r in c.execute("SELECT tenant FROM app.agent_notes").fetchall()})


def test_without_the_option_a_reader_selects_every_org_and_govern_says_so(bank):
    notices = []
    with connect(bank, OWNER) as c:
        c.add_notice_handler(lambda d: notices.append((d.severity, d.message_primary, d.message_hint)))
        c.execute(f"SELECT memory.govern('app.agent_notes', '{{{MAPPING}}}')")
    # (The diagnostic is read inside the handler: psycopg frees it after.)
    assert len(notices) == 1 and notices[0][0] == "NOTICE", notices
    assert "no row-level security" in notices[0][1] and '"tenant_policy": true' in notices[0][2]
    fill(bank)
    assert orgs_seen(bank, READER) == ["bank_a", "bank_b"]


def test_tenant_policy_keeps_orgs_and_tiers_apart(bank, conn):
    notices = []
    with connect(bank, OWNER) as c:
        c.add_notice_handler(lambda d: notices.append((d.severity, d.message_primary, d.message_hint)))
        eff = c.execute(f"SELECT memory.govern('app.agent_notes', '{{{MAPPING}, \"tenant_policy\": true}}')").fetchone()[0]
    assert eff["tenant_policy"] is True and notices == []
    fill(bank)
    # bank_a's reader reads bank_a's rows only, and naming bank_b finds nothing.
    assert orgs_seen(bank, READER) == ["bank_a"]
    with connect(bank, READER) as c:
        assert c.execute("SELECT count(*) FROM app.agent_notes WHERE tenant = 'bank_b'").fetchone() == (0,)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            c.execute("SET memory.org_id = 'bank_b'; SELECT count(*) FROM app.agent_notes")
    # Clearance: the reader cleared to internal does not see the confidential note.
    with connect(bank, LOW) as c:
        assert [r[0] for r in c.execute("SELECT tier::text FROM app.agent_notes").fetchall()] == ["internal"]
    # A writer bound to bank_a cannot write bank_b's row (42501).
    with connect(bank, WRITER) as c:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            c.execute("INSERT INTO app.agent_notes (tenant, body) VALUES ('bank_b', 'x')")
        c.execute("INSERT INTO app.agent_notes (tenant, body) VALUES ('bank_a', 'note from the writer')")
    # The owner keeps access to every row.
    assert orgs_seen(bank, OWNER) == ["bank_a", "bank_b"]
    # Row-level security is not switched off behind govern's back.
    with connect(bank, OWNER) as c:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            c.execute("ALTER TABLE app.agent_notes DISABLE ROW LEVEL SECURITY")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            c.execute("DROP POLICY memory_tenant ON app.agent_notes")
    # ungovern removes what govern made.
    with connect(bank, OWNER) as c:
        assert c.execute("SELECT memory.ungovern('app.agent_notes')").fetchone() == (True,)
    assert conn.execute("SELECT relrowsecurity FROM pg_class WHERE oid = 'app.agent_notes'::regclass").fetchone() == (False,)
    assert conn.execute("SELECT count(*) FROM pg_policy WHERE polrelid = 'app.agent_notes'::regclass").fetchone() == (0,)
    assert orgs_seen(bank, READER) == ["bank_a", "bank_b"]


def test_govern_without_the_option_again_removes_it_but_keeps_the_owners_own_rls(bank, conn):
    with connect(bank, OWNER) as c:
        c.execute(f"SELECT memory.govern('app.agent_notes', '{{{MAPPING}, \"tenant_policy\": true}}')")
        c.execute(f"SELECT memory.govern('app.agent_notes', '{{{MAPPING}}}')")
    assert conn.execute("SELECT relrowsecurity FROM pg_class WHERE oid = 'app.agent_notes'::regclass").fetchone() == (False,)
    # A table whose owner had row-level security on keeps it on after the option is removed.
    with connect(bank, OWNER) as c:
        c.execute("ALTER TABLE app.agent_notes ENABLE ROW LEVEL SECURITY")
        c.execute(f"SELECT memory.govern('app.agent_notes', '{{{MAPPING}, \"tenant_policy\": true}}')")
        c.execute("SELECT memory.ungovern('app.agent_notes')")
    assert conn.execute("SELECT relrowsecurity FROM pg_class WHERE oid = 'app.agent_notes'::regclass").fetchone() == (True,)


def test_tenant_policy_needs_an_org_column_and_a_boolean(bank):
    with connect(bank, OWNER) as c:
        c.execute("CREATE TABLE app.single (id bigserial PRIMARY KEY, content text)")
        with pytest.raises(psycopg.errors.InvalidParameterValue):
            c.execute("""SELECT memory.govern('app.single', '{"tenant_policy": true}')""")
        with pytest.raises(psycopg.errors.InvalidParameterValue):
            c.execute(f"SELECT memory.govern('app.agent_notes', '{{{MAPPING}, \"tenant_policy\": \"yes\"}}')")
