#!/usr/bin/env bash
# The Citus layer (SPEC §10): a coordinator and two workers on local ports, memory_ext distributed,
# the scale-out tests run through the coordinator from Python (psycopg).
# Runs where Citus is installed or its source is vendored (../shared/vendor/citus); says so and
# passes when neither is there.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
if ! "$root/scripts/citus.sh" available; then
  "$(dirname "$0")/../../scripts/skipped.sh" citus "no citus.so in $(/usr/bin/pg_config --pkglibdir) and no source in ../shared/vendor/citus"
  exit 0
fi
"$root/scripts/citus.sh" install
export MEMORY_EXT_CITUS_CLUSTER=${MEMORY_EXT_CITUS_CLUSTER:-citustest}
"$root/scripts/citus.sh" stop "$MEMORY_EXT_CITUS_CLUSTER" >/dev/null 2>&1 || true
trap '"$root/scripts/citus.sh" stop "$MEMORY_EXT_CITUS_CLUSTER"' EXIT
"$root/.venv/bin/pytest" -q "$root/tests/citus" "$@"
