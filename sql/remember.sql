-- Duplicates at write and context packing (SPEC §17, docs/reference.md#memoryremember):
-- memory.remember stores a memory unless the org already has it (its dedup mode), and
-- memory.context packs what memory.recall finds into a block under a token budget. The rules
-- (normalised text, near-duplicates, MMR, the token estimate) are memory_core::dedup and
-- memory_core::packing (src/remember.rs).
--
--   memory.org_settings.dedup            off | exact (default) | near
--   memory.org_settings.dedup_threshold  (0, 1], default 0.95: cosine or trigram similarity
--   memory.observations.content_sha256   SHA-256 (hex) of the normalised content, written by
--                                        memory.remember (NULL for a plain INSERT)
--   memory.observations.last_seen_at     when memory.remember last met this memory again
--   memory.observations.seen_count       how many times it was remembered (1 when stored)

ALTER TABLE memory.org_settings ADD COLUMN dedup text NOT NULL DEFAULT 'exact';
ALTER TABLE memory.org_settings ADD COLUMN dedup_threshold float8 NOT NULL DEFAULT 0.95;
ALTER TABLE memory.observations ADD COLUMN content_sha256 text;
ALTER TABLE memory.observations ADD COLUMN last_seen_at timestamptz;
ALTER TABLE memory.observations ADD COLUMN seen_count int NOT NULL DEFAULT 1;
-- memory.remember's lookup: the org's remembered memories by the hash of their text.
CREATE INDEX observations_dedup ON memory.observations (org_id, content_sha256) WHERE content_sha256 IS NOT NULL;

-- memory.live_observations is the table's every column: made again with the new columns (a
-- superseded memory is not live: sql/revisions.sql).
CREATE OR REPLACE VIEW memory.live_observations AS
SELECT * FROM memory.observations o
 WHERE o.soft_deleted_at IS NULL AND (o.expires_at IS NULL OR o.expires_at > now()) AND o.superseded_at IS NULL;

-- An org's dedup setting, however written (an admin's INSERT or UPDATE): 22023 with a hint for
-- an unknown mode or a threshold outside (0, 1], before any constraint is checked.
CREATE FUNCTION memory_internal._org_settings_dedup_check()
RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM memory_internal._dedup_setting_check(NEW.dedup, NEW.dedup_threshold);
    RETURN NEW;
END $$;
CREATE TRIGGER org_settings_dedup_check BEFORE INSERT OR UPDATE OF dedup, dedup_threshold ON memory.org_settings
    FOR EACH ROW EXECUTE FUNCTION memory_internal._org_settings_dedup_check();

-- An embedding given to memory.remember or memory.supersede (fn names it in the message): 22023
-- with a hint unless embeddings are enabled and it is a one-dimensional array of the column's
-- dimensions with finite, not all zero, components.
CREATE FUNCTION memory_internal._embedding_check(fn text, embedding real[])
RETURNS void LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    dims int;
BEGIN
    IF NOT memory_internal._has_column('memory.observations', 'embedding') THEN
        RAISE EXCEPTION '%: embeddings are not enabled, so a memory has no embedding to store', fn USING ERRCODE = '22023',
            HINT = 'A platform admin calls memory.enable_embeddings(dimensions) (pgvector), or pass embedding => NULL.';
    END IF;
    IF pg_catalog.array_ndims(embedding) IS DISTINCT FROM 1 THEN
        RAISE EXCEPTION '%: embedding must be a one-dimensional array of numbers', fn USING ERRCODE = '22023',
            HINT = 'Pass the memory''s embedding as real[], or NULL.';
    END IF;
    SELECT s.dimensions INTO dims FROM memory.ann_settings s;
    PERFORM memory_internal._query_vector(embedding, dims);
END $$;

-- memory.remember's arguments, checked before anything is read or written (22023 with a hint).
CREATE FUNCTION memory_internal._remember_check(org text, content text, user_id text, memory_type memory.memory_type,
                                                metadata jsonb, embedding real[], namespace text[])
