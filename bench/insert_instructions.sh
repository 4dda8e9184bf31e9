#!/usr/bin/env bash
# Issue 54: instructions per single-row INSERT, counted by valgrind's callgrind in a single-user
# backend (`postgres --single`): the same count for the same build and input, whatever else the
# machine does, so two builds compare to the instruction where TPS on this disk drifts by 2x.
# It counts instructions, not time (cache misses, WAL flushes and the background integrator are
# not in it; in deferred mode nothing is chained): a companion to writes_vs_bare.py, not its
# substitute. SHA-256 runs its portable code under valgrind (no SHA extensions), so the hashing
# counts several times what it costs on the CPU.
#   bench/insert_instructions.sh [TABLES (sr_bare sr_classify sr_anchor sr_deferred)]
# Tables as bench/single_row_bench.py makes them; each: N = 100 and 1,100 inserts of one row, one
# transaction each (1 tenant in 64 rotating, 8 users), and (count(1,100) - count(100)) / 1,000.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$("${PG_CONFIG:-/usr/bin/pg_config}" --bindir)
tables=${*:-sr_bare sr_classify sr_anchor sr_deferred}
name=insert-instructions
dir=/tmp/memory_ext-$name
port=$("$root/scripts/cluster.sh" start $name)
trap '"$root/scripts/cluster.sh" stop $name; rm -rf "$dir.work"' EXIT
(cd "$root/bench" && "$root/.venv/bin/python" -c "
import psycopg, single_row_bench as s
with psycopg.connect('host=127.0.0.1 port=$port user=postgres dbname=postgres', autocommit=True) as c:
    c.execute('CREATE EXTENSION memory_ext')
    c.execute(s.SETUP)
    c.execute('ALTER DATABASE postgres SET memory.audit_mode = deferred')
")
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
as_pg "$bin/pg_ctl" -D "$dir/data" -m fast stop >/dev/null
count() {  # count TABLE N -> instructions of the whole single-user run
  rm -rf "$dir.work"; cp -a "$dir/data" "$dir.work"
  python3 - "$1" "$2" > "$dir/in.sql" <<'PY'
import sys
t, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    print(f"INSERT INTO {t} (org_id, user_id, content, source_type) VALUES ('org-{i % 64}', 'user-{i % 8}', "
          f"'User prefers concise answers; agent {i % 8} note 0.{i * 7919 % 1000003}', 'preference');\n")
PY
  [ "$(id -u)" = 0 ] && chown -R postgres "$dir.work" "$dir"
  as_pg valgrind --tool=callgrind --callgrind-out-file="$dir/cg.out" "$bin/postgres" --single -D "$dir.work" \
    -c shared_preload_libraries=memory_ext -c fsync=off -j postgres < "$dir/in.sql" > "$dir/run.log" 2>&1
  grep -q ERROR "$dir/run.log" && { grep -m3 ERROR "$dir/run.log" >&2; exit 1; }
  sed -n 's/^summary: //p' "$dir/cg.out"
}
echo "| table | instructions per INSERT |"
echo "|---|---|"
for t in $tables; do
  a=$(count "$t" 100); b=$(count "$t" 1100)
  echo "| $t | $(( (b - a) / 1000 )) |"
done
