#!/usr/bin/env bash
# Installs what building, testing and the demo need, idempotently: Debian packages, the pinned
# cargo-pgrx, its PostgreSQL 15 registration, a Python venv with psycopg, pytest and the MCP SDK, and
# PostgreSQL 18 in that venv with pgTAP and pg_cron (scripts/pg18.sh install; skipped when
# PG18_CONFIG names a PostgreSQL 18 of your own, and with MEMORY_DEPS_PG18=0, as `make demo` on 15 runs it).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
PGRX_VERSION=0.18.1
# PostgreSQL 15 is always the Debian one (PG_CONFIG may name 18 here: make PG=18).
PG15_CONFIG=/usr/bin/pg_config

need=()
for p in postgresql-15 postgresql-server-dev-15 libclang-dev clang sudo postgresql-15-pgtap postgresql-15-cron python3-venv faketime; do
  dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "== installing Debian packages: ${need[*]}"
  if [ "$(id -u)" != 0 ]; then SUDO=sudo; else SUDO=; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

if ! cargo pgrx --version 2>/dev/null | grep -q "$PGRX_VERSION"; then
  echo "== installing cargo-pgrx $PGRX_VERSION (about 5 minutes)"
  cargo install cargo-pgrx --version "$PGRX_VERSION" --locked
fi

conf=${PGRX_HOME:-$HOME/.pgrx}/config.toml
"$root/scripts/pgrx-registrations.sh"

if ! grep -qs '^pg15 *=' "$conf"; then
  echo "== registering PostgreSQL 15 with cargo-pgrx"
  cargo pgrx init --pg15 "$PG15_CONFIG"
fi

if [ ! -x "$root/.venv/bin/pytest" ] || ! "$root/.venv/bin/python" -c 'import psycopg' 2>/dev/null; then
  echo "== creating Python venv with psycopg and pytest"
  python3 -m venv "$root/.venv"
  "$root/.venv/bin/pip" install -q --upgrade pip
  "$root/.venv/bin/pip" install -q 'psycopg[binary]>=3.1' 'pytest>=7'
fi
# The MCP client SDK the memory-mcp tests drive the server with (pinned: its API moves).
MCP_SDK_VERSION=2.3.0
if ! "$root/.venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('mcp') != '$MCP_SDK_VERSION')" 2>/dev/null; then
  echo "== installing the Python MCP SDK (mcp==$MCP_SDK_VERSION) into the venv"
  "$root/.venv/bin/pip" install -q "mcp==$MCP_SDK_VERSION"
fi
# The memory-mcp HTTP tests' local OAuth issuer: keys (cryptography) and signed JWTs (pyjwt).
if ! "$root/.venv/bin/python" -c 'import jwt, cryptography' 2>/dev/null; then
  echo "== installing pyjwt and cryptography into the venv"
  "$root/.venv/bin/pip" install -q 'pyjwt>=2.8' 'cryptography>=42'
fi
# pgvector's Python adapter (sends pgvector.Vector as pgvector's vector; numpy is optional):
# test_vector's query embeddings as a client that uses it sends them.
if ! "$root/.venv/bin/python" -c 'import pgvector.psycopg' 2>/dev/null; then
  echo "== installing pgvector (Python) into the venv"
  "$root/.venv/bin/pip" install -q 'pgvector==0.5.1'
fi
# The Python package of this repository (clients/python, with LangGraph and its Postgres store
# for the tests): reinstalled when its sources change (a hash of them kept in the venv).
client_sum=$(cd "$root/clients/python" && find . -type f \( -name '*.py' -o -name '*.toml' -o -name 'py.typed' -o -name '*.md' \) \
  -not -path './build/*' -not -path '*.egg-info*' | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -d' ' -f1)
if [ "$(cat "$root/.venv/memory-ext.sha256" 2>/dev/null)" != "$client_sum" ] \
   || ! "$root/.venv/bin/python" -c 'import memory_ext.langgraph, langgraph.store.postgres' 2>/dev/null; then
  echo "== installing clients/python (memory-ext[langgraph]) and langgraph-checkpoint-postgres into the venv"
  "$root/.venv/bin/pip" install -q "$root/clients/python[langgraph]" langgraph langgraph-checkpoint-postgres psycopg_pool
  echo "$client_sum" > "$root/.venv/memory-ext.sha256"
fi

if [ -z "${PG18_CONFIG:-}" ] && [ "${MEMORY_DEPS_PG18:-1}" != 0 ]; then
  "$root/scripts/pg18.sh" install
fi