RETURNS void LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    err  text;
BEGIN
    IF memory_internal._blank(org) THEN
        RAISE EXCEPTION 'memory.remember needs an org_id' USING ERRCODE = '22023', HINT = 'Pass the org of the memory (one of memory.my_orgs()).';
    END IF;
    IF memory_internal._blank(content) THEN
        RAISE EXCEPTION 'memory.remember: content is %', CASE WHEN content IS NULL THEN 'NULL' ELSE 'blank' END
            USING ERRCODE = '22023', HINT = 'Pass the text to remember.';
    END IF;
    IF user_id IS NOT NULL AND memory_internal._blank(user_id) THEN
        RAISE EXCEPTION 'memory.remember: user_id is blank' USING ERRCODE = '22023', HINT = 'Pass the end user''s id, or NULL.';
    END IF;
    IF memory_type IS NULL THEN
        RAISE EXCEPTION 'memory.remember: memory_type is NULL' USING ERRCODE = '22023',
            HINT = 'One of ' || pg_catalog.array_to_string(pg_catalog.enum_range(NULL::memory.memory_type)::text[], ', ') || '.';
    END IF;
    IF metadata IS NULL OR pg_catalog.jsonb_typeof(metadata) OPERATOR(pg_catalog.<>) 'object' THEN
        RAISE EXCEPTION 'memory.remember: metadata must be a JSON object, not %', coalesce(pg_catalog.jsonb_typeof(metadata), 'NULL')
            USING ERRCODE = '22023', HINT = 'Pass ''{}'' for none.';
    END IF;
    IF namespace IS NOT NULL THEN
        err := memory_internal._item_namespace_error(namespace);
        IF err IS NOT NULL THEN
            RAISE EXCEPTION 'memory.remember: %', err USING ERRCODE = '22023',
                HINT = 'A namespace is 1 to 20 labels, each non-blank, without a period, at most 256 bytes; or NULL.';
        END IF;
    END IF;
    IF embedding IS NOT NULL THEN
        PERFORM memory_internal._embedding_check('memory.remember', embedding);
    END IF;
END $$;

-- memory.remember's near neighbour: the most similar live memory of the org, user and namespace
-- within the caller's clearance, by embedding (pgvector, cosine) or, without one, by trigrams
-- (pg_trgm, when installed; otherwise none: exact alone). No row when there is none.
-- The pass reads the user's rows by an index scan of observations_user, whose entries of one
-- user and org are in heap order (btree ties by heap TID), not by a bitmap heap scan: with the
-- pages in shared buffers (the size a million memories' server has, issue 49) the bitmap's
-- building, sorting and one prefetch look-up a page were 13% of a merging call's CPU (perf;
-- 2.3 against 2.0 ms a call in one alternating run). Hence enable_bitmapscan off for this
-- function's one statement.
CREATE FUNCTION memory_internal._remember_near(org text, content text, user_id text, namespace text[], embedding real[],
                                               tier memory.classification)
