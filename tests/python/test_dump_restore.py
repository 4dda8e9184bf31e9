"""pg_dump / restore keeps what the extension governs: user data, keys, chains, the registry."""
import contextlib
import os
import pathlib
import re
import shlex
import subprocess

import psycopg

from conftest import BIN

DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def documented_restore():
    """The restore command of docs/operations.md (every documented pg_restore is this one): its
    environment setting and its pg_restore options, so the test runs what the docs say."""
    lines = [l for l in DOCS.read_text().splitlines() if re.search(r"\bpg_restore\b.*\bmemory\.dump\b", l) and not l.startswith(("`", "#"))]
    assert lines, "docs/operations.md documents a pg_restore of memory.dump"
    commands = {l.split("#")[0].split("&&")[-1].strip() for l in lines}
    assert len(commands) == 1, f"one documented restore command, not {commands}"
    words = shlex.split(commands.pop())
    env = dict(w.split("=", 1) for w in words if "=" in w and not w.startswith("-"))
    args = [w for w in words if "=" not in w or w.startswith("-")]
    assert args[0] == "pg_restore" and args[-3:-1] == ["-d", "targetdb"] and args[-1] == "memory.dump", args
    return env, args[1:-3]


def run_restore(port, target, dump, restore_mode=True):
    """The documented restore into `target` (restore_mode False: the same without memory.restore_mode)."""
    env, opts = documented_restore()
    env = {k: v for k, v in env.items() if restore_mode or k != "PGOPTIONS"}
    return subprocess.run([f"{BIN}/pg_restore", *opts, "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "-d", target, str(dump)],
                          capture_output=True, text=True, env=dict(os.environ, **env))


def test_documented_restore_is_one_transaction():
    env, opts = documented_restore()
    assert "--single-transaction" in opts and env == {"PGOPTIONS": "-c memory.restore_mode=on"}


@contextlib.contextmanager
def restored(dsn, port, db, suffix, env=None):
    """pg_dump `db`, restore it with psql into a new database, yield a connection to the copy."""
    dump = subprocess.run([f"{BIN}/pg_dump", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", db],
                          capture_output=True, text=True, check=True).stdout
    target = db + suffix
    admin = dsn.replace(f"dbname={db}", "dbname=postgres")
    with psycopg.connect(admin, autocommit=True) as c:
        c.execute(f"DROP DATABASE IF EXISTS {target}")
        c.execute(f"CREATE DATABASE {target}")
    try:
        restore = subprocess.run([f"{BIN}/psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p", str(port),
                                  "-U", "postgres", "-d", target], input=dump, capture_output=True, text=True, env=env)
        assert restore.returncode == 0, restore.stderr
        with psycopg.connect(dsn.replace(f"dbname={db}", f"dbname={target}"), autocommit=True) as c:
            yield c
    finally:
        with psycopg.connect(admin, autocommit=True) as c:
            c.execute(f"DROP DATABASE IF EXISTS {target} WITH (FORCE)")


def test_dump_and_restore_round_trip(dsn, port):
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("CREATE TABLE notes (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), org_id text, content text, "
                  "classification memory.classification, w float8 NOT NULL DEFAULT 1)")
        c.execute("""SELECT memory.govern('notes', '{"audit": true, "weight": "w", "revisions": true}')""")
        c.execute("INSERT INTO notes (org_id, content) VALUES ('acme', 'the password')")
        # A revision of a governed table (memory.table_revisions names the table by regclass).
        c.execute("UPDATE notes SET content = 'the new password' WHERE content = 'the password'")
        c.execute("INSERT INTO memory.observations (org_id, user_id, content) VALUES ('acme', 'u1', 'ssn on file')")
        c.execute("INSERT INTO memory.classification_rules (org_id, tier, target, pattern) VALUES ('acme', 'restricted', 'content', 'falcon')")
        c.execute("SELECT memory.audit_rotate_key()")
        c.execute("""SELECT memory.audit_append('x', '{"n": 123456789012345678901234567890}', 'acme')""")
        c.execute("SELECT memory.audit_integrate()")
        before = c.execute("SELECT chain_id, seq, entry_hash FROM memory.audit_log ORDER BY 1, 2").fetchall()
        db = c.execute("SELECT current_database()").fetchone()[0]

    with restored(dsn, port, db, "_restored") as c:
        c.execute("SELECT memory.audit_integrate()")
        after = c.execute("SELECT chain_id, seq, entry_hash FROM memory.audit_log ORDER BY 1, 2").fetchall()
        # Every entry comes back. Loading memory.observations fires its triggers (they exist as
        # soon as CREATE EXTENSION ran), so the restore itself is chained as memory.store events.
        assert [a for a in after if a in before] == before
        extra = c.execute("SELECT event_type, count(*) FROM memory.audit_log WHERE (chain_id, seq) NOT IN "
                          "(SELECT * FROM unnest(%s::text[], %s::bigint[])) GROUP BY 1",
                          ([b[0] for b in before], [b[1] for b in before])).fetchall()
        assert extra == [("memory.store", 1)]
        assert all(r[2] for r in c.execute("SELECT * FROM memory.audit_verify()").fetchall())
        assert c.execute("SELECT count(*) FROM memory.governed_tables WHERE table_name = 'notes'::regclass").fetchone() == (1,)
        assert c.execute("SELECT array_agg(content ORDER BY rev) FROM memory.history('notes', (SELECT id::text FROM notes))").fetchone() == (
            ["the password", "the new password"],)
        assert c.execute("SELECT memory.classify('falcon', NULL, NULL, 'acme')::text").fetchone() == ("restricted",)
        # The restored database keeps working: a new write is classified, chained and verifiable.
        c.execute("INSERT INTO notes (org_id, content) VALUES ('acme', 'falcon launch')")
        assert c.execute("SELECT classification::text FROM notes WHERE content = 'falcon launch'").fetchone() == ("restricted",)
        assert c.execute("SELECT ok FROM memory.audit_verify('acme')").fetchone() == (True,)
        applied = c.execute("SELECT applied FROM memory.record_outcome('s', 'accepted', ARRAY(SELECT id FROM notes))").fetchall()
        assert applied == [(True,), (True,)]


def test_knowledge_rows_restore_with_triggers_off(dsn, port):
    """Claims keep their states and chains through a dump restored in replica mode."""
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("INSERT INTO memory.entities (id, org_id, entity_type, name) VALUES "
                  "('e0000000-0000-0000-0000-000000000001', 'acme', 'problem', 'x')")
        c.execute("INSERT INTO memory.claims (id, org_id, entity_id, claim_text, source) VALUES "
                  "('c0000000-0000-0000-0000-000000000001', 'acme', 'e0000000-0000-0000-0000-000000000001', 'v1', 'PubMed')")
        c.execute("UPDATE memory.claims SET lifecycle_state = 'active'")
        c.execute("INSERT INTO memory.claims (id, org_id, entity_id, claim_text, source, supersedes) VALUES "
                  "('c0000000-0000-0000-0000-000000000002', 'acme', 'e0000000-0000-0000-0000-000000000001', 'v2', 'PubMed', "
                  "'c0000000-0000-0000-0000-000000000001')")
        claims = c.execute("SELECT id, lifecycle_state::text, superseded_by, supersedes FROM memory.claims ORDER BY id").fetchall()
        log = c.execute("SELECT chain_id, seq, entry_hash FROM memory.audit_log ORDER BY 1, 2").fetchall()
        db = c.execute("SELECT current_database()").fetchone()[0]
    # Replica mode: the rows come back as they were, without re-running the write rules
    # (claims start pending, supersession) or appending events for the restore.
    env = {"PGOPTIONS": "-c session_replication_role=replica", "PATH": "/usr/bin:/bin"}
    with restored(dsn, port, db, "_k", env) as c:
        assert c.execute("SELECT id, lifecycle_state::text, superseded_by, supersedes FROM memory.claims ORDER BY id").fetchall() == claims
        assert c.execute("SELECT chain_id, seq, entry_hash FROM memory.audit_log ORDER BY 1, 2").fetchall() == log
        assert all(r[2] for r in c.execute("SELECT * FROM memory.audit_verify()").fetchall())
        depth = c.execute("SELECT max(depth) FROM memory.claim_chain('c0000000-0000-0000-0000-000000000002')").fetchone()
        assert depth == (1,)
        # And the rules are back in force afterwards.
        try:
            c.execute("DELETE FROM memory.claims")
            raise AssertionError("hard delete allowed after restore")
        except psycopg.Error as e:
            assert e.sqlstate == "MX006"


def test_restore_in_a_later_month_keeps_the_whole_log(dsn, port, tmp_path):
    """pg_dump -Fc / pg_restore into a fresh database, which the target's maintenance then carries
    months on: every entry, head and sequence comes back, and every writing function works."""
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("""SELECT memory.audit_append('x.before', '{"n": 1}', 'acme')""")  # into the default partition
        c.execute("SELECT memory.audit_integrate()")
        c.execute("SELECT memory.audit_ensure_partitions(3)")                          # moves it into this month's
        c.execute("""SELECT memory.audit_append('x.after', '{"n": 2}', 'acme')""")
        c.execute("SELECT memory.audit_rotate_key()")
        c.execute("INSERT INTO memory.observations (org_id, user_id, content) VALUES ('acme', 'u1', 'ssn on file')")
        c.execute("INSERT INTO memory.legal_holds (org_id, reason) VALUES ('acme', 'litigation')")
        c.execute("INSERT INTO memory.classification_rules (org_id, tier, target, pattern) VALUES ('acme', 'restricted', 'content', 'falcon')")
        c.execute("INSERT INTO memory.retention_policies (org_id, tier, retention_days) VALUES ('acme', 'internal', 40)")
        c.execute("SELECT memory.record_outcome('s1', 'accepted', ARRAY(SELECT id FROM memory.observations))")
        c.execute("SELECT memory.audit_integrate()")
        log = c.execute("SELECT chain_id, seq, event_type, entry_hash, tableoid::regclass::text FROM memory.audit_log ORDER BY 1, 2").fetchall()
        heads = c.execute("SELECT chain_id, seq, entry_hash FROM memory.audit_heads ORDER BY 1").fetchall()
        db = c.execute("SELECT current_database()").fetchone()[0]
    assert any(row[4] != "memory.audit_log_default" for row in log), "entries live in a month partition"
    dump = tmp_path / "memory.dump"
    subprocess.run([f"{BIN}/pg_dump", "-Fc", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "-f", str(dump), db], check=True)
    target = db + "_later"
    admin = dsn.replace(f"dbname={db}", "dbname=postgres")
    with psycopg.connect(admin, autocommit=True) as c:
        c.execute(f"DROP DATABASE IF EXISTS {target}")
        c.execute(f"CREATE DATABASE {target}")
    try:
        # The documented command without memory.restore_mode would re-stamp and re-classify the
        # rows it loads: it is refused at the first one (55000, with the documented command), and
        # with --single-transaction it leaves nothing: no extension, no table, no audit row.
        restore = run_restore(port, target, dump, restore_mode=False)
        assert restore.returncode != 0
        assert "pg_restore without memory.restore_mode" in restore.stderr and "restore_mode=on" in restore.stderr, restore.stderr
        with psycopg.connect(dsn.replace(f"dbname={db}", f"dbname={target}"), autocommit=True) as c:
            assert c.execute("SELECT count(*) FROM pg_extension WHERE extname <> 'plpgsql'").fetchone() == (0,)
            assert c.execute("SELECT count(*) FROM pg_namespace WHERE nspname IN ('memory', 'memory_internal')").fetchone() == (0,)
            assert c.execute("SELECT count(*) FROM pg_class WHERE relnamespace = 'public'::regnamespace").fetchone() == (0,)
        restore = run_restore(port, target, dump)
        assert restore.returncode == 0, restore.stderr
        with psycopg.connect(dsn.replace(f"dbname={db}", f"dbname={target}"), autocommit=True) as c:
            # Months later: the target's maintenance makes its own months next to the restored ones.
            assert c.execute("SELECT memory.audit_ensure_partitions(3, now() + interval '4 months')").fetchone() == (4,)
            restored_log = c.execute("SELECT chain_id, seq, event_type, entry_hash FROM memory.audit_log "
                                     "WHERE (chain_id, seq) IN (SELECT * FROM unnest(%s::text[], %s::bigint[])) ORDER BY 1, 2",
                                     ([r[0] for r in log], [r[1] for r in log])).fetchall()
            assert restored_log == [r[:4] for r in log]
            assert all(r[2] for r in c.execute("SELECT * FROM memory.audit_verify()").fetchall())
            for chain, seq, entry_hash in heads:
                got = c.execute("SELECT seq, entry_hash FROM memory.audit_heads WHERE chain_id = %s", (chain,)).fetchone()
                # The restore's own writes (observations load through their triggers) may extend a chain.
                assert got[0] >= seq
                if got[0] == seq:
                    assert bytes(got[1]) == bytes(entry_hash)
            # Every sequence came back: new keys, holds, rules, policies and history rows get fresh ids.
            c.execute("SELECT memory.audit_rotate_key()")
            c.execute("INSERT INTO memory.legal_holds (org_id, reason) VALUES ('acme', 'second')")
            c.execute("INSERT INTO memory.classification_rules (org_id, tier, target, pattern) VALUES ('acme', 'confidential', 'content', 'eagle')")
            c.execute("INSERT INTO memory.retention_policies (org_id, tier, retention_days) VALUES ('acme', 'public', 10)")
            c.execute("INSERT INTO memory.observations (org_id, content) VALUES ('acme', 'falcon launch')")
            applied = c.execute("SELECT applied FROM memory.record_outcome('s2', 'rejected', ARRAY(SELECT id FROM memory.observations))").fetchall()
            assert applied and all(a for (a,) in applied)
            c.execute("""SELECT memory.audit_append('x.later', '{}', 'acme')""")
            assert all(r[2] for r in c.execute("SELECT * FROM memory.audit_verify()").fetchall())
    finally:
        with psycopg.connect(admin, autocommit=True) as c:
            c.execute(f"DROP DATABASE IF EXISTS {target} WITH (FORCE)")


def test_restore_mode_brings_rows_back_unchanged(dsn, port, tmp_path):
    """One documented command restores every row exactly, triggers on: observations keep their tier
    and stamps (their org's policy loads after them), claims keep any state, and the restore appends
    no events (memory.restore_mode, superuser-only, for the restoring session)."""
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SELECT memory.audit_ensure_partitions(1)")
        c.execute("INSERT INTO memory.retention_policies (org_id, tier, retention_days) VALUES ('acme', 'internal', 40)")
        c.execute("INSERT INTO memory.observations (org_id, user_id, content, created_at) VALUES "
                  "('acme', 'u1', 'plain note', now() - interval '3 days'), ('acme', 'u2', 'ssn on file', now()), ('globex', NULL, 'x', now())")
        # Items (issue 48) are observations: they come back with their address, value, words and ttl.
        c.execute("SELECT memory.put('acme', ARRAY['memories', 'u1'], 'prefs', '{\"text\": \"likes tea\", \"tags\": [\"a\"]}', "
                  "index => ARRAY['$.text'], ttl => interval '2 hours', user_id => 'u1')")
        c.execute("INSERT INTO memory.entities (id, org_id, name, entity_type) VALUES "
                  "('e0000000-0000-0000-0000-000000000001', 'acme', 'Drug X', 'intervention')")
        c.execute("INSERT INTO memory.claims (id, org_id, entity_id, claim_text, source, confidence_score) VALUES "
                  "('c0000000-0000-0000-0000-000000000001', 'acme', 'e0000000-0000-0000-0000-000000000001', 'works', 'PubMed', 0.9)")
        c.execute("UPDATE memory.claims SET lifecycle_state = 'active' WHERE id = 'c0000000-0000-0000-0000-000000000001'")
        c.execute("INSERT INTO memory.claims (id, org_id, entity_id, claim_text, source, confidence_score, supersedes) VALUES "
                  "('c0000000-0000-0000-0000-000000000002', 'acme', 'e0000000-0000-0000-0000-000000000001', 'works better', 'NEJM', 0.95,"
                  " 'c0000000-0000-0000-0000-000000000001')")
        c.execute("UPDATE memory.claims SET lifecycle_state = 'active' WHERE id = 'c0000000-0000-0000-0000-000000000002'")
        c.execute("INSERT INTO memory.claims (id, org_id, entity_id, claim_text, source) VALUES "
                  "('c0000000-0000-0000-0000-000000000003', 'acme', 'e0000000-0000-0000-0000-000000000001', 'maybe', 'blog')")
        c.execute("SELECT memory.audit_integrate()")
        obs_q = ("SELECT id, org_id, classification::text, created_at, expires_at, purge_after, archive_at, weight, "
                 "namespace, key, value, search_tsv::text, ttl, updated_at FROM memory.observations ORDER BY id")
        claims_q = "SELECT id, lifecycle_state::text, superseded_by, supersedes, t_invalid, confidence_score FROM memory.claims ORDER BY id"
        log_q = "SELECT chain_id, seq, entry_hash FROM memory.audit_log ORDER BY 1, 2"
        obs, claims, log = c.execute(obs_q).fetchall(), c.execute(claims_q).fetchall(), c.execute(log_q).fetchall()
        assert {r[1] for r in claims} == {"superseded", "active", "pending"}
        db = c.execute("SELECT current_database()").fetchone()[0]
    dump = tmp_path / "memory.dump"
    subprocess.run([f"{BIN}/pg_dump", "-Fc", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "-f", str(dump), db], check=True)
    target = db + "_exact"
    admin = dsn.replace(f"dbname={db}", "dbname=postgres")
    with psycopg.connect(admin, autocommit=True) as c:
        c.execute(f"DROP DATABASE IF EXISTS {target}")
        c.execute(f"CREATE DATABASE {target}")
    try:
        restore = run_restore(port, target, dump)
        assert restore.returncode == 0, restore.stderr
        with psycopg.connect(dsn.replace(f"dbname={db}", f"dbname={target}"), autocommit=True) as c:
            assert c.execute("SHOW memory.restore_mode").fetchone() == ("off",)
            c.execute("SELECT memory.audit_integrate()")
            assert c.execute(obs_q).fetchall() == obs
            assert c.execute(claims_q).fetchall() == claims
            assert c.execute(log_q).fetchall() == log  # nothing appended by the restore
            assert all(r[2] for r in c.execute("SELECT * FROM memory.audit_verify()").fetchall())
            assert c.execute("SELECT value FROM memory.get('acme', ARRAY['memories', 'u1'], 'prefs')").fetchone() == (
                {"text": "likes tea", "tags": ["a"]},)
            # Ordinary writers afterwards are governed as ever.
            c.execute("INSERT INTO memory.observations (org_id, content) VALUES ('acme', 'after the restore')")
            with __import__("pytest").raises(psycopg.DatabaseError) as e:
                c.execute("INSERT INTO memory.claims (org_id, entity_id, claim_text, source, lifecycle_state) VALUES "
                          "('acme', 'e0000000-0000-0000-0000-000000000001', 'sneaky', 'PubMed', 'active')")
            assert e.value.sqlstate == "MX001"
    finally:
        with psycopg.connect(admin, autocommit=True) as c:
            c.execute(f"DROP DATABASE IF EXISTS {target} WITH (FORCE)")


def test_restore_mode_is_superuser_only(dsn, conn):
    conn.execute("DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'plain_user') THEN CREATE ROLE plain_user LOGIN; END IF; END $$")
    with psycopg.connect(dsn.replace("user=postgres", "user=plain_user"), autocommit=True) as c:
        with __import__("pytest").raises(psycopg.errors.InsufficientPrivilege):
            c.execute("SET memory.restore_mode = on")
