"""Issue 6 benchmark: a state UPDATE of 1,000,000 rows under memory.lifecycle_trigger vs no
trigger vs the PL/pgSQL trigger a user would write; memory.claim_chain on a chain 1,000 deep vs a
PL/pgSQL walk.

Usage: knowledge_bench.py DSN [ROWS] [RUNS]
"""
import sys
import time

import psycopg

from common import machine, median, timed, write_section

SETUP = r"""
DROP TABLE IF EXISTS lc_bare, lc_governed, lc_plpgsql;
CREATE TABLE lc_bare (id int PRIMARY KEY, state memory.lifecycle_state NOT NULL DEFAULT 'pending', title text NOT NULL);
CREATE TABLE lc_governed (LIKE lc_bare INCLUDING ALL);
CREATE TABLE lc_plpgsql (LIKE lc_bare INCLUDING ALL);
SELECT memory.govern('lc_governed', '{"state": "state"}');

-- The baseline a user would write: the seed's table as a CASE in a row trigger.
CREATE OR REPLACE FUNCTION bench_lifecycle_plpgsql() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  IF NEW.state IS DISTINCT FROM OLD.state AND NOT (CASE OLD.state
       WHEN 'pending' THEN NEW.state IN ('active', 'retracted', 'archived')
       WHEN 'active' THEN NEW.state IN ('superseded', 'retracted', 'archived')
       WHEN 'superseded' THEN NEW.state = 'archived'
       WHEN 'retracted' THEN NEW.state = 'archived'
       ELSE false END) THEN
    RAISE EXCEPTION 'invalid lifecycle transition from % to %', OLD.state, NEW.state USING ERRCODE = 'MX001';
  END IF;
  RETURN NEW;
END $f$;
CREATE TRIGGER lc BEFORE UPDATE OF state ON lc_plpgsql FOR EACH ROW EXECUTE FUNCTION bench_lifecycle_plpgsql();
"""

CHAIN = r"""
INSERT INTO memory.entities (id, org_id, entity_type, name) VALUES ('e0000000-0000-0000-0000-0000000000b1', 'bench', 'problem', 'chain')
ON CONFLICT DO NOTHING;
DO $d$
DECLARE prev uuid; cur uuid;
BEGIN
  FOR i IN 1 .. %(depth)s LOOP
    cur := gen_random_uuid();
    INSERT INTO memory.claims (id, org_id, entity_id, claim_text, source, confidence_score, supersedes)
    VALUES (cur, 'bench', 'e0000000-0000-0000-0000-0000000000b1', 'version ' || i, 'PubMed', 0.8, prev);
    UPDATE memory.claims SET lifecycle_state = 'active' WHERE id = cur;
    prev := cur;
  END LOOP;
END $d$;

-- The baseline: walk supersedes one SELECT at a time.
CREATE OR REPLACE FUNCTION bench_chain_plpgsql(p uuid)
RETURNS TABLE (depth int, claim_id uuid, lifecycle_state memory.lifecycle_state, t_created timestamptz, t_invalid timestamptz)
LANGUAGE plpgsql STABLE AS $f$
DECLARE c memory.claims; d int := 0; nxt uuid := p;
BEGIN
  WHILE nxt IS NOT NULL LOOP
    SELECT * INTO c FROM memory.claims WHERE id = nxt;
    EXIT WHEN NOT FOUND;
    depth := d; claim_id := c.id; lifecycle_state := c.lifecycle_state; t_created := c.t_created; t_invalid := c.t_invalid;
    RETURN NEXT;
    d := d + 1; nxt := c.supersedes;
  END LOOP;
END $f$;
"""


def fill(conn, table, rows):
    conn.execute(f"TRUNCATE {table}")
    conn.execute(f"INSERT INTO {table} (id, title) SELECT g, 'item ' || g FROM generate_series(1, {rows}) g")
    conn.execute(f"VACUUM ANALYZE {table}")
    conn.execute("CHECKPOINT")


