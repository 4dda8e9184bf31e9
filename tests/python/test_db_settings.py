"""Settings a database owner may change (standard_conforming_strings, DateStyle, bytea_output,
IntervalStyle, extra_float_digits) change nothing memory_ext computes or writes (issue 34 item 9)."""
import psycopg


def test_database_settings_change_nothing(dsn, conn):
    db = conn.execute("SELECT current_database()").fetchone()[0]
    for setting, value in [("standard_conforming_strings", "off"), ("bytea_output", "escape"),
                           ("DateStyle", "'SQL, DMY'"), ("IntervalStyle", "sql_standard"), ("extra_float_digits", "-3")]:
        conn.execute(f"ALTER DATABASE {db} SET {setting} = {value}")
    with psycopg.connect(dsn, autocommit=True) as c:
        notices = []
        c.add_notice_handler(lambda d: notices.append(f"{d.severity}: {d.message_primary}"))
        assert c.execute("SHOW standard_conforming_strings").fetchone() == ("off",)
        c.execute("SELECT memory.audit_append('app.x', '{\"n\": 1.5}', 'acme')")
        c.execute("CREATE TABLE public.t (id bigserial PRIMARY KEY, org_id text, content text, classification memory.classification)")
        c.execute("SELECT memory.govern('public.t', '{\"audit\": true}')")
        c.execute("INSERT INTO public.t (org_id, content) VALUES ('acme', 'rotate the api_key')")
        c.execute("INSERT INTO memory.observations (org_id, content) VALUES ('acme', 'ssn 123-45-6789')")
        # Last month's partition exists and is empty: sealing it records an empty last hash.
        c.execute("SELECT memory.audit_ensure_partitions(3, date_trunc('month', now()) - interval '1 month')")
        c.execute("SELECT memory.audit_integrate()")
        c.execute("SELECT count(*) FROM memory.audit_seal(date_trunc('month', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC')")
        empty = c.execute("SELECT encode(last_entry_hash, 'hex') FROM memory.audit_seals WHERE entries = 0").fetchall()
        assert empty and all(h == ("",) for h in empty), empty
        assert all(ok for (_, _, ok, *_) in c.execute("SELECT * FROM memory.audit_verify()").fetchall())
        # The owner's trigger checks still read their patterns as written.
        assert c.execute("SELECT count(*) FROM pg_trigger WHERE tgrelid = 'public.t'::regclass AND tgname LIKE 'memory%'").fetchone()[0] >= 3
        assert not [n for n in notices if n.startswith(("WARNING", "ERROR"))], notices
    assert conn.execute("SELECT classification::text FROM public.t").fetchone() == ("confidential",)
