"""Issue 54: governed single-row inserts against the same bare table, TPS side by side.

The variants of single_row_bench.py that issue 54's goal compares (the bare table, and the
governed table in the default deferred audit mode with the background integrator running), with
others for reference: the issue's physical anchor (the bare table plus a PL/pgSQL row trigger writing
one pending-shaped row); the governed table while the integration lock is held elsewhere (the
writers alone: what the integrator's second write of each event costs them), alone and with the
integrator's WAL bytes or its CPU put back without the other (heldwal, heldcpu: which of the two
the writers lose to); the governed table with classification only; and classification plus the
anchor's trigger (what the audit trigger costs beyond a PL/pgSQL trigger writing a row of the same
size). On 1 and 64 tenants,
in one cluster: pgbench, 8 clients, SECONDS per run, ROUNDS rounds, every variant once a round,
the order alternating. A round's ratio (a variant's TPS over the bare table's, seconds apart) is
the figure: the disk's flush rate drifts by 2x within minutes, so many short rounds and the median
of their ratios (with its interquartile range) are what is reported, beside the load average and
WAL bytes per transaction of each variant from one further run; every chain is verified afterwards.

Usage: writes_vs_bare.py DSN PORT [ROUNDS (15)] [SECONDS (4)] [VARIANTS (all: bare,anchor,deferred,held,heldwal,heldcpu,classify,clanchor)]
During the governed runs a probe measures how long an event waits to be chained, and what is still
pending when each run ends is counted: what the writers' speed costs the tamper-evidence window.
The cluster at DSN/PORT must run the background integrator for its database
(memory.integrator_databases); bench/run.sh's bench-durable cluster has PostgreSQL's default
durable commits, which is what the issue measures.
"""
import os
import statistics
import sys
import time

import psycopg

from common import machine, write_section
from single_row_bench import matrix, pct, pgbench, script_for, set_mode


def wal_per_tx(dsn, port, db, variant, tenants, seconds):
    """WAL bytes per transaction of one pgbench run (the governed one's events chained inside it)."""
    set_mode(dsn, db, "deferred")
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SELECT memory.audit_integrate()")
        (start,) = c.execute("SELECT pg_current_wal_insert_lsn()").fetchone()
        (n0,) = c.execute(f"SELECT count(*) FROM sr_{variant}").fetchone()
    pgbench(port, db, script_for(variant, tenants), 8, seconds)
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SELECT memory.audit_integrate()")
        (n1,) = c.execute(f"SELECT count(*) FROM sr_{variant}").fetchone()
        (wal,) = c.execute("SELECT pg_current_wal_insert_lsn() - %s::pg_lsn", (start,)).fetchone()
    return float(wal) / max(1, n1 - n0)


VARIANTS = {
    "bare": "bare table",
    "anchor": "bare + a PL/pgSQL AFTER ROW trigger writing one fixed pending-shaped row (the issue's anchor)",
    "deferred": "**governed** (classification, signed pending entry; the background integrator chaining)",
    "held": "governed, the integration lock held by another session during the run (the writers alone)",
    "heldwal": "held, plus the integrator's WAL bytes (a logical message every 100 ms) without its CPU",
    "heldcpu": "held, plus the integrator's CPU (a busy loop every 100 ms) without its WAL",
    "classify": "governed with classification only (no audit)",
    "clanchor": "classification only + the anchor's trigger (the audit replaced by a PL/pgSQL row insert)",
}


def quartiles(xs):
    q = statistics.quantiles(xs, n=4) if len(xs) > 1 else [xs[0]] * 3
    return q[0], q[2]


