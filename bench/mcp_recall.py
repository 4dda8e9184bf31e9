"""Issues 39 and 51 benchmark: the latency of `recall` through memory-mcp (MCP over stdio, and over
streamable HTTP with a JWT) against the same call from psycopg, on the same data, as the same
tenant-bound role; and of `remember` over HTTP against the psycopg insert.

  MCP stdio        the Python MCP SDK's call_tool("recall") to the memory-mcp binary (JSON-RPC over a pipe;
                   per call the server takes a pooled connection, BEGIN, set_config of org and actor,
                   memory.recall, memory_internal._mcp_tool_invoked, COMMIT)
  MCP HTTP + JWT   the same over streamable HTTP (--auth jwt, --jwks-file): each request's RS256 token is
                   verified (signature, iss, aud, exp) before the call
  psycopg, same tx psycopg running that same transaction (the database's share of the MCP call)
  psycopg, recall  SELECT * FROM memory.recall(org, query, 10) in autocommit (what an application calls)
  remember         call_tool("remember") over HTTP + JWT without --embeddings-url (the embedder's latency
                   excluded: with one, remember adds the embedder's round trip before its transaction and
                   one bind parameter), against INSERT INTO memory.observations ... RETURNING id, classification
                   from psycopg in autocommit, and against memory-mcp's own remember transaction from psycopg
                   (BEGIN, set_config of org and actor, the INSERT, memory_internal._mcp_tool_invoked, COMMIT)
  MCP ping         the SDK's ping over the same HTTP session: the protocol's floor (JSON-RPC, HTTP, the JWT
                   check, the Python client), which the psycopg rows do not pay

Median (and p95) of N calls each, queries drawn in turn from a fixed word list, after 20 warm-up calls.

Usage: mcp_recall.py DSN [ROWS] [N] [BINARY]
DSN: a superuser connection (it creates the role mcp_bench, bound to org bench-mcp, and ROWS observations
of that org, default 100000); N default 500; BINARY default target/release/memory-mcp.
"""
import asyncio
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import jwt
import psycopg
from cryptography.hazmat.primitives.asymmetric import rsa
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.types import Implementation

from common import ROOT, machine, write_section

ORG, ROLE = "bench-mcp", "mcp_bench"
WORDS = ["billing", "deploy", "invoice", "latency", "customer", "refund", "schema", "migration", "oncall", "pricing",
         "roadmap", "backup", "search", "onboarding", "timeout", "cache", "quota", "release", "audit", "feedback"]
QUERIES = [f"{a} {b}" for a in WORDS for b in WORDS if a < b]
SAME_TX = ("SELECT pg_catalog.set_config('memory.org_id', %s, true), pg_catalog.set_config('memory.actor_id', %s, true)",
           "SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object('id', r.id, 'content', r.content, "
           "'classification', r.classification, 'weight', r.weight, 'score', r.score) ORDER BY r.ordinality), '[]')::text, "
           "pg_catalog.count(*)::int FROM memory.recall(org_id => %s::text, query => %s::text, k => %s::int) WITH ORDINALITY AS r",
           "SELECT memory_internal._mcp_tool_invoked('recall', 'bench', %s)")


def setup(dsn, rows):
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SELECT memory.setup_roles()")
        c.execute(f"DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{ROLE}') THEN CREATE ROLE {ROLE} LOGIN; END IF; END $$")
        c.execute(f"GRANT memory_writer TO {ROLE}")
        c.execute("SELECT memory.grant_org(%s, %s)", (ROLE, ORG))
        (have,) = c.execute("SELECT count(*) FROM memory.observations WHERE org_id = %s", (ORG,)).fetchone()
        if have < rows:
            c.execute("""INSERT INTO memory.observations (org_id, user_id, content)
                         SELECT %s, 'user-' || (g %% 50),
                                'note ' || g || ': ' || (%s::text[])[1 + g %% 20] || ' and ' || (%s::text[])[1 + (g / 20) %% 20]
                                || ' discussed with the team'
                           FROM generate_series(%s + 1, %s) g""", (ORG, WORDS, WORDS, have, rows))
        c.execute("VACUUM ANALYZE memory.observations")
        c.execute("SELECT memory.audit_integrate()")


def stats(xs):
    xs = sorted(xs)
    return statistics.median(xs) * 1000, xs[int(len(xs) * 0.95) - 1] * 1000


