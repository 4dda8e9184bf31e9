"""Issue 50 benchmark: memory.verify_receipt at ROWS memories (SPEC §18 target: p50 at most 50 ms
at 1M), against memory.audit_head of the same chain in the same run (an admin call that also
integrates first and reads the chain by index: the floor of any check of a chain entry).

Data: ROWS memories of 64 tenants (agent_api_bench's tenants and words, a bulk restore-mode insert), then CALLS
memories forgotten one per call by a tenant-bound memory_writer in deferred audit mode (the
default: each receipt's seq is null, so verify_receipt finds its entry by event_id), integrated.
Each receipt is verified by a tenant-bound memory_admin (psycopg, prepared, autocommit), rounds
alternating the order with the floor; p50 and p99 per round, medians over the rounds.

    python receipt_bench.py DSN [ROWS] [ROUNDS] [CALLS]
"""
import json
import sys
import time

import psycopg

from agent_api_bench import TENANTS, USERS, WORDS, pct, roles
from common import machine, median, write_section


def load(conn, rows):
    """agent_api_bench's memories (a bulk restore-mode insert, as a restore would), without its
    unmanaged copy."""
    t0 = time.perf_counter()
    conn.execute("CREATE TABLE IF NOT EXISTS bench_obs_plain (id uuid)")  # (roles() grants on it)
    conn.execute("SET memory.restore_mode = on")
    words = "ARRAY[" + ",".join(f"'{w}'" for w in WORDS) + "]"
    conn.execute(f"""
        INSERT INTO memory.observations (org_id, user_id, content, classification, created_at)
        SELECT 'org-' || (i % {TENANTS}), 'user-' || (i % {TENANTS}) || '-' || ((i / {TENANTS}) % {USERS}),
               'User ' || (i % 1000) || ' mentioned ' || w[1 + (i * 7) % {len(WORDS)}] || ' and ' || w[1 + (i * 13) % {len(WORDS)}],
               (ARRAY['public', 'internal', 'internal', 'confidential']::memory.classification[])[1 + i % 4], now() - make_interval(secs => i)
          FROM generate_series(1, {rows}) i, (SELECT {words} AS w) v""")
    conn.execute("RESET memory.restore_mode")
    conn.execute("VACUUM ANALYZE memory.observations")
    print(f"load {rows:,} rows: {time.perf_counter() - t0:.0f} s", flush=True)


def main():
    dsn = sys.argv[1]
    rows = int(sys.argv[2]) if len(sys.argv) > 2 else 1_000_000
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    calls = int(sys.argv[4]) if len(sys.argv) > 4 else 200
    base = psycopg.conninfo.conninfo_to_dict(dsn)
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SELECT memory.setup_roles()")
        load(c, rows)
        roles(c)
        if not c.execute("SELECT 1 FROM pg_roles WHERE rolname = 'bench_admin'").fetchone():
            c.execute("CREATE ROLE bench_admin LOGIN")
        c.execute("GRANT memory_admin TO bench_admin")
        for t in range(TENANTS):
            c.execute("SELECT memory.grant_org('bench_admin', %s)", (f"org-{t}",))
        ids = [(r[0], r[1]) for r in c.execute("SELECT id, org_id FROM memory.observations ORDER BY random() LIMIT %s", (calls,))]
    writer = psycopg.connect(**{**base, "user": "bench_writer"}, autocommit=True)
    receipts = []
    for i, org in ids:
        writer.execute("SELECT set_config('memory.org_id', %s, false)", (org,))
        r = writer.execute("SELECT memory.forget(ARRAY[%s]::uuid[], 'bench')", (i,), prepare=True).fetchone()[0]["receipt"]
        assert r is not None and r["seq"] is None
        receipts.append(r)
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SELECT memory.audit_integrate()")
        chain = c.execute("SELECT max(seq) FROM memory.audit_heads").fetchone()[0]
    admin = psycopg.connect(**{**base, "user": "bench_admin"}, autocommit=True)

    def verify(r):
        t = time.perf_counter()
        out = admin.execute("SELECT ok FROM memory.verify_receipt(%s::jsonb)", (json.dumps(r),), prepare=True).fetchall()
        dt = time.perf_counter() - t
        assert len(out) == 5 and all(ok for (ok,) in out), out
        return dt

    def head(r):
        t = time.perf_counter()
        admin.execute("SELECT * FROM memory.audit_head(%s)", (r["org_id"],), prepare=True).fetchall()
        return time.perf_counter() - t

    res = {"audit_head": [], "verify_receipt": []}
    for rnd in range(rounds):
        order = [("verify_receipt", verify), ("audit_head", head)]
        for name, fn in (order if rnd % 2 == 0 else order[::-1]):
            xs = [fn(r) * 1000 for r in receipts]
            res[name].append((pct(xs, 0.5), pct(xs, 0.99)))
    med = {k: {"p50": median([a for a, _ in v]), "p99": median([b for _, b in v])} for k, v in res.items()}
    print(med, flush=True)
    write_section("Erasure receipts: verify_receipt (issue 50)", f"""
Command: `python bench/receipt_bench.py DSN {rows} {rounds} {calls}` against a release build (`scripts/install-ext.sh`).
Machine: {machine()}. Date: {time.strftime('%Y-%m-%d')}.
Data: {rows:,} memories in `memory.observations` ({TENANTS} tenants, a bulk restore-mode insert), {calls} receipts of one-memory
`forget` calls by a tenant-bound `memory_writer` in deferred mode (seq null: the entry is found by event_id), integrated; the
longest chain {chain:,} entries. Each call from one client (psycopg, prepared, autocommit) as a tenant-bound `memory_admin`;
{rounds} rounds alternating the order; medians over the rounds of each round's p50 and p99, in ms.

| one call | p50 ms | p99 ms |
|---|---|---|
| `memory.audit_head(org)` (floor) | {med['audit_head']['p50']:.2f} | {med['audit_head']['p99']:.2f} |
| `memory.verify_receipt(receipt)` | {med['verify_receipt']['p50']:.2f} | {med['verify_receipt']['p99']:.2f} |

- `verify_receipt` p50 **{med['verify_receipt']['p50']:.2f} ms** at {rows:,} memories (target: at most 50 ms at 1M), {med['verify_receipt']['p50'] / med['audit_head']['p50']:.1f}x the floor:
  all five checks (signature, recorded ids, the chain entry found by bisection and recomputed, the head, the scan of
  memory_ext's tables and governed tables), every receipt verified.
""")


if __name__ == "__main__":
    main()
