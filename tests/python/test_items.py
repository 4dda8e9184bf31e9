"""Namespaced items (issue 48, SPEC §16) as the application lives them: tenant-bound login roles
put, get, delete, list and sweep items through psycopg; the superuser (`conn`) only sets up and
reads what happened."""
import threading

import psycopg
import pytest
from psycopg.types.json import Jsonb

from conftest import connect, ensure_role
from test_app_roles import ADMIN, GLOBEX, READER, WRITER, app  # noqa: F401 (the fixture)

NS = ["memories", "dave"]


def put(c, org, ns, key, value, **kw):
    casts = {"embedding": "::real[]", "ttl": "::interval", "index": "::text[]"}
    args = ", ".join(f"{k} => %({k})s{casts.get(k, '')}" for k in kw)
    sql = "SELECT memory.put(%(org)s, %(ns)s, %(key)s, %(value)s" + (", " + args if args else "") + ")"
    (rid,) = c.execute(sql, {"org": org, "ns": ns, "key": key, "value": Jsonb(value), **kw}).fetchone()
    return rid


def get(c, org, ns, key):
    return c.execute("SELECT id, namespace, key, value, classification::text FROM memory.get(%s, %s, %s)", (org, ns, key)).fetchone()


def test_put_get_update_delete(app, conn):
    with connect(app, WRITER) as w:
        rid = put(w, "acme", NS, "prefs", {"text": "dave likes tea"}, user_id="dave")
        assert get(w, "acme", NS, "prefs") == (rid, NS, "prefs", {"text": "dave likes tea"}, "internal")
        assert put(w, "acme", NS, "prefs", {"text": "dave likes coffee", "n": 2}) == rid
        assert get(w, "acme", NS, "prefs")[3] == {"text": "dave likes coffee", "n": 2}
        assert get(w, "acme", NS, "missing") is None
        assert w.execute("SELECT memory.delete('acme', %s, 'prefs')", (NS,)).fetchone() == (True,)
        assert get(w, "acme", NS, "prefs") is None
        assert w.execute("SELECT memory.delete('acme', %s, 'prefs')", (NS,)).fetchone() == (False,)
    assert conn.execute("SELECT count(*) FROM memory.observations WHERE id = %s", (rid,)).fetchone() == (0,)
    conn.execute("SELECT memory.audit_integrate()")
    kinds = [k for (k,) in conn.execute("SELECT event_type FROM memory.audit_log WHERE chain_id = 'acme' AND "
                                        "(payload->>'id' = %s OR payload->'forgotten'->0->>'id' = %s) ORDER BY seq", (str(rid), str(rid)))]
    assert kinds == ["memory.store", "memory.update", "memory.delete", "memory.forget"]
    (text,) = conn.execute("SELECT string_agg(payload::text, ' ') FROM memory.audit_log").fetchone()
    assert "likes" not in text, "no value reaches the log"


def test_an_empty_value_is_an_item(app, conn):
    """LangGraph stores take `{}` (and blank strings) as values: such an item is stored and read
    back as given; its text (what classification and search read) is `{}`, never blank."""
    with connect(app, WRITER) as w:
        for key, value in [("empty", {}), ("blank", {"": " "}), ("nested", {"a ": {}})]:
            rid = put(w, "acme", NS, key, value)
            assert get(w, "acme", NS, key)[:4] == (rid, NS, key, value), key
    assert conn.execute("SELECT content FROM memory.observations WHERE key = 'empty'").fetchone() == ("{}",)


