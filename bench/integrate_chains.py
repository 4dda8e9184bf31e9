"""Issue 54: what an integration round costs per event when its events are spread over many chains.

The background integrator chains what committed since its last round (≈100 ms of writes) in one
transaction; with many tenants a round touches many chains, and whatever it does per chain (lock
the head, write it back) is paid every round. This benchmark writes EVENTS governed single-row
inserts spread over 1 and over 64 chains, then times `memory.audit_integrate()` on them: the
backend's CPU time (/proc/PID/schedstat, so other processes on the machine do not count) and wall time per
event, ROUNDS rounds, the two chain counts alternating; medians. Every chain is verified after.

It runs in a database of its own (created and dropped here), which no background integrator
serves, so nothing else chains the entries.

Usage: integrate_chains.py DSN [ROUNDS (9)] [EVENTS (700)]
"""
import statistics
import sys
import time

import psycopg

from common import machine, verify_chains, write_section

DB = "integrate_chains_bench"


def cpu_ns(pid):
    """A process's time on a CPU so far, in nanoseconds (/proc/PID/schedstat, the scheduler's own
    count: /proc/PID/stat counts in 10 ms ticks, coarser than one round)."""
    return int(open(f"/proc/{pid}/schedstat").read().split()[0])


def main():
    dsn = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 9
    events = int(sys.argv[3]) if len(sys.argv) > 3 else 700
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {DB}")
        admin.execute(f"CREATE DATABASE {DB}")
    bench_dsn = psycopg.conninfo.make_conninfo(dsn, dbname=DB)
    try:
        cpu, wall = {1: [], 64: []}, {1: [], 64: []}
        with psycopg.connect(bench_dsn, autocommit=True) as c:
            c.execute("CREATE EXTENSION memory_ext")
            c.execute("SET memory.audit_mode = deferred")
            c.execute("CREATE TABLE ic (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), org_id text NOT NULL, user_id text,"
                      " content text NOT NULL, classification memory.classification)")
            c.execute("""SELECT memory.govern('ic', '{"content": "content", "target": "classification", "org": "org_id", "user": "user_id", "audit": true}')""")
            (pid,) = c.execute("SELECT pg_backend_pid()").fetchone()
            insert = "INSERT INTO ic (org_id, user_id, content) VALUES (%s, 'user-1', 'User prefers concise answers; note ' || random())"
            # A first round creates every chain's head (the heads of a running system exist).
            for i in range(64):
                c.execute(insert, (f"org-{i}",))
            c.execute("SELECT memory.audit_integrate()")
            for r in range(rounds):
                for chains in ((1, 64) if r % 2 == 0 else (64, 1)):
                    with c.transaction():
                        for i in range(events):
                            c.execute(insert, (f"org-{i % chains}",))
                    cpu0 = cpu_ns(pid)
                    t0 = time.perf_counter()
                    (n,) = c.execute("SELECT memory.audit_integrate()").fetchone()
                    t1 = time.perf_counter()
                    assert n == events, (n, events)
                    cpu[chains].append((cpu_ns(pid) - cpu0) / n / 1e3)
                    wall[chains].append((t1 - t0) / n * 1e6)
            verify_chains(c)
            (entries,) = c.execute("SELECT count(*) FROM memory.audit_log").fetchone()
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {DB}")
    lines = [
        f"Command: `bench/integrate_chains.py DSN {rounds} {events}` (release build). Machine: {machine()}.",
        f"Each round: {events} governed single-row inserts (deferred audit) committed in one transaction, spread over 1 or 64",
        "chains whose heads exist, then one `memory.audit_integrate()`; its backend's CPU time (/proc/PID/schedstat) and wall time per",
        f"event chained; {rounds} rounds, the two chain counts alternating; medians (and the range).",
        "",
        "| chains in the round | CPU µs per event | wall µs per event |",
        "|---|---|---|",
    ]
    for chains in (1, 64):
        lines.append(f"| {chains} | {statistics.median(cpu[chains]):.2f} ({min(cpu[chains]):.2f}–{max(cpu[chains]):.2f}) "
                     f"| {statistics.median(wall[chains]):.2f} ({min(wall[chains]):.2f}–{max(wall[chains]):.2f}) |")
    extra = statistics.median(cpu[64]) - statistics.median(cpu[1])
    lines += [
        "",
        f"- 64 chains cost {extra:+.2f} µs of CPU per event more than 1 ({extra * events / 64:+.1f} µs per chain in a round of {events}).",
        f"- Every chain verified afterwards ({entries:,} chained entries).",
    ]
    write_section("Integration of a round over many chains (issue 54)", "\n".join(lines))


if __name__ == "__main__":
    main()
