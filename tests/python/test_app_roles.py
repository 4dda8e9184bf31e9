"""The application's own roles (issue 34): a non-superuser owns the governed table, services log in
as tenant-bound writer, reader and admin roles. Every everyday path works as them, and the table's
owner cannot outrun governance. The superuser (`conn`) only sets up roles and reads what happened.
"""
import psycopg
import pytest

from conftest import connect, ensure_role

OWNER, WRITER, READER, ADMIN, GLOBEX = "app_owner", "app_writer", "app_reader", "app_admin", "app_globex"
SECRET = "AKIAIOSFODNN7EXAMPLE ssn 123-45-6789"


@pytest.fixture
def app(dsn, conn):
    """The README quick start as an application lives it: app_owner (no superuser, bound to acme)
    creates and governs app.notes and grants the writer INSERT/UPDATE/DELETE; writer, reader and
    admin are bound to acme, app_globex to globex."""
    conn.execute("SELECT memory.setup_roles()")
    ensure_role(conn, OWNER, "memory_writer")
    ensure_role(conn, WRITER, "memory_writer")
    ensure_role(conn, READER, "memory_reader")
    ensure_role(conn, ADMIN, "memory_admin")
    ensure_role(conn, GLOBEX, "memory_writer")
    for role, org in [(OWNER, "acme"), (WRITER, "acme"), (READER, "acme"), (ADMIN, "acme"), (GLOBEX, "globex")]:
        conn.execute("SELECT memory.grant_org(%s, %s)", (role, org))
    conn.execute(f"CREATE SCHEMA app AUTHORIZATION {OWNER}")
    conn.execute(f"GRANT USAGE ON SCHEMA app TO {WRITER}, {READER}, {ADMIN}, {GLOBEX}")
    with connect(dsn, OWNER) as c:
        c.execute("CREATE TABLE app.notes (id bigserial PRIMARY KEY, tenant text, uid text, body text, files text[], "
                  "meta jsonb, extra int)")
        c.execute("""SELECT memory.govern('app.notes', '{"content": "body", "source_files": "files", "target": "meta",
                     "org": "tenant", "user": "uid", "id": "id", "audit": true}')""")
        c.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON app.notes TO {WRITER}, {GLOBEX}")
        c.execute(f"GRANT USAGE ON SEQUENCE app.notes_id_seq TO {WRITER}, {GLOBEX}")
        c.execute(f"GRANT SELECT ON app.notes TO {READER}")
    return dsn


def tier(conn, note_id):
    return conn.execute("SELECT meta->>'classification' FROM app.notes WHERE id = %s", (note_id,)).fetchone()[0]


def held_note(dsn, conn):
    """A note of acme user u1 under an admin's legal hold on u1; its id."""
    with connect(dsn, OWNER) as c:
        (nid,) = c.execute("INSERT INTO app.notes (tenant, uid, body) VALUES ('acme', 'u1', 'meeting notes') RETURNING id").fetchone()
    with connect(dsn, ADMIN) as c:
        c.execute("INSERT INTO memory.legal_holds (org_id, user_id, reason) VALUES ('acme', 'u1', 'litigation')")
    return nid


def test_owner_and_writer_update_and_delete_governed_rows(app, conn):
    with connect(app, OWNER) as c:
        (a,) = c.execute("INSERT INTO app.notes (tenant, uid, body) VALUES ('acme', 'u2', 'lunch plans') RETURNING id").fetchone()
        c.execute("UPDATE app.notes SET body = 'rotate the api_key' WHERE id = %s", (a,))
    assert tier(conn, a) == "confidential", "the owner's content change is re-classified"
    with connect(app, WRITER) as c:
        (b,) = c.execute("INSERT INTO app.notes (tenant, uid, body) VALUES ('acme', 'u2', 'draft') RETURNING id").fetchone()
        c.execute("UPDATE app.notes SET body = %s WHERE id = %s", (SECRET, b))
        c.execute("UPDATE app.notes SET extra = 1 WHERE id = %s", (b,))
        c.execute("DELETE FROM app.notes WHERE id = %s", (a,))
    assert tier(conn, b) == "restricted"
    assert conn.execute("SELECT count(*) FROM app.notes WHERE id = %s", (a,)).fetchone() == (0,)
    conn.execute("SELECT memory.audit_integrate()")
    assert conn.execute("SELECT count(*) FROM memory.audit_log WHERE chain_id = 'acme' AND payload->>'table' = 'app.notes'"
                        " AND actor_id = 'role:app_writer'").fetchone()[0] >= 3
    assert all(ok for (ok,) in conn.execute("SELECT ok FROM memory.audit_verify()").fetchall())


