"""Integration lag on a quiet database (issue 15): one governed row committed at a time, 250 ms
apart, each timed from its COMMIT until its chain's head shows it (polled every 0.5 ms). The commit
wakes the background integrator of its chain, which chains it in the round it starts then.

Usage: quiet_lag.py DSN [PROBES]
DSN: a database served by a background integrator (memory.integrator_databases); nothing else
should write to it meanwhile.
"""
import statistics
import sys
import time

import psycopg

from common import machine, write_section


def main():
    dsn = sys.argv[1]
    probes = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("CREATE EXTENSION IF NOT EXISTS memory_ext")
        workers = c.execute("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'memory_ext integrator'"
                            " AND datname = current_database()").fetchone()[0]
        assert workers >= 1, "start the cluster with memory.integrator_databases naming this database"
        naptime = c.execute("SHOW memory.integrator_naptime").fetchone()[0]
        # (A build from before wake-ups, measured by compare runs, has no such setting.)
        delay = c.execute("SELECT coalesce(current_setting('memory.integrator_delay', true), 'none')").fetchone()[0]
        c.execute("DROP TABLE IF EXISTS ql_notes")
        c.execute("CREATE TABLE ql_notes (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), org_id text NOT NULL,"
                  " user_id text, content text NOT NULL, classification memory.classification)")
        c.execute("""SELECT memory.govern('ql_notes', '{"user": "user_id", "audit": true}')""")
        c.execute("SET memory.audit_mode = deferred")
        c.execute("SELECT memory.audit_integrate()")
        time.sleep(1)
        head = "SELECT coalesce((SELECT seq FROM memory.audit_heads WHERE chain_id = %s), 0)"
        lags = []
        for i in range(probes):
            org = f"ql-{i % 8}"
            before = c.execute(head, (org,)).fetchone()[0]
            c.execute("INSERT INTO ql_notes (org_id, user_id, content) VALUES (%s, 'u', 'quiet probe')", (org,))
            t0 = time.perf_counter()
            while c.execute(head, (org,)).fetchone()[0] <= before:
                assert time.perf_counter() - t0 < 30, "an entry was not chained within 30 s"
                time.sleep(0.0005)
            lags.append(1000 * (time.perf_counter() - t0))
            time.sleep(0.25)
        c.execute("DROP TABLE ql_notes")
    lags.sort()
    body = f"""Command: `make bench` (runs `bench/quiet_lag.py DSN {probes}` against a release build, `fsync = off`,
`memory.integrator_naptime` = {naptime}, `memory.integrator_delay` = {delay}).
Machine: {machine()}. Date: {time.strftime('%Y-%m-%d')}.
{probes} governed rows committed one at a time, 250 ms apart (8 tenants, deferred audit, nothing else writing), each
timed from its `COMMIT` until its chain's head shows it (polled every 0.5 ms, which the figures include).

- Lag: median **{statistics.median(lags):.1f} ms**, p90 {lags[int(0.9 * (len(lags) - 1))]:.1f} ms, max {lags[-1]:.1f} ms
  (the commit wakes the integrator of its chain; before wake-ups it waited for the integrator's next
  naptime, 100 ms by default)."""
    write_section("Integration lag on a quiet database (issue 15)", body)
    print(body)


if __name__ == "__main__":
    main()
