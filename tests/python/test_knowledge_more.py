"""The rest of the knowledge-lifecycle and retention seeds through a client (issue 18): bulk ingest
with partial failure, replicator verdicts, completeness, legal holds blocking writes, knowledge
retention disposition. (Denied attempts: test_denied_attempts.py.)"""
import json

import psycopg
import pytest

ENTITY = "e7000000-0000-0000-0000-000000000001"


@pytest.fixture
def writer(dsn, conn):
    conn.execute("SELECT * FROM memory.setup_roles()")
    conn.execute("DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'kn_writer') THEN "
                 "CREATE ROLE kn_writer LOGIN IN ROLE memory_writer; END IF; END $$")
    conn.execute("SELECT memory.grant_org('kn_writer', 'acme')")
    conn.execute("INSERT INTO memory.entities (id, org_id, entity_type, name) VALUES (%s, 'acme', 'problem', 'Asthma')", (ENTITY,))
    return dsn.replace("user=postgres", "user=kn_writer")


def test_ingest_of_1000_claims_with_10_bad_ones_in_known_places(writer, conn):
    bad = {3: "not an object", 99: {"entity_id": "00000000-0000-0000-0000-0000000000ff", "claim_text": "no entity"},
           250: {"entity_id": ENTITY, "claim_text": 7}, 333: {"entity_id": ENTITY, "claim_text": "x", "lifecycle_state": "active"},
           404: {"entity_id": ENTITY, "claim_text": "x", "colour": "red"}, 500: {"entity_id": "xyz", "claim_text": "x"},
           617: {"entity_id": ENTITY, "claim_text": "x", "confidence_score": -1},
           800: {"org_id": "globex", "entity_id": ENTITY, "claim_text": "another org"},
           901: {"entity_id": ENTITY, "claim_text": "x", "pii_fields": ["favourite_colour"]},
           999: {"entity_id": ENTITY, "claim_text": "x", "supersedes": "00000000-0000-0000-0000-0000000000ee"}}
    items = [bad.get(i, {"entity_id": ENTITY, "claim_text": f"claim {i}", "source": "PubMed"}) for i in range(1000)]
    with psycopg.connect(writer, autocommit=True) as w:
        rows = w.execute("SELECT item, ok, sqlstate FROM memory.ingest_batch(claims => %s::jsonb, chunk_size => 100)",
                         (json.dumps(items),)).fetchall()
    assert [r[0] for r in rows] == list(range(1000))
    failed = {item: state for item, ok, state in rows if not ok}
    assert failed == {3: "22023", 99: "23503", 250: "22023", 333: "MX001", 404: "22023", 500: "22P02", 617: "23514",
                      800: "42501", 901: "22023", 999: "23503"}
    assert conn.execute("SELECT count(*) FROM memory.claims WHERE claim_text LIKE 'claim %'").fetchone() == (990,)
    assert conn.execute("SELECT count(*) FROM memory.claims WHERE org_id = 'globex'").fetchone() == (0,)


def test_a_verdict_of_each_kind(writer, conn):
    conn.execute("INSERT INTO memory.claims (id, org_id, entity_id, claim_text) VALUES "
                 "('c7000000-0000-0000-0000-000000000001', 'acme', %s, 'a'), ('c7000000-0000-0000-0000-000000000002', 'acme', %s, 'b'), "
                 "('c7000000-0000-0000-0000-000000000003', 'acme', %s, 'c'), ('c7000000-0000-0000-0000-000000000004', 'acme', %s, 'd')",
                 (ENTITY,) * 4)
    conn.execute("UPDATE memory.claims SET lifecycle_state = 'active' WHERE id::text LIKE 'c7000000-%'")
    actions = {}
    for i, v in enumerate(["still_supported", "eroded", "retracted_source", "broken_provenance"], start=1):
        actions[v] = conn.execute("SELECT memory.record_verdict(%s, %s)", (f"c7000000-0000-0000-0000-00000000000{i}", v)).fetchone()[0]["action"]
    assert actions == {"still_supported": "none", "eroded": "recheck_enqueued", "retracted_source": "recheck_enqueued",
                       "broken_provenance": "retracted"}
    assert conn.execute("SELECT array_agg(reason ORDER BY task_id) FROM memory.recheck_tasks").fetchone() == (["eroded", "retracted_source"],)
    with pytest.raises(psycopg.Error) as e:
        conn.execute("SELECT memory.record_verdict('c7000000-0000-0000-0000-000000000001', 'vibes')")
    assert e.value.sqlstate == "22023"


