-- SQL-level suite for feedback weights (SPEC §3).
BEGIN;
SELECT plan(46);

-- ema -------------------------------------------------------------------------------------------------
SELECT is(memory.ema(1.0, 'accepted'), 1.0::float8, 'accepted from 1.0 stays 1.0');
SELECT is(memory.ema(1.0, 'rejected'), 0.85::float8, 'rejected uses alpha_failure 0.15');
SELECT is(round(memory.ema(0.5, 'accepted')::numeric, 10), 0.55, 'accepted uses alpha_success 0.1');
SELECT is(round(memory.ema(0.5, 'rework', 0.1, 0.2)::numeric, 10), 0.4, 'rework is a failure; explicit alphas');
SELECT is(memory.ema(0.5, 'rejected', 0.1, 1.0), 0::float8, 'alpha 1 jumps to the signal');
SELECT is(memory.ema(NULL, 'accepted'), NULL, 'NULL weight gives NULL');
SELECT throws_ok($$ SELECT memory.ema(0.5, 'accepted', 0, 0.15) $$, '22023', NULL, 'alpha 0 is 22023');
SELECT throws_ok($$ SELECT memory.ema(0.5, 'accepted', 0.1, 1.5) $$, '22023', NULL, 'alpha above 1 is 22023');
SELECT throws_ok($$ SELECT memory.ema('NaN', 'accepted') $$, '22023', NULL, 'a NaN weight is 22023');
SELECT throws_ok($$ SELECT memory.ema('Infinity', 'accepted') $$, '22023', NULL, 'an infinite weight is 22023');
SELECT throws_ok($$ SELECT memory.ema(0.5, 'bogus') $$, '22P02', NULL, 'unknown outcome text is rejected by the enum');
SELECT throws_ok($$ SET memory.alpha_success = 0 $$, '22023', NULL, 'the alpha settings refuse 0');
SELECT throws_ok($$ SET memory.alpha_failure = 1.01 $$, '22023', NULL, 'the alpha settings refuse values above 1');

-- record_outcome ----------------------------------------------------------------------------------------
INSERT INTO memory.observations (id, org_id, project_id, content) VALUES
  ('00000000-0000-0000-0000-000000000001', 'acme', 'p1', 'retry loop backoff for the payments worker'),
  ('00000000-0000-0000-0000-000000000002', 'acme', 'p1', 'payments worker uses exponential backoff'),
  ('00000000-0000-0000-0000-000000000003', 'globex', NULL, 'globex notes about backoff'),
  ('00000000-0000-0000-0000-000000000004', 'acme', 'p1', 'an old payments note');
UPDATE memory.observations SET soft_deleted_at = now() WHERE id = '00000000-0000-0000-0000-000000000004';

SELECT results_eq($$ SELECT observation_id::text, previous_weight, new_weight, alpha, applied, reason
                      FROM memory.record_outcome('s1', 'rejected', ARRAY['00000000-0000-0000-0000-000000000001',
                           '00000000-0000-0000-0000-000000000003', '00000000-0000-0000-0000-000000000004',
                           '00000000-0000-0000-0000-0000000000ff']::uuid[]) $$,
                  $$ VALUES ('00000000-0000-0000-0000-000000000001', 1::float8, 0.85::float8, 0.15::float8, true, 'applied'),
                            ('00000000-0000-0000-0000-000000000003', 1::float8, 0.85::float8, 0.15::float8, true, 'applied'),
                            ('00000000-0000-0000-0000-000000000004', 1::float8, NULL, NULL, false, 'soft_deleted'),
                            ('00000000-0000-0000-0000-0000000000ff', NULL, NULL, NULL, false, 'not_found') $$,
                  'record_outcome applies live rows across tenants and reports the rest as not applied');
SELECT results_eq($$ SELECT applied, reason FROM memory.record_outcome('s1', 'accepted', ARRAY['00000000-0000-0000-0000-000000000001']::uuid[]) $$,
                  $$ VALUES (false, 'already_recorded') $$, 'a (session, observation) pair applies once');
SELECT is(weight, 0.85::float8, 'and the weight did not move') FROM memory.observations WHERE id = '00000000-0000-0000-0000-000000000001';
SELECT results_eq($$ SELECT applied, reason FROM memory.record_outcome('s9', 'accepted', ARRAY['00000000-0000-0000-0000-000000000002', '00000000-0000-0000-0000-000000000002']::uuid[]) $$,
                  $$ VALUES (true, 'applied'), (false, 'duplicate_in_call') $$, 'an id twice in one call applies once');