def test_a_held_row_answers_mx006_to_owner_and_writer(app, conn):
    nid = held_note(app, conn)
    for role in (OWNER, WRITER):
        with connect(app, role) as c:
            for stmt in ("DELETE FROM app.notes WHERE id = %s", "UPDATE app.notes SET body = 'gone' WHERE id = %s"):
                with pytest.raises(psycopg.DatabaseError) as e:
                    c.execute(stmt, (nid,))
                assert e.value.sqlstate == "MX006", (role, stmt, e.value.sqlstate, str(e.value))
                assert "legal hold" in str(e.value)
            c.execute("UPDATE app.notes SET extra = 7 WHERE id = %s", (nid,))  # not content: allowed
    assert conn.execute("SELECT body FROM app.notes WHERE id = %s", (nid,)).fetchone() == ("meeting notes",)


def test_the_owners_late_trigger_is_refused(app, conn):
    with connect(app, OWNER) as c:
        c.execute("""CREATE FUNCTION app.zz() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN
                     NEW.meta := '{"classification":"public"}'; NEW.body := 'erased'; RETURN NEW; END$$""")
        with pytest.raises(psycopg.DatabaseError) as e:
            c.execute("CREATE TRIGGER zz_evil BEFORE INSERT OR UPDATE ON app.notes FOR EACH ROW EXECUTE FUNCTION app.zz()")
        assert e.value.sqlstate == "42501" and "memory_" in (e.value.diag.message_hint or "")
        # A trigger that fires before memory_ext's is allowed, and renaming it past them is not.
        c.execute("CREATE TRIGGER app_early BEFORE UPDATE ON app.notes FOR EACH ROW EXECUTE FUNCTION app.zz()")
        with pytest.raises(psycopg.DatabaseError) as e:
            c.execute("ALTER TRIGGER app_early ON app.notes RENAME TO zz_late")
        assert e.value.sqlstate == "42501"
        # Nor can such a trigger come in before govern: govern refuses the table.
        c.execute("CREATE TABLE app.n3 (id bigserial PRIMARY KEY, tenant text, body text)")
        c.execute("CREATE TRIGGER zz_evil BEFORE INSERT ON app.n3 FOR EACH ROW EXECUTE FUNCTION app.zz()")
        with pytest.raises(psycopg.DatabaseError) as e:
            c.execute("""SELECT memory.govern('app.n3', '{"content": "body", "org": "tenant"}')""")
        assert e.value.sqlstate == "22023"


def test_the_final_row_is_governed(app, conn):
    """The owner's early trigger rewrites the content on an update of an unmapped column: the
    final content is classified, audited with its hash, and a held row's content cannot change."""
    nid = held_note(app, conn)
    with connect(app, OWNER) as c:
        c.execute("""CREATE FUNCTION app.rw() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN
                     IF NEW.extra = 99 THEN NEW.body := 'AKIAIOSFODNN7EXAMPLE'; END IF;
                     IF NEW.extra = 98 THEN NEW.meta := '{"classification":"public"}'; END IF;
                     RETURN NEW; END$$""")
        c.execute("CREATE TRIGGER app_rw BEFORE INSERT OR UPDATE ON app.notes FOR EACH ROW EXECUTE FUNCTION app.rw()")
        (a,) = c.execute("INSERT INTO app.notes (tenant, uid, body, extra) VALUES ('acme', 'u2', 'hello', 99) RETURNING id").fetchone()
        (b,) = c.execute("INSERT INTO app.notes (tenant, uid, body) VALUES ('acme', 'u2', 'hello') RETURNING id").fetchone()
        c.execute("UPDATE app.notes SET extra = 99 WHERE id = %s", (b,))
        with pytest.raises(psycopg.DatabaseError) as e:
            c.execute("UPDATE app.notes SET extra = 98 WHERE id = %s", (b,))
        assert e.value.sqlstate == "MX004", "the trigger's lowered tier is refused"
        with pytest.raises(psycopg.DatabaseError) as e:
            c.execute("UPDATE app.notes SET extra = 99 WHERE id = %s", (nid,))
        assert e.value.sqlstate == "MX006"
    # The key alone is what memory.classify says of it; neither row keeps the tier of 'hello'.
    (key_tier,) = conn.execute("SELECT memory.classify('AKIAIOSFODNN7EXAMPLE')::text").fetchone()
    assert key_tier in ("confidential", "restricted")
    assert tier(conn, a) == key_tier
    assert tier(conn, b) == key_tier
    assert conn.execute("SELECT body FROM app.notes WHERE id = %s", (nid,)).fetchone() == ("meeting notes",)


