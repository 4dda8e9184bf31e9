"""The Python package clients/python (memory_ext, SPEC §16) against a real cluster, as tenant
roles: Memory / AsyncMemory (the agent API as typed calls, errors as MemoryError subclasses) and
the LangGraph stores MemoryStore / AsyncMemoryStore, including a compiled StateGraph whose nodes
read and write through get_store(). The superuser (`conn`) only sets up and reads what happened."""
import asyncio
from typing import TypedDict

import psycopg
import pytest

from test_app_roles import ADMIN, GLOBEX, READER, WRITER, app  # noqa: F401 (the fixture)

# Installed into .venv by scripts/install-deps.sh (make test); a skip fails under MEMORY_REQUIRE_ALL.
memory_ext = pytest.importorskip("memory_ext", reason="memory-ext is not installed (scripts/install-deps.sh installs clients/python)")
lg = pytest.importorskip("memory_ext.langgraph", reason="memory-ext[langgraph] is not installed")
from langgraph.store.base import GetOp, ListNamespacesOp, MatchCondition, PutOp, SearchOp  # noqa: E402
from psycopg_pool import AsyncConnectionPool, ConnectionPool  # noqa: E402


def role_dsn(dsn, role):
    return dsn.replace("user=postgres", f"user={role}")


def test_memory_agent_api(app, conn):
    with psycopg.connect(role_dsn(app, WRITER), autocommit=True) as c:
        m = memory_ext.Memory(c, org="acme", actor="agent-7")
        r = m.remember("dave likes green tea", user_id="dave", session_id="s1")
        assert isinstance(r, memory_ext.Remembered) and r.classification == "internal"
        hits = m.recall("green tea")
        assert [h.id for h in hits] == [r.id] and isinstance(hits[0], memory_ext.Recalled) and hits[0].user_id == "dave"
        out = m.record_outcome("s1", "accepted", [r.id])
        assert out[0].applied and out[0].observation_id == r.id
        f = m.forget([r.id], "user asked")
        assert f == memory_ext.Forgotten(forgotten=[str(r.id)], held=[], not_found=[])
        assert m.recall("green tea") == []
        assert m.retrieve("anything at all") == []
    with psycopg.connect(role_dsn(app, ADMIN), autocommit=True) as c:
        checks = memory_ext.Memory(c, org="acme").audit_verify("acme")
        assert [(x.chain_id, x.ok) for x in checks] == [("acme", True)]
    (actor,) = conn.execute("SELECT actor_id FROM memory.audit_log WHERE chain_id = 'acme' AND event_type = 'memory.store'").fetchone()
    assert actor and actor != "agent-7", "the actor is recorded, pseudonymised"


def test_memory_forgets_only_its_org(app, conn):
    """A role bound to two orgs, one Memory per org: globex's client does not forget acme's memory."""
    from conftest import ensure_role
    ensure_role(conn, "client_multi", "memory_writer")
    conn.execute("SELECT memory.grant_org('client_multi', 'acme'), memory.grant_org('client_multi', 'globex')")
    with psycopg.connect(role_dsn(app, "client_multi"), autocommit=True) as c:
        acme, globex = memory_ext.Memory(c, org="acme"), memory_ext.Memory(c, org="globex")
        r = acme.remember("the acme offsite is in june")
        assert globex.forget([r.id], "globex tries") == memory_ext.Forgotten(forgotten=[], held=[], not_found=[str(r.id)])
        assert [h.id for h in acme.recall("offsite june")] == [r.id]
        assert acme.forget([r.id], "done") == memory_ext.Forgotten(forgotten=[str(r.id)], held=[], not_found=[])


def test_errors_carry_the_server_fields(app):
    with psycopg.connect(role_dsn(app, WRITER), autocommit=True) as c:
        m = memory_ext.Memory(c, org="acme")
        with pytest.raises(memory_ext.BadArgument) as e:
            m.recall("tea", k=0)
        assert e.value.sqlstate == "22023" and "k must be between 1 and 1000" in e.value.message and e.value.hint
        with pytest.raises(memory_ext.NotAllowed) as e:
            memory_ext.Memory(c, org="globex").recall("tea")
        assert e.value.sqlstate == "42501" and isinstance(e.value, memory_ext.MemoryError)
        # The transaction of the failed call is gone: the connection serves the next call.
        assert m.recall("tea") == []


