"""memory_ext caches rules, thresholds and org grants per backend and drops them when their tables
change (the tables' statement triggers send a relcache invalidation). A backend whose transaction
holds an older snapshot (REPEATABLE READ, begun before the change) refills a dropped cache: it
must refill it with the rows in force now, never with what its snapshot still shows, or the old
rule would outlive the transaction and apply in every later one of that backend.

The encoding check is here too: backend state (caches, row text) is read as UTF-8, so a database
in another encoding is refused at CREATE EXTENSION."""
import psycopg
import pytest


def rr(dsn):
    c = psycopg.connect(dsn)
    c.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
    return c


def test_a_revoked_org_grant_is_not_re_cached_from_an_older_snapshot(dsn, conn):
    conn.execute("SELECT * FROM memory.setup_roles()")
    conn.execute("DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'snap_w') THEN "
                 "CREATE ROLE snap_w LOGIN IN ROLE memory_writer; END IF; END $$")
    conn.execute("SELECT memory.grant_org('snap_w', 'acme')")
    with psycopg.connect(dsn.replace("user=postgres", "user=snap_w"), autocommit=True) as other:
        assert other.execute("SELECT memory.classify('x', NULL, NULL, 'acme')").fetchone() == ("internal",)
    with rr(dsn.replace("user=postgres", "user=snap_w")) as w:
        w.execute("SELECT 1")  # the transaction's snapshot is taken here, while the grant holds
        conn.execute("SELECT memory.revoke_org('snap_w', 'acme')")
        # The grant is read for the first time in this backend: as of now, not as of the snapshot.
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            w.execute("SELECT memory.classify('x', NULL, NULL, 'acme')")
        w.rollback()
        # And no later transaction of this backend acts for acme.
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            w.execute("SELECT memory.classify('x', NULL, NULL, 'acme')")
        w.rollback()


def test_a_changed_classification_rule_is_not_re_cached_from_an_older_snapshot(dsn, conn):
    with rr(dsn) as a:
        a.execute("SELECT 1")
        conn.execute("INSERT INTO memory.classification_rules (org_id, tier, target, pattern) VALUES ('acme', 'restricted', 'content', 'falcon')")
        # acme's rules are compiled for the first time in this backend, from the rules of now.
        assert a.execute("SELECT memory.classify('falcon plans', NULL, NULL, 'acme')").fetchone() == ("restricted",)
        a.commit()
        assert a.execute("SELECT memory.classify('falcon plans', NULL, NULL, 'acme')").fetchone() == ("restricted",)
        a.commit()


def test_a_changed_drift_lexicon_is_not_re_cached_from_an_older_snapshot(dsn, conn):
    conn.execute("SELECT memory.grant_consent('acme', 'u1', '{create_task,save_to_profile}')")
    insert = ("INSERT INTO memory.user_feedback (org_id, user_id, related_object_ref, comment) "
              "VALUES ('acme', 'u1', 'snapshot:1', %s) RETURNING comment_polarity")
    with rr(dsn) as a:
        assert a.execute(insert, ("quite zorky",)).fetchone() == (None,)
        a.commit()
        a.execute("SELECT 1")
        conn.execute("INSERT INTO memory.drift_lexicon (word, polarity) VALUES ('zorky', -1)")
        assert a.execute(insert, ("still zorky",)).fetchone() == (-1,)
        a.commit()
        assert a.execute(insert, ("zorky again",)).fetchone() == (-1,)
        a.commit()


def test_a_changed_retention_policy_is_not_re_cached_from_an_older_snapshot(dsn, conn):
    stamp = ("INSERT INTO memory.observations (org_id, content) VALUES ('acme', 'a note') "
             "RETURNING (expires_at - created_at) IS NOT DISTINCT FROM interval '40 days'")
    with rr(dsn) as a:
        a.execute(stamp)
        a.commit()
        a.execute("SELECT 1")
        conn.execute("INSERT INTO memory.retention_policies (org_id, tier, retention_days) VALUES ('acme', 'internal', 40)")
        assert a.execute(stamp).fetchone() == (True,)
        a.commit()
        assert a.execute(stamp).fetchone() == (True,)
        a.commit()


