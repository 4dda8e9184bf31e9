#!/usr/bin/env bash
# Throwaway cluster of the PostgreSQL of $PG_CONFIG (default /usr/bin/pg_config, Debian's 15;
# scripts/pg18.sh config for 18) owned by `postgres` (Postgres refuses to run as root).
#   cluster.sh start NAME   -> prints the port; data in /tmp/memory_ext-NAME, socket in the same dir
#   cluster.sh stop NAME
#   cluster.sh port NAME
#   cluster.sh restart NAME -> same data and options, a new server (loads a newly installed library)
#   cluster.sh crash NAME   -> as restart, but stopped as a crash would stop it (pg_ctl -m immediate: no
#                              shutdown checkpoint; the new server recovers from the WAL)
#   cluster.sh standby NAME PRIMARY -> a hot standby of cluster PRIMARY (pg_basebackup -R, streaming);
#                                      prints its port
# Idempotent: start on a running cluster prints its port.
# With MEMORY_EXT_FAKETIME_FILE set, the server runs under libfaketime and reads its clock offset
# from that file on every call (e.g. "+0", "+3024000"): tests move a running cluster into a later month.
# MEMORY_EXT_SERVER_OPTS adds server options (e.g. "-c wal_level=logical"); MEMORY_EXT_PRELOAD_FIRST
# names libraries preloaded before memory_ext (Citus must come first: scripts/citus.sh).
# MEMORY_EXT_CLUSTER_PREFIX is put before every cluster name (`make test-pg18` sets "pg18-", so its
# clusters never meet those of a PostgreSQL 15 run on the same machine).
set -euo pipefail
cmd=${1:?start|stop|port}; name=${2:?cluster name}
bin=$("${PG_CONFIG:-/usr/bin/pg_config}" --bindir)
# pg_cron is preloaded where that server has it.
pg_cron=$("${PG_CONFIG:-/usr/bin/pg_config}" --pkglibdir)/pg_cron.so
prefix=${MEMORY_EXT_CLUSTER_PREFIX:-}
dir=/tmp/memory_ext-$prefix$name
data=$dir/data
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }

free_port() {
  python3 - <<'PY'
import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()
PY
}

case $cmd in
  start)
    if [ -f "$dir/port" ] && as_pg "$bin/pg_ctl" -D "$data" status >/dev/null 2>&1; then
      cat "$dir/port"; exit 0
    fi
    rm -rf "$dir"; mkdir -p "$dir"
    [ "$(id -u)" = 0 ] && chown postgres:postgres "$dir"
    as_pg "$bin/initdb" -D "$data" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 \
      || { cat "$dir/initdb.log"; exit 1; }
    port=$(free_port)
    extra=""
    # memory_ext is preloaded as in production (its background integrator needs it; with
    # MEMORY_EXT_INTEGRATOR_DATABASES set, one worker per database named there).
    preload=memory_ext
    if [ -f "$pg_cron" ]; then
      preload=pg_cron,memory_ext
      # Its jobs connect over this cluster's own socket, never over TCP to whatever answers on localhost.
      extra="-c cron.database_name=postgres -c cron.host=$dir"
    fi
    preload=${MEMORY_EXT_PRELOAD_FIRST:+$MEMORY_EXT_PRELOAD_FIRST,}$preload
    extra="$extra -c shared_preload_libraries=$preload ${MEMORY_EXT_SERVER_OPTS:-}"
    if [ -n "${MEMORY_EXT_INTEGRATOR_DATABASES:-}" ]; then
      extra="$extra -c memory.integrator_databases=$MEMORY_EXT_INTEGRATOR_DATABASES"
    fi
    # RUST_BACKTRACE as a developer's server might have it: no backtrace may reach a client anyway
    # (tests/python/test_error_fields.py).
    clock=(env RUST_BACKTRACE=1)
    if [ -n "${MEMORY_EXT_FAKETIME_FILE:-}" ]; then
      lib=$(ls /usr/lib/*/faketime/libfaketime.so.1 2>/dev/null | head -n1)
      [ -n "$lib" ] || { echo "libfaketime is not installed (Debian package faketime)" >&2; exit 1; }
      clock+=("LD_PRELOAD=$lib" "FAKETIME_TIMESTAMP_FILE=$MEMORY_EXT_FAKETIME_FILE" FAKETIME_NO_CACHE=1 DONT_FAKE_MONOTONIC=1)
    fi
    as_pg "${clock[@]}" "$bin/pg_ctl" -D "$data" -l "$dir/server.log" -w \
      -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=60 $extra" start >/dev/null \
      || { cat "$dir/server.log"; exit 1; }
    echo "$port" > "$dir/port"
    echo "$port"
    ;;
  standby)
    primary=${3:?primary cluster name}
    pport=$(cat "/tmp/memory_ext-$prefix$primary/port")
    rm -rf "$dir"; mkdir -p "$dir"
    [ "$(id -u)" = 0 ] && chown postgres:postgres "$dir"
    as_pg "$bin/pg_basebackup" -h 127.0.0.1 -p "$pport" -U postgres -D "$data" -R -X stream -c fast >"$dir/basebackup.log" 2>&1 \
      || { cat "$dir/basebackup.log"; exit 1; }
    port=$(free_port)
    preload=memory_ext
    [ -f "$pg_cron" ] && preload=pg_cron,memory_ext
    as_pg env RUST_BACKTRACE=1 "$bin/pg_ctl" -D "$data" -l "$dir/server.log" -w \
      -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=60 -c hot_standby=on -c shared_preload_libraries=$preload" start >/dev/null \
      || { cat "$dir/server.log"; exit 1; }
    echo "$port" > "$dir/port"
    echo "$port"
    ;;
  restart|crash)
    # Same data, port and options (pg_ctl keeps them in postmaster.opts); a new server process
    # loads the library installed now (an upgrade's new memory_ext.so).
    clock=(env RUST_BACKTRACE=1)
    if [ -n "${MEMORY_EXT_FAKETIME_FILE:-}" ]; then
      lib=$(ls /usr/lib/*/faketime/libfaketime.so.1 2>/dev/null | head -n1)
      clock+=("LD_PRELOAD=$lib" "FAKETIME_TIMESTAMP_FILE=$MEMORY_EXT_FAKETIME_FILE" FAKETIME_NO_CACHE=1 DONT_FAKE_MONOTONIC=1)
    fi
    mode=fast; [ "$cmd" = crash ] && mode=immediate
    as_pg "${clock[@]}" "$bin/pg_ctl" -D "$data" -l "$dir/server.log" -w -m $mode restart >/dev/null \
      || { cat "$dir/server.log"; exit 1; }
    cat "$dir/port"
    ;;
  stop)
    if [ -d "$data" ]; then as_pg "$bin/pg_ctl" -D "$data" -m fast stop >/dev/null 2>&1 || true; fi
    rm -rf "$dir"
    ;;
  port) cat "$dir/port" ;;
  *) echo "unknown command $cmd" >&2; exit 2 ;;
esac
