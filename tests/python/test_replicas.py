"""Replicas (SPEC §9): read-only work runs on a streaming hot standby, and what it cannot audit there
is logged, not an error; audit events stream out of the primary through logical replication of
memory.audit_log (a publication, as a SIEM or an archive would subscribe to it)."""
import os
import pathlib
import subprocess

import psycopg
import pytest

from conftest import cluster_dir, wait_until

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "scripts" / "cluster.sh"


def start(name, **env):
    port = subprocess.check_output([str(CLUSTER), "start", name], text=True, env=dict(os.environ, **env)).strip()
    return int(port)


def stop(name):
    subprocess.run([str(CLUSTER), "stop", name], check=False)


def dsn(port, db):
    return f"host=127.0.0.1 port={port} user=postgres dbname={db}"


@pytest.fixture(scope="module")
def primary_and_standby():
    stop("pytest-standby")
    port = start("pytest-primary")
    with psycopg.connect(dsn(port, "postgres"), autocommit=True) as c:
        c.execute("DROP DATABASE IF EXISTS rep")
        c.execute("CREATE DATABASE rep")
    with psycopg.connect(dsn(port, "rep"), autocommit=True) as c:
        c.execute("CREATE EXTENSION memory_ext")
        c.execute("SELECT memory.audit_ensure_partitions(1)")
        c.execute("INSERT INTO memory.observations (org_id, user_id, content) VALUES "
                  "('acme', 'u1', 'the payments worker retries with backoff'), ('acme', 'u1', 'ssn on file')")
        # Due for retention: a dry run on the standby reports them.
        c.execute("INSERT INTO memory.observations (org_id, user_id, content, created_at) VALUES "
                  "('acme', 'u2', 'ssn 123-45-6789 long ago', now() - interval '100 days'), ('globex', 'u3', 'card 4111 1111 1111 1111', now() - interval '60 days')")
        c.execute("INSERT INTO memory.entities (id, org_id, name, entity_type) VALUES "
                  "('e0000000-0000-0000-0000-000000000001', 'acme', 'Drug X', 'intervention')")
        c.execute("INSERT INTO memory.claims (id, org_id, entity_id, claim_text, source) VALUES "
                  "('c0000000-0000-0000-0000-000000000001', 'acme', 'e0000000-0000-0000-0000-000000000001', 'works', 'PubMed')")
        c.execute("SELECT memory.audit_integrate()")
    sport = int(subprocess.check_output([str(CLUSTER), "standby", "pytest-standby", "pytest-primary"], text=True).strip())
    yield port, sport
    stop("pytest-standby")
    stop("pytest-primary")


def test_read_only_work_on_a_hot_standby(primary_and_standby):
    port, sport = primary_and_standby
    with psycopg.connect(dsn(port, "rep"), autocommit=True) as p:
        heads = p.execute("SELECT chain_id, seq, entry_hash FROM memory.audit_heads ORDER BY 1").fetchall()
        log_before = p.execute("SELECT count(*) FROM memory.audit_log").fetchone()[0]
    with psycopg.connect(dsn(sport, "rep"), autocommit=True) as s:
        assert s.execute("SELECT pg_is_in_recovery()").fetchone() == (True,)
        assert wait_until(lambda: s.execute("SELECT count(*) FROM memory.audit_log").fetchone()[0] == log_before)
        assert s.execute("SELECT memory.classify('rotate the api_key', NULL, NULL)::text").fetchone() == ("confidential",)
        assert s.execute("SELECT memory.classify_explain('ssn 123-45-6789')->>'tier'").fetchone() == ("restricted",)
        rows = s.execute("SELECT chain_id, entries, ok, pending FROM memory.audit_verify() ORDER BY 1").fetchall()
        assert rows and all(r[2] for r in rows), rows
        assert s.execute("SELECT chain_id, seq, entry_hash FROM memory.audit_head('acme')").fetchall() == [h for h in heads if h[0] == "acme"]
        assert len(s.execute("SELECT * FROM memory.claim_chain('c0000000-0000-0000-0000-000000000001')").fetchall()) == 1
        assert len(s.execute("SELECT * FROM memory.active_claims('e0000000-0000-0000-0000-000000000001')").fetchall()) == 0
        # recall and export audit themselves; a standby cannot write, so those events are logged
        # in the server log instead, and the read itself succeeds.
        hits = s.execute("SELECT content FROM memory.recall('acme', 'payments worker')").fetchall()
        assert hits == [("the payments worker retries with backoff",)]
        export = s.execute("SELECT memory.export_subject('u1', true)").fetchone()[0]
        assert export["manifest"]["observations"]["count"] == 2
        # A retention dry run reports what a run would do (no temporary tables, no row locks).
        dry = s.execute("SELECT memory.run_retention(true)").fetchone()[0]
        assert (dry["dry_run"], dry["soft_deleted"], dry["hard_deleted"], dry["failed_tables"]) == (True, 2, 0, {}), dry
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            s.execute("SELECT memory.run_retention(false)")
        # Writes are refused as on any standby, with PostgreSQL's read-only error.
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            s.execute("INSERT INTO memory.observations (org_id, content) VALUES ('acme', 'x')")
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            s.execute("SELECT memory.audit_integrate()")
    log = (cluster_dir("pytest-standby") / "server.log").read_text()
    assert "audit events not recorded on a hot standby (read-only): memory.recall x1" in log
    assert "memory.export x1" in log
    # The dry run changed nothing on the primary.
    with psycopg.connect(dsn(port, "rep"), autocommit=True) as p:
        assert p.execute("SELECT count(*) FROM memory.observations WHERE soft_deleted_at IS NOT NULL").fetchone() == (0,)
    # The primary is as it was.
    with psycopg.connect(dsn(port, "rep"), autocommit=True) as p:
        assert p.execute("SELECT chain_id, seq, entry_hash FROM memory.audit_heads ORDER BY 1").fetchall() == heads


