-- SQL-level suite for lineage on governed application tables (issue 50, SPEC §18: memory.govern's
-- "derived_from"): the sources checked at write (22023 for a missing, another org's or an
-- unreadable memory, more than 1,000, a NULL), the tier, trust and retention floors at write and
-- when a source tightens, and forget and erase_subject of a source removing the rows made from it
-- (through the table's row-level security and the caller's grants; held rows kept), named in
-- derived_forgotten and covered by the receipt; as tenant-bound roles and a table owner that is
-- not a superuser.
BEGIN;
SELECT plan(64);

SELECT memory.setup_roles();
CREATE ROLE lt_owner IN ROLE memory_writer;              -- owns the governed table; acme
CREATE ROLE lt_writer IN ROLE memory_writer;             -- an application writer of acme
CREATE ROLE lt_low IN ROLE memory_writer;                -- acme, cleared to internal
CREATE ROLE lt_nodel IN ROLE memory_writer;              -- acme, may not DELETE from the table
CREATE ROLE lt_globex IN ROLE memory_writer;             -- globex only
CREATE ROLE lt_admin IN ROLE memory_admin;
GRANT EXECUTE ON FUNCTION memory.reclassify(uuid, memory.classification, text) TO lt_admin;
SELECT memory.grant_org('lt_owner', 'acme'), memory.grant_org('lt_writer', 'acme'), memory.grant_org('lt_low', 'acme', 'internal'),
       memory.grant_org('lt_nodel', 'acme'), memory.grant_org('lt_globex', 'globex'), memory.grant_org('lt_admin', 'acme');
GRANT CREATE ON SCHEMA public TO lt_owner;

CREATE TEMP TABLE ids (name text PRIMARY KEY, id uuid);
GRANT SELECT, INSERT ON ids TO PUBLIC;
CREATE FUNCTION pg_temp.id(n text) RETURNS uuid LANGUAGE sql AS $$ SELECT id FROM ids WHERE name = n $$;

-- ------------------------------------------------------------------------------------------------
-- Govern: the option's checks.
SET ROLE lt_owner;
CREATE TABLE public.lt_bad (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), org_id text, content text,
                            classification memory.classification, sources text[]);
SELECT throws_ok($$ SELECT memory.govern('public.lt_bad', '{"derived_from": "sources"}') $$, '22023',
                 'the derived_from column "sources" of public.lt_bad must be uuid[]', 'a derived_from column that is not uuid[]: 22023');
SELECT throws_ok($$ SELECT memory.govern('public.lt_bad', '{"derived_from": "nosuch"}') $$, '22023', NULL, 'a missing column: 22023');
SELECT throws_ok($$ SELECT memory.govern('public.lt_bad', '{"derived_from": ["sources"]}') $$, '22023',
                 'option "derived_from" must be a column name', 'not a column name: 22023');
CREATE TABLE public.lt_noorg (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), content text, classification memory.classification, derived_from uuid[]);
SELECT throws_ok($$ SELECT memory.govern('public.lt_noorg', '{"derived_from": "derived_from"}') $$, '22023', NULL,
                 'a table without an org column: 22023');

CREATE TABLE public.lt_notes (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), org_id text NOT NULL, user_id text, content text,
                              classification memory.classification, source_type memory.source_type, derived_from uuid[],
                              created_at timestamptz NOT NULL DEFAULT now(), expires_at timestamptz, purge_after timestamptz,
                              archive_at timestamptz);
CREATE INDEX ON public.lt_notes USING gin (derived_from);
SELECT is(memory.govern('public.lt_notes', '{"audit": true, "tenant_policy": true, "stamps": true, "derived_from": "derived_from"}')->>'derived_from',
          'derived_from', 'the owner governs its table with derived_from');
SELECT ok((SELECT triggers @> ARRAY['memory_ancestry', 'memory_lineage', 'memory_ancestry_unset', 'memory_lineage_unset']
             FROM memory.governed_tables WHERE table_name = 'public.lt_notes'::regclass),
          'the lineage triggers are attached');
GRANT SELECT, INSERT, UPDATE, DELETE ON public.lt_notes TO lt_writer, lt_low, lt_globex, lt_admin;
GRANT SELECT, INSERT ON public.lt_notes TO lt_nodel;
RESET ROLE;

-- ------------------------------------------------------------------------------------------------
-- Sources, and a row made from them: the floors.
SET ROLE lt_writer;
WITH x AS (INSERT INTO memory.observations (org_id, user_id, content, source_type)
    VALUES ('acme', 'alice', 'Alice asked about the mortgage rates', 'tool_result') RETURNING id) INSERT INTO ids SELECT 'note', id FROM x;
