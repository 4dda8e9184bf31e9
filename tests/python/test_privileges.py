"""The privilege matrix (docs/design.md#trust-boundary): the catalog against the grant table of docs/security.md, and row-level
isolation for every tenant table, from an ordinary login role, each role bound to one org, a '*'
role and a governed table's owner."""
import pathlib
import re

import psycopg
import pytest

from conftest import connect as as_role

SECURITY_DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "security.md"
ROLES = ["PUBLIC", "memory_reader", "memory_writer", "memory_admin"]
TABLE_PRIVS = ["SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE"]
# Closed to every role but the owner (docs/security.md says so under "Grant table").
OWNER_ONLY = {"ann_settings", "audit_log", "audit_log_default", "audit_pending", "audit_outbox", "audit_heads", "audit_seals", "audit_keys", "audit_secrets",
              "org_grants", "governance_registry", "maintenance_runs", "erasure_receipts"}


def grant_table():
    """Rows of docs/security.md's grant table: ([object names], {role: cell})."""
    text = SECURITY_DOC.read_text()
    section = text[text.index("\n## Grant table\n") + 1:]
    end = section.find("\n## ", 1)
    section = section if end < 0 else section[:end]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 5 or not cells[0] or cells[0] in ("object",) or set(cells[0]) <= {"-"}:
            continue
        names = re.findall(r"`([^`]+)`", cells[0])
        # Bare names are memory's, or memory_internal's when they start with "_".
        names = [n if n.startswith(("memory.", "memory_internal.")) else ("memory_internal." if n.startswith("_") else "memory.") + n
                 for n in names]
        rows.append((names, dict(zip(ROLES, cells[1:]))))
    return rows


def parse_privs(cell):
    """'SELECT, INSERT(a, b)' -> {'SELECT': None, 'INSERT': ['a', 'b']}; '—' -> {}."""
    out = {}
    for m in re.finditer(r"(SELECT|INSERT|UPDATE|DELETE|TRUNCATE|EXECUTE)(?:\(([^)]*)\))?", cell):
        out[m.group(1)] = [c.strip() for c in m.group(2).split(",")] if m.group(2) else None
    return out


@pytest.fixture
def roles(conn):
    conn.execute("SELECT memory.setup_roles()")
    conn.execute("DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'pm_nobody') THEN "
                 "CREATE ROLE pm_nobody LOGIN; END IF; END $$")
    return {"PUBLIC": "pm_nobody", "memory_reader": "memory_reader", "memory_writer": "memory_writer",
            "memory_admin": "memory_admin"}


