"""Issues 39 and 51 benchmark: the latency of `recall` through memory-mcp (MCP over stdio, and over
streamable HTTP with a JWT) against the same call from psycopg, on the same data, as the same
tenant-bound role; and of `remember` over HTTP against the psycopg insert.

  MCP HTTP + JWT   a call over streamable HTTP (--auth jwt, --jwks-file): each request's RS256 token is
                   verified (signature, iss, aud, exp) before the call; per call the server takes a pooled
                   connection, BEGIN, set_config of org and actor, the tool's statement,
                   memory_internal._mcp_tool_invoked (the audit of the call), COMMIT; remember is one
                   statement (the org, actor and call set locally, then the INSERT, whose memory.store
                   event records the call). Two clients:
                   - raw: bench/mcp_raw.py, a plain MCP client (one kept-alive HTTP/1.1 connection, the
                     initialize handshake, Mcp-Session-Id, JSON-RPC bodies, JSON or SSE responses): what
                     the call costs, the figure the targets are measured with;
                   - SDK: the Python MCP SDK's ClientSession (for reference: it spends 1.6-2.4 ms of CPU
                     a call in the client alone).
  MCP stdio        the SDK's call_tool("recall") to the memory-mcp binary (JSON-RPC over a pipe)
  psycopg, same tx psycopg running memory-mcp's transaction (the database's share of the MCP call)
  psycopg, recall  SELECT * FROM memory.recall(org, query, 10) in autocommit (what an application calls)
  remember         call_tool("remember") over HTTP + JWT without --embeddings-url (the embedder's latency
                   excluded: with one, remember adds the embedder's round trip before its transaction and
                   one bind parameter), against INSERT INTO memory.observations ... RETURNING id, classification
                   from psycopg in autocommit (the target's baseline), SELECT memory.remember(org, content) (like
                   for like, for information), and memory-mcp's own remember statement from psycopg
  MCP ping         a ping over the same HTTP session: the protocol's floor (HTTP, the JWT check, JSON-RPC)
  --stateless      remember and ping through the raw client to a second memory-mcp run with --stateless (no
                   session: each POST answered on its own, in plain JSON)

Every path runs in each of ROUNDS rounds, in an order reversed from one round to the next (the two sides of
each ratio alternate under the same load); a row gives the median over rounds of each round's median (and
p95) of N calls, after 20 warm-up calls. For raw remember, raw ping and SDK remember it gives the CPU a call
costs the client (getrusage of this process) and memory-mcp (its threads' time on CPU, /proc/PID/task/*/schedstat).
Before measuring, the raw client is checked against the SDK: the same tool list and the same tool results.

Usage: mcp_recall.py DSN [ROWS] [N] [BINARY] [ROUNDS]
MCP_BENCH_ONLY=remember runs the remember paths only (insert, memory.remember, memory-mcp's statement, raw and
SDK remember, raw ping, --stateless remember and ping) and prints them without writing bench/RESULTS.md.
DSN: a superuser connection (it creates the role mcp_bench, bound to org bench-mcp, and ROWS observations
of that org, default 100000); N default 500; BINARY default target/release/memory-mcp; ROUNDS default 3.
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

from common import RESULTS, ROOT, machine, write_section
from mcp_raw import RawMcp

ORG, ROLE = "bench-mcp", "mcp_bench"
WORDS = ["billing", "deploy", "invoice", "latency", "customer", "refund", "schema", "migration", "oncall", "pricing",
         "roadmap", "backup", "search", "onboarding", "timeout", "cache", "quota", "release", "audit", "feedback"]
QUERIES = [f"{a} {b}" for a in WORDS for b in WORDS if a < b]
SAME_TX = ("SELECT pg_catalog.set_config('memory.org_id', %s, true), pg_catalog.set_config('memory.actor_id', %s, true), "
           "pg_catalog.set_config('memory.mcp_call', 'recall:bench', true)",
           # The tool's statement with the call's record, as memory-mcp wraps it (mcp/src/main.rs, ToolTx).
           "SELECT t.j, t.n, CASE WHEN t.n IS NOT NULL THEN memory_internal._mcp_tool_invoked('recall', 'bench', t.n) END "
           "FROM (SELECT x.j, (x.c)::int AS n FROM ("
           "SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object('id', r.id, 'content', r.content, "
           "'classification', r.classification, 'weight', r.weight, 'score', r.score) ORDER BY r.ordinality), '[]')::text, "
           "pg_catalog.count(*)::int FROM memory.recall(org_id => %s::text, query => %s::text, k => %s::int) WITH ORDINALITY AS r"
           " OFFSET 0) x(j, c) OFFSET 0) t")


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
def http_server(binary, dsn, *extra):
    """memory-mcp --http --auth jwt on a free loopback port with a JWKS file of a fresh RSA key (EXTRA:
    more flags, e.g. --stateless); yields (url, a token of org ORG with both scopes, the server's pid)."""
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
                                 "--auth", "jwt", "--issuer", ISSUER, "--jwks-file", f.name, *extra],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            while "serving streamable HTTP" not in (line := proc.stderr.readline()):
                assert line, ("memory-mcp exited", proc.wait())
            now = int(time.time())
            token = jwt.encode({"iss": ISSUER, "aud": url, "sub": "bench", "org": ORG, "scope": "memory:read memory:write",
                                "iat": now, "exp": now + 3600}, key, algorithm="RS256", headers={"kid": "k1"})
            yield url, token, proc.pid
        finally:
            proc.terminate()
            proc.wait(timeout=10)