WITH x AS (INSERT INTO memory.observations (org_id, user_id, content, classification, source_type)
    VALUES ('acme', 'alice', 'Alice disclosed her medical condition', 'restricted', 'fact') RETURNING id) INSERT INTO ids SELECT 'secret', id FROM x;
WITH x AS (INSERT INTO memory.observations (org_id, user_id, content, source_type)
    VALUES ('acme', 'bob', 'Bob prefers the morning slot', 'preference') RETURNING id) INSERT INTO ids SELECT 'bob', id FROM x;
WITH x AS (INSERT INTO public.lt_notes (org_id, user_id, content, source_type, derived_from)
    VALUES ('acme', 'alice', 'Alice: mortgage questions and a personal matter', 'decision',
            ARRAY[pg_temp.id('note'), pg_temp.id('secret'), pg_temp.id('note')]) RETURNING id) INSERT INTO ids SELECT 'summary', id FROM x;
WITH x AS (INSERT INTO public.lt_notes (org_id, user_id, content, derived_from)
    VALUES ('acme', 'carol', 'Mortgage questions this week', ARRAY[pg_temp.id('note')]) RETURNING id) INSERT INTO ids SELECT 'digest', id FROM x;
WITH x AS (INSERT INTO public.lt_notes (org_id, user_id, content, source_type, derived_from)
    VALUES ('acme', 'bob', 'Bob: mornings', 'fact', ARRAY[pg_temp.id('bob')]) RETURNING id) INSERT INTO ids SELECT 'bobnote', id FROM x;
RESET ROLE;
SET ROLE lt_globex;
WITH x AS (INSERT INTO memory.observations (org_id, content) VALUES ('globex', 'Globex pricing') RETURNING id) INSERT INTO ids SELECT 'globex', id FROM x;
RESET ROLE;
SELECT is((SELECT classification FROM public.lt_notes WHERE id = pg_temp.id('summary')), 'restricted'::memory.classification,
          'a row made from a restricted memory is restricted');
SELECT is((SELECT source_type FROM public.lt_notes WHERE id = pg_temp.id('summary')), 'tool_result'::memory.source_type,
          'and trusted no more than its least trusted source');
SELECT is((SELECT derived_from FROM public.lt_notes WHERE id = pg_temp.id('summary')), ARRAY[pg_temp.id('note'), pg_temp.id('secret')],
          'each source once');
SELECT ok((SELECT n.expires_at <= (SELECT min(expires_at) FROM memory.observations WHERE id IN (pg_temp.id('note'), pg_temp.id('secret')))
             FROM public.lt_notes n WHERE n.id = pg_temp.id('summary')), 'its retention ends no later than its sources''');
SELECT is((SELECT classification FROM public.lt_notes WHERE id = pg_temp.id('digest')), 'internal'::memory.classification,
          'a row made from an internal memory is classified as its content says');

-- Bad sources: the same 22023 for a missing id, another org's, one above the writer's clearance.
SET ROLE lt_writer;
SELECT throws_ok(format($$ INSERT INTO public.lt_notes (org_id, content, derived_from) VALUES ('acme', 'x', ARRAY['%s'::uuid]) $$, '00000000-0000-4000-8000-000000000001'),
                 '22023', 'derived_from names memory 00000000-0000-4000-8000-000000000001, which is not a memory of org "acme"', 'a missing source: 22023');
SELECT throws_ok(format($$ INSERT INTO public.lt_notes (org_id, content, derived_from) VALUES ('acme', 'x', ARRAY['%s'::uuid]) $$, pg_temp.id('globex')),
                 '22023', format('derived_from names memory %s, which is not a memory of org "acme"', pg_temp.id('globex')),
                 'another org''s memory: the same 22023');
SELECT throws_ok($$ INSERT INTO public.lt_notes (org_id, content, derived_from) SELECT 'acme', 'x', array_agg(gen_random_uuid()) FROM generate_series(1, 1001) $$,
                 '22023', 'derived_from names at most 1,000 memories (1001 given)', 'more than 1,000 sources: 22023');
SELECT throws_ok(format($$ INSERT INTO public.lt_notes (org_id, content, derived_from) VALUES ('acme', 'x', ARRAY['%s'::uuid, NULL]) $$, pg_temp.id('note')),
                 '22023', 'derived_from takes no NULL id (element 2)', 'a NULL source: 22023');
SELECT throws_ok(format($$ INSERT INTO public.lt_notes (org_id, content, derived_from) VALUES ('acme', 'x', ARRAY[ARRAY['%s'::uuid]]) $$, pg_temp.id('note')),
                 '22023', 'derived_from takes a one-dimensional array of memory ids', 'an array of arrays: 22023');
