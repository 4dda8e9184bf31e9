-- SQL-level suite for data-subject rights and housekeeping (SPEC §4).
BEGIN;
SELECT plan(29);

INSERT INTO memory.observations (id, org_id, user_id, task_id, memory_type, content) VALUES
  ('00000000-0000-0000-0000-000000000001', 'acme', 'alice', 't1', 'working', 'scratch for the task'),
  ('00000000-0000-0000-0000-000000000002', 'acme', 'alice', NULL, 'long_term', 'alice ssn on file'),
  ('00000000-0000-0000-0000-000000000003', 'acme', 'alice', NULL, 'long_term', 'alice prefers short answers'),
  ('00000000-0000-0000-0000-000000000004', 'globex', 'alice', NULL, 'long_term', 'held note'),
  ('00000000-0000-0000-0000-000000000005', 'acme', 'bob', 't1', 'long_term', 'bob note');
INSERT INTO memory.legal_holds (org_id, observation_id, reason) VALUES ('globex', '00000000-0000-0000-0000-000000000004', 'case 7');
SELECT memory.record_outcome('s1', 'accepted', ARRAY['00000000-0000-0000-0000-000000000003']::uuid[]);

-- export
SELECT is((memory.export_subject('alice')->'manifest'->'observations'->>'count')::int, 3, 'export leaves restricted rows out by default');
SELECT is((memory.export_subject('alice', true)->'manifest'->'observations'->>'count')::int, 4, 'and includes them when asked');
SELECT is(memory.export_subject('alice')->>'schema_version', '1', 'the manifest has a schema_version');
SELECT is((SELECT e->'manifest'->'observations'->>'sha256' FROM (SELECT memory.export_subject('alice') e) x),
          (SELECT encode(sha256(convert_to((e->'sections'->'observations')::text, 'UTF8')), 'hex') FROM (SELECT memory.export_subject('alice') e) x),
          'each section carries the sha256 of its JSON text');
SELECT is((memory.export_subject('alice')->'manifest'->'weight_history'->>'count')::int, 1, 'the weight history is exported');
SELECT throws_ok($$ SELECT memory.export_subject(NULL) $$, '22023', NULL, 'export of a NULL subject is 22023');
-- How many restricted rows were withheld: per section, per governed table, in total (issue 34 item 11).
SAVEPOINT withheld;
CREATE TABLE public.subj_notes (id bigserial PRIMARY KEY, org_id text, uid text, body text, tier memory.classification);
SELECT memory.govern('public.subj_notes', '{"content": "body", "org": "org_id", "user": "uid", "id": "id", "target": "tier", "audit": true}');
INSERT INTO public.subj_notes (org_id, uid, body) VALUES ('acme', 'alice', 'key AKIAIOSFODNN7EXAMPLE ssn 123-45-6789'),
                                                         ('acme', 'alice', 'lunch at noon'), ('acme', 'bob', 'ssn 123-45-6789');
SELECT is(memory.export_subject('alice')->'restricted_withheld',
          '{"observations": 1, "archive": 0, "weight_history": 0, "tables": {"public.subj_notes": 1}, "total": 2}'::jsonb,
          'export reports the restricted rows it withheld');
SELECT is((memory.export_subject('alice')->'manifest'->'table:public.subj_notes'->>'count')::int, 1, 'and exports the others');
SELECT is(memory.export_subject('alice', true)->'restricted_withheld'->>'total', '0', 'none withheld when they are asked for');
SELECT is((SELECT payload->>'restrictedWithheld' FROM public.audit_log_now() WHERE event_type = 'memory.export'
            AND (payload->>'includeRestricted')::boolean = false ORDER BY recorded_at DESC, seq DESC LIMIT 1), '2',
          'the export event records the count');
ROLLBACK TO withheld;

-- transfer
SELECT results_eq($$ SELECT transferred, reason FROM memory.transfer_observations(ARRAY['00000000-0000-0000-0000-000000000003',
                       '00000000-0000-0000-0000-000000000002', '00000000-0000-0000-0000-0000000000ff']::uuid[], 'p2') $$,
                  $$ VALUES (true, 'transferred'), (false, 'classification:restricted'), (false, 'not_found') $$,
                  'only public and internal observations move');
SELECT is(project_id, 'p2', 'the transferred row is in the new project') FROM memory.observations WHERE id = '00000000-0000-0000-0000-000000000003';
SELECT throws_ok($$ SELECT * FROM memory.transfer_observations(ARRAY[gen_random_uuid()], NULL) $$, '22023', NULL, 'a NULL target project is 22023');

-- end_task
SELECT is(memory.end_task('t1'), 1::bigint, 'end_task clears the working memories of the task only');
SELECT is(count(*), 1::bigint, 'long-term memories of the task stay') FROM memory.observations WHERE task_id = 't1';
SELECT throws_ok($$ SELECT memory.end_task(' ') $$, '22023', NULL, 'a blank task id is 22023');

-- erasure
SELECT is(memory.erase_subject('alice') - ARRAY['consent', 'receipt', 'receipts', 'derived_forgotten'], '{"held": 1, "archive": 0, "observations": 2, "weight_history": 1}'::jsonb,
          'erasure removes the subject''s rows and history, keeps and reports held rows');
SELECT results_eq($$ SELECT id::text FROM memory.observations WHERE user_id = 'alice' $$, $$ VALUES ('00000000-0000-0000-0000-000000000004') $$, 'only the held row is left');
SELECT is(count(*), 1::bigint, 'other subjects are untouched') FROM memory.observations WHERE user_id = 'bob';
SELECT ok(payload->>'subject' ~ '^h:[0-9a-f]{64}$' AND NOT payload::text LIKE '%alice%', 'one memory.forget event naming the subject by pseudonym only')
  FROM public.audit_log_now() WHERE event_type = 'memory.forget';
SELECT is_empty($$ SELECT 1 FROM memory.audit_verify() WHERE NOT ok $$, 'every chain still verifies after erasure');
SELECT is(memory.erase_subject('nobody') - ARRAY['consent', 'receipt', 'receipts', 'derived_forgotten'], '{"held": 0, "archive": 0, "observations": 0, "weight_history": 0}'::jsonb, 'erasing an unknown subject gives zero counts');
SELECT is(count(*), 2::bigint, 'and is still audited') FROM public.audit_log_now() WHERE event_type = 'memory.forget';

-- maintenance and stats
SELECT is(memory.stats.observations, 2::bigint, 'stats counts live rows by type, tier and state (the held row and bob''s)')
  FROM memory.stats WHERE memory_type = 'long_term' AND classification = 'internal' AND state = 'live';
SELECT ok((SELECT sum(bytes) FROM memory.stats) > 0, 'stats reports bytes');
SELECT is((memory.run_maintenance(now() + interval '400 days')->'retention'->>'soft_deleted')::int, 1, 'run_maintenance runs retention (the held row is denied)');
SELECT is(array_agg(state ORDER BY state), '{archived,soft_deleted}', 'stats shows the new states: bob''s row soft-deleted, the held row archived, not deleted')
  FROM memory.stats WHERE classification = 'internal' AND memory_type = 'long_term';
SELECT throws_ok($$ SELECT memory.run_maintenance(NULL) $$, '22023', NULL, 'run_maintenance(NULL) is 22023');
SELECT throws_ok($$ SELECT memory.schedule_maintenance() $$, '55000', NULL, 'scheduling without pg_cron is 55000 with a hint');

SELECT * FROM finish();
ROLLBACK;
