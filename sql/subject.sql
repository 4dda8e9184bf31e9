-- Data-subject rights and housekeeping (SPEC §4): erasure, export, task cleanup, transfer.

-- Citus (SPEC §10): the orgs of a subject's rows in a distributed application table that the
-- table's owner may act for, sorted. On a shard no function may read the registries (a
-- distributed query from a query on a shard), so erasure and export work these out here and
-- their statements name the orgs.
CREATE FUNCTION memory_internal._subject_orgs(tbl regclass, user_col text, org_col text, subject text)
RETURNS text[] LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r jsonb := memory_internal._exec_as_table_owner(tbl,
                   format('SELECT coalesce(pg_catalog.jsonb_agg(DISTINCT t.%I::pg_catalog.text), ''[]'') FROM %s t
                            WHERE t.%I::pg_catalog.text OPERATOR(pg_catalog.=) $1', org_col, tbl, user_col),
                   ARRAY[subject]);
BEGIN
    RETURN ARRAY(SELECT o FROM pg_catalog.jsonb_array_elements_text(r) o
                  WHERE memory_internal._may_act_for_role((SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid = tbl), o)
                  ORDER BY 1);
END $$;

CREATE FUNCTION memory.erase_subject(user_id text)
RETURNS jsonb LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    subject text := erase_subject.user_id;
    counts  jsonb := '{}';
    held    bigint;
    n       bigint;
    t       record;
    r       jsonb;
    -- A role bound to orgs erases in its acting org only; unrestricted roles everywhere.
    scope   text := memory_internal._scope_org();
    o       text;
    failed  jsonb;
    skipped jsonb := '[]';
BEGIN
    IF memory_internal._blank(subject) THEN
        RAISE EXCEPTION 'memory.erase_subject needs a user_id' USING ERRCODE = '22023';
    END IF;
    -- The hold test is written out in the deletes (memory_internal._held in the counts): on Citus these
    -- statements run on the shards, where Citus refuses a STABLE function of a column in a
    -- DELETE. No tenant test runs in them: the scope is worked out here, for the caller.
    SELECT count(*) INTO held FROM memory.observations o
     WHERE o.user_id = subject AND (scope IS NULL OR o.org_id = scope) AND memory_internal._held(o.org_id, o.user_id, o.id);
    DELETE FROM memory.observation_weight_history h USING memory.observations o
     WHERE h.observation_id = o.id AND h.org_id = o.org_id AND o.user_id = subject AND (scope IS NULL OR o.org_id = scope)
       AND NOT EXISTS (SELECT 1 FROM memory.legal_holds lh
                           WHERE lh.released_at IS NULL AND lh.org_id OPERATOR(pg_catalog.=) o.org_id
                             AND (lh.observation_id OPERATOR(pg_catalog.=) o.id
                                  OR (lh.observation_id IS NULL AND (lh.user_id OPERATOR(pg_catalog.=) o.user_id OR lh.user_id IS NULL))));
    GET DIAGNOSTICS n = ROW_COUNT; counts := counts || jsonb_build_object('weight_history', n);
    DELETE FROM memory.observations o WHERE o.user_id = subject AND (scope IS NULL OR o.org_id = scope)
       AND NOT EXISTS (SELECT 1 FROM memory.legal_holds lh
                           WHERE lh.released_at IS NULL AND lh.org_id OPERATOR(pg_catalog.=) o.org_id
                             AND (lh.observation_id OPERATOR(pg_catalog.=) o.id
                                  OR (lh.observation_id IS NULL AND (lh.user_id OPERATOR(pg_catalog.=) o.user_id OR lh.user_id IS NULL))));
    GET DIAGNOSTICS n = ROW_COUNT; counts := counts || jsonb_build_object('observations', n);
    SELECT held + count(*) INTO held FROM memory.observations_archive a
     WHERE a.user_id = subject AND (scope IS NULL OR a.org_id = scope) AND memory_internal._held(a.org_id, a.user_id, a.id);
    DELETE FROM memory.observations_archive o WHERE o.user_id = subject AND (scope IS NULL OR o.org_id = scope)
       AND NOT EXISTS (SELECT 1 FROM memory.legal_holds lh
                           WHERE lh.released_at IS NULL AND lh.org_id OPERATOR(pg_catalog.=) o.org_id
                             AND (lh.observation_id OPERATOR(pg_catalog.=) o.id
                                  OR (lh.observation_id IS NULL AND (lh.user_id OPERATOR(pg_catalog.=) o.user_id OR lh.user_id IS NULL))));
    GET DIAGNOSTICS n = ROW_COUNT; counts := counts || jsonb_build_object('archive', n);
    -- Governed application tables with a user column, each as its owner (its triggers and casts
    -- run with the owner's rights, never the definer's). A scoped erase needs the table's org column.
    FOR t IN SELECT g.relid::regclass AS table_name, g.options->>'user' AS col, g.options->>'org' AS org_col
               FROM memory.governance_registry g
              WHERE NOT g.builtin AND g.options->>'user' IS NOT NULL AND pg_catalog.to_regclass(g.relid::text) IS NOT NULL
              ORDER BY g.relid::text LOOP
        IF scope IS NOT NULL AND t.org_col IS NULL THEN
            skipped := skipped || to_jsonb(t.table_name::text);
            CONTINUE;
        END IF;
        -- Rows of orgs the table's owner may act for only (the statement runs as that owner), and
        -- one table's failure is reported without stopping the erasure elsewhere.
        BEGIN
            -- Erasure keeps its rule for application tables: the subject's rows go, held or not
            -- (the hold gate; a failure closes it with the subtransaction).
            failed := '{}';
            PERFORM memory_internal._hold_gate(true);
            IF t.org_col IS NOT NULL AND memory_internal._citus_distributed(t.table_name) THEN
                -- Citus (SPEC §10) runs no STABLE function of a column in a distributed DELETE,
                -- nor any that reads the registries on a shard: the DELETE names each org
                -- (memory_internal._subject_orgs). One org at a time, on its shard: the hold gate is this
                -- backend's, and the shards' hold triggers run in the workers' backends, so a held
                -- row there still raises MX006. That org's rows stay (reported under
                -- failed_tables); the other orgs' rows go.
                n := 0;
                FOREACH o IN ARRAY memory_internal._subject_orgs(t.table_name, t.col, t.org_col, subject) LOOP
                    CONTINUE WHEN scope IS NOT NULL AND o OPERATOR(pg_catalog.<>) scope;
                    BEGIN
                        -- (A failed org's subtransaction closed the gate: open again.)
                        PERFORM memory_internal._hold_gate(true);
                        n := n + (memory_internal._exec_as_table_owner(t.table_name,
                                      format('DELETE FROM %s t WHERE t.%I::pg_catalog.text OPERATOR(pg_catalog.=) $1
                                                 AND t.%I::pg_catalog.text OPERATOR(pg_catalog.=) $2',
                                             t.table_name, t.col, t.org_col),
                                      ARRAY[subject, o])->>'processed')::bigint;
                    EXCEPTION WHEN OTHERS THEN
                        failed := failed || jsonb_build_object(o, jsonb_build_object('sqlstate', SQLSTATE, 'message', SQLERRM));
                    END;
                END LOOP;
                r := jsonb_build_object('processed', n);
            ELSE
                r := memory_internal._exec_as_table_owner(t.table_name,
                         format('DELETE FROM %s t WHERE t.%I::pg_catalog.text OPERATOR(pg_catalog.=) $1 AND memory_internal._may_act_for(%s)%s',
                                t.table_name, t.col,
                                CASE WHEN t.org_col IS NULL THEN 'NULL' ELSE format('t.%I::pg_catalog.text', t.org_col) END,
                                CASE WHEN scope IS NULL THEN '' ELSE format(' AND t.%I::pg_catalog.text OPERATOR(pg_catalog.=) $2', t.org_col) END),
                         ARRAY[subject, scope]);
            END IF;
            PERFORM memory_internal._hold_gate(false);
        EXCEPTION WHEN OTHERS THEN
            counts := jsonb_set(counts, '{failed_tables}', coalesce(counts->'failed_tables', '{}')
                                || jsonb_build_object(t.table_name::text, jsonb_build_object('sqlstate', SQLSTATE, 'message', SQLERRM)));
            CONTINUE;
        END;
        n := (r->>'processed')::bigint;
        counts := jsonb_set(counts, '{tables}', coalesce(counts->'tables', '{}') || jsonb_build_object(t.table_name::text, n));
        IF failed OPERATOR(pg_catalog.<>) '{}' THEN
            counts := jsonb_set(counts, '{failed_tables}', coalesce(counts->'failed_tables', '{}')
                                || jsonb_build_object(t.table_name::text, (SELECT v FROM pg_catalog.jsonb_each(failed) e(k, v) ORDER BY k LIMIT 1)
                                                                         || jsonb_build_object('orgs', failed)));
        END IF;
    END LOOP;
    IF jsonb_array_length(skipped) > 0 THEN
        counts := counts || jsonb_build_object('skipped_tables', skipped);
    END IF;
    -- The account's consent-era rows (SPEC §6), leaving a deletion stub per org.
    r := memory_internal._erase_consent_rows(subject, scope);
    counts := counts || jsonb_build_object('consent', r);
    IF (SELECT sum(v::bigint) FROM jsonb_each_text(r) x(k, v)) > 0 THEN
        PERFORM memory_internal._audit('memory.user.delete', jsonb_build_object('subject', memory_internal._pseudonym(subject), 'counts', r), scope);
    END IF;
    -- One event naming the subject only by pseudonym, on the acting org's chain (the platform
    -- chain for an unrestricted erase): the log itself is never edited, so the chain still verifies.
    PERFORM memory_internal._audit('memory.forget',
        jsonb_build_object('subject', memory_internal._pseudonym(subject), 'counts', counts, 'held', held), scope);
    RETURN counts || jsonb_build_object('held', held);