SELECT throws_ok(format($$ UPDATE public.lt_notes SET derived_from = derived_from || '%s'::uuid WHERE id = '%s' $$, pg_temp.id('globex'), pg_temp.id('digest')),
                 '22023', NULL, 'an UPDATE adding another org''s memory: 22023');
RESET ROLE;
SET ROLE lt_low;
SELECT throws_ok(format($$ INSERT INTO public.lt_notes (org_id, content, derived_from) VALUES ('acme', 'x', ARRAY['%s'::uuid]) $$, pg_temp.id('secret')),
                 '22023', format('derived_from names memory %s, which is not a memory of org "acme"', pg_temp.id('secret')),
                 'a memory above the writer''s clearance: the same 22023');
RESET ROLE;
SET ROLE lt_globex;
SELECT throws_ok(format($$ INSERT INTO public.lt_notes (org_id, content, derived_from) VALUES ('acme', 'x', ARRAY['%s'::uuid]) $$, pg_temp.id('note')),
                 '42501', NULL, 'a row of an org the writer may not act for is refused');
RESET ROLE;

-- An UPDATE never raises trust, and keeps the floors.
SET ROLE lt_writer;
UPDATE public.lt_notes SET source_type = 'decision', classification = 'restricted' WHERE id = pg_temp.id('summary');
RESET ROLE;
SELECT is((SELECT source_type FROM public.lt_notes WHERE id = pg_temp.id('summary')), 'tool_result'::memory.source_type,
          'an UPDATE does not raise a derived row''s trust');

-- ------------------------------------------------------------------------------------------------
-- A source that tightens: the rows made from it follow.
SET ROLE lt_admin;
SELECT memory.reclassify(pg_temp.id('note'), 'confidential', 'contains account details');
RESET ROLE;
SELECT is((SELECT classification FROM public.lt_notes WHERE id = pg_temp.id('digest')), 'confidential'::memory.classification,
          'reclassify raises the governed rows made from the memory');
SELECT is((SELECT classification FROM public.lt_notes WHERE id = pg_temp.id('summary')), 'restricted'::memory.classification,
          'and never lowers one');
SELECT is((SELECT l.payload->>'to' FROM public.audit_log_now() l WHERE l.event_type = 'memory.reclassify'
             AND l.payload->>'table' = 'public.lt_notes' AND l.payload->>'id' = pg_temp.id('digest')::text), 'confidential',
          'the raise is audited (memory.reclassify of the table''s row)');
UPDATE memory.observations SET expires_at = now() + interval '3 days', purge_after = now() + interval '10 days' WHERE id = pg_temp.id('note');
SELECT is((SELECT expires_at FROM public.lt_notes WHERE id = pg_temp.id('digest')), now() + interval '3 days',
          'a source''s shorter retention reaches the rows made from it');
SELECT is((SELECT source_type FROM public.lt_notes WHERE id = pg_temp.id('bobnote')), 'preference'::memory.source_type,
          'a fact made from a preference is a preference');
UPDATE memory.observations SET source_type = 'tool_result' WHERE id = pg_temp.id('bob');
SELECT is((SELECT source_type FROM public.lt_notes WHERE id = pg_temp.id('bobnote')), 'tool_result'::memory.source_type,
          'a source''s lower trust reaches the rows made from it');

-- The tightening's statement quotes the table's identifiers, whatever they are: a source_type
-- column named "CLEARED" (a word the statement once used as a placeholder) takes the floors too.
SET ROLE lt_owner;
CREATE TABLE public.lt_odd (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), org_id text NOT NULL, content text,
                            classification memory.classification, "CLEARED" memory.source_type, derived_from uuid[]);
SELECT memory.govern('public.lt_odd', '{"tenant_policy": true, "source_type": "CLEARED", "derived_from": "derived_from"}');
GRANT SELECT, INSERT ON public.lt_odd TO lt_writer;
RESET ROLE;
SET ROLE lt_writer;
WITH x AS (INSERT INTO memory.observations (org_id, content, source_type) VALUES ('acme', 'Vendor X invoices late', 'fact') RETURNING id)
    INSERT INTO ids SELECT 'odd_src', id FROM x;
WITH x AS (INSERT INTO public.lt_odd (org_id, content, "CLEARED", derived_from) VALUES ('acme', 'Vendor X note', 'fact', ARRAY[pg_temp.id('odd_src')]) RETURNING id)
    INSERT INTO ids SELECT 'odd_row', id FROM x;
RESET ROLE;
SET ROLE lt_admin;
SELECT lives_ok(format($$ SELECT memory.reclassify(%L, 'confidential', 'vendor terms') $$, pg_temp.id('odd_src')),
                'a source of a row of a table with odd column names is reclassified');
RESET ROLE;
SELECT is((SELECT classification FROM public.lt_odd WHERE id = pg_temp.id('odd_row')), 'confidential'::memory.classification,
          'and the row takes the raised tier');