def args_of(tool, i):
    if tool == "recall":
        return {"query": QUERIES[i % len(QUERIES)], "k": 10}
    return {"content": f"bench note {i}: {QUERIES[i % len(QUERIES)]} discussed with the team"}


def server_cpu(pid):
    """Seconds memory-mcp's threads have spent on CPU (/proc/PID/task/*/schedstat, nanoseconds)."""
    total = 0
    for t in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError):
            with open(f"/proc/{pid}/task/{t}/schedstat") as f:
                total += int(f.read().split()[0])
    return total / 1e9


class Cpu:
    """The CPU a measured loop costs this process and memory-mcp, per call."""
    def __init__(self, pid):
        self.pid, self.client, self.server = pid, None, None

    def start(self):
        self.t = (time.process_time(), server_cpu(self.pid) if self.pid else 0)

    def stop(self, n):
        self.client = (time.process_time() - self.t[0]) / n * 1000
        self.server = (server_cpu(self.pid) - self.t[1]) / n * 1000 if self.pid else None


async def http_latencies(url, token, n, tool, cpu=None):
    async with create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as client:
        async with streamable_http_client(url, http_client=client) as (r, w, *_):
            async with ClientSession(r, w, client_info=Implementation(name="bench", version="1")) as s:
                await s.initialize()
                out = []
                for i in range(n + 20):
                    if i == 20 and cpu:
                        cpu.start()
                    args = args_of(tool, i)
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
                if cpu:
                    cpu.stop(n)
                return out


def raw_latencies(url, token, n, tool, cpu=None):
    """The same calls through bench/mcp_raw.py (one kept-alive connection, one session)."""
    with RawMcp(url, token) as c:
        out = []
        for i in range(n + 20):
            if i == 20 and cpu:
                cpu.start()
            args = args_of(tool, i)
            t0 = time.perf_counter()
            if tool == "ping":
                c.ping()
            else:
                res = c.call_tool(tool, args)
            dt = time.perf_counter() - t0
            if tool != "ping":
                assert not res.get("isError"), res
            if i >= 20:
                out.append(dt)
        if cpu:
            cpu.stop(n)
        return out


async def sdk_results(url, token, calls):
    async with create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as client:
        async with streamable_http_client(url, http_client=client) as (r, w, *_):
            async with ClientSession(r, w, client_info=Implementation(name="bench", version="1")) as s:
                await s.initialize()
                tools = sorted(t.name for t in (await s.list_tools()).tools)
                out = []
                for tool, args in calls:
                    res = await s.call_tool(tool, args)
                    out.append((res.is_error, res.structured_content, [c.model_dump(mode="json", exclude_none=True) for c in res.content]))
                await s.send_ping()
                return tools, out


def validate(url, token):
    """The raw client sees what the SDK sees: the tool list, recall's results, remember's answer (its
    new id aside), a tool error for bad arguments."""
    calls = [("recall", {"query": q, "k": 10}) for q in QUERIES[:5]] + \
        [("remember", {"content": "bench validation note"}), ("recall", {"query": "", "k": 10})]
    tools, sdk = asyncio.run(sdk_results(url, token, calls))
    with RawMcp(url, token) as c:
        assert c.server_info["name"] == "memory-mcp", c.server_info
        assert sorted(t["name"] for t in c.request("tools/list")["tools"]) == tools
        assert c.ping() == {}
        raw = []
        for tool, args in calls:
            try:
                res = c.call_tool(tool, args)
                raw.append((res.get("isError", False), res.get("structuredContent"), res["content"]))
            except RuntimeError as e:  # a JSON-RPC error (invalid params): the SDK raises it as a result too
                raw.append(("rpc", str(e), None))
    for (tool, _), a, b in zip(calls, sdk, raw):
        if tool == "remember":
            assert a[0] is False and b[0] is False and set(a[1]) == set(b[1]) and a[1]["classification"] == b[1]["classification"], (a, b)
        elif b[0] != "rpc":
            assert a == tuple(b), (tool, a, b)
    return len(calls)


