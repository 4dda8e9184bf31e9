-- SQL-level suite for clearance (SPEC §11) and recall with filters (SPEC §12), as tenant roles.
BEGIN;
SELECT plan(40);

SELECT memory.setup_roles();
CREATE ROLE rc_int NOLOGIN IN ROLE memory_writer;       -- acme, cleared to internal
CREATE ROLE rc_all NOLOGIN IN ROLE memory_reader;       -- acme, no tier given: every tier
CREATE ROLE rc_pub_parent NOLOGIN;                      -- acme, public
CREATE ROLE rc_conf_parent NOLOGIN;                     -- acme, confidential
CREATE ROLE rc_multi NOLOGIN IN ROLE memory_reader, rc_pub_parent, rc_conf_parent;
CREATE ROLE rc_admin NOLOGIN IN ROLE memory_admin;      -- acme admin, cleared to confidential
CREATE ROLE rc_target NOLOGIN IN ROLE memory_reader;
GRANT rc_target TO rc_admin WITH ADMIN OPTION;

SELECT ok(memory.grant_org('rc_int', 'acme', 'internal'), 'a grant with a tier is new');
SELECT ok(memory.grant_org('rc_all', 'acme'), 'a grant without a tier');
SELECT is((SELECT max_tier FROM memory.org_grants WHERE role_name = 'rc_all'), 'restricted'::memory.classification,
          'a grant without a tier clears every tier (restricted)');
SELECT ok(NOT memory.grant_org('rc_int', 'acme', 'internal'), 'the same grant again changes nothing');
SELECT ok(memory.grant_org('rc_int', 'acme', 'public'), 'another tier replaces the grant''s');
SELECT is((SELECT max_tier FROM memory.org_grants WHERE role_name = 'rc_int'), 'public'::memory.classification, 'now public');
SELECT ok(memory.grant_org('rc_int', 'acme', 'internal'), 'and back to internal');
SELECT is((SELECT payload->>'maxTier' FROM public.audit_log_now() WHERE event_type = 'memory.org.grant' AND payload->>'role' = 'rc_int'
            ORDER BY seq DESC LIMIT 1), 'internal', 'memory.org.grant records the tier');
SELECT throws_ok($$ SELECT memory.grant_org('rc_int', 'acme', NULL) $$, '22023', NULL, 'a NULL max_tier is 22023');
SELECT memory.grant_org('rc_pub_parent', 'acme', 'public');
SELECT memory.grant_org('rc_conf_parent', 'acme', 'confidential');
SELECT memory.grant_org('rc_admin', 'acme', 'confidential');

-- One row of each tier in acme (a supplied tier is a floor), one in globex, one archived.
INSERT INTO memory.observations (id, org_id, user_id, content, source_files, classification, created_at) VALUES
  ('00000000-0000-0000-0000-0000000000a1', 'acme', 'u1', 'alpha report one', '{docs/a.md}', 'public', now() - interval '4 hours'),
  ('00000000-0000-0000-0000-0000000000a2', 'acme', 'u1', 'alpha report two', NULL, 'internal', now() - interval '3 hours'),
  ('00000000-0000-0000-0000-0000000000a3', 'acme', 'u2', 'alpha report three', NULL, 'confidential', now() - interval '2 hours'),
  ('00000000-0000-0000-0000-0000000000a4', 'acme', 'u2', 'alpha report four', NULL, 'restricted', now() - interval '1 hour'),
  ('00000000-0000-0000-0000-0000000000b1', 'globex', 'u1', 'alpha report globex', NULL, 'internal', now());
INSERT INTO memory.observations_archive (id, org_id, content, classification) VALUES
  ('00000000-0000-0000-0000-0000000000c1', 'acme', 'archived internal', 'internal'),
  ('00000000-0000-0000-0000-0000000000c2', 'acme', 'archived restricted', 'restricted');
SELECT is(ARRAY(SELECT classification::text FROM memory.observations WHERE org_id = 'acme' ORDER BY id),
          ARRAY['public', 'internal', 'confidential', 'restricted'], 'one acme row of each tier');

-- Row-level security.
SET ROLE rc_int;
SELECT is(ARRAY(SELECT id::text FROM memory.observations ORDER BY id),
          ARRAY['00000000-0000-0000-0000-0000000000a1', '00000000-0000-0000-0000-0000000000a2'],
          'a role cleared to internal reads no row above it from memory.observations');
SELECT is((SELECT count(*) FROM memory.live_observations), 2::bigint, 'nor from live_observations');
SELECT is(ARRAY(SELECT id::text FROM memory.observations_archive ORDER BY id), ARRAY['00000000-0000-0000-0000-0000000000c1'],
          'nor from the archive');
SELECT is((SELECT count(*) FROM memory.observations WHERE classification = 'restricted'), 0::bigint, 'asking for them by tier finds nothing');
SELECT lives_ok($$ INSERT INTO memory.observations (org_id, content) VALUES ('acme', 'a new note with pii') $$,
                'a write classified above the writer''s clearance is not refused');
SELECT throws_ok($$ INSERT INTO memory.observations (org_id, content) VALUES ('acme', 'another note with pii') RETURNING id $$,
                 '42501', NULL, 'but RETURNING, which reads it back, is');
