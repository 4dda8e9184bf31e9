-- SQL-level suite for lineage (issue 50, SPEC §18): derived_from's checks, the tier, trust and
-- retention floors at write and when a source changes, memory.lineage within clearance, and
-- forgetting and erasure following lineage (held descendants kept), as tenant-bound roles.
BEGIN;
SELECT plan(60);

SELECT memory.setup_roles();
CREATE ROLE ln_writer IN ROLE memory_writer;
CREATE ROLE ln_low IN ROLE memory_writer, memory_reader;
CREATE ROLE ln_reader IN ROLE memory_reader;
CREATE ROLE ln_internal IN ROLE memory_reader;
CREATE ROLE ln_globex IN ROLE memory_writer;
CREATE ROLE ln_admin IN ROLE memory_admin;
GRANT EXECUTE ON FUNCTION memory.reclassify(uuid, memory.classification, text) TO ln_admin;
SELECT memory.grant_org('ln_writer', 'acme'), memory.grant_org('ln_reader', 'acme'), memory.grant_org('ln_internal', 'acme', 'internal'),
       memory.grant_org('ln_low', 'acme', 'internal'), memory.grant_org('ln_globex', 'globex'), memory.grant_org('ln_admin', 'acme');

CREATE TEMP TABLE ids (name text PRIMARY KEY, id uuid);
GRANT SELECT, INSERT ON ids TO PUBLIC;
CREATE FUNCTION pg_temp.id(n text) RETURNS uuid LANGUAGE sql AS $$ SELECT id FROM ids WHERE name = n $$;

-- ------------------------------------------------------------------------------------------------
-- Sources and a summary: the tier floor, the trust floor, the retention ceiling.
SET ROLE ln_writer;
WITH x AS (INSERT INTO memory.observations (org_id, user_id, content, source_type)
    VALUES ('acme', 'alice', 'Alice asked about the mortgage rates', 'tool_result') RETURNING id) INSERT INTO ids SELECT 'note', id FROM x;
WITH x AS (INSERT INTO memory.observations (org_id, user_id, content, classification, source_type)
    VALUES ('acme', 'alice', 'Alice disclosed her medical condition', 'restricted', 'fact') RETURNING id) INSERT INTO ids SELECT 'secret', id FROM x;
WITH x AS (INSERT INTO memory.observations (org_id, user_id, content, source_type, derived_from)
    VALUES ('acme', 'alice', 'Alice: mortgage questions and a personal matter', 'decision',
            ARRAY[pg_temp.id('note'), pg_temp.id('secret')]) RETURNING id) INSERT INTO ids SELECT 'summary', id FROM x;
RESET ROLE;
SELECT is((SELECT classification FROM memory.observations WHERE id = pg_temp.id('note')), 'internal'::memory.classification, 'the plain source is internal');
SELECT is((SELECT classification FROM memory.observations WHERE id = pg_temp.id('summary')), 'restricted'::memory.classification,
          'a summary of a restricted memory is restricted');
SELECT is((SELECT metadata->>'classification' FROM memory.observations WHERE id = pg_temp.id('summary')), 'restricted',
          'its metadata says so too');
SELECT is((SELECT source_type FROM memory.observations WHERE id = pg_temp.id('summary')), 'tool_result'::memory.source_type,
          'a summary is trusted no more than its least trusted source (decision over a tool_result is a tool_result)');
SELECT ok((SELECT s.expires_at IS NOT DISTINCT FROM (SELECT min(expires_at) FROM memory.observations WHERE id IN (pg_temp.id('note'), pg_temp.id('secret')))
                  OR s.expires_at < (SELECT min(expires_at) FROM memory.observations WHERE id IN (pg_temp.id('note'), pg_temp.id('secret')))
             FROM memory.observations s WHERE s.id = pg_temp.id('summary')),
          'its retention ends no later than its sources''');

