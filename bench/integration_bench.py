"""Integration throughput of the background integrators (issue 15): one worker per database
against memory.integrator_workers = 2, side by side in one run.

Each round commits a backlog of pending entries (one INSERT of BACKLOG governed rows over 64
tenants, deferred audit, right after a CHECKPOINT) and measures the time from its COMMIT until
every entry is chained (the heads' seqs summed, polled every 5 ms). Nobody calls the sequencer:
the background integrators do all the work, each round starting within a naptime of the commit.
The rounds alternate between the clusters; medians of the rounds. Also reported: the CPU
seconds the integrators used per round (from /proc), which shows what parallelism costs.

Usage: integration_bench.py ROUNDS BACKLOG DSN [DSN ...]
Each DSN: a cluster (fsync = off) whose database is served by background integrators
(memory.integrator_databases naming it); how many, and its shared_buffers, are read from it
(bench/run.sh starts two: 1 and 2 integrators).
"""
import os
import sys
import time

import psycopg

from common import machine, median, write_section

TABLE = """
DROP TABLE IF EXISTS ib_backlog;
CREATE TABLE ib_backlog (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), org_id text NOT NULL, user_id text,
                         content text NOT NULL, classification memory.classification);
SELECT memory.govern('ib_backlog', '{"user": "user_id", "audit": true}');
"""

WORKERS = ("SELECT pid FROM pg_stat_activity WHERE backend_type = 'memory_ext integrator'"
           " AND datname = current_database()")
CHAINED = "SELECT coalesce(sum(seq), 0) FROM memory.audit_heads"


def cpu_seconds(pids):
    total = 0.0
    for p in pids:
        fields = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def one_round(c, backlog):
    """Seconds from the backlog's commit until it is chained, and the integrators' CPU seconds."""
    pids = [r[0] for r in c.execute(WORKERS)]
    # What an earlier round left is chained, the table vacuumed by the integrators' own rule, and
    # the round starts after a checkpoint.
    c.execute("SELECT memory.audit_integrate()")
    c.execute("CHECKPOINT")
    before = c.execute(CHAINED).fetchone()[0]
    c.execute("BEGIN")
    c.execute("SET LOCAL memory.audit_mode = deferred")
    c.execute("INSERT INTO ib_backlog (org_id, user_id, content) SELECT 'org-' || (g %% 64), 'user-' || (g %% 1000),"
              " 'User prefers concise answers; note ' || g FROM generate_series(1, %s) g", (backlog,))
    cpu0 = cpu_seconds(pids)
    c.execute("COMMIT")
    t0 = time.perf_counter()
    while c.execute(CHAINED).fetchone()[0] < before + backlog:
        time.sleep(0.005)
    dt = time.perf_counter() - t0
    return dt, cpu_seconds(pids) - cpu0


def main():
    rounds, backlog = int(sys.argv[1]), int(sys.argv[2])
    clusters = []
    for dsn in sys.argv[3:]:
        c = psycopg.connect(dsn, autocommit=True)
        c.execute("CREATE EXTENSION IF NOT EXISTS memory_ext")
        deadline = time.monotonic() + 30
        want = int(c.execute("SHOW memory.integrator_workers").fetchone()[0])
        while len(c.execute(WORKERS).fetchall()) != want and time.monotonic() < deadline:
            time.sleep(0.1)
        got = len(c.execute(WORKERS).fetchall())
        assert got == want >= 1, f"{dsn}: {got} integrators running, {want} configured (memory.integrator_databases)"
        buffers = c.execute("SHOW shared_buffers").fetchone()[0]
        c.execute(TABLE)
        clusters.append({"conn": c, "workers": want, "buffers": buffers, "times": [], "cpu": []})
    for r in range(rounds):
        for cl in (clusters if r % 2 == 0 else clusters[::-1]):
            dt, cpu = one_round(cl["conn"], backlog)
            cl["times"].append(dt)
            cl["cpu"].append(cpu)
    for cl in clusters:
        c = cl["conn"]
        (ok,) = c.execute("SELECT bool_and(ok) FROM memory.audit_verify()").fetchone()
        assert ok, f"{cl['workers']} integrators, {cl['buffers']}: a chain does not verify"
        c.execute("DROP TABLE ib_backlog")
        c.close()

    def rate(cl):
        return backlog / median(cl["times"])

    def row(cl):
        one = next((o for o in clusters if o["workers"] == 1 and o["buffers"] == cl["buffers"]), None)
        vs = f"{rate(cl) / rate(one):.2f}x" if one else "-"
        return (f"| {cl['workers']} | {cl['buffers']} | {median(cl['times']):.2f} s | **{rate(cl):,.0f}** | {vs} |"
                f" {median(cl['cpu']):.2f} s |")

    best = max(clusters, key=rate)
    rows = "\n".join(row(cl) for cl in clusters)
    raw = "; ".join(f"{cl['workers']} / {cl['buffers']}: {[round(x, 3) for x in cl['times']]} s, CPU {[round(x, 2) for x in cl['cpu']]} s"
                    for cl in clusters)
    body = f"""Command: `make bench` (runs `bench/integration_bench.py {rounds} {backlog} DSN...` against a release build: one cluster per
row, `fsync = off`, the default `memory.integrator_naptime` of 100 ms; `memory.integrator_workers` and `shared_buffers` as in
the table).
Machine: {machine()}. Date: {time.strftime('%Y-%m-%d')}.
Each round: a `CHECKPOINT`, then one transaction writes {backlog:,} governed rows over 64 tenants (deferred audit, so
{backlog:,} pending entries), and the time is taken from its `COMMIT` until every entry is chained (the heads' seqs,
polled every 5 ms). Nobody calls the sequencer: the background integrators do the work, each starting within a naptime
of the commit. Rounds alternate between the clusters; medians of {rounds} rounds.

| integrators | shared_buffers | commit to all chained | entries/s | vs one integrator | integrators' CPU per round |
|---|---|---|---|---|---|
{rows}

- Target for the sequencer: at least 200,000 entries/s in batches. Best here: {rate(best):,.0f} entries/s with
  {best['workers']} integrator(s) and {best['buffers']} of shared_buffers: {'met' if rate(best) >= 200_000 else '**not met**'}.
- With two integrators each takes the tenants `chain_share` gives it. Their CPU per round is the price of running side by
  side: each reads the whole pending table (and checks every row's visibility) to find its tenants' entries, and both
  extend, index and WAL-log the same log.
- Every chain verified afterwards.

Raw seconds per round (integrators / shared_buffers): {raw}."""
    write_section("Integration on more than one core (issue 15)", body)
    print(body)


if __name__ == "__main__":
    main()
