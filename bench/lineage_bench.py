"""Issue 50 benchmark: lineage's cost where users pay it (SPEC §18 targets).

1. A single-row INSERT of a memory with 10 sources (derived_from) against a plain governed INSERT
   of the same memory (target: at least 60%): each one statement in its own transaction, by a
   tenant-bound memory_writer (psycopg, prepared, autocommit), in a tenant of ROWS memories.
2. memory.forget of a memory with 100 descendants (50 made from it, 50 from those) against
   forgetting a memory with none (target: at most 5x), same writer, one call each.

Rounds alternate the order of the two sides; medians over the rounds of each round's median.

    python lineage_bench.py DSN [ROWS] [ROUNDS] [CALLS]
"""
import random
import sys
import time

import psycopg

from agent_api_bench import TENANTS, pct, roles
from common import machine, median, write_section

ORG = "org-0"


def main():
    dsn = sys.argv[1]
    rows = int(sys.argv[2]) if len(sys.argv) > 2 else 10_000
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    calls = int(sys.argv[4]) if len(sys.argv) > 4 else 300
    base = psycopg.conninfo.conninfo_to_dict(dsn)
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SELECT memory.setup_roles()")
        c.execute("CREATE TABLE IF NOT EXISTS bench_obs_plain (id uuid)")  # (roles() grants on it)
        roles(c)
        c.execute("""INSERT INTO memory.observations (org_id, user_id, content)
                     SELECT %s, 'user-' || (i %% 50), 'User ' || i || ' mentioned the quarterly plan and the budget'
                       FROM generate_series(1, %s) i""", (ORG, rows))
        c.execute("VACUUM ANALYZE memory.observations")
        pool = [r[0] for r in c.execute("SELECT id FROM memory.observations WHERE org_id = %s LIMIT 1000", (ORG,))]
    w = psycopg.connect(**{**base, "user": "bench_writer"}, autocommit=True)
    w.execute("SELECT set_config('memory.org_id', %s, false)", (ORG,))
    rnd_ = random.Random(7)
    plain_sql = "INSERT INTO memory.observations (org_id, user_id, content) VALUES (%s, %s, %s)"
    derived_sql = "INSERT INTO memory.observations (org_id, user_id, content, derived_from) VALUES (%s, %s, %s, %s::uuid[])"

    def insert_plain(i):
        t = time.perf_counter()
        w.execute(plain_sql, (ORG, "user-1", f"Summary {i}: the customer asked about the budget"), prepare=True)
        return time.perf_counter() - t

    def insert_derived(i):
        src = rnd_.sample(pool, 10)
        t = time.perf_counter()
        w.execute(derived_sql, (ORG, "user-1", f"Summary {i}: the customer asked about the budget", src), prepare=True)
        return time.perf_counter() - t

    def tree(n_kids):
        """A root with n_kids descendants (half made from it, half from those); its id."""
        root = w.execute(plain_sql + " RETURNING id", (ORG, "user-2", "Root memory of the meeting"), prepare=True).fetchone()[0]
        first = [w.execute(derived_sql + " RETURNING id", (ORG, "user-2", f"Derived {k}", [root]), prepare=True).fetchone()[0]
                 for k in range(n_kids // 2)]
        for k in range(n_kids - len(first)):
            w.execute(derived_sql, (ORG, "user-2", f"Derived again {k}", [first[k % len(first)]]), prepare=True)
        return root

    def forget(root):
        t = time.perf_counter()
        r = w.execute("SELECT memory.forget(ARRAY[%s]::uuid[], 'bench')", (root,), prepare=True).fetchone()[0]
        dt = time.perf_counter() - t
        return dt, len(r["derived_forgotten"])

    ins = {"plain": [], "derived": []}
    fg = {"one": [], "tree": []}
    n_trees = max(5, calls // 30)
    for rnd in range(rounds):
        order = [("plain", insert_plain), ("derived", insert_derived)]
        for name, fn in (order if rnd % 2 == 0 else order[::-1]):
            xs = [fn(i) for i in range(calls)]
            ins[name].append(pct(xs, 0.5))
        lone = [tree(0) for _ in range(n_trees)]
        trees = [tree(100) for _ in range(n_trees)]
        one_t, tree_t = [], []
        for a, b in zip(lone, trees):
            pair = [("one", a), ("tree", b)] if rnd % 2 == 0 else [("tree", b), ("one", a)]
            for name, root in pair:
                dt, n = forget(root)
                assert n == (100 if name == "tree" else 0), (name, n)
                (tree_t if name == "tree" else one_t).append(dt)
        fg["one"].append(pct(one_t, 0.5))
        fg["tree"].append(pct(tree_t, 0.5))
    m = {k: median(v) * 1000 for k, v in {**ins, **fg}.items()}
    print(m, flush=True)
    ratio_ins = m["plain"] / m["derived"] * 100
    ratio_fg = m["tree"] / m["one"]
    write_section("Lineage: derived inserts and forgetting with descendants (issue 50)", f"""
Command: `python bench/lineage_bench.py DSN {rows} {rounds} {calls}` against a release build (`scripts/install-ext.sh`).
Machine: {machine()}. Date: {time.strftime('%Y-%m-%d')}.
A tenant of {rows:,} memories (`memory.observations`, governed: classify, stamps, audit in deferred mode, revisions); one client
(psycopg, prepared, autocommit) as a tenant-bound `memory_writer`, each statement its own transaction; {rounds} rounds
alternating the order of the two sides; medians over the rounds of each round's median, in ms.

| one statement | median ms | |
|---|---|---|
| `INSERT` of a memory (plain governed insert) | {m['plain']:.3f} | 100% |
| `INSERT` of a memory with 10 sources (`derived_from`) | {m['derived']:.3f} | **{ratio_ins:.0f}%** of plain (target: at least 60%) |
| `memory.forget` of a memory with no descendants | {m['one']:.3f} | 1x |
| `memory.forget` of a memory with 100 descendants (50 + 50 at depth 2) | {m['tree']:.3f} | **{ratio_fg:.1f}x** (target: at most 5x) |

- The 10 sources are drawn at random from 1,000 memories of the tenant for each insert; each derived insert checks them
  (same org, live, within the writer's clearance) and takes the tier and trust floors before the classify trigger and the
  retention ceiling after it.
- Forgetting 100 descendants deletes 101 rows with their audit events (`memory.delete` each, one `memory.forget` event
  naming all, one receipt), level by level through the partial GIN index on `derived_from`.
""")


if __name__ == "__main__":
    main()