SET ROLE ln_internal;
SELECT is((SELECT count(*) FROM memory.observations WHERE id = pg_temp.id('summary')), 0::bigint, 'a reader cleared to internal does not read the summary');
SELECT is((SELECT count(*) FROM memory.recall('acme', 'mortgage', 10) r WHERE r.id = pg_temp.id('summary')), 0::bigint, 'nor recalls it');
RESET ROLE;

-- Retention: a source that ends sooner shortens what was made from it, now and later.
UPDATE memory.observations SET expires_at = now() + interval '3 days', purge_after = now() + interval '10 days' WHERE id = pg_temp.id('note');
SELECT is((SELECT expires_at FROM memory.observations WHERE id = pg_temp.id('summary')), now() + interval '3 days',
          'a source''s shorter retention reaches the summary');
SELECT ok((SELECT purge_after <= now() + interval '10 days' FROM memory.observations WHERE id = pg_temp.id('summary')), 'and its purge time');
SET ROLE ln_writer;
WITH x AS (INSERT INTO memory.observations (org_id, content, derived_from)
    VALUES ('acme', 'The mortgage question was answered', ARRAY[pg_temp.id('note')]) RETURNING id) INSERT INTO ids SELECT 'late', id FROM x;
RESET ROLE;
SELECT is((SELECT expires_at FROM memory.observations WHERE id = pg_temp.id('late')), now() + interval '3 days',
          'a memory made later from it is stamped no later than it');

-- ------------------------------------------------------------------------------------------------
-- Bad input: the same 22023 for another org's id and a missing one; nothing written.
SET ROLE ln_globex;
WITH x AS (INSERT INTO memory.observations (org_id, content) VALUES ('globex', 'Globex quarterly plan') RETURNING id) INSERT INTO ids SELECT 'globex', id FROM x;
RESET ROLE;
SET ROLE ln_writer;
SELECT throws_ok(format($$ INSERT INTO memory.observations (org_id, content, derived_from) VALUES ('acme', 'x summary', ARRAY[%L::uuid]) $$, pg_temp.id('globex')),
                 '22023', format('derived_from names memory %s, which is not a memory of org "acme"', pg_temp.id('globex')),
                 'another org''s memory is not a source');
SELECT throws_ok($$ INSERT INTO memory.observations (org_id, content, derived_from) VALUES ('acme', 'x summary', ARRAY['00000000-0000-0000-0000-00000000dead'::uuid]) $$,
                 '22023', 'derived_from names memory 00000000-0000-0000-0000-00000000dead, which is not a memory of org "acme"',
                 'a missing id is told the same way');
SELECT throws_ok(format($$ INSERT INTO memory.observations (org_id, content, derived_from) VALUES ('acme', 'x summary', ARRAY[%L::uuid, NULL]) $$, pg_temp.id('note')),
                 '22023', 'derived_from takes no NULL id (element 2)', 'a NULL element is refused');
SELECT throws_ok(format($$ INSERT INTO memory.observations (org_id, content, derived_from) SELECT 'acme', 'x summary', array_fill(%L::uuid, ARRAY[1001]) $$, pg_temp.id('note')),
                 '22023', 'derived_from names at most 1,000 memories (1001 given)', 'more than 1,000 sources are refused');
SELECT throws_ok($$ INSERT INTO memory.observations (id, org_id, content, derived_from)
                    VALUES ('00000000-0000-0000-0000-0000000000aa', 'acme', 'x summary', ARRAY['00000000-0000-0000-0000-0000000000aa'::uuid]) $$,
                 '22023', 'memory 00000000-0000-0000-0000-0000000000aa cannot be derived from itself', 'a memory is not its own source');
SELECT throws_ok(format($$ INSERT INTO memory.observations (org_id, content, derived_from) VALUES ('acme', 'x summary', ARRAY[ARRAY[%L::uuid]]) $$, pg_temp.id('note')),
                 '22023', 'derived_from takes a one-dimensional array of memory ids', 'an array of arrays is refused');