def test_rule_changes_applied_as_replica_still_reach_the_caches(dsn, conn):
    """Logical replication's apply and `session_replication_role = replica` restores skip ordinary
    triggers; the invalidating statement triggers are ENABLE ALWAYS, so the caches follow."""
    assert conn.execute("SELECT count(*), count(*) FILTER (WHERE tgenabled = 'A') FROM pg_trigger "
                        "WHERE tgname IN ('memory_rules_changed', 'memory_keys_changed', 'memory_secrets_changed')").fetchone() == (10, 10)
    assert conn.execute("SELECT count(*), count(*) FILTER (WHERE tgenabled = 'A') FROM pg_trigger "
                        "WHERE tgname IN ('memory_rules_changed_truncate', 'memory_keys_changed_truncate', 'memory_secrets_changed_truncate')").fetchone() == (10, 10)
    conn.execute("SELECT memory.grant_consent('acme', 'u1', '{create_task,save_to_profile}')")
    insert = ("INSERT INTO memory.user_feedback (org_id, user_id, related_object_ref, comment) "
              "VALUES ('acme', 'u1', 'snapshot:1', %s) RETURNING comment_polarity")
    with psycopg.connect(dsn, autocommit=True) as a:
        assert a.execute(insert, ("quite blorpy",)).fetchone() == (None,)
        assert a.execute("SELECT memory.classify('heron plans', NULL, NULL, 'acme')").fetchone() == ("internal",)
        with psycopg.connect(dsn, autocommit=True) as replica:
            replica.execute("SET session_replication_role = replica")
            replica.execute("INSERT INTO memory.drift_lexicon (word, polarity) VALUES ('blorpy', 1)")
            replica.execute("INSERT INTO memory.classification_rules (org_id, tier, target, pattern) VALUES ('acme', 'restricted', 'content', 'heron')")
        assert a.execute(insert, ("still blorpy",)).fetchone() == (1,)
        assert a.execute("SELECT memory.classify('heron plans', NULL, NULL, 'acme')").fetchone() == ("restricted",)


RATE = "INSERT INTO memory.user_feedback (org_id, user_id, related_object_ref, rating) VALUES ('acme', %s, %s, %s)"
DRIFT = "SELECT count(*) FROM memory.persona_drift_log WHERE user_id = %s"


_objects = iter(range(1, 1000))


def reversal(c, user):
    """Two ratings of a new object, the second the other way: a grade_reversal when observed."""
    obj = f"snapshot:{next(_objects)}"
    c.execute(RATE, (user, obj, "thumbs_up"))
    c.execute(RATE, (user, obj, "not_helpful"))


def test_the_detectors_cached_consent_follows_grants_and_revocations_of_other_sessions(dsn, conn):
    """The detectors keep each user's consent per backend; a new consent version, written by any
    session (or applied as replica), drops it in every backend."""
    assert conn.execute("SELECT count(*), count(*) FILTER (WHERE tgenabled = 'A') FROM pg_trigger "
                        "WHERE tgname IN ('memory_consents_changed', 'memory_consents_changed_truncate')").fetchone() == (2, 2)
    conn.execute("SELECT memory.grant_consent('acme', 'u1', '{create_task,save_to_profile}')")
    with psycopg.connect(dsn, autocommit=True) as a:
        reversal(a, "u1")
        assert conn.execute(DRIFT, ("u1",)).fetchone() == (1,)
        conn.execute("SELECT memory.revoke_consent('acme', 'u1', '{save_to_profile}')")
        reversal(a, "u1")
        assert conn.execute(DRIFT, ("u1",)).fetchone() == (1,)
        conn.execute("SELECT memory.grant_consent('acme', 'u1', '{save_to_profile}')")
        reversal(a, "u1")
        assert conn.execute(DRIFT, ("u1",)).fetchone() == (2,)
        with psycopg.connect(dsn, autocommit=True) as replica:
            replica.execute("SET session_replication_role = replica")
            replica.execute("SELECT memory.revoke_consent('acme', 'u1', '{save_to_profile}')")
        reversal(a, "u1")
        assert conn.execute(DRIFT, ("u1",)).fetchone() == (2,)


