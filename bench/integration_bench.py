"""Integration throughput of the background integrators (issue 15): one worker per database
against memory.integrator_workers = 2, side by side in one run.

Each round commits a backlog of pending entries (one INSERT of BACKLOG governed rows over 64
tenants, deferred audit, right after a CHECKPOINT) and measures the time from its COMMIT until
every entry is chained (the heads' seqs summed, polled every 5 ms). Nobody calls the sequencer:
the background integrators do all the work, each round starting within a naptime of the commit.
The rounds alternate between the two clusters; medians of the rounds. Also reported: the CPU
seconds the integrators used per round (from /proc), which shows what parallelism costs.

Usage: integration_bench.py DSN_ONE DSN_TWO [ROUNDS] [BACKLOG]
DSN_ONE: a cluster whose database is served by one integrator (memory.integrator_databases
naming it); DSN_TWO: the same with memory.integrator_workers = 2 (bench/run.sh starts both).
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
    dsns = {1: sys.argv[1], 2: sys.argv[2]}
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    backlog = int(sys.argv[4]) if len(sys.argv) > 4 else 200_000
    conns = {}
    for n, dsn in dsns.items():
        c = psycopg.connect(dsn, autocommit=True)
        c.execute("CREATE EXTENSION IF NOT EXISTS memory_ext")
        deadline = time.monotonic() + 30
        while len(c.execute(WORKERS).fetchall()) != n and time.monotonic() < deadline:
            time.sleep(0.1)
        got = len(c.execute(WORKERS).fetchall())
        assert got == n, f"{dsn}: {got} integrators, want {n} (memory.integrator_databases, memory.integrator_workers)"
        c.execute(TABLE)
        conns[n] = c
    times = {1: [], 2: []}
    cpus = {1: [], 2: []}
    for r in range(rounds):
        for n in ((1, 2) if r % 2 == 0 else (2, 1)):
            dt, cpu = one_round(conns[n], backlog)
            times[n].append(dt)
            cpus[n].append(cpu)
    for n, c in conns.items():
        (ok,) = c.execute("SELECT bool_and(ok) FROM memory.audit_verify()").fetchone()
        assert ok, f"{n} integrators: a chain does not verify"
        c.execute("DROP TABLE ib_backlog")
        c.close()

    def row(n, label):
        t = median(times[n])
        return f"| {label} | {t:.2f} s | **{backlog / t:,.0f}** | {median(cpus[n]):.2f} s |"

    speedup = median(times[1]) / median(times[2])
    body = f"""Command: `make bench` (runs `bench/integration_bench.py DSN_ONE DSN_TWO {rounds} {backlog}` against a release build: two
clusters with `fsync = off`, the first with one background integrator for the benchmark's database, the second with
`memory.integrator_workers = 2`; both with the default `memory.integrator_naptime` of 100 ms and `shared_buffers` of 128MB).
Machine: {machine()}. Date: {time.strftime('%Y-%m-%d')}.
Each round: a `CHECKPOINT`, then one transaction writes {backlog:,} governed rows over 64 tenants (deferred audit, so
{backlog:,} pending entries), and the time is taken from its `COMMIT` until every entry is chained (the heads' seqs,
polled every 5 ms). Nobody calls the sequencer: the background integrators do the work, each starting within a naptime
of the commit. Rounds alternate between the clusters; medians of {rounds} rounds.

| integrators | commit to all chained | entries/s | integrators' CPU per round |
|---|---|---|---|
{row(1, 'one (the default)')}
{row(2, 'two (`memory.integrator_workers = 2`), each its half of the tenants')}

- Two integrators: {speedup:.2f}x one (target for the sequencer: at least 200,000 entries/s in batches).
- Their CPU per round is the price of running side by side on 2 cores: each reads the whole pending table (and checks
  every row's visibility) to find its tenants' entries, and both extend, index and WAL-log the same log.
- Every chain verified afterwards.

Raw seconds per round: one: {[round(x, 3) for x in times[1]]}, two: {[round(x, 3) for x in times[2]]}; CPU seconds: one:
{[round(x, 2) for x in cpus[1]]}, two: {[round(x, 2) for x in cpus[2]]}."""
    write_section("Integration on more than one core (issue 15)", body)
    print(body)


if __name__ == "__main__":
    main()
