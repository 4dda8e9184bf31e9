"""memory-mcp (issue 39): a real MCP client (the Python `mcp` SDK) drives the built binary over
stdio against a cluster, logged in as the application's tenant-bound roles (test_app_roles' `app`
fixture). Every rule is the database's: the tools answer with its rows, and its refusals come
back as MCP tool errors carrying the SQLSTATE, message, detail and hint, changing nothing.

The binary: $MEMORY_MCP_BIN when set (make test-mcp), else `cargo build -p memory-mcp` (debug).
"""
import asyncio
import contextlib
import hashlib
import http.client as http_client
import json
import os
import re
import pathlib
import secrets
import select
import shutil
import socket
import ssl
import struct
import subprocess
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer, ThreadingHTTPServer

import jsonschema
import jwt
import psycopg
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import Implementation

import verify_chain
from conftest import CLUSTER, ROOT, connect, ensure_role, fresh_database
from test_app_roles import ADMIN, GLOBEX, READER, WRITER, app  # noqa: F401  (the fixture)

CLIENT = "pytest-agent"
READ_TOOLS = {"recall", "retrieve", "claim_chain", "search", "get", "context", "history", "lineage"}
ALL_TOOLS = READ_TOOLS | {"remember", "forget", "put", "delete", "supersede", "record_outcome"}
# The key of the list a list-returning tool answers in its structured content.
LISTS = {"recall": "memories", "retrieve": "claims", "claim_chain": "chain", "search": "items", "record_outcome": "results",
         "history": "versions", "lineage": "lineage"}
# memory-mcp's record of each call (issue 51): remember's is the memory.store of its own INSERT,
# carrying mcp_tool and mcp_client; every other tool's a memory.mcp.tool_invoked (tool, client, count).
CALLS = ("SELECT coalesce(payload->>'tool', payload->>'mcp_tool') AS tool, coalesce(payload->>'client', payload->>'mcp_client') AS client, "
         "coalesce(payload->'count', '1') AS count, event_type, payload, actor_id, chain_id, seq FROM memory.audit_log "
         "WHERE event_type = 'memory.mcp.tool_invoked' OR (event_type = 'memory.store' AND payload ? 'mcp_tool')")
STORE_KEYS = {"classification", "content_sha256", "id", "mcp_client", "mcp_tool", "table", "userId"}


@pytest.fixture(scope="module")
def binary():
    if os.environ.get("MEMORY_MCP_BIN"):
        return os.environ["MEMORY_MCP_BIN"]
    subprocess.run(["cargo", "build", "-q", "-p", "memory-mcp"], cwd=ROOT, check=True)
    target = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    return str(target / "debug" / "memory-mcp")


def url(dsn, role):
    return dsn.replace("user=postgres", f"user={role}")


