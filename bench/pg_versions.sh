#!/usr/bin/env bash
# memory_ext on PostgreSQL 15 and 18 side by side (issue 37): release builds installed into each
# server, one cluster each (fsync = off, the background integrator serving `postgres`), then
# bench/pg_versions.py alternating the two; its section goes to bench/RESULTS.md.
#   bench/pg_versions.sh [ROUNDS] [SECONDS] [ROWS]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
pg15=${PG15_CONFIG:-/usr/bin/pg_config}
"$root/scripts/pg18.sh" install >/dev/null
pg18=${PG18_CONFIG:-$("$root/scripts/pg18.sh" config)}
PG_CONFIG=$pg15 "$root/scripts/install-ext.sh"
PG_CONFIG=$pg18 "$root/scripts/install-ext.sh"
cluster="$root/scripts/cluster.sh"
trap 'PG_CONFIG=$pg15 "$cluster" stop pv-15; PG_CONFIG=$pg18 "$cluster" stop pv-18' EXIT
p15=$(PG_CONFIG=$pg15 MEMORY_EXT_INTEGRATOR_DATABASES=postgres "$cluster" start pv-15)
p18=$(PG_CONFIG=$pg18 MEMORY_EXT_INTEGRATOR_DATABASES=postgres "$cluster" start pv-18)
cd "$root/bench"
"$root/.venv/bin/python" pg_versions.py pg15 "$p15" pg18 "$p18" "${1:-3}" "${2:-10}" "${3:-1000000}"
