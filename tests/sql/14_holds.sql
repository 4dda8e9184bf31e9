-- SQL-level suite for legal holds blocking writes (SPEC MX006; issue 18 item 5).
BEGIN;
SELECT plan(45);

INSERT INTO memory.observations (id, org_id, user_id, content) VALUES
  ('00000000-0000-0000-0000-0000000000a1', 'acme', 'dave', 'dave note 1'),
  ('00000000-0000-0000-0000-0000000000a2', 'acme', 'dave', 'dave note 2'),
  ('00000000-0000-0000-0000-0000000000a3', 'acme', 'erin', 'erin note'),
  ('00000000-0000-0000-0000-0000000000a4', 'globex', 'dave', 'another org''s dave');
INSERT INTO memory.legal_holds (id, org_id, user_id, reason) OVERRIDING SYSTEM VALUE VALUES (901, 'acme', 'dave', 'litigation');

SELECT throws_ok($$ UPDATE memory.observations SET content = 'rewritten' WHERE id = '00000000-0000-0000-0000-0000000000a1' $$,
                 'MX006', 'legal hold 901 covers this row of memory.observations: UPDATE of content, org_id, user_id, id is blocked',
                 'changing the content of a held observation is MX006, naming the hold');
SELECT throws_ok($$ DELETE FROM memory.observations WHERE id = '00000000-0000-0000-0000-0000000000a2' $$,
                 'MX006', 'legal hold 901 covers this row of memory.observations: DELETE is blocked', 'so is deleting it');
SELECT lives_ok($$ UPDATE memory.observations SET weight = 0.5 WHERE id = '00000000-0000-0000-0000-0000000000a1' $$,
                'other columns may change (a weight)');
SELECT throws_ok($$ UPDATE memory.observations SET user_id = 'nobody' WHERE id = '00000000-0000-0000-0000-0000000000a1' $$,
                 'MX006', NULL, 'a held row cannot be moved out of its subject''s hold (then deleted)');
SELECT lives_ok($$ DELETE FROM memory.observations WHERE id = '00000000-0000-0000-0000-0000000000a3' $$, 'another subject is not held');
SELECT lives_ok($$ DELETE FROM memory.observations WHERE id = '00000000-0000-0000-0000-0000000000a4' $$, 'nor is the same name in another org');

-- One observation, and a whole org.
INSERT INTO memory.observations (id, org_id, user_id, content) VALUES ('00000000-0000-0000-0000-0000000000b1', 'initech', 'x', 'one');
INSERT INTO memory.legal_holds (id, org_id, observation_id, reason) OVERRIDING SYSTEM VALUE
VALUES (902, 'initech', '00000000-0000-0000-0000-0000000000b1', 'subpoena');
SELECT throws_ok($$ DELETE FROM memory.observations WHERE id = '00000000-0000-0000-0000-0000000000b1' $$, 'MX006', NULL,
                 'a hold on one observation');
INSERT INTO memory.observations (id, org_id, user_id, content) VALUES ('00000000-0000-0000-0000-0000000000c1', 'umbrella', 'y', 'two');
INSERT INTO memory.legal_holds (id, org_id, reason) OVERRIDING SYSTEM VALUE VALUES (903, 'umbrella', 'regulator');
SELECT throws_ok($$ DELETE FROM memory.observations WHERE org_id = 'umbrella' $$, 'MX006', NULL, 'a hold on a whole org');

-- Release lifts it.
UPDATE memory.legal_holds SET released_at = now() WHERE id = 901;
SELECT lives_ok($$ UPDATE memory.observations SET content = 'rewritten' WHERE id = '00000000-0000-0000-0000-0000000000a1' $$,
                'after release the content may change');
SELECT lives_ok($$ DELETE FROM memory.observations WHERE id = '00000000-0000-0000-0000-0000000000a2' $$, 'and the row may go');
UPDATE memory.legal_holds SET released_at = NULL WHERE id = 901;