@contextlib.asynccontextmanager
async def session(binary, dsn, role, *args):
    params = StdioServerParameters(command=binary, args=["--database-url", url(dsn, role), *args],
                                   env={"PATH": os.environ.get("PATH", "")})
    with open(os.devnull, "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (r, w):
            async with ClientSession(r, w, client_info=Implementation(name=CLIENT, version="1.0")) as s:
                await s.initialize()
                yield s


def run(coro):
    return asyncio.run(coro)


async def answer(s, tool, **arguments):
    """The tool's structured answer, checked against the output schema the tool list gives (MCP
    2025-06-18) and equal to its text content; fails on a tool error."""
    res = await s.call_tool(tool, arguments)
    assert not res.is_error, (tool, res.content)
    out = res.structured_content
    assert isinstance(out, dict) and out == json.loads(res.content[0].text), (tool, res)
    schemas = {t.name: t.output_schema for t in (await s.list_tools()).tools}
    assert schemas[tool], f"{tool} lists an output schema"
    jsonschema.validate(out, schemas[tool])
    return out


async def ok(s, tool, **arguments):
    """The tool's answer: the list of a list-returning tool, else its structured answer."""
    out = await answer(s, tool, **arguments)
    return out[LISTS[tool]] if tool in LISTS else out


async def refused(s, tool, **arguments):
    """The tool error's fields (sqlstate, message, detail, hint); fails on success."""
    res = await s.call_tool(tool, arguments)
    assert res.is_error, (tool, res.content)
    err = res.structured_content
    assert err == json.loads(res.content[0].text)
    return err


def start_failure(binary, dsn, role, *args):
    """memory-mcp refusing to start: its exit code and stderr."""
    p = subprocess.run([binary, "--database-url", url(dsn, role), *args], input="", capture_output=True, text=True, timeout=30)
    return p.returncode, p.stderr


def test_tools_remember_recall_forget_and_the_audit_trail(binary, app, conn):
    async def go():
        async with session(binary, app, WRITER) as s:
            tools = (await s.list_tools()).tools
            assert {t.name for t in tools} == ALL_TOOLS
            for t in tools:
                assert len(t.description) > 40 and t.input_schema["type"] == "object", t.name
                assert t.input_schema.get("required") or t.name == "search", t.name
                assert t.output_schema["type"] == "object" and t.output_schema["required"], t.name
            got = await ok(s, "remember", content="rotate the api_key of the billing service", user_id="u1",
                           session_id="s1", metadata={"topic": "ops"})
            assert got["classification"] == "confidential", "the database classified it"
            found = await ok(s, "recall", query="billing api_key", k=5)
            assert [(m["id"], m["classification"]) for m in found] == [(got["id"], "confidential")]
            assert set(found[0]) == {"id", "content", "classification", "weight", "score"}
            listed = await ok(s, "recall", query="", filters={"user_id": "u1"})
            assert [(m["id"], m["score"]) for m in listed] == [(got["id"], None)], "a blank query with filters lists the newest"
            gone = await ok(s, "forget", ids=[got["id"]], reason="user request #1")
            assert gone["forgotten"] == [got["id"]] and gone["not_found"] == []
            assert await ok(s, "recall", query="billing api_key") == []
            return got["id"]

    oid = run(go())
    assert conn.execute("SELECT count(*) FROM memory.observations WHERE id = %s", (oid,)).fetchone() == (0,)
    conn.execute("SELECT memory.audit_integrate()")
    events = conn.execute(f"SELECT payload, actor_id, tool, count, event_type, client FROM ({CALLS}) c WHERE chain_id = 'acme' ORDER BY seq").fetchall()
    assert [e[2] for e in events] == ["remember", "recall", "recall", "forget", "recall"]
    assert [e[3] for e in events] == [1, 1, 1, 1, 0]
    # remember's record is its own write's event: no separate one.
    assert [e[4] for e in events] == ["memory.store"] + ["memory.mcp.tool_invoked"] * 4
    assert set(events[0][0]) <= STORE_KEYS and events[0][0]["table"] == "memory.observations" and events[0][0]["id"] == oid
    assert all(set(p) == {"tool", "client", "count"} for p, *_ in events[1:]) and all(e[5] == CLIENT for e in events), \
        "never content or the query"
    # The actor is the client, pseudonymised (memory.actor_id = mcp:<client>), and the role.
    assert all(e[1].startswith("h:") and e[1].endswith("role:app_writer") for e in events), events[0][1]
    assert conn.execute("SELECT count(*) FROM memory.audit_log WHERE chain_id = 'acme' AND event_type IN ('memory.recall', 'memory.forget')"
                        ).fetchone()[0] == 4, "the functions' own events, besides memory-mcp's"
    assert all(ok_ for (ok_,) in conn.execute("SELECT ok FROM memory.audit_verify('acme')").fetchall())
    # The offline checker (standard library only) verifies the chain with the call in a memory.store.
    rows, keys, head = verify_chain.load(conn, "acme")
    assert verify_chain.verify(rows, keys, head) == (True, None, None)


def test_read_only_lists_no_writes_and_refuses_them(binary, app, conn):
    async def go():
        async with session(binary, app, READER, "--read-only") as s:
            assert {t.name for t in (await s.list_tools()).tools} == READ_TOOLS
            for tool, args in (("remember", {"content": "x"}), ("forget", {"ids": [], "reason": "r"})):
                with pytest.raises(MCPError) as e:
                    await s.call_tool(tool, args)
                assert "read-only" in str(e.value)
            assert await ok(s, "recall", query="anything") == []

    run(go())
    assert conn.execute("SELECT count(*) FROM memory.observations").fetchone() == (0,)


def test_another_orgs_ids_are_not_found(binary, app, conn):
    async def go():
        async with session(binary, app, GLOBEX) as s:
            theirs = (await ok(s, "remember", content="globex roadmap"))["id"]
        async with session(binary, app, WRITER) as s:
            assert (await ok(s, "forget", ids=[theirs], reason="probe"))["not_found"] == [theirs]
            assert await ok(s, "recall", query="globex roadmap") == []
            claim = conn.execute("SELECT id::text FROM memory.claims WHERE org_id = 'globex'").fetchone()[0]
            err = await refused(s, "claim_chain", claim_id=claim)
            assert err["sqlstate"] == "P0002", err
        return theirs

    conn.execute("INSERT INTO memory.entities (id, org_id, entity_type, name) VALUES "
                 "('e0000000-0000-0000-0000-0000000000b1', 'globex', 'concept', 'g')")
    conn.execute("INSERT INTO memory.claims (org_id, entity_id, claim_text, source, confidence_score) VALUES "
                 "('globex', 'e0000000-0000-0000-0000-0000000000b1', 'globex claim', 'PubMed', 0.4)")
    theirs = run(go())
    assert conn.execute("SELECT org_id FROM memory.observations WHERE id = %s", (theirs,)).fetchone() == ("globex",)


INVOICES = "e0000000-0000-0000-0000-0000000000a1"


def active_claim(conn):
    """An active acme claim about invoices, as tests/python/test_retrieve.py makes claims: field
    'due', 10 days old, so the 'billing' screen profile (due: 5 days) finds it stale. Its id."""
    conn.execute("INSERT INTO memory.entities (id, org_id, entity_type, name) VALUES (%s, 'acme', 'concept', 'invoices')", (INVOICES,))
    (cid,) = conn.execute("INSERT INTO memory.claims (org_id, entity_id, claim_text, source, confidence_score, field, t_created) VALUES "
                          "('acme', %s, 'invoices are paid within 30 days', 'PubMed', 0.8, 'due', now() - '10 days'::interval) "
                          "RETURNING id::text", (INVOICES,)).fetchone()
    conn.execute("UPDATE memory.claims SET lifecycle_state = 'active' WHERE id = %s", (cid,))
    conn.execute("INSERT INTO memory.screen_profiles (org_id, profile, field, freshness_days) VALUES ('acme', 'billing', 'due', 5)")
    return cid


def test_claim_chain(binary, app, conn):
    cid = active_claim(conn)

    async def go():
        async with session(binary, app, READER, "--read-only") as s:
            chain = await ok(s, "claim_chain", claim_id=cid)
            assert [(r["depth"], r["claim_id"], r["lifecycle_state"]) for r in chain] == [(0, cid, "active")]
            assert (await refused(s, "claim_chain", claim_id="not-a-uuid"))["sqlstate"] == "22P02"

    run(go())


RETRIEVE_COLUMNS = {"id", "entity", "claim_text", "field", "kind", "source", "supports", "subject_id", "confidence_score",
                    "classification", "score", "t_created", "decay_at", "stale_fields", "lexical_rank", "vector_rank"}


def test_retrieve(binary, app, conn):
    """retrieve is memory.retrieve: its rows by column name, its ranking, screening profile and consent scope."""
    cid = active_claim(conn)
    (ucid,) = conn.execute("INSERT INTO memory.claims (org_id, entity_id, claim_text, source, confidence_score, subject_id) VALUES "
                           "('acme', %s, 'invoices of u1 are paid late', 'PubMed', 0.5, 'u1') RETURNING id::text", (INVOICES,)).fetchone()
    conn.execute("UPDATE memory.claims SET lifecycle_state = 'active' WHERE id = %s", (ucid,))
    with connect(app, WRITER) as c:
        c.execute("SELECT memory.grant_consent('acme', 'u1', '{save_to_profile}')")

    async def go():
        async with session(binary, app, READER, "--read-only") as s:
            rows = await ok(s, "retrieve", query="invoices paid", k=5)
            assert [r["id"] for r in rows] == [cid], "without user_id no claim about a user"
            assert set(rows[0]) == RETRIEVE_COLUMNS
            r = rows[0]
            assert (r["entity"], r["field"], r["source"], r["confidence_score"]) == (INVOICES, "due", "PubMed", 0.8)
            assert r["score"] > 0 and r["stale_fields"] is None, "no profile: no freshness marks"
            rows = await ok(s, "retrieve", query="", entity_id=INVOICES, screen_profile="billing")
            assert [(r["id"], r["score"], r["stale_fields"]) for r in rows] == [(cid, None, ["due"])], \
                "a blank query with entity_id lists its claims; the 10-day-old 'due' is stale for a 5-day rule"
            rows = await ok(s, "retrieve", query="invoices paid", user_id="u1")
            assert [(r["id"], r["subject_id"]) for r in rows] == [(cid, None), (ucid, "u1")], "u1 consented: the claim about u1 too"
            assert rows[1]["classification"] == "restricted", "a claim about a user is restricted"

    run(go())
    conn.execute("SELECT memory.audit_integrate()")
    assert conn.execute("SELECT payload FROM memory.audit_log WHERE chain_id = 'acme' AND event_type = 'memory.retrieval.hybrid' ORDER BY seq"
                        ).fetchall() == [({"count": 1},), ({"count": 1},), ({"count": 2},)]
    assert conn.execute("SELECT payload->>'count' FROM memory.audit_log WHERE chain_id = 'acme' AND event_type = 'memory.mcp.tool_invoked' "
                        "ORDER BY seq").fetchall() == [("1",), ("1",), ("2",)]


def test_refusals_carry_sqlstate_message_and_hint_and_change_nothing(binary, app, conn):
    ensure_role(conn, "mcp_low", "memory_writer")
    conn.execute("SELECT memory.grant_org('mcp_low', 'acme', 'internal')")
    with conn.cursor() as c:
        (held,) = c.execute("INSERT INTO memory.observations (org_id, user_id, content) VALUES ('acme', 'u7', 'case notes') "
                            "RETURNING id::text").fetchone()
    conn.execute("INSERT INTO memory.legal_holds (org_id, user_id, reason) VALUES ('acme', 'u7', 'litigation')")
    before = conn.execute("SELECT count(*) FROM memory.observations").fetchone()

    async def go():
        async with session(binary, app, WRITER) as s:
            err = await refused(s, "recall", query="x", k=0)
            assert err["sqlstate"] == "22023" and "k must be between 1 and 1000" in err["message"] and err["hint"], err
            err = await refused(s, "recall", query="x", filters={"colour": "red"})
            assert err["sqlstate"] == "22023" and err["hint"], err
            err = await refused(s, "forget", ids=[held], reason="user request #2")
            assert err["sqlstate"] == "MX006" and "legal hold" in err["message"] and err["hint"], err
            assert (await refused(s, "remember", content="x", memory_type="forever"))["sqlstate"] == "22P02"
            assert (await refused(s, "remember", content="x", metadata=[1]))["sqlstate"] == "22023", "the database's check, not the schema's"
            assert (await refused(s, "forget", ids=["not-a-uuid"], reason="r"))["sqlstate"] == "22P02"
            assert (await refused(s, "forget", ids=[held], reason=" "))["sqlstate"] == "22023"
            err = await refused(s, "retrieve", query="case notes", user_id="u8")
            assert err["sqlstate"] == "MX003" and err["detail"] == "required_scopes: save_to_profile", "u8 never consented"
            err = await refused(s, "retrieve", query="case notes", screen_profile="nope")
            assert err["sqlstate"] == "22023" and "nope" in err["message"] and err["hint"], err
            # The org's grant revoked while the server runs: the next call is refused, naming the fix.
            conn.execute("SELECT memory.revoke_org(%s, 'acme')", (WRITER,))
            err = await refused(s, "recall", query="case notes")
            assert err["sqlstate"] == "42501" and "memory.grant_org" in err["hint"], err
            conn.execute("SELECT memory.grant_org(%s, 'acme')", (WRITER,))
        async with session(binary, app, "mcp_low") as s:
            err = await refused(s, "remember", content="rotate the api_key of the billing service")
            assert err["sqlstate"] == "42501", "RETURNING reads a row above the writer's clearance"

    run(go())
    assert conn.execute("SELECT count(*) FROM memory.observations").fetchone() == before, "no refused write changed anything"
    conn.execute("SELECT memory.audit_integrate()")
    assert conn.execute("SELECT count(*) FROM memory.audit_log WHERE event_type IN ('memory.mcp.tool_invoked', 'memory.retrieval.hybrid')"
                        ).fetchone() == (0,), "a refused call's transaction, its audit record with it, is rolled back"
    assert conn.execute(f"SELECT count(*) FROM ({CALLS}) c").fetchone() == (0,), "a refused remember records no call either"


def test_refuses_to_start_for_unbound_or_unrestricted_roles(binary, app, conn):
    code, err = start_failure(binary, app, "postgres")
    assert code == 2 and "superuser" in err and "memory.grant_org" in err, err
    ensure_role(conn, "mcp_star", "memory_writer")
    conn.execute("SELECT memory.grant_org('mcp_star', '*')")
    code, err = start_failure(binary, app, "mcp_star")
    assert code == 2 and "'*'" in err and "--org" in err, err
    ensure_role(conn, "mcp_nobody", "memory_writer")
    code, err = start_failure(binary, app, "mcp_nobody")
    assert code == 2 and "no org" in err, err
    code, err = start_failure(binary, app, WRITER, "--org", "globex")
    assert code == 2 and "42501" in err and "may not act for" in err, err

    async def go():  # '*' with --org serves that org
        async with session(binary, app, "mcp_star", "--org", "globex") as s:
            assert (await ok(s, "remember", content="globex note"))["classification"]

    run(go())
    assert conn.execute("SELECT org_id FROM memory.observations").fetchall() == [("globex",)]


def test_refuses_to_start_for_a_member_of_the_extension_owner(binary, app, conn):
    """A login role that inherits the extension owner's privileges is unrestricted (memory_ext acts
    for every org for it, and row-level security lets the owner's members through), though it is
    neither a superuser nor the owner itself: it must not serve one tenant either."""
    owner = conn.execute("SELECT extowner::regrole::text FROM pg_extension WHERE extname = 'memory_ext'").fetchone()[0]
    ensure_role(conn, "mcp_ownerish", "memory_writer")
    conn.execute(f"GRANT {owner} TO mcp_ownerish")
    try:
        conn.execute("SELECT memory.grant_org('mcp_ownerish', 'acme')")
        code, err = start_failure(binary, app, "mcp_ownerish")
        assert code == 2 and "owner" in err and "memory.grant_org" in err, (code, err)
    finally:
        conn.execute(f"REVOKE {owner} FROM mcp_ownerish")


# ---- HTTP (issue 53 findings 9 and 10, issue 51): Origin, sessions, authorization ----

def free_port():
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        return sk.getsockname()[1]


@contextlib.contextmanager
def http_server(binary, dsn, role, *args, env=None):
    """memory-mcp --http on a free loopback port, logged in as `role`; yields (port, process)."""
    port = free_port()
    proc = subprocess.Popen([binary, "--database-url", url(dsn, role), "--http", f"127.0.0.1:{port}", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    try:
        lines = []
        while not any("serving streamable HTTP" in line for line in lines):
            line = proc.stderr.readline()
            assert line, ("memory-mcp exited", proc.wait(), lines)
            lines.append(line)
        yield port, proc
    finally:
        proc.terminate()
        proc.wait(timeout=10)


INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw-agent", "version": "1"}}}


def http(port, method="POST", body=INIT, headers=None, path="/mcp"):
    """One raw HTTP request: (status, headers with lower-case names, body bytes)."""
    c = http_client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        c.request(method, path, json.dumps(body) if body is not None and method == "POST" else None,
                  {"Content-Type": "application/json", "Accept": "application/json, text/event-stream", **(headers or {})})
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


def sdk(port, token=None, origin=None):
    """An MCP SDK client session over streamable HTTP, with a bearer token and an Origin when given."""
    headers = {}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    if origin:
        headers["Origin"] = origin

    @contextlib.asynccontextmanager
    async def go():
        async with create_mcp_http_client(headers=headers) as client:
            async with streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=client) as (r, w, *_):
                async with ClientSession(r, w, client_info=Implementation(name="http-agent", version="1")) as s:
                    await s.initialize()
                    yield s
    return go()


def test_streamable_http(binary, app, conn):
    with http_server(binary, app, READER, "--read-only", "--auth", "none") as (port, _):
        async def go():
            async with sdk(port) as s:
                assert {t.name for t in (await s.list_tools()).tools} == READ_TOOLS
                assert await ok(s, "recall", query="anything") == []

        run(go())
    conn.execute("SELECT memory.audit_integrate()")
    assert conn.execute("SELECT payload->>'client' FROM memory.audit_log WHERE event_type = 'memory.mcp.tool_invoked'").fetchall() == [("http-agent",)]


def test_http_refuses_a_foreign_origin(binary, app):
    """Finding 9: a browser page of another origin (DNS rebinding) gets 403 and no session; no Origin,
    or the server's own loopback origin, or one given with --allowed-origin, passes."""
    with http_server(binary, app, READER, "--auth", "none") as (port, _):
        status, h, body = http(port, headers={"Origin": "https://evil.example"})
        assert status == 403 and "mcp-session-id" not in h and b"evil.example" in body, (status, h, body)
        for origin in (f"http://127.0.0.1:{port}", f"http://localhost:{port}", None):
            status, h, _ = http(port, headers={"Origin": origin} if origin else {})
            assert status == 200 and h.get("mcp-session-id"), (origin, status)
        assert http(port, headers={"Origin": f"http://127.0.0.1:{port + 1}"})[0] == 403, "another port is another origin"
        assert http(port, headers={"Origin": "null"})[0] == 403

        async def evil():
            async with sdk(port, origin="https://evil.example") as s:
                await s.list_tools()

        with pytest.raises(BaseExceptionGroup) as e:
            run(evil())
        assert e.group_contains(MCPError, match="error response"), "the SDK's initialize got the 403"
    with http_server(binary, app, READER, "--auth", "none", "--allowed-origin", "https://app.example") as (port, _):
        assert http(port, headers={"Origin": "https://app.example"})[0] == 200
        assert http(port, headers={"Origin": "https://app.example:443"})[0] == 200
        assert http(port, headers={"Origin": f"http://127.0.0.1:{port}"})[0] == 403, "the list replaces the default"


def test_http_caps_and_expires_sessions(binary, app):
    """Finding 10: over --max-sessions a new session is 503 with Retry-After; a closed (DELETE) or
    expired (--session-idle-timeout) session frees its place."""
    with http_server(binary, app, READER, "--auth", "none", "--max-sessions", "3", "--session-idle-timeout", "2") as (port, _):
        ids = []
        for _ in range(3):
            status, h, _ = http(port)
            assert status == 200
            ids.append(h["mcp-session-id"])
        status, h, body = http(port)
        assert status == 503 and int(h["retry-after"]) > 0 and "mcp-session-id" not in h and b"--max-sessions" in body, (status, h)
        status, _, _ = http(port, "DELETE", None, {"Mcp-Session-Id": ids[0]})
        assert status in (200, 202, 204), status
        status, h, _ = http(port)
        assert status == 200, "a closed session frees its place"
        assert http(port)[0] == 503
        # Idle sessions expire: a place frees itself without any DELETE.
        deadline = time.monotonic() + 60
        while http(port)[0] == 503:
            assert time.monotonic() < deadline, "idle sessions never expired"
            time.sleep(0.5)
        ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
        assert http(port, body=ping, headers={"Mcp-Session-Id": ids[1], "Mcp-Protocol-Version": "2025-06-18"})[0] == 404, \
            "the expired session is gone"


def vm_rss_kb(pid):
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_http_a_flood_of_initializes_stays_bounded(binary, app):
    """Finding 10: 1,000 initializes from one client with the default flags: the default cap holds
    (the rest are 503), and the server's resident memory grows by less than 20 MB."""
    with http_server(binary, app, READER, "--auth", "none") as (port, proc):
        assert http(port)[0] == 200
        before = vm_rss_kb(proc.pid)
        statuses = [http(port)[0] for _ in range(1000)]
        grown = vm_rss_kb(proc.pid) - before
        assert set(statuses) == {200, 503} and statuses.count(200) == 199, "the default cap is 200 open sessions"
        assert grown < 20 * 1024, f"RSS grew by {grown} kB"


def start_failure_http(binary, dsn, role, *args):
    p = subprocess.run([binary, "--database-url", url(dsn, role), *args], input="", capture_output=True, text=True, timeout=30)
    return p.returncode, p.stderr


def test_http_needs_an_explicit_auth_and_none_only_on_loopback(binary, app):
    code, err = start_failure_http(binary, app, WRITER, "--http", "127.0.0.1:0")
    assert code == 2 and "--auth" in err, err
    code, err = start_failure_http(binary, app, WRITER, "--http", "0.0.0.0:0", "--auth", "none", "--resource-url", "https://mcp.example/mcp")
    assert code == 2 and "loopback" in err, err
    code, err = start_failure_http(binary, app, WRITER, "--http", "0.0.0.0:0", "--auth", "none")
    assert code == 2 and "--resource-url" in err, err
    code, err = start_failure_http(binary, app, WRITER, "--http", "127.0.0.1:0", "--auth", "jwt", "--jwks-file", "/nonexistent")
    assert code == 2 and "--issuer" in err, err
    code, err = start_failure_http(binary, app, WRITER, "--http", "127.0.0.1:0", "--auth", "jwt", "--issuer", "https://idp.example",
                                   "--jwks-url", "http://idp.example/jwks")
    assert code == 2 and "https" in err, err
    code, err = start_failure_http(binary, app, WRITER, "--http", "127.0.0.1:0", "--auth", "tokens")
    assert code == 2 and "--token-file" in err, err
    code, err = start_failure_http(binary, app, WRITER, "--http", "127.0.0.1:0", "--auth", "none", "--resource-url", "https://h/mcp?x=1")
    assert code == 2 and "--resource-url" in err, err
    code, err = start_failure_http(binary, app, WRITER, "--auth", "tokens")
    assert code == 2 and "--http" in err, err


class Issuer:
    """A local OAuth issuer: an RSA and an EC P-256 key, its JWKS served over HTTP, tokens signed with pyjwt."""

    NAME = "https://idp.test"

    def __init__(self):
        self.rsa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.ec = ec.generate_private_key(ec.SECP256R1())
        keys = []
        for kid, key, algo in (("rsa1", self.rsa, jwt.algorithms.RSAAlgorithm), ("ec1", self.ec, jwt.algorithms.ECAlgorithm)):
            jwk = algo.to_jwk(key.public_key(), as_dict=True)
            jwk.update(kid=kid, use="sig", alg="RS256" if kid == "rsa1" else "ES256")
            keys.append(jwk)
        # Keys a real issuer publishes beside its signing keys: an encryption key (the RSA key's
        # numbers, use "enc") and a key type the JWT crate does not know; neither may verify a token.
        keys.append(dict(keys[0], kid="enc1", use="enc", alg="RSA-OAEP"))
        keys.append({"kty": "AKP", "kid": "pq1", "alg": "ML-DSA-44", "pub": "AAAA"})
        self.jwks = json.dumps({"keys": keys}).encode()
        jwks = self.jwks

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(jwks)

            def log_message(self, *a):
                pass

        self.httpd = HTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/jwks.json"

    def token(self, aud, org="acme", scope="memory:read memory:write", sub="alice", alg="RS256", key=None, **claims):
        now = int(time.time())
        body = {"iss": self.NAME, "aud": aud, "sub": sub, "org": org, "scope": scope, "iat": now, "exp": now + 600, **claims}
        body = {k: v for k, v in body.items() if v is not None}
        kid = "rsa1" if alg == "RS256" else "ec1"
        return jwt.encode(body, key or (self.rsa if alg == "RS256" else self.ec), algorithm=alg, headers={"kid": kid})


@pytest.fixture(scope="module")
def issuer():
    i = Issuer()
    yield i
    i.httpd.shutdown()


def session_of(port, token):
    """A raw initialized session: its id."""
    status, h, _ = http(port, headers={"Authorization": f"Bearer {token}"})
    assert status == 200, status
    sid = h["mcp-session-id"]
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert http(port, body=note, headers={"Authorization": f"Bearer {token}", "Mcp-Session-Id": sid,
                                          "Mcp-Protocol-Version": "2025-06-18"})[0] == 202
    return sid


def call_raw(port, token, sid, tool, **arguments):
    body = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}
    return http(port, body=body, headers={"Authorization": f"Bearer {token}", "Mcp-Session-Id": sid, "Mcp-Protocol-Version": "2025-06-18"})


def test_http_jwt_bearer_tokens(binary, app, conn, issuer):
    ensure_role(conn, "mcp_multi", "memory_writer")
    conn.execute("SELECT memory.grant_org('mcp_multi', 'acme'), memory.grant_org('mcp_multi', 'globex')")
    args = ("--auth", "jwt", "--issuer", Issuer.NAME, "--jwks-url", issuer.url)
    with http_server(binary, app, "mcp_multi", *args) as (port, _):
        aud = f"http://127.0.0.1:{port}/mcp"
        meta_url = f"http://127.0.0.1:{port}/.well-known/oauth-protected-resource/mcp"
        status, _, body = http(port, "GET", None, path="/.well-known/oauth-protected-resource/mcp")
        meta = json.loads(body)
        assert status == 200 and meta["resource"] == aud and meta["authorization_servers"] == [Issuer.NAME], meta
        assert set(meta["scopes_supported"]) == {"memory:read", "memory:write"}
        assert json.loads(http(port, "GET", None, path="/.well-known/oauth-protected-resource")[2]) == meta

        # Without a token, or with one that is not valid: 401 and where to find the metadata.
        status, h, _ = http(port)
        assert status == 401 and f'resource_metadata="{meta_url}"' in h["www-authenticate"] and "mcp-session-id" not in h, h
        assert h["www-authenticate"].startswith("Bearer ") and "invalid_token" not in h["www-authenticate"]
        other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        now = int(time.time())
        bad = {
            "expired": issuer.token(aud, exp=now - 3600, iat=now - 7200),
            "not yet valid": issuer.token(aud, nbf=now + 3600),
            "wrong audience": issuer.token("http://other.example/mcp"),
            "wrong issuer": jwt.encode({"iss": "https://evil.test", "aud": aud, "sub": "alice", "org": "acme", "exp": now + 600,
                                        "scope": "memory:read"}, issuer.rsa, algorithm="RS256", headers={"kid": "rsa1"}),
            "bad signature": issuer.token(aud, key=other),
            "no exp": issuer.token(aud, exp=None),
            "no org": issuer.token(aud, org=None),
            "HS256": jwt.encode({"iss": Issuer.NAME, "aud": aud, "sub": "a", "org": "acme", "exp": now + 600}, "secret" * 8,
                                algorithm="HS256", headers={"kid": "rsa1"}),
            "garbage": "not-a-jwt",
            "an encryption key's kid": jwt.encode({"iss": Issuer.NAME, "aud": aud, "sub": "a", "org": "acme", "exp": now + 600,
                                                   "scope": "memory:read"}, issuer.rsa, algorithm="RS256", headers={"kid": "enc1"}),
        }
        for why, tok in bad.items():
            status, h, _ = http(port, headers={"Authorization": f"Bearer {tok}"})
            assert status == 401 and 'error="invalid_token"' in h["www-authenticate"] and meta_url in h["www-authenticate"], (why, status, h)

        full = issuer.token(aud)
        reader = issuer.token(aud, scope="memory:read", sub="bob")

        async def go():
            async with sdk(port, full) as s:
                assert {t.name for t in (await s.list_tools()).tools} == ALL_TOOLS
                got = await ok(s, "remember", content="the acme offsite is in june")
                assert [m["id"] for m in await ok(s, "recall", query="offsite june")] == [got["id"]]
            async with sdk(port, issuer.token(aud, org="globex", alg="ES256")) as s:
                await ok(s, "remember", content="the globex offsite is in july")
                gone = await ok(s, "forget", ids=[got["id"]], reason="a globex token tries acme's memory")
                assert gone["forgotten"] == [] and gone["not_found"] == [got["id"]], \
                    "a token forgets only its own org's memories, though the login role may act for both"
                assert [m["content"] for m in await ok(s, "recall", query="offsite")] == ["the globex offsite is in july"], \
                    "a role bound to several orgs serves each only to its tokens"
            async with sdk(port, reader) as s:
                assert {t.name for t in (await s.list_tools()).tools} == READ_TOOLS
                assert len(await ok(s, "recall", query="offsite june")) == 1
            async with sdk(port, issuer.token(aud, org="initech")) as s:
                err = await refused(s, "recall", query="offsite")
                assert err["sqlstate"] == "42501", "the database decides: the login role may not act for initech"

        run(go())
        # A read-only token calling a write tool: 403 insufficient_scope, nothing written.
        sid = session_of(port, reader)
        status, h, body = call_raw(port, reader, sid, "remember", content="bob was here")
        assert status == 403 and 'error="insufficient_scope"' in h["www-authenticate"] and 'scope="memory:write"' in h["www-authenticate"], (status, h)
        assert json.loads(body)["error"] == "insufficient_scope"
        status, _, body = call_raw(port, reader, sid, "recall", query="offsite")
        assert status == 200 and b"acme offsite" in body
    assert conn.execute("SELECT org_id, count(*) FROM memory.observations GROUP BY 1 ORDER BY 1").fetchall() == [("acme", 1), ("globex", 1)]
    with connect(app, ADMIN) as c:
        mine = c.execute("SELECT coalesce(payload->>'tool', payload->>'mcp_tool') FROM memory.audit_events(org_id => 'acme', "
                         "actor => 'mcp:http-agent:alice') WHERE event_type = 'memory.mcp.tool_invoked' OR payload ? 'mcp_tool'").fetchall()
        assert sorted(mine) == [("recall",), ("remember",)], "the actor is mcp:<client>:<sub> (remember's record: its memory.store)"
        assert len(c.execute("SELECT 1 FROM memory.audit_events(event_type => 'memory.mcp.tool_invoked', org_id => 'acme', "
                             "actor => 'mcp:raw-agent:bob')").fetchall()) == 1


def held_request(port, headers, refused=True):
    """A POST whose body never finishes arriving (its Content-Length is not reached): a request in
    flight until the socket closes (or --request-body-timeout passes). A request answered at once
    (the place it would hold still held by the subject's previous call, whose end the server marks
    just after answering it) is sent again, unless `refused` is False."""
    head = [f"POST /mcp HTTP/1.1", f"Host: 127.0.0.1:{port}", "Content-Type: application/json",
            "Accept: application/json, text/event-stream", "Content-Length: 1000", *(f"{k}: {v}" for k, v in headers.items())]
    for _ in range(50):
        sk = socket.create_connection(("127.0.0.1", port), timeout=30)
        sk.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + b'{"jsonrpc": "2.0", ')
        if not refused or not select.select([sk], [], [], 0.2)[0]:
            return sk
        sk.close()
    raise AssertionError("the request was refused every time")


