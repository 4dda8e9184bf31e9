"""The audit trail as an application written in Python sees it (SPEC §2).

An independent verifier (verify_chain.py, standard library only) recomputes every hash from the
rows, so these tests check the documented hashing format as well as memory.audit_verify.
"""
import concurrent.futures
import hashlib
import json
import math
import pathlib
import random
import re
import struct
import subprocess
import sys
import threading
import time

import psycopg
import pytest
from psycopg import errors

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import verify_chain  # noqa: E402

APPEND = "SELECT memory.audit_append(%s, %s::jsonb, %s, %s, %s, %s)"


def pytest_generate_tests(metafunc):
    """Every test here runs in both audit modes, except those marked immediate_only (what only
    immediate mode does: deferred mode has its own tests in test_audit_deferred.py). Not run is
    not a skip: under MEMORY_REQUIRE_ALL=1 a skip fails the run."""
    if "audit_mode" in metafunc.fixturenames:
        only = metafunc.definition.get_closest_marker("immediate_only")
        metafunc.parametrize("audit_mode", ["immediate"] if only else ["deferred", "immediate"], indirect=True)


@pytest.fixture(autouse=True)
def audit_mode(request, dsn):
    """The audit mode of the test (memory.audit_mode, the database's default)."""
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(f"ALTER DATABASE {c.info.dbname} SET memory.audit_mode = {request.param}")
    return request.param


def append(conn, payload, org=None, event_type="test.event", project=None, workspace=None, actor=None):
    """Append and return the entry's seq: in deferred mode audit_append returns NULL and the seq
    comes from integrating the pending entry (this session's own, even inside a transaction)."""
    seq = conn.execute(APPEND, (event_type, json.dumps(payload), org, project, workspace, actor)).fetchone()[0]
    if seq is None:
        conn.execute("SELECT memory.audit_integrate()")
        seq = conn.execute("SELECT max(seq) FROM memory.audit_log WHERE chain_id = %s", (org or "",)).fetchone()[0]
    return seq


def py_verify(conn, chain):
    rows, keys, head = verify_chain.load(conn, chain)
    return verify_chain.verify(rows, keys, head)


def ext_verify(conn, chain=None):
    """{chain_id: (entries, ok, first_bad_seq, reason)} from memory.audit_verify."""
    return {r[0]: r[1:5] for r in conn.execute(
        "SELECT chain_id, entries, ok, first_bad_seq, reason FROM memory.audit_verify(%s)", (chain,))}


def chains(conn):
    conn.execute("SELECT memory.audit_integrate()")
    return [r[0] for r in conn.execute("SELECT DISTINCT chain_id FROM memory.audit_log ORDER BY 1")]


class append_only_triggers_disabled:
    """Tampering as a superuser would: disable the append-only triggers of the log for a moment."""

    def __init__(self, conn):
        self.conn = conn

    def __enter__(self):
        self.conn.execute("ALTER TABLE memory.audit_log DISABLE TRIGGER USER")
        # The row trigger is cloned onto each partition and the ALTER recurses to the clones
        # (checked here); TRUNCATE triggers are per partition and stay on, which is fine for
        # UPDATE/DELETE.
        states = self.conn.execute(
            "SELECT t.tgenabled FROM pg_trigger t JOIN pg_inherits i ON i.inhrelid = t.tgrelid "
            "WHERE i.inhparent = 'memory.audit_log'::regclass AND t.tgname = 'memory_append_only'").fetchall()
        assert states and {s for (s,) in states} == {"D"}, states
        return self.conn

    def __exit__(self, *exc):
        self.conn.execute("ALTER TABLE memory.audit_log ENABLE TRIGGER USER")


PAYLOADS = [
    {"nested": {"a": {"b": [1, {"c": None}], "z": {}}}, "list": [], "obj": {}},
    {"text": "Grüße, 東京 😀 \u2028 bell\u0007 tab\t quote\" backslash\\ del\u007f", "ключ": "значение"},
    {"floats": [0.1, 2.5, 1e21, 1e-7, 1.5e-6, 123456.789, 1.0, -0.0, 5e-324, 1.7976931348623157e308],
     "ints": [0, -1, 42, 2**53, 2**53 + 1, 2**63 - 1, -(2**63)], "null": None, "t": True, "f": False, "empty": []},
    # Member order by UTF-16 code units: U+1F600 (D83D DE00) sorts before U+E000, unlike UTF-8.
    {"\ue000": 1, "😀": 2, "a": 3, "A": 4, "é": 5, "aa": 6, "": 7},
    {"deep": [[[[{"x": [0.30000000000000004, 1e-300, -2.5e-10]}]]]]},
]