def test_classification_over_nested_strings_and_clearance(app, conn):
    ensure_role(conn, "app_internal", "memory_reader")
    conn.execute("SELECT memory.grant_org('app_internal', 'acme', 'internal')")
    with connect(app, WRITER) as w, connect(app, "app_internal") as low, connect(app, READER) as r:
        put(w, "acme", NS, "card", {"text": "lunch", "a": {"b": [{"c": "paid with 4111 1111 1111 1111 yesterday"}]}}, index=["$.text"])
        assert get(r, "acme", NS, "card")[4] == "restricted"
        assert get(low, "acme", NS, "card") is None, "a reader cleared to internal does not get a restricted item"
        put(w, "acme", NS, "card", {"text": "lunch"})
        assert get(r, "acme", NS, "card")[4] == "restricted", "a changed value never lowers the tier"
        # A writer cleared to internal neither replaces the restricted item nor deletes it.
        ensure_role(conn, "app_internal_writer", "memory_writer")
        conn.execute("SELECT memory.grant_org('app_internal_writer', 'acme', 'internal')")
        with connect(app, "app_internal_writer") as lw:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                put(lw, "acme", NS, "card", {"text": "overwritten"})
            assert lw.execute("SELECT memory.delete('acme', %s, 'card')", (NS,)).fetchone() == (False,)
            put(lw, "acme", NS, "plain-low", {"text": "hello"})
            assert get(lw, "acme", NS, "plain-low")[3] == {"text": "hello"}, "its own items it puts and reads"
        assert get(r, "acme", NS, "card")[3] == {"text": "lunch"}, "the restricted item is as its writer left it"
        put(w, "acme", NS, "plain", {"text": "hello"})
        assert get(low, "acme", NS, "plain")[3] == {"text": "hello"}
        assert [n for (n,) in low.execute("SELECT memory.list_namespaces('acme')")] == [NS]


