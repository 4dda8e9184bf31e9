#!/usr/bin/env bash
# Upgrade test layer (issue 13, SPEC §9): release 0.1.0, built from its own source (git commit
# below), is installed and filled with data in every table over three months of a libfaketime
# clock; then this tree's release (already installed by `make install`) replaces it, the server
# restarts, and `ALTER EXTENSION memory_ext UPDATE` runs. Checks:
#   - the upgraded schema equals a fresh install (tests/upgrade/schema.sql, every object);
#   - every row of every table that both versions have is unchanged;
#   - every chain verifies, with the heads it had before;
#   - the functions work on the upgraded data (tests/upgrade/after.sql, pgTAP).
# The installed files are put back as they were when it ends, whatever happens.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
export PATH="$HOME/.cargo/bin:$PATH"
PG_CONFIG=${PG_CONFIG:-/usr/bin/pg_config}
export PATH="$("$PG_CONFIG" --bindir):$PATH"   # psql of the server's version
# The release upgraded from (0.1.0, 0.2.0 or 0.3.0; make test-upgrade runs each), and the commit it was released at.
OLD=${1:-0.1.0}
case $OLD in
  0.1.0) OLD_COMMIT=6e934aa83a84bf237200f3afe756144ac1f67a4d ;;
  0.2.0) OLD_COMMIT=301d447c88d680fbb358483c0c551ced1e6a9a60 ;;
  0.3.0) OLD_COMMIT=927bad6d759d4ad60be2037e69a01e3319da5ba5 ;;
  *) echo "upgrade test: no release $OLD" >&2; exit 2 ;;
esac
NEW=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$root/Cargo.toml" | head -n1)
major=$("$PG_CONFIG" --version | sed -n 's/^PostgreSQL \([0-9]*\).*/\1/p')
# Built and run per major version (PostgreSQL 15 keeps its old path).
work=$root/target/upgrade; [ "$major" = 15 ] || work=$root/target/upgrade-pg$major
if ! git -C "$root" cat-file -e "$OLD_COMMIT^{commit}" 2>/dev/null; then
  git -C "$root" fetch --quiet --unshallow 2>/dev/null || true
fi
git -C "$root" cat-file -e "$OLD_COMMIT^{commit}" \
  || { echo "upgrade test: release $OLD ($OLD_COMMIT) is not in this clone's history" >&2; exit 1; }
# A release is built for the PostgreSQL versions its own source supports (a pgNN feature in its
# Cargo.toml). For another, tests/upgrade/OLD-pgNN.patch, where there is one, is applied to its
# source before the build: a backport kept for this test only (that release was never released for
# that version; the patch's header says what it holds). Without one the test is skipped, saying so.
backport=""
if ! git -C "$root" show "$OLD_COMMIT:Cargo.toml" | grep -q "^pg$major = "; then
  backport=$root/tests/upgrade/$OLD-pg$major.patch
  if [ ! -f "$backport" ]; then
    "$root/scripts/skipped.sh" "upgrade from $OLD" "PostgreSQL $major: release $OLD's source does not build for it (no pg$major feature in its Cargo.toml, no backport tests/upgrade/$OLD-pg$major.patch)"
    exit 0
  fi
  echo "upgrade test: release $OLD was never released for PostgreSQL $major; built with the backport tests/upgrade/$(basename "$backport")"
fi
pkg_old=$work/pkg-$OLD
libdir=$($PG_CONFIG --pkglibdir); extdir=$($PG_CONFIG --sharedir)/extension
name=upgrade
cluster() { "$root/scripts/cluster.sh" "$@"; }

