"""The restore layer (issue 13, SPEC §9): a database with data in every table of memory_ext is
dumped (pg_dump -Fc) and restored, with the one command of docs/operations.md, into a second cluster whose
clock (libfaketime) is four months later. Every table comes back row for row, stamps included;
every chain verifies with the heads it had; then every kind of write works on the copy (no
duplicate keys from sequences, partitions made for the new months, the chains continuing).
"""
import os
import pathlib
import subprocess

import psycopg
import pytest

from conftest import BIN, clock_cluster, fresh_database

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "scripts" / "cluster.sh"
LATER = "pytest-later"
SOURCE = "pytest-source"
ROLE = "restore_agent"

TABLES_Q = """SELECT c.oid::regclass::text FROM pg_class c
               WHERE c.relnamespace = 'memory'::regnamespace AND c.relkind IN ('r', 'p') AND NOT c.relispartition
               ORDER BY 1"""


@pytest.fixture(scope="module")
def source():
    """The source cluster, its clock movable: its log spans two months, one sealed."""
    with clock_cluster(SOURCE, "-40d") as (port, f):
        yield fresh_database(port, "src"), port, f


@pytest.fixture(scope="module")
def later_cluster():
    """A second cluster, its clock 120 days ahead of this machine's."""
    with clock_cluster(LATER, "+120d") as (port, _):
        yield port


