"""memory.remember and memory.context (issue 49, SPEC §17) as the application lives them: a
tenant-bound writer remembers over its own connections, a reader packs context. The superuser
(`conn`) only sets up roles and pgvector and reads what happened. (The rest: tests/sql/21_remember.sql.)"""
import threading

import psycopg
import pytest

from conftest import connect, ensure_role

WRITER, READER, ADMIN = "rem_writer", "rem_reader", "rem_admin"
DIMS = 3


@pytest.fixture
def roles(dsn, conn):
    conn.execute("SELECT memory.setup_roles()")
    for role, group in [(WRITER, "memory_writer"), (READER, "memory_reader"), (ADMIN, "memory_admin")]:
        ensure_role(conn, role, group)
        conn.execute("SELECT memory.grant_org(%s, 'acme')", (role,))
    return dsn


@pytest.fixture
def vroles(roles, conn):
    if not conn.execute("SELECT EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'vector')").fetchone()[0]:
        pytest.skip("pgvector is not installed (scripts/pgvector.sh install builds it from ../shared/vendor/pgvector)")
    conn.execute("CREATE EXTENSION vector")
    conn.execute("SELECT memory.enable_embeddings(%s)", (DIMS,))
    return roles


def remember(c, content, **kw):
    # (psycopg sends a list of floats as float8[]: the embedding is cast to remember's real[].)
    args = ", ".join(f"{k} => %({k})s" + ("::real[]" if k == "embedding" else "") for k in kw)
    sql = f"SELECT memory.remember('acme', %(content)s{', ' + args if args else ''})"
    return c.execute(sql, {"content": content, **kw}).fetchone()[0]


def test_two_concurrent_remembers_of_one_fact_make_one_row(roles, conn):
    """Two connections remember the same text at once: the second waits for the first's
    transaction and finds its row (one memory, one duplicate)."""
    with connect(roles, WRITER) as a, connect(roles, WRITER) as b:
        a.autocommit = False
        first = remember(a, "The office closes at 6 pm on Fridays.", user_id="kim")
        assert first["status"] == "created"
        got = {}

        def second():
            got["r"] = remember(b, "the office closes at 6 PM on fridays.", user_id="kim")

        t = threading.Thread(target=second)
        t.start()
        t.join(1.0)
        # The second call is blocked on the first's transaction lock, not finished beside it.
        assert t.is_alive(), "the second remember waits for the first transaction"
        a.commit()
        t.join(30)
        assert not t.is_alive()
        assert got["r"]["status"] == "duplicate" and got["r"]["id"] == first["id"]
    assert conn.execute("SELECT count(*), max(seen_count) FROM memory.observations WHERE org_id = 'acme' AND user_id = 'kim'").fetchone() == (1, 2)


def test_concurrent_remember_after_a_rollback_stores(roles, conn):
    """A first transaction that rolls back leaves nothing to match: the waiting one stores."""
    with connect(roles, WRITER) as a, connect(roles, WRITER) as b:
        a.autocommit = False
        remember(a, "Parking is on level 2.", user_id="lee")
        got = {}
        t = threading.Thread(target=lambda: got.setdefault("r", remember(b, "Parking is on level 2.", user_id="lee")))
        t.start()
        t.join(0.5)
        a.rollback()
        t.join(30)
        assert got["r"]["status"] == "created"
    assert conn.execute("SELECT count(*) FROM memory.observations WHERE user_id = 'lee'").fetchone()[0] == 1