-- A governed application table, mapped by memory.govern.
CREATE TABLE app_notes (id bigint PRIMARY KEY, tenant text NOT NULL, person text, body text, classification memory.classification);
SELECT memory.govern('app_notes', '{"content": "body", "target": "classification", "org": "tenant", "user": "person"}');
SELECT ok(EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = 'app_notes'::regclass AND tgname = 'memory_hold'), 'govern attaches memory_hold');
INSERT INTO app_notes VALUES (1, 'acme', 'dave', 'held'), (2, 'acme', 'erin', 'free');
SELECT throws_ok($$ DELETE FROM app_notes WHERE id = 1 $$, 'MX006', 'legal hold 901 covers this row of public.app_notes: DELETE is blocked',
                 'a held row of a governed table cannot be deleted');
SELECT throws_ok($$ UPDATE app_notes SET body = 'changed' WHERE id = 1 $$, 'MX006', NULL, 'nor its content changed');
SELECT lives_ok($$ DELETE FROM app_notes WHERE id = 2 $$, 'other subjects'' rows can');
SELECT lives_ok($$ UPDATE app_notes SET classification = 'restricted' WHERE id = 1 $$, 'and other columns of the held row can change');

-- Retention and erasure keep their rules: they skip held rows instead of failing.
INSERT INTO memory.observations (id, org_id, user_id, content, created_at) VALUES
  ('00000000-0000-0000-0000-0000000000d1', 'acme', 'dave', 'old and held', now() - interval '3 years');
UPDATE memory.observations SET expires_at = now() - interval '1 year', purge_after = now() - interval '300 days'
 WHERE id = '00000000-0000-0000-0000-0000000000d1';
SELECT lives_ok($$ SELECT memory.run_retention() $$, 'run_retention runs with a held expired row');
SELECT ok(EXISTS (SELECT 1 FROM memory.observations_archive WHERE id = '00000000-0000-0000-0000-0000000000d1' AND soft_deleted_at IS NULL),
          'and keeps it: not soft-deleted, moved to the archive as before (its hold follows it)');
SELECT is((memory.erase_subject('dave'))->>'held', '2', 'erase_subject reports dave''s held rows (hot and archived) instead of failing');
SELECT memory.ungovern('app_notes');
SELECT ok(NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = 'app_notes'::regclass AND tgname LIKE 'memory\_%'), 'ungovern removes it');

-- As the application lives it: a non-superuser owns the governed table and writes it (the guard,
-- the truncate guard and the hold lookup run with its rights).
SELECT memory.setup_roles();
CREATE ROLE hold_owner LOGIN IN ROLE memory_writer;
SELECT memory.grant_org('hold_owner', 'acme');
GRANT CREATE ON SCHEMA public TO hold_owner;
SET ROLE hold_owner;
CREATE TABLE public.owned_notes (id bigint PRIMARY KEY, tenant text NOT NULL, person text, body text, meta jsonb);
SELECT memory.govern('public.owned_notes', '{"content": "body", "target": "meta", "org": "tenant", "user": "person", "audit": true}');
INSERT INTO public.owned_notes (id, tenant, person, body) VALUES (1, 'acme', 'dave', 'held'), (2, 'acme', 'erin', 'free');
SELECT throws_ok($$ DELETE FROM public.owned_notes WHERE id = 1 $$, 'MX006', NULL, 'the owner''s DELETE of a held row is MX006, not a permission error');
SELECT throws_ok($$ UPDATE public.owned_notes SET body = 'changed' WHERE id = 1 $$, 'MX006', NULL, 'so is its content change');
SELECT throws_ok($$ TRUNCATE public.owned_notes $$, 'MX006', NULL, 'and a TRUNCATE that would take it');
SELECT lives_ok($$ DELETE FROM public.owned_notes WHERE id = 2 $$, 'the owner deletes rows nobody holds');
RESET ROLE;

