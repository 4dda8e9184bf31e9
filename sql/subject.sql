-- Data-subject rights and housekeeping (docs/design.md#retention): erasure, export, task cleanup, transfer.

-- Citus (docs/design.md#scale-out): the orgs of a subject's rows in a distributed application table that the
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

-- A DELETE statement (on table alias t) made to return {processed, ids}: [id, org] of the rows it
-- deleted (columns id_col and org_col, as text; org NULL without org_col); unchanged when id_col is
-- NULL. The columns are quoted here.
CREATE FUNCTION memory_internal._returning_ids(stmt text, id_col text, org_col text)
RETURNS text LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE WHEN id_col IS NULL THEN stmt
                ELSE pg_catalog.format('WITH d AS (%s RETURNING t.%I::pg_catalog.text AS id, %s AS org)
                                        SELECT pg_catalog.jsonb_build_object(''processed'', pg_catalog.count(*),
                                                   ''ids'', coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_array(d.id, d.org)), ''[]'')) FROM d',
                                       stmt, id_col,
                                       CASE WHEN org_col IS NULL THEN 'NULL::pg_catalog.text' ELSE pg_catalog.format('t.%I::pg_catalog.text', org_col) END) END
$$;

-- memory.erase_subject's first step, on memory_ext's own store: the subject's weight history,
-- observations and archived rows (of the org `scope` only, when not NULL) are deleted unless held,
-- and the memories made from them (lineage, memory_internal._erase_derived). Returns the counts
-- (weight_history, observations, archive), how many rows a hold kept (held), the derived ids
-- forgotten and the ids gone by org ({org: {"memory.observations": [id]}}, for the receipts).
-- Not granted to PUBLIC.
CREATE FUNCTION memory_internal._erase_subject_store(subject text, scope text,
                                                     OUT counts jsonb, OUT held bigint, OUT derived jsonb, OUT gone_by jsonb)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n       bigint;
    gone    text[] := '{}';
    orgs_of text[] := '{}';
    id      uuid;
    id_org  text;
    rv      jsonb;
    gate    boolean;
    lin     jsonb;
    tabs    jsonb := '{}';
BEGIN
    counts := '{}';
    derived := '[]';
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
    n := 0;
    gate := memory_internal._lineage_gate(true);
    PERFORM memory_internal._lineage_lock_orgs(ARRAY(SELECT DISTINCT o.org_id FROM memory.observations o
                                                       WHERE o.user_id = subject AND (scope IS NULL OR o.org_id = scope)));
    FOR id, id_org IN DELETE FROM memory.observations o WHERE o.user_id = subject AND (scope IS NULL OR o.org_id = scope)
       AND NOT EXISTS (SELECT 1 FROM memory.legal_holds lh
                           WHERE lh.released_at IS NULL AND lh.org_id OPERATOR(pg_catalog.=) o.org_id
                             AND (lh.observation_id OPERATOR(pg_catalog.=) o.id
                                  OR (lh.observation_id IS NULL AND (lh.user_id OPERATOR(pg_catalog.=) o.user_id OR lh.user_id IS NULL))))
       RETURNING o.id, o.org_id LOOP
        gone := gone || id::text;
        orgs_of := orgs_of || id_org;
        n := n + 1;
    END LOOP;
    counts := counts || jsonb_build_object('observations', n);
    SELECT held + count(*) INTO held FROM memory.observations_archive a
     WHERE a.user_id = subject AND (scope IS NULL OR a.org_id = scope) AND memory_internal._held(a.org_id, a.user_id, a.id);
    n := 0;
    FOR id, id_org IN DELETE FROM memory.observations_archive o WHERE o.user_id = subject AND (scope IS NULL OR o.org_id = scope)
       AND NOT EXISTS (SELECT 1 FROM memory.legal_holds lh
                           WHERE lh.released_at IS NULL AND lh.org_id OPERATOR(pg_catalog.=) o.org_id
                             AND (lh.observation_id OPERATOR(pg_catalog.=) o.id
                                  OR (lh.observation_id IS NULL AND (lh.user_id OPERATOR(pg_catalog.=) o.user_id OR lh.user_id IS NULL))))
       RETURNING o.id, o.org_id LOOP
        gone := gone || id::text;
        orgs_of := orgs_of || id_org;
        n := n + 1;
    END LOOP;
    counts := counts || jsonb_build_object('archive', n);
    -- Lineage (SPEC §18): the memories made from the subject's go with them, whoever's they are,
    -- unless held (counted in held); the receipts name them. (The lineage gate, open since the
    -- deletes above, kept their references for this.)
    FOR id_org, rv IN SELECT u.o, jsonb_agg(DISTINCT u.i) FROM unnest(gone, orgs_of) u(i, o) GROUP BY u.o ORDER BY u.o COLLATE "C" LOOP
        lin := memory_internal._erase_derived(id_org, ARRAY(SELECT x::uuid FROM jsonb_array_elements_text(rv) x), NULL, '{}', subject);
        gone := gone || ARRAY(SELECT x->>'id' FROM jsonb_array_elements(lin->'deleted') x);
        orgs_of := orgs_of || array_fill(id_org, ARRAY[jsonb_array_length(lin->'deleted')]);
        derived := derived || coalesce((SELECT jsonb_agg(x->'id') FROM jsonb_array_elements(lin->'deleted') x), '[]')
                           || coalesce((SELECT jsonb_agg(x->'id') FROM jsonb_each(lin->'tables') e, jsonb_array_elements(e.value) x), '[]');
        held := held + jsonb_array_length(lin->'held');
        -- Rows of governed tables made from them, for the receipt.
        tabs := tabs || jsonb_build_object(id_org, (SELECT jsonb_object_agg(e.key, (SELECT jsonb_agg(x->>'id') FROM jsonb_array_elements(e.value) x))
                                                      FROM jsonb_each(lin->'tables') e));
    END LOOP;
    PERFORM memory_internal._lineage_gate(gate);
    gone_by := coalesce((SELECT jsonb_object_agg(x.o, jsonb_build_object('memory.observations', x.ids))
                           FROM (SELECT u.o, jsonb_agg(DISTINCT u.i) AS ids FROM unnest(gone, orgs_of) u(i, o) GROUP BY u.o) x), '{}');
    gone_by := gone_by || coalesce((SELECT jsonb_object_agg(e.key, coalesce(gone_by->e.key, '{}') || e.value)
                                      FROM jsonb_each(tabs) e WHERE jsonb_typeof(e.value) = 'object'), '{}');
END $$;

-- memory.erase_subject's step for one governed application table `tbl` (user column `col`, org
-- column `org_col` or NULL, id column `id_column` or NULL): the subject's rows, of orgs the table's
-- owner may act for (and of `scope`, when not NULL), deleted as that owner. Returns {locked: true}
-- when another session holds the table locked, {error: {sqlstate, message}} when it failed (the
-- subtransaction rolled back), else {processed, ids: [[id, org]], failed: {org: error}} (failed:
-- the orgs whose rows stayed, on Citus). Not granted to PUBLIC.
CREATE FUNCTION memory_internal._erase_subject_in_table(tbl regclass, col text, org_col text, id_column text,
                                                        subject text, scope text)
RETURNS jsonb LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    id_col  text;
    n       bigint;
    o       text;
    r       jsonb;
    failed  jsonb;
    pairs   jsonb;
BEGIN
    -- An erasure never waits on another session's lock of a table (another org's writer
    -- holding a shared table locked): such a table is listed under locked_tables, its rows
    -- of the subject not yet erased; calling erase_subject again erases what is left.
    -- Rows of orgs the table's owner may act for only (the statement runs as that owner), and
    -- one table's failure is reported without stopping the erasure elsewhere.
    BEGIN
        IF NOT memory_internal._lock_nowait(tbl, 'ROW EXCLUSIVE') THEN
            RETURN jsonb_build_object('locked', true);
        END IF;
        -- Erasure keeps its rule for application tables: the subject's rows go, held or not
        -- (memory_internal._hold_erase_gate names this table and subject only, so the owner's
        -- triggers those DELETEs fire meet every other hold; a failure closes it with the
        -- subtransaction).
        failed := '{}';
        pairs := '[]';
        -- With an id column, the statement returns the ids (and orgs) it deleted, for the receipts.
        id_col := CASE WHEN id_column IS NOT NULL AND memory_internal._has_column(tbl, id_column) THEN id_column END;
        PERFORM memory_internal._hold_erase_gate(tbl, subject);
        IF org_col IS NOT NULL AND memory_internal._citus_distributed(tbl) THEN
            -- Citus (docs/design.md#scale-out) runs no STABLE function of a column in a distributed DELETE,
            -- nor any that reads the registries on a shard: the DELETE names each org
            -- (memory_internal._subject_orgs). One org at a time, on its shard: the hold gate is this
            -- backend's, and the shards' hold triggers run in the workers' backends, so a held
            -- row there still raises MX006. That org's rows stay (reported under
            -- failed_tables); the other orgs' rows go.
            n := 0;
            FOREACH o IN ARRAY memory_internal._subject_orgs(tbl, col, org_col, subject) LOOP
                CONTINUE WHEN scope IS NOT NULL AND o OPERATOR(pg_catalog.<>) scope;
                BEGIN
                    r := memory_internal._exec_as_table_owner(tbl,
                                  memory_internal._returning_ids(format('DELETE FROM %s t WHERE t.%I::pg_catalog.text OPERATOR(pg_catalog.=) $1
                                             AND t.%I::pg_catalog.text OPERATOR(pg_catalog.=) $2',
                                         tbl, col, org_col), id_col, org_col),
                                  ARRAY[subject, o]);
                    n := n + (r->>'processed')::bigint;
                    pairs := pairs || coalesce(r->'ids', '[]');
                EXCEPTION WHEN OTHERS THEN
                    failed := failed || jsonb_build_object(o, jsonb_build_object('sqlstate', SQLSTATE, 'message', SQLERRM));
                END;
            END LOOP;
            r := jsonb_build_object('processed', n);
        ELSE
            r := memory_internal._exec_as_table_owner(tbl,
                     memory_internal._returning_ids(format('DELETE FROM %s t WHERE t.%I::pg_catalog.text OPERATOR(pg_catalog.=) $1 AND memory_internal._may_act_for(%s)%s',
                            tbl, col,
                            CASE WHEN org_col IS NULL THEN 'NULL' ELSE format('t.%I::pg_catalog.text', org_col) END,
                            CASE WHEN scope IS NULL THEN '' ELSE format(' AND t.%I::pg_catalog.text OPERATOR(pg_catalog.=) $2', org_col) END), id_col,
                            CASE WHEN memory_internal._has_column(tbl, org_col) THEN org_col END),
                     ARRAY[subject, scope]);
            pairs := coalesce(r->'ids', '[]');
        END IF;
        PERFORM memory_internal._hold_erase_gate(NULL, NULL);
    EXCEPTION WHEN OTHERS THEN
        RETURN jsonb_build_object('error', jsonb_build_object('sqlstate', SQLSTATE, 'message', SQLERRM));
    END;
    RETURN jsonb_build_object('processed', (r->>'processed')::bigint, 'ids', pairs, 'failed', failed);
END $$;

-- memory.erase_subject's step over the governed application tables with a user column, each
-- by memory_internal._erase_subject_in_table (in the order of their names). Returns the counts
-- those add (tables, failed_tables, skipped_tables, locked_tables: each only when not empty) and
-- `gone_by` with the ids each deleted. Not granted to PUBLIC.
CREATE FUNCTION memory_internal._erase_subject_tables(subject text, scope text, INOUT gone_by jsonb, OUT counts jsonb)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n       bigint;
    t       record;
    r       jsonb;
    skipped jsonb := '[]';
    locked  jsonb := '[]';
    id_org  text;
    rv      jsonb;
