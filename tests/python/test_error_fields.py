"""Errors raised inside memory_ext's own SPI calls reach the client with their SQLSTATE and texts,
and never with a Rust backtrace, even though the test clusters run with RUST_BACKTRACE=1
(scripts/cluster.sh) as a developer's server might."""
import psycopg
import pytest


def backtrace_in(diag):
    fields = [diag.message_primary, diag.message_detail, diag.message_hint, diag.context]
    return [f for f in fields if f and ("stack backtrace" in f or "rust_begin_unwind" in f or "\n   0: " in f or "at /rustc/" in f)]


def test_error_under_spi_has_no_backtrace(conn):
    conn.execute("""
        CREATE FUNCTION public.refuse() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN RAISE EXCEPTION 'refused by the application' USING ERRCODE = 'P0001', DETAIL = 'app detail'; END $$""")
    conn.execute("CREATE TRIGGER refuse BEFORE INSERT ON memory.observation_weight_history FOR EACH ROW EXECUTE FUNCTION public.refuse()")
    oid = conn.execute("INSERT INTO memory.observations(org_id, content) VALUES ('acme', 'x') RETURNING id").fetchone()[0]
    with pytest.raises(psycopg.errors.RaiseException) as e:
        conn.execute("SELECT * FROM memory.record_outcome('s1', 'accepted', ARRAY[%s]::uuid[])", (oid,))
    d = e.value.diag
    assert d.message_primary == "refused by the application"
    assert d.message_detail == "app detail"
    assert backtrace_in(d) == []
    # The failed call changed nothing.
    assert conn.execute("SELECT count(*) FROM memory.observation_weight_history").fetchone()[0] == 0

