"""Knowledge retrieval (SPEC §12, seed knowledge-lifecycle §4.6) as an application's login roles:
tenant-bound reader, writer and admin of acme, a reader of acme cleared to 'internal', and a
reader of globex. The superuser (`conn`) only sets up roles and data and reads the audit log."""
import psycopg
import pytest

from conftest import connect, ensure_role

READER, WRITER, ADMIN, INT, GLOBEX = "rtv_reader", "rtv_writer", "rtv_admin", "rtv_int", "rtv_globex"
U = "00000000-0000-0000-0000-0000000000{:02x}".format


@pytest.fixture
def app(dsn, conn):
    """Roles, and claims: acme's c1 (10 days old, field bp, 0.9), c2 (same text, 0.6), c3 (pending),
    c4 (decayed), c5 (confidential), c6 (about user u1); globex's c7."""
    conn.execute("SELECT memory.setup_roles()")
    for role, group, org, tier in [(READER, "memory_reader", "acme", None), (WRITER, "memory_writer", "acme", None),
                                   (ADMIN, "memory_admin", "acme", None), (INT, "memory_reader", "acme", "internal"),
                                   (GLOBEX, "memory_reader", "globex", None)]:
        ensure_role(conn, role, group)
        conn.execute("SELECT memory.grant_org(%s, %s, coalesce(%s::memory.classification, 'restricted'))", (role, org, tier))
    conn.execute("INSERT INTO memory.entities (id, org_id, entity_type, name) VALUES (%s, 'acme', 'intervention', 'aspirin'), "
                 "(%s, 'globex', 'intervention', 'aspirin')", (U(0xe1), U(0xe2)))
    rows = [(1, "acme", "aspirin lowers stroke risk", 0.9, "bp", None, None, "10 days"),
            (2, "acme", "aspirin lowers stroke risk", 0.6, "bp", None, None, "0 days"),
            (3, "acme", "aspirin lowers stroke risk pending", 1.0, None, None, None, "0 days"),
            (4, "acme", "aspirin lowers stroke risk decayed", 1.0, None, None, "-1 hour", "2 days"),
            (5, "acme", "aspirin stroke api_key", 0.5, None, None, None, "0 days"),
            (6, "acme", "aspirin stroke of the patient", 0.5, None, "u1", None, "0 days"),
            (7, "globex", "aspirin lowers stroke risk", 1.0, None, None, None, "0 days")]
    for n, org, text, conf, field, subject, decay, age in rows:
        conn.execute("INSERT INTO memory.claims (id, org_id, entity_id, claim_text, confidence_score, field, subject_id, decay_at, t_created) "
                     "VALUES (%s, %s, %s, %s, %s, %s, %s, now() + %s::interval, now() - %s::interval)",
                     (U(n), org, U(0xe1) if org == "acme" else U(0xe2), text, conf, field, subject, decay, age))
    conn.execute("UPDATE memory.claims SET lifecycle_state = 'active' WHERE id <> %s", (U(3),))
    conn.execute("INSERT INTO memory.screen_profiles (org_id, profile, field, freshness_days) VALUES ('acme', 'clinic', 'bp', 5)")
    return dsn


def retrieve(c, *args, **kw):
    names = ", ".join([*(["%s"] * len(args)), *(f"{k} => %s" for k in kw)])
    return c.execute(f"SELECT id::text, score, confidence_score, classification::text, stale_fields FROM memory.retrieve({names})",
                     [*args, *kw.values()]).fetchall()


def events(conn, org="acme"):
    conn.execute("SELECT memory.audit_integrate()")
    return conn.execute("SELECT payload, actor_id FROM memory.audit_log WHERE event_type = 'memory.retrieval.hybrid' AND chain_id = %s "
                        "ORDER BY seq", (org,)).fetchall()


@pytest.mark.parametrize("role", [READER, WRITER, ADMIN])
def test_every_tenant_role_retrieves_its_orgs_live_claims(app, conn, role):
    with connect(app, role) as c:
        got = retrieve(c, "acme", "aspirin stroke")
    # Active, not decayed, about no user, acme's: c5 (more relevant: adjacent words), then c1, c2.
    assert [r[0] for r in got] == [U(5), U(1), U(2)]
    assert got[1][1] == got[2][1] and got[1][2] > got[2][2], "equal scores: the more confident first"
    assert [r[3] for r in got] == ["confidential", "internal", "internal"]
    assert all(r[4] is None for r in got), "no profile: no freshness marks"
    (payload, actor), = events(conn)
    assert payload == {"count": 3}, "one event, the count only"
    assert role in actor, "the event records the calling role"


