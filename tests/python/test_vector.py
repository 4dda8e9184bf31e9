"""Embeddings and hybrid recall with pgvector (issue 36), as the application lives them: a
non-superuser owner governs its own table with an `embedding` column; writer, reader and another
org's role use it; a memory_admin enables memory.observations' embeddings. The superuser (`conn`)
only creates pgvector, sets up and reads what happened. Skipped where pgvector is not installed
(scripts/pgvector.sh install builds it from ../shared/vendor/pgvector)."""
import random

import psycopg
import pytest

from conftest import connect, ensure_role
from test_app_roles import ADMIN, GLOBEX, OWNER, READER, WRITER, app  # noqa: F401 (the fixture)
from test_dump_restore import restored

DIMS = 16


def vec(v):
    return "[" + ",".join(f"{x:.4f}" for x in v) + "]"


@pytest.fixture
def vapp(app, conn):
    """app (test_app_roles) with pgvector created and app.vnotes, the owner's table with its own
    vector column and HNSW index, governed with the embedding key."""
    if not conn.execute("SELECT EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'vector')").fetchone()[0]:
        pytest.skip("pgvector is not installed (scripts/pgvector.sh install builds it from ../shared/vendor/pgvector)")
    conn.execute("CREATE EXTENSION vector")
    with connect(app, OWNER) as o:
        o.execute(f"CREATE TABLE app.vnotes (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), tenant text, uid text, body text, "
                  f"meta jsonb, emb vector({DIMS}))")
        o.execute("CREATE INDEX vnotes_emb ON app.vnotes USING hnsw (emb vector_cosine_ops) WITH (m = 16, ef_construction = 64)")
        eff = o.execute("""SELECT memory.govern('app.vnotes', '{"content": "body", "target": "meta", "org": "tenant", "user": "uid",
                           "id": "id", "audit": true, "embedding": "emb"}')""").fetchone()[0]
        assert eff["embedding"] == "emb"
        o.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON app.vnotes TO {WRITER}, {GLOBEX}")
        o.execute(f"GRANT SELECT ON app.vnotes TO {READER}")
    return app


def test_governed_vector_recall_equals_exact_neighbours(vapp, conn):
    rng = random.Random(36)
    rows = {"acme": [], "globex": []}
    for i in range(2000):
        org = "acme" if i % 2 == 0 else "globex"
        rows[org].append((org, f"u{i % 4}", f"note {i}", vec([rng.gauss(0, 1) for _ in range(DIMS)])))
    with connect(vapp, WRITER) as w:
        w.cursor().executemany("INSERT INTO app.vnotes (tenant, uid, body, emb) VALUES (%s, %s, %s, %s)", rows["acme"])
    with connect(vapp, GLOBEX) as g:
        g.cursor().executemany("INSERT INTO app.vnotes (tenant, uid, body, emb) VALUES (%s, %s, %s, %s)", rows["globex"])
    conn.execute("ANALYZE app.vnotes")
    with connect(vapp, READER) as r:
        for _ in range(10):
            q = [rng.gauss(0, 1) for _ in range(DIMS)]
            got = r.execute("SELECT id, vector_rank, lexical_rank FROM memory.recall('acme', '', 10, filters => '{\"user_id\": \"u2\"}', "
                            "query_embedding => %s::real[], source => 'app.vnotes')", ("{" + vec(q)[1:-1] + "}",)).fetchall()
            # Exact: the same distance (pgvector's), every row of the tenant and filter, no index.
            with conn.transaction():
                conn.execute("SET LOCAL enable_indexscan = off")
                exact = [i for (i,) in conn.execute("SELECT id FROM app.vnotes WHERE tenant = 'acme' AND uid = 'u2' "
                                                    "ORDER BY emb <=> %s::vector, id LIMIT 10", (vec(q),)).fetchall()]
            assert [g[0] for g in got] == exact, "recall@10 of the governed vector ranking is 1.0"
            assert [g[1] for g in got] == list(range(1, 11)) and all(g[2] is None for g in got)


