"""Issue 36 benchmark: governed hybrid recall with pgvector against a hand-written pgvector query.

One database of its own (pgvector created): memory.observations with memory.enable_embeddings(DIMS)
holding ROWS memories of TENANTS orgs and 16 users each, DIMS-d clustered Gaussian embeddings
(CLUSTERS centres, unit noise), behind the indexes enable_embeddings makes with btree_gin created:
HNSW (cosine, m = 16, ef_construction = 64) and the tenant full-text GIN (org, user, words); both
built after the load, with the same definitions. Then, in one run:
  latency   QUERIES queries, each of a random tenant and user, a query near a random centre and a
            word of the content: memory.recall(org, word, 10, filters => {user_id}, query_embedding)
            as a tenant-bound reader (audited, RRF of the full-text and vector lists) against the
            hand-written `SELECT id FROM memory.observations WHERE org_id = $1 AND user_id = $2
            ORDER BY embedding <=> $3 LIMIT 10` on the same table and index (pgvector's iterative
            scan and ef_search as recall sets them, no audit), in a random order per query (seeded); p50 / p99.
  recall@10 governed vector-only recall (blank query) against the exact 10 nearest within the
            tenant and user (same predicates, no index), over RECALL_QUERIES queries.
  insert    pgbench, 8 clients, SECONDS s x ROUNDS (alternating): a governed single-row INSERT of
            a memory with a DIMS-d embedding into memory.observations against a bare INSERT into
            a copy without triggers carrying the same rows and the same HNSW index; median TPS.
Usage: ROWS=1000000 hybrid_recall.py DSN PORT   (bench/run.sh: a release build; validate with
ROWS=20000). Env: ROWS, TENANTS (64), DIMS (384), CLUSTERS (64), QUERIES (1000),
RECALL_QUERIES (200), SECONDS (10), ROUNDS (3).
"""
import os
import random
import re
import subprocess
import sys
import tempfile
import time

import psycopg

from common import machine, median, write_section

ROWS = int(os.environ.get("ROWS", 1_000_000))
# The hand-written hybrid query of issue 47 (psycopg named parameters; {user}: the user condition).
RRF_SQL = """WITH lex AS (SELECT l.id, row_number() OVER (ORDER BY l.rk DESC, l.id) AS r
                 FROM (SELECT o.id, ts_rank_cd(o.content_tsv, q) AS rk FROM memory.observations o, websearch_to_tsquery('english', %(w)s) q
                        WHERE o.org_id = %(o)s {user} AND o.content_tsv @@ q ORDER BY 2 DESC, 1 LIMIT 40) l),
     vec AS (SELECT v.id, row_number() OVER (ORDER BY v.d, v.id) AS r
                 FROM (SELECT o.id, o.embedding <=> %(v)s::vector AS d FROM memory.observations o
                        WHERE o.org_id = %(o)s {user} ORDER BY o.embedding <=> %(v)s::vector LIMIT 10) v)
SELECT coalesce(lex.id, vec.id) AS id, coalesce(1.0 / (60 + lex.r), 0) + coalesce(1.0 / (60 + vec.r), 0) AS s
  FROM lex FULL JOIN vec ON lex.id = vec.id ORDER BY s DESC, id LIMIT 10"""
TENANTS = int(os.environ.get("TENANTS", 64))
DIMS = int(os.environ.get("DIMS", 384))
CLUSTERS = int(os.environ.get("CLUSTERS", 64))
QUERIES = int(os.environ.get("QUERIES", 1000))
RECALL_QUERIES = int(os.environ.get("RECALL_QUERIES", 200))
SECONDS = int(os.environ.get("SECONDS", 10))
ROUNDS = int(os.environ.get("ROUNDS", 3))
WORDS = ["invoice", "refund", "payment", "travel", "contract", "shipping", "warranty", "account", "password", "meeting",
         "budget", "roadmap", "incident", "release", "pricing", "hiring"]
READER = "hb_reader"


