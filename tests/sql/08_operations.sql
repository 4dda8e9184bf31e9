-- SQL-level suite for operations and bad input (SPEC §7, §9; issue 13, the parts built so far).
BEGIN;
SELECT plan(35);

-- Whitespace-only text is blank wherever a non-blank argument is required.
INSERT INTO memory.observations (id, org_id, user_id, task_id, content) VALUES
  ('a0000000-0000-0000-0000-000000000001', 'acme', 'u1', 't1', 'a note');
SELECT throws_ok($$ SELECT memory.reclassify('a0000000-0000-0000-0000-000000000001', 'public', E'\t\n ') $$, '22023', NULL, 'reclassify: whitespace reason');
SELECT throws_ok($$ SELECT memory.erase_subject(E'\t\n') $$, '22023', NULL, 'erase_subject: whitespace subject');
SELECT throws_ok($$ SELECT memory.export_subject(E' \r\n') $$, '22023', NULL, 'export_subject: whitespace subject');
SELECT throws_ok($$ SELECT memory.end_task(E'\t') $$, '22023', NULL, 'end_task: whitespace task');
SELECT throws_ok($$ SELECT * FROM memory.transfer_observations(ARRAY['a0000000-0000-0000-0000-000000000001'::uuid], E'\n') $$, '22023', NULL,
                 'transfer_observations: whitespace project');
SELECT throws_ok($$ SELECT * FROM memory.claim_recheck_tasks(E' \t') $$, '22023', NULL, 'claim_recheck_tasks: whitespace worker');
SELECT throws_ok($$ SELECT memory.complete_recheck_task(1, 'w', E'\n') $$, '22023', NULL, 'complete_recheck_task: whitespace outcome');
SELECT throws_ok($$ SELECT memory.complete_recheck_task(1, E'\t ', 'done') $$, '22023', NULL, 'complete_recheck_task: whitespace worker');
SELECT throws_ok($$ INSERT INTO memory.legal_holds (org_id, reason) VALUES ('acme', E'\t') $$, '23514', NULL, 'a hold needs a real reason');
SELECT is((SELECT classification::text FROM memory.observations WHERE id = 'a0000000-0000-0000-0000-000000000001'), 'internal',
          'and nothing changed');

-- Infinite creation times are refused, not stamped out of range.
SELECT throws_ok($$ INSERT INTO memory.observations (org_id, content, created_at) VALUES ('acme', 'x', '-infinity') $$, '22023', NULL,
                 '-infinity created_at is 22023');
SELECT throws_ok($$ INSERT INTO memory.observations (org_id, content, created_at) VALUES ('acme', 'x', 'infinity') $$, '22023', NULL,
                 'infinity created_at is 22023');
SELECT is((SELECT count(*) FROM memory.observations), 1::bigint, 'no row was stored');
SELECT lives_ok($$ SELECT expires_at FROM memory.observations $$, 'and every stamp reads back');

-- Bad arguments answered with 22023, not 22004 or 22003.
SELECT throws_ok($$ SELECT memory.audit_ensure_partitions(3, 'infinity') $$, '22023', NULL, 'audit_ensure_partitions(infinity)');
SELECT throws_ok($$ SELECT * FROM memory.freshness_recheck(0.5, interval '100000000 years') $$, '22023', NULL, 'freshness_recheck: huge max_age');

-- The audit trigger attached by hand in a way that would audit nothing refuses to run.
CREATE TABLE public.no_tt (id text, org_id text);
CREATE TRIGGER t AFTER INSERT ON public.no_tt FOR EACH STATEMENT EXECUTE FUNCTION memory.audit_trigger('id=id', 'org=org_id');
SELECT throws_ok($$ INSERT INTO public.no_tt VALUES ('1', 'acme') $$, '39P01', NULL, 'audit_trigger without a transition table is 39P01');
CREATE TABLE public.no_tier (id text, org_id text, content text);
CREATE TRIGGER t AFTER UPDATE ON public.no_tier REFERENCING OLD TABLE AS memory_old NEW TABLE AS memory_new
    FOR EACH STATEMENT EXECUTE FUNCTION memory.audit_trigger('org=org_id', 'content=content');
INSERT INTO public.no_tier VALUES ('1', 'acme', 'x');
SELECT throws_ok($$ UPDATE public.no_tier SET content = 'y' $$, '39P01', NULL, 'an AFTER UPDATE audit trigger without id and tier is 39P01');
-- Trigger functions called as functions answer 39P01, as PL/pgSQL's do.
SELECT throws_ok($$ SELECT memory.classify_trigger() $$, '39P01', NULL, 'classify_trigger called directly is 39P01');
SELECT throws_ok($$ SELECT memory.audit_trigger() $$, '39P01', NULL, 'audit_trigger called directly is 39P01');
SELECT throws_ok($$ SELECT memory.lifecycle_trigger() $$, '39P01', NULL, 'lifecycle_trigger called directly is 39P01');

