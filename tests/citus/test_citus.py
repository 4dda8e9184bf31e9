"""Scale-out on a real Citus cluster (SPEC §10): coordinator + 2 workers on local ports
(scripts/citus.sh), memory_ext distributed by memory.distribute(), an application table governed
and distributed by org. Everything is driven through the coordinator, as an application would;
the workers are connected to directly only to look at where rows landed and to tamper.
"""
import json
import os
import pathlib
import subprocess
import time

import psycopg
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
CITUS = ROOT / "scripts" / "citus.sh"
NAME = os.environ.get("MEMORY_EXT_CITUS_CLUSTER", "citustest")
ORGS = [f"org_{i}" for i in range(8)]


def dsn(port):
    return f"host=127.0.0.1 port={port} user=postgres dbname=postgres"


@pytest.fixture(scope="module")
def cluster():
    ports = subprocess.check_output([str(CITUS), "start", NAME], text=True).split()
    coord, w1, w2 = (int(p) for p in ports)
    with psycopg.connect(dsn(coord), autocommit=True) as c:
        c.execute("CREATE EXTENSION memory_ext")
        c.execute("""CREATE TABLE notes (id bigserial, org_id text NOT NULL, user_id text, content text,
                                         classification memory.classification, created_at timestamptz DEFAULT now(),
                                         expires_at timestamptz, purge_after timestamptz, archive_at timestamptz,
                                         soft_deleted_at timestamptz, soft_delete_reason text, PRIMARY KEY (org_id, id))""")
        c.execute("""SELECT memory.govern('notes', '{"content": "content", "target": "classification", "org": "org_id",
                                                     "user": "user_id", "audit": true, "stamps": true}')""")
        # Rows written before distribution: copied into the shards, and not left behind.
        c.execute("INSERT INTO notes (org_id, user_id, content) VALUES ('org_pre', 'pre_user', 'written before'), ('org_pre', 'pre_user', 'also')")
        # A consent store with history: a thread context whose consent was revoked since (blocked),
        # and feedback that was a drift finding. Copied as in a restore: no rule refuses the
        # blocked context, nothing is detected or audited again.
        c.execute("SELECT memory.grant_consent('org_prec', 'pre_user', ARRAY['save_to_thread', 'save_to_profile']::memory.consent_scope[])")
        c.execute("INSERT INTO memory.user_contexts (org_id, user_id, scope, thread_id, source, fields)"
                  " VALUES ('org_prec', 'pre_user', 'thread', 'th', 'save_as_thread', '{\"research_style\": \"top-down\"}')")
        c.execute("INSERT INTO memory.user_feedback (org_id, user_id, related_object_ref, rating, created_at)"
                  " VALUES ('org_prec', 'pre_user', 'snap', 'thumbs_up', now() - interval '1 day')")
        c.execute("INSERT INTO memory.user_feedback (org_id, user_id, related_object_ref, rating) VALUES ('org_prec', 'pre_user', 'snap', 'not_helpful')")
        c.execute("SELECT memory.revoke_consent('org_prec', 'pre_user', ARRAY['save_to_thread']::memory.consent_scope[])")
        before = c.execute("SELECT count(*) FROM memory.audit_pending WHERE chain_id = 'org_prec'").fetchone()[0]
        done = c.execute("SELECT memory.distribute(8)").fetchone()[0]
        assert done["governed"] == ["public.notes"]
        assert set(done["audit"]) == {"memory.audit_pending", "memory.audit_heads", "memory.audit_log", "memory.audit_seals"}
        assert "memory.audit_keys" in done["reference"] and "memory.org_grants" in done["reference"]
        assert done["stores"] == ["memory.observations", "memory.observations_archive", "memory.observation_weight_history",
                                  "memory.entities", "memory.claims", "memory.relationships", "memory.recheck_tasks",
                                  "memory.consents", "memory.user_contexts", "memory.threads", "memory.training_candidates",
                                  "memory.persona_drift_log", "memory.user_feedback", "memory.thread_refreshes",
                                  "memory.watch_question_updates", "memory.deletion_stubs", "memory.revisions"], done
        why = {k["table"]: k["why"] for k in done["kept_local"]}
        assert set(why) == {"memory.governance_registry", "memory.maintenance_runs", "memory.ann_settings", "memory.erasure_receipts",
                            "memory.table_revisions"}, why
        assert "oid" in why["memory.governance_registry"], why
        assert c.execute("SELECT consent_blocked FROM memory.user_contexts WHERE org_id = 'org_prec'").fetchall() == [(True,)]
        assert c.execute("SELECT count(*) FROM memory.persona_drift_log WHERE org_id = 'org_prec'").fetchone()[0] == 1
        assert c.execute("SELECT count(*) FROM memory.audit_pending WHERE chain_id = 'org_prec'").fetchone()[0] == before
    yield {"coord": coord, "workers": {w1, w2}}
    subprocess.run([str(CITUS), "stop", NAME], check=False)


@pytest.fixture
def coord(cluster):
    with psycopg.connect(dsn(cluster["coord"]), autocommit=True) as c:
        yield c


def node_of(c, table, org):
    """The port of the worker holding `org`'s shard of `table`, and the shard's name."""
    return c.execute(
        """SELECT p.nodeport, shard_name(%s::regclass, s)::text
             FROM get_shard_id_for_distribution_column(%s::regclass, %s::text) s
             JOIN pg_dist_shard_placement p ON p.shardid = s""",
        (table, table, org),
    ).fetchone()


def insert(c, org, n, secret_every=3):
    c.execute(
        """INSERT INTO notes (org_id, content)
           SELECT %s, 'note ' || i || CASE WHEN i %% %s = 0 THEN ' ssn 123-45-6789' ELSE '' END
             FROM generate_series(1, %s) i""",
        (org, secret_every, n),
    )


def verify(c, org=None):
    rows = c.execute("SELECT chain_id, entries, ok, first_bad_seq, reason, pending FROM memory.audit_verify(%s)", (org,)).fetchall()
    return {r[0]: r[1:] for r in rows}


