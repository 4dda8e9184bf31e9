-- SQL-level suite for memory.retrieve (SPEC §12, seed knowledge-lifecycle §4.6), as tenant roles:
-- active claims only, decay, tenants, clearance, consent, freshness marks, ranking, the audit
-- event, and every refused argument.
BEGIN;
SELECT plan(49);

SELECT memory.setup_roles();
CREATE ROLE rt_reader NOLOGIN IN ROLE memory_reader;    -- acme, every tier
CREATE ROLE rt_int NOLOGIN IN ROLE memory_reader;       -- acme, cleared to internal
CREATE ROLE rt_writer NOLOGIN IN ROLE memory_writer;    -- acme
CREATE ROLE rt_admin NOLOGIN IN ROLE memory_admin;      -- acme
CREATE ROLE rt_globex NOLOGIN IN ROLE memory_reader;    -- globex
CREATE ROLE rt_nobody NOLOGIN;                          -- bound to acme, but no memory_ext role
SELECT memory.grant_org('rt_reader', 'acme');
SELECT memory.grant_org('rt_int', 'acme', 'internal');
SELECT memory.grant_org('rt_writer', 'acme');
SELECT memory.grant_org('rt_admin', 'acme');
SELECT memory.grant_org('rt_globex', 'globex');
SELECT memory.grant_org('rt_nobody', 'acme');

-- Who may call it: the seed's read path (memory.read, consent-scoped), so every memory_ext role.
SELECT ok(has_function_privilege('memory_reader', 'memory.retrieve(text, text, int, uuid, text, text, anycompatible, timestamptz)', 'EXECUTE')
          AND has_function_privilege('memory_writer', 'memory.retrieve(text, text, int, uuid, text, text, anycompatible, timestamptz)', 'EXECUTE')
          AND has_function_privilege('memory_admin', 'memory.retrieve(text, text, int, uuid, text, text, anycompatible, timestamptz)', 'EXECUTE'),
          'memory_reader, memory_writer and memory_admin may retrieve');
SELECT ok(NOT has_function_privilege('rt_nobody', 'memory.retrieve(text, text, int, uuid, text, text, anycompatible, timestamptz)', 'EXECUTE'),
          'a role without a memory_ext role may not');

-- Claims (ids ...c1..), inserted pending and promoted by the superuser. e1, e2 of acme; eg of globex.
INSERT INTO memory.entities (id, org_id, entity_type, name) VALUES
  ('00000000-0000-0000-0000-0000000000e1', 'acme', 'intervention', 'aspirin'),
  ('00000000-0000-0000-0000-0000000000e2', 'acme', 'problem', 'stroke'),
  ('00000000-0000-0000-0000-0000000000e9', 'globex', 'intervention', 'aspirin');
