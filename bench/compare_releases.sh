#!/usr/bin/env bash
# Two installations of memory_ext (each a PostgreSQL install with its own memory_ext: e.g. the
# released 0.2.0 in a copy of the server tree and this build in the system's), measured against
# each other on this machine, alternating:
#   bench/compare_releases.sh OLD_PG_CONFIG NEW_PG_CONFIG [PASSES]
# Each pass restarts both clusters and runs bench/compare_builds.py on each (single-row pgbench
# TPS, bare and deferred, 1 and 64 tenants, 8 clients, 10 s, fsync = off), OLD then NEW, PASSES
# times (default 3). Unlike compare_builds.sh (two libraries under one SQL), each side has its own
# install script, so releases whose SQL differs compare. With BATCH_ROWS (default 200000; 0: none)
# each pass also runs bench/compare_batch.py on each side: INSERT ... SELECT of that many rows,
# governed against bare.
set -euo pipefail
old=${1:?OLD_PG_CONFIG}; new=${2:?NEW_PG_CONFIG}; passes=${3:-3}
root=$(cd "$(dirname "$0")/.." && pwd)
cluster="$root/scripts/cluster.sh"
trap 'PG_CONFIG=$old "$cluster" stop cmp-old; PG_CONFIG=$new "$cluster" stop cmp-new' EXIT
port_old=$(PG_CONFIG=$old MEMORY_EXT_INTEGRATOR_DATABASES=postgres "$cluster" start cmp-old)
port_new=$(PG_CONFIG=$new MEMORY_EXT_INTEGRATOR_DATABASES=postgres "$cluster" start cmp-new)
setup=setup
cd "$root/bench"
for i in $(seq 1 "$passes"); do
  for b in old new; do
    if [ $b = old ]; then port=$port_old; pgc=$old; else port=$port_new; pgc=$new; fi
    PG_CONFIG=$pgc "$cluster" restart cmp-$b >/dev/null
    sleep 2
    PATH="$("$pgc" --bindir):$PATH" "$root/.venv/bin/python" compare_builds.py "$port" "$b (pass $i)" $setup
    if [ "${BATCH_ROWS:-200000}" != 0 ]; then
      "$root/.venv/bin/python" compare_batch.py "$port" "$b (pass $i)" "${BATCH_ROWS:-200000}" $setup
    fi
  done
  setup=""
done
