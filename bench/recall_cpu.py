"""Issue 47: backend CPU per call of governed hybrid recall against the hand-written RRF query
(hybrid_recall.py's RRF_SQL), on a database hybrid_recall.py's PHASE=setup built: a user's
memories and a tenant's, the four queries of each draw in a random order (seeded), each a
prepared statement from its own client (the recall as the tenant-bound reader hb_reader, the
hand-written query as the superuser). The CPU is the backend's own (/proc/PID/schedstat, time
on CPU), so it does not count the waits for the scheduler that a loaded machine adds to wall
times; medians of N draws after 20 warm-up draws, and the wall p50 beside them.

Usage: recall_cpu.py DSN [N]   (DSN of the cluster's postgres database; N: 300)
"""
import os
import random
import statistics
import sys
import time

import psycopg

import hybrid_recall as hr


def main():
    dsn = sys.argv[1].replace("dbname=postgres", "dbname=hybrid_bench")
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 300
    with psycopg.connect(dsn, autocommit=True) as c:
        centres = [list(v) for (v,) in c.execute("SELECT v FROM hb_centres ORDER BY c")]
    rng, shuffle = random.Random(37), random.Random(38)
    with psycopg.connect(dsn.replace("user=postgres", f"user={hr.READER}"), autocommit=True) as r, \
            psycopg.connect(dsn, autocommit=True) as hand:
        hr.bare_session(hand)
        pid = {id(c): c.execute("SELECT pg_backend_pid()").fetchone()[0] for c in (r, hand)}

        def cpu(c):
            with open(f"/proc/{pid[id(c)]}/schedstat") as f:
                return int(f.read().split()[0])

        kinds = ["user", "rrf", "tenant", "rrf_tenant"]
        spent = {k: [] for k in kinds}
        wall = {k: [] for k in kinds}
        for i in range(n + 20):
            org, user = f"org{rng.randrange(hr.TENANTS)}", f"u{rng.randrange(16)}"
            q = [x + rng.gauss(0, 1) for x in centres[rng.randrange(hr.CLUSTERS)]]
            word = rng.choice(hr.WORDS)
            qa = "{" + hr.vec(q)[1:-1] + "}"
            runs = {
                "user": (r, lambda: r.execute("SELECT id FROM memory.recall(%s, %s, 10, filters => jsonb_build_object('user_id', %s::text), "
                                              "query_embedding => %s::real[])", (org, word, user, qa), prepare=True).fetchall()),
                "tenant": (r, lambda: r.execute("SELECT id FROM memory.recall(%s, %s, 10, query_embedding => %s::real[])",
                                                (org, word, qa), prepare=True).fetchall()),
                "rrf": (hand, lambda: hand.execute(hr.RRF_SQL.format(user="AND o.user_id = %(u)s"),
                                                   {"o": org, "u": user, "w": word, "v": hr.vec(q)}, prepare=True).fetchall()),
                "rrf_tenant": (hand, lambda: hand.execute(hr.RRF_SQL.format(user=""), {"o": org, "w": word, "v": hr.vec(q)},
                                                          prepare=True).fetchall()),
            }
            order = kinds[:]
            shuffle.shuffle(order)
            for k in order:
                c, fn = runs[k]
                c0, t0 = cpu(c), time.perf_counter()
                fn()
                t1, c1 = time.perf_counter(), cpu(c)
                if i >= 20:
                    spent[k].append((c1 - c0) / 1e6)
                    wall[k].append((t1 - t0) * 1e3)
    print(f"load {os.getloadavg()[0]:.1f}, {n} draws")
    for k in kinds:
        print(f"{k:10s} backend CPU median {statistics.median(spent[k]):.3f} ms, wall p50 {statistics.median(wall[k]):.3f} ms")
    for a, b in (("user", "rrf"), ("tenant", "rrf_tenant")):
        ca, cb = statistics.median(spent[a]), statistics.median(spent[b])
        print(f"{a}: CPU {ca / cb:.2f}x the hand-written RRF query ({ca - cb:+.3f} ms a call)")


if __name__ == "__main__":
    main()
