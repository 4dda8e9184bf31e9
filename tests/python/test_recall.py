"""Recall with filters (SPEC §12) and clearance (SPEC §11), as an application's login roles: readers of
two orgs, one of them cleared to 'internal' only, and a governed table owned by a non-superuser.
The superuser (`conn`) only sets up roles and data and reads what happened."""
import datetime
import hashlib

import psycopg
import pytest

from conftest import connect, ensure_role

OWNER, FULL, INT, GLOBEX, STRANGER = "rec_owner", "rec_full", "rec_int", "rec_globex", "rec_stranger"
U = "00000000-0000-0000-0000-0000000000{:02d}".format
# Day d of a recent month (retention and memory-type TTLs run from created_at).
BASE = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0) - datetime.timedelta(days=40)


def T(d):
    return (BASE + datetime.timedelta(days=d)).isoformat()


def obs(conn, n, org="acme", content="alpha note", **cols):
    cols = {"id": U(n), "org_id": org, "content": content, **cols}
    names = ", ".join(cols)
    conn.execute(f"INSERT INTO memory.observations ({names}) VALUES ({', '.join(['%s'] * len(cols))})", list(cols.values()))


@pytest.fixture
def app(dsn, conn):
    """acme readers rec_full (no tier: every tier) and rec_int (cleared to internal), globex reader
    rec_globex, and rec_stranger (a reader of acme without SELECT on the application table);
    rec_owner owns and governs app_r.mem (granted SELECT to the readers)."""
    conn.execute("SELECT memory.setup_roles()")
    ensure_role(conn, OWNER, "memory_writer")
    for r in (FULL, INT, GLOBEX, STRANGER):
        ensure_role(conn, r, "memory_reader")
    conn.execute("SELECT memory.grant_org(%s, 'acme')", (OWNER,))
    conn.execute("SELECT memory.grant_org(%s, 'globex')", (OWNER,))
    conn.execute("SELECT memory.grant_org(%s, 'acme')", (FULL,))
    conn.execute("SELECT memory.grant_org(%s, 'acme', 'internal')", (INT,))
    conn.execute("SELECT memory.grant_org(%s, 'globex')", (GLOBEX,))
    conn.execute("SELECT memory.grant_org(%s, 'acme')", (STRANGER,))
    conn.execute(f"CREATE SCHEMA app_r AUTHORIZATION {OWNER}")
    conn.execute(f"GRANT USAGE ON SCHEMA app_r TO {FULL}, {INT}, {GLOBEX}, {STRANGER}")
    with connect(dsn, OWNER) as c:
        c.execute("SELECT set_config('memory.org_id', 'acme', false)")
        c.execute("""CREATE TABLE app_r.mem (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), org_id text NOT NULL, user_id text,
                     session_id text, task_id text, body text NOT NULL, tier memory.classification, score float8 NOT NULL DEFAULT 1.0,
                     metadata jsonb NOT NULL DEFAULT '{}', source_type text, memory_type text, created_at timestamptz NOT NULL DEFAULT now(),
                     expires_at timestamptz, purge_after timestamptz, archive_at timestamptz, soft_deleted_at timestamptz)""")
        c.execute("""SELECT memory.govern('app_r.mem', '{"content": "body", "org": "org_id", "id": "id", "user": "user_id",
                     "target": "tier", "weight": "score", "source_type": "source_type", "stamps": true}')""")
        c.execute(f"GRANT SELECT ON app_r.mem TO {FULL}, {INT}, {GLOBEX}")
        # (A table without a uuid id, and one without an org column, for the refusals.)
        c.execute("CREATE TABLE app_r.bigid (id bigint PRIMARY KEY, org_id text, content text, classification memory.classification)")
        c.execute("""SELECT memory.govern('app_r.bigid')""")
        c.execute("CREATE TABLE app_r.noorg (id uuid PRIMARY KEY, content text, classification memory.classification)")
        c.execute("""SELECT memory.govern('app_r.noorg')""")
        c.execute("CREATE TABLE app_r.slim (id uuid PRIMARY KEY, org_id text, content text, classification memory.classification)")
        c.execute("""SELECT memory.govern('app_r.slim')""")
        c.execute("CREATE TABLE app_r.plain (id uuid PRIMARY KEY, org_id text, content text)")
        c.execute(f"GRANT SELECT ON app_r.bigid, app_r.noorg, app_r.slim, app_r.plain TO {FULL}")
    return dsn