def test_independent_verifier_agrees_with_extension(conn):
    seqs = {}
    for org in ("acme", "globex"):
        for i, p in enumerate(PAYLOADS):
            s = append(conn, p, org, project=f"p{i % 2}" if i % 3 else None,
                       workspace="ws-1" if i % 2 else None, actor="alice" if i % 2 else None)
            seqs[(org, i)] = s
        conn.execute(
            "INSERT INTO memory.observations (org_id, user_id, workspace_id, content) "
            "SELECT %s, 'u' || g, 'ws-' || (g %% 2), 'note ' || g FROM generate_series(1, 5) g", (org,))
        append(conn, {"after": "insert", "n": 1}, org, event_type="app.after")
    append(conn, {"tenantless": True})  # org NULL: chain ''

    # Payloads round-trip: jsonb equality is numeric, so 1e21 = 1000000000000000000000.
    for (org, i), s in seqs.items():
        (same,) = conn.execute("SELECT payload = %s::jsonb FROM memory.audit_log WHERE chain_id = %s AND seq = %s",
                               (json.dumps(PAYLOADS[i]), org, s)).fetchone()
        assert same, (org, i, PAYLOADS[i])
    (text,) = conn.execute("SELECT payload::text FROM memory.audit_log WHERE chain_id = 'acme' AND seq = %s",
                           (seqs[("acme", 2)],)).fetchone()
    floats = json.loads(text, parse_float=float)["floats"]
    assert [float(x) for x in floats] == PAYLOADS[2]["floats"]

    assert chains(conn) == ["", "acme", "globex"]
    ext = ext_verify(conn)
    for chain in chains(conn):
        rows, keys, head = verify_chain.load(conn, chain)
        assert verify_chain.verify(rows, keys, head) == (True, None, None), chain
        assert ext[chain] == (len(rows), True, None, None)
        assert [r["seq"] for r in rows] == list(range(1, len(rows) + 1))
        assert bytes(rows[0]["prev_hash"]) == bytes(32)
    assert ext["acme"][0] == len(PAYLOADS) + 5 + 1

    # Tamper with a middle entry of acme; both verifiers point at it, globex is untouched.
    mid = seqs[("acme", 2)]
    with append_only_triggers_disabled(conn):
        n = conn.execute("UPDATE memory.audit_log SET payload = payload || '{\"tampered\": true}' "
                         "WHERE chain_id = 'acme' AND seq = %s", (mid,)).rowcount
    assert n == 1
    assert py_verify(conn, "acme") == (False, mid, "hash mismatch")
    entries, ok, bad, reason = ext_verify(conn, "acme")["acme"]
    assert (ok, bad) == (False, mid) and "hash mismatch" in reason
    assert py_verify(conn, "globex") == (True, None, None)
    assert ext_verify(conn, "globex")["globex"][1] is True


