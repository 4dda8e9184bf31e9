"""Issue 49: `memory.remember` with dedup `near` at 1M memories, a merge into a memory on a full
heap page against one into a memory on a page with room (the fillfactor memory.enable_embeddings
sets), by backend CPU (utime + stime of the writer's backend, /proc/PID/stat) and wall p50, with a
created call and the plain governed INSERT in the same run. On the database bench/hybrid_recall.py
builds (PHASE=setup) with the orgs bench/remember_near_bench.py sets to `near` (run that once).

Set-up (untimed, as the superuser): the table's fillfactor is set as memory.enable_embeddings
sets it (memory_internal._observations_fillfactor) when it has none; 2 x ROUNDS x CALLS memories
of those orgs are drawn (seeded); the second half is moved to pages filled at that fillfactor, as
if loaded under it (an UPDATE of nothing with triggers off, whose new versions go to new pages: the
table's pages loaded at fillfactor 100 have no room); the first half stays on its full pages.
With PREWARM=1 (the default) the table and its indexes are read into shared buffers first
(pg_prewarm), the same for every block. Blocks of CALLS calls, the order rotating by round:
  merged (full page)  a near duplicate (its embedding, new words) of a memory of the first half
  merged (room)       the same of one of the second half
  created             a new memory (an embedding drawn around a cluster centre)
  INSERT              the plain governed INSERT of a new memory with its embedding
At the end, how many of each set's memories are still on the page they were on before their merge
(a HOT update keeps the row's page; one with an entry in every index moves it).

    remember_near_hot.py PORT [ROUNDS] [CALLS]
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
    seed = int(os.environ.get("SEED", 49))
    dsn = f"host=127.0.0.1 port={port} dbname=hybrid_bench user=postgres"
    rng = random.Random(seed)
    orgs = [f"org{t}" for t in range(8)]
    n = rounds * calls
    su = psycopg.connect(dsn, autocommit=True)
    if not su.execute("SELECT reloptions FROM pg_class WHERE oid = 'memory.observations'::regclass").fetchone()[0]:
        ff = su.execute("SELECT memory_internal._observations_fillfactor(dimensions) FROM memory.ann_settings").fetchone()[0]
        su.execute(f"ALTER TABLE memory.observations SET (fillfactor = {int(ff)})")
    print("reloptions", su.execute("SELECT reloptions FROM pg_class WHERE oid = 'memory.observations'::regclass").fetchone()[0])
    centres = [list(v) for (v,) in su.execute("SELECT v FROM hb_centres ORDER BY c")]
    rows = su.execute("SELECT id, org_id, user_id, content, embedding::real[]::text FROM memory.observations "
                      "WHERE org_id = ANY(%s) AND user_id IS NOT NULL AND embedding IS NOT NULL AND soft_deleted_at IS NULL "
                      "AND content NOT LIKE 'again%%' ORDER BY md5(id::text || %s) LIMIT %s", (orgs, str(seed), 2 * n)).fetchall()
    full, room = rows[:n], rows[n:]
    with su.transaction():
        su.execute("SET LOCAL session_replication_role = replica")
        moved = su.execute("UPDATE memory.observations SET seen_count = seen_count WHERE id = ANY(%s) "
                           "RETURNING (ctid::text::point)[0]", ([r[0] for r in room],)).fetchall()
    print(f"moved {len(moved)} memories to pages {min(moved)[0]:.0f}..{max(moved)[0]:.0f}")
    if os.environ.get("PREWARM", "1") == "1":
        su.execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm")
        t0 = time.time()
        blocks = su.execute("SELECT sum(pg_prewarm(c.oid)) FROM pg_class c WHERE c.oid = 'memory.observations'::regclass "
                            "OR c.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid = 'memory.observations'::regclass)").fetchone()[0]
        print(f"prewarmed {blocks} blocks in {time.time() - t0:.0f} s; shared_buffers", su.execute("SHOW shared_buffers").fetchone()[0])
    w = psycopg.connect(dsn.replace("user=postgres", "user=hb_near_writer"), autocommit=True)
    pid = w.execute("SELECT pg_backend_pid()").fetchone()[0]
    outcomes = {}

    def new_vec():
        return "{" + ",".join(f"{x + rng.gauss(0, 1):.5f}" for x in centres[rng.randrange(len(centres))]) + "}"

    def merger(src, tag):
        def merged(i):
            _, o, u, c, e = src[i]
            r = w.execute("SELECT memory.remember(%s, %s, user_id => %s, embedding => %s::real[])", (o, f"again {i}: {c}", u, e),
                          prepare=True).fetchone()[0]
            outcomes[(tag, r["status"])] = outcomes.get((tag, r["status"]), 0) + 1
        return merged

    def created(i):
        r = w.execute("SELECT memory.remember(%s, %s, user_id => %s, embedding => %s::real[])",
                      (orgs[i % 8], f"hot note {i} {time.time_ns()}", f"u{i % 16}", new_vec()), prepare=True).fetchone()[0]
        outcomes[("created", r["status"])] = outcomes.get(("created", r["status"]), 0) + 1

    def insert(i):
        w.execute("INSERT INTO memory.observations (org_id, user_id, content, embedding) VALUES (%s, %s, %s, %s::real[]::vector)",
                  (orgs[i % 8], f"u{i % 16}", f"plain hot note {i} {time.time_ns()}", new_vec()), prepare=True)

    def pages(src):
        return {r[0]: b for r, b in zip(src, (su.execute("SELECT (ctid::text::point)[0] FROM memory.observations WHERE id = %s", (r[0],)).fetchone()[0] for r in src))}

    runs = [("merged (full page)", merger(full, "full")), ("merged (room)", merger(room, "room")), ("created", created), ("INSERT", insert)]
    org_of = {"merged (full page)": lambda i: full[i][1], "merged (room)": lambda i: room[i][1]}
    res = {k: {"cpu": [], "wall": []} for k, _ in runs}
    before = {"merged (full page)": pages(full), "merged (room)": pages(room)}
    loads = []
    for rnd in range(rounds):
        for name, fn in runs[rnd % len(runs):] + runs[:rnd % len(runs)]:
            walls, used = [], 0.0
            for j in range(calls):
                i = rnd * calls + j
                org = org_of[name](i) if name in org_of else orgs[i % 8]
                w.execute("SELECT pg_catalog.set_config('memory.org_id', %s, false)", (org,), prepare=True)
                c0, t0 = cpu(pid), time.perf_counter()
                fn(i)
                walls.append(time.perf_counter() - t0)
                used += cpu(pid) - c0
            res[name]["cpu"].append(used / calls * 1e3)
            res[name]["wall"].append(statistics.median(walls) * 1e3)
        loads.append(open("/proc/loadavg").read().split()[0])
    print("load after each round", " ".join(loads), "outcomes", outcomes)
    after = {"merged (full page)": pages(full), "merged (room)": pages(room)}
    for k, v in res.items():
        kept = f", on its page after the merge: {sum(after[k][i] == b for i, b in before[k].items())} of {len(before[k])}" if k in before else ""
        print(f"{k:20s} backend CPU {statistics.median(v['cpu']):.2f} ms/call (rounds {[round(x, 2) for x in v['cpu']]}), "
              f"wall p50 {statistics.median(v['wall']):.2f} ms (rounds {[round(x, 2) for x in v['wall']]}){kept}")


if __name__ == "__main__":
    main()
