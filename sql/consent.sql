-- Consent-gated user memory (docs/design.md#consent-and-drift):
-- versioned consent, user contexts written under it, and what a revocation does to them, in
-- the writing transaction. Every table carries org_id and user_id and falls under §8's
-- row-level security (security.sql).

CREATE TYPE memory.consent_scope AS ENUM ('create_task', 'save_to_thread', 'save_to_profile', 'training_use_allowed');
COMMENT ON TYPE memory.consent_scope IS 'What a user consented to.';
CREATE TYPE memory.context_scope AS ENUM ('task', 'thread', 'profile');
COMMENT ON TYPE memory.context_scope IS 'Where a user context lives: one task (24 h after it ends), a thread, or the profile.';
CREATE TYPE memory.drift_signal AS ENUM ('grade_reversal', 'feedback_conflict', 'refresh_stance_flip', 'watch_question_resolved_then_reopened');
COMMENT ON TYPE memory.drift_signal IS 'Kinds of persona drift (docs/design.md#consent-and-drift).';

-- ------------------------------------------------------------------------------------------------
-- Consent: append-only versions per (org, user). Version n is the consent in force after the
-- n-th grant or revocation: `scopes` holds every scope granted at that point.

CREATE TABLE memory.consents (
    org_id            text NOT NULL CHECK (org_id ~ '[^[:space:]]'),
    user_id           text NOT NULL CHECK (user_id ~ '[^[:space:]]'),
    version           int NOT NULL CHECK (version >= 1),
    scopes            memory.consent_scope[] NOT NULL,
    recorded_at       timestamptz NOT NULL,
    collection_method text NOT NULL CHECK (collection_method ~ '^[a-z][a-z0-9_]{0,62}$'),
    revoked_at        timestamptz,
    revoked_scopes    memory.consent_scope[],
    recorded_by       text NOT NULL,
    receipt_id        uuid NOT NULL DEFAULT gen_random_uuid() UNIQUE,
    written_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (org_id, user_id, version)
);
COMMENT ON TABLE memory.consents IS
  'Consent versions per (org, user), append-only: version n holds every scope in force after the n-th grant or revocation (revoked_at and revoked_scopes on a revocation''s version). Written by memory.grant_consent and memory.revoke_consent.';

CREATE FUNCTION memory_internal._consent_append_only()
RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Only an account deletion (memory.erase_subject, which leaves a deletion stub) removes them.
    IF TG_OP = 'DELETE' AND memory_internal._consent_gate_open() THEN
        RETURN OLD;
    END IF;
    -- A version is never changed. memory_ext's own functions (running as the table's owner)
    -- rewrite the latest version unchanged when they append the next one (memory_internal._consent_append):
    -- a new row version that conflicts with the share lock of a write gated on consent.
    IF TG_OP = 'UPDATE' AND NEW IS NOT DISTINCT FROM OLD
       AND (SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid OPERATOR(pg_catalog.=) TG_RELID)
           OPERATOR(pg_catalog.=) (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname OPERATOR(pg_catalog.=) current_user) THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION '% is append-only: % is not allowed', memory_internal._table_of(TG_RELID)::regclass, TG_OP
        USING ERRCODE = 'MX002', HINT = 'Consent history is compliance evidence: a grant or a revocation writes a new version.';
END $$;
CREATE TRIGGER memory_append_only BEFORE UPDATE OR DELETE ON memory.consents
    FOR EACH ROW EXECUTE FUNCTION memory_internal._consent_append_only();
CREATE TRIGGER memory_append_only_truncate BEFORE TRUNCATE ON memory.consents
    FOR EACH STATEMENT EXECUTE FUNCTION memory_internal._consent_append_only();

-- A change of consent rows drops the consents the drift detectors cached per backend (src/drift.rs),
-- in every session_replication_role (finalize.sql): the trigger only sends an invalidation, before
-- the row is written (so a detector later in the same statement sees it), and returns the row.
CREATE TRIGGER memory_consents_changed BEFORE INSERT OR UPDATE OR DELETE ON memory.consents
    FOR EACH ROW EXECUTE FUNCTION memory_internal._consents_changed();
CREATE TRIGGER memory_consents_changed_truncate AFTER TRUNCATE ON memory.consents
    FOR EACH STATEMENT EXECUTE FUNCTION memory_internal._consents_changed();

-- The scopes in force for (org, user): those of the latest version, NULL when consent was never
-- asked. The one rule of "consent in force" (memory_core::consent's notes) in SQL; the drift
-- detectors read the same by an index scan, for speed (src/drift.rs, consent_in_force).
-- (PL/pgSQL, as the other readers of the consent tables: Citus plans no parameter of a SQL
-- function.)
CREATE FUNCTION memory_internal._consent_scopes(p_org text, p_user text)
RETURNS memory.consent_scope[] LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN (SELECT c.scopes FROM memory.consents c
             WHERE c.org_id OPERATOR(pg_catalog.=) p_org AND c.user_id OPERATOR(pg_catalog.=) p_user
             ORDER BY c.version DESC LIMIT 1);
END $$;

-- The same for a write gated on consent: the latest version is share-locked, and its scopes are
-- the answer only while it is still the latest. Every grant or revocation rewrites the latest
-- version (unchanged) before it appends the next one (memory_internal._consent_append), so:
-- - a revocation under way when the lock is asked for makes this write wait for it; at READ
--   COMMITTED the write then locks and reads the revocation's version (MX003);
-- - a revocation that committed after this transaction's snapshot (REPEATABLE READ,
--   SERIALIZABLE) makes the lock fail with 40001 (could not serialize access due to concurrent
--   update): the write never commits under a consent revoked before it;
-- - a write that locked first makes the revocation wait until it ends, and the revocation's
--   effects then see the write (memory_internal._consent_append raises 40001 in a revocation at a
--   snapshot isolation level that had to wait, as its snapshot cannot see it).
CREATE FUNCTION memory_internal._consent_scopes_locked(p_org text, p_user text)
RETURNS memory.consent_scope[] LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v      int;
    scopes memory.consent_scope[];
BEGIN
    FOR attempt IN 1 .. 100 LOOP
        SELECT c.version, c.scopes INTO v, scopes FROM memory.consents c
         WHERE c.org_id OPERATOR(pg_catalog.=) p_org AND c.user_id OPERATOR(pg_catalog.=) p_user
         ORDER BY c.version DESC LIMIT 1 FOR SHARE;
        -- (At READ COMMITTED the lock may have waited for a new version: lock that one instead.)
        IF v IS NOT DISTINCT FROM (SELECT max(c.version) FROM memory.consents c
                                    WHERE c.org_id OPERATOR(pg_catalog.=) p_org AND c.user_id OPERATOR(pg_catalog.=) p_user) THEN
            RETURN scopes;
        END IF;
    END LOOP;
    RAISE EXCEPTION 'consent of user "%" of org "%" is being changed concurrently', p_user, p_org
        USING ERRCODE = '40001', HINT = 'Retry the transaction.';
END $$;

-- The check of a write gated on one scope: MX003 with the scope unless it is in force (read
-- under the share lock, _consent_scopes_locked).
CREATE FUNCTION memory_internal._require_scope(p_org text, p_user text, p_scope memory.consent_scope)
RETURNS void LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NOT p_scope = ANY (coalesce(memory_internal._consent_scopes_locked(p_org, p_user), '{}')) THEN
        RAISE EXCEPTION 'profile_consent_required' USING ERRCODE = 'MX003', DETAIL = 'required_scopes: ' || p_scope;
    END IF;
END $$;

-- Checks shared by the consent functions; returns nothing or raises 22023 / 42501.
CREATE FUNCTION memory_internal._consent_args(p_org text, p_user text, p_at timestamptz)
RETURNS void LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF memory_internal._blank(p_org) OR memory_internal._blank(p_user) THEN
        RAISE EXCEPTION 'consent needs an org_id and a user_id' USING ERRCODE = '22023';
    END IF;
    IF p_at IS NULL OR NOT isfinite(p_at) THEN
        RAISE EXCEPTION 'at must be a finite time, got %', p_at USING ERRCODE = '22023';
    END IF;
    -- Consent is recorded when it is given, not ahead of it.
    IF p_at > now() + memory_internal._max_clock_skew() THEN
        RAISE EXCEPTION 'at may not be in the future, got %', p_at USING ERRCODE = '22023';
    END IF;
    PERFORM memory_internal._require_org(p_org);
END $$;

-- Appends the next version for (org, user): the scopes in force plus `added` minus `removed`
-- (a revocation when `removed` is set). Concurrent writers of one user serialize on the latest
-- version's row; one that lost a race (its version number taken meanwhile) reads again and
-- retries, so versions stay gapless without a lock over other users. At a snapshot isolation
-- level a lost race cannot be read past: 40001, retry the transaction.
CREATE FUNCTION memory_internal._consent_append(p_org text, p_user text, added memory.consent_scope[], removed memory.consent_scope[],
                                       p_at timestamptz, method text)
RETURNS memory.consents LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    prev   memory.consents;
    row    memory.consents;
    scopes memory.consent_scope[];
    busy   boolean := false;