def ids(rows):
    return [str(r[0]) for r in rows]


def recall(c, *args, **kw):
    names = ", ".join([*(["%s"] * len(args)), *(f"{k} => %s" for k in kw)])
    return c.execute(f"SELECT id, content, classification, weight, score, created_at, user_id, session_id, memory_type "
                     f"FROM memory.recall({names})", [*args, *kw.values()]).fetchall()


def recall_events(conn, org="acme"):
    conn.execute("SELECT memory.audit_integrate()")
    return [p for (p,) in conn.execute("SELECT payload FROM memory.audit_log WHERE event_type = 'memory.recall' AND chain_id = %s "
                                       "ORDER BY seq", (org,))]


@pytest.fixture
def rows(app, conn):
    """acme observations varying every filtered column (all internal unless named), and globex's."""
    obs(conn, 1, user_id="u1", session_id="s1", task_id="t1", memory_type="episodic", source_type="fact",
        metadata='{"topic": "billing", "lang": "en"}', created_at=T(1))
    obs(conn, 2, user_id="u1", session_id="s2", task_id="t2", memory_type="long_term", source_type="decision",
        metadata='{"topic": "billing"}', created_at=T(2))
    obs(conn, 3, user_id="u2", session_id="s1", task_id="t1", memory_type="episodic", source_type="preference",
        metadata='{"topic": "shipping"}', created_at=T(3))
    obs(conn, 4, user_id="u2", session_id="s3", content="alpha note with confidential details", classification="confidential",
        created_at=T(4))
    obs(conn, 5, user_id="u1", content="alpha note deleted", created_at=T(5))
    conn.execute("UPDATE memory.observations SET soft_deleted_at = now() WHERE id = %s", (U(5),))
    obs(conn, 6, user_id="u1", content="alpha note expired", created_at=T(1.5))
    conn.execute("UPDATE memory.observations SET expires_at = now() - interval '1 day' WHERE id = %s", (U(6),))
    obs(conn, 7, org="globex", user_id="u1", content="alpha note of globex")
    conn.execute("INSERT INTO memory.observations_archive (id, org_id, user_id, content, classification) VALUES "
                 "(%s, 'acme', 'u1', 'alpha archived', 'internal'), (%s, 'acme', 'u1', 'alpha archived secret', 'confidential')",
                 (U(8), U(9)))
    return app


@pytest.mark.parametrize("filters, want", [
    ({"user_id": "u1"}, [1, 2]),
    ({"session_id": "s1"}, [1, 3]),
    ({"task_id": "t2"}, [2]),
    ({"memory_type": "episodic"}, [1, 3]),
    ({"source_type": "decision"}, [2]),
    ({"max_tier": "internal"}, [1, 2, 3]),
    ({"created_after": T(2)}, [2, 3, 4]),
    ({"created_before": T(2)}, [1]),
    ({"metadata": {"topic": "billing"}}, [1, 2]),
    ({"metadata": {"topic": "billing", "lang": "en"}}, [1]),
    # combinations are ANDed
    ({"user_id": "u1", "session_id": "s1"}, [1]),
    ({"session_id": "s1", "memory_type": "episodic", "created_after": T(2.5)}, [3]),
    ({"user_id": "u2", "max_tier": "internal"}, [3]),
    ({"user_id": "u1", "metadata": {"topic": "shipping"}}, []),
])
def test_every_filter_key_and_combinations(rows, filters, want):
    with connect(rows, FULL) as c:
        got = recall(c, "acme", "alpha note", 10, None, psycopg.types.json.Jsonb(filters))
    assert sorted(ids(got)) == [U(n) for n in want]


def test_blank_query_with_filters_lists_the_newest(rows):
    with connect(rows, FULL) as c:
        got = recall(c, "acme", "", 2, None, psycopg.types.json.Jsonb({"user_id": "u2"}))
        assert ids(got) == [U(4), U(3)], "newest first, k of them"
        assert all(r[4] is None for r in got), "no relevance score"
        got = recall(c, "acme", "the of", 10, None, psycopg.types.json.Jsonb({"session_id": "s1"}))
        assert ids(got) == [U(3), U(1)], "stop words only count as blank"
        assert recall(c, "acme", "  ", 10) == [], "a blank query without filters returns nothing, as in 0.2.0"
        # never soft-deleted, expired or archived rows, nor globex's
        got = recall(c, "acme", "", 1000, None, psycopg.types.json.Jsonb({"user_id": "u1"}))
        assert ids(got) == [U(2), U(1)]