def test_a_remember_at_repeatable_read_never_stores_beside_a_duplicate_committed_since_its_snapshot(roles, conn):
    """At REPEATABLE READ a transaction reads under the snapshot of its first statement, so it
    cannot see a duplicate another session committed since (the advisory lock orders the two
    calls, not what the second sees): it gets a serialization failure (40001, retry), as an
    INSERT ... ON CONFLICT does there, instead of storing the fact a second time; retried, it
    finds the duplicate."""
    with connect(roles, WRITER) as a, connect(roles, WRITER) as b:
        b.autocommit = False
        b.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        b.execute("SELECT 1")
        first = remember(a, "Invoices are due on the 5th.", user_id="max")
        assert first["status"] == "created"
        with pytest.raises(psycopg.errors.SerializationFailure):
            remember(b, "invoices are due on the 5th.", user_id="max")
        b.rollback()
        b.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        again = remember(b, "invoices are due on the 5th.", user_id="max")
        assert again["status"] == "duplicate" and again["id"] == first["id"]
        b.commit()
    assert conn.execute("SELECT count(*) FROM memory.observations WHERE org_id = 'acme' AND user_id = 'max'").fetchone()[0] == 1


def test_exact_mode_keeps_the_embedding_namespace_and_sources(vroles, conn):
    """The default (exact) mode stores a given embedding, namespace and sources with the new
    memory; the same text again is a duplicate whatever embedding it brings; a bad embedding is
    refused before anything is written."""
    with connect(vroles, WRITER) as w:
        src = remember(w, "Ola's flight lands at 9", user_id="ola")
        first = remember(w, "Ola is picked up at the airport", user_id="ola", embedding=[0.0, 1.0, 0.0],
                         namespace=["travel", "pickups"], derived_from=[src["id"]], metadata=psycopg.types.json.Jsonb({"n": 12345678901234567890}))
        assert first["status"] == "created" and first["duplicate_of"] is None
        again = remember(w, "OLA is picked up at the  airport", user_id="ola", embedding=[1.0, 0.0, 0.0], namespace=["travel", "pickups"])
        assert again == {"id": first["id"], "classification": first["classification"], "status": "duplicate", "duplicate_of": first["id"]}
        other_ns = remember(w, "Ola is picked up at the airport", user_id="ola", namespace=["travel"])
        assert other_ns["status"] == "created" and other_ns["id"] != first["id"]
        n = conn.execute("SELECT count(*) FROM memory.observations WHERE user_id = 'ola'").fetchone()[0]
        for bad in ([1.0, 0.0], [0.0, 0.0, 0.0]):
            with pytest.raises(psycopg.Error) as ex:
                remember(w, "Ola's bags are blue", user_id="ola", embedding=bad)
            assert ex.value.sqlstate == "22023"
        assert conn.execute("SELECT count(*) FROM memory.observations WHERE user_id = 'ola'").fetchone()[0] == n
    row = conn.execute("SELECT embedding::text, namespace, derived_from::text[], (metadata->'n')::text, seen_count FROM memory.observations WHERE id = %s",
                       (first["id"],)).fetchone()
    assert row == ("[0,1,0]", ["travel", "pickups"], [src["id"]], "12345678901234567890", 2)


def test_near_merge_stays_on_its_page(vroles, conn):
    """memory.enable_embeddings keeps room on each heap page (the table's fillfactor): a merge
    into a memory whose page later INSERTs filled writes the row's next version on that page (a
    HOT update: no new entry in any index, the HNSW one included), not on another page."""
    assert conn.execute("SELECT reloptions FROM pg_class WHERE oid = 'memory.observations'::regclass").fetchone()[0] == ["fillfactor=94"]
    with connect(vroles, ADMIN) as adm:
        adm.execute("INSERT INTO memory.org_settings (org_id, dedup, dedup_threshold) VALUES ('acme', 'near', 0.95)")
    with connect(vroles, WRITER) as w:
        first = remember(w, "Lena's flat is on the fourth floor", user_id="lena", embedding=[0.0, 0.0, 1.0])
        assert first["status"] == "created"
    # (Set-up as the superuser: memories of another user, written after it, fill its page.)
    conn.execute("INSERT INTO memory.observations (org_id, user_id, content, embedding) "
                 "SELECT 'acme', 'pad', 'padding note number ' || g, '[1,1,0]' FROM generate_series(1, 120) g")

    def page(where, *args):
        return {b for (b,) in conn.execute(f"SELECT DISTINCT (ctid::text::point)[0] FROM memory.observations WHERE {where}", args)}

    (before,) = page("id = %s", first["id"])
    pads = page("user_id = 'pad'")
    assert before in pads and max(pads) > before, "the INSERTs filled the memory's page as far as the fillfactor lets them, then went on"
    with connect(vroles, WRITER) as w:
        near = remember(w, "Lena lives on the 4th floor", user_id="lena", embedding=[0.0, 0.02, 1.0])
    assert near["status"] == "merged" and near["id"] == first["id"]
    assert page("id = %s", first["id"]) == {before}
    assert conn.execute("SELECT seen_count FROM memory.observations WHERE id = %s", (first["id"],)).fetchone()[0] == 2


