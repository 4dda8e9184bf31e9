-- SQL-level suite for embeddings and hybrid recall (SPEC §12, issue 36), as tenant roles. Needs
-- pgvector (scripts/pgvector.sh builds it from ../shared/vendor/pgvector): where it is not
-- installed the file skips every test and says so.
BEGIN;
SELECT plan(20);

CREATE FUNCTION pg_temp.have_vector() RETURNS boolean LANGUAGE sql
AS $$ SELECT EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'vector') $$;

SELECT memory.setup_roles();
CREATE ROLE vx_admin NOLOGIN IN ROLE memory_admin;
CREATE ROLE vx_writer NOLOGIN IN ROLE memory_writer;
CREATE ROLE vx_reader NOLOGIN IN ROLE memory_reader;
CREATE ROLE vx_globex NOLOGIN IN ROLE memory_reader;
SELECT memory.grant_org('vx_admin', 'acme');
SELECT memory.grant_org('vx_writer', 'acme');
SELECT memory.grant_org('vx_reader', 'acme');
SELECT memory.grant_org('vx_globex', 'globex');

-- Without CREATE EXTENSION vector in this database: the answer names pgvector.
SET ROLE vx_admin;
SELECT throws_ok($$ SELECT memory.enable_embeddings(3) $$, '0A000', 'memory.enable_embeddings needs pgvector, which is not installed in this database',
                 'without pgvector enable_embeddings is 0A000 naming pgvector');
RESET ROLE;
SELECT throws_ok($$ SELECT * FROM memory.recall('acme', 'x', query_embedding => '{1,0,0}') $$, '22023', NULL,
                 'without embeddings a query_embedding is 22023');

CREATE FUNCTION pg_temp.run_vector_tests() RETURNS SETOF text LANGUAGE plpgsql AS $f$
DECLARE
    x text;
BEGIN
    IF NOT pg_temp.have_vector() THEN
        RETURN QUERY SELECT skip('pgvector is not installed (scripts/pgvector.sh install builds it from ../shared/vendor/pgvector)', 18);
        RETURN;
    END IF;
    CREATE EXTENSION vector;
    SET LOCAL ROLE vx_writer;
    RETURN QUERY SELECT throws_ok($$ SELECT memory.enable_embeddings(3) $$, '42501', NULL, 'a writer may not enable embeddings');
    SET LOCAL ROLE vx_admin;
    RETURN QUERY SELECT throws_ok($$ SELECT memory.enable_embeddings(0) $$, '22023', NULL, 'dimensions 0 is 22023');
    RETURN QUERY SELECT throws_ok($$ SELECT memory.enable_embeddings(2001) $$, '22023', NULL, 'dimensions above the HNSW limit are 22023');
    RETURN QUERY SELECT is(memory.enable_embeddings(3)->>'changed', 'true', 'a memory_admin enables 3-d embeddings');
    RETURN QUERY SELECT is(memory.enable_embeddings(3)->>'changed', 'false', 'the same dimensions again are a no-op');
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
    SELECT string_agg(format('%s:%s:%s:%s', right(r.id::text, 2), coalesce(r.lexical_rank::text, '-'), coalesce(r.vector_rank::text, '-'),
                             round(r.score::numeric, 6)), ' ' ORDER BY r.ord) INTO x
      FROM memory.recall('acme', 'payments', 10, query_embedding => '{1,0,0}')
           WITH ORDINALITY r(id, content, classification, weight, score, created_at, user_id, session_id, memory_type, lexical_rank, vector_rank, ord);
    RETURN QUERY SELECT is(x, 'a1:1:1:0.032787 a3:2:3:0.032002 a4:3:4:0.031498 a2:-:2:0.016129',
                           'hybrid recall: exact reciprocal-rank-fused order, scores and both ranks');
    SELECT string_agg(format('%s:%s:%s', right(r.id::text, 2), coalesce(r.lexical_rank::text, '-'), r.vector_rank), ' ' ORDER BY r.ord) INTO x
      FROM memory.recall('acme', '', 10, filters => '{"user_id": "u2"}', query_embedding => '{0.1,0,1}')
           WITH ORDINALITY r(id, content, classification, weight, score, created_at, user_id, session_id, memory_type, lexical_rank, vector_rank, ord);
    RETURN QUERY SELECT is(x, 'a4:-:1 a3:-:2', 'a blank query with an embedding ranks by vector alone, within the filter');
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
END $f$;
SELECT * FROM pg_temp.run_vector_tests();

SELECT * FROM finish();
ROLLBACK;
