"""Consent through a client (SPEC §6): a writer bound to its org records consent and contexts;
another org's writer can neither read nor change them; concurrent grants keep versions gapless;
a revocation's side effects commit or roll back with it."""
import concurrent.futures

import psycopg
import pytest


@pytest.fixture
def writers(dsn, conn):
    conn.execute("SELECT * FROM memory.setup_roles()")
    for role, org in (("consent_acme", "acme"), ("consent_globex", "globex")):
        conn.execute(f"DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{role}') THEN "
                     f"CREATE ROLE {role} LOGIN IN ROLE memory_writer; END IF; END $$")
        conn.execute("SELECT memory.grant_org(%s, %s)", (role, org))
    return {org: dsn.replace("user=postgres", f"user={role}") for role, org in (("consent_acme", "acme"), ("consent_globex", "globex"))}


def test_a_bound_writer_records_consent_and_contexts_of_its_org_only(writers):
    with psycopg.connect(writers["acme"], autocommit=True) as a, psycopg.connect(writers["globex"], autocommit=True) as g:
        assert a.execute("SELECT memory.grant_consent('acme', 'u1', '{create_task,save_to_thread}')").fetchone() == (1,)
        a.execute("INSERT INTO memory.user_contexts (org_id, user_id, scope, thread_id, source, fields) "
                  "VALUES ('acme', 'u1', 'thread', 'th-1', 'save_as_thread', '{\"research_style\": \"top-down\"}')")
        assert a.execute("SELECT state FROM memory.consent_status('acme', 'u1') WHERE scope = 'save_to_thread'").fetchone() == ("granted",)
        # Another org's writer: no door into acme's consent, and acme's rows are invisible to it.
        for q in ("SELECT memory.grant_consent('acme', 'u1', '{save_to_profile}')",
                  "SELECT memory.revoke_consent('acme', 'u1')",
                  "SELECT * FROM memory.consent_status('acme', 'u1')",
                  "SELECT memory.consent_receipt('acme', 'u1')"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                g.execute(q)
        assert g.execute("SELECT count(*) FROM memory.consents").fetchone() == (0,)
        assert g.execute("SELECT count(*) FROM memory.user_contexts").fetchone() == (0,)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            g.execute("INSERT INTO memory.user_contexts (org_id, user_id, scope, task_id, source) VALUES ('acme', 'u1', 'task', 't', 'task')")
        # Nor can the writer change history directly.
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            a.execute("INSERT INTO memory.consents (org_id, user_id, version, scopes, recorded_at, collection_method, recorded_by) "
                      "VALUES ('acme', 'u1', 2, '{save_to_profile}', now(), 'forged', 'me')")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            a.execute("UPDATE memory.user_contexts SET consent_blocked = false")


def test_concurrent_grants_keep_versions_gapless(writers):
    def grant(i):
        with psycopg.connect(writers["acme"], autocommit=True) as c:
            scope = ("create_task", "save_to_thread", "save_to_profile", "training_use_allowed")[i % 4]
            return c.execute("SELECT memory.grant_consent('acme', 'u7', ARRAY[%s]::memory.consent_scope[])", (scope,)).fetchone()[0]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        versions = sorted(pool.map(grant, range(24)))
    assert versions == list(range(1, 25))
    with psycopg.connect(writers["acme"], autocommit=True) as c:
        assert c.execute("SELECT scopes::text[] FROM memory.consents WHERE user_id = 'u7' AND version = 24").fetchone()[0] == \
            ["create_task", "save_to_thread", "save_to_profile", "training_use_allowed"]


def test_a_revocation_rolled_back_leaves_everything_in_force(writers, conn):
    with psycopg.connect(writers["acme"]) as a:
        a.execute("SELECT memory.grant_consent('acme', 'u2', '{save_to_profile}', '{\"research_depth\": \"deep\"}')")
        a.commit()
        a.execute("SELECT memory.revoke_consent('acme', 'u2')")
        assert a.execute("SELECT count(*) FROM memory.user_contexts WHERE user_id = 'u2'").fetchone() == (0,)
        a.rollback()
        assert a.execute("SELECT count(*) FROM memory.user_contexts WHERE user_id = 'u2'").fetchone() == (1,)
        assert a.execute("SELECT max(version) FROM memory.consents WHERE user_id = 'u2'").fetchone() == (1,)
    conn.execute("SELECT memory.audit_integrate()")
    events = [r[0] for r in conn.execute("SELECT event_type FROM memory.audit_log WHERE chain_id = 'acme' AND event_type LIKE 'memory.consent.%' ORDER BY seq")]
    assert events == ["memory.consent.grant"]  # the revocation's event went with its transaction


def test_a_revocation_records_its_time_whatever_the_datestyle_and_timezone(writers):
    """The revocation's per-org part is called through memory_internal._org_call, which writes the
    time into the call (so that Citus can delegate it): under DateStyle SQL and TimeZone
    Asia/Kolkata a time prints as 'IST', which reads back as Israel's time, yet the candidate is
    withdrawn at the time given, the one the new consent version records."""
    with psycopg.connect(writers["acme"], autocommit=True) as a:
        a.execute("SELECT memory.grant_consent('acme', 'u_tz', '{training_use_allowed}')")
        a.execute("INSERT INTO memory.training_candidates (org_id, user_id, object_ref) VALUES ('acme', 'u_tz', 'obj:1')")
        a.execute("SET DateStyle = 'SQL, DMY'")
        a.execute("SET TimeZone = 'Asia/Kolkata'")
        # (The settings matter before PostgreSQL 18: a time's text reads back as another time.
        # 18 reads the abbreviations of the current TimeZone first, so there it reads back right.)
        if a.execute("SELECT current_setting('server_version_num')::int < 180000").fetchone()[0]:
            assert a.execute("SELECT now()::text::timestamptz <> now()").fetchone()[0]
        a.execute("SELECT memory.revoke_consent('acme', 'u_tz', '{training_use_allowed}', now() - interval '0.000123 second')")
        # (Compared in SQL: psycopg reads no time in this DateStyle.)
        same, apart = a.execute(
            "SELECT t.withdrawn_at = c.recorded_at, (t.withdrawn_at - c.recorded_at)::text FROM memory.training_candidates t, memory.consents c"
            " WHERE t.org_id = 'acme' AND t.user_id = 'u_tz' AND c.org_id = 'acme' AND c.user_id = 'u_tz' AND c.version = 2").fetchone()
    assert same, apart


def test_a_write_under_consent_is_not_missed_by_a_concurrent_revocation(writers):
    """A training candidate written in a transaction still open when the revocation starts: the
    revocation waits for it and revokes it too."""
    import threading
    with psycopg.connect(writers["acme"], autocommit=True) as c:
        c.execute("SELECT memory.grant_consent('acme', 'u9', '{training_use_allowed}')")
    a = psycopg.connect(writers["acme"])
    a.execute("INSERT INTO memory.training_candidates (org_id, user_id, object_ref) VALUES ('acme', 'u9', 'snapshot:9')")
    result = {}

    def revoke():
        with psycopg.connect(writers["acme"], autocommit=True) as b:
            result["counts"] = b.execute("SELECT memory.revoke_consent('acme', 'u9', '{training_use_allowed}')").fetchone()[0]
    t = threading.Thread(target=revoke)
    t.start()
    t.join(1.0)
    assert t.is_alive(), "the revocation waits for the open write"
    a.commit()
    a.close()
    t.join(10)
    assert result["counts"]["training_candidates_revoked"] == 1
    with psycopg.connect(writers["acme"], autocommit=True) as c:
        assert c.execute("SELECT withdrawal_status FROM memory.training_candidates WHERE user_id = 'u9'").fetchone() == ("revoked",)


def test_sensitive_input_is_refused_naming_the_detector_never_the_value(writers):
    """MX007 through a client: the SQLSTATE, the detector in DETAIL, no value anywhere in the error."""
    secrets = {
        "email": "reach me at jane.doe@example.com",
        "phone": "call +44 20 7946 0958",
        "iban": "salary to GB82 WEST 1234 5698 7654 32",
        "bitcoin_address": "tips: bc1qw508d6qejxtdg4y5r3zarvary0c5xw7kv8f3t4",
        "stripe_key": "sk_live_4eC39HqLyjWDarjtT1zdp7dc",
        "jwt": "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.sig",
        "email_fullwidth": "ｊａｎｅ＠ｅｘａｍｐｌｅ．ｃｏｍ",
    }
    with psycopg.connect(writers["acme"], autocommit=True) as a:
        a.execute("SELECT memory.grant_consent('acme', 'u9', '{create_task,save_to_thread}')")
        for name, value in secrets.items():
            with pytest.raises(psycopg.Error) as e:
                a.execute("INSERT INTO memory.user_contexts (org_id, user_id, scope, thread_id, source, fields) "
                          "VALUES ('acme', 'u9', 'thread', 'th-9', 'save_as_thread', jsonb_build_object('user_focus_reason', %s::text))",
                          (value,))
            diag = e.value.diag
            assert e.value.sqlstate == "MX007", (name, e.value)
            assert diag.message_detail == f"detector: {name.removesuffix('_fullwidth')}"
            everything = " ".join(filter(None, (diag.message_primary, diag.message_detail, diag.message_hint, diag.context)))
            for part in value.split():
                if len(part) > 6:
                    assert part not in everything, (name, everything)
        assert a.execute("SELECT count(*) FROM memory.user_contexts WHERE user_id = 'u9'").fetchone() == (0,)
        # The detectors answer any client by name.
        assert a.execute("SELECT memory.detect(%s)", (secrets["iban"],)).fetchone() == (["iban"],)


def test_drift_detectors_run_for_a_bound_writer_and_follow_lexicon_edits_of_other_sessions(writers, conn):
    """The Rust drift triggers from a client: a writer bound to acme (no rights on the drift log or
    the consents) gets its reversal detected and chained in acme's chain, under a pseudonym; a
    lexicon word the owner adds in another session applies to the writer's next comment in its
    already open session (the backends' cached lexicon is invalidated); another org's writer
    cannot write acme's feedback."""
    with psycopg.connect(writers["acme"], autocommit=True) as a, psycopg.connect(writers["globex"], autocommit=True) as g:
        a.execute("SELECT memory.grant_consent('acme', 'u9', '{create_task,save_to_profile}')")
        a.execute("INSERT INTO memory.user_feedback (org_id, user_id, related_object_ref, rating, created_at) "
                  "VALUES ('acme', 'u9', 'snapshot:9', 'thumbs_up', now() - interval '2 days')")
        a.execute("INSERT INTO memory.user_feedback (org_id, user_id, related_object_ref, comment) VALUES ('acme', 'u9', 'snapshot:9', 'plain wrong')")
        assert a.execute("SELECT comment_polarity FROM memory.user_feedback WHERE comment = 'plain wrong'").fetchone() == (None,)
        # The owner adds a word, in its own session.
        conn.execute("INSERT INTO memory.drift_lexicon (word, polarity) VALUES ('wrong', -1)")
        try:
            a.execute("INSERT INTO memory.user_feedback (org_id, user_id, related_object_ref, rating, comment) "
                      "VALUES ('acme', 'u9', 'snapshot:9', 'not_helpful', 'that was wrong')")
            assert a.execute("SELECT comment_polarity FROM memory.user_feedback WHERE comment = 'that was wrong'").fetchone() == (-1,)
        finally:
            conn.execute("DELETE FROM memory.drift_lexicon WHERE word = 'wrong'")
        rows = conn.execute("SELECT signal_kind::text, prior_signal->>'value', current_signal->>'value', triggers_alert "
                            "FROM memory.persona_drift_log WHERE org_id = 'acme' AND user_id = 'u9'").fetchall()
        assert rows == [("grade_reversal", "thumbs_up", "not_helpful", True)]
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            g.execute("INSERT INTO memory.user_feedback (org_id, user_id, related_object_ref, rating) VALUES ('acme', 'u9', 'snapshot:9', 'agree')")
    conn.execute("SELECT memory.audit_integrate()")
    events = conn.execute("SELECT payload, actor_id FROM memory.audit_log WHERE chain_id = 'acme' AND event_type = 'memory.drift.detected'").fetchall()
    assert len(events) == 1
    payload, actor = events[0]
    assert payload["signalKind"] == "grade_reversal" and payload["triggersAlert"] is True
    assert payload["userId"].startswith("h:") and "u9" not in str(payload)
    assert actor.endswith("role:consent_acme")
    assert conn.execute("SELECT bool_and(ok) FROM memory.audit_verify('acme')").fetchone() == (True,)


def test_drift_triggers_refuse_other_tables(conn):
    """memory_internal._detect_drift and memory_internal._feedback_polarity run only on memory_ext's own tables, even
    for the extension owner (they would otherwise run the owner's statements over any table)."""
    conn.execute("DROP TABLE IF EXISTS public.user_feedback")
    conn.execute("CREATE TABLE public.user_feedback (LIKE memory.user_feedback INCLUDING DEFAULTS)")
    try:
        conn.execute("CREATE TRIGGER d AFTER INSERT ON public.user_feedback FOR EACH ROW EXECUTE FUNCTION memory_internal._detect_drift()")
        conn.execute("CREATE TRIGGER p BEFORE INSERT ON public.user_feedback FOR EACH ROW EXECUTE FUNCTION memory_internal._feedback_polarity()")
        for name in ("memory_internal._feedback_polarity()", "memory_internal._detect_drift()"):
            with pytest.raises(psycopg.errors.TriggerProtocolViolated) as e:
                conn.execute("INSERT INTO public.user_feedback (id, org_id, user_id, related_object_ref, rating) "
                             "VALUES (gen_random_uuid(), 'acme', 'u1', 'x', 'agree')")
            assert name in str(e.value) and "instead of memory.user_feedback" in str(e.value)
            conn.execute("DROP TRIGGER IF EXISTS p ON public.user_feedback")
        assert conn.execute("SELECT count(*) FROM public.user_feedback").fetchone() == (0,)
    finally:
        conn.execute("DROP TABLE public.user_feedback")