def test_catalog_matches_the_readme_grant_table(conn, roles):
    rows = grant_table()
    assert rows, "docs/security.md has a grant table"
    listed = set()
    failures = []
    for names, cells in rows:
        for name in names:
            schema, obj = name.split(".", 1)
            kind = conn.execute("SELECT c.relkind FROM pg_class c WHERE c.oid = to_regclass(%s)", (name,)).fetchone()
            if kind:
                listed.add(obj)
                for role, cell in cells.items():
                    want = parse_privs(cell)
                    r = roles[role]
                    for p in TABLE_PRIVS:
                        (table_level,) = conn.execute("SELECT has_table_privilege(%s, %s, %s)", (r, name, p)).fetchone()
                        cols = want.get(p, "absent")
                        if cols is None:
                            ok = table_level
                        elif cols == "absent":
                            anycol = p in ("SELECT", "INSERT", "UPDATE") and conn.execute(
                                "SELECT has_any_column_privilege(%s, %s, %s)", (r, name, p)).fetchone()[0]
                            ok = not table_level and not anycol
                        else:
                            have = all(conn.execute("SELECT has_column_privilege(%s, %s, %s, %s)", (r, name, c, p)).fetchone()[0]
                                       for c in cols)
                            ok = have and not table_level
                        if not ok:
                            failures.append(f"{name} {p} for {role}: docs/security.md says {cell!r}")
                continue
            procs = conn.execute("SELECT p.oid FROM pg_proc p WHERE p.pronamespace = %s::regnamespace AND p.proname = %s",
                                 (schema, obj)).fetchall()
            assert procs, f"the grant table of docs/security.md names {name}, which does not exist"
            listed.add(obj)
            for role, cell in cells.items():
                want = "EXECUTE" in parse_privs(cell)
                for (oid,) in procs:
                    (have,) = conn.execute("SELECT has_function_privilege(%s, %s::oid, 'EXECUTE')", (roles[role], oid)).fetchone()
                    if have != want:
                        failures.append(f"{name} EXECUTE for {role}: docs/security.md says {cell!r}, catalog says {have}")
    # Everything not listed is the owner's alone.
    for (rel,) in conn.execute("SELECT c.relname FROM pg_class c WHERE c.relnamespace = 'memory'::regnamespace "
                               "AND c.relkind IN ('r', 'p', 'v', 'm')").fetchall():
        if rel in listed:
            continue
        assert rel in OWNER_ONLY or rel.startswith("audit_log_"), f"{rel} is in neither the grant table nor the owner-only list"
        for role, r in roles.items():
            for p in TABLE_PRIVS:
                (have,) = conn.execute("SELECT has_table_privilege(%s, %s, %s)", (r, f"memory.{rel}", p)).fetchone()
                if have:
                    failures.append(f"owner-only memory.{rel}: {role} has {p}")
    for (proname, oid) in conn.execute("SELECT p.proname, p.oid FROM pg_proc p WHERE p.pronamespace IN ('memory'::regnamespace, 'memory_internal'::regnamespace)").fetchall():
        if proname in listed:
            continue
        for role, r in roles.items():
            (have,) = conn.execute("SELECT has_function_privilege(%s, %s::oid, 'EXECUTE')", (r, oid)).fetchone()
            if have:
                failures.append(f"unlisted memory.{proname}: {role} may EXECUTE it")
    assert not failures, "\n".join(failures)


TENANT_TABLES = {
    # table: an INSERT of one row for org %s (None: not writable by the role that tries)
    "observations": "INSERT INTO memory.observations (org_id, content) VALUES (%s, 'x')",
    "observations_archive": None,
    "observation_weight_history": None,
    "legal_holds": "INSERT INTO memory.legal_holds (org_id, reason) VALUES (%s, 'r')",
    "classification_rules": "INSERT INTO memory.classification_rules (org_id, tier, target, pattern) VALUES (%s, 'internal', 'content', 'x')",
    "org_settings": "INSERT INTO memory.org_settings (org_id, bfsi_mode) VALUES (%s, true)",
    "retention_policies": "INSERT INTO memory.retention_policies (org_id, tier, retention_days) VALUES (%s, 'public', 10)",
    "entities": "INSERT INTO memory.entities (org_id, entity_type, name) VALUES (%s, 'concept', 'n')",
    "claims": None,
    "relationships": None,
    "recheck_tasks": None,
}


def seed(conn):
    for org in ("acme", "globex"):
        conn.execute("INSERT INTO memory.observations (org_id, user_id, content, memory_type) VALUES (%s, 'u', 'note about billing', 'structured')", (org,))
        conn.execute("INSERT INTO memory.legal_holds (org_id, reason) VALUES (%s, 'seed')", (org,))
        conn.execute("INSERT INTO memory.classification_rules (org_id, tier, target, pattern) VALUES (%s, 'restricted', 'content', 'falcon')", (org,))
        conn.execute("INSERT INTO memory.org_settings (org_id) VALUES (%s)", (org,))
        conn.execute("INSERT INTO memory.retention_policies (org_id, tier, retention_days) VALUES (%s, 'internal', 100)", (org,))
        (e,) = conn.execute("INSERT INTO memory.entities (org_id, entity_type, name) VALUES (%s, 'concept', 'n') RETURNING id", (org,)).fetchone()
        (e2,) = conn.execute("INSERT INTO memory.entities (org_id, entity_type, name) VALUES (%s, 'problem', 'm') RETURNING id", (org,)).fetchone()
        (c,) = conn.execute("INSERT INTO memory.claims (org_id, entity_id, claim_text, confidence_score) VALUES (%s, %s, 't', 0.1) RETURNING id",
                            (org, e)).fetchone()
        conn.execute("UPDATE memory.claims SET lifecycle_state = 'active' WHERE id = %s", (c,))
        conn.execute("INSERT INTO memory.relationships (org_id, source_id, target_id, rel_type) VALUES (%s, %s, %s, 'treats')", (org, e, e2))
    conn.execute("SELECT count(*) FROM memory.freshness_recheck()")
    conn.execute("SELECT memory.record_outcome('s1', 'accepted', ARRAY(SELECT id FROM memory.observations))")
    # Structured memories are archived after 180 days and kept 365: this moves them to the archive.
    conn.execute("SELECT memory.run_retention(false, now() + interval '200 days')")
    for org in ("acme", "globex"):
        conn.execute("INSERT INTO memory.observations (org_id, user_id, content) VALUES (%s, 'u', 'note about billing')", (org,))


