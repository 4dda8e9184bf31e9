"""Issue 54: the background integrator's CPU per governed single-row transaction, two builds side by side.

For each cluster in turn (rounds alternate the order): the pending backlog integrated, then N
single-row governed inserts (pgbench -t, 8 clients, 64 tenants, the script and table of
bench/single_row_bench.py), then a wait until the integrator has chained all of them; the
integrator's CPU time over that span (/proc/<pid>/schedstat, so nothing else counts) divided by N.
Also the integrator's CPU while idle (no writes), per second. Medians of the rounds.
With `held`: while the N transactions run, another session holds the integration lock (an open
transaction that integrated its own entry), so the integrator's rounds are refused it; the span
ends with the run, and what it wrote is chained after it, uncounted.

Usage: integrator_cpu.py PORT_A PORT_B N ROUNDS [setup] [held]
Both clusters must run the background integrator for database postgres (one worker).
"""
import statistics
import sys
import time

import psycopg

from single_row_bench import SETUP, script_for, set_mode
from single_row_wal import pgbench_n
from common import verify_chains


def integrator(c):
    (pid,) = c.execute("SELECT pid FROM pg_catalog.pg_stat_activity WHERE backend_type = 'memory_ext integrator'").fetchone()
    return pid


def cpu_ns(pid):
    with open(f"/proc/{pid}/schedstat") as f:
        return int(f.read().split()[0])


def drained(c):
    return c.execute("SELECT NOT EXISTS (SELECT 1 FROM memory.audit_pending)").fetchone()[0]


def main():
    ports, n, rounds = (int(sys.argv[1]), int(sys.argv[2])), int(sys.argv[3]), int(sys.argv[4])
    conns = {p: psycopg.connect(f"host=127.0.0.1 port={p} user=postgres dbname=postgres", autocommit=True) for p in ports}
    for p, c in conns.items():
        c.execute("CREATE EXTENSION IF NOT EXISTS memory_ext")
        if "setup" in sys.argv[5:]:
            c.execute(SETUP)
        set_mode(f"host=127.0.0.1 port={p} user=postgres dbname=postgres", "postgres", "deferred")
    held = "held" in sys.argv[5:]
    busy, idle = {p: [] for p in ports}, {p: [] for p in ports}
    for r in range(rounds):
        for p in ports if r % 2 == 0 else ports[::-1]:
            c = conns[p]
            c.execute("SELECT memory.audit_integrate()")
            pid = integrator(c)
            t0 = cpu_ns(pid)
            time.sleep(2.0)
            idle[p].append((cpu_ns(pid) - t0) / 2.0 / 1000)
            hold = None
            if held:
                hold = psycopg.connect(f"host=127.0.0.1 port={p} user=postgres dbname=postgres")
                hold.execute("INSERT INTO sr_deferred (org_id, user_id, content, source_type) VALUES ('org-1', 'holder', 'x', 'preference')")
                # Its own entry, integrated in its transaction: the lock is taken and kept.
                assert hold.execute("SELECT memory.audit_integrate()").fetchone()[0] >= 1
            t0 = cpu_ns(pid)
            pgbench_n(p, script_for("deferred", 64), 8, n // 8)
            if hold is None:
                while not drained(c):
                    time.sleep(0.05)
            else:
                t1 = cpu_ns(pid)
                hold.commit()
                hold.close()
            busy[p].append(((t1 if hold is not None else cpu_ns(pid)) - t0) / (n // 8 * 8) / 1000)
            load = open("/proc/loadavg").read().split()[0]
            print(f"round {r + 1} port {p}: integrator {busy[p][-1]:.2f} us/tx, idle {idle[p][-1]:.0f} us/s (load {load})", flush=True)
    for p in ports:
        print(f"port {p}: integrator median {statistics.median(busy[p]):.2f} us/tx of {[round(x, 2) for x in busy[p]]}; "
              f"idle median {statistics.median(idle[p]):.0f} us/s", flush=True)
    for c in conns.values():
        verify_chains(c)
    print("every chain verified", flush=True)


if __name__ == "__main__":
    main()
