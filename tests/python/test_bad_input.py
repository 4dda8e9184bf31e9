"""Bad input never reaches a client as a fault (SPEC §7): every function in schema memory, found
from pg_proc (so new ones are covered without editing this file), is called with hostile values in
each argument position in turn (NULLs, empty and whitespace text, huge text, empty and NULL-holding
arrays, ±infinity, NaN, extreme integers, deep and huge jsonb, out-of-range numbers), the other
arguments holding ordinary values. A call fails the test when it answers XX000, carries a Rust
backtrace in any error field, takes more than 10 s, or ends the connection. Afterwards every audit
chain still verifies.
"""
import psycopg
import pytest

DEEP = '{"a": ' * 200 + "1" + "}" * 200
WIDE = "{" + ", ".join(f'"k{i}": "v"' for i in range(10_000)) + "}"

# Hostile values per type, as SQL expressions; the first value of BENIGN is used elsewhere.
HOSTILE = {
    "text": ["NULL", "''", "E' \\t\\n'", "repeat('x', 1000000)", "'ｓｓｎ ４１１１ １１１１ １１１１ １１１１'",
             "E'a\\u200bb'", "'memory.forged'", "'*'"],
    "character varying": ["NULL", "''", "E' \\t\\n'"],
    "smallint": ["NULL", "0", "-1", "32767", "-32768"],
    "integer": ["NULL", "0", "-1", "2147483647", "-2147483648"],
    "bigint": ["NULL", "0", "-1", "9223372036854775807", "-9223372036854775808"],
    "double precision": ["NULL", "'NaN'", "'Infinity'", "'-Infinity'", "0", "-1", "1e308"],
    "real": ["NULL", "'NaN'", "'Infinity'"],
    "numeric": ["NULL", "'NaN'", "1e1000", "-1"],
    "boolean": ["NULL", "true", "false"],
    "timestamp with time zone": ["NULL", "'infinity'", "'-infinity'", "'294276-12-31 00:00+00'", "'4713-01-01 00:00+00 BC'"],
    "interval": ["NULL", "'-1 day'", "'178000000 years'", "'0'", "'-178000000 years'"],
    "jsonb": ["NULL", "'{}'", "'[]'", "'null'", "'\"s\"'", f"'{DEEP}'", "'{\"n\": 1e400, \"m\": -1e400}'",
              f"'{WIDE}'", "'{\"classification\": \"bogus\"}'"],
    "json": ["NULL", "'{}'", f"'{DEEP}'"],
    "uuid": ["NULL", "'00000000-0000-0000-0000-000000000000'"],
    "uuid[]": ["NULL", "'{}'", "'{NULL}'", "array_fill('00000000-0000-0000-0000-000000000001'::uuid, ARRAY[100000])"],
    "text[]": ["NULL", "'{}'", "'{NULL}'", "'{\"\"}'", "array_fill(' '::text, ARRAY[10000])", "array_fill('x'::text, ARRAY[2, 2])"],
    "regclass": ["NULL", "'pg_class'", "'memory.audit_log'", "'memory.observations'"],
    "regrole": ["NULL", "'postgres'"],
    "oid": ["NULL", "0"],
    "bytea": ["NULL", "'\\x'", "decode(repeat('ff', 100000), 'hex')"],
}
BENIGN = {
    "text": "'acme'", "character varying": "'acme'", "smallint": "1", "integer": "1", "bigint": "1",
    "double precision": "0.5", "real": "0.5", "numeric": "1", "boolean": "false", "timestamp with time zone": "now()",
    "interval": "'1 day'", "jsonb": "'{}'", "json": "'{}'", "uuid": "gen_random_uuid()", "uuid[]": "'{}'",
    "text[]": "'{}'", "regclass": "'memory.observations'", "regrole": "'postgres'", "oid": "0", "bytea": "'\\x00'",
}
BACKTRACE_MARKS = ("stack backtrace", "rust_begin_unwind", "\n   0: ", "at /rustc/", "core::panicking")