def test_verifiers_agree_on_deletion_and_forgery(conn):
    for i in range(10):
        append(conn, {"i": i}, "acme")
    key = bytes(conn.execute("SELECT key FROM memory.audit_keys ORDER BY key_id DESC LIMIT 1").fetchone()[0])

    def both():
        py = py_verify(conn, "acme")
        _, ok, bad, reason = ext_verify(conn, "acme")["acme"]
        assert (ok, bad) == py[:2] and reason.startswith(py[2]), (py, reason)
        return py

    with append_only_triggers_disabled(conn):
        # A row rewritten by someone holding the key: self-consistent, linked to nothing.
        rows, _, _ = verify_chain.load(conn, "acme")
        forged = dict(rows[3], prev_hash=b"\x01" * 32, payload={"i": 3, "forged": True})
        conn.execute("UPDATE memory.audit_log SET prev_hash = %s, payload = %s::jsonb, entry_hash = %s "
                     "WHERE chain_id = 'acme' AND seq = 4",
                     (forged["prev_hash"], json.dumps(forged["payload"]), verify_chain.event_hash(key, forged)))
        assert both() == (False, 4, "broken link")
        conn.execute("DELETE FROM memory.audit_log WHERE chain_id = 'acme' AND seq = 4")
        assert both() == (False, 4, "gap")
        conn.execute("INSERT INTO memory.audit_log SELECT * FROM memory.audit_log WHERE chain_id = 'acme' AND seq = 3")
        assert both() == (False, 3, "reorder")
        conn.execute("DELETE FROM memory.audit_log WHERE chain_id = 'acme' AND seq <= 4")
        assert both() == (False, 1, "gap")
    # Tail removal is only visible against the head.
    with append_only_triggers_disabled(conn):
        conn.execute("DELETE FROM memory.audit_log WHERE chain_id = 'acme'")
    for i in range(3):
        append(conn, {"i": i}, "globex")
    with append_only_triggers_disabled(conn):
        conn.execute("DELETE FROM memory.audit_log WHERE chain_id = 'globex' AND seq = 3")
    rows, keys, head = verify_chain.load(conn, "globex")
    assert verify_chain.verify(rows, keys) == (True, None, None)
    assert verify_chain.verify(rows, keys, head) == (False, 3, "tail missing")
    _, ok, bad, reason = ext_verify(conn, "globex")["globex"]
    assert (ok, bad) == (False, 3) and reason.startswith("tail missing")


def test_raw_content_never_enters_the_log(conn):
    content = "zebra-quokka-7731: the merger closes on Friday"
    user = "alice.wonder@example.com"
    (oid,) = conn.execute(
        "INSERT INTO memory.observations (org_id, user_id, workspace_id, content) VALUES ('acme', %s, 'ws-9', %s) "
        "RETURNING id", (user, content)).fetchone()
    conn.execute("INSERT INTO memory.observations (org_id, user_id, content) VALUES ('acme', %s, 'other')", (user,))
    append(conn, {"k": "v"}, "acme", actor=user)

    (blob,) = conn.execute("SELECT string_agg(payload::text || coalesce(actor_id, ''), '') FROM memory.audit_log").fetchone()
    for secret in (content, "zebra-quokka", "merger", user, "alice.wonder", "example.com"):
        assert secret not in blob, secret

    store = [r[0] for r in conn.execute(
        "SELECT payload FROM memory.audit_log WHERE event_type = 'memory.store' ORDER BY seq")]
    assert len(store) == 2
    p = store[0]
    assert p["id"] == str(oid) and p["table"] == "memory.observations"
    assert p["content_sha256"] == hashlib.sha256(content.encode()).hexdigest()
    assert re.fullmatch(r"h:[0-9a-f]{64}", p["userId"])
    assert store[1]["userId"] == p["userId"]  # a stable pseudonym
    (actor,) = conn.execute("SELECT actor_id FROM memory.audit_log WHERE event_type = 'test.event'").fetchone()
    assert actor == p["userId"] + ";role:postgres"  # actor ids use the same pseudonym, and name the writing role
    assert py_verify(conn, "acme") == (True, None, None)


# ------------------------------------------------------------------------------------------------
# Concurrency (SPEC: 16 writers x 1,000 appends on one chain, mixed isolation, deliberate rollbacks)

WRITERS, TXNS, ROLLBACK_EVERY = 16, 1000, 7
OTHER_WRITERS, OTHER_TXNS, MIX_EVERY = 4, 1000, 10
LEVELS = [psycopg.IsolationLevel.READ_COMMITTED, psycopg.IsolationLevel.REPEATABLE_READ,
          psycopg.IsolationLevel.SERIALIZABLE]
RETRYABLE = (errors.SerializationFailure, errors.DeadlockDetected)


def _writer(dsn, i, start):
    """1,000 transactions on 'onechain'; every 7th rolled back; every 10th also appends to another
    tenant's chain. Retries on 40001/40P01. Returns counts."""
    level = LEVELS[i % 3]
    out = {"level": level.name, "committed": 0, "mixed": 0, "retries": 0, "other": f"other-{i % OTHER_WRITERS}"}
    with psycopg.connect(dsn) as c:
        c.isolation_level = level
        start.wait()
        for j in range(TXNS):
            rollback, mix = j % ROLLBACK_EVERY == ROLLBACK_EVERY - 1, j % MIX_EVERY == 0
            while True:
                try:
                    c.execute(APPEND, ("test.concurrent", json.dumps({"w": i, "j": j}), "onechain", None, None, None))
                    if mix:
                        c.execute(APPEND, ("test.mixed", json.dumps({"w": i, "j": j}), out["other"], None, None, None))
                    if rollback:
                        c.rollback()
                    else:
                        c.commit()
                        out["committed"] += 1
                        out["mixed"] += mix
                    break
                except RETRYABLE:
                    c.rollback()
                    out["retries"] += 1
    return out


