"""Memory over time (issue 49, SPEC §17): the cost of a kept revision on an UPDATE, and of a
point-in-time recall, each against its baseline in the same run.

    revisions_bench.py DSN [MEMORIES] [UPDATES] [QUERIES]

- UPDATE: single-row corrections of memory.observations' content (one statement each, autocommit,
  as an agent corrects a memory), with the revision trigger (memory_revisions) against the same
  table with that trigger disabled (the governed UPDATE without a revision), and against a bare
  table of the same shape (no trigger at all). Rounds alternate the three.
- recall: memory.recall of one org's MEMORIES memories (a fifth of them corrected once, so they
  have a revision) with and without as_of (a time between their writing and their correction),
  QUERIES calls each, alternating; p50 and p95.
Writes the section "Memory over time (issue 49)" of bench/RESULTS.md, with the machine's load.
"""
import os
import statistics
import sys
import time

import psycopg

from common import machine, write_section

dsn = sys.argv[1]
MEMORIES = int(sys.argv[2]) if len(sys.argv) > 2 else 20000
UPDATES = int(sys.argv[3]) if len(sys.argv) > 3 else 2000
QUERIES = int(sys.argv[4]) if len(sys.argv) > 4 else 200
WORDS = ["invoice", "refund", "customer", "phone", "email", "shipping", "warranty", "account", "billing", "address",
         "delivery", "password", "order", "discount", "contract", "meeting", "schedule", "report", "payment", "support"]


def sentence(i):
    w = [WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(6)]
    return f"memory {i}: the {w[0]} of the {w[1]} mentions {w[2]} and {w[3]} after {w[4]} {w[5]}"


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


with psycopg.connect(dsn, autocommit=True) as c:
    c.execute("DELETE FROM memory.observations WHERE org_id = 'bench_rev'")
    c.execute("DROP TABLE IF EXISTS public.bare_obs")
    c.execute("CREATE TABLE public.bare_obs (LIKE memory.observations INCLUDING DEFAULTS)")
    c.execute("ALTER TABLE public.bare_obs ADD PRIMARY KEY (id)")
    # The corpus: written "10 days ago" (created_at), a fifth corrected "5 days ago" (their revision's
    # valid_to is the correction's time: set after it, as the superuser).
    c.execute("""INSERT INTO memory.observations (org_id, content, created_at)
                 SELECT 'bench_rev', s, now() - interval '10 days' FROM unnest(%s::text[]) s""",
              ([sentence(i) for i in range(MEMORIES)],))
    c.execute("""UPDATE memory.observations SET content = content || ' (corrected)'
                  WHERE org_id = 'bench_rev' AND (hashtext(id::text) % 5) = 0""")
    c.execute("UPDATE memory.revisions SET valid_to = now() - interval '5 days' WHERE org_id = 'bench_rev'")
    c.execute("INSERT INTO public.bare_obs SELECT * FROM memory.observations WHERE org_id = 'bench_rev'")
    c.execute("ANALYZE memory.observations, memory.revisions, public.bare_obs")
    ids = [r[0] for r in c.execute("SELECT id FROM memory.observations WHERE org_id = 'bench_rev' ORDER BY id LIMIT %s", (UPDATES,))]

    def updates(table, n_round):
        t0 = time.perf_counter()
        for k, i in enumerate(ids):
            c.execute(f"UPDATE {table} SET content = %s WHERE org_id = 'bench_rev' AND id = %s", (f"correction {n_round}.{k}", i))
        return time.perf_counter() - t0

    timings = {"revision": [], "no_revision": [], "bare": []}
    for rnd in range(3):
        for kind in (["revision", "no_revision", "bare"] if rnd % 2 == 0 else ["bare", "no_revision", "revision"]):
            if kind == "no_revision":
                c.execute("ALTER TABLE memory.observations DISABLE TRIGGER memory_revisions")
            try:
                timings[kind].append(updates("public.bare_obs" if kind == "bare" else "memory.observations", f"{rnd}{kind}"))
            finally:
                c.execute("ALTER TABLE memory.observations ENABLE TRIGGER memory_revisions")
    upd = {k: statistics.median(v) for k, v in timings.items()}

    as_of = c.execute("SELECT now() - interval '7 days'").fetchone()[0]
    queries = [" ".join(WORDS[(q * 5 + j) % len(WORDS)] for j in range(2)) for q in range(QUERIES)]
    lat = {"recall": [], "as_of": []}
    for q in queries[:20]:  # warm up
        c.execute("SELECT count(*) FROM memory.recall('bench_rev', %s, 10)", (q,))
        c.execute("SELECT count(*) FROM memory.recall('bench_rev', %s, 10, as_of => %s)", (q, as_of))
    for n, q in enumerate(queries):
        for kind in (["recall", "as_of"] if n % 2 == 0 else ["as_of", "recall"]):
            t0 = time.perf_counter()
            if kind == "recall":
                c.execute("SELECT count(*) FROM memory.recall('bench_rev', %s, 10)", (q,)).fetchone()
            else:
                c.execute("SELECT count(*) FROM memory.recall('bench_rev', %s, 10, as_of => %s)", (q, as_of)).fetchone()
            lat[kind].append((time.perf_counter() - t0) * 1000)
    load = os.getloadavg()
    c.execute("DELETE FROM memory.observations WHERE org_id = 'bench_rev'")
    c.execute("DROP TABLE public.bare_obs")

p50 = {k: statistics.median(v) for k, v in lat.items()}
p95 = {k: pct(v, 95) for k, v in lat.items()}
body = f"""Command: `python3 bench/revisions_bench.py DSN {MEMORIES} {UPDATES} {QUERIES}` against a release build.
Machine: {machine()}. Date: {time.strftime('%Y-%m-%d')}. Load average while it ran: {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}
(the machine is shared; other sessions' builds and tests ran beside it).

| {UPDATES:,} single-row UPDATEs of content (autocommit) | median s (3 rounds) | vs bare |
|---|---|---|
| bare table of the same shape (no trigger) | {upd['bare']:.2f} | 100% |
| `memory.observations`, revision trigger disabled (classification + audit) | {upd['no_revision']:.2f} | {100 * upd['bare'] / upd['no_revision']:.0f}% |
| `memory.observations` with its revision (`memory_revisions`) | {upd['revision']:.2f} | **{100 * upd['bare'] / upd['revision']:.0f}%** |

- The revision costs {100 * (upd['revision'] / upd['no_revision'] - 1):.0f}% over the same governed UPDATE without it:
  with it, the UPDATE runs at **{100 * upd['no_revision'] / upd['revision']:.0f}%** of the governed UPDATE (target: an UPDATE with its revision at least 60% of one without).

| `memory.recall` over {MEMORIES:,} memories of one org (a fifth with a revision), k = 10, {QUERIES} queries | p50 ms | p95 ms |
|---|---|---|
| `recall` | {p50['recall']:.2f} | {p95['recall']:.2f} |
| `recall(..., as_of)` | {p50['as_of']:.2f} | {p95['as_of']:.2f} |

- `recall(as_of)` p50 is **{p50['as_of'] / p50['recall']:.2f}x** `recall`'s (target: at most 1.5x).
- Against a bare table (no trigger) the UPDATE with its revision runs at the figure above, most of it the governed
  UPDATE's own classification and audit.
"""
write_section("Memory over time (issue 49)", body)
print(body)