INSERT INTO memory.claims (id, org_id, entity_id, claim_text, confidence_score, field, subject_id, pii_fields, decay_at, t_created) VALUES
  -- c1, c2: the same text (the same score), confidence breaks the tie; c1 is 10 days old
  ('00000000-0000-0000-0000-0000000000c1', 'acme', '00000000-0000-0000-0000-0000000000e1', 'aspirin lowers stroke risk', 0.9, 'bp', NULL, '{}', NULL, now() - interval '10 days'),
  ('00000000-0000-0000-0000-0000000000c2', 'acme', '00000000-0000-0000-0000-0000000000e1', 'aspirin lowers stroke risk', 0.6, 'bp', NULL, '{}', NULL, now()),
  -- c3: more relevant (both words, twice), least confident: relevance ranks first
  ('00000000-0000-0000-0000-0000000000c3', 'acme', '00000000-0000-0000-0000-0000000000e2', 'aspirin stroke: aspirin after stroke', 0.1, NULL, NULL, '{}', NULL, now()),
  -- c4 stays pending; c5 is retracted; c6 decays tomorrow; c7 decayed an hour ago (not swept yet)
  ('00000000-0000-0000-0000-0000000000c4', 'acme', '00000000-0000-0000-0000-0000000000e1', 'aspirin pending stroke', 1.0, NULL, NULL, '{}', NULL, now()),
  ('00000000-0000-0000-0000-0000000000c5', 'acme', '00000000-0000-0000-0000-0000000000e1', 'aspirin retracted stroke', 1.0, NULL, NULL, '{}', NULL, now()),
  ('00000000-0000-0000-0000-0000000000c6', 'acme', '00000000-0000-0000-0000-0000000000e1', 'aspirin decays tomorrow stroke', 0.5, NULL, NULL, '{}', now() + interval '1 day', now()),
  ('00000000-0000-0000-0000-0000000000c7', 'acme', '00000000-0000-0000-0000-0000000000e1', 'aspirin decayed stroke', 0.5, NULL, NULL, '{}', now() - interval '1 hour', now() - interval '2 days'),
  -- c8 classifies confidential (a secret word); c9 is about user u1, ca about u2 (PHI: restricted)
  ('00000000-0000-0000-0000-0000000000c8', 'acme', '00000000-0000-0000-0000-0000000000e1', 'aspirin stroke password list', 0.5, NULL, NULL, '{}', NULL, now()),
  ('00000000-0000-0000-0000-0000000000c9', 'acme', '00000000-0000-0000-0000-0000000000e1', 'aspirin stroke of the patient', 0.5, NULL, 'u1', '{subject_id}', NULL, now()),
  ('00000000-0000-0000-0000-0000000000ca', 'acme', '00000000-0000-0000-0000-0000000000e2', 'patient note two', 0.5, NULL, 'u2', '{}', NULL, now()),
  -- globex's claim, the same words
  ('00000000-0000-0000-0000-0000000000d1', 'globex', '00000000-0000-0000-0000-0000000000e9', 'aspirin lowers stroke risk', 1.0, NULL, NULL, '{}', NULL, now());
UPDATE memory.claims SET lifecycle_state = 'active' WHERE id <> '00000000-0000-0000-0000-0000000000c4';
UPDATE memory.claims SET lifecycle_state = 'retracted' WHERE id = '00000000-0000-0000-0000-0000000000c5';
INSERT INTO memory.screen_profiles (org_id, profile, field, freshness_days) VALUES (NULL, 'clinic', 'bp', 5), ('globex', 'g_only', 'bp', 1);

-- The retrievals, as the reader of acme.
SET ROLE rt_reader;
SELECT is(ARRAY(SELECT id::text FROM memory.retrieve('acme', 'aspirin stroke') ORDER BY id),
          ARRAY['00000000-0000-0000-0000-0000000000c1', '00000000-0000-0000-0000-0000000000c2', '00000000-0000-0000-0000-0000000000c3',
                '00000000-0000-0000-0000-0000000000c6', '00000000-0000-0000-0000-0000000000c8'],
          'active claims of acme about no user, not past decay_at: never pending, retracted, decayed, globex''s or a user''s');
SELECT is((SELECT count(*) FROM memory.retrieve('acme', 'aspirin stroke', at => now() + interval '2 days')), 4::bigint,
          'at two days on, the claim that decays tomorrow is gone');
SELECT is((SELECT count(*) FROM memory.retrieve('acme', 'aspirin stroke', at => now() - interval '5 days')), 1::bigint,
          'five days ago only c1 existed (c7 was created 2 days ago)');
-- (c1 and c2 have every word: first; claims with some of the words follow.)
SELECT is(ARRAY(SELECT id::text FROM memory.retrieve('acme', 'aspirin lowers stroke risk', 2)),
          ARRAY['00000000-0000-0000-0000-0000000000c1', '00000000-0000-0000-0000-0000000000c2'],
          'equal relevance: the more confident claim first');
SELECT is((SELECT id::text FROM memory.retrieve('acme', 'aspirin stroke', 1)), '00000000-0000-0000-0000-0000000000c3',
          'relevance ranks before confidence (c3 is the least confident)');