UPDATE memory.observations SET source_type = 'tool_result' WHERE id = pg_temp.id('odd_src');
SELECT is((SELECT "CLEARED" FROM public.lt_odd WHERE id = pg_temp.id('odd_row')), 'tool_result'::memory.source_type,
          'and the lower trust');

-- ------------------------------------------------------------------------------------------------
-- Forgetting a source removes the rows made from it, within the caller's clearance and grants.
-- A role without DELETE on the table forgets the source; the rows stay (the table's grants).
SET ROLE lt_writer;
WITH x AS (INSERT INTO memory.observations (org_id, content) VALUES ('acme', 'Order 7 was late') RETURNING id) INSERT INTO ids SELECT 'src7', id FROM x;
WITH x AS (INSERT INTO public.lt_notes (org_id, content, derived_from) VALUES ('acme', 'Orders are late', ARRAY[pg_temp.id('src7')]) RETURNING id) INSERT INTO ids SELECT 'row7', id FROM x;
RESET ROLE;
SET ROLE lt_nodel;
SELECT is((SELECT r->'derived_forgotten' FROM memory.forget(ARRAY[pg_temp.id('src7')], 'request 0') r), '[]'::jsonb,
          'a caller without DELETE on the table removes none of its rows');
RESET ROLE;
SELECT is((SELECT derived_from FROM public.lt_notes WHERE id = pg_temp.id('row7')), NULL::uuid[],
          'the row stays, no longer naming the forgotten memory');

-- lt_low (internal) forgets note: the confidential digest is above it and stays.
SET ROLE lt_low;
SELECT is((SELECT r->'derived_forgotten' FROM memory.forget(ARRAY[pg_temp.id('bob')], 'request 1') r), to_jsonb(ARRAY[pg_temp.id('bobnote')::text]),
          'forget removes the governed rows made from a memory, and says so');
RESET ROLE;
SELECT is((SELECT count(*) FROM public.lt_notes WHERE id = pg_temp.id('bobnote')), 0::bigint, 'the row is gone');
SELECT ok((SELECT l.payload->'forgotten' @> jsonb_build_array(jsonb_build_object('id', pg_temp.id('bobnote')::text, 'derived', true))
             FROM public.audit_log_now() l WHERE l.event_type = 'memory.forget' AND l.payload->>'reason' = 'request 1' AND l.payload->>'table' = 'public.lt_notes'),
          'a memory.forget event of the table names it');

-- A held row stays; the receipt covers what went and verifies.
INSERT INTO memory.legal_holds (org_id, observation_id, reason) VALUES ('acme', pg_temp.id('summary'), 'litigation');
SET ROLE lt_writer;
CREATE TEMP TABLE rcpt AS SELECT memory.forget(ARRAY[pg_temp.id('note')], 'request 2') AS r;
RESET ROLE;
GRANT SELECT ON rcpt TO PUBLIC;
SELECT is((SELECT r->'derived_forgotten' FROM rcpt), to_jsonb(ARRAY[pg_temp.id('digest')::text]), 'forget of a source takes the digest');
SELECT is((SELECT count(*) FROM public.lt_notes WHERE id = pg_temp.id('summary')), 1::bigint, 'a held row made from it stays');
SELECT ok((SELECT r->'held' @> to_jsonb(ARRAY[pg_temp.id('summary')::text]) FROM rcpt), 'and is reported held');
SELECT is((SELECT derived_from FROM public.lt_notes WHERE id = pg_temp.id('summary')), ARRAY[pg_temp.id('secret')],
          'it no longer names the forgotten memory');
SELECT is((SELECT count(*) FROM memory.erasure_receipts e WHERE e.ids->'public.lt_notes' @> to_jsonb(ARRAY[pg_temp.id('digest')::text])), 1::bigint,
          'the receipt covers the row of the table');
SET ROLE lt_admin;
SELECT is((SELECT bool_and(ok) FROM memory.verify_receipt((SELECT r->'receipt' FROM rcpt))), true, 'and verifies');
RESET ROLE;
UPDATE memory.legal_holds SET released_at = now();

-- ------------------------------------------------------------------------------------------------
-- Erasure: another user's row made from the subject's memories goes.
SET ROLE lt_writer;
WITH x AS (INSERT INTO memory.observations (org_id, user_id, content) VALUES ('acme', 'eve', 'Eve moved to Leeds') RETURNING id) INSERT INTO ids SELECT 'eve', id FROM x;
WITH x AS (INSERT INTO public.lt_notes (org_id, user_id, content, derived_from) VALUES ('acme', 'frank', 'The team: Eve is in Leeds', ARRAY[pg_temp.id('eve')]) RETURNING id)
    INSERT INTO ids SELECT 'team', id FROM x;
RESET ROLE;
CREATE TEMP TABLE er AS SELECT memory.erase_subject('eve') AS r;
SELECT ok((SELECT r->'derived_forgotten' @> to_jsonb(ARRAY[pg_temp.id('team')::text]) FROM er), 'erase_subject takes the governed rows made from the subject''s memories');
SELECT is((SELECT count(*) FROM public.lt_notes WHERE id = pg_temp.id('team')), 0::bigint, 'the row is gone');
SELECT ok((SELECT (r->'receipt'->>'count')::int >= 2 FROM er), 'the receipt counts it with the memory');

-- The table's own row-level security decides what the forgetting caller's DELETE reaches.
SET ROLE lt_owner;
CREATE POLICY app_keep_zed ON public.lt_notes AS RESTRICTIVE FOR DELETE USING (user_id IS DISTINCT FROM 'zed');
RESET ROLE;
SET ROLE lt_writer;
WITH x AS (INSERT INTO memory.observations (org_id, content) VALUES ('acme', 'Order 8 was lost') RETURNING id) INSERT INTO ids SELECT 'src8', id FROM x;
WITH x AS (INSERT INTO public.lt_notes (org_id, user_id, content, derived_from) VALUES ('acme', 'zed', 'Orders get lost', ARRAY[pg_temp.id('src8')]) RETURNING id)
    INSERT INTO ids SELECT 'row8', id FROM x;
SELECT is((SELECT r->'derived_forgotten' FROM memory.forget(ARRAY[pg_temp.id('src8')], 'request 3') r), '[]'::jsonb,
          'a row the table''s row-level security keeps from the caller''s DELETE is not forgotten');
RESET ROLE;
SELECT is((SELECT count(*) FROM public.lt_notes WHERE id = pg_temp.id('row8')), 1::bigint, 'it stays');
SELECT ok((SELECT l.payload->'derived_kept' @> to_jsonb(ARRAY[pg_temp.id('row8')::text]) FROM public.audit_log_now() l
            WHERE l.event_type = 'memory.forget' AND l.payload->>'reason' = 'request 3'), 'named for the org''s admins (derived_kept)');

-- A held row the table's row-level security hides from the forgetting caller is not named to it
-- (held lists only what the caller may read; the event names it for the org's admins).
SET ROLE lt_owner;
CREATE POLICY app_hide_yan ON public.lt_notes AS RESTRICTIVE FOR SELECT USING (user_id IS DISTINCT FROM 'yan');
RESET ROLE;
SET ROLE lt_writer;
WITH x AS (INSERT INTO memory.observations (org_id, content) VALUES ('acme', 'Order 9 was damaged') RETURNING id) INSERT INTO ids SELECT 'src9', id FROM x;
RESET ROLE;
SET ROLE lt_owner;
INSERT INTO public.lt_notes (org_id, user_id, content, derived_from) VALUES ('acme', 'yan', 'Orders get damaged', ARRAY[pg_temp.id('src9')]);
RESET ROLE;
INSERT INTO ids SELECT 'row9', id FROM public.lt_notes WHERE user_id = 'yan';
INSERT INTO memory.legal_holds (org_id, user_id, reason) VALUES ('acme', 'yan', 'dispute');
SET ROLE lt_writer;
SELECT is((SELECT count(*) FROM public.lt_notes WHERE id = pg_temp.id('row9')), 0::bigint, '(the writer cannot read the row)');
CREATE TEMP TABLE f9 AS SELECT memory.forget(ARRAY[pg_temp.id('src9')], 'request 9') AS r;
SELECT is((SELECT r->'held' FROM f9), '[]'::jsonb, 'a held row the caller may not read is not named to it');
RESET ROLE;
SELECT is((SELECT count(*) FROM public.lt_notes WHERE id = pg_temp.id('row9')), 1::bigint, 'the row stays');
UPDATE memory.legal_holds SET released_at = now() WHERE user_id = 'yan';

-- An UPDATE that replaces the sources by a longer-lived one does not make the retention later.
SET ROLE lt_writer;
WITH x AS (INSERT INTO memory.observations (org_id, content) VALUES ('acme', 'Order 10 arrived') RETURNING id) INSERT INTO ids SELECT 'src10', id FROM x;
RESET ROLE;
UPDATE memory.observations SET expires_at = now() + interval '1 day', purge_after = now() + interval '2 days' WHERE id = pg_temp.id('src10');
SET ROLE lt_writer;
WITH x AS (INSERT INTO public.lt_notes (org_id, content, derived_from) VALUES ('acme', 'Order 10 note', ARRAY[pg_temp.id('src10')]) RETURNING id)
    INSERT INTO ids SELECT 'row10', id FROM x;
WITH x AS (INSERT INTO memory.observations (org_id, content) VALUES ('acme', 'Orders arrive') RETURNING id) INSERT INTO ids SELECT 'src11', id FROM x;
UPDATE public.lt_notes SET derived_from = ARRAY[pg_temp.id('src11')], expires_at = now() + interval '10 years', purge_after = now() + interval '11 years'
 WHERE id = pg_temp.id('row10');
RESET ROLE;
SELECT ok((SELECT expires_at <= now() + interval '1 day' AND purge_after <= now() + interval '2 days' FROM public.lt_notes WHERE id = pg_temp.id('row10')),
          'an UPDATE replacing the sources does not make the row''s retention later');

-- An UPDATE that takes every source away keeps the floors the row had: no more trust, no later
-- retention (memory_ancestry_unset, memory_lineage_unset).
CREATE TEMP TABLE was AS SELECT source_type, expires_at, purge_after FROM public.lt_notes WHERE id = pg_temp.id('summary');
SET ROLE lt_writer;
UPDATE public.lt_notes SET derived_from = NULL, source_type = 'decision', expires_at = now() + interval '10 years',
                           purge_after = now() + interval '11 years' WHERE id = pg_temp.id('summary');
RESET ROLE;
SELECT is((SELECT source_type FROM public.lt_notes WHERE id = pg_temp.id('summary')), (SELECT source_type FROM was),
          'an UPDATE clearing derived_from does not raise the row''s trust');
SELECT ok((SELECT n.expires_at <= w.expires_at AND n.purge_after <= w.purge_after FROM public.lt_notes n, was w WHERE n.id = pg_temp.id('summary')),
          'nor make its retention later');
SELECT is((SELECT derived_from FROM public.lt_notes WHERE id = pg_temp.id('summary')), NULL::uuid[], '(the sources are gone)');

-- The trigger functions run only on a table governed with the option.
SET ROLE lt_owner;
CREATE TABLE public.lt_other (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), org_id text, derived_from uuid[]);
CREATE TRIGGER app_lineage BEFORE INSERT ON public.lt_other FOR EACH ROW EXECUTE FUNCTION memory_internal._table_lineage_floor();
SELECT throws_ok($$ INSERT INTO public.lt_other (org_id, derived_from) VALUES ('acme', '{}') $$, '39P01', NULL,
                 'the floor trigger refuses a table not governed with "derived_from"');
RESET ROLE;

-- The lineage triggers (SECURITY DEFINER) read only the mapped columns, never the whole row: a
-- cast to json the table's owner made for a type of another column of its table (to_jsonb of the
-- row would call it) never runs with the extension owner's rights.
CREATE TABLE public.lt_seen (who text, super boolean);
GRANT SELECT, INSERT ON public.lt_seen TO PUBLIC;
SET ROLE lt_owner;
CREATE TYPE public.lt_mood AS ENUM ('calm', 'busy');
CREATE FUNCTION public.lt_mood_json(m public.lt_mood) RETURNS json LANGUAGE sql VOLATILE
AS $$ INSERT INTO public.lt_seen SELECT current_user, r.rolsuper FROM pg_roles r WHERE r.rolname = current_user RETURNING to_json(m::text) $$;
CREATE CAST (public.lt_mood AS json) WITH FUNCTION public.lt_mood_json(public.lt_mood);
CREATE TABLE public.lt_moods (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), org_id text NOT NULL, content text,
                              classification memory.classification, derived_from uuid[], mood public.lt_mood NOT NULL DEFAULT 'calm',
                              created_at timestamptz NOT NULL DEFAULT now(), expires_at timestamptz, purge_after timestamptz, archive_at timestamptz);