async def mcp_latencies(binary, dsn, n):
    params = StdioServerParameters(command=binary, args=["--database-url", dsn.replace("user=postgres", f"user={ROLE}")])
    async with stdio_client(params) as (r, w):
        async with ClientSession(r, w, client_info=Implementation(name="bench", version="1")) as s:
            await s.initialize()
            out = []
            for i in range(n + 20):
                t0 = time.perf_counter()
                res = await s.call_tool("recall", {"query": QUERIES[i % len(QUERIES)], "k": 10})
                dt = time.perf_counter() - t0
                assert not res.is_error, res.content
                if i >= 20:
                    out.append(dt)
            return out


ISSUER = "https://bench.test"


@contextlib.contextmanager
def http_server(binary, dsn):
    """memory-mcp --http --auth jwt on a free loopback port with a JWKS file of a fresh RSA key;
    yields (url, a token of org ORG with both scopes)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key(), as_dict=True)
    jwk.update(kid="k1", use="sig", alg="RS256")
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
    url = f"http://127.0.0.1:{port}/mcp"
    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
        json.dump({"keys": [jwk]}, f)
        f.flush()
        proc = subprocess.Popen([binary, "--database-url", dsn.replace("user=postgres", f"user={ROLE}"), "--http", f"127.0.0.1:{port}",
                                 "--auth", "jwt", "--issuer", ISSUER, "--jwks-file", f.name],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            while "serving streamable HTTP" not in (line := proc.stderr.readline()):
                assert line, ("memory-mcp exited", proc.wait())
            now = int(time.time())
            token = jwt.encode({"iss": ISSUER, "aud": url, "sub": "bench", "org": ORG, "scope": "memory:read memory:write",
                                "iat": now, "exp": now + 3600}, key, algorithm="RS256", headers={"kid": "k1"})
            yield url, token
        finally:
            proc.terminate()
            proc.wait(timeout=10)


async def http_latencies(url, token, n, tool):
    async with create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as client:
        async with streamable_http_client(url, http_client=client) as (r, w, *_):
            async with ClientSession(r, w, client_info=Implementation(name="bench", version="1")) as s:
                await s.initialize()
                out = []
                for i in range(n + 20):
                    args = {"query": QUERIES[i % len(QUERIES)], "k": 10} if tool == "recall" else \
                        {"content": f"bench note {i}: {QUERIES[i % len(QUERIES)]} discussed with the team"}
                    t0 = time.perf_counter()
                    if tool == "ping":
                        await s.send_ping()
                    else:
                        res = await s.call_tool(tool, args)
                    dt = time.perf_counter() - t0
                    if tool != "ping":
                        assert not res.is_error, res.content
                    if i >= 20:
                        out.append(dt)
                return out


def insert_latencies(dsn, n, same_tx=False):
    """The psycopg insert in autocommit, or (same_tx) in memory-mcp's remember transaction."""
    with psycopg.connect(dsn.replace("user=postgres", f"user={ROLE}"), autocommit=True) as c:
        c.execute("SELECT set_config('memory.org_id', %s, false)", (ORG,))
        out = []
        insert = "INSERT INTO memory.observations (org_id, content) VALUES (%s, %s) RETURNING id::text, classification::text"
        for i in range(n + 20):
            content = f"bench insert {'tx ' if same_tx else ''}{i}: {QUERIES[i % len(QUERIES)]} discussed with the team"
            t0 = time.perf_counter()
            if same_tx:
                with c.transaction():
                    c.execute(SAME_TX[0], (ORG, "mcp:bench"))
                    c.execute(insert, (ORG, content)).fetchone()
                    c.execute("SELECT memory_internal._mcp_tool_invoked('remember', 'bench', 1)")
            else:
                c.execute(insert, (ORG, content)).fetchone()
            dt = time.perf_counter() - t0
            if i >= 20:
                out.append(dt)
        return out


def load():
    return "load average {:.2f} {:.2f} {:.2f} (1, 5, 15 min) at the start".format(*os.getloadavg())


def sql_latencies(dsn, n, same_tx):
    with psycopg.connect(dsn.replace("user=postgres", f"user={ROLE}"), autocommit=True) as c:
        c.execute("SELECT set_config('memory.org_id', %s, false)", (ORG,))
        out = []
        for i in range(n + 20):
            q = QUERIES[i % len(QUERIES)]
            t0 = time.perf_counter()
            if same_tx:
                with c.transaction():
                    c.execute(SAME_TX[0], (ORG, "mcp:bench"))
                    (_, count) = c.execute(SAME_TX[1], (ORG, q, 10)).fetchone()
                    c.execute(SAME_TX[2], (count,))
            else:
                c.execute("SELECT * FROM memory.recall(%s, %s, 10)", (ORG, q)).fetchall()
            dt = time.perf_counter() - t0
            if i >= 20:
                out.append(dt)
        return out