def test_mapped_columns_cannot_be_renamed_or_dropped(app, conn):
    with connect(app, OWNER) as c:
        for stmt in ("ALTER TABLE app.notes RENAME COLUMN body TO b2", "ALTER TABLE app.notes DROP COLUMN files",
                     "ALTER TABLE app.notes RENAME COLUMN tenant TO t2"):
            with pytest.raises(psycopg.DatabaseError) as e:
                c.execute(stmt)
            assert e.value.sqlstate == "55000", stmt
            assert "memory.govern" in (e.value.diag.message_hint or "")
        c.execute("ALTER TABLE app.notes RENAME COLUMN extra TO extra2")  # unmapped: fine
        c.execute("INSERT INTO app.notes (tenant, uid, body) VALUES ('acme', 'u3', %s)", (SECRET,))
    assert conn.execute("SELECT meta->>'classification' FROM app.notes WHERE uid = 'u3'").fetchone() == ("restricted",)


def test_truncate_and_drop_of_a_table_with_held_rows_are_refused(app, conn):
    held_note(app, conn)
    with connect(app, OWNER) as c:
        for stmt in ("TRUNCATE app.notes", "DROP TABLE app.notes"):
            with pytest.raises(psycopg.DatabaseError) as e:
                c.execute(stmt)
            assert e.value.sqlstate == "MX006", stmt
    assert conn.execute("SELECT count(*) FROM app.notes").fetchone() == (1,)
    conn.execute("UPDATE memory.legal_holds SET released_at = now()")
    with connect(app, OWNER) as c:
        c.execute("TRUNCATE app.notes")
        c.execute("DROP TABLE app.notes")


def test_client_values_do_not_steer_governance(app, conn):
    with connect(app, WRITER) as c:
        with pytest.raises(psycopg.DatabaseError) as e:
            c.execute("INSERT INTO memory.observations (org_id, content, created_at) VALUES ('acme', %s, now() + interval '50 years')", (SECRET,))
        assert e.value.sqlstate == "22023"
        c.execute("INSERT INTO memory.observations (org_id, content, created_at) VALUES ('acme', 'imported', now() - interval '2 days')")
        for w in ("1000", "-1", "1.5"):
            with pytest.raises(psycopg.DatabaseError) as e:
                c.execute(f"INSERT INTO memory.observations (org_id, content, weight) VALUES ('acme', 'w', {w})")
            assert e.value.sqlstate == "22023", w
        for g in ("memory.alpha_failure", "memory.alpha_success"):
            with pytest.raises(psycopg.DatabaseError) as e:
                c.execute(f"SET {g} = 1")
            assert e.value.sqlstate == "42501", g


def test_an_org_the_role_lacks_is_refused_with_a_hint(app, conn):
    with connect(app, WRITER, "globex") as c:
        with pytest.raises(psycopg.DatabaseError) as e:
            c.execute("INSERT INTO memory.observations (org_id, content) VALUES ('globex', 'x')")
        assert e.value.sqlstate == "42501"
        assert "grant_org" in (e.value.diag.message_hint or "")
        with pytest.raises(psycopg.DatabaseError) as e:
            c.execute("SELECT memory.acting_org()")
        assert e.value.sqlstate == "42501"


def test_a_table_without_an_org_column_is_written_by_its_owner(dsn, conn):
    conn.execute("SELECT memory.setup_roles()")
    ensure_role(conn, "app_solo")
    conn.execute("GRANT CREATE ON SCHEMA public TO app_solo")
    with connect(dsn, "app_solo") as c:
        c.execute("CREATE TABLE public.solo (id bigserial PRIMARY KEY, body text, meta jsonb)")
        c.execute("""SELECT memory.govern('public.solo', '{"content": "body", "target": "meta", "audit": true}')""")
        c.execute("INSERT INTO public.solo (body) VALUES (%s)", (SECRET,))
        c.execute("UPDATE public.solo SET body = 'plain'")
        with pytest.raises(psycopg.DatabaseError) as e:
            c.execute("SELECT memory.audit_append('app.x', '{}', '')")
        assert e.value.sqlstate == "42501"
    conn.execute("SELECT memory.audit_integrate()")
    assert conn.execute("SELECT count(*) FROM memory.audit_log WHERE chain_id = '' AND payload->>'table' = 'public.solo'"
                        " AND actor_id = 'role:app_solo'").fetchone()[0] >= 2


