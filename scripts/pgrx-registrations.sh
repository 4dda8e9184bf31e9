#!/usr/bin/env bash
# Drops cargo-pgrx registrations (~/.pgrx/config.toml) that name a pg_config that is gone: another
# checkout's PostgreSQL 18, since moved or deleted, makes cargo-pgrx fail builds for every version.
# scripts/pg18.sh registers this checkout's again. Run by install-deps.sh and install-ext.sh.
set -euo pipefail
conf=${PGRX_HOME:-$HOME/.pgrx}/config.toml
[ -f "$conf" ] || exit 0
stale=$(sed -n 's/^pg[0-9]* *= *"\(.*\)"$/\1/p' "$conf" | while IFS= read -r p; do [ -x "$p" ] || echo "$p"; done)
[ -n "$stale" ] || exit 0
echo "== dropping cargo-pgrx registrations of missing pg_configs: $stale"
while IFS= read -r p; do grep -vF "\"$p\"" "$conf" > "$conf.new" || true; mv "$conf.new" "$conf"; done <<< "$stale"
