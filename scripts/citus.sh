#!/usr/bin/env bash
# A local Citus cluster for the scale-out tests and benchmarks (SPEC §10).
#   citus.sh install      -> Citus into PostgreSQL 15, built from ../shared/vendor/citus only when
#                            no citus.so is installed (a user installs postgresql-15-citus-13.2)
#   citus.sh available    -> exit 0 when Citus is installed or its vendored source exists
#   citus.sh start NAME   -> coordinator NAME-c and workers NAME-w1, NAME-w2 (scripts/cluster.sh
#                            clusters, `postgres` user, free ports, citus preloaded first), joined;
#                            prints "coordinator-port worker1-port worker2-port"
#   citus.sh stop NAME
# Idempotent: install does nothing when Citus is there; start on a running cluster prints its ports.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
PG_CONFIG=${PG_CONFIG:-/usr/bin/pg_config}
libdir=$("$PG_CONFIG" --pkglibdir)
vendor=${MEMORY_EXT_CITUS_SOURCE:-$root/../shared/vendor/citus}
cmd=${1:?install|available|start|stop}

installed() { [ -f "$libdir/citus.so" ]; }

case $cmd in
  available)
    installed || ls "$vendor"/citus-*.tar.gz >/dev/null 2>&1
    ;;
  install)
    if installed; then exit 0; fi
    tarball=$(ls "$vendor"/citus-*.tar.gz 2>/dev/null | head -n1)
    [ -n "$tarball" ] || { echo "no Citus installed and no source in $vendor" >&2; exit 1; }
    need=()
    for p in libcurl4-openssl-dev liblz4-dev libzstd-dev libkrb5-dev libselinux1-dev libxslt1-dev libpam0g-dev libssl-dev make gcc patch; do
      dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
    done
    if [ ${#need[@]} -gt 0 ]; then
      echo "== installing Citus build dependencies: ${need[*]}"
      if [ "$(id -u)" != 0 ]; then SUDO=sudo; else SUDO=; fi
      $SUDO apt-get update -qq
      DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
    fi
    build=$(mktemp -d /tmp/citus-build.XXXXXX)
    echo "== building Citus from $(basename "$tarball") (about 3 minutes; log in $build/build.log)"
    tar -xzf "$tarball" -C "$build"
    src=$build
    [ -f "$src/configure" ] || src=$(dirname "$(ls "$build"/*/configure | head -n1)")
    for patch in "$vendor"/*.patch; do
      [ -f "$patch" ] || continue
      # Apply a patch only where it applies (a newer PostgreSQL or Citus may not need it).
      if (cd "$src" && patch -p1 --dry-run -s <"$patch" >/dev/null 2>&1); then
        (cd "$src" && patch -p1 -s <"$patch")
      fi
    done
    (cd "$src" && ./configure PG_CONFIG="$PG_CONFIG" >"$build/build.log" 2>&1 \
      && make -j"$(nproc)" >>"$build/build.log" 2>&1 && make install >>"$build/build.log" 2>&1) \
      || { tail -n 40 "$build/build.log"; exit 1; }
    rm -rf "$build"
    installed
    ;;
  start)
    name=${2:?cluster name}
    installed || { echo "Citus is not installed (scripts/citus.sh install)" >&2; exit 1; }
    ports=()
    for n in c w1 w2; do
      ports+=("$(MEMORY_EXT_PRELOAD_FIRST=citus \
        MEMORY_EXT_SERVER_OPTS="-c max_connections=120 -c citus.enable_unsafe_triggers=on ${MEMORY_EXT_SERVER_OPTS:-}" \
        "$here/cluster.sh" start "$name-$n")")
    done
    psql_c() { psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "${ports[0]}" -U postgres -d postgres "$@"; }
    for i in 0 1 2; do
      psql -X -q -h 127.0.0.1 -p "${ports[$i]}" -U postgres -d postgres -c "CREATE EXTENSION IF NOT EXISTS citus" >/dev/null
    done
    psql_c -c "SELECT citus_set_coordinator_host('127.0.0.1', ${ports[0]})" >/dev/null
    for i in 1 2; do
      psql_c -c "SELECT citus_add_node('127.0.0.1', ${ports[$i]}) WHERE NOT EXISTS (SELECT FROM pg_dist_node WHERE nodeport = ${ports[$i]})" >/dev/null
    done
    echo "${ports[*]}"
    ;;
  stop)
    name=${2:?cluster name}
    for n in c w1 w2; do "$here/cluster.sh" stop "$name-$n"; done
    ;;
  *) echo "unknown command $cmd" >&2; exit 2 ;;
esac