def _other_writer(dsn, k, start):
    committed = 0
    with psycopg.connect(dsn) as c:
        start.wait()
        t0 = time.monotonic()
        for j in range(OTHER_TXNS):
            c.execute(APPEND, ("test.other", json.dumps({"j": j}), f"other-{k}", None, None, None))
            c.commit()
            committed += 1
    return {"chain": f"other-{k}", "committed": committed, "seconds": time.monotonic() - t0}


def test_concurrent_writers_one_chain(dsn, conn):
    start = threading.Barrier(WRITERS + OTHER_WRITERS)
    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(WRITERS + OTHER_WRITERS) as pool:
        main = [pool.submit(_writer, dsn, i, start) for i in range(WRITERS)]
        other = [pool.submit(_other_writer, dsn, k, start) for k in range(OTHER_WRITERS)]
        results = [f.result() for f in main]
        others = [f.result() for f in other]
    elapsed = time.monotonic() - t0

    total = sum(r["committed"] for r in results)
    per_level = {}
    for r in results:
        agg = per_level.setdefault(r["level"], {"committed": 0, "retries": 0})
        agg["committed"] += r["committed"]
        agg["retries"] += r["retries"]
    print(f"\nconcurrency: {WRITERS}x{TXNS} txns + {OTHER_WRITERS}x{OTHER_TXNS} on other chains in {elapsed:.1f}s; "
          f"committed on onechain {total}; per level {per_level}; "
          f"other writers {[round(o['seconds'], 1) for o in others]}s")

    conn.execute("SELECT memory.audit_integrate()")  # deferred mode: chain what was committed
    expected_per_writer = TXNS - TXNS // ROLLBACK_EVERY
    assert all(r["committed"] == expected_per_writer for r in results)
    assert per_level["READ_COMMITTED"]["retries"] == 0  # RC waits for the head lock, never fails

    n, lo, hi, distinct = conn.execute(
        "SELECT count(*), min(seq), max(seq), count(DISTINCT seq) FROM memory.audit_log WHERE chain_id = 'onechain'").fetchone()
    assert (n, lo, hi, distinct) == (total, 1, total, total)
    (head,) = conn.execute("SELECT seq FROM memory.audit_heads WHERE chain_id = 'onechain'").fetchone()
    assert head == total
    assert ext_verify(conn, "onechain")["onechain"] == (total, True, None, None)
    assert py_verify(conn, "onechain") == (True, None, None)

    for o in others:
        chain = o["chain"]
        mixed = sum(r["mixed"] for r in results if r["other"] == chain)
        (cnt,) = conn.execute("SELECT count(*) FROM memory.audit_log WHERE chain_id = %s", (chain,)).fetchone()
        assert cnt == o["committed"] + mixed, chain
        assert ext_verify(conn, chain)[chain] == (cnt, True, None, None)
        assert py_verify(conn, chain) == (True, None, None)


@pytest.mark.immediate_only
def test_other_tenants_do_not_wait(dsn, conn, audit_mode):
    """Immediate mode: a writer holds its chain's head until it commits; other chains never wait.
    (Deferred mode takes no chain lock at all: test_audit_deferred.py.)"""
    append(conn, {}, "onechain")
    with psycopg.connect(dsn) as holder, psycopg.connect(dsn, autocommit=True) as other:
        append(holder, {"holding": True}, "onechain")  # open transaction: holds onechain's head
        other.execute("SET lock_timeout = '5s'")
        t0 = time.monotonic()
        assert append(other, {}, "another-tenant") == 1
        assert time.monotonic() - t0 < 2
        other.execute("SET lock_timeout = '200ms'")
        with pytest.raises(errors.LockNotAvailable):
            append(other, {}, "onechain")
        holder.commit()
        other.execute("SET lock_timeout = '5s'")
        assert append(other, {}, "onechain") == 3


