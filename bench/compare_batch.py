"""One pass of the batch side of bench/compare_releases.sh: `INSERT ... SELECT` of ROWS memories
into a bare table and into a table governed by memory.govern (the memory-table shape of
bench/classify_bench.py: uuid key, org, weight, created_at; the seed rules and the detectors),
three times each, alternating, each after TRUNCATE and CHECKPOINT; prints one line: the medians
and governed/bare as rows/s.

Usage: compare_batch.py PORT LABEL ROWS [setup]   ("setup" makes the tables and the source rows)
"""
import sys

import psycopg

from classify_bench import SETUP
from common import median, timed


def main():
    port, label, rows = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    dsn = f"host=127.0.0.1 port={port} user=postgres dbname=postgres"
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("CREATE EXTENSION IF NOT EXISTS memory_ext")
        if sys.argv[4:] == ["setup"]:
            c.execute(SETUP.replace("%(rows)s", str(rows)))
        times = {"bare": [], "governed": []}
        for r in range(3):
            for name in (["bare", "governed"] if r % 2 == 0 else ["governed", "bare"]):
                c.execute(f"TRUNCATE bench_memory_{name}")
                c.execute("CHECKPOINT")
                times[name].append(timed(c, f"INSERT INTO bench_memory_{name} (content, source_files, source_type) SELECT * FROM bench_src"))
    b, g = median(times["bare"]), median(times["governed"])
    print(f"{label}: batch {rows:,} rows bare {b:.2f} s governed {g:.2f} s ratio {100 * b / g:.1f}%", flush=True)


if __name__ == "__main__":
    main()
