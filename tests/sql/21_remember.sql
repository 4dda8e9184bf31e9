-- SQL-level suite for duplicates at write and context packing (issue 49, SPEC §17):
-- memory.remember, memory.org_settings.dedup, memory.context, as tenant-bound roles. (Near
-- merges by embedding and concurrent remembers: tests/python/test_remember.py.)
BEGIN;
SELECT plan(70);

SELECT memory.setup_roles();
CREATE ROLE rm_writer IN ROLE memory_writer;
CREATE ROLE rm_reader IN ROLE memory_reader;
CREATE ROLE rm_low IN ROLE memory_reader;
CREATE ROLE rm_admin IN ROLE memory_admin;
CREATE ROLE rm_globex IN ROLE memory_writer;
SELECT memory.grant_org('rm_writer', 'acme'), memory.grant_org('rm_reader', 'acme'), memory.grant_org('rm_low', 'acme', 'internal'),
       memory.grant_org('rm_admin', 'acme'), memory.grant_org('rm_globex', 'globex'), memory.grant_org('rm_writer', 'beta');

-- ------------------------------------------------------------------------------------------------
-- exact (the default): the same fact twice is stored once
SET ROLE rm_writer;
CREATE TEMP TABLE r1 AS SELECT memory.remember('acme', 'The user prefers dark mode.', user_id => 'dave') AS r;
SELECT is((SELECT r->>'status' FROM r1), 'created', 'a first remember stores the memory');
SELECT is((SELECT r->>'classification' FROM r1), 'internal', 'with its tier');
SELECT ok((SELECT r->'duplicate_of' = 'null'::jsonb FROM r1), 'and no duplicate_of');
CREATE TEMP TABLE r2 AS SELECT memory.remember('acme', E'  the USER prefers\tdark   mode. ', user_id => 'dave') AS r;
SELECT is((SELECT r->>'status' FROM r2), 'duplicate', 'the same fact with other case and white space is a duplicate');
SELECT is((SELECT r->>'id' FROM r2), (SELECT r->>'id' FROM r1), 'of the first memory (id)');
SELECT is((SELECT r->>'duplicate_of' FROM r2), (SELECT r->>'id' FROM r1), 'and duplicate_of');
SELECT is((SELECT memory.remember('acme', 'ＴＨＥ user prefers dark mode.', user_id => 'dave')->>'status'), 'duplicate',
          'full-width letters fold (NFKC)');
SELECT is((SELECT memory.remember('acme', 'The user prefers dark mode', user_id => 'dave')->>'status'), 'created',
          'other punctuation is another text');
SELECT is((SELECT memory.remember('acme', 'The user prefers dark mode.', user_id => 'erin')->>'status'), 'created',
          'another user: stored');
SELECT is((SELECT memory.remember('acme', 'The user prefers dark mode.', user_id => 'dave', namespace => ARRAY['prefs'])->>'status'), 'created',
          'another namespace: stored');
SELECT is((SELECT memory.remember('acme', 'the user prefers dark mode.', user_id => 'dave', namespace => ARRAY['prefs'])->>'status'), 'duplicate',
          'the same namespace again: duplicate');
SELECT is((SELECT memory.remember('beta', 'The user prefers dark mode.', user_id => 'dave')->>'status'), 'created',
          'another org: stored');
RESET ROLE;
SELECT is((SELECT count(*) FROM memory.observations WHERE org_id = 'acme' AND user_id = 'dave' AND lower(content) LIKE '%dark mode.%' AND namespace IS NULL),
          1::bigint, 'one row for the fact');
SELECT is((SELECT seen_count FROM memory.observations WHERE id = (SELECT (r->>'id')::uuid FROM r1)), 3, 'seen_count counts the remembers');
SELECT ok((SELECT last_seen_at IS NOT NULL AND last_seen_at >= created_at FROM memory.observations WHERE id = (SELECT (r->>'id')::uuid FROM r1)),
          'last_seen_at refreshed');
SELECT is((SELECT content_sha256 FROM memory.observations WHERE id = (SELECT (r->>'id')::uuid FROM r1)),
          encode(sha256(convert_to('the user prefers dark mode.', 'UTF8')), 'hex'), 'content_sha256: SHA-256 of the normalised text');
SELECT is((SELECT count(*) FROM public.audit_log_now() l WHERE l.chain_id = 'acme' AND l.event_type = 'memory.store'
            AND l.payload->>'id' = (SELECT r->>'id' FROM r1)), 1::bigint, 'audited once as memory.store');