SELECT memory.govern('public.lt_moods', '{"tenant_policy": true, "stamps": true, "derived_from": "derived_from"}');
GRANT SELECT, INSERT, UPDATE ON public.lt_moods TO lt_writer;
RESET ROLE;
SET ROLE lt_writer;
WITH x AS (INSERT INTO public.lt_moods (org_id, content, derived_from) VALUES ('acme', 'A summary', ARRAY[pg_temp.id('secret')]) RETURNING id)
    INSERT INTO ids SELECT 'mood', id FROM x;
UPDATE public.lt_moods SET mood = 'busy', content = 'A longer summary' WHERE id = pg_temp.id('mood');
RESET ROLE;
SELECT is((SELECT count(*) FROM public.lt_seen WHERE super OR who <> 'lt_writer'), 0::bigint,
          'the owner''s cast to json of another column''s type never runs as the extension owner (nor as any other role)');
SELECT is((SELECT classification FROM public.lt_moods WHERE id = pg_temp.id('mood')), 'restricted'::memory.classification,
          'and the floors still hold on that table');

-- ------------------------------------------------------------------------------------------------
-- The hold gate is never open while a table owner's code runs: a trigger of the owner's on its
-- governed table, fired by the strip of a forgotten source's id from the table (run as the owner),
-- does not change a held memory (the hold's error fails the forget; the memory keeps its content).
SET ROLE lt_owner;
CREATE TABLE public.lt_sneak (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), org_id text NOT NULL, content text,
                              classification memory.classification, derived_from uuid[]);