# Release $OLD, built once (debug: only its SQL behaviour matters here); again when the backport
# changes (.built holds its checksum; empty without one).
stamp=""; [ -z "$backport" ] || stamp=$(sha256sum < "$backport" | cut -d' ' -f1)
if [ ! -f "$pkg_old/.built" ] || [ "$(cat "$pkg_old/.built")" != "$stamp" ]; then
  rm -rf "$work/src-$OLD" "$pkg_old"; mkdir -p "$work/src-$OLD"
  git -C "$root" archive "$OLD_COMMIT" | tar -x -C "$work/src-$OLD"
  # The releases share one target directory (their dependencies build once), and cargo names a
  # path crate's artifacts by its path relative to its workspace (core/ in each): files dated by
  # git archive (the release's commit time, older than the last build of another release) would
  # pass cargo's freshness check and link that release's memory_core. Dated now, they are rebuilt.
  find "$work/src-$OLD" -type f -exec touch {} +
  if [ -n "$backport" ]; then
    # git apply as a plain patch tool: the ceiling keeps it from taking this clone as the
    # repository (inside one it would resolve the paths from the clone's root and skip them).
    (cd "$work/src-$OLD" && GIT_CEILING_DIRECTORIES="$work" git apply "$backport") \
      && grep -q "^pg$major = " "$work/src-$OLD/Cargo.toml" \
      || { echo "upgrade test: tests/upgrade/$(basename "$backport") does not apply to release $OLD's source" >&2; exit 1; }
  fi
  echo "upgrade test: building release $OLD from $OLD_COMMIT"
  (cd "$work/src-$OLD" && CARGO_TARGET_DIR="$work/target" cargo pgrx package --debug --pg-config "$PG_CONFIG" --out-dir "$pkg_old" >"$work/build-$OLD.log" 2>&1) \
    || { tail -n 40 "$work/build-$OLD.log"; exit 1; }
  echo "$stamp" > "$pkg_old/.built"
fi

# The current installation, put back on exit.
saved=$work/installed; rm -rf "$saved"; mkdir -p "$saved"
cp "$libdir/memory_ext.so" "$extdir"/memory_ext* "$saved/"
grep -q "^default_version = '$NEW'" "$saved/memory_ext.control" \
  || { echo "upgrade test: run make install first (installed control file is not $NEW)" >&2; exit 1; }
# A library is replaced by a rename, never overwritten in place: a running server that mapped it
# keeps its copy (overwriting a mapped library crashes its processes, as scripts/install-ext.sh says).
put_lib() { install -m 755 "$1" "$libdir/.memory_ext.so.$$.new" && mv -f "$libdir/.memory_ext.so.$$.new" "$libdir/memory_ext.so"; }
restore_install() {
  put_lib "$saved/memory_ext.so"
  rm -f "$extdir"/memory_ext*; cp "$saved"/memory_ext.control "$saved"/memory_ext--*.sql "$extdir/"
}
clock=$work/clock
finish() { rc=$?; restore_install; MEMORY_EXT_FAKETIME_FILE=$clock cluster stop $name || true; exit $rc; }
trap finish EXIT

install_old() {
  put_lib "$pkg_old$libdir/memory_ext.so"
  rm -f "$extdir"/memory_ext*; cp "$pkg_old$extdir"/memory_ext* "$extdir/"
  # 0.2.0's package carries its own upgrade from 0.1.0 and its install script; 0.1.0's is kept in sql/.
  [ -f "$extdir/memory_ext--0.1.0.sql" ] || cp "$root/sql/released/memory_ext--0.1.0.sql" "$extdir/"
}

install_old
echo "-62d" > "$clock"
export MEMORY_EXT_FAKETIME_FILE=$clock
cluster stop $name
port=$(cluster start $name)
export PGHOST=/tmp/memory_ext-${MEMORY_EXT_CLUSTER_PREFIX:-}$name PGPORT=$port PGUSER=postgres
q() { psql -X -q -v ON_ERROR_STOP=1 "$@"; }
q -d postgres -c "CREATE DATABASE upgraded" -c "CREATE DATABASE fresh"