def until(request, status, what):
    """The first answer of `request` with `status`, asked again until it comes (10 s at most)."""
    deadline = time.monotonic() + 10
    while (got := request())[0] != status:
        assert time.monotonic() < deadline, (what, got)
        time.sleep(0.05)
    return got


def test_http_stateless(binary, app, conn, issuer):
    """--stateless (issue 51): no sessions, every POST answered on its own in plain JSON; the Python MCP
    SDK works over it, and every check stays: the token and its scopes, the Origin, the protocol version;
    --max-sessions and --max-sessions-per-subject cap the requests in flight."""
    args = ("--auth", "jwt", "--issuer", Issuer.NAME, "--jwks-url", issuer.url, "--stateless", "--max-sessions-per-subject", "1")
    with http_server(binary, app, WRITER, *args) as (port, _):
        aud = f"http://127.0.0.1:{port}/mcp"
        full, reader = issuer.token(aud), issuer.token(aud, scope="memory:read", sub="bob")

        async def go():
            async with sdk(port, full) as s:
                assert {t.name for t in (await s.list_tools()).tools} == ALL_TOOLS
                got = await ok(s, "remember", content="the stateless offsite is in may")
                assert [m["id"] for m in await ok(s, "recall", query="stateless offsite")] == [got["id"]]
                assert (await refused(s, "forget", ids=["not-a-uuid"], reason="r"))["sqlstate"] == "22P02"
            return got["id"]

        mem = run(go())
        auth = {"Authorization": f"Bearer {full}"}
        status, h, body = http(port, headers=auth)
        assert status == 200 and h["content-type"] == "application/json" and "mcp-session-id" not in h, (status, h)
        assert json.loads(body)["result"]["serverInfo"]["name"] == "memory-mcp"
        v = {"MCP-Protocol-Version": "2025-06-18"}
        recall = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "recall", "arguments": {"query": "stateless offsite"}}}
        status, h, body = http(port, body=recall, headers={**auth, **v})
        assert status == 200 and h["content-type"] == "application/json", (status, h)
        assert [m["id"] for m in json.loads(body)["result"]["structuredContent"]["memories"]] == [mem]
        assert http(port, body=recall, headers={**auth, "MCP-Protocol-Version": "1999-01-01"})[0] == 400, "an unknown protocol version"
        assert http(port, "GET", None, headers={**auth, **v})[0] == 405 and http(port, "DELETE", None, headers={**auth, **v})[0] == 405
        status, h, _ = http(port, body=recall)
        assert status == 401 and "resource_metadata=" in h["www-authenticate"], "a token on every request"
        remember = {"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {"name": "remember", "arguments": {"content": "bob was here"}}}
        status, h, _ = http(port, body=remember, headers={"Authorization": f"Bearer {reader}", **v})
        assert status == 403 and 'error="insufficient_scope"' in h["www-authenticate"], (status, h)
        assert http(port, body=recall, headers={**auth, **v, "Origin": "http://evil.example"})[0] == 403
        assert http(port, body=recall, headers={**auth, **v, "Host": "evil.example"})[0] == 403, "DNS rebinding: a foreign Host"
        # One request of alice in flight (its body still arriving): her next one is 429, bob's passes;
        # once it ends (the client hangs up), hers pass again.
        with held_request(port, auth):
            _, h, body = until(lambda: http(port, body=recall, headers={**auth, **v}), 429, "a request in flight is not counted")
            assert int(h["retry-after"]) > 0 and b"--max-sessions-per-subject" in body, (h, body)
            assert http(port, body=recall, headers={"Authorization": f"Bearer {reader}", **v})[0] == 200
        until(lambda: http(port, body=recall, headers={**auth, **v}), 200, "a request that ended still counts")
    assert conn.execute("SELECT count(*) FROM memory.observations WHERE content = 'bob was here'").fetchone() == (0,)
    with connect(app, ADMIN) as c:
        calls = c.execute("SELECT coalesce(payload->>'tool', payload->>'mcp_tool') FROM memory.audit_events(org_id => 'acme', "
                          "actor => 'mcp:unknown:alice') WHERE event_type = 'memory.mcp.tool_invoked' OR payload ? 'mcp_tool'").fetchall()
        assert ("remember",) in calls and ("recall",) in calls, "without a session the client is unknown; every call is still recorded"
    with http_server(binary, app, READER, "--auth", "none", "--stateless", "--max-sessions", "1") as (port, _):
        with held_request(port, {}):
            _, h, body = until(lambda: http(port), 503, "a request in flight is not counted")
            assert int(h["retry-after"]) > 0 and b"--max-sessions" in body, (h, body)
        until(lambda: http(port), 200, "a request that ended still counts")


def posted(port, data, headers):
    """One raw POST of `data` with exactly `headers` (besides Host and Content-Length, unless given):
    (status, content type, the answer as JSON, or its bytes when it is not JSON)."""
    c = http_client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        try:
            c.request("POST", "/mcp", data, headers)
        except (BrokenPipeError, ConnectionResetError):
            pass  # answered (and closed) before the whole body was sent: the answer is still read
        r = c.getresponse()
        body = r.read()
        try:
            body = json.loads(body)
        except ValueError:
            pass
        return r.status, r.getheader("content-type"), body
    finally:
        c.close()


UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
DIGEST = re.compile(r"\b[0-9a-f]{64}\b")
TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d[0-9.:+Z-]*")


def comparable(answer):
    """An answer with what differs between two equal calls made one after the other (ids, times, the
    digests and signatures of receipts over them) masked."""
    text = json.dumps(answer, sort_keys=True, default=lambda b: b.decode(errors="replace"))
    return json.loads(DIGEST.sub("<digest>", TIMESTAMP.sub("<time>", UUID.sub("<uuid>", text))))


def test_http_stateless_direct_calls_answer_as_rmcp(binary, app, conn, tmp_path):
    """Issue 51: with --stateless, memory-mcp answers a tools/call itself (not through rmcp's per-request
    service); the answer must be rmcp's whatever the request. Two servers, one with the direct path and
    one without (the hidden --no-direct-calls), get the same requests: every tool, bad arguments, an
    unknown tool, a missing scope, a bad Host, protocol versions, Accept and Content-Type, an oversized
    body, and the shapes the direct path leaves to rmcp (a batch, a notification, a _meta version):
    status, content type and answer are the same, and so are the calls' audit records."""
    toks = tokens_file(tmp_path, ["direct-w", "direct-r"], read_only=["direct-r"])
    args = ("--auth", "tokens", "--token-file", str(tmp_path / "tokens.json"), "--stateless")
    with http_server(binary, app, WRITER, *args) as (direct, _), http_server(binary, app, WRITER, *args, "--no-direct-calls") as (viarmcp, _):
        ports = (direct, viarmcp)
        base = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-06-18"}
        w = {**base, "Authorization": f"Bearer {toks['direct-w']}"}
        r = {**base, "Authorization": f"Bearer {toks['direct-r']}"}

        def call(tool, arguments, rid=7, **params):
            return {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": {"name": tool, "arguments": arguments, **params}}

        def same(what, body, headers=w):
            """Each server's answer to the same request: equal once ids and times are masked."""
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            got = [posted(p, data, headers) for p in ports]
            assert comparable(got[0]) == comparable(got[1]), (what, got)
            return got

        mems = [same("remember", call("remember", {"content": "the direct path keeps the minutes"}))]
        ids = [a[2]["result"]["structuredContent"]["id"] for a in mems[0]]
        assert mems[0][0][0] == 200 and mems[0][0][1] == "application/json"
        same("recall", call("recall", {"query": "direct path minutes", "k": 5}))
        same("retrieve", call("retrieve", {"query": "minutes", "k": 5}))
        same("context", call("context", {"query": "the minutes", "token_budget": 200}))
        same("claim_chain of no claim", call("claim_chain", {"claim_id": "00000000-0000-0000-0000-000000000000"}))
        def each(what, tool, arguments):
            """A call of each server's own: `arguments(i)` of its memory id i (masked when compared)."""
            got = [posted(p, json.dumps(call(tool, arguments(i))).encode(), w) for p, i in zip(ports, ids)]
            assert comparable(got[0]) == comparable(got[1]) and got[0][0] == 200, (what, got)
            return got

        each("put", "put", lambda i: {"namespace": ["direct", i], "key": "k", "value": {"n": 1}})
        each("get", "get", lambda i: {"namespace": ["direct", i], "key": "k"})
        same("search", call("search", {"namespace_prefix": ["direct"], "filter": {"n": {"$gt": 0}}}))
        each("delete", "delete", lambda i: {"namespace": ["direct", i], "key": "k"})
        each("get of a deleted item", "get", lambda i: {"namespace": ["direct", i], "key": "k"})
        each("history", "history", lambda i: {"id": i})
        each("lineage", "lineage", lambda i: {"id": i})
        each("supersede", "supersede", lambda i: {"id": i, "content": "the minutes, corrected", "reason": "typo"})
        each("record_outcome", "record_outcome", lambda i: {"session_id": f"s-{i}", "outcome": "accepted", "observation_ids": [i]})
        each("forget", "forget", lambda i: {"ids": [i], "reason": "done"})
        # Refusals and errors.
        same("a database refusal", call("forget", {"ids": ["not-a-uuid"], "reason": "r"}))
        same("bad arguments", call("remember", {"content": 5}))
        same("missing arguments", call("recall", {}))
        same("no arguments", {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "recall"}})
        same("an unknown tool", call("no_such_tool", {}))
        same("a string id", call("recall", {"query": "x"}, rid="abc"))
        same("a missing scope", call("remember", {"content": "reader was here"}), r)
        same("no token", call("recall", {"query": "x"}), base)
        same("a foreign Host", call("recall", {"query": "x"}), {**w, "Host": "evil.example"})
        same("a bad Host", call("recall", {"query": "x"}), {**w, "Host": "a b"})
        same("an Origin", call("recall", {"query": "x"}), {**w, "Origin": "http://evil.example"})
        for version in ["1999-01-01", "2025-03-26", "2024-11-05", "2025-11-25", "2026-07-28"]:
            same(f"protocol version {version}", call("recall", {"query": "x"}), {**w, "MCP-Protocol-Version": version})
        same("no protocol version", call("recall", {"query": "x"}), {k: v for k, v in w.items() if k != "MCP-Protocol-Version"})
        for accept in ["application/json", "text/event-stream", "*/*", "application/json;q=0, text/event-stream", "APPLICATION/JSON , text/event-stream;q=0.5"]:
            same(f"Accept {accept}", call("recall", {"query": "x"}), {**w, "Accept": accept})
        for ctype in ["text/plain", "application/json; charset=utf-8", "application/jsonx"]:
            same(f"Content-Type {ctype}", call("recall", {"query": "x"}), {**w, "Content-Type": ctype})
        same("an oversized body", b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"recall","arguments":{"query":"' + b"x" * (4 * 1024 * 1024) + b'"}}}')
        same("not JSON", b"{not json")
        same("a batch", json.dumps([call("recall", {"query": "x"})]).encode())
        same("a notification", {"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "recall", "arguments": {"query": "x"}}})
        same("another method", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        same("a method spelled with an escape", b'{"jsonrpc":"2.0","id":1,"method":"tools\\/call","params":{"name":"recall","arguments":{"query":"x"}}}')
        same("a response", {"jsonrpc": "2.0", "id": 1, "result": {}})
        same("a _meta protocol version", call("recall", {"query": "x"}, _meta={"io.modelcontextprotocol/protocolVersion": "2025-06-18"}))
        same("a named client", call("recall", {"query": "named"}, _meta={"io.modelcontextprotocol/clientInfo": {"name": "meta-agent", "version": "1"}}))
        same("no jsonrpc version", {"id": 1, "method": "tools/call", "params": {"name": "recall", "arguments": {"query": "x"}}})
    with connect(app, ADMIN) as c:
        rows = [(client, *row) for client in ("unknown", "meta-agent") for row in c.execute(
            "SELECT coalesce(payload->>'tool', payload->>'mcp_tool'), coalesce(payload->>'client', payload->>'mcp_client'), count(*) "
            "FROM memory.audit_events(org_id => 'acme', actor => %s, lim => 10000) "
            "WHERE event_type = 'memory.mcp.tool_invoked' OR payload ? 'mcp_tool' GROUP BY 1, 2", (f"mcp:{client}:direct-w",)).fetchall()]
        assert {r[1] for r in rows} >= ALL_TOOLS - {"claim_chain"} and ("meta-agent", "recall", "meta-agent", 2) in rows, rows
        assert rows and all(n % 2 == 0 for *_, n in rows), ("each call recorded once by each server, alike", rows)


def vm_hwm_kb(pid):
    """The process's peak resident memory so far (VmHWM)."""
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def tokens_file(tmp_path, names, read_only=()):
    """A --token-file of tokens for `names` (those in `read_only` with memory:read alone): {name: token}."""
    toks = {n: secrets.token_urlsafe(32) for n in names}
    (tmp_path / "tokens.json").write_text(json.dumps([
        {"sha256": hashlib.sha256(t.encode()).hexdigest(), "name": n, "org": "acme",
         "scopes": ["memory:read"] if n in read_only else ["memory:read", "memory:write"]} for n, t in toks.items()]))
    return toks


@pytest.mark.parametrize("mode", ["sessions", "stateless"])
def test_http_an_odd_shaped_body_is_read_without_a_tree(binary, app, tmp_path, mode):
    """Review of issue 51 (F7): the scope check reads only each message's method and params.name, so a
    4 MB batch of two million numbers costs the server about its bytes, not a parsed tree of them (tens
    of MB); and the call at its end is still read: a read-only token is refused its forget."""
    toks = tokens_file(tmp_path, ["reader"], read_only=["reader"])
    extra = ("--stateless",) if mode == "stateless" else ()
    body = b"[" + b"1," * (2 * 1024 * 1024 - 40) + b'{"method":"tools/call","params":{"name":"forget"}}]'
    assert len(body) < 4 * 1024 * 1024
    with http_server(binary, app, READER, "--auth", "tokens", "--token-file", str(tmp_path / "tokens.json"), *extra) as (port, proc):
        headers = {"Authorization": f"Bearer {toks['reader']}", "MCP-Protocol-Version": "2025-06-18",
                   "Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        assert http(port, headers={"Authorization": f"Bearer {toks['reader']}"})[0] == 200
        before = vm_hwm_kb(proc.pid)
        c = http_client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request("POST", "/mcp", body, headers)
        r = c.getresponse()
        assert r.status == 403 and 'error="insufficient_scope"' in r.getheader("www-authenticate"), (r.status, r.read())
        c.close()
        grown = vm_hwm_kb(proc.pid) - before
        assert grown < 40 * 1024, f"peak RSS grew by {grown} kB for a 4 MB body"


def answer_of(sk):
    """The status line of the answer read on a raw socket (b"" when the server closed it unanswered)."""
    data = b""
    while b"\r\n" not in data:
        d = sk.recv(4096)
        if not d:
            break
        data += d
    return data.split(b"\r\n")[0]


@pytest.mark.parametrize("mode", ["sessions", "stateless"])
@pytest.mark.parametrize("auth", ["tokens", "none"])
def test_http_a_body_that_never_finishes_is_answered_408(binary, app, tmp_path, mode, auth):
    """Review of issue 51 (F6): a body that never finishes arriving is answered 408 past
    --request-body-timeout and its connection closed, so it cannot hold its subject's places (or, with
    --auth none and --stateless, the server's) for ever; a body that breaks off (the client's stream
    ends early) is 400, not 413 (too large)."""
    toks = tokens_file(tmp_path, ["alice"])
    extra = ("--stateless",) if mode == "stateless" else ()
    extra += ("--auth", "tokens", "--token-file", str(tmp_path / "tokens.json")) if auth == "tokens" else ("--auth", "none")
    with http_server(binary, app, READER, "--request-body-timeout", "1", "--max-sessions-per-subject", "1",
                     "--max-sessions", "1", *extra) as (port, _):
        headers = {"Authorization": f"Bearer {toks['alice']}"} if auth == "tokens" else {}
        with held_request(port, headers) as sk:
            assert answer_of(sk) == b"HTTP/1.1 408 Request Timeout"
            while sk.recv(65536):  # the connection is closed after the answer (else the read times out)
                pass
        assert http(port, headers=headers)[0] == 200, "the place is free again"
        with held_request(port, headers) as sk:
            sk.shutdown(socket.SHUT_WR)
            assert answer_of(sk) == b"HTTP/1.1 400 Bad Request", "a body cut short is not too large"


@pytest.mark.parametrize("mode", ["sessions", "stateless"])
def test_http_slow_and_idle_connections_are_closed_and_capped(binary, app, tmp_path, mode):
    """Review of issue 51 (F5): a request whose headers never finish, and a connection kept idle after
    its answer (a 401 here: no token needed), are closed after --header-read-timeout; beyond
    --max-connections a new connection is not served until an open one closes, whichever of the
    --http-workers (more of them than places here, each accepting on its own) would accept it."""
    toks = tokens_file(tmp_path, ["alice"])
    extra = ("--stateless",) if mode == "stateless" else ()
    args = ("--auth", "tokens", "--token-file", str(tmp_path / "tokens.json"), *extra)
    with http_server(binary, app, READER, *args, "--header-read-timeout", "1") as (port, _):
        half = socket.create_connection(("127.0.0.1", port), timeout=30)
        half.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        idle = sent_request(port, INIT, {})
        assert answer_of(idle) == b"HTTP/1.1 401 Unauthorized"
        for sk in (half, idle):
            with sk:
                while sk.recv(65536):  # closed by the server (else the read times out)
                    pass
        assert http(port, headers={"Authorization": f"Bearer {toks['alice']}"})[0] == 200
    with http_server(binary, app, READER, *args, "--max-connections", "2", "--http-workers", "3") as (port, _):
        held = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(2)]
        for sk in held:
            sk.sendall(b"POST /mcp HTTP/1.1\r\n")
        waiting = sent_request(port, INIT, {"Authorization": f"Bearer {toks['alice']}", "Connection": "close"})
        assert select.select([waiting], [], [], 1)[0] == [], "a connection beyond the cap is not served"
        held.pop().close()
        assert answer_of(waiting) == b"HTTP/1.1 200 OK", "served once a place is free"
        waiting.close()
        held.pop().close()


def test_http_an_answer_left_unread_closes_its_connection(binary, app, tmp_path):
    """Review of issue 51 (h-rev): a token holder that asks for large answers (a search of six items of
    900 KB: 11 MB) and never reads them held its connections, their places of --max-connections and the
    answers' bytes for as long as it stayed connected (hyper sets no time on a write): at 2 places the
    next client waited for ever. A write that makes no progress for --request-body-timeout now closes
    the connection, and the next client is served."""
    toks = tokens_file(tmp_path, ["w"])
    args = ("--auth", "tokens", "--token-file", str(tmp_path / "tokens.json"), "--stateless", "--max-connections", "2",
            "--request-body-timeout", "1")
    w = {"Authorization": f"Bearer {toks['w']}", "MCP-Protocol-Version": "2025-06-18"}
    with http_server(binary, app, WRITER, *args) as (port, _):
        ns = ["unread", secrets.token_hex(4)]
        headers = {**w, "Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        for i in range(6):
            put = {"jsonrpc": "2.0", "id": i, "method": "tools/call",
                   "params": {"name": "put", "arguments": {"namespace": ns, "key": f"k{i}", "value": {"v": "x" * (900 * 1024)}}}}
            status, _, answer = posted(port, json.dumps(put).encode(), headers)
            assert status == 200 and not answer["result"].get("isError"), str(answer)[:300]
        search = {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "search", "arguments": {"namespace_prefix": ns, "limit": 10}}}
        unread = []
        for _ in range(2):
            sk = socket.socket()
            sk.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sk.settimeout(60)
            sk.connect(("127.0.0.1", port))
            b = json.dumps(search).encode()
            head = ["POST /mcp HTTP/1.1", f"Host: 127.0.0.1:{port}", f"Content-Length: {len(b)}", *(f"{k}: {v}" for k, v in headers.items())]
            sk.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + b)
            unread.append(sk)
        # Both places held by connections whose answers are not read: the next client is served once
        # the server has given up on them (before, never: its request timed out).
        c = http_client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request("POST", "/mcp", json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "recall", "arguments": {"query": "x"}}}), headers)
        assert c.getresponse().status == 200
        c.close()
        for sk in unread:
            got = 0
            try:
                while chunk := sk.recv(1 << 20):
                    got += len(chunk)
            except ConnectionResetError:
                pass
            assert got < 11 * 1024 * 1024, "the answer was cut off: the connection closed"
            sk.close()


