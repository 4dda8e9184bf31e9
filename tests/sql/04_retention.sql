-- SQL-level suite for the retention schedules (SPEC §4, the part built so far).
BEGIN;
SELECT plan(58);

SELECT results_eq($$ SELECT r.tier::text, r.retention_days, r.soft_delete_grace_days FROM memory.retention_policies r WHERE r.org_id IS NULL ORDER BY r.tier $$,
                  $$ VALUES ('public', NULL::int, 0), ('internal', 365, 30), ('confidential', 90, 14), ('restricted', 30, 7) $$,
                  'the seed''s platform schedule');
SELECT results_eq($$ SELECT m.memory_type::text, m.ttl, m.archive_after, m.cleanup FROM memory.memory_type_policies m ORDER BY m.memory_type $$,
                  $$ VALUES ('working', NULL::interval, NULL::interval, 'task_end'), ('short_term', '1 hour', NULL, 'ttl'),
                            ('long_term', NULL, '365 days', 'manual'), ('persona', NULL, NULL, 'never'),
                            ('episodic', '90 days', '90 days', 'ttl'), ('entity', NULL, NULL, 'manual'),
                            ('structured', NULL, '180 days', 'manual') $$,
                  'the rt-005 schedule per memory type');

SELECT results_eq($$ SELECT * FROM memory.retention_policy('acme', 'confidential') $$, $$ VALUES (90, 14, 'platform') $$, 'platform default');
SELECT results_eq($$ SELECT * FROM memory.retention_policy(NULL, 'public') $$, $$ VALUES (NULL::int, 0, 'platform') $$, 'public is indefinite');
INSERT INTO memory.retention_policies (org_id, tier, retention_days, soft_delete_grace_days) VALUES ('acme', 'confidential', 365, 14);
SELECT results_eq($$ SELECT * FROM memory.retention_policy('acme', 'confidential') $$, $$ VALUES (365, 14, 'org') $$, 'an org override wins');
SELECT results_eq($$ SELECT * FROM memory.retention_policy('globex', 'confidential') $$, $$ VALUES (90, 14, 'platform') $$, 'other orgs keep the default');
INSERT INTO memory.org_settings (org_id, bfsi_mode) VALUES ('bank', true);
INSERT INTO memory.retention_policies (org_id, tier, retention_days, soft_delete_grace_days) VALUES ('bank', 'restricted', 30, 30);
SELECT results_eq($$ SELECT * FROM memory.retention_policy('bank', 'restricted') $$, $$ VALUES (2555, 30, 'bfsi') $$, 'BFSI keeps restricted 2555 days whatever else says');
SELECT results_eq($$ SELECT * FROM memory.retention_policy('bank', 'internal') $$, $$ VALUES (365, 30, 'platform') $$, 'BFSI changes only restricted');

SELECT is(memory.is_expired('2026-01-01', 'restricted', NULL, '2026-01-30'), false, 'restricted: day 29 is not expired');
SELECT is(memory.is_expired('2026-01-01', 'restricted', NULL, '2026-01-31'), true, 'restricted: exactly 30 days is expired (at >= created + days)');
SELECT is(memory.is_expired('2000-01-01', 'public', NULL, '2026-01-01'), false, 'public never expires');
SELECT is(memory.is_expired('2026-01-01', 'restricted', 'bank', '2030-01-01'), false, 'BFSI restricted is still kept after 4 years');
SELECT is(memory.is_expired('2026-01-01', 'confidential', 'acme', '2026-06-01'), false, 'org override applies to is_expired');
SELECT is(memory.is_expired(NULL, 'internal'), NULL, 'NULL created_at gives NULL');