def main():
    dsn, port = sys.argv[1], int(sys.argv[2])
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 15
    seconds = int(sys.argv[4]) if len(sys.argv) > 4 else 4
    # The variants to run (bare and deferred always): all by default.
    chosen = sys.argv[5].split(",") if len(sys.argv) > 5 else list(VARIANTS)
    variants = {v: label for v, label in VARIANTS.items() if v in chosen or v in ("bare", "deferred")}
    db = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("CREATE EXTENSION IF NOT EXISTS memory_ext")
    load0 = os.getloadavg()
    m = matrix(dsn, port, rounds, seconds, variants=list(variants), probe="deferred")
    load1 = os.getloadavg()
    tps = m["tps"]
    # Each round's TPS of a variant over the bare table's of the same round (%).
    ratios = {(v, t): [100 * x / b for x, b in zip(tps[(v, t)], tps[("bare", t)])] for v in variants for t in (1, 64)}
    d = {t: statistics.median(ratios[("deferred", t)]) for t in (1, 64)}
    lines = []
    for t in (1, 64):
        for v, label in variants.items():
            lo, hi = quartiles(ratios[(v, t)])
            ratio = f"**{d[t]:.1f}%**" if v == "deferred" else f"{statistics.median(ratios[(v, t)]):.1f}%"
            lines.append(f"| {t} | {label} | {statistics.median(tps[(v, t)]):,.0f} | {ratio} | {lo:.1f}–{hi:.1f}% |")
    per_round = "; ".join(f"{t} tenant{'s' if t > 1 else ''}: " + ", ".join(f"{r:.1f}" for r in ratios[("deferred", t)]) for t in (1, 64))
    # Full-page images after a checkpoint would make the WAL figure depend on when one fell.
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("ALTER SYSTEM SET full_page_writes = off")
        c.execute("SELECT pg_reload_conf()")
    try:
        wal = {v: wal_per_tx(dsn, port, db, v, 64, max(seconds, 5)) for v in ("bare", "anchor", "deferred")}
    finally:
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute("ALTER SYSTEM RESET full_page_writes")
            c.execute("SELECT pg_reload_conf()")
    with psycopg.connect(dsn, autocommit=True) as c:
        (fsync,) = c.execute("SHOW fsync").fetchone()
    verdict = "met" if min(d.values()) >= 80 else "**not met**"
    lag_text = "; ".join(
        f"{t} tenant{'s' if t > 1 else ''}: median {1000 * statistics.median(m['lags'][t]):.0f} ms, p99 {1000 * pct(m['lags'][t], 99):.0f} ms, "
        f"max {1000 * max(m['lags'][t]):.0f} ms ({len(m['lags'][t])} events)" for t in (1, 64) if m["lags"][t])
    left_text = "; ".join(f"{t} tenant{'s' if t > 1 else ''}: median {statistics.median(m['left'][t]):,.0f}, max {max(m['left'][t]):,}"
                          for t in (1, 64) if m["left"][t])
    named = "" if len(sys.argv) <= 5 else " " + sys.argv[5]
    body = f"""Command: `bench/writes_vs_bare.py DSN PORT {rounds} {seconds}{named}` (release build; a cluster with `fsync = {fsync}`
and the background integrator serving the database). Machine: {machine()}. Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.
Load average (1/5/15 min) at the start {load0[0]:.1f}/{load0[1]:.1f}/{load0[2]:.1f}, at the end {load1[0]:.1f}/{load1[1]:.1f}/{load1[2]:.1f}.
pgbench, 8 clients, {seconds} s a run, {rounds} rounds; in each round every variant runs once, back to back, the order
alternating by round, and a variant's ratio for the round is its TPS over the bare table's of the same round. One `INSERT`
of a memory-table row a transaction. The variants are measured side by side because this machine's disk flushes at a rate
that drifts by 2x within minutes (the bare table alone ran at {min(min(tps[('bare', t)]) for t in (1, 64)):,.0f}-{max(max(tps[('bare', t)]) for t in (1, 64)):,.0f} TPS in this run):
only ratios within a round are comparable.

| tenants | variant | TPS (median) | of bare, median of the rounds' ratios | interquartile range of the ratios |
|---|---|---|---|---|
{chr(10).join(lines)}

- Governed single-row inserts: **{d[1]:.1f}%** of bare with 1 tenant and **{d[64]:.1f}%** with 64 (target at least 80%: {verdict}).
- Each round's governed/bare ratio (%): {per_round}.
- How long an event waited to be chained during the governed runs (a probe committing one on its own chain 200 ms after the last was chained,
  polled every 10 ms): {lag_text}. Entries still pending when a governed run ended: {left_text}.
- WAL per transaction (one further run of each, 64 tenants, the governed run's events chained, `full_page_writes = off`
  for it): bare {wal['bare']:,.0f} B, anchor {wal['anchor']:,.0f} B, governed {wal['deferred']:,.0f} B.
- Every chain verified afterwards ({m['chained']:,} chained entries).
"""
    write_section("Single-row governed inserts against bare: TPS (issue 54)", body)
    print(body)


if __name__ == "__main__":
    main()