def test_writer_reader_other_org_hybrid_on_a_governed_table(vapp, conn):
    e = lambda *v: vec(list(v) + [0.0] * (DIMS - len(v)))  # noqa: E731
    with connect(vapp, WRITER) as w:
        ids = {b: w.execute("INSERT INTO app.vnotes (tenant, uid, body, emb) VALUES ('acme', 'u1', %s, %s) RETURNING id", (b, v)).fetchone()[0]
               for b, v in [("invoice payments overdue", e(1)), ("payments schedule", e(0, 1)), ("lunch menu", e(0.9, 0.1))]}
    with connect(vapp, GLOBEX) as g:
        g.execute("INSERT INTO app.vnotes (tenant, uid, body, emb) VALUES ('globex', 'u1', 'payments of globex', %s)", (e(1),))
    with connect(vapp, OWNER) as o:
        o.execute("CREATE TABLE app.texts (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), tenant text, body text, meta jsonb)")
        o.execute("""SELECT memory.govern('app.texts', '{"content": "body", "target": "meta", "org": "tenant"}')""")
        o.execute(f"GRANT SELECT ON app.texts TO {READER}")
    q = "{" + e(1)[1:-1] + "}"
    with connect(vapp, READER) as r:
        got = r.execute("SELECT content, lexical_rank, vector_rank FROM memory.recall('acme', 'payments', 5, query_embedding => %s::real[], "
                        "source => 'app.vnotes')", (q,)).fetchall()
        # Both full-text matches tie on ts_rank_cd; the vector list puts "invoice" first, so RRF does.
        assert got[0][0] == "invoice payments overdue" and got[0][2] == 1 and got[0][1] in (1, 2)
        assert {c for c, _, _ in got} == {"invoice payments overdue", "payments schedule", "lunch menu"}
        assert dict((c, (lr, vr)) for c, lr, vr in got)["lunch menu"] == (None, 2)
        with pytest.raises(psycopg.DatabaseError) as ex:
            r.execute("SELECT * FROM memory.recall('acme', 'payments', query_embedding => '{1,0}', source => 'app.vnotes')")
        assert ex.value.sqlstate == "22023"
        with pytest.raises(psycopg.DatabaseError) as ex:
            r.execute("SELECT * FROM memory.recall('acme', 'payments', query_embedding => %s::real[], source => 'app.texts')", (q,))
        assert ex.value.sqlstate == "22023" and "embedding" in ex.value.diag.message_hint
        with pytest.raises(psycopg.DatabaseError) as ex:
            r.execute("SELECT * FROM memory.retrieve('acme', 'payments', query_embedding => %s::real[])", (q,))
        assert ex.value.sqlstate == "22023" and "memory.enable_embeddings" in ex.value.diag.message_hint, \
            "claims have no embeddings before enable_embeddings: the hint says how to get them"
        with pytest.raises(psycopg.DatabaseError) as ex:
            r.execute("INSERT INTO app.vnotes (tenant, body) VALUES ('acme', 'x')")
        assert ex.value.sqlstate == "42501"
    with connect(vapp, GLOBEX) as g:
        got = g.execute("SELECT content FROM memory.recall('globex', 'payments', 5, query_embedding => %s::real[], source => 'app.vnotes')",
                        (q,)).fetchall()
        assert got == [("payments of globex",)]
    with connect(vapp, OWNER) as o:
        with pytest.raises(psycopg.DatabaseError) as ex:
            o.execute("""SELECT memory.govern('app.vnotes', '{"content": "body", "org": "tenant", "embedding": "body"}')""")
        assert ex.value.sqlstate == "22023", "the embedding key names a vector column"
    # The audit event has the embedding's hash, not the embedding.
    conn.execute("SELECT memory.audit_integrate()")
    (p,) = conn.execute("SELECT payload FROM memory.audit_log WHERE event_type = 'memory.recall' AND org_id = 'acme' ORDER BY seq LIMIT 1").fetchone()
    assert p["source"] == "app.vnotes" and len(p["query_embedding_sha256"]) == 64 and "payments" not in str(p)
    with connect(vapp, WRITER) as w:
        (res,) = w.execute("SELECT memory.forget('app.vnotes', %s, 'asked')", ([str(ids["lunch menu"])],)).fetchone()
        assert res["forgotten"] == [str(ids["lunch menu"])]
    assert conn.execute("SELECT count(*) FROM app.vnotes WHERE id = %s", (ids["lunch menu"],)).fetchone() == (0,)