END $$;
COMMENT ON FUNCTION memory.erase_subject(text) IS
  'Erase every row of a subject (observations, weight history, archive, governed tables with a user column); rows under a legal hold stay and are counted as held. One memory.forget event. Not granted to PUBLIC.';

CREATE FUNCTION memory.export_subject(user_id text, include_restricted boolean DEFAULT false)
RETURNS jsonb LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    subject  text := export_subject.user_id;
    obs      jsonb;
    arch     jsonb;
    hist     jsonb;
    manifest jsonb := '{}';
    s        record;
    t        record;
    restricted text;
    r        jsonb;
    tables   jsonb := '{}';
    scope    text;
    consent  jsonb;
BEGIN
    IF memory_internal._blank(subject) THEN
        RAISE EXCEPTION 'memory.export_subject needs a user_id' USING ERRCODE = '22023';
    END IF;
    scope := memory_internal._scope_org();
    -- Everything still held about the subject: expired rows too, until retention soft-deletes
    -- them (soft-deleted rows are invisible to every query function).
    SELECT coalesce(jsonb_agg(to_jsonb(o) ORDER BY o.created_at, o.id), '[]') INTO obs
      FROM memory.observations o
     WHERE o.user_id = subject AND (scope IS NULL OR o.org_id = scope) AND o.soft_deleted_at IS NULL
       AND (include_restricted OR o.classification <> 'restricted');
    SELECT coalesce(jsonb_agg(to_jsonb(a) ORDER BY a.created_at, a.id), '[]') INTO arch
      FROM memory.observations_archive a
     WHERE a.user_id = subject AND (scope IS NULL OR a.org_id = scope) AND (include_restricted OR a.classification <> 'restricted');
    SELECT coalesce(jsonb_agg(to_jsonb(h) ORDER BY h.recorded_at, h.id), '[]') INTO hist
      FROM memory.observation_weight_history h JOIN memory.observations o ON o.id = h.observation_id AND o.org_id = h.org_id
     WHERE o.user_id = subject AND (scope IS NULL OR o.org_id = scope) AND o.soft_deleted_at IS NULL
       AND (include_restricted OR o.classification <> 'restricted');
    consent := memory_internal._export_consent_rows(subject, scope);
    FOR s IN SELECT * FROM (VALUES ('observations', obs), ('archive', arch), ('weight_history', hist),
                                   ('consents', consent->'consents'), ('user_contexts', consent->'user_contexts'),
                                   ('persona_drift', consent->'persona_drift'), ('training_candidates', consent->'training_candidates')) v(name, rows) LOOP
        manifest := manifest || jsonb_build_object(s.name, jsonb_build_object(
            'count', jsonb_array_length(s.rows),
            'sha256', encode(sha256(convert_to(s.rows::text, 'UTF8')), 'hex')));
    END LOOP;
    -- Governed application tables with a user column (what erase_subject deletes), read as each
    -- table's owner, rows of orgs that owner may act for (and of the acting org when scoped).
    FOR t IN SELECT g.relid::regclass AS table_name, g.options->>'user' AS col, g.options->>'org' AS org_col,
                    coalesce(g.options->>'audit_tier', g.options->'target'->>0) AS tier_col
               FROM memory.governance_registry g
              WHERE NOT g.builtin AND g.options->>'user' IS NOT NULL AND pg_catalog.to_regclass(g.relid::text) IS NOT NULL
              ORDER BY g.relid::text LOOP
        CONTINUE WHEN scope IS NOT NULL AND t.org_col IS NULL;
        BEGIN
            restricted := CASE WHEN include_restricted OR t.tier_col IS NULL THEN ''
                               WHEN memory_internal._column_type(t.table_name, t.tier_col, 'tier') = 'jsonb'::regtype
                                    THEN format(' AND (t.%I OPERATOR(pg_catalog.->>) ''classification'') IS DISTINCT FROM ''restricted''', t.tier_col)
                               ELSE format(' AND t.%I::pg_catalog.text IS DISTINCT FROM ''restricted''', t.tier_col) END;
            IF t.org_col IS NOT NULL AND memory_internal._citus_distributed(t.table_name) THEN
                -- Citus (SPEC §10): the read names the subject's orgs (memory_internal._subject_orgs).
                r := memory_internal._exec_as_table_owner(t.table_name, format(
                    'SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.to_jsonb(t)), ''[]'') FROM %s t
                      WHERE t.%I::pg_catalog.text OPERATOR(pg_catalog.=) $1
                        AND t.%I::pg_catalog.text OPERATOR(pg_catalog.=) ANY ($3::pg_catalog.text[])%s%s',
                    t.table_name, t.col, t.org_col,
                    CASE WHEN scope IS NULL THEN '' ELSE format(' AND t.%I::pg_catalog.text OPERATOR(pg_catalog.=) $2', t.org_col) END,
                    restricted),
                    ARRAY[subject, scope, memory_internal._subject_orgs(t.table_name, t.col, t.org_col, subject)::text]);
            ELSE
                r := memory_internal._exec_as_table_owner(t.table_name, format(
                    'SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.to_jsonb(t)), ''[]'') FROM %s t
                      WHERE t.%I::pg_catalog.text OPERATOR(pg_catalog.=) $1 AND memory_internal._may_act_for(%s)%s%s',
                    t.table_name, t.col,
                    CASE WHEN t.org_col IS NULL THEN 'NULL' ELSE format('t.%I::pg_catalog.text', t.org_col) END,
                    CASE WHEN scope IS NULL THEN '' ELSE format(' AND t.%I::pg_catalog.text OPERATOR(pg_catalog.=) $2', t.org_col) END,
                    restricted),
                    ARRAY[subject, scope]);
            END IF;
        EXCEPTION WHEN OTHERS THEN
            r := jsonb_build_object('error', jsonb_build_object('sqlstate', SQLSTATE, 'message', SQLERRM));
        END;
        tables := tables || jsonb_build_object(t.table_name::text, r);
        IF jsonb_typeof(r) = 'array' THEN
            manifest := manifest || jsonb_build_object('table:' || t.table_name::text, jsonb_build_object(
                'count', jsonb_array_length(r), 'sha256', encode(sha256(convert_to(r::text, 'UTF8')), 'hex')));
        END IF;
    END LOOP;
    PERFORM memory_internal._audit('memory.export',
        jsonb_build_object('subject', memory_internal._pseudonym(subject), 'manifest', manifest, 'includeRestricted', include_restricted), scope);
    RETURN jsonb_build_object('schema_version', 1, 'generated_at', now(), 'include_restricted', include_restricted,
                              'manifest', manifest,
                              'sections', jsonb_build_object('observations', obs, 'archive', arch, 'weight_history', hist,
                                                             'tables', tables) || consent);