def test_audit_events_stream_out_through_a_publication():
    """The documented recipe: a publication of memory.audit_log (via its partition root), and a
    subscriber that keeps a copy (here a second database of the same cluster) receives every entry
    exactly as chained, in both audit modes."""
    port = start("pytest-logical", MEMORY_EXT_SERVER_OPTS="-c wal_level=logical")
    try:
        with psycopg.connect(dsn(port, "postgres"), autocommit=True) as c:
            for db in ("src", "sink"):
                c.execute(f"DROP DATABASE IF EXISTS {db}")
                c.execute(f"CREATE DATABASE {db}")
        with psycopg.connect(dsn(port, "src"), autocommit=True) as src, psycopg.connect(dsn(port, "sink"), autocommit=True) as sink:
            src.execute("CREATE EXTENSION memory_ext")
            src.execute("SELECT memory.audit_ensure_partitions(1)")
            src.execute("CREATE PUBLICATION memory_audit FOR TABLE memory.audit_log WITH (publish = 'insert', publish_via_partition_root = true)")
            src.execute("SELECT pg_create_logical_replication_slot('memory_audit_sink', 'pgoutput')")
            # The subscriber's copy: a plain table of the same name and columns (no extension).
            sink.execute("CREATE SCHEMA memory")
            sink.execute("CREATE TABLE memory.audit_log (chain_id text, seq bigint, event_type text, recorded_at timestamptz, actor_id text,"
                         " org_id text, project_id text, workspace_id text, payload jsonb, key_id int, prev_hash bytea, entry_hash bytea)")
            sink.execute(f"CREATE SUBSCRIPTION memory_audit_sink CONNECTION '{dsn(port, 'src')}' PUBLICATION memory_audit"
                         " WITH (create_slot = false, slot_name = 'memory_audit_sink', copy_data = false)")
            # Events chained in the statement (immediate), by the sequencer (deferred), and a batch.
            src.execute("SET memory.audit_mode = immediate")
            src.execute("INSERT INTO memory.observations (org_id, content) VALUES ('acme', 'one'), ('globex', 'two')")
            src.execute("SET memory.audit_mode = deferred")
            src.execute("SELECT memory.audit_append('app.note', '{\"n\": 1}', 'acme')")
            src.execute("INSERT INTO memory.observations (org_id, content) SELECT 'acme', 'row ' || g FROM generate_series(1, 2000) g")
            src.execute("SELECT memory.audit_integrate()")
            want = src.execute("SELECT chain_id, seq, entry_hash, payload FROM memory.audit_log ORDER BY 1, 2").fetchall()
            assert len(want) >= 2003
            assert wait_until(lambda: sink.execute("SELECT count(*) FROM memory.audit_log").fetchone()[0] >= len(want), 60)
            got = sink.execute("SELECT chain_id, seq, entry_hash, payload FROM memory.audit_log ORDER BY 1, 2").fetchall()
            assert got == want
            sink.execute("DROP SUBSCRIPTION memory_audit_sink")
    finally:
        stop("pytest-logical")


