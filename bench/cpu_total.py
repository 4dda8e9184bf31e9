"""Issue 54: all of a cluster's CPU per single-row transaction (backends, integrator, WAL writer,
checkpointer...), bare against governed, and governed with its integration held off.

Wall-clock TPS on a shared 2-core machine moves with everyone else's load; CPU time per
transaction does much less. Each variant runs N single-row transactions (pgbench -t, 8 clients,
-j 2; the scripts and tables of bench/single_row_bench.py) and is charged the CPU of the
postmaster's children over the run: those that exited (the pgbench sessions' backends), from the
postmaster's cutime + cstime, and those still running, from their own utime + stime.

  bare          the bare table
  governed      the governed table (deferred mode), chained within the run: by the background
                integrator as it goes when the cluster runs one (the run ends once all is chained),
                else by one memory.audit_integrate() at the end of the run
  not chained   (a cluster without an integrator only) the governed table, its events chained after
                the run, uncounted: each event written once (the pending row)

On a cluster without an integrator, governed − not chained is what the second write of every event
costs (the copy into memory.audit_log with its index entry, the pending row's delete, the heads),
done in one batch: the least that writing each event once could save. Rounds alternate the order;
medians.

Usage: cpu_total.py PORT N ROUNDS TENANTS [setup]
"""
import os
import collections
import statistics
import sys
import time

import psycopg

from single_row_bench import SETUP, script_for, set_mode
from single_row_wal import pgbench_n
from common import verify_chains

HZ = os.sysconf("SC_CLK_TCK")


def children_cpu(pm, by=None):
    """CPU seconds of the postmaster's children: reaped ones and running ones. With `by` (a
    Counter), also each kind's: the exited ones (the sessions' backends, autovacuum workers) as
    "exited", the running ones by their process title (pid-specific parts dropped)."""
    f = open(f"/proc/{pm}/stat").read().rsplit(")", 1)[1].split()
    total = (int(f[13]) + int(f[14])) / HZ  # cutime, cstime (fields 16 and 17)
    if by is not None:
        by["exited (backends of the run, autovacuum workers)"] += total
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            s = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
            title = open(f"/proc/{pid}/cmdline").read().replace("\0", " ").strip()
        except OSError:
            continue
        if int(s[1]) == pm:  # ppid
            t = (int(s[11]) + int(s[12])) / HZ  # utime, stime
            total += t
            if by is not None:
                kind = title.removeprefix("postgres: ").split(" postgres ")[0].split(" 127.0.0.1")[0]
                by[kind] += t
    return total


def proc_cpu(pid):
    s = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(s[11]) + int(s[12])) / HZ


def main():
    port, n, rounds, tenants = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    dsn = f"host=127.0.0.1 port={port} user=postgres dbname=postgres"
    c = psycopg.connect(dsn, autocommit=True)
    c.execute("CREATE EXTENSION IF NOT EXISTS memory_ext")
    if sys.argv[5:] == ["setup"]:
        c.execute(SETUP)
    set_mode(dsn, "postgres", "deferred")
    pm = int(open(c.execute("SELECT current_setting('data_directory') || '/postmaster.pid'").fetchone()[0]).readline())
    per = n // 8
    (ipid,) = c.execute("SELECT pid FROM pg_catalog.pg_stat_activity WHERE backend_type = 'memory_ext integrator'").fetchone() or (None,)
    res = {"bare": [], "governed": []} if ipid else {"bare": [], "governed": [], "not chained": []}
    order = list(res)
    parts = {v: [] for v in res}
    for r in range(rounds):
        for v in order if r % 2 == 0 else order[::-1]:
            c.execute("SELECT memory.audit_integrate()")
            time.sleep(0.5)
            i0 = proc_cpu(ipid) if ipid else 0.0
            b0 = collections.Counter()
            t0 = children_cpu(pm, b0)
            pgbench_n(port, script_for("bare" if v == "bare" else "deferred", tenants), 8, per)
            if v == "governed" and ipid:
                while c.execute("SELECT EXISTS (SELECT 1 FROM memory.audit_pending)").fetchone()[0]:
                    time.sleep(0.02)
            elif v == "governed":
                c.execute("SELECT memory.audit_integrate()")
            b1 = collections.Counter()
            t1 = children_cpu(pm, b1)
            parts[v].append({k: (b1[k] - b0[k]) / (per * 8) * 1e6 for k in b1})
            di = proc_cpu(ipid) - i0 if ipid else 0.0
            res[v].append((t1 - t0) / (per * 8) * 1e6)
            load = open("/proc/loadavg").read().split()[0]
            print(f"round {r + 1} {v:11s}: {res[v][-1]:6.1f} us of CPU per transaction, of it the integrator "
                  f"{di / (per * 8) * 1e6:5.1f} (load {load})", flush=True)
    med = {v: statistics.median(x) for v, x in res.items()}
    for v, x in res.items():
        print(f"{tenants} tenants {v:11s}: median {med[v]:6.1f} us/tx of {[round(y, 1) for y in x]}", flush=True)
    print(f"{tenants} tenants: governed - bare {med['governed'] - med['bare']:.1f} us/tx; "
          f"CPU ratio bare/governed {100 * med['bare'] / med['governed']:.1f}%", flush=True)
    if "not chained" in med:
        print(f"{tenants} tenants: governed - not chained {med['governed'] - med['not chained']:.1f} us/tx; "
              f"CPU ratio bare/not chained {100 * med['bare'] / med['not chained']:.1f}%", flush=True)
    for v, rows in parts.items():
        kinds = sorted({k for row in rows for k in row})
        print(f"{tenants} tenants {v:11s} by process: " + "; ".join(
            f"{k} {statistics.median(row.get(k, 0.0) for row in rows):.1f}" for k in kinds
            if statistics.median(row.get(k, 0.0) for row in rows) >= 0.05), flush=True)
    verify_chains(c)
    print("every chain verified", flush=True)


if __name__ == "__main__":
    main()
