#!/usr/bin/env bash
# The scale-out benchmark (issue 17): a release build, one single-node cluster and one Citus cluster
# (coordinator + 2 workers) on this machine; results in bench/RESULTS.md.
#   bench/citus_run.sh [ROUNDS] [SECONDS] [BATCH]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
"$root/scripts/citus.sh" install
cargo pgrx install --release --pg-config "${PG_CONFIG:-/usr/bin/pg_config}"
install -m 644 "$root/sql/released/memory_ext--0.1.0.sql" "$(/usr/bin/pg_config --sharedir)/extension/"
single=$("$root/scripts/cluster.sh" start benchsingle)
read -r coord _ _ < <("$root/scripts/citus.sh" start benchcitus)
trap '"$root/scripts/cluster.sh" stop benchsingle; "$root/scripts/citus.sh" stop benchcitus' EXIT
for p in "$single" "$coord"; do
  psql -X -q -h 127.0.0.1 -p "$p" -U postgres -d postgres -c "CREATE EXTENSION IF NOT EXISTS memory_ext"
done
cd "$root/bench"
"$root/.venv/bin/python" citus_bench.py "$single" "$coord" "${1:-3}" "${2:-10}" "${3:-100000}"