def test_async_memory(app):
    async def main():
        async with await psycopg.AsyncConnection.connect(role_dsn(app, WRITER), autocommit=True) as c:
            m = memory_ext.AsyncMemory(c, org="acme")
            r = await m.remember("erin uses vim", user_id="erin")
            assert [h.id for h in await m.recall("vim")] == [r.id]
            assert (await m.forget([r.id], "done")).forgotten == [str(r.id)]
            with pytest.raises(memory_ext.BadArgument):
                await m.recall("vim", k=5000)
    asyncio.run(main())


def test_store_put_get_delete_list(app, conn):
    with psycopg.connect(role_dsn(app, WRITER), autocommit=True) as c:
        store = lg.MemoryStore(c, org="acme", user_label=1)
        store.setup()
        store.put(("memories", "dave"), "prefs", {"text": "dave likes tea", "tags": ["drinks"]})
        item = store.get(("memories", "dave"), "prefs")
        assert item.value == {"text": "dave likes tea", "tags": ["drinks"]} and item.namespace == ("memories", "dave")
        assert store.get(("memories", "dave"), "missing") is None
        store.put(("memories", "erin", "work"), "k", {"text": "erin"})
        store.put(("docs",), "readme", {"text": "hello"})
        assert store.list_namespaces() == [("docs",), ("memories", "dave"), ("memories", "erin", "work")]
        assert store.list_namespaces(prefix=("memories",), max_depth=2) == [("memories", "dave"), ("memories", "erin")]
        assert store.list_namespaces(suffix=("work",)) == [("memories", "erin", "work")]
        # One batch, one transaction: results in the caller's order; a PutOp with None deletes.
        res = store.batch([PutOp(("docs",), "a", {"n": 1}), GetOp(("docs",), "a"), PutOp(("docs",), "readme", None),
                           GetOp(("docs",), "readme"), ListNamespacesOp(match_conditions=(MatchCondition("prefix", ("docs",)),))])
        assert res[0] is None and res[1].value == {"n": 1} and res[2] is None and res[3] is None and res[4] == [("docs",)]
        store.delete(("memories", "dave"), "prefs")
        assert store.get(("memories", "dave"), "prefs") is None
    (user,) = conn.execute("SELECT user_id FROM memory.observations WHERE key = 'k'").fetchone()
    assert user == "erin", "user_label names the end user"
    conn.execute("SELECT memory.audit_integrate()")
    (n,) = conn.execute("SELECT count(*) FROM memory.audit_log WHERE event_type = 'memory.forget' AND payload->>'reason' = 'memory.delete'").fetchone()
    assert n == 2


def test_store_governance_reaches_items(app, conn):
    with psycopg.connect(role_dsn(app, WRITER), autocommit=True) as c:
        store = lg.MemoryStore(c, org="acme", user_label=1)
        store.put(("memories", "u9"), "card", {"note": {"deep": ["paid with 4111 1111 1111 1111 yesterday"]}})
        conn.execute("INSERT INTO memory.legal_holds (org_id, user_id, reason) VALUES ('acme', 'u9', 'litigation')")
        with pytest.raises(memory_ext.Held) as e:
            store.put(("memories", "u9"), "card", {"note": "changed"})
        assert e.value.sqlstate == "MX006"
    (tier,) = conn.execute("SELECT classification::text FROM memory.observations WHERE key = 'card'").fetchone()
    assert tier == "restricted"
    conn.execute("UPDATE memory.legal_holds SET released_at = now()")
    with psycopg.connect(role_dsn(app, ADMIN), autocommit=True) as c:
        c.execute("SELECT memory.erase_subject('u9')")
    assert conn.execute("SELECT count(*) FROM memory.observations WHERE key = 'card'").fetchone() == (0,)


def test_a_pool_shared_by_orgs_never_leaks_one(app, conn):
    conn.execute(f"SELECT memory.grant_org('{WRITER}', 'globex')")
    with ConnectionPool(role_dsn(app, WRITER), min_size=1, max_size=1, kwargs={"autocommit": True}) as pool:
        acme, globex = lg.MemoryStore(pool, org="acme"), lg.MemoryStore(pool, org="globex")
        acme.put(("ns",), "k", {"text": "acme's"})
        globex.put(("ns",), "k", {"text": "globex's"})
        assert acme.get(("ns",), "k").value == {"text": "acme's"}
        assert globex.get(("ns",), "k").value == {"text": "globex's"}
        with pool.connection() as c:
            # SET LOCAL: nothing of the last call's org is left on the pooled connection.
            assert c.execute("SELECT coalesce(current_setting('memory.org_id', true), '')").fetchone() == ("",)
    assert conn.execute("SELECT org_id, value->>'text' FROM memory.observations WHERE key = 'k' ORDER BY 1").fetchall() == [
        ("acme", "acme's"), ("globex", "globex's")]