def test_observation_embeddings_archive_forget_erase_and_dump(vapp, conn, port):
    with connect(vapp, WRITER) as w:
        with pytest.raises(psycopg.DatabaseError) as ex:
            w.execute("SELECT memory.enable_embeddings(3)")
        assert ex.value.sqlstate == "42501", "enable_embeddings is memory_admin's"
    with connect(vapp, ADMIN) as a:
        with pytest.raises(psycopg.DatabaseError) as ex:
            a.execute("SELECT memory.enable_embeddings(3)")
        assert ex.value.sqlstate == "42501", "an admin bound to one org does not change every org's tables"
    ensure_role(conn, "platform_admin", "memory_admin")
    conn.execute("SELECT memory.grant_org('platform_admin', '*')")
    with connect(vapp, "platform_admin") as a:
        assert a.execute("SELECT memory.enable_embeddings(3)").fetchone()[0] == {"dimensions": 3, "changed": True, "tenant_text_index": False}
    # btree_gin (contrib, trusted) created afterwards: enabling again adds the tenant full-text
    # indexes of hybrid recall's full-text list, and nothing else changes.
    conn.execute("CREATE EXTENSION IF NOT EXISTS btree_gin")
    with connect(vapp, "platform_admin") as a:
        assert a.execute("SELECT memory.enable_embeddings(3)").fetchone()[0] == {"dimensions": 3, "changed": False, "tenant_text_index": True}
    assert conn.execute("SELECT pg_get_indexdef('memory.observations_fts_tenant'::regclass)").fetchone()[0].endswith(
        "USING gin (org_id, user_id, content_tsv)")
    with connect(vapp, WRITER) as w:
        ids = [w.execute("INSERT INTO memory.observations (org_id, user_id, content, embedding) VALUES ('acme', %s, %s, %s) RETURNING id",
                         (u, c, v)).fetchone()[0]
               for u, c, v in [("u1", "first", "[1,0,0]"), ("u1", "second", "[0,1,0]"), ("u2", "third", "[0,0,1]"), ("u2", "fourth", "[1,1,0]")]]
        # A claim is written with its embedding too (pending: a plain restore loads it as such).
        (ent,) = w.execute("INSERT INTO memory.entities (org_id, entity_type, name) VALUES ('acme', 'concept', 'aspirin') RETURNING id").fetchone()
        (claim,) = w.execute("INSERT INTO memory.claims (org_id, entity_id, claim_text, embedding) VALUES ('acme', %s, 'aspirin prevents stroke', "
                             "'[0,1,0]') RETURNING id", (ent,)).fetchone()
    conn.execute("UPDATE memory.observations SET archive_at = now() - interval '1 day' WHERE id = ANY(%s)", ([ids[1], ids[3]],))
    conn.execute("SELECT memory.run_retention()")
    assert conn.execute("SELECT id, embedding::text FROM memory.observations_archive ORDER BY content").fetchall() == \
        [(ids[3], "[1,1,0]"), (ids[1], "[0,1,0]")], "archived with their embeddings"
    db = conn.execute("SELECT current_database()").fetchone()[0]
    with restored(vapp, port, db, "_vec") as c:
        assert c.execute("SELECT content, embedding::text FROM memory.observations ORDER BY content").fetchall() == \
            [("first", "[1,0,0]"), ("third", "[0,0,1]")]
        assert c.execute("SELECT embedding::text FROM memory.observations_archive ORDER BY content").fetchall() == [("[1,1,0]",), ("[0,1,0]",)]
        assert "USING hnsw (embedding vector_cosine_ops)" in c.execute(
            "SELECT pg_get_indexdef('memory.observations_embedding'::regclass)").fetchone()[0]
        assert "USING hnsw (emb vector_cosine_ops)" in c.execute("SELECT pg_get_indexdef('app.vnotes_emb'::regclass)").fetchone()[0]
        assert c.execute("SELECT dimensions FROM memory.ann_settings").fetchone() == (3,)
        # The claims' column and index come back before their rows (memory.ann_settings' data sorts first).
        assert c.execute("SELECT embedding::text FROM memory.claims WHERE id = %s", (claim,)).fetchone() == ("[0,1,0]",)
        assert "USING hnsw (embedding vector_cosine_ops) WITH (m='16', ef_construction='64') WHERE (lifecycle_state = 'active'" in c.execute(
            "SELECT pg_get_indexdef('memory.claims_embedding'::regclass)").fetchone()[0]
        # The tenant full-text indexes too (btree_gin is restored before the data).
        assert c.execute("SELECT to_regclass('memory.observations_fts_tenant') IS NOT NULL AND to_regclass('memory.claims_fts_tenant') IS NOT NULL").fetchone() == (True,)
        (eff,) = c.execute("SELECT options FROM memory.governance_registry WHERE relid = 'app.vnotes'::regclass").fetchone()
        assert eff["embedding"] == "emb"
    with connect(vapp, WRITER) as w:
        got = w.execute("SELECT id, vector_rank FROM memory.recall('acme', '', 5, query_embedding => '{1,0,0}')").fetchall()
        assert [g[0] for g in got] == [ids[0], ids[2]]
        w.execute("SELECT memory.forget(%s, 'asked')", ([ids[0], ids[1]],))
    with connect(vapp, ADMIN) as a:
        a.execute("SELECT memory.erase_subject('u2')")
    assert conn.execute("SELECT count(*) FROM memory.observations").fetchone() == (0,)
    assert conn.execute("SELECT count(*) FROM memory.observations_archive").fetchone() == (0,), \
        "forget and erasure take the embeddings with the rows, live and archived"