def vec(v):
    return "[" + ",".join(f"{x:.5f}" for x in v) + "]"


def pctl(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def pgbench(port, db, script, clients, seconds):
    bindir = subprocess.check_output([os.environ.get("PG_CONFIG", "/usr/bin/pg_config"), "--bindir"], text=True).strip()
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as f:
        f.write(script)
    os.chmod(f.name, 0o644)
    out = subprocess.run([f"{bindir}/pgbench", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "-n", "-c", str(clients),
                          "-j", "2", "-T", str(seconds), "-f", f.name, db], capture_output=True, text=True, check=True).stdout
    os.unlink(f.name)
    return float(re.search(r"tps = ([0-9.]+)", out).group(1))


def load(conn, rng):
    """ROWS memories: centre c of the row's cluster + N(0, 1) noise per component, in batches."""
    centres = [[rng.gauss(0, 3) for _ in range(DIMS)] for _ in range(CLUSTERS)]
    conn.execute("DROP TABLE IF EXISTS hb_centres")
    conn.execute("CREATE TABLE hb_centres (c int PRIMARY KEY, v real[])")
    with conn.cursor() as cur:
        cur.executemany("INSERT INTO hb_centres VALUES (%s, %s)", [(i, c) for i, c in enumerate(centres)])
    # Rows as the store would have them (tier, stamps) but loaded without the triggers (replica
    # mode): the benchmark times reads and single-row writes, not the bulk load.
    conn.execute("SET session_replication_role = replica")
    batch = 20_000
    for start in range(0, ROWS, batch):
        n = min(batch, ROWS - start)
        conn.execute(f"""
            INSERT INTO memory.observations (org_id, user_id, content, classification, embedding)
            SELECT 'org' || (g % {TENANTS}), 'u' || ((g / {TENANTS}) % 16),
                   (ARRAY{WORDS!r})[1 + g % {len(WORDS)}] || ' note ' || g || ' about ' || (ARRAY{WORDS!r})[1 + (g / 7) % {len(WORDS)}],
                   'internal',
                   (SELECT array_agg(c.x + sqrt(-2 * ln(1 - random())) * cos(2 * pi() * random()) ORDER BY c.o)::vector
                      FROM unnest((SELECT v FROM hb_centres WHERE c = g % {CLUSTERS})) WITH ORDINALITY c(x, o))
              FROM generate_series({start}, {start + n - 1}) g""")
    conn.execute("RESET session_replication_role")
    return centres


def main():
    dsn, port = sys.argv[1], int(sys.argv[2])
    rng = random.Random(36)
    db = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
    bench_dsn = dsn.replace(f"dbname={db}", "dbname=hybrid_bench")
    # PHASE=setup builds the database and stops; PHASE=timed measures a database PHASE=setup built
    # with the same ROWS, DIMS and CLUSTERS (and the same installed build): the untimed build can run
    # while the machine is busy, the timed part when it is quiet. Default: both.
    phase = os.environ.get("PHASE", "all")
    if phase != "timed":
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute("DROP DATABASE IF EXISTS hybrid_bench WITH (FORCE)")
            c.execute("CREATE DATABASE hybrid_bench")
    dsn = bench_dsn
    with psycopg.connect(dsn, autocommit=True) as conn:
        if phase != "timed":
            conn.execute("CREATE EXTENSION memory_ext")
            conn.execute("CREATE EXTENSION vector")
            # btree_gin (contrib): enable_embeddings then also builds the tenant full-text index
            # hybrid recall's full-text list reads (docs/vector.md).
            conn.execute("CREATE EXTENSION btree_gin")
            conn.execute("SELECT memory.setup_roles()")
            conn.execute(f"DO $$ BEGIN IF to_regrole('{READER}') IS NULL THEN CREATE ROLE {READER} LOGIN IN ROLE memory_reader; END IF; END $$")
            for t in range(TENANTS):
                conn.execute("SELECT memory.grant_org(%s, %s)", (READER, f"org{t}"))
            conn.execute(f"SELECT memory.enable_embeddings({DIMS})")
            # The indexes enable_embeddings made, built after the load with their own definitions.
            idxs = [conn.execute(f"SELECT pg_get_indexdef('memory.{i}'::regclass)").fetchone()[0]
                    for i in ("observations_embedding", "observations_fts_tenant")]
            conn.execute("DROP INDEX memory.observations_embedding, memory.observations_fts_tenant")
            t0 = time.perf_counter()
            load(conn, rng)
            t_load = time.perf_counter() - t0
            conn.execute("SET maintenance_work_mem = '4GB'")  # the graph of 1M 384-d vectors fits
            t0 = time.perf_counter()
            for idx in idxs:
                conn.execute(idx)
            t_index = time.perf_counter() - t0
            conn.execute("VACUUM ANALYZE memory.observations")
            conn.execute("CREATE TABLE hb_meta AS SELECT %s::int AS rows, %s::int AS dims, %s::int AS clusters, %s::float8 AS t_load, %s::float8 AS t_index",
                         (ROWS, DIMS, CLUSTERS, t_load, t_index))
            if phase == "setup":
                print(f"hybrid_recall setup: {ROWS:,} rows, load {t_load:.0f} s, index {t_index:.0f} s", flush=True)
                return
        meta = conn.execute("SELECT rows, dims, clusters, t_load, t_index FROM hb_meta").fetchone()
        assert meta[:3] == (ROWS, DIMS, CLUSTERS), f"hybrid_bench was built for {meta[:3]}, not {(ROWS, DIMS, CLUSTERS)}"
        t_load, t_index = meta[3], meta[4]
        centres = [list(v) for (v,) in conn.execute("SELECT v FROM hb_centres ORDER BY c")]
        rng = random.Random(37)
        shuffle = random.Random(38)

        def query():
            org = f"org{rng.randrange(TENANTS)}"
            user = f"u{rng.randrange(16)}"
            q = [x + rng.gauss(0, 1) for x in centres[rng.randrange(CLUSTERS)]]
            return org, user, q, rng.choice(WORDS)

        lat = {"governed": [], "bare": [], "vector": [], "rrf": [], "tenant": [], "rrf_tenant": []}
        rec = []
        with psycopg.connect(dsn.replace("user=postgres", f"user={READER}"), autocommit=True) as r, \
                psycopg.connect(dsn, autocommit=True) as hand:
            bare_session(hand)
            for i in range(QUERIES):
                org, user, q, word = query()
                qa = "{" + vec(q)[1:-1] + "}"
                runs = [("governed", lambda: r.execute(
                            "SELECT id FROM memory.recall(%s, %s, 10, filters => jsonb_build_object('user_id', %s::text), query_embedding => %s::real[])",
                            (org, word, user, qa), prepare=True).fetchall())]
                runs.append(("bare", lambda: bare(hand, org, user, q)))
                # The governed vector-only recall (a blank query: no full-text list), for where the time goes.
                runs.append(("vector", lambda: r.execute(
                            "SELECT id FROM memory.recall(%s, '', 10, filters => jsonb_build_object('user_id', %s::text), query_embedding => %s::real[])",
                            (org, user, qa), prepare=True).fetchall()))
                # The same answer written by hand (issue 47): full-text top 40 + vector top 10, RRF in
                # one statement, as the superuser; and both for a tenant's memories (no user filter).
                runs.append(("rrf", lambda: hand.execute(RRF_SQL.format(user="AND o.user_id = %(u)s"),
                                                         {"o": org, "u": user, "w": word, "v": vec(q)}, prepare=True).fetchall()))
                runs.append(("tenant", lambda: r.execute(
                            "SELECT id FROM memory.recall(%s, %s, 10, query_embedding => %s::real[])", (org, word, qa), prepare=True).fetchall()))
                runs.append(("rrf_tenant", lambda: hand.execute(RRF_SQL.format(user=""), {"o": org, "w": word, "v": vec(q)},
                                                                prepare=True).fetchall()))
                # A random order each draw (seeded): the first of the runs that read a user's rows
                # pays for bringing them into shared buffers, and any of them is that first as often
                # as another. (A rotation of one fixed order put the governed call before the
                # hand-written vector query in 5 draws of 6, so it paid that read 5 times as often.)
                order = runs[:]
                shuffle.shuffle(order)
                for name, fn in order:
                    t0 = time.perf_counter()
                    fn()
                    lat[name].append(time.perf_counter() - t0)
            for _ in range(min(RECALL_QUERIES, QUERIES)):
                org, user, q, _w = query()
                got = [x for (x,) in r.execute(
                    "SELECT id FROM memory.recall(%s, '', 10, filters => jsonb_build_object('user_id', %s::text), query_embedding => %s::real[])",
                    (org, user, "{" + vec(q)[1:-1] + "}")).fetchall()]
                with conn.transaction():
                    conn.execute("SET LOCAL enable_indexscan = off")
                    exact = [x for (x,) in conn.execute(
                        "SELECT id FROM memory.observations WHERE org_id = %s AND user_id = %s AND soft_deleted_at IS NULL "
                        "ORDER BY embedding <=> %s::vector, id LIMIT 10", (org, user, vec(q))).fetchall()]
                rec.append(len(set(got) & set(exact)) / max(1, len(exact)))

        # Single-row inserts into memory.observations itself (its HNSW index and the rest of its
        # indexes, at its size): governed, and bare with memory_ext's triggers off
        # (session_replication_role = replica, the row carrying the tier the trigger would set).
        conn.execute("DROP TABLE IF EXISTS hb_pool")
        conn.execute("CREATE TABLE hb_pool (i int PRIMARY KEY, v vector)")
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO hb_pool VALUES (%s, %s::vector)",
                            [(i, vec([x + rng.gauss(0, 1) for x in centres[i % CLUSTERS]])) for i in range(1000)])
        conn.execute("VACUUM ANALYZE hb_pool")
    script = ("\\set r random(0, 999)\n\\set o random(0, {t})\n"
              "SET session_replication_role = {srr};\n"
              "INSERT INTO memory.observations (org_id, user_id, content, {cls}embedding) SELECT 'org' || :o, 'u1', 'pgbench note ' || :r, {clsv}v FROM hb_pool WHERE i = :r;\n")
    tps = {"governed": [], "bare": []}
    for rnd in range(ROUNDS):
        order = ["governed", "bare"] if rnd % 2 == 0 else ["bare", "governed"]
        for name in order:
            s = script.format(t=TENANTS - 1, srr="origin" if name == "governed" else "replica",
                              cls="" if name == "governed" else "classification, ", clsv="" if name == "governed" else "'internal', ")
            tps[name].append(pgbench(port, "hybrid_bench", s, 8, SECONDS))

    g50, g99 = pctl(lat["governed"], 50) * 1e3, pctl(lat["governed"], 99) * 1e3
    b50, b99 = pctl(lat["bare"], 50) * 1e3, pctl(lat["bare"], 99) * 1e3
    v50, v99 = pctl(lat["vector"], 50) * 1e3, pctl(lat["vector"], 99) * 1e3
    r50, r99 = pctl(lat["rrf"], 50) * 1e3, pctl(lat["rrf"], 99) * 1e3
    t50, t99 = pctl(lat["tenant"], 50) * 1e3, pctl(lat["tenant"], 99) * 1e3
    rt50, rt99 = pctl(lat["rrf_tenant"], 50) * 1e3, pctl(lat["rrf_tenant"], 99) * 1e3
    mrec = sum(rec) / max(1, len(rec))
    ins = 100 * median(tps['governed']) / median(tps['bare'])
    body = f"""Command: `make bench` (runs `ROWS={ROWS} bench/hybrid_recall.py DSN PORT` against a release build; pgvector 0.8.6).
Machine: {machine()}. Date: {time.strftime('%Y-%m-%d')}.
{ROWS:,} memories of {TENANTS} tenants (16 users each), {DIMS}-d clustered Gaussian
embeddings ({CLUSTERS} centres), HNSW cosine m = 16, ef_construction = 64, and with btree_gin the tenant full-text GIN
`observations_fts_tenant` (org, user, words) (load {t_load:.0f} s without triggers, index builds
{t_index:.0f} s). k = 10, one user filter. Same run, the six queries of each draw in a random order (seeded; whichever reads a user's rows first brings them into shared buffers), each one prepared statement from one client.

| recall of one tenant's user ({QUERIES} queries) | p50 ms | p99 ms |
|---|---|---|
| `memory.recall` hybrid (full text + vector, RRF × weight, clearance, liveness, audited; a tenant-bound reader) | {g50:.2f} | {g99:.2f} |
| hand-written `WHERE org_id = $1 AND user_id = $2 ORDER BY embedding <=> $3 LIMIT 10` (same iterative scan and ef_search, set once a session; no audit) | {b50:.2f} | {b99:.2f} |
| `memory.recall` vector-only (a blank query: no full-text list; audited, tenant-bound reader) | {v50:.2f} | {v99:.2f} |
| hand-written RRF: full-text top 40 + vector top 10 fused in one statement (superuser, no audit) | {r50:.2f} | {r99:.2f} |
| `memory.recall` hybrid of a tenant's memories (no user filter) | {t50:.2f} | {t99:.2f} |
| hand-written RRF of a tenant's memories | {rt50:.2f} | {rt99:.2f} |

- With the user filter, `memory.recall` reads the user's rows in one pass (both lists exact, fused in Rust; docs/vector.md);
  the hand-written query reads the same rows through the same index and sorts them by distance.
- Governed hybrid recall: **{g50 / b50:.2f}x** the hand-written query at p50 (target: at most 1.5x), **{g99 / b99:.2f}x** at p99 (target: at most 2x).
  Governed vector-only recall: {v50 / b50:.2f}x at p50, {v99 / b99:.2f}x at p99.
- Against the hand-written RRF query (issue 47: targets p50 at most 1.2x, p99 at most 1.5x): a user's memories
  **{g50 / r50:.2f}x** at p50, **{g99 / r99:.2f}x** at p99; a tenant's **{t50 / rt50:.2f}x** at p50, **{t99 / rt99:.2f}x** at p99.
- recall@10 of the governed vector-only ranking against the exact 10 nearest within tenant and user (sequential, {len(rec)} queries):
  mean **{mrec:.3f}** (target: at least 0.95), min {min(rec) if rec else 0:.2f}.

| single-row INSERT with a {DIMS}-d embedding into `memory.observations` at {ROWS:,} rows, pgbench 8 clients, {SECONDS} s x {ROUNDS} | median TPS |
|---|---|
| governed (classification, stamps, audit; its indexes, HNSW among them) | {median(tps['governed']):.0f} |
| bare: the same INSERT into the same table and indexes with memory_ext's triggers off (`session_replication_role = replica`, the tier given) | {median(tps['bare']):.0f} |

- Governed single-row insert: **{ins:.1f}%** of bare (target: at least 70%).
"""
    write_section("Hybrid recall with pgvector (issue 36)", body)
    print(body)


def bare(conn, org, user, q):
    """The hand-written query: one prepared statement on a session that set pgvector's iterative
    scan and ef_search as recall sets them (bare_session)."""
    return conn.execute("SELECT id FROM memory.observations WHERE org_id = %s AND user_id = %s "
                        "ORDER BY embedding <=> %s::vector LIMIT 10", (org, user, vec(q)), prepare=True).fetchall()


def bare_session(conn):
    conn.execute("SET hnsw.iterative_scan = relaxed_order")
    conn.execute("SET hnsw.ef_search = 100")


if __name__ == "__main__":
    main()