def test_the_demo_walkthrough_runs_through_the_coordinator(cluster, coord):
    """`make demo`'s narrated walkthrough, unchanged, against the Citus coordinator after
    memory.distribute(): every step runs (psql stops at the first unexpected error), and every
    chain it wrote verifies from the coordinator. Its tamper step sets session_replication_role
    with SET LOCAL, which reaches the worker with citus.propagate_set_commands = local.
    Citus reaches the workers by logging in as the current role, so the walkthrough's agent
    role is made a LOGIN role first (the walkthrough keeps a role that exists)."""
    coord.execute("DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'demo_agent') THEN CREATE ROLE demo_agent LOGIN; END IF; END $$")
    env = dict(os.environ, PGOPTIONS="-c citus.propagate_set_commands=local")
    out = subprocess.run(["psql", "-X", "-h", "127.0.0.1", "-p", str(cluster["coord"]), "-U", "postgres", "-d", "postgres",
                          "-v", "ON_ERROR_STOP=1", "-P", "pager=off", "-f", str(ROOT / "demo" / "walkthrough.sql")],
                         env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    v = verify(coord)
    assert "acme" in v, sorted(v)
    assert all(r[1] for r in v.values()), v
    # The demo tenant's chain is on a worker.
    assert node_of(coord, "memory.audit_log", "acme")[0] in cluster["workers"]


def test_distribute_leaves_no_copy_of_the_rows_on_the_coordinator(coord):
    assert coord.execute("SELECT count(*) FROM notes WHERE org_id = 'org_pre'").fetchone()[0] == 2
    # The coordinator's own tables (Citus's shells) hold nothing on disk any more: an erased
    # subject's rows cannot linger there.
    for t in ("notes", "memory.audit_pending", "memory.audit_keys", "memory.org_grants"):
        assert coord.execute("SELECT pg_relation_size(%s::regclass)", (t,)).fetchone()[0] == 0, t
    assert verify(coord, "org_pre")["org_pre"][:2] == (2, True)


def test_tenants_spread_over_both_workers_and_events_land_beside_their_rows(cluster, coord):
    for i, org in enumerate(ORGS):
        insert(coord, org, 10 + i)
    nodes = {node_of(coord, "notes", org)[0] for org in ORGS}
    assert nodes == cluster["workers"], "the 8 tenants' shards are on both workers"
    # Classification ran on the shards.
    tiers = dict(coord.execute("SELECT org_id, count(*) FILTER (WHERE classification = 'restricted') FROM notes GROUP BY 1").fetchall())
    assert tiers["org_0"] == 3 and tiers["org_7"] == 5
    # Each tenant's events are pending in the co-located shard of memory.audit_pending, on the
    # worker that holds its rows, and nowhere else.
    for i, org in enumerate(ORGS):
        port, _ = node_of(coord, "notes", org)
        pport, pshard = node_of(coord, "memory.audit_pending", org)
        assert pport == port
        with psycopg.connect(dsn(port), autocommit=True) as w:
            n = w.execute(f"SELECT count(*) FROM {pshard} WHERE chain_id = %s", (org,)).fetchone()[0]
        assert n == 10 + i
    # The coordinator's own copy of the table holds none.
    assert coord.execute("SELECT count(*) FROM ONLY memory.audit_outbox").fetchone()[0] == 0


def test_coordinator_integrates_and_verifies_every_chain(coord):
    coord.execute("SELECT memory.audit_integrate()")
    v = verify(coord)
    for i, org in enumerate(ORGS):
        entries, ok, bad, reason, pending = v[org]
        assert (entries, ok, bad, reason, pending) == (10 + i, True, None, None, 0), org
    assert all(r[1] for r in v.values()), v
    # Gapless seq per chain, in the distributed log.
    for org, n, lo, hi in coord.execute("SELECT chain_id, count(*), min(seq), max(seq) FROM memory.audit_log WHERE chain_id LIKE 'org_%' GROUP BY 1").fetchall():
        assert (lo, hi) == (1, n), org
    assert coord.execute("SELECT count(*) FROM memory.audit_pending").fetchone()[0] == 0
    head = coord.execute("SELECT seq, length(entry_hash), length(merkle_root) FROM memory.audit_head('org_3')").fetchone()
    assert head == (13, 32, 32)


def test_single_row_transactions_in_both_modes(cluster, coord):
    org = "org_single"
    with psycopg.connect(dsn(cluster["coord"])) as a, psycopg.connect(dsn(cluster["coord"])) as b:
        for i in range(5):
            a.execute("INSERT INTO notes (org_id, content) VALUES (%s, %s)", (org, f"deferred {i}"))
            a.commit()
        # Immediate mode on the worker that holds the chain: chained in the writing transaction.
        # The trigger runs on the worker, so the setting must reach it: Citus forwards SET LOCAL
        # with citus.propagate_set_commands = local (a session SET stays on the coordinator).
        b.execute("SET citus.propagate_set_commands = 'local'")
        for i in range(5):
            b.execute("SET LOCAL memory.audit_mode = immediate")
            b.execute("INSERT INTO notes (org_id, content) VALUES (%s, %s)", (org, f"immediate {i}"))
            b.commit()
        # A rolled-back write leaves nothing.
        a.execute("INSERT INTO notes (org_id, content) VALUES (%s, 'rolled back')", (org,))
        a.rollback()
    # The deferred ones are pending until integrated; the immediate ones are chained already.
    chained = coord.execute("SELECT count(*) FROM memory.audit_log WHERE chain_id = %s", (org,)).fetchone()[0]
    pending = coord.execute("SELECT count(*) FROM memory.audit_pending WHERE chain_id = %s", (org,)).fetchone()[0]
    assert (chained, pending) == (5, 5)
    coord.execute("SELECT memory.audit_integrate()")
    assert verify(coord, org)[org][:2] == (10, True)


def test_coordinator_appends_go_to_the_chains_shard(coord):
    # memory.audit_append runs on the coordinator, which holds no shards: the event goes through
    # the outbox into the chain's pending shard, in the same transaction.
    with coord.transaction():
        coord.execute("SELECT memory.audit_append('app.checkout', '{\"step\": 1}', 'org_1', NULL, 'ws_1')")
    assert coord.execute("SELECT count(*) FROM memory.audit_pending WHERE chain_id = 'org_1'").fetchone()[0] == 1
    assert coord.execute("SELECT count(*) FROM memory.audit_outbox").fetchone()[0] == 0
    # A rolled-back append leaves nothing anywhere.
    with pytest.raises(psycopg.errors.RaiseException):
        with coord.transaction():
            coord.execute("SELECT memory.audit_append('app.checkout', '{\"step\": 2}', 'org_1', NULL, 'ws_1')")
            coord.execute("DO $$ BEGIN RAISE EXCEPTION 'abort'; END $$")
    events = coord.execute("SELECT event_type, payload FROM memory.audit_events('ws_1')").fetchall()
    assert events == [("app.checkout", {"step": 1})]
    assert verify(coord, "org_1")["org_1"][:2] == (12, True)


def tamper(coord, org, sql):
    """Runs `sql` (with {log} for the org's log shard) on the worker that holds the org's log, as
    an attacker with the worker's superuser would, past the append-only guard."""
    port, log = node_of(coord, "memory.audit_log", org)
    with psycopg.connect(dsn(port), autocommit=True) as w:
        w.execute("SET session_replication_role = replica")
        w.execute(sql.format(log=log), (org,))


@pytest.mark.parametrize(
    "org, sql, reason",
    [
        ("org_t1", "UPDATE {log} SET payload = payload || '{{\"x\": 1}}' WHERE chain_id = %s AND seq = 2", "hash mismatch"),
        ("org_t2", "DELETE FROM {log} WHERE chain_id = %s AND seq = 2", "gap"),
        ("org_t3", "DELETE FROM {log} WHERE chain_id = %s AND seq = 4", "tail"),
        ("org_t4", "UPDATE {log} SET key_id = 999 WHERE chain_id = %s AND seq = 3", "key"),
        ("org_t5", "UPDATE {log} SET seq = CASE seq WHEN 2 THEN 3 ELSE 2 END WHERE chain_id = %s AND seq IN (2, 3)", ""),
    ],
)
def test_tampering_on_a_workers_shard_is_detected_from_the_coordinator(coord, org, sql, reason):
    insert(coord, org, 4)
    coord.execute("SELECT memory.audit_integrate()")
    assert verify(coord, org)[org][:2] == (4, True)
    tamper(coord, org, sql)
    entries, ok, bad, why, _ = verify(coord, org)[org]
    assert not ok and bad is not None, (org, why)
    assert reason in why.lower(), why
    # Every other chain still verifies.
    others = {k: v for k, v in verify(coord).items() if not k.startswith("org_t")}
    assert all(v[1] for v in others.values()), others


def test_tampered_pending_entry_on_a_worker_is_reported(coord):
    org = "org_tp"
    insert(coord, org, 3)
    port, shard = node_of(coord, "memory.audit_pending", org)
    with psycopg.connect(dsn(port), autocommit=True) as w:
        w.execute("SET session_replication_role = replica")
        w.execute(f"UPDATE {shard} SET payload = payload || '{{\"forged\": true}}' WHERE chain_id = %s AND ord = (SELECT min(ord) FROM {shard} WHERE chain_id = %s)", (org, org))
    coord.execute("SELECT memory.audit_integrate()")
    entries, ok, bad, why, pending = verify(coord, org)[org]
    assert (entries, ok, pending) == (2, False, 1) and "pending hash mismatch" in why


def test_moving_a_tenants_shard_group_keeps_its_chain(cluster, coord):
    org = "org_move"
    insert(coord, org, 6)
    coord.execute("SELECT memory.audit_integrate()")
    insert(coord, org, 4)  # left pending across the move
    src, _ = node_of(coord, "notes", org)
    (dst,) = cluster["workers"] - {src}
    shard = coord.execute("SELECT get_shard_id_for_distribution_column('notes', %s::text)", (org,)).fetchone()[0]
    coord.execute(
        "SELECT citus_move_shard_placement(%s, '127.0.0.1', %s, '127.0.0.1', %s, shard_transfer_mode := 'block_writes')",
        (shard, src, dst),
    )
    # The whole group moved: the tenant's rows, its pending entries, head and log.
    for t in ("notes", "memory.audit_pending", "memory.audit_heads", "memory.audit_log"):
        assert node_of(coord, t, org)[0] == dst, t
    insert(coord, org, 5)
    coord.execute("SELECT memory.audit_integrate()")
    assert verify(coord, org)[org][:3] == (15, True, None)
    seqs = [r[0] for r in coord.execute("SELECT seq FROM memory.audit_log WHERE chain_id = %s ORDER BY seq", (org,)).fetchall()]
    assert seqs == list(range(1, 16))


def test_isolating_a_tenant_keeps_its_chain(coord):
    org = "org_big"
    insert(coord, org, 7)
    coord.execute("SELECT memory.audit_integrate()")
    insert(coord, org, 2)
    before = coord.execute("SELECT get_shard_id_for_distribution_column('notes', %s::text)", (org,)).fetchone()[0]
    coord.execute("SELECT isolate_tenant_to_new_shard('notes', %s::text, 'CASCADE', shard_transfer_mode := 'block_writes')", (org,))
    after = coord.execute("SELECT get_shard_id_for_distribution_column('notes', %s::text)", (org,)).fetchone()[0]
    assert after != before
    # Its audit shards were split with it and hold only its chain.
    _, log = node_of(coord, "memory.audit_pending", org)
    insert(coord, org, 3)
    coord.execute("SELECT memory.audit_integrate()")
    assert verify(coord, org)[org][:3] == (12, True, None)
    # Neighbours that shared the old shard still verify.
    assert all(v[1] for k, v in verify(coord).items() if not k.startswith("org_t")), verify(coord)


def test_a_tenant_role_writes_through_the_coordinator(cluster, coord):
    coord.execute("DROP ROLE IF EXISTS agent_citus")
    coord.execute("CREATE ROLE agent_citus LOGIN")
    coord.execute("SELECT memory.setup_roles()")
    coord.execute("GRANT memory_writer TO agent_citus")
    coord.execute("GRANT INSERT, SELECT ON notes TO agent_citus")
    coord.execute("GRANT USAGE ON SEQUENCE notes_id_seq TO agent_citus")
    coord.execute("SELECT memory.grant_org('agent_citus', 'org_agent')")
    with psycopg.connect(f"host=127.0.0.1 port={cluster['coord']} user=agent_citus dbname=postgres", autocommit=True) as a:
        a.execute("INSERT INTO notes (org_id, content) VALUES ('org_agent', 'mine')")
        # Another tenant's chain is refused on the worker, in the writing statement.
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            a.execute("INSERT INTO notes (org_id, content) VALUES ('org_0', 'not mine')")
    coord.execute("SELECT memory.audit_integrate()")
    # memory.org.grant (written by the coordinator) and the one memory.store of the agent's row.
    assert verify(coord, "org_agent")["org_agent"][:2] == (2, True)
    actor = coord.execute("SELECT actor_id FROM memory.audit_log WHERE chain_id = 'org_agent' AND event_type = 'memory.store'").fetchone()[0]
    assert actor.endswith("role:agent_citus")


def test_audit_verify_counts_every_chain_once(coord):
    v = coord.execute("SELECT chain_id, count(*) FROM memory.audit_verify() GROUP BY 1 HAVING count(*) > 1").fetchall()
    assert v == []
    chains = {r[0] for r in coord.execute("SELECT DISTINCT chain_id FROM memory.audit_log").fetchall()}
    assert chains <= set(verify(coord))


def events(c, org, event_type):
    c.execute("SELECT memory.audit_integrate()")
    return c.execute("SELECT count(*) FROM memory.audit_log WHERE chain_id = %s AND event_type = %s", (org, event_type)).fetchone()[0]


def test_org_rules_changed_on_the_coordinator_reach_the_workers_at_once(coord):
    org = "org_rules"
    insert(coord, org, 1)  # the workers' connections now have the org's (empty) rules cached
    coord.execute("INSERT INTO memory.classification_rules (org_id, tier, target, pattern) VALUES (%s, 'confidential', 'content', 'project falcon')", (org,))
    coord.execute("INSERT INTO notes (org_id, content) VALUES (%s, 'about project falcon')", (org,))
    tier = coord.execute("SELECT classification FROM notes WHERE org_id = %s AND content = 'about project falcon'", (org,)).fetchone()[0]
    assert tier == "confidential"


def test_reference_table_changes_are_audited_once(coord):
    before = events(coord, "", "memory.route_slices.change")
    slice, mode = coord.execute("SELECT slice, mode FROM memory.route_slices WHERE route = 'snapshot' ORDER BY slice LIMIT 1").fetchone()
    other = "optional" if mode != "optional" else "required"
    coord.execute("UPDATE memory.route_slices SET mode = %s WHERE route = 'snapshot' AND slice = %s", (other, slice))
    coord.execute("UPDATE memory.route_slices SET mode = %s WHERE route = 'snapshot' AND slice = %s", (mode, slice))
    assert events(coord, "", "memory.route_slices.change") == before + 2


def test_retention_sweeps_distributed_tables_from_the_coordinator(coord):
    org = "org_ret"
    insert(coord, org, 6)
    coord.execute("INSERT INTO memory.legal_holds (org_id, user_id, reason) VALUES (%s, 'held_user', 'litigation')", (org,))
    coord.execute("INSERT INTO notes (org_id, user_id, content) VALUES (%s, 'held_user', 'keep me')", (org,))
    soft = coord.execute("SELECT memory.run_retention(false, now() + interval '2 years')").fetchone()[0]
    assert soft["tables"]["public.notes"]["soft_deleted"] >= 6
    assert soft["tables"]["public.notes"]["denied"] >= 1
    hard = coord.execute("SELECT memory.run_retention(false, now() + interval '3 years')").fetchone()[0]
    assert hard["tables"]["public.notes"]["hard_deleted"] >= 6
    left = coord.execute("SELECT user_id FROM notes WHERE org_id = %s", (org,)).fetchall()
    assert left == [("held_user",)], "only the held subject's row is kept"
    assert events(coord, org, "memory.purge") >= 1 and events(coord, org, "memory.purge.denied") >= 1
    assert verify(coord, org)[org][1]


def test_erasure_export_and_recall_from_the_coordinator(coord):
    for org in ("org_e1", "org_e2"):
        coord.execute("INSERT INTO notes (org_id, user_id, content) VALUES (%s, 'subject_x', 'x wrote this'), (%s, 'subject_y', 'y')", (org, org))
    coord.execute("INSERT INTO memory.observations (org_id, user_id, content) VALUES ('org_e1', 'subject_x', 'x said this')")
    exported = coord.execute("SELECT memory.export_subject('subject_x')").fetchone()[0]
    assert "x said this" in str(exported), exported["sections"]["observations"]
    # The distributed application table's rows too (read per org: no function on the shards).
    rows = exported["sections"]["tables"]["public.notes"]
    assert isinstance(rows, list) and sorted(r["org_id"] for r in rows) == ["org_e1", "org_e2"], rows
    erased = coord.execute("SELECT memory.erase_subject('subject_x')").fetchone()[0]
    assert erased["tables"]["public.notes"] == 2 and erased["observations"] == 1 and "failed_tables" not in erased, erased
    assert coord.execute("SELECT count(*) FROM notes WHERE user_id = 'subject_x'").fetchone()[0] == 0
    assert coord.execute("SELECT count(*) FROM notes WHERE user_id = 'subject_y'").fetchone()[0] == 2
    # The observation store is distributed too; recall audits on the org's chain.
    coord.execute("INSERT INTO memory.observations (org_id, content) VALUES ('org_e1', 'the user likes green tea')")
    assert coord.execute("SELECT count(*) FROM memory.recall('org_e1', 'tea')").fetchone()[0] == 1
    assert events(coord, "org_e1", "memory.recall") == 1
    assert all(v[1] for k, v in verify(coord).items() if not k.startswith("org_t")), verify(coord)


def test_consent_from_the_coordinator(coord):
    org = "org_consent"
    v = coord.execute("SELECT memory.grant_consent(%s, 'u_c', ARRAY['save_to_profile', 'save_to_thread']::memory.consent_scope[],"
                      " '{\"language_preference\": \"German\"}')", (org,)).fetchone()[0]
    assert v == 1
    slices = coord.execute("SELECT memory.load_slices(%s, 'u_c', 'snapshot')", (org,)).fetchone()[0]
    assert slices["cold_start"] is False and "German" in slices["rendered"]
    revoked = coord.execute("SELECT memory.revoke_consent(%s, 'u_c')", (org,)).fetchone()[0]
    assert revoked["profile_contexts_deleted"] == 1, revoked
    # A receipt never chains (a reader must not hold the integration lock): chained first.
    coord.execute("SELECT memory.audit_integrate()")
    receipt = coord.execute("SELECT memory.consent_receipt(%s, 'u_c', 1)", (org,)).fetchone()[0]
    seq, entry = coord.execute("SELECT seq, encode(entry_hash, 'hex') FROM memory.audit_log WHERE chain_id = %s AND event_type = 'memory.consent.grant'",
                               (org,)).fetchone()
    assert (receipt["audit"]["chain_id"], receipt["audit"]["seq"], receipt["audit"]["entry_hash"]) == (org, seq, entry)
    assert verify(coord, org)[org][1]


def test_govern_after_distribute_and_truncate(coord):
    coord.execute("CREATE TABLE later (id bigserial, org_id text NOT NULL, body text, tier memory.classification, PRIMARY KEY (org_id, id))")
    coord.execute("""SELECT memory.govern('later', '{"content": "body", "target": "tier", "org": "org_id", "audit": true}')""")
    done = coord.execute("SELECT memory.distribute()").fetchone()[0]
    assert "public.later" in done["governed"]
    colocated = coord.execute("SELECT a.colocationid = b.colocationid FROM pg_dist_partition a, pg_dist_partition b"
                              " WHERE a.logicalrelid = 'later'::regclass AND b.logicalrelid = 'memory.audit_pending'::regclass").fetchone()[0]
    assert colocated
    coord.execute("INSERT INTO later (org_id, body) VALUES ('org_later', 'card 4111 1111 1111 1111')")
    assert coord.execute("SELECT tier FROM later").fetchone()[0] == "restricted"
    assert events(coord, "org_later", "memory.store") == 1
    before = events(coord, "", "memory.govern.truncate")
    coord.execute("TRUNCATE later")
    # Recorded once, by the table itself on the coordinator (its shards' firings record nothing).
    assert events(coord, "", "memory.govern.truncate") == before + 1
    assert verify(coord, "")[""][1]


def test_org_grants_changed_on_the_coordinator_bind_at_once_on_the_workers(cluster, coord):
    coord.execute("DROP ROLE IF EXISTS agent_flip")
    coord.execute("CREATE ROLE agent_flip LOGIN IN ROLE memory_writer")
    coord.execute("GRANT INSERT, SELECT ON notes TO agent_flip")
    coord.execute("GRANT USAGE ON SEQUENCE notes_id_seq TO agent_flip")
    coord.execute("SELECT memory.grant_org('agent_flip', 'org_flip')")
    with psycopg.connect(f"host=127.0.0.1 port={cluster['coord']} user=agent_flip dbname=postgres", autocommit=True) as a:
        a.execute("INSERT INTO notes (org_id, content) VALUES ('org_flip', 'first')")
        assert coord.execute("SELECT memory.revoke_org('agent_flip', 'org_flip')").fetchone()[0] is True
        # The same session, whose worker connection cached the grant: refused now.
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            a.execute("INSERT INTO notes (org_id, content) VALUES ('org_flip', 'second')")
    assert coord.execute("SELECT count(*) FROM notes WHERE org_id = 'org_flip'").fetchone()[0] == 1


def test_retention_on_citus_touches_only_the_due_rows_of_their_own_org(coord):
    # The same id in two orgs (unique keys hold the org on Citus); only org_short's row is due.
    coord.execute("INSERT INTO memory.retention_policies (org_id, tier, retention_days, soft_delete_grace_days) VALUES ('org_short', 'internal', 1, 1)")
    coord.execute("INSERT INTO notes (id, org_id, content) VALUES (900001, 'org_short', 'due soon'), (900001, 'org_long', 'kept a year')")
    res = coord.execute("SELECT memory.run_retention(false, now() + interval '3 days')").fetchone()[0]
    rows = dict(coord.execute("SELECT org_id, soft_deleted_at IS NOT NULL FROM notes WHERE id = 900001").fetchall())
    assert rows == {"org_short": True, "org_long": False}, (rows, res)
    coord.execute("SELECT memory.run_retention(false, now() + interval '5 days')")
    rows = dict(coord.execute("SELECT org_id, soft_deleted_at IS NOT NULL FROM notes WHERE id = 900001").fetchall())
    assert rows == {"org_long": False}, rows


def test_retention_on_citus_sweeps_the_archive_org_by_org(coord):
    """Issue 46: archived rows follow their schedule on the shards, each org's in a statement naming
    the org. The same id archived in two orgs: only the due org's row is soft-deleted, then purged
    after its grace (purge_after - expires_at = 3 days after the soft delete), with a memory.purge event."""
    same = "00000000-0000-0000-0000-00000000a46a"
    coord.execute("INSERT INTO memory.observations_archive (id, org_id, user_id, content, classification, expires_at, purge_after) VALUES"
                  " (%s, 'org_arch_due', 'u', 'due', 'internal', now() - interval '2 days', now() + interval '1 day'),"
                  " (%s, 'org_arch_kept', 'u', 'kept', 'internal', now() + interval '1 year', now() + interval '13 months')", (same, same))
    res = coord.execute("SELECT memory.run_retention(false, now())").fetchone()[0]
    assert res["archive"]["soft_deleted"] >= 1, res
    rows = dict(coord.execute("SELECT org_id, soft_deleted_at IS NOT NULL FROM memory.observations_archive WHERE id = %s", (same,)).fetchall())
    assert rows == {"org_arch_due": True, "org_arch_kept": False}, rows
    coord.execute("SELECT memory.run_retention(false, now() + interval '2 days')")
    assert coord.execute("SELECT count(*) FROM memory.observations_archive WHERE id = %s", (same,)).fetchone()[0] == 2, "not before the grace"
    coord.execute("SELECT memory.run_retention(false, now() + interval '4 days')")
    rows = dict(coord.execute("SELECT org_id, soft_deleted_at IS NOT NULL FROM memory.observations_archive WHERE id = %s", (same,)).fetchall())
    assert rows == {"org_arch_kept": False}, rows
    assert events(coord, "org_arch_due", "memory.purge") == 1
    assert events(coord, "org_arch_kept", "memory.purge") == 0


def test_an_immediate_appender_on_a_worker_spans_chains_of_both_workers(cluster, coord):
    here = next(o for o in (f"org_span_{i}" for i in range(100)) if node_of(coord, "memory.audit_log", o)[0] == min(cluster["workers"]))
    there = next(o for o in (f"org_span_{i}" for i in range(100)) if node_of(coord, "memory.audit_log", o)[0] == max(cluster["workers"]))
    with psycopg.connect(dsn(min(cluster["workers"]))) as w:
        w.execute("SET memory.audit_mode = immediate")
        w.execute("SELECT memory.audit_append('app.span', '{\"n\": 1}', %s)", (here,))
        w.execute("SELECT memory.audit_append('app.span', '{\"n\": 2}', %s)", (there,))
        w.commit()
    # The local chain was chained at once, the other one's event went through the outbox.
    assert coord.execute("SELECT count(*) FROM memory.audit_log WHERE chain_id = %s", (here,)).fetchone()[0] == 1
    assert coord.execute("SELECT count(*) FROM memory.audit_pending WHERE chain_id = %s", (there,)).fetchone()[0] == 1
    coord.execute("SELECT memory.audit_integrate()")
    v = verify(coord)
    assert v[here][:2] == (1, True) and v[there][:2] == (1, True)


def test_a_missing_log_shard_fails_verification_instead_of_hiding_its_chains(coord):
    org = "org_hidden"
    insert(coord, org, 2)
    coord.execute("SELECT memory.audit_integrate()")
    port, log = node_of(coord, "memory.audit_log", org)
    schema, name = log.split(".")
    with psycopg.connect(dsn(port), autocommit=True) as w:
        w.execute("SET citus.enable_manual_changes_to_shards = on")
        w.execute(f"ALTER TABLE {log} RENAME TO {name}_away")
        try:
            for chain in (None, org):
                with pytest.raises(psycopg.Error, match="missing"):
                    verify(coord, chain)
        finally:
            w.execute(f"ALTER TABLE {schema}.{name}_away RENAME TO {name}")
    assert verify(coord, org)[org][:2] == (2, True)


def test_agent_api_through_the_coordinator(cluster, coord):
    """The agent's calls on distributed stores, as a tenant-bound writer through the coordinator:
    recall with filters, forget of one memory (and not of another org's), retrieve over claims."""
    coord.execute("DROP ROLE IF EXISTS agent_api_citus")
    coord.execute("CREATE ROLE agent_api_citus LOGIN")
    coord.execute("SELECT memory.setup_roles()")
    coord.execute("GRANT memory_writer TO agent_api_citus")
    coord.execute("SELECT memory.grant_org('agent_api_citus', 'org_api')")
    (other,) = coord.execute("INSERT INTO memory.observations (org_id, user_id, content) VALUES ('org_api2', 'u1', 'oolong tea') RETURNING id").fetchone()
    with psycopg.connect(f"host=127.0.0.1 port={cluster['coord']} user=agent_api_citus dbname=postgres", autocommit=True) as a:
        (mine,) = a.execute("INSERT INTO memory.observations (org_id, user_id, session_id, content) "
                            "VALUES ('org_api', 'u1', 's1', 'prefers green tea') RETURNING id").fetchone()
        a.execute("INSERT INTO memory.observations (org_id, user_id, content) VALUES ('org_api', 'u2', 'prefers black tea')")
        got = a.execute("SELECT id FROM memory.recall('org_api', 'tea', 10, filters => '{\"user_id\": \"u1\"}')").fetchall()
        assert [g[0] for g in got] == [mine]
        res = a.execute("SELECT memory.forget(ARRAY[%s, %s]::uuid[], 'user request')", (mine, other)).fetchone()[0]
        receipt = res.pop("receipt")
        assert res.pop("receipts") == [receipt] and receipt["org_id"] == "org_api", receipt
        assert res == {"forgotten": [str(mine)], "held": [], "not_found": [str(other)], "derived_forgotten": []}, res
        assert a.execute("SELECT count(*) FROM memory.recall('org_api', 'tea', 10, filters => '{\"user_id\": \"u1\"}')").fetchone()[0] == 0
        assert a.execute("SELECT count(*) FROM memory.retrieve('org_api', 'tea')").fetchone()[0] == 0
    assert coord.execute("SELECT count(*) FROM memory.observations WHERE id = %s", (mine,)).fetchone()[0] == 0
    assert coord.execute("SELECT count(*) FROM memory.observations WHERE id = %s", (other,)).fetchone()[0] == 1
    assert events(coord, "org_api", "memory.forget") == 1
    assert events(coord, "org_api", "memory.retrieval.hybrid") == 1
    # The erasure receipt proves on the coordinator: its event on the org's shard group, the ids
    # gone from the distributed store.
    checks = coord.execute("SELECT \"check\", ok, detail FROM memory.verify_receipt(%s::jsonb)", (json.dumps(receipt),)).fetchall()
    assert [c[0] for c in checks] == ["signature", "ids", "event", "chain_head", "absent"] and all(c[1] for c in checks), checks


def test_remember_and_context_through_the_coordinator(cluster, coord):
    """memory.remember (issue 49) on the distributed store as a tenant-bound writer: the same fact
    twice is one row (its hash column and index on the shards), dedup off stores twice; context
    packs what recall finds under its budget."""
    coord.execute("DROP ROLE IF EXISTS remember_citus")
    coord.execute("CREATE ROLE remember_citus LOGIN")
    coord.execute("SELECT memory.setup_roles()")
    coord.execute("GRANT memory_writer TO remember_citus")
    coord.execute("SELECT memory.grant_org('remember_citus', 'org_rem')")
    with psycopg.connect(f"host=127.0.0.1 port={cluster['coord']} user=remember_citus dbname=postgres", autocommit=True) as a:
        first = a.execute("SELECT memory.remember('org_rem', 'Prefers green tea', user_id => 'u1')").fetchone()[0]
        again = a.execute("SELECT memory.remember('org_rem', '  prefers GREEN tea ', user_id => 'u1')").fetchone()[0]
        assert first["status"] == "created" and again["status"] == "duplicate" and again["id"] == first["id"]
        # (As the owner: Citus does not carry an admin's column grants on the reference table to its shards.)
        coord.execute("INSERT INTO memory.org_settings (org_id, dedup) VALUES ('org_rem', 'off')")
        assert a.execute("SELECT memory.remember('org_rem', 'Prefers green tea', user_id => 'u1')->>'status'").fetchone()[0] == "created"
        c = a.execute("SELECT memory.context('org_rem', 'green tea', 50)").fetchone()[0]
        assert 0 < c["tokens"] <= 50 and len(c["ids"]) == 1 and c["omitted"] == 1, c  # the two copies: one kept
    assert coord.execute("SELECT count(*), max(seen_count) FROM memory.observations WHERE org_id = 'org_rem'").fetchone() == (2, 2)


def test_revisions_and_supersession_on_distributed_stores(cluster, coord):
    """Memory over time on Citus (SPEC §17), as a tenant-bound writer through the coordinator:
    memory.revisions is distributed with the observations, a correction keeps a revision on the
    org's node, history and recall as of a time read it, supersession hides the old memory, and
    forget removes the revisions."""
    assert coord.execute("""SELECT a.colocationid = b.colocationid FROM pg_dist_partition a, pg_dist_partition b
                             WHERE a.logicalrelid = 'memory.revisions'::regclass AND b.logicalrelid = 'memory.observations'::regclass""").fetchone()[0]
    coord.execute("DROP ROLE IF EXISTS revisions_citus")
    coord.execute("CREATE ROLE revisions_citus LOGIN")
    coord.execute("SELECT memory.setup_roles()")
    coord.execute("GRANT memory_writer TO revisions_citus")
    coord.execute("SELECT memory.grant_org('revisions_citus', 'org_rev')")
    with psycopg.connect(f"host=127.0.0.1 port={cluster['coord']} user=revisions_citus dbname=postgres", autocommit=True) as a:
        (mid,) = a.execute("INSERT INTO memory.observations (org_id, content) VALUES ('org_rev', 'the office is in Leeds') RETURNING id").fetchone()
        coord.execute("UPDATE memory.observations SET created_at = now() - interval '10 days' WHERE org_id = 'org_rev' AND id = %s", (mid,))
        with a.transaction():
            # (Citus forwards SET LOCAL to the workers, where the shards' triggers fire, only so.)
            a.execute("SET LOCAL citus.propagate_set_commands = 'local'")
            a.execute("SET LOCAL memory.change_reason = 'moved'")
            a.execute("UPDATE memory.observations SET content = 'the office is in York' WHERE org_id = 'org_rev' AND id = %s", (mid,))
        hist = a.execute("SELECT rev, content, reason FROM memory.history(%s)", (mid,)).fetchall()
        assert hist == [(2, "the office is in York", None), (1, "the office is in Leeds", "moved")], hist
        then = a.execute("SELECT content FROM memory.recall('org_rev', 'office', as_of => now() - interval '5 days')").fetchall()
        assert then == [("the office is in Leeds",)], then
        (new,) = a.execute("SELECT memory.supersede(%s, 'the office is in Hull', 'moved again')", (mid,)).fetchone()
        now = a.execute("SELECT id FROM memory.recall('org_rev', 'office')").fetchall()
        assert now == [(new,)], now
        a.execute("SELECT memory.forget(ARRAY[%s]::uuid[], 'user request')", (mid,))
    assert coord.execute("SELECT count(*) FROM memory.revisions WHERE org_id = 'org_rev' AND memory_id = %s", (mid,)).fetchone()[0] == 0
    port, shard = node_of(coord, "memory.revisions", "org_rev")
    with psycopg.connect(dsn(port), autocommit=True) as w:
        assert w.execute(f"SELECT count(*) FROM {shard} WHERE memory_id = %s", (mid,)).fetchone()[0] == 0


def test_embeddings_on_distributed_stores(cluster, coord):
    """enable_embeddings on the coordinator after distribute: Citus carries the column and the
    HNSW index to the shards; hybrid recall ranks from the coordinator."""
    if not coord.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'").fetchone():
        pytest.skip("pgvector is not installed (make pgvector)")
    coord.execute("CREATE EXTENSION IF NOT EXISTS vector")
    coord.execute("SELECT memory.enable_embeddings(3)")
    for w in cluster["workers"]:
        with psycopg.connect(dsn(w), autocommit=True) as c:
            n = c.execute("SELECT count(*) FROM pg_indexes WHERE schemaname = 'memory' AND indexname LIKE 'observations_embedding%'"
                          " AND indexdef LIKE '%hnsw%'").fetchone()[0]
            assert n >= 1, w
    coord.execute("INSERT INTO memory.observations (org_id, user_id, content, embedding) VALUES "
                  "('org_vec', 'u1', 'sailing trip in june', '[1,0,0]'), ('org_vec', 'u1', 'tax filing deadline', '[0,1,0]'),"
                  "('org_vec2', 'u1', 'sailing lessons', '[1,0,0]')")
    got = coord.execute("SELECT content, vector_rank FROM memory.recall('org_vec', '', 2, filters => '{\"user_id\": \"u1\"}', "
                        "query_embedding => '{0.9,0.1,0}')").fetchall()
    assert got == [("sailing trip in june", 1), ("tax filing deadline", 2)], got
    # With words too, the one pass ranks the words of the rows that can be in the full-text list
    # (a materialized sub-select read twice) on the org's shard.
    got = coord.execute("SELECT content, lexical_rank, vector_rank FROM memory.recall('org_vec', 'tax deadline', 2, "
                        "filters => '{\"user_id\": \"u1\"}', query_embedding => '{0.9,0.1,0}')").fetchall()
    assert got == [("tax filing deadline", 1, 2), ("sailing trip in june", None, 1)], got



def test_the_workers_background_integrators_chain_what_is_pending(cluster, coord):
    """Last: restarts every node with memory.integrator_databases naming the database; each node's
    integrator then chains the shard groups it holds, with nobody calling audit_integrate()."""
    for n in ("c", "w1", "w2"):
        port = cluster["coord"] if n == "c" else None
        port = port or int(open(f"/tmp/memory_ext-{os.environ.get('MEMORY_EXT_CLUSTER_PREFIX', '')}{NAME}-{n}/port").read())
        with psycopg.connect(dsn(port), autocommit=True) as c:
            c.execute("ALTER SYSTEM SET memory.integrator_databases = 'postgres'")
        subprocess.run([str(ROOT / "scripts" / "cluster.sh"), "restart", f"{NAME}-{n}"], check=True, capture_output=True)
    with psycopg.connect(dsn(cluster["coord"]), autocommit=True) as c:
        workers = c.execute("SELECT result FROM run_command_on_all_nodes($$SELECT count(*) FROM pg_stat_activity"
                            " WHERE backend_type = 'memory_ext integrator'$$) ORDER BY nodeid").fetchall()
        assert [int(r[0]) for r in workers] == [1, 1, 1]
        for org in ORGS:
            insert(c, org, 3)
        # (org_tp's forged entry stays pending for good: it is parked, and reported by audit_verify.)
        left = "SELECT count(*) FROM memory.audit_pending WHERE chain_id = ANY(%s)"
        deadline = time.time() + 30
        while c.execute(left, (ORGS,)).fetchone()[0] and time.time() < deadline:
            time.sleep(0.2)
        assert c.execute(left, (ORGS,)).fetchone()[0] == 0
        v = verify(c)
        assert all(v[org][1] and v[org][4] == 0 for org in ORGS), v


def test_feedback_and_erasure_of_a_distributed_weighted_table(coord):
    """record_outcome locks and writes a distributed table's rows org by org (Citus refuses FOR
    UPDATE over all shards), never another tenant's row with the same uuid; erase_subject deletes
    org by org, so an org whose rows a legal hold covers keeps them (the hold gate is the
    coordinator's backend's; the shards' hold triggers run on the workers) and is reported, while
    the other orgs' rows go."""
    coord.execute("""CREATE TABLE wnotes (id uuid DEFAULT gen_random_uuid(), org_id text NOT NULL, user_id text, content text,
                                         classification memory.classification, weight float8 NOT NULL DEFAULT 1.0,
                                         PRIMARY KEY (org_id, id))""")
    coord.execute("""SELECT memory.govern('wnotes', '{"content": "content", "target": "classification", "org": "org_id",
                                                     "user": "user_id", "audit": true, "weight": "weight"}')""")
    assert "public.wnotes" in coord.execute("SELECT memory.distribute()").fetchone()[0]["governed"]
    same, other = "00000000-0000-0000-0000-0000000000f1", "00000000-0000-0000-0000-0000000000f2"
    coord.execute("INSERT INTO wnotes (id, org_id, user_id, content) VALUES (%s, 'org_w1', 'subj_w', 'a'), (%s, 'org_w2', 'subj_w', 'b'),"
                  " (%s, 'org_w3', 'subj_w', 'c')", (same, other, same))
    out = coord.execute("SELECT observation_id::text, applied, reason FROM memory.record_outcome('sw1', 'rejected', ARRAY[%s, %s]::uuid[])",
                        (same, other)).fetchall()
    assert out == [(same, True, "applied"), (other, True, "applied")], out
    weights = dict(coord.execute("SELECT org_id, weight FROM wnotes ORDER BY 1").fetchall())
    # The shared uuid resolved to one row, and only that row moved.
    assert weights["org_w2"] == 0.85 and sorted([weights["org_w1"], weights["org_w3"]]) == [0.85, 1.0], weights
    coord.execute("INSERT INTO memory.legal_holds (org_id, user_id, reason) VALUES ('org_w1', 'subj_w', 'litigation')")
    erased = coord.execute("SELECT memory.erase_subject('subj_w')").fetchone()[0]
    assert erased["tables"]["public.wnotes"] == 2, erased
    assert list(erased["failed_tables"]["public.wnotes"]["orgs"]) == ["org_w1"], erased
    assert coord.execute("SELECT org_id FROM wnotes WHERE user_id = 'subj_w'").fetchall() == [("org_w1",)]
    coord.execute("UPDATE memory.legal_holds SET released_at = now() WHERE org_id = 'org_w1' AND user_id = 'subj_w'")
    (obs,) = coord.execute("INSERT INTO memory.observations (org_id, user_id, content) VALUES ('org_w1', 'subj_w', 'a note') RETURNING id").fetchone()
    erased = coord.execute("SELECT memory.erase_subject('subj_w')").fetchone()[0]
    assert erased["tables"]["public.wnotes"] == 1
    # Its receipt (the ids the distributed DELETE ... RETURNING gave) proves on the coordinator.
    checks = coord.execute("SELECT ok, detail FROM memory.verify_receipt(%s::jsonb)", (json.dumps(erased["receipt"]),)).fetchall()
    assert erased["receipt"]["org_id"] == "org_w1" and erased["receipt"]["count"] == 2 and all(ok for ok, _ in checks), checks
    coord.execute("INSERT INTO memory.observations (id, org_id, user_id, content) VALUES (%s, 'org_w1', 'subj_w', 'back')", (obs,))
    assert coord.execute("SELECT ok FROM memory.verify_receipt(%s::jsonb) WHERE \"check\" = 'absent'", (json.dumps(erased["receipt"]),)).fetchone() == (False,)
    assert all(v[1] for k, v in verify(coord).items() if k.startswith("org_w")), verify(coord)


def test_the_observation_store_is_distributed_with_its_tenants(cluster, coord):
    """memory.observations, its archive and weight history live in each tenant's shard group on
    a worker; a tenant role sees and writes its own org's rows there (the tenant policy runs on
    the shards), and every function that takes an id acts on the caller's org's row only, though
    ids are unique only per org."""
    a, b = "org_obs_a", "org_obs_b"
    for t in ("memory.observations", "memory.observations_archive", "memory.observation_weight_history"):
        assert coord.execute("SELECT partmethod FROM pg_dist_partition WHERE logicalrelid = %s::regclass", (t,)).fetchone()[0] == "h", t
        assert node_of(coord, t, a)[0] == node_of(coord, "memory.audit_log", a)[0] in cluster["workers"], t
    shared = "00000000-0000-0000-0000-0000000000ab"
    coord.execute("INSERT INTO memory.observations (id, org_id, user_id, content) VALUES (%s, %s, 'u_obs', 'ssn 123-45-6789 on file'),"
                  " (%s, %s, 'u_obs', 'ssn 123-45-6789 elsewhere')", (shared, a, shared, b))
    coord.execute("DROP ROLE IF EXISTS agent_obs")
    coord.execute("CREATE ROLE agent_obs LOGIN IN ROLE memory_writer, memory_reader")
    coord.execute("GRANT EXECUTE ON FUNCTION memory.reclassify(uuid, memory.classification, text),"
                  " memory.transfer_observations(uuid[], text) TO agent_obs")
    coord.execute("SELECT memory.grant_org('agent_obs', %s)", (a,))
    with psycopg.connect(f"host=127.0.0.1 port={cluster['coord']} user=agent_obs dbname=postgres", autocommit=True) as ag:
        # Its only org: the policy on the shards finds it there (no setting needed).
        ag.execute("INSERT INTO memory.observations (org_id, user_id, content) VALUES (%s, 'u_obs', 'agent note')", (a,))
        assert sorted(r[0] for r in ag.execute("SELECT org_id FROM memory.observations").fetchall()) == [a, a]
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            ag.execute("INSERT INTO memory.observations (org_id, content) VALUES (%s, 'sneaky')", (b,))
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            ag.execute("UPDATE memory.observations SET classification = 'public' WHERE id = %s", (shared,))
        # Not even the owner lowers a tier by UPDATE on the shard; reclassify is the way down.
        with pytest.raises(psycopg.Error) as down:
            coord.execute("UPDATE memory.observations SET classification = 'public' WHERE org_id = %s AND id = %s", (a, shared))
        assert down.value.sqlstate == "MX004"
        assert "of memory.observations cannot" in down.value.diag.message_primary, down.value.diag.message_primary
        # The shared id is its own org's row: lowered there, with the reason, on a's chain only.
        assert ag.execute("SELECT memory.reclassify(%s, 'internal', 'redacted upstream')", (shared,)).fetchone()[0] == "restricted"
        moved = ag.execute("SELECT reason FROM memory.transfer_observations(ARRAY[%s]::uuid[], 'p2')", (shared,)).fetchall()
        assert moved == [("transferred",)]
    tiers = dict(coord.execute("SELECT org_id, classification::text || '/' || coalesce(project_id, '') FROM memory.observations WHERE id = %s",
                               (shared,)).fetchall())
    assert tiers == {a: "internal/p2", b: "restricted/"}, tiers
    assert events(coord, a, "memory.reclassify") == 1 and events(coord, b, "memory.reclassify") == 0
    reason, actor = coord.execute("SELECT payload->>'reason', actor_id FROM memory.audit_log WHERE chain_id = %s AND event_type = 'memory.reclassify'",
                                  (a,)).fetchone()
    assert reason == "redacted upstream"
    # Written on the org's node by the delegated change, and naming the tenant that made it.
    assert actor == "role:agent_obs", actor
    # Feedback on the shard: weight and history of a's row; three failures make it misleading.
    # (By the owner, who may act for both orgs: the shared id is the greatest org's, b's.)
    for s in ("s1", "s2", "s3"):
        coord.execute("SELECT * FROM memory.record_outcome(%s, 'rejected', ARRAY[%s]::uuid[])", (s, shared))
    assert coord.execute("SELECT count(*) FROM memory.observation_weight_history WHERE org_id = %s", (b,)).fetchone()[0] == 3
    assert coord.execute("SELECT count(*) FROM memory.observation_weight_history WHERE org_id = %s", (a,)).fetchone()[0] == 0
    assert [r[0] for r in coord.execute("SELECT observation_id::text FROM memory.misleading_observations(%s)", (b,)).fetchall()] == [shared]
    assert coord.execute("SELECT count(*) FROM memory.misleading_observations(%s)", (a,)).fetchone()[0] == 0
    # A session acting for a (memory.org_id) means a's row, though the owner may act for both.
    with coord.transaction():
        coord.execute("SELECT set_config('memory.org_id', %s, true)", (a,))
        coord.execute("SELECT * FROM memory.record_outcome('s4', 'rejected', ARRAY[%s]::uuid[])", (shared,))
        assert coord.execute("SELECT memory.reclassify(%s, 'public', 'acting for a')", (shared,)).fetchone()[0] == "internal"
    history = dict(coord.execute("SELECT org_id, count(*) FROM memory.observation_weight_history WHERE observation_id = %s GROUP BY 1",
                                 (shared,)).fetchall())
    assert history == {a: 1, b: 3}, history
    tiers = dict(coord.execute("SELECT org_id, classification::text FROM memory.observations WHERE id = %s", (shared,)).fetchall())
    assert tiers == {a: "public", b: "restricted"}, tiers
    # Retention on the shards: a held row stays in the table, the others are archived.
    coord.execute("INSERT INTO memory.observations (org_id, user_id, content, archive_at, memory_type, task_id) VALUES"
                  " (%s, 'u_arch', 'old note', now() - interval '1 day', 'long_term', NULL),"
                  " (%s, 'u_held', 'held note', now() - interval '1 day', 'long_term', NULL),"
                  " (%s, 'u_task', 'scratch', NULL, 'working', 't_obs')", (a, a, a))
    # (Stamped at write from the policies; made due here.)
    coord.execute("UPDATE memory.observations SET archive_at = now() - interval '1 day' WHERE org_id = %s AND user_id IN ('u_arch', 'u_held')", (a,))
    coord.execute("INSERT INTO memory.legal_holds (org_id, user_id, reason) VALUES (%s, 'u_held', 'litigation')", (a,))
    coord.execute("SELECT memory.run_retention(false, now())")
    assert coord.execute("SELECT user_id FROM memory.observations_archive WHERE org_id = %s", (a,)).fetchall() == [("u_arch",)]
    assert coord.execute("SELECT count(*) FROM memory.observations WHERE org_id = %s AND user_id = 'u_held'", (a,)).fetchone()[0] == 1
    assert events(coord, a, "memory.archive") == 1
    assert coord.execute("SELECT memory.end_task('t_obs')").fetchone()[0] == 1
    # Erasure on the shards: the held subject's row stays and is counted.
    erased = coord.execute("SELECT memory.erase_subject('u_held')").fetchone()[0]
    assert erased["held"] == 1 and erased["observations"] == 0, erased
    erased = coord.execute("SELECT memory.erase_subject('u_obs')").fetchone()[0]
    assert erased["observations"] == 3 and erased["weight_history"] == 4, erased  # a's two, b's one (and their history)
    assert all(v[1] for k, v in verify(coord).items() if not k.startswith("org_t")), verify(coord)


def test_events_name_the_distributed_table_not_its_shard(cluster, coord):
    """Triggers fire on the shards (`notes_102041`), but a tenant's events name the table the
    application writes (`public.notes`), the same on every node and after a shard move or split."""
    coord.execute("INSERT INTO notes (org_id, user_id, content) VALUES ('org_named', 'u', 'a note')")
    coord.execute("INSERT INTO memory.observations (org_id, user_id, content) VALUES ('org_named', 'u', 'a memory')")
    coord.execute("SELECT memory.audit_integrate()")
    named = [r[0] for r in coord.execute("""SELECT payload->>'table' FROM memory.audit_log
                                              WHERE chain_id = 'org_named' AND event_type = 'memory.store' ORDER BY seq""").fetchall()]
    assert named == ["public.notes", "memory.observations"], named
    shards = coord.execute(r"""SELECT DISTINCT payload->>'table' FROM memory.audit_log
                                WHERE payload ? 'table' AND payload->>'table' ~ '_[0-9]+$'""").fetchall()
    assert shards == [], shards


def test_the_knowledge_store_is_distributed_with_its_tenants(cluster, coord):
    """memory.entities, claims, relationships and recheck_tasks live in each tenant's shard group:
    the knowledge triggers fire on the shards (supersession, the guards, the audit), and the
    knowledge functions act from the coordinator on the caller's org's rows, though ids are unique
    only per org."""
    a, b = "org_kn_a", "org_kn_b"
    for t in ("memory.entities", "memory.claims", "memory.relationships", "memory.recheck_tasks"):
        assert coord.execute("SELECT partmethod FROM pg_dist_partition WHERE logicalrelid = %s::regclass", (t,)).fetchone()[0] == "h", t
        assert node_of(coord, t, a)[0] == node_of(coord, "memory.audit_log", a)[0] in cluster["workers"], t
    ent, shared = "e0000000-0000-0000-0000-0000000000ab", "c0000000-0000-0000-0000-0000000000ab"
    # Two orgs hold the same entity and claim ids (each org's own rows), both active.
    for org in (a, b):
        coord.execute("INSERT INTO memory.entities (id, org_id, entity_type, name) VALUES (%s, %s, 'problem', 'asthma')", (ent, org))
        coord.execute("INSERT INTO memory.claims (id, org_id, entity_id, claim_text, source, confidence_score) VALUES"
                      " (%s, %s, %s, 'first finding', 'PubMed', 0.7)", (shared, org, ent))
        coord.execute("UPDATE memory.claims SET lifecycle_state = 'active' WHERE org_id = %s AND id = %s", (org, shared))
    coord.execute("SELECT memory.setup_roles()")
    coord.execute("DROP ROLE IF EXISTS agent_kn")
    coord.execute("CREATE ROLE agent_kn LOGIN IN ROLE memory_admin")
    coord.execute("SELECT memory.grant_org('agent_kn', %s)", (a,))
    with psycopg.connect(f"host=127.0.0.1 port={cluster['coord']} user=agent_kn dbname=postgres", autocommit=True) as ag:
        assert {r[0] for r in ag.execute("SELECT org_id FROM memory.claims").fetchall()} == {a}
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            ag.execute("INSERT INTO memory.entities (org_id, entity_type, name) VALUES (%s, 'concept', 'sneaky')", (b,))
        # Supersession on the shard: the tenant's correction supersedes its own org's claim only.
        ag.execute("INSERT INTO memory.claims (id, org_id, entity_id, claim_text, source, confidence_score, supersedes) VALUES"
                   " ('c0000000-0000-0000-0000-0000000000ac', %s, %s, 'corrected finding', 'PubMed', 0.8, %s)", (a, ent, shared))
        chain = ag.execute("SELECT depth, claim_id::text, lifecycle_state::text FROM memory.claim_chain('c0000000-0000-0000-0000-0000000000ac')").fetchall()
        assert chain == [(0, "c0000000-0000-0000-0000-0000000000ac", "pending"), (1, shared, "superseded")], chain
        # The replicator's verdict on the shared id is about the caller's org's claim.
        ag.execute("UPDATE memory.claims SET lifecycle_state = 'active' WHERE id = 'c0000000-0000-0000-0000-0000000000ac'")
        verdict = ag.execute("SELECT memory.record_verdict('c0000000-0000-0000-0000-0000000000ac', 'eroded')").fetchone()[0]
        assert verdict["action"] == "recheck_enqueued", verdict
        taken = ag.execute("SELECT org_id, claim_id::text FROM memory.claim_recheck_tasks('critic-kn', 10)").fetchall()
        assert taken == [(a, "c0000000-0000-0000-0000-0000000000ac")], taken
        # Nothing is hard-deleted, on the shard either (not even by the owner).
        with pytest.raises(psycopg.Error) as gone:
            coord.execute("DELETE FROM memory.claims WHERE id = 'c0000000-0000-0000-0000-0000000000ac'")
        assert gone.value.sqlstate == "MX006"
    states = dict(coord.execute("SELECT org_id, lifecycle_state::text FROM memory.claims WHERE id = %s", (shared,)).fetchall())
    assert states == {a: "superseded", b: "active"}, states
    assert events(coord, a, "memory.claim.supersede") == 1 and events(coord, b, "memory.claim.supersede") == 0
    # Conflicts, by the owner acting for b: the lower confidence loses, in b.
    coord.execute("INSERT INTO memory.claims (id, org_id, entity_id, claim_text, source, confidence_score) VALUES"
                  " ('c0000000-0000-0000-0000-0000000000ad', %s, %s, 'weaker', 'PubMed', 0.2)", (b, ent))
    coord.execute("UPDATE memory.claims SET lifecycle_state = 'active' WHERE org_id = %s AND id = 'c0000000-0000-0000-0000-0000000000ad'", (b,))
    with coord.transaction():
        coord.execute("SELECT set_config('memory.org_id', %s, true)", (b,))
        loser = coord.execute("SELECT memory.resolve_conflict(%s, 'c0000000-0000-0000-0000-0000000000ad')::text", (shared,)).fetchone()[0]
    assert loser == "c0000000-0000-0000-0000-0000000000ad"
    # Freshness re-checks across both orgs' shards; bulk ingest with refs.
    coord.execute("INSERT INTO memory.claims (org_id, entity_id, claim_text, source, confidence_score) VALUES (%s, %s, 'shaky', 'PubMed', 0.1)", (a, ent))
    coord.execute("UPDATE memory.claims SET lifecycle_state = 'active' WHERE org_id = %s AND claim_text = 'shaky'", (a,))
    queued = [r[0] for r in coord.execute("SELECT claim_id FROM memory.freshness_recheck(0.5)").fetchall()]
    shaky = coord.execute("SELECT id FROM memory.claims WHERE org_id = %s AND claim_text = 'shaky'", (a,)).fetchone()[0]
    assert shaky in queued, queued
    assert coord.execute("SELECT count(*) FROM memory.recheck_tasks WHERE org_id = %s AND claim_id = %s", (a, shaky)).fetchone()[0] == 1
    rows = coord.execute("""SELECT kind, ok, sqlstate FROM memory.ingest_batch(
        entities => '[{"ref": "x", "org_id": "org_kn_b", "entity_type": "intervention", "name": "ICS"}]',
        claims => '[{"org_id": "org_kn_b", "entity_ref": "x", "claim_text": "works"},
                    {"org_id": "org_kn_b", "entity_id": "00000000-0000-0000-0000-0000000000ff", "claim_text": "no entity"}]')""").fetchall()
    assert rows == [("entities", True, None), ("claims", True, None), ("claims", False, "23503")], rows
    # Decay on the shards: a's PHI claim is redacted and archived, its hypothesis deleted.
    coord.execute("INSERT INTO memory.claims (org_id, entity_id, claim_text, subject_id, pii_fields, decay_at) VALUES"
                  " (%s, %s, 'patient 7 reports', 'patient-7', ARRAY['claim_text', 'subject_id'], now() - interval '1 day')", (a, ent))
    coord.execute("INSERT INTO memory.claims (org_id, entity_id, claim_text, kind, decay_at) VALUES (%s, %s, 'maybe', 'hypothesis', now() - interval '1 day')", (a, ent))
    decay = coord.execute("SELECT memory.run_decay()").fetchone()[0]
    assert decay["claimsAnonymized"] == 1 and decay["claimsDeleted"] == 1, decay
    assert coord.execute("SELECT claim_text, subject_id FROM memory.claims WHERE org_id = %s AND lifecycle_state = 'archived'"
                         " AND anonymized_at IS NOT NULL", (a,)).fetchall() == [("[redacted]", None)]
    assert events(coord, a, "memory.job.decay.deleted") == 1
    # Knowledge retention in the maintenance run: an old subject entity is archived on its shard.
    coord.execute("INSERT INTO memory.entities (org_id, entity_type, name, subject_id, t_created) VALUES"
                  " (%s, 'problem', 'old', 'subj-old', now() - interval '30 years')", (b,))
    run = coord.execute("SELECT memory.run_maintenance()").fetchone()[0]
    assert "error" not in run and run["knowledge"]["entities_disposed"] == 1, run
    # Two orgs on one shard holding one entity id: the owner's retraction of both audits each
    # org's own transition once, on its own chain.
    shard = coord.execute("SELECT get_shard_id_for_distribution_column('memory.entities', %s::text)", (a,)).fetchone()[0]
    c = next(o for o in (f"org_kn_c{i}" for i in range(1000))
             if coord.execute("SELECT get_shard_id_for_distribution_column('memory.entities', %s::text)", (o,)).fetchone()[0] == shard)
    twin = "e0000000-0000-0000-0000-0000000000ae"
    coord.execute("INSERT INTO memory.entities (id, org_id, entity_type, name, lifecycle_state) VALUES"
                  " (%s, %s, 'concept', 'twin', 'active'), (%s, %s, 'concept', 'twin', 'pending')", (twin, a, twin, c))
    coord.execute("UPDATE memory.entities SET lifecycle_state = 'retracted' WHERE id = %s", (twin,))
    coord.execute("SELECT memory.audit_integrate()")
    for org, was in ((a, "active"), (c, "pending")):
        got = coord.execute("SELECT payload->>'fromState' FROM memory.audit_log WHERE chain_id = %s"
                            " AND event_type = 'memory.entity.state_transition' AND payload->>'entityId' = %s", (org, twin)).fetchall()
        assert got == [(was,)], (org, got)
    # A tenant bound to a is told b's claims do not exist.
    with psycopg.connect(f"host=127.0.0.1 port={cluster['coord']} user=agent_kn dbname=postgres", autocommit=True) as ag:
        with pytest.raises(psycopg.Error) as hidden:
            ag.execute("SELECT memory.resolve_conflict('c0000000-0000-0000-0000-0000000000ac', 'c0000000-0000-0000-0000-0000000000ad')")
        assert hidden.value.sqlstate == "23503"
    # (The org_t* chains were tampered with on purpose above.)
    assert all(v[1] for k, v in verify(coord).items() if not k.startswith("org_t")), verify(coord)


def test_the_consent_store_is_distributed_with_its_tenants(cluster, coord):
    """The consent tables live in each tenant's shard group: grants and contexts are checked by
    their triggers on the shards, the persona-drift detectors read and write the shard group's
    tables, and revocation, erasure and maintenance open their gates on the org's node (Citus
    runs their per-org part there), down to a governed application table's rows."""
    a, b = "org_cs_a", "org_cs_b"
    for t in ("memory.consents", "memory.user_contexts", "memory.threads", "memory.training_candidates", "memory.persona_drift_log",
              "memory.user_feedback", "memory.thread_refreshes", "memory.watch_question_updates", "memory.deletion_stubs"):
        assert coord.execute("SELECT partmethod FROM pg_dist_partition WHERE logicalrelid = %s::regclass", (t,)).fetchone()[0] == "h", t
        assert node_of(coord, t, a)[0] == node_of(coord, "memory.audit_log", a)[0] in cluster["workers"], t
    # A governed application table whose rows hang on the user's save_to_thread consent.
    coord.execute("CREATE TABLE cprefs (id bigserial, org_id text NOT NULL, owner_user text, body text, PRIMARY KEY (org_id, id))")
    coord.execute("""SELECT memory.govern('cprefs', '{"classify": false, "org": "org_id", "consent": {"user": "owner_user", "scope": "save_to_thread"}}')""")
    assert "public.cprefs" in coord.execute("SELECT memory.distribute()").fetchone()[0]["governed"]
    coord.execute("SELECT memory.setup_roles()")
    coord.execute("DROP ROLE IF EXISTS agent_cs")
    coord.execute("CREATE ROLE agent_cs LOGIN IN ROLE memory_writer")
    coord.execute("GRANT INSERT, SELECT ON cprefs TO agent_cs")
    coord.execute("GRANT USAGE ON SEQUENCE cprefs_id_seq TO agent_cs")
    coord.execute("SELECT memory.grant_org('agent_cs', %s)", (a,))
    with psycopg.connect(f"host=127.0.0.1 port={cluster['coord']} user=agent_cs dbname=postgres", autocommit=True) as ag:
        assert ag.execute("SELECT memory.grant_consent(%s, 'u_cs', ARRAY['save_to_profile', 'save_to_thread']::memory.consent_scope[],"
                          " '{\"language_preference\": \"Dutch\"}')", (a,)).fetchone()[0] == 1
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            ag.execute("SELECT memory.grant_consent(%s, 'u_cs', ARRAY['save_to_profile']::memory.consent_scope[])", (b,))
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            ag.execute("INSERT INTO memory.user_contexts (org_id, user_id, scope, thread_id, source, fields)"
                       " VALUES (%s, 'u_cs', 'thread', 'th', 'save_as_thread', '{}')", (b,))
        ag.execute("INSERT INTO memory.user_contexts (org_id, user_id, scope, thread_id, source, fields)"
                   " VALUES (%s, 'u_cs', 'thread', 'th', 'save_as_thread', '{\"research_style\": \"top-down\"}')", (a,))
        ag.execute("INSERT INTO cprefs (org_id, owner_user, body) VALUES (%s, 'u_cs', 'kept under consent')", (a,))
        with pytest.raises(psycopg.Error) as refused:
            ag.execute("INSERT INTO cprefs (org_id, owner_user, body) VALUES (%s, 'u_none', 'no consent')", (a,))
        assert refused.value.sqlstate == "MX003" and "public.cprefs rows" in refused.value.diag.message_hint
        # A grade reversal: the detector on the worker reads the shard group's feedback and consent.
        ag.execute("INSERT INTO memory.user_feedback (org_id, user_id, related_object_ref, rating, created_at)"
                   " VALUES (%s, 'u_cs', 'snap:1', 'thumbs_up', now() - interval '2 days')", (a,))
        ag.execute("INSERT INTO memory.user_feedback (org_id, user_id, related_object_ref, rating) VALUES (%s, 'u_cs', 'snap:1', 'not_helpful')", (a,))
        drift = ag.execute("SELECT org_id, signal_kind::text FROM memory.persona_drift_log WHERE user_id = 'u_cs'").fetchall()
        assert drift == [(a, "grade_reversal")], drift
        slices = ag.execute("SELECT memory.load_slices(%s, 'u_cs', 'snapshot')", (a,)).fetchone()[0]
        assert "Dutch" in slices["rendered"], slices
        # Revocation by the tenant: its per-org part runs on the org's node.
        revoked = ag.execute("SELECT memory.revoke_consent(%s, 'u_cs')", (a,)).fetchone()[0]
    assert (revoked["profile_contexts_deleted"], revoked["thread_contexts_blocked"], revoked["drift_rows_to_purge"]) == (1, 1, 1), revoked
    assert revoked["tables_deleted"] == {"public.cprefs": 1}, revoked
    assert events(coord, a, "memory.drift.detected") == 1 and events(coord, a, "memory.consent.revoke") == 1
    status = dict(coord.execute("SELECT scope::text, state FROM memory.consent_status(%s, 'u_cs')", (a,)).fetchall())
    assert status["save_to_profile"] == "revoked", status
    # Maintenance 3 days on purges the drift row 48 hours after the revocation.
    run = coord.execute("SELECT memory.run_maintenance(now() + interval '3 days')").fetchone()[0]
    assert "error" not in run and run["consent"]["drift_rows_purged"] >= 1, run
    assert coord.execute("SELECT count(*) FROM memory.persona_drift_log WHERE user_id = 'u_cs'").fetchone()[0] == 0
    # Export, then erasure: a held org keeps its rows, the other org's go, with a deletion stub.
    coord.execute("SELECT memory.grant_consent(%s, 'u_cs', ARRAY['save_to_thread']::memory.consent_scope[])", (b,))
    coord.execute("INSERT INTO memory.legal_holds (org_id, user_id, reason) VALUES (%s, 'u_cs', 'litigation')", (b,))
    exported = coord.execute("SELECT memory.export_subject('u_cs')").fetchone()[0]["sections"]
    assert {c["org_id"] for c in exported["consents"]} == {a, b}, exported["consents"]
    erased = coord.execute("SELECT memory.erase_subject('u_cs')").fetchone()[0]["consent"]
    assert (erased["consents"], erased["deletion_stubs"]) == (2, 1), erased
    left = coord.execute("SELECT org_id, count(*) FROM memory.consents WHERE user_id = 'u_cs' GROUP BY 1").fetchall()
    assert left == [(b, 1)], left
    assert coord.execute("SELECT org_id FROM memory.deletion_stubs WHERE user_id = 'u_cs'").fetchall() == [(a,)]
    assert all(v[1] for k, v in verify(coord).items() if not k.startswith("org_t")), verify(coord)


def test_org_calls_go_to_the_orgs_node_with_their_values_exact(cluster, coord):
    """memory_internal._org_call: the functions of memory_internal._org_functions are the ones
    memory.distribute made Citus delegate by their org, and a call carries its values to the org's
    node exactly: in a session of another time zone the candidate on the org's shard is withdrawn
    at the time given, to the microsecond. (Not under DateStyle SQL: Citus sends the parameters of
    other statements, such as the consent version's INSERT, in the session's DateStyle, which the
    workers do not read back; test_consent.py checks _org_call's times under it on one node.)"""
    listed = {r[0] for r in coord.execute("SELECT fn::text FROM memory_internal._org_functions()")}
    delegated = {r[0] for r in coord.execute(
        "SELECT objid::regprocedure::text FROM pg_dist_object WHERE classid = 'pg_proc'::regclass"
        " AND distribution_argument_index = 0 AND force_delegation")}
    assert listed and listed <= delegated, (listed, delegated)
    org = "org_oc"
    coord.execute("SELECT memory.grant_consent(%s, 'u_tz', ARRAY['training_use_allowed']::memory.consent_scope[])", (org,))
    coord.execute("INSERT INTO memory.training_candidates (org_id, user_id, object_ref) VALUES (%s, 'u_tz', 'obj:1')", (org,))
    coord.execute("SET TimeZone = 'Asia/Kolkata'")
    try:
        revoked = coord.execute("SELECT memory.revoke_consent(%s, 'u_tz', ARRAY['training_use_allowed']::memory.consent_scope[],"
                                " now() - interval '0.000123 second')", (org,)).fetchone()[0]
    finally:
        coord.execute("RESET TimeZone")
    assert revoked["training_candidates_revoked"] == 1, revoked
    withdrawn, recorded = coord.execute(
        "SELECT t.withdrawn_at, c.recorded_at FROM memory.training_candidates t, memory.consents c"
        " WHERE t.org_id = %s AND t.user_id = 'u_tz' AND c.org_id = %s AND c.user_id = 'u_tz' AND c.version = 2", (org, org)).fetchone()
    assert withdrawn is not None and withdrawn == recorded, (withdrawn, recorded)