def test_without_pgvector_every_answer_names_it(app, conn):
    """Issue 36's "Done when": memory_ext without pgvector. The vector functions look for the
    `vector` extension of the database (pg_extension), never for the server's packages, so this
    runs everywhere: on a server without pgvector (pg_available_extensions has no `vector`) and, in
    a database that has not created it, on one with it. As the application's tenant-bound roles."""
    assert conn.execute("SELECT count(*) FROM pg_extension WHERE extname = 'vector'").fetchone() == (0,)
    ensure_role(conn, "platform_admin", "memory_admin")
    conn.execute("SELECT memory.grant_org('platform_admin', '*')")
    # enable_embeddings: 0A000 naming pgvector, for the admin of one org and the platform's alike
    # (whether pgvector is there comes before who may enable it), nothing changed.
    for role in (ADMIN, "platform_admin"):
        with connect(app, role) as a:
            with pytest.raises(psycopg.DatabaseError) as ex:
                a.execute("SELECT memory.enable_embeddings(384)")
            assert ex.value.sqlstate == "0A000", role
            assert "needs pgvector" in ex.value.diag.message_primary
            assert "Install pgvector" in ex.value.diag.message_hint and "CREATE EXTENSION vector" in ex.value.diag.message_hint
    assert conn.execute("SELECT count(*) FROM memory.ann_settings").fetchone() == (0,)
    assert conn.execute("SELECT count(*) FROM pg_attribute WHERE attname = 'embedding' AND NOT attisdropped AND attrelid IN "
                        "('memory.observations'::regclass, 'memory.observations_archive'::regclass, 'memory.claims'::regclass)").fetchone() == (0,)
    # recall and retrieve with a query embedding: 22023 (no embeddings to compare it with), the
    # hint naming memory.enable_embeddings and pgvector; without one they work by full text.
    with connect(app, WRITER) as w:
        w.execute("INSERT INTO memory.observations (org_id, user_id, content) VALUES ('acme', 'u1', 'payments are due')")
    with connect(app, OWNER) as o:
        o.execute("CREATE TABLE app.enotes (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), tenant text, body text, meta jsonb, emb real[])")
        o.execute("""SELECT memory.govern('app.enotes', '{"content": "body", "target": "meta", "org": "tenant"}')""")
        o.execute(f"GRANT SELECT ON app.enotes TO {READER}")
    with connect(app, READER) as r:
        for call, hint in [
            ("SELECT * FROM memory.recall('acme', 'payments', query_embedding => '{1,0,0}')", "memory.enable_embeddings"),
            ("SELECT * FROM memory.recall('acme', 'payments', query_embedding => '{1,0,0}', source => 'app.enotes')", "memory.govern"),
            ("SELECT * FROM memory.retrieve('acme', 'payments', query_embedding => '{1,0,0}')", "memory.enable_embeddings"),
        ]:
            with pytest.raises(psycopg.DatabaseError) as ex:
                r.execute(call)
            assert ex.value.sqlstate == "22023", call
            assert "no embeddings to compare query_embedding with" in ex.value.diag.message_primary, call
            assert hint in ex.value.diag.message_hint and "pgvector" in ex.value.diag.message_hint, call
        assert r.execute("SELECT content, lexical_rank, vector_rank FROM memory.recall('acme', 'payments')").fetchall() == \
            [("payments are due", 1, None)]
    # govern's embedding key: 22023, saying that pgvector is not installed in this database; the
    # mapping stays as it was.
    with connect(app, OWNER) as o:
        with pytest.raises(psycopg.DatabaseError) as ex:
            o.execute("""SELECT memory.govern('app.enotes', '{"content": "body", "target": "meta", "org": "tenant", "embedding": "emb"}')""")
        assert ex.value.sqlstate == "22023"
        assert "pgvector is not installed in this database" in ex.value.diag.message_primary
        assert "CREATE EXTENSION vector" in ex.value.diag.message_hint
    assert conn.execute("SELECT options ? 'embedding' FROM memory.governance_registry WHERE relid = 'app.enotes'::regclass").fetchone() == \
        (False,)


