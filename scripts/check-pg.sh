#!/usr/bin/env bash
# Type-checks memory_ext for a PostgreSQL major version that has no server (no pg_config) on this
# machine, e.g. `scripts/check-pg.sh 16` or `17`: pgrx-pg-sys ships its bindings pre-generated
# (for docs.rs); DOCS_RS=1 skips its bindgen build script and `--cfg docsrs`, given to that crate
# alone (through this script as RUSTC_WRAPPER), makes it include them. Nothing is linked (the C
# shim is not built), so this proves the code compiles, not that it runs.
set -euo pipefail
if [ -n "${CHECK_PG_WRAPPER:-}" ]; then  # as RUSTC_WRAPPER: RUSTC ARGS...
  rustc=$1; shift
  for a in "$@"; do
    if [ "$a" = pgrx_pg_sys ]; then exec "$rustc" "$@" --cfg docsrs; fi
  done
  exec "$rustc" "$@"
fi
root=$(cd "$(dirname "$0")/.." && pwd)
v=${1:?PostgreSQL major version, e.g. 16}
cd "$root"
DOCS_RS=1 CHECK_PG_WRAPPER=1 RUSTC_WRAPPER="$root/scripts/check-pg.sh" \
  cargo check --lib --no-default-features --features "pg$v" --target-dir target/check-docsrs