SELECT throws_ok($$ INSERT INTO memory.retention_policies (org_id, tier, retention_days) VALUES ('x', 'internal', -1) $$, '22023', NULL, 'negative retention days are 22023');
SELECT throws_ok($$ INSERT INTO memory.retention_policies (org_id, tier, retention_days) VALUES ('x', 'internal', 100000) $$, '22023', NULL, 'absurd retention days are 22023');
SELECT throws_ok($$ INSERT INTO memory.retention_policies (org_id, tier, retention_days, soft_delete_grace_days) VALUES ('x', 'internal', 10, -3) $$, '22023', NULL, 'negative grace days are 22023');
SELECT throws_ok($$ INSERT INTO memory.retention_policies (org_id, tier, retention_days) VALUES ('x', 'secret', 10) $$, '22P02', NULL, 'a policy for an unknown tier is refused by the enum');
SELECT throws_ok($$ INSERT INTO memory.retention_policies (org_id, tier, retention_days) VALUES ('acme', 'confidential', 10) $$, '23505', NULL, 'one policy per org and tier');
SELECT throws_ok($$ SELECT * FROM memory.retention_policy('acme', NULL) $$, '22023', NULL, 'a NULL tier is 22023');

-- Stamps at write ------------------------------------------------------------------------------------
INSERT INTO memory.observations (id, org_id, content, memory_type, created_at) VALUES
  ('00000000-0000-0000-0000-000000000001', 'globex', 'plain note', 'long_term', '2026-01-01 00:00+00'),
  ('00000000-0000-0000-0000-000000000002', 'globex', 'ssn 123-45-6789', 'long_term', '2026-01-01 00:00+00'),
  ('00000000-0000-0000-0000-000000000003', 'globex', 'session scratch', 'short_term', '2026-01-01 00:00+00'),
  ('00000000-0000-0000-0000-000000000004', 'bank', 'customer ssn', 'episodic', '2026-01-01 00:00+00');
SELECT results_eq($$ SELECT expires_at, purge_after, archive_at FROM memory.observations WHERE id = '00000000-0000-0000-0000-000000000001' $$,
                  $$ VALUES ('2027-01-01 00:00+00'::timestamptz, '2027-01-31 00:00+00'::timestamptz, '2027-01-01 00:00+00'::timestamptz) $$,
                  'internal long_term: 365 days, 30 days grace, archive after 365 days');
SELECT results_eq($$ SELECT expires_at, purge_after FROM memory.observations WHERE id = '00000000-0000-0000-0000-000000000002' $$,
                  $$ VALUES ('2026-01-31 00:00+00'::timestamptz, '2026-02-07 00:00+00'::timestamptz) $$, 'restricted: 30 days, 7 days grace');
SELECT is(expires_at, '2026-01-01 01:00+00'::timestamptz, 'short_term: the 1-hour TTL comes first') FROM memory.observations WHERE id = '00000000-0000-0000-0000-000000000003';
SELECT results_eq($$ SELECT expires_at, archive_at FROM memory.observations WHERE id = '00000000-0000-0000-0000-000000000004' $$,
                  $$ VALUES ('2026-04-01 00:00+00'::timestamptz, '2026-04-01 00:00+00'::timestamptz) $$,
                  'BFSI restricted episodic: the 90-day TTL is earlier than 2555 days');