END $$;
COMMENT ON FUNCTION memory.export_subject(text, boolean) IS
  'Everything held about a subject: observations not soft-deleted, archive, weight history, with a manifest (schema_version, per-section count and sha256 of the section''s JSON text). Restricted rows only when asked. Not granted to PUBLIC.';

CREATE FUNCTION memory.end_task(task_id text)
RETURNS bigint LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n bigint;
    org_scope text := memory_internal._scope_org();
BEGIN
    IF memory_internal._blank(task_id) THEN
        RAISE EXCEPTION 'memory.end_task needs a task_id' USING ERRCODE = '22023';
    END IF;
    -- (The hold test written out, as in memory.erase_subject.)
    DELETE FROM memory.observations o
     WHERE o.task_id = end_task.task_id AND o.memory_type = 'working' AND (org_scope IS NULL OR o.org_id = org_scope)
       AND NOT EXISTS (SELECT 1 FROM memory.legal_holds lh
                           WHERE lh.released_at IS NULL AND lh.org_id OPERATOR(pg_catalog.=) o.org_id
                             AND (lh.observation_id OPERATOR(pg_catalog.=) o.id
                                  OR (lh.observation_id IS NULL AND (lh.user_id OPERATOR(pg_catalog.=) o.user_id OR lh.user_id IS NULL))));
    GET DIAGNOSTICS n = ROW_COUNT;
    -- The task's user contexts expire 24 hours after it ends (seed §3.2); maintenance purges them.
    UPDATE memory.user_contexts u SET expires_at = now() + interval '24 hours'
     WHERE u.task_id = end_task.task_id AND u.scope = 'task' AND u.expires_at IS NULL AND (org_scope IS NULL OR u.org_id = org_scope);
    RETURN n;