SELECT is((SELECT count(*) FROM memory.audit_log l WHERE l.chain_id = 'acme' AND l.event_type = 'memory.update'
            AND l.payload->>'id' = (SELECT r->>'id' FROM r1)), 0::bigint, 'a duplicate is no memory.update');
SELECT is((SELECT count(*) FROM memory.audit_log l WHERE l.payload::text ILIKE '%dark mode%'), 0::bigint, 'no content in the log');

-- A plain INSERT is never deduplicated, and a hash-less row is no match.
SET ROLE rm_writer;
SET memory.org_id = 'acme';
INSERT INTO memory.observations (org_id, user_id, content) VALUES ('acme', 'frank', 'Frank likes tea'), ('acme', 'frank', 'Frank likes tea');
RESET memory.org_id;
RESET ROLE;
SELECT is((SELECT count(*) FROM memory.observations WHERE user_id = 'frank' AND content_sha256 IS NULL), 2::bigint, 'a plain INSERT stores twice, without a hash');
SET ROLE rm_writer;
SELECT is((SELECT memory.remember('acme', 'frank likes tea', user_id => 'frank')->>'status'), 'created', 'plain INSERTs stay plain');
-- Forgotten or soft-deleted memories are not live.
SELECT memory.forget(ARRAY[(SELECT (r->>'id')::uuid FROM r1)], 'test');
SELECT is((SELECT memory.remember('acme', 'The user prefers dark mode.', user_id => 'dave')->>'status'), 'created',
          'after the memory is forgotten the fact is stored again');
RESET ROLE;

-- A memory above the caller's clearance is never matched.
SET ROLE rm_writer;
SELECT memory.remember('acme', 'card 4111 1111 1111 1111 on file', user_id => 'gus');
RESET ROLE;
CREATE ROLE rm_lowwriter IN ROLE memory_writer;
SELECT memory.grant_org('rm_lowwriter', 'acme', 'internal');
SET ROLE rm_lowwriter;
SELECT is((SELECT memory.remember('acme', 'card 4111 1111 1111 1111 on file', user_id => 'gus')->>'status'), 'created',
          'a restricted memory is not matched for a role cleared to internal');
RESET ROLE;

-- ------------------------------------------------------------------------------------------------
-- The org's dedup setting
SET ROLE rm_admin;
INSERT INTO memory.org_settings (org_id, dedup) VALUES ('acme', 'off');
SET ROLE rm_writer;
SELECT is((SELECT memory.remember('acme', 'Deploys need two reviewers', user_id => 'dave')->>'status'), 'created', 'dedup off: stored');
SELECT is((SELECT memory.remember('acme', 'Deploys need two reviewers', user_id => 'dave')->>'status'), 'created', 'dedup off: stored twice');
SET ROLE rm_admin;
SELECT throws_ok($$UPDATE memory.org_settings SET dedup = 'fuzzy' WHERE org_id = 'acme'$$, '22023', NULL, 'an unknown mode: 22023');
SELECT throws_ok($$UPDATE memory.org_settings SET dedup = NULL WHERE org_id = 'acme'$$, '22023', NULL, 'a NULL mode: 22023');
SELECT throws_ok($$UPDATE memory.org_settings SET dedup_threshold = 0 WHERE org_id = 'acme'$$, '22023', NULL, 'threshold 0: 22023');
SELECT throws_ok($$UPDATE memory.org_settings SET dedup_threshold = 1.5 WHERE org_id = 'acme'$$, '22023', NULL, 'threshold 1.5: 22023');
SELECT throws_ok($$UPDATE memory.org_settings SET dedup_threshold = 'NaN' WHERE org_id = 'acme'$$, '22023', NULL, 'threshold NaN: 22023');
SELECT throws_ok($$INSERT INTO memory.org_settings (org_id, dedup) VALUES ('beta', 'nearly')$$, '22023', NULL, 'on INSERT too');
SELECT is((SELECT dedup || ' ' || dedup_threshold FROM memory.org_settings WHERE org_id = 'acme'), 'off 0.95', 'nothing changed');
-- near without embeddings and without pg_trgm: exact alone.
UPDATE memory.org_settings SET dedup = 'near', dedup_threshold = 0.5 WHERE org_id = 'acme';
SET ROLE rm_writer;
SELECT memory.remember('acme', 'Grandma''s apple pie uses cinnamon and nutmeg', user_id => 'hal');
SELECT is((SELECT memory.remember('acme', 'Grandma''s apple pie uses cinnamon, nutmeg', user_id => 'hal')->>'status'), 'created',
          'near without pg_trgm or embeddings: only exact duplicates');
