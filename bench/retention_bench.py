"""Issue 5 benchmark: run_retention cost follows the rows due, not the table size.

Usage: retention_bench.py DSN [RUNS]
10,000 rows due (restricted, expired) in a table of 200,000 and of 2,000,000 governed observations;
and a run with nothing due on 2,000,000 rows.
"""
import sys
import time

import psycopg

from common import machine, median, write_section

DUE = 10_000


def load(conn, total):
    conn.execute("TRUNCATE memory.observations, memory.observation_weight_history, memory.observations_archive")
    # Not due: recent internal notes. Due: restricted notes created 60 days ago (expired after 30).
    conn.execute("""INSERT INTO memory.observations (org_id, user_id, content, created_at)
                    SELECT 'org-' || (g %% 4), 'user-' || (g %% 1000), 'note about the build cache ' || g, now()
                      FROM generate_series(1, %s) g""", (total - DUE,))
    conn.execute("""INSERT INTO memory.observations (org_id, user_id, content, created_at)
                    SELECT 'org-' || (g %% 4), 'user-' || (g %% 1000), 'customer ssn record ' || g, now() - interval '60 days'
                      FROM generate_series(1, %s) g""", (DUE,))
    conn.execute("VACUUM ANALYZE memory.observations")


def timed_runs(conn, runs, reset):
    out = []
    for _ in range(runs):
        if reset:
            conn.execute("UPDATE memory.observations SET soft_deleted_at = NULL, soft_delete_reason = NULL WHERE soft_delete_reason = 'retention'")
            conn.execute("VACUUM ANALYZE memory.observations")
        t0 = time.perf_counter()
        (res,) = conn.execute("SELECT memory.run_retention()").fetchone()
        out.append(time.perf_counter() - t0)
        if reset:
            assert res["soft_deleted"] == DUE, res
        else:
            assert res["soft_deleted"] == 0 and res["hard_deleted"] == 0, res
    return out


def main():
    dsn = sys.argv[1]
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    results = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        for total in (200_000, 2_000_000):
            t0 = time.perf_counter()
            load(conn, total)
            print(f"loaded {total:,} in {time.perf_counter() - t0:.1f}s", flush=True)
            results[total] = timed_runs(conn, runs, reset=True)
            print(f"{total:,}: {[round(x, 3) for x in results[total]]}", flush=True)
        # Nothing due on 2,000,000 rows: the due rows are soft-deleted and not yet past their grace.
        conn.execute("SELECT memory.run_retention()")
        idle = timed_runs(conn, max(runs, 10), reset=False)
        plan = "\n".join(r[0] for r in conn.execute(
            """EXPLAIN (COSTS OFF) SELECT o.id FROM memory.observations o
                WHERE o.soft_deleted_at IS NULL AND o.expires_at IS NOT NULL AND o.expires_at <= now()""").fetchall())
    small, big = median(results[200_000]), median(results[2_000_000])
    body = f"""Command: `make bench` (runs `bench/retention_bench.py DSN {runs}` against a release build).
Machine: {machine()}. Date: {time.strftime('%Y-%m-%d')}.
Governed `memory.observations` (classification, audit, stamps); {DUE:,} restricted rows created 60 days ago are due
(expired after 30 days); the rest are recent. Each timed run soft-deletes the {DUE:,} due rows (reset between runs).

| `memory.run_retention()` | median s |
|---|---|
| {DUE:,} due in a table of 200,000 | {small:.3f} |
| {DUE:,} due in a table of 2,000,000 | {big:.3f} |
| nothing due, 2,000,000 rows | **{1000 * median(idle):.1f} ms** |

- 2,000,000 vs 200,000 rows: **{big / small:.2f}x** (target: within 1.5x) — the cost follows the rows due.
- Nothing due on 2,000,000 rows: median **{1000 * median(idle):.1f} ms** over {len(idle)} runs (target: under 20 ms).

How the due rows are found (partial indexes on the stamps):

```
{plan}
```
"""
    write_section("Retention (issue 5)", body)
    print(body)


if __name__ == "__main__":
    main()