-- A hold's MX006 raised under one of memory_ext's own statements (here forget's DELETE, whose row
-- fires the owner's trigger) reaches the caller as MX006 with its message (pgrx had made it XX000).
CREATE TABLE public.mx_notes (id bigint PRIMARY KEY, tenant text NOT NULL, person text, body text, meta jsonb);
SELECT memory.govern('public.mx_notes', '{"content": "body", "target": "meta", "org": "tenant", "user": "person"}');
INSERT INTO public.mx_notes (id, tenant, person, body) VALUES (1, 'acme', 'erin', 'a note');
CREATE FUNCTION public.mx_touch() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
    DELETE FROM public.owned_notes WHERE id = 1;
    RETURN OLD;
END $f$;
CREATE TRIGGER mx_touch AFTER DELETE ON public.mx_notes FOR EACH ROW EXECUTE FUNCTION public.mx_touch();
SELECT throws_ok($$ SELECT memory.forget('public.mx_notes', ARRAY['1'], 'x') $$,
                 'MX006', 'legal hold 901 covers this row of public.owned_notes: DELETE is blocked',
                 'an MX006 under forget''s own statement keeps its SQLSTATE and message');
SELECT is((SELECT body FROM public.mx_notes WHERE id = 1), 'a note', 'and the forget is undone with it');
DROP TABLE public.mx_notes;
DROP FUNCTION public.mx_touch();

-- The guard runs as the writer: attached to a table of one's own whose org column has a type of
-- one's own with a cast that runs code, that code runs with the writer's rights, never the owner's.
CREATE ROLE hold_mallory LOGIN;
GRANT CREATE ON SCHEMA public TO hold_mallory;
SET ROLE hold_mallory;
CREATE TYPE public.evil AS ENUM ('x');
CREATE FUNCTION public.evil_text(public.evil) RETURNS text LANGUAGE plpgsql
AS $f$ BEGIN EXECUTE format('ALTER ROLE %I SUPERUSER', current_user); RETURN 'x'; END $f$;
CREATE CAST (public.evil AS text) WITH FUNCTION public.evil_text(public.evil);
CREATE TABLE public.mal (org_id public.evil, body text);
INSERT INTO public.mal VALUES ('x', 'b');
CREATE TRIGGER h BEFORE DELETE ON public.mal FOR EACH ROW EXECUTE FUNCTION memory_internal._hold_guard('org_id', '', '', '');
SELECT throws_ok($$ DELETE FROM public.mal $$, '42501', NULL, 'the guard''s read of the column runs the cast as the writer: refused');
RESET ROLE;
SELECT ok(NOT (SELECT rolsuper FROM pg_roles WHERE rolname = 'hold_mallory'), 'and the writer did not become a superuser');

-- Issue 46: a held expired row moved to the archive follows its schedule there once the hold is
-- released: kept while held, soft-deleted by the next run after the release, hard-deleted after
-- its grace (not before), with the hot sweep's events; the chain verifies.
INSERT INTO memory.observations (id, org_id, user_id, content, memory_type, created_at) VALUES
  ('00000000-0000-0000-0000-0000000000e1', 'hooli', 'gavin', 'gavin''s old note', 'long_term', '2025-01-01 00:00+00'),
  ('00000000-0000-0000-0000-0000000000e2', 'hooli', 'gavin', 'gavin''s recent note', 'long_term', '2025-06-01 00:00+00');
SELECT results_eq($$ SELECT expires_at, purge_after, archive_at FROM memory.observations WHERE id = '00000000-0000-0000-0000-0000000000e1' $$,
                  $$ VALUES ('2026-01-01 00:00+00'::timestamptz, '2026-01-31 00:00+00'::timestamptz, '2026-01-01 00:00+00'::timestamptz) $$,
                  'internal long_term: expires and is due for the archive after 365 days, 30 days grace');
INSERT INTO memory.legal_holds (id, org_id, user_id, reason) OVERRIDING SYSTEM VALUE VALUES (904, 'hooli', 'gavin', 'audit');
SELECT is(memory.run_retention(false, '2026-02-15 00:00+00')->'archive', '{"soft_deleted": 0, "hard_deleted": 0, "denied": 1}'::jsonb,
          'the run that archives a held expired row does not sweep it in the archive too (the one denied is dave''s, archived above)');
SELECT results_eq($$ SELECT id::text, soft_deleted_at, archived_at FROM memory.observations_archive WHERE org_id = 'hooli' ORDER BY id $$,
                  $$ VALUES ('00000000-0000-0000-0000-0000000000e1', NULL::timestamptz, '2026-02-15 00:00+00'::timestamptz) $$,
                  'held and expired: moved to the archive with its stamps, not soft-deleted');
SELECT is(memory.run_retention(false, '2026-02-16 00:00+00')->'archive'->'soft_deleted', '0'::jsonb, 'while held, the archive keeps it');
SELECT ok(EXISTS (SELECT 1 FROM public.audit_log_now() WHERE event_type = 'memory.purge.denied'
                     AND payload->>'table' = 'memory.observations_archive' AND payload->>'stage' = 'soft_delete'
                     AND payload->'observationIds' ? '00000000-0000-0000-0000-0000000000e1'), 'and records the denial, naming the archive');
UPDATE memory.legal_holds SET released_at = '2026-02-16 12:00+00' WHERE id = 904;
SELECT is(memory.run_retention(true, '2026-02-17 00:00+00')->'archive', '{"soft_deleted": 1, "hard_deleted": 0, "denied": 1}'::jsonb,
          'released: a dry run reports the archived row due (dave''s is still held)');
SELECT is(soft_deleted_at, NULL, 'and changes nothing') FROM memory.observations_archive WHERE id = '00000000-0000-0000-0000-0000000000e1';
SELECT is(memory.run_retention(false, '2026-02-17 00:00+00') - 'at' - 'tables' - 'skipped_tables' - 'locked_tables' - 'failed_tables',
          '{"soft_deleted": 1, "hard_deleted": 0, "archived": 0, "denied": 1, "dry_run": false, "items_purged": 0,
            "archive": {"soft_deleted": 1, "hard_deleted": 0, "denied": 1}}'::jsonb,
          'the next run soft-deletes it in the archive (counted in the totals; dave''s archived row is still held)');