RESET ROLE;
CREATE EXTENSION pg_trgm;
SET ROLE rm_writer;
CREATE TEMP TABLE m1 AS SELECT memory.remember('acme', 'Grandma''s apple pie uses cinnamon and nutmeg!', user_id => 'hal',
                                              metadata => '{"source": "chat"}') AS r;
SELECT is((SELECT r->>'status' FROM m1), 'merged', 'near with pg_trgm: a similar text is merged');
RESET ROLE;
SELECT is((SELECT metadata->>'source' FROM memory.observations WHERE id = (SELECT (r->>'id')::uuid FROM m1)), 'chat', 'its metadata merged');
SELECT is((SELECT count(*) FROM public.audit_log_now() l WHERE l.chain_id = 'acme' AND l.event_type = 'memory.merge'
            AND l.payload->>'id' = (SELECT r->>'id' FROM m1) AND l.payload->>'by' = 'trigram'), 1::bigint, 'audited memory.merge');
SET ROLE rm_writer;
CREATE TEMP TABLE m2 AS SELECT memory.remember('acme', 'Grandma''s apple pie uses cinnamon and nutmeg, api_key on file', user_id => 'hal') AS r;
SELECT is((SELECT r->>'status' || ' ' || (r->>'classification') FROM m2), 'merged confidential', 'a merge takes the stricter tier');
RESET ROLE;
SELECT is((SELECT classification::text FROM memory.observations WHERE id = (SELECT (r->>'id')::uuid FROM m2)), 'confidential', 'on the kept row');
-- The neighbour is of the same user and namespace, NULL matching NULL only (equality where
-- there is a value, IS NULL where there is none).
SET ROLE rm_writer;
CREATE TEMP TABLE nn AS SELECT memory.remember('acme', 'The shared printer on floor three jams on duplex jobs') AS r;
SELECT is(memory.remember('acme', 'The shared printer on floor three jams on duplex jobs!')->>'duplicate_of', (SELECT r->>'id' FROM nn),
          'near, no user and no namespace: merged into the memory with neither');
SELECT is(memory.remember('acme', 'The shared printer on floor three jams on duplex jobs!!', user_id => 'hal')->>'status', 'created',
          'near, a user: never merged into a memory without one');
SELECT is(memory.remember('acme', 'The shared printer on floor three jams on duplex jobs!!!', user_id => 'hal')->>'status', 'merged',
          'near, the same user: merged');
SELECT is(memory.remember('acme', 'The shared printer on floor three jams on duplex jobs?', namespace => ARRAY['it', 'printers'])->>'status', 'created',
          'near, a namespace: never merged into a memory without one');
SELECT is(memory.remember('acme', 'The shared printer on floor three jams on duplex jobs??', namespace => ARRAY['it', 'printers'])->>'status', 'merged',
          'near, the same namespace: merged');
SELECT is(memory.remember('acme', 'The shared printer on floor three jams on duplex jobs??', namespace => ARRAY['it'])->>'status', 'created',
          'near, another namespace: not merged');
SELECT is(memory.remember('acme', 'The shared printer on floor three jams on duplex jobs.', user_id => 'hal', namespace => ARRAY['it'])->>'status', 'created',
          'near, a user and a namespace: not merged into the user''s memory without the namespace, nor the namespace''s without the user');
SELECT is(memory.remember('acme', 'The shared printer on floor three jams on duplex jobs..', user_id => 'hal', namespace => ARRAY['it'])->>'status', 'merged',
          'near, the same user and namespace: merged');
RESET ROLE;
DROP EXTENSION pg_trgm;
SET ROLE rm_admin;
UPDATE memory.org_settings SET dedup = 'exact', dedup_threshold = 0.95 WHERE org_id = 'acme';