RESET ROLE;
SELECT is((SELECT count(*) FROM memory.observations WHERE content = 'x summary'), 0::bigint, 'nothing was written for a refused source list');
SELECT throws_ok(format($$ UPDATE memory.observations SET derived_from = ARRAY[%L::uuid] WHERE id = %L $$, pg_temp.id('summary'), pg_temp.id('note')),
                 '22023', NULL, 'a cycle (a source made from its own summary) is refused');
SET ROLE ln_low;
SELECT throws_ok(format($$ INSERT INTO memory.observations (org_id, content, derived_from) VALUES ('acme', 'low summary', ARRAY[%L::uuid]) $$, pg_temp.id('secret')),
                 '22023', NULL, 'a writer cleared below a source may not name it (as a missing id)');
RESET ROLE;

-- ------------------------------------------------------------------------------------------------
-- A source raised later raises what was made from it, audited; a hold does not stop it.
SET ROLE ln_writer;
WITH x AS (INSERT INTO memory.observations (org_id, user_id, content, classification) VALUES ('acme', 'carol', 'Carol likes hiking', 'public') RETURNING id) INSERT INTO ids SELECT 'plain', id FROM x;
WITH x AS (INSERT INTO memory.observations (org_id, user_id, content, derived_from) VALUES ('acme', 'carol', 'Carol: outdoor person', ARRAY[pg_temp.id('plain')]) RETURNING id) INSERT INTO ids SELECT 'digest', id FROM x;
WITH x AS (INSERT INTO memory.observations (org_id, user_id, content, derived_from) VALUES ('acme', 'carol', 'Carol profile', ARRAY[pg_temp.id('digest')]) RETURNING id) INSERT INTO ids SELECT 'digest2', id FROM x;
RESET ROLE;
INSERT INTO memory.legal_holds (org_id, observation_id, reason) VALUES ('acme', pg_temp.id('digest2'), 'case 12');
SET ROLE ln_admin;
SELECT memory.reclassify(pg_temp.id('plain'), 'confidential', 'it names a person');
RESET ROLE;
SELECT is((SELECT classification FROM memory.observations WHERE id = pg_temp.id('digest')), 'confidential'::memory.classification,
          'reclassify raises the memories made from it');
SELECT is((SELECT classification FROM memory.observations WHERE id = pg_temp.id('digest2')), 'confidential'::memory.classification,
          'transitively, held or not');
SELECT ok((SELECT count(*) >= 2 FROM public.audit_log_now() l WHERE l.event_type = 'memory.reclassify'
             AND l.payload->>'id' IN (pg_temp.id('digest')::text, pg_temp.id('digest2')::text)), 'each raise is audited');
SELECT is((SELECT classification FROM memory.revisions WHERE memory_id = pg_temp.id('digest') ORDER BY rev DESC LIMIT 1), 'confidential'::memory.classification,
          'the kept revision is raised with it');
SET ROLE ln_admin;
SELECT memory.reclassify(pg_temp.id('digest'), 'public', 'mistake');
RESET ROLE;
SELECT is((SELECT classification FROM memory.observations WHERE id = pg_temp.id('digest')), 'confidential'::memory.classification,
          'a derived memory is never lowered below its sources');

-- ------------------------------------------------------------------------------------------------
-- memory.lineage: up and down, with depth, within clearance.
SET ROLE ln_reader;
SELECT is((SELECT array_agg(id ORDER BY id) FROM memory.lineage(pg_temp.id('summary'))), (SELECT array_agg(x ORDER BY x) FROM unnest(ARRAY[pg_temp.id('note'), pg_temp.id('secret')]) x),
          'up: the sources');
SELECT is((SELECT array_agg(depth ORDER BY depth) FROM memory.lineage(pg_temp.id('digest2'), 'up')), ARRAY[1, 2], 'up: with depth, transitively');
SELECT is((SELECT array_agg(id ORDER BY depth) FROM memory.lineage(pg_temp.id('plain'), 'down')), ARRAY[pg_temp.id('digest'), pg_temp.id('digest2')],
          'down: what was made from it');