RETURNS TABLE (id uuid, similarity float8, how text) LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp SET enable_bitmapscan = off
AS $$
#variable_conflict use_variable
DECLARE
    ts text;
    rid uuid;  sim float8;  direct boolean;
    -- Equality where there is a value (IS NOT DISTINCT FROM reads no index: at a million
    -- memories it read every row of the org, not the user's).
    who text := CASE WHEN user_id IS NULL THEN 'o.user_id IS NULL' ELSE 'o.user_id OPERATOR(pg_catalog.=) $3' END;
    ns  text := CASE WHEN namespace IS NULL THEN 'o.namespace IS NULL' ELSE 'o.namespace OPERATOR(pg_catalog.=) $4' END;
BEGIN
    IF embedding IS NOT NULL AND user_id IS NOT NULL THEN
        -- A user's memories without the executor (Rust: an index scan of observations_user, each
        -- row's conditions as below, pgvector's cosine_distance), unless it says it cannot.
        SELECT d.id, d.similarity, d.direct INTO rid, sim, direct
          FROM memory_internal._remember_nearest(org, user_id, namespace, embedding, tier::text) d;
        IF direct THEN
            IF rid IS NOT NULL THEN
                RETURN QUERY SELECT rid, sim, 'embedding'::text;
            END IF;
            RETURN;
        END IF;
    END IF;
    IF embedding IS NOT NULL THEN
        -- Each row's distance computed once (the sort key is the select list's column: a similarity
        -- in the list beside the distance in the order computed both, 2,000 distances a call at
        -- a million memories, issue 49).
        RETURN QUERY EXECUTE pg_catalog.format(
            'SELECT n.id, 1 OPERATOR(pg_catalog.-) n.d, ''embedding'' FROM (
               SELECT o.id, (o.embedding OPERATOR(%1$I.<=>) $1::%1$I.vector) OPERATOR(pg_catalog.+) 0 AS d FROM memory.observations o
                WHERE o.org_id OPERATOR(pg_catalog.=) $2 AND %2$s AND %3$s
                  AND o.key IS NULL AND o.soft_deleted_at IS NULL AND o.superseded_at IS NULL AND o.embedding IS NOT NULL
                  AND (o.expires_at IS NULL OR o.expires_at OPERATOR(pg_catalog.>) pg_catalog.now())
                  AND o.classification OPERATOR(pg_catalog.<=) $5
                -- (+ 0: exact over those rows, never the HNSW index, whose approximate list the
                -- conditions could leave empty while a duplicate exists)
                ORDER BY 2, o.created_at, o.id LIMIT 1) n', memory_internal._vector_schema(), who, ns)
            USING embedding, org, user_id, namespace, tier;
        RETURN;
    END IF;
    ts := memory_internal._trgm_schema();
    IF ts IS NOT NULL THEN
        RETURN QUERY EXECUTE pg_catalog.format(
            'SELECT o.id, %1$I.similarity(o.content, $1)::float8, ''trigram'' FROM memory.observations o
              WHERE o.org_id OPERATOR(pg_catalog.=) $2 AND %2$s AND %3$s
                AND o.key IS NULL AND o.soft_deleted_at IS NULL AND o.superseded_at IS NULL
                AND (o.expires_at IS NULL OR o.expires_at OPERATOR(pg_catalog.>) pg_catalog.now())
                AND o.classification OPERATOR(pg_catalog.<=) $5
              ORDER BY 2 DESC, o.created_at, o.id LIMIT 1', ts, who, ns)
            USING content, org, user_id, namespace, tier;
    END IF;
END $$;

COMMENT ON FUNCTION memory_internal._remember_nearest(text, text, text[], real[], text) IS
  'memory.remember''s near neighbour by embedding among a user''s memories, without the executor (src/remember.rs: an index scan of observations_user, each row''s conditions as memory_internal._remember_near''s statement tests them, pgvector''s cosine_distance): one row (id, similarity, direct); direct false where it cannot (the table or index not as memory_ext made them, no pgvector, Citus): the statement then. Called by _remember_near as memory.remember''s definer; not for PUBLIC.';

-- memory.remember's match in near mode: a live memory of the org, user and namespace the caller
-- is cleared for with the same text (duplicate: last_seen_at and seen_count refreshed), else, for
-- a memory without sources, the most similar one at least as similar as the threshold (merged:
-- the new metadata keys win, the tier is the stricter of both; audited memory.merge). Returns
-- remember's answer, or NULL when there is none. Runs inside memory.remember (its rights, its
-- advisory lock).
CREATE FUNCTION memory_internal._remember_match(org text, content text, user_id text, namespace text[], embedding real[],
                                                metadata jsonb, derived_from uuid[], tier memory.classification, h text)
RETURNS jsonb LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    rid uuid;
    got memory.classification;
    sim float8;
    how text;
    near float8;
