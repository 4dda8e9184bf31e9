"""Issue 54, change 3 sized before it is built: WAL per audit event, today's two writes against
chaining the entry in place, modelled in plain SQL on scratch tables (no memory_ext code runs).

today     the writer inserts a pending row (memory.audit_pending's shape, one transaction per
          event); the integrator, in one transaction, copies every pending row into a log table
          (memory.audit_log's shape, index on (chain_id, seq)) and deletes the pending rows.
in place  the writer inserts the log row itself: the event's columns first, the chain's last, with
          fixed-width placeholders (seq = -id, prev_hash = 32 zero bytes, entry_hash = the pending
          hash: the pending entry's signed form); the integrator sets seq, recorded_at, prev_hash
          and entry_hash, which PostgreSQL logs as a same-page update (prefix compressed: only the
          changed suffix), and the partial index (seq > 0) gets its entry then.

The payload is a memory.store event's of the single-row benchmark. full_page_writes is off while
measured (restored afterwards); a VACUUM of each table afterwards (the dead versions in place, the
deleted pending rows) is reported per event. The scratch tables are dropped at the end.

Usage: chain_in_place_wal.py PORT N [ROUNDS]
"""
import sys

import psycopg

PAY = ('{"id": "4ca1aa10-1910-44cf-8b6b-651ff5704506", "table": "public.sr_deferred", '
       '"userId": "h:6ff09960e8090052250e05fc05d8df61e10fc8af9eb2d1d9999ac793025507dc", "classification": "internal", '
       '"content_sha256": "53c6ebb916f7cff1c2a9d2579a8a1f1aa67ccc922aa3974e14d806bec273cab9"}')
HASH, ZERO, CHAINED = "\\x" + "ab" * 32, "\\x" + "00" * 32, "\\x" + "cd" * 32

SETUP = """
DROP TABLE IF EXISTS pr_pending, pr_log, pr_inplace;
CREATE TABLE pr_pending (LIKE memory.audit_pending);
CREATE TABLE pr_log (LIKE memory.audit_log);
CREATE INDEX ON pr_log (chain_id COLLATE "C", seq);
CREATE TABLE pr_inplace (id bigint, ord bigint, chain_id text, event_type text, written_at timestamptz, actor_id text,
  org_id text, project_id text, workspace_id text, payload jsonb, key_id int,
  seq bigint, recorded_at timestamptz, prev_hash bytea, entry_hash bytea) WITH (fillfactor = 50);
CREATE INDEX ON pr_inplace (chain_id COLLATE "C", seq) WHERE seq > 0;
"""


def main():
    port, n = int(sys.argv[1]), int(sys.argv[2])
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    c = psycopg.connect(f"host=127.0.0.1 port={port} user=postgres dbname=postgres", autocommit=True)

    def lsn():
        return c.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0]

    def per_event(a, b, events=n):
        return int(c.execute("SELECT pg_wal_lsn_diff(%s, %s)", (b, a)).fetchone()[0]) / events

    c.execute(SETUP)
    c.execute("ALTER SYSTEM SET full_page_writes = off")
    c.execute("SELECT pg_reload_conf()")
    try:
        for r in range(rounds):
            res = {}
            a = lsn()
            for i in range(n):
                c.execute("INSERT INTO pr_pending VALUES (%s, %s, %s, 'memory.store', now(), 'role:postgres', %s, NULL, NULL, %s, 1, %s)",
                          (i + 1, i + 1, f"org-{i % 64}", f"org-{i % 64}", PAY, HASH))
            b = lsn()
            with c.transaction():
                c.execute("""INSERT INTO pr_log SELECT chain_id, row_number() OVER (PARTITION BY chain_id ORDER BY ord)
                                    + coalesce((SELECT max(seq) FROM pr_log l WHERE l.chain_id = p.chain_id), 0),
                                    event_type, now(), actor_id, org_id, project_id, workspace_id, payload, key_id, %s, %s
                               FROM pr_pending p""", (ZERO, CHAINED))
                c.execute("DELETE FROM pr_pending")
            res["today"] = (per_event(a, b), per_event(b, lsn()))
            a = lsn()
            for i in range(n):
                c.execute("INSERT INTO pr_inplace VALUES (%s, %s, %s, 'memory.store', now(), 'role:postgres', %s, NULL, NULL, %s, 1, %s, now(), %s, %s)",
                          (i + 1, i + 1, f"org-{i % 64}", f"org-{i % 64}", PAY, -(i + 1), ZERO, HASH))
            b = lsn()
            with c.transaction():
                c.execute("""UPDATE pr_inplace p SET seq = s.seq, recorded_at = now(), prev_hash = %s, entry_hash = %s
                               FROM (SELECT ctid AS t, row_number() OVER (PARTITION BY chain_id ORDER BY ord) + 1000000 * %s AS seq
                                       FROM pr_inplace WHERE seq < 0) s
                              WHERE p.ctid = s.t""", (ZERO, CHAINED, r + 1))
            res["in place"] = (per_event(a, b), per_event(b, lsn()))
            for k, (w, i) in res.items():
                print(f"round {r + 1} {k:9s}: writer {w:4.0f} B/event (with its commit), integrator {i:4.0f} B/event, total {w + i:5.0f}", flush=True)
        for t in ("pr_inplace", "pr_pending"):
            a = lsn()
            c.execute(f"VACUUM {t}")
            print(f"VACUUM {t} afterwards: {per_event(a, lsn(), rounds * n):.0f} B/event", flush=True)
    finally:
        c.execute("ALTER SYSTEM RESET full_page_writes")
        c.execute("SELECT pg_reload_conf()")
        c.execute("DROP TABLE IF EXISTS pr_pending, pr_log, pr_inplace")


if __name__ == "__main__":
    main()
