"""Regressions for an attacker's review of deferred audit: nothing a role without the extension
owner's rights does stops or poisons integration for everyone, and reserved event names cannot be
smuggled past the check with Unicode spaces."""
import psycopg
import pytest


@pytest.fixture
def roles(conn):
    conn.execute("SELECT memory.setup_roles()")
    conn.execute("DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'atk_nobody') THEN CREATE ROLE atk_nobody LOGIN; END IF;"
                 " IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'atk_writer') THEN CREATE ROLE atk_writer LOGIN; END IF; END $$")
    conn.execute("GRANT memory_writer TO atk_writer")
    conn.execute("SELECT memory.grant_org('atk_writer', 'org_a')")


def as_role(dsn, role):
    return psycopg.connect(dsn.replace("user=postgres", f"user={role}"), autocommit=True)


def test_no_role_can_hold_integration_up(dsn, conn, roles):
    with as_role(dsn, "atk_nobody") as nobody:
        # The old lock key is any role's to take; integration no longer cares about it.
        nobody.execute("SELECT pg_advisory_lock(x'6d656d785f696e74'::bigint)")
        # The lock integrators do take is an advisory lock of a class no SQL function names: the
        # advisory keys beside it do not reach it, and neither do the ROW EXCLUSIVE locks any role
        # gets on memory_ext's tables by preparing a statement that names them (the parser locks
        # a DML target before privileges are checked), held in an open transaction.
        nobody.execute("SELECT pg_advisory_lock(x'6d656d78'::int, 0), pg_advisory_lock(x'6d656d7800000000'::bigint)")
        nobody.execute("BEGIN")
        for table in ("audit_pending", "audit_heads", "audit_log", "audit_keys", "audit_seals"):
            nobody.execute(f"PREPARE p_{table} AS INSERT INTO memory.{table} DEFAULT VALUES")
        held = conn.execute("SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)"
                            " WHERE a.usename = 'atk_nobody' AND l.mode = 'RowExclusiveLock'").fetchone()[0]
        assert held >= 5
        conn.execute("SET statement_timeout = '10s'")
        conn.execute("SELECT memory.audit_append('app.x', '{}', 'org_a')")
        assert conn.execute("SELECT memory.audit_integrate()").fetchone()[0] >= 1
        assert conn.execute("SELECT count(*) FROM memory.audit_pending").fetchone() == (0,)
        conn.execute("SELECT memory.audit_append('app.y', '{}', 'org_a')")
        assert conn.execute("SELECT ok, pending FROM memory.audit_verify('org_a')").fetchone() == (True, 0)
        assert conn.execute("SELECT count(*) FROM memory.audit_log WHERE event_type IN ('app.x', 'app.y')").fetchone() == (2,)
    # A memory_admin no longer runs the sequencer on demand (it would learn every org's volume
    # and could hold it in an open transaction); audit_verify still integrates for it.
    conn.execute("GRANT memory_admin TO atk_writer")
    with as_role(dsn, "atk_writer") as admin:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            admin.execute("SELECT memory.audit_integrate()")


def test_an_oversized_event_is_refused_at_write_and_never_poisons_integration(dsn, conn, roles):
    big = "w" * 6000
    with as_role(dsn, "atk_writer") as w:
        with pytest.raises(psycopg.errors.InvalidParameterValue):
            w.execute("SELECT memory.audit_append('app.p', '{}', 'org_a', NULL, %s)", (big,))
        with pytest.raises(psycopg.errors.InvalidParameterValue):
            w.execute("SELECT memory.audit_append('app.p', %s::jsonb, 'org_a')", ('{"x": "' + "y" * 70000 + '"}',))
    # A governed table's own columns go through the same check.
    conn.execute("CREATE TABLE notes (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), org_id text, ws text, content text,"
                 " classification memory.classification)")
    conn.execute("""SELECT memory.govern('notes', '{"audit": true, "workspace": "ws"}')""")
    with pytest.raises(psycopg.errors.InvalidParameterValue):
        conn.execute("INSERT INTO notes (org_id, ws, content) VALUES ('org_a', %s, 'x')", (big,))
    # An over-long entry that got into pending some other way (here: forged by a superuser) is
    # parked; everyone else's entries are chained.
    conn.execute("SELECT memory.audit_append('app.ok', '{}', 'org_a')")
    conn.execute("SELECT memory.audit_append('app.ok', '{}', 'org_b')")
    with conn.transaction():
        conn.execute("SET LOCAL session_replication_role = replica")
        forged = conn.execute("INSERT INTO memory.audit_pending SELECT id + 7, ord, chain_id, event_type, written_at, actor_id, org_id, project_id, %s,"
                              " payload, key_id, pending_hash FROM memory.audit_pending WHERE chain_id = 'org_a'", (big,)).rowcount
    conn.execute("SELECT memory.audit_integrate()")
    assert conn.execute("SELECT count(*) FROM memory.audit_log WHERE event_type = 'app.ok'").fetchone() == (2,)
    rows = dict((r[0], r[1:]) for r in conn.execute("SELECT chain_id, ok, pending FROM memory.audit_verify()"))
    assert rows["org_b"] == (True, 0)
    assert forged >= 1 and rows["org_a"] == (False, forged)