def main():
    dsn = sys.argv[1]
    rows = int(sys.argv[2]) if len(sys.argv) > 2 else 1_000_000
    runs = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    depth = 1000
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SETUP)
        times = {"bare": [], "governed": [], "plpgsql": []}
        tables = {"bare": "lc_bare", "governed": "lc_governed", "plpgsql": "lc_plpgsql"}
        for r in range(runs):
            names = list(times) if r % 2 == 0 else list(reversed(times))
            for name in names:
                fill(conn, tables[name], rows)
                times[name].append(timed(conn, f"UPDATE {tables[name]} SET state = 'active'"))
        # The trigger really guards: an illegal transition on the governed table is refused.
        try:
            conn.execute("UPDATE lc_governed SET state = 'pending' WHERE id = 1")
            raise SystemExit("the governed table accepted active -> pending")
        except psycopg.Error as e:
            assert e.sqlstate == "MX001", e.sqlstate

        t0 = time.perf_counter()
        conn.execute(CHAIN.replace("%(depth)s", str(depth)))
        build_s = time.perf_counter() - t0
        head = conn.execute("SELECT id FROM memory.claims WHERE org_id = 'bench' AND lifecycle_state = 'active'").fetchone()[0]
        got = conn.execute("SELECT count(*), max(depth) FROM memory.claim_chain(%s)", (head,)).fetchone()
        assert got == (depth, depth - 1), got
        assert conn.execute("SELECT count(*) FROM bench_chain_plpgsql(%s)", (head,)).fetchone()[0] == depth
        ours, theirs = [], []
        for i in range(max(runs, 5) * 10):
            order = [("ours", "memory.claim_chain"), ("theirs", "bench_chain_plpgsql")]
            if i % 2:
                order.reverse()
            for who, fn in order:
                t = timed(conn, f"SELECT count(*) FROM {fn}(%s)", (head,))
                (ours if who == "ours" else theirs).append(t)

    b, g, p = (median(times[k]) for k in ("bare", "governed", "plpgsql"))
    body = f"""Command: `make bench` (or `bench/run.sh ROWS RUNS`), section written by `bench/knowledge_bench.py`.
Machine: {machine()}. Release build. Median of {runs} runs; each run refills the table ({rows:,} rows, VACUUM ANALYZE,
CHECKPOINT) and times `UPDATE t SET state = 'active'` (every row pending -> active); the order of the variants
alternates between runs.

| variant | median time | rows/s | throughput vs bare |
|---|---|---|---|
| bare (no trigger) | {b:.3f} s | {rows / b:,.0f} | 100% |
| `memory.lifecycle_trigger` (via `govern`, `{{"state": "state"}}`) | {g:.3f} s | {rows / g:,.0f} | **{b / g:.0%}** (target 75%) |
| PL/pgSQL trigger with the same table | {p:.3f} s | {rows / p:,.0f} | {b / p:.0%} |

memory_ext vs the PL/pgSQL trigger: **{p / g:.2f}x** faster. All runs: bare {', '.join(f'{x:.3f}' for x in times['bare'])};
governed {', '.join(f'{x:.3f}' for x in times['governed'])}; PL/pgSQL {', '.join(f'{x:.3f}' for x in times['plpgsql'])} s.

`memory.claim_chain` on a chain {depth:,} deep (built through the real insert-with-supersedes path in {build_s:.1f} s):
median **{median(ours) * 1000:.2f} ms** over {len(ours)} calls (p90 {sorted(ours)[int(len(ours) * 0.9)] * 1000:.2f} ms);
the PL/pgSQL walk (one SELECT per link): {median(theirs) * 1000:.2f} ms, so claim_chain is {median(theirs) / median(ours):.1f}x faster.
"""
    write_section("Knowledge lifecycle (issue 6)", body)
    print(body)


if __name__ == "__main__":
    main()
