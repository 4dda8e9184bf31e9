"""Issue 51, memory-mcp's own HTTP path compared between builds or modes in one run: several memory-mcp
servers (--http, --auth jwt with an RS256 token, like bench/mcp_recall.py's) run side by side, and each
one's `remember` and `ping` through bench/mcp_raw.py's plain client alternate with the psycopg insert
(the target's baseline) under the same load.

Latency: the sides interleaved call by call (one call of each, in an order rotating from one call to the
next), BATCH x ROUNDS calls of each; median and p95. CPU: each side runs BATCH calls a round, in an order
reversed from one round to the next; memory-mcp's CPU a call is its threads' schedstat over the batch, a
figure the median over ROUNDS rounds.
Run by hand; the figures go in bench/RESULTS.md.

Usage: mcp_http_ab.py DSN BATCH ROUNDS LABEL=BINARY[,FLAG...][,NAME=VALUE...] ...
(a FLAG is passed to memory-mcp; NAME=VALUE sets its environment, e.g. TOKIO_WORKER_THREADS=1)
e.g. mcp_http_ab.py DSN 1000 5 main=/tmp/memory-mcp-main new=target/release/memory-mcp new-stateless=target/release/memory-mcp,--stateless
DSN: a superuser connection to a database with memory_ext (the setup of bench/mcp_recall.py: the role
mcp_bench, bound to org bench-mcp, and 1,000 memories of that org).
"""
import contextlib
import os
import statistics
import sys
import time

import psycopg

from common import interleaved
from mcp_raw import RawMcp
from mcp_recall import ORG, QUERIES, ROLE, http_server, server_cpu, setup


def main():
    dsn, batch, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    servers = []
    for spec in sys.argv[4:]:
        label, _, rest = spec.partition("=")
        binary, *flags = rest.split(",")
        env = dict(f.split("=", 1) for f in flags if "=" in f and not f.startswith("-"))
        servers.append((label, binary, [f for f in flags if f.split("=", 1)[0] not in env], env))
    setup(dsn, 1000)
    at = os.getloadavg()
    n = [0]

    def text():
        n[0] += 1
        return f"ab note {n[0]} {time.time_ns()}: {QUERIES[n[0] % len(QUERIES)]} discussed with the team"

    with contextlib.ExitStack() as stack, psycopg.connect(dsn.replace("user=postgres", f"user={ROLE}"), autocommit=True) as c:
        c.execute("SELECT set_config('memory.org_id', %s, false)", (ORG,))
        insert = "INSERT INTO memory.observations (org_id, content) VALUES (%s, %s) RETURNING id::text, classification::text"
        sides = {"insert": (lambda: c.execute(insert, (ORG, text())).fetchone(), None)}
        for label, binary, flags, env in servers:
            saved = {k: os.environ.get(k) for k in env}
            os.environ.update(env)
            try:
                url, token, pid = stack.enter_context(http_server(binary, dsn, *flags))
            finally:
                for k, v in saved.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v
            raw = stack.enter_context(RawMcp(url, token))
            out = raw.call_tool("remember", {"content": text()})
            assert not out.get("isError") and out["structuredContent"]["id"], out
            sides[f"{label} remember"] = (lambda raw=raw: raw.call_tool("remember", {"content": text()}), pid)
            sides[f"{label} ping"] = (lambda raw=raw: raw.ping(), pid)
        # (The warm-up: prepared statements, the pool's connections, the token cache.)
        lat = interleaved({k: f for k, (f, _) in sides.items()}, batch * rounds)
        names = list(sides)
        got = {k: [] for k in sides}
        for r in range(rounds):
            for k in (names if r % 2 == 0 else list(reversed(names))):
                f, pid = sides[k]
                m0, t0 = server_cpu(pid) if pid else 0, time.perf_counter()
                for _ in range(batch):
                    f()
                t1, m1 = time.perf_counter(), server_cpu(pid) if pid else 0
                got[k].append(((t1 - t0) / batch * 1000, (m1 - m0) / batch * 1000))
    end = os.getloadavg()
    print(f"mcp_http_ab: batch={batch} rounds={rounds}; load {at[0]:.2f} {at[1]:.2f} {at[2]:.2f} at the start, "
          f"{end[0]:.2f} {end[1]:.2f} {end[2]:.2f} at the end")
    med = {k: statistics.median(v) * 1000 for k, v in lat.items()}
    print(f"  latency interleaved call by call ({batch * rounds} calls of each): median (p95) ms")
    for k, v in lat.items():
        v = sorted(v)
        print(f"    {k}: {med[k]:.3f} ({v[int(len(v) * 0.95) - 1] * 1000:.3f}), {med[k] / med['insert']:.2f}x the insert")
    print("  batches, medians over rounds: mean wall ms a call, memory-mcp CPU ms a call")
    for k, v in got.items():
        wall, cpu = (statistics.median(x[i] for x in v) for i in range(2))
        print(f"    {k}: wall {wall:.3f}" + (f", memory-mcp CPU {cpu:.4f} (by round " + "/".join(f"{x[1]:.4f}" for x in v) + ")"
                                             if sides[k][1] else ""))


if __name__ == "__main__":
    main()