def test_tenants_are_isolated(app, conn):
    with connect(app, WRITER) as w, connect(app, GLOBEX) as g:
        put(w, "acme", NS, "k", {"text": "acme's"})
        for sql in ("SELECT * FROM memory.get('acme', %s, 'k')", "SELECT memory.put('acme', %s, 'k', '{}')",
                    "SELECT memory.delete('acme', %s, 'k')"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                g.execute(sql, (NS,))
        put(g, "globex", NS, "k", {"text": "globex's"})
        assert get(g, "globex", NS, "k")[3] == {"text": "globex's"}
        assert get(w, "acme", NS, "k")[3] == {"text": "acme's"}


def test_concurrent_puts_of_one_key_are_one_item(app, conn):
    ids, errors = [], []
    barrier = threading.Barrier(8)

    def worker(i):
        try:
            with connect(app, WRITER) as w:
                barrier.wait()
                for j in range(10):
                    ids.append(put(w, "acme", ["race"], "one", {"writer": i, "round": j}))
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(set(ids)) == 1 and len(ids) == 80
    assert conn.execute("SELECT count(*) FROM memory.observations WHERE key = 'one'").fetchone() == (1,)
    conn.execute("SELECT memory.audit_integrate()")
    assert conn.execute("SELECT count(*) FROM memory.audit_log WHERE event_type = 'memory.store' AND payload->>'id' = %s",
                        (str(ids[0]),)).fetchone() == (1,)


def test_holds_ttl_and_purge(app, conn):
    with connect(app, ADMIN) as a:
        a.execute("INSERT INTO memory.legal_holds (org_id, user_id, reason) VALUES ('acme', 'held', 'litigation')")
    with connect(app, WRITER) as w:
        put(w, "acme", ["h"], "k", {"text": "kept"}, user_id="held")
        with pytest.raises(psycopg.Error) as e:
            put(w, "acme", ["h"], "k", {"text": "changed"})
        assert e.value.sqlstate == "MX006"
        with pytest.raises(psycopg.Error) as e:
            w.execute("SELECT memory.delete('acme', ARRAY['h'], 'k')")
        assert e.value.sqlstate == "MX006"
        gone = put(w, "acme", ["cache"], "a", {"text": "x"}, ttl="1 hour")
        held = put(w, "acme", ["cache"], "b", {"text": "y"}, ttl="1 hour", user_id="held")
        conn.execute("UPDATE memory.observations SET expires_at = now() - interval '1 second' WHERE id = ANY(%s)", ([gone, held],))
        assert get(w, "acme", ["cache"], "a") is None
        assert w.execute("SELECT memory.purge_expired('acme')").fetchone() == (1,)
    assert [i for (i,) in conn.execute("SELECT id FROM memory.observations WHERE namespace = ARRAY['cache']")] == [held]


def test_subject_rights_and_forget_by_id(app, conn):
    with connect(app, WRITER) as w:
        a = put(w, "acme", ["memories", "erin"], "x", {"text": "erin one"}, user_id="erin")
        put(w, "acme", ["memories", "erin"], "y", {"text": "erin two"}, user_id="erin")
        (res,) = w.execute("SELECT memory.forget(ARRAY[%s]::uuid[], 'user asked')", (a,)).fetchone()
        assert res["forgotten"] == [str(a)]
    with connect(app, ADMIN) as adm:
        (exp,) = adm.execute("SELECT memory.export_subject('erin')").fetchone()
        assert [o["value"] for o in exp["sections"]["observations"]] == [{"text": "erin two"}]
        (erased,) = adm.execute("SELECT memory.erase_subject('erin')").fetchone()
        assert erased["observations"] == 1
    assert conn.execute("SELECT count(*) FROM memory.observations WHERE user_id = 'erin'").fetchone() == (0,)


@pytest.mark.parametrize("sql, args", [
    ("SELECT memory.put('acme', %s, 'k', '{}')", (["a.b"],)),
    ("SELECT memory.put('acme', %s, 'k', '{}')", ([" "],)),
    ("SELECT memory.put('acme', %s, 'k', '{}')", (["a"] * 21,)),
    ("SELECT memory.put('acme', %s, '', '{}')", (["a"],)),
    ("SELECT memory.put('acme', %s, 'k', '\"text\"')", (["a"],)),
    ("SELECT memory.put('acme', %s, 'k', '{}', index => ARRAY['text'])", (["a"],)),
    ("SELECT memory.put('acme', %s, 'k', '{}', ttl => '-1 minute')", (["a"],)),
    ("SELECT memory.put('acme', %s, 'k', '{}', ttl => '1000000 years')", (["a"],)),
    ("SELECT * FROM memory.search('acme', %s, \"offset\" => 2147483647)", (["a"],)),
    ("SELECT memory.put('acme', %s, 'k', '{}', embedding => ARRAY[1, 2]::real[])", (["a"],)),
    ("SELECT * FROM memory.get('acme', %s, repeat('k', 1025))", (["a"],)),
    ("SELECT * FROM memory.list_namespaces('acme', %s, k => 0)", (["a"],)),
])
def test_bad_input_is_22023_and_writes_nothing(app, conn, sql, args):
    with connect(app, WRITER) as w:
        with pytest.raises(psycopg.errors.InvalidParameterValue) as e:
            w.execute(sql, args)
        assert e.value.diag.message_hint
    assert conn.execute("SELECT count(*) FROM memory.observations").fetchone() == (0,)


def test_put_stores_an_embedding(app, conn):
    if not conn.execute("SELECT EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'vector')").fetchone()[0]:
        pytest.skip("pgvector is not installed (scripts/pgvector.sh install builds it from ../shared/vendor/pgvector)")
    with connect(app, WRITER) as w:
        with pytest.raises(psycopg.errors.InvalidParameterValue) as e:
            put(w, "acme", NS, "v", {"text": "x"}, embedding=[1.0, 0.0, 0.0])
        assert "memory.enable_embeddings" in e.value.diag.message_hint, "before enable_embeddings: 22023 naming it"
    conn.execute("CREATE EXTENSION vector")
    conn.execute("SELECT memory.enable_embeddings(3)")
    with connect(app, WRITER) as w:
        rid = put(w, "acme", NS, "v", {"text": "x"}, embedding=[1.0, 0.0, 0.0])
        for bad in ([1.0, 0.0], [float("nan"), 0.0, 0.0], [0.0, 0.0, 0.0]):
            with pytest.raises(psycopg.errors.InvalidParameterValue):
                put(w, "acme", NS, "v", {"text": "changed"}, embedding=bad)
    assert conn.execute("SELECT embedding::text, value FROM memory.observations WHERE id = %s", (rid,)).fetchone() == (
        "[1,0,0]", {"text": "x"}), "stored with the item; a refused put changed nothing"
    with connect(app, WRITER) as w:
        assert put(w, "acme", NS, "v", {"text": "changed"}) == rid
    assert conn.execute("SELECT embedding IS NULL, value FROM memory.observations WHERE id = %s", (rid,)).fetchone() == (
        True, {"text": "changed"}), "a put without an embedding never keeps the vector of the value it replaced"
    with connect(app, ADMIN) as a:
        assert a.execute("SELECT id FROM memory.embedding_backlog WHERE org_id = 'acme'").fetchall() == [(rid,)], "it waits for one"
