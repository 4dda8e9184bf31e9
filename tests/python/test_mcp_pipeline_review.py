"""Review of issue 51 (memory-mcp's pipelined tool transactions): a call that fails inside its
pipeline (a bad argument cast by the statement) writes nothing and records nothing, leaves its
pooled connection idle (no transaction open), and the next calls on it record exactly themselves."""
import asyncio

from test_mcp import CALLS, CLIENT, binary, refused, ok, run, session  # noqa: F401  (the fixture)
from test_app_roles import WRITER, app  # noqa: F401  (the fixture)


def test_a_failed_pipelined_call_leaves_no_record_and_no_open_transaction(binary, app, conn):
    async def go():
        async with session(binary, app, WRITER) as s:
            kept = await ok(s, "remember", content="kept note about the pipeline")
            assert (await refused(s, "forget", ids=["not-a-uuid"], reason="r"))["sqlstate"] == "22P02"
            assert (await refused(s, "put", namespace=["a"], key="k", value={"v": 1}, ttl="not an interval"))["sqlstate"] == "22007"
            assert (await refused(s, "remember", content=""))["sqlstate"] is not None
            assert (await refused(s, "supersede", id="00000000-0000-0000-0000-000000000009", content="c", reason="r"))["sqlstate"] == "P0002"
            got = await ok(s, "remember", content="second note after the failures")
            gone = await ok(s, "forget", ids=[kept["id"]], reason="r")
            assert gone["forgotten"] == [kept["id"]]
            states = conn.execute("SELECT state FROM pg_stat_activity WHERE usename = %s AND backend_type = 'client backend'",
                                  (WRITER,)).fetchall()
            assert states and all(st == "idle" for (st,) in states), states
            return kept["id"], got["id"]

    first, second = run(go())
    conn.execute("SELECT memory.audit_integrate()")
    calls = conn.execute(f"SELECT tool, count, event_type, client, payload->>'id' FROM ({CALLS}) c WHERE chain_id = 'acme' ORDER BY seq").fetchall()
    assert [(t, n, e, c) for t, n, e, c, _ in calls] == [
        ("remember", 1, "memory.store", CLIENT), ("remember", 1, "memory.store", CLIENT), ("forget", 1, "memory.mcp.tool_invoked", CLIENT)], calls
    assert [i for *_, i in calls[:2]] == [first, second]
    assert conn.execute("SELECT count(*) FROM memory.observations WHERE namespace = ARRAY['a']").fetchone() == (0,)