echo "upgrade test: $OLD filled over three months"
q -d upgraded -v version="$OLD" -f "$root/tests/upgrade/setup-0.1.0.sql" >/dev/null
q -d upgraded -v phase=1 -f "$root/tests/upgrade/fill-0.1.0.sql" >/dev/null
echo "-31d" > "$clock"
q -d upgraded -v phase=2 -f "$root/tests/upgrade/fill-0.1.0.sql" >/dev/null
echo "+0" > "$clock"
q -d upgraded -v phase=3 -f "$root/tests/upgrade/fill-0.1.0.sql" >/dev/null
# 0.2.0's own tables (consent, user contexts, threads, drift), filled with its API.
[ "$OLD" = 0.1.0 ] || q -d upgraded -f "$root/tests/upgrade/fill-0.2.0.sql" >/dev/null
# 0.3.0's agent API and clearance, written with its API.
[ "$OLD" != 0.3.0 ] || q -d upgraded -f "$root/tests/upgrade/fill-0.3.0.sql" >/dev/null
q -d upgraded -c "SELECT memory.run_retention()" >/dev/null

# What 0.1.0 left: every row of every table in schema memory and the application table, and
# the chains' heads. Rows are compared on the columns 0.1.0 had (the update may add columns; their
# values on old rows are the new columns' defaults, which the schema comparison covers).
snapshot() {
  local db=$1 out=$2 cols
  : > "$out"
  for t in $(q -d "$db" -At -c "SELECT c.oid::regclass FROM pg_class c WHERE c.relnamespace = 'memory'::regnamespace AND c.relkind IN ('r', 'p') AND NOT c.relispartition ORDER BY 1" ) public.agent_notes; do
    if [ ! -s "$work/cols/$t" ]; then
      q -d "$db" -At -c "SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) FROM pg_attribute WHERE attrelid = '$t'::regclass AND attnum > 0 AND NOT attisdropped" > "$work/cols/$t"
    fi
    cols=$(cat "$work/cols/$t")
    echo "== $t" >> "$out"
    q -d "$db" -At -c "SELECT ROW($cols)::text FROM $t ORDER BY ROW($cols)::text COLLATE \"C\"" >> "$out"
  done
}
rm -rf "$work/cols" && mkdir -p "$work/cols"
snapshot upgraded "$work/before.txt"
q -d upgraded -At -c "SELECT chain_id, seq, encode(entry_hash, 'hex') FROM memory.audit_heads ORDER BY 1" > "$work/heads-before.txt"
q -d upgraded -At -c "SELECT count(*) FROM memory.audit_verify() WHERE NOT ok" | grep -qx 0 \
  || { echo "upgrade test: $OLD's own chains do not verify" >&2; exit 1; }
q -d upgraded -At -c "SELECT count(DISTINCT tableoid) FROM memory.audit_log" > "$work/months.txt"
[ "$(cat "$work/months.txt")" -ge 3 ] || { echo "upgrade test: the log spans fewer than 3 partitions" >&2; exit 1; }

echo "upgrade test: the new release installed, server restarted, ALTER EXTENSION memory_ext UPDATE"
restore_install
# Every C symbol the old release's SQL names is still in the library (live, or src/pg/compat.rs
# answering 55000 until the update), so nothing fails with "could not find function" before the update.
nm -D --defined-only "$libdir/memory_ext.so" | awk '{print $3}' | sort -u > "$work/symbols.txt"
missing=$(grep -o "'MODULE_PATHNAME', '[A-Za-z0-9_]*'" "$root/sql/released/memory_ext--$OLD.sql" | cut -d"'" -f4 | sort -u \
  | comm -23 - "$work/symbols.txt")
[ -z "$missing" ] || { echo "upgrade test: the library lacks $OLD's C functions: $missing" >&2; exit 1; }
cluster restart $name >/dev/null
if [ "$OLD" = 0.1.0 ]; then
  out=$(q -d upgraded -v VERBOSITY=sqlstate -c "SELECT memory._redact_details('{}', '{}')" 2>&1 || true)
  [ "$out" = "ERROR:  55000" ] || { echo "upgrade test: a retired 0.1.0 function before the update answered: $out" >&2; exit 1; }