def fill(c, clock):
    """Rows in every table memory_ext has, written through its API: a first part 40 days ago,
    the rest now, and the month the first part fell in sealed when it is over."""
    c.execute("SELECT memory.audit_ensure_partitions(1)")
    c.execute("INSERT INTO memory.observations (org_id, user_id, content) VALUES ('acme', 'u1', 'written 40 days ago')")
    c.execute("SELECT memory.audit_integrate()")
    clock.write_text("+0\n")
    c.execute("SELECT * FROM memory.setup_roles()")
    c.execute(f"DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{ROLE}') THEN CREATE ROLE {ROLE} LOGIN IN ROLE memory_writer; END IF; END $$")
    c.execute(f"SELECT memory.grant_org('{ROLE}', 'acme')")
    c.execute("INSERT INTO memory.classification_rules (org_id, tier, target, pattern, description) "
              "VALUES ('acme', 'restricted', 'content', '(?i)project falcon', 'codename')")
    c.execute("INSERT INTO memory.org_settings (org_id, alpha_success, alpha_failure, bfsi_mode) VALUES ('acme', 0.2, 0.3, false)")
    c.execute("INSERT INTO memory.retention_policies (org_id, tier, retention_days, soft_delete_grace_days) VALUES ('acme', 'internal', 40, 2),"
              " ('initech', 'internal', NULL, 0)")
    # Edited platform defaults and memory-type schedules travel with the dump.
    c.execute("UPDATE memory.retention_policies SET retention_days = 200 WHERE org_id IS NULL AND tier = 'internal'")
    c.execute("UPDATE memory.memory_type_policies SET ttl = interval '3 hours' WHERE memory_type = 'short_term'")
    c.execute("INSERT INTO memory.observations (id, org_id, user_id, task_id, content, source_files, memory_type, created_at) VALUES "
              "('a0000000-0000-0000-0000-000000000001', 'acme', 'u1', 't1', 'Project Falcon kickoff', NULL, 'long_term', now() - interval '3 days'),"
              "('a0000000-0000-0000-0000-000000000002', 'acme', 'u2', NULL, 'docs index', ARRAY['docs/a.md'], 'short_term', now()),"
              "('a0000000-0000-0000-0000-000000000003', 'globex', 'u3', NULL, 'card 4111 1111 1111 1111', NULL, 'episodic', now()),"
              "('a0000000-0000-0000-0000-000000000004', 'initech', 'u1', NULL, 'an old record', NULL, 'structured', now() - interval '190 days'),"
              "('a0000000-0000-0000-0000-000000000005', 'acme', 'dave', NULL, 'held note', NULL, 'long_term', now() - interval '60 days')")
    c.execute("INSERT INTO memory.legal_holds (org_id, user_id, reason) VALUES ('acme', 'dave', 'litigation')")
    c.execute("SELECT memory.run_retention()")  # archives the 400-day-old note, denies the held one
    c.execute("SELECT count(*) FROM memory.record_outcome('s1', 'accepted', ARRAY['a0000000-0000-0000-0000-000000000001'::uuid])")
    c.execute("CREATE TABLE public.notes (id bigserial PRIMARY KEY, org_id text NOT NULL, body text NOT NULL, meta jsonb)")
    c.execute("""SELECT memory.govern('public.notes', '{"content": "body", "target": "meta", "audit": true, "id": "id", "revisions": true}')""")
    c.execute("INSERT INTO public.notes (org_id, body) VALUES ('acme', 'rotate the api_key'), ('globex', 'plain')")
    # A correction of a governed table's row (its revisions option, 0.4.0): kept in memory.table_revisions.
    c.execute("UPDATE public.notes SET body = 'plain, corrected' WHERE org_id = 'globex'")
    c.execute("INSERT INTO memory.entities (id, org_id, name, entity_type) VALUES "
              "('e0000000-0000-0000-0000-000000000001', 'acme', 'Drug X', 'intervention')")
    for i, (src, score) in enumerate([("PubMed", 0.9), ("NEJM", 0.95), ("blog", 0.3), ("JAMA", 0.8)], start=1):
        c.execute("INSERT INTO memory.claims (id, org_id, entity_id, claim_text, source, confidence_score, t_created) VALUES "
                  f"('c0000000-0000-0000-0000-00000000000{i}', 'acme', 'e0000000-0000-0000-0000-000000000001', 'claim {i}', %s, %s,"
                  " now() - interval '200 days')", (src, score))
    c.execute("UPDATE memory.claims SET lifecycle_state = 'active' WHERE id IN ('c0000000-0000-0000-0000-000000000001', 'c0000000-0000-0000-0000-000000000004')")
    c.execute("INSERT INTO memory.claims (id, org_id, entity_id, claim_text, source, confidence_score, supersedes) VALUES "
              "('c0000000-0000-0000-0000-000000000005', 'acme', 'e0000000-0000-0000-0000-000000000001', 'claim 1 corrected', 'NEJM', 0.95,"
              " 'c0000000-0000-0000-0000-000000000001')")
    c.execute("UPDATE memory.claims SET lifecycle_state = 'active' WHERE id = 'c0000000-0000-0000-0000-000000000005'")
    c.execute("UPDATE memory.claims SET lifecycle_state = 'retracted' WHERE id = 'c0000000-0000-0000-0000-000000000003'")
    c.execute("INSERT INTO memory.relationships (org_id, source_id, target_id, rel_type) VALUES "
              "('acme', 'e0000000-0000-0000-0000-000000000001', 'e0000000-0000-0000-0000-000000000001', 'related_to')")
    c.execute("SELECT count(*) FROM memory.freshness_recheck()")  # a re-check task for the old active claim
    c.execute("INSERT INTO memory.screen_profiles (profile, field, freshness_days) VALUES ('intake', 'hba1c', 90), ('intake', 'egfr', 365)")
    c.execute("INSERT INTO memory.screen_profiles (org_id, profile, field, freshness_days, required) VALUES ('acme', 'intake', 'bmi', 30, false)")
    # Consent-era rows (SPEC §6).
    c.execute("""SELECT memory.grant_consent('acme', 'u1', '{create_task,save_to_thread,save_to_profile,training_use_allowed}',"""
              """ '{"language_preference": "English"}')""")
    c.execute("INSERT INTO memory.user_contexts (org_id, user_id, scope, thread_id, source, fields) "
              "VALUES ('acme', 'u1', 'thread', 'th-1', 'save_as_thread', '{\"research_style\": \"top-down\"}')")
    c.execute("INSERT INTO memory.threads (thread_id, org_id, user_id, title) VALUES ('th-1', 'acme', 'u1', 'SOL thesis')")
    c.execute("INSERT INTO memory.training_candidates (org_id, user_id, object_ref) VALUES ('acme', 'u1', 'snapshot:1')")
    c.execute("INSERT INTO memory.persona_drift_log (drift_id, org_id, user_id, object_ref, signal_kind, prior_signal, current_signal,"
              " delta_summary, triggers_alert) VALUES ('drift_2026-01-01T00:00:00Z_abcdef', 'acme', 'u1', 'snapshot:1', 'grade_reversal',"
              " '{\"value\": \"thumbs_up\"}', '{\"value\": \"not_helpful\"}', 'flip', true)")
    c.execute("INSERT INTO memory.user_feedback (org_id, user_id, related_object_ref, rating, comment) VALUES ('acme', 'u1', 'snapshot:1', 'agree', 'agree')")
    c.execute("INSERT INTO memory.thread_refreshes (org_id, user_id, thread_id, main_thesis, changed_inferences) VALUES ('acme', 'u1', 'th-1', 'SOL bullish', 2)")
    c.execute("INSERT INTO memory.watch_question_updates (org_id, user_id, watch_question_id, status) VALUES ('acme', 'u1', 'wq-1', 'resolved')")
    c.execute("UPDATE memory.drift_thresholds SET value = 21 WHERE name = 'grade_reversal_days'")
    c.execute("SELECT memory.revoke_consent('acme', 'u1', '{training_use_allowed}')")
    c.execute("SELECT memory.grant_consent('acme', 'gone', '{create_task}')")
    c.execute("INSERT INTO memory.observations (org_id, user_id, content) VALUES ('acme', 'gone', 'a note of the subject who leaves')")
    c.execute("SELECT memory.erase_subject('gone')")  # leaves a deletion stub and an erasure receipt's ids
    # A correction (memory over time, 0.4.0): the version it replaced is kept in memory.revisions.
    c.execute("SET memory.change_reason = 'renamed'")
    c.execute("UPDATE memory.observations SET content = 'docs index, renamed' WHERE id = 'a0000000-0000-0000-0000-000000000002'")
    c.execute("RESET memory.change_reason")
    c.execute("SELECT memory.audit_rotate_key()")
    c.execute("SELECT memory.audit_append('app.event', '{\"n\": 1}', 'acme')")
    # Embeddings (pgvector, optional): the settings row, and a memory and a claim with theirs.
    if c.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'").fetchone():
        c.execute("CREATE EXTENSION IF NOT EXISTS vector")
        c.execute("SELECT memory.enable_embeddings(3)")
        c.execute("INSERT INTO memory.observations (org_id, user_id, content, embedding) VALUES ('acme', 'u1', 'sailing in june', '[1,0,0]')")
    c.execute("SELECT memory.run_maintenance()")
    c.execute("SELECT memory.audit_integrate()")
    # The month of the first part is over (40 days back): seal it (the partition stays).
    sealed = c.execute("SELECT count(*) FROM memory.audit_seal(date_trunc('month', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC')").fetchone()[0]
    assert sealed >= 1