SELECT memory.govern('public.lt_sneak', '{"tenant_policy": true, "derived_from": "derived_from"}');
CREATE TABLE public.lt_victim (id uuid);
CREATE FUNCTION public.lt_sneak_upd() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE memory.observations SET content = 'overwritten by the owner' WHERE id IN (SELECT v.id FROM public.lt_victim v);
    RETURN NULL;
END $$;
CREATE TRIGGER lt_sneak_upd BEFORE UPDATE ON public.lt_sneak FOR EACH STATEMENT EXECUTE FUNCTION public.lt_sneak_upd();
RESET ROLE;
SET ROLE lt_writer;
WITH x AS (INSERT INTO memory.observations (org_id, content) VALUES ('acme', 'The contract of 2025') RETURNING id) INSERT INTO ids SELECT 'victim', id FROM x;
WITH x AS (INSERT INTO memory.observations (org_id, content) VALUES ('acme', 'Order 11 was late') RETURNING id) INSERT INTO ids SELECT 'src_hg', id FROM x;
RESET ROLE;
INSERT INTO public.lt_victim SELECT pg_temp.id('victim');
INSERT INTO memory.legal_holds (org_id, observation_id, reason) VALUES ('acme', pg_temp.id('victim'), 'contract dispute');
SET ROLE lt_writer;
-- (The owner's error comes back through memory_internal._exec_as_table_owner, which keeps its
-- message, not its SQLSTATE.)
SELECT throws_like(format('SELECT memory.forget(ARRAY[%L::uuid], %L)', pg_temp.id('src_hg'), 'request 11'),
                   'legal hold % covers this row of memory.observations: UPDATE of content%',
                   'an owner''s trigger run by forget''s lineage strip cannot change a held memory (the hold''s error)');