def sent_request(port, body, headers):
    """A whole POST sent, its answer not read: the caller hangs up by closing the socket."""
    b = json.dumps(body).encode()
    sk = socket.create_connection(("127.0.0.1", port), timeout=30)
    head = ["POST /mcp HTTP/1.1", f"Host: 127.0.0.1:{port}", "Content-Type: application/json",
            "Accept: application/json, text/event-stream", f"Content-Length: {len(b)}", *(f"{k}: {v}" for k, v in headers.items())]
    sk.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + b)
    return sk


def test_http_stateless_a_dropped_request_keeps_its_place_until_its_call_ends(binary, app, conn, tmp_path):
    """--stateless with --auth tokens (review of issue 51): the token's scopes hold on every request, and a
    client that hangs up does not end the call it started (it runs on to its commit), so the call keeps its
    place in --max-sessions-per-subject and --max-sessions until it ends: requests sent and dropped cannot
    pile up calls beyond the caps."""
    toks = {n: secrets.token_urlsafe(32) for n in ("alice", "bob", "carol", "dashboard")}
    (tmp_path / "tokens.json").write_text(json.dumps([
        {"sha256": hashlib.sha256(t.encode()).hexdigest(), "name": n, "org": "acme",
         "scopes": ["memory:read"] if n == "dashboard" else ["memory:read", "memory:write"]} for n, t in toks.items()]))
    args = ("--auth", "tokens", "--token-file", str(tmp_path / "tokens.json"), "--stateless",
            "--max-sessions-per-subject", "1", "--max-sessions", "2")
    recall = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "recall", "arguments": {"query": "dropped"}}}
    remember = {"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {"name": "remember", "arguments": {"content": "dashboard was here"}}}

    def of(name):
        return {"Authorization": f"Bearer {toks[name]}", "MCP-Protocol-Version": "2025-06-18"}

    def waiting():
        return conn.execute("SELECT count(*) FROM pg_stat_activity WHERE usename = %s AND wait_event_type = 'Lock'", (WRITER,)).fetchone()[0]

    with http_server(binary, app, WRITER, *args) as (port, _):
        status, h, _ = http(port, body=remember, headers=of("dashboard"))
        assert status == 403 and 'error="insufficient_scope"' in h["www-authenticate"], (status, h)
        assert http(port, body=recall, headers={**of("alice"), "Authorization": f"Bearer {toks['alice']}x"})[0] == 401
        assert http(port, body=recall, headers=of("alice"))[0] == 200
        # A request names its client in _meta: a plain name, never one reaching into the subject's part.
        named = json.loads(json.dumps(recall))
        named["params"]["_meta"] = {"io.modelcontextprotocol/clientInfo": {"name": "unknown:alice\u202e\u200b", "version": "1"}}
        assert http(port, body=named, headers=of("dashboard"))[0] == 200
        # Bodies still arriving hold their subjects' places, not the server's (2 here): carol passes.
        with held_request(port, of("alice")), held_request(port, of("bob")):
            deadline = time.monotonic() + 10
            while http(port, body=recall, headers=of("alice"))[0] != 429:
                assert time.monotonic() < deadline, "a body still arriving counts in its subject's places"
                time.sleep(0.05)
            assert http(port, body=recall, headers=of("carol"))[0] == 200
        for who in ("alice", "bob"):
            deadline = time.monotonic() + 10
            while http(port, headers=of(who))[0] != 200:  # an initialize: no call, no record
                assert time.monotonic() < deadline, "a request that ended still counts"
                time.sleep(0.1)
        with psycopg.connect(app) as locker:
            locker.execute("LOCK TABLE memory.observations IN ACCESS EXCLUSIVE MODE")
            for n, who in enumerate(("alice", "bob"), 1):
                sk = sent_request(port, recall, of(who))
                deadline = time.monotonic() + 10
                while waiting() < n:
                    assert time.monotonic() < deadline, "the call waits on the lock"
                    time.sleep(0.05)
                sk.close()
            # Both clients are gone; their calls still run (waiting on the lock) and keep their places.
            status, h, body = http(port, body=recall, headers=of("alice"))
            assert status == 429 and int(h["retry-after"]) > 0 and b"--max-sessions-per-subject" in body, (status, body)
            status, h, body = http(port, body=recall, headers=of("carol"))
            assert status == 503 and int(h["retry-after"]) > 0 and b"--max-sessions" in body, (status, body)
            locker.rollback()
        for who in ("bob", "alice", "carol"):
            # Bob's place (a cap of 1) is free again once his dropped call has ended.
            deadline = time.monotonic() + 10
            while http(port, body=recall, headers=of(who))[0] != 200:
                assert time.monotonic() < deadline, "a call that ended still counts"
                time.sleep(0.1)
    with connect(app, ADMIN) as c:
        bobs = c.execute("SELECT count(*) FROM memory.audit_events(org_id => 'acme', actor => 'mcp:unknown:bob') "
                         "WHERE event_type = 'memory.mcp.tool_invoked'").fetchone()
        assert bobs == (2,), "the call his client hung up on ran to its end (and the one answered after it)"
        named = c.execute("SELECT payload->>'client' FROM memory.audit_events(org_id => 'acme', actor => 'mcp:unknown_alice:dashboard') "
                          "WHERE event_type = 'memory.mcp.tool_invoked'").fetchall()
        assert named == [("unknown_alice",)], named
    assert conn.execute("SELECT count(*) FROM memory.observations WHERE content = 'dashboard was here'").fetchone() == (0,)


def test_http_body_bytes_in_flight_are_capped(binary, app, conn, tmp_path):
    """Review of issue 51 (h-rev, finding 3): parsing a 4 MiB body of small JSON values takes ~100 times its
    size in memory, and every request in flight may hold one. --max-body-bytes-in-flight caps the body
    bytes held at once, each request's until its tool call ends (a dropped client's too): a request past it
    is 503 with Retry-After, one that fits what is left is served."""
    toks = tokens_file(tmp_path, ["w"])
    args = ("--auth", "tokens", "--token-file", str(tmp_path / "tokens.json"), "--stateless",
            "--max-body-bytes-in-flight", str(4 * 1024 * 1024))
    w = {"Authorization": f"Bearer {toks['w']}", "MCP-Protocol-Version": "2025-06-18"}

    def recall(size):
        return {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "recall", "arguments": {"query": "x" * size}}}

    def waiting():
        return conn.execute("SELECT count(*) FROM pg_stat_activity WHERE usename = %s AND wait_event_type = 'Lock'", (WRITER,)).fetchone()[0]

    with http_server(binary, app, WRITER, *args) as (port, _):
        with psycopg.connect(app) as locker:
            locker.execute("LOCK TABLE memory.observations IN ACCESS EXCLUSIVE MODE")
            held = {"jsonrpc": "2.0", "id": 4, "method": "tools/call",
                    "params": {"name": "remember", "arguments": {"content": "held " * (600 * 1024)}}}
            sk = sent_request(port, held, w)
            deadline = time.monotonic() + 20
            while waiting() < 1:
                assert time.monotonic() < deadline, "the call waits on the lock"
                time.sleep(0.05)
            sk.close()
            # The dropped call still runs and holds its 3 MiB: 2 MiB more is past the budget, an initialize fits.
            status, h, body = http(port, body=recall(2 * 1024 * 1024), headers=w)
            assert status == 503 and int(h["retry-after"]) > 0 and b"--max-body-bytes-in-flight" in body, (status, body[:300])
            assert http(port, headers=w)[0] == 200
            locker.rollback()
        deadline = time.monotonic() + 20
        while http(port, body=recall(2 * 1024 * 1024), headers=w)[0] != 200:
            assert time.monotonic() < deadline, "a call that ended still holds its bytes"
            time.sleep(0.1)