def test_a_governed_table_cannot_become_a_partition(app, conn):
    with connect(app, OWNER) as c:
        c.execute("CREATE TABLE app.par (LIKE app.notes) PARTITION BY LIST (extra)")
        with pytest.raises(psycopg.DatabaseError) as e:
            c.execute("ALTER TABLE app.par ATTACH PARTITION app.notes FOR VALUES IN (1, NULL)")
        assert e.value.sqlstate == "42501"


def test_maintenance_time_travel_is_for_the_owner(app, conn):
    with connect(app, ADMIN) as c:
        for call in ("SELECT memory.run_decay('infinity')", "SELECT memory.run_decay(now() + interval '1 day')",
                     "SELECT memory.freshness_recheck(at => now() + interval '400 days')"):
            with pytest.raises(psycopg.DatabaseError) as e:
                c.execute(call)
            assert e.value.sqlstate == "22023", call
        c.execute("SELECT memory.run_decay(now() + interval '1 minute')")
    conn.execute("SELECT memory.run_decay(now() + interval '1 day')")  # the superuser may (tests, backfills)


def test_parallel_workers_do_not_lose_the_caller(app, conn):
    """A role's SECURITY DEFINER function, called by a victim bound to globex, asks globex's rules
    from a query that would run in parallel workers: it acts as its owner there too (42501)."""
    conn.execute("INSERT INTO memory.classification_rules (org_id, tier, target, pattern, description) "
                 "VALUES ('globex', 'restricted', 'content', '(?i)project kestrel', 'codename')")
    conn.execute(f"GRANT CREATE ON SCHEMA public TO {WRITER}")
    with connect(app, WRITER) as c:  # the attacker: bound to acme only
        c.execute("CREATE TABLE public.probe AS SELECT 'project kestrel ' || g AS t FROM generate_series(1, 5000) g")
        c.execute("GRANT SELECT ON public.probe TO PUBLIC")
        c.execute("""CREATE FUNCTION public.oracle() RETURNS bigint LANGUAGE sql SECURITY DEFINER
                     SET parallel_setup_cost = 0 SET parallel_tuple_cost = 0 SET min_parallel_table_scan_size = 0
                     SET parallel_leader_participation = off SET max_parallel_workers_per_gather = 2
                     AS $$ SELECT count(*) FROM public.probe
                           WHERE memory.classify_explain(t, NULL, NULL, 'globex')->>'rule' IS NOT NULL $$""")
        c.execute("GRANT EXECUTE ON FUNCTION public.oracle() TO PUBLIC")
    with connect(app, GLOBEX) as c:  # the victim may read globex's rules itself
        with pytest.raises(psycopg.DatabaseError) as e:
            c.execute("SELECT public.oracle()")
        assert e.value.sqlstate == "42501"
    # The functions that answer for the caller never run in a worker.
    rows = conn.execute("SELECT proname, proparallel FROM pg_proc WHERE pronamespace IN ('memory'::regnamespace, 'memory_internal'::regnamespace) "
                        "AND proname IN ('_caller', '_classify', '_classify_explain', 'classify', 'classify_explain')").fetchall()
    assert rows and all(p == "r" for _, p in rows), rows


