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