def test_http_jwks_file_and_es256(binary, app, issuer, tmp_path):
    (tmp_path / "jwks.json").write_bytes(issuer.jwks)
    with http_server(binary, app, READER, "--auth", "jwt", "--issuer", Issuer.NAME, "--jwks-file", str(tmp_path / "jwks.json"),
                     "--org-claim", "tenant") as (port, _):
        aud = f"http://127.0.0.1:{port}/mcp"
        assert http(port, headers={"Authorization": f"Bearer {issuer.token(aud, alg='ES256', tenant='acme')}"})[0] == 200
        status, h, _ = http(port, headers={"Authorization": f"Bearer {issuer.token(aud, alg='ES256')}"})
        assert status == 401 and "tenant" in h["www-authenticate"], "the org comes from --org-claim"


def test_http_static_tokens(binary, app, conn, tmp_path):
    read_tok, write_tok, no_scope = secrets.token_urlsafe(32), secrets.token_urlsafe(32), secrets.token_urlsafe(32)
    entries = [{"sha256": hashlib.sha256(read_tok.encode()).hexdigest(), "name": "dashboard", "org": "acme", "scopes": ["memory:read"]},
               {"sha256": hashlib.sha256(write_tok.encode()).hexdigest(), "name": "ingest", "org": "acme",
                "scopes": ["memory:read", "memory:write"]},
               {"sha256": hashlib.sha256(no_scope.encode()).hexdigest(), "name": "idle", "org": "acme", "scopes": []}]
    (tmp_path / "tokens.json").write_text(json.dumps(entries))
    assert read_tok not in (tmp_path / "tokens.json").read_text()
    with http_server(binary, app, WRITER, "--auth", "tokens", "--token-file", str(tmp_path / "tokens.json"),
                     "--resource-url", "http://mcp.example.test/mcp", "--max-sessions-per-subject", "3") as (port, _):
        auth = {"Authorization": f"Bearer {read_tok}"}
        assert http(port, headers={**auth, "Host": "mcp.example.test"})[0] == 200, "the resource URL's host is this server's"
        assert http(port, headers={**auth, "Host": "evil.test"})[0] == 403, "any other Host is refused (DNS rebinding)"
        assert http(port, headers={**auth, "Origin": "http://mcp.example.test"})[0] == 200, "so is its origin"
        status, h, _ = http(port, headers={"Authorization": f"Bearer {write_tok}x"})
        assert status == 401 and "invalid_token" in h["www-authenticate"]
        assert http(port)[0] == 401

        async def go():
            async with sdk(port, write_tok) as s:
                await ok(s, "remember", content="ingested note")
            async with sdk(port, read_tok) as s:
                assert [m["content"] for m in await ok(s, "recall", query="ingested")] == ["ingested note"]

        run(go())
        sid = session_of(port, read_tok)
        status, h, _ = call_raw(port, read_tok, sid, "forget", ids=[], reason="r")
        assert status == 403 and "insufficient_scope" in h["www-authenticate"]
        status, _, body = call_raw(port, write_tok, sid, "recall", query="ingested")
        assert status == 404 and b"ingested note" not in body, "a session belongs to the token that opened it"
        assert call_raw(port, read_tok, sid, "recall", query="ingested")[0] == 200
        status, h, _ = http(port, headers={"Authorization": f"Bearer {no_scope}"})
        assert status == 403 and 'error="insufficient_scope"' in h["www-authenticate"] and "mcp-session-id" not in h, \
            "a token with no memory scope opens no session"
        # dashboard holds 3 open sessions (two above, sid): a fourth is 429; ingest is not held back.
        status, h, body = http(port, headers={"Authorization": f"Bearer {read_tok}"})
        assert status == 429 and int(h["retry-after"]) > 0 and b"--max-sessions-per-subject" in body, (status, body)
        assert http(port, headers={"Authorization": f"Bearer {write_tok}"})[0] == 200
        assert http(port, "DELETE", None, {"Authorization": f"Bearer {read_tok}", "Mcp-Session-Id": sid})[0] in (200, 202, 204)
        assert http(port, headers={"Authorization": f"Bearer {read_tok}"})[0] == 200, "a closed session frees the subject's place"
    assert conn.execute("SELECT count(*) FROM memory.observations").fetchone() == (1,)