BEGIN
    -- A revocation at a snapshot isolation level (REPEATABLE READ, SERIALIZABLE) that has to wait
    -- for a write gated on consent (which share-locks the latest version) cannot see what that
    -- write committed, so it would leave it in place: it waits, then fails with 40001 (retried,
    -- it sees the write and removes it).
    IF removed IS NOT NULL AND pg_catalog.current_setting('transaction_isolation') <> 'read committed' THEN
        BEGIN
            PERFORM 1 FROM memory.consents c
              WHERE c.org_id OPERATOR(pg_catalog.=) p_org AND c.user_id OPERATOR(pg_catalog.=) p_user
              ORDER BY c.version DESC LIMIT 1 FOR UPDATE NOWAIT;
        EXCEPTION WHEN lock_not_available THEN
            busy := true;
        END;
    END IF;
    FOR attempt IN 1 .. 100 LOOP
        SELECT * INTO prev FROM memory.consents c
         WHERE c.org_id OPERATOR(pg_catalog.=) p_org AND c.user_id OPERATOR(pg_catalog.=) p_user
         ORDER BY c.version DESC LIMIT 1 FOR UPDATE;
        IF busy THEN
            RAISE EXCEPTION 'consent of user "%" of org "%" was in use by a concurrent write', p_user, p_org
                USING ERRCODE = '40001', HINT = 'Retry the transaction: a revocation at REPEATABLE READ or SERIALIZABLE cannot see what that write committed.';
        END IF;
        -- History runs forward: a version is not recorded before the one it follows (beyond the
        -- few minutes by which concurrent transactions' clocks may cross).
        IF prev.recorded_at > p_at + memory_internal._max_clock_skew() THEN
            RAISE EXCEPTION 'at (%) precedes version % of this consent (%)', p_at, prev.version, prev.recorded_at USING ERRCODE = '22023';
        END IF;
        IF removed IS NOT NULL AND prev.version IS NULL THEN
            RAISE EXCEPTION 'user "%" of org "%" has no consent to revoke', p_user, p_org
                USING ERRCODE = 'P0002', HINT = 'memory.consent_status reports not_determined for every scope.';
        END IF;
        -- (Worked out first: Citus takes no subquery in an INSERT's values.)
        scopes := ARRAY(SELECT DISTINCT x FROM unnest(coalesce(prev.scopes, '{}') || coalesce(added, '{}')) x
                         WHERE removed IS NULL OR NOT x = ANY (removed) ORDER BY x);
        -- The latest version is rewritten unchanged (memory_internal._consent_append_only lets its owner do
        -- that and nothing more): a write gated on consent that share-locks it later, at a
        -- snapshot taken before this change commits, fails with 40001 instead of writing under the
        -- consent this version replaces (memory_internal._consent_scopes_locked).
        IF prev.version IS NOT NULL THEN
            UPDATE memory.consents c SET scopes = c.scopes
             WHERE c.org_id OPERATOR(pg_catalog.=) p_org AND c.user_id OPERATOR(pg_catalog.=) p_user
               AND c.version OPERATOR(pg_catalog.=) prev.version;
        END IF;
        BEGIN
            INSERT INTO memory.consents (org_id, user_id, version, scopes, recorded_at, collection_method, revoked_at, revoked_scopes, recorded_by)
            VALUES (p_org, p_user, coalesce(prev.version, 0) + 1, scopes,
                    p_at, coalesce(method, prev.collection_method),
                    CASE WHEN removed IS NOT NULL THEN p_at END, removed,
                    coalesce(memory_internal._caller()::regrole::text, session_user))
            RETURNING * INTO row;
            RETURN row;
        EXCEPTION WHEN unique_violation THEN
            IF attempt = 100 OR pg_catalog.current_setting('transaction_isolation') <> 'read committed' THEN
                RAISE EXCEPTION 'consent of user "%" of org "%" is being changed concurrently', p_user, p_org
                    USING ERRCODE = '40001', HINT = 'Retry the transaction.';
            END IF;
        END;
    END LOOP;
END $$;

CREATE FUNCTION memory.grant_consent(org_id text, user_id text, scopes memory.consent_scope[],
                                     preferences jsonb DEFAULT NULL, collection_method text DEFAULT 'dialog',
                                     at timestamptz DEFAULT now())
RETURNS int LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p_org   text := grant_consent.org_id;
    p_user  text := grant_consent.user_id;
    c       memory.consents;
    prefs   jsonb;
BEGIN
    PERFORM memory_internal._consent_args(p_org, p_user, at);
    IF scopes IS NULL OR cardinality(scopes) = 0 OR array_position(scopes, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'grant_consent needs at least one scope, and no NULL' USING ERRCODE = '22023';
    END IF;
    -- A name, not free text (it is written to the audit chain).
    IF collection_method IS NULL OR collection_method !~ '^[a-z][a-z0-9_]{0,62}$' THEN
        RAISE EXCEPTION 'collection_method must be a lower-case name such as dialog or settings' USING ERRCODE = '22023';
    END IF;
    IF preferences IS NOT NULL AND jsonb_typeof(preferences) <> 'object' THEN
        RAISE EXCEPTION 'preferences must be a JSON object, got %', jsonb_typeof(preferences) USING ERRCODE = '22023';
    END IF;
    c := memory_internal._consent_append(p_org, p_user, scopes, NULL, at, collection_method);
    PERFORM memory_internal._audit('memory.consent.grant', jsonb_build_object(
        'userId', memory_internal._pseudonym(p_user), 'version', c.version, 'scopes', to_jsonb(scopes), 'inForce', to_jsonb(c.scopes),
        'collectionMethod', collection_method, 'receiptId', c.receipt_id), p_org);
    -- The onboarding path: preferences given with save_to_profile become the profile context.
    IF preferences IS NOT NULL AND 'save_to_profile' = ANY (c.scopes) THEN
        prefs := (SELECT coalesce(jsonb_object_agg(k, preferences->k), '{}') FROM jsonb_object_keys(preferences) k
                   WHERE k = ANY (memory_internal._context_fields('preferences')));
        IF prefs <> '{}' THEN
            INSERT INTO memory.user_contexts (org_id, user_id, scope, source, fields, created_at)
            VALUES (p_org, p_user, 'profile', 'onboarding', prefs, at);
        END IF;
    END IF;
    RETURN c.version;
END $$;
COMMENT ON FUNCTION memory.grant_consent(text, text, memory.consent_scope[], jsonb, text, timestamptz) IS
  'Grant scopes to (org, user): a new consent version holding every scope in force. preferences (language_preference, research_depth, risk_prompt_preference, user_focus_reason) become the profile context when save_to_profile is in force. Emits memory.consent.grant. Returns the version.';

-- The part of a revocation that the consent gate lets through, for one (org, user): profile
-- contexts deleted, the drift log stamped for purge, thread contexts and threads blocked,
-- training candidates revoked, and the user's rows of the governed application tables in
-- `targets` (memory_internal._revoke_targets) deleted. Returns the counts. On Citus memory.distribute()
-- makes it a function Citus runs on the node of the org's shards, where the gates it opens are
-- seen by the shards' guards. Not granted to PUBLIC.
CREATE FUNCTION memory_internal._revoke_consent_in(org text, user_id text, gone memory.consent_scope[], at timestamptz, targets jsonb, who jsonb)
RETURNS jsonb LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p_org     text := _revoke_consent_in.org;
    p_user    text := _revoke_consent_in.user_id;
    n_prof    bigint := 0;
    n_thread  bigint := 0;
    n_drift   bigint := 0;
    n_train   bigint := 0;
    n_threads bigint := 0;
    cleared   jsonb;
    -- What revoking these scopes does (memory_core::consent::revoke_effects), each effect named
    -- by the count it reports.
    effects   constant text[] := memory_internal._revoke_effects(gone::text[]);
    purge_at  constant timestamptz := at + memory_internal._drift_purge_delay();
BEGIN
    PERFORM memory_internal._delegated(who);
    PERFORM memory_internal._consent_gate(true);
    -- Profile contexts go at once (docs/design.md#consent-and-drift); thread contexts stay readable by the user but are
    -- blocked from loading; the drift log is purged by maintenance 48 hours later.
    IF 'profile_contexts_deleted' = ANY (effects) THEN
        DELETE FROM memory.user_contexts u WHERE u.org_id = p_org AND u.user_id = p_user AND u.scope = 'profile';
        GET DIAGNOSTICS n_prof = ROW_COUNT;
    END IF;
    IF 'drift_rows_to_purge' = ANY (effects) THEN
        UPDATE memory.persona_drift_log d SET purge_after = purge_at
         WHERE d.org_id = p_org AND d.user_id = p_user AND (d.purge_after IS NULL OR d.purge_after > purge_at);
        GET DIAGNOSTICS n_drift = ROW_COUNT;
    END IF;
    IF 'thread_contexts_blocked' = ANY (effects) THEN
        UPDATE memory.user_contexts u SET consent_blocked = true
         WHERE u.org_id = p_org AND u.user_id = p_user AND u.scope = 'thread' AND NOT u.consent_blocked;
        GET DIAGNOSTICS n_thread = ROW_COUNT;
    END IF;
    IF 'threads_blocked' = ANY (effects) THEN
        UPDATE memory.threads t SET consent_blocked = true WHERE t.org_id = p_org AND t.user_id = p_user AND NOT t.consent_blocked;
        GET DIAGNOSTICS n_threads = ROW_COUNT;
    END IF;
    IF 'training_candidates_revoked' = ANY (effects) THEN
        UPDATE memory.training_candidates t SET withdrawal_status = 'revoked', withdrawn_at = at
         WHERE t.org_id = p_org AND t.user_id = p_user AND t.withdrawal_status IS DISTINCT FROM 'revoked';
        GET DIAGNOSTICS n_train = ROW_COUNT;
    END IF;
    PERFORM memory_internal._consent_gate(false);
    -- Governed application tables whose rows hang on a revoked scope ("on_revoke": "delete").
    cleared := memory_internal._clear_governed(p_org, p_user, targets);
    PERFORM memory_internal._delegated_done(who);
    RETURN jsonb_build_object('profile_contexts_deleted', n_prof, 'thread_contexts_blocked', n_thread, 'threads_blocked', n_threads,
                              'drift_rows_to_purge', n_drift, 'training_candidates_revoked', n_train, 'governed', cleared);
END $$;

CREATE FUNCTION memory.revoke_consent(org_id text, user_id text, scopes memory.consent_scope[] DEFAULT NULL,
                                      at timestamptz DEFAULT now())
RETURNS jsonb LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p_org    text := revoke_consent.org_id;
    p_user   text := revoke_consent.user_id;
    c        memory.consents;
    gone     memory.consent_scope[];
    done     jsonb;
    more     jsonb;
    targets  jsonb;
    counts   jsonb;
BEGIN
    PERFORM memory_internal._consent_args(p_org, p_user, at);
    IF scopes IS NOT NULL AND (cardinality(scopes) = 0 OR array_position(scopes, NULL) IS NOT NULL) THEN
        RAISE EXCEPTION 'revoke_consent needs NULL (every scope) or at least one scope, and no NULL' USING ERRCODE = '22023';
    END IF;
    gone := coalesce(scopes, enum_range(NULL::memory.consent_scope));
    c := memory_internal._consent_append(p_org, p_user, NULL, gone, at, NULL);
    targets := memory_internal._revoke_targets(gone, p_org);
    -- On Citus on the node of the org's shards, with the governed tables that are there; the
    -- others from here (on a single node every table is "there").
    done := memory_internal._org_call('memory_internal._revoke_consent_in(text,text,memory.consent_scope[],timestamptz,jsonb,jsonb)', p_org,
                jsonb_build_array(p_user, gone, at,
                                  (SELECT coalesce(jsonb_agg(x), '[]') FROM jsonb_array_elements(targets) x WHERE (x->>'there')::boolean)));
    more := memory_internal._clear_governed(p_org, p_user, (SELECT coalesce(jsonb_agg(x), '[]') FROM jsonb_array_elements(targets) x
                                                     WHERE NOT (x->>'there')::boolean));
    done := jsonb_set(done, '{governed}', jsonb_build_object(
                'deleted', (done->'governed'->'deleted') || (more->'deleted'),
                'failed', (done->'governed'->'failed') || (more->'failed')));

    counts := jsonb_build_object('version', c.version, 'revoked', to_jsonb(gone), 'in_force', to_jsonb(c.scopes)) || (done - 'governed')
              || CASE WHEN done->'governed'->'deleted' <> '{}' THEN jsonb_build_object('tables_deleted', done->'governed'->'deleted') ELSE '{}' END
              || CASE WHEN done->'governed'->'failed' <> '{}' THEN jsonb_build_object('tables_failed', done->'governed'->'failed') ELSE '{}' END;
    PERFORM memory_internal._audit('memory.consent.revoke', jsonb_build_object(
        'userId', memory_internal._pseudonym(p_user), 'version', c.version, 'scopes', to_jsonb(gone), 'inForce', to_jsonb(c.scopes),
        'receiptId', c.receipt_id,
        'counts', counts - 'version' - 'revoked' - 'in_force'), p_org);
    IF (done->>'profile_contexts_deleted')::bigint > 0 THEN
        PERFORM memory_internal._audit('memory.context.delete', jsonb_build_object(
            'userId', memory_internal._pseudonym(p_user), 'scope', 'profile', 'count', (done->>'profile_contexts_deleted')::bigint,
            'reason', 'consent_revoked'), p_org);
    END IF;
    RETURN counts;
END $$;
COMMENT ON FUNCTION memory.revoke_consent(text, text, memory.consent_scope[], timestamptz) IS
  'Revoke scopes (NULL: every scope) of (org, user) in one transaction: a new consent version; save_to_profile deletes the profile contexts and stamps the drift log for purge 48 h later; save_to_thread blocks thread contexts; training_use_allowed revokes training candidates. Emits memory.consent.revoke with the counts, which it returns. P0002 when there is no consent.';

-- Per scope: the state, and the version that put it there.
CREATE FUNCTION memory_internal._consent_status(p_org text, p_user text)
RETURNS TABLE (scope memory.consent_scope, state text, version int)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    cur memory.consent_scope[];
BEGIN
    PERFORM memory_internal._consent_args(p_org, p_user, now());
    cur := memory_internal._consent_scopes(p_org, p_user);
    -- Per scope: granted when the latest version holds it (version: the first of that unbroken
    -- run), revoked when an earlier version held it (version: the one that took it),
    -- not_determined when none did.
    RETURN QUERY
    WITH v AS (SELECT c.version, c.scopes FROM memory.consents c WHERE c.org_id = p_org AND c.user_id = p_user)
    SELECT x.s,
           CASE WHEN x.s = ANY (cur) THEN 'granted'
                WHEN EXISTS (SELECT 1 FROM v WHERE x.s = ANY (v.scopes)) THEN 'revoked'
                ELSE 'not_determined' END,
           CASE WHEN x.s = ANY (cur)
                THEN (SELECT coalesce(max(v.version) FILTER (WHERE NOT x.s = ANY (v.scopes)), 0) + 1 FROM v)
                WHEN EXISTS (SELECT 1 FROM v WHERE x.s = ANY (v.scopes))
                THEN (SELECT min(v.version) FROM v WHERE NOT x.s = ANY (v.scopes)
                        AND v.version > (SELECT max(w.version) FROM v w WHERE x.s = ANY (w.scopes))) END
      FROM unnest(enum_range(NULL::memory.consent_scope)) x(s)
     ORDER BY x.s;
END $$;

CREATE FUNCTION memory.consent_status(org_id text, user_id text)
RETURNS TABLE (scope memory.consent_scope, state text, version int, since timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    st   jsonb;
    done jsonb;
BEGIN
    -- The statuses, then the versions' times by a statement of its own (on Citus the consents
    -- are distributed, and a join of a function's rows with them is not planned).
    st := (SELECT jsonb_agg(to_jsonb(x)) FROM memory_internal._consent_status(consent_status.org_id, consent_status.user_id) x);
    done := (SELECT coalesce(jsonb_object_agg(c.version::text, c.recorded_at), '{}') FROM memory.consents c
              WHERE c.org_id OPERATOR(pg_catalog.=) consent_status.org_id AND c.user_id OPERATOR(pg_catalog.=) consent_status.user_id);
    RETURN QUERY
    SELECT x.scope, x.state, x.version, (done OPERATOR(pg_catalog.->>) x.version::text)::timestamptz
      FROM jsonb_to_recordset(st) AS x(scope memory.consent_scope, state text, version int)
     ORDER BY x.scope;
END $$;
COMMENT ON FUNCTION memory.consent_status(text, text) IS
  'Every scope of (org, user): granted, revoked or not_determined (never asked is not denied), with the version that put it there and when.';

CREATE FUNCTION memory.require_consent(org_id text, user_id text, scopes memory.consent_scope[])
RETURNS void LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    missing memory.consent_scope[];
BEGIN
    PERFORM memory_internal._consent_args(require_consent.org_id, require_consent.user_id, now());
    IF scopes IS NULL OR array_position(scopes, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'require_consent needs scopes, and no NULL' USING ERRCODE = '22023';
    END IF;
    missing := ARRAY(SELECT DISTINCT s FROM unnest(scopes) s
                      WHERE NOT s = ANY (coalesce(memory_internal._consent_scopes(require_consent.org_id, require_consent.user_id), '{}'))
                      ORDER BY s);
    IF cardinality(missing) > 0 THEN
        RAISE EXCEPTION 'profile_consent_required' USING ERRCODE = 'MX003',
            DETAIL = 'required_scopes: ' || array_to_string(missing, ', '),
            HINT = 'Record the user''s consent with memory.grant_consent.';
    END IF;
END $$;
COMMENT ON FUNCTION memory.require_consent(text, text, memory.consent_scope[]) IS
  'Nothing when every scope is in force for (org, user); otherwise MX003 profile_consent_required with the missing scopes in DETAIL (required_scopes: ...).';

CREATE FUNCTION memory.consent_receipt(org_id text, user_id text, version int DEFAULT NULL)
RETURNS jsonb LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c      memory.consents;
    anchor record;
BEGIN
    PERFORM memory_internal._consent_args(consent_receipt.org_id, consent_receipt.user_id, now());
    SELECT * INTO c FROM memory.consents k
     WHERE k.org_id = consent_receipt.org_id AND k.user_id = consent_receipt.user_id
       AND (consent_receipt.version IS NULL OR k.version = consent_receipt.version)
     ORDER BY k.version DESC LIMIT 1;
    IF c.version IS NULL THEN
        RAISE EXCEPTION 'no consent version % for user "%" of org "%"', coalesce(consent_receipt.version::text, '(current)'),
            consent_receipt.user_id, consent_receipt.org_id USING ERRCODE = 'P0002';
    END IF;
    -- The consent event in the org's chain. A reader never chains (it would hold the integration
    -- lock, and every other org's pending entries with it, until its transaction ends): an event
    -- the sequencer has not chained yet is reported as pending, without an anchor.
    SELECT l.chain_id, l.seq, l.entry_hash INTO anchor FROM memory.audit_log l
     WHERE l.chain_id OPERATOR(pg_catalog.=) c.org_id COLLATE "C" AND l.recorded_at >= c.written_at
       AND l.event_type IN ('memory.consent.grant', 'memory.consent.revoke')
       AND l.payload->>'receiptId' = c.receipt_id::text
     LIMIT 1;
    RETURN jsonb_build_object(
        'receipt_id', c.receipt_id, 'org_id', c.org_id, 'user_id', c.user_id, 'version', c.version,
        'scopes', to_jsonb(c.scopes), 'recorded_at', c.recorded_at, 'written_at', c.written_at, 'revoked_at', c.revoked_at,
        'revoked_scopes', to_jsonb(c.revoked_scopes), 'collection_method', c.collection_method,
        'audit', CASE WHEN anchor.seq IS NOT NULL
                      THEN jsonb_build_object('chain_id', anchor.chain_id, 'seq', anchor.seq,
                                              'entry_hash', encode(anchor.entry_hash, 'hex'))
                      WHEN EXISTS (SELECT 1 FROM memory.audit_pending p WHERE p.chain_id OPERATOR(pg_catalog.=) c.org_id COLLATE "C")
                      THEN jsonb_build_object('chain_id', c.org_id, 'pending', true) END);
END $$;
COMMENT ON FUNCTION memory.consent_receipt(text, text, int) IS
  'A receipt for one consent version (default: the current one): receipt_id, scopes, timestamps, collection method, and the audit anchor of its consent event (chain_id, seq, entry_hash hex), to check against the chain; {chain_id, pending: true} while the sequencer has not chained it yet (a receipt never chains). P0002 for a version that does not exist.';

-- Consent-era rows that only memory_ext changes or removes (revocation, maintenance, account
-- deletion, which open the consent gate): anything else is MX002.
CREATE FUNCTION memory_internal._consent_era_guard()
RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF memory_internal._consent_gate_open() THEN
        RETURN CASE TG_OP WHEN 'DELETE' THEN OLD ELSE NEW END;
    END IF;
    RAISE EXCEPTION '% is append-only: % is not allowed', memory_internal._table_of(TG_RELID)::regclass, TG_OP
        USING ERRCODE = 'MX002', HINT = 'These rows leave with a consent revocation, maintenance or an account deletion.';
END $$;

-- ------------------------------------------------------------------------------------------------
-- User contexts (docs/design.md#consent-and-drift): what the assistant remembers about a user, by scope.

CREATE TABLE memory.user_contexts (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    org_id          text NOT NULL,
    user_id         text NOT NULL CHECK (user_id ~ '[^[:space:]]'),
    scope           memory.context_scope NOT NULL,
    task_id         text,
    thread_id       text,
    source          text NOT NULL CHECK (source IN ('onboarding', 'user_review', 'save_as_thread', 'refresh', 'task')),
    fields          jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(fields) = 'object'),
    consent_version int,
    consent_blocked boolean NOT NULL DEFAULT false,
    created_at      timestamptz NOT NULL DEFAULT now(),
    expires_at      timestamptz,
    CHECK (scope <> 'task' OR task_id IS NOT NULL),
    CHECK (scope <> 'thread' OR thread_id IS NOT NULL)
);
CREATE INDEX user_contexts_user ON memory.user_contexts (org_id, user_id, scope);
CREATE INDEX user_contexts_task ON memory.user_contexts (task_id) WHERE task_id IS NOT NULL;
CREATE INDEX user_contexts_expiry ON memory.user_contexts (expires_at) WHERE expires_at IS NOT NULL;
COMMENT ON TABLE memory.user_contexts IS
  'User contexts by scope (task, thread, profile). Written by plain INSERT; memory_internal._user_context_rules enforces consent, sources and position fields in the writing transaction.';

-- The write rules (docs/design.md#consent-and-drift), in the writing transaction.
-- memory_internal._user_context_rules, the fields of a new user context: known names only, text
-- values (position_consent a boolean), and no sensitive input in one field or split over them
-- (22023, MX007).
CREATE FUNCTION memory_internal._check_context_fields(fields jsonb)
RETURNS void LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    known    text[] := memory_internal._context_fields('known');
    k        text;
    found    text[];
    vals     text[];
BEGIN
    FOR k IN SELECT jsonb_object_keys(fields) LOOP
        IF NOT k = ANY (known) THEN
            RAISE EXCEPTION 'unknown user context field "%"', k USING ERRCODE = '22023',
                HINT = 'Fields: ' || array_to_string(known, ', ');
        END IF;
        -- Values are text (position_consent a boolean): nothing nests a field inside another.
        IF jsonb_typeof(fields->k) <> (CASE WHEN k = 'position_consent' THEN 'boolean' ELSE 'string' END) THEN
            RAISE EXCEPTION 'user context field "%" must be %', k, CASE WHEN k = 'position_consent' THEN 'a boolean' ELSE 'a string' END
                USING ERRCODE = '22023';
        END IF;
        -- Sensitive input is never kept, whatever the consent (docs/design.md#consent-and-drift): every classification detector runs on
        -- the value and on the text of its base64 and hex tokens; the refusal names the detector
        -- and the field, never the value.
        IF k <> 'position_consent' THEN
            found := memory_internal._detect_fields(ARRAY[fields->>k]);
            IF cardinality(found) > 0 THEN
                RAISE EXCEPTION 'sensitive input refused: user context field "%" matches the % detector', k, found[1]
                    USING ERRCODE = 'MX007', DETAIL = 'detector: ' || found[1],
                    HINT = 'User contexts never keep e-mail addresses, phone numbers, wallet addresses, account or card numbers, keys or tokens (memory.detectors()); remove the value.';
            END IF;
        END IF;
    END LOOP;
    -- And on the fields together: a value split over two fields (in either order), or over all of
    -- them, is found too. No one field holds it, so none is named.
    vals := ARRAY(SELECT f.value FROM jsonb_each_text(fields) f WHERE f.key <> 'position_consent' ORDER BY f.key COLLATE "C");
    IF cardinality(vals) > 1 THEN
        found := memory_internal._detect_fields(vals);
        IF cardinality(found) > 0 THEN
            RAISE EXCEPTION 'sensitive input refused: user context fields together match the % detector', found[1]
                USING ERRCODE = 'MX007', DETAIL = 'detector: ' || found[1],
                HINT = 'User contexts never keep e-mail addresses, phone numbers, wallet addresses, account or card numbers, keys or tokens (memory.detectors()), nor split over fields; remove the value.';
        END IF;
    END IF;
END $$;
COMMENT ON FUNCTION memory_internal._check_context_fields(jsonb) IS
  'memory_internal._user_context_rules: refuses unknown user context fields and values of the wrong type (22023), and sensitive input in a field or split over the fields (MX007, naming the detector and the field, never the value).';

CREATE FUNCTION memory_internal._user_context_rules()
RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    have     memory.consent_scope[];
    position text[] := memory_internal._context_fields('position');
    refusal  text[];
BEGIN
    -- A restore brings rows back as they were dumped (memory.restore_mode, superuser-only).
    IF memory_internal._restore_mode() THEN
        RETURN NEW;
    END IF;
    IF TG_OP = 'UPDATE' THEN
        -- Contexts are written, not rewritten: a refresh appends a row. Only revocation changes
        -- consent_blocked, and end_task the expiry of task contexts.
        IF memory_internal._consent_gate_open() THEN
            RETURN NEW;
        END IF;
        IF (NEW.id, NEW.org_id, NEW.user_id, NEW.scope, NEW.task_id, NEW.thread_id, NEW.source, NEW.fields, NEW.consent_version, NEW.consent_blocked, NEW.created_at)
           IS DISTINCT FROM
           (OLD.id, OLD.org_id, OLD.user_id, OLD.scope, OLD.task_id, OLD.thread_id, OLD.source, OLD.fields, OLD.consent_version, OLD.consent_blocked, OLD.created_at) THEN
            RAISE EXCEPTION 'user contexts are append-only: write a new context (a refresh appends one)' USING ERRCODE = 'MX002';
        END IF;
        RETURN NEW;
    END IF;
    PERFORM memory_internal._require_org(NEW.org_id);
    PERFORM memory_internal._check_context_fields(NEW.fields);
    -- Expiry is the extension's (end_task); a context is not written ahead of its time.
    NEW.expires_at := NULL;
    IF NEW.created_at > now() + memory_internal._max_clock_skew() THEN
        RAISE EXCEPTION 'created_at may not be in the future' USING ERRCODE = '22023';
    END IF;
    have := coalesce(memory_internal._consent_scopes_locked(NEW.org_id, NEW.user_id), '{}');
    -- The scope a context of NEW.scope needs; a profile only from onboarding or the user's own
    -- review (no implicit learning); position, constraints and horizon outside one task need
    -- save_to_profile and the user's explicit consent on the row (memory_core::consent::context_write_refusal).
    refusal := memory_internal._context_write_refusal(NEW.scope::text, NEW.source, NEW.fields ?| position,
                                                      coalesce(NEW.fields->'position_consent' = 'true'::jsonb, false), have::text[]);
    IF refusal IS NOT NULL THEN
        RAISE EXCEPTION '%', refusal[1] USING ERRCODE = 'MX003', DETAIL = 'required_scopes: ' || refusal[2];
    END IF;
    NEW.consent_version := (SELECT max(c.version) FROM memory.consents c WHERE c.org_id = NEW.org_id AND c.user_id = NEW.user_id);
    NEW.consent_blocked := false;
    IF NEW.created_at IS NULL OR NOT isfinite(NEW.created_at) THEN
        RAISE EXCEPTION 'created_at must be a finite time' USING ERRCODE = '22023';
    END IF;
    PERFORM memory_internal._audit('memory.context.write', jsonb_build_object(
        'userId', memory_internal._pseudonym(NEW.user_id), 'scope', NEW.scope, 'source', NEW.source, 'contextId', NEW.id,
        'fields', to_jsonb(ARRAY(SELECT jsonb_object_keys(NEW.fields) ORDER BY 1))), NEW.org_id);
    RETURN NEW;
END $$;
CREATE TRIGGER memory_context_rules BEFORE INSERT OR UPDATE ON memory.user_contexts
    FOR EACH ROW EXECUTE FUNCTION memory_internal._user_context_rules();
-- Contexts leave only through memory_ext (revocation, task expiry, account deletion).
CREATE TRIGGER memory_append_only BEFORE DELETE ON memory.user_contexts
    FOR EACH ROW EXECUTE FUNCTION memory_internal._consent_era_guard();
CREATE TRIGGER memory_append_only_truncate BEFORE TRUNCATE ON memory.user_contexts
    FOR EACH STATEMENT EXECUTE FUNCTION memory_internal._consent_era_guard();

-- Threads (docs/design.md#consent-and-drift; slice S6 reads them).
CREATE TABLE memory.threads (
    thread_id        text NOT NULL CHECK (thread_id ~ '[^[:space:]]'),
    org_id           text NOT NULL,
    user_id          text NOT NULL CHECK (user_id ~ '[^[:space:]]'),
    title            text,
    cognition_object jsonb,
    status           text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'closed')),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    consent_blocked  boolean NOT NULL DEFAULT false,
    PRIMARY KEY (org_id, thread_id)
);
COMMENT ON TABLE memory.threads IS
  'A user''s research threads (title, cognition object, active or closed). A new thread needs save_to_thread; its revocation blocks the user''s threads from slice S6.';

CREATE FUNCTION memory_internal._thread_rules()
RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF memory_internal._restore_mode() THEN
        RETURN NEW;
    END IF;
    PERFORM memory_internal._require_org(NEW.org_id);
    PERFORM memory_internal._require_scope(NEW.org_id, NEW.user_id, 'save_to_thread');
    NEW.consent_blocked := false;
    RETURN NEW;
END $$;
CREATE TRIGGER memory_consent BEFORE INSERT ON memory.threads
    FOR EACH ROW EXECUTE FUNCTION memory_internal._thread_rules();

-- Training candidates (docs/design.md#consent-and-drift): need training_use_allowed; a revocation marks them revoked.
CREATE TABLE memory.training_candidates (
    id                uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    org_id            text NOT NULL,
    user_id           text NOT NULL CHECK (user_id ~ '[^[:space:]]'),
    object_ref        text NOT NULL CHECK (object_ref ~ '[^[:space:]]'),
    status            text NOT NULL DEFAULT 'pending' CHECK (status = 'pending'),
    withdrawal_status text CHECK (withdrawal_status = 'revoked'),
    withdrawn_at      timestamptz,
    created_at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX training_candidates_user ON memory.training_candidates (org_id, user_id);
COMMENT ON TABLE memory.training_candidates IS
  'Objects a user allowed for future training (training_use_allowed); never fed to training in V1. A revocation sets withdrawal_status = revoked.';

CREATE FUNCTION memory_internal._training_candidate_rules()
RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF memory_internal._restore_mode() THEN
        RETURN NEW;
    END IF;
    PERFORM memory_internal._require_org(NEW.org_id);
    PERFORM memory_internal._require_scope(NEW.org_id, NEW.user_id, 'training_use_allowed');
    NEW.withdrawal_status := NULL;
    NEW.withdrawn_at := NULL;
    RETURN NEW;
END $$;
CREATE TRIGGER memory_consent BEFORE INSERT ON memory.training_candidates
    FOR EACH ROW EXECUTE FUNCTION memory_internal._training_candidate_rules();

-- The persona drift log (docs/design.md#consent-and-drift): append-only; revocation stamps purge_after (48 h), and
-- maintenance purges what is due.
CREATE TABLE memory.persona_drift_log (
    drift_id         text PRIMARY KEY CHECK (drift_id ~ '^drift_'),
    org_id           text NOT NULL,
    user_id          text NOT NULL,
    object_ref       text NOT NULL,
    cognition_object jsonb,
    signal_kind      memory.drift_signal NOT NULL,
    prior_signal     jsonb NOT NULL,
    current_signal   jsonb NOT NULL,
    delta_summary    text NOT NULL,
    triggers_alert   boolean NOT NULL,
    schema_version   text NOT NULL DEFAULT '1.0' CHECK (schema_version = '1.0'),
    created_at       timestamptz NOT NULL DEFAULT now(),
    purge_after      timestamptz
);
CREATE INDEX persona_drift_log_user ON memory.persona_drift_log (org_id, user_id, created_at);
CREATE INDEX persona_drift_log_purge ON memory.persona_drift_log (purge_after) WHERE purge_after IS NOT NULL;
COMMENT ON TABLE memory.persona_drift_log IS
  'Persona drift observations (the drift log''s schema plus org_id, user_id, created_at, purge_after). Append-only (MX002); a revocation of save_to_profile stamps purge_after 48 h later and maintenance purges.';

CREATE TRIGGER memory_append_only BEFORE UPDATE OR DELETE ON memory.persona_drift_log
    FOR EACH ROW EXECUTE FUNCTION memory_internal._consent_era_guard();
CREATE TRIGGER memory_append_only_truncate BEFORE TRUNCATE ON memory.persona_drift_log
    FOR EACH STATEMENT EXECUTE FUNCTION memory_internal._consent_era_guard();

-- Maintenance: task contexts past their expiry and drift rows past purge_after, org by org
-- (memory_internal._consent_maintenance_in, which on Citus runs on the node of the org's shards, where
-- the consent gate it opens is seen by the shards' guards; not granted to PUBLIC).
CREATE FUNCTION memory_internal._consent_maintenance_in(org text, at timestamptz, who jsonb)
RETURNS jsonb LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n_ctx   bigint;
    n_drift bigint;
BEGIN
    PERFORM memory_internal._delegated(who);
    PERFORM memory_internal._consent_gate(true);
    DELETE FROM memory.user_contexts u
     WHERE u.org_id = _consent_maintenance_in.org AND u.scope = 'task' AND u.expires_at IS NOT NULL AND u.expires_at <= at;
    GET DIAGNOSTICS n_ctx = ROW_COUNT;
    IF n_ctx > 0 THEN
        PERFORM memory_internal._audit('memory.context.delete', jsonb_build_object('scope', 'task', 'count', n_ctx, 'reason', 'task_expired'),
                              _consent_maintenance_in.org);
    END IF;
    DELETE FROM memory.persona_drift_log d
     WHERE d.org_id = _consent_maintenance_in.org AND d.purge_after IS NOT NULL AND d.purge_after <= at;
    GET DIAGNOSTICS n_drift = ROW_COUNT;
    PERFORM memory_internal._consent_gate(false);
    PERFORM memory_internal._delegated_done(who);
    RETURN jsonb_build_object('task_contexts_purged', n_ctx, 'drift_rows_purged', n_drift);
END $$;

CREATE FUNCTION memory_internal._consent_maintenance(at timestamptz)
RETURNS jsonb LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    o     text;
    total jsonb := jsonb_build_object('task_contexts_purged', 0, 'drift_rows_purged', 0);
BEGIN
    FOR o IN SELECT u.org_id FROM memory.user_contexts u WHERE u.scope = 'task' AND u.expires_at IS NOT NULL AND u.expires_at <= at
             UNION
             SELECT d.org_id FROM memory.persona_drift_log d WHERE d.purge_after IS NOT NULL AND d.purge_after <= at
             ORDER BY 1 LOOP
        total := memory_internal._add_counts(total,
                     memory_internal._org_call('memory_internal._consent_maintenance_in(text,timestamptz,jsonb)', o, jsonb_build_array(at)));
    END LOOP;
    RETURN total;
END $$;

SELECT pg_catalog.pg_extension_config_dump('memory.consents', '');
SELECT pg_catalog.pg_extension_config_dump('memory.user_contexts', '');
SELECT pg_catalog.pg_extension_config_dump('memory.threads', '');
SELECT pg_catalog.pg_extension_config_dump('memory.training_candidates', '');
SELECT pg_catalog.pg_extension_config_dump('memory.persona_drift_log', '');

-- ------------------------------------------------------------------------------------------------
-- Slices (docs/design.md#consent-and-drift): which parts of a user's memory a request may load, per route.

CREATE TABLE memory.route_slices (
    route text NOT NULL CHECK (route ~ '^[a-z][a-z0-9_]{0,62}$'),
    slice text NOT NULL CHECK (slice IN ('S1_language_pref', 'S2_research_depth', 'S3_risk_prompt_pref', 'S4_user_focus_reason',
                                         'S5_research_style', 'S6_recent_active_threads_titles',
                                         'S7_user_stated_position_context', 'S8_constraints', 'S9_persona_drift_recent')),
    mode  text NOT NULL CHECK (mode IN ('required', 'optional', 'never')),
    PRIMARY KEY (route, slice)
);
COMMENT ON TABLE memory.route_slices IS
  'The route x slice matrix (docs/design.md#consent-and-drift): required, optional or never. Editable by the extension owner; every change is audited (memory.route_slices.change).';
INSERT INTO memory.route_slices (route, slice, mode)
SELECT r.route, s.slice,
       CASE WHEN s.n = ANY (r.req) THEN 'required' WHEN s.n = ANY (r.opt) THEN 'optional' ELSE 'never' END
  FROM (VALUES ('snapshot',            ARRAY[1, 2, 3],       ARRAY[6]),
               ('thread_refresh',      ARRAY[1, 2, 3, 4, 5], ARRAY[9]),
               ('risk_challenge',      ARRAY[1, 3],          ARRAY[5]),
               ('pre_execution',       ARRAY[1, 2, 3],       ARRAY[7, 8]),
               ('evidence_audit',      ARRAY[1],             ARRAY[]::int[]),
               ('narrative_mapper',    ARRAY[1, 2],          ARRAY[6]),
               ('event_impact_reader', ARRAY[1, 2],          ARRAY[6])) AS r(route, req, opt)
 CROSS JOIN (VALUES (1, 'S1_language_pref'), (2, 'S2_research_depth'), (3, 'S3_risk_prompt_pref'), (4, 'S4_user_focus_reason'),
                    (5, 'S5_research_style'), (6, 'S6_recent_active_threads_titles'), (7, 'S7_user_stated_position_context'),
                    (8, 'S8_constraints'), (9, 'S9_persona_drift_recent')) AS s(n, slice);

-- Every (route, slice) has its row: inserting one sets it (so a dump restores an edited matrix
-- over the seeded one), also in replica mode.
CREATE FUNCTION memory_internal._merge_route_slice()
RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- On Citus a trigger fires on the shards of the table (reference copies): a restore merges
    -- into the table itself, never into a shard.
    IF TG_RELID OPERATOR(pg_catalog.<>) 'memory.route_slices'::pg_catalog.regclass THEN
        RETURN NEW;
    END IF;
    UPDATE memory.route_slices r SET mode = NEW.mode WHERE r.route = NEW.route AND r.slice = NEW.slice;
    RETURN CASE WHEN FOUND THEN NULL ELSE NEW END;
END $$;
CREATE TRIGGER memory_merge BEFORE INSERT ON memory.route_slices
    FOR EACH ROW EXECUTE FUNCTION memory_internal._merge_route_slice();
ALTER TABLE memory.route_slices ENABLE ALWAYS TRIGGER memory_merge;

-- Each change of the matrix is one event naming the route, the slice and both modes; a row
-- written unchanged (a restore's merge) records nothing.
CREATE FUNCTION memory_internal._route_slices_changed()
RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- On Citus the change is made on every node's copy of the table: recorded once, by the
    -- coordinator's copy.
    IF memory_internal._citus_other_copy(TG_RELID, 'memory.route_slices'::pg_catalog.regclass) THEN
        RETURN NULL;
    END IF;
    IF memory_internal._creating_extension() OR memory_internal._restore_mode() THEN
        RETURN NULL;
    END IF;
    IF TG_OP = 'TRUNCATE' THEN
        PERFORM memory_internal._audit('memory.route_slices.change', jsonb_build_object('operation', 'truncate'), NULL);
    ELSIF TG_OP = 'UPDATE' AND (OLD.route, OLD.slice, OLD.mode) IS NOT DISTINCT FROM (NEW.route, NEW.slice, NEW.mode) THEN
        RETURN NULL;
    ELSE
        PERFORM memory_internal._audit('memory.route_slices.change', jsonb_build_object(
            'operation', lower(TG_OP),
            'route', CASE WHEN TG_OP = 'DELETE' THEN OLD.route ELSE NEW.route END,
            'slice', CASE WHEN TG_OP = 'DELETE' THEN OLD.slice ELSE NEW.slice END,
            'from', CASE WHEN TG_OP <> 'INSERT' THEN OLD.mode END,
            'to', CASE WHEN TG_OP <> 'DELETE' THEN NEW.mode END), NULL);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER memory_audit AFTER INSERT OR UPDATE OR DELETE ON memory.route_slices
    FOR EACH ROW EXECUTE FUNCTION memory_internal._route_slices_changed();
CREATE TRIGGER memory_audit_truncate AFTER TRUNCATE ON memory.route_slices
    FOR EACH STATEMENT EXECUTE FUNCTION memory_internal._route_slices_changed();

CREATE FUNCTION memory.advisor_order(risk_prompt_preference text DEFAULT 'balanced')
RETURNS text[] LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p text := coalesce(risk_prompt_preference, 'balanced');
BEGIN
    IF p = 'balanced' THEN
        RETURN ARRAY['asset_research', 'market_macro', 'risk', 'counter_thesis'];
    ELSIF p = 'counter_first' THEN
        RETURN ARRAY['counter_thesis', 'asset_research', 'market_macro', 'risk'];
    ELSIF p = 'risk_first' THEN
        RETURN ARRAY['risk', 'asset_research', 'counter_thesis', 'market_macro'];
    ELSIF p = 'permission_or_credential' THEN
        -- Pre-Execution Checkpoint only: its advisor first, the others in the default order.
        RETURN ARRAY['pre_execution', 'asset_research', 'market_macro', 'risk', 'counter_thesis'];
    END IF;
    RAISE EXCEPTION 'unknown risk_prompt_preference "%"', p USING ERRCODE = '22023',
        HINT = 'One of balanced, counter_first, risk_first, permission_or_credential.';
END $$;
COMMENT ON FUNCTION memory.advisor_order(text) IS
  'The advisors'' order for a risk_prompt_preference (docs/design.md#consent-and-drift): balanced (default, also for NULL), counter_first, risk_first, permission_or_credential (pre-execution first). The set of advisors never changes. Unknown -> 22023.';

-- memory.load_slices, once the route's wanted slices, the consent scopes in force (`have`) and the
-- contexts it may read (task, thread, profile: NULL when absent or not readable) are known: each
-- slice resolved (task > thread > profile, cold-start defaults, active threads, the drift count),
-- loaded, skipped as missing or blocked by consent, and rendered; load_slices' result.
CREATE FUNCTION memory_internal._resolve_slices(route text, wanted text[], have text[], t_fields jsonb, h_fields jsonb, p_fields jsonb,
                                                p_org text, p_user text, p_thread text, at timestamptz)
RETURNS jsonb LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    cold     boolean;
    sl       text;
    r        jsonb;   -- the slice's rule
    f        text;
    v        jsonb;
    slices   jsonb := '{}';
    loaded   text[] := '{}';
    missing  text[] := '{}';
    blocked  text[] := '{}';
    lines    text[] := '{}';
    -- slice -> its rule (memory_core::consent; immutable, so computed once per session)
    rules    constant jsonb := memory_internal._slice_rules();
BEGIN
    cold := p_fields IS NULL AND h_fields IS NULL;

    FOREACH sl IN ARRAY wanted LOOP
        v := NULL;
        r := rules->sl;
        IF r->>'source' = 'field' THEN
            -- Priority task > thread > profile (each read by load_slices only under its scope); a task-only
            -- slice (a position field) from the task's context alone.
            f := r->>'field';
            v := coalesce(t_fields->f, CASE WHEN NOT (r->>'task_only')::boolean THEN coalesce(h_fields->f, p_fields->f) END);
            IF v IS NULL AND cold THEN
                v := r->'cold_default';
            END IF;
        ELSIF r->>'source' = 'active_threads' AND (r->'needs') ?| have THEN
            v := (SELECT jsonb_agg(jsonb_build_object('title', t.title, 'cognition_object', t.cognition_object) ORDER BY t.updated_at DESC)
                    FROM (SELECT * FROM memory.threads t WHERE t.org_id = p_org AND t.user_id = p_user AND t.status = 'active'
                             AND NOT t.consent_blocked
                           ORDER BY t.updated_at DESC LIMIT 3) t);
        ELSIF r->>'source' = 'drift_count' AND (r->'needs') ?| have THEN
            -- A count, never the rows' text.
            v := to_jsonb((SELECT count(*) FROM memory.persona_drift_log d
                            WHERE d.org_id = p_org AND d.user_id = p_user AND d.created_at > at - interval '30 days' AND d.created_at <= at));
        END IF;
        IF v IS NOT NULL AND v <> 'null'::jsonb THEN
            slices := slices || jsonb_build_object(sl, v);
            loaded := loaded || sl;
            -- One line per slice; what a user wrote cannot close the block or start a line of
            -- its own (memory_internal._render_context_value: <, > and & escaped, their look-alikes such
            -- as U+FF1C folded to &lt; and &gt;, every line separator and control character a space).
            lines := lines || (sl || ': ' || memory_internal._render_context_value(
                         CASE jsonb_typeof(v) WHEN 'string' THEN v #>> '{}' ELSE v::text END));
        ELSIF ((r->'needs') <> '[]' AND NOT (r->'needs') ?| have)
              OR ((r->>'thread_blocks')::boolean AND p_thread IS NOT NULL AND h_fields IS NULL
                  AND EXISTS (SELECT 1 FROM memory.user_contexts u WHERE u.org_id = p_org AND u.user_id = p_user AND u.scope = 'thread'
                                 AND u.thread_id = p_thread AND u.consent_blocked)) THEN
            -- Not loaded because none of the scopes it needs is in force (or its thread context was
            -- blocked by a revocation): memory_core::consent::Slice::blocked.
            blocked := blocked || sl;
        ELSE
            missing := missing || sl;
        END IF;
    END LOOP;
    RETURN jsonb_build_object(
        'route', route, 'slices', slices, 'slices_loaded', to_jsonb(loaded), 'slices_skipped_missing', to_jsonb(missing),
        'slices_blocked_by_consent', to_jsonb(blocked), 'cold_start', cold,
        'tokens_estimated', (SELECT coalesce(sum(ceil(length(l) / 4.0)), 0)::int FROM unnest(lines) l),
        'rendered', '<user_context>' || E'\n' || coalesce((SELECT string_agg(l || E'\n', '' ORDER BY n) FROM unnest(lines) WITH ORDINALITY x(l, n)), '')
                    || '</user_context>');
END $$;
COMMENT ON FUNCTION memory_internal._resolve_slices(text, text[], text[], jsonb, jsonb, jsonb, text, text, text, timestamptz) IS
  'memory.load_slices: the wanted slices resolved from the readable contexts (task > thread > profile, cold-start defaults, active threads, the drift count), sorted into loaded, missing and blocked by consent, and rendered as the <user_context> block; load_slices'' result.';

CREATE FUNCTION memory.load_slices(org_id text, user_id text, route text, task_id text DEFAULT NULL, thread_id text DEFAULT NULL,
                                   optional text[] DEFAULT '{}', at timestamptz DEFAULT now())
RETURNS jsonb LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p_org    text := load_slices.org_id;
    p_user   text := load_slices.user_id;
    have     text[];
    profile  boolean;
    threads  boolean;
    t_fields jsonb;   -- the task's context (latest), unless expired
    h_fields jsonb;   -- the thread's context (latest), unless blocked or without consent
    p_fields jsonb;   -- the profile (latest), with save_to_profile
    wanted   text[];
    -- slice -> its rule, context scope -> the consent scope it is loaded under (memory_core::consent;
    -- immutable, so computed once per session when the statements are planned)
    rules    constant jsonb := memory_internal._slice_rules();
    needs    constant jsonb := memory_internal._context_needs();
BEGIN
    -- memory_internal._consent_args written out: this is the read path of every request, and each
    -- call of a function with a SET clause costs more than its query.
    IF p_org IS NULL OR p_org !~ '[^[:space:]]' OR p_user IS NULL OR p_user !~ '[^[:space:]]' THEN
        RAISE EXCEPTION 'consent needs an org_id and a user_id' USING ERRCODE = '22023';
    END IF;
    IF at IS NULL OR NOT isfinite(at) THEN
        RAISE EXCEPTION 'at must be a finite time, got %', at USING ERRCODE = '22023';
    END IF;
    IF at > now() + memory_internal._max_clock_skew() THEN
        RAISE EXCEPTION 'at may not be in the future, got %', at USING ERRCODE = '22023';
    END IF;
    PERFORM memory_internal._require_org(p_org);
    IF NOT EXISTS (SELECT 1 FROM memory.route_slices r WHERE r.route = load_slices.route) THEN
        RAISE EXCEPTION 'unknown route "%"', route USING ERRCODE = '22023',
            HINT = 'Routes: ' || (SELECT string_agg(DISTINCT r.route, ', ') FROM memory.route_slices r);
    END IF;
    IF optional IS NULL OR array_position(optional, NULL) IS NOT NULL
       OR EXISTS (SELECT 1 FROM unnest(optional) o WHERE NOT rules ? o) THEN
        RAISE EXCEPTION 'optional must name slices (S1_language_pref ... S9_persona_drift_recent)' USING ERRCODE = '22023';
    END IF;
    -- The consent in force, by its one rule (the call costs about 2% of this function, measured).
    have := coalesce(memory_internal._consent_scopes(p_org, p_user)::text[], '{}');
    profile := (needs->>'profile') = ANY (have);
    threads := (needs->>'thread') = ANY (have);
    -- The route's required slices and the optional ones asked for; never a `never` slice.
    wanted := ARRAY(SELECT r.slice FROM memory.route_slices r
                     WHERE r.route = load_slices.route AND (r.mode = 'required' OR (r.mode = 'optional' AND r.slice = ANY (optional)))
                     ORDER BY r.slice);
    IF task_id IS NOT NULL THEN
        SELECT u.fields INTO t_fields FROM memory.user_contexts u
         WHERE u.org_id = p_org AND u.user_id = p_user AND u.scope = 'task' AND u.task_id = load_slices.task_id
           AND (u.expires_at IS NULL OR u.expires_at > at)
         ORDER BY u.created_at DESC, u.id DESC LIMIT 1;
    END IF;
    IF thread_id IS NOT NULL AND threads THEN
        SELECT u.fields INTO h_fields FROM memory.user_contexts u
         WHERE u.org_id = p_org AND u.user_id = p_user AND u.scope = 'thread' AND u.thread_id = load_slices.thread_id
           AND NOT u.consent_blocked
         ORDER BY u.created_at DESC, u.id DESC LIMIT 1;
    END IF;
    IF profile THEN
        SELECT u.fields INTO p_fields FROM memory.user_contexts u
         WHERE u.org_id = p_org AND u.user_id = p_user AND u.scope = 'profile'
         ORDER BY u.created_at DESC, u.id DESC LIMIT 1;
    END IF;
    RETURN memory_internal._resolve_slices(route, wanted, have, t_fields, h_fields, p_fields, p_org, p_user, thread_id, at);
END $$;
COMMENT ON FUNCTION memory.load_slices(text, text, text, text, text, text[], timestamptz) IS
  'The slices of a user''s memory a request on `route` may load (docs/design.md#consent-and-drift): the route''s required slices and the optional ones asked for, never a `never` one; task > thread > profile; missing fields skipped; cold start (no profile or thread context) fills S1-S3 with English, standard, balanced; thread contexts blocked by a revocation are not read; S9 is a count. Returns slices, slices_loaded, slices_skipped_missing, slices_blocked_by_consent, cold_start, tokens_estimated and the rendered <user_context> block. Unknown route or slice -> 22023.';

SELECT pg_catalog.pg_extension_config_dump('memory.route_slices', '');

-- ------------------------------------------------------------------------------------------------
-- Persona drift (docs/design.md#consent-and-drift): the feedback, refresh and watch-question tables run the four
-- detectors on insert, in the writing transaction; what they find is appended to the drift log.
-- Drift never changes a profile. Only users with save_to_profile in force are observed (the
-- drift log lives and dies with that consent, docs/design.md#consent-and-drift).

CREATE TABLE memory.drift_thresholds (
    name        text PRIMARY KEY,
    value       numeric NOT NULL CHECK (value >= 0),
    description text NOT NULL
);
INSERT INTO memory.drift_thresholds (name, value, description) VALUES
    ('grade_reversal_days', 14, 'a rating on the same object flips polarity within this many days'),
    ('feedback_conflict_min', 2, 'opposing feedback keywords on the same kind of object at least this many times'),
    ('refresh_changed_inferences_min', 5, 'a refresh changing more inferences than this may be a stance flip'),
    ('refresh_lookback_days', 14, 'the thesis is compared with the refresh at least this many days earlier'),
    ('refresh_jaccard_max', 0.2, 'a keyword Jaccard similarity below this is a flip'),
    ('watch_reopen_days', 14, 'a watch question reopened within this many days of being resolved'),
    ('watch_reopen_min_hours', 1, 'and not within this many hours (no instant misjudgement)'),
    ('alert_window_hours', 24, 'drift_alerts: this window'),
    ('alert_min_rows', 3, 'drift_alerts: at least this many drift rows in the window'),
    ('alert_feedback_conflicts', 5, 'drift_alerts: or at least this many feedback_conflict rows');
COMMENT ON TABLE memory.drift_thresholds IS 'Thresholds of the drift detectors and of memory.drift_alerts (docs/design.md#consent-and-drift defaults); editable by the extension owner.';

CREATE TABLE memory.drift_lexicon (
    word     text PRIMARY KEY CHECK (word ~ '[^[:space:]]'),
    polarity smallint NOT NULL CHECK (polarity IN (-1, 1))
);
INSERT INTO memory.drift_lexicon (word, polarity) VALUES
    ('thumbs_up', 1), ('not_helpful', -1), ('agree', 1), ('disagree', -1), ('对', 1), ('错', -1);
COMMENT ON TABLE memory.drift_lexicon IS 'Feedback keywords and their polarity for feedback_conflict (the starter words); editable by the extension owner.';

-- Seeded platform tables: inserting a row that exists sets it (a dump restores edits over the seeds).
CREATE FUNCTION memory_internal._merge_drift_setting()
RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- On Citus a trigger fires on the shards of the table (reference copies): a restore merges
    -- into the table itself, never into a shard.
    IF TG_RELID OPERATOR(pg_catalog.<>) 'memory.drift_thresholds'::pg_catalog.regclass AND TG_RELID OPERATOR(pg_catalog.<>) 'memory.drift_lexicon'::pg_catalog.regclass THEN
        RETURN NEW;
    END IF;
    IF TG_TABLE_NAME = 'drift_thresholds' THEN
        UPDATE memory.drift_thresholds t SET value = NEW.value, description = NEW.description WHERE t.name = NEW.name;
    ELSE
        UPDATE memory.drift_lexicon l SET polarity = NEW.polarity WHERE l.word = NEW.word;
    END IF;
    RETURN CASE WHEN FOUND THEN NULL ELSE NEW END;
END $$;
CREATE TRIGGER memory_merge BEFORE INSERT ON memory.drift_thresholds FOR EACH ROW EXECUTE FUNCTION memory_internal._merge_drift_setting();
CREATE TRIGGER memory_merge BEFORE INSERT ON memory.drift_lexicon FOR EACH ROW EXECUTE FUNCTION memory_internal._merge_drift_setting();
ALTER TABLE memory.drift_thresholds ENABLE ALWAYS TRIGGER memory_merge;
ALTER TABLE memory.drift_lexicon ENABLE ALWAYS TRIGGER memory_merge;
CREATE TRIGGER memory_rules_changed AFTER INSERT OR UPDATE OR DELETE ON memory.drift_thresholds
    FOR EACH ROW EXECUTE FUNCTION memory.rules_changed();
CREATE TRIGGER memory_rules_changed_truncate AFTER TRUNCATE ON memory.drift_thresholds
    FOR EACH STATEMENT EXECUTE FUNCTION memory.rules_changed();
CREATE TRIGGER memory_rules_changed AFTER INSERT OR UPDATE OR DELETE ON memory.drift_lexicon
    FOR EACH ROW EXECUTE FUNCTION memory.rules_changed();
CREATE TRIGGER memory_rules_changed_truncate AFTER TRUNCATE ON memory.drift_lexicon
    FOR EACH STATEMENT EXECUTE FUNCTION memory.rules_changed();

CREATE FUNCTION memory_internal._drift_threshold(p_name text)
RETURNS numeric LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
AS $$ SELECT t.value FROM memory.drift_thresholds t WHERE t.name OPERATOR(pg_catalog.=) p_name $$;


CREATE TABLE memory.user_feedback (
    id                 uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    org_id             text NOT NULL,
    user_id            text NOT NULL CHECK (user_id ~ '[^[:space:]]'),
    related_object_ref text NOT NULL CHECK (related_object_ref ~ '[^[:space:]]'),
    cognition_object   jsonb,
    rating             text CHECK (rating IN ('thumbs_up', 'not_helpful', 'agree', 'disagree')),
    comment            text,
    created_at         timestamptz NOT NULL DEFAULT now() CHECK (isfinite(created_at)),
    -- The comment's lexicon polarity when it was written (memory_internal._feedback_polarity), so the
    -- conflict detector reads the latest opposing comments by an index instead of re-reading each one.
    comment_polarity   smallint CONSTRAINT user_feedback_polarity_check CHECK (comment_polarity IS NULL OR (comment_polarity IN (-1, 1) AND comment IS NOT NULL))
);
CREATE INDEX user_feedback_user ON memory.user_feedback (org_id, user_id, related_object_ref, created_at, id);
CREATE INDEX user_feedback_polarity ON memory.user_feedback (org_id, user_id, comment_polarity, created_at, id) WHERE comment_polarity IS NOT NULL;
COMMENT ON TABLE memory.user_feedback IS
  'A user''s feedback on an object (rating, comment); an insert runs the grade_reversal and feedback_conflict detectors.';

CREATE TABLE memory.thread_refreshes (
    id                 uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    org_id             text NOT NULL,
    user_id            text NOT NULL CHECK (user_id ~ '[^[:space:]]'),
    thread_id          text NOT NULL CHECK (thread_id ~ '[^[:space:]]'),
    main_thesis        text NOT NULL,
    changed_inferences int NOT NULL DEFAULT 0 CHECK (changed_inferences >= 0),
    created_at         timestamptz NOT NULL DEFAULT now() CHECK (isfinite(created_at))
);
-- The drift detectors read a user's own earlier refreshes of a thread (never another user's).
CREATE INDEX thread_refreshes_thread ON memory.thread_refreshes (org_id, user_id, thread_id, created_at, id);
COMMENT ON TABLE memory.thread_refreshes IS 'A thread refresh (main thesis, changed inferences); an insert runs the refresh_stance_flip detector.';

CREATE TABLE memory.watch_question_updates (
    id                uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    org_id            text NOT NULL,
    user_id           text NOT NULL CHECK (user_id ~ '[^[:space:]]'),
    watch_question_id text NOT NULL CHECK (watch_question_id ~ '[^[:space:]]'),
    thread_id         text,
    status            text NOT NULL CHECK (status IN ('resolved', 'reopened')),
    created_at        timestamptz NOT NULL DEFAULT now() CHECK (isfinite(created_at))
);
-- The drift detectors read a user's own earlier updates of a question (never another user's).
CREATE INDEX watch_question_updates_question ON memory.watch_question_updates (org_id, user_id, watch_question_id, created_at, id);
COMMENT ON TABLE memory.watch_question_updates IS
  'Watch question lifecycle (resolved, reopened); an insert runs the watch_question_resolved_then_reopened detector.';

-- The detectors (src/drift.rs, rules in memory_core::drift): memory_internal._feedback_polarity() fixes a
-- comment's lexicon polarity when it is written (a restore keeps it); memory_internal._detect_drift() runs
-- the four detectors after each insert, for users with save_to_profile in force. Both are C
-- triggers that read and write as the extension owner; the writer's org was checked by row-level
-- security. They cache the lexicon and thresholds: a change to either table tells every backend.
-- No WHEN clause: a trigger's WHEN is read and prepared again by every statement, which costs a
-- single-row insert more than the functions' own early return for a row without comment or rating.
CREATE TRIGGER memory_feedback_polarity BEFORE INSERT ON memory.user_feedback
    FOR EACH ROW EXECUTE FUNCTION memory_internal._feedback_polarity();
CREATE TRIGGER memory_drift AFTER INSERT ON memory.user_feedback
    FOR EACH ROW EXECUTE FUNCTION memory_internal._detect_drift();
CREATE TRIGGER memory_drift AFTER INSERT ON memory.thread_refreshes FOR EACH ROW EXECUTE FUNCTION memory_internal._detect_drift();
CREATE TRIGGER memory_drift AFTER INSERT ON memory.watch_question_updates FOR EACH ROW EXECUTE FUNCTION memory_internal._detect_drift();

-- Users to look at (docs/design.md#consent-and-drift): many drift rows in a short window, or many feedback conflicts.
CREATE VIEW memory.drift_alerts AS
SELECT d.org_id, d.user_id,
       count(*) FILTER (WHERE d.created_at > now() - make_interval(hours => memory_internal._drift_threshold('alert_window_hours')::int)) AS drift_in_window,
       count(*) FILTER (WHERE d.signal_kind = 'feedback_conflict') AS feedback_conflicts,
       max(d.created_at) AS last_drift_at
  FROM memory.persona_drift_log d
 GROUP BY d.org_id, d.user_id
HAVING count(*) FILTER (WHERE d.created_at > now() - make_interval(hours => memory_internal._drift_threshold('alert_window_hours')::int))
           >= memory_internal._drift_threshold('alert_min_rows')
    OR count(*) FILTER (WHERE d.signal_kind = 'feedback_conflict') >= memory_internal._drift_threshold('alert_feedback_conflicts');
ALTER VIEW memory.drift_alerts SET (security_invoker = true);
COMMENT ON VIEW memory.drift_alerts IS
  'Users with at least alert_min_rows drift rows in alert_window_hours, or at least alert_feedback_conflicts feedback_conflict rows (memory.drift_thresholds).';

SELECT pg_catalog.pg_extension_config_dump('memory.drift_thresholds', '');
SELECT pg_catalog.pg_extension_config_dump('memory.drift_lexicon', '');
SELECT pg_catalog.pg_extension_config_dump('memory.user_feedback', '');
SELECT pg_catalog.pg_extension_config_dump('memory.thread_refreshes', '');
SELECT pg_catalog.pg_extension_config_dump('memory.watch_question_updates', '');

-- Account deletion (docs/design.md#consent-and-drift): what is left of a user whose consent-era rows were erased.
CREATE TABLE memory.deletion_stubs (
    org_id                      text NOT NULL,
    user_id                     text NOT NULL,
    deleted_at                  timestamptz NOT NULL DEFAULT now(),
    consent_version_at_deletion int
);
CREATE INDEX deletion_stubs_user ON memory.deletion_stubs (org_id, user_id);
COMMENT ON TABLE memory.deletion_stubs IS
  'One row per account deletion (memory.erase_subject) of a user with consent history: when, and the consent version in force, nothing else (docs/design.md#consent-and-drift).';
SELECT pg_catalog.pg_extension_config_dump('memory.deletion_stubs', '');

-- The consent-era tables an account deletion clears (memory.erase_subject), in the order it
-- clears them.
CREATE FUNCTION memory_internal._consent_era_tables()
RETURNS text[] LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp
AS $$ SELECT ARRAY['consents', 'user_contexts', 'threads', 'training_candidates', 'persona_drift_log',
                   'user_feedback', 'thread_refreshes', 'watch_question_updates'] $$;

-- The consent-era part of memory.erase_subject for one org: every row of the subject, and a
-- deletion stub when its consent history goes, unless the org holds the user (a legal hold on
-- the user). On Citus it runs on the node of the org's shards (see _revoke_consent_in). Not
-- granted to PUBLIC.
CREATE FUNCTION memory_internal._erase_consent_in(org text, subject text, who jsonb)
RETURNS jsonb LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    counts jsonb := '{}';
    n      bigint;
    t      text;
BEGIN
    IF memory_internal._held(org, subject, NULL) THEN
        RETURN counts;
    END IF;
    PERFORM memory_internal._delegated(who);
    PERFORM memory_internal._consent_gate(true);
    INSERT INTO memory.deletion_stubs (org_id, user_id, consent_version_at_deletion)
    SELECT org, subject, max(c.version) FROM memory.consents c
     WHERE c.org_id = _erase_consent_in.org AND c.user_id = subject
    HAVING count(*) > 0;
    GET DIAGNOSTICS n = ROW_COUNT;
    counts := counts || jsonb_build_object('deletion_stubs', n);
    FOREACH t IN ARRAY memory_internal._consent_era_tables() LOOP
        EXECUTE format('DELETE FROM memory.%I x WHERE x.org_id OPERATOR(pg_catalog.=) $1 AND x.user_id OPERATOR(pg_catalog.=) $2', t)
          USING org, subject;
        GET DIAGNOSTICS n = ROW_COUNT;
        counts := counts || jsonb_build_object(t, n);
    END LOOP;
    PERFORM memory_internal._consent_gate(false);
    PERFORM memory_internal._delegated_done(who);
    RETURN counts;
END $$;

-- The consent-era part of memory.erase_subject: org by org, in the orgs it may erase (scope
-- NULL: every org) that hold rows of the subject. Returns the counts.
CREATE FUNCTION memory_internal._erase_consent_rows(p_subject text, p_scope text)
RETURNS jsonb LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    counts jsonb := jsonb_build_object('deletion_stubs', 0)
                    || (SELECT jsonb_object_agg(t, 0) FROM unnest(memory_internal._consent_era_tables()) t);
    o      text;
BEGIN
    FOR o IN EXECUTE (SELECT string_agg(format('SELECT x.org_id FROM memory.%I x WHERE x.user_id OPERATOR(pg_catalog.=) $1'
                                               ' AND ($2 IS NULL OR x.org_id OPERATOR(pg_catalog.=) $2)', t), ' UNION ')
                        FROM unnest(memory_internal._consent_era_tables()) t) || ' ORDER BY 1'
               USING p_subject, p_scope LOOP
        counts := memory_internal._add_counts(counts,
                      memory_internal._org_call('memory_internal._erase_consent_in(text,text,jsonb)', o, jsonb_build_array(p_subject)));
    END LOOP;
    RETURN counts;
END $$;

-- The consent-era sections of memory.export_subject (docs/design.md#consent-and-drift): every consent version, the
-- contexts (profile, thread, and task contexts of the last 7 days), the drift log, and the
-- training candidates' metadata.
CREATE FUNCTION memory_internal._export_consent_rows(p_subject text, p_scope text)
RETURNS jsonb LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN jsonb_build_object(
        'consents', (SELECT coalesce(jsonb_agg(to_jsonb(c) ORDER BY c.org_id, c.version), '[]') FROM memory.consents c
                      WHERE c.user_id OPERATOR(pg_catalog.=) p_subject AND (p_scope IS NULL OR c.org_id OPERATOR(pg_catalog.=) p_scope)),
        'user_contexts', (SELECT coalesce(jsonb_agg(to_jsonb(u) ORDER BY u.created_at, u.id), '[]') FROM memory.user_contexts u
                           WHERE u.user_id OPERATOR(pg_catalog.=) p_subject AND (p_scope IS NULL OR u.org_id OPERATOR(pg_catalog.=) p_scope)
                             AND (u.scope OPERATOR(pg_catalog.<>) 'task' OR u.created_at OPERATOR(pg_catalog.>) (now() OPERATOR(pg_catalog.-) interval '7 days'))),
        'persona_drift', (SELECT coalesce(jsonb_agg(to_jsonb(d) ORDER BY d.created_at, d.drift_id), '[]') FROM memory.persona_drift_log d
                           WHERE d.user_id OPERATOR(pg_catalog.=) p_subject AND (p_scope IS NULL OR d.org_id OPERATOR(pg_catalog.=) p_scope)),
        'training_candidates', (SELECT coalesce(jsonb_agg(jsonb_build_object('id', t.id, 'org_id', t.org_id, 'object_ref', t.object_ref,
                                                                      'status', t.status, 'withdrawal_status', t.withdrawal_status,
                                                                      'created_at', t.created_at) ORDER BY t.created_at, t.id), '[]')
                                  FROM memory.training_candidates t
                                 WHERE t.user_id OPERATOR(pg_catalog.=) p_subject AND (p_scope IS NULL OR t.org_id OPERATOR(pg_catalog.=) p_scope)));
END $$;

-- ------------------------------------------------------------------------------------------------
-- memory.govern's "consent" option (docs/design.md#consent-and-drift): an application table whose rows belong to users
-- takes them only under a consent scope, and a revocation of that scope deletes them
-- ("on_revoke": "delete") or keeps them, refusing new ones ("block").

-- Whether (org, user) has `scope` in force; only for orgs the caller may act for (42501), and
-- share-locking the latest version as every consent-gated write does. Any role may call it:
-- it answers nothing about an org the caller is not bound to.
CREATE FUNCTION memory_internal._has_consent(p_org text, p_user text, p_scope text)
RETURNS boolean LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- A restore brings rows back as dumped (memory.restore_mode, superuser-only).
    IF memory_internal._restore_mode() THEN
        RETURN true;
    END IF;
    IF memory_internal._blank(p_org) OR memory_internal._blank(p_user) THEN
        RETURN false;
    END IF;
    PERFORM memory_internal._require_org(p_org);
    RETURN p_scope = ANY (ARRAY(SELECT s::text FROM unnest(coalesce(memory_internal._consent_scopes_locked(p_org, p_user), '{}')) s));
END $$;

-- The trigger of a governed table (SECURITY INVOKER: it reads the writer's own row with the
-- writer's rights): TG_ARGV = user column, org column, scope.
CREATE FUNCTION memory_internal._consent_row_gate()
RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r     jsonb;
    u     text;
    o     text;
BEGIN
    r := to_jsonb(NEW);
    u := r->>TG_ARGV[0];
    o := CASE WHEN TG_ARGV[1] = '' THEN NULL ELSE r->>TG_ARGV[1] END;
    IF u IS NULL THEN
        RETURN NEW;  -- a row of no user needs no user's consent
    END IF;
    IF o IS NULL OR NOT memory_internal._has_consent(o, u, TG_ARGV[2]) THEN
        RAISE EXCEPTION 'profile_consent_required' USING ERRCODE = 'MX003', DETAIL = 'required_scopes: ' || TG_ARGV[2],
            HINT = format('%s rows of a user need the user''s %s consent (memory.grant_consent).', memory_internal._table_of(TG_RELID)::regclass, TG_ARGV[2]);
    END IF;
    RETURN NEW;
END $$;

CREATE FUNCTION memory_internal._govern_consent(tbl regclass, opts jsonb, eff jsonb)
RETURNS jsonb LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c       jsonb := opts->'consent';
    c_user  text;
    c_org   text;
    scope   text;
    mode    text;
BEGIN
    IF c IS NULL OR c = 'false'::jsonb OR c = 'null'::jsonb THEN
        PERFORM memory_internal._drop_trigger(tbl, 'memory_consent');
        RETURN eff;
    END IF;
    IF jsonb_typeof(c) <> 'object' OR EXISTS (SELECT 1 FROM jsonb_object_keys(c) k WHERE k NOT IN ('user', 'scope', 'on_revoke')) THEN
        RAISE EXCEPTION 'option "consent" must be {"user": column, "scope": consent scope, "on_revoke": "delete" or "block"}' USING ERRCODE = '22023';
    END IF;
    c_user := c->>'user';
    scope := c->>'scope';
    mode := coalesce(c->>'on_revoke', 'delete');
    c_org := coalesce(eff->>'org', opts->>'org', CASE WHEN memory_internal._has_column(tbl, 'org_id') THEN 'org_id' END);
    IF c_user IS NULL OR NOT scope = ANY (ARRAY(SELECT s::text FROM unnest(enum_range(NULL::memory.consent_scope)) s))
       OR mode NOT IN ('delete', 'block') THEN
        RAISE EXCEPTION 'option "consent" needs "user" (a column), "scope" (one of %) and "on_revoke" delete or block',
            array_to_string(enum_range(NULL::memory.consent_scope), ', ') USING ERRCODE = '22023';
    END IF;
    IF c_org IS NULL THEN
        RAISE EXCEPTION 'option "consent" needs the table''s org column ("org")' USING ERRCODE = '22023';
    END IF;
    PERFORM memory_internal._column_type(tbl, c_user, 'user');
    PERFORM memory_internal._column_type(tbl, c_org, 'org');
    PERFORM memory_internal._drop_trigger(tbl, 'memory_consent');
    PERFORM memory_internal._exec_as_caller(format('CREATE TRIGGER memory_consent BEFORE INSERT ON %s FOR EACH ROW '
                                          'EXECUTE FUNCTION memory_internal._consent_row_gate(%L, %L, %L)', tbl, c_user, c_org, scope));
    RETURN eff || jsonb_build_object('consent', jsonb_build_object('user', c_user, 'org', c_org, 'scope', scope, 'on_revoke', mode));
END $$;

-- The governed application tables whose rows of a user of `org` a revocation of `gone` deletes
-- ("on_revoke": "delete"), with their user and org columns and whether they are with the org's
-- shards on Citus (distributed and co-located with memory_ext's stores): [{"table", "user",
-- "org", "there"}]. Only tables whose owner may act for the org: statements on an application
-- table act for its owner's orgs. Read on the node the revocation is called on (the registry is
-- each node's own). Not granted to PUBLIC.
CREATE FUNCTION memory_internal._revoke_targets(gone memory.consent_scope[], org text)
RETURNS jsonb LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    dist constant boolean := memory_internal._citus_distributed('memory.user_contexts');
BEGIN
    RETURN (SELECT coalesce(jsonb_agg(jsonb_build_object('table', g.relid::regclass::text, 'user', g.options->'consent'->>'user',
                                                         'org', g.options->'consent'->>'org',
                                                         'there', NOT dist OR memory_internal._colocated_with_stores(g.relid))
                                      ORDER BY g.relid::regclass::text), '[]')
              FROM memory.governance_registry g
              JOIN pg_catalog.pg_class c ON c.oid = g.relid
             WHERE NOT g.builtin AND g.options->'consent'->>'on_revoke' = 'delete'
               AND g.options->'consent'->>'scope' = ANY (ARRAY(SELECT s::text FROM unnest(gone) s))
               AND memory_internal._may_act_for_role(c.relowner, _revoke_targets.org));
END $$;

-- Deletes the rows of (org, user) of each governed table in `targets` (memory_internal._revoke_targets),
-- as the table's owner and through legal holds (a revocation deletes what its option says, as
-- before holds), each table in a subtransaction of its own: {"deleted": {table: rows},
-- "failed": {table: message}}. The statement names the org. Not granted to PUBLIC.
CREATE FUNCTION memory_internal._clear_governed(org text, user_id text, targets jsonb)
RETURNS jsonb LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    g       record;
    r       jsonb;
    deleted jsonb := '{}';
    failed  jsonb := '{}';
BEGIN
    FOR g IN SELECT x->>'table' AS tbl, x->>'user' AS ucol, x->>'org' AS ocol
               FROM jsonb_array_elements(coalesce(targets, '[]')) x ORDER BY 1 LOOP
        BEGIN
            -- Through holds for this table's rows of this user only (memory_internal._hold_erase_gate).
            PERFORM memory_internal._hold_erase_gate(g.tbl::regclass, _clear_governed.user_id);
            r := memory_internal._exec_as_table_owner(g.tbl::regclass,
                     format('DELETE FROM %s t WHERE t.%I::pg_catalog.text OPERATOR(pg_catalog.=) $1 AND t.%I::pg_catalog.text OPERATOR(pg_catalog.=) $2',
                            g.tbl::regclass, g.ucol, g.ocol),
                     ARRAY[_clear_governed.user_id, _clear_governed.org]);
            PERFORM memory_internal._hold_erase_gate(NULL, NULL);
            deleted := deleted || jsonb_build_object(g.tbl, (r->>'processed')::bigint);
        EXCEPTION WHEN OTHERS THEN
            failed := failed || jsonb_build_object(g.tbl, SQLERRM);
        END;
    END LOOP;
    RETURN jsonb_build_object('deleted', deleted, 'failed', failed);
END $$;
