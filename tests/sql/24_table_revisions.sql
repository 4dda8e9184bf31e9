-- SQL-level suite for the revisions of governed application tables (issue 49, SPEC §17:
-- memory.govern's "revisions"): a correction kept and seen in memory.history(table, row_id), as
-- tenant-bound roles and a table owner that is not a superuser; clearance per revision, the
-- tenant policy, forget, erasure, retention, TRUNCATE, DROP and the option turned off removing
-- them with the rows; legal holds respected; bad input refused.
BEGIN;
SELECT plan(59);

SELECT memory.setup_roles();
CREATE ROLE tr_owner LOGIN IN ROLE memory_writer;          -- owns the governed table; bound to acme
CREATE ROLE tr_writer IN ROLE memory_writer;               -- an application writer of acme
CREATE ROLE tr_reader IN ROLE memory_reader;               -- acme, cleared to the default
CREATE ROLE tr_internal IN ROLE memory_reader;             -- acme, cleared to internal
CREATE ROLE tr_globex IN ROLE memory_reader;               -- globex only
CREATE ROLE tr_nosel IN ROLE memory_reader;                -- acme, without SELECT on the table
CREATE ROLE tr_admin IN ROLE memory_admin;
SELECT memory.grant_org('tr_owner', 'acme'), memory.grant_org('tr_writer', 'acme'), memory.grant_org('tr_reader', 'acme'),
       memory.grant_org('tr_internal', 'acme', 'internal'), memory.grant_org('tr_globex', 'globex'),
       memory.grant_org('tr_nosel', 'acme'), memory.grant_org('tr_admin', 'acme');
GRANT CREATE ON SCHEMA public TO tr_owner;

-- ------------------------------------------------------------------------------------------------
-- Govern: the option needs an id column and a content column.
SET ROLE tr_owner;
CREATE TABLE public.tr_noid (org_id text, content text, classification memory.classification);
SELECT throws_ok($$ SELECT memory.govern('public.tr_noid', '{"audit": true, "revisions": true}') $$, '22023',
                 '"revisions" needs an id column, and public.tr_noid has none', 'revisions on a table without an id column: 22023');
SELECT is((SELECT count(*) FROM pg_trigger WHERE tgrelid = 'public.tr_noid'::regclass), 0::bigint, 'and nothing was attached');
CREATE TABLE public.tr_nobody (id bigserial PRIMARY KEY, org_id text, note text);
SELECT throws_ok($$ SELECT memory.govern('public.tr_nobody', '{"classify": false, "audit": true, "revisions": true}') $$, '22023',
                 '"revisions" needs a content column, and public.tr_nobody has none', 'revisions on a table without a content column: 22023');
SELECT throws_ok($$ SELECT memory.govern('public.tr_noid', '{"revisions": "yes"}') $$, '22023', NULL, '"revisions" must be a boolean');

CREATE TABLE public.tr_notes (id bigserial PRIMARY KEY, org_id text NOT NULL, user_id text, content text,
                              classification memory.classification, created_at timestamptz NOT NULL DEFAULT now(),
                              expires_at timestamptz, purge_after timestamptz, archive_at timestamptz, soft_deleted_at timestamptz);
SELECT is(memory.govern('public.tr_notes', '{"audit": true, "tenant_policy": true, "stamps": true, "revisions": true}')->'revisions',
          'true'::jsonb, 'the owner governs its table with revisions');
SELECT ok((SELECT triggers @> ARRAY['memory_revisions', 'memory_revisions_gone', 'memory_revisions_truncate']
             FROM memory.governed_tables WHERE table_name = 'public.tr_notes'::regclass), 'the revision triggers are attached');
GRANT SELECT, INSERT, UPDATE, DELETE ON public.tr_notes TO tr_writer, tr_admin;
GRANT SELECT ON public.tr_notes TO tr_reader, tr_internal, tr_globex;
GRANT USAGE ON SEQUENCE public.tr_notes_id_seq TO tr_writer;
RESET ROLE;

-- ------------------------------------------------------------------------------------------------
-- A correction is kept and seen in history.
SET ROLE tr_writer;
INSERT INTO public.tr_notes (org_id, user_id, content, created_at) VALUES ('acme', 'dave', 'Dave prefers to be contacted by email', '2026-01-01 00:00+00');
SELECT is((SELECT count(*) FROM memory.history('public.tr_notes', (SELECT id::text FROM public.tr_notes))), 1::bigint,
          'a new row has one version and no revision');
SET memory.actor_id = 'agent-7';
SET LOCAL memory.change_reason = 'the customer corrected it';
UPDATE public.tr_notes SET content = 'Dave prefers to be contacted by phone';
RESET memory.change_reason;
RESET memory.actor_id;
UPDATE public.tr_notes SET user_id = 'dave';
RESET ROLE;
CREATE TEMP TABLE ids (name text PRIMARY KEY, id text);
GRANT SELECT ON ids TO PUBLIC;
INSERT INTO ids SELECT 'pref', id::text FROM public.tr_notes;
SET ROLE tr_reader;
SELECT is((SELECT array_agg(rev ORDER BY ord) FROM memory.history('public.tr_notes', (SELECT id FROM ids WHERE name = 'pref'))
                  WITH ORDINALITY h(rev, content, classification, valid_from, valid_to, actor, reason, ord)),
          ARRAY[2, 1], 'history: newest first, the current version and the one it replaced');
SELECT is((SELECT content FROM memory.history('public.tr_notes', (SELECT id FROM ids WHERE name = 'pref')) WHERE rev = 1),
          'Dave prefers to be contacted by email', 'the revision keeps the old content');
SELECT is((SELECT content FROM memory.history('public.tr_notes', (SELECT id FROM ids WHERE name = 'pref')) WHERE valid_to IS NULL),
          'Dave prefers to be contacted by phone', 'the current version is the corrected row');
SELECT is((SELECT reason FROM memory.history('public.tr_notes', (SELECT id FROM ids WHERE name = 'pref')) WHERE rev = 1),
          'the customer corrected it', 'memory.change_reason is the revision''s reason');
SELECT ok((SELECT actor LIKE 'h:%;role:tr_writer' AND actor NOT LIKE '%agent-7%'
             FROM memory.history('public.tr_notes', (SELECT id FROM ids WHERE name = 'pref')) WHERE rev = 1),
          'the actor is pseudonymised as the audit names it, with the role');
SELECT is((SELECT valid_from FROM memory.history('public.tr_notes', (SELECT id FROM ids WHERE name = 'pref')) WHERE rev = 1),
          '2026-01-01 00:00+00'::timestamptz, 'the first revision is valid from the row''s created_at stamp');
SELECT is((SELECT count(*) FROM memory.table_revisions), 1::bigint, 'a change of another column keeps no revision');
RESET ROLE;

-- Writers do not write or remove revisions themselves; the trigger functions run only as govern attaches them.
SET ROLE tr_writer;
SELECT throws_ok($$ INSERT INTO memory.table_revisions (relid, org_id, row_id, rev, classification, valid_to, actor)
                    VALUES ('public.tr_notes', 'acme', '1', 9, 'public', now(), 'x') $$, '42501', NULL, 'a writer does not insert a revision');
SELECT throws_ok($$ DELETE FROM memory.table_revisions $$, '42501', NULL, 'nor delete one');
RESET ROLE;
SET ROLE tr_owner;
CREATE TABLE public.tr_rogue (id int PRIMARY KEY, content text);
INSERT INTO public.tr_rogue VALUES (1, 'a');
CREATE TRIGGER memory_revisions AFTER UPDATE ON public.tr_rogue FOR EACH ROW
    EXECUTE FUNCTION memory_internal._keep_table_revision('id', 'content', '', '', '', '', '');
SELECT throws_ok($$ UPDATE public.tr_rogue SET content = 'b' $$, '39P01', NULL,
                 'the revision trigger attached by hand to a table not governed with revisions refuses');
RESET ROLE;

-- ------------------------------------------------------------------------------------------------
-- Tenant policy and SELECT on the table.
SET ROLE tr_globex;
SELECT is((SELECT count(*) FROM memory.history('public.tr_notes', (SELECT id FROM ids WHERE name = 'pref'))), 0::bigint,
          'another org''s reader gets no version of acme''s row');
SELECT is((SELECT count(*) FROM memory.table_revisions), 0::bigint, 'and reads no acme revision directly');
RESET ROLE;
SET ROLE tr_nosel;
SELECT throws_ok($$ SELECT * FROM memory.history('public.tr_notes', '1') $$, '42501', NULL, 'a reader without SELECT on the table: 42501');
SELECT is((SELECT count(*) FROM memory.table_revisions), 0::bigint, 'and it reads none of the table''s revisions directly');
SELECT is((SELECT count(*) FROM memory_internal._table_revision_head('public.tr_notes', 'acme', (SELECT id FROM ids WHERE name = 'pref'), 'public')
            WHERE rev IS NOT NULL), 0::bigint, '_table_revision_head tells it nothing either');
RESET ROLE;

-- ------------------------------------------------------------------------------------------------
-- Clearance per revision: an internal text corrected to a confidential one.
SET ROLE tr_writer;
INSERT INTO public.tr_notes (org_id, content, classification) VALUES ('acme', 'Pricing plan outline', 'internal');
RESET ROLE;
INSERT INTO ids SELECT 'plan', id::text FROM public.tr_notes WHERE content LIKE 'Pricing%';
SET ROLE tr_writer;
UPDATE public.tr_notes SET content = 'Quarterly pricing plan draft', classification = 'confidential' WHERE id = (SELECT id::bigint FROM ids WHERE name = 'plan');
RESET ROLE;
SELECT is((SELECT array_agg(classification::text ORDER BY rev) FROM memory.table_revisions WHERE row_id = (SELECT id FROM ids WHERE name = 'plan')),
          ARRAY['internal'], 'the revision keeps the tier it had');
SET ROLE tr_internal;
SELECT is((SELECT array_agg(content ORDER BY rev) FROM memory.history('public.tr_notes', (SELECT id FROM ids WHERE name = 'plan'))),
          ARRAY['Pricing plan outline'], 'a reader cleared to internal sees the internal revision, not the confidential row');
RESET ROLE;
SET ROLE tr_reader;
SELECT is((SELECT array_agg(rev ORDER BY rev) FROM memory.history('public.tr_notes', (SELECT id FROM ids WHERE name = 'plan'))), ARRAY[1, 2],
          'a reader cleared to confidential sees both');
RESET ROLE;
-- A tier raised while the text stays: earlier versions are raised too.
SET ROLE tr_owner;
UPDATE public.tr_notes SET classification = 'restricted' WHERE id = (SELECT id::bigint FROM ids WHERE name = 'plan');
RESET ROLE;
SELECT is((SELECT array_agg(classification::text ORDER BY rev) FROM memory.table_revisions WHERE row_id = (SELECT id FROM ids WHERE name = 'plan')),
          ARRAY['restricted', 'restricted'], 'a tier raised while the text stays keeps a version and raises the kept ones too');
SET ROLE tr_internal;
SELECT is((SELECT count(*) FROM memory.history('public.tr_notes', (SELECT id FROM ids WHERE name = 'plan'))), 0::bigint,
          'so a reader cleared below reads none of them');
RESET ROLE;

-- ------------------------------------------------------------------------------------------------
-- Forget removes the revisions with the row.
SET ROLE tr_writer;
SELECT is(jsonb_array_length(memory.forget('public.tr_notes', ARRAY[(SELECT id FROM ids WHERE name = 'plan')], 'asked')->'forgotten'), 1,
          'forget removes the row');
RESET ROLE;
SELECT is((SELECT count(*) FROM memory.table_revisions WHERE row_id = (SELECT id FROM ids WHERE name = 'plan')), 0::bigint,
          'and its revisions');
SELECT is((SELECT count(*) FROM memory.table_revisions WHERE row_id = (SELECT id FROM ids WHERE name = 'pref')), 1::bigint,
          'another row''s revisions stay');

-- ------------------------------------------------------------------------------------------------
-- Legal holds: a held row's revisions stay; the option is not turned off under a hold.
INSERT INTO memory.legal_holds (id, org_id, user_id, reason) OVERRIDING SYSTEM VALUE VALUES (951, 'acme', 'dave', 'litigation');
SET ROLE tr_writer;
SELECT throws_ok($$ UPDATE public.tr_notes SET content = 'changed under hold' WHERE user_id = 'dave' $$, 'MX006', NULL,
                 'a held row''s content is not changed');
SELECT throws_ok($$ DELETE FROM public.tr_notes WHERE user_id = 'dave' $$, 'MX006', NULL, 'nor the row deleted');
RESET ROLE;
SET ROLE tr_owner;
SELECT throws_ok($$ SELECT memory.govern('public.tr_notes', '{"audit": true, "tenant_policy": true, "stamps": true}') $$, 'MX006', NULL,
                 'turning revisions off is refused while a revision''s row is held');
SELECT throws_ok($$ SELECT memory.ungovern('public.tr_notes') $$, 'MX006', NULL, 'so is ungovern');
RESET ROLE;
SELECT is((SELECT count(*) FROM memory.table_revisions WHERE row_id = (SELECT id FROM ids WHERE name = 'pref')), 1::bigint,
          'the held row''s revision stays');

-- Erasure: the subject's rows go, held or not, and their revisions with them.
SET ROLE tr_admin;
SELECT is((memory.erase_subject('dave')->'tables'->>'public.tr_notes')::int, 1, 'erase_subject deletes the subject''s row');
RESET ROLE;
SELECT is((SELECT count(*) FROM memory.table_revisions WHERE row_id = (SELECT id FROM ids WHERE name = 'pref')), 0::bigint,
          'and its revisions');
UPDATE memory.legal_holds SET released_at = now() WHERE id = 951;

-- ------------------------------------------------------------------------------------------------
-- Retention: the soft delete keeps them, the hard delete takes them.
SET ROLE tr_writer;
INSERT INTO public.tr_notes (org_id, user_id, content, created_at) VALUES ('acme', 'erin', 'erin ssn 123-45-6789', '2026-01-01 00:00+00');
UPDATE public.tr_notes SET content = 'erin ssn 123-45-6780' WHERE user_id = 'erin';
RESET ROLE;
INSERT INTO ids SELECT 'erin', id::text FROM public.tr_notes WHERE user_id = 'erin';
SELECT is((SELECT count(*) FROM memory.table_revisions WHERE row_id = (SELECT id FROM ids WHERE name = 'erin')), 1::bigint, 'erin''s row has a revision');
SELECT is(memory.run_retention(false, (SELECT expires_at + interval '1 hour' FROM public.tr_notes WHERE user_id = 'erin'))->'tables'->'public.tr_notes'->>'soft_deleted',
          '1', 'retention soft-deletes the expired row');
SELECT is((SELECT count(*) FROM memory.table_revisions WHERE row_id = (SELECT id FROM ids WHERE name = 'erin')), 1::bigint, 'its revision stays while it is kept');
SELECT is(memory.run_retention(false, (SELECT greatest(purge_after, soft_deleted_at + interval '30 days') + interval '1 day' FROM public.tr_notes WHERE user_id = 'erin'))
            ->'tables'->'public.tr_notes'->>'hard_deleted', '1', 'retention hard-deletes it');
SELECT is((SELECT count(*) FROM memory.table_revisions WHERE row_id = (SELECT id FROM ids WHERE name = 'erin')), 0::bigint, 'and its revision with it');

-- ------------------------------------------------------------------------------------------------
-- A table without an org column or stamps, a text id and a jsonb tier column.
SET ROLE tr_owner;
CREATE TABLE public.tr_plain (id text PRIMARY KEY, content text, meta jsonb);
SELECT is(memory.govern('public.tr_plain', '{"target": "meta", "revisions": true}')->>'id', 'id', 'a table without an org column keeps revisions by its id');
GRANT SELECT, INSERT, UPDATE, DELETE ON public.tr_plain TO tr_writer;
GRANT SELECT ON public.tr_plain TO tr_reader;
RESET ROLE;
SET ROLE tr_writer;
INSERT INTO public.tr_plain (id, content) VALUES ('k1', 'first text');
UPDATE public.tr_plain SET content = 'second text' WHERE id = 'k1';
RESET ROLE;
SET ROLE tr_reader;
SELECT results_eq($$ SELECT rev, content, valid_from IS NULL FROM memory.history('public.tr_plain', 'k1') $$,
                  $$ VALUES (2, 'second text', false), (1, 'first text', true) $$,
                  'its history: the row, then the revision (valid from an unknown time without a created_at stamp)');
SELECT is((SELECT classification FROM memory.history('public.tr_plain', 'k1') WHERE rev = 1),
          (SELECT (meta->>'classification')::memory.classification FROM public.tr_plain), 'the tier is read from the jsonb target');
SELECT is((SELECT count(*) FROM memory.history('public.tr_plain', 'k9')), 0::bigint, 'an unknown id: no rows');
RESET ROLE;
SET ROLE tr_globex;
SELECT throws_ok($$ SELECT * FROM memory.history('public.tr_plain', 'k1') $$, '42501', NULL, 'without SELECT on it: 42501');
RESET ROLE;
SET ROLE tr_writer;
DELETE FROM public.tr_plain;
RESET ROLE;
SELECT is((SELECT count(*) FROM memory.table_revisions WHERE relid = 'public.tr_plain'::regclass), 0::bigint,
          'an application''s own DELETE takes the revisions too');

-- ------------------------------------------------------------------------------------------------
-- TRUNCATE, the option turned off, DROP TABLE.
SET ROLE tr_writer;
INSERT INTO public.tr_notes (org_id, content) VALUES ('acme', 'one'), ('acme', 'two');
UPDATE public.tr_notes SET content = content || ' changed';
RESET ROLE;
SELECT is((SELECT count(*) FROM memory.table_revisions WHERE relid = 'public.tr_notes'::regclass), 2::bigint, 'two rows, two revisions');
SET ROLE tr_owner;
TRUNCATE public.tr_notes;
RESET ROLE;
SELECT is((SELECT count(*) FROM memory.table_revisions WHERE relid = 'public.tr_notes'::regclass), 0::bigint, 'TRUNCATE takes the table''s revisions');
SET ROLE tr_writer;
INSERT INTO public.tr_notes (org_id, content) VALUES ('acme', 'three');
UPDATE public.tr_notes SET content = 'three changed';
RESET ROLE;
SET ROLE tr_owner;
SELECT is(memory.govern('public.tr_notes', '{"audit": true, "tenant_policy": true, "stamps": true}') ? 'revisions', false,
          'the owner turns revisions off');
RESET ROLE;
SELECT is((SELECT count(*) FROM memory.table_revisions WHERE relid = 'public.tr_notes'::regclass), 0::bigint,
          'and the table''s revisions go (nothing would remove them with their rows any more)');
SELECT ok(NOT (SELECT triggers && ARRAY['memory_revisions', 'memory_revisions_gone', 'memory_revisions_truncate']
                 FROM memory.governed_tables WHERE table_name = 'public.tr_notes'::regclass), 'with the triggers');
SET ROLE tr_reader;
SELECT throws_ok($$ SELECT * FROM memory.history('public.tr_notes', '1') $$, '22023', 'table public.tr_notes keeps no revisions',
                 'history of a table without the option: 22023');
SELECT throws_ok($$ SELECT * FROM memory.history(NULL::regclass, '1') $$, '22023', NULL, 'a NULL table: 22023');
RESET ROLE;
SET ROLE tr_owner;
SELECT memory.govern('public.tr_notes', '{"audit": true, "tenant_policy": true, "stamps": true, "revisions": true}');
UPDATE public.tr_notes SET content = 'three changed again';
SELECT is((SELECT count(*) FROM memory.history('public.tr_notes', (SELECT id::text FROM public.tr_notes))), 2::bigint,
          'turned on again, a history starts from the next change');
DROP TABLE public.tr_notes;
RESET ROLE;
SELECT is((SELECT count(*) FROM memory.table_revisions WHERE relid::oid NOT IN (SELECT oid FROM pg_class)), 0::bigint, 'DROP TABLE takes its revisions');

-- The revisions trigger (SECURITY DEFINER) reads only the mapped columns, never the whole row: a
-- cast to json the table's owner made for a type of another column (to_jsonb of the row would
-- call it) never runs with the extension owner's rights.
CREATE TABLE public.tr_seen (who text, super boolean);
GRANT SELECT, INSERT ON public.tr_seen TO PUBLIC;
SET ROLE tr_owner;
CREATE TYPE public.tr_mood AS ENUM ('calm', 'busy');
CREATE FUNCTION public.tr_mood_json(m public.tr_mood) RETURNS json LANGUAGE sql VOLATILE
AS $$ INSERT INTO public.tr_seen SELECT current_user, r.rolsuper FROM pg_roles r WHERE r.rolname = current_user RETURNING to_json(m::text) $$;
CREATE CAST (public.tr_mood AS json) WITH FUNCTION public.tr_mood_json(public.tr_mood);
CREATE TABLE public.tr_moods (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), org_id text NOT NULL, content text, meta jsonb,
                              mood public.tr_mood NOT NULL DEFAULT 'calm', created_at timestamptz NOT NULL DEFAULT now());
SELECT memory.govern('public.tr_moods', '{"tenant_policy": true, "target": "meta", "revisions": true}');
GRANT SELECT, INSERT, UPDATE ON public.tr_moods TO tr_writer;
RESET ROLE;
SET ROLE tr_writer;
INSERT INTO public.tr_moods (org_id, content) VALUES ('acme', 'calm note');
UPDATE public.tr_moods SET content = 'Alice disclosed her medical condition', mood = 'busy';
RESET ROLE;
SELECT is((SELECT count(*) FROM public.tr_seen WHERE super OR who <> 'tr_writer'), 0::bigint,
          'the owner''s cast to json of another column''s type never runs as the extension owner (nor as any other role)');
SELECT is((SELECT array_agg(content || ':' || classification ORDER BY rev) FROM memory.table_revisions WHERE relid = 'public.tr_moods'::regclass),
          ARRAY['calm note:internal'], 'and the revision is kept with its jsonb tier');

SELECT * FROM finish();
ROLLBACK;