def _platform_embeddings(vapp, conn, dims):
    ensure_role(conn, "platform_admin", "memory_admin")
    conn.execute("SELECT memory.grant_org('platform_admin', '*')")
    with connect(vapp, "platform_admin") as a:
        a.execute("SELECT memory.enable_embeddings(%s)", (dims,))


def test_another_tenant_cannot_bury_a_tenants_vector_recall(vapp, conn):
    """Issue 53 finding 5: all orgs share one HNSW index and its scan stops after
    hnsw.max_scan_tuples (20,000). A globex writer floods acme's query point with 21,000 vectors;
    acme's vector list is still its 10 nearest under the conditions (an exact pass when the index
    scan comes back short), from memory.observations and from a governed table."""
    _platform_embeddings(vapp, conn, 3)
    with connect(vapp, WRITER) as w:
        w.cursor().executemany("INSERT INTO memory.observations (org_id, content, embedding) VALUES ('acme', %s, %s)",
                               [(f"acme note {i}", f"[1,{0.05 * (i + 1):.2f},0]") for i in range(30)])
        w.cursor().executemany("INSERT INTO app.vnotes (tenant, uid, body, emb) VALUES ('acme', 'u1', %s, %s)",
                               [(f"acme note {i}", vec([1.0, 0.05 * (i + 1)] + [0.0] * (DIMS - 2))) for i in range(30)])
    flood16 = vec([1.0] + [0.0] * (DIMS - 1))
    with connect(vapp, GLOBEX) as g:
        g.execute("INSERT INTO memory.observations (org_id, content, embedding) SELECT 'globex', 'flood', '[1,0,0]' FROM generate_series(1, 21000)")
        g.execute("INSERT INTO app.vnotes (tenant, uid, body, emb) SELECT 'globex', 'g', 'flood', %s FROM generate_series(1, 21000)", (flood16,))
    conn.execute("ANALYZE memory.observations")
    conn.execute("ANALYZE app.vnotes")
    exact_obs = [i for (i,) in conn.execute("SELECT id FROM memory.observations WHERE org_id = 'acme' "
                                            "ORDER BY (embedding <=> '[1,0,0]') + 0, id LIMIT 10").fetchall()]
    exact_src = [i for (i,) in conn.execute("SELECT id FROM app.vnotes WHERE tenant = 'acme' ORDER BY (emb <=> %s::vector) + 0, id LIMIT 10",
                                            (flood16,)).fetchall()]
    with connect(vapp, READER) as r:
        got = [i for (i,) in r.execute("SELECT id FROM memory.recall('acme', '', 10, NULL, '{}', '{1,0,0}')").fetchall()]
        assert len(set(got) & set(exact_obs)) >= 9, "recall@10 >= 0.9 against exact search in the flood"
        assert got == exact_obs
        got = [i for (i,) in r.execute("SELECT id FROM memory.recall('acme', 'note', 10, query_embedding => %s::real[], source => 'app.vnotes')",
                                       ("{" + flood16[1:-1] + "}",)).fetchall()]
        assert len(set(got) & set(exact_src)) >= 9
        ranks = r.execute("SELECT vector_rank FROM memory.recall('acme', 'note', 10, query_embedding => %s::real[], source => 'app.vnotes')",
                          ("{" + flood16[1:-1] + "}",)).fetchall()
        assert sorted(x for (x,) in ranks if x is not None) == list(range(1, 11)), "a text + vector recall keeps its vector ranks"