@pytest.fixture
def tenant_roles(conn, roles):
    made = {}
    for name, group, org in [("pm_reader", "memory_reader", "acme"), ("pm_writer", "memory_writer", "acme"),
                             ("pm_admin", "memory_admin", "acme"), ("pm_star", "memory_admin", "*"),
                             ("pm_owner", "memory_writer", "acme")]:
        conn.execute(f"DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{name}') THEN "
                     f"CREATE ROLE {name} LOGIN; END IF; END $$")
        conn.execute(f"GRANT {group} TO {name}")
        conn.execute("SELECT memory.grant_org(%s, %s)", (name, org))
        made[name] = org
    return made


def test_rows_of_another_org_are_invisible_and_unwritable(dsn, conn, tenant_roles):
    seed(conn)
    # Every tenant table holds rows of both orgs.
    for t in TENANT_TABLES:
        (orgs,) = conn.execute(f"SELECT count(DISTINCT org_id) FROM memory.{t} WHERE org_id IS NOT NULL").fetchone()
        assert orgs == 2, t
    failures = []
    for role in ["pm_nobody", *tenant_roles]:
        with as_role(dsn, role, "acme" if role == "pm_star" else None) as c:
            for t, insert in TENANT_TABLES.items():
                try:
                    (n,) = c.execute(f"SELECT count(*) FROM memory.{t} WHERE org_id = 'globex'").fetchone()
                    if n:
                        failures.append(f"{role} sees {n} globex rows of {t}")
                except psycopg.errors.InsufficientPrivilege:
                    pass
                if insert:
                    try:
                        c.execute(insert, ("globex",))
                        failures.append(f"{role} inserted a globex row into {t}")
                    except psycopg.errors.InsufficientPrivilege:
                        pass
                for stmt in (f"UPDATE memory.{t} SET org_id = org_id WHERE org_id = 'globex'",
                             f"DELETE FROM memory.{t} WHERE org_id = 'globex'"):
                    try:
                        cur = c.execute(stmt)
                        if cur.rowcount:
                            failures.append(f"{role}: {stmt} touched {cur.rowcount} rows")
                    except psycopg.DatabaseError as e:
                        # no privilege, or a rule of the table (append-only, no hard delete)
                        if e.sqlstate not in ("42501", "MX006", "55000"):
                            failures.append(f"{role}: {stmt} -> {e.sqlstate} {e}")
            for view in ("live_observations", "stats"):
                try:
                    (n,) = c.execute(f"SELECT count(*) FROM memory.{view} v"
                                     + (" WHERE org_id = 'globex'" if view == "live_observations" else "")).fetchone()
                    if view == "live_observations" and n:
                        failures.append(f"{role} sees globex rows through {view}")
                except psycopg.errors.InsufficientPrivilege:
                    pass
    # Own org: readers read, writers write.
    with as_role(dsn, "pm_reader") as c:
        assert c.execute("SELECT count(*) FROM memory.observations").fetchone()[0] >= 1
    with as_role(dsn, "pm_writer") as c:
        c.execute("INSERT INTO memory.observations (org_id, content) VALUES ('acme', 'writer row')")
        c.execute("INSERT INTO memory.entities (org_id, entity_type, name) VALUES ('acme', 'concept', 'w')")
    with as_role(dsn, "pm_admin") as c:
        c.execute(TENANT_TABLES["classification_rules"], ("acme",))
        c.execute(TENANT_TABLES["legal_holds"], ("acme",))
    with as_role(dsn, "pm_star", "globex") as c:
        assert c.execute("SELECT count(*) FROM memory.observations WHERE org_id = 'globex'").fetchone()[0] >= 1
    assert not failures, "\n".join(failures)