-- Decay redacts a detail whatever its number range (1e400 is valid jsonb, not a float8).
INSERT INTO memory.entities (id, org_id, name, entity_type) VALUES ('e0000000-0000-0000-0000-0000000000e8', 'acme', 'X', 'concept');
INSERT INTO memory.claims (id, org_id, entity_id, claim_text, subject_id, pii_fields, details, decay_at) VALUES
  ('c0000000-0000-0000-0000-0000000000e8', 'acme', 'e0000000-0000-0000-0000-0000000000e8', 'patient data', 'p-1',
   ARRAY['details.n', 'details.deep'], ('{"n": 1e400, "m": -1e400, "deep": ' || repeat('[', 200) || repeat(']', 200) || '}')::jsonb,
   now() - interval '1 day');
SELECT lives_ok($$ SELECT memory.run_decay() $$, 'run_decay with a 1e400 detail and 200-deep nesting');
SELECT is((SELECT details FROM memory.claims WHERE id = 'c0000000-0000-0000-0000-0000000000e8'),
          jsonb_build_object('n', memory_internal._redacted_marker(), 'm', '-1e400'::jsonb, 'deep', memory_internal._redacted_marker()),
          'the named details are redacted, the others kept as they were');

-- Erasure and task end find rows by index.
SELECT ok(EXISTS (SELECT 1 FROM pg_indexes WHERE schemaname = 'memory' AND tablename = 'observations' AND indexdef LIKE '%(user_id, org_id)%')
      AND EXISTS (SELECT 1 FROM pg_indexes WHERE schemaname = 'memory' AND tablename = 'observations' AND indexdef LIKE '%(task_id)%'),
          'observations are indexed by user and task');
SELECT ok(EXISTS (SELECT 1 FROM pg_indexes WHERE schemaname = 'memory' AND tablename = 'observations_archive' AND indexdef LIKE '%(user_id)%'),
          'the archive by user');
SELECT ok(EXISTS (SELECT 1 FROM pg_indexes WHERE schemaname = 'memory' AND tablename = 'recheck_tasks' AND indexdef LIKE '%(claim_id)%'),
          're-check tasks by claim');

-- Maintenance runs are recorded; an export covers governed application tables; a repeated id
-- is transferred once.
SELECT ok((memory.run_maintenance() ? 'run_id'), 'run_maintenance returns its run');
SELECT is((SELECT count(*) FROM memory.maintenance_runs WHERE finished_at IS NOT NULL AND error IS NULL), 1::bigint, 'and records it');
CREATE TABLE public.app_notes (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), org_id text, user_id text, content text,
                               classification memory.classification);
SELECT memory.govern('public.app_notes', '{"audit": true}');
INSERT INTO public.app_notes (org_id, user_id, content) VALUES ('acme', 'u1', 'app note'), ('acme', 'u1', 'ssn 123-45-6789');
SELECT is((SELECT jsonb_array_length(memory.export_subject('u1')->'sections'->'tables'->'public.app_notes')), 1,
          'export_subject includes governed tables (restricted rows only when asked)');
SELECT is((SELECT jsonb_array_length(memory.export_subject('u1', true)->'sections'->'tables'->'public.app_notes')), 2,
          'and all of them when asked');
SELECT is((SELECT array_agg(reason ORDER BY ord) FROM memory.transfer_observations(
              ARRAY['a0000000-0000-0000-0000-000000000001', 'a0000000-0000-0000-0000-000000000001']::uuid[], 'p2')
              WITH ORDINALITY AS t(id, transferred, reason, ord)),
          ARRAY['transferred', 'duplicate_in_call'], 'a repeated id is transferred once');

-- memory.health (issue 46): per org the caller may act for, counts only, for memory_admin.
SELECT memory.setup_roles();
CREATE ROLE ops_admin_acme LOGIN IN ROLE memory_admin;
CREATE ROLE ops_writer_acme LOGIN IN ROLE memory_writer;
SELECT memory.grant_org('ops_admin_acme', 'acme');
SELECT memory.grant_org('ops_writer_acme', 'acme');
INSERT INTO memory.observations (org_id, content, created_at) VALUES ('acme', 'long ago', now() - interval '400 days'),
                                                                     ('globex', 'long ago', now() - interval '400 days');
SET ROLE ops_admin_acme;
SELECT results_eq($$ SELECT org_id, expired_unswept FROM memory.health $$, $$ VALUES ('acme', 1::bigint) $$,
                  'an admin of acme sees acme''s row only, with its expired row not yet swept');
SELECT throws_ok($$ SET memory.org_id = 'globex'; SELECT * FROM memory.health $$, '42501', NULL, 'and not globex''s by naming it');
RESET memory.org_id;
RESET ROLE;
SET ROLE ops_writer_acme;
SELECT throws_ok($$ SELECT * FROM memory.health $$, '42501', NULL, 'memory.health is for admins');
RESET ROLE;
SELECT ok((SELECT count(*) FROM memory.health WHERE org_id IN ('acme', 'globex')) = 2, 'the superuser sees every org');

SELECT * FROM finish();
ROLLBACK;