def test_the_everyday_flow_as_the_application(app, conn):
    """Insert, recall, feedback, consent and contexts, export, erasure and verification, each by the
    tenant role whose job it is; nothing of globex reaches acme's roles and back."""
    with connect(app, WRITER) as w:
        w.execute("SELECT set_config('memory.actor_id', 'agent-7', false)")
        (oid,) = w.execute("INSERT INTO memory.observations (org_id, user_id, content) VALUES ('acme', 'u1', 'prefers short answers') "
                           "RETURNING id").fetchone()
        w.execute("INSERT INTO memory.observations (org_id, user_id, content) VALUES ('acme', 'u1', %s)", (SECRET,))
        w.execute("INSERT INTO app.notes (tenant, uid, body) VALUES ('acme', 'u1', 'likes tea')")
        assert w.execute("SELECT applied FROM memory.record_outcome('s1', 'accepted', ARRAY[%s::uuid])", (oid,)).fetchone() == (True,)
        assert w.execute("SELECT memory.grant_consent('acme', 'u1', '{create_task,save_to_thread}')").fetchone() == (1,)
        w.execute("INSERT INTO memory.user_contexts (org_id, user_id, scope, thread_id, source, fields) "
                  "VALUES ('acme', 'u1', 'thread', 'th-1', 'save_as_thread', '{\"research_style\": \"top-down\"}')")
    with connect(app, GLOBEX) as g:
        g.execute("INSERT INTO memory.observations (org_id, user_id, content) VALUES ('globex', 'u1', 'prefers short answers too')")
    with connect(app, READER) as r:
        rows = r.execute("SELECT content FROM memory.recall('acme', 'short answers', 10)").fetchall()
        assert rows == [("prefers short answers",)]
        assert r.execute("SELECT count(*) FROM memory.observations").fetchone() == (2,)
        slices = r.execute("SELECT memory.load_slices('acme', 'u1', 'thread_refresh', NULL, 'th-1')").fetchone()[0]
        assert slices["slices"].get("S5_research_style") == "top-down"
        assert r.execute("SELECT count(*) FROM app.notes").fetchone() == (1,)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            r.execute("SELECT memory.recall('globex', 'short answers', 10)")
    with connect(app, ADMIN) as a:
        export = a.execute("SELECT memory.export_subject('u1')").fetchone()[0]
        assert "prefers short answers" in str(export) and "too" not in str(export)
        assert all(ok for (_, _, ok, *_) in a.execute("SELECT * FROM memory.audit_verify()").fetchall())
        a.execute("SELECT memory.erase_subject('u1')")
        assert a.execute("SELECT count(*) FROM memory.observations WHERE user_id = 'u1'").fetchone() == (0,)
    assert conn.execute("SELECT count(*) FROM memory.observations WHERE org_id = 'globex'").fetchone() == (1,)
    assert conn.execute("SELECT count(*) FROM app.notes WHERE uid = 'u1'").fetchone() == (0,), "erasure reaches the governed table"
    conn.execute("SELECT memory.audit_integrate()")
    assert conn.execute("SELECT count(*) FROM memory.audit_log WHERE chain_id = 'acme' AND actor_id LIKE 'role:%'").fetchone()[0] >= 1
    assert all(ok for (_, _, ok, *_) in conn.execute("SELECT * FROM memory.audit_verify()").fetchall())


def test_a_reader_in_an_idle_transaction_holds_nobody_up(app, conn):
    with connect(app, WRITER) as w:
        w.execute("SELECT memory.grant_consent('acme', 'u1', '{create_task}')")
    reader = connect(app, READER)
    try:
        reader.autocommit = False
        reader.execute("SELECT memory.consent_receipt('acme', 'u1')")
        reader.execute("SELECT * FROM memory.recall('acme', 'x', 5)")
        reader.execute("SELECT memory.load_slices('acme', 'u1', 'snapshot')")
        # ... and stays idle in its transaction. Another tenant's entries are chained meanwhile.
        with connect(app, GLOBEX) as g:
            g.execute("INSERT INTO memory.observations (org_id, content) VALUES ('globex', 'a note')")
        conn.execute("SET lock_timeout = '5s'")
        assert conn.execute("SELECT memory.audit_integrate()").fetchone()[0] >= 1
        assert conn.execute("SELECT count(*) FROM memory.audit_pending").fetchone() == (0,)
    finally:
        reader.rollback()
        reader.close()
        conn.execute("RESET lock_timeout")