def test_a_governed_table_owner_and_a_writer_with_a_grant(dsn, conn, tenant_roles):
    conn.execute("GRANT CREATE ON SCHEMA public TO pm_owner")
    with as_role(dsn, "pm_owner") as c:
        c.execute("CREATE TABLE public.pm_notes (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), org_id text, content text, "
                  "classification memory.classification)")
        c.execute("SELECT memory.govern('public.pm_notes', '{\"audit\": true}')")
        c.execute("GRANT INSERT, SELECT ON public.pm_notes TO pm_writer")
        c.execute("INSERT INTO public.pm_notes (org_id, content) VALUES ('acme', 'owner row')")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            c.execute("INSERT INTO public.pm_notes (org_id, content) VALUES ('globex', 'x')")
    # A writer the owner granted INSERT: classification and audit apply, under the writer's role.
    with as_role(dsn, "pm_writer") as c:
        c.execute("INSERT INTO public.pm_notes (org_id, content) VALUES ('acme', 'the secret token')")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            c.execute("INSERT INTO public.pm_notes (org_id, content) VALUES ('globex', 'x')")
    assert conn.execute("SELECT classification::text FROM public.pm_notes WHERE content = 'the secret token'").fetchone() == ("confidential",)
    conn.execute("SELECT memory.audit_integrate()")
    assert conn.execute("SELECT actor_id FROM memory.audit_log WHERE chain_id = 'acme' AND event_type = 'memory.store' "
                        "AND payload->>'table' = 'public.pm_notes' ORDER BY seq").fetchall() == [("role:pm_owner",), ("role:pm_writer",)]
    assert conn.execute("SELECT count(*) FROM memory.audit_log WHERE chain_id = 'globex'").fetchone() == (0,)
    assert all(ok for (ok,) in conn.execute("SELECT ok FROM memory.audit_verify()").fetchall())


def test_a_superuser_is_not_scoped_by_another_roles_only_grant(conn):
    """pg_has_role() says a superuser has every role: with one org granted to one agent role in the
    whole database, the superuser must still act for no org (and export or erase in all of them),
    not silently for the agent's (found running the Citus layer)."""
    conn.execute("SELECT memory.setup_roles()")
    conn.execute("DROP ROLE IF EXISTS only_agent")
    conn.execute("CREATE ROLE only_agent IN ROLE memory_writer")
    conn.execute("SELECT memory.grant_org('only_agent', 'org_agent')")
    conn.execute("INSERT INTO memory.observations (org_id, user_id, content) VALUES ('org_a', 'subj', 'a'), ('org_b', 'subj', 'b')")
    assert conn.execute("SELECT memory.acting_org()").fetchone()[0] is None
    exported = conn.execute("SELECT memory.export_subject('subj')").fetchone()[0]
    assert sorted(o["org_id"] for o in exported["sections"]["observations"]) == ["org_a", "org_b"]
    conn.execute("SET memory.org_id = 'org_a'")
    assert conn.execute("SELECT memory.acting_org()").fetchone()[0] == "org_a"
    conn.execute("RESET memory.org_id")
    conn.execute("DROP OWNED BY only_agent")
    conn.execute("DROP ROLE only_agent")


