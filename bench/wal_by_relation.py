"""Issue 54: the WAL of governed single-row transactions, record by record and relation by relation.

N single-row inserts into the governed table of bench/single_row_bench.py (pgbench -t, 8 clients,
64 tenants, deferred mode) after a warm-up of as many, then memory.audit_integrate() so that the
integrator's copy counts; full_page_writes off while measured (restored afterwards); pg_waldump
over the range, each record's total length summed by (relation, record type) and divided by N.

Usage: wal_by_relation.py PORT N [setup]     (PG_CONFIG names the server's pg_waldump)
"""
import collections
import os
import re
import subprocess
import sys

import psycopg

from single_row_bench import SETUP, script_for, set_mode
from single_row_wal import pgbench_n


def main():
    port, n = int(sys.argv[1]), int(sys.argv[2])
    dsn = f"host=127.0.0.1 port={port} user=postgres dbname=postgres"
    bindir = subprocess.check_output([os.environ.get("PG_CONFIG", "pg_config"), "--bindir"], text=True).strip()
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("CREATE EXTENSION IF NOT EXISTS memory_ext")
        if sys.argv[3:] == ["setup"]:
            c.execute(SETUP)
        set_mode(dsn, "postgres", "deferred")
        c.execute("ALTER SYSTEM SET full_page_writes = off")
        c.execute("SELECT pg_reload_conf()")
        waldir = c.execute("SELECT current_setting('data_directory') || '/pg_wal'").fetchone()[0]
    try:
        pgbench_n(port, script_for("deferred", 64), 8, n // 8)
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute("SELECT memory.audit_integrate()")
            c.execute("CHECKPOINT")
            (start,) = c.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
        pgbench_n(port, script_for("deferred", 64), 8, n // 8)
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute("SELECT memory.audit_integrate()")
            (end,) = c.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
            (total,) = c.execute("SELECT pg_wal_lsn_diff(%s, %s)", (end, start)).fetchone()
            dump = subprocess.run([f"{bindir}/pg_waldump", "-p", waldir, "-s", start, "-e", end],
                                  capture_output=True, text=True).stdout
            names = {}
            for fn in set(re.findall(r"rel \d+/\d+/(\d+)", dump)):
                (rel,) = c.execute("SELECT coalesce(pg_filenode_relation(0, %s)::text, 'filenode ' || %s)", (int(fn), fn)).fetchone()
                names[fn] = rel
    finally:
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute("ALTER SYSTEM RESET full_page_writes")
            c.execute("SELECT pg_reload_conf()")
    tx = n // 8 * 8
    size, count = collections.Counter(), collections.Counter()
    for line in dump.splitlines():
        m = re.search(r"rmgr: (\S+)\s+len \(rec/tot\):\s+\d+/\s*(\d+), .*?desc: (\S+)", line)
        if not m:
            continue
        r = re.search(r"rel \d+/\d+/(\d+)", line)
        key = (names[r.group(1)] if r else "-", f"{m.group(1)}/{m.group(3)}")
        size[key] += int(m.group(2))
        count[key] += 1
    print(f"{float(total) / tx:,.0f} bytes per transaction ({tx} transactions, integrated; full_page_writes off)")
    print(f"{'relation':34s} {'record':26s} {'records':>8s} {'B/tx':>8s} {'B/record':>9s}")
    for key, b in sorted(size.items(), key=lambda kv: -kv[1]):
        if b / tx >= 0.5:
            print(f"{key[0]:34s} {key[1]:26s} {count[key]:8d} {b / tx:8.1f} {b / count[key]:9.1f}")


if __name__ == "__main__":
    main()