def test_reserved_event_types_cannot_hide_behind_unicode_spaces(dsn, conn, roles):
    with as_role(dsn, "atk_writer") as w:
        for name in ("\u3000memory.store", "\u2003research.finding", "memory.store\u3000", "\uff4d\uff45\uff4d\uff4f\uff52\uff59.store"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                w.execute("SELECT memory.audit_append(%s, '{}', 'org_a')", (name,))
        with pytest.raises(psycopg.errors.InvalidParameterValue):
            w.execute("SELECT memory.audit_append(' app.padded', '{}', 'org_a')")


def test_a_copied_pending_entry_is_not_chained_twice(conn):
    conn.execute("SELECT memory.audit_append('app.once', '{}', 'acme')")
    with conn.transaction():
        conn.execute("SET LOCAL session_replication_role = replica")
        conn.execute("INSERT INTO memory.audit_pending SELECT * FROM memory.audit_pending")
    row = conn.execute("SELECT ok, pending FROM memory.audit_verify('acme')").fetchone()
    assert row == (False, 2), row  # the copy and its original are parked and reported
    # Neither is chained: which one is the original cannot be told, and chaining one would let
    # the copy through later.
    assert conn.execute("SELECT count(*) FROM memory.audit_log WHERE event_type = 'app.once'").fetchone() == (0,)


def test_maintenance_records_its_own_failure(conn):
    conn.execute("INSERT INTO memory.observations (org_id, content, created_at) VALUES ('acme', 'old', now() - interval '3 years')")
    # A trigger of the DBA's that refuses the soft delete makes the run fail.
    conn.execute("CREATE FUNCTION public.refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'guard says no' USING ERRCODE = 'P0001'; END $$")
    conn.execute("CREATE TRIGGER refuse BEFORE UPDATE ON memory.observations FOR EACH ROW EXECUTE FUNCTION public.refuse()")
    result = conn.execute("SELECT memory.run_maintenance()").fetchone()[0]
    assert result["sqlstate"] == "P0001" and "guard says no" in result["error"], result
    assert conn.execute("SELECT sqlstate, error IS NOT NULL FROM memory.maintenance_runs WHERE id = %s", (result["run_id"],)).fetchone() == ("P0001", True)


def test_a_writers_search_path_runs_none_of_its_code_in_the_append(dsn, conn, roles):
    """The appender runs as the extension owner with name lookups pinned to pg_catalog (through
    PostgreSQL's override search path since 0.2.0, not a setting): a writer whose search_path puts
    its own operators and functions first (exact matches for what the append's statements use)
    gets none of them run, in deferred and immediate mode, through triggers, audit_append,
    integration and recall."""
    conn.execute("CREATE SCHEMA evil")
    conn.execute("GRANT USAGE ON SCHEMA evil TO PUBLIC")
    conn.execute("CREATE TABLE public.hits (who text, what text)")
    conn.execute("GRANT INSERT ON public.hits TO PUBLIC")
    def hit(what):
        return f"INSERT INTO public.hits VALUES (current_user, '{what}')"
    conn.execute("CREATE FUNCTION evil.teq(a text, b text) RETURNS bool LANGUAGE plpgsql AS "
                 f"$$BEGIN {hit('text =')}; RETURN a OPERATOR(pg_catalog.=) b; END$$")
    conn.execute("CREATE OPERATOR evil.= (leftarg = text, rightarg = text, function = evil.teq)")
    conn.execute("CREATE FUNCTION evil.tsplus(a timestamptz, b interval) RETURNS timestamptz LANGUAGE plpgsql AS "
                 f"$$BEGIN {hit('timestamptz +')}; RETURN a OPERATOR(pg_catalog.+) b; END$$")
    conn.execute("CREATE OPERATOR evil.+ (leftarg = timestamptz, rightarg = interval, function = evil.tsplus)")
    conn.execute("CREATE FUNCTION evil.bigtimes(a bigint, b interval) RETURNS interval LANGUAGE plpgsql AS "
                 f"$$BEGIN {hit('bigint *')}; RETURN a::float8 OPERATOR(pg_catalog.*) b; END$$")
    conn.execute("CREATE OPERATOR evil.* (leftarg = bigint, rightarg = interval, function = evil.bigtimes)")
    conn.execute("CREATE FUNCTION evil.now() RETURNS timestamptz LANGUAGE plpgsql AS "
                 f"$$BEGIN {hit('now()')}; RETURN pg_catalog.now(); END$$")
    conn.execute("ALTER ROLE atk_writer SET search_path = evil, pg_catalog, public")
    try:
        for mode in ("deferred", "immediate"):
            conn.execute(f"ALTER ROLE atk_writer SET memory.audit_mode = {mode}")
            with as_role(dsn, "atk_writer") as w:
                assert w.execute("SHOW search_path").fetchone() == ("evil, pg_catalog, public",)
                # The writer's own statement does use its operators: the bait works.
                w.execute("SELECT 'a'::text = 'a'::text")
                assert conn.execute("SELECT count(*) FROM public.hits").fetchone() == (1,)
                conn.execute("TRUNCATE public.hits")
                for i in range(3):
                    w.execute("INSERT INTO memory.observations (org_id, user_id, content) VALUES ('org_a', 'u1', %s)", (f"{mode} note {i}",))
                w.execute("INSERT INTO memory.observations (org_id, user_id, content) SELECT 'org_a', 'u2', 'batch ' || g FROM generate_series(1, 20) g")
                w.execute("SELECT memory.audit_append('app.evil_path', '{\"mode\": \"x\"}', 'org_a')")
                w.execute("SELECT * FROM memory.recall('org_a', 'note', 5)")
            conn.execute("SET search_path = evil, pg_catalog, public")
            conn.execute("SELECT memory.audit_integrate()")
            conn.execute("RESET search_path")
            assert conn.execute("SELECT who, what FROM public.hits").fetchall() == []
        rows = conn.execute("SELECT ok, entries, pending FROM memory.audit_verify('org_a')").fetchone()
        assert rows[0] is True and rows[2] == 0, rows
        stored = conn.execute("SELECT count(*) FROM memory.audit_log WHERE chain_id = 'org_a' AND event_type = 'memory.store'").fetchone()[0]
        assert stored == 2 * 23
        assert conn.execute("SELECT count(*) FROM memory.audit_log WHERE event_type = 'app.evil_path'").fetchone() == (2,)
    finally:
        conn.execute("ALTER ROLE atk_writer RESET search_path")
        conn.execute("ALTER ROLE atk_writer RESET memory.audit_mode")


def test_an_append_stopped_inside_a_savepoint_leaves_nothing_pinned(dsn, conn):
    """The appender pins name lookups with an override search path; an append that fails inside a
    subtransaction (a lock timeout on a chain head, caught by an EXCEPTION block) leaves it to the
    abort: afterwards the session's own search path applies again, and code that runs as a table's
    owner (record_outcome on an application table) runs in the same transaction."""
    conn.execute("CREATE TABLE notes (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), org_id text, content text, "
                 "classification memory.classification, w float8 NOT NULL DEFAULT 1)")
    conn.execute("""SELECT memory.govern('notes', '{"audit": true, "weight": "w"}')""")
    conn.execute("INSERT INTO notes (org_id, content) VALUES ('acme', 'first')")
    conn.execute("CREATE FUNCTION public.mine() RETURNS int LANGUAGE sql AS 'SELECT 7'")
    with psycopg.connect(dsn) as holder, psycopg.connect(dsn) as w:
        holder.execute("SET memory.audit_mode = immediate")
        holder.execute("INSERT INTO notes (org_id, content) VALUES ('acme', 'holds the head')")
        w.execute("SET memory.audit_mode = immediate")
        w.execute("SET lock_timeout = '200ms'")
        w.execute("DO $$ BEGIN INSERT INTO public.notes (org_id, content) VALUES ('acme', 'blocked');"
                  " EXCEPTION WHEN lock_not_available THEN RAISE NOTICE 'caught'; END $$")
        holder.rollback()
        w.execute("RESET lock_timeout")
        assert w.execute("SELECT mine()").fetchone() == (7,)
        applied = w.execute("SELECT applied FROM memory.record_outcome('s', 'accepted', ARRAY(SELECT id FROM notes))").fetchall()
        assert applied == [(True,)]
        w.commit()
    assert conn.execute("SELECT ok FROM memory.audit_verify('acme')").fetchone() == (True,)
    assert conn.execute("SELECT count(*) FROM notes").fetchone() == (1,)