BEGIN
    counts := '{}';
    -- Governed application tables with a user column, each as its owner (its triggers and casts
    -- run with the owner's rights, never the definer's). A scoped erase needs the table's org column.
    FOR t IN SELECT g.relid::regclass AS table_name, g.options->>'user' AS col, g.options->>'org' AS org_col, g.options->>'id' AS id_col
               FROM memory.governance_registry g
              WHERE NOT g.builtin AND g.options->>'user' IS NOT NULL AND pg_catalog.to_regclass(g.relid::text) IS NOT NULL
              ORDER BY g.relid::text LOOP
        IF scope IS NOT NULL AND t.org_col IS NULL THEN
            skipped := skipped || to_jsonb(t.table_name::text);
            CONTINUE;
        END IF;
        r := memory_internal._erase_subject_in_table(t.table_name, t.col, t.org_col, t.id_col, subject, scope);
        IF r ? 'locked' THEN
            locked := locked || to_jsonb(t.table_name::text);
            CONTINUE;
        ELSIF r ? 'error' THEN
            counts := jsonb_set(counts, '{failed_tables}', coalesce(counts->'failed_tables', '{}')
                                || jsonb_build_object(t.table_name::text, r->'error'));
            CONTINUE;
        END IF;
        n := (r->>'processed')::bigint;
        counts := jsonb_set(counts, '{tables}', coalesce(counts->'tables', '{}') || jsonb_build_object(t.table_name::text, n));
        FOR id_org, rv IN SELECT coalesce(e->>1, ''), jsonb_agg(DISTINCT e->0) FROM jsonb_array_elements(r->'ids') e GROUP BY 1 LOOP
            gone_by := jsonb_set(gone_by, ARRAY[id_org], coalesce(gone_by->id_org, '{}') || jsonb_build_object(t.table_name::text, rv));
        END LOOP;
        IF r->'failed' OPERATOR(pg_catalog.<>) '{}' THEN
            counts := jsonb_set(counts, '{failed_tables}', coalesce(counts->'failed_tables', '{}')
                                || jsonb_build_object(t.table_name::text, (SELECT v FROM pg_catalog.jsonb_each(r->'failed') e(k, v) ORDER BY k LIMIT 1)
                                                                         || jsonb_build_object('orgs', r->'failed')));
        END IF;
    END LOOP;
    IF jsonb_array_length(skipped) > 0 THEN
        counts := counts || jsonb_build_object('skipped_tables', skipped);
    END IF;
    IF jsonb_array_length(locked) > 0 THEN
        counts := counts || jsonb_build_object('locked_tables', locked);
    END IF;
END $$;

CREATE FUNCTION memory.erase_subject(user_id text)
RETURNS jsonb LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    subject text := erase_subject.user_id;
    counts  jsonb;
    held    bigint;
    r       jsonb;
    -- A role bound to orgs erases in its acting org only; unrestricted roles everywhere.
    scope   text := memory_internal._scope_org();
    -- The ids erased, by org and table, for the receipt (docs/audit.md#erasure-receipts).
    gone_by jsonb;          -- {org: {table: [id]}}
    id_org  text;
    rv      jsonb;
    receipts jsonb := '[]';
    derived jsonb;
BEGIN
    IF memory_internal._blank(subject) THEN
        RAISE EXCEPTION 'memory.erase_subject needs a user_id' USING ERRCODE = '22023';
    END IF;
    -- memory_ext's store (memory_internal._erase_subject_store), then the governed application
    -- tables (memory_internal._erase_subject_tables).
    SELECT s.counts, s.held, s.derived, s.gone_by INTO counts, held, derived, gone_by
      FROM memory_internal._erase_subject_store(subject, scope) s;
    SELECT s.counts, s.gone_by INTO r, gone_by FROM memory_internal._erase_subject_tables(subject, scope, gone_by) s;
    counts := counts || r;
    -- The account's consent-era rows (docs/design.md#consent-and-drift), leaving a deletion stub per org.
    r := memory_internal._erase_consent_rows(subject, scope);
    counts := counts || jsonb_build_object('consent', r);
    IF (SELECT sum(v::bigint) FROM jsonb_each_text(r) x(k, v)) > 0 THEN
        PERFORM memory_internal._audit('memory.user.delete', jsonb_build_object('subject', memory_internal._pseudonym(subject), 'counts', r), scope);
    END IF;
    -- One event naming the subject only by pseudonym, on the acting org's chain (the platform
    -- chain for an unrestricted erase): the log itself is never edited, so the chain still verifies.
    PERFORM memory_internal._audit('memory.forget',
        jsonb_build_object('subject', memory_internal._pseudonym(subject), 'counts', counts, 'held', held), scope);
    -- A receipt for the ids erased in each org, on its chain ('' for rows of tables without an org
    -- column: the platform chain), as memory.forget's; none when nothing with an id was erased.
    FOR id_org, rv IN SELECT e.key, e.value FROM jsonb_each(gone_by) e ORDER BY e.key COLLATE "C" LOOP
        receipts := receipts || jsonb_build_array(memory_internal._issue_receipt(nullif(id_org, ''), rv));
    END LOOP;
    RETURN counts || jsonb_build_object('held', held, 'derived_forgotten', derived,
        'receipt', CASE WHEN jsonb_array_length(receipts) = 1 THEN receipts->0 END, 'receipts', receipts);
END $$;
COMMENT ON FUNCTION memory.erase_subject(text) IS
  'Erase every row of a subject (observations, weight history, archive, governed tables with a user column), and the memories made from its observations (derived_from, transitively: derived_forgotten); rows under a legal hold stay and are counted as held. A governed table another session holds locked is not waited for: it is listed under locked_tables (call again to erase what is left). One memory.forget event. Not granted to PUBLIC.';

-- memory.export_subject's read of memory_ext's own store: the subject's observations not
-- soft-deleted, archived rows and weight history (of the org `scope` only, when not NULL), each
-- in order of creation; restricted rows only with include_restricted. Returns the three sections
-- and `withheld`, how many restricted rows each left out. Not granted to PUBLIC.
CREATE FUNCTION memory_internal._export_subject_store(subject text, scope text, include_restricted boolean,
                                                      OUT obs jsonb, OUT arch jsonb, OUT hist jsonb, OUT withheld jsonb)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n        bigint;
BEGIN
    withheld := '{}';
    -- Everything still held about the subject: expired rows too, until retention soft-deletes
    -- them (soft-deleted rows are invisible to every query function).
    -- (content_tsv and an item's search_tsv, words derived from it: not exported twice.)
    SELECT coalesce(jsonb_agg(to_jsonb(o) OPERATOR(pg_catalog.-) 'content_tsv' OPERATOR(pg_catalog.-) 'search_tsv' ORDER BY o.created_at, o.id) FILTER (WHERE include_restricted OR coalesce(o.classification <> 'restricted', false)), '[]'),
           count(*) FILTER (WHERE NOT (include_restricted OR coalesce(o.classification <> 'restricted', false)))
      INTO obs, n
      FROM memory.observations o
     WHERE o.user_id = subject AND (scope IS NULL OR o.org_id = scope) AND o.soft_deleted_at IS NULL;
    withheld := withheld || jsonb_build_object('observations', n);
    SELECT coalesce(jsonb_agg(to_jsonb(a) ORDER BY a.created_at, a.id) FILTER (WHERE include_restricted OR coalesce(a.classification <> 'restricted', false)), '[]'),
           count(*) FILTER (WHERE NOT (include_restricted OR coalesce(a.classification <> 'restricted', false)))
      INTO arch, n
      FROM memory.observations_archive a
     WHERE a.user_id = subject AND (scope IS NULL OR a.org_id = scope);
    withheld := withheld || jsonb_build_object('archive', n);
    SELECT coalesce(jsonb_agg(to_jsonb(h) ORDER BY h.recorded_at, h.id) FILTER (WHERE include_restricted OR coalesce(o.classification <> 'restricted', false)), '[]'),
           count(*) FILTER (WHERE NOT (include_restricted OR coalesce(o.classification <> 'restricted', false)))
      INTO hist, n
      FROM memory.observation_weight_history h JOIN memory.observations o ON o.id = h.observation_id AND o.org_id = h.org_id
     WHERE o.user_id = subject AND (scope IS NULL OR o.org_id = scope) AND o.soft_deleted_at IS NULL;
    withheld := withheld || jsonb_build_object('weight_history', n);
END $$;

-- memory.export_subject's read of the governed application tables with a user column (what
-- erase_subject deletes), each as its owner. Returns `tables` ({table: rows, or {error}}), their
-- `manifest` entries ("table:<name>": count and sha256) and `withheld_tables` (restricted rows left
-- out, by table). Not granted to PUBLIC.
CREATE FUNCTION memory_internal._export_subject_tables(subject text, scope text, include_restricted boolean,
                                                       OUT tables jsonb, OUT manifest jsonb, OUT withheld_tables jsonb)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t        record;
    r        jsonb;
    keep     text;
BEGIN
    tables := '{}';
    manifest := '{}';
    withheld_tables := '{}';
    -- Governed application tables with a user column (what erase_subject deletes), read as each
    -- table's owner, rows of orgs that owner may act for (and of the acting org when scoped).
    FOR t IN SELECT g.relid::regclass AS table_name, g.options->>'user' AS col, g.options->>'org' AS org_col,
                    coalesce(g.options->>'audit_tier', g.options->'target'->>0) AS tier_col
               FROM memory.governance_registry g
              WHERE NOT g.builtin AND g.options->>'user' IS NOT NULL AND pg_catalog.to_regclass(g.relid::text) IS NOT NULL
              ORDER BY g.relid::text LOOP
        CONTINUE WHEN scope IS NOT NULL AND t.org_col IS NULL;
        BEGIN
            -- Which rows are exported: each read returns [rows kept, how many restricted rows were left out].
            keep := CASE WHEN include_restricted OR t.tier_col IS NULL THEN 'true'
                         WHEN memory_internal._column_type(t.table_name, t.tier_col, 'tier') = 'jsonb'::regtype
                              THEN format('(t.%I OPERATOR(pg_catalog.->>) ''classification'') IS DISTINCT FROM ''restricted''', t.tier_col)
                         ELSE format('t.%I::pg_catalog.text IS DISTINCT FROM ''restricted''', t.tier_col) END;
            IF t.org_col IS NOT NULL AND memory_internal._citus_distributed(t.table_name) THEN
                -- Citus (docs/design.md#scale-out): the read names the subject's orgs (memory_internal._subject_orgs).
                r := memory_internal._exec_as_table_owner(t.table_name, format(
                    'SELECT pg_catalog.jsonb_build_array(coalesce(pg_catalog.jsonb_agg(pg_catalog.to_jsonb(t)) FILTER (WHERE %5$s), ''[]''),
                                                         pg_catalog.count(*) FILTER (WHERE NOT (%5$s))) FROM %1$s t
                      WHERE t.%2$I::pg_catalog.text OPERATOR(pg_catalog.=) $1
                        AND t.%3$I::pg_catalog.text OPERATOR(pg_catalog.=) ANY ($3::pg_catalog.text[])%4$s',
                    t.table_name, t.col, t.org_col,
                    CASE WHEN scope IS NULL THEN '' ELSE format(' AND t.%I::pg_catalog.text OPERATOR(pg_catalog.=) $2', t.org_col) END,
                    keep),
                    ARRAY[subject, scope, memory_internal._subject_orgs(t.table_name, t.col, t.org_col, subject)::text]);
            ELSE
                r := memory_internal._exec_as_table_owner(t.table_name, format(
                    'SELECT pg_catalog.jsonb_build_array(coalesce(pg_catalog.jsonb_agg(pg_catalog.to_jsonb(t)) FILTER (WHERE %5$s), ''[]''),
                                                         pg_catalog.count(*) FILTER (WHERE NOT (%5$s))) FROM %1$s t
                      WHERE t.%2$I::pg_catalog.text OPERATOR(pg_catalog.=) $1 AND memory_internal._may_act_for(%3$s)%4$s',
                    t.table_name, t.col,
                    CASE WHEN t.org_col IS NULL THEN 'NULL' ELSE format('t.%I::pg_catalog.text', t.org_col) END,
                    CASE WHEN scope IS NULL THEN '' ELSE format(' AND t.%I::pg_catalog.text OPERATOR(pg_catalog.=) $2', t.org_col) END,
                    keep),
                    ARRAY[subject, scope]);
            END IF;
            withheld_tables := withheld_tables || jsonb_build_object(t.table_name::text, r->1);
            r := r->0;
        EXCEPTION WHEN OTHERS THEN
            r := jsonb_build_object('error', jsonb_build_object('sqlstate', SQLSTATE, 'message', SQLERRM));
        END;
        tables := tables || jsonb_build_object(t.table_name::text, r);
        IF jsonb_typeof(r) = 'array' THEN
            manifest := manifest || jsonb_build_object('table:' || t.table_name::text, jsonb_build_object(
                'count', jsonb_array_length(r), 'sha256', encode(sha256(convert_to(r::text, 'UTF8')), 'hex')));
        END IF;
    END LOOP;
END $$;

CREATE FUNCTION memory.export_subject(user_id text, include_restricted boolean DEFAULT false)
RETURNS jsonb LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    subject  text := export_subject.user_id;
    obs      jsonb;
    arch     jsonb;
    hist     jsonb;
    manifest jsonb := '{}';
    tmanifest jsonb;
    s        record;
    tables   jsonb;
    scope    text;
    consent  jsonb;
    -- Restricted rows left out (include_restricted false): per section, and for each table.
    withheld jsonb;
    withheld_tables jsonb;