def test_a_batch_is_one_transaction_in_autocommit_and_inside_the_callers(app, conn):
    # Autocommit: the batch's pipeline is one implicit transaction (no BEGIN/COMMIT sent); an op
    # refused in it takes the batch's earlier puts with it, and the connection is left idle.
    with psycopg.connect(role_dsn(app, WRITER), autocommit=True) as c:
        store = lg.MemoryStore(c, org="acme")
        with pytest.raises(memory_ext.BadArgument):
            store.batch([PutOp(("tx",), "a", {"text": "first"}), SearchOp(("tx",), filter={"n": {"$regex": "x"}})])
        assert c.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert store.get(("tx",), "a") is None
        store.put(("tx",), "b", {"text": "second"})
        assert [i.key for i in store.search(("tx",))] == ["b"]
    (n,) = conn.execute("SELECT count(*) FROM memory.observations WHERE namespace = '{tx}'").fetchone()
    assert n == 1
    # Inside the caller's transaction (a savepoint of it): the caller's rollback takes the put too.
    with psycopg.connect(role_dsn(app, WRITER), autocommit=True) as c:
        store = lg.MemoryStore(c, org="acme")
        with c.transaction():
            store.put(("tx",), "c", {"text": "third"})
            assert store.get(("tx",), "c").value == {"text": "third"}
            assert c.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
            raise psycopg.Rollback()
        assert store.get(("tx",), "c") is None
    assert conn.execute("SELECT count(*) FROM memory.observations WHERE key = 'c'").fetchone() == (0,)


def test_reads_only_are_sent_without_the_tenant_setting(app, conn):
    """A batch of reads (get, search, list_namespaces take the org as their argument) is sent
    without the tenant's SET LOCAL, a single one as a plain call: the answers are the same, the
    org is still checked by the functions, and the connection is left idle with no org set."""
    with psycopg.connect(role_dsn(app, WRITER), autocommit=True) as c:
        store = lg.MemoryStore(c, org="acme")
        store.put(("ro", "a"), "k1", {"text": "tea", "n": 1})
        store.put(("ro", "b"), "k2", {"text": "coffee", "n": 2})
        got = store.batch([GetOp(("ro", "a"), "k1"), SearchOp(("ro",), filter={"n": {"$gt": 1}}),
                           ListNamespacesOp(match_conditions=(MatchCondition("prefix", ("ro",)),))])
        assert got[0].value == {"text": "tea", "n": 1}
        assert [h.key for h in got[1]] == ["k2"]
        assert sorted(got[2]) == [("ro", "a"), ("ro", "b")]
        assert [h.key for h in store.search(("ro", "b"))] == ["k2"]
        assert c.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert c.execute("SELECT coalesce(current_setting('memory.org_id', true), '')").fetchone() == ("",)
        # An org the role may not act for is refused by the read itself (42501), as before.
        with pytest.raises(memory_ext.MemoryError) as e:
            lg.MemoryStore(c, org="initech").search(("ro",))
        assert e.value.sqlstate == "42501"


def test_store_tenants_and_clearance(app):
    with psycopg.connect(role_dsn(app, GLOBEX), autocommit=True) as c:
        with pytest.raises(memory_ext.NotAllowed):
            lg.MemoryStore(c, org="acme").put(("x",), "k", {"a": 1})
    with psycopg.connect(role_dsn(app, READER), autocommit=True) as c:
        with pytest.raises(memory_ext.NotAllowed):
            lg.MemoryStore(c, org="acme").put(("x",), "k", {"a": 1})