BEGIN
    SELECT o.id, o.classification INTO rid, got FROM memory.observations o
     WHERE o.org_id OPERATOR(pg_catalog.=) org AND o.content_sha256 OPERATOR(pg_catalog.=) h
       AND o.user_id IS NOT DISTINCT FROM user_id AND o.namespace IS NOT DISTINCT FROM namespace
       AND o.key IS NULL AND o.soft_deleted_at IS NULL AND o.superseded_at IS NULL
       AND (o.expires_at IS NULL OR o.expires_at OPERATOR(pg_catalog.>) pg_catalog.now())
       AND o.classification OPERATOR(pg_catalog.<=) tier
       AND memory_internal._dedup_hash(o.content) OPERATOR(pg_catalog.=) h
     ORDER BY o.created_at, o.id LIMIT 1;
    IF rid IS NOT NULL THEN
        UPDATE memory.observations o SET last_seen_at = pg_catalog.now(), seen_count = o.seen_count OPERATOR(pg_catalog.+) 1
         WHERE o.org_id OPERATOR(pg_catalog.=) org AND o.id OPERATOR(pg_catalog.=) rid;
        RETURN pg_catalog.jsonb_build_object('id', rid, 'classification', got, 'status', 'duplicate', 'duplicate_of', rid);
    END IF;
    IF derived_from IS NOT NULL THEN
        RETURN NULL;
    END IF;
    SELECT coalesce(pg_catalog.max(st.dedup_threshold), 0.95) INTO near FROM memory.org_settings st WHERE st.org_id OPERATOR(pg_catalog.=) org;
    SELECT n.id, n.similarity, n.how INTO rid, sim, how
      FROM memory_internal._remember_near(org, content, user_id, namespace, embedding, tier) n;
    -- (NaN, from a stored zero vector, sorts above every number in PostgreSQL: never a match.)
    IF rid IS NULL OR NOT (sim OPERATOR(pg_catalog.>=) near AND sim OPERATOR(pg_catalog.<) 'NaN'::float8) THEN
        RETURN NULL;
    END IF;
    got := memory.classify(content, NULL, NULL, org);
    UPDATE memory.observations o
       SET metadata = o.metadata OPERATOR(pg_catalog.||) _remember_match.metadata,
           classification = greatest(o.classification, got),
           last_seen_at = pg_catalog.now(), seen_count = o.seen_count OPERATOR(pg_catalog.+) 1
     WHERE o.org_id OPERATOR(pg_catalog.=) org AND o.id OPERATOR(pg_catalog.=) rid
    RETURNING o.classification INTO got;
    PERFORM memory_internal._audit('memory.merge', pg_catalog.jsonb_build_object(
        'id', rid, 'content_sha256', h, 'by', how, 'similarity', pg_catalog.round(sim::numeric, 4), 'classification', got), org);
    RETURN pg_catalog.jsonb_build_object('id', rid, 'classification', got, 'status', 'merged', 'duplicate_of', rid);
END $$;

-- memory.remember's near and off modes (its exact mode, the default, is Rust: memory.remember
-- below), called by it once the arguments and the org are checked, as its definer.
CREATE FUNCTION memory_internal._remember_other(org text, content text, user_id text, session_id text,
                                                memory_type memory.memory_type, metadata jsonb, embedding real[],
                                                namespace text[], derived_from uuid[])
RETURNS jsonb LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    h text;  locked boolean;
    rid  uuid;  got memory.classification;  tier memory.classification;
    out  jsonb;
