#!/usr/bin/env bash
# LangGraph's own store tests (tests/test_store.py, tests/test_async_store.py of the PyPI sdist of
# langgraph-checkpoint-postgres, pinned below by version and sha256) run against memory_ext's
# MemoryStore / AsyncMemoryStore on a real cluster as a tenant-bound role: conftest.py (ours)
# takes the place of theirs and hands their fixtures our store instead of PostgresStore;
# expected.py lists the tests that differ on purpose (SPEC §16), each with its reason.
# Their tests are never copied into this repository: fetched once into target/lgstore-cache
# (pip download, checked against the sha256), then used from the cache (offline after that).
#   tests/langgraph/run.sh [pytest args]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
LG_VERSION=3.2.0
LG_SHA256=dffef0e6822d7c614019f7f2c4bdbef42859746aee2d3e6d9d9747cf3744ca90
ASYNCIO_WHEEL=pytest_asyncio-1.5.0-py3-none-any.whl
ASYNCIO_SHA256=557f255ee03cc84f84a8d5f438bc9c6e0f714bf86970ae743c7ecb5a38d7e07d
cache=$root/target/lgstore-cache
sdist=$cache/langgraph_checkpoint_postgres-$LG_VERSION.tar.gz
pip=$root/.venv/bin/pip
mkdir -p "$cache/wheels"

fetch() { # FILE SHA256 PIP-DOWNLOAD-ARGS...: FILE in the cache with that sha256, downloaded when missing
  local file=$1 sum=$2; shift 2
  if [ ! -f "$file" ] || ! echo "$sum  $file" | sha256sum -c --status; then
    rm -f "$file"
    "$pip" download -q --no-deps "$@" || {
      echo "tests/langgraph: cannot download $(basename "$file") and it is not in $cache (offline?)" >&2; exit 1; }
  fi
  echo "$sum  $file" | sha256sum -c --status || { echo "tests/langgraph: $(basename "$file"): sha256 mismatch" >&2; exit 1; }
}
fetch "$sdist" "$LG_SHA256" --no-binary :all: "langgraph-checkpoint-postgres==$LG_VERSION" -d "$cache"
fetch "$cache/wheels/$ASYNCIO_WHEEL" "$ASYNCIO_SHA256" --only-binary :all: "pytest-asyncio==1.5.0" -d "$cache/wheels"

# Their sdist unpacked (once per sha256) and pytest-asyncio beside it (not in the shared venv).
src=$cache/langgraph_checkpoint_postgres-$LG_VERSION
if [ "$(cat "$src/.sha256" 2>/dev/null)" != "$LG_SHA256" ]; then
  rm -rf "$src" && tar xzf "$sdist" -C "$cache" && echo "$LG_SHA256" > "$src/.sha256"
fi
site=$cache/site
if [ "$(cat "$site/.sha256" 2>/dev/null)" != "$ASYNCIO_SHA256" ]; then
  rm -rf "$site" && "$pip" install -q --no-index --no-deps --target "$site" "$cache/wheels/$ASYNCIO_WHEEL" \
    && echo "$ASYNCIO_SHA256" > "$site/.sha256"
fi
# Our conftest in place of theirs (their test modules import DEFAULT_URI etc. from tests.conftest).
cp "$root/tests/langgraph/conftest.py" "$src/tests/conftest.py"
cp "$root/tests/langgraph/expected.py" "$src/tests/expected.py"

export MEMORY_EXT_ROOT=$root
cd "$src"
# Both files, or the tests/... paths (node ids) given first.
files=(tests/test_store.py tests/test_async_store.py)
[[ "${1:-}" == tests/* ]] && files=()
# memory_ext from this tree (not the copy installed in the venv), then pytest-asyncio.
PYTHONPATH="$root/clients/python/src:$site${PYTHONPATH:+:$PYTHONPATH}" \
  exec "$root/.venv/bin/pytest" -q -p no:cacheprovider -o addopts= -o asyncio_mode=auto \
  -o asyncio_default_fixture_loop_scope=function "${files[@]}" "$@"
