"""Issue 54: backend CPU time per single-row INSERT transaction, bare table against governed.

One session per variant inserts N rows, one per transaction (autocommit), in the shape of
single_row_bench.py's script (64 tenants); the backend's CPU time comes from
/proc/<pid>/schedstat (nanoseconds on CPU), read before and after, so the client, other
sessions and the integrator do not count. ROUNDS rounds, the order alternating; prints the
median microseconds per transaction of each variant and the governed-minus-bare difference.

Usage: cpu_per_insert.py PORT N ROUNDS [setup]     (same machine as the server; run as a user that
may read the server's /proc entries)
"""
import statistics
import sys

import psycopg

from single_row_bench import SETUP, set_mode
from common import verify_chains

INSERT = ("INSERT INTO sr_{t} (org_id, user_id, content, source_type) VALUES "
          "('org-' || %s, 'user-1', 'User prefers concise answers; agent 1 note ' || random(), 'preference')")


def cpu_ns(pid):
    return int(open(f"/proc/{pid}/schedstat").read().split()[0])


def run(dsn, table, n, mode):
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(f"SET memory.audit_mode = {mode}")
        pid = c.execute("SELECT pg_backend_pid()").fetchone()[0]
        q = INSERT.format(t=table)
        for i in range(200):  # warm the backend's caches
            c.execute(q, (i % 64,))
        t0 = cpu_ns(pid)
        for i in range(n):
            c.execute(q, (i % 64,))
        return (cpu_ns(pid) - t0) / n / 1000


def main():
    port, n, rounds = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    dsn = f"host=127.0.0.1 port={port} user=postgres dbname=postgres"
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("CREATE EXTENSION IF NOT EXISTS memory_ext")
        if sys.argv[4:] == ["setup"]:
            c.execute(SETUP)
    set_mode(dsn, "postgres", "deferred")
    # anchor: the bare table plus a PL/pgSQL row trigger writing one pending-shaped row (issue 54's
    # physical anchor, single_row_bench.SETUP).
    variants = [("bare", "bare", "deferred"), ("anchor", "anchor", "deferred"), ("deferred", "deferred", "deferred"),
                ("immediate", "immediate", "immediate")]
    us = {v[0]: [] for v in variants}
    for r in range(rounds):
        for name, table, mode in (variants if r % 2 == 0 else variants[::-1]):
            with psycopg.connect(dsn, autocommit=True) as c:
                c.execute("SELECT memory.audit_integrate()")
            us[name].append(run(dsn, table, n, mode))
    load = open("/proc/loadavg").read().split()[0]
    med = {k: statistics.median(v) for k, v in us.items()}
    for k, v in us.items():
        print(f"{k}: {med[k]:.1f} us/tx backend CPU (rounds {[round(x, 1) for x in v]})")
    print(f"deferred - bare: {med['deferred'] - med['bare']:.1f} us; deferred - anchor: {med['deferred'] - med['anchor']:.1f} us; "
          f"immediate - bare: {med['immediate'] - med['bare']:.1f} us "
          f"(N={n}, {rounds} rounds, load {load})")
    with psycopg.connect(dsn, autocommit=True) as c:
        verify_chains(c)


if __name__ == "__main__":
    main()
