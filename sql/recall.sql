-- memory.recall and memory.retrieve (docs/design.md#agent-memory-api, docs/vector.md): thin callers of the retrieval
-- engine (memory_core::retrieval, run by memory_internal._retrieve; memory.recall is a C function
-- of the engine's shell, src/recall/body.rs). Each checks its arguments, the
-- org and the caller's clearance, describes what it reads as a plan (the source's columns, the
-- conditions, the query, the vector, k), and appends its read event through one function
-- (memory_internal._read_event).

-- The filters memory.recall takes, checked and turned into plain values (docs/design.md#agent-memory-api): an unknown
-- key or a value of the wrong type is 22023 with a hint. Returns the filters with
-- created_after/created_before as timestamptz text, nothing else changed.
CREATE FUNCTION memory_internal._recall_filters(filters jsonb)
RETURNS jsonb LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    e   record;
    ts  timestamptz;
    out jsonb := '{}';
    hint constant text := 'filters is an object of user_id, session_id, task_id (strings), memory_type, source_type, max_tier (their enum labels), '
                          'created_after, created_before (timestamps) and metadata (an object the row''s metadata contains).';
BEGIN
    IF filters IS NULL THEN
        RETURN out;
    END IF;
    IF jsonb_typeof(filters) OPERATOR(pg_catalog.<>) 'object' THEN
        RAISE EXCEPTION 'memory.recall filters must be a JSON object, not %', jsonb_typeof(filters) USING ERRCODE = '22023', HINT = hint;
    END IF;
    FOR e IN SELECT j.key, j.value FROM jsonb_each(filters) j ORDER BY j.key LOOP
        IF e.key OPERATOR(pg_catalog.<>) ALL (ARRAY['user_id', 'session_id', 'task_id', 'memory_type', 'source_type', 'max_tier',
                                                    'created_after', 'created_before', 'metadata']) THEN
            RAISE EXCEPTION 'unknown memory.recall filter "%"', e.key USING ERRCODE = '22023', HINT = hint;
        END IF;
        IF e.key OPERATOR(pg_catalog.=) 'metadata' THEN
            IF jsonb_typeof(e.value) OPERATOR(pg_catalog.<>) 'object' THEN
                RAISE EXCEPTION 'memory.recall filter "metadata" must be a JSON object, not %', jsonb_typeof(e.value) USING ERRCODE = '22023', HINT = hint;
            END IF;
            out := out || jsonb_build_object(e.key, e.value);
            CONTINUE;
        END IF;
        IF jsonb_typeof(e.value) OPERATOR(pg_catalog.<>) 'string' THEN
            RAISE EXCEPTION 'memory.recall filter "%" must be a string, not %', e.key, jsonb_typeof(e.value) USING ERRCODE = '22023', HINT = hint;
        END IF;
        IF e.key OPERATOR(pg_catalog.=) 'memory_type' AND NOT ((e.value #>> '{}') OPERATOR(pg_catalog.=) ANY (enum_range(NULL::memory.memory_type)::text[])) THEN
            RAISE EXCEPTION 'memory.recall filter "memory_type": unknown memory type "%"', e.value #>> '{}' USING ERRCODE = '22023',
                HINT = 'One of ' || array_to_string(enum_range(NULL::memory.memory_type)::text[], ', ') || '.';
        ELSIF e.key OPERATOR(pg_catalog.=) 'source_type' AND NOT ((e.value #>> '{}') OPERATOR(pg_catalog.=) ANY (enum_range(NULL::memory.source_type)::text[])) THEN
            RAISE EXCEPTION 'memory.recall filter "source_type": unknown source type "%"', e.value #>> '{}' USING ERRCODE = '22023',
                HINT = 'One of ' || array_to_string(enum_range(NULL::memory.source_type)::text[], ', ') || '.';
        ELSIF e.key OPERATOR(pg_catalog.=) 'max_tier' AND NOT ((e.value #>> '{}') OPERATOR(pg_catalog.=) ANY (enum_range(NULL::memory.classification)::text[])) THEN
            RAISE EXCEPTION 'memory.recall filter "max_tier": unknown tier "%"', e.value #>> '{}' USING ERRCODE = '22023',
                HINT = 'One of ' || array_to_string(enum_range(NULL::memory.classification)::text[], ', ') || '.';
        ELSIF e.key IN ('created_after', 'created_before') THEN
            BEGIN
                ts := (e.value #>> '{}')::timestamptz;
            EXCEPTION WHEN data_exception THEN
                ts := NULL;
            END;
            IF ts IS NULL OR NOT isfinite(ts) THEN
                RAISE EXCEPTION 'memory.recall filter "%": "%" is not a timestamp', e.key, e.value #>> '{}' USING ERRCODE = '22023',
                    HINT = 'An ISO 8601 timestamp such as 2025-01-31T12:00:00Z.';
            END IF;
            out := out || jsonb_build_object(e.key, ts::text);
            CONTINUE;
        END IF;
        out := out || jsonb_build_object(e.key, e.value);
    END LOOP;
    RETURN out;
END $$;

-- The arguments memory.recall and memory.retrieve share (docs/design.md#agent-memory-api), checked before anything is
-- read or written: a NULL or blank org and k outside [1, 1000] are 22023 with a hint.
CREATE FUNCTION memory_internal._check_read_args(fn text, org text, k int)
RETURNS void LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF memory_internal._blank(org) THEN
        RAISE EXCEPTION '% needs an org_id', fn USING ERRCODE = '22023',
            HINT = 'Pass the org to read from (one of memory.my_orgs()).';
    END IF;
    IF k IS NULL OR k OPERATOR(pg_catalog.<) 1 OR k OPERATOR(pg_catalog.>) 1000 THEN
        RAISE EXCEPTION '%: k must be between 1 and 1000, got %', fn, coalesce(k::text, 'NULL') USING ERRCODE = '22023',
            HINT = 'Ask for 1 to 1000 rows; recall pages with its created_before filter.';
    END IF;
END $$;

-- The columns of recall's source by role (content, org, id, user, project, weight, tier, stamps,
-- session_id, task_id, metadata, embedding), with `tier_kind` (column or json), `words` (a kept
-- tsvector column) and `dims` (the embedding's dimensions when want_embedding). A governed table's
-- mapping is checked here: 22023 with a hint for a table that is not governed, lacks a column
-- the call needs, or names a column that is gone.
CREATE FUNCTION memory_internal._recall_columns(tbl regclass, f jsonb, project_id text, want_embedding boolean)
RETURNS jsonb LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    opts jsonb;
    c    jsonb := '{}';
    col  text;
    dims int;  -- memory.observations' embedding dimensions (memory.ann_settings)
    hint_src constant text := 'source is a table governed by memory.govern with a content mapping, an org column and a uuid id column, which the caller may SELECT; omit it to recall from memory.observations.';
BEGIN
    IF tbl IS NOT NULL THEN
        SELECT g.options INTO opts FROM memory.governance_registry g WHERE g.relid OPERATOR(pg_catalog.=) tbl;
        IF opts IS NULL THEN
            RAISE EXCEPTION 'memory.recall: % is not governed', tbl USING ERRCODE = '22023', HINT = hint_src;
        END IF;
        IF opts->>'content' IS NULL THEN
            RAISE EXCEPTION 'memory.recall: % has no content mapping', tbl USING ERRCODE = '22023', HINT = hint_src;
        END IF;
        IF opts->>'org' IS NULL THEN
            RAISE EXCEPTION 'memory.recall: % has no org column, so no rows of an org', tbl USING ERRCODE = '22023', HINT = hint_src;
        END IF;
        c := jsonb_build_object('content', opts->>'content', 'org', opts->>'org',
            'id', coalesce(opts->>'id', CASE WHEN memory_internal._has_column(tbl, 'id') THEN 'id' END),
            'user', coalesce(opts->>'user', CASE WHEN memory_internal._has_column(tbl, 'user_id') THEN 'user_id' END),
            'project', coalesce(opts->>'project', CASE WHEN memory_internal._has_column(tbl, 'project_id') THEN 'project_id' END),
            'weight', opts->>'weight',
            'tier', coalesce(opts->>'audit_tier', opts->'target'->>0),
            'source_type', opts->>'source_type', 'embedding', opts->>'embedding');
        FOREACH col IN ARRAY ARRAY['created_at', 'expires_at', 'soft_deleted_at', 'memory_type'] LOOP
            c := c || jsonb_build_object(col, coalesce(opts->'stamps'->>col, CASE WHEN col = 'soft_deleted_at' THEN opts->>'soft_deleted' END,
                                                       CASE WHEN memory_internal._has_column(tbl, col) THEN col END));
        END LOOP;
        FOREACH col IN ARRAY ARRAY['session_id', 'task_id', 'metadata'] LOOP
            c := c || jsonb_build_object(col, CASE WHEN memory_internal._has_column(tbl, col) THEN col END);
        END LOOP;
        -- Every column named must still be there (a dropped one is 22023 here, not an error of the read).
        FOR col IN SELECT v FROM jsonb_each_text(c) j(kk, v) WHERE v IS NOT NULL LOOP
            IF NOT memory_internal._has_column(tbl, col) THEN
                RAISE EXCEPTION 'memory.recall: % has no column "%"', tbl, col USING ERRCODE = '22023', HINT = hint_src;
            END IF;
        END LOOP;
        IF c->>'id' IS NULL OR memory_internal._column_type(tbl, c->>'id', 'id') OPERATOR(pg_catalog.<>) 'uuid'::regtype THEN
            RAISE EXCEPTION 'memory.recall: % has no uuid id column', tbl USING ERRCODE = '22023', HINT = hint_src;
        END IF;
        FOREACH col IN ARRAY ARRAY['created_at', 'expires_at', 'soft_deleted_at'] LOOP
            IF c->>col IS NOT NULL AND memory_internal._column_type(tbl, c->>col, col) OPERATOR(pg_catalog.<>) 'timestamptz'::regtype THEN
                c := c - col;
            END IF;
        END LOOP;
        IF c->>'metadata' IS NOT NULL AND memory_internal._column_type(tbl, c->>'metadata', 'metadata') OPERATOR(pg_catalog.<>) 'jsonb'::regtype THEN
            c := c - 'metadata';
        END IF;
        IF c->>'weight' IS NOT NULL AND memory_internal._column_type(tbl, c->>'weight', 'weight') OPERATOR(pg_catalog.<>) 'float8'::regtype THEN
            c := c - 'weight';
        END IF;
        -- A filter needs its column.
        FOR col IN SELECT kk FROM jsonb_object_keys(f) kk WHERE kk <> 'max_tier' LOOP
            IF c->>(CASE col WHEN 'user_id' THEN 'user' WHEN 'created_after' THEN 'created_at' WHEN 'created_before' THEN 'created_at' ELSE col END) IS NULL THEN
                RAISE EXCEPTION 'memory.recall: filter "%" needs a column that % does not have', col, tbl USING ERRCODE = '22023',
                    HINT = format('Filter %s only by the columns its memory.govern mapping names (or the conventional user_id, session_id, task_id, memory_type, created_at, metadata).', tbl);
            END IF;
        END LOOP;
        IF project_id IS NOT NULL AND c->>'project' IS NULL THEN
            RAISE EXCEPTION 'memory.recall: project_id needs a project column, which % does not have', tbl USING ERRCODE = '22023', HINT = hint_src;
        END IF;
        RETURN c || jsonb_build_object('tier_kind', CASE WHEN c->>'tier' IS NOT NULL AND memory_internal._column_type(tbl, c->>'tier', 'tier') OPERATOR(pg_catalog.=) 'jsonb'::regtype
                                                         THEN 'json' ELSE 'column' END,
                                       'dims', CASE WHEN c->>'embedding' IS NOT NULL AND want_embedding THEN memory_internal._embedding_dims(tbl, c->>'embedding') END);
    ELSE
        c := '{"content": "content", "org": "org_id", "id": "id", "user": "user_id", "project": "project_id", "weight": "weight",
               "tier": "classification", "source_type": "source_type", "created_at": "created_at", "expires_at": "expires_at",
               "soft_deleted_at": "soft_deleted_at", "memory_type": "memory_type", "session_id": "session_id", "task_id": "task_id",
               "metadata": "metadata"}';
        -- (The embedding column comes with memory.ann_settings' row; the column's own test without one.)
        IF want_embedding THEN
            dims := (SELECT e.dimensions FROM memory.ann_settings e);
            IF dims IS NOT NULL OR memory_internal._has_column('memory.observations'::regclass, 'embedding') THEN
                c := c || jsonb_build_object('embedding', 'embedding', 'dims', coalesce(dims, memory_internal._embedding_dims('memory.observations'::regclass, 'embedding')));
            END IF;
        END IF;
        RETURN c || '{"words": "content_tsv", "tier_kind": "column"}';
    END IF;
END $$;

-- A plan read as of a time (SPEC §17): its liveness conditions at `at` instead of now (created by
-- then, not yet soft-deleted, expired or superseded at it), and for memory.observations each row
-- as the revision valid at `at` (the engine's history). `at` NULL: the plan unchanged. A
-- non-finite time: 22023.
CREATE FUNCTION memory_internal._plan_as_of(plan jsonb, at timestamptz, fn text, created_col text)
RETURNS jsonb LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t     text;
    conds jsonb := '[]';
    c     jsonb;
BEGIN
    IF at IS NULL THEN
        RETURN plan;
    END IF;
    t := memory_internal._utc_text(at);
    FOR c IN SELECT x FROM jsonb_array_elements(plan->'conditions') x LOOP
        IF c ? 'is_null' AND (c->>'is_null') IN ('soft_deleted_at', 'superseded_at') THEN
            c := jsonb_build_object('null_or_after', jsonb_build_array(c->>'is_null', t));
        ELSIF c ? 'null_or_after' AND (c->'null_or_after'->1) = 'null'::jsonb THEN
            c := jsonb_build_object('null_or_after', jsonb_build_array(c->'null_or_after'->>0, t));
        END IF;
        conds := conds || jsonb_build_array(c);
    END LOOP;
    IF created_col IS NOT NULL THEN
        conds := conds || jsonb_build_object('at_or_before', jsonb_build_array(created_col, t));
    END IF;
    plan := jsonb_set(plan, '{conditions}', conds);
    IF plan->'relation' = '["memory", "observations"]'::jsonb THEN
        plan := plan || jsonb_build_object('history', jsonb_build_object('relation', '["memory", "revisions"]'::jsonb, 'at', t));
    END IF;
    RETURN plan;
END $$;

-- as_of of recall and search: NULL or a finite time (22023).
CREATE FUNCTION memory_internal._check_as_of(fn text, at timestamptz)
RETURNS void LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF at IS NOT NULL AND NOT pg_catalog.isfinite(at) THEN
        RAISE EXCEPTION '%: as_of must be a finite time, got %', fn, at USING ERRCODE = '22023',
            HINT = 'Pass the time to read the memories as of, or NULL for now.';
    END IF;
END $$;

-- The read events of recall and retrieve, appended in this one place: ids, counts and hashes,
-- never content, a query or an embedding. Through memory_internal._audit_read, so the event
-- survives the rollback of the reading transaction or savepoint (docs/audit.md#read-events).
CREATE FUNCTION memory_internal._read_event(event text, org text, project_id text, details jsonb)
RETURNS void LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM memory_internal._audit_read(event, details::text, org, project_id);
END $$;

-- Runs a plan (memory_internal._retrieve, which sets pgvector's iterative index scan for a vector list).
CREATE FUNCTION memory_internal._run_plan(plan jsonb, as_caller boolean)
RETURNS jsonb LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN memory_internal._retrieve(plan::text, as_caller)::jsonb;
END $$;

-- Top-k memories of a tenant (docs/design.md#agent-memory-api). SECURITY DEFINER: it appends memory.recall, and reads
-- memory.observations as the extension owner for any org the caller may act for (not only the
-- acting one), filtering the org, the live rows and the caller's clearance itself. A governed
-- application table (source) is read as the caller (its privileges and policies), with the same
-- filters. query_embedding is anycompatible: float8[] (psycopg's floats), real[], pgvector's
-- vector or text alike (memory_internal._query_vector's rules). A C function of the engine's
-- shell (src/recall/body.rs, memory_core::retrieval::recall): the arguments, the org, the
-- clearance, the plan, the read, the read event and the typed rows in one call, with no
-- statement around it.
CREATE FUNCTION memory.recall(org_id text, query text, k int DEFAULT 10, project_id text DEFAULT NULL,
                              filters jsonb DEFAULT '{}', query_embedding anycompatible DEFAULT NULL, source regclass DEFAULT NULL,
                              as_of timestamptz DEFAULT NULL)
RETURNS TABLE (id uuid, content text, classification memory.classification, weight float8, score float8,
               created_at timestamptz, user_id text, session_id text, memory_type memory.memory_type,
               lexical_rank int, vector_rank int, metadata jsonb)
LANGUAGE c VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'recall_typed_wrapper';
COMMENT ON FUNCTION memory.recall(text, text, int, text, jsonb, anycompatible, regclass, timestamptz) IS
  'Top-k live memories of a tenant the caller is cleared for: by coverage of the query''s words then full-text relevance × weight (any word matches; websearch syntax when the query quotes a phrase or excludes a -word), or the newest for a blank query with filters, or with query_embedding (float8[], real[], a pgvector vector, or text: an untyped literal such as ''[1,2,3]'') by reciprocal rank fusion (k = 60) of the full-text and the vector (pgvector HNSW, cosine; exact when the index scan comes back short) lists × weight, with both ranks and the row''s metadata; from memory.observations or a governed table (source); never a superseded memory; as_of: what was live then, each memory as its revision valid then. Emits memory.recall with ids, count, k, filter keys and the hashes of the query and the query embedding, never content, the query or the embedding.';

-- memory.retrieve's arguments, checked before anything is read or written (22023 with a hint);
-- the org (42501), the screen profile and the user's consent (MX003) are checked by
-- memory.retrieve after the query embedding.
CREATE FUNCTION memory_internal._retrieve_args(org text, query text, k int, at timestamptz, user_id text, screen_profile text)
RETURNS void LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM memory_internal._check_read_args('memory.retrieve', org, k);
    IF query IS NULL THEN
        RAISE EXCEPTION 'memory.retrieve needs a query' USING ERRCODE = '22023',
            HINT = 'Pass the words to look for, or '''' with entity_id to list that entity''s active claims.';
    END IF;
    IF at IS NULL OR NOT isfinite(at) THEN
        RAISE EXCEPTION 'memory.retrieve needs a finite time, got %', coalesce(at::text, 'NULL') USING ERRCODE = '22023',
            HINT = 'Omit at to retrieve as of now.';
    END IF;
    IF user_id IS NOT NULL AND memory_internal._blank(user_id) THEN
        RAISE EXCEPTION 'memory.retrieve: user_id is blank' USING ERRCODE = '22023',
            HINT = 'Pass the user the retrieval is for, or NULL for knowledge about no user.';
    END IF;
    IF screen_profile IS NOT NULL AND memory_internal._blank(screen_profile) THEN
        RAISE EXCEPTION 'memory.retrieve: screen_profile is blank' USING ERRCODE = '22023',
            HINT = 'Name a profile of memory.screen_profiles, or pass NULL for no freshness marks.';
    END IF;
END $$;

-- SECURITY DEFINER, as memory.recall: it appends memory.retrieval.hybrid, and reads the claims of
-- any org the caller may act for (not only the acting one) as the extension owner, filtering the
-- org, the live claims, the consent scope and the caller's clearance itself (the plan's
-- conditions). Claims have no weight: the score is the relevance or the fused one; ties go to
-- the more confident claim, then the newer, then the id.
CREATE FUNCTION memory.retrieve(org_id text, query text, k int DEFAULT 10, entity_id uuid DEFAULT NULL,
                                screen_profile text DEFAULT NULL, user_id text DEFAULT NULL,
                                query_embedding anycompatible DEFAULT NULL, at timestamptz DEFAULT now())
RETURNS TABLE (id uuid, entity uuid, claim_text text, field text, kind text, source text, supports text[],
               subject_id text, confidence_score float8, classification memory.classification, score float8,
               t_created timestamptz, decay_at timestamptz, stale_fields text[], lexical_rank int, vector_rank int)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p_org  text := retrieve.org_id;
    p_at   text;
    q      tsquery;
    tier   memory.classification;
    rules  jsonb;      -- the screen profile's freshness_days by field (NULL: no profile asked)
    qv     text;       -- the query embedding as pgvector's text form
    conds  jsonb;
    rows   jsonb;
    n      bigint;
BEGIN
    -- Input first: nothing is read or written for a call that is refused.
    PERFORM memory_internal._retrieve_args(p_org, query, k, retrieve.at, retrieve.user_id, screen_profile);
    -- The query embedding: only once the claims have embeddings, of their dimensions, finite.
    IF query_embedding IS NOT NULL THEN
        IF NOT memory_internal._has_column('memory.claims'::regclass, 'embedding') THEN
            RAISE EXCEPTION 'memory.retrieve: memory.claims has no embeddings to compare query_embedding with' USING ERRCODE = '22023',
                HINT = 'Call memory.enable_embeddings(dimensions) (pgvector) and write embeddings with the claims, or pass query_embedding => NULL.';
        END IF;
        qv := memory_internal._query_vector(query_embedding, memory_internal._embedding_dims('memory.claims'::regclass, 'embedding'));
    END IF;
    -- (Not parsed when blank: '' has nothing to search for, and the parser would say so in a NOTICE.)
    q := CASE WHEN memory_internal._blank(query) THEN ''::tsquery ELSE websearch_to_tsquery('english'::regconfig, query) END;
    IF numnode(q) OPERATOR(pg_catalog.=) 0 AND retrieve.entity_id IS NULL AND qv IS NULL THEN
        RAISE EXCEPTION 'memory.retrieve: the query has no words to search for' USING ERRCODE = '22023',
            HINT = 'Pass words that are not all stop words, an entity_id to list that entity''s active claims, or a query_embedding.';
    END IF;
    -- Definer: the org is checked against the calling role here (42501).
    PERFORM memory_internal._require_org(p_org);
    IF screen_profile IS NOT NULL THEN
        SELECT jsonb_object_agg(r.field, r.freshness_days) INTO rules FROM memory_internal._profile_rules(p_org, screen_profile) r;
        IF rules IS NULL THEN
            RAISE EXCEPTION 'memory.retrieve: unknown screening profile "%"', screen_profile USING ERRCODE = '22023',
                HINT = 'Profiles are rows of memory.screen_profiles (the org''s, else the platform''s).';
        END IF;
    END IF;
    -- Consent-scoped (docs/design.md#agent-memory-api): knowledge about a user only while the user's save_to_profile
    -- consent is in force (MX003 otherwise).
    IF retrieve.user_id IS NOT NULL THEN
        PERFORM memory.require_consent(p_org, retrieve.user_id, ARRAY['save_to_profile']::memory.consent_scope[]);
    END IF;
    -- (The caller's clearance, cached per caller and org as recall's: trust::clearance.)
    tier := memory_internal._clearance(p_org)::memory.classification;
    -- (The time as ISO 8601 in UTC: read back the same whatever DateStyle and TimeZone say.)
    p_at := to_char(retrieve.at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"');
    conds := jsonb_build_array(jsonb_build_object('eq', jsonb_build_array('org_id', p_org)),
                               jsonb_build_object('active', jsonb_build_array('lifecycle_state', 'memory', 'lifecycle_state')),
                               jsonb_build_object('at_or_before', jsonb_build_array('t_created', p_at)),
                               jsonb_build_object('null_or_after', jsonb_build_array('decay_at', p_at)),
                               jsonb_build_object('null_or_eq', jsonb_build_array('subject_id', retrieve.user_id)))
          || CASE WHEN retrieve.entity_id IS NULL THEN '[]'::jsonb
                  ELSE jsonb_build_array(jsonb_build_object('eq', jsonb_build_array('entity_id', retrieve.entity_id, 'pg_catalog', 'uuid'))) END
          || CASE WHEN tier OPERATOR(pg_catalog.=) 'restricted' THEN '[]'::jsonb
                  ELSE jsonb_build_array(jsonb_build_object('tier_in', jsonb_build_array(
                           to_jsonb(ARRAY(SELECT t::text FROM unnest(enum_range(NULL::memory.classification)) t WHERE t OPERATOR(pg_catalog.<=) tier)), p_org))) END;
    rows := memory_internal._run_plan(jsonb_build_object(
                'relation', '["memory", "claims"]'::jsonb, 'tier_kind', 'claim', 'ties', '["confidence_score", "t_created"]'::jsonb,
                'columns', jsonb_build_object('id', 'id', 'content', 'claim_text', 'created_at', 't_created',
                                              'embedding', CASE WHEN qv IS NOT NULL THEN 'embedding' END),
                'conditions', conds, 'query', CASE WHEN numnode(q) OPERATOR(pg_catalog.>) 0 THEN query END,
                'vector', qv, 'vector_schema', CASE WHEN qv IS NOT NULL THEN memory_internal._vector_schema() END,
                'k', k, 'depth', least(greatest(2 * k, 40), 2000)), false);
    RETURN QUERY
    -- (The tier is the engine's: memory_internal._claim_tier of the same claim and org, computed
    -- once. Without a screen profile no claim is stale: NULL, as _stale_fields gives, uncalled.)
    SELECT c.id, c.entity_id, c.claim_text, c.field, c.kind, c.source, c.supports, c.subject_id, c.confidence_score,
           (j.x OPERATOR(pg_catalog.->>) 2)::memory.classification, (j.x OPERATOR(pg_catalog.->>) 4)::float8,
           c.t_created, c.decay_at,
           CASE WHEN rules IS NOT NULL THEN memory_internal._stale_fields(c.field, c.t_created, rules, retrieve.at) END,
           (j.x OPERATOR(pg_catalog.->>) 9)::int, (j.x OPERATOR(pg_catalog.->>) 10)::int
      FROM jsonb_array_elements(rows) WITH ORDINALITY j(x, o)
      JOIN memory.claims c ON c.org_id OPERATOR(pg_catalog.=) p_org AND c.id OPERATOR(pg_catalog.=) (j.x OPERATOR(pg_catalog.->>) 0)::uuid
     ORDER BY j.o;
    GET DIAGNOSTICS n = ROW_COUNT;
    PERFORM memory_internal._read_event('memory.retrieval.hybrid', p_org, NULL, jsonb_build_object('count', n));
END $$;
COMMENT ON FUNCTION memory.retrieve(text, text, int, uuid, text, text, anycompatible, timestamptz) IS
  'Knowledge retrieval (docs/design.md#agent-memory-api): the top-k claims of an org that are active at `at`, created by then, not past decay_at, within the caller''s clearance, about no user or about user_id (whose save_to_profile consent must be in force: MX003), ranked by coverage of the query''s words then ts_rank_cd over claim_text (any word matches; websearch syntax when the query quotes a phrase or excludes a -word), or with query_embedding by reciprocal rank fusion (k = 60) of the full-text and the vector (pgvector HNSW, cosine; exact when the index scan comes back short) lists, with both ranks; confidence then newest breaking ties; a blank query with entity_id lists that entity''s claims, most confident first. stale_fields: the claim''s field when the screen profile says it is stale. One memory.retrieval.hybrid event with the count only.';

-- Items under a namespace prefix (SPEC §16), as memory.recall reads memories: the org's live
-- items the caller is cleared for, filtered by `filter` over the value (the §16 language, in the
-- engine), by hybrid relevance × weight when a query or an embedding is given (the item's index
-- text, search_tsv), else the most recently updated first; `k` from `offset` of that order (both
-- hybrid lists as long for every page of the first 40 results). refresh_ttl
-- re-stamps the returned items' TTL, of those live now (an item returned as of a time that has
-- expired since is not brought back). One memory.recall event (call memory.search: ids, count,
-- never values or the query). SECURITY DEFINER, as memory.recall. The body is one call of the
-- engine's shell, memory_internal._search (src/recall/search.rs, memory_core::retrieval::search):
-- the arguments, the org, the clearance, the plan, the read, the TTL refresh, the read-back and
-- the read event; here the rows take their types.
CREATE FUNCTION memory.search(org_id text, namespace_prefix text[], query text DEFAULT NULL, filter jsonb DEFAULT NULL,
                              k int DEFAULT 10, "offset" int DEFAULT 0, query_embedding anycompatible DEFAULT NULL,
                              refresh_ttl boolean DEFAULT false, as_of timestamptz DEFAULT NULL)
RETURNS TABLE (id uuid, namespace text[], key text, value jsonb, classification memory.classification,
               created_at timestamptz, updated_at timestamptz, expires_at timestamptz, score float8)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN QUERY
    SELECT s.id, s.namespace, s.key, s.value::jsonb, s.classification::memory.classification, s.created_at, s.updated_at,
           s.expires_at, s.score
      FROM memory_internal._search(search.org_id, search.namespace_prefix, search.query, search.filter::text, search.k,
                                   search."offset", search.query_embedding, search.refresh_ttl, search.as_of) s;
END $$;
COMMENT ON FUNCTION memory.search(text, text[], text, jsonb, int, int, anycompatible, boolean, timestamptz) IS
  'Live items under a namespace prefix the caller is cleared for (SPEC §16; as_of: those live then, each as its revision valid then): filter over the value (equality, $eq/$ne/$gt/$gte/$lt/$lte, $in, $nin, $exists, $contains, dotted paths, $and/$or/$not; an unknown operator is 22023), ranked by hybrid relevance × weight for a query or an embedding (any word of the query, coverage first; the item''s index text), else the most recently updated first; k from offset of that order (with an embedding, the full-text and the vector list are each max(40, k + offset) long, so the pages of the first 40 results are slices of one ranking); refresh_ttl re-stamps the TTL of those live now (as_of: one expired, deleted or superseded since stays so). One memory.recall event (call memory.search) with ids and count, never values or the query.';
