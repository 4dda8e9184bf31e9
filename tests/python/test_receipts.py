"""Erasure receipts (issue 50, SPEC §18; docs/audit.md#erasure-receipts): memory.forget and
memory.erase_subject return a signed receipt, memory.verify_receipt proves it as a tenant-bound
admin, and scripts/verify_receipt.py checks it offline with the key. Run in both audit modes: in
deferred mode the receipt's event is chained after forget returns. The superuser (`conn`) sets up
roles, reads the key for the offline check and re-inserts a forgotten row (tampering)."""
import json
import os
import subprocess
import sys

import psycopg
import pytest

from conftest import connect, ensure_role

OWNER, WRITER, ADMIN, GLOBEX_ADMIN = "rc_owner", "rc_writer", "rc_admin", "rc_globex_admin"
SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "verify_receipt.py")
CHECKS = ["signature", "ids", "event", "chain_head", "absent"]


@pytest.fixture(params=["deferred", "immediate"])
def app(request, dsn, conn):
    """rc_owner owns and governs app.notes (bigint ids); writer and admin bound to acme, another
    admin to globex; the database's audit mode is the test's."""
    conn.execute(f"ALTER DATABASE {conn.info.dbname} SET memory.audit_mode = {request.param}")
    conn.execute("SELECT memory.setup_roles()")
    ensure_role(conn, OWNER, "memory_writer")
    ensure_role(conn, WRITER, "memory_writer")
    ensure_role(conn, ADMIN, "memory_admin")
    ensure_role(conn, GLOBEX_ADMIN, "memory_admin")
    for role, org in [(OWNER, "acme"), (WRITER, "acme"), (ADMIN, "acme"), (GLOBEX_ADMIN, "globex")]:
        conn.execute("SELECT memory.grant_org(%s, %s)", (role, org))
    conn.execute(f"CREATE SCHEMA app AUTHORIZATION {OWNER}")
    conn.execute(f"GRANT USAGE ON SCHEMA app TO {WRITER}, {ADMIN}, {GLOBEX_ADMIN}")
    with connect(dsn, OWNER) as c:
        c.execute("CREATE TABLE app.notes (id bigserial PRIMARY KEY, tenant text, uid text, body text, meta jsonb)")
        c.execute("""SELECT memory.govern('app.notes', '{"content": "body", "target": "meta", "org": "tenant", "user": "uid", "id": "id", "audit": true}')""")
        c.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON app.notes TO {WRITER}")
        c.execute(f"GRANT USAGE ON SEQUENCE app.notes_id_seq TO {WRITER}")
    return dsn


def remember(c, n, user="u1", org="acme"):
    return [str(c.execute("INSERT INTO memory.observations (org_id, user_id, content) VALUES (%s, %s, %s) RETURNING id",
                          (org, user, f"note {i} of {user}")).fetchone()[0]) for i in range(n)]


def verdict(dsn, receipt, role=ADMIN):
    with connect(dsn, role) as c:
        c.execute("SET statement_timeout = '60s'")
        return {chk: (ok, detail) for chk, ok, detail in
                c.execute("SELECT * FROM memory.verify_receipt(%s::jsonb)", (json.dumps(receipt),)).fetchall()}


def all_ok(v):
    return sorted(v) == sorted(CHECKS) and all(ok for ok, _ in v.values())