RESET ROLE;
SET ROLE ln_internal;
SELECT is((SELECT count(*) FROM memory.lineage(pg_temp.id('note'), 'down') WHERE id = pg_temp.id('summary')), 0::bigint,
          'down: a restricted summary is not shown to a reader cleared to internal');
SELECT is((SELECT count(*) FROM memory.lineage(pg_temp.id('summary'))), 0::bigint, 'a memory above the clearance has no lineage to show');
RESET ROLE;
SET ROLE ln_globex;
SELECT is((SELECT count(*) FROM memory.lineage(pg_temp.id('summary'))), 0::bigint, 'another org''s memory has no lineage to show');
RESET ROLE;
SELECT throws_ok($$ SELECT * FROM memory.lineage(gen_random_uuid(), 'sideways') $$, '22023', NULL, 'a bad direction is refused');

-- ------------------------------------------------------------------------------------------------
-- Forgetting follows lineage; a held descendant stays; the receipt covers what went.
SET ROLE ln_writer;
SELECT is((memory.forget(ARRAY[pg_temp.id('plain')], 'user request 1')->'derived_forgotten'), to_jsonb(ARRAY[pg_temp.id('digest')]),
          'forget takes what was made from a memory, and says so');
SELECT is((SELECT jsonb_agg(x) FROM jsonb_array_elements_text(memory.forget(ARRAY[pg_temp.id('plain')], 'again')->'not_found') x), to_jsonb(ARRAY[pg_temp.id('plain')::text]),
          'the source is gone');
RESET ROLE;
SELECT is((SELECT count(*) FROM memory.observations WHERE id = pg_temp.id('digest')), 0::bigint, 'the derived memory is gone');
SELECT is((SELECT count(*) FROM memory.revisions WHERE memory_id = pg_temp.id('digest')), 0::bigint, 'with its revisions');
SELECT is((SELECT count(*) FROM memory.observations WHERE id = pg_temp.id('digest2')), 1::bigint, 'a held memory made from it stays');
-- (forget asks the hold in its own DELETE with the hold gate open: the gate is closed again after)
SELECT throws_ok(format('DELETE FROM memory.observations WHERE id = %L', pg_temp.id('digest2')), 'MX006', NULL,
                 'and after the forget, in the same transaction, the held memory''s DELETE is refused again');

-- A writer cleared to internal forgets a source: what it may read that was made from it goes; the
-- restricted summary stays, unnamed, no longer naming the source, and the org's admins are told.
SET ROLE ln_low;
SELECT is((SELECT r->'derived_forgotten' FROM memory.forget(ARRAY[pg_temp.id('note')], 'user request 2') r), to_jsonb(ARRAY[pg_temp.id('late')]),
          'forget takes what the caller may read that was made from it');
RESET ROLE;
SELECT is((SELECT count(*) FROM memory.observations WHERE id = pg_temp.id('late')), 0::bigint, 'it is gone');
SELECT is((SELECT derived_from FROM memory.observations WHERE id = pg_temp.id('summary')), ARRAY[pg_temp.id('secret')],
          'a summary above the caller''s clearance stays, no longer naming the forgotten source');
SELECT ok((SELECT l.payload->'derived_kept' = to_jsonb(ARRAY[pg_temp.id('summary')]) FROM public.audit_log_now() l
            WHERE l.event_type = 'memory.forget' AND l.payload->>'reason' = 'user request 2'),
          'the memory.forget event names it for the org''s admins (derived_kept)');
SELECT ok((SELECT l.payload->'forgotten' @> jsonb_build_array(jsonb_build_object('id', pg_temp.id('late'), 'derived', true))
             FROM public.audit_log_now() l WHERE l.event_type = 'memory.forget' AND l.payload->>'reason' = 'user request 2'),
          'the memory.forget event names every memory that went');