# ---- TLS to the database (issue 51): libpq's sslmode, sslrootcert, sslcert/sslkey ----

def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_pki(d):
    """A test CA, another CA, a server certificate for DNS:localhost only, and a client certificate
    for role mcp_tls_cert, all signed by the test CA (EC P-256)."""
    for ca in ("ca", "other_ca"):
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", f"{ca}.key",
                "-out", f"{ca}.crt", "-days", "2", "-subj", f"/CN={ca}", "-addext", "basicConstraints=critical,CA:TRUE",
                "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=d)
    for name, cn, ext in (("server", "localhost", "subjectAltName=DNS:localhost\nextendedKeyUsage=serverAuth\n"),
                          ("client", "mcp_tls_cert", "extendedKeyUsage=clientAuth\n")):
        (d / f"{name}.ext").write_text("basicConstraints=CA:FALSE\n" + ext)
        openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", f"{name}.key",
                "-out", f"{name}.csr", "-subj", f"/CN={cn}", cwd=d)
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-days", "2",
                "-out", f"{name}.crt", "-extfile", f"{name}.ext", cwd=d)


class TlsFront:
    """PostgreSQL's TLS negotiation (SSLRequest, 'S', a TLS handshake with the test CA's server
    certificate) in front of a plain cluster, for a PostgreSQL built without OpenSSL (the PostgreSQL
    18 wheel of `make test-pg18`): the same client path as ssl = on. As the pg_hba of the real
    cluster: a connection without TLS is refused, and mcp_tls_cert's needs a client certificate of
    the CA (checked by Python's ssl)."""

    SSL_REQUEST = struct.pack("!ii", 8, 80877103)

    def __init__(self, d, backend_port):
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(d / "server.crt", d / "server.key")
        self.ctx.load_verify_locations(d / "ca.crt")
        self.ctx.verify_mode = ssl.CERT_OPTIONAL
        self.backend_port = backend_port
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.serve, args=(c,), daemon=True).start()

    @staticmethod
    def exactly(sk, n):
        buf = b""
        while len(buf) < n:
            chunk = sk.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk
        return buf

    def serve(self, c):
        with contextlib.ExitStack() as stack:
            stack.callback(c.close)
            try:
                if self.exactly(c, 8) != self.SSL_REQUEST:
                    return  # hostnossl ... reject
                c.sendall(b"S")
                t = self.ctx.wrap_socket(c, server_side=True)
                stack.callback(t.close)
                head = self.exactly(t, 4)
                body = self.exactly(t, struct.unpack("!i", head)[0] - 4)
                fields = body[4:].split(b"\0")
                user = dict(zip(fields[::2], fields[1::2])).get(b"user")
                if user == b"mcp_tls_cert" and not t.getpeercert():
                    return  # hostssl ... cert
                b = socket.create_connection(("127.0.0.1", self.backend_port))
                stack.callback(b.close)
                b.sendall(head + body)
                while True:
                    ready = [t] if t.pending() else select.select([t, b], [], [])[0]
                    for src, dst in ((t, b), (b, t)):
                        if src in ready:
                            data = src.recv(65536)
                            if not data:
                                return
                            dst.sendall(data)
            except (OSError, ConnectionError, ssl.SSLError):
                return

    def close(self):
        self.sock.close()


def has_openssl():
    configure = subprocess.check_output([os.environ.get("PG_CONFIG", "/usr/bin/pg_config"), "--configure"], text=True)
    return "--with-openssl" in configure or "--with-ssl=openssl" in configure


@pytest.fixture(scope="module")
def tls_cluster(request):
    """A cluster with ssl = on whose pg_hba takes TCP connections over TLS only (hostssl; hostnossl
    rejected), role mcp_tls_cert by client certificate; yields (port, pki directory, whether the
    server itself does TLS). On a PostgreSQL built without OpenSSL, the session's cluster behind a
    TlsFront instead."""
    d = pathlib.Path(tempfile.mkdtemp(prefix="memory_ext-mcp-tls-"))
    d.chmod(0o755)
    make_pki(d)
    real = has_openssl()
    front = None
    try:
        if real:
            (d / "pg_hba.conf").write_text("local all all trust\n"
                                           "hostssl all mcp_tls_cert 127.0.0.1/32 cert\n"
                                           "hostssl all all 127.0.0.1/32 trust\n"
                                           "hostnossl all all 0.0.0.0/0 reject\n")
            if os.getuid() == 0:
                for f in d.iterdir():
                    shutil.chown(f, "postgres", "postgres")
            (d / "server.key").chmod(0o600)
            opts = f"-c ssl=on -c ssl_cert_file={d}/server.crt -c ssl_key_file={d}/server.key -c ssl_ca_file={d}/ca.crt -c hba_file={d}/pg_hba.conf"
            env = dict(os.environ, MEMORY_EXT_SERVER_OPTS=opts)
            port = int(subprocess.check_output([str(CLUSTER), "start", "mcp-tls"], text=True, env=env).strip())
            dsn = fresh_database(port, "mcp_tls")
        else:
            backend = request.getfixturevalue("port")
            dsn = fresh_database(backend, "mcp_tls")
            front = TlsFront(d, backend)
            port = front.port
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute("SELECT memory.setup_roles()")
            for role in ("mcp_tls", "mcp_tls_cert"):
                ensure_role(c, role, "memory_writer")
                c.execute("SELECT memory.grant_org(%s, 'acme')", (role,))
        yield port, d, real
    finally:
        if real:
            subprocess.run([str(CLUSTER), "stop", "mcp-tls"], check=False)
        if front:
            front.close()
        shutil.rmtree(d, ignore_errors=True)


def start_with(binary, database_url):
    """memory-mcp over stdio with this connection string: (exit code, stderr) when it refuses to
    start, or None when it serves (a recall answered)."""
    with tempfile.TemporaryDirectory() as home:  # no ~/.postgresql: only what the string says
        env = {"PATH": os.environ.get("PATH", ""), "HOME": home}
        return _start_with(binary, database_url, env)


def _start_with(binary, database_url, env):
    p = subprocess.run([binary, "--database-url", database_url], input="", capture_output=True, text=True, timeout=30, env=env)
    if p.returncode == 2:
        return p.returncode, p.stderr

    async def go():
        params = StdioServerParameters(command=binary, args=["--database-url", database_url], env=env)
        with open(os.devnull, "w") as errlog:
            async with stdio_client(params, errlog=errlog) as (r, w):
                async with ClientSession(r, w, client_info=Implementation(name=CLIENT, version="1.0")) as s:
                    await s.initialize()
                    assert await ok(s, "recall", query="anything") == []

    run(go())
    return None