def test_forget_receipt_verifies_and_fails_once_tampered(app, conn):
    with connect(app, WRITER) as c:
        ids = remember(c, 3)
        res = c.execute("SELECT memory.forget(%s::uuid[], 'user asked')", (ids,)).fetchone()[0]
    r = res["receipt"]
    assert res["receipts"] == [r]
    assert set(r) == {"org_id", "event_id", "seq", "entry_hash", "chain_head", "ids_sha256", "count", "at", "key_id", "signature"}
    assert r["org_id"] == "acme" and r["count"] == 3
    with connect(app, WRITER) as c:
        mode = c.execute("SHOW memory.audit_mode").fetchone()[0]
    # Chained before forget returns in immediate mode; in deferred mode found later by event_id.
    assert (r["seq"] is None) == (mode == "deferred") and (r["entry_hash"] is None) == (r["seq"] is None), r
    import hashlib
    assert r["ids_sha256"] == hashlib.sha256("\n".join(sorted(i.lower() for i in ids)).encode()).hexdigest()
    v = verdict(app, r)
    assert all_ok(v), v
    (seq, h) = conn.execute("SELECT seq, encode(entry_hash, 'hex') FROM memory.audit_log WHERE chain_id = 'acme'"
                            " AND event_type = 'memory.forget.receipt' AND payload->>'event_id' = %s", (r["event_id"],)).fetchone()
    assert v["event"][1] == f"seq {seq}, entry_hash {h}"
    # Each member altered (the signature itself too): the check fails, never an error.
    for field, value in [("event_id", "00000000-0000-4000-8000-000000000000"), ("seq", 999), ("entry_hash", "ab" * 32),
                         ("chain_head", {"seq": r["chain_head"]["seq"] + 1, "entry_hash": "ab" * 32}), ("ids_sha256", "cd" * 32), ("count", 2),
                         ("at", "2020-01-01T00:00:00.000000Z"), ("key_id", 99), ("signature", "ef" * 32)]:
        t = dict(r)
        t[field] = value
        if field == "seq":
            t["entry_hash"] = t["entry_hash"] or "ab" * 32
        if field == "entry_hash":
            t["seq"] = t["seq"] or 1
        tv = verdict(app, t)
        assert not tv["signature"][0], (field, tv)
        assert not all_ok(tv), field


def test_a_forgotten_id_back_fails_the_scan(app, conn):
    with connect(app, WRITER) as c:
        ids = remember(c, 2)
        r = c.execute("SELECT memory.forget(%s::uuid[], 'erase')", (ids,)).fetchone()[0]["receipt"]
    assert all_ok(verdict(app, r))
    conn.execute("INSERT INTO memory.observations (id, org_id, user_id, content) VALUES (%s, 'acme', 'u1', 'restored from backup')", (ids[1],))
    v = verdict(app, r)
    assert v["absent"][0] is False and ids[1] in v["absent"][1], v
    assert v["signature"][0] and v["event"][0], "the rest of the receipt still holds"


def test_table_forget_receipt_and_reinsert(app, conn):
    with connect(app, WRITER) as c:
        nids = [c.execute("INSERT INTO app.notes (tenant, uid, body) VALUES ('acme', 'u1', %s) RETURNING id", (f"n{i}",)).fetchone()[0]
                for i in range(3)]
        res = c.execute("SELECT memory.forget('app.notes', %s::text[], 'cleanup')", ([str(n) for n in nids[:2]],)).fetchone()[0]
    r = res["receipt"]
    assert res["forgotten"] == [str(nids[0]), str(nids[1])] and r["count"] == 2
    assert all_ok(verdict(app, r))
    with connect(app, OWNER) as c:
        c.execute("INSERT INTO app.notes (id, tenant, uid, body) VALUES (%s, 'acme', 'u1', 'back again')", (nids[0],))
    v = verdict(app, r)
    assert v["absent"] == (False, f"present again: app.notes: {nids[0]}"), v


def test_erase_subject_receipt_covers_memories_and_tables(app, conn):
    with connect(app, WRITER) as c:
        obs = remember(c, 2, user="subj")
        remember(c, 1, user="other")
        note = c.execute("INSERT INTO app.notes (tenant, uid, body) VALUES ('acme', 'subj', 'x') RETURNING id").fetchone()[0]
    with connect(app, ADMIN) as c:
        res = c.execute("SELECT memory.erase_subject('subj')").fetchone()[0]
    r = res["receipt"]
    assert r["org_id"] == "acme" and r["count"] == 3, res
    assert all_ok(verdict(app, r))
    conn.execute("INSERT INTO app.notes (id, tenant, uid, body) VALUES (%s, 'acme', 'subj', 'x')", (note,))
    assert verdict(app, r)["absent"][0] is False
    # Nothing erased with an id: no receipt.
    with connect(app, ADMIN) as c:
        assert c.execute("SELECT memory.erase_subject('nobody')").fetchone()[0]["receipt"] is None


