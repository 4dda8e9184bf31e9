"""Issue 17 benchmark: governed inserts through a Citus coordinator vs the same on a single node.

Two clusters side by side in one run, both the release build of memory_ext, both with a bare
table and a governed one (classification + audit, deferred mode):
  single   one PostgreSQL 15 node (scripts/cluster.sh)
  citus    a coordinator and two workers on the same machine (scripts/citus.sh), the tables
           distributed by org with memory.distribute()
Measured, alternating the order per round, medians of the rounds:
  - single-row INSERT transactions, pgbench, 8 clients, 1 and 16 tenants;
  - a batch INSERT ... SELECT of BATCH rows, 1 and 16 tenants;
  - the integration of the pending entries those left, from the coordinator (every node
    integrates the shard groups it holds) and on the single node.
On 2 cores the three Citus nodes share the CPUs of the one single node: this measures Citus's
and memory_ext's overhead per write, not scaling.

Usage: citus_bench.py SINGLE_PORT COORDINATOR_PORT [ROUNDS] [SECONDS] [BATCH]
"""
import sys
import time

import psycopg

from audit_bench import pgbench
from common import machine, median, verify_chains, write_section

TABLES = """
CREATE TABLE cb_bare (id bigserial, org_id text NOT NULL, user_id text, content text NOT NULL,
                      classification memory.classification, created_at timestamptz DEFAULT now(), PRIMARY KEY (org_id, id));
CREATE TABLE cb_gov (LIKE cb_bare INCLUDING ALL);
SELECT memory.govern('cb_gov', '{"content": "content", "target": "classification", "org": "org_id", "user": "user_id", "audit": true}');
"""

SCRIPT = r"""\set t random(1, {tenants})
INSERT INTO cb_{table} (org_id, user_id, content)
VALUES ('org-' || :t, 'user-' || :client_id, 'User prefers concise answers; agent ' || :client_id || ' note ' || random());
"""

BATCH_SQL = """INSERT INTO cb_{table} (org_id, user_id, content)
SELECT 'org-' || (g % {tenants} + 1), 'user-' || (g % 1000), 'note ' || g || CASE WHEN g % 50 = 0 THEN ' ssn 123-45-6789' ELSE '' END
  FROM generate_series(1, {rows}) g"""


def dsn(port):
    return f"host=127.0.0.1 port={port} user=postgres dbname=postgres"


def setup(port, citus):
    with psycopg.connect(dsn(port), autocommit=True) as c:
        c.execute("DROP TABLE IF EXISTS cb_bare, cb_gov")
        c.execute(TABLES)
        if citus:
            c.execute("SELECT create_distributed_table('cb_bare', 'org_id', colocate_with := 'none')")
            c.execute("SELECT memory.distribute()")


