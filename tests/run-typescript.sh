#!/usr/bin/env bash
# The TypeScript package clients/typescript (@memory-ext/client) against the installed extension:
# npm ci when node_modules is missing or package-lock.json changed since, tsc (the package into
# dist/, its tests and examples into build/), a throwaway cluster (scripts/cluster.sh), node --test.
# Arguments are passed to node --test (e.g. --test-name-pattern=store). Without node 20+ and npm
# the layer says SKIPPED (scripts/skipped.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
pkg=$root/clients/typescript
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  exec "$root/scripts/skipped.sh" typescript "node and npm are not installed (clients/typescript needs Node.js 20 or later)"
fi
major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$major" -lt 20 ]; then
  exec "$root/scripts/skipped.sh" typescript "node $(node --version) is older than 20 (clients/typescript needs Node.js 20 or later)"
fi
cd "$pkg"
# The lock's hash as of the last npm ci: a changed lock installs again, an unchanged one never.
lock_hash=$(sha256sum package-lock.json | cut -d' ' -f1)
stamp=node_modules/.memory-ext-lock
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$lock_hash" ]; then
  npm ci --no-audit --no-fund --loglevel=error
  echo "$lock_hash" > "$stamp"
fi
rm -rf build
npx --no-install tsc -p tsconfig.json
npx --no-install tsc -p tsconfig.test.json

name=${MEMORY_EXT_TS_CLUSTER:-typescript}
port=$("$root/scripts/cluster.sh" start "$name")
trap '"$root/scripts/cluster.sh" stop "$name" >/dev/null 2>&1 || true' EXIT
MEMORY_EXT_TS_PORT=$port node --test "$@" build/test/*.test.js