END $$;
COMMENT ON FUNCTION memory.end_task(text) IS 'Clear the working memories of a finished task (rt-005), except rows under a legal hold, and let its user contexts expire 24 hours later; returns how many memories were cleared.';

CREATE FUNCTION memory.transfer_observations(ids uuid[], to_project_id text)
RETURNS TABLE (id uuid, transferred boolean, reason text)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r   record;
    moved jsonb := '{}';
    org text;
    cls memory.classification;
    sd  timestamptz;
BEGIN
    IF memory_internal._blank(to_project_id) THEN
        RAISE EXCEPTION 'memory.transfer_observations needs a target project' USING ERRCODE = '22023';
    END IF;
    FOR r IN SELECT u.id AS uid, u.ord, u.ord > min(u.ord) OVER (PARTITION BY u.id) AS repeated
               FROM unnest(coalesce(ids, '{}')) WITH ORDINALITY AS u(id, ord)
              ORDER BY u.ord LOOP
        id := r.uid;
        -- The row's org, checked for the caller (memory_internal._org_of); the row is then read
        -- and changed naming its org.
        org := CASE WHEN NOT r.repeated THEN memory_internal._org_of('memory.observations', r.uid) END;
        IF org IS NOT NULL THEN
            SELECT o.classification, o.soft_deleted_at INTO cls, sd FROM memory.observations o
             WHERE o.org_id OPERATOR(pg_catalog.=) org AND o.id OPERATOR(pg_catalog.=) r.uid FOR UPDATE;
            IF NOT FOUND THEN
                org := NULL;
            END IF;
        END IF;
        IF r.repeated THEN
            -- An id given again is reported, not moved again (a row updated 100,000 times in one
            -- statement would cost that many row versions).
            transferred := false; reason := 'duplicate_in_call';
        ELSIF org IS NULL THEN
            transferred := false; reason := 'not_found';
        ELSIF sd IS NOT NULL THEN
            transferred := false; reason := 'soft_deleted';
        ELSIF cls > 'internal' THEN
            -- Only public and internal observations may cross projects.
            transferred := false; reason := 'classification:' || cls;
        ELSE
            UPDATE memory.observations o SET project_id = to_project_id
             WHERE o.org_id OPERATOR(pg_catalog.=) org AND o.id OPERATOR(pg_catalog.=) r.uid;
            transferred := true; reason := 'transferred';
            moved := jsonb_set(moved, ARRAY[org], coalesce(moved->org, '[]') || to_jsonb(r.uid));
        END IF;
        RETURN NEXT;
    END LOOP;
    FOR org IN SELECT jsonb_object_keys(moved) LOOP
        PERFORM memory_internal._audit('memory.transfer', jsonb_build_object('observationIds', moved->org, 'toProjectId', to_project_id), org);
    END LOOP;