def test_the_four_argument_form_returns_what_it_did(rows, conn):
    conn.execute("UPDATE memory.observations SET weight = 0.3 WHERE id = %s", (U(1),))
    old = conn.execute("""
        SELECT o.id, o.content, o.classification, o.weight,
               (ts_rank_cd(to_tsvector('english', o.content), websearch_to_tsquery('english', 'alpha note')) * o.weight)::float8
          FROM memory.observations o
         WHERE o.org_id = 'acme' AND to_tsvector('english', o.content) @@ websearch_to_tsquery('english', 'alpha note')
           AND o.soft_deleted_at IS NULL AND (o.expires_at IS NULL OR o.expires_at > now())
         ORDER BY 5 DESC, o.id LIMIT 10""").fetchall()
    with connect(rows, FULL) as c:
        got = c.execute("SELECT * FROM memory.recall('acme', 'alpha note', 10)").fetchall()
        assert [r[:5] for r in got] == old
        names = [d.name for d in c.execute("SELECT * FROM memory.recall('acme', 'alpha', 1, NULL)").description]
        assert names == ["id", "content", "classification", "weight", "score", "created_at", "user_id", "session_id", "memory_type",
                         "lexical_rank", "vector_rank", "metadata"]
        assert [r[5:9] for r in got if str(r[0]) == U(1)] == [
            conn.execute("SELECT created_at, user_id, session_id, memory_type::text FROM memory.observations WHERE id = %s",
                         (U(1),)).fetchone()]
        # Without query_embedding: lexical_rank is the row's place, vector_rank NULL.
        assert [r[9:11] for r in got] == [(i + 1, None) for i in range(len(got))]


def test_clearance_in_row_level_security_and_recall(rows, conn):
    with connect(rows, INT) as c:
        assert sorted(ids(c.execute("SELECT id FROM memory.observations").fetchall())) == [U(1), U(2), U(3), U(5), U(6)]
        assert c.execute("SELECT count(*) FROM memory.observations WHERE classification > 'internal'").fetchone() == (0,)
        assert sorted(ids(c.execute("SELECT id FROM memory.live_observations").fetchall())) == [U(1), U(2), U(3)]
        assert ids(c.execute("SELECT id FROM memory.observations_archive").fetchall()) == [U(8)]
        assert U(4) not in ids(recall(c, "acme", "confidential details"))
        assert recall(c, "acme", "confidential details") == []
        got = recall(c, "acme", "", 10, None, psycopg.types.json.Jsonb({"user_id": "u2", "max_tier": "restricted"}))
        assert ids(got) == [U(3)], "a max_tier filter never raises the clearance"
        # A changed grant applies from the next statement of the same session (no stale cache).
        conn.execute("SELECT memory.grant_org(%s, 'acme', 'confidential')", (INT,))
        assert ids(recall(c, "acme", "confidential details")) == [U(4)]
        assert c.execute("SELECT count(*) FROM memory.observations_archive").fetchone() == (2,)
        conn.execute("SELECT memory.grant_org(%s, 'acme', 'public')", (INT,))
        assert c.execute("SELECT count(*) FROM memory.observations").fetchone() == (0,)
    with connect(rows, FULL) as c:
        assert c.execute("SELECT count(*) FROM memory.observations").fetchone() == (6,), "a grant without a tier reads every tier"
        assert U(4) in ids(recall(c, "acme", "confidential details"))