BEGIN
    tier := memory_internal._clearance(org)::memory.classification;
    h := memory_internal._dedup_hash(_remember_other.content);
    IF memory_internal._dedup_mode(org) OPERATOR(pg_catalog.=) 'near' THEN
        -- Concurrent remembers of one user's memories wait for each other here until the first
        -- commits, so that the statements after this one (each with a new snapshot) find the first's row.
        locked := pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtextextended(
            pg_catalog.concat_ws(E'\x1f', 'memory_ext.remember.near', org, _remember_other.user_id, _remember_other.namespace::text), 0)) IS NULL;
        out := memory_internal._remember_match(org, _remember_other.content, _remember_other.user_id, _remember_other.namespace,
                                               _remember_other.embedding, _remember_other.metadata, _remember_other.derived_from, tier, h);
        IF out IS NOT NULL THEN
            RETURN out;
        END IF;
    END IF;
    IF _remember_other.embedding IS NULL THEN
        INSERT INTO memory.observations AS o (org_id, user_id, session_id, memory_type, metadata, content, namespace, content_sha256, last_seen_at, derived_from)
        VALUES (org, _remember_other.user_id, _remember_other.session_id, _remember_other.memory_type, _remember_other.metadata, _remember_other.content,
                _remember_other.namespace, h, pg_catalog.now(), _remember_other.derived_from)
        RETURNING o.id, o.classification INTO rid, got;
    ELSE
        -- The embedding in the row's one INSERT (the column exists once memory.enable_embeddings
        -- made it, hence EXECUTE): an UPDATE after the INSERT wrote every index of the row twice
        -- and fired the update triggers (issue 49: at a million memories, most of a created call).
        EXECUTE pg_catalog.format('INSERT INTO memory.observations AS o (org_id, user_id, session_id, memory_type, metadata, content, namespace,
                                      content_sha256, last_seen_at, derived_from, embedding)
                                   VALUES ($1, $2, $3, $4, $5, $6, $7, $8, pg_catalog.now(), $9, $10::%I.vector)
                                   RETURNING o.id, o.classification', memory_internal._vector_schema())
            INTO rid, got
            USING org, _remember_other.user_id, _remember_other.session_id, _remember_other.memory_type, _remember_other.metadata, _remember_other.content,
                  _remember_other.namespace, h, _remember_other.derived_from, _remember_other.embedding;
    END IF;
    RETURN pg_catalog.jsonb_build_object('id', rid, 'classification', got, 'status', 'created', 'duplicate_of', NULL);
END $$;
COMMENT ON FUNCTION memory_internal._remember_other(text, text, text, text, memory.memory_type, jsonb, real[], text[], uuid[]) IS
  'memory.remember in the org''s near and off modes, after its checks (called by memory.remember as its definer; not for PUBLIC): near keeps a memory as similar as dedup_threshold (memory_internal._remember_match), else the row is stored.';

-- Store a memory unless the org has it already (SPEC §17). SECURITY DEFINER: the org is checked
-- against the calling role, and a memory above the caller's clearance is never matched (so a
-- call learns nothing of it); the triggers classify, stamp and audit the row as for an INSERT.
-- A Rust function (src/remember.rs): the arguments, the org and the whole of the default (exact)
-- mode (the lookup and the INSERT kept statements after the advisory lock); near and off go on in
-- memory_internal._remember_other.
CREATE FUNCTION memory.remember(org_id text, content text, user_id text DEFAULT NULL, session_id text DEFAULT NULL,
                                memory_type memory.memory_type DEFAULT 'long_term', metadata jsonb DEFAULT '{}',
                                embedding real[] DEFAULT NULL, namespace text[] DEFAULT NULL, derived_from uuid[] DEFAULT NULL)
RETURNS jsonb LANGUAGE c VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'remember_wrapper';
COMMENT ON FUNCTION memory.remember(text, text, text, text, memory.memory_type, jsonb, real[], text[], uuid[]) IS
  'Store a memory unless the org already has it (memory.org_settings.dedup): exact (the default) returns a live memory of the same org, user and namespace with the same normalised text (NFKC, case-folded, white space collapsed) as duplicate, refreshing last_seen_at and seen_count; near also keeps one whose embedding (cosine) or, without an embedding, text (pg_trgm) is as similar as dedup_threshold, merging the metadata and the stricter tier (merged, audited memory.merge); off always stores. derived_from: the memories this one was made from (SPEC §18: its tier, trust and retention follow theirs; a duplicate leaves the kept memory''s sources as they are; a memory with sources is never merged into a near one). Returns {id, classification, status: created | duplicate | merged, duplicate_of}. At REPEATABLE READ or SERIALIZABLE, a duplicate committed after the transaction''s snapshot is 40001 in the exact mode (retry). A plain INSERT is never deduplicated.';

