"""Issue 35 benchmark: the agent API at a million memories, one call per transaction, each against
a hand-written floor measured in the same run on the same data.

  forget   memory.forget(ARRAY[id], reason) of one memory, as a tenant-bound memory_writer, against
           a bare `DELETE FROM ... WHERE id = $1` of one memory: (a) on memory.observations itself
           (its row triggers fire, as for any delete) and (b) on an unmanaged copy of the table
           (same columns and indexes, no trigger);
  recall   memory.recall(org, query, 10, filters => {user_id, memory_type}) as a tenant-bound
           memory_reader (clearance, liveness and the audited read included) against the
           hand-written `SELECT ... WHERE org_id = $1 AND user_id = $2 AND memory_type = $3 AND
           to_tsvector(...) @@ q ORDER BY ts_rank_cd(...) * weight LIMIT 10` on the same table.

Data: ROWS memories (default 1,000,000) of 64 tenants, 50 users a tenant, agent-memory sentences
over a 400-word vocabulary. Client-side latency of each call (psycopg, prepared statements,
autocommit), rounds alternate the order; p50 and p99 per round, medians over the rounds.

    python agent_api_bench.py DSN [ROWS] [ROUNDS] [CALLS]
"""
import random
import sys
import time

import psycopg

from common import machine, median, write_section

TENANTS = 64
USERS = 50

WORDS = ("coffee tea espresso latte meeting standup budget invoice deadline release deploy rollback "
         "incident outage pager alert customer refund shipping warehouse supplier contract renewal "
         "pricing discount quota forecast revenue margin hiring interview onboarding payroll vacation "
         "travel flight hotel visa passport conference keynote workshop webinar newsletter campaign "
         "launch roadmap backlog sprint retro planning estimate ticket bug feature review merge branch "
         "python rust postgres kubernetes docker terraform lambda bucket queue cache index vacuum "
         "replica backup restore migration schema upgrade patch security audit compliance privacy "
         "consent retention policy legal contract invoice tax report dashboard metric latency "
         "throughput error timeout retry quota limit region zone cluster node shard tenant "
         "preference concise verbose formal casual english french german spanish morning evening "
         "weekend weekday timezone calendar reminder birthday anniversary gift dinner lunch breakfast "
         "vegetarian vegan allergy peanut gluten dairy gym running cycling swimming yoga chess music "
         "jazz classical rock podcast book novel history science physics chemistry biology math "
         "statistics finance stocks bonds crypto bitcoin ethereum solana portfolio risk hedge "
         "option future swap yield inflation rate central bank regulator filing disclosure").split()


def load(conn, rows):
    t0 = time.perf_counter()
    conn.execute("DROP TABLE IF EXISTS bench_obs_plain")
    conn.execute("TRUNCATE memory.observations, memory.observation_weight_history")
    # A bulk load as a restore would (superuser; rows carry their tier); the rules run on later writes.
    conn.execute("SET memory.restore_mode = on")
    words = "ARRAY[" + ",".join(f"'{w}'" for w in WORDS) + "]"
    conn.execute(f"""
        INSERT INTO memory.observations (org_id, user_id, session_id, memory_type, content, source_type,
                                         classification, weight, created_at)
        SELECT 'org-' || (i % {TENANTS}), 'user-' || (i % {TENANTS}) || '-' || ((i / {TENANTS}) % {USERS}),
               'session-' || (i % 997), (ARRAY['long_term', 'short_term', 'episodic']::memory.memory_type[])[1 + (i / 7) % 3],
               'User ' || (i % 1000) || ' mentioned ' || w[1 + (i * 7) % {len(WORDS)}] || ' and ' || w[1 + (i * 13) % {len(WORDS)}]
                 || ' during the ' || w[1 + (i * 31) % {len(WORDS)}] || ' discussion about ' || w[1 + (i * 57) % {len(WORDS)}]
                 || '; prefers ' || w[1 + (i * 101) % {len(WORDS)}] || ' follow-ups.',
               (ARRAY['decision', 'fact', 'preference', 'tool_result']::memory.source_type[])[1 + i % 3], (ARRAY['public', 'internal', 'internal', 'confidential']::memory.classification[])[1 + i % 4],
               0.5 + (i % 50) / 100.0, now() - make_interval(secs => i)
          FROM generate_series(1, {rows}) i, (SELECT {words} AS w) v""")
    conn.execute("RESET memory.restore_mode")
    conn.execute("CREATE TABLE bench_obs_plain (LIKE memory.observations INCLUDING ALL)")
    conn.execute("INSERT INTO bench_obs_plain SELECT * FROM memory.observations")
    conn.execute("VACUUM ANALYZE memory.observations")
    conn.execute("VACUUM ANALYZE bench_obs_plain")
    print(f"load {rows:,} rows: {time.perf_counter() - t0:.0f} s", flush=True)


