"""Issue 54: where the writers' CPU goes, by part, for single-row inserts into the governed table and its references.

For each table of single_row_bench.py (governed, bare, the PL/pgSQL anchor, classification only) pgbench runs
8 clients on 64 tenants for SECONDS + 4 s while `perf record -F 499 --call-graph dwarf` samples the 8 backends it
started for SECONDS. Each sample goes to the first part below whose function is on its stack; a part's µs of CPU a
transaction is its samples / 499 over the sampled seconds' transactions at the run's TPS. The parts of a transaction every
table has (commit, parse and plan, the table's own heap and index, client I/O) vary by 10-15% from run to run, so
compare the parts that differ: the extension's triggers and PostgreSQL's trigger work. Needs perf, and root (perf
attaches to the server's processes); a quiet machine.

Usage: writer_profile.py DSN PORT [SECONDS (10)] [TABLES (deferred,bare,anchor,classify)]
The cluster must have single_row_bench.py's tables (SETUP) or they are made; for the governed table it should run
the background integrator, as writes_vs_bare.py's does.
"""
import collections
import os
import re
import subprocess
import sys
import tempfile
import time

import psycopg

from audit_bench import pgbench_command
from single_row_bench import SETUP, script_for, set_mode

# (part, the function names any of which on a sample's stack puts it there), first match wins.
PARTS = [
    ("audit trigger: the pending row's insert", ("memory_audit_trigger",), ("bulk::Opened",)),
    ("audit trigger: HMAC and content hash", ("memory_audit_trigger",), ("PendingSigner", "sha2::", "sha256")),
    ("audit trigger: the one-row transition read", ("memory_audit_trigger",), ("transition::",)),
    ("audit trigger: appender setup and teardown", ("memory_audit_trigger",),
     ("Appender::new", "drop_in_place<memory_ext::audit::append::Appender>")),
    ("audit trigger: SPI connection", ("memory_audit_trigger",), ("SPI_connect", "SPI_finish")),
    ("audit trigger: the rest", ("memory_audit_trigger",), ()),
    ("classification trigger", ("memory_classify_trigger",), ()),
    ("the anchor's PL/pgSQL trigger", ("plpgsql_exec_trigger",), ()),
    ("PostgreSQL's trigger work", ("CopyTriggerDesc", "TransitionCaptureState", "TransitionTableAddTuple", "tuplestore_",
                                   "AfterTrigger"), ()),
    ("the rest (commit, parse and plan, executor, the table, client I/O)", ("",), ()),
]


def part_of(stack):
    joined = " | ".join(stack)
    for name, outer, inner in PARTS:
        if any(o in joined for o in outer) and (not inner or any(i in joined for i in inner)):
            return name
    return PARTS[-1][0]


def stacks(perf_data):
    """The stacks (function names, leaf first) of `perf script`'s samples."""
    text = subprocess.run(["perf", "script", "-i", perf_data], capture_output=True, text=True, check=True).stdout
    for sample in text.split("\n\n"):
        lines = [ln.strip() for ln in sample.strip().split("\n")][1:]
        if lines:
            yield [re.sub(r"\+0x[0-9a-f]+$", "", re.sub(r"^[0-9a-f]+\s+", "", ln).split(" (")[0]) for ln in lines]


def profile(dsn, port, db, variant, seconds):
    """µs of CPU a transaction by part, and the run's TPS."""
    set_mode(dsn, db, "deferred")
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as f:
        f.write(script_for(variant, 64))
    os.chmod(f.name, 0o644)
    run = subprocess.Popen(pgbench_command(port, f.name, 8, seconds + 4, db), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    data = os.path.join(tempfile.gettempdir(), f"writer_profile_{os.getpid()}.perf")
    try:
        time.sleep(2)
        # pgbench's backends (as cpu_under_load.py finds them).
        with psycopg.connect(dsn, autocommit=True) as c:
            backends = [r[0] for r in c.execute("SELECT pid FROM pg_stat_activity WHERE application_name = 'pgbench'")]
        subprocess.run(["perf", "record", "-q", "-F", "499", "--call-graph", "dwarf,8192", "-o", data,
                        "-p", ",".join(map(str, backends)), "--", "sleep", str(seconds)], check=True, capture_output=True)
    finally:
        out, _ = run.communicate()
        os.unlink(f.name)
    tps = float(re.search(r"tps = ([0-9.]+)", out).group(1))
    counts = collections.Counter(part_of(s) for s in stacks(data))
    os.unlink(data)
    # The sampled seconds' transactions at the run's rate (a commit count around perf would also take in its
    # start and its writing out).
    tx = tps * seconds
    return {name: 1e6 * counts[name] / 499 / tx for name, _, _ in PARTS}, tps


def main():
    dsn, port = sys.argv[1], int(sys.argv[2])
    seconds = int(sys.argv[3]) if len(sys.argv) > 3 else 10
    variants = sys.argv[4].split(",") if len(sys.argv) > 4 else ["deferred", "bare", "anchor", "classify"]
    db = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("CREATE EXTENSION IF NOT EXISTS memory_ext")
        if not c.execute("SELECT to_regclass('sr_deferred') IS NOT NULL").fetchone()[0]:
            c.execute(SETUP)
    results = {v: profile(dsn, port, db, v, seconds) for v in variants}
    print(f"Command: `bench/writer_profile.py DSN PORT {seconds} {','.join(variants)}`; µs of the writers' CPU a transaction"
          f" (TPS of the sampled runs: {', '.join(f'{v} {t:,.0f}' for v, (_, t) in results.items())}).\n")
    print("| part | " + " | ".join(variants) + " |")
    print("|---|" + "---|" * len(variants))
    for name, _, _ in PARTS:
        print(f"| {name} | " + " | ".join(f"{r[name]:.1f}" if r[name] >= 0.05 else "" for r, _ in results.values()) + " |")
    print("| all | " + " | ".join(f"{sum(r.values()):.1f}" for r, _ in results.values()) + " |")


if __name__ == "__main__":
    main()
