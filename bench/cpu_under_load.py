"""Issue 54: CPU per single-row transaction under the benchmark's own load, by process.

bench/cpu_per_insert.py measures one session alone; under pgbench's 8 clients on 2 cores the same
transaction costs more (cache and scheduler effects), and that is the cost that sets TPS. For each
variant of single_row_bench.py, pgbench runs SECONDS; from 1.5 s in, for SECONDS - 3 s, the CPU time
of pgbench's backends and of every other process of the cluster (the background integrator, the
WAL writer, autovacuum, the checkpointer) is read from /proc/<pid>/schedstat and divided by the
transactions committed meanwhile. ROUNDS rounds, the order alternating; medians.

Usage: cpu_under_load.py DSN PORT DATADIR [ROUNDS (5)] [SECONDS (8)] [VARIANTS (bare,anchor,classify,clanchor,deferred)]
Run writes_vs_bare.py (or single_row_bench.SETUP) first; same machine as the server, as a user
that may read the server's /proc entries.
"""
import os
import statistics
import subprocess
import sys
import tempfile
import time

import psycopg

from audit_bench import pgbench_command
from single_row_bench import script_for


def cpu_ns(pids):
    total = 0
    for p in pids:
        try:
            total += int(open(f"/proc/{p}/schedstat").read().split()[0])
        except OSError:
            pass  # exited meanwhile
    return total


def children(datadir):
    postmaster = open(f"{datadir}/postmaster.pid").readline().strip()
    out = subprocess.run(["pgrep", "-P", postmaster], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def one(dsn, port, datadir, variant, seconds):
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as f:
        f.write(script_for(variant, 64))
    os.chmod(f.name, 0o644)
    run = subprocess.Popen(pgbench_command(port, f.name, 8, seconds, psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.5)
        with psycopg.connect(dsn, autocommit=True) as c:
            me = c.execute("SELECT pg_backend_pid()").fetchone()[0]
            clients = [r[0] for r in c.execute("SELECT pid FROM pg_stat_activity WHERE application_name = 'pgbench'")]
            others = [p for p in children(datadir) if p not in clients and p != me]
            q = "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
            x0, a0, o0, t0 = c.execute(q).fetchone()[0], cpu_ns(clients), cpu_ns(others), time.monotonic()
            time.sleep(seconds - 3)
            a1, o1, x1, t1 = cpu_ns(clients), cpu_ns(others), c.execute(q).fetchone()[0], time.monotonic()
    finally:
        run.wait()
        os.unlink(f.name)
    n = max(1, x1 - x0 - 1)  # the second count's own transaction
    return (a1 - a0) / n / 1000, (o1 - o0) / n / 1000, n / (t1 - t0)


def main():
    dsn, port, datadir = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 5
    seconds = int(sys.argv[5]) if len(sys.argv) > 5 else 8
    variants = sys.argv[6].split(",") if len(sys.argv) > 6 else ["bare", "anchor", "classify", "clanchor", "deferred"]
    res = {v: [] for v in variants}
    for r in range(rounds):
        for v in (variants if r % 2 == 0 else variants[::-1]):
            with psycopg.connect(dsn, autocommit=True) as c:
                c.execute("SELECT memory.audit_integrate()")
            res[v].append(one(dsn, port, datadir, v, seconds))
    print("| variant | writers' backends, µs/tx | the cluster's other processes, µs/tx | TPS |")
    print("|---|---|---|---|")
    for v, xs in res.items():
        med = [statistics.median(x[k] for x in xs) for k in range(3)]
        print(f"| {v} | {med[0]:.1f} | {med[1]:.1f} | {med[2]:,.0f} |")
    print(f"(pgbench 8 clients, 64 tenants, {seconds} s runs measured from 1.5 s for {seconds - 3} s, {rounds} rounds, medians)")


if __name__ == "__main__":
    main()