SELECT memory.reclassify('00000000-0000-0000-0000-000000000002', 'internal', 'test fixture');
SELECT is(expires_at, '2027-01-01 00:00+00'::timestamptz, 'reclassify re-stamps') FROM memory.observations WHERE id = '00000000-0000-0000-0000-000000000002';
UPDATE memory.retention_policies SET retention_days = 10 WHERE org_id IS NULL AND tier = 'internal';
SELECT is(expires_at, '2027-01-01 00:00+00'::timestamptz, 'a policy change does not backdate existing rows') FROM memory.observations WHERE id = '00000000-0000-0000-0000-000000000001';
INSERT INTO memory.observations (id, org_id, content, created_at) VALUES ('00000000-0000-0000-0000-000000000005', 'globex', 'new note', '2026-01-01 00:00+00');
SELECT is(expires_at, '2026-01-11 00:00+00'::timestamptz, 'new rows follow the changed policy at once (caches invalidated)') FROM memory.observations WHERE id = '00000000-0000-0000-0000-000000000005';
CREATE TABLE public.nostamps (id int, content text, classification memory.classification);
SELECT throws_ok($$ SELECT memory.govern('public.nostamps', '{"stamps": true}') $$, '22023', NULL, 'stamps on a table without the stamp columns is 22023');
SELECT throws_ok($$ SELECT memory.govern('public.nostamps', '{"classify": false, "stamps": true}') $$, '22023', NULL, 'stamps without classification is 22023');
SELECT is(count(*), 0::bigint, 'and nothing was attached') FROM pg_trigger WHERE tgrelid = 'public.nostamps'::regclass;

-- The pipeline ---------------------------------------------------------------------------------------
DELETE FROM memory.observations;
UPDATE memory.retention_policies SET retention_days = 365 WHERE org_id IS NULL AND tier = 'internal';
INSERT INTO memory.observations (id, org_id, user_id, content, memory_type, created_at) VALUES
  ('00000000-0000-0000-0000-0000000000a1', 'acme', 'u1', 'ssn a', 'long_term', '2026-01-01 00:00+00'),
  ('00000000-0000-0000-0000-0000000000a2', 'acme', 'u2', 'ssn b', 'long_term', '2026-01-01 00:00+00'),
  ('00000000-0000-0000-0000-0000000000a3', 'acme', 'u1', 'old plain note', 'long_term', '2025-01-01 00:00+00'),
  ('00000000-0000-0000-0000-0000000000a4', 'acme', 'u3', 'schema note', 'structured', '2025-08-01 00:00+00');
INSERT INTO memory.legal_holds (org_id, user_id, reason) VALUES ('acme', 'u2', 'litigation');
SELECT is(memory.run_retention(true, '2026-02-05 00:00+00') - 'at' - 'tables' - 'skipped_tables' - 'locked_tables' - 'failed_tables',
          '{"soft_deleted": 2, "hard_deleted": 0, "archived": 1, "denied": 1, "dry_run": true, "items_purged": 0, "archive": {"soft_deleted": 0, "hard_deleted": 0, "denied": 0}}'::jsonb,
          'a dry run reports: a1 and a3 expired (a3 not also archived), a2 held, a4 due for the archive');
SELECT is(count(*), 0::bigint, 'and changes nothing') FROM memory.observations WHERE soft_deleted_at IS NOT NULL;
SELECT is(memory.run_retention(false, '2026-02-05 00:00+00') - 'at' - 'tables' - 'skipped_tables' - 'locked_tables' - 'failed_tables',
          '{"soft_deleted": 2, "hard_deleted": 0, "archived": 1, "denied": 1, "dry_run": false, "items_purged": 0, "archive": {"soft_deleted": 0, "hard_deleted": 0, "denied": 0}}'::jsonb, 'the run soft-deletes and archives');
SELECT is_empty($$ SELECT 1 FROM memory.live_observations WHERE id IN ('00000000-0000-0000-0000-0000000000a1', '00000000-0000-0000-0000-0000000000a3') $$,
                'soft-deleted rows are gone from live_observations');
SELECT is_empty($$ SELECT 1 FROM memory.recall('acme', 'note', 10) $$, 'and from recall');
SELECT is(memory.run_retention(false, '2026-02-10 00:00+00')->'hard_deleted', '0'::jsonb, 'a late run still leaves the full grace after the soft delete');
SELECT is(memory.run_retention(false, '2026-03-08 00:00+00') - 'at' - 'tables' - 'skipped_tables' - 'locked_tables' - 'failed_tables',
          '{"soft_deleted": 0, "hard_deleted": 2, "archived": 0, "denied": 1, "dry_run": false, "items_purged": 0, "archive": {"soft_deleted": 0, "hard_deleted": 0, "denied": 0}}'::jsonb,
          'after the grace: hard delete; the held row still denied');