def functions(conn):
    rows = conn.execute("""
        SELECT p.oid, p.pronamespace::regnamespace::text || '.' || quote_ident(p.proname), p.proretset, p.prorettype = 'trigger'::regtype AS is_trigger,
               coalesce(array(SELECT format_type(t, NULL) FROM unnest(p.proargtypes::oid[]) WITH ORDINALITY a(t, n) ORDER BY n), '{}'),
               p.provariadic <> 0 OR EXISTS (SELECT 1 FROM unnest(p.proargtypes::oid[]) t
                                              WHERE t IN ('anyelement'::regtype, 'anyarray'::regtype, 'anynonarray'::regtype,
                                                          'anyenum'::regtype, '"any"'::regtype, 'internal'::regtype))
          FROM pg_proc p
         WHERE p.pronamespace IN ('memory'::regnamespace, 'memory_internal'::regnamespace) AND p.prokind = 'f'
         ORDER BY p.proname, p.oid""").fetchall()
    return rows


def enum_labels(conn):
    return {f"memory.{name}": labels for name, labels in conn.execute(
        "SELECT t.typname, array_agg(e.enumlabel ORDER BY e.enumsortorder) FROM pg_type t JOIN pg_enum e ON e.enumtypid = t.oid "
        "WHERE t.typnamespace = 'memory'::regnamespace GROUP BY 1")}


def values_for(typ, enums):
    if typ in enums:
        return [f"'{enums[typ][0]}'::{typ}", "NULL"], f"'{enums[typ][0]}'::{typ}"
    if typ in HOSTILE:
        return [f"{v}::{typ}" for v in HOSTILE[typ]], f"{BENIGN[typ]}::{typ}"
    return [f"NULL::{typ}"], f"NULL::{typ}"


def test_every_function_answers_bad_input_with_a_clean_error(dsn, conn):
    conn.execute("SELECT memory.audit_ensure_partitions(1)")
    conn.execute("INSERT INTO memory.observations (org_id, user_id, content) VALUES ('acme', 'u1', 'a note'), ('globex', 'u2', 'b')")
    enums = enum_labels(conn)
    funcs = functions(conn)
    assert len(funcs) > 100, len(funcs)
    faults, calls = [], 0
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SET statement_timeout = '10s'")
        c.execute("SET client_min_messages = error")
        for oid, name, retset, is_trigger, args, polymorphic in funcs:
            if polymorphic:
                continue
            if is_trigger:
                cases = [[]]  # a trigger function called directly
            else:
                table = [values_for(t, enums) for t in args]
                cases = [[b for _, b in table]]
                for k, (hostile, _) in enumerate(table):
                    for v in hostile:
                        cases.append([b if j != k else v for j, (_, b) in enumerate(table)])
            for argv in cases:
                call = f"{name}({', '.join(argv)})"
                sql = f"SELECT count(*) FROM {call}" if retset else f"SELECT {call}"
                calls += 1
                try:
                    with c.transaction():
                        c.execute(sql)
                        raise _Rollback()
                except _Rollback:
                    pass
                except psycopg.DatabaseError as e:
                    if c.closed or e.sqlstate is None:  # the server ended the connection
                        faults.append((call[:200], "connection lost", str(e)[:200]))
                        c = psycopg.connect(dsn, autocommit=True)
                        c.execute("SET statement_timeout = '10s'")
                        continue
                    d = e.diag
                    fields = " ".join(f for f in (d.message_primary, d.message_detail, d.message_hint, d.context) if f)
                    if e.sqlstate in ("XX000", "57014") or any(m in fields for m in BACKTRACE_MARKS):
                        faults.append((call[:200], e.sqlstate, (d.message_primary or "")[:200]))
    print(f"\nbad input: {len(funcs)} functions, {calls} calls, {len(faults)} faults")
    assert not faults, "\n".join(sorted({f"{f[0].split('(')[0]} {f[1]} {f[2][:90]}" for f in faults}))
    # Nothing above committed; the chains are whole.
    conn.execute("SELECT memory.audit_integrate()")
    bad = conn.execute("SELECT chain_id, reason FROM memory.audit_verify() WHERE NOT ok").fetchall()
    assert not bad, bad


class _Rollback(Exception):
    pass
