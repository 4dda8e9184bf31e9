#!/usr/bin/env bash
# Two builds of memory_ext.so measured against each other, alternating, on this machine:
#   bench/compare_builds.sh OLD.so NEW.so [PASSES]
# (make each with `cargo pgrx install --release` and copy /usr/lib/postgresql/15/lib/memory_ext.so
# away). Each pass installs one build, restarts the clusters (the library is preloaded) and runs
#  - bench/compare_builds.py: single-row pgbench TPS, bare and deferred, 1 and 64 tenants;
#  - bench/integration_bench.py 4 200000: one and two background integrators (printed, not
#    written to RESULTS.md).
# The passes alternate OLD, NEW, OLD, NEW, ... (PASSES of each, default 3); NEW stays installed.
set -euo pipefail
old=${1:?OLD.so}; new=${2:?NEW.so}; passes=${3:-3}
root=$(cd "$(dirname "$0")/.." && pwd)
lib=$(/usr/bin/pg_config --pkglibdir)/memory_ext.so
cluster="$root/scripts/cluster.sh"
trap 'for c in compare compare-integrate-1 compare-integrate-2; do "$cluster" stop $c; done; install -m 755 "$new" "$lib"' EXIT
# (install writes a new file: a running server keeps the one it mapped until it restarts.)
install -m 755 "$old" "$lib"
port=$(MEMORY_EXT_INTEGRATOR_DATABASES=postgres "$cluster" start compare)
ports=()
for w in 1 2; do
  ports+=("$(MEMORY_EXT_INTEGRATOR_DATABASES=postgres MEMORY_EXT_SERVER_OPTS="-c memory.integrator_workers=$w" \
    "$cluster" start "compare-integrate-$w")")
done
setup=setup
cd "$root/bench"
for i in $(seq 1 "$passes"); do
  for b in old new; do
    so=$old; [ $b = new ] && so=$new
    install -m 755 "$so" "$lib"
    for c in compare compare-integrate-1 compare-integrate-2; do "$cluster" restart $c >/dev/null; done
    sleep 2
    "$root/.venv/bin/python" compare_builds.py "$port" "$b (pass $i)" $setup
    MEMORY_EXT_BENCH_PRINT=1 "$root/.venv/bin/python" integration_bench.py 4 200000 \
      "host=127.0.0.1 port=${ports[0]} user=postgres dbname=postgres" \
      "host=127.0.0.1 port=${ports[1]} user=postgres dbname=postgres" | grep -E '^\| [12] \|' | awk '!seen[$0]++' | sed "s/^/$b (pass $i) integration: /"
  done
  setup=""
done