BEGIN
    IF memory_internal._blank(subject) THEN
        RAISE EXCEPTION 'memory.export_subject needs a user_id' USING ERRCODE = '22023';
    END IF;
    scope := memory_internal._scope_org();
    -- memory_ext's store (memory_internal._export_subject_store).
    SELECT x.obs, x.arch, x.hist, x.withheld INTO obs, arch, hist, withheld
      FROM memory_internal._export_subject_store(subject, scope, include_restricted) x;
    consent := memory_internal._export_consent_rows(subject, scope);
    FOR s IN SELECT * FROM (VALUES ('observations', obs), ('archive', arch), ('weight_history', hist),
                                   ('consents', consent->'consents'), ('user_contexts', consent->'user_contexts'),
                                   ('persona_drift', consent->'persona_drift'), ('training_candidates', consent->'training_candidates')) v(name, rows) LOOP
        manifest := manifest || jsonb_build_object(s.name, jsonb_build_object(
            'count', jsonb_array_length(s.rows),
            'sha256', encode(sha256(convert_to(s.rows::text, 'UTF8')), 'hex')));
    END LOOP;
    -- Governed application tables (memory_internal._export_subject_tables).
    SELECT x.tables, x.manifest, x.withheld_tables INTO tables, tmanifest, withheld_tables
      FROM memory_internal._export_subject_tables(subject, scope, include_restricted) x;
    manifest := manifest || tmanifest;
    withheld := withheld || jsonb_build_object('tables', withheld_tables);
    withheld := withheld || jsonb_build_object('total',
        (withheld->>'observations')::bigint + (withheld->>'archive')::bigint + (withheld->>'weight_history')::bigint
        + coalesce((SELECT sum(v::text::bigint) FROM jsonb_each(withheld_tables) e(k, v)), 0));
    -- A read event: it survives the rollback of this transaction (memory_internal._audit_read).
    PERFORM memory_internal._audit_read('memory.export',
        jsonb_build_object('subject', memory_internal._pseudonym(subject), 'manifest', manifest, 'includeRestricted', include_restricted,
                           'restrictedWithheld', withheld->'total')::text, scope, NULL);
    RETURN jsonb_build_object('schema_version', 1, 'generated_at', now(), 'include_restricted', include_restricted,
                              'restricted_withheld', withheld,
                              'manifest', manifest,
                              'sections', jsonb_build_object('observations', obs, 'archive', arch, 'weight_history', hist,
                                                             'tables', tables) || consent);