SELECT results_eq(
    $$ SELECT id, score FROM memory.retrieve('acme', 'aspirin stroke') $$,
    $$ SELECT c.id, ts_rank_cd(to_tsvector('english', c.claim_text), websearch_to_tsquery('english', 'aspirin stroke'))::float8
         FROM memory.claims c
        WHERE c.id IN ('00000000-0000-0000-0000-0000000000c1', '00000000-0000-0000-0000-0000000000c2', '00000000-0000-0000-0000-0000000000c3',
                       '00000000-0000-0000-0000-0000000000c6', '00000000-0000-0000-0000-0000000000c8')
        ORDER BY 2 DESC, c.confidence_score DESC, c.t_created DESC, c.id $$,
    'score is ts_rank_cd over claim_text; ties by confidence, then the newest');
SELECT is(ARRAY(SELECT id::text FROM memory.retrieve('acme', 'aspirin', entity_id => '00000000-0000-0000-0000-0000000000e2')),
          ARRAY['00000000-0000-0000-0000-0000000000c3'], 'entity_id keeps that entity''s claims');
SELECT is(ARRAY(SELECT id::text FROM memory.retrieve('acme', '', entity_id => '00000000-0000-0000-0000-0000000000e1')),
          ARRAY['00000000-0000-0000-0000-0000000000c1', '00000000-0000-0000-0000-0000000000c2', '00000000-0000-0000-0000-0000000000c6',
                '00000000-0000-0000-0000-0000000000c8'],
          'a blank query with entity_id lists its active claims, most confident first, then the newest');
SELECT ok((SELECT bool_and(score IS NULL) FROM memory.retrieve('acme', '  ', entity_id => '00000000-0000-0000-0000-0000000000e1')),
          'with no score');
SELECT is_empty($$ SELECT * FROM memory.retrieve('acme', 'aspirin', entity_id => '00000000-0000-0000-0000-0000000000e9') $$,
                'globex''s entity id finds nothing in acme');
SELECT results_eq(
    $$ SELECT entity, claim_text, field, kind, confidence_score, classification, t_created
         FROM memory.retrieve('acme', 'aspirin lowers stroke risk', 1) $$,
    $$ SELECT c.entity_id, c.claim_text, c.field, c.kind, c.confidence_score, 'internal'::memory.classification, c.t_created
         FROM memory.claims c WHERE c.id = '00000000-0000-0000-0000-0000000000c1' $$,
    'each row carries the claim''s entity, text, field, kind, confidence, tier and creation time');
SELECT is((SELECT classification FROM memory.retrieve('acme', 'password') LIMIT 1), 'confidential'::memory.classification,
          'a claim''s tier is its text''s classification');

-- Freshness marks.
SELECT is((SELECT string_agg(array_to_string(stale_fields, ','), ';' ORDER BY id) FROM memory.retrieve('acme', 'aspirin lowers stroke risk', 2, screen_profile => 'clinic')),
          'bp;', 'the 10-day-old bp claim is stale for a 5-day bp rule; the fresh one is not');
SELECT is((SELECT stale_fields FROM memory.retrieve('acme', 'aspirin', 1, '00000000-0000-0000-0000-0000000000e2', 'clinic')), '{}'::text[],
          'a claim answering no field of the profile has no stale field');
SELECT is((SELECT string_agg(array_to_string(stale_fields, ','), ';' ORDER BY id) FROM memory.retrieve('acme', 'aspirin lowers stroke risk', 2, screen_profile => 'clinic',
                                                                                                       at => now() + interval '6 days')),
          'bp;bp', 'six days on both are stale');
SELECT ok((SELECT bool_and(stale_fields IS NULL) FROM memory.retrieve('acme', 'aspirin stroke')), 'without a profile: NULL');
SELECT throws_ok($$ SELECT * FROM memory.retrieve('acme', 'aspirin', screen_profile => 'g_only') $$, '22023',
                 'memory.retrieve: unknown screening profile "g_only"', 'another org''s profile is unknown here');

