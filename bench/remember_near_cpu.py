"""Issue 49: `memory.remember` with dedup `near` at 1M memories by backend CPU (utime + stime of the
writer's backend, /proc/PID/stat) and wall p50, on the database bench/hybrid_recall.py builds
(PHASE=setup) with the orgs bench/remember_near_bench.py sets to `near` (run that once first).
Blocks of CALLS calls, ROUNDS rounds, the blocks' order rotating by round; medians of the rounds:
  merged   a near duplicate of one of a user's memories (its embedding, new words)
  created  a new memory (an embedding drawn around a cluster centre)
  INSERT   the plain governed INSERT of a new memory with its embedding
With COMPARE=name, also `created` through memory.<name> (a copy of another build's
memory.remember made in the bench database by hand, for an A/B in one run).

    remember_near_cpu.py PORT [ROUNDS] [CALLS]
"""
import os
import random
import statistics
import sys
import time

import psycopg

from common import process_cpu as cpu




def main():
    port = int(sys.argv[1])
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    calls = int(sys.argv[3]) if len(sys.argv) > 3 else 50
    seed = int(os.environ.get("SEED", 21))
    dsn = f"host=127.0.0.1 port={port} dbname=hybrid_bench user=postgres"
    rng = random.Random(seed)
    orgs = [f"org{t}" for t in range(8)]
    with psycopg.connect(dsn, autocommit=True) as su:
        centres = [list(v) for (v,) in su.execute("SELECT v FROM hb_centres ORDER BY c")]
        dups = su.execute("SELECT org_id, user_id, content, embedding::real[]::text FROM memory.observations "
                          "WHERE org_id = ANY(%s) AND user_id IS NOT NULL AND embedding IS NOT NULL AND soft_deleted_at IS NULL "
                          "ORDER BY md5(id::text || %s) LIMIT %s", (orgs, str(seed), rounds * calls)).fetchall()
    w = psycopg.connect(dsn.replace("user=postgres", "user=hb_near_writer"), autocommit=True)
    pid = w.execute("SELECT pg_backend_pid()").fetchone()[0]
    outcomes = {}

    def new_vec():
        return "{" + ",".join(f"{x + rng.gauss(0, 1):.5f}" for x in centres[rng.randrange(len(centres))]) + "}"

    def merged(i):
        o, u, c, e = dups[i]
        r = w.execute("SELECT memory.remember(%s, %s, user_id => %s, embedding => %s::real[])", (o, f"again {i}: {c}", u, e),
                      prepare=True).fetchone()[0]
        outcomes[("merged", r["status"])] = outcomes.get(("merged", r["status"]), 0) + 1

    def creator(fn, tag):
        def created(i):
            r = w.execute(f"SELECT memory.{fn}(%s, %s, user_id => %s, embedding => %s::real[])",
                          (orgs[i % 8], f"cpu note {i} {time.time_ns()}", f"u{i % 16}", new_vec()), prepare=True).fetchone()[0]
            outcomes[(tag, r["status"])] = outcomes.get((tag, r["status"]), 0) + 1
        return created

    def insert(i):
        w.execute("INSERT INTO memory.observations (org_id, user_id, content, embedding) VALUES (%s, %s, %s, %s::real[]::vector)",
                  (orgs[i % 8], f"u{i % 16}", f"plain cpu note {i} {time.time_ns()}", new_vec()), prepare=True)

    runs = [("merged", merged), ("created", creator("remember", "created"))]
    if os.environ.get("COMPARE"):
        runs.append((f"created ({os.environ['COMPARE']})", creator(os.environ["COMPARE"], os.environ["COMPARE"])))
    runs.append(("INSERT", insert))
    res = {n: {"cpu": [], "wall": []} for n, _ in runs}
    loads = []
    for rnd in range(rounds):
        for name, fn in runs[rnd % len(runs):] + runs[:rnd % len(runs)]:
            walls, used = [], 0.0
            for j in range(calls):
                i = rnd * calls + j
                org = dups[i][0] if name == "merged" else orgs[i % 8]
                w.execute("SELECT pg_catalog.set_config('memory.org_id', %s, false)", (org,), prepare=True)
                c0, t0 = cpu(pid), time.perf_counter()
                fn(i)
                walls.append(time.perf_counter() - t0)
                used += cpu(pid) - c0
            res[name]["cpu"].append(used / calls * 1e3)
            res[name]["wall"].append(statistics.median(walls) * 1e3)
        loads.append(open("/proc/loadavg").read().split()[0])
    print("load after each round", " ".join(loads), "outcomes", outcomes)
    for n, v in res.items():
        print(f"{n:18s} backend CPU {statistics.median(v['cpu']):.2f} ms/call (rounds {[round(x, 2) for x in v['cpu']]}), "
              f"wall p50 {statistics.median(v['wall']):.2f} ms (rounds {[round(x, 2) for x in v['wall']]})")


if __name__ == "__main__":
    main()