END $$;
COMMENT ON FUNCTION memory.transfer_observations(uuid[], text) IS
  'Move observations to another project; only public and internal move (others report their tier). One memory.transfer event per org.';


-- ------------------------------------------------------------------------------------------------
-- Maintenance: one call for everything periodic, and a pg_cron helper to schedule it.

-- Every maintenance run is recorded, so a pg_cron job's result is visible in SQL (SPEC §9).
CREATE TABLE memory.maintenance_runs (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at          timestamptz NOT NULL,
    started_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    finished_at timestamptz,
    phases      jsonb NOT NULL DEFAULT '{}',
    sqlstate    text,
    error       text
);
COMMENT ON TABLE memory.maintenance_runs IS
  'One row per memory.run_maintenance: when, what each phase did, and the error that stopped it (its work is then rolled back).';
SELECT pg_catalog.pg_extension_config_dump('memory.maintenance_runs', '');

CREATE FUNCTION memory.run_maintenance(at timestamptz DEFAULT now())
RETURNS jsonb LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    ret    jsonb;
    parts  int;
    run_id bigint;
    result jsonb;
    pending bigint;
    err_state text;
    err_text text;
BEGIN
    PERFORM memory_internal._check_at(at, 'memory.run_maintenance');
    IF at IS NULL OR NOT isfinite(at) THEN
        RAISE EXCEPTION 'memory.run_maintenance needs a finite time' USING ERRCODE = '22023';
    END IF;
    INSERT INTO memory.maintenance_runs (at) VALUES (at) RETURNING id INTO run_id;
    BEGIN
        pending := memory_internal._audit_integrate(false);
        RAISE DEBUG 'memory maintenance: retention and archive as of %', at;
        ret := memory.run_retention(false, at);
        parts := memory.audit_ensure_partitions(3, at);
        RAISE DEBUG 'memory maintenance: % audit partition(s) created', parts;
        RAISE DEBUG 'memory maintenance: expired task contexts and drift rows due for purge';
        result := jsonb_build_object('retention', ret, 'audit_partitions_created', parts, 'audit_integrated', pending,
                                     'consent', memory_internal._consent_maintenance(at), 'knowledge', memory_internal._knowledge_retention(at), 'at', at);
        UPDATE memory.maintenance_runs SET finished_at = clock_timestamp(), phases = result WHERE id = run_id;
    EXCEPTION WHEN OTHERS THEN
        -- The phases' work is rolled back; the run and its error stay recorded.
        -- (Into variables first: in the UPDATE, "sqlstate" would also name the column.)
        err_state := SQLSTATE;
        err_text := SQLERRM;
        UPDATE memory.maintenance_runs m SET finished_at = clock_timestamp(), sqlstate = err_state, error = err_text WHERE m.id = run_id;
        RAISE WARNING 'memory maintenance failed: % (%)', err_text, err_state;
        result := jsonb_build_object('error', err_text, 'sqlstate', err_state, 'at', at);
    END;
    RETURN result || jsonb_build_object('run_id', run_id);