def test_tls_to_the_database(binary, tls_cluster):
    port, d, real = tls_cluster
    kv = f"port={port} dbname=mcp_tls user=mcp_tls"
    # verify-full: the right CA and the certificate's host name.
    assert start_with(binary, f"host=localhost {kv} sslmode=verify-full sslrootcert={d}/ca.crt") is None
    assert start_with(binary, f"postgresql://mcp_tls@localhost:{port}/mcp_tls?sslmode=verify-full&sslrootcert={d}/ca.crt") is None
    code, err = start_with(binary, f"host=localhost {kv} sslmode=verify-full sslrootcert={d}/other_ca.crt")
    assert code == 2 and "certificate" in err.lower(), err
    code, err = start_with(binary, f"host=127.0.0.1 {kv} sslmode=verify-full sslrootcert={d}/ca.crt")
    assert code == 2 and "certificate" in err.lower() and "name" in err.lower(), ("the certificate is for localhost", err)
    # verify-ca: the chain, not the name.
    assert start_with(binary, f"host=127.0.0.1 {kv} sslmode=verify-ca sslrootcert={d}/ca.crt") is None
    code, err = start_with(binary, f"host=127.0.0.1 {kv} sslmode=verify-ca sslrootcert={d}/other_ca.crt")
    assert code == 2 and "certificate" in err.lower(), err
    # require with a root certificate checks the chain as verify-ca (libpq); without one, encryption only.
    code, err = start_with(binary, f"host=127.0.0.1 {kv} sslmode=require sslrootcert={d}/other_ca.crt")
    assert code == 2 and "certificate" in err.lower(), err
    assert start_with(binary, f"postgresql://mcp_tls@127.0.0.1:{port}/mcp_tls?sslmode=require") is None
    assert start_with(binary, f"host=127.0.0.1 {kv}") is None, "prefer (the default) takes the server's TLS"
    # disable against a server that takes TLS only.
    code, err = start_with(binary, f"host=127.0.0.1 {kv} sslmode=disable")
    assert code == 2 and ("no encryption" in err or not real), err
    code, err = start_with(binary, f"host=localhost {kv} sslmode=verify-full")
    assert code == 2 and "sslrootcert" in err, "verify-full without a CA is refused, as libpq does"
    # A client certificate (pg_hba `cert`): the role's CN, signed by the server's CA.
    cert = f"sslcert={d}/client.crt sslkey={d}/client.key"
    assert start_with(binary, f"host=localhost port={port} dbname=mcp_tls user=mcp_tls_cert sslmode=verify-full sslrootcert={d}/ca.crt {cert}") is None
    code, err = start_with(binary, f"host=localhost port={port} dbname=mcp_tls user=mcp_tls_cert sslmode=verify-full sslrootcert={d}/ca.crt")
    assert code == 2 and ("certificate" in err.lower() or not real), err


def test_remember_refuses_a_blank_memory(binary, app, conn):
    """Issue 46: `remember` inserts into memory.observations, whose classify trigger refuses an empty
    or white-space-only content: a tool error with 22023, and nothing stored."""
    before = conn.execute("SELECT count(*) FROM memory.observations").fetchone()

    async def go():
        async with session(binary, app, WRITER) as s:
            for blank in ("", "   ", "\t\n"):
                err = await refused(s, "remember", content=blank)
                assert err["sqlstate"] == "22023" and "empty or blank" in err["message"] and err["hint"], err

    run(go())
    assert conn.execute("SELECT count(*) FROM memory.observations").fetchone() == before, "nothing was stored"


# ---- Embeddings (issue 51): an OpenAI-compatible embedder; a failure never loses a memory ----

DIMS = 8
# The fake embedder's meaning: each word of a group adds 1 to its dimension, so a question shares
# a direction with a memory without sharing a word; dimension 7 is a constant (never a zero vector).
CONCEPTS = [{"tea", "coffee", "oolong", "beverage", "drink", "espresso"},
            {"jazz", "music", "song", "guitar", "listen", "listens"},
            {"invoice", "billing", "payment", "money", "pay"},
            {"hike", "mountain", "trail", "outdoors"}]


def fake_vector(text, dims=DIMS):
    words = [w.strip(".,?!'\"").lower() for w in text.split()]
    v = [float(sum(w in group for w in words)) for group in CONCEPTS] + [0.0] * (dims - len(CONCEPTS))
    v[dims - 1] = 0.1
    return v


class Embedder:
    """A local OpenAI-compatible embeddings endpoint: mode "ok" (deterministic vectors of `dims`),
    "fail" (HTTP 500), "drop" (closes the connection unanswered) or "slow" (answers after 3 s,
    past the server's timeout). Records each
    request's Authorization header and model."""

    def __init__(self, dims=DIMS):
        self.mode, self.dims, self.seen = "ok", dims, []
        this = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                this.seen.append((self.headers.get("Authorization"), body["model"], body["input"]))
                if this.mode == "fail":
                    self.send_response(500)
                    self.end_headers()
                    return
                if this.mode == "drop":  # the connection closes with no answer: a transport error
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if this.mode == "slow":
                    time.sleep(3)
                out = {"object": "list", "model": body["model"],
                       "data": [{"object": "embedding", "index": i, "embedding": fake_vector(t, this.dims)} for i, t in enumerate(body["input"])]}
                data = json.dumps(out).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *a):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1/embeddings"


@pytest.fixture
def embedder():
    e = Embedder()
    yield e
    e.httpd.shutdown()


def enable_embeddings(conn):
    conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    conn.execute("SELECT memory.enable_embeddings(%s)", (DIMS,))


@contextlib.contextmanager
def embedding_server(binary, dsn, issuer, embedder, *args):
    """memory-mcp over HTTP with JWTs and the fake embedder (key sk-test, timeout 1 s); yields
    (port, the audience of its tokens)."""
    env = dict(os.environ, MEMORY_MCP_EMBEDDINGS_KEY="sk-test")
    with http_server(binary, dsn, WRITER, "--auth", "jwt", "--issuer", Issuer.NAME, "--jwks-url", issuer.url,
                     "--embeddings-url", embedder.url, "--embeddings-model", "fake-8", "--embeddings-timeout", "1",
                     *args, env=env) as (port, _):
        yield port, f"http://127.0.0.1:{port}/mcp"


def backlog(dsn):
    """memory.embedding_backlog as acme's tenant-bound admin: (id, key) oldest first."""
    with connect(dsn, ADMIN) as a:
        return a.execute("SELECT id::text, key FROM memory.embedding_backlog WHERE org_id = 'acme'").fetchall()


def test_embeddings_remember_stores_a_vector_and_recall_finds_by_meaning(binary, app, conn, issuer, embedder):
    enable_embeddings(conn)
    with embedding_server(binary, app, issuer, embedder) as (port, aud):
        async def go():
            async with sdk(port, issuer.token(aud)) as s:
                tea = await answer(s, "remember", content="Alice orders oolong tea every morning", user_id="alice")
                jazz = await answer(s, "remember", content="Alice listens to jazz on weekends", user_id="alice")
                assert tea["embedded"] and jazz["embedded"] and "embedding_error" not in tea, tea
                # No word in common with either memory: full text alone finds nothing.
                got = await answer(s, "recall", query="which beverage would she drink", k=1)
                assert got["search"] == "hybrid" and "fallback" not in got, got
                assert [m["id"] for m in got["memories"]] == [tea["id"]], "the question recalls by meaning"
                got = await answer(s, "recall", query="what music", k=1)
                assert [m["id"] for m in got["memories"]] == [jazz["id"]]
                block = await answer(s, "context", query="which beverage would she drink", token_budget=200)
                assert block["search"] == "hybrid" and block["context"]["ids"][0] == tea["id"], block
                assert "oolong tea" in block["context"]["text"]
                return tea["id"]

        tea_id = run(go())
    stored = conn.execute("SELECT embedding::text FROM memory.observations WHERE id = %s", (tea_id,)).fetchone()[0]
    assert json.loads(stored) == pytest.approx(fake_vector("Alice orders oolong tea every morning")), "the embedder's vector, stored with the memory"
    assert backlog(app) == []
    assert all(auth == "Bearer sk-test" and model == "fake-8" for auth, model, _ in embedder.seen), "the key from the environment, the model"
    assert ["dimension check"] in [inp for _, _, inp in embedder.seen], "the dimensions were checked at start"


def test_embedder_down_or_slow_never_loses_a_memory(binary, app, conn, issuer, embedder):
    enable_embeddings(conn)
    with embedding_server(binary, app, issuer, embedder) as (port, aud):
        async def go():
            async with sdk(port, issuer.token(aud)) as s:
                embedder.mode = "fail"
                down = await answer(s, "remember", content="Alice orders oolong tea every morning")
                assert down["embedded"] is False and "HTTP 500" in down["embedding_error"], down
                embedder.mode = "slow"
                slow = await answer(s, "put", namespace=["prefs", "alice"], key="drink", value={"likes": "espresso"})
                assert slow["embedded"] is False and "timed out" in slow["embedding_error"], slow
                assert backlog(app) == [(down["id"], None), (slow["id"], "drink")], "both wait for an embedding"
                got = await answer(s, "recall", query="oolong tea")
                assert got["search"] == "lexical" and "timed out" in got["fallback"], "recall says it fell back"
                assert [m["id"] for m in got["memories"]] == [down["id"]], "the memory is kept, found by its words"
                embedder.mode = "fail"
                got = await answer(s, "search", query="espresso")
                assert got["search"] == "lexical" and "HTTP 500" in got["fallback"] and [i["key"] for i in got["items"]] == ["drink"]
                embedder.mode = "drop"
                dropped = await answer(s, "remember", content="Bob drinks green tea")
                assert dropped["embedded"] is False and "unreachable" in dropped["embedding_error"], dropped
                assert "127.0.0.1" not in dropped["embedding_error"] and "/v1/embeddings" not in dropped["embedding_error"], \
                    "the embedder's URL is not told to MCP clients"
                embedder.mode = "ok"
                got = await answer(s, "recall", query="oolong tea")
                assert got["search"] == "hybrid" and "fallback" not in got

        run(go())
    assert conn.execute("SELECT count(*) FROM memory.observations WHERE embedding IS NULL").fetchone() == (3,)
    with connect(app, READER) as r:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            r.execute("SELECT * FROM memory.embedding_backlog")
    with connect(app, GLOBEX) as g:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            g.execute("SELECT * FROM memory.embedding_backlog")
    conn.execute("SELECT memory.grant_org(%s, 'globex')", (ADMIN,))
    with connect(app, ADMIN) as a:
        a.execute("SET memory.org_id = 'globex'")
        assert a.execute("SELECT count(*) FROM memory.embedding_backlog").fetchone() == (0,), "one org's backlog when memory.org_id names it"


def test_embeddings_start_checks(binary, app, conn, issuer):
    wrong = Embedder(dims=4)
    try:
        args = ("--http", "127.0.0.1:0", "--auth", "none", "--embeddings-url", wrong.url)
        code, err = start_failure_http(binary, app, WRITER, *args)
        assert code == 2 and "memory.enable_embeddings" in err, "embeddings must be enabled in the database"
        code, err = start_failure_http(binary, app, WRITER, "--http", "127.0.0.1:0", "--auth", "none", "--embeddings-url", "http://embed.example/v1/embeddings")
        assert code == 2 and "must be https" in err, "memories and the key are not sent in the clear off this machine"
        enable_embeddings(conn)
        code, err = start_failure_http(binary, app, WRITER, *args)
        assert code == 2 and "4 dimensions" in err and f"{DIMS}" in err, err
    finally:
        wrong.httpd.shutdown()


