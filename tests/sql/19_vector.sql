-- SQL-level suite for embeddings and hybrid recall (SPEC §12, issue 36), as tenant roles. Needs
-- pgvector (scripts/pgvector.sh builds it from ../shared/vendor/pgvector): where it is not
-- installed the file skips every test and says so.
BEGIN;
SELECT plan(63);

CREATE FUNCTION pg_temp.have_vector() RETURNS boolean LANGUAGE sql
AS $$ SELECT EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'vector') $$;

SELECT memory.setup_roles();
CREATE ROLE vx_admin NOLOGIN IN ROLE memory_admin;
CREATE ROLE vx_platform NOLOGIN IN ROLE memory_admin;
CREATE ROLE vx_writer NOLOGIN IN ROLE memory_writer;
CREATE ROLE vx_reader NOLOGIN IN ROLE memory_reader;
CREATE ROLE vx_globex NOLOGIN IN ROLE memory_reader;
SELECT memory.grant_org('vx_admin', 'acme');
SELECT memory.grant_org('vx_platform', '*');
SELECT memory.grant_org('vx_writer', 'acme');
SELECT memory.grant_org('vx_reader', 'acme');
SELECT memory.grant_org('vx_globex', 'globex');
SELECT memory.grant_org('vx_reader', 'bulk');
CREATE ROLE vx_low NOLOGIN IN ROLE memory_reader;
SELECT memory.grant_org('vx_low', 'bulk', 'internal');