def test_store_ttl_and_sweeper(app, conn):
    with lg.MemoryStore.from_conn_string(role_dsn(app, WRITER), org="acme", ttl={"default_ttl": 60, "refresh_on_read": True}) as store:
        store.put(("cache",), "a", {"text": "x"})
        (exp,) = conn.execute("SELECT expires_at <= now() + interval '60 minutes' FROM memory.observations WHERE key = 'a'").fetchone()
        assert exp, "default_ttl shortens expires_at"
        conn.execute("UPDATE memory.observations SET expires_at = now() - interval '1 second' WHERE key = 'a'")
        assert store.get(("cache",), "a") is None
        assert store.sweep_ttl() == 1
        fut = store.start_ttl_sweeper(sweep_interval_minutes=1)
        assert store.stop_ttl_sweeper(timeout=5)
        fut.result(timeout=5)


def test_setup_checks_and_creates_nothing(app, conn):
    before = conn.execute("SELECT count(*) FROM pg_class").fetchone()
    with lg.MemoryStore.from_conn_string(role_dsn(app, WRITER), org="acme", pool_config={"min_size": 1, "max_size": 2}) as store:
        store.setup()
    assert conn.execute("SELECT count(*) FROM pg_class").fetchone() == before


def test_async_store(app):
    async def main():
        async with AsyncConnectionPool(role_dsn(app, WRITER), min_size=1, max_size=2, kwargs={"autocommit": True}, open=False) as pool:
            store = lg.AsyncMemoryStore(pool, org="acme", user_label=1)
            await store.setup()
            await store.aput(("memories", "u2"), "k", {"text": "async"})
            assert (await store.aget(("memories", "u2"), "k")).value == {"text": "async"}
            assert await store.alist_namespaces() == [("memories", "u2")]
            # Sync calls from another thread reach the store's loop.
            got = await asyncio.get_running_loop().run_in_executor(None, store.get, ("memories", "u2"), "k")
            assert got.value == {"text": "async"}
            await store.adelete(("memories", "u2"), "k")
            assert await store.aget(("memories", "u2"), "k") is None
    asyncio.run(main())


class State(TypedDict):
    user: str
    text: str
    seen: str


def test_langgraph_state_graph_uses_the_store(app, conn):
    from langgraph.config import get_store
    from langgraph.graph import END, START, StateGraph

    def remember(state: State):
        get_store().put(("memories", state["user"]), "last", {"text": state["text"]})
        return {}

    def recall(state: State):
        item = get_store().get(("memories", state["user"]), "last")
        return {"seen": item.value["text"] if item else ""}

    g = StateGraph(State)
    g.add_node("remember", remember)
    g.add_node("recall", recall)
    g.add_edge(START, "remember")
    g.add_edge("remember", "recall")
    g.add_edge("recall", END)
    with psycopg.connect(role_dsn(app, WRITER), autocommit=True) as c:
        graph = g.compile(store=lg.MemoryStore(c, org="acme", user_label=1))
        out = graph.invoke({"user": "u5", "text": "likes jazz", "seen": ""})
    assert out["seen"] == "likes jazz"
    assert conn.execute("SELECT user_id, classification::text FROM memory.observations WHERE key = 'last'").fetchone() == ("u5", "internal")


def test_store_index_embeds_one_vector_per_item(app, conn):
    if not conn.execute("SELECT EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'vector')").fetchone()[0]:
        pytest.skip("pgvector is not installed (scripts/pgvector.sh install builds it from ../shared/vendor/pgvector)")
    conn.execute("CREATE EXTENSION vector")
    conn.execute("SELECT memory.enable_embeddings(3)")
    seen = []

    def embed(texts):
        seen.extend(texts)
        return [[1.0, float(len(t)), 0.0] for t in texts]

    with psycopg.connect(role_dsn(app, WRITER), autocommit=True) as c:
        store = lg.MemoryStore(c, org="acme", index={"dims": 3, "embed": embed, "fields": ["text", "tags[*]"]})
        store.put(("docs",), "a", {"text": "tea", "tags": ["x", "yz"], "other": "not embedded"})
        store.put(("docs",), "b", {"text": "coffee"}, index=False)
    assert seen == ["tea\nx\nyz"], "one text per item: its index fields' text joined"
    rows = dict(conn.execute("SELECT key, embedding::text FROM memory.observations WHERE namespace = ARRAY['docs']").fetchall())
    assert rows == {"a": "[1,8,0]", "b": None}
    (words,) = conn.execute("SELECT search_tsv::text FROM memory.observations WHERE key = 'a'").fetchone()
    assert "tea" in words and "embed" not in words, "the index fields are the searchable text"


