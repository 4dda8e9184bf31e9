#!/usr/bin/env bash
# Runs every benchmark against a release build in a throwaway cluster; results in bench/RESULTS.md.
#   bench/run.sh [ROWS] [RUNS]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
PG_CONFIG=${PG_CONFIG:-/usr/bin/pg_config} "$root/scripts/install-ext.sh"
# The background integrator serves the benchmark database (deferred audit, the default mode).
port=$(MEMORY_EXT_INTEGRATOR_DATABASES=postgres "$root/scripts/cluster.sh" start bench)
# The single-row benchmark also runs with PostgreSQL's default durable commits (the test clusters
# run with fsync = off).
dport=$(MEMORY_EXT_SERVER_OPTS="-c fsync=on" MEMORY_EXT_INTEGRATOR_DATABASES=postgres "$root/scripts/cluster.sh" start bench-durable)
trap 'for c in bench bench-durable bench-integrate-{1,2}; do "$root/scripts/cluster.sh" stop $c; done' EXIT
dsn="host=127.0.0.1 port=$port user=postgres dbname=postgres"
ddsn="host=127.0.0.1 port=$dport user=postgres dbname=postgres"
psql "$dsn" -q -c "CREATE EXTENSION IF NOT EXISTS memory_ext"
psql "$ddsn" -q -c "CREATE EXTENSION IF NOT EXISTS memory_ext"
cd "$root/bench"
"$root/.venv/bin/python" classify_bench.py "$dsn" "${1:-1000000}" "${2:-5}"
"$root/.venv/bin/python" audit_bench.py "$dsn" "$port" "${1:-1000000}" "${2:-5}" 20000
"$root/.venv/bin/python" single_row_bench.py "$dsn" "$port" 5 10 "$ddsn" "$dport"
"$root/.venv/bin/python" writes_vs_bare.py "$ddsn" "$dport" 15 4 bare,anchor,deferred,held,classify,clanchor
"$root/.venv/bin/python" cpu_under_load.py "$ddsn" "$dport" "/tmp/memory_ext-${MEMORY_EXT_CLUSTER_PREFIX:-}bench-durable/data" 5 8
"$root/.venv/bin/python" quiet_lag.py "$dsn" 40
# Integration by the background integrators: one per database against two (memory.integrator_workers).
idsns=()
for w in 1 2; do
  p=$(MEMORY_EXT_INTEGRATOR_DATABASES=postgres MEMORY_EXT_SERVER_OPTS="-c memory.integrator_workers=$w" \
    "$root/scripts/cluster.sh" start "bench-integrate-$w")
  idsns+=("host=127.0.0.1 port=$p user=postgres dbname=postgres")
done
"$root/.venv/bin/python" integration_bench.py 5 200000 "${idsns[@]}"
for w in 1 2; do "$root/scripts/cluster.sh" stop "bench-integrate-$w"; done
"$root/.venv/bin/python" feedback_bench.py "$dsn" "${1:-1000000}" "${2:-5}"
"$root/.venv/bin/python" retention_bench.py "$dsn" "${2:-5}"
"$root/.venv/bin/python" knowledge_bench.py "$dsn" "${1:-1000000}" "${2:-5}"
"$root/.venv/bin/python" detector_bench.py "$dsn" "${1:-1000000}" "${2:-5}" 200000
"$root/.venv/bin/python" consent_bench.py "$dsn" "$port" 5 10 2000
"$root/.venv/bin/python" ingest_bench.py "$dsn" 100000 "${2:-5}"
# The agent API at a million memories (issue 35): forget and recall against same-run floors.
"$root/.venv/bin/python" agent_api_bench.py "$dsn" "${1:-1000000}" "${2:-5}" 500
# memory-mcp's recall and remember through MCP (HTTP with a JWT, by bench/mcp_raw.py and the SDK; stdio)
# against the same calls from psycopg (release binary).
cargo build --release -p memory-mcp
"$root/.venv/bin/python" mcp_recall.py "$dsn" 100000 500 "$root/target/release/memory-mcp"
# Hybrid recall (issue 36): needs pgvector, built from ../shared/vendor/pgvector when not installed.
if "$root/scripts/pgvector.sh" available && "$root/scripts/pgvector.sh" install; then
  ROWS=${1:-1000000} "$root/.venv/bin/python" hybrid_recall.py "$dsn" "$port"
else
  echo "== hybrid_recall.py SKIPPED: no pgvector"
fi
# PostgreSQL 15 and 18 side by side (issue 37), each cluster of its own.
"$root/bench/pg_versions.sh" 3 10 "${1:-1000000}"
