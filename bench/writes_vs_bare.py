"""Issue 54: governed single-row inserts against the same bare table, TPS side by side.

The two variants of single_row_bench.py that issue 54's goal compares (the bare table, and the
governed table in the default deferred audit mode with the background integrator running), on
1 and 64 tenants, in one cluster: pgbench, 8 clients, SECONDS per run, ROUNDS rounds with the
order alternating. Prints each round's governed/bare ratio (the two runs of a round are next to
each other in time, so a round's ratio is the least disturbed figure), the medians, the load
average, and WAL bytes per transaction of each variant from one further run; every chain is
verified afterwards.

Usage: writes_vs_bare.py DSN PORT [ROUNDS] [SECONDS]
The cluster at DSN/PORT must run the background integrator for its database
(memory.integrator_databases); bench/run.sh's bench-durable cluster has PostgreSQL's default
durable commits, which is what the issue measures.
"""
import os
import statistics
import sys
import time

import psycopg

from common import machine, write_section
from single_row_bench import matrix, pgbench, script_for, set_mode


def wal_per_tx(dsn, port, db, variant, tenants, seconds):
    """WAL bytes per transaction of one pgbench run (the governed one's events chained inside it)."""
    set_mode(dsn, db, "deferred")
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SELECT memory.audit_integrate()")
        (start,) = c.execute("SELECT pg_current_wal_insert_lsn()").fetchone()
        (n0,) = c.execute(f"SELECT count(*) FROM sr_{variant}").fetchone()
    pgbench(port, db, script_for(variant, tenants), 8, seconds)
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SELECT memory.audit_integrate()")
        (n1,) = c.execute(f"SELECT count(*) FROM sr_{variant}").fetchone()
        (wal,) = c.execute("SELECT pg_current_wal_insert_lsn() - %s::pg_lsn", (start,)).fetchone()
    return float(wal) / max(1, n1 - n0)


def main():
    dsn, port = sys.argv[1], int(sys.argv[2])
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    seconds = int(sys.argv[4]) if len(sys.argv) > 4 else 10
    db = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("CREATE EXTENSION IF NOT EXISTS memory_ext")
    load0 = os.getloadavg()
    m = matrix(dsn, port, rounds, seconds, variants=["bare", "deferred"])
    load1 = os.getloadavg()
    tps = m["tps"]
    lines = []
    for t in (1, 64):
        ratios = [100 * d / b for d, b in zip(tps[("deferred", t)], tps[("bare", t)])]
        lines.append(
            f"| {t} | {statistics.median(tps[('bare', t)]):,.0f} | {statistics.median(tps[('deferred', t)]):,.0f} | "
            f"**{statistics.median(ratios):.1f}%** | {100 * m['med'][('deferred', t)] / m['med'][('bare', t)]:.1f}% | "
            f"{', '.join(f'{r:.1f}' for r in ratios)} |")
    # Full-page images after a checkpoint would make the WAL figure depend on when one fell.
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("ALTER SYSTEM SET full_page_writes = off")
        c.execute("SELECT pg_reload_conf()")
    try:
        wal = {v: wal_per_tx(dsn, port, db, v, 64, seconds) for v in ("bare", "deferred")}
    finally:
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute("ALTER SYSTEM RESET full_page_writes")
            c.execute("SELECT pg_reload_conf()")
    with psycopg.connect(dsn, autocommit=True) as c:
        (fsync,) = c.execute("SHOW fsync").fetchone()
    body = f"""Command: `bench/writes_vs_bare.py DSN PORT {rounds} {seconds}` (release build; a cluster with `fsync = {fsync}`
and the background integrator serving the database). Machine: {machine()}. Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.
Load average (1/5/15 min) at the start {load0[0]:.1f}/{load0[1]:.1f}/{load0[2]:.1f}, at the end {load1[0]:.1f}/{load1[1]:.1f}/{load1[2]:.1f}.
pgbench, 8 clients, {seconds} s a run, {rounds} rounds, the order alternating; one `INSERT` of a memory-table row a transaction.

| tenants | bare TPS (median) | governed TPS (median) | governed/bare, median of the rounds' ratios | ratio of the medians | each round's ratio (%) |
|---|---|---|---|---|---|
{chr(10).join(lines)}

WAL per transaction (one further run of each, 64 tenants, the governed run's events chained, `full_page_writes = off` for it): bare {wal['bare']:,.0f} B,
governed {wal['deferred']:,.0f} B. Every chain verified afterwards ({m['chained']:,} chained entries).
"""
    write_section("Single-row governed inserts against bare: TPS (issue 54)", body)
    print(body)


if __name__ == "__main__":
    main()