def test_caches_follow_changes_applied_by_logical_replication():
    """Logical replication's apply fires row triggers (and TRUNCATE's statement triggers) only:
    memory_ext's cache invalidations are row triggers, ENABLE ALWAYS, so a backend of the
    subscriber drops its cached consents, rules and lexicon when the apply writes new ones."""
    port = start("pytest-logical-caches", MEMORY_EXT_SERVER_OPTS="-c wal_level=logical")
    try:
        with psycopg.connect(dsn(port, "postgres"), autocommit=True) as c:
            for db in ("pub", "sub"):
                c.execute(f"DROP DATABASE IF EXISTS {db}")
                c.execute(f"CREATE DATABASE {db}")
        with psycopg.connect(dsn(port, "pub"), autocommit=True) as pub, \
                psycopg.connect(dsn(port, "sub"), autocommit=True) as sub, \
                psycopg.connect(dsn(port, "sub"), autocommit=True) as a:
            for c in (pub, sub):
                c.execute("CREATE EXTENSION memory_ext")
            pub.execute("CREATE PUBLICATION memory_rules FOR TABLE memory.consents, memory.classification_rules, memory.drift_lexicon")
            pub.execute("SELECT pg_create_logical_replication_slot('memory_rules_sub', 'pgoutput')")
            sub.execute(f"CREATE SUBSCRIPTION memory_rules_sub CONNECTION '{dsn(port, 'pub')}' PUBLICATION memory_rules"
                        " WITH (create_slot = false, slot_name = 'memory_rules_sub', copy_data = false)")
            versions = "SELECT count(*) FROM memory.consents WHERE org_id = 'acme' AND user_id = 'u1'"
            drift = "SELECT count(*) FROM memory.persona_drift_log WHERE user_id = 'u1'"
            rate = "INSERT INTO memory.user_feedback (org_id, user_id, related_object_ref, rating) VALUES ('acme', 'u1', %s, %s)"

            def reversal(obj):
                a.execute(rate, (obj, "thumbs_up"))
                a.execute(rate, (obj, "not_helpful"))

            pub.execute("SELECT memory.grant_consent('acme', 'u1', '{create_task,save_to_profile}')")
            assert wait_until(lambda: sub.execute(versions).fetchone()[0] == 1)
            reversal("lr:1")  # backend a caches the consent (held)
            assert sub.execute(drift).fetchone() == (1,)
            assert a.execute("SELECT memory.classify('heron plans', NULL, NULL, 'acme')").fetchone() == ("internal",)
            polarity = "INSERT INTO memory.user_feedback (org_id, user_id, related_object_ref, comment) VALUES ('acme', 'u9', 'x', 'I agree') RETURNING comment_polarity"
            assert a.execute(polarity).fetchone() == (1,)

            pub.execute("SELECT memory.revoke_consent('acme', 'u1', '{save_to_profile}')")
            pub.execute("INSERT INTO memory.classification_rules (org_id, tier, target, pattern) VALUES ('acme', 'restricted', 'content', 'heron')")
            pub.execute("TRUNCATE memory.drift_lexicon")
            assert wait_until(lambda: sub.execute(versions).fetchone()[0] == 2
                              and sub.execute("SELECT count(*) FROM memory.drift_lexicon").fetchone()[0] == 0
                              and sub.execute("SELECT count(*) FROM memory.classification_rules WHERE pattern = 'heron'").fetchone()[0] == 1)
            reversal("lr:2")  # the revocation, applied by the subscription, is in force in backend a
            assert sub.execute(drift).fetchone() == (1,)
            assert a.execute("SELECT memory.classify('heron plans', NULL, NULL, 'acme')").fetchone() == ("restricted",)
            assert a.execute(polarity).fetchone() == (None,)
            sub.execute("DROP SUBSCRIPTION memory_rules_sub")
    finally:
        stop("pytest-logical-caches")