def test_the_detectors_cached_consent_follows_the_own_transaction_and_its_rollback(dsn, conn):
    with psycopg.connect(dsn) as a:
        reversal(a, "u2")  # consent never asked: not observed (and so cached)
        assert a.execute(DRIFT, ("u2",)).fetchone() == (0,)
        a.commit()
        a.execute("SELECT memory.grant_consent('acme', 'u2', '{create_task,save_to_profile}')")
        reversal(a, "u2")  # the grant of this transaction is in force for it
        assert a.execute(DRIFT, ("u2",)).fetchone() == (1,)
        a.rollback()
        reversal(a, "u2")  # rolled back: never granted
        assert a.execute(DRIFT, ("u2",)).fetchone() == (0,)
        a.commit()
        a.execute("SAVEPOINT s")
        a.execute("SELECT memory.grant_consent('acme', 'u2', '{create_task,save_to_profile}')")
        reversal(a, "u2")
        a.execute("ROLLBACK TO SAVEPOINT s")
        reversal(a, "u2")
        assert a.execute(DRIFT, ("u2",)).fetchone() == (0,)
        a.commit()


def test_a_consent_written_by_a_statement_that_fails_is_not_kept(dsn, conn):
    """The detectors read the consent after the command counter moved, so they may see a consent
    version written earlier in the same statement; if the statement then fails, that version is
    gone, and nothing read from it may stay cached."""
    conn.execute("CREATE FUNCTION public.boom() RETURNS trigger LANGUAGE plpgsql AS "
                 "$$ BEGIN RAISE EXCEPTION 'boom' USING ERRCODE = 'P0001'; END $$")
    # Named to fire after memory_drift (triggers fire in name order).
    conn.execute("CREATE TRIGGER zz_boom AFTER INSERT ON memory.user_feedback FOR EACH ROW "
                 "WHEN (NEW.related_object_ref = 'boom') EXECUTE FUNCTION public.boom()")
    with psycopg.connect(dsn, autocommit=True) as a:
        with pytest.raises(psycopg.errors.RaiseException):
            a.execute("WITH c AS (INSERT INTO memory.consents (org_id, user_id, version, scopes, recorded_at, collection_method, recorded_by)"
                      " VALUES ('acme', 'u9', 1, '{create_task,save_to_profile}', now(), 'dialog', 'test') RETURNING 1)"
                      " INSERT INTO memory.user_feedback (org_id, user_id, related_object_ref, rating) SELECT 'acme', 'u9', 'boom', 'thumbs_up' FROM c")
        reversal(a, "u9")
        assert conn.execute(DRIFT, ("u9",)).fetchone() == (0,)
    conn.execute("DROP TRIGGER zz_boom ON memory.user_feedback")


def test_a_reversal_within_one_statement_is_one_finding(dsn, conn):
    conn.execute("SELECT memory.grant_consent('acme', 'u8', '{create_task,save_to_profile}')")
    conn.execute("INSERT INTO memory.user_feedback (org_id, user_id, related_object_ref, rating) VALUES "
                 "('acme', 'u8', 'snapshot:1', 'thumbs_up'), ('acme', 'u8', 'snapshot:1', 'not_helpful')")
    assert conn.execute(DRIFT, ("u8",)).fetchone() == (1,)
    conn.execute("INSERT INTO memory.user_feedback (org_id, user_id, related_object_ref, rating) VALUES "
                 "('acme', 'u8', 'snapshot:2', 'thumbs_up'), ('acme', 'u8', 'snapshot:2', 'not_helpful'), ('acme', 'u8', 'snapshot:2', 'thumbs_up')")
    # Three ratings in one statement share created_at: each is compared with the one before it in
    # id order, so (up, down, up) in some order has one or two reversals, never one per pair.
    assert conn.execute(DRIFT, ("u8",)).fetchone()[0] in (2, 3)