# memory-mcp's remember (mcp/src/main.rs): one statement, the org, actor and call set locally first.
MCP_REMEMBER = ("WITH s AS MATERIALIZED (SELECT pg_catalog.set_config('memory.org_id', %s, true) AS org, "
                "pg_catalog.set_config('memory.actor_id', %s, true) AS actor, pg_catalog.set_config('memory.mcp_call', %s, true) AS call) "
                "INSERT INTO memory.observations (org_id, content) SELECT s.org, %s::text FROM s RETURNING id::text, classification::text")


def insert_latencies(dsn, n, how="insert"):
    """From psycopg in autocommit (its statements prepared after five runs): the plain governed INSERT
    ("insert"), memory.remember ("remember"), or memory-mcp's remember statement ("mcp")."""
    with psycopg.connect(dsn.replace("user=postgres", f"user={ROLE}"), autocommit=True) as c:
        c.execute("SELECT set_config('memory.org_id', %s, false)", (ORG,))
        out = []
        insert = "INSERT INTO memory.observations (org_id, content) VALUES (%s, %s) RETURNING id::text, classification::text"
        for i in range(n + 20):
            content = f"bench {how} {i} {time.time_ns()}: {QUERIES[i % len(QUERIES)]} discussed with the team"
            t0 = time.perf_counter()
            if how == "mcp":
                c.execute(MCP_REMEMBER, (ORG, "mcp:bench:bench", "remember:bench", content)).fetchone()
            elif how == "remember":
                c.execute("SELECT memory.remember(%s, %s)", (ORG, content)).fetchone()
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
                    c.execute(SAME_TX[1], (ORG, q, 10)).fetchone()
            else:
                c.execute("SELECT * FROM memory.recall(%s, %s, 10)", (ORG, q)).fetchall()
            dt = time.perf_counter() - t0
            if i >= 20:
                out.append(dt)
        return out


def row(results, key):
    rounds = results[key]
    med = statistics.median(r[0] for r in rounds)
    p95 = statistics.median(r[1] for r in rounds)
    return med, p95


def earlier_notes():
    """The notes written by hand under the section, kept when the benchmark rewrites it."""
    if not RESULTS.exists():
        return ""
    text = RESULTS.read_text()
    start = text.find(f"## {SECTION}\n")
    if start < 0:
        return ""
    end = text.find("\n## ", start + 1)
    section = text[start:end if end >= 0 else len(text)]
    i = section.find("\nNotes (")
    return section[i + 1:].rstrip() + "\n" if i >= 0 else ""


SECTION = "memory-mcp recall and remember latency (issues 39, 51)"


