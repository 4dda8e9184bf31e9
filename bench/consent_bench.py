"""Issue 14 benchmark: consent and user contexts at a realistic size, each against a floor measured in
the same run.

  1. memory.load_slices for one user among 1M contexts of 100k users vs a single indexed SELECT of
     that user's contexts (client-side latency, medians; random users, interleaved);
  2. a single-row memory.user_feedback INSERT with the drift detectors (users with save_to_profile)
     vs a bare INSERT of the same row into a table of the same shape (pgbench, 8 clients);
  3. memory.revoke_consent for a user with 10,000 thread contexts (every side effect) vs a bare
     UPDATE of those rows in a table of the same shape (each in a transaction rolled back).

    python consent_bench.py DSN PORT [ROUNDS] [SECONDS] [CALLS]
"""
import random
import sys
import time

import psycopg

from audit_bench import pgbench
from common import machine, median, write_section

USERS = 100_000
PER_USER = 10
BIG = 10_000
HISTORY = 100_000

SETUP = f"""
SET memory.restore_mode = on;  -- bulk load as a restore would (superuser); the rules run on later writes
INSERT INTO memory.consents (org_id, user_id, version, scopes, recorded_at, collection_method, recorded_by)
SELECT 'org-' || (u % 10), 'user-' || u, 1, '{{create_task,save_to_thread,save_to_profile}}', now() - interval '1 day', 'onboarding', 'bench'
  FROM generate_series(1, {USERS}) u;
INSERT INTO memory.user_contexts (org_id, user_id, scope, task_id, thread_id, source, fields, consent_version, created_at)
SELECT 'org-' || (u % 10), 'user-' || u,
       (CASE i % 3 WHEN 0 THEN 'profile' WHEN 1 THEN 'thread' ELSE 'task' END)::memory.context_scope,
       'task-' || u || '-' || i, 'th-' || u || '-' || (i % 2),
       CASE i % 3 WHEN 0 THEN 'onboarding' WHEN 1 THEN 'refresh' ELSE 'task' END,
       jsonb_build_object('language_preference', 'English', 'research_depth', 'deep',
                          'user_focus_reason', 'SOL thesis revision ' || i, 'research_style', 'bottom-up'),
       1, now() - make_interval(mins => 20 - i)
  FROM generate_series(1, {USERS}) u, generate_series(1, {PER_USER}) i;
INSERT INTO memory.consents (org_id, user_id, version, scopes, recorded_at, collection_method, recorded_by)
VALUES ('org-big', 'user-big', 1, '{{create_task,save_to_thread,save_to_profile}}', now() - interval '1 day', 'onboarding', 'bench');
INSERT INTO memory.user_contexts (org_id, user_id, scope, thread_id, source, fields, consent_version, created_at)
SELECT 'org-big', 'user-big', 'thread', 'th-big-' || (i % 100), 'refresh',
       jsonb_build_object('user_focus_reason', 'thesis ' || i, 'research_style', 'top-down'), 1, now() - interval '1 hour'
  FROM generate_series(1, {BIG}) i;
RESET memory.restore_mode;
DROP TABLE IF EXISTS bench_ctx_bare, bench_feedback_bare;
CREATE TABLE bench_ctx_bare AS SELECT * FROM memory.user_contexts WHERE org_id = 'org-big';
CREATE INDEX ON bench_ctx_bare (org_id, user_id, scope);
CREATE TABLE bench_feedback_bare (LIKE memory.user_feedback INCLUDING ALL);
-- Both feedback tables start with the same history (a month of the pgbench script's rows, 100 per
-- user, polarity as the lexicon gives it), so neither is measured as an empty table.
SET memory.restore_mode = on;
INSERT INTO memory.user_feedback (org_id, user_id, related_object_ref, cognition_object, rating, comment, comment_polarity, created_at)
SELECT 'org-' || (u % 10), 'user-' || u, 'snapshot:' || o, '{{"type": "asset", "ref": "SOL"}}',
       (ARRAY['thumbs_up', 'agree', 'not_helpful', 'disagree'])[1 + r % 2 + 2 * ((u + o + (f = 1)::int) % 2)],
       CASE WHEN r > 6 THEN (ARRAY['I agree with the thesis', 'I disagree with the thesis'])[1 + (u + o) % 2] END,
       CASE WHEN r > 6 THEN (ARRAY[1, -1])[1 + (u + o) % 2] END,
       now() - make_interval(days => 30) + make_interval(secs => i * 25)
  FROM (SELECT i, 1 + (i * 7919) % 1000 AS u, 1 + (i * 31) % 8 AS r, 1 + (i * 17) % 50 AS o, 1 + (i * 13) % 50 AS f
          FROM generate_series(1, {HISTORY}) i) g;
RESET memory.restore_mode;
INSERT INTO bench_feedback_bare SELECT * FROM memory.user_feedback;
ANALYZE;
"""