-- Consent: knowledge about a user only while the user's save_to_profile consent is in force.
SELECT throws_ok($$ SELECT * FROM memory.retrieve('acme', 'aspirin stroke', user_id => 'u1') $$, 'MX003', 'profile_consent_required',
                 'a user who never consented: MX003');
RESET ROLE;
SELECT memory.grant_consent('acme', 'u1', '{save_to_profile}');
SELECT memory.grant_consent('acme', 'u2', '{save_to_profile}');
SET ROLE rt_reader;
SELECT is(ARRAY(SELECT id::text FROM memory.retrieve('acme', 'patient', user_id => 'u1')), ARRAY['00000000-0000-0000-0000-0000000000c9'],
          'with consent in force, the user''s claims');
SELECT is((SELECT count(*) FROM memory.retrieve('acme', 'aspirin stroke', user_id => 'u1')), 6::bigint, 'with the claims about no user');
SELECT is((SELECT classification FROM memory.retrieve('acme', 'patient', user_id => 'u1')), 'restricted'::memory.classification,
          'a claim about a user is restricted');
SELECT is(ARRAY(SELECT id::text FROM memory.retrieve('acme', 'patient', user_id => 'u2')), ARRAY['00000000-0000-0000-0000-0000000000ca'],
          'never another user''s claims');
RESET ROLE;
SELECT memory.revoke_consent('acme', 'u1', '{save_to_profile}');
SET ROLE rt_reader;
SELECT throws_ok($$ SELECT * FROM memory.retrieve('acme', 'patient', user_id => 'u1') $$, 'MX003', 'profile_consent_required',
                 'after the revocation: MX003');
RESET ROLE;

-- Clearance and tenants.
SET ROLE rt_int;
SELECT is(ARRAY(SELECT id::text FROM memory.retrieve('acme', 'aspirin stroke') ORDER BY id),
          ARRAY['00000000-0000-0000-0000-0000000000c1', '00000000-0000-0000-0000-0000000000c2', '00000000-0000-0000-0000-0000000000c3',
                '00000000-0000-0000-0000-0000000000c6'],
          'a role cleared to internal gets no confidential claim');
SELECT is_empty($$ SELECT * FROM memory.retrieve('acme', 'patient', user_id => 'u2') $$, 'nor a restricted one');
-- The same clearance when it reads the claims itself (the restrictive policy clearance).
SELECT is(ARRAY(SELECT id::text FROM memory.claims WHERE lifecycle_state = 'active' ORDER BY id),
          ARRAY['00000000-0000-0000-0000-0000000000c1', '00000000-0000-0000-0000-0000000000c2', '00000000-0000-0000-0000-0000000000c3',
                '00000000-0000-0000-0000-0000000000c6', '00000000-0000-0000-0000-0000000000c7'],
          'SELECT of memory.claims by a role cleared to internal: no confidential claim, none about a user');
RESET ROLE;
SET ROLE rt_reader;
SELECT is((SELECT count(*) FROM memory.claims WHERE org_id = 'acme'), 10::bigint, 'a role cleared to restricted reads every claim of its org');
RESET ROLE;
SET ROLE rt_int;
SELECT throws_ok($$ SELECT * FROM memory.retrieve('globex', 'aspirin') $$, '42501', NULL, 'retrieving from another org is 42501');
RESET ROLE;
SET ROLE rt_globex;
SELECT is(ARRAY(SELECT id::text FROM memory.retrieve('globex', 'aspirin stroke')), ARRAY['00000000-0000-0000-0000-0000000000d1'],
          'globex''s reader gets globex''s claim only');
SELECT throws_ok($$ SELECT * FROM memory.retrieve('acme', 'aspirin') $$, '42501', 'role rt_globex may not act for org "acme"',
                 'and 42501 for acme');
