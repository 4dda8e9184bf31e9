"""Integration lag on a quiet database (issue 15): one audit event committed at a time, 250 ms
apart (single_row_bench.Probe: `memory.audit_append`, deferred), each timed from its COMMIT until
it is in the log (polled every 0.5 ms). The commit wakes the background integrator of its chain,
which chains it in the round it starts then.

Usage: quiet_lag.py DSN [PROBES]
DSN: a database served by a background integrator (memory.integrator_databases); nothing else
should write to it meanwhile.
"""
import statistics
import sys
import time

import psycopg

from common import machine, write_section
from single_row_bench import Probe


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
        c.execute("SELECT memory.audit_integrate()")
    time.sleep(1)
    probe = Probe(dsn, gap=0.25, poll=0.0005, count=probes)
    probe.run()
    lags = sorted(1000 * x for x in probe.lags)
    assert lags[-1] != float("inf"), "an event was not chained within 30 s"
    body = f"""Command: `make bench` (runs `bench/quiet_lag.py DSN {probes}` against a release build, `fsync = off`,
`memory.integrator_naptime` = {naptime}, `memory.integrator_delay` = {delay}).
Machine: {machine()}. Date: {time.strftime('%Y-%m-%d')}.
{probes} audit events (`memory.audit_append`, deferred) committed one at a time, 250 ms apart, nothing else writing,
each timed from its `COMMIT` until it is in the log (polled every 0.5 ms, which the figures include).

- Lag: median **{statistics.median(lags):.1f} ms**, p90 {lags[int(0.9 * (len(lags) - 1))]:.1f} ms, max {lags[-1]:.1f} ms
  (the commit wakes the integrator of its chain; before wake-ups it waited for the integrator's next
  naptime, 100 ms by default)."""
    write_section("Integration lag on a quiet database (issue 15)", body)
    print(body)


if __name__ == "__main__":
    main()