def test_a_session_sees_embeddings_enabled_and_pgvector_moved_after_its_first_recall(vapp, conn):
    """memory.recall keeps memory.observations' vector setup per backend (the dimensions, the
    column, pgvector's type; src/recall/body.rs) until an invalidation: a reader session that
    recalled before embeddings were enabled compares its query embedding with them after another
    session enables them (of their dimensions), and still after pgvector moves to another schema."""
    with connect(vapp, WRITER) as w:
        # It names payments twice (ts_rank_cd 0.2 against the card's 0.1): its lexical rank 1 is
        # by relevance, not by the two memories' random ids (an equal relevance's tie-break).
        w.execute("INSERT INTO memory.observations (org_id, content) VALUES ('acme', 'payments are due, and late payments')")
    with connect(vapp, READER) as r:
        with pytest.raises(psycopg.DatabaseError) as ex:
            r.execute("SELECT * FROM memory.recall('acme', 'payments', query_embedding => '{1,0,0}')")
        assert ex.value.sqlstate == "22023" and "no embeddings to compare" in ex.value.diag.message_primary
        _platform_embeddings(vapp, conn, 3)
        with connect(vapp, WRITER) as w:
            w.execute("INSERT INTO memory.observations (org_id, content, embedding) VALUES ('acme', 'payments by card', '[1,0,0]')")
        call = "SELECT content, lexical_rank, vector_rank FROM memory.recall('acme', 'payments', query_embedding => %s::real[])"
        assert r.execute(call, ("{1,0,0}",)).fetchall() == [("payments by card", 2, 1), ("payments are due, and late payments", 1, None)]
        with pytest.raises(psycopg.DatabaseError) as ex:
            r.execute(call, ("{1,0}",))
        assert ex.value.sqlstate == "22023" and "the embeddings have 3" in ex.value.diag.message_primary
        conn.execute("CREATE SCHEMA vec")
        conn.execute("ALTER EXTENSION vector SET SCHEMA vec")
        assert r.execute(call, ("{1,0,0}",)).fetchall() == [("payments by card", 2, 1), ("payments are due, and late payments", 1, None)]


