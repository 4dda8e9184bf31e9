"""Issue 49, where the time goes: backend CPU (/proc/<pid>/stat of the connection's backend) per
call of each side of a ratio, in alternating batches on one connection (autocommit, prepared),
medians of the batches. Run by hand; the figures go in bench/RESULTS.md.

  remember   the plain governed INSERT into memory.observations against memory.remember (dedup
             exact, each text new), BATCH calls a batch; with FUNCTIONS, other functions of
             remember's first three arguments (org, content, user_id) alternate beside them (an
             earlier body installed under another name, to compare bodies in one run).
  as_of      memory.recall(org, query, 10) against the same with as_of, over the org
             'bench_rev' that bench/revisions_bench.py's setup fills (a fifth of the memories
             with a revision); BATCH queries a batch.

Usage: remember_cpu.py DSN remember ORG BATCH ROUNDS [FUNCTIONS...]
       remember_cpu.py DSN as_of BATCH ROUNDS
The DSN's role writes (or reads) as the application's would: a tenant-bound memory_writer with
memory.org_id set to ORG (options='-c memory.org_id=ORG'), or the superuser.
"""
import os
import random
import statistics
import sys
import time

import psycopg

from common import process_cpu as cpu

WORDS = ("user prefers dark mode editor terminal deploy production review budget project falcon kickoff meeting "
         "moved wednesday afternoon invoice paid january coffee oat milk flight heathrow friday").split()
REV_WORDS = ["invoice", "refund", "customer", "phone", "email", "shipping", "warranty", "account", "billing", "address",
             "delivery", "password", "order", "discount", "contract", "meeting", "schedule", "report", "payment", "support"]



def batches(conn, sides, rounds, run):
    """ms of backend CPU and wall per call, per side: medians over the rounds (order alternating)."""
    pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
    got = {s: ([], []) for s in sides}
    for r in range(rounds):
        for s in (sides if r % 2 == 0 else sides[::-1]):
            c0, t0 = cpu(pid), time.perf_counter()
            n = run(s)
            got[s][0].append((cpu(pid) - c0) / n * 1000)
            got[s][1].append((time.perf_counter() - t0) / n * 1000)
    return {s: (statistics.median(c), statistics.median(w), c) for s, (c, w) in got.items()}


def main():
    dsn, what = sys.argv[1], sys.argv[2]
    conn = psycopg.connect(dsn, autocommit=True)
    load = os.getloadavg()
    if what == "remember":
        org, batch, rounds = sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
        sides = ["plain", "memory.remember"] + sys.argv[6:]
        rng, seq = random.Random(49), [int(time.time() * 1000)]

        def run(side):
            for i in range(batch):
                seq[0] += 1
                text = " ".join(rng.choice(WORDS) for _ in range(12)) + f" (note {seq[0]})"
                if side == "plain":
                    conn.execute("INSERT INTO memory.observations (org_id, user_id, content) VALUES (%s, %s, %s)",
                                 (org, f"u{i % 50}", text), prepare=True)
                else:
                    conn.execute(f"SELECT {side}(%s, %s, user_id => %s)", (org, text, f"u{i % 50}"), prepare=True)
            return batch
        base = "plain"
    elif what == "as_of":
        batch, rounds = int(sys.argv[3]), int(sys.argv[4])
        sides = ["recall", "as_of"]
        at = conn.execute("SELECT now() - interval '7 days'").fetchone()[0]
        qs = [" ".join(REV_WORDS[(q * 5 + j) % len(REV_WORDS)] for j in range(2)) for q in range(batch)]

        def run(side):
            for q in qs:
                if side == "recall":
                    conn.execute("SELECT count(*) FROM memory.recall('bench_rev', %s, 10)", (q,), prepare=True).fetchone()
                else:
                    conn.execute("SELECT count(*) FROM memory.recall('bench_rev', %s, 10, as_of => %s)", (q, at), prepare=True).fetchone()
            return batch
        for s in sides:  # warm: the kept plans
            run(s)
        base = "recall"
    else:
        sys.exit(__doc__)
    res = batches(conn, sides, rounds, run)
    after = os.getloadavg()
    print(f"load average before {load[0]:.2f}/{load[1]:.2f}/{load[2]:.2f}, after {after[0]:.2f}/{after[1]:.2f}/{after[2]:.2f}")
    for s, (c, w, all_) in res.items():
        # Each round's two sides ran next to each other: the median of the rounds' ratios is the
        # steadier figure on a loaded machine (a round's load moves both sides).
        paired = statistics.median(b / x for b, x in zip(res[base][2], all_))
        print(f"{s:28s} backend CPU ms/call median {c:.3f} ({c / res[base][0]:.2f}x {base}'s; calls a CPU second: {100 * res[base][0] / c:.0f}% of {base}'s,"
              f" {100 * paired:.0f}% by the median of the rounds' ratios)  wall {w:.3f}  rounds {[round(x, 3) for x in all_]}")


if __name__ == "__main__":
    main()
