"""Issue 54: governed single-row inserts against the bare table, and the WAL each transaction writes.

1. TPS: pgbench, 8 clients (-j 2), SECONDS per run, ROUNDS rounds; each round runs the bare table
   and memory_ext deferred (the default mode) on 1 and 64 tenants, the order alternating by round;
   prints each round's governed/bare ratio and the medians (of the per-round ratios).
2. WAL: N single-row transactions of each variant (pgbench -t, 8 clients) on 64 tenants;
   pg_current_wal_lsn() before and after, after memory.audit_integrate() has chained what the
   run left pending (so the integrator's copy into audit_log counts), divided by N; measured with
   full_page_writes off (restored afterwards) after a warm-up of N transactions: the records each
   transaction writes, not the full-page images a checkpoint happens to cause.

Usage: single_row_wal.py PORT ROUNDS SECONDS N [setup]
The cluster must run the background integrator for database postgres (bench/run.sh starts it so).
"""
import os
import statistics
import subprocess
import sys
import tempfile

import psycopg

from single_row_bench import SETUP, pgbench, script_for, set_mode
from common import verify_chains


def pgbench_n(port, script, clients, per_client):
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as f:
        f.write(script)
        path = f.name
    os.chmod(path, 0o644)
    cmd = ["/usr/lib/postgresql/15/bin/pgbench", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "-n",
           "-c", str(clients), "-j", "2", "-t", str(per_client), "-f", path, "postgres"]
    subprocess.run(cmd, capture_output=True, text=True, check=True)
    os.unlink(path)


def main():
    port, rounds, seconds, n = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    dsn = f"host=127.0.0.1 port={port} user=postgres dbname=postgres"
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("CREATE EXTENSION IF NOT EXISTS memory_ext")
        if sys.argv[5:] == ["setup"]:
            c.execute(SETUP)
        fsync = c.execute("SHOW fsync").fetchone()[0]
    set_mode(dsn, "postgres", "deferred")
    ratios = {1: [], 64: []}
    for r in range(rounds):
        for tenants in (1, 64):
            tps = {}
            for v in (("bare", "deferred") if r % 2 == 0 else ("deferred", "bare")):
                with psycopg.connect(dsn, autocommit=True) as c:
                    c.execute("SELECT memory.audit_integrate()")
                tps[v] = pgbench(port, "postgres", script_for(v, tenants), 8, seconds)
            ratios[tenants].append(tps["deferred"] / tps["bare"])
            load = open("/proc/loadavg").read().split()[0]
            print(f"fsync={fsync} round {r + 1} tenants {tenants}: bare {tps['bare']:,.0f} deferred {tps['deferred']:,.0f} "
                  f"ratio {100 * ratios[tenants][-1]:.1f}% (load {load})", flush=True)
    for t in (1, 64) if rounds else ():
        print(f"fsync={fsync} tenants {t}: median ratio {100 * statistics.median(ratios[t]):.1f}% "
              f"of {[round(100 * x, 1) for x in ratios[t]]}", flush=True)
    # Full-page images off while WAL is measured: which pages a checkpoint's images cover depends
    # on the table's size and the uuid keys' spread, not on the variant (restored afterwards).
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("ALTER SYSTEM SET full_page_writes = off")
        c.execute("SELECT pg_reload_conf()")
    for v in ("bare", "deferred"):
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute("SELECT memory.audit_integrate()")
            c.execute("CHECKPOINT")
        # A warm-up of the same size first: the pages a checkpoint's full-page images cover.
        pgbench_n(port, script_for(v, 64), 8, n // 8)
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute("SELECT memory.audit_integrate()")
            (start,) = c.execute("SELECT pg_current_wal_insert_lsn()").fetchone()
        pgbench_n(port, script_for(v, 64), 8, n // 8)
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute("SELECT memory.audit_integrate()")
            (b,) = c.execute("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), %s)", (start,)).fetchone()
        print(f"fsync={fsync} WAL {v}: {float(b) / (n // 8 * 8):,.0f} bytes per transaction ({n // 8 * 8} transactions, "
              f"integrated; full_page_writes off, after a warm-up of as many)", flush=True)
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("ALTER SYSTEM RESET full_page_writes")
        c.execute("SELECT pg_reload_conf()")
        verify_chains(c)
    print("every chain verified", flush=True)


if __name__ == "__main__":
    main()
