#!/usr/bin/env bash
# A test layer that cannot run says so loudly:  scripts/skipped.sh LAYER WHY
# prints "SKIPPED: LAYER: WHY" and records it in target/skipped.txt (make test's summary counts
# them). Under MEMORY_REQUIRE_ALL=1 (.ci/run sets it) a skip is a failure: exit 1.
set -euo pipefail
layer=${1:?layer}; why=${2:?why}
root=$(cd "$(dirname "$0")/.." && pwd)
echo "SKIPPED: $layer: $why"
mkdir -p "$root/target"; echo "$layer: $why" >> "$root/target/skipped.txt"
if [ "${MEMORY_REQUIRE_ALL:-}" = 1 ]; then
  echo "SKIPPED is a failure under MEMORY_REQUIRE_ALL=1" >&2
  exit 1
fi