SET ROLE ln_writer;
WITH x AS (INSERT INTO memory.observations (org_id, content) VALUES ('acme', 'Order 9 was late') RETURNING id) INSERT INTO ids SELECT 'src9', id FROM x;
WITH x AS (INSERT INTO memory.observations (org_id, content, derived_from) VALUES ('acme', 'Orders are often late', ARRAY[pg_temp.id('src9')]) RETURNING id) INSERT INTO ids SELECT 'sum9', id FROM x;
CREATE TEMP TABLE rcpt AS SELECT memory.forget(ARRAY[pg_temp.id('src9')], 'user request 3')->'receipt' AS r;
RESET ROLE;
GRANT SELECT ON rcpt TO PUBLIC;
SET ROLE ln_admin;
SELECT is((SELECT bool_and(ok) FROM memory.verify_receipt((SELECT r FROM rcpt))), true, 'the receipt of a forget with lineage verifies');
RESET ROLE;
SELECT is((SELECT count(*) FROM memory.erasure_receipts e WHERE e.ids->'memory.observations' @> to_jsonb(ARRAY[pg_temp.id('sum9')::text])), 1::bigint,
          'and covers the derived memory');

-- ------------------------------------------------------------------------------------------------
-- Erasure follows lineage: another user's summary of the subject's memories goes.
SET ROLE ln_writer;
WITH x AS (INSERT INTO memory.observations (org_id, user_id, content) VALUES ('acme', 'eve', 'Eve moved to Leeds') RETURNING id) INSERT INTO ids SELECT 'eve', id FROM x;
WITH x AS (INSERT INTO memory.observations (org_id, user_id, content, derived_from) VALUES ('acme', 'frank', 'The team: Eve is in Leeds', ARRAY[pg_temp.id('eve')]) RETURNING id) INSERT INTO ids SELECT 'team', id FROM x;
RESET ROLE;
SELECT is((memory.erase_subject('eve')->'derived_forgotten'), to_jsonb(ARRAY[pg_temp.id('team')]), 'erase_subject takes what was made from the subject''s memories');
SELECT is((SELECT count(*) FROM memory.observations WHERE id = pg_temp.id('team')), 0::bigint, 'it is gone');

-- ------------------------------------------------------------------------------------------------
-- remember and put take derived_from.
SET ROLE ln_writer;
WITH x AS (INSERT INTO memory.observations (org_id, content, classification) VALUES ('acme', 'Board minutes March', 'confidential') RETURNING id) INSERT INTO ids SELECT 'r1', id FROM x;
INSERT INTO ids SELECT 'rem', (memory.remember('acme', 'The board met in March', derived_from => ARRAY[pg_temp.id('r1')])->>'id')::uuid;
WITH x AS (INSERT INTO memory.observations (org_id, content) VALUES ('acme', 'Board minutes April') RETURNING id) INSERT INTO ids SELECT 'r2', id FROM x;
SELECT is((memory.remember('acme', 'The board met in March', derived_from => ARRAY[pg_temp.id('r2')])->>'status'), 'duplicate', 'remembered again');
SELECT memory.put('acme', ARRAY['notes'], 'board', '{"text": "board summary"}', derived_from => ARRAY[pg_temp.id('r1')]);
RESET ROLE;
SELECT is((SELECT classification FROM memory.observations WHERE id = pg_temp.id('rem')), 'confidential'::memory.classification, 'remember keeps the tier floor');
SELECT is((SELECT derived_from FROM memory.observations WHERE id = pg_temp.id('rem')), ARRAY[pg_temp.id('r1')],
          'a duplicate leaves the kept memory''s sources as they are');
SET ROLE ln_writer;
SELECT memory.put('acme', ARRAY['notes'], 'board', '{"text": "board summary, April"}', derived_from => ARRAY[pg_temp.id('r2')]);
SELECT memory.put('acme', ARRAY['notes'], 'board', '{"text": "board summary, April and March"}');
RESET ROLE;
SELECT is((SELECT derived_from FROM memory.observations WHERE key = 'board'), ARRAY[pg_temp.id('r1'), pg_temp.id('r2')],
          'a put adds sources and never drops one');