-- The schema of pg_trgm when it is installed (NULL otherwise).
CREATE FUNCTION memory_internal._trgm_schema()
RETURNS text LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
AS $$
SELECT n.nspname::text FROM pg_catalog.pg_extension e JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) e.extnamespace
 WHERE e.extname OPERATOR(pg_catalog.=) 'pg_trgm'
$$;

-- A prompt-ready block of what memory.recall finds (SPEC §17): a thin caller of recall (its
-- checks, clearance, filters and its memory.recall event), then memory_core::packing. Runs with
-- the caller's rights: recall is the only read of memories but for the candidates' embeddings,
-- read under the caller's row-level security.
CREATE FUNCTION memory.context(org_id text, query text, token_budget int DEFAULT 2000, filters jsonb DEFAULT '{}',
                               query_embedding real[] DEFAULT NULL, diversity float8 DEFAULT 0.3)
RETURNS jsonb LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    org   text := $1;
    cands jsonb;
    embs  jsonb;
    near  float8;
BEGIN
    IF token_budget IS NULL OR token_budget OPERATOR(pg_catalog.<) 1 OR token_budget OPERATOR(pg_catalog.>) 100000 THEN
        RAISE EXCEPTION 'memory.context: token_budget must be between 1 and 100000, got %', coalesce(token_budget::text, 'NULL')
            USING ERRCODE = '22023', HINT = 'Pass the tokens the block may take in the prompt (default 2000).';
    END IF;
    IF diversity IS NULL OR NOT (diversity OPERATOR(pg_catalog.>=) 0 AND diversity OPERATOR(pg_catalog.<=) 1) THEN
        RAISE EXCEPTION 'memory.context: diversity must be between 0 and 1, got %', coalesce(diversity::text, 'NULL')
            USING ERRCODE = '22023', HINT = '0 keeps recall''s order; higher values prefer memories unlike those already taken (default 0.3).';
    END IF;
    -- Candidates: recall's, about one for every 20 tokens of the budget (10 to 1000).
    SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
               'id', r.id, 'content', r.content, 'score', r.score,
               'date', pg_catalog.to_char(r.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD')) ORDER BY r.ordinality), '[]')
      INTO cands
      FROM memory.recall(org_id => org, query => context.query,
                         k => least(1000, greatest(10, context.token_budget OPERATOR(pg_catalog./) 20)),
                         filters => context.filters, query_embedding => context.query_embedding::float8[])
           WITH ORDINALITY r;
    -- With a query embedding, candidates are compared by their embeddings too.
    IF query_embedding IS NOT NULL AND pg_catalog.jsonb_array_length(cands) OPERATOR(pg_catalog.>) 0 THEN
        EXECUTE 'SELECT pg_catalog.jsonb_object_agg(o.id, pg_catalog.to_jsonb(o.embedding::real[])) FROM memory.observations o
                  WHERE o.org_id OPERATOR(pg_catalog.=) $1 AND o.embedding IS NOT NULL
                    AND o.id OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT (c->>''id'')::uuid FROM pg_catalog.jsonb_array_elements($2) c))'
            INTO embs USING org, cands;
        SELECT pg_catalog.jsonb_agg(c OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_object('embedding', embs->(c->>'id')) ORDER BY n)
          INTO cands FROM pg_catalog.jsonb_array_elements(cands) WITH ORDINALITY j(c, n);
    END IF;
    SELECT s.dedup_threshold INTO near FROM memory.org_settings s WHERE s.org_id OPERATOR(pg_catalog.=) org;
    RETURN memory_internal._context_pack(cands::text, token_budget, diversity, coalesce(near, 0.95));
END $$;
COMMENT ON FUNCTION memory.context(text, text, int, jsonb, real[], float8) IS
  'A prompt-ready block of the org''s memories for a query: memory.recall''s candidates (its filters and clearance; audited as its memory.recall), near-duplicates dropped (dedup_threshold, cosine or trigram), ordered by maximal marginal relevance (diversity 0: relevance only), packed greedily under token_budget (the core''s word-piece estimate). Returns {text: one "[date] id: content" line each, ids, tokens, omitted}.';