def test_rows_of_earlier_statements_of_a_transaction_come_before_whatever_their_ids(dsn, conn):
    """Every statement of a transaction shares now(): the rows of earlier statements come before
    the new row by the command that inserted them (read through a combo command id when the row
    was changed in a rolled-back subtransaction), not by their ids."""
    conn.execute("SELECT memory.grant_consent('acme', 'u7', '{create_task,save_to_profile}')")
    ins = ("INSERT INTO memory.user_feedback (id, org_id, user_id, related_object_ref, rating) "
           "VALUES (%s, 'acme', 'u7', 'snapshot:1', %s)")
    with psycopg.connect(dsn) as a:
        a.execute(ins, ("ffffffff-ffff-4fff-bfff-ffffffffffff", "thumbs_up"))
        a.execute("SAVEPOINT s")
        a.execute("UPDATE memory.user_feedback SET comment = 'x' WHERE user_id = 'u7'")
        a.execute("ROLLBACK TO SAVEPOINT s")
        a.execute(ins, ("11111111-1111-4111-8111-111111111111", "not_helpful"))
        a.execute(ins, ("22222222-2222-4222-8222-222222222222", "thumbs_up"))
        a.commit()
    rows = conn.execute("SELECT prior_signal->>'value', current_signal->>'value' FROM memory.persona_drift_log "
                        "WHERE user_id = 'u7'").fetchall()
    assert sorted(rows) == [("not_helpful", "thumbs_up"), ("thumbs_up", "not_helpful")]


def test_a_revocation_written_in_the_same_statement_is_in_force_for_its_rows(dsn, conn):
    """A consent version written earlier in the statement (by a role that may write the table
    directly) reaches a backend that had the user's consent cached, before the rows' detectors run."""
    conn.execute("SELECT memory.grant_consent('acme', 'u6', '{create_task,save_to_profile}')")
    with psycopg.connect(dsn, autocommit=True) as a:
        reversal(a, "u6")
        assert a.execute(DRIFT, ("u6",)).fetchone() == (1,)
        a.execute("WITH c AS (INSERT INTO memory.consents (org_id, user_id, version, scopes, recorded_at, collection_method, recorded_by)"
                  " VALUES ('acme', 'u6', 2, '{create_task}', now(), 'dialog', 'test') RETURNING 1)"
                  " INSERT INTO memory.user_feedback (org_id, user_id, related_object_ref, rating)"
                  " SELECT 'acme', 'u6', 'snapshot:same', r FROM c, unnest(ARRAY['thumbs_up', 'not_helpful']) r")
        assert a.execute(DRIFT, ("u6",)).fetchone() == (1,)


def test_a_revocation_is_in_force_for_a_transaction_that_began_before_it(dsn, conn):
    """Consent is read as of now, not as of a REPEATABLE READ transaction's snapshot: a revocation
    committed meanwhile stops the observation at once, and is never cached as granted."""
    conn.execute("SELECT memory.grant_consent('acme', 'u3', '{create_task,save_to_profile}')")
    with rr(dsn) as a:
        a.execute("SELECT 1")
        conn.execute("SELECT memory.revoke_consent('acme', 'u3', '{save_to_profile}')")
        reversal(a, "u3")
        assert a.execute(DRIFT, ("u3",)).fetchone() == (0,)
        a.commit()
        reversal(a, "u3")
        a.commit()
    assert conn.execute(DRIFT, ("u3",)).fetchone() == (0,)


def test_a_database_that_is_not_utf8_is_refused_before_anything_is_created(dsn, conn):
    for enc in ("LATIN1", "SQL_ASCII"):
        conn.execute(f"DROP DATABASE IF EXISTS enc_{enc.lower()}")
        conn.execute(f"CREATE DATABASE enc_{enc.lower()} ENCODING '{enc}' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0")
        try:
            with psycopg.connect(dsn.replace(f"dbname={conn.info.dbname}", f"dbname=enc_{enc.lower()}"), autocommit=True) as c:
                with pytest.raises(psycopg.errors.FeatureNotSupported) as e:
                    c.execute("CREATE EXTENSION memory_ext")
                assert "requires a UTF-8 database" in str(e.value) and enc in str(e.value)
                assert c.execute("SELECT count(*) FROM pg_namespace WHERE nspname = 'memory'").fetchone() == (0,)
        finally:
            conn.execute(f"DROP DATABASE IF EXISTS enc_{enc.lower()} WITH (FORCE)")


