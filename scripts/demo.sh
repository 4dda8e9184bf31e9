#!/usr/bin/env bash
# make demo: throwaway cluster owned by postgres, CREATE EXTENSION, narrated walkthrough, then how
# to connect. The cluster keeps running; `scripts/cluster.sh stop demo` removes it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
export PATH="$("${PG_CONFIG:-/usr/bin/pg_config}" --bindir):$PATH"   # psql of the server's version
# memory_ext is preloaded (scripts/cluster.sh); its background integrator serves memdemo.
port=$(MEMORY_EXT_INTEGRATOR_DATABASES=memdemo "$root/scripts/cluster.sh" start demo)
export PGHOST=127.0.0.1 PGPORT=$port PGUSER=postgres
psql -q -d postgres -c "DROP DATABASE IF EXISTS memdemo WITH (FORCE)" -c "CREATE DATABASE memdemo"
psql -q -d memdemo -v ON_ERROR_STOP=1 -c "CREATE EXTENSION memory_ext"
echo
psql -d memdemo -v ON_ERROR_STOP=1 -P pager=off -f "$root/demo/walkthrough.sql"
cat <<TXT

The demo cluster is still running. Connect with:

    psql -h 127.0.0.1 -p $port -U postgres memdemo

Stop it with: ${MEMORY_EXT_CLUSTER_PREFIX:+MEMORY_EXT_CLUSTER_PREFIX=$MEMORY_EXT_CLUSTER_PREFIX }${PG_CONFIG:+PG_CONFIG=$PG_CONFIG }scripts/cluster.sh stop demo
TXT