def main():
    single, coord = int(sys.argv[1]), int(sys.argv[2])
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    seconds = int(sys.argv[4]) if len(sys.argv) > 4 else 10
    rows = int(sys.argv[5]) if len(sys.argv) > 5 else 100_000
    setup(single, False)
    setup(coord, True)
    places = {"single": single, "citus": coord}
    tps = {}
    batch = {}
    integ = {"single": [], "citus": []}
    for r in range(rounds):
        order = [(p, t) for p in ("single", "citus") for t in ("bare", "gov")]
        if r % 2:
            order.reverse()
        for tenants in (1, 16):
            for place, table in order:
                port = places[place]
                with psycopg.connect(dsn(port), autocommit=True) as c:
                    c.execute("SELECT memory.audit_integrate()")
                x = pgbench(port, SCRIPT.format(tenants=tenants, table=table), 8, seconds)
                tps.setdefault((place, table, tenants), []).append(x)
                print(f"round {r + 1} {place} {table} tenants {tenants}: {x:,.0f} tps", flush=True)
                with psycopg.connect(dsn(port), autocommit=True) as c:
                    c.execute("SELECT memory.audit_integrate()")
                    t0 = time.perf_counter()
                    c.execute(BATCH_SQL.format(table=table, tenants=tenants, rows=rows))
                    dt = time.perf_counter() - t0
                    batch.setdefault((place, table, tenants), []).append(dt)
                    print(f"round {r + 1} {place} {table} tenants {tenants}: batch of {rows:,} in {dt:.2f} s", flush=True)
                    if table == "gov" and tenants == 16:
                        t0 = time.perf_counter()
                        (n,) = c.execute("SELECT memory.audit_integrate()").fetchone()
                        integ[place].append((n, time.perf_counter() - t0))
    for place, port in places.items():
        with psycopg.connect(dsn(port), autocommit=True) as c:
            verify_chains(c, place)
            n = c.execute("SELECT count(*) FROM memory.audit_log WHERE event_type = 'memory.store'").fetchone()[0]
            rows_gov = c.execute("SELECT count(*) FROM cb_gov").fetchone()[0]
            assert n == rows_gov, f"{place}: {n} store events for {rows_gov} rows"
            tiers = c.execute("SELECT count(*) FROM cb_gov WHERE classification = 'restricted'").fetchone()[0]
            assert tiers > 0, f"{place}: nothing classified"

    med = {k: median(v) for k, v in tps.items()}
    bmed = {k: median(v) for k, v in batch.items()}

    def tps_row(tenants):
        sb, sg = med[("single", "bare", tenants)], med[("single", "gov", tenants)]
        cb, cg = med[("citus", "bare", tenants)], med[("citus", "gov", tenants)]
        return (f"| {tenants} | {sb:,.0f} | {sg:,.0f} ({100 * sg / sb:.0f}%) | {cb:,.0f} | {cg:,.0f} ({100 * cg / cb:.0f}%) |"
                f" {100 * cg / sg:.0f}% |")

    def batch_row(tenants):
        sb, sg = bmed[("single", "bare", tenants)], bmed[("single", "gov", tenants)]
        cb, cg = bmed[("citus", "bare", tenants)], bmed[("citus", "gov", tenants)]
        return (f"| {tenants} | {sb:.2f} s | {sg:.2f} s ({100 * sb / sg:.0f}%) | {cb:.2f} s | {cg:.2f} s ({100 * cb / cg:.0f}%) |"
                f" {100 * sg / cg:.0f}% |")

    def integ_cell(place):
        xs = integ[place]
        n = median([x[0] for x in xs])
        t = median([x[1] for x in xs])
        return f"{n:,.0f} entries in {t:.2f} s ({n / t:,.0f}/s)"

    body = f"""Command: `bench/citus_run.sh` (runs `bench/citus_bench.py SINGLE_PORT COORDINATOR_PORT {rounds} {seconds} {rows}` against a
release build: one single-node cluster and one Citus 13.2 cluster, a coordinator and two workers, all on this machine).
Machine: {machine()}. Date: {time.strftime('%Y-%m-%d')}.
Both clusters hold `cb_bare` (no trigger) and `cb_gov` (governed: classification and audit, deferred mode); on Citus both
are distributed by org (`cb_gov` by `memory.distribute()`, co-located with the audit tables; 32 shards). Single-row:
pgbench, 8 clients, {seconds} s, one `INSERT` per transaction, the org drawn from 1 or 16 tenants. Batch: one
`INSERT ... SELECT` of {rows:,} rows (2% with an SSN). {rounds} rounds, order alternating, medians; what a run left
pending is integrated before the next (untimed, except the row below).

Single-row transactions (TPS; governed as % of bare on the same cluster; last column: governed on Citus as % of governed on
the single node):

| tenants | single bare | single governed | Citus bare | Citus governed | Citus/single governed |
|---|---|---|---|---|---|
{tps_row(1)}
{tps_row(16)}

Batch of {rows:,} rows (time; governed: bare's time as % of governed's, i.e. relative throughput; last column: single
governed's time as % of Citus governed's):

| tenants | single bare | single governed | Citus bare | Citus governed | single/Citus governed |
|---|---|---|---|---|---|
{batch_row(1)}
{batch_row(16)}

Integration of the batch's pending entries, called once: single node {integ_cell('single')}; from the Citus coordinator
(each worker integrates the shard groups it holds, in parallel) {integ_cell('citus')}.

Every chain verified on both clusters after the run (`memory.audit_verify()` from the coordinator on Citus); one
`memory.store` event per governed row; classification ran on the workers' shards.

What this shows, on 2 cores: the three Citus nodes and pgbench share the CPUs that the single node has to itself, and every
Citus statement pays a coordinator round trip to a worker, so Citus is slower here for bare and governed tables alike. The
column that isolates memory_ext is "governed as % of bare" on each cluster: what memory_ext's triggers cost on a Citus
worker compared with on a single node.

Scaling argument (not measured here: one machine). Everything memory_ext does per write is local to the shard group of the
tenant written: classification reads the row and the org's rules (a reference table, local on every node); the audit event
goes into the co-located shard of `memory.audit_pending` on the same worker, with no lock shared with any other tenant;
integration and verification run on every node over the shard groups it holds, in parallel, each chain on the node of its
tenant. So write throughput, integration and verification grow with the number of workers as tenants spread over them.
What does not grow: (1) the coordinator, through which every statement passes unless the application connects to workers
(Citus allows writes through any node with metadata); (2) reference tables (keys, org grants, rules, policies), whose
every change is written to every node — rare, configuration-time writes; (3) one tenant: its chain is one shard group on
one node, so a single tenant's write rate is bounded by one worker (isolate_tenant_to_new_shard moves it to its own
shard, not across nodes); (4) `audit_verify()` of every chain from the coordinator gathers one row per chain.
"""
    write_section("Scale-out on Citus: governed writes through a coordinator vs a single node", body)


if __name__ == "__main__":
    main()