def main():
    dsn = sys.argv[1]
    rows = int(sys.argv[2]) if len(sys.argv) > 2 else 100000
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 500
    binary = sys.argv[4] if len(sys.argv) > 4 else str(ROOT / "target" / "release" / "memory-mcp")
    rounds = int(sys.argv[5]) if len(sys.argv) > 5 else 3
    setup(dsn, rows)
    at = load()
    results = {}
    cpu = {}
    with http_server(binary, dsn) as (url, token, pid), http_server(binary, dsn, "--stateless") as (s_url, s_token, s_pid):
        checked = validate(url, token) + validate(s_url, s_token)

        def measured(key, fn, pid=pid):
            c = Cpu(pid)
            cpu.setdefault(key, []).append(c)
            return fn(c)

        paths = {
            "raw recall": lambda: raw_latencies(url, token, n, "recall"),
            "plain recall": lambda: sql_latencies(dsn, n, False),
            "tx recall": lambda: sql_latencies(dsn, n, True),
            "sdk recall": lambda: asyncio.run(http_latencies(url, token, n, "recall")),
            "stdio recall": lambda: asyncio.run(mcp_latencies(binary, dsn, n)),
            "raw remember": lambda: measured("raw remember", lambda c: raw_latencies(url, token, n, "remember", c)),
            "insert": lambda: insert_latencies(dsn, n),
            "remember fn": lambda: insert_latencies(dsn, n, "remember"),
            "mcp statement": lambda: insert_latencies(dsn, n, "mcp"),
            "sdk remember": lambda: measured("sdk remember", lambda c: asyncio.run(http_latencies(url, token, n, "remember", c))),
            "raw ping": lambda: measured("raw ping", lambda c: raw_latencies(url, token, n, "ping", c)),
            "stateless remember": lambda: measured("stateless remember", lambda c: raw_latencies(s_url, s_token, n, "remember", c), s_pid),
            "stateless ping": lambda: measured("stateless ping", lambda c: raw_latencies(s_url, s_token, n, "ping", c), s_pid),
            "sdk ping": lambda: asyncio.run(http_latencies(url, token, n, "ping")),
        }
        only = os.environ.get("MCP_BENCH_ONLY")
        if only == "remember":
            paths = {k: v for k, v in paths.items() if k in ("raw remember", "insert", "remember fn", "mcp statement", "sdk remember", "raw ping",
                                                            "stateless remember", "stateless ping")}
        for r in range(rounds):
            for key in (list(paths) if r % 2 == 0 else list(reversed(paths))):
                results.setdefault(key, []).append(stats(paths[key]()))
            print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1][0]:.2f}" for k, v in results.items()), flush=True)
    end = "{:.2f} {:.2f} {:.2f}".format(*os.getloadavg())
    g = {k: row(results, k) for k in results}
    cc = {k: (statistics.median(c.client for c in v), statistics.median(c.server for c in v)) for k, v in cpu.items()}
    if only == "remember":
        base = g["insert"][0]
        print(f"mcp_recall (remember only): n={n} rounds={rounds} {at}, {end} at the end; medians (p95) ms, ratio to the insert:")
        for k, (med, p95) in g.items():
            extra = f", CPU ms/call client {cc[k][0]:.3f} server {cc[k][1]:.3f}" if k in cc else ""
            print(f"  {k}: {med:.3f} ({p95:.3f}) {med / base:.2f}x{extra}")
        print("  by round: " + "; ".join(f"{k} " + "/".join(f"{r[0]:.3f}" for r in v) for k, v in results.items()))
        return
    web, plain, tx, sdk, stdio = g["raw recall"], g["plain recall"], g["tx recall"], g["sdk recall"], g["stdio recall"]
    rem, insert, remember_fn, mcp_stmt, sdk_rem = g["raw remember"], g["insert"], g["remember fn"], g["mcp statement"], g["sdk remember"]
    ping, sdk_ping = g["raw ping"], g["sdk ping"]
    srem, sping = g["stateless remember"], g["stateless ping"]
    body = f"""Command: `make bench` (runs `bench/mcp_recall.py DSN {rows} {n}` against release builds of memory_ext and memory-mcp).
Machine: {machine()}; {at}, {end} at the end. Date: {time.strftime('%Y-%m-%d')}.
{rows:,} observations of one org; {rounds} rounds, each running every path (in reverse order every other round) for
{n} calls after 20 warm-up calls; a row is the median of the rounds' medians (and p95s); one client at a time.
`recall`: k = 10, two-word queries in turn; `remember`: one new memory a call, over HTTP without `--embeddings-url`
(the embedder's latency excluded: with one, remember adds the embedder's round trip before its transaction).
"raw": `bench/mcp_raw.py`, an MCP client over streamable HTTP without the SDK (one kept-alive connection, the
initialize handshake, `Mcp-Session-Id`, JSON-RPC bodies, SSE responses), checked before the run to see the same
tool list and tool results as the SDK ({checked} calls, both servers); "SDK": the Python MCP SDK's `ClientSession`;
"`--stateless`": the same client to a second memory-mcp run with `--stateless` (no session, plain JSON responses). CPU a call:
this client's (getrusage) and memory-mcp's (its threads' schedstat).

| path | median ms | p95 ms | client CPU ms | memory-mcp CPU ms |
|---|---|---|---|---|
| MCP streamable HTTP, RS256 JWT, raw: `recall` | {web[0]:.2f} | {web[1]:.2f} | | |
| MCP streamable HTTP, RS256 JWT, SDK: `call_tool("recall")` | {sdk[0]:.2f} | {sdk[1]:.2f} | | |
| MCP stdio, SDK: `call_tool("recall")` | {stdio[0]:.2f} | {stdio[1]:.2f} | | |
| psycopg: memory-mcp's transaction (set_config, `memory.recall` with `_mcp_tool_invoked`), a round trip each | {tx[0]:.2f} | {tx[1]:.2f} | | |
| psycopg: `SELECT * FROM memory.recall(org, query, 10)` | {plain[0]:.2f} | {plain[1]:.2f} | | |
| MCP streamable HTTP, RS256 JWT, raw: `remember` | {rem[0]:.2f} | {rem[1]:.2f} | {cc["raw remember"][0]:.3f} | {cc["raw remember"][1]:.3f} |
| MCP streamable HTTP, RS256 JWT, SDK: `call_tool("remember")` | {sdk_rem[0]:.2f} | {sdk_rem[1]:.2f} | {cc["sdk remember"][0]:.3f} | {cc["sdk remember"][1]:.3f} |
| psycopg: `INSERT INTO memory.observations (org_id, content) ... RETURNING id, classification` | {insert[0]:.2f} | {insert[1]:.2f} | | |
| psycopg: `SELECT memory.remember(org, content)` | {remember_fn[0]:.2f} | {remember_fn[1]:.2f} | | |
| psycopg: memory-mcp's remember statement (the org, actor and call set locally, then the INSERT) | {mcp_stmt[0]:.2f} | {mcp_stmt[1]:.2f} | | |
| MCP streamable HTTP, RS256 JWT, raw: `ping` (no database) | {ping[0]:.2f} | {ping[1]:.2f} | {cc["raw ping"][0]:.3f} | {cc["raw ping"][1]:.3f} |
| MCP streamable HTTP, RS256 JWT, SDK: `ping` | {sdk_ping[0]:.2f} | {sdk_ping[1]:.2f} | | |
| MCP streamable HTTP `--stateless`, RS256 JWT, raw: `remember` | {srem[0]:.2f} | {srem[1]:.2f} | {cc["stateless remember"][0]:.3f} | {cc["stateless remember"][1]:.3f} |
| MCP streamable HTTP `--stateless`, RS256 JWT, raw: `ping` | {sping[0]:.2f} | {sping[1]:.2f} | {cc["stateless ping"][0]:.3f} | {cc["stateless ping"][1]:.3f} |

- `recall` over HTTP with a JWT median **{web[0]:.2f} ms** vs **{plain[0]:.2f} ms** from psycopg: **{web[0] / plain[0]:.2f}x**
  (target ≤ 1.5x; through the SDK {sdk[0] / plain[0]:.2f}x, over stdio {stdio[0] / plain[0]:.2f}x); memory-mcp's transaction from
  psycopg takes {tx[0]:.2f} ms.
- `remember` over HTTP with a JWT median **{rem[0]:.2f} ms** vs **{insert[0]:.2f} ms** for the psycopg insert:
  **{rem[0] / insert[0]:.2f}x** (target ≤ 1.3x; through the SDK {sdk_rem[0] / insert[0]:.2f}x); against psycopg's
  `memory.remember` ({remember_fn[0]:.2f} ms, like for like) {rem[0] / remember_fn[0]:.2f}x; memory-mcp's remember statement from psycopg
  takes {mcp_stmt[0]:.2f} ms ({mcp_stmt[0] / insert[0]:.2f}x the insert: the org, the actor and the call set with it), a ping {ping[0]:.2f} ms.
  With `--stateless`: **{srem[0]:.2f} ms**, **{srem[0] / insert[0]:.2f}x** the insert (a ping {sping[0]:.2f} ms).
"""
    notes = earlier_notes()
    write_section(SECTION, body + ("\n" + notes if notes else ""))
    print(f"mcp_recall: rows={rows} n={n} rounds={rounds} {at}; recall raw HTTP+JWT {web[0]:.2f} ms, SDK {sdk[0]:.2f}, stdio {stdio[0]:.2f}, "
          f"psycopg {plain[0]:.2f} ({web[0] / plain[0]:.2f}x), same tx {tx[0]:.2f}; remember raw {rem[0]:.2f} ms, SDK {sdk_rem[0]:.2f}, "
          f"insert {insert[0]:.2f} ({rem[0] / insert[0]:.2f}x), stateless {srem[0]:.2f} ({srem[0] / insert[0]:.2f}x), memory.remember {remember_fn[0]:.2f}, memory-mcp's statement {mcp_stmt[0]:.2f}; ping raw {ping[0]:.2f}, SDK {sdk_ping[0]:.2f}; "
          f"CPU ms/call client/server: " + ", ".join(f"{k} {a:.3f}/{b:.3f}" for k, (a, b) in cc.items()), flush=True)

if __name__ == "__main__":
    main()