# A user rates an object consistently (its polarity from user and object), reversing 1 time in 50;
# 1 row in 4 carries a comment of the same polarity. The bare table gets the same row as
# memory.user_feedback stores it: with the comment's polarity (which memory_ext's BEFORE trigger
# sets from the lexicon: 'agree' +1, 'disagree' -1), so both index it in their partial index.
FEEDBACK = r"""\set u random(1, 1000)
\set r random(1, 8)
\set o random(1, 50)
\set f random(1, 50)
INSERT INTO {table} (org_id, user_id, related_object_ref, cognition_object, rating, comment{polarity_column})
VALUES ('org-' || (:u % 10), 'user-' || :u, 'snapshot:' || :o, '{{"type": "asset", "ref": "SOL"}}',
        (ARRAY['thumbs_up', 'agree', 'not_helpful', 'disagree'])[1 + :r % 2 + 2 * ((:u + :o + (:f = 1)::int) % 2)],
        CASE WHEN :r > 6 THEN (ARRAY['I agree with the thesis', 'I disagree with the thesis'])[1 + (:u + :o) % 2] END{polarity_value});
"""
BARE_POLARITY = {"polarity_column": ", comment_polarity",
                 "polarity_value": ",\n        CASE WHEN :r > 6 THEN (ARRAY[1, -1])[1 + (:u + :o) % 2] END"}
MEMORY_POLARITY = {"polarity_column": "", "polarity_value": ""}