def test_rolled_back_append_leaves_no_gap(dsn, conn):
    assert append(conn, {"n": 1}, "acme") == 1
    with psycopg.connect(dsn) as c:
        assert append(c, {"n": 2}, "acme") == 2
        c.execute("INSERT INTO memory.observations (org_id, content) VALUES ('acme', 'rolled back')")
        c.rollback()
    assert append(conn, {"n": 3}, "acme") == 2
    with pytest.raises(psycopg.DatabaseError):
        with conn.transaction():
            append(conn, {"n": 4}, "acme")
            conn.execute("SELECT 1/0")
    assert append(conn, {"n": 5}, "acme") == 3
    assert [r[0] for r in conn.execute("SELECT seq FROM memory.audit_log WHERE chain_id = 'acme' ORDER BY seq")] == [1, 2, 3]
    assert conn.execute("SELECT seq FROM memory.audit_heads WHERE chain_id = 'acme'").fetchone() == (3,)
    assert py_verify(conn, "acme") == (True, None, None)
    assert ext_verify(conn, "acme")["acme"][1] is True


# ------------------------------------------------------------------------------------------------
# Privileges and append-only


@pytest.fixture
def app_conn(dsn, conn):
    conn.execute("DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'app') THEN "
                 "CREATE ROLE app LOGIN; END IF; END $$")
    with psycopg.connect(dsn.replace("user=postgres", "user=app"), autocommit=True) as c:
        yield c


ROW = ("('c', 1, 'forged', now(), NULL, NULL, NULL, NULL, '{}', 1, "
       "'\\x0000000000000000000000000000000000000000000000000000000000000000', '\\x00')")


@pytest.mark.parametrize("sql", [
    "SELECT * FROM memory.audit_keys",
    "SELECT * FROM memory.audit_secrets",
    f"INSERT INTO memory.audit_log VALUES {ROW}",
    f"INSERT INTO memory.audit_log_default VALUES {ROW}",
    "UPDATE memory.audit_log SET seq = 1",
    "DELETE FROM memory.audit_log",
    "TRUNCATE memory.audit_log",
    "UPDATE memory.audit_heads SET seq = 0",
    "SELECT memory_internal._audit_append('x', '{}', 'org-app', NULL, NULL, NULL)",
    "SELECT memory.audit_rotate_key()",
])
def test_app_role_cannot_touch_the_log_directly(conn, app_conn, sql):
    append(conn, {"before": True}, "org-app")
    with pytest.raises(psycopg.DatabaseError) as exc:
        app_conn.execute(sql)
    assert exc.value.sqlstate == "42501", str(exc.value)


def test_app_role_appends_through_the_function(conn, app_conn, audit_mode):
    # Not for PUBLIC: a role needs memory_writer and an org it may act for (SPEC §8).
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        app_conn.execute("SELECT memory.audit_append('x', '{}', 'org-app')")
    conn.execute("SELECT memory.setup_roles()")
    conn.execute("GRANT memory_writer TO app")
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        app_conn.execute("SELECT memory.audit_append('x', '{}', 'org-app')")
    conn.execute("SELECT memory.grant_org('app', 'org-app')")  # seq 1 of the chain: memory.org.grant
    deferred = audit_mode == "deferred"
    assert app_conn.execute("SELECT memory.audit_append('x', '{}', 'org-app')").fetchone() == ((None,) if deferred else (2,))
    assert app_conn.execute("SELECT memory.audit_append('x', '{\"n\": 2}', 'org-app')").fetchone() == ((None,) if deferred else (3,))
    conn.execute("SELECT memory.audit_integrate()")
    (actor,) = conn.execute("SELECT actor_id FROM memory.audit_log WHERE chain_id = 'org-app' AND seq = 2").fetchone()
    assert actor == "role:app"  # the calling role, not the SECURITY DEFINER owner
    assert py_verify(conn, "org-app") == (True, None, None)


def _partitions(conn):
    return [r[0] for r in conn.execute(
        "SELECT inhrelid::regclass::text FROM pg_inherits WHERE inhparent = 'memory.audit_log'::regclass ORDER BY 1")]


@pytest.mark.parametrize("sql", ["UPDATE {t} SET seq = seq", "UPDATE {t} SET payload = '{{}}'",
                                 "DELETE FROM {t}", "TRUNCATE {t}"])