SELECT is_empty($$ SELECT * FROM memory.record_outcome('s1', 'accepted', '{}') $$, 'an empty id array changes nothing');
SELECT is_empty($$ SELECT * FROM memory.record_outcome('s1', 'accepted', NULL) $$, 'a NULL id array changes nothing');
SELECT throws_ok($$ SELECT * FROM memory.record_outcome(NULL, 'accepted', ARRAY[gen_random_uuid()]) $$, '22023', NULL, 'a NULL session is 22023');
SELECT throws_ok($$ SELECT * FROM memory.record_outcome('  ', 'accepted', ARRAY[gen_random_uuid()]) $$, '22023', NULL, 'a blank session is 22023');

SELECT results_eq($$ SELECT observation_id::text, session_id, outcome::text, previous_weight, new_weight, alpha, org_id, project_id
                      FROM memory.observation_weight_history WHERE observation_id = '00000000-0000-0000-0000-000000000001' $$,
                  $$ VALUES ('00000000-0000-0000-0000-000000000001', 's1', 'rejected', 1::float8, 0.85::float8, 0.15::float8, 'acme', 'p1') $$,
                  'the history row has the seed columns');
SELECT results_eq($$ SELECT chain_id, payload->>'sessionId', payload->>'outcome', payload->'observationIds', payload->'weightDeltasById'->'00000000-0000-0000-0000-000000000001'
                      FROM public.audit_log_now() WHERE event_type = 'memory.feedback' AND payload->>'sessionId' = 's1' ORDER BY chain_id $$,
                  $$ VALUES ('acme', 's1', 'rejected', '["00000000-0000-0000-0000-000000000001"]'::jsonb, '{"new": 0.85, "previous": 1.0}'::jsonb),
                            ('globex', 's1', 'rejected', '["00000000-0000-0000-0000-000000000003"]'::jsonb, NULL) $$,
                  'one memory.feedback event per tenant with the seed payload');

-- Misleading: the third distinct failed session (counting this one) doubles alpha_failure.
SELECT memory.record_outcome('s2', 'rejected', ARRAY['00000000-0000-0000-0000-000000000001']::uuid[]);
SELECT results_eq($$ SELECT alpha FROM memory.record_outcome('s3', 'rework', ARRAY['00000000-0000-0000-0000-000000000001']::uuid[]) $$,
                  $$ VALUES (0.3::float8) $$, 'a misleading observation gets 2 x alpha_failure');
SELECT is(alpha, 0.3::float8, 'and the history records the doubled alpha') FROM memory.observation_weight_history WHERE session_id = 's3';
SELECT results_eq($$ SELECT observation_id::text, failed_sessions, successful_sessions FROM memory.misleading_observations('acme') $$,
                  $$ VALUES ('00000000-0000-0000-0000-000000000001', 3, 0) $$, 'misleading_observations lists it');
SELECT is_empty($$ SELECT * FROM memory.misleading_observations('globex') $$, 'other tenants are not listed');
SELECT results_eq($$ SELECT alpha FROM memory.record_outcome('s10', 'rejected', ARRAY['00000000-0000-0000-0000-000000000002']::uuid[]) $$,
                  $$ VALUES (0.15::float8) $$, 'a success in the history keeps the normal alpha');

-- Per-org override and settings.
INSERT INTO memory.org_settings (org_id, alpha_failure) VALUES ('globex', 0.5);
SELECT results_eq($$ SELECT alpha FROM memory.record_outcome('s5', 'rejected', ARRAY['00000000-0000-0000-0000-000000000003']::uuid[]) $$,
                  $$ VALUES (0.5::float8) $$, 'org_settings overrides alpha_failure for its org');
SET LOCAL memory.alpha_success = 0.5;
SELECT results_eq($$ SELECT alpha FROM memory.record_outcome('s6', 'accepted', ARRAY['00000000-0000-0000-0000-000000000002']::uuid[]) $$,
                  $$ VALUES (0.5::float8) $$, 'the memory.alpha_success setting applies where no org override exists');
RESET memory.alpha_success;
SELECT throws_ok($$ INSERT INTO memory.org_settings (org_id, alpha_success) VALUES ('x', 0) $$, '23514', NULL, 'org alphas outside (0, 1] are refused');
SELECT throws_ok($$ UPDATE memory.observations SET weight = 'NaN' WHERE id = '00000000-0000-0000-0000-000000000002' $$, '22023', NULL, 'a NaN weight written by hand is refused');
SELECT throws_ok($$ UPDATE memory.observations SET weight = 'Infinity' WHERE id = '00000000-0000-0000-0000-000000000002' $$, '22023', NULL, 'an infinite weight written by hand is refused');

