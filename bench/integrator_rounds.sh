#!/usr/bin/env bash
# Issue 54: the background integrator's CPU at a fixed write rate, two builds side by side:
#   bench/integrator_rounds.sh OLD.so NEW.so [PASSES] [RATES] [SECONDS]
# (make each with scripts/install-ext.sh and copy /usr/lib/postgresql/15/lib/memory_ext.so away).
# One durable cluster (fsync = on) with the background integrator for database postgres and the
# tables of bench/single_row_bench.py. Each pass installs one build, restarts the cluster (the
# library is preloaded), and for each rate (default 640 and 3000 transactions a second) integrates
# what is pending, vacuums memory.audit_pending, and runs pgbench on the governed table (8 clients,
# 64 tenants, `-R RATE -T SECONDS`, default 15 s): the integrator's CPU over the run
# (se.sum_exec_runtime in /proc/<pid>/sched) per transaction and per second. At a fixed rate both
# builds make rounds of the same size (one every memory.integrator_delay), so the low rate shows
# what a round costs and the high one what an event does. Passes alternate OLD, NEW, OLD, ...
# (PASSES of each, default 3); NEW stays installed. Every chain is verified at the end.
set -euo pipefail
old=${1:?OLD.so}; new=${2:?NEW.so}; passes=${3:-3}; rates=${4:-640 3000}; seconds=${5:-15}
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$(/usr/bin/pg_config --bindir)
lib=$(/usr/bin/pg_config --pkglibdir)/memory_ext.so
cluster="$root/scripts/cluster.sh"
name=integrator-rounds
start() { MEMORY_EXT_SERVER_OPTS="-c fsync=on" MEMORY_EXT_INTEGRATOR_DATABASES=postgres "$cluster" "$1" $name; }
trap '"$cluster" stop $name; install -m 755 "$new" "$lib.new" && mv -f "$lib.new" "$lib"' EXIT
# (A new file renamed over the old: a running server keeps the one it mapped until it restarts.)
install -m 755 "$old" "$lib.new" && mv -f "$lib.new" "$lib"
port=$(start start)
host=/tmp/memory_ext-${MEMORY_EXT_CLUSTER_PREFIX:-}$name
q() { psql -h "$host" -p "$port" -U postgres -d postgres -Atqc "$1"; }
q "CREATE EXTENSION memory_ext"
(cd "$root/bench" && "$root/.venv/bin/python" -c "
import psycopg, single_row_bench as s
with psycopg.connect('host=$host port=$port user=postgres dbname=postgres', autocommit=True) as c:
    c.execute(s.SETUP)
")
script=$(mktemp)
(cd "$root/bench" && "$root/.venv/bin/python" -c "import single_row_bench as s; print(s.script_for('deferred', 64))") > "$script"
[ "$(id -u)" = 0 ] && chmod 644 "$script"
for i in $(seq 1 "$passes"); do
  for b in old new; do
    so=$old; [ $b = new ] && so=$new
    install -m 755 "$so" "$lib.new" && mv -f "$lib.new" "$lib"
    start restart >/dev/null
    sleep 2
    for rate in $rates; do
      q "SELECT memory.audit_integrate()" >/dev/null
      q "VACUUM memory.audit_pending"
      pid=$(q "SELECT pid FROM pg_stat_activity WHERE backend_type = 'memory_ext integrator'")
      a=$(awk '/se.sum_exec_runtime/ {print $3}' "/proc/$pid/sched")
      out=$("$bin/pgbench" -h "$host" -p "$port" -U postgres -n -c 8 -j 8 -T "$seconds" -R "$rate" -f "$script" postgres 2>&1)
      sleep 0.5
      z=$(awk '/se.sum_exec_runtime/ {print $3}' "/proc/$pid/sched")
      n=$(sed -n 's/number of transactions actually processed: \([0-9]*\).*/\1/p' <<< "$out")
      python3 -c "print(f'pass $i $b rate $rate: {$n} transactions, integrator {($z - $a) * 1000 / $n:.2f} µs a transaction, {($z - $a) / ($seconds + 0.5):.2f} ms a second')"
    done
  done
done
rm -f "$script"
q "SELECT memory.audit_integrate()" >/dev/null
q "SELECT 'chains ' || count(*) || ', all verify: ' || bool_and(ok) FROM memory.audit_verify()"