def main():
    dsn = sys.argv[1]
    rows = int(sys.argv[2]) if len(sys.argv) > 2 else 100000
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 500
    binary = sys.argv[4] if len(sys.argv) > 4 else str(ROOT / "target" / "release" / "memory-mcp")
    setup(dsn, rows)
    at = load()
    mcp = stats(asyncio.run(mcp_latencies(binary, dsn, n)))
    with http_server(binary, dsn) as (url, token):
        web = stats(asyncio.run(http_latencies(url, token, n, "recall")))
        web_remember = stats(asyncio.run(http_latencies(url, token, n, "remember")))
        ping = stats(asyncio.run(http_latencies(url, token, n, "ping")))
    tx = stats(sql_latencies(dsn, n, True))
    plain = stats(sql_latencies(dsn, n, False))
    insert = stats(insert_latencies(dsn, n))
    insert_tx = stats(insert_latencies(dsn, n, True))
    server = web_remember[0] - ping[0]
    body = f"""Command: `make bench` (runs `bench/mcp_recall.py DSN {rows} {n}` against release builds of memory_ext and memory-mcp).
Machine: {machine()}; {at}. Date: {time.strftime('%Y-%m-%d')}.
{rows:,} observations of one org; {n} calls each (`recall`: k = 10, two-word queries in turn; `remember`: one new
memory each), after 20 warm-up calls; one client at a time. `remember` over HTTP runs without `--embeddings-url`:
the embedder's latency is excluded (with one, remember adds the embedder's round trip before its transaction).

| path | median ms | p95 ms |
|---|---|---|
| MCP stdio: `call_tool("recall")` to memory-mcp | {mcp[0]:.2f} | {mcp[1]:.2f} |
| MCP streamable HTTP, RS256 JWT: `call_tool("recall")` | {web[0]:.2f} | {web[1]:.2f} |
| psycopg: memory-mcp's transaction (set_config, `memory.recall`, `_mcp_tool_invoked`) | {tx[0]:.2f} | {tx[1]:.2f} |
| psycopg: `SELECT * FROM memory.recall(org, query, 10)` | {plain[0]:.2f} | {plain[1]:.2f} |
| MCP streamable HTTP, RS256 JWT: `call_tool("remember")` | {web_remember[0]:.2f} | {web_remember[1]:.2f} |
| psycopg: `INSERT INTO memory.observations (org_id, content) ... RETURNING id, classification` | {insert[0]:.2f} | {insert[1]:.2f} |
| psycopg: memory-mcp's remember transaction (set_config, the INSERT, `_mcp_tool_invoked`) | {insert_tx[0]:.2f} | {insert_tx[1]:.2f} |
| MCP streamable HTTP, RS256 JWT: `ping` (the protocol's floor, no database) | {ping[0]:.2f} | {ping[1]:.2f} |

- MCP `recall` median **{mcp[0]:.2f} ms** over stdio and **{web[0]:.2f} ms** over HTTP with a JWT vs **{plain[0]:.2f} ms** from
  psycopg ({mcp[0] / plain[0]:.2f}x and {web[0] / plain[0]:.2f}x; target for HTTP ≤ 1.5x); the protocol and the server add
  {mcp[0] - tx[0]:.2f} ms (stdio) and {web[0] - tx[0]:.2f} ms (HTTP) over the same transaction from psycopg.
- MCP `remember` over HTTP with a JWT median **{web_remember[0]:.2f} ms** vs **{insert[0]:.2f} ms** for the psycopg insert
  ({web_remember[0] / insert[0]:.2f}x; target ≤ 1.3x). Less the protocol's floor (an MCP `ping` over the same session,
  {ping[0]:.2f} ms), remember takes {server:.2f} ms in the server: {server / insert[0]:.2f}x the psycopg insert, and
  {server / insert_tx[0]:.2f}x memory-mcp's own transaction from psycopg ({insert_tx[0]:.2f} ms).
"""
    write_section("memory-mcp recall and remember latency (issues 39, 51)", body)
    print(f"mcp_recall: rows={rows} n={n} {at}; recall MCP stdio median {mcp[0]:.2f} ms (p95 {mcp[1]:.2f}), HTTP+JWT {web[0]:.2f} ms "
          f"(p95 {web[1]:.2f}), same tx from psycopg {tx[0]:.2f} ms, plain recall {plain[0]:.2f} ms; "
          f"remember HTTP+JWT {web_remember[0]:.2f} ms, ping {ping[0]:.2f} ms, psycopg insert {insert[0]:.2f} ms, "
          f"remember's transaction from psycopg {insert_tx[0]:.2f} ms", flush=True)


if __name__ == "__main__":
    main()