def test_store_search(app):
    """SearchOp is one call of memory.search: items under the prefix, by relevance × weight with a
    query, filtered over the value, else the most recently updated first."""
    with psycopg.connect(role_dsn(app, WRITER), autocommit=True) as c:
        store = lg.MemoryStore(c, org="acme")
        store.put(("docs", "x"), "a", {"text": "green tea and jasmine", "kind": "drink", "n": 1})
        store.put(("docs",), "b", {"text": "black coffee", "kind": "drink", "n": 2})
        store.put(("other",), "c", {"text": "green tea elsewhere", "kind": "drink"})
        hits = store.search(("docs",), query="green tea")
        assert [(h.namespace, h.key) for h in hits] == [(("docs", "x"), "a")] and hits[0].score > 0
        assert [h.key for h in store.search(("docs",), filter={"kind": "drink"})] == ["b", "a"], "newest first without a query"
        assert [h.key for h in store.search(("docs",), filter={"n": {"$gt": 1}})] == ["b"]
        assert [h.key for h in store.search(("docs",), limit=1, offset=1)] == ["a"]
        assert [h.key for h in store.search(())] == ["c", "b", "a"]
        with pytest.raises(memory_ext.BadArgument):
            store.search(("docs",), filter={"n": {"$regex": "x"}})


def test_store_index_without_fields_embeds_the_whole_value(app, conn):
    """IndexConfig without `fields` is LangGraph's ["$"]: the whole value (as LangGraph's stores
    embed it, JSON with sorted keys) is embedded; found by LangGraph's own store tests."""
    if not conn.execute("SELECT EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'vector')").fetchone()[0]:
        pytest.skip("pgvector is not installed (scripts/pgvector.sh install builds it from ../shared/vendor/pgvector)")
    conn.execute("CREATE EXTENSION vector")
    conn.execute("SELECT memory.enable_embeddings(3)")
    seen = []

    def embed(texts):
        seen.extend(texts)
        return [[1.0, float(len(t)), 0.0] for t in texts]

    with psycopg.connect(role_dsn(app, WRITER), autocommit=True) as c:
        store = lg.MemoryStore(c, org="acme", index={"dims": 3, "embed": embed})
        store.put(("docs",), "a", {"text": "tea", "n": 1})
    assert seen == ['{"n": 1, "text": "tea"}']
    assert conn.execute("SELECT embedding IS NOT NULL FROM memory.observations WHERE key = 'a'").fetchone() == (True,)


def test_store_refuses_bad_namespace_labels_before_sending(app, conn):
    """A label with '.', empty or not a string fails its batch with LangGraph's
    InvalidNamespaceError before anything is sent: the good op beside it writes nothing."""
    from langgraph.store.base import InvalidNamespaceError, SearchOp
    with psycopg.connect(role_dsn(app, WRITER), autocommit=True) as c:
        store = lg.MemoryStore(c, org="acme")
        for bad in [("a.b",), ("a", ""), ("a", 1)]:
            for op in (GetOp(bad, "k"), SearchOp(bad), PutOp(bad, "k", None),
                       ListNamespacesOp((MatchCondition("prefix", bad),))):
                with pytest.raises(InvalidNamespaceError):
                    store.batch([PutOp(("ok",), "k", {"a": 1}), op])
    assert conn.execute("SELECT count(*) FROM memory.observations WHERE key IS NOT NULL").fetchone() == (0,)


def test_async_store_batches_concurrent_calls(app):
    """As LangGraph's async stores: calls made together (asyncio.gather) run as one abatch (one
    transaction), each caller given its own result."""
    async def main():
        async with await psycopg.AsyncConnection.connect(role_dsn(app, WRITER), autocommit=True) as c:
            store = lg.AsyncMemoryStore(c, org="acme")
            calls = []
            real = store.abatch

            async def counting(ops):
                calls.append(len(list(ops)) if not isinstance(ops, list) else len(ops))
                return await real(ops)

            store.abatch = counting
            await asyncio.gather(*(store.aput(("b",), f"k{i}", {"i": i}) for i in range(5)))
            got = await asyncio.gather(*(store.aget(("b",), f"k{i}") for i in range(5)))
            assert [g.value for g in got] == [{"i": i} for i in range(5)]
            assert calls == [5, 5]
    asyncio.run(main())


