"""Sealing and pruning on a server whose clock moves into the next month (libfaketime): only
finished months can be sealed, and a partition another session prunes is seen at the next append.

The cluster runs under libfaketime with its offset read from a file on every clock call, so the
test appends in this month, moves the server's clock past the month's end, and seals it there.
"""
import datetime as dt
import pathlib

import psycopg
import pytest

from conftest import clock_cluster, fresh_database

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "scripts" / "cluster.sh"
NAME = "pytest-clock"
MONTH_START = "date_trunc('month', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'"


@pytest.fixture(scope="module")
def clock():
    with clock_cluster(NAME) as (port, f):
        yield fresh_database(port, "seal"), f


def server_now(c):
    return c.execute("SELECT now()").fetchone()[0]


def move_into_next_month(f, c):
    """Set the offset so that the server's clock is two days into the next month (UTC)."""
    now = dt.datetime.now(dt.timezone.utc)
    first = (now.replace(day=1, hour=0, minute=0, second=0, microsecond=0) + dt.timedelta(days=32)).replace(day=1)
    f.write_text(f"+{int((first + dt.timedelta(days=2) - now).total_seconds())}\n")
    moved = server_now(c)
    assert moved.astimezone(dt.timezone.utc).month == first.month, moved
    return first


def test_only_finished_months_are_sealed(clock):
    dsn, f = clock
    f.write_text("+0\n")
    with psycopg.connect(dsn, autocommit=True) as a, psycopg.connect(dsn, autocommit=True) as b:
        # Only this month's partition: session a caches a partition list without next month's.
        a.execute("SELECT memory.audit_ensure_partitions(0)")
        for i in range(5):
            a.execute("SELECT memory.audit_append('x.before', jsonb_build_object('i', %s), 'acme')", (i,))
        # The current month still receives entries: sealing it is refused and seals nothing.
        for bad in ("now() + interval '10 years'", "now()", "'infinity'"):
            with pytest.raises(psycopg.errors.InvalidParameterValue):
                b.execute(f"SELECT * FROM memory.audit_seal({bad})")
        assert b.execute("SELECT count(*) FROM memory.audit_seals").fetchone()[0] == 0
        a.execute("SELECT memory.audit_append('x.after_refusal', '{}', 'acme')")
        assert a.execute("SELECT ok, entries FROM memory.audit_verify('acme')").fetchone() == (True, 6)

        # Next month: another session makes the new month's partition, then seals and drops the
        # month that ended; session a, with the old list cached, must append into the new one.
        first = move_into_next_month(f, b)
        assert b.execute("SELECT memory.audit_ensure_partitions(0)").fetchone()[0] == 1
        sealed = b.execute(f"SELECT chain_id, first_seq, last_seq, entries FROM memory.audit_seal({MONTH_START}) WHERE chain_id = 'acme'").fetchall()
        assert sealed == [("acme", 1, 6, 6)]
        root = b.execute("SELECT merkle_root FROM memory.audit_seals WHERE chain_id = 'acme'").fetchone()[0]
        hashes = b.execute("SELECT memory_internal._merkle_root(array_agg(entry_hash ORDER BY seq)) FROM memory.audit_log WHERE chain_id = 'acme'").fetchone()[0]
        assert root == hashes
        assert b.execute("SELECT memory.audit_prune(now())").fetchone()[0] >= 1
        a.execute("SELECT memory.audit_append('x.next_month', '{}', 'acme')")
        a.execute("SELECT memory.audit_integrate()")
        row = a.execute("SELECT tableoid::regclass::text, seq, recorded_at FROM memory.audit_log WHERE event_type = 'x.next_month'").fetchone()
        assert row[0] == "memory.audit_log_" + first.strftime("%Ym%m"), row
        assert row[1] == 7
        assert a.execute("SELECT ok, entries, pruned FROM memory.audit_verify('acme')").fetchone() == (True, 1, 6)
        # Sealing again is a no-op; the pruned month is not made again.
        assert b.execute(f"SELECT count(*) FROM memory.audit_seal({MONTH_START})").fetchone()[0] == 0
        with pytest.raises(psycopg.errors.InvalidParameterValue):
            b.execute("SELECT * FROM memory.audit_seal(now())")
        assert b.execute("SELECT memory.audit_ensure_partitions(0, now() - interval '1 month')").fetchone()[0] == 0
        assert b.execute("SELECT count(*) FROM memory.audit_log WHERE chain_id = 'acme'").fetchone()[0] == 1


def test_the_session_time_zone_and_date_style_do_not_move_entries_between_months(clock):
    """The partitions' bounds are read as text and back: under a session's SQL date style and a
    zone whose abbreviation means another zone when read back (Asia/Shanghai prints CST, read as
    US Central), bounds 14 hours off would put an entry made early on the 1st (UTC) into the
    month before. They are read under ISO and UTC."""
    dsn, f = clock
    now = dt.datetime.now(dt.timezone.utc)
    first = (now.replace(day=1, hour=0, minute=0, second=0, microsecond=0) + dt.timedelta(days=95)).replace(day=1)
    with psycopg.connect(dsn, autocommit=True) as b:
        # The month before `first`, and `first`'s.
        b.execute("SELECT memory.audit_ensure_partitions(1, %s)", (first - dt.timedelta(days=10),))
    f.write_text(f"+{int((first + dt.timedelta(hours=5) - now).total_seconds())}\n")
    try:
        with psycopg.connect(dsn, autocommit=True) as a:
            a.execute("SET TimeZone = 'Asia/Shanghai'")
            a.execute("SET DateStyle = 'SQL, DMY'")
            a.execute("SET memory.audit_mode = immediate")
            a.execute("SELECT memory.audit_append('x.tz_immediate', '{}', 'acme')")
            a.execute("SET memory.audit_mode = deferred")
            a.execute("SELECT memory.audit_append('x.tz_deferred', '{}', 'acme')")
            a.execute("SELECT memory.audit_integrate()")
            rows = a.execute("SELECT event_type, tableoid::regclass::text FROM memory.audit_log "
                             "WHERE event_type LIKE 'x.tz%' ORDER BY seq").fetchall()
            month = "memory.audit_log_" + first.strftime("%Ym%m")
            assert rows == [("x.tz_immediate", month), ("x.tz_deferred", month)]
    finally:
        f.write_text("+0\n")