def test_tenant_admins_read_their_own_trail(app, conn):
    """Issue 34 item 11: each org's admin reads its own chain through memory.audit_events, by org,
    workspace, event type, time and the application's actor id in clear, never another org's; the
    backlog shows it its own pending entries; nothing is integrated by reading."""
    ensure_role(conn, "app_globex_admin", "memory_admin")
    conn.execute("SELECT memory.grant_org('app_globex_admin', 'globex')")
    with connect(app, WRITER) as c:
        c.execute("SET memory.actor_id = 'agent-7'")
        c.execute("INSERT INTO app.notes (tenant, uid, body) VALUES ('acme', 'u1', 'written by agent 7')")
        c.execute("""SELECT memory.audit_append('app.checkout', '{"n": 1}', 'acme', 'p1', 'ws1')""")
        c.execute("RESET memory.actor_id")
        c.execute("""SELECT memory.audit_append('app.checkout', '{"n": 2}', 'acme', 'p1', 'ws2')""")
    with connect(app, GLOBEX) as c:
        c.execute("SET memory.actor_id = 'agent-7'")
        c.execute("INSERT INTO app.notes (tenant, uid, body) VALUES ('globex', 'u9', 'globex note by agent 7')")
        c.execute("""SELECT memory.audit_append('app.checkout', '{"n": 3}', 'globex', 'p1', 'ws1')""")
    pending = dict(conn.execute("SELECT chain_id, count(*) FROM memory.audit_pending GROUP BY 1").fetchall())
    assert pending["acme"] >= 3 and pending["globex"] >= 2, pending
    with connect(app, ADMIN) as a:
        rows = a.execute("SELECT chain_id, event_type, payload->>'n', seq FROM memory.audit_events(actor => 'agent-7', lim => 100)").fetchall()
        assert sorted((r[0], r[1], r[2]) for r in rows) == [("acme", "app.checkout", "1"), ("acme", "memory.store", None)], rows
        assert all(r[3] is None for r in rows), "still pending, listed with a NULL seq"
        assert a.execute("SELECT payload->>'n' FROM memory.audit_events('ws2')").fetchall() == [("2",)]
        assert a.execute("SELECT payload->>'n' FROM memory.audit_events('ws1', 'app.checkout', org_id => 'acme')").fetchall() == [("1",)]
        assert sorted(a.execute("SELECT payload->>'n' FROM memory.audit_events(event_type => 'app.checkout')").fetchall()) == [("1",), ("2",)]
        assert a.execute("SELECT count(*) FROM memory.audit_events(since => now() + interval '1 day')").fetchone() == (0,)
        assert a.execute("SELECT count(*) FROM memory.audit_events(since => now() - interval '1 hour', lim => 100)").fetchone()[0] == pending["acme"]
        assert {r[0] for r in a.execute("SELECT DISTINCT chain_id FROM memory.audit_events(lim => 10000)")} == {"acme"}
        for call in ("SELECT * FROM memory.audit_events(org_id => 'globex')", "SELECT * FROM memory.audit_events(org_id => '')"):
            with pytest.raises(psycopg.DatabaseError) as e:
                a.execute(call)
            assert e.value.sqlstate == "42501", call
        # The log itself stays closed; the salt never reaches the admin.
        for call in ("SELECT count(*) FROM memory.audit_log", "SELECT memory_internal._pseudonym('agent-7')",
                     "SELECT * FROM memory_internal._audit_backlog_chains(NULL)"):
            with pytest.raises(psycopg.DatabaseError) as e:
                a.execute(call)
            assert e.value.sqlstate == "42501", call
        backlog = a.execute("SELECT chains, pending, parked, oldest_pending_at IS NOT NULL FROM memory.audit_backlog").fetchone()
        assert backlog == ("own", pending["acme"], 0, True), backlog
    with connect(app, "app_globex_admin") as g:
        rows = g.execute("SELECT chain_id, event_type, payload->>'n' FROM memory.audit_events(actor => 'agent-7')").fetchall()
        assert sorted(rows, key=str) == sorted([("globex", "app.checkout", "3"), ("globex", "memory.store", None)], key=str), rows
        with pytest.raises(psycopg.DatabaseError) as e:
            g.execute("SELECT * FROM memory.audit_events(org_id => 'acme')")
        assert e.value.sqlstate == "42501"
        assert g.execute("SELECT chains, pending FROM memory.audit_backlog").fetchone() == ("own", pending["globex"])
    # Reading integrated nothing; once integrated, the admin's events carry their seq.
    assert dict(conn.execute("SELECT chain_id, count(*) FROM memory.audit_pending GROUP BY 1").fetchall()) == pending
    total = conn.execute("SELECT chains, pending FROM memory.audit_backlog").fetchone()
    assert total == ("all", sum(pending.values())), total
    conn.execute("SELECT memory.audit_integrate()")
    with connect(app, ADMIN) as a:
        assert a.execute("SELECT count(*) FILTER (WHERE seq IS NULL), count(*) FROM memory.audit_events(actor => 'agent-7')").fetchone() == (0, 2)
        assert a.execute("SELECT pending, last_integration_at IS NOT NULL FROM memory.audit_backlog").fetchone() == (0, True)