END $$;
COMMENT ON FUNCTION memory.run_maintenance(timestamptz) IS
  'Periodic work in one call: run_retention (soft delete, hard delete, archive), audit partitions ahead, expired task contexts and drift rows due for purge, knowledge retention (memory_internal._knowledge_retention), recorded in memory.maintenance_runs (an error is recorded there and returned, its work rolled back). Schedule it with memory.schedule_maintenance.';

CREATE FUNCTION memory.schedule_maintenance(schedule text DEFAULT '*/15 * * * *')
RETURNS bigint LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE job bigint;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_cron') THEN
        RAISE EXCEPTION 'pg_cron is not installed in this database' USING ERRCODE = '55000',
            HINT = 'Add pg_cron to shared_preload_libraries, set cron.database_name to this database, and CREATE EXTENSION pg_cron.';
    END IF;
    IF memory_internal._blank(schedule) THEN
        RAISE EXCEPTION 'a cron schedule is required' USING ERRCODE = '22023';
    END IF;
    EXECUTE 'SELECT cron.schedule($1, $2, $3)' INTO job
      USING 'memory_ext maintenance', schedule, 'SELECT memory.run_maintenance()';
    RETURN job;
END $$;
COMMENT ON FUNCTION memory.schedule_maintenance(text) IS
  'Schedule memory.run_maintenance() with pg_cron under the job name ''memory_ext maintenance'' (calling it again replaces the schedule). Returns the job id.';