def main():
    dsn, port = sys.argv[1], int(sys.argv[2])
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    seconds = int(sys.argv[4]) if len(sys.argv) > 4 else 10
    calls = int(sys.argv[5]) if len(sys.argv) > 5 else 2000
    # A database of its own: contexts and consents are append-only, so a rerun starts afresh.
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("DROP DATABASE IF EXISTS consent_bench WITH (FORCE)")
        c.execute("CREATE DATABASE consent_bench")
    db = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
    dsn = dsn.replace(f"dbname={db}", "dbname=consent_bench")
    db = "consent_bench"
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("CREATE EXTENSION memory_ext")
    rnd = random.Random(14)
    with psycopg.connect(dsn, autocommit=True) as conn:
        t0 = time.perf_counter()
        conn.execute(SETUP)
        print(f"setup {time.perf_counter() - t0:.0f} s", flush=True)
        n_ctx = conn.execute("SELECT count(*) FROM memory.user_contexts").fetchone()[0]

        # 1. load_slices vs the indexed SELECT, interleaved in blocks, random users.
        lat = {"select": [], "load_slices": []}
        q_select = "SELECT * FROM memory.user_contexts WHERE org_id = %s AND user_id = %s"
        q_slices = "SELECT memory.load_slices(%s, %s, 'thread_refresh', %s, %s)"
        for block in range(calls // 100):
            for name in (["select", "load_slices"] if block % 2 == 0 else ["load_slices", "select"]):
                for _ in range(100):
                    u = rnd.randint(1, USERS)
                    org, user = f"org-{u % 10}", f"user-{u}"
                    t = time.perf_counter()
                    if name == "select":
                        rows = conn.execute(q_select, (org, user), prepare=True).fetchall()
                        assert len(rows) == PER_USER
                    else:
                        res = conn.execute(q_slices, (org, user, f"task-{u}-2", f"th-{u}-1"), prepare=True).fetchone()[0]
                        assert res["slices_loaded"], res
                    lat[name].append(time.perf_counter() - t)
        sample = conn.execute(q_slices, ("org-7", "user-7", "task-7-2", "th-7-1")).fetchone()[0]
        med_lat = {k: median(v) * 1e6 for k, v in lat.items()}
        p99 = {k: sorted(v)[int(0.99 * len(v))] * 1e6 for k, v in lat.items()}

        # 3. revoke_consent vs a bare UPDATE of the same rows, each in a transaction rolled back.
        rev, bare_upd, counts = [], [], None
        for r in range(max(rounds, 5)):
            for name in (["revoke", "bare"] if r % 2 == 0 else ["bare", "revoke"]):
                with conn.transaction(force_rollback=True):
                    t = time.perf_counter()
                    if name == "revoke":
                        counts = conn.execute("SELECT memory.revoke_consent('org-big', 'user-big')").fetchone()[0]
                        rev.append(time.perf_counter() - t)
                    else:
                        n = conn.execute("UPDATE bench_ctx_bare SET consent_blocked = true "
                                         "WHERE org_id = 'org-big' AND user_id = 'user-big' AND scope = 'thread'").rowcount
                        assert n == BIG
                        bare_upd.append(time.perf_counter() - t)

    # 2. user_feedback single-row inserts, pgbench, alternating order per round.
    tps = {"bare": [], "memory": []}
    for r in range(rounds):
        for name in (["bare", "memory"] if r % 2 == 0 else ["memory", "bare"]):
            table = "bench_feedback_bare" if name == "bare" else "memory.user_feedback"
            x = pgbench(port, FEEDBACK.format(table=table, **(BARE_POLARITY if name == "bare" else MEMORY_POLARITY)), 8, seconds, db)
            tps[name].append(x)
            print(f"round {r + 1} user_feedback {name}: {x:,.0f} tps", flush=True)
    with psycopg.connect(dsn, autocommit=True) as conn:
        drift = conn.execute("SELECT signal_kind, count(*) FROM memory.persona_drift_log GROUP BY 1 ORDER BY 1").fetchall()
        fb_rows = conn.execute("SELECT count(*) FROM memory.user_feedback").fetchone()[0] - HISTORY
        # Both tables stored the same rows: the share with a comment polarity (the partial index's rows).
        # (The history ends a day ago; the rounds ran in the last hour.)
        share = {t: conn.execute(f"SELECT round(100.0 * count(comment_polarity) / count(*), 1) FROM {t}"
                                 " WHERE created_at > now() - interval '1 hour'").fetchone()[0]
                 for t in ("memory.user_feedback", "bench_feedback_bare")}

    ratio_slices = med_lat["load_slices"] / med_lat["select"]
    med_tps = {k: median(v) for k, v in tps.items()}
    ratio_fb = med_tps["memory"] / med_tps["bare"]
    med_rev, med_bare = median(rev), median(bare_upd)
    ratio_rev = med_rev / med_bare
    body = f"""Command: `make bench` (runs `bench/consent_bench.py DSN PORT {rounds} {seconds} {calls}` against a release build).
Machine: {machine()}.
Data: {n_ctx:,} user contexts ({USERS:,} users × {PER_USER} contexts — profile, thread and task — plus one user with {BIG:,}
thread contexts), consent `create_task, save_to_thread, save_to_profile` for every user, loaded with
`memory.restore_mode` as a restore would; the floors are measured in the same run.

| operation | memory_ext | floor | ratio | target |
|---|---|---|---|---|
| `load_slices(org, user, 'thread_refresh', task, thread)` vs `SELECT * FROM memory.user_contexts WHERE org_id = $1 AND user_id = $2` (client-side latency, median of {calls:,} random users each, prepared, interleaved) | {med_lat['load_slices']:.0f} µs (p99 {p99['load_slices']:.0f}) | {med_lat['select']:.0f} µs (p99 {p99['select']:.0f}) | **{ratio_slices:.2f}×** | ≤ 3× |
| single-row `INSERT INTO memory.user_feedback` with the drift detectors vs the same row into a bare table of its shape (pgbench, 8 clients, {seconds} s, median of {rounds} rounds; 1,000 users rating 50 objects consistently with 1 reversal in 50, 1 in 4 rows with a comment; both tables start with the same 100,000 rows of history) | {med_tps['memory']:,.0f} tps | {med_tps['bare']:,.0f} tps | **{100 * ratio_fb:.1f}%** | ≥ 70% |
| `revoke_consent` of a user with {BIG:,} thread contexts (all side effects, one transaction, rolled back) vs a bare `UPDATE ... SET consent_blocked = true` of those rows (median of {len(rev)}) | {med_rev * 1000:.1f} ms | {med_bare * 1000:.1f} ms | **{ratio_rev:.1f}×** | ≤ 20× |

- `load_slices` answered `slices_loaded` = `{sample['slices_loaded']}` for a sampled user (`cold_start` {sample['cold_start']}).
- The revocation reported `{ {k: counts[k] for k in counts if k != 'receipt'} if isinstance(counts, dict) else counts }`.
- Feedback rows written during the pgbench rounds: {fb_rows:,}; drift findings: `{dict(drift)}`.
- Rows of the rounds with a comment polarity (indexed by the partial polarity index): memory_ext {share['memory.user_feedback']}%, bare {share['bench_feedback_bare']}%.
- Feedback rounds (TPS, memory_ext / bare, in the order run): {'; '.join(f"{m:,.0f} / {b:,.0f} ({100 * m / b:.0f}%)" for m, b in zip(tps['memory'], tps['bare']))}.
"""
    print(body)
    write_section("Consent and user contexts (issue 14)", body)
    with psycopg.connect(sys.argv[1], autocommit=True) as c:
        c.execute("DROP DATABASE IF EXISTS consent_bench WITH (FORCE)")


if __name__ == "__main__":
    main()
