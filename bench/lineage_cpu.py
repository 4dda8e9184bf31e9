"""Issue 50, where lineage_bench.py's wall-clock ratios are noisy (a loaded machine, commit
latency): the same two comparisons by the backend's CPU time (/proc/<pid>/stat, user + system).

1. A derived INSERT with 10 sources against a plain governed INSERT: CALLS of each per round,
   as the tenant-bound bench_writer (prepared, autocommit).
2. memory.forget of a memory with 100 descendants (50 made from it, 50 from those) against
   forgetting a memory with none: TREES forgets of each per round, by a second connection of
   the writer (the trees are written by the first, outside the measured backend).

Rounds alternate the order of the two sides; medians of the rounds. Run after lineage_bench.py
has set up the database (its roles, the tenant org-0 and its memories):

    python lineage_cpu.py DSN [ROUNDS] [CALLS] [TREES]
"""
import random
import statistics
import sys

import psycopg

ORG = "org-0"
PLAIN = "INSERT INTO memory.observations (org_id, user_id, content) VALUES (%s, %s, %s) RETURNING id"
DERIVED = "INSERT INTO memory.observations (org_id, user_id, content, derived_from) VALUES (%s, %s, %s, %s::uuid[]) RETURNING id"


def writer(base):
    c = psycopg.connect(**{**base, "user": "bench_writer"}, autocommit=True)
    c.execute("SELECT set_config('memory.org_id', %s, false)", (ORG,))
    return c


def cpu_of(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / 100  # utime + stime, in clock ticks of 1/100 s


def main():
    dsn = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    calls = int(sys.argv[3]) if len(sys.argv) > 3 else 1000
    trees = int(sys.argv[4]) if len(sys.argv) > 4 else 40
    base = psycopg.conninfo.conninfo_to_dict(dsn)
    w, f = writer(base), writer(base)
    pool = [r[0] for r in w.execute("SELECT id FROM memory.observations WHERE org_id = %s LIMIT 1000", (ORG,))]
    rnd = random.Random(7)

    def tree(k):
        root = w.execute(PLAIN, (ORG, "user-2", "Root memory of the meeting")).fetchone()[0]
        first = [w.execute(DERIVED, (ORG, "user-2", f"Derived {i}", [root])).fetchone()[0] for i in range(k // 2)]
        for i in range(k - len(first)):
            w.execute(DERIVED, (ORG, "user-2", f"Derived again {i}", [first[i % len(first)]]))
        return root

    ins = {"plain": [], "derived": []}
    fg = {0: [], 100: []}
    for r in range(rounds):
        for k in (["plain", "derived"] if r % 2 == 0 else ["derived", "plain"]):
            c0 = cpu_of(f.info.backend_pid)
            for i in range(calls):
                text = f"Summary {i}: the customer asked about the budget"
                if k == "plain":
                    f.execute(PLAIN, (ORG, "user-1", text), prepare=True)
                else:
                    f.execute(DERIVED, (ORG, "user-1", text, rnd.sample(pool, 10)), prepare=True)
            ins[k].append((cpu_of(f.info.backend_pid) - c0) / calls * 1000)
        for k in ([0, 100] if r % 2 == 0 else [100, 0]):
            roots = [tree(k) for _ in range(trees)]
            c0 = cpu_of(f.info.backend_pid)
            for x in roots:
                n = len(f.execute("SELECT memory.forget(ARRAY[%s]::uuid[], 'bench')", (x,), prepare=True).fetchone()[0]["derived_forgotten"])
                assert n == k, (k, n)
            fg[k].append((cpu_of(f.info.backend_pid) - c0) / trees * 1000)
    p, d = statistics.median(ins["plain"]), statistics.median(ins["derived"])
    a, b = statistics.median(fg[0]), statistics.median(fg[100])
    print(f"backend CPU ms per INSERT: plain {p:.3f}, with 10 sources {d:.3f} ({p / d * 100:.0f}% of plain)")
    print(f"backend CPU ms per forget: one {a:.2f}, with 100 descendants {b:.2f} ({b / a:.2f}x)")
    print(f"rounds: plain {['%.3f' % x for x in ins['plain']]} derived {['%.3f' % x for x in ins['derived']]} "
          f"one {['%.2f' % x for x in fg[0]]} tree {['%.2f' % x for x in fg[100]]}")


if __name__ == "__main__":
    main()