SELECT results_eq($$ SELECT soft_deleted_at, soft_delete_reason FROM memory.observations_archive WHERE id = '00000000-0000-0000-0000-0000000000e1' $$,
                  $$ VALUES ('2026-02-17 00:00+00'::timestamptz, 'retention') $$, 'soft-deleted where it is');
SELECT is(memory.run_retention(false, '2026-03-10 00:00+00')->'archive'->'hard_deleted', '0'::jsonb,
          'past purge_after but not yet a full grace after the soft delete: kept');
SELECT ok(EXISTS (SELECT 1 FROM memory.observations_archive WHERE id = '00000000-0000-0000-0000-0000000000e1'), 'still in the archive');
SELECT is(memory.run_retention(false, '2026-03-20 00:00+00')->'archive'->'hard_deleted', '1'::jsonb, 'after the grace: purged');
SELECT ok(NOT EXISTS (SELECT 1 FROM memory.observations_archive WHERE id = '00000000-0000-0000-0000-0000000000e1'), 'gone from the archive');
SELECT results_eq($$ SELECT payload->>'classification', payload->'observationIds', payload->>'dryRun', payload ? 'retentionPolicyId'
                      FROM public.audit_log_now() WHERE event_type = 'memory.purge' AND payload->>'table' = 'memory.observations_archive' $$,
                  $$ VALUES ('internal', '["00000000-0000-0000-0000-0000000000e1"]'::jsonb, 'false', true) $$,
                  'one memory.purge event with the hot sweep''s payload, naming the archive');
SELECT ok(EXISTS (SELECT 1 FROM memory.observations WHERE id = '00000000-0000-0000-0000-0000000000e2'), 'the recent row stays hot');
SELECT ok((SELECT verdict.ok FROM memory.audit_verify('hooli') verdict), 'the chain verifies');

-- The one hold match (memory_core::retention::hold_covers) every hold lookup calls (issue 38).
SELECT is(ARRAY(SELECT memory_internal._hold_matches(h.obs, h.usr, r.id, r.usr)
                  FROM (VALUES ('o1', NULL), (NULL, 'dave'), (NULL, NULL)) h(obs, usr),
                       (VALUES ('o1', 'erin'), ('o2', 'dave'), (NULL, NULL)) r(id, usr)
                 ORDER BY h.obs NULLS LAST, h.usr NULLS LAST, r.id NULLS LAST, r.usr NULLS LAST),
          ARRAY[true, false, false,  false, true, false,  true, true, true],
          'a hold covers its observation, or its subject''s observations, or (naming neither) the whole org');
SELECT is(memory_internal._max_clock_skew(), interval '5 minutes', 'the clock skew SQL checks against is core''s 5 minutes');

SELECT * FROM finish();
ROLLBACK;