def test_near_neighbour_without_the_executor_is_the_statements(vroles, conn):
    """memory_internal._remember_nearest (a user's memories read by an index scan in Rust, each
    distance by pgvector's cosine_distance) finds what the statement finds: the nearest live
    memory of the org, user and namespace within the clearance, a tie to the oldest; (NULL, NULL,
    true) when there is none. (Memories written as the tenant's writer; the function, internal,
    and the statement compared with it run as the superuser.)"""
    with connect(vroles, WRITER) as w:
        a = remember(w, "Tea at four", user_id="pia", embedding=[1.0, 0.1, 0.0])
        b = remember(w, "Coffee at nine", user_id="pia", embedding=[0.0, 1.0, 0.0])
        c = remember(w, "Tea in the garden", user_id="pia", embedding=[1.0, 0.1, 0.0], namespace=["home"])
        d = remember(w, "The same tea, later", user_id="pia", embedding=[1.0, 0.1, 0.0])
        remember(w, "Ola's tea", user_id="ola", embedding=[1.0, 0.1, 0.0])
    assert all(r["status"] == "created" for r in (a, b, c, d))

    def direct(user, q, ns=None, tier="restricted"):
        return conn.execute("SELECT id::text, similarity, direct FROM memory_internal._remember_nearest('acme', %s, %s, %s::real[], %s)",
                            (user, ns, q, tier)).fetchall()

    def statement(user, q, ns=None, tier="restricted"):
        r = conn.execute("SELECT id::text, 1 - (embedding <=> %s::real[]::vector) FROM memory.observations "
                         "WHERE org_id = 'acme' AND user_id = %s AND namespace IS NOT DISTINCT FROM %s::text[] AND key IS NULL "
                         "AND soft_deleted_at IS NULL AND superseded_at IS NULL AND embedding IS NOT NULL "
                         "AND (expires_at IS NULL OR expires_at > now()) AND classification <= %s::memory.classification "
                         "ORDER BY embedding <=> %s::real[]::vector, created_at, id LIMIT 1", (q, user, ns, tier, q)).fetchall()
        return [(i, s, True) for i, s in r] or [(None, None, True)]

    cases = [("pia", [1.0, 0.1, 0.0], None, "restricted"), ("pia", [0.0, 1.0, 0.0], None, "restricted"),
             ("pia", [0.2, 0.9, 0.0], None, "restricted"), ("pia", [1.0, 0.1, 0.0], ["home"], "restricted"),
             ("pia", [1.0, 0.1, 0.0], ["work"], "restricted"), ("zed", [1.0, 0.1, 0.0], None, "restricted"),
             ("pia", [1.0, 0.1, 0.0], None, "public")]
    for user, q, ns, tier in cases:
        assert direct(user, q, ns, tier) == statement(user, q, ns, tier), (user, q, ns, tier)
    assert direct("pia", [1.0, 0.1, 0.0])[0][0] == a["id"], "a tie goes to the oldest"
    assert direct("pia", [1.0, 0.1, 0.0], ["home"])[0][0] == c["id"]
    assert direct("pia", [0.0, 1.0, 0.0])[0][0] == b["id"]
    assert direct("pia", [1.0, 0.1, 0.0], None, "public") == [(None, None, True)], "nothing within the clearance"
    # Without a user the statement reads the org's memories without one: the same merge.
    with connect(vroles, ADMIN) as adm:
        adm.execute("INSERT INTO memory.org_settings (org_id, dedup, dedup_threshold) VALUES ('acme', 'near', 0.95)")
    with connect(vroles, WRITER) as w:
        first = remember(w, "The team lunch is on Thursdays", embedding=[0.0, 0.0, 1.0])
        again = remember(w, "Team lunch: Thursdays", embedding=[0.0, 0.01, 1.0])
        mine = remember(w, "Pia's lunch is on Thursdays", user_id="pia", embedding=[0.0, 0.01, 1.0])
    assert first["status"] == "created" and again["status"] == "merged" and again["id"] == first["id"]
    assert mine["status"] == "created", "a user's memory is never merged into one without a user"