-- Hybrid recall computed the slow, exact way: every matching row ranked by ts_rank_cd over its
-- content, every row with an embedding by its exact cosine distance, fused (RRF, k = 60) × weight;
-- 'id:lexical_rank:vector_rank:score', best first. (PL/pgSQL: pgvector's type is created later.)
CREATE FUNCTION pg_temp.exact_hybrid(org text, query text, who text, sess text, qv text, k int, top_tier text DEFAULT NULL) RETURNS text LANGUAGE plpgsql AS $f$
DECLARE x text;
BEGIN
    WITH cand AS (SELECT o.id, o.weight, o.content, o.embedding FROM memory.observations o
                   WHERE o.org_id = org AND o.soft_deleted_at IS NULL AND (who IS NULL OR o.user_id = who) AND (sess IS NULL OR o.session_id = sess)
                     AND (top_tier IS NULL OR o.classification <= top_tier::memory.classification)),
         lex AS (SELECT l.id, row_number() OVER (ORDER BY l.rel DESC, l.id) AS r
                   FROM (SELECT c.id, ts_rank_cd(to_tsvector('english', c.content), websearch_to_tsquery('english', query)) AS rel FROM cand c
                          WHERE to_tsvector('english', c.content) @@ websearch_to_tsquery('english', query)
                          ORDER BY 2 DESC, 1 LIMIT greatest(2 * k, 40)) l),
         vec AS (SELECT v.id, row_number() OVER (ORDER BY v.d, v.id) AS r
                   FROM (SELECT c.id, c.embedding <=> qv::vector AS d FROM cand c WHERE c.embedding IS NOT NULL ORDER BY 2, 1 LIMIT k) v),
         fused AS (SELECT coalesce(lex.id, vec.id) AS id, lex.r AS lr, vec.r AS vr,
                          coalesce(1.0 / (60 + lex.r), 0) + coalesce(1.0 / (60 + vec.r), 0) AS rrf FROM lex FULL JOIN vec ON lex.id = vec.id),
         top AS (SELECT f.*, f.rrf * c.weight AS score, least(coalesce(f.lr, 2147483647), coalesce(f.vr, 2147483647)) AS best
                   FROM fused f JOIN cand c ON c.id = f.id ORDER BY score DESC, best, id LIMIT k)
    SELECT string_agg(format('%s:%s:%s:%s', t.id, coalesce(t.lr::text, '-'), coalesce(t.vr::text, '-'), round(t.score::numeric, 9)), ' ' ORDER BY t.score DESC, t.best, t.id)
      INTO x FROM top t;
    RETURN x;
END $f$;

-- memory.recall's answer in the same form.
CREATE FUNCTION pg_temp.hybrid(org text, query text, filters jsonb, qv real[], k int) RETURNS text LANGUAGE sql AS $f$
    SELECT string_agg(format('%s:%s:%s:%s', r.id, coalesce(r.lexical_rank::text, '-'), coalesce(r.vector_rank::text, '-'), round(r.score::numeric, 9)), ' ' ORDER BY r.ord)
      FROM memory.recall(org, query, k, filters => filters, query_embedding => qv)
           WITH ORDINALITY r(id, content, classification, weight, score, created_at, user_id, session_id, memory_type, lexical_rank, vector_rank, metadata, ord) $f$;

-- Without CREATE EXTENSION vector in this database: the answer names pgvector.
SET ROLE vx_admin;
SELECT throws_ok($$ SELECT memory.enable_embeddings(3) $$, '0A000', 'memory.enable_embeddings needs pgvector, which is not installed in this database',
                 'without pgvector enable_embeddings is 0A000 naming pgvector');
RESET ROLE;
SELECT throws_ok($$ SELECT * FROM memory.recall('acme', 'x', query_embedding => '{1,0,0}') $$, '22023', NULL,
                 'without embeddings a query_embedding is 22023');
SET ROLE vx_reader;
SELECT throws_ok($$ SELECT * FROM memory.retrieve('acme', 'x', query_embedding => '{1,0,0}') $$, '22023',
                 'memory.retrieve: memory.claims has no embeddings to compare query_embedding with',
                 'retrieve: without claims'' embeddings a query_embedding is 22023');
RESET ROLE;

CREATE FUNCTION pg_temp.run_vector_tests() RETURNS SETOF text LANGUAGE plpgsql AS $f$
DECLARE
    x text;
    refs text[];
BEGIN
    IF NOT pg_temp.have_vector() THEN
        RETURN QUERY SELECT skip('pgvector is not installed (scripts/pgvector.sh install builds it from ../shared/vendor/pgvector)', 56);
        RETURN;
    END IF;
    CREATE EXTENSION vector;
    SET LOCAL ROLE vx_writer;
    RETURN QUERY SELECT throws_ok($$ SELECT memory.enable_embeddings(3) $$, '42501', NULL, 'a writer may not enable embeddings');
    SET LOCAL ROLE vx_admin;
    RETURN QUERY SELECT throws_ok($$ SELECT memory.enable_embeddings(3) $$, '42501', NULL,
                                  'an admin bound to one org may not enable embeddings for every org');
    SET LOCAL ROLE vx_platform;
    RETURN QUERY SELECT throws_ok($$ SELECT memory.enable_embeddings(0) $$, '22023', NULL, 'dimensions 0 is 22023');
    RETURN QUERY SELECT throws_ok($$ SELECT memory.enable_embeddings(2001) $$, '22023', NULL, 'dimensions above the HNSW limit are 22023');
    RETURN QUERY SELECT is(memory.enable_embeddings(3)->>'changed', 'true', 'a memory_admin bound to every org enables 3-d embeddings');
    RETURN QUERY SELECT is(memory.enable_embeddings(3)->>'changed', 'false', 'the same dimensions again are a no-op');
    RETURN QUERY SELECT is(memory.enable_embeddings(3)->>'tenant_text_index', 'false', 'without btree_gin no tenant full-text index');
    RESET ROLE;
    RETURN QUERY SELECT is((SELECT reloptions FROM pg_class WHERE oid = 'memory.observations'::regclass), '{fillfactor=94}'::text[],
                           'the observations keep room on each page for a row''s next version (memory_internal._observations_fillfactor(3))');
    -- btree_gin (contrib) created since: enabling again adds the tenant full-text indexes (and
    -- keeps a fillfactor the operator set).
    ALTER TABLE memory.observations SET (fillfactor = 90);
    CREATE EXTENSION btree_gin;
    SET LOCAL ROLE vx_platform;
    RETURN QUERY SELECT is(memory.enable_embeddings(3), '{"dimensions": 3, "changed": false, "tenant_text_index": true}'::jsonb,
                           'with btree_gin enabling again adds the tenant full-text indexes, and changes nothing else');
    RETURN QUERY SELECT alike(pg_get_indexdef('memory.claims_fts_tenant'::regclass),
                              '%USING gin (org_id, to_tsvector(''english''::regconfig, claim_text)) WHERE (lifecycle_state = ''active''%',
                              'the claims'' tenant full-text index covers the active claims');
    PERFORM memory.enable_embeddings(3);
    RESET ROLE;
    RETURN QUERY SELECT is((SELECT reloptions FROM pg_class WHERE oid = 'memory.observations'::regclass), '{fillfactor=90}'::text[],
                           'enabling again keeps the fillfactor the operator set');
    ALTER TABLE memory.observations SET (fillfactor = 94);
    RETURN QUERY SELECT is((SELECT count(*) FROM public.audit_log_now() WHERE event_type = 'memory.embeddings.enable'), 2::bigint,
                           'enabled, then the tenant indexes built: two events; again with both there: nothing done');
    SET LOCAL ROLE vx_platform;
    RETURN QUERY SELECT throws_ok($$ SELECT memory.enable_embeddings(4) $$, '55000', 'embeddings are enabled with 3 dimensions, not 4',
                                  'other dimensions are refused with a clear error');
    RESET ROLE;
    RETURN QUERY SELECT is((SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = 'memory.observations'::regclass AND attname = 'embedding'),
                           'vector(3)', 'memory.observations.embedding is vector(3)');
    RETURN QUERY SELECT is((SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = 'memory.observations_archive'::regclass AND attname = 'embedding'),
                           'vector(3)', 'the archive has the column too');
    RETURN QUERY SELECT alike(pg_get_indexdef('memory.observations_embedding'::regclass), '%USING hnsw (embedding vector_cosine_ops) WITH (m=''16'', ef_construction=''64'')%',
                             'behind an HNSW cosine index, m = 16, ef_construction = 64');

    -- The fixture, written by the writer with its embeddings: four acme rows, one of globex.
    SET LOCAL ROLE vx_writer;
    INSERT INTO memory.observations (id, org_id, user_id, content, embedding) VALUES
        ('00000000-0000-0000-0000-0000000000a1', 'acme', 'u1', 'alpha report on payments', '[1,0,0]'),
        ('00000000-0000-0000-0000-0000000000a2', 'acme', 'u1', 'beta notes', '[0.9,0.1,0]'),
        ('00000000-0000-0000-0000-0000000000a3', 'acme', 'u2', 'payments gamma', '[0,1,0]'),
        ('00000000-0000-0000-0000-0000000000a4', 'acme', 'u2', 'delta payments', '[0,0,1]');
    RESET ROLE;
    INSERT INTO memory.observations (id, org_id, user_id, content, embedding) VALUES
        ('00000000-0000-0000-0000-0000000000b1', 'globex', 'u1', 'payments alpha', '[1,0,0]');
    -- Full text: a1, a3, a4 match 'payments' with equal ts_rank_cd (ties by id: ranks 1, 2, 3);
    -- cosine distance to [1,0,0]: a1 0, a2 0.006, a3 and a4 1 (ties by id: 1, 2, 3, 4).
    -- RRF (k = 60) × weight 1: a1 2/61, a3 1/62 + 1/63, a4 1/63 + 1/64, a2 1/62.
    SET LOCAL ROLE vx_reader;
    PERFORM set_config('vx.hnsw', coalesce(current_setting('hnsw.ef_search', true), '') || '/' || coalesce(current_setting('hnsw.iterative_scan', true), ''), true);
    SELECT string_agg(format('%s:%s:%s:%s', right(r.id::text, 2), coalesce(r.lexical_rank::text, '-'), coalesce(r.vector_rank::text, '-'),
                             round(r.score::numeric, 6)), ' ' ORDER BY r.ord) INTO x
      FROM memory.recall('acme', 'payments', 10, query_embedding => '{1,0,0}')
           WITH ORDINALITY r(id, content, classification, weight, score, created_at, user_id, session_id, memory_type, lexical_rank, vector_rank, metadata, ord);
    RETURN QUERY SELECT is(x, 'a1:1:1:0.032787 a3:2:3:0.032002 a4:3:4:0.031498 a2:-:2:0.016129',
                           'hybrid recall: exact reciprocal-rank-fused order, scores and both ranks');
    SELECT string_agg(format('%s:%s:%s', right(r.id::text, 2), coalesce(r.lexical_rank::text, '-'), r.vector_rank), ' ' ORDER BY r.ord) INTO x
      FROM memory.recall('acme', '', 10, filters => '{"user_id": "u2"}', query_embedding => '{0.1,0,1}')
           WITH ORDINALITY r(id, content, classification, weight, score, created_at, user_id, session_id, memory_type, lexical_rank, vector_rank, metadata, ord);
    RETURN QUERY SELECT is(x, 'a4:-:1 a3:-:2', 'a blank query with an embedding ranks by vector alone, within the filter');
    RETURN QUERY SELECT is(coalesce(current_setting('hnsw.ef_search', true), '') || '/' || coalesce(current_setting('hnsw.iterative_scan', true), ''),
                           current_setting('vx.hnsw'), 'recall puts pgvector''s ef_search and iterative_scan back after its read');
    RETURN QUERY SELECT throws_ok($$ SELECT * FROM memory.recall('acme', 'payments', query_embedding => '{1,0}') $$, '22023',
                                  'query_embedding has 2 dimensions, the embeddings have 3', 'dimensions that do not match are 22023');
    RETURN QUERY SELECT throws_ok($$ SELECT * FROM memory.recall('acme', 'payments', query_embedding => '{1,NaN,0}') $$, '22023',
                                  'query_embedding has a NULL, NaN or infinite component', 'a NaN component is 22023');
    RETURN QUERY SELECT throws_ok($$ SELECT * FROM memory.recall('acme', 'payments', query_embedding => '{1,Infinity,0}') $$, '22023',
                                  'query_embedding has a NULL, NaN or infinite component', 'an infinite component is 22023');
    SET LOCAL ROLE vx_globex;
    RETURN QUERY SELECT is((SELECT array_agg(right(r.id::text, 2)) FROM memory.recall('globex', 'payments', 10, query_embedding => '{1,0,0}') r),
                           ARRAY['b1'], 'another org recalls its own rows only');
    RESET ROLE;

    -- The words are kept with the row (content_tsv, generated from content): a client never
    -- writes them, and they follow content.
    SET LOCAL ROLE vx_writer;
    RETURN QUERY SELECT throws_ok($$ INSERT INTO memory.observations (org_id, content, content_tsv) VALUES ('acme', 'x', 'x') $$, '428C9', NULL,
                                  'content_tsv is generated: a writer cannot set it');
    RESET ROLE;
    UPDATE memory.observations SET content = 'payments epsilon' WHERE id = '00000000-0000-0000-0000-0000000000a4';
    RETURN QUERY SELECT is((SELECT content_tsv FROM memory.observations WHERE id = '00000000-0000-0000-0000-0000000000a4'),
                           to_tsvector('english', 'payments epsilon'), 'content_tsv holds the words of the current content');

    -- One pass over the rows and the two index lists give the exact answer. Org bulk: 10,500
    -- memories of user heavy in 250 sessions, every other one with the word ledger, scattered
    -- directions but ten near [1, 0, 0]. The user's rows: one pass meets more than 10,000 and
    -- recall reads the two lists instead (and, remembering it, at once the next time); a
    -- session's 42: one pass; no filter: the two lists.
    INSERT INTO memory.observations (org_id, user_id, session_id, content, embedding)
    SELECT 'bulk', 'heavy', 's' || (g % 250), CASE WHEN g % 2 = 0 THEN 'ledger entry ' ELSE 'plain entry ' END || g,
           (CASE WHEN g <= 10 THEN ARRAY[1, 0.001 * g, 0] ELSE ARRAY[sin(g * 1.3), cos(g * 2.1), sin(g * 0.7)] END)::real[]::vector
      FROM generate_series(1, 10500) g;
    -- Half of session s4's rows (all ledger) are confidential: above vx_low's clearance (internal).
    UPDATE memory.observations SET classification = 'confidential'
     WHERE org_id = 'bulk' AND session_id = 's4' AND content LIKE 'ledger%54';
    -- (The exact answers are read as the superuser; recall's as the tenant's reader.)
    refs := ARRAY[pg_temp.exact_hybrid('bulk', 'ledger', 'heavy', NULL, '[1,0,0]', 10),
                  pg_temp.exact_hybrid('bulk', 'ledger', 'heavy', 's3', '[0,1,0.2]', 5),
                  pg_temp.exact_hybrid('bulk', '', NULL, 's4', '[0,1,0.2]', 7),
                  pg_temp.exact_hybrid('bulk', 'ledger', NULL, NULL, '[1,0,0]', 10),
                  pg_temp.exact_hybrid('bulk', 'ledger', 'heavy', 's4', '[0,1,0.2]', 5, 'internal'),
                  pg_temp.exact_hybrid('bulk', 'ledger', 'heavy', 's4', '[0,1,0.2]', 5),
                  pg_temp.exact_hybrid('bulk', 'plain', 'heavy', NULL, '[0,1,0.2]', 10)];
    SET LOCAL ROLE vx_reader;
    RETURN QUERY SELECT is(pg_temp.hybrid('bulk', 'ledger', '{"user_id": "heavy"}', '{1,0,0}', 10), refs[1],
                           'more rows than one pass takes: the two lists give the exact answer');
    RETURN QUERY SELECT is(pg_temp.hybrid('bulk', 'ledger', '{"user_id": "heavy"}', '{1,0,0}', 10), refs[1],
                           'the same scope again (the lists at once): the exact answer');
    RETURN QUERY SELECT is(pg_temp.hybrid('bulk', 'plain', '{"user_id": "heavy"}', '{0,1,0.2}', 10), refs[7],
                           'the same scope with other words and another vector (remembered by the scope alone): the exact answer');
    RETURN QUERY SELECT is(pg_temp.hybrid('bulk', 'ledger', '{}', '{1,0,0}', 10), refs[4],
                           'no user, session or task filter: the two lists, the exact answer');
    RETURN QUERY SELECT is(pg_temp.hybrid('bulk', 'ledger', '{"user_id": "heavy", "session_id": "s3"}', '{0,1,0.2}', 5), refs[2],
                           'a session''s rows: one pass gives the exact answer');
    RETURN QUERY SELECT is(pg_temp.hybrid('bulk', '', '{"session_id": "s4"}', '{0,1,0.2}', 7), refs[3],
                           'a blank query in one pass: by vector alone, exactly');
    RETURN QUERY SELECT is(pg_temp.hybrid('bulk', 'ledger', '{"user_id": "heavy", "session_id": "s4", "max_tier": "internal"}', '{0,1,0.2}', 5), refs[5],
                           'one pass with max_tier: only rows up to that tier, exactly');
    RETURN QUERY SELECT isnt(refs[5], refs[6], '(the confidential rows change that answer)');
    -- The one pass runs its statements' generic plans (plan_cache_mode set for those two only):
    -- the plan kept for one scope answers another exactly, and the caller's setting is as it was.
    SET LOCAL plan_cache_mode = force_custom_plan;
    RETURN QUERY SELECT is(pg_temp.hybrid('bulk', 'ledger', '{"user_id": "heavy", "session_id": "s3"}', '{0,1,0.2}', 5), refs[2],
                           'one pass again, its kept generic plan for another scope: the exact answer');
    RETURN QUERY SELECT is(current_setting('plan_cache_mode'), 'force_custom_plan', 'the one pass leaves the caller''s plan_cache_mode as it was');
    RESET plan_cache_mode;
    SET LOCAL ROLE vx_low;
    RETURN QUERY SELECT is(pg_temp.hybrid('bulk', 'ledger', '{"user_id": "heavy", "session_id": "s4"}', '{0,1,0.2}', 5), refs[5],
                           'one pass for a reader cleared to internal: no confidential row, exactly');
    RESET ROLE;
    RETURN QUERY SELECT ok((SELECT payload ? 'query_embedding_sha256' AND payload->>'query_sha256' = encode(sha256('payments'), 'hex')
                                   AND payload::text NOT LIKE '%payments%' AND payload::text NOT LIKE '%[1,0,0]%'
                              FROM public.audit_log_now() WHERE event_type = 'memory.recall' AND org_id = 'acme' ORDER BY seq LIMIT 1),
                           'the recall event has the hashes of the query and the embedding, never either');

    -- Archive and forget take the embeddings with the rows.
    UPDATE memory.observations SET archive_at = now() - interval '1 day' WHERE id = '00000000-0000-0000-0000-0000000000a2';
    PERFORM memory.run_retention();
    RETURN QUERY SELECT is((SELECT embedding::text FROM memory.observations_archive WHERE id = '00000000-0000-0000-0000-0000000000a2'),
                           '[0.9,0.1,0]', 'archived with its embedding');
    SET LOCAL ROLE vx_writer;
    PERFORM memory.forget(ARRAY['00000000-0000-0000-0000-0000000000a1', '00000000-0000-0000-0000-0000000000a2']::uuid[], 'test');
    RESET ROLE;
    RETURN QUERY SELECT is((SELECT count(*) FROM (SELECT id FROM memory.observations UNION ALL SELECT id FROM memory.observations_archive) o
                             WHERE id IN ('00000000-0000-0000-0000-0000000000a1', '00000000-0000-0000-0000-0000000000a2')), 0::bigint,
                           'forget removes the rows and their embeddings, live and archived');

    -- Claims: the same call gave memory.claims its embedding column and an HNSW index of the active ones.
    RETURN QUERY SELECT is((SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = 'memory.claims'::regclass AND attname = 'embedding'),
                           'vector(3)', 'memory.claims.embedding is vector(3)');
    RETURN QUERY SELECT alike(pg_get_indexdef('memory.claims_embedding'::regclass),
                              '%USING hnsw (embedding vector_cosine_ops) WITH (m=''16'', ef_construction=''64'') WHERE (lifecycle_state = ''active''%',
                              'behind an HNSW cosine index of the active claims, m = 16, ef_construction = 64');
    -- The writer writes claims with their embeddings; the admin promotes them. c1 and c2 match
    -- 'aspirin stroke' (c1 closer: ts_rank_cd 0.05 against 0.01); c2 is nearest [1,0,0], c1 next,
    -- c3 (another entity, no match) last. Every claim that must not be retrieved is nearest of all:
    -- c4 past decay_at, c5 still pending, c6 of globex, c7 about user u1.
    SET LOCAL ROLE vx_writer;
    INSERT INTO memory.entities (id, org_id, entity_type, name) VALUES
        ('00000000-0000-0000-0000-0000000000e1', 'acme', 'intervention', 'aspirin'),
        ('00000000-0000-0000-0000-0000000000e2', 'acme', 'intervention', 'statins');
    INSERT INTO memory.claims (id, org_id, entity_id, claim_text, confidence_score, embedding, decay_at, subject_id, pii_fields) VALUES
        ('00000000-0000-0000-0000-0000000000c1', 'acme', '00000000-0000-0000-0000-0000000000e1', 'aspirin prevents stroke', 0.4, '[0.9,0.1,0]', NULL, NULL, '{}'),
        ('00000000-0000-0000-0000-0000000000c2', 'acme', '00000000-0000-0000-0000-0000000000e1', 'aspirin reduces the long-term risk of a second stroke', 0.8, '[1,0,0]', NULL, NULL, '{}'),
        ('00000000-0000-0000-0000-0000000000c3', 'acme', '00000000-0000-0000-0000-0000000000e2', 'statins lower cholesterol', 0.5, '[0,1,0]', NULL, NULL, '{}'),
        ('00000000-0000-0000-0000-0000000000c4', 'acme', '00000000-0000-0000-0000-0000000000e1', 'an old finding', 0.5, '[1,0,0]', now() - interval '1 minute', NULL, '{}'),
        ('00000000-0000-0000-0000-0000000000c5', 'acme', '00000000-0000-0000-0000-0000000000e1', 'an unreviewed finding', 0.5, '[1,0,0]', NULL, NULL, '{}'),
        ('00000000-0000-0000-0000-0000000000c7', 'acme', '00000000-0000-0000-0000-0000000000e1', 'a finding about a patient', 0.5, '[1,0,0]', NULL, 'u1', '{}'),
        ('00000000-0000-0000-0000-0000000000c8', 'acme', '00000000-0000-0000-0000-0000000000e1', 'patient p8 takes aspirin', 0.5, '[0,0,1]', now() - interval '1 minute', 'p8', '{claim_text,subject_id}'),
        ('00000000-0000-0000-0000-0000000000c9', 'acme', '00000000-0000-0000-0000-0000000000e1', 'a finding about p9', 0.5, '[0,1,1]', now() - interval '1 minute', 'p9', '{subject_id}');
    SET LOCAL ROLE vx_admin;
    UPDATE memory.claims SET lifecycle_state = 'active'
     WHERE id IN ('00000000-0000-0000-0000-0000000000c1', '00000000-0000-0000-0000-0000000000c2', '00000000-0000-0000-0000-0000000000c3',
                  '00000000-0000-0000-0000-0000000000c4', '00000000-0000-0000-0000-0000000000c7');
    RESET ROLE;
    INSERT INTO memory.entities (id, org_id, entity_type, name) VALUES ('00000000-0000-0000-0000-0000000000e6', 'globex', 'intervention', 'aspirin');
    INSERT INTO memory.claims (id, org_id, entity_id, claim_text, embedding) VALUES
        ('00000000-0000-0000-0000-0000000000c6', 'globex', '00000000-0000-0000-0000-0000000000e6', 'aspirin of globex', '[1,0,0]');
    UPDATE memory.claims SET lifecycle_state = 'active' WHERE id = '00000000-0000-0000-0000-0000000000c6';

    SET LOCAL ROLE vx_reader;
    -- Full text alone: c1 then c2, lexical_rank their places, no vector_rank.
    SELECT string_agg(format('%s:%s:%s', right(r.id::text, 2), r.lexical_rank, coalesce(r.vector_rank::text, '-')), ' ' ORDER BY r.ord) INTO x
      FROM memory.retrieve('acme', 'aspirin stroke') WITH ORDINALITY r(id, entity, claim_text, field, kind, source, supports, subject_id, confidence_score,
                                                                       classification, score, t_created, decay_at, stale_fields, lexical_rank, vector_rank, ord);
    RETURN QUERY SELECT is(x, 'c1:1:- c2:2:-', 'retrieve by full text: lexical_rank is the place, vector_rank NULL');
    -- Hybrid: c1 1/61 + 1/62, c2 1/62 + 1/61 (a tie: the more confident c2 first), c3 1/63.
    SELECT string_agg(format('%s:%s:%s:%s', right(r.id::text, 2), coalesce(r.lexical_rank::text, '-'), coalesce(r.vector_rank::text, '-'),
                             round(r.score::numeric, 6)), ' ' ORDER BY r.ord) INTO x
      FROM memory.retrieve('acme', 'aspirin stroke', query_embedding => '{1,0,0}')
           WITH ORDINALITY r(id, entity, claim_text, field, kind, source, supports, subject_id, confidence_score,
                             classification, score, t_created, decay_at, stale_fields, lexical_rank, vector_rank, ord);
    RETURN QUERY SELECT is(x, 'c2:2:1:0.032522 c1:1:2:0.032522 c3:-:3:0.015873',
                           'hybrid retrieve: exact fused order, scores and ranks; a tie goes to the more confident claim');
    RETURN QUERY SELECT is((SELECT array_agg(right(r.id::text, 2)) FROM memory.retrieve('acme', 'aspirin stroke', 1, query_embedding => '{1,0,0}') r),
                           ARRAY['c2'], 'k = 1: the tie''s winner');
    SELECT string_agg(format('%s:%s:%s:%s', right(r.id::text, 2), coalesce(r.lexical_rank::text, '-'), r.vector_rank, round(r.score::numeric, 6)), ' ' ORDER BY r.ord) INTO x
      FROM memory.retrieve('acme', '', query_embedding => '{1,0,0}')
           WITH ORDINALITY r(id, entity, claim_text, field, kind, source, supports, subject_id, confidence_score,
                             classification, score, t_created, decay_at, stale_fields, lexical_rank, vector_rank, ord);
    RETURN QUERY SELECT is(x, 'c2:-:1:0.016393 c1:-:2:0.016129 c3:-:3:0.015873',
                           'a blank query ranks by vector alone; decayed, pending, other-org and other-user claims take no rank');
    RETURN QUERY SELECT is((SELECT array_agg(format('%s:%s', right(r.id::text, 2), r.vector_rank))
                              FROM memory.retrieve('acme', '', entity_id => '00000000-0000-0000-0000-0000000000e2', query_embedding => '{1,0,0}') r),
                           ARRAY['c3:1'], 'within an entity');
    RETURN QUERY SELECT throws_ok($$ SELECT * FROM memory.retrieve('acme', '', user_id => 'u1', query_embedding => '{1,0,0}') $$, 'MX003', NULL,
                                  'knowledge about a user without the user''s consent is MX003, with an embedding too');
    RETURN QUERY SELECT throws_ok(format('SELECT * FROM memory.retrieve(%L, %L, query_embedding => %L)', 'acme', 'aspirin', e.v), '22023', e.msg, 'retrieve: ' || e.what)
      FROM (VALUES ('{1,0}', 'query_embedding has 2 dimensions, the embeddings have 3', 'dimensions that do not match are 22023'),
                   ('{1,NaN,0}', 'query_embedding has a NULL, NaN or infinite component', 'a NaN component is 22023'),
                   ('{-Infinity,0,0}', 'query_embedding has a NULL, NaN or infinite component', 'an infinite component is 22023'),
                   ('{0,0,0}', 'query_embedding is all zeros, which has no cosine distance', 'an all-zero embedding is 22023')) e(v, msg, what);
    SET LOCAL ROLE vx_globex;
    RETURN QUERY SELECT is((SELECT array_agg(right(r.id::text, 2)) FROM memory.retrieve('globex', '', query_embedding => '{1,0,0}') r),
                           ARRAY['c6'], 'another org retrieves its own claims only');
    RESET ROLE;
    RETURN QUERY SELECT is((SELECT array_agg(payload::jsonb ORDER BY seq)::text FROM public.audit_log_now()
                             WHERE event_type = 'memory.retrieval.hybrid' AND org_id = 'acme'),
                           '{"{\"count\": 2}","{\"count\": 3}","{\"count\": 1}","{\"count\": 3}","{\"count\": 1}"}',
                           'one retrieval event per call, with the count only');

    -- A claim's embedding is content: fixed once written.
    SET LOCAL ROLE vx_admin;
    RETURN QUERY SELECT throws_ok($$ UPDATE memory.claims SET embedding = '[0,0,1]' WHERE id = '00000000-0000-0000-0000-0000000000c1' $$, '42501', NULL,
                                  'an admin may not update an embedding');
    RESET ROLE;
    RETURN QUERY SELECT throws_ok($$ UPDATE memory.claims SET embedding = '[0,0,1]' WHERE id = '00000000-0000-0000-0000-0000000000c1' $$, '55000',
                                  'the embedding of claim 00000000-0000-0000-0000-0000000000c1 is immutable', 'nor may the owner: 55000');
    RETURN QUERY SELECT throws_ok($$ UPDATE memory.claims SET embedding = NULL WHERE id = '00000000-0000-0000-0000-0000000000c1' $$, '55000',
                                  'the embedding of claim 00000000-0000-0000-0000-0000000000c1 is immutable', 'nor clear it');

    -- ingest_batch writes a claim's "embedding" with it.
    SET LOCAL ROLE vx_writer;
    SELECT string_agg(coalesce(b.sqlstate, 'ok'), ' ' ORDER BY b.item) INTO x
      FROM memory.ingest_batch(claims => '[{"id": "00000000-0000-0000-0000-0000000000ca", "entity_id": "00000000-0000-0000-0000-0000000000e1", "claim_text": "ingested", "embedding": [0.5, 0.5, 0]},
                                           {"entity_id": "00000000-0000-0000-0000-0000000000e1", "claim_text": "bad", "embedding": [0.5, 0.5]},
                                           {"entity_id": "00000000-0000-0000-0000-0000000000e1", "claim_text": "none"}]') b;
    RETURN QUERY SELECT is(x, 'ok 22023 ok', 'ingest_batch: an embedding of other dimensions is 22023, the others land');
    RESET ROLE;
    RETURN QUERY SELECT is((SELECT embedding::text FROM memory.claims WHERE id = '00000000-0000-0000-0000-0000000000ca'), '[0.5,0.5,0]',
                           'the ingested claim has its embedding');

    -- Decay redacts a PHI claim's text, and the embedding of that text goes with it.
    SET LOCAL ROLE vx_admin;
    PERFORM memory.run_decay();
    RESET ROLE;
    RETURN QUERY SELECT is((SELECT format('%s %s %s', claim_text, coalesce(embedding::text, 'NULL'), lifecycle_state) FROM memory.claims
                             WHERE id = '00000000-0000-0000-0000-0000000000c8'), '[redacted] NULL archived',
                           'decay: redacted text, no embedding');
    RETURN QUERY SELECT is((SELECT format('%s %s', claim_text, embedding) FROM memory.claims WHERE id = '00000000-0000-0000-0000-0000000000c9'),
                           'a finding about p9 [0,1,1]', 'a claim whose text is not redacted keeps its embedding');
END $f$;
SELECT * FROM pg_temp.run_vector_tests();

SELECT * FROM finish();
ROLLBACK;