END $$;
COMMENT ON FUNCTION memory.export_subject(text, boolean) IS
  'Everything held about a subject: observations not soft-deleted, archive, weight history, with a manifest (schema_version, per-section count and sha256 of the section''s JSON text). Restricted rows only when asked; restricted_withheld counts those left out (per section, per table, and total). Not granted to PUBLIC.';

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
    -- The task's user contexts expire 24 hours after it ends (docs/design.md#consent-and-drift); maintenance purges them.
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
-- Forgetting memories (docs/design.md#agent-memory-api): an agent's or a user's "forget this", by id, at once.

-- memory.forget's checks of its arguments (both forms): a reason of 1-1000 characters, at most
-- 10,000 ids, none NULL, in a one-dimensional array. Returns the ids, each once, in the order
-- first given (NULL or an empty array: none). Not granted to PUBLIC.
CREATE FUNCTION memory_internal._forget_ids(ids text[], reason text)
RETURNS text[] LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF memory_internal._blank(reason) THEN
        RAISE EXCEPTION 'memory.forget needs a reason' USING ERRCODE = '22023',
            HINT = 'Say why the memories are forgotten (e.g. ''user request 4711''): the reason is recorded in the memory.forget event.';
    END IF;
    IF pg_catalog.length(reason) OPERATOR(pg_catalog.>) 1000 THEN
        RAISE EXCEPTION 'memory.forget takes a reason of at most 1000 characters (this one has %)', pg_catalog.length(reason)
            USING ERRCODE = '22023', HINT = 'The reason is recorded in the memory.forget event: name the request, not the content.';
    END IF;
    IF ids IS NULL OR pg_catalog.cardinality(ids) OPERATOR(pg_catalog.=) 0 THEN
        RETURN '{}';
    END IF;
    IF pg_catalog.array_ndims(ids) OPERATOR(pg_catalog.>) 1 THEN
        RAISE EXCEPTION 'memory.forget takes a one-dimensional array of ids' USING ERRCODE = '22023',
            HINT = 'Pass ARRAY[id, id, ...].';
    END IF;
    IF pg_catalog.cardinality(ids) OPERATOR(pg_catalog.>) 10000 THEN
        RAISE EXCEPTION 'memory.forget takes at most 10,000 ids (% given)', pg_catalog.cardinality(ids) USING ERRCODE = '22023',
            HINT = 'Forget in batches of at most 10,000 ids.';
    END IF;
    IF pg_catalog.array_position(ids, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'memory.forget takes no NULL id (element %)', pg_catalog.array_position(ids, NULL) USING ERRCODE = '22023',
            HINT = 'Leave NULLs out of the ids.';
    END IF;
    RETURN ARRAY(SELECT u.id FROM pg_catalog.unnest(ids) WITH ORDINALITY u(id, n) GROUP BY u.id ORDER BY pg_catalog.min(u.n));
END $$;

-- What memory.forget answers and records, from the rows it found: `hits` is an array of
-- [id, org, user, content_sha256] (one per row found for an id, of the org chosen for it), `want`
-- the ids asked for. Held ids stay; MX006 when every id is held. Returns the answer and, under
-- `delete`, the ids to delete per org with their hashes. Not granted to PUBLIC.
CREATE FUNCTION memory_internal._forget_plan(want text[], hits jsonb)
RETURNS jsonb LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r         record;
    hold      bigint;
    first     bigint;
    forgotten jsonb := '[]';
    held      jsonb := '[]';
    not_found jsonb := '[]';
    del       jsonb := '{}';
    nheld     jsonb := '{}';
BEGIN
    FOR r IN SELECT w.id, w.n, pg_catalog.jsonb_agg(f.e ORDER BY f.k) FILTER (WHERE f.e IS NOT NULL) AS rows
               FROM pg_catalog.unnest(want) WITH ORDINALITY w(id, n)
               LEFT JOIN pg_catalog.jsonb_array_elements(hits) WITH ORDINALITY f(e, k) ON (f.e OPERATOR(pg_catalog.->>) 0) OPERATOR(pg_catalog.=) w.id
              GROUP BY w.id, w.n ORDER BY w.n LOOP
        IF r.rows IS NULL THEN
            not_found := not_found OPERATOR(pg_catalog.||) pg_catalog.to_jsonb(r.id);
            CONTINUE;
        END IF;
        -- (The caller may act for the row's org: memory_internal._hold_for checks it again.)
        SELECT min(memory_internal._hold_for(x OPERATOR(pg_catalog.->>) 1, x OPERATOR(pg_catalog.->>) 2, r.id)) INTO hold
          FROM pg_catalog.jsonb_array_elements(r.rows) x;
        IF hold IS NOT NULL THEN
            first := coalesce(first, hold);
            held := held OPERATOR(pg_catalog.||) pg_catalog.to_jsonb(r.id);
            nheld := nheld OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_object(coalesce(r.rows OPERATOR(pg_catalog.->) 0 OPERATOR(pg_catalog.->>) 1, ''),
                         coalesce((nheld OPERATOR(pg_catalog.->>) coalesce(r.rows OPERATOR(pg_catalog.->) 0 OPERATOR(pg_catalog.->>) 1, ''))::int, 0) OPERATOR(pg_catalog.+) 1);
            CONTINUE;
        END IF;
        forgotten := forgotten OPERATOR(pg_catalog.||) pg_catalog.to_jsonb(r.id);
        -- One entry per row: an id of several rows of its org (an id column that is not unique)
        -- names each row's content hash.
        SELECT del OPERATOR(pg_catalog.||) pg_catalog.jsonb_object_agg(g.org, coalesce(del OPERATOR(pg_catalog.->) g.org, '[]') OPERATOR(pg_catalog.||) g.items)
          INTO del
          FROM (SELECT coalesce(x OPERATOR(pg_catalog.->>) 1, '') AS org,
                       pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object('id', r.id, 'content_sha256', x OPERATOR(pg_catalog.->) 3)) AS items
                  FROM pg_catalog.jsonb_array_elements(r.rows) x GROUP BY 1) g;
    END LOOP;
    IF pg_catalog.jsonb_array_length(held) OPERATOR(pg_catalog.>) 0 AND pg_catalog.jsonb_array_length(held) OPERATOR(pg_catalog.=) pg_catalog.cardinality(want) THEN
        RAISE EXCEPTION 'legal hold % covers %: nothing was forgotten', first,
                        CASE WHEN pg_catalog.cardinality(want) OPERATOR(pg_catalog.=) 1 THEN 'row ' OPERATOR(pg_catalog.||) want[1]
                             ELSE 'every row given (' OPERATOR(pg_catalog.||) pg_catalog.cardinality(want) OPERATOR(pg_catalog.||) ')' END
            USING ERRCODE = 'MX006',
                  HINT = 'A memory_admin releases the hold (UPDATE memory.legal_holds SET released_at = now() WHERE id = ...).';
    END IF;
    RETURN pg_catalog.jsonb_build_object('forgotten', forgotten, 'held', held, 'not_found', not_found, 'delete', del, 'held_by_org', nheld);
END $$;

-- Erasure receipts (docs/audit.md#erasure-receipts): the ids each receipt covers, by table, kept
-- for memory.verify_receipt's scan (the receipt itself carries only their hash, ids_sha256, which
-- also binds this row: an edited list no longer hashes to it). Ids only, never content. Read and
-- written by memory_ext's SECURITY DEFINER functions alone.
CREATE TABLE memory.erasure_receipts (
    event_id  uuid PRIMARY KEY,
    org_id    text NOT NULL,
    issued_at timestamptz NOT NULL,
    ids       jsonb NOT NULL
);
REVOKE ALL ON memory.erasure_receipts FROM PUBLIC;
COMMENT ON TABLE memory.erasure_receipts IS
  'The ids each erasure receipt covers ({table: [id]}), for memory.verify_receipt''s scan; bound to the receipt by ids_sha256. Owner-only.';
SELECT pg_catalog.pg_extension_config_dump('memory.erasure_receipts', '');

-- Issue one receipt for ids forgotten on org's chain (NULL: the platform chain): records the ids,
-- appends a memory.forget.receipt event {event_id, ids_sha256, count} and returns the receipt signed
-- with the current audit key. In immediate mode the event is chained here (seq, entry_hash); in
-- deferred mode they are NULL (the sequencer assigns them later, and memory.verify_receipt finds
-- the entry by its event_id). `ids`: {table: [id text]}. Not granted to PUBLIC.
CREATE FUNCTION memory_internal._issue_receipt(org text, ids jsonb)
RETURNS jsonb LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    chain  text := coalesce(org, '');
    eid    uuid := pg_catalog.gen_random_uuid();
    at     timestamptz := pg_catalog.now();
    flat   text[] := ARRAY(SELECT x FROM pg_catalog.jsonb_each(ids) e(k, v), pg_catalog.jsonb_array_elements_text(e.v) x);
    digest text := memory_internal._ids_sha256(flat);
    n      bigint := (SELECT pg_catalog.count(DISTINCT pg_catalog.lower(x)) FROM pg_catalog.unnest(flat) x);
    s      bigint;
    hash   bytea;
    hseq   bigint;
    hhash  bytea;
    kid    int;
    k      bytea;
    r      jsonb;
BEGIN
    INSERT INTO memory.erasure_receipts (event_id, org_id, issued_at, ids) VALUES (eid, chain, at, ids);
    s := memory_internal._audit('memory.forget.receipt',
             pg_catalog.jsonb_build_object('event_id', eid::text, 'ids_sha256', digest, 'count', n), org);
    IF s IS NOT NULL THEN
        SELECT l.entry_hash INTO hash FROM memory.audit_log l
         WHERE l.chain_id OPERATOR(pg_catalog.=) chain COLLATE "C" AND l.seq OPERATOR(pg_catalog.=) s;
    END IF;
    SELECT h.seq, h.entry_hash INTO hseq, hhash FROM memory.audit_heads h WHERE h.chain_id OPERATOR(pg_catalog.=) chain;
    SELECT c.key_id, c.key INTO kid, k FROM memory_internal._audit_current_key() c;
    r := pg_catalog.jsonb_build_object(
        'org_id', chain, 'event_id', eid::text, 'seq', s, 'entry_hash', pg_catalog.encode(hash, 'hex'),
        'chain_head', pg_catalog.jsonb_build_object('seq', coalesce(hseq, 0),
                          'entry_hash', pg_catalog.encode(coalesce(hhash, pg_catalog.decode(pg_catalog.repeat('00', 32), 'hex')), 'hex')),
        'ids_sha256', digest, 'count', n,
        'at', pg_catalog.to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'), 'key_id', kid);
    RETURN r OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_object('signature', memory_internal._receipt_sign(r::pg_catalog.text, k));
END $$;

-- memory.forget's receipts: one per org of `deleted` ({org: [{id, ...}]}, '' for a table without
-- an org column) for the ids forgotten from `tbl`. Returns {receipt, receipts}: `receipt` the one
-- receipt when one org's rows were forgotten (always, for a role bound to one org), else NULL;
-- `receipts` every one, by org. Not granted to PUBLIC.
CREATE FUNCTION memory_internal._forget_receipts(tbl text, deleted jsonb, more jsonb DEFAULT NULL)
RETURNS jsonb LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    o    text;
    v    jsonb;
    all_ jsonb := '[]';
BEGIN
    -- Each org's ids by table: `tbl`'s from `deleted`, and those of `more` ({org: {table: [{id}]}}:
    -- rows of governed tables that went with them, lineage).
    FOR o, v IN SELECT k.o, pg_catalog.jsonb_strip_nulls(pg_catalog.jsonb_build_object(tbl,
                           (SELECT pg_catalog.jsonb_agg(x OPERATOR(pg_catalog.->>) 'id') FROM pg_catalog.jsonb_array_elements(deleted OPERATOR(pg_catalog.->) k.o) x)))
                       OPERATOR(pg_catalog.||) coalesce((SELECT pg_catalog.jsonb_object_agg(t.key, (SELECT pg_catalog.jsonb_agg(x OPERATOR(pg_catalog.->>) 'id') FROM pg_catalog.jsonb_array_elements(t.value) x))
                                                         FROM pg_catalog.jsonb_each(more OPERATOR(pg_catalog.->) k.o) t), '{}')
                  FROM (SELECT e.key AS o FROM pg_catalog.jsonb_each(coalesce(deleted, '{}')) e WHERE pg_catalog.jsonb_array_length(e.value) OPERATOR(pg_catalog.>) 0
                        UNION SELECT e.key FROM pg_catalog.jsonb_each(coalesce(more, '{}')) e) k
                 ORDER BY k.o COLLATE "C" LOOP
        all_ := all_ OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_array(memory_internal._issue_receipt(nullif(o, ''), v));
    END LOOP;
    RETURN pg_catalog.jsonb_build_object('receipt', CASE WHEN pg_catalog.jsonb_array_length(all_) OPERATOR(pg_catalog.=) 1 THEN all_ OPERATOR(pg_catalog.->) 0 END,
                                         'receipts', all_);
END $$;

-- One memory.forget event per org, naming each row forgotten by id and content hash (never its
-- content), with the caller's reason; 300 rows an event (a payload stays under 64 kB), numbered
-- part/parts when there are more.
CREATE FUNCTION memory_internal._forget_events(tbl text, plan jsonb, reason text)
RETURNS void LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    org   text;
    items jsonb;
    parts int;
BEGIN
    FOR org, items IN SELECT e.key, e.value FROM pg_catalog.jsonb_each(plan OPERATOR(pg_catalog.->) 'delete') e ORDER BY e.key COLLATE "C" LOOP
        parts := (pg_catalog.jsonb_array_length(items) OPERATOR(pg_catalog.+) 299) OPERATOR(pg_catalog./) 300;
        FOR p IN 1 .. parts LOOP
            PERFORM memory_internal._audit('memory.forget', pg_catalog.jsonb_build_object(
                'table', tbl,
                'forgotten', (SELECT pg_catalog.jsonb_agg(x.e ORDER BY x.n) FROM pg_catalog.jsonb_array_elements(items) WITH ORDINALITY x(e, n)
                               WHERE x.n OPERATOR(pg_catalog.>) ((p OPERATOR(pg_catalog.-) 1) OPERATOR(pg_catalog.*) 300)
                                 AND x.n OPERATOR(pg_catalog.<=) (p OPERATOR(pg_catalog.*) 300)),
                'held', coalesce((plan OPERATOR(pg_catalog.->) 'held_by_org' OPERATOR(pg_catalog.->>) org)::int, 0),
                'reason', reason, 'part', p, 'parts', parts)
                -- What was made from these above the caller's clearance stays (memory.forget, lineage): named for the admins.
                OPERATOR(pg_catalog.||) CASE WHEN p OPERATOR(pg_catalog.=) 1 AND plan OPERATOR(pg_catalog.->) 'kept' OPERATOR(pg_catalog.?) org
                                             THEN pg_catalog.jsonb_build_object('derived_kept', plan OPERATOR(pg_catalog.->) 'kept' OPERATOR(pg_catalog.->) org)
                                             ELSE '{}'::jsonb END, nullif(org, ''));
        END LOOP;
    END LOOP;
END $$;

-- memory.forget's deletion: each org's ids of `plan` (its `delete`) and their weight history,
-- hot and archived, within the caller's clearance there (`tiers`, by `orgs`), then what was made
-- from them (memory_internal._erase_derived, within that clearance; `want`, the ids asked for,
-- are not followed twice). The orgs' lineage locks are taken first and the lineage gate is open
-- meanwhile (the references are followed before they are stripped). Returns the plan with the
-- derived rows added to `delete`, held ones to `held`, kept ones (above the clearance) under
-- `kept`, and the derived ids forgotten. Not granted to PUBLIC.
CREATE FUNCTION memory_internal._forget_observations(orgs text[], tiers memory.classification[], want uuid[], INOUT plan jsonb, OUT derived jsonb)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t       memory.classification;
    o       text;
    del     uuid[];
    lin     jsonb;
    gate    boolean;
BEGIN
    derived := '[]';
    gate := memory_internal._lineage_gate(true);
    PERFORM memory_internal._lineage_lock_orgs(ARRAY(SELECT pg_catalog.jsonb_object_keys(plan OPERATOR(pg_catalog.->) 'delete')));
    FOR o IN SELECT pg_catalog.jsonb_object_keys(plan OPERATOR(pg_catalog.->) 'delete') LOOP
        del := ARRAY(SELECT (e OPERATOR(pg_catalog.->>) 'id')::uuid FROM pg_catalog.jsonb_array_elements(plan OPERATOR(pg_catalog.->) 'delete' OPERATOR(pg_catalog.->) o) e);
        t := tiers[pg_catalog.array_position(orgs, o)];
        -- Content and weights, hot and archived: nothing of these rows stays in memory_ext's
        -- tables (the log names them by id and content hash). The DELETE of the hot rows fires
        -- their hold and audit triggers (memory.delete per row). (The rows read above are locked
        -- and within the clearance; the archive's copy of an id too.)
        DELETE FROM memory.observation_weight_history h
         WHERE h.org_id OPERATOR(pg_catalog.=) o AND h.observation_id OPERATOR(pg_catalog.=) ANY (del);
        DELETE FROM memory.observations ob WHERE ob.org_id OPERATOR(pg_catalog.=) o AND ob.id OPERATOR(pg_catalog.=) ANY (del)
           AND ob.classification OPERATOR(pg_catalog.<=) t;
        DELETE FROM memory.observations_archive a WHERE a.org_id OPERATOR(pg_catalog.=) o AND a.id OPERATOR(pg_catalog.=) ANY (del)
           AND a.classification OPERATOR(pg_catalog.<=) t;
        -- Lineage (SPEC §18): what was made from these goes with them, within the caller's
        -- clearance (a held one stays, in held; one above it in kept); the event and the receipt
        -- name them.
        lin := memory_internal._erase_derived(o, del, t, want);
        IF pg_catalog.jsonb_array_length(lin OPERATOR(pg_catalog.->) 'deleted') OPERATOR(pg_catalog.>) 0 THEN
            plan := pg_catalog.jsonb_set(plan, ARRAY['delete', o], (plan OPERATOR(pg_catalog.->) 'delete' OPERATOR(pg_catalog.->) o)
                        OPERATOR(pg_catalog.||) (lin OPERATOR(pg_catalog.->) 'deleted'));
            derived := derived OPERATOR(pg_catalog.||) (SELECT pg_catalog.jsonb_agg(x OPERATOR(pg_catalog.->) 'id') FROM pg_catalog.jsonb_array_elements(lin OPERATOR(pg_catalog.->) 'deleted') x);
        END IF;
        -- Rows of governed tables made from them ({org: {table: [{id, ...}]}} in the plan's tables).
        IF lin OPERATOR(pg_catalog.->) 'tables' OPERATOR(pg_catalog.<>) '{}' THEN
            plan := plan OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_object('tables', coalesce(plan OPERATOR(pg_catalog.->) 'tables', '{}')
                        OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_object(o, lin OPERATOR(pg_catalog.->) 'tables'));
            derived := derived OPERATOR(pg_catalog.||) (SELECT pg_catalog.jsonb_agg(x OPERATOR(pg_catalog.->) 'id')
                                                           FROM pg_catalog.jsonb_each(lin OPERATOR(pg_catalog.->) 'tables') e, pg_catalog.jsonb_array_elements(e.value) x);
        END IF;
        IF pg_catalog.jsonb_array_length(lin OPERATOR(pg_catalog.->) 'above') OPERATOR(pg_catalog.>) 0 THEN
            plan := plan OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_object('kept', coalesce(plan OPERATOR(pg_catalog.->) 'kept', '{}')
                        OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_object(o, lin OPERATOR(pg_catalog.->) 'above'));
        END IF;
        IF pg_catalog.jsonb_array_length(lin OPERATOR(pg_catalog.->) 'held') OPERATOR(pg_catalog.>) 0 THEN
            plan := plan OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_object(
                'held', (plan OPERATOR(pg_catalog.->) 'held') OPERATOR(pg_catalog.||) (lin OPERATOR(pg_catalog.->) 'held'),
                'held_by_org', (plan OPERATOR(pg_catalog.->) 'held_by_org') OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_object(o,
                          coalesce((plan OPERATOR(pg_catalog.->) 'held_by_org' OPERATOR(pg_catalog.->>) o)::int, 0)
                          OPERATOR(pg_catalog.+) pg_catalog.jsonb_array_length(lin OPERATOR(pg_catalog.->) 'held')));
        END IF;
    END LOOP;
    PERFORM memory_internal._lineage_gate(gate);
END $$;

-- Its statements find rows by id (the primary keys' indexes whatever the ids): generic plans,
-- made once a session, where custom plans would be planned anew on every call (a one-id array
-- always looks cheaper to the plan cache than the generic plan's guess). Not on Citus, whose
-- distributed plans need the values.
CREATE FUNCTION memory.forget(ids uuid[], reason text)
RETURNS jsonb LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
    SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    want    uuid[] := memory_internal._forget_ids(ids::text[], reason)::uuid[];
    setting text := nullif(pg_catalog.current_setting('memory.org_id', true), '');
    orgs    text[] := '{}';
    tiers   memory.classification[] := '{}';
    t       memory.classification;
    o       text;
    hits   jsonb;
    plan    jsonb;
    derived jsonb;
BEGIN
    -- A memory.org_id the role may not act for: 42501 before anything is read.
    PERFORM memory_internal._check_org_setting();
    IF pg_catalog.cardinality(want) OPERATOR(pg_catalog.=) 0 THEN
        RETURN pg_catalog.jsonb_build_object('forgotten', '[]'::jsonb, 'held', '[]'::jsonb, 'not_found', '[]'::jsonb, 'derived_forgotten', '[]'::jsonb);
    END IF;
    IF memory_internal._citus_distributed('memory.observations') THEN
        -- (Until the function returns: its SET clause restores the setting.)
        PERFORM pg_catalog.set_config('plan_cache_mode', 'auto', true);
    END IF;
    -- The orgs holding these ids that the caller may act for, and its clearance in each, checked
    -- here for the caller, never inside a statement (on Citus those run on the workers); other
    -- orgs' ids are not found. A session acting for one org (memory.org_id) forgets in that org
    -- only, as its row-level security reads only that org's rows.
    FOR o IN SELECT DISTINCT x.org_id FROM (SELECT ob.org_id FROM memory.observations ob WHERE ob.id OPERATOR(pg_catalog.=) ANY (want)
                                            UNION SELECT a.org_id FROM memory.observations_archive a WHERE a.id OPERATOR(pg_catalog.=) ANY (want)) x
              WHERE setting IS NULL OR x.org_id OPERATOR(pg_catalog.=) setting LOOP
        t := memory_internal._clearance(o)::memory.classification;
        IF t IS NOT NULL THEN
            orgs := orgs OPERATOR(pg_catalog.||) o;
            tiers := tiers OPERATOR(pg_catalog.||) t;
        END IF;
    END LOOP;
    -- The rows within the caller's clearance in their org (a row above it is not found, as a
    -- missing id: nothing tells it apart, not even its hold), locked (hot rows first, each store
    -- in id order) and read in one statement; an id is forgotten in one org: the one the session
    -- acts for (memory.org_id) when it holds the id, else the greatest (bytewise), as
    -- memory_internal._org_of.
    WITH hot AS (
        SELECT ob.id, ob.org_id, ob.user_id, ob.content, 0 AS src FROM memory.observations ob
         WHERE ob.id OPERATOR(pg_catalog.=) ANY (want) AND ob.org_id OPERATOR(pg_catalog.=) ANY (orgs)
           AND ob.classification OPERATOR(pg_catalog.<=) tiers[pg_catalog.array_position(orgs, ob.org_id)]
         ORDER BY ob.id FOR UPDATE),
    archived AS (
        SELECT a.id, a.org_id, a.user_id, a.content, 1 AS src FROM memory.observations_archive a
         WHERE a.id OPERATOR(pg_catalog.=) ANY (want) AND a.org_id OPERATOR(pg_catalog.=) ANY (orgs)
           AND a.classification OPERATOR(pg_catalog.<=) tiers[pg_catalog.array_position(orgs, a.org_id)]
         ORDER BY a.id FOR UPDATE),
    c AS MATERIALIZED (SELECT * FROM hot UNION ALL SELECT * FROM archived),
    pick AS (
        SELECT DISTINCT ON (c.id) c.id, c.org_id FROM c
         ORDER BY c.id, (c.org_id OPERATOR(pg_catalog.=) setting) DESC NULLS LAST, c.org_id COLLATE "C" DESC)
    -- The hot row's content when the id is in both stores (its archived copy goes with it).
    SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_array(x.id::text, x.org_id, x.user_id,
                        pg_catalog.encode(pg_catalog.sha256(pg_catalog.convert_to(x.content, 'UTF8')), 'hex'))), '[]')
      INTO hits
      FROM (SELECT DISTINCT ON (c.id) c.* FROM c JOIN pick p ON p.id OPERATOR(pg_catalog.=) c.id AND p.org_id OPERATOR(pg_catalog.=) c.org_id
             ORDER BY c.id, c.src) x;
    plan := memory_internal._forget_plan(want::text[], hits);
    -- The rows and what was made from them go (memory_internal._forget_observations).
    SELECT f.plan, f.derived INTO plan, derived FROM memory_internal._forget_observations(orgs, tiers, want, plan) f;
    PERFORM memory_internal._forget_events('memory.observations', plan, reason);
    -- The rows of governed tables that went with them: one event a table and org, and in the receipts.
    PERFORM memory_internal._forget_events(x.key, pg_catalog.jsonb_build_object('delete', pg_catalog.jsonb_build_object(e.key, x.value)), reason)
       FROM pg_catalog.jsonb_each(coalesce(plan OPERATOR(pg_catalog.->) 'tables', '{}')) e, pg_catalog.jsonb_each(e.value) x
      ORDER BY e.key COLLATE "C", x.key COLLATE "C";
    RETURN pg_catalog.jsonb_build_object('forgotten', plan OPERATOR(pg_catalog.->) 'forgotten', 'held', plan OPERATOR(pg_catalog.->) 'held',
                                         'not_found', plan OPERATOR(pg_catalog.->) 'not_found', 'derived_forgotten', derived)
           OPERATOR(pg_catalog.||) memory_internal._forget_receipts('memory.observations', plan OPERATOR(pg_catalog.->) 'delete',
                                                                     plan OPERATOR(pg_catalog.->) 'tables');
END $$;
COMMENT ON FUNCTION memory.forget(uuid[], text) IS
  'Forget observations at once: the rows (hot and archived) and their weight history are deleted, except rows under a legal hold (MX006 when every id is held). Ids of orgs the caller may not act for, and rows above its clearance there, are not_found. The memories made from a forgotten one (derived_from, transitively) within the caller''s clearance go with it unless held (derived_forgotten); one above the clearance stays, named in the event (derived_kept). One memory.forget event per org with the ids, content hashes and the reason. Returns forgotten, held, not_found, derived_forgotten, receipt, receipts.';

-- memory.forget(tbl, ...)'s lookup: the rows of the ids `want` (matched by `cmp` on $1) as the
-- caller reads them (memory_internal._read_as_caller: its privileges and policies), kept when the
-- caller may act for their org and, when the table has a tier (`tier_e`), is cleared for it there;
-- each id in one org. `org_e`, `user_e`, `tier_e`: expressions on t that memory.forget builds with
-- format('%I'). Returns [id, org, user, NULL] per row, as memory_internal._forget_plan takes
-- them. Not granted to PUBLIC.
CREATE FUNCTION memory_internal._forget_rows_of(tbl regclass, want text[], cmp text, id_col text, org_e text, user_e text, tier_e text)
RETURNS jsonb LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    setting text := nullif(pg_catalog.current_setting('memory.org_id', true), '');
    hits    jsonb;
BEGIN
    -- The rows of these ids as the caller reads them (its privileges and policies): [id, org,
    -- user, NULL, tier].
    hits := memory_internal._read_as_caller(pg_catalog.format(
        'SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_array(t.%1$I::pg_catalog.text, %2$s, %3$s, NULL, %4$s)), ''[]'')
           FROM %5$s t WHERE %6$s',
        id_col,
        org_e, user_e, coalesce(tier_e, 'NULL::pg_catalog.text'), tbl, cmp), ARRAY[want::text]);
    -- Rows of orgs the caller may act for, within its clearance there when the table has a tier
    -- column (a row without a known tier only for a role cleared to restricted, as recall): any
    -- other row is not found, as a missing id. An id is forgotten in one org: the one the session
    -- acts for when it holds the id, else the greatest (bytewise).
    WITH e AS (
        SELECT f.e, f.n, f.e OPERATOR(pg_catalog.->>) 0 AS id, f.e OPERATOR(pg_catalog.->>) 1 AS org,
               memory_internal._clearance(f.e OPERATOR(pg_catalog.->>) 1)::memory.classification AS cl, f.e OPERATOR(pg_catalog.->>) 4 AS tier
          FROM pg_catalog.jsonb_array_elements(coalesce(hits, '[]')) WITH ORDINALITY f(e, n)),
    v AS (
        SELECT * FROM e
         WHERE e.cl IS NOT NULL
           AND (tier_e IS NULL OR e.cl OPERATOR(pg_catalog.=) 'restricted'
                OR (e.tier OPERATOR(pg_catalog.=) ANY (pg_catalog.enum_range(NULL::memory.classification)::pg_catalog.text[])
                    AND e.tier::memory.classification OPERATOR(pg_catalog.<=) e.cl))),
    p AS (
        SELECT DISTINCT ON (v.id) v.id, v.org FROM v
         ORDER BY v.id, (v.org OPERATOR(pg_catalog.=) setting) DESC NULLS LAST, v.org COLLATE "C" DESC)
    SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_array(v.id, v.org, v.e OPERATOR(pg_catalog.->>) 2, NULL) ORDER BY v.n), '[]')
      INTO hits
      FROM v JOIN p ON p.id OPERATOR(pg_catalog.=) v.id AND p.org IS NOT DISTINCT FROM v.org;
    RETURN hits;
END $$;

-- memory.forget(tbl, ...)'s deletion: each org's ids of `plan` (org -> [{id}], '' for a table
-- without an org column) deleted as the caller (memory_internal._write_as_caller: its grants and
-- the table's row-level security), within its clearance there when the table has a tier
-- (`tier_e`). The rows its DELETE removes (RETURNING, with their content hash: `sha_e`) are
-- forgotten; an id of which none went and a row is still there, as the caller reads it, was kept
-- by the table (a BEFORE DELETE trigger returning NULL, or a row-level security policy for DELETE
-- narrower than the one for SELECT). `cmp` matches the ids ($1), `org_e` the org ($2): fragments
-- memory.forget builds with format('%I'). Returns {deleted: {org: [{id, content_sha256}]} in the
-- order of `want`, done: [id], kept: [id]}. Not granted to PUBLIC.
CREATE FUNCTION memory_internal._forget_as_caller(tbl regclass, want text[], plan jsonb, cmp text, org_e text,
                                                  tier_e text, id_col text, sha_e text)
RETURNS jsonb LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    o        text;
    c        memory.classification;
    del      text[];
    gone     jsonb;
    left_ids text[];
    deleted  jsonb := '{}';
    done     text[] := '{}';
    kept     text[] := '{}';
BEGIN
    FOR o IN SELECT pg_catalog.jsonb_object_keys(plan) LOOP
        del := ARRAY(SELECT DISTINCT e OPERATOR(pg_catalog.->>) 'id' FROM pg_catalog.jsonb_array_elements(plan OPERATOR(pg_catalog.->) o) e);
        c := memory_internal._clearance(nullif(o, ''))::memory.classification;
        gone := memory_internal._write_as_caller(pg_catalog.format(
            'WITH d AS (DELETE FROM %1$s t WHERE %2$s AND %3$s AND %4$s RETURNING t.%5$I::pg_catalog.text AS id, %6$s AS sha)
             SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(''id'', d.id, ''content_sha256'', d.sha)), ''[]'') FROM d',
            tbl, cmp, org_e,
            CASE WHEN tier_e IS NULL OR c IS NOT DISTINCT FROM 'restricted' THEN 'true'
                 ELSE pg_catalog.format('%s OPERATOR(pg_catalog.=) ANY ($3::pg_catalog.text[])', tier_e) END,
            id_col, sha_e),
            ARRAY[del::text, o,
                  ARRAY(SELECT x::pg_catalog.text FROM pg_catalog.unnest(pg_catalog.enum_range(NULL::memory.classification)) x
                         WHERE x OPERATOR(pg_catalog.<=) c)::text]);
        -- In the order the ids were given.
        gone := (SELECT coalesce(pg_catalog.jsonb_agg(g.e ORDER BY pg_catalog.array_position(want, g.e OPERATOR(pg_catalog.->>) 'id'), g.n), '[]')
                   FROM pg_catalog.jsonb_array_elements(gone) WITH ORDINALITY g(e, n));
        IF pg_catalog.jsonb_array_length(gone) OPERATOR(pg_catalog.>) 0 THEN
            deleted := deleted OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_object(o, gone);
            done := done OPERATOR(pg_catalog.||) ARRAY(SELECT g OPERATOR(pg_catalog.->>) 'id' FROM pg_catalog.jsonb_array_elements(gone) g);
        END IF;
        left_ids := ARRAY(SELECT x FROM pg_catalog.unnest(del) x WHERE NOT x OPERATOR(pg_catalog.=) ANY (done));
        IF pg_catalog.cardinality(left_ids) OPERATOR(pg_catalog.>) 0 THEN
            kept := kept OPERATOR(pg_catalog.||) ARRAY(SELECT pg_catalog.jsonb_array_elements_text(coalesce(memory_internal._read_as_caller(
                        pg_catalog.format('SELECT pg_catalog.jsonb_agg(DISTINCT t.%1$I::pg_catalog.text) FROM %2$s t WHERE %3$s AND %4$s',
                                          id_col, tbl, cmp, org_e),
                        ARRAY[left_ids::text, o]), '[]')));
        END IF;
    END LOOP;
    RETURN pg_catalog.jsonb_build_object('deleted', deleted, 'done', pg_catalog.to_jsonb(done), 'kept', pg_catalog.to_jsonb(kept));
