-- Feedback weights (docs/design.md#feedback-weights): EMA per session outcome, weight history, misleading diagnostics, recall.

CREATE TABLE memory.org_settings (
    org_id        text PRIMARY KEY,
    alpha_success float8 CHECK (alpha_success > 0 AND alpha_success <= 1),
    alpha_failure float8 CHECK (alpha_failure > 0 AND alpha_failure <= 1),
    bfsi_mode     boolean NOT NULL DEFAULT false,
    updated_at    timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE memory.org_settings IS 'Per-org overrides: EMA alphas (NULL = the memory.alpha_* settings), BFSI mode.';

CREATE TABLE memory.observation_weight_history (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    observation_id  uuid NOT NULL,
    session_id      text NOT NULL,
    outcome         memory.outcome NOT NULL,
    previous_weight float8 NOT NULL,
    new_weight      float8 NOT NULL,
    alpha           float8 NOT NULL,
    org_id          text NOT NULL,
    project_id      text,
    recorded_at     timestamptz NOT NULL DEFAULT now(),
    -- Each (session, observation) pair of an org is applied once.
    UNIQUE (session_id, org_id, observation_id)
);
CREATE INDEX observation_weight_history_obs ON memory.observation_weight_history (observation_id);
COMMENT ON TABLE memory.observation_weight_history IS 'One row per applied weight update; alpha is the one used, doubled for misleading observations.';

-- Weights are finite and non-negative (NaN and infinities written by hand are refused: 23514).
ALTER TABLE memory.observations ADD CONSTRAINT observations_weight_valid CHECK (weight >= 0 AND weight < 'Infinity'::float8);
-- Full-text index for recall, on the words kept with the row.
CREATE INDEX observations_fts ON memory.observations USING gin (content_tsv);

CREATE FUNCTION memory.ema(previous float8, outcome memory.outcome, alpha_success float8 DEFAULT 0.1, alpha_failure float8 DEFAULT 0.15)
RETURNS float8 LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
AS $$ SELECT memory_internal._ema(previous, outcome::pg_catalog.text, alpha_success, alpha_failure) $$;
COMMENT ON FUNCTION memory.ema(float8, memory.outcome, float8, float8) IS
  'previous × (1 − α) + signal × α; signal 1 for accepted (α = alpha_success), 0 otherwise (α = alpha_failure). α outside (0, 1] or a non-finite weight: 22023.';

CREATE FUNCTION memory.record_outcome(session_id text, outcome memory.outcome, observation_ids uuid[])
RETURNS TABLE (observation_id uuid, previous_weight float8, new_weight float8, alpha float8, applied boolean, reason text)
LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$ SELECT * FROM memory_internal._record_outcome(session_id, outcome::pg_catalog.text, observation_ids) $$;
COMMENT ON FUNCTION memory.record_outcome(text, memory.outcome, uuid[]) IS
  'Apply one session outcome to observations by EMA, once per (session, observation); one memory.feedback event per tenant. reason: applied, already_recorded, duplicate_in_call, not_found, soft_deleted, non_finite_weight.';

CREATE FUNCTION memory.misleading_observations(org_id text DEFAULT NULL)
RETURNS TABLE (observation_id uuid, failed_sessions int, successful_sessions int, weight float8)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- PL/pgSQL, grouped by org too: on Citus (docs/design.md#scale-out) the query then runs whole on each shard
    -- (Citus plans no parameter of a SQL-language function).
    RETURN QUERY
    SELECT h.observation_id,
           count(DISTINCT h.session_id) FILTER (WHERE h.outcome OPERATOR(pg_catalog.<>) 'accepted')::int,
           count(DISTINCT h.session_id) FILTER (WHERE h.outcome OPERATOR(pg_catalog.=) 'accepted')::int,
           o.weight
      FROM memory.observation_weight_history h
      JOIN memory.observations o ON o.id OPERATOR(pg_catalog.=) h.observation_id AND o.org_id OPERATOR(pg_catalog.=) h.org_id
     WHERE (misleading_observations.org_id IS NULL OR o.org_id OPERATOR(pg_catalog.=) misleading_observations.org_id)
       AND o.soft_deleted_at IS NULL
     GROUP BY o.org_id, h.observation_id, o.weight
    HAVING memory_internal._is_misleading(count(DISTINCT h.session_id) FILTER (WHERE h.outcome OPERATOR(pg_catalog.<>) 'accepted'),
                                 count(DISTINCT h.session_id) FILTER (WHERE h.outcome OPERATOR(pg_catalog.=) 'accepted'))
     ORDER BY 2 DESC, 1;
END $$;
COMMENT ON FUNCTION memory.misleading_observations(text) IS
  'Live observations with at least 3 distinct failed sessions and no successful one.';

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

-- Top-k memories of a tenant (docs/design.md#agent-memory-api). SECURITY DEFINER: it appends memory.recall, and reads
-- memory.observations as the extension owner for any org the caller may act for (not only the
-- acting one), filtering the org, the live rows and the caller's clearance itself. A governed
-- application table (source) is read as the caller (memory_internal._read_as_caller: its
-- privileges and policies), in a security-restricted operation, with the same filters.
CREATE FUNCTION memory.recall(org_id text, query text, k int DEFAULT 10, project_id text DEFAULT NULL,
                              filters jsonb DEFAULT '{}', query_embedding real[] DEFAULT NULL, source regclass DEFAULT NULL)
RETURNS TABLE (id uuid, content text, classification memory.classification, weight float8, score float8,
               created_at timestamptz, user_id text, session_id text, memory_type memory.memory_type,
               lexical_rank int, vector_rank int)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    f       jsonb;
    q       tsquery;
    blank   boolean;
    tier    memory.classification;
    allowed text[];
    opts    jsonb;
    tbl     regclass := nullif(source, 'memory.observations'::regclass);
    c       jsonb := '{}';     -- the source's columns by role: content, org, id, user, ...
    col     text;
    typ     regtype;
    conds   text[] := '{}';
    args    text[] := '{}';
    sql     text;
    tier_e  text;
    rows    jsonb;
    r       record;
    ids     uuid[] := '{}';
    fts     text;
    words   text;      -- a row's words (tsvector) as an expression on t
    vs      text;      -- pgvector's schema
    cand_sql text;
    dims    int;       -- memory.observations' embedding dimensions (memory.ann_settings)
    one_pass boolean := false;
    qv      text;      -- the query embedding as pgvector's text form
    depth   int;
    hnsw    text[];
    weight_e text;
    cols    text[];
    i       int := 0;
    hint_src constant text := 'source is a table governed by memory.govern with a content mapping, an org column and a uuid id column, which the caller may SELECT; omit it to recall from memory.observations.';
BEGIN
    -- Input first: nothing is read or written for a call that is refused.
    PERFORM memory_internal._check_read_args('memory.recall', recall.org_id, k);
    f := memory_internal._recall_filters(filters);
    -- Definer: the org is checked against the calling role here.
    PERFORM memory_internal._require_org(recall.org_id);
    -- Clearance: the caller's in this org, lowered by a max_tier filter.
    tier := memory_internal._clearance(recall.org_id)::memory.classification;
    IF f ? 'max_tier' THEN
        tier := least(tier, (f->>'max_tier')::memory.classification);
    END IF;

    -- The source's mapping: what memory.govern recorded, and the conventional columns.
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
        IF recall.project_id IS NOT NULL AND c->>'project' IS NULL THEN
            RAISE EXCEPTION 'memory.recall: project_id needs a project column, which % does not have', tbl USING ERRCODE = '22023', HINT = hint_src;
        END IF;
    ELSE
        c := '{"content": "content", "org": "org_id", "id": "id", "user": "user_id", "project": "project_id", "weight": "weight",
               "tier": "classification", "source_type": "source_type", "created_at": "created_at", "expires_at": "expires_at",
               "soft_deleted_at": "soft_deleted_at", "memory_type": "memory_type", "session_id": "session_id", "task_id": "task_id",
               "metadata": "metadata"}';
        -- (The embedding column is there with the row of memory.ann_settings, whose trigger
        -- makes it; the column's own test when there is no row.)
        IF query_embedding IS NOT NULL THEN
            dims := (SELECT e.dimensions FROM memory.ann_settings e);
            IF dims IS NOT NULL OR memory_internal._has_column('memory.observations'::regclass, 'embedding') THEN
                c := c || '{"embedding": "embedding"}';
            END IF;
        END IF;
    END IF;
    -- The query embedding: only for a source with embeddings, of their dimensions, finite.
    IF query_embedding IS NOT NULL THEN
        IF c->>'embedding' IS NULL THEN
            RAISE EXCEPTION 'memory.recall: % has no embeddings to compare query_embedding with', coalesce(tbl, 'memory.observations'::regclass)
                USING ERRCODE = '22023',
                HINT = CASE WHEN tbl IS NULL THEN 'Call memory.enable_embeddings(dimensions) (pgvector) and write embeddings with the memories, or pass query_embedding => NULL.'
                            ELSE format('Map the table''s vector column with memory.govern(%L, ''{"embedding": "<column>", ...}'') (pgvector), or pass query_embedding => NULL.', tbl::text) END;
        END IF;
        -- (memory.observations: the dimensions memory.enable_embeddings recorded, which its
        -- trigger keeps equal to the column's.)
        qv := memory_internal._query_vector(query_embedding,
                  CASE WHEN tbl IS NULL THEN coalesce(dims, memory_internal._embedding_dims('memory.observations'::regclass, 'embedding'))
                       ELSE memory_internal._embedding_dims(tbl, c->>'embedding') END);
    END IF;

    q := websearch_to_tsquery('english', coalesce(query, ''));
    blank := numnode(q) = 0;
    -- A blank query (or one of stop words only) without filters matches nothing: no rows, no event.
    -- With filters it lists the newest matching memories.
    IF blank AND f = '{}'::jsonb AND qv IS NULL THEN
        RETURN;
    END IF;

    -- The conditions, each on a parameter: $1 org, $2 the query, $3 k, then the filters'.
    args := ARRAY[recall.org_id, coalesce(query, ''), k::text];
    conds := conds || format('t.%I::pg_catalog.text OPERATOR(pg_catalog.=) $1', c->>'org');
    -- The words of a row: memory.observations keeps them (content_tsv), a source table's are
    -- parsed from its content mapping.
    words := CASE WHEN tbl IS NULL THEN 't.content_tsv'
                  ELSE format('pg_catalog.to_tsvector(''english''::pg_catalog.regconfig, t.%I::pg_catalog.text)', c->>'content') END;
    fts := format('%s OPERATOR(pg_catalog.@@) pg_catalog.websearch_to_tsquery(''english''::pg_catalog.regconfig, $2)', words);
    IF NOT blank AND qv IS NULL THEN
        conds := conds || fts;
    END IF;
    IF c->>'soft_deleted_at' IS NOT NULL THEN
        conds := conds || format('t.%I IS NULL', c->>'soft_deleted_at');
    END IF;
    IF c->>'expires_at' IS NOT NULL THEN
        conds := conds || format('(t.%1$I IS NULL OR t.%1$I OPERATOR(pg_catalog.>) pg_catalog.now())', c->>'expires_at');
    END IF;
    -- The tier as text: a jsonb target holds it under "classification". A row without a known
    -- tier is for roles cleared to restricted only.
    tier_e := CASE WHEN c->>'tier' IS NULL THEN 'NULL::pg_catalog.text'
                   WHEN tbl IS NOT NULL AND memory_internal._column_type(tbl, c->>'tier', 'tier') OPERATOR(pg_catalog.=) 'jsonb'::regtype
                        THEN format('(t.%I OPERATOR(pg_catalog.->>) ''classification'')', c->>'tier')
                   ELSE format('t.%I::pg_catalog.text', c->>'tier') END;
    IF tier IS DISTINCT FROM 'restricted' THEN
        allowed := ARRAY(SELECT t::text FROM unnest(enum_range(NULL::memory.classification)) t WHERE t OPERATOR(pg_catalog.<=) tier);
        args := args || allowed::text;
        conds := conds || format('%s OPERATOR(pg_catalog.=) ANY ($%s::pg_catalog.text[])', tier_e, cardinality(args));
    END IF;
    IF recall.project_id IS NOT NULL THEN
        args := args || recall.project_id;
        conds := conds || format('t.%I::pg_catalog.text OPERATOR(pg_catalog.=) $%s', c->>'project', cardinality(args));
    END IF;
    FOR col IN SELECT kk FROM jsonb_object_keys(f) kk WHERE kk IN ('user_id', 'session_id', 'task_id', 'memory_type', 'source_type') ORDER BY 1 LOOP
        args := args || (f->>col);
        conds := conds || format('t.%I::pg_catalog.text OPERATOR(pg_catalog.=) $%s',
                                 c->>(CASE col WHEN 'user_id' THEN 'user' ELSE col END), cardinality(args));
    END LOOP;
    IF f ? 'created_after' THEN
        args := args || (f->>'created_after');
        conds := conds || format('t.%I OPERATOR(pg_catalog.>=) $%s::pg_catalog.timestamptz', c->>'created_at', cardinality(args));
    END IF;
    IF f ? 'created_before' THEN
        args := args || (f->>'created_before');
        conds := conds || format('t.%I OPERATOR(pg_catalog.<) $%s::pg_catalog.timestamptz', c->>'created_at', cardinality(args));
    END IF;
    IF f ? 'metadata' THEN
        args := args || (f->>'metadata');
        conds := conds || format('t.%I OPERATOR(pg_catalog.@>) $%s::pg_catalog.jsonb', c->>'metadata', cardinality(args));
    END IF;

    weight_e := CASE WHEN c->>'weight' IS NULL THEN '1.0::pg_catalog.float8' ELSE format('t.%I', c->>'weight') END;
    -- created_at, user_id, session_id, memory_type of a result row.
    cols := ARRAY[CASE WHEN c->>'created_at' IS NULL THEN 'NULL::pg_catalog.timestamptz' ELSE format('t.%I', c->>'created_at') END,
                  CASE WHEN c->>'user' IS NULL THEN 'NULL::pg_catalog.text' ELSE format('t.%I::pg_catalog.text', c->>'user') END,
                  CASE WHEN c->>'session_id' IS NULL THEN 'NULL::pg_catalog.text' ELSE format('t.%I::pg_catalog.text', c->>'session_id') END,
                  CASE WHEN c->>'memory_type' IS NULL THEN 'NULL::pg_catalog.text' ELSE format('t.%I::pg_catalog.text', c->>'memory_type') END];
    IF qv IS NOT NULL THEN
        -- Hybrid: the full-text list (by ts_rank_cd, `depth` long) and the vector list (cosine
        -- distance, the HNSW index; k long: the k nearest under the conditions, where pgvector's
        -- iterative scan stops as it does for a hand-written query) under the same conditions,
        -- fused by reciprocal rank (k = 60), × weight. Ties: the better of the two ranks, then the id.
        depth := least(greatest(2 * k, 40), 2000);
        args := args || qv;
        args := args || depth::text;
        vs := memory_internal._vector_schema();
        -- memory.observations filtered to a user's, a session's or a task's memories: one pass
        -- over those rows gives both lists exactly (each row's distance and, when its kept words
        -- match, their rank) in about the time the vector list alone takes; through plans kept
        -- per backend (memory_internal._kept_recall, which cuts and fuses the lists: core's
        -- fusion). More than 10,000 rows (overflow, remembered for the scope in this backend):
        -- the two index lists below.
        one_pass := tbl IS NULL AND (f ? 'user_id' OR f ? 'session_id' OR f ? 'task_id');
        IF one_pass THEN
            -- The candidates (id, weight, distance, relevance when the words match) and the
            -- result's columns of the fused ids, under the same conditions: each parameter (with
            -- its cast) read once in a sub-select, whatever plan is kept.
            -- (`= ANY ((SELECT ...))` would read as ANY over a sub-query: the clearance's array
            -- is passed through coalesce, an expression, and still computed once.)
            sql := regexp_replace(
                       regexp_replace(array_to_string(conds, ' AND '), '[$]([0-9]+)((?:::pg_catalog[.][a-z0-9_]+(?:\[\])?)?)',
                                      '(SELECT ($1::pg_catalog.text[])[\1]\2)', 'g'),
                       'ANY \(\((SELECT [^)]*\)\[[0-9]+\]::pg_catalog[.]text\[\])\)\)', 'ANY (coalesce((\1)))', 'g');
            cand_sql := format(
                'SELECT t.id, t.weight, t.embedding OPERATOR(%1$I.<=>) (SELECT ($1::pg_catalog.text[])[%2$s]::%1$I.vector), %3$s
                   FROM memory.observations t WHERE %4$s LIMIT 10001',
                vs, cardinality(args) - 1,
                CASE WHEN blank THEN 'NULL::pg_catalog.float4'
                     ELSE 'CASE WHEN t.content_tsv OPERATOR(pg_catalog.@@) (SELECT pg_catalog.websearch_to_tsquery(''english''::pg_catalog.regconfig, ($1::pg_catalog.text[])[2]))
                                THEN pg_catalog.ts_rank_cd(t.content_tsv, (SELECT pg_catalog.websearch_to_tsquery(''english''::pg_catalog.regconfig, ($1::pg_catalog.text[])[2]))) END' END,
                sql);
            sql := format(
                'SELECT t.id, t.content, t.classification::pg_catalog.text, t.weight, t.created_at, t.user_id, t.session_id, t.memory_type::pg_catalog.text
                   FROM memory.observations t WHERE t.id OPERATOR(pg_catalog.=) ANY ($2) AND %s', sql);
            -- The rows in their order; the first says whether there were more than one pass takes.
            FOR r IN SELECT * FROM memory_internal._kept_recall(cand_sql, sql, args, k, depth,
                                       to_jsonb(conds)::text || to_jsonb(args[1:1] || args[4:cardinality(args) - 2])::text) LOOP
                IF r.overflow THEN
                    one_pass := false;
                    EXIT;
                END IF;
                id := r.id;
                content := r.content;
                classification := r.classification::memory.classification;
                weight := r.weight;
                score := r.score;
                created_at := r.created_at;
                user_id := r.user_id;
                session_id := r.session_id;
                memory_type := r.memory_type::memory.memory_type;
                lexical_rank := r.lexical_rank;
                vector_rank := r.vector_rank;
                ids := ids || id;
                RETURN NEXT;
            END LOOP;
            sql := NULL;
        END IF;
        IF NOT one_pass THEN
        sql := memory_internal._hybrid_ctes(
                   coalesce(tbl, 'memory.observations'::regclass)::text, c->>'id', c->>'embedding', array_to_string(conds, ' AND '),
                   CASE WHEN blank THEN NULL
                        ELSE format('pg_catalog.ts_rank_cd(%s, pg_catalog.websearch_to_tsquery(''english''::pg_catalog.regconfig, $2))', words) END,
                   fts, format('$%s::%I.vector', cardinality(args) - 1, vs), format('$%s::pg_catalog.int4', cardinality(args)),
                   60, NULL, '$3::pg_catalog.int4')
            || format(
        'SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_array(x.id, x.content, x.tier, x.weight, x.score, x.created_at, x.user_id, x.session_id, x.memory_type, x.lexical_rank, x.vector_rank)
                                              ORDER BY x.score DESC, x.best, x.id), ''[]'')
           FROM (SELECT t.%1$I AS id, t.%2$I::pg_catalog.text AS content, %3$s AS tier, %4$s AS weight, fused.rrf OPERATOR(pg_catalog.*) %4$s AS score,
                        %5$s AS created_at, %6$s AS user_id, %7$s AS session_id, %8$s AS memory_type, fused.lexical_rank, fused.vector_rank,
                        LEAST(coalesce(fused.lexical_rank, 2147483647), coalesce(fused.vector_rank, 2147483647)) AS best
                   FROM fused JOIN %9$s t ON t.%1$I OPERATOR(pg_catalog.=) fused.id
                  WHERE %10$s
                  ORDER BY score DESC, best, id
                  LIMIT $3::pg_catalog.int4) x',
        c->>'id', c->>'content', tier_e, weight_e,
        cols[1], cols[2], cols[3], cols[4],
        coalesce(tbl, 'memory.observations'::regclass),
        array_to_string(conds, ' AND '));
        hnsw := memory_internal._hnsw_begin(depth);
        END IF;
    ELSE
    -- One row per memory as a JSON array, best first: relevance × weight for a query, the newest
    -- for a blank one.
    sql := format(
        'SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_array(x.id, x.content, x.tier, x.weight, x.score, x.created_at, x.user_id, x.session_id, x.memory_type) ORDER BY %1$s), ''[]'')
           FROM (SELECT t.%2$I AS id, t.%3$I::pg_catalog.text AS content, %4$s AS tier, %5$s AS weight, %6$s AS score,
                        %7$s AS created_at, %8$s AS user_id, %9$s AS session_id, %10$s AS memory_type
                   FROM %11$s t
                  WHERE %12$s
                  ORDER BY %1$s
                  LIMIT $3::pg_catalog.int4) x',
        CASE WHEN blank THEN 'created_at DESC NULLS LAST, id' ELSE 'score DESC, id' END,
        c->>'id', c->>'content', tier_e,
        weight_e,
        CASE WHEN blank THEN 'NULL::pg_catalog.float8'
             ELSE format('(pg_catalog.ts_rank_cd(%s, pg_catalog.websearch_to_tsquery(''english''::pg_catalog.regconfig, $2))::pg_catalog.float8 OPERATOR(pg_catalog.*) %s)',
                         words, weight_e) END,
        cols[1], cols[2], cols[3], cols[4],
        coalesce(tbl, 'memory.observations'::regclass),
        array_to_string(conds, ' AND '));
    END IF;
    IF one_pass THEN
        NULL;   -- read above
    ELSIF tbl IS NULL THEN
        -- memory.observations, as the extension owner (row-level security does not apply: the
        -- org, the live rows and the clearance are the conditions above).
        -- (One parameter, the array: EXECUTE takes a fixed number. A one-shot plan sees its
        -- values, so the org and full-text indexes serve as before.)
        EXECUTE regexp_replace(sql, '[$]([0-9]+)', '($1::pg_catalog.text[])[\1]', 'g') INTO rows USING args;
    ELSE
        rows := memory_internal._read_as_caller(sql, args);
    END IF;
    IF hnsw IS NOT NULL THEN
        PERFORM memory_internal._hnsw_end(hnsw);
    END IF;
    FOR r IN SELECT x FROM jsonb_array_elements(coalesce(rows, '[]')) x LOOP
        id := (r.x->>0)::uuid;
        content := r.x->>1;
        classification := CASE WHEN (r.x->>2) OPERATOR(pg_catalog.=) ANY (enum_range(NULL::memory.classification)::text[])
                               THEN (r.x->>2)::memory.classification END;
        weight := (r.x->>3)::float8;
        score := (r.x->>4)::float8;
        created_at := (r.x->>5)::timestamptz;
        user_id := r.x->>6;
        session_id := r.x->>7;
        memory_type := CASE WHEN (r.x->>8) OPERATOR(pg_catalog.=) ANY (enum_range(NULL::memory.memory_type)::text[])
                            THEN (r.x->>8)::memory.memory_type END;
        i := i + 1;
        -- Full text alone: the row's place in the relevance × weight order; hybrid: its ranks in
        -- the two candidate lists (NULL when not in one).
        lexical_rank := CASE WHEN qv IS NOT NULL THEN (r.x->>9)::int WHEN NOT blank THEN i END;
        vector_rank := CASE WHEN qv IS NOT NULL THEN (r.x->>10)::int END;
        ids := ids || id;
        RETURN NEXT;
    END LOOP;
    -- A read event: it survives the rollback of this transaction (memory_internal._audit_read).
    PERFORM memory_internal._audit_read('memory.recall',
        (jsonb_build_object('ids', to_jsonb(ids), 'count', cardinality(ids), 'k', k,
                            'filter_keys', to_jsonb(ARRAY(SELECT kk FROM jsonb_object_keys(f) kk ORDER BY 1)),
                            'query_sha256', encode(sha256(convert_to(coalesce(query, ''), 'UTF8')), 'hex'))
         || CASE WHEN qv IS NULL THEN '{}'::jsonb
                 ELSE jsonb_build_object('query_embedding_sha256', encode(sha256(convert_to(qv, 'UTF8')), 'hex')) END
         || CASE WHEN tbl IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('source', tbl::text) END)::text,
        recall.org_id, recall.project_id);
END $$;
COMMENT ON FUNCTION memory.recall(text, text, int, text, jsonb, real[], regclass) IS
  'Top-k live memories of a tenant the caller is cleared for: by full-text relevance × weight, or the newest for a blank query with filters, or with query_embedding by reciprocal rank fusion (k = 60) of the full-text and the vector (pgvector HNSW, cosine) lists × weight, with both ranks; from memory.observations or a governed table (source). Emits memory.recall with ids, count, k, filter keys and the hashes of the query and the query embedding, never content, the query or the embedding.';

SELECT pg_catalog.pg_extension_config_dump('memory.org_settings', '');
SELECT pg_catalog.pg_extension_config_dump('memory.observation_weight_history', '');