def test_item_tools_and_record_outcome_with_scopes(binary, app, conn, issuer, embedder):
    enable_embeddings(conn)
    with embedding_server(binary, app, issuer, embedder) as (port, aud):
        reader = issuer.token(aud, scope="memory:read", sub="bob")

        async def go():
            async with sdk(port, issuer.token(aud)) as s:
                put = await answer(s, "put", namespace=["prefs", "alice"], key="drink", value={"likes": "oolong tea", "cups": 2})
                assert put["embedded"] is True
                await answer(s, "put", namespace=["prefs", "alice"], key="music", value={"likes": "jazz guitar"})
                await answer(s, "put", namespace=["prefs", "bob"], key="drink", value={"likes": "espresso", "cups": 5})
                got = await answer(s, "get", namespace=["prefs", "alice"], key="drink")
                assert got["item"]["id"] == put["id"] and got["item"]["value"] == {"likes": "oolong tea", "cups": 2}
                assert (await answer(s, "get", namespace=["prefs", "alice"], key="nope")) == {"item": None}
                found = await answer(s, "search", namespace_prefix=["prefs", "alice"], query="a beverage", k=1)
                assert found["search"] == "hybrid" and [i["key"] for i in found["items"]] == ["drink"], "a plain question, by meaning"
                found = await ok(s, "search", namespace_prefix=["prefs"], filter={"cups": {"$gt": 3}})
                assert [(i["namespace"], i["key"]) for i in found] == [(["prefs", "bob"], "drink")]
                mem = await answer(s, "remember", content="the deploy runbook lives in the wiki")
                out = await ok(s, "record_outcome", session_id="s1", outcome="accepted", observation_ids=[mem["id"]])
                assert [(r["observation_id"], r["applied"], r["reason"]) for r in out] == [(mem["id"], True, "applied")]
                out = await ok(s, "record_outcome", session_id="s1", outcome="accepted", observation_ids=[mem["id"]])
                assert [r["reason"] for r in out] == ["already_recorded"]
                err = await refused(s, "record_outcome", session_id="s2", outcome="loved", observation_ids=[mem["id"]])
                assert err["sqlstate"] == "22P02", err
                assert await answer(s, "delete", namespace=["prefs", "alice"], key="music") == {"deleted": True}
                assert await answer(s, "delete", namespace=["prefs", "alice"], key="music") == {"deleted": False}
                err = await refused(s, "put", namespace=["prefs"], key="k", value={"a": 1}, ttl="forever")
                assert err["sqlstate"] == "22007", err
                return put["id"], mem["id"]

            async with sdk(port, reader) as s:
                assert {t.name for t in (await s.list_tools()).tools} == READ_TOOLS
                assert [i["key"] for i in await ok(s, "search", namespace_prefix=["prefs", "alice"])] == ["drink"]

        item_id, mem_id = run(go())
        sid = session_of(port, reader)
        for tool, args in (("put", {"namespace": ["x"], "key": "k", "value": {"a": 1}}), ("delete", {"namespace": ["prefs", "alice"], "key": "drink"}),
                           ("record_outcome", {"session_id": "s9", "outcome": "rejected", "observation_ids": [mem_id]})):
            status, h, _ = call_raw(port, reader, sid, tool, **args)
            assert status == 403 and 'error="insufficient_scope"' in h["www-authenticate"] and "memory:write" in h["www-authenticate"], (tool, status, h)
        assert call_raw(port, reader, sid, "get", namespace=["prefs", "alice"], key="drink")[0] == 200
    assert conn.execute("SELECT count(*) FROM memory.observations WHERE key = 'drink' AND namespace = '{prefs,alice}'").fetchone() == (1,)
    assert conn.execute("SELECT embedding IS NOT NULL FROM memory.observations WHERE id = %s", (item_id,)).fetchone() == (True,)
    assert conn.execute("SELECT count(*) FROM memory.observation_weight_history WHERE observation_id = %s", (mem_id,)).fetchone() == (1,), \
        "the read-only token's outcome changed nothing"
    conn.execute("SELECT memory.audit_integrate()")
    tools = [t for (t,) in conn.execute("SELECT payload->>'tool' FROM memory.audit_log WHERE event_type = 'memory.mcp.tool_invoked' ORDER BY seq")]
    assert {"put", "get", "search", "delete", "record_outcome"} <= set(tools)


def test_put_with_a_failing_embedder_never_keeps_the_old_vector(binary, app, conn, issuer, embedder):
    enable_embeddings(conn)
    with embedding_server(binary, app, issuer, embedder) as (port, aud):
        async def go():
            async with sdk(port, issuer.token(aud)) as s:
                first = await answer(s, "put", namespace=["prefs", "alice"], key="likes", value={"likes": "oolong tea"})
                assert first["embedded"] is True
                found = await answer(s, "search", namespace_prefix=["prefs", "alice"], query="a beverage")
                assert [i["key"] for i in found["items"]] == ["likes"], "found by meaning while its vector is its value's"
                embedder.mode = "fail"
                second = await answer(s, "put", namespace=["prefs", "alice"], key="likes", value={"likes": "jazz guitar"})
                assert second["id"] == first["id"] and second["embedded"] is False and "HTTP 500" in second["embedding_error"], second
                assert backlog(app) == [(first["id"], "likes")], "the new value waits for its embedding"
                embedder.mode = "ok"
                found = await answer(s, "search", namespace_prefix=["prefs", "alice"], query="a beverage")
                assert found["search"] == "hybrid" and found["items"] == [], "the new value is not found by the old value's meaning"
                found = await answer(s, "search", namespace_prefix=["prefs", "alice"], query="jazz")
                assert [i["value"] for i in found["items"]] == [{"likes": "jazz guitar"}], "found by its words"
                third = await answer(s, "put", namespace=["prefs", "alice"], key="likes", value={"likes": "jazz guitar", "n": 2})
                assert third["embedded"] is True
                return first["id"]

        item_id = run(go())
    stored = conn.execute("SELECT embedding::text, value FROM memory.observations WHERE id = %s", (item_id,)).fetchone()
    assert json.loads(stored[0]) == pytest.approx(fake_vector("likes jazz guitar n 2")) and stored[1] == {"likes": "jazz guitar", "n": 2}
    assert backlog(app) == []


def test_supersede_stores_the_corrected_texts_embedding(binary, app, conn, issuer, embedder):
    """supersede embeds the corrected text and stores its vector in the same call, as remember
    does; with the embedder down the correction is stored all the same and waits in the backlog."""
    enable_embeddings(conn)
    with embedding_server(binary, app, issuer, embedder) as (port, aud):
        async def go():
            async with sdk(port, issuer.token(aud)) as s:
                home = await answer(s, "remember", content="Alice listens to jazz on weekends", user_id="alice")
                moved = await answer(s, "supersede", id=home["id"], content="Alice orders oolong tea every morning now", reason="she changed")
                assert moved["embedded"] is True and "embedding_error" not in moved and moved["supersedes"] == home["id"], moved
                assert backlog(app) == [], "the correction does not wait for an embedding"
                got = await answer(s, "recall", query="which beverage would she drink", k=1)
                assert got["search"] == "hybrid" and [m["id"] for m in got["memories"]] == [moved["id"]], "found by meaning"
                embedder.mode = "fail"
                again = await answer(s, "supersede", id=moved["id"], content="Alice hikes the mountain trail", reason="new habit")
                assert again["embedded"] is False and "HTTP 500" in again["embedding_error"], again
                assert backlog(app) == [(again["id"], None)], "stored all the same; it waits for its embedding"
                return moved["id"]

        moved_id = run(go())
    stored = conn.execute("SELECT embedding::text, superseded_by IS NOT NULL FROM memory.observations WHERE id = %s", (moved_id,)).fetchone()
    assert json.loads(stored[0]) == pytest.approx(fake_vector("Alice orders oolong tea every morning now")) and stored[1], \
        "the corrected text's vector (that memory superseded since)"
    assert [inp for _, _, inp in embedder.seen].count(["Alice orders oolong tea every morning now"]) == 1, "one embedding request a call"


def test_history_supersede_and_lineage_over_http(binary, app, conn, issuer):
    """SPEC §17-§19: history (memory:read), supersede (memory:write), lineage (memory:read), each one
    SQL call for the token's org; remember passes derived_from through."""
    ensure_role(conn, "mcp_multi", "memory_writer")
    conn.execute("SELECT memory.grant_org('mcp_multi', 'acme'), memory.grant_org('mcp_multi', 'globex')")
    args = ("--auth", "jwt", "--issuer", Issuer.NAME, "--jwks-url", issuer.url)
    with http_server(binary, app, "mcp_multi", *args) as (port, _):
        aud = f"http://127.0.0.1:{port}/mcp"
        reader = issuer.token(aud, scope="memory:read", sub="bob")

        async def as_acme():
            async with sdk(port, issuer.token(aud)) as s:
                home = await ok(s, "remember", content="Alice lives in Paris near the river")
                with connect(app, WRITER) as w:
                    w.execute("BEGIN")
                    w.execute("SET LOCAL memory.org_id = 'acme'")
                    w.execute("SET LOCAL memory.change_reason = 'she gave her street'")
                    w.execute("UPDATE memory.observations SET content = 'Alice lives in Paris on the Rue Cler' WHERE id = %s", (home["id"],))
                    w.execute("COMMIT")
                versions = await ok(s, "history", id=home["id"])
                assert [(v["rev"], v["content"], v["valid_to"] is None) for v in versions] == [
                    (2, "Alice lives in Paris on the Rue Cler", True), (1, "Alice lives in Paris near the river", False)], versions
                assert versions[1]["reason"] == "she gave her street"

                moved = await answer(s, "supersede", id=home["id"], content="Alice lives in Lyon now", reason="she moved",
                                     metadata={"source": "chat"})
                assert moved["supersedes"] == home["id"] and moved["id"] != home["id"], moved
                assert moved["embedded"] is False and "embedding_error" not in moved, "no embedder configured: none stored"
                assert [m["id"] for m in await ok(s, "recall", query="Alice lives")] == [moved["id"]], "the old memory is not recalled"
                assert await ok(s, "recall", query="Paris") == []
                assert [v["content"] for v in await ok(s, "history", id=home["id"])][0] == "Alice lives in Paris on the Rue Cler", \
                    "a superseded memory keeps its history"
                err = await refused(s, "supersede", id=home["id"], content="Alice lives in Nice", reason="again")
                assert err["sqlstate"] == "22023" and "already superseded" in err["message"], err
                assert (await refused(s, "supersede", id=moved["id"], content="x", reason=" "))["sqlstate"] == "22023"
                assert (await refused(s, "supersede", id="not-a-uuid", content="x", reason="r"))["sqlstate"] == "22P02"
                with pytest.raises(MCPError):
                    await s.call_tool("supersede", {"id": moved["id"], "reason": "no content"})

                a = await ok(s, "remember", content="Alice ordered oolong tea on Monday")
                b = await ok(s, "remember", content="Alice ordered oolong tea on Friday")
                summary = await ok(s, "remember", content="Alice likes oolong tea", derived_from=[a["id"], b["id"]])
                digest = await ok(s, "remember", content="Alice: tea drinker", derived_from=[summary["id"]])
                up = await ok(s, "lineage", id=digest["id"])
                assert [(m["id"], m["depth"]) for m in up] == [(summary["id"], 1), (a["id"], 2), (b["id"], 2)], up
                assert all(m["live"] for m in up) and up[0]["content"] == "Alice likes oolong tea"
                down = await ok(s, "lineage", id=a["id"], direction="down")
                assert [(m["id"], m["depth"]) for m in down] == [(summary["id"], 1), (digest["id"], 2)], down
                assert await ok(s, "lineage", id=a["id"]) == [], "a source has no sources"
                assert (await refused(s, "lineage", id=a["id"], direction="sideways"))["sqlstate"] == "22023"
                assert (await refused(s, "history", id="42"))["sqlstate"] == "22P02"
                assert (await refused(s, "remember", content="x", derived_from=["nope"]))["sqlstate"] == "22P02"
                assert await ok(s, "history", id="00000000-0000-0000-0000-000000000000") == []
                return {"home": home["id"], "moved": moved["id"], "a": a["id"], "b": b["id"], "summary": summary["id"]}

        ids = run(as_acme())

        async def as_others():
            async with sdk(port, issuer.token(aud, org="globex")) as s:
                # The login role may act for both orgs; a globex token reaches none of acme's memories.
                err = await refused(s, "supersede", id=ids["moved"], content="globex overwrites acme", reason="cross-tenant")
                assert err["sqlstate"] == "P0002", err
                assert await ok(s, "lineage", id=ids["summary"]) == [] and await ok(s, "lineage", id=ids["a"], direction="down") == []
                assert await ok(s, "history", id=ids["home"]) == []
            async with sdk(port, reader) as s:
                assert {t.name for t in (await s.list_tools()).tools} == READ_TOOLS
                assert len(await ok(s, "history", id=ids["home"])) == 2
                assert [m["id"] for m in await ok(s, "lineage", id=ids["summary"])] == [ids["a"], ids["b"]]

        run(as_others())
        sid = session_of(port, reader)
        status, h, _ = call_raw(port, reader, sid, "supersede", id=ids["moved"], content="bob's correction", reason="bob")
        assert status == 403 and 'error="insufficient_scope"' in h["www-authenticate"] and 'scope="memory:write"' in h["www-authenticate"], (status, h)
        assert call_raw(port, reader, sid, "lineage", id=ids["summary"])[0] == 200
    live = conn.execute("SELECT content FROM memory.observations WHERE superseded_at IS NULL AND content LIKE 'Alice lives%'").fetchall()
    assert live == [("Alice lives in Lyon now",)], "neither the globex token nor the reader changed it"
    conn.execute("SELECT memory.audit_integrate()")
    tools = {t for (t,) in conn.execute("SELECT payload->>'tool' FROM memory.audit_log WHERE event_type = 'memory.mcp.tool_invoked'")}
    assert {"history", "supersede", "lineage"} <= tools