RESET ROLE;
SET ROLE rc_all;
SELECT is((SELECT count(*) FROM memory.observations WHERE id::text LIKE '00000000-0000-0000-0000-0000000000a_'), 4::bigint, 'a grant without a tier reads every tier');
SELECT is((SELECT count(*) FROM memory.observations_archive), 2::bigint, 'and the whole archive');
RESET ROLE;
SET ROLE rc_multi;
SELECT is(ARRAY(SELECT classification::text FROM memory.observations ORDER BY id), ARRAY['public', 'internal', 'confidential'],
          'of several grants that apply in one org, the highest tier counts');
RESET ROLE;

-- recall.
SET ROLE rc_int;
SELECT is(ARRAY(SELECT id::text FROM memory.recall('acme', 'alpha report') ORDER BY id),
          ARRAY['00000000-0000-0000-0000-0000000000a1', '00000000-0000-0000-0000-0000000000a2'],
          'recall returns no row above the caller''s clearance');
SELECT is(ARRAY(SELECT id::text FROM memory.recall('acme', 'alpha report', filters => '{"max_tier": "restricted"}') ORDER BY id),
          ARRAY['00000000-0000-0000-0000-0000000000a1', '00000000-0000-0000-0000-0000000000a2'],
          'a max_tier filter never raises the clearance');
SELECT throws_ok($$ SELECT * FROM memory.recall('globex', 'alpha') $$, '42501', NULL, 'recall of another org is 42501');
RESET ROLE;
SET ROLE rc_all;
SELECT is((SELECT count(*) FROM memory.recall('acme', 'alpha report')), 4::bigint, 'every tier for a role cleared to restricted');
SELECT is(ARRAY(SELECT id::text FROM memory.recall('acme', 'alpha report', filters => '{"max_tier": "public"}')),
          ARRAY['00000000-0000-0000-0000-0000000000a1'], 'a max_tier filter lowers it');
SELECT is(ARRAY(SELECT id::text FROM memory.recall('acme', '', 3, NULL, '{"user_id": "u2"}')),
          ARRAY['00000000-0000-0000-0000-0000000000a4', '00000000-0000-0000-0000-0000000000a3'],
          'a blank query with filters lists the newest matching memories');
SELECT ok((SELECT bool_and(score IS NULL) FROM memory.recall('acme', '', 3, NULL, '{"user_id": "u2"}')), 'with no score');
SELECT is_empty($$ SELECT * FROM memory.recall('acme', '   ') $$, 'a blank query without filters returns nothing, as before');
SELECT results_eq(
    $$ SELECT id, content, classification, weight, score FROM memory.recall('acme', 'alpha report', 10) $$,
    $$ SELECT o.id, o.content, o.classification, o.weight,
              (ts_rank_cd(to_tsvector('english', o.content), websearch_to_tsquery('english', 'alpha report')) * o.weight)::float8
         FROM memory.observations o
        WHERE o.org_id = 'acme' AND to_tsvector('english', o.content) @@ websearch_to_tsquery('english', 'alpha report')
        ORDER BY 5 DESC, o.id $$,
    'the four-argument form returns the rows, scores and order of 0.2.0''s');
-- (a4 has all three words: first; memories with some of them follow.)
SELECT results_eq($$ SELECT created_at, user_id, session_id, memory_type FROM memory.recall('acme', 'alpha report four') LIMIT 1 $$,
                  $$ SELECT created_at, user_id, session_id, memory_type FROM memory.observations WHERE id = '00000000-0000-0000-0000-0000000000a4' $$,
                  'and the new columns after them');
SELECT throws_ok($$ SELECT * FROM memory.recall('acme', 'x', filters => '{"colour": "red"}') $$, '22023', 'unknown memory.recall filter "colour"',
                 'an unknown filter key is 22023');
SELECT throws_ok($$ SELECT * FROM memory.recall('acme', 'x', filters => '{"user_id": 7}') $$, '22023', NULL, 'a wrong value type is 22023');
SELECT throws_ok($$ SELECT * FROM memory.recall('acme', 'x', filters => '[]') $$, '22023', NULL, 'filters that are not an object are 22023');
SELECT throws_ok($$ SELECT * FROM memory.recall('acme', 'x', 1001) $$, '22023', NULL, 'k above 1000 is 22023');
SELECT throws_ok($$ SELECT * FROM memory.recall(' ', 'x') $$, '22023', 'memory.recall needs an org_id', 'a blank org is 22023, as a NULL one');
SELECT throws_ok($$ SELECT * FROM memory.recall('acme', 'x', query_embedding => '{0.1,0.2}') $$, '22023', NULL,
                 'a query embedding without memory.enable_embeddings is 22023 (tests/sql/19_vector.sql: with pgvector)');
SELECT throws_ok($$ SELECT * FROM memory.recall('acme', 'x', source => 'memory.observations_archive') $$, '22023', NULL,
                 'a source that is not governed is 22023');
SELECT throws_ok($$ SELECT * FROM memory.recall('acme', 'x', source => '-'::regclass) $$, '22023', 'memory.recall: - is not governed',
                 'the invalid regclass (''-'', 0) as source is 22023, as any table that is not governed');
RESET ROLE;

-- Who clears whom: an org admin no higher than itself.
SET ROLE rc_admin;
SELECT throws_ok($$ SELECT memory.grant_org('rc_target', 'acme', 'restricted') $$, '42501', NULL,
                 'an admin cleared to confidential may not clear a role for restricted');
SELECT throws_ok($$ SELECT memory.grant_org('rc_target', 'acme') $$, '42501', NULL, 'nor by omitting the tier');
SELECT ok(memory.grant_org('rc_target', 'acme', 'confidential'), 'up to its own tier it may');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
