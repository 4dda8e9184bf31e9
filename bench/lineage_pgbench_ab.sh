#!/usr/bin/env bash
# Issue 50's insert ratio, the derived_from index as main had it (GIN without a pending list,
# `fastupdate = off`) against this build's (GIN's pending list of 4 MB, moved into the tree by the
# background integrator): one build, one cluster, two fresh databases of the same history,
# bench/lineage_pgbench.py on each in turn, the order alternating by pass.
#   lin_off  this build, then ALTER INDEX ... SET (fastupdate = off) on both derived_from indexes
#   lin_on   this build as installed
# Run against a fresh cluster of scripts/cluster.sh whose integrator serves both (a release build:
# scripts/install-ext.sh):
#   MEMORY_EXT_INTEGRATOR_DATABASES=lin_off,lin_on scripts/cluster.sh start linab
#   bench/lineage_pgbench_ab.sh PORT [PASSES] [ROUNDS] [TX] [CALLS]
# Each pass prints lineage_pgbench.py's summary for each database; compare the medians of the
# passes (pgbench TPS ratio, the cluster's CPU a transaction, psycopg's backend CPU).
set -euo pipefail
port=${1:?port}; passes=${2:-6}; rounds=${3:-2}; tx=${4:-5000}; calls=${5:-300}
here=$(cd "$(dirname "$0")" && pwd)
py=${PYTHON:-$here/../.venv/bin/python}
bin=$("${PG_CONFIG:-/usr/bin/pg_config}" --bindir)
psql() { "$bin/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres "$@"; }
for d in lin_off lin_on; do
  if [ -z "$(psql -d postgres -Atc "SELECT 1 FROM pg_database WHERE datname = '$d'")" ]; then
    psql -d postgres -c "CREATE DATABASE $d"
    psql -d "$d" -c "CREATE EXTENSION memory_ext CASCADE"
  fi
done
psql -d lin_off -c "ALTER INDEX memory.observations_derived_from SET (fastupdate = off); ALTER INDEX memory.observations_archive_derived_from SET (fastupdate = off)"
for p in $(seq 0 $((passes - 1))); do
  if [ $((p % 2)) = 0 ]; then order="lin_off lin_on"; else order="lin_on lin_off"; fi
  for d in $order; do
    echo "=== pass $p: $d ($(date -u +%T), load $(cut -d' ' -f1-3 /proc/loadavg))"
    "$py" "$here/lineage_pgbench.py" "postgresql://postgres@127.0.0.1:$port/$d" "$port" "$rounds" "$tx" "$calls" 1 100 10000 \
      | grep -E '^(pgbench|psycopg|load)'
  done
done