END $$;

-- memory.forget(tbl, ...)'s checks of the table and of the caller `who`, in this order: the table
-- exists (42P01), the caller owns it or holds DELETE on it (42501), it is governed and not one of
-- memory_ext's own (22023), it has an id column (22023), the caller may SELECT every mapped column
-- (42501). Returns the columns: org, user, id and content as the table's hold trigger reads them,
-- else the mapping's; the tier as memory.recall reads it (NULL when the table has none); the id
-- column's type. Not granted to PUBLIC.
CREATE FUNCTION memory_internal._forget_table_mapping(tbl regclass, who oid,
                                                      OUT org_col text, OUT user_col text, OUT id_col text, OUT body_col text,
                                                      OUT tier_col text, OUT id_type regtype)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    owner    oid;
    opts     jsonb;
    builtin  boolean;
    args     text[];
    col      text;
BEGIN
    IF tbl IS NULL THEN
        RAISE EXCEPTION 'memory.forget needs a table' USING ERRCODE = '22023',
            HINT = 'memory.forget(table, ids, reason) forgets rows of a governed table; memory.forget(ids, reason) forgets observations.';
    END IF;
    owner := (SELECT cl.relowner FROM pg_catalog.pg_class cl WHERE cl.oid OPERATOR(pg_catalog.=) tbl);
    IF owner IS NULL THEN
        RAISE EXCEPTION 'table % does not exist', tbl::oid USING ERRCODE = '42P01';
    END IF;
    -- Forgetting deletes: the caller must own the table or hold DELETE on it.
    IF who IS NULL OR NOT (pg_catalog.pg_has_role(who, owner, 'USAGE') OR pg_catalog.has_table_privilege(who, tbl, 'DELETE')) THEN
        RAISE EXCEPTION 'permission denied to forget rows of %', tbl USING ERRCODE = '42501',
            HINT = 'The table''s owner grants DELETE on it.';
    END IF;
    SELECT g.options, g.builtin INTO opts, builtin FROM memory.governance_registry g WHERE g.relid OPERATOR(pg_catalog.=) tbl;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'table % is not governed by memory_ext', tbl USING ERRCODE = '22023',
            HINT = 'memory.forget(table, ids, reason) forgets rows of a table governed with memory.govern (with an "id" column).';
    END IF;
    IF builtin THEN
        RAISE EXCEPTION 'table % is managed by memory_ext', tbl USING ERRCODE = '22023',
            HINT = 'Forget observations with memory.forget(ids uuid[], reason); knowledge is retracted, never deleted.';
    END IF;
    -- The org, user, id and content columns the table's hold trigger reads, else the mapping's;
    -- the tier column as memory.recall reads it.
    SELECT memory_internal._trigger_args(tg.oid) INTO args FROM pg_catalog.pg_trigger tg
     WHERE tg.tgrelid OPERATOR(pg_catalog.=) tbl AND tg.tgname OPERATOR(pg_catalog.=) 'memory_hold'
       AND tg.tgfoid OPERATOR(pg_catalog.=) 'memory_internal._hold_guard'::regproc;
    org_col := coalesce(nullif(args[1], ''), opts OPERATOR(pg_catalog.->>) 'org');
    user_col := coalesce(nullif(args[2], ''), opts OPERATOR(pg_catalog.->>) 'user');
    id_col := coalesce(nullif(args[3], ''), opts OPERATOR(pg_catalog.->>) 'id');
    body_col := coalesce(nullif(args[4], ''), opts OPERATOR(pg_catalog.->>) 'content');
    tier_col := coalesce(opts OPERATOR(pg_catalog.->>) 'audit_tier', opts OPERATOR(pg_catalog.->) 'target' OPERATOR(pg_catalog.->>) 0);
    IF tier_col IS NOT NULL AND NOT memory_internal._has_column(tbl, tier_col) THEN
        tier_col := NULL;
    END IF;
    SELECT a.atttypid::regtype INTO id_type FROM pg_catalog.pg_attribute a
     WHERE a.attrelid OPERATOR(pg_catalog.=) tbl AND a.attname OPERATOR(pg_catalog.=) id_col AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped;
    IF id_type IS NULL THEN
        RAISE EXCEPTION 'table % has no id column mapping', tbl USING ERRCODE = '22023',
            HINT = 'Govern it with an id column: memory.govern(table, ''{"id": "<column>", "audit": true, ...}'').';
    END IF;
    -- The caller's DELETE reads the mapped columns (its WHERE and RETURNING), as its own would.
    FOREACH col IN ARRAY array_remove(ARRAY[id_col, org_col, user_col, body_col, tier_col], NULL) LOOP
        IF NOT pg_catalog.has_column_privilege(who, tbl, col, 'SELECT') THEN
            RAISE EXCEPTION 'permission denied to forget rows of %: no SELECT on its column "%"', tbl, col USING ERRCODE = '42501',
                HINT = 'memory.forget deletes as the caller''s own DELETE ... WHERE ... RETURNING does: the table''s owner grants SELECT on the mapped columns (id, org, user, content, tier) with DELETE.';
        END IF;
    END LOOP;
