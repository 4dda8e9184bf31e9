"""One pass of bench/compare_builds.sh: single-row pgbench runs (8 clients, 10 s each, fsync = off)
of the bare table and of memory_ext deferred, on 1 and 64 tenants, in a cluster whose background
integrator serves the database; prints one line of TPS.

Usage: compare_builds.py PORT LABEL [setup]   ("setup" makes the benchmark's tables first)
"""
import sys

import psycopg

from single_row_bench import SETUP, pgbench, script_for, set_mode
from common import verify_chains


def main():
    port, label = int(sys.argv[1]), sys.argv[2]
    dsn = f"host=127.0.0.1 port={port} user=postgres dbname=postgres"
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("CREATE EXTENSION IF NOT EXISTS memory_ext")
        if sys.argv[3:] == ["setup"]:
            c.execute(SETUP)
    set_mode(dsn, "postgres", "deferred")
    out = []
    for tenants in (1, 64):
        for variant in ("bare", "deferred"):
            # What the previous run left pending is integrated first (untimed).
            with psycopg.connect(dsn, autocommit=True) as c:
                c.execute("SELECT memory.audit_integrate()")
            tps = pgbench(port, "postgres", script_for(variant, tenants), 8, 10)
            out.append(f"{variant}/{tenants} {tps:,.0f}")
    with psycopg.connect(dsn, autocommit=True) as c:
        verify_chains(c)
    print(f"{label}: " + ", ".join(out) + " TPS", flush=True)


if __name__ == "__main__":
    main()