def test_docs_python_example(app, conn):
    """docs/python.md's LangGraph example, run as written (its own process) as the writer role."""
    import os
    import pathlib
    import re
    import subprocess
    import sys
    root = pathlib.Path(__file__).resolve().parents[2]
    text = (root / "docs" / "python.md").read_text()
    start = text.index("## A LangGraph agent whose memories are governed")
    (code,) = re.findall(r"```python\n(.*?)```", text[start:text.index("\n## ", start + 1)], re.S)
    kv = dict(p.split("=", 1) for p in app.split())
    env = dict(os.environ, MEMORY_URL=f"postgresql://{WRITER}@{kv['host']}:{kv['port']}/{kv['dbname']}",
               PYTHONPATH=os.pathsep.join([str(root / "clients" / "python" / "src"), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "dave likes jasmine tea"
    conn.execute("SELECT memory.audit_integrate()")
    events = [e for (e,) in conn.execute("SELECT event_type FROM memory.audit_log WHERE chain_id = 'acme' ORDER BY seq")]
    for e in ("memory.store", "memory.recall", "memory.forget"):
        assert e in events, (e, events)
    assert conn.execute("SELECT count(*) FROM memory.observations WHERE key IS NOT NULL").fetchone() == (0,)


def test_store_batch_of_many_reads(app):
    """A batch of more reads than the database's 256 read-event places (LangGraph's async stores
    gather every concurrent call into one batch) is sent as several transactions and answers all;
    found by LangGraph's test_large_batches_async."""
    with psycopg.connect(role_dsn(app, WRITER), autocommit=True) as c:
        store = lg.MemoryStore(c, org="acme")
        store.put(("many",), "k", {"a": 1})
        got = store.batch([GetOp(("many",), "k") for _ in range(600)])
    assert len(got) == 600 and all(g.value == {"a": 1} for g in got)


def test_store_vector_search_pages_are_slices_of_one_ranking(app, conn):
    """LangGraph's search(prefix, query=..., limit=n, offset=m) is the ranked list's [m:m+n]: offset
    skips the first m results, limit caps the page (InMemoryStore and PostgresStore sort every
    match, then slice). Hybrid search here: its two lists (full-text and vector) are as long for
    every page inside the first 40 results, so paging never repeats or skips an item. The items'
    word order (more "tea" first) is the reverse of their vector order (fewer first), so a vector
    list as long as limit + offset (the bug) ranks each page differently."""
    if not conn.execute("SELECT EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'vector')").fetchone()[0]:
        pytest.skip("pgvector is not installed (scripts/pgvector.sh install builds it from ../shared/vendor/pgvector)")
    from langgraph.store.memory import InMemoryStore
    conn.execute("CREATE EXTENSION vector")
    conn.execute("SELECT memory.enable_embeddings(3)")

    def embed(texts):
        return [[1.0, float(t.split().count("tea")), 0.5] for t in texts]

    index = {"dims": 3, "embed": embed, "fields": ["text"]}
    docs = {f"d{i:02}": {"text": " ".join(["tea"] * (i + 1) + ["cup"] * (12 - i))} for i in range(12)}
    lg_store = InMemoryStore(index=index)
    with psycopg.connect(role_dsn(app, WRITER), autocommit=True) as c:
        store = lg.MemoryStore(c, org="acme", index=index)
        for key, value in docs.items():
            store.put(("shelf",), key, value)
            lg_store.put(("shelf",), key, value)
        for query in ("tea", "coffee"):  # hybrid (every item has the word), vector only (none has it)
            ranked = [h.key for h in store.search(("shelf",), query=query, limit=20)]
            assert sorted(ranked) == sorted(docs), query
            for limit in (1, 2, 3, 5):
                for offset in range(0, 14):
                    page = [h.key for h in store.search(("shelf",), query=query, limit=limit, offset=offset)]
                    assert page == ranked[offset:offset + limit], (query, limit, offset)
            if query == "coffee":
                # No item has the word: the vector alone ranks, as LangGraph's store ranks.
                assert ranked == [h.key for h in lg_store.search(("shelf",), query=query, limit=20)]
                assert [h.key for h in store.search(("shelf",), query=query, limit=3, offset=4)] == \
                       [h.key for h in lg_store.search(("shelf",), query=query, limit=3, offset=4)]