RESET ROLE;
SELECT is((SELECT content FROM memory.observations WHERE id = pg_temp.id('victim')), 'The contract of 2025', 'the held memory keeps its content');
UPDATE memory.legal_holds SET released_at = now() WHERE observation_id = pg_temp.id('victim');
SET ROLE lt_owner;
DROP TRIGGER lt_sneak_upd ON public.lt_sneak;
RESET ROLE;
-- Erasure deletes the subject's rows of an application table as its owner through legal holds (the
-- subject's rows go, held or not), naming only that table and subject (memory_internal._hold_erase_gate):
-- the owner's triggers those DELETEs fire meet every other hold (the hold gate was open for them).
SET ROLE lt_owner;
CREATE TABLE public.lt_es (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), org_id text NOT NULL, user_id text, content text,
                           classification memory.classification);
SELECT memory.govern('public.lt_es', '{"tenant_policy": true, "audit": true, "user": "user_id", "org": "org_id", "id": "id", "content": "content"}');
CREATE TRIGGER lt_es_del AFTER DELETE ON public.lt_es FOR EACH STATEMENT EXECUTE FUNCTION public.lt_sneak_upd();
INSERT INTO public.lt_es (org_id, user_id, content) VALUES ('acme', 'gus', 'Gus note');
RESET ROLE;
INSERT INTO memory.legal_holds (org_id, observation_id, reason) VALUES ('acme', pg_temp.id('victim'), 'contract dispute, again');
SET ROLE lt_admin;
CREATE TEMP TABLE er_gus AS SELECT memory.erase_subject('gus') AS r;
RESET ROLE;
SELECT is((SELECT content FROM memory.observations WHERE id = pg_temp.id('victim')), 'The contract of 2025',
          'an owner''s trigger run by erase_subject''s DELETE of the subject''s rows does not change a held memory');
UPDATE memory.legal_holds SET released_at = now() WHERE observation_id = pg_temp.id('victim');
-- Retention's purge deletes memories with the hold gate open; the strip of their ids from the
-- governed tables that follows (memory_lineage_gone) runs the owner's triggers with it closed.
SET ROLE lt_owner;
CREATE FUNCTION public.lt_sneak_try() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    BEGIN
        UPDATE memory.observations SET content = 'overwritten by the owner in maintenance' WHERE id IN (SELECT v.id FROM public.lt_victim v);
    EXCEPTION WHEN OTHERS THEN
        NULL;
    END;
    RETURN NULL;