SELECT is((SELECT classification FROM memory.observations WHERE key = 'board'), 'confidential'::memory.classification, 'put keeps the tier floor');

-- ------------------------------------------------------------------------------------------------
-- A deep lineage is raised in one statement; an id written again is never a source of the past.
SET ROLE ln_writer;
WITH x AS (INSERT INTO memory.observations (org_id, content, classification) VALUES ('acme', 'Chain root', 'public') RETURNING id) INSERT INTO ids SELECT 'root', id FROM x;
DO $$
DECLARE p uuid := pg_temp.id('root');
BEGIN
    FOR i IN 1..300 LOOP
        INSERT INTO memory.observations (org_id, content, derived_from) VALUES ('acme', 'Chain link ' || i, ARRAY[p]) RETURNING id INTO p;
    END LOOP;
    INSERT INTO ids VALUES ('tail', p);
END $$;
RESET ROLE;
SET ROLE ln_admin;
SELECT memory.reclassify(pg_temp.id('root'), 'confidential', 'names a client');
RESET ROLE;
SELECT is((SELECT count(*) FROM memory.observations WHERE content LIKE 'Chain link %' AND classification = 'confidential'), 300::bigint,
          'a lineage 300 deep is raised to the end');
SET ROLE ln_reader;
SELECT is((SELECT max(depth) FROM memory.lineage(pg_temp.id('tail'))), 300, 'lineage walks it up');
RESET ROLE;
SELECT throws_ok(format($$ UPDATE memory.observations SET derived_from = ARRAY[%L::uuid] WHERE id = %L $$, pg_temp.id('tail'), pg_temp.id('root')),
                 '22023', NULL, 'a cycle through 300 links is refused');
SET ROLE ln_writer;
WITH x AS (INSERT INTO memory.observations (org_id, task_id, memory_type, content) VALUES ('acme', 't9', 'working', 'Scratch note of task 9') RETURNING id) INSERT INTO ids SELECT 'scratch', id FROM x;
WITH x AS (INSERT INTO memory.observations (org_id, content, derived_from) VALUES ('acme', 'What task 9 found', ARRAY[pg_temp.id('scratch')]) RETURNING id) INSERT INTO ids SELECT 'found', id FROM x;
SELECT memory.end_task('t9');
RESET ROLE;
SELECT is((SELECT derived_from FROM memory.observations WHERE id = pg_temp.id('found')), NULL::uuid[], 'a source gone by end_task is no longer named');
SET ROLE ln_writer;
INSERT INTO memory.observations (id, org_id, content) VALUES (pg_temp.id('scratch'), 'acme', 'bait with the old id');
SELECT is((memory.forget(ARRAY[pg_temp.id('scratch')], 'x')->'derived_forgotten'), '[]'::jsonb, 'so a new row with its id takes nothing with it');
RESET ROLE;
SELECT is((SELECT count(*) FROM memory.observations WHERE id = pg_temp.id('found')), 1::bigint, 'what was made from the old one stays');

-- The derived_from indexes keep GIN's pending list (a derived insert appends its entries; the
-- integrator and forgetting move them into the tree): every search above read it as it was.
SELECT is((SELECT reloptions FROM pg_class WHERE oid = 'memory.observations_derived_from'::regclass),
          ARRAY['fastupdate=on', 'gin_pending_list_limit=4096'], 'the derived_from index appends to a pending list of 4 MB');
SELECT is((SELECT reloptions FROM pg_class WHERE oid = 'memory.observations_archive_derived_from'::regclass),
          ARRAY['fastupdate=on', 'gin_pending_list_limit=4096'], 'and so does the archive''s');
SELECT ok(NOT has_function_privilege('ln_writer', 'memory_internal._lineage_flush()', 'EXECUTE')
          AND NOT has_function_privilege('ln_admin', 'memory_internal._lineage_flush()', 'EXECUTE'),
          'moving the pending entries is memory_ext''s own (not granted to a writer or an admin)');

SELECT * FROM finish();
ROLLBACK;