def roles(conn):
    for r, g in (("bench_writer", "memory_writer"), ("bench_reader", "memory_reader")):
        if not conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (r,)).fetchone():
            conn.execute(f"CREATE ROLE {r} LOGIN")
        conn.execute(f"GRANT {g} TO {r}")
        for t in range(TENANTS):
            conn.execute("SELECT memory.grant_org(%s::regrole, %s, 'confidential')", (r, f"org-{t}"))
    conn.execute("GRANT SELECT, DELETE ON bench_obs_plain TO bench_writer")


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def main():
    dsn = sys.argv[1]
    rows = int(sys.argv[2]) if len(sys.argv) > 2 else 1_000_000
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    calls = int(sys.argv[4]) if len(sys.argv) > 4 else 500
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SELECT memory.setup_roles()")
        load(c, rows)
        roles(c)
    rnd = random.Random(35)
    base = psycopg.conninfo.conninfo_to_dict(dsn)
    su = psycopg.connect(dsn, autocommit=True)
    writer = psycopg.connect(**{**base, "user": "bench_writer"}, autocommit=True)
    reader = psycopg.connect(**{**base, "user": "bench_reader"}, autocommit=True)

    # The ids to delete: distinct rows of every tenant, each deleted once by one variant.
    ids = [r[0] for r in su.execute(
        "SELECT id FROM memory.observations ORDER BY random() LIMIT %s",
        (rounds * calls * 3 + 100,)).fetchall()]
    rnd.shuffle(ids)
    pool = iter(ids)

    def forget():
        i = next(pool)
        t = time.perf_counter()
        res = writer.execute("SELECT memory.forget(ARRAY[%s]::uuid[], 'user asked to forget')", (i,), prepare=True).fetchone()[0]
        dt = time.perf_counter() - t
        assert res["forgotten"] == [str(i)], res
        return dt

    def delete(conn, table):
        """A bare delete of one memory by id from `table` as `conn`'s role; its latency."""
        def run():
            i = next(pool)
            t = time.perf_counter()
            n = conn.execute(f"DELETE FROM {table} WHERE id = %s", (i,), prepare=True).rowcount
            dt = time.perf_counter() - t
            assert n == 1
            return dt
        return run

    # Recall: a random tenant, one of its users, a memory type and a one- or two-word query from the
    # vocabulary; both variants run the same draws in the same order each round.
    def recall_args():
        t = rnd.randrange(TENANTS)
        return (f"org-{t}", f"{rnd.choice(WORDS)} {rnd.choice(WORDS)}" if rnd.random() < 0.5 else rnd.choice(WORDS),
                f"user-{t}-{rnd.randrange(USERS)}", rnd.choice(["long_term", "short_term", "episodic"]))

    draws = {"recall": iter(()), "select": iter(())}
    found = {"recall": [], "select": []}

    def recall():
        org, q, user, mt = next(draws["recall"])
        t = time.perf_counter()
        got = reader.execute("SELECT id FROM memory.recall(%s, %s, 10, filters => jsonb_build_object('user_id', %s::text, 'memory_type', %s::text))",
                             (org, q, user, mt), prepare=True).fetchall()
        dt = time.perf_counter() - t
        found["recall"].append([g[0] for g in got])
        return dt

    def select():
        org, q, user, mt = next(draws["select"])
        t = time.perf_counter()
        got = su.execute(
            "SELECT id, content, ts_rank_cd(to_tsvector('english', content), q) * weight AS score"
            "  FROM memory.observations, websearch_to_tsquery('english', %s) q"
            " WHERE org_id = %s AND user_id = %s AND memory_type = %s::memory.memory_type"
            "   AND to_tsvector('english', content) @@ q ORDER BY score DESC, id LIMIT 10",
            (q, org, user, mt), prepare=True).fetchall()
        dt = time.perf_counter() - t
        found["select"].append([g[0] for g in got])
        return dt

    def new_draws(n):
        d = [recall_args() for _ in range(n)]
        draws["recall"], draws["select"] = iter(d), iter(d)

    variants = {"forget": forget, "delete (memory.observations)": delete(su, "memory.observations"),
                "delete (unmanaged copy)": delete(writer, "bench_obs_plain"),
                "recall": recall, "hand-written SELECT": select}
    stats = {v: {"p50": [], "p99": []} for v in variants}
    # Warm up every statement (plans, caches) before timing.
    new_draws(20)
    for f in variants.values():
        for _ in range(20):
            f()
    for r in range(rounds):
        order = list(variants) if r % 2 == 0 else list(reversed(variants))
        new_draws(calls)
        for name in order:
            lat = [variants[name]() for _ in range(calls)]
            stats[name]["p50"].append(pct(lat, 0.50) * 1e3)
            stats[name]["p99"].append(pct(lat, 0.99) * 1e3)
        print(f"round {r + 1}: " + ", ".join(f"{v} p50 {stats[v]['p50'][-1]:.3f} ms" for v in variants), flush=True)
    # The governed recall answered what the hand-written query answers (every row is live and
    # within the reader's clearance; ties ordered by id in both).
    assert found["recall"] == found["select"], "recall and the hand-written query disagree"
    returned = sum(len(x) for x in found["recall"])
    med = {v: {p: median(s[p]) for p in ("p50", "p99")} for v, s in stats.items()}
    n_rows = su.execute("SELECT count(*) FROM memory.observations").fetchone()[0]
    # The audited reads were written: one memory.recall event per call.
    n_events = su.execute("SELECT count(*) FROM memory.audit_pending WHERE event_type = 'memory.recall'").fetchone()[0] \
        + su.execute("SELECT count(*) FROM memory.audit_log WHERE event_type = 'memory.recall'").fetchone()[0]
    for c in (su, writer, reader):
        c.close()

    def row(name, base):
        m = med[name]
        return f"| {name} | {m['p50']:.3f} | {m['p99']:.3f} | {m['p50'] / med[base]['p50']:.2f}x | {m['p99'] / med[base]['p99']:.2f}x |"

    f_same = med["forget"]["p50"] / med["delete (memory.observations)"]["p50"]
    f_plain = med["forget"]["p50"] / med["delete (unmanaged copy)"]["p50"]
    r_ratio = med["recall"]["p50"] / med["hand-written SELECT"]["p50"]
    r_ratio99 = med["recall"]["p99"] / med["hand-written SELECT"]["p99"]
    write_section("Agent API: forget and recall at a million memories (issue 35)", f"""
Command: `make bench` (runs `bench/agent_api_bench.py DSN {rows} {rounds} {calls}` against a release build).
Machine: {machine()}. Date: {time.strftime('%Y-%m-%d')}.
Data: {rows:,} memories in `memory.observations` (and an unmanaged copy of the same rows, same indexes), {TENANTS} tenants,
{USERS} users a tenant. Each call in its own transaction from one client (psycopg, prepared, autocommit), the background
integrator chaining the audit events; {calls} calls a variant a round, {rounds} rounds alternating the order; medians over the rounds
of each round's p50 and p99, in ms. `forget` runs as a tenant-bound `memory_writer`, `recall` as a tenant-bound `memory_reader`
cleared to confidential; the floors run as the superuser (the copy's delete as the writer).

| one call | p50 ms | p99 ms | p50 vs floor | p99 vs floor |
|---|---|---|---|---|
{row("delete (unmanaged copy)", "delete (unmanaged copy)")}
{row("delete (memory.observations)", "delete (memory.observations)")}
{row("forget", "delete (memory.observations)")}
{row("hand-written SELECT", "hand-written SELECT")}
{row("recall", "hand-written SELECT")}

- `forget` of 1 id among {rows:,}: **{f_same:.2f}x** a bare `DELETE ... WHERE id` on the same table (target: at most 3x),
  {f_plain:.2f}x a delete from the unmanaged copy. It also deletes the archived copy and weight history, checks holds and
  writes one `memory.forget` event with the content hash.
- `recall` with filters `user_id` and `memory_type`, k = 10: **{r_ratio:.2f}x** the hand-written query at p50 and {r_ratio99:.2f}x at p99
  (target: at most 1.5x), with the clearance, liveness and one `memory.recall` event per call ({n_events:,} events written).
  Both ran the same {len(found['recall']):,} draws and returned the same rows in the same order ({returned:,} rows in all).
- Rows left after the deletes: {n_rows:,}.
""")


if __name__ == "__main__":
    main()
