"""Issue 49 benchmark: memory.remember and memory.context against their baselines, in one run.

  remember (exact)   one call a transaction, each text new (the created path: normalise, hash,
                     advisory lock, index lookup, INSERT), vs the plain governed INSERT of the same
                     rows into memory.observations (classification, stamps, audit); rounds alternate
                     the order, median rows/s of the rounds. The duplicate path is timed too.
  context(2000)      p50 latency of memory.context(org, query, 2000) vs memory.recall(org, query, 50)
                     over the same queries on MEMORIES memories, alternating per query.

Usage: remember_bench.py DSN [ROWS] [ROUNDS] [MEMORIES] [QUERIES]
"""
import os
import random
import statistics
import sys
import time

import psycopg

from common import machine, median, write_section

WORDS = ("user prefers dark mode editor terminal deploy production review budget project falcon kickoff meeting "
         "moved wednesday afternoon invoice paid january coffee oat milk flight heathrow friday backup nightly "
         "snapshot contract renewal legal clause vegetarian lunch office network password monday release "
         "billing service shipped fix customer support chat score accessibility contrast ratio text").split()


def sentence(rng, i):
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 18))) + f" (note {i})"


def rate(conn, sql, rows):
    t0 = time.perf_counter()
    for r in rows:
        conn.execute(sql, r, prepare=True)
    return len(rows) / (time.perf_counter() - t0)


def main():
    dsn = sys.argv[1]
    rows = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    memories = int(sys.argv[4]) if len(sys.argv) > 4 else 100000
    queries = int(sys.argv[5]) if len(sys.argv) > 5 else 200
    load_before = os.getloadavg()
    rng = random.Random(49)
    c = psycopg.connect(dsn, autocommit=True)
    c.execute("DELETE FROM memory.org_settings WHERE org_id IN ('rb_ins', 'rb_rem', 'rb_ctx')")
    plain, remember, dup = [], [], []
    n = 0
    for r in range(rounds):
        batch = [(f"u{i % 50}", sentence(rng, n + i)) for i in range(rows)]
        n += rows
        order = ["plain", "remember"] if r % 2 == 0 else ["remember", "plain"]
        for what in order:
            c.execute("CHECKPOINT")
            if what == "plain":
                plain.append(rate(c, "INSERT INTO memory.observations (org_id, user_id, content) VALUES ('rb_ins', %s, %s)", batch))
            else:
                remember.append(rate(c, "SELECT memory.remember('rb_rem', %s, user_id => %s)", [(t, u) for u, t in batch]))
        dup.append(rate(c, "SELECT memory.remember('rb_rem', %s, user_id => %s)", [(t.upper(), u) for u, t in batch[: rows // 4]]))
    # context vs recall
    have = c.execute("SELECT count(*) FROM memory.observations WHERE org_id = 'rb_ctx'").fetchone()[0]
    if have < memories:
        c.execute("INSERT INTO memory.observations (org_id, user_id, content) SELECT 'rb_ctx', 'u' || (g %% 500), "
                  "(SELECT string_agg(w, ' ') FROM (SELECT (%s::text[])[1 + ((g * 7919 + k * 104729) %% %s)] AS w "
                  "FROM generate_series(1, 8 + g %% 10) k) x) || ' ' || g FROM generate_series(%s::int, %s::int) g",
                  (WORDS, len(WORDS), have + 1, memories))
        c.execute("VACUUM ANALYZE memory.observations")
    qs = [" ".join(rng.sample(WORDS, 2)) for _ in range(queries)]
    rec, ctx, toks = [], [], []
    for i, q in enumerate(qs):
        pair = [("recall", "SELECT count(*) FROM memory.recall('rb_ctx', %s, 50)"), ("context", "SELECT memory.context('rb_ctx', %s, 2000)")]
        if i % 2:
            pair.reverse()
        for what, sql in pair:
            t0 = time.perf_counter()
            got = c.execute(sql, (q,), prepare=True).fetchone()[0]
            dt = (time.perf_counter() - t0) * 1000
            (rec if what == "recall" else ctx).append(dt)
            if what == "context":
                toks.append(got["tokens"])
    load_after = os.getloadavg()
    p_rate, r_rate, d_rate = median(plain), median(remember), median(dup)
    rec50, ctx50 = statistics.median(rec), statistics.median(ctx)
    body = f"""Command: `bench/remember_bench.py DSN {rows} {rounds} {memories} {queries}` against a release build (`scripts/install-ext.sh`), one client, autocommit.
Machine: {machine()}. Date: {time.strftime('%Y-%m-%d')}. Load average (1/5/15 min) before: {load_before[0]:.2f}/{load_before[1]:.2f}/{load_before[2]:.2f}, after: {load_after[0]:.2f}/{load_after[1]:.2f}/{load_after[2]:.2f} (a shared machine: other builds ran beside it).
Audit mode: the cluster's (deferred by default). Rounds alternate the order; medians of {rounds} rounds of {rows} rows each.

| one row a transaction | median rows/s | vs plain INSERT |
|---|---|---|
| plain governed `INSERT INTO memory.observations` | {p_rate:,.0f} | 100% |
| `memory.remember` (dedup `exact`, a new text) | {r_rate:,.0f} | **{100 * r_rate / p_rate:.0f}%** |
| `memory.remember` of a duplicate (other case) | {d_rate:,.0f} | {100 * d_rate / p_rate:.0f}% |

| {queries} queries over {memories:,} memories (one org, 500 users) | p50 ms | vs recall |
|---|---|---|
| `memory.recall(org, query, 50)` | {rec50:.2f} | 1.00x |
| `memory.context(org, query, 2000)` | {ctx50:.2f} | **{ctx50 / rec50:.2f}x** |

- Targets (issue 49): remember with `exact` at least 80% of a plain governed INSERT; context with a
  2,000-token budget p50 at most 2x recall with k = 50. Median block: {statistics.median(toks):.0f} estimated tokens.
- Not measured here: `near` with 384-d HNSW over 1M memories (p50 at most 2 ms).
"""
    write_section("Duplicates at write and context packing (issue 49)", body)
    print(body)


if __name__ == "__main__":
    main()