END $$;

-- memory.forget(tbl, ...)'s ids `want` as the table's id column `id_col` (of type `id_type`)
-- writes them, each once in the order first given, and `cmp`, the condition on t that matches them
-- ($1): ids of a uuid or integer column are compared as such (the column's index serves),
-- written as the column writes them ('01' is 1); any other type as text. 22023 for an id the
-- type does not take. Not granted to PUBLIC.
CREATE FUNCTION memory_internal._forget_table_ids(tbl regclass, id_col text, id_type regtype, INOUT want text[], OUT cmp text)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF id_type IN ('uuid'::regtype, 'smallint'::regtype, 'integer'::regtype, 'bigint'::regtype) THEN
        BEGIN
            EXECUTE pg_catalog.format('SELECT ARRAY(SELECT u.v FROM (SELECT x::%1$s::pg_catalog.text AS v, n FROM pg_catalog.unnest($1) WITH ORDINALITY i(x, n)) u
                                         GROUP BY u.v ORDER BY pg_catalog.min(u.n))', id_type)
               INTO want USING want;
        EXCEPTION WHEN invalid_text_representation OR numeric_value_out_of_range THEN
            RAISE EXCEPTION 'memory.forget: the ids of % are % values (%)', tbl, id_type, SQLERRM USING ERRCODE = '22023',
                HINT = pg_catalog.format('Pass ids as the %s column writes them.', id_col);
        END;
        cmp := pg_catalog.format('t.%I OPERATOR(pg_catalog.=) ANY ($1::pg_catalog.text[]::%s[])', id_col, id_type);
    ELSE
        cmp := pg_catalog.format('t.%I::pg_catalog.text OPERATOR(pg_catalog.=) ANY ($1::pg_catalog.text[])', id_col);
    END IF;
END $$;

-- The table form deletes as the caller (memory_internal._write_as_caller, in a security-restricted
-- operation): exactly the rows the caller's own DELETE could delete, under its grants and the
-- table's row-level security policies; the rows it deleted (RETURNING) are what it reports and
-- audits. An id is looked up first as the caller reads it (memory_internal._read_as_caller), to
-- choose its org, check its hold and the caller's clearance there; on Citus each org's DELETE
-- names its org (a router statement on a table distributed by it).
CREATE FUNCTION memory.forget(tbl regclass, ids text[], reason text)
RETURNS jsonb LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    want     text[] := memory_internal._forget_ids(ids, reason);
    who      oid := memory_internal._caller();
    org_col  text;
    user_col text;
    id_col   text;
    body_col text;
    tier_col text;
    id_type  regtype;
    cmp      text;
    tier_e   text;
    hits     jsonb;
    plan     jsonb;
    o        text;
    res      jsonb;
    deleted  jsonb;           -- org -> [{id, content_sha256}] of the rows deleted
    done     text[];          -- ids of which a row was deleted
    kept     text[];          -- ids of which a row the DELETE reached stays
    held     jsonb;
BEGIN
    -- A memory.org_id the role may not act for: 42501 before anything is read.
    PERFORM memory_internal._check_org_setting();
    -- The table, the caller's rights on it, and its columns (memory_internal._forget_table_mapping).
    SELECT m.org_col, m.user_col, m.id_col, m.body_col, m.tier_col, m.id_type INTO org_col, user_col, id_col, body_col, tier_col, id_type
      FROM memory_internal._forget_table_mapping(tbl, who) m;
    IF pg_catalog.cardinality(want) OPERATOR(pg_catalog.=) 0 THEN
        RETURN pg_catalog.jsonb_build_object('forgotten', '[]'::jsonb, 'held', '[]'::jsonb, 'kept', '[]'::jsonb, 'not_found', '[]'::jsonb);
    END IF;
    -- Ids as the id column writes them, and the condition matching them (memory_internal._forget_table_ids).
    SELECT f.want, f.cmp INTO want, cmp FROM memory_internal._forget_table_ids(tbl, id_col, id_type, want) f;
    -- The tier as text (a jsonb target holds it under "classification"), as memory.recall reads it.
    tier_e := CASE WHEN tier_col IS NULL THEN NULL
                   WHEN memory_internal._column_type(tbl, tier_col, 'tier') OPERATOR(pg_catalog.=) 'jsonb'::regtype
                        THEN pg_catalog.format('(t.%I OPERATOR(pg_catalog.->>) ''classification'')', tier_col)
                   ELSE pg_catalog.format('t.%I::pg_catalog.text', tier_col) END;
    hits := memory_internal._forget_rows_of(tbl, want, cmp, id_col,
                CASE WHEN org_col IS NULL THEN 'NULL::pg_catalog.text' ELSE pg_catalog.format('t.%I::pg_catalog.text', org_col) END,
                CASE WHEN user_col IS NULL THEN 'NULL::pg_catalog.text' ELSE pg_catalog.format('t.%I::pg_catalog.text', user_col) END,
                tier_e);
    plan := memory_internal._forget_plan(want, hits);
    -- Each org's ids, deleted as the caller (memory_internal._forget_as_caller).
    res := memory_internal._forget_as_caller(tbl, want, plan OPERATOR(pg_catalog.->) 'delete', cmp,
               CASE WHEN org_col IS NULL THEN 'true' ELSE pg_catalog.format('t.%I::pg_catalog.text OPERATOR(pg_catalog.=) $2', org_col) END,
               tier_e, id_col,
               CASE WHEN body_col IS NULL THEN 'NULL::pg_catalog.text'
                    ELSE pg_catalog.format('pg_catalog.encode(pg_catalog.sha256(pg_catalog.convert_to(t.%I::pg_catalog.text, ''UTF8'')), ''hex'')', body_col) END);
    deleted := res OPERATOR(pg_catalog.->) 'deleted';
    done := ARRAY(SELECT pg_catalog.jsonb_array_elements_text(res OPERATOR(pg_catalog.->) 'done'));
    kept := ARRAY(SELECT pg_catalog.jsonb_array_elements_text(res OPERATOR(pg_catalog.->) 'kept'));
    -- Reported and audited: the rows deleted, and only those.
    plan := pg_catalog.jsonb_set(plan, '{delete}', deleted);
    PERFORM memory_internal._forget_events(tbl::text, plan, reason);
    held := plan OPERATOR(pg_catalog.->) 'held';
    RETURN memory_internal._forget_receipts(tbl::text, deleted) OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_object(
        'forgotten', pg_catalog.to_jsonb(ARRAY(SELECT w FROM pg_catalog.unnest(want) WITH ORDINALITY u(w, n) WHERE w OPERATOR(pg_catalog.=) ANY (done) ORDER BY n)),
        'held', held,
        'kept', coalesce((SELECT pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object('id', w, 'reason', 'not deleted by the table (a BEFORE DELETE trigger or a row-level security policy for DELETE left it)') ORDER BY n)
                            FROM pg_catalog.unnest(want) WITH ORDINALITY u(w, n) WHERE w OPERATOR(pg_catalog.=) ANY (kept) AND NOT w OPERATOR(pg_catalog.=) ANY (done)), '[]'),
        'not_found', pg_catalog.to_jsonb(ARRAY(SELECT w FROM pg_catalog.unnest(want) WITH ORDINALITY u(w, n)
                                                WHERE NOT w OPERATOR(pg_catalog.=) ANY (done) AND NOT w OPERATOR(pg_catalog.=) ANY (kept)
                                                  AND NOT (held OPERATOR(pg_catalog.?) w) ORDER BY n)));
END $$;
COMMENT ON FUNCTION memory.forget(regclass, text[], text) IS
  'Forget rows of a governed table by its mapped id column, as memory.forget(ids, reason) does observations, deleting as the caller''s own DELETE would (its grants and the table''s row-level security): ids it cannot read or delete, of orgs it may not act for, or above its clearance (a tier column) are not_found; held rows kept (MX006 when every id is held); rows the table kept (a BEFORE DELETE trigger returning NULL) are listed in kept, neither reported nor audited as forgotten. Needs DELETE on the table (or owning it) and SELECT on its mapped columns. One memory.forget event per org naming the rows deleted.';


-- ------------------------------------------------------------------------------------------------
-- Erasure receipts: the check (docs/audit.md#erasure-receipts).

-- The seq of a receipt's memory.forget.receipt event in its chain, or NULL (not chained, or never
-- written). Entries are chained in recorded_at order within a chain (the sequencer stamps each
-- with the later of the time and its chain's last stamp) and the event is chained after the
-- receipt's `at` (the forgetting transaction's start), so the search starts at the first seq
-- stamped at or after `at`, found by bisection on the chain's (chain_id, seq) index, and reads
-- forward only what was chained since. A seq whose entry is gone (a dropped partition) is older.
CREATE FUNCTION memory_internal._receipt_event_seq(chain text, event_id uuid, at timestamptz)
RETURNS bigint LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    lo  bigint := 1;
    hi  bigint;
    mid bigint;
    t   timestamptz;
    s   bigint;
BEGIN
    SELECT h.seq INTO hi FROM memory.audit_heads h WHERE h.chain_id OPERATOR(pg_catalog.=) chain;
    IF hi IS NULL OR hi OPERATOR(pg_catalog.<) 1 THEN
        RETURN NULL;
    END IF;
    hi := hi OPERATOR(pg_catalog.+) 1;
    WHILE lo OPERATOR(pg_catalog.<) hi LOOP
        mid := lo OPERATOR(pg_catalog.+) ((hi OPERATOR(pg_catalog.-) lo) OPERATOR(pg_catalog./) 2);
        SELECT l.recorded_at INTO t FROM memory.audit_log l
         WHERE l.chain_id OPERATOR(pg_catalog.=) chain COLLATE "C" AND l.seq OPERATOR(pg_catalog.=) mid;
        IF FOUND AND t OPERATOR(pg_catalog.>=) at THEN
            hi := mid;
        ELSE
            lo := mid OPERATOR(pg_catalog.+) 1;
        END IF;
    END LOOP;
    SELECT l.seq INTO s FROM memory.audit_log l
     WHERE l.chain_id OPERATOR(pg_catalog.=) chain COLLATE "C" AND l.seq OPERATOR(pg_catalog.>=) lo
       AND l.recorded_at OPERATOR(pg_catalog.>=) at
       AND l.event_type OPERATOR(pg_catalog.=) 'memory.forget.receipt'
       AND l.payload OPERATOR(pg_catalog.->>) 'event_id' OPERATOR(pg_catalog.=) event_id::text
     ORDER BY l.seq LIMIT 1;
    RETURN s;
END $$;