def test_append_only_even_for_superuser(conn, sql):
    for i in range(3):
        append(conn, {"i": i}, "acme")
    conn.execute("SELECT memory.audit_ensure_partitions(6)")  # partitions made later are covered too
    (holding,) = conn.execute("SELECT DISTINCT tableoid::regclass::text FROM memory.audit_log").fetchone()
    assert holding in _partitions(conn)
    targets = ["memory.audit_log", holding]
    if sql.startswith("TRUNCATE"):
        targets += [p for p in _partitions(conn) if p != holding]
    for t in targets:
        with pytest.raises(psycopg.DatabaseError) as exc:
            conn.execute(sql.format(t=t))
        assert exc.value.sqlstate == "MX002", (t, str(exc.value))
        assert "append-only" in str(exc.value)
    assert conn.execute("SELECT count(*) FROM memory.audit_log").fetchone() == (3,)
    assert ext_verify(conn, "acme")["acme"] == (3, True, None, None)


# ------------------------------------------------------------------------------------------------
# More agreement: random doubles and random Unicode, and the verifier's command line


def _random_payloads(rng, n):
    def double():
        while True:
            x = struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0]
            if math.isfinite(x):
                return x

    def text():
        cps = [rng.choice([rng.randint(1, 0x7f), rng.randint(0x80, 0xd7ff), rng.randint(0xe000, 0xffff),
                           rng.randint(0x10000, 0x10ffff)]) for _ in range(rng.randint(0, 8))]
        return "".join(map(chr, cps))

    for _ in range(n):
        yield {"doubles": [double() for _ in range(20)],
               "decimals": [round(rng.uniform(-1e6, 1e6), rng.randint(0, 12)) * 10.0 ** rng.randint(-30, 30) for _ in range(20)],
               "ints": [rng.randint(-(2**63), 2**63 - 1) for _ in range(5)] + [rng.randint(-(2**53), 2**53) for _ in range(5)],
               **{text(): text() for _ in range(10)}}


def test_verifier_agrees_on_random_payloads(conn):
    rng = random.Random(8785)
    payloads = list(_random_payloads(rng, 40))
    for p in payloads:
        append(conn, p, "fuzz")
    assert py_verify(conn, "fuzz") == (True, None, None)
    assert ext_verify(conn, "fuzz")["fuzz"] == (len(payloads), True, None, None)
    rows, _, _ = verify_chain.load(conn, "fuzz")
    for p, row in zip(payloads, rows):
        stored = json.loads(row["payload"], parse_float=float)
        assert [float(x) for x in stored["doubles"]] == p["doubles"]  # doubles survive exactly
        assert stored["ints"] == p["ints"]  # i64 range is kept exactly
        assert {k: v for k, v in stored.items() if isinstance(v, str)} == {k: v for k, v in p.items() if isinstance(v, str)}


def test_verifier_command_line(dsn, conn):
    for i in range(5):
        append(conn, {"i": i}, "acme")
    cli = [sys.executable, str(pathlib.Path(verify_chain.__file__)), dsn, "acme"]
    ok = subprocess.run(cli, capture_output=True, text=True)
    assert ok.returncode == 0 and "5 entries, ok" in ok.stdout, ok.stdout + ok.stderr
    with append_only_triggers_disabled(conn):
        conn.execute("UPDATE memory.audit_log SET event_type = 'edited' WHERE chain_id = 'acme' AND seq = 3")
    bad = subprocess.run(cli, capture_output=True, text=True)
    assert bad.returncode == 1 and "FAILED at seq 3: hash mismatch" in bad.stdout, bad.stdout + bad.stderr


# ------------------------------------------------------------------------------------------------
# Regressions for defects found while writing these tests (fixed).


@pytest.mark.parametrize("number", ["123456789012345678901234567890", "0.1000000000000000000000001", "1e-400"])
def test_payload_numbers_are_stored_as_given(conn, number):
    append_raw = "SELECT memory.audit_append('n', ('{\"v\": ' || %s || '}')::jsonb, 'acme')"
    conn.execute(append_raw, (number,))
    conn.execute("SELECT memory.audit_integrate()")
    (same,) = conn.execute("SELECT payload->'v' = %s::jsonb FROM memory.audit_log WHERE chain_id = 'acme'", (number,)).fetchone()
    assert same, conn.execute("SELECT payload::text FROM memory.audit_log WHERE chain_id = 'acme'").fetchone()


