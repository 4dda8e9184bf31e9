#!/usr/bin/env bash
# SQL-level suite: pgTAP files in tests/sql run with pg_prove against the installed extension in a
# throwaway cluster. Each file runs in a fresh database.
#   tests/run-sql.sh            every file (and 02_audit once more with immediate audit)
#   tests/run-sql.sh FILE...    those files only
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# psql (which pg_prove runs) of the server's own version: $PG_CONFIG's.
export PATH="$("${PG_CONFIG:-/usr/bin/pg_config}" --bindir):$PATH"
port=$("$here/../scripts/cluster.sh" start sqltest)
trap '"$here/../scripts/cluster.sh" stop sqltest' EXIT
export PGHOST=127.0.0.1 PGPORT=$port PGUSER=postgres PGOPTIONS="-c client_min_messages=warning"
status=0
# 19_vector skips its tests without pgvector (pgTAP's skip): said loudly here, a failure under
# MEMORY_REQUIRE_ALL=1.
if [ "$(psql -X -At -d postgres -c "SELECT count(*) FROM pg_available_extensions WHERE name = 'vector'")" = 0 ]; then
  "$here/../scripts/skipped.sh" "pgTAP 19_vector" "pgvector is not installed in $("${PG_CONFIG:-/usr/bin/pg_config}" --sharedir)" || status=1
fi
run_file() { # FILE [DB-SUFFIX]: one pgTAP file in a fresh database
  local f=$1 db
  db=t_$(basename "$f" .sql | tr -c 'a-z0-9_\n' '_')${2:-}
  psql -q -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
  psql -q -d "$db" -c "CREATE EXTENSION pgtap" -c "CREATE EXTENSION memory_ext"
  # The classification vectors, one file shared with the core tests and the #[pg_test]s.
  psql -q -d "$db" -v ON_ERROR_STOP=1 -v vectors="$(cat "$here/../core/tests/vectors/classification.json")" <<'SQL'
-- The log as a test reads it: pending entries chained first (memory.audit_mode = deferred).
CREATE FUNCTION public.audit_log_now() RETURNS SETOF memory.audit_log LANGUAGE sql VOLATILE
AS $f$ SELECT memory.audit_integrate(); SELECT * FROM memory.audit_log $f$;
CREATE TABLE public.classification_vectors AS
SELECT * FROM jsonb_to_recordset(:'vectors'::jsonb) AS v(name text, content text, paths text[], source_type text, tier text, rule text);
SQL
  pg_prove -d "$db" "$f" || status=1
}
if [ $# -gt 0 ]; then
  for f in "$@"; do run_file "$(cd "$(dirname "$f")" && pwd)/$(basename "$f")"; done
  exit $status
fi
for f in "$here"/sql/*.sql; do
  run_file "$f"
done
# The audit file once more with in-statement chaining (memory.audit_mode = immediate).
PGOPTIONS="$PGOPTIONS -c memory.audit_mode=immediate" run_file "$here/sql/02_audit.sql" _immediate
exit $status