def test_cross_tenant(app, conn):
    with connect(app, GLOBEX) as c:
        assert [r[0] for r in retrieve(c, "globex", "aspirin stroke")] == [U(7)], "globex's reader: globex's claim only"
        with pytest.raises(psycopg.errors.InsufficientPrivilege) as e:
            retrieve(c, "acme", "aspirin stroke")
        assert "memory.grant_org" in e.value.diag.message_hint
    with connect(app, GLOBEX, org="acme") as c:
        with pytest.raises(psycopg.errors.InsufficientPrivilege) as e:
            retrieve(c, "acme", "aspirin stroke")
        assert "memory.grant_org" in e.value.diag.message_hint, "setting memory.org_id to another org grants nothing"
    with connect(app, READER) as c:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            retrieve(c, "globex", "aspirin stroke")
        assert all(r[0] != U(7) for r in retrieve(c, "acme", "aspirin", 1000)), "acme's reader never gets globex's claim"
    assert [p for p, _ in events(conn)] == [{"count": 3}], "acme's chain: the one accepted call"
    assert [p for p, _ in events(conn, "globex")] == [{"count": 1}], "refused calls wrote nothing"


def test_clearance(app):
    with connect(app, INT) as c:
        assert [r[0] for r in retrieve(c, "acme", "aspirin stroke")] == [U(1), U(2)], "nothing above internal"


def test_consent_scope(app, conn):
    with connect(app, READER) as c:
        with pytest.raises(psycopg.Error) as e:
            retrieve(c, "acme", "patient", user_id="u1")
        assert e.value.sqlstate == "MX003", "a user who never consented"
    with connect(app, WRITER) as c:
        c.execute("SELECT memory.grant_consent('acme', 'u1', '{save_to_profile}')")
    with connect(app, READER) as c:
        assert [r[0] for r in retrieve(c, "acme", "patient", user_id="u1")] == [U(6)]
        assert retrieve(c, "acme", "patient", user_id="u1")[0][3] == "restricted", "a claim about a user is restricted"
        assert retrieve(c, "acme", "patient") == [], "without user_id no claim about a user"
    with connect(app, INT) as c:
        assert retrieve(c, "acme", "patient", user_id="u1") == [], "nor to a role cleared below restricted"
    with connect(app, WRITER) as c:
        c.execute("SELECT memory.revoke_consent('acme', 'u1', '{save_to_profile}')")
    with connect(app, READER) as c:
        with pytest.raises(psycopg.Error) as e:
            retrieve(c, "acme", "patient", user_id="u1")
        assert e.value.sqlstate == "MX003", "after the revocation"


def test_stale_fields_and_entity_listing(app):
    with connect(app, READER) as c:
        got = retrieve(c, "acme", "", entity_id=U(0xe1), screen_profile="clinic")
        assert [r[0] for r in got] == [U(1), U(2), U(5)], "a blank query with entity_id: most confident first"
        assert [r[4] for r in got] == [["bp"], [], []], "the 10-day-old bp claim is stale for a 5-day rule"
        assert all(r[1] is None for r in got)


@pytest.mark.parametrize("args, kw, state", [
    (("acme", "aspirin", 0), {}, "22023"),
    (("acme", "aspirin", 1001), {}, "22023"),
    ((None, "aspirin"), {}, "22023"),
    (("  ", "aspirin"), {}, "22023"),
    (("acme", None), {}, "22023"),
    (("acme", "the"), {}, "22023"),
    (("acme", "aspirin"), {"screen_profile": "nope"}, "22023"),
    (("acme", "aspirin"), {"user_id": " "}, "22023"),
    (("acme", "aspirin"), {"at": "infinity"}, "22023"),
    (("acme", "aspirin"), {"query_embedding": "{0.1,0.2}"}, "22023"),  # no claims embeddings yet (memory.enable_embeddings)
])
def test_bad_input_is_refused_with_a_hint_and_writes_nothing(app, conn, args, kw, state):
    with connect(app, READER) as c:
        with pytest.raises(psycopg.Error) as e:
            retrieve(c, *args, **kw)
    assert e.value.sqlstate == state
    assert e.value.diag.message_hint
    assert events(conn) == []