@pytest.mark.parametrize("payload", ['{"v": 1e400}', '{"a":' * 128 + "1" + "}" * 128])
def test_unrepresentable_payload_is_a_bad_argument(conn, payload):
    with pytest.raises(psycopg.DatabaseError) as exc:
        conn.execute("SELECT memory.audit_append('n', %s::jsonb, 'acme')", (payload,))
    assert exc.value.sqlstate == "22023", (exc.value.sqlstate, str(exc.value)[:200])


def test_event_type_limit_counts_characters(conn):
    assert append(conn, {}, "acme", event_type="é" * 150) == 1


@pytest.mark.immediate_only
def test_backend_killed_mid_transaction_leaves_no_gap(dsn, audit_mode):
    """A writer terminated while it holds the chain head: its appends vanish, the next writer
    continues the chain, and the chain verifies (SPEC §7, a backend killed mid-transaction).
    (Deferred mode: killed writers and a killed sequencer, test_audit_deferred.py.)"""
    import threading

    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute("SELECT memory.audit_append('before', '{}', 'killchain')")
        victim = psycopg.connect(dsn)
        pid = victim.execute("SELECT pg_backend_pid()").fetchone()[0]
        for i in range(50):
            victim.execute("SELECT memory.audit_append('doomed', %s::jsonb, 'killchain')", (json.dumps({"i": i}),))
        # A second writer queues behind the victim's head lock.
        done = {}

        def other():
            with psycopg.connect(dsn, autocommit=True) as c:
                done["seq"] = c.execute("SELECT memory.audit_append('after', '{}', 'killchain')").fetchone()[0]

        t = threading.Thread(target=other)
        t.start()
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        t.join(timeout=30)
        assert done.get("seq") == 2, done
        rows = admin.execute("SELECT seq, event_type FROM memory.audit_log WHERE chain_id = 'killchain' ORDER BY seq").fetchall()
        assert rows == [(1, "before"), (2, "after")]
        assert admin.execute("SELECT ok, entries FROM memory.audit_verify('killchain')").fetchone() == (True, 2)
        try:
            victim.close()
        except psycopg.Error:
            pass


def test_the_actor_follows_the_role_name_and_the_application_actor(dsn, conn):
    """The appender keeps the last actor_id per backend (an agent's session writes as the same
    role statement after statement): a role renamed meanwhile, another memory.actor_id, or the
    same session acting through another role's SECURITY DEFINER function is each recorded as it
    is at the time of the write."""
    conn.execute("SELECT memory.setup_roles()")
    conn.execute("DROP ROLE IF EXISTS actor_renamed")
    conn.execute("DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'actor_first') THEN "
                 "CREATE ROLE actor_first LOGIN; END IF; END $$")
    conn.execute("GRANT memory_writer TO actor_first")
    conn.execute("SELECT memory.grant_org('actor_first', 'org-act')")
    with psycopg.connect(dsn.replace("user=postgres", "user=actor_first"), autocommit=True) as w:
        w.execute("SET memory.org_id = 'org-act'")

        def store(note):
            w.execute("INSERT INTO memory.observations (org_id, content) VALUES ('org-act', %s)", (note,))
        store("one")
        store("two")
        conn.execute("ALTER ROLE actor_first RENAME TO actor_renamed")
        try:
            # (Org grants name roles: the renamed role is granted the org under its new name.)
            conn.execute("SELECT memory.grant_org('actor_renamed', 'org-act')")
            store("three")
            w.execute("SET memory.actor_id = 'agent-7'")
            store("four")
            w.execute("SET memory.actor_id = 'agent-8'")
            store("five")
            w.execute("RESET memory.actor_id")
            store("six")
        finally:
            conn.execute("ALTER ROLE actor_renamed RENAME TO actor_first")
    conn.execute("SELECT memory.audit_integrate()")
    rows = conn.execute("SELECT payload->>'content_sha256', actor_id FROM memory.audit_log"
                        " WHERE chain_id = 'org-act' AND event_type = 'memory.store' ORDER BY seq").fetchall()
    actors = [a for _, a in rows]
    assert actors[0] == actors[1] == "role:actor_first", actors
    assert actors[2] == actors[5] == "role:actor_renamed", actors
    assert actors[3].endswith(";role:actor_renamed") and actors[3].startswith("h:"), actors
    assert actors[4].endswith(";role:actor_renamed") and actors[4] != actors[3], actors