def test_a_lowered_clearance_reaches_a_running_repeatable_read_transaction(rows, conn):
    """Issue 53 #6: a clearance lowered by another session applies from the next statement of a
    REPEATABLE READ transaction that already read under it (its SELECT, the archive and recall),
    as a revocation does, whether or not the session sets memory.org_id."""
    for org in (None, "acme"):
        conn.execute("SELECT memory.grant_org(%s, 'acme')", (FULL,))
        with psycopg.connect(rows.replace("user=postgres", f"user={FULL}")) as c:
            if org:
                c.execute("SELECT set_config('memory.org_id', %s, false)", (org,))
                c.commit()
            c.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            assert U(4) in ids(c.execute("SELECT id FROM memory.observations").fetchall())
            assert U(4) in ids(recall(c, "acme", "confidential details"))
            assert U(9) in ids(c.execute("SELECT id FROM memory.observations_archive").fetchall())
            conn.execute("SELECT memory.grant_org(%s, 'acme', 'internal')", (FULL,))
            assert U(4) not in ids(c.execute("SELECT id FROM memory.observations").fetchall()), org
            assert U(9) not in ids(c.execute("SELECT id FROM memory.observations_archive").fetchall()), org
            assert recall(c, "acme", "confidential details") == [], org
            # And a revocation: nothing of acme from the next statement.
            conn.execute("SELECT memory.revoke_org(%s, 'acme')", (FULL,))
            try:
                assert c.execute("SELECT count(*) FROM memory.observations").fetchone() == (0,), org
            except psycopg.errors.InsufficientPrivilege:
                assert org, "without memory.org_id the session acts for no org: no rows, no error"
            c.rollback()


def test_cross_tenant_recall_is_refused(rows):
    with connect(rows, INT) as c:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            recall(c, "globex", "alpha note")
    with connect(rows, GLOBEX) as c:
        assert ids(recall(c, "globex", "alpha note")) == [U(7)]
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            recall(c, "acme", "", filters=psycopg.types.json.Jsonb({"user_id": "u1"}))


@pytest.fixture
def source(app, conn):
    """Rows of app_r.mem, written by its owner: acme's of each tier, a soft-deleted and an expired
    one, globex's."""
    with connect(app, OWNER) as c:
        for n, org, user, body, tier, extra in [
            (21, "acme", "u1", "beta memo plain", "internal", {}),
            (22, "acme", "u1", "beta memo internal", "internal", {"session_id": "s1", "task_id": "t1", "memory_type": "episodic",
                                                                   "source_type": "fact", "metadata": '{"k": 1}'}),
            (23, "acme", "u2", "beta memo confidential", "confidential", {"session_id": "s1"}),
            (24, "acme", "u1", "beta memo deleted", "internal", {}),
            (25, "acme", "u1", "beta memo expired", "internal", {}),
            (26, "globex", "u1", "beta memo of globex", "internal", {}),
        ]:
            c.execute("SELECT set_config('memory.org_id', %s, false)", (org,))
            cols = {"id": U(n), "org_id": org, "user_id": user, "body": body, "tier": tier,
                    "created_at": T(n - 20), **extra}
            c.execute(f"INSERT INTO app_r.mem ({', '.join(cols)}) VALUES ({', '.join(['%s'] * len(cols))})", list(cols.values()))
        c.execute("SELECT set_config('memory.org_id', 'acme', false)")
        c.execute("UPDATE app_r.mem SET soft_deleted_at = now() WHERE id = %s", (U(24),))
        c.execute("UPDATE app_r.mem SET expires_at = now() - interval '1 day' WHERE id = %s", (U(25),))
        c.execute("UPDATE app_r.mem SET score = 0.5 WHERE id = %s", (U(21),))
    return app


