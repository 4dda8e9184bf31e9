"""Issue 18 benchmark: memory.ingest_batch of 100,000 claims vs the same rows inserted by a plain
INSERT ... SELECT into memory.claims (same triggers, same audit), in one run.

    python ingest_bench.py DSN [CLAIMS] [RUNS]
"""
import sys

import psycopg

from common import machine, median, timed, write_section

SETUP = """
DROP TABLE IF EXISTS ingest_src;
CREATE TABLE ingest_src AS
SELECT g, jsonb_build_object('org_id', 'acme', 'entity_id', 'e6000000-0000-0000-0000-000000000001',
                             'claim_text', 'Finding ' || g || ': HbA1c improved by ' || (g % 17) || ' points in cohort ' || (g % 101),
                             'source', (ARRAY['PubMed', 'NEJM', 'open-web'])[1 + g % 3], 'confidence_score', 0.5 + (g % 50) / 100.0,
                             'field', 'f' || (g % 7)) AS j
  FROM generate_series(1, %(n)s) g;
"""


def main():
    dsn = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 100_000
    runs = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("DROP DATABASE IF EXISTS ingest_bench WITH (FORCE)")
        c.execute("CREATE DATABASE ingest_bench")
    db = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
    bdsn = dsn.replace(f"dbname={db}", "dbname=ingest_bench")
    times = {"plain": [], "ingest": []}
    with psycopg.connect(bdsn, autocommit=True) as c:
        c.execute("CREATE EXTENSION memory_ext")
        c.execute("INSERT INTO memory.entities (id, org_id, entity_type, name) VALUES "
                  "('e6000000-0000-0000-0000-000000000001', 'acme', 'problem', 'Type 2 diabetes')")
        c.execute(SETUP.replace("%(n)s", str(n)))
        batch = c.execute("SELECT jsonb_agg(j ORDER BY g) FROM ingest_src").fetchone()[0]
        for r in range(runs):
            for name in (["plain", "ingest"] if r % 2 == 0 else ["ingest", "plain"]):
                with c.transaction(force_rollback=True):
                    if name == "plain":
                        t = timed(c, """INSERT INTO memory.claims (org_id, entity_id, claim_text, source, confidence_score, field)
                                        SELECT j->>'org_id', (j->>'entity_id')::uuid, j->>'claim_text', j->>'source',
                                               (j->>'confidence_score')::float8, j->>'field' FROM ingest_src""")
                        got = c.execute("SELECT count(*) FROM memory.claims").fetchone()[0]
                    else:
                        t = timed(c, "CREATE TEMP TABLE ingest_out ON COMMIT DROP AS SELECT * FROM memory.ingest_batch(claims => %s)",
                                  (psycopg.types.json.Jsonb(batch),))
                        got = c.execute("SELECT count(*) FROM ingest_out WHERE ok").fetchone()[0]
                    assert got == n, (name, got)
                times[name].append(t)
                print(f"run {r + 1} {name}: {t:.2f}s ({n / t:,.0f} claims/s)", flush=True)
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("DROP DATABASE IF EXISTS ingest_bench WITH (FORCE)")
    med = {k: median(v) for k, v in times.items()}
    ratio = med["plain"] / med["ingest"]
    body = f"""Command: `bench/ingest_bench.py DSN {n} {runs}` against a release build (part of `make bench`).
Machine: {machine()}.
Median of {runs} runs each, alternating, each in a transaction rolled back; both insert {n:,} claims of one entity into
`memory.claims` with its triggers (pending state, supersession check, classification-free knowledge audit: one
`memory.claim.create` event per claim).

| {n:,} claims | median s | claims/s | vs plain |
|---|---|---|---|
| plain `INSERT INTO memory.claims ... SELECT` | {med['plain']:.2f} | {n / med['plain']:,.0f} | 100% |
| `memory.ingest_batch(claims => <{n:,}-item JSON array>)` (chunks of 500, one result row per item) | {med['ingest']:.2f} | {n / med['ingest']:,.0f} | **{100 * ratio:.1f}%** |

- `ingest_batch` runs at **{100 * ratio:.1f}%** of the plain insert's throughput (target: at least 50%), while checking every
  item, reporting one row per item and writing the batch event.
"""
    print(body)
    write_section("Bulk ingest (issue 18)", body)


if __name__ == "__main__":
    main()