def test_near_merge_by_embedding(vroles, conn):
    with connect(vroles, ADMIN) as adm:
        adm.execute("INSERT INTO memory.org_settings (org_id, dedup, dedup_threshold) VALUES ('acme', 'near', 0.95)")
    with connect(vroles, WRITER) as w:
        first = remember(w, "Mia drinks her coffee black", user_id="mia", embedding=[1.0, 0.0, 0.0], metadata=psycopg.types.json.Jsonb({"a": 1}))
        assert first["status"] == "created"
        near = remember(w, "Mia takes coffee without milk", user_id="mia", embedding=[0.99, 0.05, 0.0],
                        metadata=psycopg.types.json.Jsonb({"b": 2}))
        assert near["status"] == "merged" and near["id"] == first["id"] and near["duplicate_of"] == first["id"]
        far = remember(w, "Mia plays the cello", user_id="mia", embedding=[0.0, 1.0, 0.0])
        assert far["status"] == "created"
        other_user = remember(w, "Mia drinks her coffee black", user_id="ned", embedding=[1.0, 0.0, 0.0])
        assert other_user["status"] == "created"
        with pytest.raises(psycopg.Error) as ex:
            remember(w, "bad vector", user_id="mia", embedding=[1.0, 0.0])
        assert ex.value.sqlstate == "22023"
    row = conn.execute("SELECT metadata, seen_count, content FROM memory.observations WHERE id = %s", (first["id"],)).fetchone()
    assert row[0]["a"] == 1 and row[0]["b"] == 2 and row[1] == 2 and row[2] == "Mia drinks her coffee black"
    assert conn.execute("SELECT count(*) FROM memory.observations WHERE user_id = 'mia'").fetchone()[0] == 2
    conn.execute("SELECT memory.audit_integrate()")
    ev = conn.execute("SELECT payload FROM memory.audit_log WHERE event_type = 'memory.merge'").fetchall()
    assert [e[0]["by"] for e in ev] == ["embedding"] and ev[0][0]["id"] == first["id"]
    assert "coffee" not in str(ev[0][0])
    # Context with a query embedding compares candidates by their embeddings: one of two near
    # copies (cosine 0.999) is dropped.
    with connect(vroles, ADMIN) as adm:
        adm.execute("UPDATE memory.org_settings SET dedup = 'off' WHERE org_id = 'acme'")
    with connect(vroles, WRITER) as w:
        a = remember(w, "Quarterly numbers are due Monday", user_id="oz", embedding=[0.0, 0.0, 1.0])
        b = remember(w, "Quarterly figures go out on Monday", user_id="oz", embedding=[0.0, 0.03, 1.0])
    with connect(vroles, READER) as r:
        c = r.execute("SELECT memory.context('acme', 'quarterly monday', 500, '{\"user_id\": \"oz\"}', '{0,0,1}')").fetchone()[0]
        assert len(c["ids"]) == 1 and c["ids"][0] in (a["id"], b["id"]) and c["omitted"] == 1
        c0 = r.execute("SELECT memory.context('acme', 'quarterly monday', 500, '{\"user_id\": \"oz\"}')").fetchone()[0]
        assert len(c0["ids"]) == 2, "without embeddings the two texts are not near-duplicates"