def test_a_superuser_bound_to_one_org_acts_for_it(conn):
    """Its own grant (and those of roles it is really a member of) still count for a superuser."""
    conn.execute("SELECT memory.setup_roles()")
    for r in ("su_bound", "other_agent"):
        conn.execute(f"DROP ROLE IF EXISTS {r}")
    conn.execute("CREATE ROLE su_bound SUPERUSER")
    conn.execute("CREATE ROLE other_agent")
    conn.execute("SELECT memory.grant_org('su_bound', 'org_self')")
    conn.execute("SELECT memory.grant_org('other_agent', 'org_other')")
    conn.execute("SET ROLE su_bound")
    try:
        assert conn.execute("SELECT memory.acting_org()").fetchone()[0] == "org_self"
    finally:
        conn.execute("RESET ROLE")
    for r in ("su_bound", "other_agent"):
        conn.execute(f"DROP OWNED BY {r}")
        conn.execute(f"DROP ROLE {r}")


def test_org_call_runs_only_the_listed_per_org_functions(conn):
    """memory_internal._org_call (the one way memory_ext calls one org's work, delegated to the org's
    node on Citus) is not PUBLIC, takes only the functions of memory_internal._org_functions, and
    their arguments between org and who as a JSON array of the right length; on a single node it
    runs the function in place."""
    assert not conn.execute("SELECT has_function_privilege('public', 'memory_internal._org_call(regprocedure, text, jsonb)', 'EXECUTE')").fetchone()[0]
    listed = [r[0] for r in conn.execute("SELECT fn::text FROM memory_internal._org_functions() ORDER BY 1")]
    assert all(f.startswith("memory_internal._") and "_in(" in f and f.endswith(",jsonb)") for f in listed), listed
    for fn, args in (("memory_internal._exec_as_caller(text)", "[]"),
                     ("memory.forget(uuid[],text)", "[]"),
                     ("memory_internal._erase_consent_in(text,text,jsonb)", "[]"),
                     ("memory_internal._erase_consent_in(text,text,jsonb)", '["u1", "u2"]'),
                     ("memory_internal._erase_consent_in(text,text,jsonb)", '{"subject": "u1"}')):
        with pytest.raises(psycopg.errors.InvalidParameterValue):
            with conn.transaction():
                conn.execute("SELECT memory_internal._org_call(%s::regprocedure, 'acme', %s::jsonb)", (fn, args))
    with conn.transaction():
        counts = conn.execute("SELECT memory_internal._org_call('memory_internal._erase_consent_in(text,text,jsonb)', 'org_oc', '[\"nobody\"]')").fetchone()[0]
        assert counts["deletion_stubs"] == 0 and counts["consents"] == 0, counts
        raise psycopg.Rollback()


def test_a_delegated_caller_ends_with_its_call_or_its_subtransaction(conn):
    """memory_internal._delegated_caller (what a function Citus runs on a worker takes on from the
    coordinator) is not PUBLIC, ends with memory_internal._delegated_caller(NULL) back to the caller before
    it, and ends with the subtransaction it was taken on in: an error caught around a delegated
    call leaves no one else's identity behind."""
    conn.execute("DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'deleg_x') THEN CREATE ROLE deleg_x; END IF; END $$")
    assert not conn.execute("SELECT has_function_privilege('public', 'memory_internal._delegated_caller(text)', 'EXECUTE')").fetchone()[0]
    me = conn.execute("SELECT memory_internal._caller()").fetchone()[0]
    x = conn.execute("SELECT oid FROM pg_roles WHERE rolname = 'deleg_x'").fetchone()[0]
    with conn.transaction():
        conn.execute("SELECT memory_internal._delegated_caller('deleg_x')")
        assert conn.execute("SELECT memory_internal._caller()").fetchone()[0] == x
        conn.execute("SELECT memory_internal._delegated_caller(NULL)")
        assert conn.execute("SELECT memory_internal._caller()").fetchone()[0] == me
        conn.execute("DO $$ BEGIN PERFORM memory_internal._delegated_caller('deleg_x'); RAISE EXCEPTION 'fails after it'; "
                     "EXCEPTION WHEN OTHERS THEN NULL; END $$")
        assert conn.execute("SELECT memory_internal._caller()").fetchone()[0] == me
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT memory_internal._delegated('{\"role\": null}')")