SELECT results_eq($$ SELECT id::text FROM memory.observations ORDER BY id $$, $$ VALUES ('00000000-0000-0000-0000-0000000000a2') $$, 'only the held row remains hot');
SELECT results_eq($$ SELECT id::text, archived_at FROM memory.observations_archive $$,
                  $$ VALUES ('00000000-0000-0000-0000-0000000000a4', '2026-02-05 00:00+00'::timestamptz) $$, 'the archive holds the structured row, out of the hot table');
SELECT results_eq($$ SELECT payload->>'classification', payload->'observationIds', payload->>'dryRun', payload ? 'retentionPolicyId', payload ? 'workspaceId'
                      FROM public.audit_log_now() WHERE event_type = 'memory.purge' ORDER BY seq $$,
                  $$ VALUES ('internal', '["00000000-0000-0000-0000-0000000000a3"]'::jsonb, 'false', true, true),
                            ('restricted', '["00000000-0000-0000-0000-0000000000a1"]'::jsonb, 'false', true, true) $$,
                  'memory.purge events carry the seed payload');
SELECT ok((SELECT count(*) FROM public.audit_log_now() WHERE event_type = 'memory.purge.denied') >= 3, 'every run records the denial');
CREATE FUNCTION pg_temp.deny_all(uuid) RETURNS boolean LANGUAGE sql AS 'SELECT false';
INSERT INTO memory.org_settings (org_id, retention_guard) VALUES ('guarded', 'pg_temp.deny_all'::regproc);
INSERT INTO memory.observations (org_id, content, created_at) VALUES ('guarded', 'ssn g', '2026-01-01 00:00+00');
SELECT is(memory.run_retention(false, '2026-02-05 00:00+00')->'denied', '2'::jsonb, 'an org guard that says no keeps the row (denied)');
CREATE FUNCTION pg_temp.boom(uuid) RETURNS boolean LANGUAGE plpgsql AS $f$ BEGIN RAISE EXCEPTION 'guard exploded'; END $f$;
UPDATE memory.org_settings SET retention_guard = 'pg_temp.boom'::regproc WHERE org_id = 'guarded';
SELECT is(memory.run_retention(false, '2026-02-06 00:00+00')->'denied', '2'::jsonb, 'a guard that raises denies (the run goes on)');
SELECT is(count(*), 1::bigint, 'and the guarded row is kept') FROM memory.observations WHERE org_id = 'guarded' AND soft_deleted_at IS NULL;
DROP FUNCTION pg_temp.boom(uuid);
SELECT is(memory.run_retention(false, '2026-02-07 00:00+00')->'denied', '2'::jsonb, 'a guard that no longer exists denies');
SELECT is(count(*), 1::bigint, 'and the row is still kept') FROM memory.observations WHERE org_id = 'guarded' AND soft_deleted_at IS NULL;
SELECT ok((SELECT verdict.ok FROM memory.audit_verify('acme') verdict), 'the chain verifies after the pipeline');

-- Governed application tables: stamps with remapped columns, swept by run_retention ---------------------
CREATE TABLE public.notes (id bigserial PRIMARY KEY, tenant text, owner text, body text, tier memory.classification,
                           created_at timestamptz NOT NULL DEFAULT now(), expiry timestamptz, purge_after timestamptz,
                           archive_at timestamptz, soft_deleted_at timestamptz);
SELECT is(memory.govern('public.notes', '{"content": "body", "target": "tier", "org": "tenant", "user": "owner",
                                          "stamps": {"expires_at": "expiry"}}')->'stamps'->>'expires_at', 'expiry',
          'stamps accept a column mapping');