def test_functions_taking_a_claim_id_find_nothing_of_another_org(writer, conn):
    """An admin bound to acme resolving or judging globex's claims is told they do not exist
    (23503): their existence is not given away, and they are neither locked nor changed."""
    conn.execute("DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'kn_admin') THEN "
                 "CREATE ROLE kn_admin LOGIN IN ROLE memory_admin; END IF; END $$")
    conn.execute("SELECT memory.grant_org('kn_admin', 'acme')")
    conn.execute("INSERT INTO memory.entities (id, org_id, entity_type, name) VALUES ('e7000000-0000-0000-0000-0000000000f1', 'globex', 'problem', 'Gout')")
    conn.execute("INSERT INTO memory.claims (id, org_id, entity_id, claim_text, confidence_score) VALUES "
                 "('c7000000-0000-0000-0000-0000000000f1', 'globex', 'e7000000-0000-0000-0000-0000000000f1', 'g1', 0.9), "
                 "('c7000000-0000-0000-0000-0000000000f2', 'globex', 'e7000000-0000-0000-0000-0000000000f1', 'g2', 0.1), "
                 "('c7000000-0000-0000-0000-0000000000a1', 'acme', %s, 'a1', 0.5)", (ENTITY,))
    conn.execute("UPDATE memory.claims SET lifecycle_state = 'active' WHERE id::text LIKE 'c7000000-0000-0000-0000-0000000000%%'")
    with psycopg.connect(writer.replace("kn_writer", "kn_admin"), autocommit=True) as a:
        for sql in ("SELECT memory.resolve_conflict('c7000000-0000-0000-0000-0000000000f1', 'c7000000-0000-0000-0000-0000000000f2')",
                    "SELECT memory.resolve_conflict('c7000000-0000-0000-0000-0000000000a1', 'c7000000-0000-0000-0000-0000000000f2')",
                    "SELECT memory.record_verdict('c7000000-0000-0000-0000-0000000000f1', 'broken_provenance')"):
            with pytest.raises(psycopg.Error) as e:
                a.execute(sql)
            assert e.value.sqlstate == "23503", (sql, e.value.sqlstate)
            assert "globex" not in e.value.diag.message_primary
    states = conn.execute("SELECT lifecycle_state::text FROM memory.claims WHERE org_id = 'globex' ORDER BY id").fetchall()
    assert states == [("active",), ("active",)]


def test_completeness_through_a_reader(writer, conn):
    conn.execute("CREATE ROLE kn_reader LOGIN IN ROLE memory_reader" if not conn.execute(
        "SELECT 1 FROM pg_roles WHERE rolname = 'kn_reader'").fetchone() else "SELECT 1")
    conn.execute("SELECT memory.grant_org('kn_reader', 'acme')")
    conn.execute("INSERT INTO memory.screen_profiles (profile, field, freshness_days) VALUES ('asthma', 'fev1', 30), ('asthma', 'eos', 90)")
    conn.execute("INSERT INTO memory.claims (org_id, entity_id, claim_text, field, t_created) VALUES "
                 "('acme', %s, 'FEV1 80%%', 'fev1', now() - interval '40 days')", (ENTITY,))
    conn.execute("UPDATE memory.claims SET lifecycle_state = 'active' WHERE field = 'fev1'")
    with psycopg.connect(writer.replace("kn_writer", "kn_reader"), autocommit=True) as r:
        c = r.execute("SELECT memory.completeness(%s, 'asthma')", (ENTITY,)).fetchone()[0]
    assert (c["score"], c["present"], c["stale"], c["missing"]) == (0.25, [], ["fev1"], ["eos"])


def test_a_legal_hold_blocks_writes_until_released(conn):
    conn.execute("INSERT INTO memory.observations (id, org_id, user_id, content) VALUES "
                 "('00000000-0000-0000-0000-0000000007a1', 'acme', 'zed', 'held note')")
    hold = conn.execute("INSERT INTO memory.legal_holds (org_id, user_id, reason) VALUES ('acme', 'zed', 'audit') RETURNING id").fetchone()[0]
    for sql in ("DELETE FROM memory.observations WHERE id = '00000000-0000-0000-0000-0000000007a1'",
                "UPDATE memory.observations SET content = 'x' WHERE id = '00000000-0000-0000-0000-0000000007a1'"):
        with pytest.raises(psycopg.Error) as e:
            conn.execute(sql)
        assert e.value.sqlstate == "MX006" and f"legal hold {hold}" in e.value.diag.message_primary
    conn.execute("UPDATE memory.legal_holds SET released_at = now() WHERE id = %s", (hold,))
    conn.execute("DELETE FROM memory.observations WHERE id = '00000000-0000-0000-0000-0000000007a1'")


def test_knowledge_retention_disposes_by_transition(writer, conn):
    conn.execute("INSERT INTO memory.claims (org_id, entity_id, kind, claim_text, t_created) VALUES "
                 "('acme', %s, 'replicator', 'old finding', now() - interval '181 days'), "
                 "('acme', %s, 'replicator', 'recent finding', now() - interval '179 days')", (ENTITY, ENTITY))
    out = conn.execute("SELECT memory.run_maintenance()").fetchone()[0]
    assert out["knowledge"] == {"claims_disposed": 1, "entities_disposed": 0, "held": 0}
    assert conn.execute("SELECT claim_text, lifecycle_state::text FROM memory.claims WHERE kind = 'replicator' ORDER BY 1").fetchall() == \
        [("old finding", "archived"), ("recent finding", "pending")]