def test_recall_from_a_governed_table(source, conn):
    with connect(source, FULL) as c:
        got = recall(c, "acme", "beta memo", 10, source="app_r.mem")
        assert sorted(ids(got)) == [U(21), U(22), U(23)], "live rows of the org only"
        row = {str(r[0]): r for r in got}[U(22)]
        assert row[1:4] == ("beta memo internal", "internal", 1.0) and row[6:] == ("u1", "s1", "episodic")
        assert row[5] == datetime.datetime.fromisoformat(T(2))
        assert {str(r[0]): r[3] for r in got}[U(21)] == 0.5, "the weight column"
        assert ids(got)[-1] == U(21), "ranked by relevance x weight"
        for filters, want in [({"user_id": "u2"}, [23]), ({"session_id": "s1"}, [22, 23]), ({"task_id": "t1"}, [22]),
                              ({"memory_type": "episodic"}, [22]), ({"source_type": "fact"}, [22]), ({"max_tier": "internal"}, [21, 22]),
                              ({"created_after": T(2)}, [22, 23]), ({"created_before": T(2)}, [21]),
                              ({"metadata": {"k": 1}}, [22])]:
            got = recall(c, "acme", "beta", 10, None, psycopg.types.json.Jsonb(filters), None, "app_r.mem")
            assert sorted(ids(got)) == [U(n) for n in want], filters
        assert ids(recall(c, "acme", "", 10, None, psycopg.types.json.Jsonb({"user_id": "u1"}), source="app_r.mem")) == [U(22), U(21)]
    with connect(source, INT) as c:
        assert sorted(ids(recall(c, "acme", "beta memo", source="app_r.mem"))) == [U(21), U(22)], "clearance by the tier column"
    with connect(source, GLOBEX) as c:
        assert ids(recall(c, "globex", "beta memo", source="app_r.mem")) == [U(26)], "the org filter"
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            recall(c, "acme", "beta memo", source="app_r.mem")
    with connect(source, STRANGER) as c:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            recall(c, "acme", "beta memo", source="app_r.mem")
    # A row without a tier is for roles cleared to restricted only.
    conn.execute("ALTER TABLE app_r.mem DISABLE TRIGGER memory_classify")
    conn.execute("UPDATE app_r.mem SET tier = NULL WHERE id = %s", (U(22),))
    conn.execute("ALTER TABLE app_r.mem ENABLE TRIGGER memory_classify")
    with connect(source, INT) as c:
        assert ids(recall(c, "acme", "beta memo", source="app_r.mem")) == [U(21)]
    with connect(source, FULL) as c:
        assert U(22) in ids(recall(c, "acme", "beta memo", source="app_r.mem"))
    events = recall_events(conn)
    assert events[0]["source"] == "app_r.mem" and events[0]["count"] == 3


BAD = [
    ("unknown filter key", ("acme", "x", 10, None, {"colour": "red"}), "22023"),
    ("filters not an object", ("acme", "x", 10, None, ["user_id"]), "22023"),
    ("a number for user_id", ("acme", "x", 10, None, {"user_id": 7}), "22023"),
    ("null for session_id", ("acme", "x", 10, None, {"session_id": None}), "22023"),
    ("an unknown memory_type", ("acme", "x", 10, None, {"memory_type": "dream"}), "22023"),
    ("an unknown source_type", ("acme", "x", 10, None, {"source_type": "rumour"}), "22023"),
    ("an unknown max_tier", ("acme", "x", 10, None, {"max_tier": "secret"}), "22023"),
    ("a bad created_after", ("acme", "x", 10, None, {"created_after": "yesterday-ish"}), "22023"),
    ("an infinite created_before", ("acme", "x", 10, None, {"created_before": "infinity"}), "22023"),
    ("metadata not an object", ("acme", "x", 10, None, {"metadata": "billing"}), "22023"),
    ("k = 0", ("acme", "x", 0), "22023"),
    ("k = 1001", ("acme", "x", 1001), "22023"),
    ("k NULL", ("acme", "x", None), "22023"),
    ("a NULL org", (None, "x"), "22023"),
    ("a source that is not governed", ("acme", "x", 10, None, {}, None, "app_r.plain"), "22023"),
    ("a source without a content mapping", ("acme", "x", 10, None, {}, None, "memory.entities"), "22023"),
    ("a source without a uuid id", ("acme", "x", 10, None, {}, None, "app_r.bigid"), "22023"),
    ("a source without an org column", ("acme", "x", 10, None, {}, None, "app_r.noorg"), "22023"),
    ("a filter the source has no column for", ("acme", "x", 10, None, {"session_id": "s1"}, None, "app_r.slim"), "22023"),
    ("a project_id the source has no column for", ("acme", "x", 10, "p1", {}, None, "app_r.slim"), "22023"),
    ("a query embedding without embeddings", ("acme", "x", 10, None, {}, [0.1, 0.2]), "22023"),
]