INSERT INTO public.notes (tenant, owner, body, created_at) VALUES
  ('acme', 'erin', 'erin ssn', '2026-01-01 00:00+00'), ('acme', 'dave', 'dave ssn', '2026-01-01 00:00+00'),
  ('acme', 'erin', 'recent note', '2026-03-01 00:00+00');
SELECT is(expiry, '2026-01-31 00:00+00'::timestamptz, 'the remapped expiry column is stamped') FROM public.notes WHERE body = 'erin ssn';
INSERT INTO memory.legal_holds (org_id, user_id, reason) VALUES ('acme', 'dave', 'hold on dave');
SELECT is(memory.run_retention(false, '2026-03-08 00:00+00')->'tables'->'public.notes', '{"soft_deleted": 1, "hard_deleted": 0, "denied": 1}'::jsonb,
          'run_retention sweeps the governed table: erin''s expired row soft-deleted, dave''s held');
SELECT is(soft_deleted_at, '2026-03-08 00:00+00'::timestamptz, 'soft-deleted in the application table') FROM public.notes WHERE body = 'erin ssn';
SELECT is(memory.run_retention(false, '2026-03-20 00:00+00')->'tables'->'public.notes'->>'hard_deleted', '1', 'hard-deleted after the grace');
SELECT results_eq($$ SELECT body FROM public.notes ORDER BY id $$, $$ VALUES ('dave ssn'), ('recent note') $$, 'held and recent rows remain');
SELECT ok(EXISTS (SELECT 1 FROM public.audit_log_now() WHERE event_type = 'memory.purge' AND payload->>'table' = 'public.notes'), 'a memory.purge event names the table');
-- The hard delete runs as the table's owner without the hold gate: a trigger of the owner's that it
-- fires meets every legal hold (here: one trying to rewrite a held memory, catching its error).
INSERT INTO memory.observations (id, org_id, content) VALUES ('00000000-0000-0000-0000-0000000009a1', 'acme', 'The held contract');
INSERT INTO memory.legal_holds (org_id, observation_id, reason) VALUES ('acme', '00000000-0000-0000-0000-0000000009a1', 'case 77');
CREATE FUNCTION public.notes_sneak() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
    BEGIN
        UPDATE memory.observations SET content = 'rewritten by a purge trigger' WHERE id = '00000000-0000-0000-0000-0000000009a1';
    EXCEPTION WHEN OTHERS THEN NULL;
    END;
    RETURN NULL;
END $f$;
CREATE TRIGGER notes_sneak AFTER DELETE ON public.notes FOR EACH STATEMENT EXECUTE FUNCTION public.notes_sneak();
INSERT INTO public.notes (tenant, owner, body, created_at) VALUES ('acme', 'erin', 'erin ssn again', '2026-03-01 00:00+00');
SELECT memory.run_retention(false, '2026-04-01 00:00+00');
SELECT is(memory.run_retention(false, '2026-04-20 00:00+00')->'tables'->'public.notes'->>'hard_deleted', '1', '(the row is hard-deleted)');
SELECT is((SELECT content FROM memory.observations WHERE id = '00000000-0000-0000-0000-0000000009a1'), 'The held contract',
          'an owner''s trigger fired by the hard delete does not rewrite a held memory');
DROP TRIGGER notes_sneak ON public.notes;
CREATE TABLE public.nosoft (id bigserial PRIMARY KEY, content text, classification memory.classification,
                            created_at timestamptz DEFAULT now(), expires_at timestamptz, purge_after timestamptz, archive_at timestamptz);
SELECT memory.govern('public.nosoft', '{"stamps": true}');
SELECT ok(memory.run_retention(true)->'skipped_tables' ? 'public.nosoft', 'a table without a soft-delete column is reported as skipped');
SELECT throws_ok($$ SELECT memory.govern('public.nosoft', '{"stamps": {"expires": "x"}}') $$, '22023', NULL, 'an unknown stamps key is 22023');

SELECT * FROM finish();
ROLLBACK;