-- Which of `ids` are rows of `tbl` (its id column `col`) of org `org` (its org column `org_col`;
-- every row when either is NULL), read as the table's owner: ids compared
-- as the column's type when it is a uuid or an integer (its index serves; ids that are not of the
-- type are no rows of it), else as text. Returns the ids found. Not granted to PUBLIC.
CREATE FUNCTION memory_internal._ids_present(tbl regclass, col text, ids text[], org_col text, org text)
RETURNS text[] LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    typ  regtype := memory_internal._column_type(tbl, col, 'id');
    want text[];
    r    jsonb;
    o_e  text := CASE WHEN org_col IS NULL OR org IS NULL THEN '$2 IS NULL OR true'
                      ELSE pg_catalog.format('t.%I::pg_catalog.text OPERATOR(pg_catalog.=) $2', org_col) END;
BEGIN
    want := CASE WHEN typ OPERATOR(pg_catalog.=) 'uuid'::regtype
                     THEN ARRAY(SELECT x FROM pg_catalog.unnest(ids) x WHERE x OPERATOR(pg_catalog.~*) '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$')
                 WHEN typ OPERATOR(pg_catalog.=) ANY (ARRAY['smallint'::regtype, 'integer'::regtype, 'bigint'::regtype])
                     THEN ARRAY(SELECT x FROM pg_catalog.unnest(ids) x WHERE x OPERATOR(pg_catalog.~) '^-?[0-9]{1,18}$')
                 ELSE ids END;
    IF pg_catalog.cardinality(want) OPERATOR(pg_catalog.=) 0 THEN
        RETURN '{}';
    END IF;
    IF typ OPERATOR(pg_catalog.=) ANY (ARRAY['uuid'::regtype, 'smallint'::regtype, 'integer'::regtype, 'bigint'::regtype]) THEN
        BEGIN
            r := memory_internal._exec_as_table_owner(tbl, pg_catalog.format(
                     'SELECT coalesce(pg_catalog.jsonb_agg(DISTINCT t.%1$I::pg_catalog.text), ''[]'') FROM %2$s t
                       WHERE t.%1$I OPERATOR(pg_catalog.=) ANY ($1::pg_catalog.text[]::%3$s[]) AND (%4$s)', col, tbl, typ, o_e), ARRAY[want::text, org]);
        EXCEPTION WHEN numeric_value_out_of_range THEN
            -- (An integer beyond the column's range is no row of it: compare as text.)
            typ := 'text'::regtype;
        END;
    END IF;
    IF NOT typ OPERATOR(pg_catalog.=) ANY (ARRAY['uuid'::regtype, 'smallint'::regtype, 'integer'::regtype, 'bigint'::regtype]) THEN
        r := memory_internal._exec_as_table_owner(tbl, pg_catalog.format(
                 'SELECT coalesce(pg_catalog.jsonb_agg(DISTINCT t.%1$I::pg_catalog.text), ''[]'') FROM %2$s t
                   WHERE t.%1$I::pg_catalog.text OPERATOR(pg_catalog.=) ANY ($1::pg_catalog.text[]) AND (%3$s)', col, tbl, o_e), ARRAY[want::text, org]);
    END IF;
    RETURN ARRAY(SELECT pg_catalog.jsonb_array_elements_text(coalesce(r, '[]')));
END $$;

-- verify_receipt's event check: the receipt's memory.forget.receipt entry, found by its seq (a
-- receipt issued in immediate mode) or by its event_id; its entry hash recomputed with its key,
-- linked to the entries before and after it (or the head), naming the receipt's ids. Not granted
-- to PUBLIC.
CREATE FUNCTION memory_internal._receipt_event_check(receipt jsonb, chain text, eid uuid, at timestamptz,
                                                     OUT ok boolean, OUT detail text)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s    bigint;
    e    record;
    link bytea;
    ek   bytea;
    hs   bigint;
    hh   bytea;
    zero bytea := pg_catalog.decode(pg_catalog.repeat('00', 32), 'hex');
BEGIN
    s := CASE WHEN receipt OPERATOR(pg_catalog.->) 'seq' OPERATOR(pg_catalog.=) 'null'::jsonb
              THEN memory_internal._receipt_event_seq(chain, eid, at)
              ELSE (receipt OPERATOR(pg_catalog.->>) 'seq')::bigint END;
    SELECT l.* INTO e FROM memory.audit_log l WHERE l.chain_id OPERATOR(pg_catalog.=) chain COLLATE "C" AND l.seq OPERATOR(pg_catalog.=) s;
    IF e.seq IS NULL THEN
        ok := false;
        detail := CASE WHEN EXISTS (SELECT 1 FROM memory.audit_pending p WHERE p.chain_id OPERATOR(pg_catalog.=) chain
                                       AND p.event_type OPERATOR(pg_catalog.=) 'memory.forget.receipt'
                                       AND p.payload OPERATOR(pg_catalog.->>) 'event_id' OPERATOR(pg_catalog.=) eid::text)
                       THEN 'the event is pending, not yet chained: verify again after integration (memory.audit_integrate)'
                       ELSE pg_catalog.format('no memory.forget.receipt event %s in the chain of org "%s"%s', eid, chain,
                                              CASE WHEN s IS NULL THEN '' ELSE pg_catalog.format(' at seq %s', s) END) END;
        RETURN;
    END IF;
    SELECT ak.key INTO ek FROM memory.audit_keys ak WHERE ak.key_id OPERATOR(pg_catalog.=) e.key_id;
    SELECT l.entry_hash INTO link FROM memory.audit_log l
     WHERE l.chain_id OPERATOR(pg_catalog.=) chain COLLATE "C" AND l.seq OPERATOR(pg_catalog.=) (e.seq OPERATOR(pg_catalog.-) 1);
    SELECT h.seq, h.entry_hash INTO hs, hh FROM memory.audit_heads h WHERE h.chain_id OPERATOR(pg_catalog.=) chain;
    detail := CASE
        WHEN e.event_type OPERATOR(pg_catalog.<>) 'memory.forget.receipt'
             OR e.payload OPERATOR(pg_catalog.->>) 'event_id' IS DISTINCT FROM eid::text
            THEN pg_catalog.format('the entry at seq %s is not the event %s', e.seq, eid)
        WHEN e.payload OPERATOR(pg_catalog.->>) 'ids_sha256' IS DISTINCT FROM receipt OPERATOR(pg_catalog.->>) 'ids_sha256'
             OR e.payload OPERATOR(pg_catalog.->>) 'count' IS DISTINCT FROM receipt OPERATOR(pg_catalog.->>) 'count'
            THEN pg_catalog.format('the event at seq %s records other ids (ids_sha256, count)', e.seq)
        WHEN receipt OPERATOR(pg_catalog.->>) 'entry_hash' IS NOT NULL
             AND receipt OPERATOR(pg_catalog.->>) 'entry_hash' OPERATOR(pg_catalog.<>) pg_catalog.encode(e.entry_hash, 'hex')
            THEN pg_catalog.format('the entry at seq %s has another hash', e.seq)
        WHEN ek IS NULL OR memory_internal._audit_entry_hash(e.chain_id, e.seq, e.prev_hash, e.event_type,
                 (pg_catalog.extract('epoch', e.recorded_at) OPERATOR(pg_catalog.*) 1000000)::bigint,
                 e.actor_id, e.org_id, e.project_id, e.workspace_id, e.key_id, e.payload::pg_catalog.text, ek)
             IS DISTINCT FROM e.entry_hash
            THEN pg_catalog.format('the entry at seq %s does not hash to its entry_hash', e.seq)
        WHEN (e.seq OPERATOR(pg_catalog.=) 1 AND e.prev_hash OPERATOR(pg_catalog.<>) zero)
             OR (link IS NOT NULL AND link OPERATOR(pg_catalog.<>) e.prev_hash)
            THEN pg_catalog.format('the entry at seq %s does not link to the entry before it', e.seq)
        WHEN hs OPERATOR(pg_catalog.=) e.seq AND hh OPERATOR(pg_catalog.<>) e.entry_hash
            THEN pg_catalog.format('the chain''s head at seq %s is another entry', e.seq)
        WHEN hs OPERATOR(pg_catalog.>) e.seq AND NOT EXISTS (SELECT 1 FROM memory.audit_log l
                 WHERE l.chain_id OPERATOR(pg_catalog.=) chain COLLATE "C" AND l.seq OPERATOR(pg_catalog.=) (e.seq OPERATOR(pg_catalog.+) 1)
                   AND l.prev_hash OPERATOR(pg_catalog.=) e.entry_hash)
            THEN pg_catalog.format('the entry after seq %s does not link to it', e.seq)
        END;
    ok := detail IS NULL;
    detail := coalesce(detail, pg_catalog.format('seq %s, entry_hash %s', e.seq, pg_catalog.encode(e.entry_hash, 'hex')));
END $$;

-- verify_receipt's head check: the chain's head the receipt names ({seq, entry_hash}) is the entry
-- at that seq (seq 0: the empty chain). Not granted to PUBLIC.
CREATE FUNCTION memory_internal._receipt_head_check(chain text, head jsonb, OUT ok boolean, OUT detail text)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF (head OPERATOR(pg_catalog.->>) 'seq')::bigint OPERATOR(pg_catalog.=) 0 THEN
        ok := head OPERATOR(pg_catalog.->>) 'entry_hash' OPERATOR(pg_catalog.=) pg_catalog.repeat('00', 32);
    ELSE
        SELECT l.entry_hash OPERATOR(pg_catalog.=) pg_catalog.decode(head OPERATOR(pg_catalog.->>) 'entry_hash', 'hex') INTO ok
          FROM memory.audit_log l
         WHERE l.chain_id OPERATOR(pg_catalog.=) chain COLLATE "C" AND l.seq OPERATOR(pg_catalog.=) (head OPERATOR(pg_catalog.->>) 'seq')::bigint;
    END IF;
    detail := CASE WHEN ok THEN pg_catalog.format('seq %s', head OPERATOR(pg_catalog.->>) 'seq')
                   WHEN ok IS NULL THEN pg_catalog.format('no entry at seq %s (pruned, or never chained)', head OPERATOR(pg_catalog.->>) 'seq')
                   ELSE pg_catalog.format('the entry at seq %s has another hash', head OPERATOR(pg_catalog.->>) 'seq') END;
    ok := coalesce(ok, false);
END $$;

-- verify_receipt's scan: none of the recorded ids ({table: [id]}) is a row again: the memories' ids
-- in memory_ext's tables keyed by a memory's id, and in any governed table with an id column (the
-- ids forgotten from it, and the memories' ids when its ids are uuids), each read as its owner; rows of the
-- receipt's org (`chain`) where a table has an org column, every row for the platform chain ('').
-- (Another org's row is not that org's business, and where ids are unique per org, on Citus or
-- in a table keyed by (org, id), it is another row.) Not granted to PUBLIC.
CREATE FUNCTION memory_internal._receipt_absent_check(ids jsonb, chain text, OUT ok boolean, OUT detail text)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    flat    text[] := ARRAY(SELECT x FROM pg_catalog.jsonb_each(coalesce(ids, '{}')) t(k, v), pg_catalog.jsonb_array_elements_text(t.v) x);
    uuids   uuid[];
    tb      record;
    hits    text[];
    present text[] := '{}';
    scanned int := 0;
BEGIN
    IF ids IS NULL THEN
        ok := false;
        detail := 'no recorded ids to look for';
        RETURN;
    END IF;
    -- (The ids of memories: a governed table's ids are looked for in that table.)
    uuids := ARRAY(SELECT x::uuid FROM pg_catalog.jsonb_array_elements_text(coalesce(ids OPERATOR(pg_catalog.->) 'memory.observations', '[]')) x
                    WHERE x OPERATOR(pg_catalog.~*) '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$');
    FOR tb IN SELECT v.tbl, v.col FROM (VALUES ('memory.observations', 'id'), ('memory.observations_archive', 'id'),
                                               ('memory.observation_weight_history', 'observation_id'),
                                               ('memory.revisions', 'memory_id'),
                                               ('memory.claims', 'id'), ('memory.entities', 'id')) v(tbl, col)
               WHERE pg_catalog.to_regclass(v.tbl) IS NOT NULL LOOP
        scanned := scanned OPERATOR(pg_catalog.+) 1;
        CONTINUE WHEN pg_catalog.cardinality(uuids) OPERATOR(pg_catalog.=) 0;
        EXECUTE pg_catalog.format('SELECT ARRAY(SELECT DISTINCT t.%1$I::pg_catalog.text FROM %2$s t WHERE t.%1$I OPERATOR(pg_catalog.=) ANY ($1)
                                                    AND ($2 OPERATOR(pg_catalog.=) '''' OR t.org_id OPERATOR(pg_catalog.=) $2))',
                                  tb.col, tb.tbl) INTO hits USING uuids, chain;
        present := present OPERATOR(pg_catalog.||) ARRAY(SELECT tb.tbl OPERATOR(pg_catalog.||) ': ' OPERATOR(pg_catalog.||) h FROM pg_catalog.unnest(hits) h);
    END LOOP;
    FOR tb IN SELECT g.relid::regclass AS tbl, g.options OPERATOR(pg_catalog.->>) 'id' AS col, g.options OPERATOR(pg_catalog.->>) 'org' AS org_col
                FROM memory.governance_registry g
               WHERE NOT g.builtin AND g.options OPERATOR(pg_catalog.->>) 'id' IS NOT NULL AND pg_catalog.to_regclass(g.relid::pg_catalog.text) IS NOT NULL
               ORDER BY g.relid::pg_catalog.text LOOP
        CONTINUE WHEN NOT memory_internal._has_column(tb.tbl, tb.col);
        scanned := scanned OPERATOR(pg_catalog.+) 1;
        hits := ARRAY(SELECT pg_catalog.jsonb_array_elements_text(coalesce(ids OPERATOR(pg_catalog.->) tb.tbl::pg_catalog.text, '[]')))
                OPERATOR(pg_catalog.||) uuids::text[];
        CONTINUE WHEN pg_catalog.cardinality(hits) OPERATOR(pg_catalog.=) 0;
        hits := memory_internal._ids_present(tb.tbl, tb.col, hits,
                    CASE WHEN memory_internal._has_column(tb.tbl, tb.org_col) THEN tb.org_col END, nullif(chain, ''));
        present := present OPERATOR(pg_catalog.||) ARRAY(SELECT tb.tbl::pg_catalog.text OPERATOR(pg_catalog.||) ': ' OPERATOR(pg_catalog.||) h FROM pg_catalog.unnest(hits) h);
    END LOOP;
    ok := pg_catalog.cardinality(present) OPERATOR(pg_catalog.=) 0;
    detail := CASE WHEN ok THEN pg_catalog.format('none of the %s ids is in any of %s tables', pg_catalog.cardinality(flat), scanned)
                   ELSE 'present again: ' OPERATOR(pg_catalog.||) pg_catalog.array_to_string(present[1:20], ', ')
                        OPERATOR(pg_catalog.||) CASE WHEN pg_catalog.cardinality(present) OPERATOR(pg_catalog.>) 20
                                                     THEN pg_catalog.format(' (and %s more)', pg_catalog.cardinality(present) OPERATOR(pg_catalog.-) 20) ELSE '' END END;
END $$;

-- Reads across memory_ext's tables, the audit log and keys, and the governed tables (each as its
-- owner), for an admin of the receipt's org only (docs/security.md lists it).
CREATE FUNCTION memory.verify_receipt(receipt jsonb)
RETURNS TABLE ("check" text, ok boolean, detail text)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    why    text;
    chain  text;
    eid    uuid;
    at     timestamptz;
    k      bytea;
    good   boolean;
    ids    jsonb;
    flat   text[];
BEGIN
    IF receipt IS NULL THEN
        RAISE EXCEPTION 'memory.verify_receipt needs a receipt' USING ERRCODE = '22023',
            HINT = 'Pass the receipt object memory.forget or memory.erase_subject returned.';
    END IF;
    why := memory_internal._receipt_shape_error(receipt::pg_catalog.text);
    IF why IS NOT NULL THEN
        RAISE EXCEPTION 'malformed receipt: %', why USING ERRCODE = '22023',
            HINT = 'Pass the receipt object memory.forget or memory.erase_subject returned, unchanged.';
    END IF;
    chain := receipt OPERATOR(pg_catalog.->>) 'org_id';
    -- Another org's receipt: 42501, before anything is read.
    PERFORM memory_internal._require_org(chain);
    eid := (receipt OPERATOR(pg_catalog.->>) 'event_id')::uuid;
    BEGIN
        at := (receipt OPERATOR(pg_catalog.->>) 'at')::timestamptz;
    EXCEPTION WHEN OTHERS THEN
        RAISE EXCEPTION 'malformed receipt: receipt member "at" is not a timestamp' USING ERRCODE = '22023',
            HINT = 'Pass the receipt object memory.forget or memory.erase_subject returned, unchanged.';
    END;
    -- Chain what is pending first (where this transaction can write), as audit_verify does.
    PERFORM memory_internal._audit_integrate(false);
    -- The signature, with the key it names.
    SELECT ak.key INTO k FROM memory.audit_keys ak WHERE ak.key_id OPERATOR(pg_catalog.=) (receipt OPERATOR(pg_catalog.->>) 'key_id')::int;
    good := k IS NOT NULL AND memory_internal._receipt_signature_ok(receipt::pg_catalog.text, k);
    RETURN QUERY SELECT 'signature'::text, good,
        CASE WHEN k IS NULL THEN pg_catalog.format('no audit key %s', receipt OPERATOR(pg_catalog.->>) 'key_id')
             WHEN good THEN pg_catalog.format('HMAC-SHA256 with audit key %s', receipt OPERATOR(pg_catalog.->>) 'key_id')
             ELSE 'the signature does not match the receipt' END;
    -- The ids it covers: recorded at issue, hashing to ids_sha256 and counting count.
    SELECT er.ids INTO ids FROM memory.erasure_receipts er
     WHERE er.event_id OPERATOR(pg_catalog.=) eid AND er.org_id OPERATOR(pg_catalog.=) chain;
    flat := ARRAY(SELECT x FROM pg_catalog.jsonb_each(coalesce(ids, '{}')) t(k, v), pg_catalog.jsonb_array_elements_text(t.v) x);
    good := ids IS NOT NULL AND memory_internal._ids_sha256(flat) OPERATOR(pg_catalog.=) (receipt OPERATOR(pg_catalog.->>) 'ids_sha256')
            AND (SELECT pg_catalog.count(DISTINCT pg_catalog.lower(x)) FROM pg_catalog.unnest(flat) x) OPERATOR(pg_catalog.=) (receipt OPERATOR(pg_catalog.->>) 'count')::bigint;
    RETURN QUERY SELECT 'ids'::text, good,
        CASE WHEN ids IS NULL THEN pg_catalog.format('no erasure of event %s in org "%s"', eid, chain)
             WHEN good THEN pg_catalog.format('%s ids hash to ids_sha256', receipt OPERATOR(pg_catalog.->>) 'count')
             ELSE 'the recorded ids do not hash to ids_sha256 and count' END;
    RETURN QUERY SELECT 'event'::text, c.ok, c.detail FROM memory_internal._receipt_event_check(receipt, chain, eid, at) c;
    RETURN QUERY SELECT 'chain_head'::text, c.ok, c.detail FROM memory_internal._receipt_head_check(chain, receipt OPERATOR(pg_catalog.->) 'chain_head') c;
    RETURN QUERY SELECT 'absent'::text, c.ok, c.detail FROM memory_internal._receipt_absent_check(ids, chain) c;
END $$;
COMMENT ON FUNCTION memory.verify_receipt(jsonb) IS
  'Check an erasure receipt of memory.forget or memory.erase_subject: rows signature (HMAC with its audit key), ids (the recorded ids hash to ids_sha256), event (its memory.forget.receipt entry in the chain, hash and links), chain_head (the head it names), absent (none of the ids is a row of memory_ext''s tables or of a governed table). Malformed receipt 22023; another org''s 42501. Pending entries are integrated first where the transaction can write. Granted to memory_admin.';

-- ------------------------------------------------------------------------------------------------
-- Maintenance: one call for everything periodic, and a pg_cron helper to schedule it.

-- Every maintenance run is recorded, so a pg_cron job's result is visible in SQL (docs/design.md#operations).
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

-- A tenant admin's dashboard (memory.health): per org the caller may act for, counts and times
-- only, never content. SECURITY DEFINER (it reads past row-level security and clearance to count)
-- and so it picks the orgs itself: the org memory.org_id names (42501 when the caller may not act
-- for it); else the caller's orgs (memory.my_orgs()), or, for a role that may act for every org
-- (unrestricted or '*'), every org with observations or a grant. Each count is an index scan of one org's rows in that state
-- (observations_due_expiry, observations_due_purge, observations_archive_org,
-- observations_no_embedding, recheck_tasks_open); the maintenance run is the platform's (memory.maintenance_runs: when and
-- whether it succeeded, not its error text); the audit backlog the org's chain's pending entries
-- (one pass over the pending queue for every org: it has no index by chain, to keep appends cheap).
-- Not granted to PUBLIC (memory_admin, through the view).
CREATE FUNCTION memory_internal._health_for_caller()
RETURNS TABLE (org_id text, expired_unswept bigint, awaiting_purge bigint, archived bigint, oldest_archived_at timestamptz,
               without_embedding bigint, recheck_open bigint, last_maintenance_at timestamptz, last_maintenance_outcome text,
               audit_pending bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    orgs text[];
    s    text := nullif(pg_catalog.current_setting('memory.org_id', true), '');
BEGIN
    IF s IS NOT NULL THEN
        orgs := ARRAY[memory_internal._require_org(s)];
    ELSIF memory_internal._may_act_for('') THEN
        -- Every org: those with observations (one index probe per org) and those granted.
        orgs := ARRAY(
            WITH RECURSIVE o(org) AS (
                (SELECT x.org_id FROM memory.observations x ORDER BY x.org_id LIMIT 1)
                UNION ALL
                SELECT (SELECT x.org_id FROM memory.observations x WHERE x.org_id OPERATOR(pg_catalog.>) o.org ORDER BY x.org_id LIMIT 1)
                  FROM o WHERE o.org IS NOT NULL)
            SELECT o.org FROM o WHERE o.org IS NOT NULL
            UNION
            SELECT g.org_id FROM memory.org_grants g WHERE g.org_id OPERATOR(pg_catalog.<>) '*'
            ORDER BY 1);
    ELSE
        orgs := ARRAY(SELECT m.o FROM memory.my_orgs() m(o) WHERE m.o OPERATOR(pg_catalog.<>) '*' AND memory_internal._may_act_for(m.o));
    END IF;
    RETURN QUERY EXECUTE pg_catalog.format($q$
        SELECT o.org,
               (SELECT pg_catalog.count(*) FROM memory.observations x
                 WHERE x.org_id OPERATOR(pg_catalog.=) o.org AND x.soft_deleted_at IS NULL AND x.expires_at IS NOT NULL
                   AND x.expires_at OPERATOR(pg_catalog.<=) pg_catalog.now()),
               (SELECT pg_catalog.count(*) FROM memory.observations x
                 WHERE x.org_id OPERATOR(pg_catalog.=) o.org AND x.soft_deleted_at IS NOT NULL),
               a.n, a.oldest,
               %s,
               (SELECT pg_catalog.count(*) FROM memory.recheck_tasks t
                 WHERE t.org_id OPERATOR(pg_catalog.=) o.org AND t.completed_at IS NULL),
               m.started_at,
               CASE WHEN m.id IS NULL THEN NULL WHEN m.sqlstate IS NOT NULL THEN 'failed: ' OPERATOR(pg_catalog.||) m.sqlstate
                    WHEN m.finished_at IS NULL THEN 'running' ELSE 'ok' END,
               coalesce(ap.n, 0)
          FROM pg_catalog.unnest($1::pg_catalog.text[]) o(org)
          CROSS JOIN LATERAL (SELECT pg_catalog.count(*) AS n, pg_catalog.min(y.archived_at) AS oldest
                                FROM memory.observations_archive y WHERE y.org_id OPERATOR(pg_catalog.=) o.org) a
          LEFT JOIN (SELECT r.id, r.started_at, r.finished_at, r.sqlstate FROM memory.maintenance_runs r ORDER BY r.id DESC LIMIT 1) m ON true
          -- The pending queue (kept short by the integrators, no index by chain): read once for every org.
          LEFT JOIN (SELECT p.chain_id, pg_catalog.count(*) AS n FROM memory.audit_pending p
                      WHERE p.chain_id OPERATOR(pg_catalog.=) ANY ($1::pg_catalog.text[]) GROUP BY p.chain_id) ap
                 ON ap.chain_id OPERATOR(pg_catalog.=) o.org
         ORDER BY o.org $q$,
        -- Embeddings are a column memory.enable_embeddings adds: without it, NULL.
        CASE WHEN memory_internal._has_column('memory.observations', 'embedding')
             THEN '(SELECT pg_catalog.count(*) FROM memory.observations x WHERE x.org_id OPERATOR(pg_catalog.=) o.org '
                  'AND x.embedding IS NULL AND x.soft_deleted_at IS NULL)'
             ELSE 'NULL::bigint' END)
    USING orgs;
END $$;

CREATE VIEW memory.health AS SELECT * FROM memory_internal._health_for_caller();
COMMENT ON VIEW memory.health IS
  'A tenant admin''s dashboard, one row per org the caller may act for (the org memory.org_id names, when set; a role bound to every org: every org): observations expired and not yet swept, soft-deleted awaiting purge, archived and the oldest archived, live observations without an embedding (NULL when embeddings are not enabled), open re-check tasks, the last maintenance run (when it started and ok, running or failed: SQLSTATE) and audit entries pending integration. Counts only, no content. Granted to memory_admin.';