def test_foreign_and_malformed_receipts_are_refused(app, conn):
    with connect(app, WRITER) as c:
        r = c.execute("SELECT memory.forget(%s::uuid[], 'x')", (remember(c, 1),)).fetchone()[0]["receipt"]
    with connect(app, GLOBEX_ADMIN) as c:
        with pytest.raises(psycopg.DatabaseError) as e:
            c.execute("SELECT * FROM memory.verify_receipt(%s::jsonb)", (json.dumps(r),))
        assert e.value.sqlstate == "42501"
    # Relabelled to the admin's own org, it proves nothing.
    v = verdict(app, dict(r, org_id="globex"), role=GLOBEX_ADMIN)
    assert not any(v[chk][0] for chk in ("signature", "ids", "event", "absent")), v
    # A writer may not verify (memory_admin's).
    with connect(app, WRITER) as c, pytest.raises(psycopg.DatabaseError) as e:
        c.execute("SELECT * FROM memory.verify_receipt(%s::jsonb)", (json.dumps(r),))
    assert e.value.sqlstate == "42501"
    with connect(app, ADMIN) as c:
        for bad in ["[]", "null", '{"org_id": "acme"}', json.dumps(dict(r, extra=1)), json.dumps(dict(r, event_id="x")),
                    json.dumps(dict(r, at="2026-13-45T99:00:00.000000Z")), json.dumps({k: v for k, v in r.items() if k != "signature"})]:
            with pytest.raises(psycopg.DatabaseError) as e:
                c.execute("SELECT * FROM memory.verify_receipt(%s::jsonb)", (bad,))
            assert e.value.sqlstate == "22023", (bad, e.value.sqlstate, str(e.value))
            assert e.value.diag.message_hint


def test_offline_check_with_the_key(app, conn, tmp_path):
    with connect(app, WRITER) as c:
        ids = remember(c, 2)
        r = c.execute("SELECT memory.forget(%s::uuid[], 'offline')", (ids,)).fetchone()[0]["receipt"]
    conn.execute("SELECT memory.audit_integrate()")
    key = conn.execute("SELECT encode(key, 'hex') FROM memory.audit_keys WHERE key_id = %s", (r["key_id"],)).fetchone()[0]
    # The receipt's event as the auditor exports it from the log.
    entry = conn.execute("""SELECT row_to_json(x) FROM (SELECT chain_id, seq, encode(prev_hash, 'hex') AS prev_hash, event_type,
                              to_char(recorded_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS recorded_at, actor_id, org_id,
                              project_id, workspace_id, key_id, payload, encode(entry_hash, 'hex') AS entry_hash
                              FROM memory.audit_log WHERE chain_id = 'acme' AND event_type = 'memory.forget.receipt'
                               AND payload->>'event_id' = %s) x""", (r["event_id"],)).fetchone()[0]
    (tmp_path / "r.json").write_text(json.dumps(r))
    (tmp_path / "ids.txt").write_text("\n".join(i.upper() for i in ids) + "\n")
    (tmp_path / "entry.json").write_text(json.dumps(entry))

    def run(*extra, receipt="r.json"):
        return subprocess.run([sys.executable, SCRIPT, str(tmp_path / receipt), "--key", key, *extra],
                              capture_output=True, text=True)

    ok = run("--ids", str(tmp_path / "ids.txt"), "--entry", str(tmp_path / "entry.json"))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "signature: ok" in ok.stdout and "ids: ok" in ok.stdout and "event: ok" in ok.stdout
    (tmp_path / "t.json").write_text(json.dumps(dict(r, count=5)))
    bad = run(receipt="t.json")
    assert bad.returncode == 1 and "signature: FAILED" in bad.stdout
    (tmp_path / "ids.txt").write_text(ids[0])
    bad = run("--ids", str(tmp_path / "ids.txt"))
    assert bad.returncode == 1 and "ids: FAILED" in bad.stdout


def test_forget_of_nothing_has_no_receipt(app):
    with connect(app, WRITER) as c:
        res = c.execute("SELECT memory.forget(ARRAY['00000000-0000-4000-8000-0000000000aa']::uuid[], 'x')").fetchone()[0]
    assert res["receipt"] is None and res["receipts"] == [] and res["not_found"] == ["00000000-0000-4000-8000-0000000000aa"]


def test_a_receipt_found_in_a_long_chain(app, conn):
    """The event of a receipt issued in deferred mode is found by bisecting the chain: entries
    chained before the forget and after it, on both sides of the receipt's `at`."""
    with connect(app, WRITER) as c:
        ids = remember(c, 40)
    conn.execute("SELECT memory.audit_integrate()")
    with connect(app, WRITER) as c:
        r = c.execute("SELECT memory.forget(%s::uuid[], 'x')", (ids[7:8],)).fetchone()[0]["receipt"]
        remember(c, 5)
    conn.execute("SELECT memory.audit_integrate()")
    with connect(app, WRITER) as c:
        remember(c, 30)
    conn.execute("SELECT memory.audit_integrate()")
    v = verdict(app, r)
    assert all_ok(v), v
