"""Issue 51, where remember's time goes: the wall time and the database's CPU (/proc/<pid>/stat of the
backends) per call of memory-mcp's remember over streamable HTTP with an RS256 JWT (bench/mcp_raw.py's
plain client), against the same write from psycopg: the plain governed INSERT (the target's baseline),
`SELECT memory.remember(org, content)` (like for like) and memory-mcp's own remember statement.
Latency: the sides interleaved call by call (one call of each, in an order rotating from one call to
the next, BATCH x ROUNDS calls of each), so that every side meets the same load on a shared machine;
median and p95 of each side's calls. CPU: each side runs BATCH calls a round, in an order reversed from
one round to the next; a figure is the median over ROUNDS rounds. For the HTTP side the backend CPU is that of memory-mcp's pooled connections
(application_name memory-mcp), and memory-mcp's own CPU (its threads' schedstat) is given too.
Run by hand; the figures go in bench/RESULTS.md.

Usage: mcp_remember_cpu.py DSN [BATCH] [ROUNDS] [BINARY]
DSN: a superuser connection to a database with memory_ext (bench/mcp_recall.py's setup makes the role
mcp_bench, bound to org bench-mcp); BATCH default 1000, ROUNDS default 5, BINARY target/release/memory-mcp.
"""
import os
import statistics
import sys
import time

import psycopg

from common import ROOT, interleaved, process_cpu as cpu
from mcp_raw import RawMcp
from mcp_recall import MCP_REMEMBER, ORG, QUERIES, ROLE, http_server, server_cpu, setup




def backends(admin):
    return [p for (p,) in admin.execute("SELECT pid FROM pg_stat_activity WHERE usename = %s AND application_name = 'memory-mcp'",
                                        (ROLE,)).fetchall()]


def main():
    dsn = sys.argv[1]
    batch = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    binary = sys.argv[4] if len(sys.argv) > 4 else str(ROOT / "target" / "release" / "memory-mcp")
    setup(dsn, 1000)
    at = os.getloadavg()
    with psycopg.connect(dsn, autocommit=True) as admin, \
            psycopg.connect(dsn.replace("user=postgres", f"user={ROLE}"), autocommit=True) as c, \
            http_server(binary, dsn) as (url, token, mcp_pid), RawMcp(url, token) as raw:
        c.execute("SELECT set_config('memory.org_id', %s, false)", (ORG,))
        pid = c.execute("SELECT pg_backend_pid()").fetchone()[0]
        insert = "INSERT INTO memory.observations (org_id, content) VALUES (%s, %s) RETURNING id::text, classification::text"
        n = [0]

        def text():
            n[0] += 1
            return f"cpu note {n[0]} {time.time_ns()}: {QUERIES[n[0] % len(QUERIES)]} discussed with the team"

        sides = {
            "insert": lambda: c.execute(insert, (ORG, text())).fetchone(),
            "memory.remember": lambda: c.execute("SELECT memory.remember(%s, %s)", (ORG, text())).fetchone(),
            "memory-mcp's statement": lambda: c.execute(MCP_REMEMBER, (ORG, "mcp:bench:bench", "remember:bench", text())).fetchone(),
            "HTTP remember": lambda: raw.call_tool("remember", {"content": text()}),
        }
        lat = interleaved(sides, batch * rounds)  # (the warm-up: prepared statements, the pool's connections)
        got = {k: [] for k in sides}
        for r in range(rounds):
            for k in (list(sides) if r % 2 == 0 else list(reversed(sides))):
                pids = backends(admin) if k == "HTTP remember" else [pid]
                b0, m0, t0 = sum(cpu(p) for p in pids), server_cpu(mcp_pid), time.perf_counter()
                for _ in range(batch):
                    sides[k]()
                t1, b1, m1 = time.perf_counter(), sum(cpu(p) for p in pids), server_cpu(mcp_pid)
                got[k].append(((t1 - t0) / batch * 1000, (b1 - b0) / batch * 1000, (m1 - m0) / batch * 1000))
    end = os.getloadavg()
    print(f"mcp_remember_cpu: batch={batch} rounds={rounds}; load {at[0]:.2f} {at[1]:.2f} {at[2]:.2f} at the start, "
          f"{end[0]:.2f} {end[1]:.2f} {end[2]:.2f} at the end; medians over rounds, ms a call:")
    med = {k: statistics.median(v) * 1000 for k, v in lat.items()}
    print(f"  latency, interleaved call by call ({batch * rounds} calls of each), median (p95) ms:")
    for k, v in lat.items():
        v = sorted(v)
        print(f"    {k}: {med[k]:.3f} ({v[int(len(v) * 0.95) - 1] * 1000:.3f}), {med[k] / med['insert']:.2f}x the insert, "
              f"{med[k] / med['memory.remember']:.2f}x memory.remember")
    print("  CPU and mean wall, batches:")
    base = [statistics.median(x[i] for x in got["insert"]) for i in range(2)]
    for k, v in got.items():
        wall, back, mcp = (statistics.median(x[i] for x in v) for i in range(3))
        extra = f", memory-mcp CPU {mcp:.3f}" if k == "HTTP remember" else ""
        print(f"  {k}: wall {wall:.3f} ({wall / base[0]:.2f}x the insert), backend CPU {back:.3f} ({back / base[1]:.2f}x){extra}")
    print("  wall by round: " + "; ".join(f"{k} " + "/".join(f"{x[0]:.3f}" for x in v) for k, v in got.items()))


if __name__ == "__main__":
    main()