def test_a_rotated_audit_key_is_not_re_cached_from_an_older_snapshot(dsn, conn):
    conn.execute("SELECT memory.audit_append('x.first', '{}', 'acme')")
    with rr(dsn) as a:
        a.execute("SELECT 1")
        (new,) = conn.execute("SELECT memory.audit_rotate_key()").fetchone()
        # This backend reads the key for the first time: the one in force now.
        a.execute("SELECT memory.audit_append('x.during', '{}', 'acme')")
        a.commit()
        a.execute("SELECT memory.audit_append('x.after', '{}', 'acme')")
        a.commit()
    rows = dict(conn.execute("SELECT event_type, key_id FROM memory.audit_pending WHERE event_type LIKE 'x.%'").fetchall())
    assert rows["x.during"] == new and rows["x.after"] == new and rows["x.first"] < new
    conn.execute("SELECT memory.audit_integrate()")
    assert conn.execute("SELECT bool_and(ok) FROM memory.audit_verify()").fetchone() == (True,)


def test_org_rules_and_grants_are_read_by_the_leader_under_forced_parallelism(dsn, conn):
    """classify with an org answers for the caller, which a parallel worker cannot know (it does not
    see the leader's SECURITY DEFINER frames): it is PARALLEL RESTRICTED, so even with parallelism
    forced it runs in the leader, reads the org's rules and refuses another org."""
    conn.execute("SELECT * FROM memory.setup_roles()")
    conn.execute("DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'par_w') THEN "
                 "CREATE ROLE par_w LOGIN IN ROLE memory_writer; END IF; END $$")
    conn.execute("SELECT memory.grant_org('par_w', 'acme')")
    conn.execute("INSERT INTO memory.classification_rules (org_id, tier, target, pattern) VALUES ('acme', 'restricted', 'content', 'osprey')")
    with psycopg.connect(dsn.replace("user=postgres", "user=par_w"), autocommit=True) as w:
        # force_parallel_mode is debug_parallel_query from PostgreSQL 16.
        w.execute("SET force_parallel_mode = on" if w.info.server_version < 160000 else "SET debug_parallel_query = on")
        plan = "\n".join(r[0] for r in w.execute("EXPLAIN VERBOSE SELECT memory.classify('osprey', NULL, NULL, 'acme')").fetchall())
        assert "Gather" not in plan or "_classify" not in plan.split("Gather", 1)[1], plan
        for _ in range(2):
            assert w.execute("SELECT memory.classify('osprey', NULL, NULL, 'acme')").fetchone() == ("restricted",)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            w.execute("SELECT memory.classify('osprey', NULL, NULL, 'globex')")


def test_the_detectors_refuse_an_index_they_cannot_read_rightly(dsn, conn):
    """The drift detectors scan memory_ext's own indexes directly: an index rebuilt with other key
    columns, or left invalid, is refused (55000) rather than read with the wrong keys."""
    conn.execute("SELECT memory.grant_consent('acme', 'u1', '{create_task,save_to_profile}')")
    insert = ("INSERT INTO memory.user_feedback (org_id, user_id, related_object_ref, rating, comment) "
              "VALUES ('acme', 'u1', 'snapshot:1', 'agree', 'I agree')")
    with psycopg.connect(dsn, autocommit=True) as a:
        a.execute(insert)
        conn.execute("DROP INDEX memory.user_feedback_polarity")
        conn.execute("CREATE INDEX user_feedback_polarity ON memory.user_feedback (org_id, comment_polarity, user_id, created_at) "
                      "WHERE comment_polarity IS NOT NULL")
        with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState) as e:
            a.execute(insert)
        assert "cannot read index" in str(e.value)
        conn.execute("DROP INDEX memory.user_feedback_polarity")
        conn.execute("CREATE INDEX user_feedback_polarity ON memory.user_feedback (org_id, user_id, comment_polarity, created_at, id) "
                     "WHERE comment_polarity IS NOT NULL")
        conn.execute("UPDATE pg_index SET indisvalid = false WHERE indexrelid = 'memory.user_feedback_polarity'::regclass")
        with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState) as e:
            a.execute(insert)
        assert "is not valid" in str(e.value)
        conn.execute("REINDEX INDEX memory.user_feedback_polarity")
        a.execute(insert)