-- ------------------------------------------------------------------------------------------------
-- Bad input: 22023, nothing written
SET ROLE rm_writer;
CREATE TEMP TABLE before AS SELECT count(*) AS n FROM memory.live_observations;
SELECT throws_ok($$SELECT memory.remember('acme', NULL)$$, '22023', NULL, 'NULL content: 22023');
SELECT throws_ok($$SELECT memory.remember('acme', E' \t\n')$$, '22023', NULL, 'blank content: 22023');
SELECT throws_ok($$SELECT memory.remember(NULL, 'x')$$, '22023', NULL, 'no org: 22023');
SELECT throws_ok($$SELECT memory.remember('acme', 'x', metadata => '[]')$$, '22023', NULL, 'metadata not an object: 22023');
SELECT throws_ok($$SELECT memory.remember('acme', 'x', namespace => ARRAY['a.b'])$$, '22023', NULL, 'a bad namespace: 22023');
SELECT throws_ok($$SELECT memory.remember('acme', 'x', namespace => ARRAY[['a'], ['b']])$$, '22023', NULL, 'a namespace of two dimensions: 22023');
SELECT throws_ok($$SELECT memory.remember('acme', 'x', metadata => NULL)$$, '22023', NULL, 'NULL metadata: 22023');
SELECT throws_ok($$SELECT memory.remember('acme', 'x', user_id => ' ')$$, '22023', NULL, 'a blank user_id: 22023');
SELECT throws_ok($$SELECT memory.remember('acme', 'x', memory_type => NULL)$$, '22023', NULL, 'NULL memory_type: 22023');
SELECT throws_ok($$SELECT memory.remember('globex', 'x')$$, '42501', NULL, 'another org: 42501');
SELECT is((SELECT count(*) FROM memory.live_observations), (SELECT n FROM before), 'nothing written');
-- A label of punctuation only is a label (the checks judge it, and pass it).
SELECT is(memory.remember('acme', 'A label of punctuation only', namespace => ARRAY['-', '#1'])->>'status', 'created', 'a namespace label without letters: stored');
RESET ROLE;

-- ------------------------------------------------------------------------------------------------
-- context
SET ROLE rm_writer;
SELECT memory.remember('acme', format('Project Falcon note %s: the kickoff moved to Wednesday afternoon in room %s', i, i), user_id => 'ivy')
  FROM generate_series(1, 60) i;
SELECT memory.remember('acme', 'Project Falcon budget is approved', user_id => 'ivy');
SELECT memory.remember('acme', 'Project Falcon budget is approved!', user_id => 'ivy');
SET ROLE rm_reader;
CREATE TEMP TABLE c1 AS SELECT memory.context('acme', 'falcon', 200, '{"user_id": "ivy"}') AS c;
SELECT ok((SELECT (c->>'tokens')::int BETWEEN 1 AND 200 FROM c1), 'the block fits its budget');
SELECT ok((SELECT jsonb_array_length(c->'ids') > 1 AND (c->>'omitted')::int > 0 FROM c1), 'several memories, the rest omitted');
SELECT is((SELECT cardinality(string_to_array(c->>'text', E'\n')) FROM c1), (SELECT jsonb_array_length(c->'ids') FROM c1), 'one memory a line');
SELECT ok((SELECT c->>'text' ~ ('^\[\d{4}-\d{2}-\d{2}\] ' || (c->'ids'->>0) || ': ') FROM c1), 'each line with its date and id');
CREATE TEMP TABLE c2 AS SELECT memory.context('acme', 'falcon budget approved', 2000, '{"user_id": "ivy"}', diversity => 0) AS c;
SELECT is((SELECT count(*) FROM regexp_matches((SELECT c->>'text' FROM c2), 'budget is approved', 'g')), 1::bigint,
          'a near-duplicate is dropped');
SELECT throws_ok($$SELECT memory.context('acme', 'x', 0)$$, '22023', NULL, 'token_budget 0: 22023');
SELECT throws_ok($$SELECT memory.context('acme', 'x', 100001)$$, '22023', NULL, 'token_budget over 100000: 22023');
SELECT throws_ok($$SELECT memory.context('acme', 'x', 100, diversity => 1.5)$$, '22023', NULL, 'diversity 1.5: 22023');
SELECT throws_ok($$SELECT memory.context('acme', 'x', 100, diversity => 'NaN')$$, '22023', NULL, 'diversity NaN: 22023');
SELECT throws_ok($$SELECT memory.context('globex', 'x')$$, '42501', NULL, 'another org: 42501');
RESET ROLE;
SELECT is((SELECT l.payload->'ids' FROM public.audit_log_now() l WHERE l.chain_id = 'acme' AND l.event_type = 'memory.recall'
            ORDER BY l.seq DESC LIMIT 1) @> (SELECT c->'ids' FROM c2), true, 'audited as a memory.recall naming what it read');
-- A reader cleared to internal never sees a confidential memory in a block.
SET ROLE rm_low;
SELECT is((SELECT c->>'text' ILIKE '%api_key%' FROM (SELECT memory.context('acme', 'grandma apple pie') AS c) x), false,
          'the caller''s clearance holds');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