def test_query_embedding_from_psycopg_floats(vapp, conn):
    """Issue 46: psycopg sends Python floats as float8[]; recall takes them (and real[]) with the
    same results and the same errors."""
    _platform_embeddings(vapp, conn, 3)
    with connect(vapp, WRITER) as w:
        for c, v in [("first", "[1,0,0]"), ("second", "[0,1,0]"), ("third", "[0.9,0.1,0]")]:
            w.execute("INSERT INTO memory.observations (org_id, content, embedding) VALUES ('acme', %s, %s)", (c, v))
    with connect(vapp, READER) as r:
        floats = r.execute("SELECT content, vector_rank, score FROM memory.recall('acme', '', 3, query_embedding => %s)",
                           ([1.0, 0.0, 0.0],)).fetchall()
        reals = r.execute("SELECT content, vector_rank, score FROM memory.recall('acme', '', 3, query_embedding => '{1,0,0}'::real[])").fetchall()
        assert floats == reals and [f[0] for f in floats] == ["first", "third", "second"]
        for bad in ([0.0, 0.0, 0.0], [1.0, 0.0], [float("nan"), 0.0, 0.0]):
            errs = []
            for arg in (bad, "{" + ",".join(str(x) for x in bad) + "}"):
                with pytest.raises(psycopg.DatabaseError) as ex:
                    r.execute("SELECT * FROM memory.recall('acme', '', 3, query_embedding => %s::" + ("float8[]" if arg is bad else "real[]") + ")",
                              (arg,))
                errs.append(ex.value.sqlstate)
            assert errs == ["22023", "22023"], bad