def test_context_fits_its_budget_as_a_reader(roles, conn):
    with connect(roles, WRITER) as w:
        for i in range(40):
            remember(w, f"Release {i} of the billing service shipped with fix number {i * 7}", user_id="pat")
    with connect(roles, READER) as r:
        for budget in (1, 30, 120, 2000):
            c = r.execute("SELECT memory.context('acme', 'billing release', %s)", (budget,)).fetchone()[0]
            assert c["tokens"] <= budget
            # Candidates: one for every 20 tokens of the budget, at least 10.
            assert len(c["ids"]) + c["omitted"] == (10 if budget < 2000 else 40)
            assert len(c["text"].splitlines()) == len(c["ids"])
        assert r.execute("SELECT memory.context('acme', 'billing release', 1)").fetchone()[0] == {"text": "", "ids": [], "tokens": 0, "omitted": 10}
        assert len(r.execute("SELECT memory.context('acme', 'billing release', 2000)").fetchone()[0]["ids"]) == 40
        with pytest.raises(psycopg.Error) as ex:
            r.execute("SELECT memory.remember('acme', 'readers do not remember')")
        assert ex.value.sqlstate == "42501"


def test_supersede_stores_the_corrected_texts_embedding(vroles, conn):
    """memory.supersede(..., embedding) stores the new text's vector with the new memory, as
    remember does (nothing waits in memory.embedding_backlog); a vector of other dimensions is
    22023 and writes nothing."""
    with connect(vroles, WRITER) as w:
        old = remember(w, "Noa lives in Paris", user_id="noa", embedding=[1.0, 0.0, 0.0])
        with pytest.raises(psycopg.Error) as ex:
            w.execute("SELECT memory.supersede(%s, 'Noa lives in Lyon', 'moved', embedding => %s::real[])", (old["id"], [1.0, 0.0]))
        assert ex.value.sqlstate == "22023" and "2 dimensions" in ex.value.diag.message_primary
        new = w.execute("SELECT memory.supersede(%s, 'Noa lives in Lyon', 'moved', embedding => %s::real[])::text",
                        (old["id"], [0.0, 1.0, 0.0])).fetchone()[0]
    rows = conn.execute("SELECT id::text, embedding::text, superseded_by::text FROM memory.observations WHERE user_id = 'noa' ORDER BY created_at").fetchall()
    assert rows == [(old["id"], "[1,0,0]", new), (new, "[0,1,0]", None)], "the new memory has its own vector; the old keeps its own"
    with connect(vroles, ADMIN) as adm:
        assert adm.execute("SELECT count(*) FROM memory.embedding_backlog WHERE org_id = 'acme'").fetchone() == (0,)


def test_a_mode_set_by_another_session_applies_to_the_next_call(roles, conn):
    """The org's dedup mode is kept per backend (memory_internal._dedup_mode) until
    memory.org_settings changes: an admin's change, committed on another connection, applies to a
    writer's next remember on its open connection; a change rolled back never does."""
    with connect(roles, WRITER) as w, connect(roles, ADMIN) as adm:
        first = remember(w, "Ivy takes the 8:15 train", user_id="ivy")
        assert remember(w, "ivy takes the 8:15 TRAIN", user_id="ivy")["status"] == "duplicate"
        adm.execute("INSERT INTO memory.org_settings (org_id, dedup) VALUES ('acme', 'off')")
        off = remember(w, "Ivy takes the 8:15 train", user_id="ivy")
        assert off["status"] == "created" and off["id"] != first["id"], "off: stored again"
        with adm.transaction():
            adm.execute("UPDATE memory.org_settings SET dedup = 'exact' WHERE org_id = 'acme'")
            raise psycopg.Rollback()
        assert remember(w, "Ivy takes the 8:15 train", user_id="ivy")["status"] == "created", "the rolled back change never applied"
        adm.execute("UPDATE memory.org_settings SET dedup = 'exact' WHERE org_id = 'acme'")
        again = remember(w, "IVY takes the 8:15 train", user_id="ivy")
        assert again["status"] == "duplicate" and again["id"] == first["id"], "exact again: the oldest live copy"
    assert conn.execute("SELECT count(*) FROM memory.observations WHERE org_id = 'acme' AND user_id = 'ivy'").fetchone() == (3,)