CREATE FUNCTION memory.unschedule_maintenance()
RETURNS boolean LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE ok boolean;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_cron') THEN
        RETURN false;
    END IF;
    EXECUTE 'SELECT cron.unschedule($1)' INTO ok USING 'memory_ext maintenance';
    RETURN ok;
EXCEPTION WHEN OTHERS THEN
    RETURN false;
END $$;

CREATE VIEW memory.stats AS
WITH rows AS (
    SELECT o.memory_type, o.classification,
           CASE WHEN o.soft_deleted_at IS NOT NULL THEN 'soft_deleted'
                WHEN o.expires_at IS NOT NULL AND o.expires_at <= now() THEN 'expired'
                ELSE 'live' END AS state,
           o.created_at, pg_column_size(o.*) AS bytes
      FROM memory.observations o
    UNION ALL
    SELECT a.memory_type, a.classification, 'archived', a.created_at, pg_column_size(a.*)
      FROM memory.observations_archive a
)
SELECT memory_type, classification, state,
       count(*) AS observations,
       sum(bytes)::bigint AS bytes,
       count(*) FILTER (WHERE created_at > now() - interval '1 day') AS age_under_1d,
       count(*) FILTER (WHERE created_at <= now() - interval '1 day' AND created_at > now() - interval '30 days') AS age_1d_30d,
       count(*) FILTER (WHERE created_at <= now() - interval '30 days' AND created_at > now() - interval '365 days') AS age_30d_1y,
       count(*) FILTER (WHERE created_at <= now() - interval '365 days') AS age_over_1y
  FROM rows
 GROUP BY memory_type, classification, state;
COMMENT ON VIEW memory.stats IS 'Observations and bytes by memory type, tier and state (live, expired, soft_deleted, archived), with age buckets.';