@pytest.mark.parametrize("why, args, state", BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_refused_with_a_hint_and_changes_nothing(rows, conn, why, args, state):
    before = len(recall_events(conn))
    args = [psycopg.types.json.Jsonb(a) if isinstance(a, (dict, list)) and i == 4 else a for i, a in enumerate(args)]
    casts = ["text", "text", "int", "text", "jsonb", "real[]", "regclass"][:len(args)]
    with connect(rows, FULL) as c:
        with pytest.raises(psycopg.Error) as e:
            c.execute(f"SELECT * FROM memory.recall({', '.join(f'%s::{t}' for t in casts)})", args)
    assert e.value.sqlstate == state, (why, e.value)
    assert e.value.diag.message_hint, why
    assert len(recall_events(conn)) == before


def test_the_recall_event(rows, conn):
    query = "alpha note"
    with connect(rows, FULL) as c:
        got = recall(c, "acme", query, 5, None, psycopg.types.json.Jsonb({"metadata": {"topic": "billing"}, "user_id": "u1"}))
    (event,) = recall_events(conn)
    assert event["ids"] == ids(got) and event["count"] == len(got) == 2 and event["k"] == 5
    assert event["filter_keys"] == ["metadata", "user_id"]
    assert event["query_sha256"] == hashlib.sha256(query.encode()).hexdigest()
    text = str(event)
    for secret in ("alpha", "note", "billing", "u1", "topic"):
        assert secret not in text, secret
    assert "source" not in event
    (chain,) = conn.execute("SELECT chain_id FROM memory.audit_log WHERE event_type = 'memory.recall'").fetchone()
    assert chain == "acme"


def test_a_question_in_plain_words_finds_the_memory_that_answers_it(app, conn):
    """Issue 47: agents send questions. Any of the query's words matches (stop words dropped),
    ranked by how many of them a memory has, then ts_rank_cd; websearch syntax (a quoted phrase, a
    -word) is read as before. The metadata column is the row's own, within clearance."""
    obs(conn, 71, content="The customer prefers to pay by bank transfer at the end of the month", metadata='{"topic": "billing"}')
    obs(conn, 72, content="Deploys go out on Tuesdays after the review")
    obs(conn, 73, content="The account manager likes short emails")
    obs(conn, 74, org="globex", content="The customer likes to pay by card")
    with connect(app, FULL) as c:
        got = c.execute("SELECT id, lexical_rank, metadata FROM memory.recall('acme', 'how does the customer like to pay?', 3)").fetchall()
        assert [str(g[0]) for g in got] == [U(71), U(73)], "the bank-transfer memory first (two of custom, like, pay), then one word"
        assert [g[1] for g in got] == [1, 2] and got[0][2]["topic"] == "billing"
        # Websearch syntax: every word required unless it says otherwise.
        assert ids(recall(c, "acme", '"bank transfer"', 5)) == [U(71)]
        assert ids(recall(c, "acme", "customer -transfer", 5)) == []
        assert sorted(ids(recall(c, "acme", "transfer or tuesdays", 5))) == [U(71), U(72)]
        # Positional calls of 0.3.0 keep their columns in their places.
        row = c.execute("SELECT * FROM memory.recall('acme', 'bank transfer', 1)").fetchone()
        assert str(row[0]) == U(71) and row[11]["topic"] == "billing"
    with connect(app, INT) as c:
        conn.execute("UPDATE memory.observations SET classification = 'confidential' WHERE id = %s", (U(71),))
        got = c.execute("SELECT id FROM memory.recall('acme', 'how does the customer like to pay?', 3)").fetchall()
        assert U(71) not in [str(g[0]) for g in got], "above the caller's clearance: neither the row nor its metadata"


def test_search_items_under_a_prefix_with_the_filter_language(app, conn):
    """memory.search (SPEC §16) as the application's roles: a writer puts items, readers search
    them under a namespace prefix with the §16 filter language, a query in plain words, k and
    offset; another org's items and items above the reader's clearance never come back; one
    memory.recall event (call memory.search) without values or the query."""
    with connect(app, OWNER) as w:
        for ns, key, value in [(["users", "u1"], "a", {"text": "likes to pay by bank transfer", "n": 5, "tags": ["x", "y"], "o": {"p": "beta"}}),
                               (["users", "u1"], "b", {"text": "prefers dark mode", "n": 2, "tags": ["y"]}),
                               (["users", "u2"], "c", {"text": "pays monthly", "n": 9.0}),
                               (["users", "u2"], "s", {"text": "ssn 123-45-6789 on file", "n": 1})]:
            w.execute("SELECT memory.put('acme', %s, %s, %s)", (ns, key, psycopg.types.json.Jsonb(value)))
        w.execute("SELECT memory.put('globex', '{users,u1}', 'g', '{\"text\": \"pay by card\", \"n\": 9}')")
    keys = lambda c, *a, **kw: [r[0] for r in c.execute(  # noqa: E731
        "SELECT key FROM memory.search(" + ", ".join(["%s"] * len(a) + [f'"{k}" => %s' for k in kw]) + ")",
        [*a, *(psycopg.types.json.Jsonb(v) if k == "filter" else v for k, v in kw.items())]).fetchall()]
    with connect(app, FULL) as c:
        assert keys(c, "acme", ["users", "u1"]) == ["b", "a"], "the most recently updated first, under the prefix only"
        assert sorted(keys(c, "acme", ["users"])) == ["a", "b", "c", "s"]
        assert keys(c, "acme", ["users"], query="how do they like to pay by bank?")[0] == "a"
        assert sorted(keys(c, "acme", ["users"], filter={"n": {"$gte": 5}})) == ["a", "c"], "numbers compare numerically (9.0 = 9)"
        assert keys(c, "acme", ["users"], filter={"tags": {"$contains": "x"}}) == ["a"]
        assert keys(c, "acme", ["users"], filter={"text": {"$contains": "dark"}}) == ["b"], "a substring"
        assert keys(c, "acme", ["users"], filter={"o.p": "beta"}) == ["a"], "a dotted path"
        assert sorted(keys(c, "acme", ["users"], filter={"$or": [{"n": 2}, {"n": 9}]})) == ["b", "c"]
        assert sorted(keys(c, "acme", ["users"], filter={"$not": {"n": {"$in": [2, 9]}}})) == ["a", "s"]
        assert sorted(keys(c, "acme", ["users"], filter={"o": {"$exists": False}, "text": {"$gt": "p"}})) == ["b", "c", "s"], "strings bytewise"
        assert len(keys(c, "acme", ["users"], k=2)) == 2 and keys(c, "acme", ["users"], k=2, offset=2) == keys(c, "acme", ["users"])[2:]
        with pytest.raises(psycopg.DatabaseError) as ex:
            keys(c, "acme", ["users"], filter={"n": {"$regex": "secret-value"}})
        assert ex.value.sqlstate == "22023" and "$regex" in ex.value.diag.message_primary and "secret-value" not in str(ex.value)
        with pytest.raises(psycopg.DatabaseError) as ex:
            keys(c, "globex", ["users"])
        assert ex.value.sqlstate == "42501"
    with connect(app, INT) as c:
        assert sorted(keys(c, "acme", ["users"])) == ["a", "b", "c"], "an item above the reader's clearance is not found"
    events = [e for e in recall_events(conn) if e.get("call") == "memory.search"]
    assert events and all("text" not in str(e) and "pay" not in str(e) for e in events)


def test_metadata_comes_back_exactly_and_unreadable_filters_are_22023(rows, conn):
    """A row's metadata is returned as stored, numbers past a double's range or precision and deep
    nesting included (recall's Rust body hands back the engine's JSON text, never through f64);
    filters it cannot read (a number past f64's range, nesting past 128 levels) are 22023 with
    the filters' hint, not an internal error."""
    deep = '{"a": ' * 200 + '1' + '}' * 200
    meta = '{"big": 123456789012345678901234567890, "huge": 1e400, "pi": 3.14159265358979323846264338327950288, "deep": ' + deep + '}'
    obs(conn, 20, content="alpha precise metadata", metadata=meta, created_at=T(6))
    with connect(rows, FULL) as c:
        got = c.execute("SELECT metadata::text FROM memory.recall('acme', 'precise', 5) WHERE id = %s", (U(20),)).fetchone()
        want = conn.execute("SELECT metadata::text FROM memory.observations WHERE id = %s", (U(20),)).fetchone()
        assert got == want and "123456789012345678901234567890" in got[0]
        for bad in ('{"metadata": {"x": 1e400}}', '{"metadata": ' + deep + '}'):
            with pytest.raises(psycopg.Error) as e:
                c.execute("SELECT * FROM memory.recall('acme', 'alpha', 5, filters => %s::jsonb)", (bad,))
            assert e.value.sqlstate == "22023" and "filters" in e.value.diag.message_primary, e.value.diag.message_primary
            assert e.value.diag.message_hint
