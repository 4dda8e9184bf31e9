"""Issue 47 benchmark: governed hybrid `memory.retrieve` over claims against the hand-written RRF
query a user would write over memory.claims.

One database of its own (pgvector and btree_gin created): memory.claims with
memory.enable_embeddings(DIMS) holding ROWS claims of TENANTS orgs (ENTITIES entities each),
DIMS-d clustered Gaussian embeddings (CLUSTERS centres, unit noise; every tenant's claims spread over
all the centres, so a query's nearest claims of a tenant are near it); one claim in 8 about a user
(subject_id), one in 10 superseded, the rest active, one in 5 with a decay_at in the future;
behind the indexes enable_embeddings makes (HNSW cosine m = 16, ef_construction = 64 over the
active claims, and the tenant full-text GIN `claims_fts_tenant` (org, words) over the active
claims), both built after the load with their own definitions. Then, in one run:
  latency   QUERIES queries, each of a random tenant, a query near a random centre and a word of
            the claims' text: memory.retrieve(org, word, 10, query_embedding => ...) as a
            tenant-bound reader (clearance, active at now, not decayed, no user's claims, audited,
            RRF of the full-text and vector lists) against the hand-written RRF of the same lists
            (full-text top 40 + vector top 10 fused in one statement, the same conditions, as the
            superuser, no audit; pgvector's iterative scan and ef_search as retrieve sets them),
            alternating (each first in half of the queries), ROUNDS times; p50 / p99 of each round,
            the medians of the rounds.
  recall@10 governed vector-only retrieve (blank query and an embedding) against the exact 10
            nearest under the same conditions (no index), over RECALL_QUERIES queries.
Usage: ROWS=100000 retrieve_bench.py DSN   (a release build). Env: ROWS (100000), TENANTS (64),
ENTITIES (16), DIMS (384), CLUSTERS (64), QUERIES (1000), RECALL_QUERIES (200), ROUNDS (3),
PHASE (all | setup | timed: build the database, or measure one built with the same ROWS, DIMS
and CLUSTERS).
"""
import os
import random
import sys
import time

import psycopg

from common import machine, median, write_section

ROWS = int(os.environ.get("ROWS", 100_000))
TENANTS = int(os.environ.get("TENANTS", 64))
ENTITIES = int(os.environ.get("ENTITIES", 16))
DIMS = int(os.environ.get("DIMS", 384))
CLUSTERS = int(os.environ.get("CLUSTERS", 64))
QUERIES = int(os.environ.get("QUERIES", 1000))
RECALL_QUERIES = int(os.environ.get("RECALL_QUERIES", 200))
ROUNDS = int(os.environ.get("ROUNDS", 3))
WORDS = ["invoice", "refund", "payment", "travel", "contract", "shipping", "warranty", "account", "password", "meeting",
         "budget", "roadmap", "incident", "release", "pricing", "hiring"]
READER = "rb_reader"
DB = "retrieve_bench"
# What memory.retrieve reads without user_id, as a user would write it over memory.claims: the
# org's active claims created by now, not decayed, about no user; the full-text list on the
# expression the claims' full-text indexes hold.
LIVE = ("c.org_id = %(o)s AND c.lifecycle_state = 'active' AND c.subject_id IS NULL AND c.t_created <= now() "
        "AND (c.decay_at IS NULL OR c.decay_at > now())")
RRF_SQL = f"""WITH lex AS (SELECT l.id, row_number() OVER (ORDER BY l.rk DESC, l.id) AS r
                 FROM (SELECT c.id, ts_rank_cd(to_tsvector('english', c.claim_text), q) AS rk
                         FROM memory.claims c, websearch_to_tsquery('english', %(w)s) q
                        WHERE {LIVE} AND to_tsvector('english', c.claim_text) @@ q ORDER BY 2 DESC, 1 LIMIT 40) l),
     vec AS (SELECT v.id, row_number() OVER (ORDER BY v.d, v.id) AS r
                 FROM (SELECT c.id, c.embedding <=> %(v)s::vector AS d FROM memory.claims c
                        WHERE {LIVE} ORDER BY c.embedding <=> %(v)s::vector LIMIT 10) v)
SELECT coalesce(lex.id, vec.id) AS id, coalesce(1.0 / (60 + lex.r), 0) + coalesce(1.0 / (60 + vec.r), 0) AS s
  FROM lex FULL JOIN vec ON lex.id = vec.id ORDER BY s DESC, id LIMIT 10"""
