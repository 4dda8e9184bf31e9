"""run_retention over many rows writes bounded events: at most 1,000 ids each, every row named once,
and runs twice in one transaction without complaint (SPEC §7: no 4 MB event, no stray notices)."""
import psycopg


def test_large_purge_is_split_into_bounded_events(conn):
    conn.execute("INSERT INTO memory.observations (org_id, content, created_at) "
                 "SELECT 'acme', 'note ' || g, now() - interval '3 years' FROM generate_series(1, 2500) g")
    notices = []
    conn.add_notice_handler(lambda d: notices.append(d.message_primary))
    conn.execute("SET client_min_messages = notice")
    with conn.transaction():
        first = conn.execute("SELECT memory.run_retention(false, now())").fetchone()[0]
        again = conn.execute("SELECT memory.run_retention(false, now() + interval '10 years')").fetchone()[0]
    assert first["soft_deleted"] == 2500 and again["hard_deleted"] == 2500, (first, again)
    assert not [n for n in notices if "already exists" in n], notices
    conn.execute("SELECT memory.audit_integrate()")
    events = conn.execute("SELECT jsonb_array_length(payload->'observationIds') FROM memory.audit_log "
                          "WHERE event_type = 'memory.purge' ORDER BY seq").fetchall()
    assert [n for (n,) in events] == [1000, 1000, 500]
    named = conn.execute("SELECT count(DISTINCT i) FROM memory.audit_log, jsonb_array_elements_text(payload->'observationIds') i "
                         "WHERE event_type = 'memory.purge'").fetchone()[0]
    assert named == 2500
    assert conn.execute("SELECT count(*) FROM memory.observations").fetchone() == (0,)


def test_archived_row_follows_its_schedule_once_its_hold_is_released(dsn, conn):
    """Issue 46, as the application lives it: a writer bound to bank writes a customer's note, an
    admin bound to bank holds the customer and later releases the hold; maintenance (the owner,
    here the superuser) runs retention. Held and expired, the note moves to the archive and is kept;
    after the release the next run soft-deletes it there, and a run after its grace purges it."""
    from conftest import connect, ensure_role
    conn.execute("SELECT memory.setup_roles()")
    for role, group in [("ret_writer", "memory_writer"), ("ret_admin", "memory_admin"), ("ret_reader", "memory_reader")]:
        ensure_role(conn, role, group)
        conn.execute("SELECT memory.grant_org(%s, 'bank')", (role,))
    with connect(dsn, "ret_writer") as w:
        (obs,) = w.execute("INSERT INTO memory.observations (org_id, user_id, content, memory_type, created_at) "
                           "VALUES ('bank', 'cust1', 'customer asked about fees', 'long_term', now() - interval '400 days') "
                           "RETURNING id").fetchone()
    with connect(dsn, "ret_admin") as a:
        (hold,) = a.execute("INSERT INTO memory.legal_holds (org_id, user_id, reason) VALUES ('bank', 'cust1', 'litigation') "
                            "RETURNING id").fetchone()

    def run(offset):
        return conn.execute("SELECT memory.run_retention(false, now() + %s::interval)", (offset,)).fetchone()[0]

    def archived():
        with connect(dsn, "ret_reader") as r:
            return r.execute("SELECT soft_deleted_at IS NOT NULL FROM memory.observations_archive WHERE id = %s", (obs,)).fetchall()

    first = run("0 days")
    assert first["denied"] == 1 and first["archived"] == 1, first
    assert archived() == [(False,)], "held and expired: archived, not soft-deleted"
    held = run("1 day")
    assert held["archive"] == {"soft_deleted": 0, "hard_deleted": 0, "denied": 1}, held
    with connect(dsn, "ret_admin") as a:
        a.execute("UPDATE memory.legal_holds SET released_at = now() WHERE id = %s", (hold,))
    released = run("2 days")
    assert released["archive"] == {"soft_deleted": 1, "hard_deleted": 0, "denied": 0}, released
    assert released["soft_deleted"] == 1, released
    assert archived() == [(True,)]
    early = run("20 days")
    assert early["archive"]["hard_deleted"] == 0 and archived() == [(True,)], "not before a full grace after the soft delete"
    late = run("33 days")
    assert late["archive"]["hard_deleted"] == 1 and late["hard_deleted"] == 1, late
    assert archived() == []
    conn.execute("SELECT memory.audit_integrate()")
    assert conn.execute("SELECT count(*) FROM memory.audit_log WHERE event_type = 'memory.purge' "
                        "AND payload->>'table' = 'memory.observations_archive' AND payload->'observationIds' ? %s",
                        (str(obs),)).fetchone() == (1,)
    assert conn.execute("SELECT (memory.audit_verify('bank')).ok").fetchone() == (True,)