fi
# Writes between the new library and the update are refused (55000, with the command to run),
# so nothing is written that 0.2.0 would not have governed and audited.
for sql in "INSERT INTO memory.observations (org_id, content) VALUES ('acme', 'before the update')" \
           "INSERT INTO public.agent_notes (org_id, body) VALUES ('acme', 'before the update')"; do
  out=$(q -d upgraded -v VERBOSITY=sqlstate -c "$sql" 2>&1 || true)
  [ "$out" = "ERROR:  55000" ] || { echo "upgrade test: a write before the update answered: $out" >&2; exit 1; }
done
q -d upgraded -c "ALTER EXTENSION memory_ext UPDATE"
# The upgrade step of docs/operations.md after the update: grants for the new release's functions to the three roles.
q -d upgraded -c "SELECT * FROM memory.setup_roles()" >/dev/null
[ "$(q -d upgraded -At -c "SELECT extversion FROM pg_extension WHERE extname = 'memory_ext'")" = "$NEW" ] \
  || { echo "upgrade test: extversion is not $NEW after the update" >&2; exit 1; }

# The schema equals a fresh install's.
q -d fresh -c "CREATE EXTENSION memory_ext" -c "SELECT * FROM memory.setup_roles()" >/dev/null
q -d upgraded -At -f "$root/tests/upgrade/schema.sql" > "$work/schema-upgraded.txt"
q -d fresh -At -f "$root/tests/upgrade/schema.sql" > "$work/schema-fresh.txt"
if ! diff -u "$work/schema-fresh.txt" "$work/schema-upgraded.txt" > "$work/schema.diff"; then
  echo "upgrade test: the upgraded schema differs from a fresh install (- fresh, + upgraded):" >&2
  head -n 80 "$work/schema.diff" >&2
  exit 1
fi
echo "upgrade test ($OLD -> $NEW): schema equals a fresh install ($(wc -l < "$work/schema-fresh.txt") catalog lines)"

# Every row as it was; the chains as they were.
snapshot upgraded "$work/after.txt"
python3 - "$work/before.txt" "$work/after.txt" <<'PY'
import sys
def tables(p):
    t, cur = {}, None
    for line in open(p):
        line = line.rstrip("\n")
        if line.startswith("== "):
            cur = line[3:]; t[cur] = []
        else:
            t[cur].append(line)
    return t
b, a = tables(sys.argv[1]), tables(sys.argv[2])
# The one change the update means to make to a row: 0.4.0 governs memory.observations with
# "content_required" (blank memories refused, issue 46), which its registry options record.
a["memory.governance_registry"] = [r.replace(', ""content_required"": true}', '}') if r.startswith("(memory.observations,") else r
                                   for r in a.get("memory.governance_registry", [])]
bad = []
for name, rows in b.items():
    if name not in a:
        bad.append(f"{name}: gone after the update")
    elif rows != a[name]:
        bad.append(f"{name}: {len(rows)} rows before, {len(a[name])} after, {len(set(rows) ^ set(a[name]))} differ")
if bad:
    print("upgrade test: data changed by the update:\n  " + "\n  ".join(bad), file=sys.stderr); sys.exit(1)
print(f"upgrade test: {sum(len(r) for r in b.values())} rows in {len(b)} tables unchanged")
PY
q -d upgraded -At -c "SELECT chain_id, seq, encode(entry_hash, 'hex') FROM memory.audit_heads ORDER BY 1" > "$work/heads-after.txt"
diff -u "$work/heads-before.txt" "$work/heads-after.txt" || { echo "upgrade test: chain heads moved" >&2; exit 1; }

# The functions on the upgraded data.
out=$(q -d upgraded -At -v new="$NEW" -f "$root/tests/upgrade/after.sql" 2>&1) || { echo "$out"; exit 1; }
echo "$out" | grep -E "^(not )?ok|^# " | grep -v "^ok" && { echo "$out" | tail -n 40; echo "upgrade test: failed" >&2; exit 1; }
echo "upgrade test: $(echo "$out" | grep -c '^ok') checks on the upgraded database passed"