def test_query_embedding_of_every_type_is_one_answer(vapp, conn):
    """Issue 46: recall, retrieve, search and put take the embedding as a client has it: a Python
    list (psycopg: float8[]), real[], pgvector's vector (a literal, or pgvector-python's Vector
    through its adapter), numeric[] and an untyped literal (text: '[1,0,0]' or '{1,0,0}'), with the
    same rows and the same errors (22023, nothing written) for each; another type is 22023."""
    _platform_embeddings(vapp, conn, 3)
    with connect(vapp, WRITER) as w:
        for c, v in [("first", "[1,0,0]"), ("second", "[0,1,0]"), ("third", "[0.9,0.1,0]")]:
            w.execute("INSERT INTO memory.observations (org_id, content, embedding) VALUES ('acme', %s, %s)", (c, v))
    forms = [("%s", [1.0, 0.0, 0.0]), ("%s::real[]", "{1,0,0}"), ("%s::vector", "[1,0,0]"), ("%s::numeric[]", "{1.0,0,0}"),
             ("%s::float8[]", [1, 0, 0]), ("'[1,0,0]'", None), ("'{1,0,0}'", None)]
    try:
        from pgvector.psycopg import Vector, register_vector
    except ImportError:  # scripts/install-deps.sh installs it; without it the adapter's form is not tried
        Vector = register_vector = None
    calls = {
        "recall": "SELECT content, vector_rank, score FROM memory.recall('acme', '', 2, query_embedding => {})",
        "retrieve": "SELECT id, vector_rank, score FROM memory.retrieve('acme', '', 3, query_embedding => {})",
        "search": "SELECT key, score FROM memory.search('acme', ARRAY['n'], query_embedding => {})",
    }
    with connect(vapp, WRITER) as w:
        for key, v in [("a", [0.0, 0.0, 1.0]), ("b", "[0,1,0]")]:
            w.execute("SELECT memory.put('acme', ARRAY['n'], %s, '{\"x\": 1}', embedding => %s" + ("" if isinstance(v, list) else "::vector") + ")",
                      (key, v))
    assert conn.execute("SELECT key, embedding::text FROM memory.observations WHERE key IS NOT NULL ORDER BY key").fetchall() == \
        [("a", "[0,0,1]"), ("b", "[0,1,0]")], "put stores a list's and a vector's embedding alike"
    with connect(vapp, READER) as r:
        if register_vector:
            register_vector(r)
        for name, sql in calls.items():
            answers = [r.execute(sql.format(f), () if a is None else (a,)).fetchall() for f, a in forms]
            if Vector:
                answers.append(r.execute(sql.format("%s"), (Vector([1.0, 0.0, 0.0]),)).fetchall())
            assert all(a == answers[0] for a in answers), (name, answers)
            if name == "recall":
                assert [x[0] for x in answers[0]] == ["first", "third"]
            if name == "search":
                assert sorted(x[0] for x in answers[0]) == ["a", "b"]
            # The same 22023 for each type: wrong dimensions, a non-finite component (float8
            # beyond real's range too), all zeros, not one-dimensional, not a number.
            bad = [("%s", [1.0, 0.0]), ("%s::real[]", "{1,0}"), ("%s::vector", "[1,0]"), ("'[1,0]'", None),
                   ("%s", [float("nan"), 0.0, 0.0]), ("%s::real[]", "{Infinity,0,0}"), ("%s", [1e300, 0.0, 0.0]), ("'[NaN,0,0]'", None),
                   ("%s", [0.0, 0.0, 0.0]), ("%s::vector", "[0,0,0]"), ("'{0,0,0}'", None),
                   ("%s::float8[]", "{{1,0,0}}"), ("'{{1,0,0}}'", None), ("'[1,x,0]'", None), ("'{}'", None),
                   ("%s::jsonb", "[1,0,0]"), ("%s::int", 1)]
            if Vector:
                bad.append(("%s", Vector([1.0, 0.0])))
            for f, a in bad:
                with pytest.raises(psycopg.DatabaseError) as ex:
                    r.execute(sql.format(f), () if a is None else (a,))
                assert ex.value.sqlstate == "22023", (name, f, a, ex.value.sqlstate, ex.value.diag.message_primary)
                assert "query_embedding" in ex.value.diag.message_primary
                if "x" in f:
                    assert "x" not in ex.value.diag.message_primary, "the embedding's text is not echoed"
    # put's bad embeddings: 22023 and nothing written, whatever the type.
    with connect(vapp, WRITER) as w:
        for f, a in [("%s", [1.0, 0.0]), ("%s::vector", "[1,0]"), ("%s", [1e300, 0.0, 0.0]), ("'[1,0]'", None), ("%s::jsonb", "[1,0,0]")]:
            with pytest.raises(psycopg.DatabaseError) as ex:
                w.execute("SELECT memory.put('acme', ARRAY['n'], 'c', '{\"x\": 2}', embedding => " + f + ")", () if a is None else (a,))
            assert ex.value.sqlstate == "22023", (f, a)
    assert conn.execute("SELECT count(*) FROM memory.observations WHERE key = 'c'").fetchone() == (0,)


def test_embedding_backlog_shows_nothing_above_the_admins_clearance(vapp, conn):
    """memory.embedding_backlog lists labels (namespace, key): an admin cleared to internal sees
    the internal memory that waits, not the restricted item."""
    _platform_embeddings(vapp, conn, 3)
    ensure_role(conn, "backlog_low", "memory_admin")
    conn.execute("SELECT memory.grant_org('backlog_low', 'acme', 'internal')")
    conn.execute("INSERT INTO memory.observations (org_id, content, classification) VALUES ('acme', 'waits, internal', 'internal')")
    conn.execute("SELECT memory.put('acme', ARRAY['users', 'alice'], 'ssn', '{\"note\": \"x\"}')")
    conn.execute("UPDATE memory.observations SET classification = 'restricted' WHERE key = 'ssn'")
    with connect(vapp, "backlog_low") as a:
        seen = a.execute("SELECT classification::text, key FROM memory.embedding_backlog WHERE org_id = 'acme'").fetchall()
    assert seen == [("internal", None)], seen
    with connect(vapp, ADMIN) as a:   # cleared to every tier: the restricted item waits too
        keys = a.execute("SELECT key FROM memory.embedding_backlog WHERE org_id = 'acme' AND key IS NOT NULL").fetchall()
    assert keys == [("ssn",)]
