"""Classification as an application written in Python sees it."""
import psycopg
import pytest
from psycopg import errors


def test_insert_is_classified_without_app_code(conn):
    row = conn.execute(
        "INSERT INTO memory.observations (org_id, content, source_files, source_type) "
        "VALUES (%s, %s, %s, %s) RETURNING classification::text, metadata",
        ("acme", "Added OAuth token rotation to auth middleware", ["src/auth/token-rotation.ts"], "decision"),
    ).fetchone()
    assert row == ("confidential", {"classification": "confidential"})


def test_batch_insert_from_client(conn):
    rows = [("acme", f"note {i}", ["docs/a.md"] if i % 2 else None) for i in range(200)]
    with conn.cursor() as cur:
        cur.executemany("INSERT INTO memory.observations (org_id, content, source_files) VALUES (%s, %s, %s)", rows)
    counts = dict(conn.execute(
        "SELECT classification::text, count(*) FROM memory.observations GROUP BY 1").fetchall())
    assert counts == {"public": 100, "internal": 100}


def test_downgrade_raises_mx004_to_the_client(conn):
    (oid,) = conn.execute(
        "INSERT INTO memory.observations (org_id, content) VALUES ('acme', 'ssn on file') RETURNING id").fetchone()
    with pytest.raises(psycopg.DatabaseError) as exc:
        conn.execute("UPDATE memory.observations SET classification = 'public' WHERE id = %s", (oid,))
    assert exc.value.sqlstate == "MX004"
    assert "restricted" in str(exc.value) and "public" in str(exc.value)
    assert conn.execute("SELECT classification::text FROM memory.observations WHERE id = %s", (oid,)).fetchone() == ("restricted",)


def test_reclassify_is_the_way_down(conn):
    (oid,) = conn.execute(
        "INSERT INTO memory.observations (org_id, content) VALUES ('acme', 'pii test fixture') RETURNING id").fetchone()
    (prev,) = conn.execute("SELECT memory.reclassify(%s, 'internal', 'synthetic fixture')::text", (oid,)).fetchone()
    assert prev == "restricted"
    assert conn.execute("SELECT classification::text FROM memory.observations WHERE id = %s", (oid,)).fetchone() == ("internal",)


def test_bad_source_type_is_22023(conn):
    with pytest.raises(errors.InvalidParameterValue):
        conn.execute("SELECT memory.classify('x', NULL, 'bogus')")


def test_governed_app_table_from_python(conn):
    conn.execute("CREATE TABLE tickets (id serial PRIMARY KEY, text text, meta jsonb)")
    mapping = conn.execute("SELECT memory.govern('tickets', %s::jsonb)",
                           ('{"content": "text", "target": "meta"}',)).fetchone()[0]
    assert mapping["target"] == ["meta"]
    conn.execute("INSERT INTO tickets (text) VALUES ('customer ssn 123-45-6789'), ('hello')")
    tiers = [r[0] for r in conn.execute("SELECT meta->>'classification' FROM tickets ORDER BY id")]
    assert tiers == ["restricted", "internal"]
    with pytest.raises(errors.InvalidParameterValue):
        conn.execute("SELECT memory.govern('tickets', '{\"content\": \"missing\"}')")


def test_explain_shape(conn):
    (e,) = conn.execute("SELECT memory.classify_explain('the password', ARRAY['docs/a.md'])").fetchone()
    assert e["tier"] == "confidential" and e["rule"] == "confidential_keyword" and e["risk_band"] == "high"