EXACT_SQL = f"""SELECT c.id FROM memory.claims c WHERE {LIVE} AND c.embedding IS NOT NULL
                 ORDER BY c.embedding <=> %(v)s::vector, c.id LIMIT 10"""


def vec(v):
    return "[" + ",".join(f"{x:.5f}" for x in v) + "]"


def pctl(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def load(conn, rng):
    """ENTITIES entities a tenant, ROWS claims (centre of the claim's cluster + N(0, 1) noise per
    component), loaded without the triggers (replica mode): the benchmark times reads."""
    centres = [[rng.gauss(0, 3) for _ in range(DIMS)] for _ in range(CLUSTERS)]
    conn.execute("DROP TABLE IF EXISTS rb_centres")
    conn.execute("CREATE TABLE rb_centres (c int PRIMARY KEY, v real[])")
    with conn.cursor() as cur:
        cur.executemany("INSERT INTO rb_centres VALUES (%s, %s)", [(i, c) for i, c in enumerate(centres)])
    conn.execute("SET session_replication_role = replica")
    conn.execute(f"""INSERT INTO memory.entities (id, org_id, entity_type, name)
        SELECT ('00000000-0000-4000-8000-' || lpad(to_hex(g), 12, '0'))::uuid, 'org' || (g % {TENANTS}), 'problem', 'entity ' || g
          FROM generate_series(0, {TENANTS * ENTITIES - 1}) g""")
    batch = 20_000
    for start in range(0, ROWS, batch):
        n = min(batch, ROWS - start)
        conn.execute(f"""
            INSERT INTO memory.claims (org_id, entity_id, claim_text, source, confidence_score, lifecycle_state,
                                       subject_id, t_created, decay_at, embedding)
            SELECT 'org' || (g % {TENANTS}),
                   ('00000000-0000-4000-8000-' || lpad(to_hex(g % {TENANTS * ENTITIES}), 12, '0'))::uuid,
                   (ARRAY{WORDS!r})[1 + g % {len(WORDS)}] || ' fact ' || g || ' about ' || (ARRAY{WORDS!r})[1 + (g / 7) % {len(WORDS)}],
                   'bench', 0.5 + (g % 50) / 100.0,
                   (CASE WHEN (g / {TENANTS}) % 10 = 9 THEN 'superseded' ELSE 'active' END)::memory.lifecycle_state,
                   CASE WHEN (g / {TENANTS}) % 8 = 3 THEN 'u' || (g % 16) END,
                   now() - ((g / {TENANTS}) % 1000) * interval '1 hour',
                   CASE WHEN (g / {TENANTS}) % 5 = 1 THEN now() + interval '365 days' END,
                   (SELECT array_agg(c.x + sqrt(-2 * ln(1 - random())) * cos(2 * pi() * random()) ORDER BY c.o)::vector
                      FROM unnest((SELECT v FROM rb_centres WHERE c = (g / {TENANTS}) % {CLUSTERS})) WITH ORDINALITY c(x, o))
              FROM generate_series({start}, {start + n - 1}) g""")
    conn.execute("RESET session_replication_role")
    return centres


def setup(dsn, rng):
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
        c.execute(f"CREATE DATABASE {DB}")
    with psycopg.connect(bench_dsn(dsn), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION memory_ext")
        conn.execute("CREATE EXTENSION vector")
        conn.execute("CREATE EXTENSION btree_gin")  # enable_embeddings then builds claims_fts_tenant
        conn.execute("SELECT memory.setup_roles()")
        conn.execute(f"DO $$ BEGIN IF to_regrole('{READER}') IS NULL THEN CREATE ROLE {READER} LOGIN IN ROLE memory_reader; END IF; END $$")
        for t in range(TENANTS):
            conn.execute("SELECT memory.grant_org(%s, %s)", (READER, f"org{t}"))
        conn.execute(f"SELECT memory.enable_embeddings({DIMS})")
        idxs = [conn.execute(f"SELECT pg_get_indexdef('memory.{i}'::regclass)").fetchone()[0]
                for i in ("claims_embedding", "claims_fts_tenant")]
        conn.execute("DROP INDEX memory.claims_embedding, memory.claims_fts_tenant")
        t0 = time.perf_counter()
        load(conn, rng)
        t_load = time.perf_counter() - t0
        conn.execute("SET maintenance_work_mem = '2GB'")
        t0 = time.perf_counter()
        for idx in idxs:
            conn.execute(idx)
        t_index = time.perf_counter() - t0
        conn.execute("VACUUM ANALYZE memory.claims")
        conn.execute("VACUUM ANALYZE memory.entities")
        conn.execute("CREATE TABLE rb_meta AS SELECT %s::int AS rows, %s::int AS dims, %s::int AS clusters, %s::float8 AS t_load, %s::float8 AS t_index",
                     (ROWS, DIMS, CLUSTERS, t_load, t_index))
    return t_load, t_index


def bench_dsn(dsn):
    db = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
    return dsn.replace(f"dbname={db}", f"dbname={DB}")


def main():
    dsn = sys.argv[1]
    phase = os.environ.get("PHASE", "all")
    if phase != "timed":
        t_load, t_index = setup(dsn, random.Random(47))
        if phase == "setup":
            print(f"retrieve_bench setup: {ROWS:,} claims, load {t_load:.0f} s, index {t_index:.0f} s", flush=True)
            return
    dsn = bench_dsn(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        meta = conn.execute("SELECT rows, dims, clusters, t_load, t_index FROM rb_meta").fetchone()
        assert meta[:3] == (ROWS, DIMS, CLUSTERS), f"{DB} was built for {meta[:3]}, not {(ROWS, DIMS, CLUSTERS)}"
        t_load, t_index = meta[3], meta[4]
        live = conn.execute("SELECT count(*) FROM memory.claims c WHERE c.lifecycle_state = 'active' AND c.subject_id IS NULL").fetchone()[0]
        centres = [list(v) for (v,) in conn.execute("SELECT v FROM rb_centres ORDER BY c")]
    rng = random.Random(48)

    def query():
        org = f"org{rng.randrange(TENANTS)}"
        q = [x + rng.gauss(0, 1) for x in centres[rng.randrange(CLUSTERS)]]
        return org, q, rng.choice(WORDS)

    rounds = []
    rec = []
    load_avg = [os.getloadavg()[0]]
    with psycopg.connect(dsn.replace("user=postgres", f"user={READER}"), autocommit=True) as r, \
            psycopg.connect(dsn, autocommit=True) as hand:
        # The hand-written query's session: pgvector's iterative scan and ef_search as retrieve
        # sets them for its read (set once here).
        hand.execute("SET hnsw.iterative_scan = relaxed_order")
        hand.execute("SET hnsw.ef_search = 100")
        for _ in range(ROUNDS):
            lat = {"governed": [], "hand": []}
            for i in range(QUERIES):
                org, q, word = query()
                qa = "{" + vec(q)[1:-1] + "}"
                runs = [("governed", lambda: r.execute("SELECT id FROM memory.retrieve(%s, %s, 10, query_embedding => %s::real[])",
                                                       (org, word, qa), prepare=True).fetchall()),
                        ("hand", lambda: hand.execute(RRF_SQL, {"o": org, "w": word, "v": vec(q)}, prepare=True).fetchall())]
                for name, fn in runs[i % 2:] + runs[:i % 2]:
                    t0 = time.perf_counter()
                    fn()
                    lat[name].append(time.perf_counter() - t0)
            rounds.append({k: (pctl(v, 50) * 1e3, pctl(v, 99) * 1e3) for k, v in lat.items()})
            load_avg.append(os.getloadavg()[0])
        for _ in range(RECALL_QUERIES):
            org, q, _w = query()
            got = [x for (x,) in r.execute("SELECT id FROM memory.retrieve(%s, '', 10, query_embedding => %s::real[])",
                                           (org, "{" + vec(q)[1:-1] + "}")).fetchall()]
            with hand.transaction():
                hand.execute("SET LOCAL enable_indexscan = off")
                exact = [x for (x,) in hand.execute(EXACT_SQL, {"o": org, "v": vec(q)}).fetchall()]
            rec.append(len(set(got) & set(exact)) / max(1, len(exact)))

    def med(name, i):
        return median([x[name][i] for x in rounds])

    g50, g99, h50, h99 = med("governed", 0), med("governed", 1), med("hand", 0), med("hand", 1)
    per_round = "\n".join(f"| {n + 1} | {x['governed'][0]:.2f} / {x['hand'][0]:.2f} | {x['governed'][0] / x['hand'][0]:.2f}x "
                          f"| {x['governed'][1]:.2f} / {x['hand'][1]:.2f} | {x['governed'][1] / x['hand'][1]:.2f}x |"
                          for n, x in enumerate(rounds))
    mrec = sum(rec) / max(1, len(rec))
    body = f"""Command: `cd bench && ROWS={ROWS} QUERIES={QUERIES} ROUNDS={ROUNDS} ../.venv/bin/python retrieve_bench.py DSN` (release build; pgvector).
Machine: {machine()}. Date: {time.strftime('%Y-%m-%d')}. Load average (1 min) at the start and after each round: {', '.join(f'{x:.1f}' for x in load_avg)}.
{ROWS:,} claims of {TENANTS} tenants ({ENTITIES} entities each; {live:,} active about no user), {DIMS}-d clustered Gaussian
embeddings ({CLUSTERS} centres, each tenant's claims over all of them), HNSW cosine m = 16, ef_construction = 64 over the active claims (`claims_embedding`), and
with btree_gin the tenant full-text GIN `claims_fts_tenant` (org, words) (load {t_load:.0f} s without triggers, index builds
{t_index:.0f} s). k = 10, no user_id. Each query: `memory.retrieve(org, word, 10, query_embedding => ...)` as a tenant-bound
reader (clearance, active at now, not decayed, no user's claims, the read event) and the hand-written RRF over memory.claims
(full-text top 40 + vector top 10 fused in one statement, the same conditions, superuser, no audit), alternating (each first
in half of the queries), each one prepared statement from one client; {QUERIES} queries a round.

| round | p50 ms retrieve / hand-written | p50 ratio | p99 ms retrieve / hand-written | p99 ratio |
|---|---|---|---|---|
{per_round}

- Medians of the rounds: `memory.retrieve` p50 {g50:.2f} ms, p99 {g99:.2f} ms; hand-written RRF p50 {h50:.2f} ms, p99 {h99:.2f} ms:
  **{g50 / h50:.2f}x** at p50 (target: at most 1.2x), **{g99 / h99:.2f}x** at p99 (target: at most 1.5x).
- recall@10 of governed vector-only retrieve (a blank query) against the exact 10 nearest under the same conditions
  (sequential scan, {len(rec)} queries): mean **{mrec:.3f}** (target: at least 0.95), min {min(rec) if rec else 0:.2f}.
"""
    write_section("Knowledge retrieval over 100k claims: memory.retrieve against hand-written RRF (issue 47)", body)
    print(body)


if __name__ == "__main__":
    main()