-- recall -------------------------------------------------------------------------------------------------
SELECT results_eq($$ SELECT id::text FROM memory.recall('acme', 'payments backoff', 10) $$,
                  $$ VALUES ('00000000-0000-0000-0000-000000000002'), ('00000000-0000-0000-0000-000000000001') $$,
                  'recall ranks by relevance x weight, live rows of the tenant only');
SELECT is_empty($$ SELECT * FROM memory.recall('acme', 'globex', 10) $$, 'no other-tenant rows');
SELECT is(count(*), 1::bigint, 'k limits the result') FROM memory.recall('acme', 'payments', 1);
SELECT is_empty($$ SELECT * FROM memory.recall('acme', '   ', 10) $$, 'a blank query returns nothing');
SELECT throws_ok($$ SELECT * FROM memory.recall('acme', 'x', 0) $$, '22023', NULL, 'k <= 0 is 22023');
SELECT throws_ok($$ SELECT * FROM memory.recall(NULL, 'x') $$, '22023', NULL, 'a NULL org is 22023');
SELECT ok(payload ? 'ids' AND payload ? 'count' AND NOT payload::text LIKE '%payments%', 'memory.recall event has ids and count, no query text')
  FROM public.audit_log_now() WHERE event_type = 'memory.recall' ORDER BY seq LIMIT 1;

-- A governed application table with a weight column ------------------------------------------------------
CREATE TABLE public.kb (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), tenant text, body text, tier text, score float8 NOT NULL DEFAULT 1);
SELECT memory.govern('public.kb', '{"content": "body", "target": "tier", "org": "tenant", "weight": "score"}');
INSERT INTO public.kb (id, tenant, body) VALUES ('00000000-0000-0000-0000-0000000000aa', 'acme', 'kb entry');
SELECT results_eq($$ SELECT applied, new_weight FROM memory.record_outcome('s7', 'rejected', ARRAY['00000000-0000-0000-0000-0000000000aa']::uuid[]) $$,
                  $$ VALUES (true, 0.85::float8) $$, 'record_outcome serves a governed table with a weight column');
SELECT is(score, 0.85::float8, 'the application table''s weight column moved') FROM public.kb;

-- A uuid that two tenants' rows share: only the caller's org's row moves.
CREATE TABLE public.kb2 (id uuid, tenant text, body text, tier text, score float8 NOT NULL DEFAULT 1, PRIMARY KEY (tenant, id));
SELECT memory.govern('public.kb2', '{"content": "body", "target": "tier", "org": "tenant", "weight": "score"}');
INSERT INTO public.kb2 (id, tenant, body) VALUES ('00000000-0000-0000-0000-0000000000bb', 'acme', 'ours'),
                                                 ('00000000-0000-0000-0000-0000000000bb', 'beta', 'theirs');
SELECT memory.setup_roles();
CREATE ROLE fb_acme LOGIN IN ROLE memory_writer;
GRANT SELECT, UPDATE ON public.kb2 TO fb_acme;
SELECT memory.grant_org('fb_acme', 'acme');
SET ROLE fb_acme;
SELECT results_eq($$ SELECT applied, new_weight FROM memory.record_outcome('s8', 'rejected', ARRAY['00000000-0000-0000-0000-0000000000bb']::uuid[]) $$,
                  $$ VALUES (true, 0.85::float8) $$, 'record_outcome applies to the caller''s org''s row');
RESET ROLE;
SELECT results_eq($$ SELECT tenant, score FROM public.kb2 ORDER BY tenant $$, $$ VALUES ('acme', 0.85::float8), ('beta', 1::float8) $$,
                  'another tenant''s row with the same uuid is not written');

-- A row with no org (the platform's) is written too.
CREATE TABLE public.kb3 (id uuid PRIMARY KEY, tenant text, body text, tier text, score float8 NOT NULL DEFAULT 1);
SELECT memory.govern('public.kb3', '{"content": "body", "target": "tier", "org": "tenant", "weight": "score"}');
INSERT INTO public.kb3 (id, tenant, body) VALUES ('00000000-0000-0000-0000-0000000000cc', NULL, 'platform row');
SELECT results_eq($$ SELECT applied, new_weight FROM memory.record_outcome('s9', 'rejected', ARRAY['00000000-0000-0000-0000-0000000000cc']::uuid[]) $$,
                  $$ VALUES (true, 0.85::float8) $$, 'record_outcome applies to a row with no org');
SELECT is(score, 0.85::float8, 'and writes its weight') FROM public.kb3;

SELECT * FROM finish();
ROLLBACK;
