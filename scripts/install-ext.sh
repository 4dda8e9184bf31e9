#!/usr/bin/env bash
# Builds memory_ext (release, or debug with --debug) and installs it into the PostgreSQL of
# $PG_CONFIG. Used by `make install`.
#   - The upgrade script to this release is generated (scripts/gen_upgrade.py) from
#     sql/updates/FROM--TO.sql and this release's install script; the scripts of earlier releases
#     (sql/released/: install and upgrade scripts of releases, frozen as released) are installed as kept.
#   - Every file is replaced atomically: written beside its destination, then renamed over it, so a
#     running server that mapped the old library keeps it until its restart (overwriting a mapped
#     library in place crashes the processes that run it).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
PG_CONFIG=${PG_CONFIG:-/usr/bin/pg_config}
# Release (optimised) unless --debug is given (tests may use a debug build; users never do).
profile=(--profile release); [ "${1:-}" = --debug ] && profile=(--debug)
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1)
libdir=$("$PG_CONFIG" --pkglibdir); extdir=$("$PG_CONFIG" --sharedir)/extension
# One package directory per major version (Debian's bindir ends in 15/bin; the PostgreSQL 18 wheel's
# in pginstall/bin).
major=$("$PG_CONFIG" --version | sed -n 's/^PostgreSQL \([0-9]*\).*/\1/p')
pkg=$root/target/pkg-pg$major
rm -rf "$pkg"
scripts/pgrx-registrations.sh
cargo pgrx package "${profile[@]}" --pg-config "$PG_CONFIG" --out-dir "$pkg"
built=$pkg$extdir
[ -f "$built/memory_ext--$version.sql" ] || { echo "install-ext: no install script memory_ext--$version.sql in $built" >&2; exit 1; }
for hand in sql/updates/*--"$version".sql; do
  [ -e "$hand" ] || continue
  from=$(basename "$hand" .sql); from=${from%%--*}
  python3 scripts/gen_upgrade.py "$from" "$version" "$built/memory_ext--$version.sql" "$hand" > "$built/memory_ext--$from--$version.sql"
done
put() { # SRC DEST: atomic replace
  local tmp
  tmp=$(dirname "$2")/.$(basename "$2").$$.new
  install -m "${3:-644}" "$1" "$tmp" && mv -f "$tmp" "$2"
}
mkdir -p "$libdir" "$extdir"
put "$pkg$libdir/memory_ext.so" "$libdir/memory_ext.so" 755
for f in "$built"/memory_ext* sql/released/memory_ext--*.sql; do
  put "$f" "$extdir/$(basename "$f")"
done
echo "install-ext: memory_ext $version installed ($libdir/memory_ext.so, $(ls "$extdir"/memory_ext*.sql | wc -l) SQL files)"