RESET ROLE;
SET ROLE rt_writer;
SELECT is((SELECT count(*) FROM memory.retrieve('acme', 'aspirin stroke')), 5::bigint, 'a writer retrieves');
RESET ROLE;
SET ROLE rt_admin;
SELECT is((SELECT count(*) FROM memory.retrieve('acme', 'aspirin stroke')), 5::bigint, 'an admin retrieves');
RESET ROLE;

-- The audit event: one per call, the count only.
CREATE TEMP TABLE before_call AS SELECT coalesce(max(seq), 0) AS seq FROM public.audit_log_now() WHERE chain_id = 'acme';
SET ROLE rt_reader;
SELECT is((SELECT count(*) FROM memory.retrieve('acme', 'aspirin stroke', 3, screen_profile => 'clinic')), 3::bigint, 'three claims');
RESET ROLE;
SELECT results_eq($$ SELECT event_type, payload FROM public.audit_log_now() WHERE chain_id = 'acme' AND seq > (SELECT seq FROM before_call) $$,
                  $$ VALUES ('memory.retrieval.hybrid'::text, '{"count": 3}'::jsonb) $$,
                  'one memory.retrieval.hybrid event with the count only');
SELECT is((SELECT count(*) FROM public.audit_log_now()
            WHERE event_type = 'memory.retrieval.hybrid' AND (payload::text LIKE '%aspirin%' OR payload::text LIKE '%stroke%')), 0::bigint,
          'no event holds the query or a claim''s text');

-- Refused arguments: 22023 (0A000 for an embedding), and nothing written.
TRUNCATE before_call;
INSERT INTO before_call SELECT coalesce(max(seq), 0) FROM public.audit_log_now() WHERE chain_id = 'acme';
SET ROLE rt_reader;
SELECT throws_ok($$ SELECT * FROM memory.retrieve('acme', 'aspirin', 0) $$, '22023', 'memory.retrieve: k must be between 1 and 1000, got 0', 'k = 0');
SELECT throws_ok($$ SELECT * FROM memory.retrieve('acme', 'aspirin', 1001) $$, '22023', NULL, 'k = 1001');
SELECT throws_ok($$ SELECT * FROM memory.retrieve('acme', 'aspirin', NULL) $$, '22023', NULL, 'k NULL');
SELECT throws_ok($$ SELECT * FROM memory.retrieve(NULL, 'aspirin') $$, '22023', 'memory.retrieve needs an org_id', 'a NULL org');
SELECT throws_ok($$ SELECT * FROM memory.retrieve(E' \t', 'aspirin') $$, '22023', 'memory.retrieve needs an org_id', 'a blank org');
SELECT throws_ok($$ SELECT * FROM memory.retrieve('acme', 'aspirin', screen_profile => 'nope') $$, '22023', NULL, 'an unknown profile');
SELECT throws_ok($$ SELECT * FROM memory.retrieve('acme', NULL) $$, '22023', 'memory.retrieve needs a query', 'a NULL query');
SELECT throws_ok($$ SELECT * FROM memory.retrieve('acme', ' the ') $$, '22023', 'memory.retrieve: the query has no words to search for',
                 'a query of stop words without entity_id');
SELECT throws_ok($$ SELECT * FROM memory.retrieve('acme', 'aspirin', at => 'infinity') $$, '22023', NULL, 'an infinite at');
SELECT throws_ok($$ SELECT * FROM memory.retrieve('acme', 'aspirin', user_id => '') $$, '22023', NULL, 'a blank user_id');
SELECT throws_ok($$ SELECT * FROM memory.retrieve('acme', 'aspirin', query_embedding => '{0.1,0.2}') $$, '22023',
                 'memory.retrieve: memory.claims has no embeddings to compare query_embedding with',
                 'a query embedding before memory.enable_embeddings is 22023');
RESET ROLE;
SELECT is((SELECT count(*) FROM public.audit_log_now() WHERE chain_id = 'acme' AND seq > (SELECT seq FROM before_call)), 0::bigint,
          'no refused call wrote an event');

SELECT * FROM finish();
ROLLBACK;