# The extension's own registry rows are made by CREATE EXTENSION on the target (not dumped): when
# they were made is the target's; the rest of each row must match.
ROW = {"memory.governance_registry": "(x.relid, x.options, x.builtin, CASE WHEN NOT x.builtin THEN x.governed_at END, x.governed_by)"}


def snapshot(c, tables):
    out = {}
    for t in tables:
        row = ROW.get(t, "x")
        out[t] = [r[0] for r in c.execute(f"SELECT {row}::text FROM {t} x ORDER BY {row}::text COLLATE \"C\"").fetchall()]
    return out


def test_restore_months_later_brings_every_row_back(source, later_cluster, tmp_path):
    dsn, port, clock = source
    with psycopg.connect(dsn, autocommit=True) as c:
        fill(c, clock)
        tables = [r[0] for r in c.execute(TABLES_Q).fetchall()] + ["public.notes"]
        before = snapshot(c, tables)
        # (memory.ann_settings stays empty without pgvector.)
        optional = () if c.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'").fetchone() else ("memory.ann_settings",)
        empty = sorted(t for t, rows in before.items() if not rows and t not in ("memory.audit_pending", "memory.audit_outbox") + optional)
        assert empty == [], f"the fill left tables empty: {empty}"
        heads = c.execute("SELECT chain_id, seq, entry_hash FROM memory.audit_heads ORDER BY 1").fetchall()
        db = c.execute("SELECT current_database()").fetchone()[0]
    dump = tmp_path / "memory.dump"
    subprocess.run([f"{BIN}/pg_dump", "-Fc", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "-f", str(dump), db], check=True)

    admin = f"host=127.0.0.1 port={later_cluster} user=postgres dbname=postgres"
    with psycopg.connect(admin, autocommit=True) as c:
        # Roles are cluster-wide: the target has them before the restore (pg_dumpall --roles-only).
        c.execute("DROP DATABASE IF EXISTS restored WITH (FORCE)")
        c.execute("CREATE DATABASE restored")
        for r in ("memory_reader", "memory_writer", "memory_admin"):
            c.execute(f"DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{r}') THEN CREATE ROLE {r} NOLOGIN; END IF; END $$")
        c.execute(f"DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{ROLE}') THEN CREATE ROLE {ROLE} LOGIN IN ROLE memory_writer; END IF; END $$")
        assert c.execute("SELECT now() > clock_timestamp() - interval '1 day' AND now() - interval '100 days' > %s::timestamptz",
                         (psycopg.connect(dsn).execute("SELECT now()").fetchone()[0],)).fetchone()[0]
    env = dict(os.environ, PGOPTIONS="-c memory.restore_mode=on")
    # The documented restore (docs/operations.md): one transaction, memory.restore_mode on.
    restore = subprocess.run([f"{BIN}/pg_restore", "--single-transaction", "-h", "127.0.0.1", "-p", str(later_cluster), "-U", "postgres", "-d", "restored", str(dump)],
                             capture_output=True, text=True, env=env)
    assert restore.returncode == 0, restore.stderr

    target = f"host=127.0.0.1 port={later_cluster} user=postgres dbname=restored"
    with psycopg.connect(target, autocommit=True) as c:
        after = snapshot(c, tables)
        differ = {t: (len(before[t]), len(after[t])) for t in tables if before[t] != after[t]}
        assert differ == {}, f"tables not restored row for row (rows before, after): {differ}"
        assert c.execute("SELECT chain_id, seq, entry_hash FROM memory.audit_heads ORDER BY 1").fetchall() == heads
        assert all(r[2] for r in c.execute("SELECT * FROM memory.audit_verify()").fetchall())

        # Four months on: maintenance makes this month's partitions, and every write works.
        assert c.execute("SELECT memory.audit_ensure_partitions(1)").fetchone()[0] >= 1
        c.execute("INSERT INTO memory.observations (org_id, content) VALUES ('acme', 'after the restore')")
        assert c.execute("SELECT classification::text FROM memory.observations WHERE org_id = 'acme' AND content = 'Project Falcon kickoff'").fetchone() == ("restricted",)
        assert c.execute("SELECT count(*) FROM memory.record_outcome('s2', 'rejected', ARRAY['a0000000-0000-0000-0000-000000000002'::uuid])").fetchone()[0] == 1
        assert c.execute("SELECT memory.audit_rotate_key()").fetchone()[0] == 3
        c.execute("INSERT INTO memory.legal_holds (org_id, user_id, reason) VALUES ('acme', 'u9', 'new hold')")
        c.execute("INSERT INTO memory.classification_rules (org_id, tier, target, pattern) VALUES ('globex', 'confidential', 'content', 'merger')")
        c.execute("INSERT INTO memory.retention_policies (org_id, tier, retention_days) VALUES ('globex', 'internal', 90)")
        assert c.execute("SELECT retention_days FROM memory.retention_policies WHERE org_id IS NULL AND tier = 'internal'").fetchone() == (200,)
        assert c.execute("SELECT ttl FROM memory.memory_type_policies WHERE memory_type = 'short_term'").fetchone()[0].total_seconds() == 3 * 3600
        c.execute("INSERT INTO memory.claims (org_id, entity_id, claim_text, source) VALUES "
                  "('acme', 'e0000000-0000-0000-0000-000000000001', 'a new claim', 'PubMed')")
        c.execute("INSERT INTO public.notes (org_id, body) VALUES ('acme', 'after the restore')")
        c.execute(f"SELECT memory.grant_org('{ROLE}', 'globex')")
        c.execute("SELECT memory.run_maintenance()")
        c.execute("SELECT memory.audit_integrate()")
        rows = c.execute("SELECT chain_id, ok, reason FROM memory.audit_verify()").fetchall()
        assert rows and all(r[1] for r in rows), rows
        # The chains continued from the restored heads.
        for chain, seq, _ in heads:
            assert c.execute("SELECT seq FROM memory.audit_heads WHERE chain_id = %s", (chain,)).fetchone()[0] >= seq
        assert c.execute("SELECT count(*) FROM memory.maintenance_runs WHERE error IS NOT NULL").fetchone()[0] == 0
