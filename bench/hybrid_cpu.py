"""Issue 53: where governed recall's time goes at 1M, by backend CPU (utime + stime of each
backend, /proc/PID/stat) rather than wall clock on a shared machine. On the database
bench/hybrid_recall.py builds (PHASE=setup), DRAWS draws of a random tenant's user and a query
near a random centre; each draw runs every query once untimed (its rows into shared buffers),
then REPS times each, the queries in a random order (seeded):
  vector  memory.recall(org, '', 10, filters => {user_id}, query_embedding) as the tenant-bound reader
  hybrid  the same with a word of the content
  bare    the hand-written `WHERE org_id = $1 AND user_id = $2 ORDER BY embedding <=> $3 LIMIT 10`
          (superuser; hnsw.iterative_scan and ef_search as recall sets them)
USER_ID=nobody reads an empty scope (the per-call cost without rows).

    hybrid_cpu.py PORT [DRAWS] [REPS] [QUERIES]   (QUERIES: vector,bare,hybrid)
"""
import os
import random
import statistics
import sys
import time

import psycopg

from common import process_cpu as cpu




def vec(v):
    return "[" + ",".join(f"{x:.5f}" for x in v) + "]"


def main():
    port = int(sys.argv[1])
    draws = int(sys.argv[2]) if len(sys.argv) > 2 else 100
    reps = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    which = (sys.argv[4] if len(sys.argv) > 4 else "vector,bare,hybrid").split(",")
    dsn = f"host=127.0.0.1 port={port} dbname=hybrid_bench user=postgres"
    with psycopg.connect(dsn, autocommit=True) as su:
        centres = [list(v) for (v,) in su.execute("SELECT v FROM hb_centres ORDER BY c")]
    r = psycopg.connect(dsn.replace("user=postgres", "user=hb_reader"), autocommit=True)
    h = psycopg.connect(dsn, autocommit=True)
    h.execute("SET hnsw.iterative_scan = relaxed_order")
    h.execute("SET hnsw.ef_search = 100")
    pids = {c: c.execute("SELECT pg_backend_pid()").fetchone()[0] for c in (r, h)}
    rng = random.Random(int(os.environ.get("SEED", 7)))

    def run(name, org, user, q, word):
        qa = "{" + vec(q)[1:-1] + "}"
        if name == "bare":
            return h.execute("SELECT id FROM memory.observations WHERE org_id = %s AND user_id = %s ORDER BY embedding <=> %s::vector LIMIT 10",
                             (org, user, vec(q)), prepare=True).fetchall()
        return r.execute("SELECT id FROM memory.recall(%s, %s, 10, filters => jsonb_build_object('user_id', %s::text), query_embedding => %s::real[])",
                         (org, word if name == "hybrid" else "", user, qa), prepare=True).fetchall()

    cpus = {n: 0.0 for n in which}
    walls = {n: [] for n in which}
    for _ in range(draws):
        org, user = f"org{rng.randrange(64)}", os.environ.get("USER_ID") or f"u{rng.randrange(16)}"
        q = [x + rng.gauss(0, 1) for x in centres[rng.randrange(64)]]
        word = rng.choice(["invoice", "refund", "payment", "travel"])
        order = which[:]
        rng.shuffle(order)
        for n in order:
            run(n, org, user, q, word)
        for n in order:
            pid = pids[h if n == "bare" else r]
            c0, t0 = cpu(pid), time.perf_counter()
            for _ in range(reps):
                run(n, org, user, q, word)
            walls[n].append((time.perf_counter() - t0) / reps * 1e3)
            cpus[n] += cpu(pid) - c0
    print("load", " ".join(open("/proc/loadavg").read().split()[:3]))
    for n in which:
        print(f"{n:7s} backend CPU {cpus[n] / (draws * reps) * 1e3:.3f} ms/call, wall median {statistics.median(walls[n]):.3f} ms")


if __name__ == "__main__":
    main()