END $$;
CREATE TRIGGER lt_sneak_try BEFORE UPDATE ON public.lt_sneak FOR EACH STATEMENT EXECUTE FUNCTION public.lt_sneak_try();
RESET ROLE;
UPDATE memory.observations SET content = 'The contract of 2025' WHERE id = pg_temp.id('victim');
INSERT INTO memory.legal_holds (org_id, observation_id, reason) VALUES ('acme', pg_temp.id('victim'), 'contract dispute, third');
WITH x AS (INSERT INTO memory.observations (org_id, content, expires_at, purge_after)
           VALUES ('acme', 'Order 12, to purge', now() - interval '2 days', now() - interval '1 day') RETURNING id)
    INSERT INTO ids SELECT 'src_purge', id FROM x;
CREATE TEMP TABLE rr1 AS SELECT memory.run_retention(false, now() + interval '1 day') AS r;
CREATE TEMP TABLE rr2 AS SELECT memory.run_retention(false, now() + interval '400 days') AS r;
CREATE TEMP TABLE rr3 AS SELECT memory.run_retention(false, now() + interval '800 days') AS r;
SELECT is((SELECT count(*) FROM memory.observations WHERE id = pg_temp.id('src_purge'))
          + (SELECT count(*) FROM memory.observations_archive WHERE id = pg_temp.id('src_purge')), 0::bigint, '(the memory is purged)');
SELECT is((SELECT content FROM memory.observations WHERE id = pg_temp.id('victim')
           UNION ALL SELECT content FROM memory.observations_archive WHERE id = pg_temp.id('victim')), 'The contract of 2025',
          'an owner''s trigger run by the strip after retention''s purge does not change a held memory (hot or archived)');
UPDATE memory.legal_holds SET released_at = now() WHERE observation_id = pg_temp.id('victim');
SET ROLE lt_owner;
DROP TRIGGER lt_sneak_try ON public.lt_sneak;
RESET ROLE;

-- A subtransaction that aborts puts the gates back as they were when it started (src/gates.rs):
-- an owner's trigger that catches an error, run by the lineage strip of the first org of a forget,
-- no longer closes forget's lineage gate (it did: the next org's DELETE stripped its ids at once,
-- memory_lineage_gone, and what was made from them was no longer found, nor forgotten).
CREATE ROLE lt_two IN ROLE memory_writer;
SELECT memory.grant_org('lt_two', 'acme'), memory.grant_org('lt_two', 'globex');
SET ROLE lt_owner;
CREATE FUNCTION public.lt_sneak_catch() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    BEGIN PERFORM 1 OPERATOR(pg_catalog./) 0; EXCEPTION WHEN division_by_zero THEN NULL; END;
    RETURN NULL;
END $$;
CREATE TRIGGER lt_sneak_catch BEFORE UPDATE ON public.lt_sneak FOR EACH STATEMENT EXECUTE FUNCTION public.lt_sneak_catch();
RESET ROLE;
INSERT INTO memory.observations (id, org_id, content) VALUES ('00000000-0000-0000-0000-00000000c0a1', 'acme', 'Acme root'),
                                                               ('00000000-0000-0000-0000-00000000c0b1', 'globex', 'Globex root');
INSERT INTO memory.observations (id, org_id, content, derived_from) VALUES
    ('00000000-0000-0000-0000-00000000c0a2', 'acme', 'Acme child', '{00000000-0000-0000-0000-00000000c0a1}'),
    ('00000000-0000-0000-0000-00000000c0b2', 'globex', 'Globex child', '{00000000-0000-0000-0000-00000000c0b1}');
SET ROLE lt_two;
CREATE TEMP TABLE two AS SELECT memory.forget('{00000000-0000-0000-0000-00000000c0a1,00000000-0000-0000-0000-00000000c0b1}', 'two orgs') AS r;
RESET ROLE;
SELECT is((SELECT count(*) FROM memory.observations WHERE id = '00000000-0000-0000-0000-00000000c0b2'), 0::bigint,
          'a forget of two orgs'' memories takes what was made from each, whatever an owner''s trigger catches');
SET ROLE lt_owner;
DROP TRIGGER lt_sneak_catch ON public.lt_sneak;
RESET ROLE;

-- ------------------------------------------------------------------------------------------------
-- The option off: the triggers go.
SET ROLE lt_owner;
SELECT is(memory.govern('public.lt_notes', '{"audit": true, "tenant_policy": true, "stamps": true}') ? 'derived_from', false, 'govern without the option');
SELECT ok((SELECT NOT (triggers && ARRAY['memory_ancestry', 'memory_lineage', 'memory_ancestry_unset', 'memory_lineage_unset'])
             FROM memory.governed_tables WHERE table_name = 'public.lt_notes'::regclass),
          'removes the lineage triggers');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