def test_export_says_how_many_restricted_rows_it_withheld(app, conn):
    with connect(app, WRITER) as c:
        c.execute("INSERT INTO app.notes (tenant, uid, body) VALUES ('acme', 'u5', %s), ('acme', 'u5', 'lunch plans')", (SECRET,))
        c.execute("INSERT INTO memory.observations (org_id, user_id, content) VALUES ('acme', 'u5', %s), ('acme', 'u5', 'likes tea')", (SECRET,))
    with connect(app, ADMIN) as a:
        out = a.execute("SELECT memory.export_subject('u5')").fetchone()[0]
        assert out["restricted_withheld"] == {"observations": 1, "archive": 0, "weight_history": 0,
                                              "tables": {"app.notes": 1}, "total": 2}, out["restricted_withheld"]
        assert [r["body"] for r in out["sections"]["tables"]["app.notes"]] == ["lunch plans"]
        assert [r["content"] for r in out["sections"]["observations"]] == ["likes tea"]
        full = a.execute("SELECT memory.export_subject('u5', true)").fetchone()[0]
        assert full["restricted_withheld"]["total"] == 0 and len(full["sections"]["tables"]["app.notes"]) == 2


def test_alter_table_cannot_rewrite_governed_rows(app, conn):
    """An attacker review's finding: ALTER COLUMN ... TYPE ... USING rewrote held content, lowered
    the tier and moved rows to another org without a trigger firing."""
    nid = held_note(app, conn)
    with connect(app, OWNER) as c:
        for stmt in ("ALTER TABLE app.notes ALTER COLUMN body TYPE text USING 'wiped'",
                     "ALTER TABLE app.notes ALTER COLUMN tenant TYPE text USING 'globex'",
                     "ALTER TABLE app.notes ALTER COLUMN meta TYPE jsonb USING '{\"classification\": \"public\"}'",
                     "ALTER TABLE app.notes ALTER COLUMN extra TYPE bigint"):
            with pytest.raises(psycopg.DatabaseError) as e:
                c.execute(stmt)
            assert e.value.sqlstate == "42501", stmt
            assert "memory.ungovern" in (e.value.diag.message_hint or "")
        c.execute("CREATE TABLE app.parent (LIKE app.notes)")
        with pytest.raises(psycopg.DatabaseError) as e:
            c.execute("ALTER TABLE app.notes INHERIT app.parent")
        assert e.value.sqlstate == "42501"
    assert conn.execute("SELECT body, tenant FROM app.notes WHERE id = %s", (nid,)).fetchone() == ("meeting notes", "acme")


def test_truncate_tells_nothing_of_another_orgs_holds(app, conn):
    """An owner writes only rows of its own orgs, even into a table governed for classification
    only; a table holding another org's rows (written by that org's writer) is not truncated by an
    owner that may not act for it (42501), whether or not they are held: no oracle on another org's
    holds, and nothing of another org's removed."""
    with connect(app, OWNER) as c:
        c.execute("CREATE TABLE app.probe (id bigserial PRIMARY KEY, tenant text, uid text, body text, meta jsonb)")
        c.execute("""SELECT memory.govern('app.probe', '{"content": "body", "target": "meta", "org": "tenant", "user": "uid"}')""")
        with pytest.raises(psycopg.errors.InsufficientPrivilege) as e:
            c.execute("INSERT INTO app.probe (tenant, uid, body) VALUES ('globex', 'carol', 'x')")
        assert "grant_org" in (e.value.diag.message_hint or ""), "owning a table never writes another tenant's rows"
        c.execute(f"GRANT INSERT ON app.probe TO {GLOBEX}")
        c.execute(f"GRANT USAGE ON SEQUENCE app.probe_id_seq TO {GLOBEX}")
    with connect(app, GLOBEX) as g:
        g.execute("INSERT INTO app.probe (tenant, uid, body) VALUES ('globex', 'carol', 'x')")
    conn.execute("INSERT INTO memory.legal_holds (org_id, user_id, reason) VALUES ('globex', 'carol', 'theirs')")
    with connect(app, OWNER) as c:
        with pytest.raises(psycopg.DatabaseError) as e:
            c.execute("TRUNCATE app.probe")
        assert e.value.sqlstate == "42501" and "legal hold" not in str(e.value)
        with pytest.raises(psycopg.DatabaseError) as e:
            c.execute("SELECT memory_internal._hold_on_rows('app.probe')")
        assert e.value.sqlstate == "42501"
    conn.execute("UPDATE memory.legal_holds SET released_at = now()")
    with connect(app, OWNER) as c:
        with pytest.raises(psycopg.DatabaseError) as e:
            c.execute("TRUNCATE app.probe")
        assert e.value.sqlstate == "42501", "the same answer without a hold"
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            c.execute("DELETE FROM app.probe")  # nor row by row: the hold guard asks for the row's org
    conn.execute("DELETE FROM app.probe")
    with connect(app, OWNER) as c:
        c.execute("INSERT INTO app.probe (tenant, uid, body) VALUES ('acme', 'u1', 'mine')")
        c.execute("TRUNCATE app.probe")


