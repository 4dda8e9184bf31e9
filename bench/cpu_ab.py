"""Issue 54: backend CPU per single-row INSERT transaction of two builds, alternating (see
cpu_per_insert.py): the bare table and memory_ext deferred on each cluster, ROUNDS rounds, the
order of the builds alternating by round; medians.

Usage: cpu_ab.py PORT_BEFORE PORT_AFTER N ROUNDS
"""
import statistics
import sys

import psycopg

from cpu_per_insert import run


def main():
    before, after, n, rounds = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    dsn = "host=127.0.0.1 port={} user=postgres dbname=postgres"
    us = {(b, v): [] for b in ("before", "after") for v in ("bare", "deferred")}
    for r in range(rounds):
        builds = [("before", before), ("after", after)]
        for b, port in (builds if r % 2 == 0 else builds[::-1]):
            for v in ("bare", "deferred"):
                with psycopg.connect(dsn.format(port), autocommit=True) as c:
                    c.execute("SELECT memory.audit_integrate()")
                us[(b, v)].append(run(dsn.format(port), v, n, "deferred"))
    load = open("/proc/loadavg").read().split()[0]
    for k, v in us.items():
        print(f"{k[0]} {k[1]}: median {statistics.median(v):.2f} us/tx backend CPU {[round(x, 1) for x in v]}")
    for b in ("before", "after"):
        d = [g - s for g, s in zip(us[(b, "deferred")], us[(b, "bare")])]
        print(f"{b}: governed - bare, median of rounds {statistics.median(d):.2f} us {[round(x, 1) for x in d]}")
    print(f"N={n}, {rounds} rounds, load {load}")


if __name__ == "__main__":
    main()
