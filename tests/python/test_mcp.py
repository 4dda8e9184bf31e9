"""memory-mcp (issue 39): a real MCP client (the Python `mcp` SDK) drives the built binary over
stdio against a cluster, logged in as the application's tenant-bound roles (test_app_roles' `app`
fixture). Every rule is the database's: the tools answer with its rows, and its refusals come
back as MCP tool errors carrying the SQLSTATE, message, detail and hint, changing nothing.

The binary: $MEMORY_MCP_BIN when set (make test-mcp), else `cargo build -p memory-mcp` (debug).
"""
import asyncio
import contextlib
import json
import os
import pathlib
import subprocess

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError
from mcp.types import Implementation

from conftest import ROOT, connect, ensure_role
from test_app_roles import ADMIN, GLOBEX, READER, WRITER, app  # noqa: F401  (the fixture)

CLIENT = "pytest-agent"
ALL_TOOLS = {"remember", "recall", "forget", "retrieve", "claim_chain"}


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


async def ok(s, tool, **arguments):
    """The tool's answer as JSON; fails on a tool error."""
    res = await s.call_tool(tool, arguments)
    assert not res.is_error, (tool, res.content)
    return json.loads(res.content[0].text)


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
                assert len(t.description) > 40 and t.input_schema["type"] == "object" and t.input_schema["required"], t.name
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
    events = conn.execute("SELECT payload, actor_id FROM memory.audit_log WHERE chain_id = 'acme' "
                          "AND event_type = 'memory.mcp.tool_invoked' ORDER BY seq").fetchall()
    assert [p["tool"] for p, _ in events] == ["remember", "recall", "recall", "forget", "recall"]
    assert [p["count"] for p, _ in events] == [1, 1, 1, 1, 0]
    assert all(set(p) == {"tool", "client", "count"} and p["client"] == CLIENT for p, _ in events), "never content or the query"
    # The actor is the client, pseudonymised (memory.actor_id = mcp:<client>), and the role.
    assert all(a.startswith("h:") and a.endswith("role:app_writer") for _, a in events), events[0][1]
    assert conn.execute("SELECT count(*) FROM memory.audit_log WHERE chain_id = 'acme' AND event_type IN ('memory.recall', 'memory.forget')"
                        ).fetchone()[0] == 4, "the functions' own events, besides memory-mcp's"
    assert all(ok_ for (ok_,) in conn.execute("SELECT ok FROM memory.audit_verify('acme')").fetchall())


def test_read_only_lists_no_writes_and_refuses_them(binary, app, conn):
    async def go():
        async with session(binary, app, READER, "--read-only") as s:
            assert {t.name for t in (await s.list_tools()).tools} == {"recall", "retrieve", "claim_chain"}
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


def test_streamable_http(binary, app, conn):
    import socket
    from mcp.client.streamable_http import streamable_http_client

    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
    proc = subprocess.Popen([binary, "--database-url", url(app, READER), "--read-only", "--http", f"127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert "serving streamable HTTP" in proc.stderr.readline() + proc.stderr.readline()

        async def go():
            async with streamable_http_client(f"http://127.0.0.1:{port}/mcp") as (r, w, *_):
                async with ClientSession(r, w, client_info=Implementation(name="http-agent", version="1")) as s:
                    await s.initialize()
                    assert {t.name for t in (await s.list_tools()).tools} == {"recall", "retrieve", "claim_chain"}
                    assert await ok(s, "recall", query="anything") == []

        run(go())
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    conn.execute("SELECT memory.audit_integrate()")
    assert conn.execute("SELECT payload->>'client' FROM memory.audit_log WHERE event_type = 'memory.mcp.tool_invoked'").fetchall() == [("http-agent",)]


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