def test_a_grant_rolled_back_is_not_kept_by_the_backends_cache(dsn, conn):
    """memory_internal._may_act_for caches per backend (src/trust.rs): a grant read while its
    transaction (or savepoint) was open must not outlive its rollback, in the backend that wrote it."""
    conn.execute("SELECT * FROM memory.setup_roles()")
    conn.execute("DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'rb_r') THEN "
                 "CREATE ROLE rb_r LOGIN IN ROLE memory_reader; END IF; END $$")
    conn.execute("SELECT memory.grant_org('rb_r', 'acme')")
    probe = "SELECT count(*) FROM memory.retrieve('globex', 'aspirin')"
    with psycopg.connect(dsn) as c:  # one backend, the superuser's, acting as rb_r
        for savepoint in (False, True):
            if savepoint:
                c.execute("SAVEPOINT s")
            c.execute("SELECT memory.grant_org('rb_r', 'globex')")
            c.execute("SET LOCAL ROLE rb_r")
            assert c.execute(probe).fetchone() == (0,), "the grant holds inside its transaction"
            c.execute("RESET ROLE")
            c.execute("ROLLBACK TO SAVEPOINT s" if savepoint else "ROLLBACK")
            c.execute("SET LOCAL ROLE rb_r")
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                c.execute(probe)
            c.rollback()


def test_a_backend_that_re_creates_the_extension_finds_its_new_schemas(dsn, conn):
    """The schemas' oids, the extension's and the clearances are kept per backend (every
    governed row asks for them). Re-created in the same backend (DROP EXTENSION keeps schema
    memory, so its oid stays; memory_internal's is new): memory_ext's SECURITY DEFINER frames must
    still be seen as its own, or a tenant role's call would run with the definer's orgs (this
    failed before the schema callback), and a grant revoked afterwards is seen there."""
    conn.autocommit = True
    conn.execute("SELECT memory.setup_roles()")
    conn.execute("DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'recreate_r') THEN "
                 "CREATE ROLE recreate_r IN ROLE memory_reader; END IF; END $$")

    def as_reader_of_acme():
        # The grants recall needs, given by hand (memory.setup_roles also touches the roles, and
        # a role change alone would drop the backend's caches).
        conn.execute("GRANT USAGE ON SCHEMA memory TO memory_reader")
        conn.execute("GRANT EXECUTE ON FUNCTION memory.recall(text, text, int, text, jsonb, anycompatible, regclass, timestamptz) TO memory_reader")
        conn.execute("SELECT memory.grant_org('recreate_r', 'acme')")
        conn.execute("SET ROLE recreate_r")
        try:
            assert conn.execute("SELECT count(*) FROM memory.recall('acme', 'anything')").fetchone() == (0,)
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute("SELECT count(*) FROM memory.recall('globex', 'anything')")
        finally:
            conn.execute("RESET ROLE")

    as_reader_of_acme()
    old = conn.execute("SELECT 'memory_internal'::regnamespace::oid").fetchone()[0]
    conn.execute("DROP EXTENSION memory_ext CASCADE")
    conn.execute("CREATE EXTENSION memory_ext")
    assert conn.execute("SELECT 'memory_internal'::regnamespace::oid").fetchone()[0] != old
    as_reader_of_acme()
    with psycopg.connect(dsn, autocommit=True) as other:
        other.execute("SELECT memory.revoke_org('recreate_r', 'acme')")
    conn.execute("SET ROLE recreate_r")
    try:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT count(*) FROM memory.recall('acme', 'anything')")
    finally:
        conn.execute("RESET ROLE")