def test_a_table_without_an_org_column_drops_whatever_other_orgs_hold(dsn, conn):
    conn.execute("SELECT memory.setup_roles()")
    ensure_role(conn, "app_solo")
    conn.execute("GRANT CREATE ON SCHEMA public TO app_solo")
    conn.execute("INSERT INTO memory.legal_holds (org_id, reason) VALUES ('globex', 'theirs')")
    with connect(dsn, "app_solo") as c:
        c.execute("CREATE TABLE public.solo2 (id bigserial PRIMARY KEY, body text, meta jsonb)")
        c.execute("""SELECT memory.govern('public.solo2', '{"content": "body", "target": "meta"}')""")
        c.execute("INSERT INTO public.solo2 (body) VALUES ('a note of no org')")
        assert conn.execute("SELECT count(*) FROM memory.governance_registry WHERE relid = 'public.solo2'::regclass").fetchone() == (1,)
        # globex's hold is on globex's rows; a table without an org column holds none of them.
        c.execute("DROP TABLE public.solo2")
    assert conn.execute("SELECT to_regclass('public.solo2')").fetchone() == (None,), "the owner's DROP went through"
    assert conn.execute("SELECT count(*) FROM memory.governance_registry r WHERE NOT EXISTS "
                        "(SELECT 1 FROM pg_class c WHERE c.oid = r.relid)").fetchone() == (0,), "its registration went with it"
    assert conn.execute("SELECT count(*) FROM memory.legal_holds WHERE org_id = 'globex' AND reason = 'theirs'").fetchone() == (1,), \
        "and the other org's hold is untouched"


def test_an_update_never_lengthens_retention(app, conn):
    with connect(app, OWNER) as c:
        c.execute("CREATE TABLE app.st (id bigserial PRIMARY KEY, tenant text, uid text, body text, meta jsonb, "
                  "created_at timestamptz NOT NULL DEFAULT now(), expires_at timestamptz, purge_after timestamptz, archive_at timestamptz)")
        c.execute("""SELECT memory.govern('app.st', '{"content": "body", "target": "meta", "org": "tenant", "user": "uid",
                     "stamps": {"created_at": "created_at", "expires_at": "expires_at", "purge_after": "purge_after", "archive_at": "archive_at"}}')""")
        c.execute(f"GRANT SELECT, INSERT, UPDATE ON app.st TO {WRITER}")
        c.execute(f"GRANT USAGE ON SEQUENCE app.st_id_seq TO {WRITER}")
    with connect(app, WRITER) as w:
        (sid,) = w.execute("INSERT INTO app.st (tenant, uid, body) VALUES ('acme', 'u1', %s) RETURNING id", (SECRET,)).fetchone()
        before = w.execute("SELECT expires_at, purge_after FROM app.st WHERE id = %s", (sid,)).fetchone()
        with pytest.raises(psycopg.DatabaseError) as e:
            w.execute("UPDATE app.st SET created_at = now() + interval '10 years' WHERE id = %s", (sid,))
        assert e.value.sqlstate == "22023"
        w.execute("UPDATE app.st SET expires_at = 'infinity', purge_after = NULL WHERE id = %s", (sid,))
        assert w.execute("SELECT expires_at, purge_after FROM app.st WHERE id = %s", (sid,)).fetchone() == before
        w.execute("UPDATE app.st SET created_at = created_at - interval '1 day' WHERE id = %s", (sid,))
        after = w.execute("SELECT expires_at FROM app.st WHERE id = %s", (sid,)).fetchone()[0]
        assert before[0] is None or after <= before[0], "moving created_at earlier never lengthens retention"
        w.execute("UPDATE app.st SET expires_at = expires_at - interval '1 day' WHERE id = %s", (sid,))
        assert w.execute("SELECT expires_at FROM app.st WHERE id = %s", (sid,)).fetchone()[0] < after, "shortening is kept"
