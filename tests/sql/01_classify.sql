-- SQL-level suite for classification (SPEC §1), run with pg_prove against the installed extension.
BEGIN;
SELECT plan(91);

-- Types ------------------------------------------------------------------------------------------
SELECT ok('restricted'::memory.classification > 'confidential'
      AND 'confidential'::memory.classification > 'internal'
      AND 'internal'::memory.classification > 'public', 'classification enum is ordered public < internal < confidential < restricted');
SELECT is(greatest('public'::memory.classification, 'restricted', 'internal'), 'restricted', 'greatest() is the most restrictive');
SELECT is(enum_range(NULL::memory.source_type)::text, '{decision,fact,preference,tool_result}', 'source_type labels');

-- Seed rules through memory.classify ------------------------------------------------------------
-- The shared vectors (core/tests/vectors/classification.json, loaded by tests/run-sql.sh).
CREATE TEMP VIEW vectors AS
SELECT content, paths AS files, source_type AS st, tier::memory.classification AS want, rule FROM public.classification_vectors;
SELECT ok((SELECT count(*) FROM vectors) >= 50, 'the shared classification vectors are loaded');
SELECT is_empty($$ SELECT content, want, memory.classify(content, files, st) FROM vectors
                    WHERE memory.classify(content, files, st) IS DISTINCT FROM want $$, 'every seed/detector vector classifies as expected');
SELECT is_empty($$ SELECT content, rule, memory.classify_explain(content, files, st)->>'rule' FROM vectors
                    WHERE memory.classify_explain(content, files, st)->>'rule' IS DISTINCT FROM rule $$, 'classify_explain names the deciding rule');

SELECT is(memory.classify_explain('the password', NULL, NULL) - 'org_id' - 'paths_considered' - 'detectors' - 'detector_set',
          '{"tier": "confidential", "rule": "confidential_keyword", "evidence": "password", "risk_band": "high"}'::jsonb,
          'classify_explain has tier, rule, risk_band and evidence');
SELECT is(memory.classify_explain('4111 1111 1111 1111')->>'evidence', NULL, 'detector evidence never echoes the match');

SELECT is(memory.risk_band('public'), 'low', 'risk band public');
SELECT is(memory.risk_band('internal'), 'medium', 'risk band internal');
SELECT is(memory.risk_band('confidential'), 'high', 'risk band confidential');
SELECT is(memory.risk_band('restricted'), 'critical', 'risk band restricted');
SELECT is(memory.risk_band(NULL), NULL, 'risk band of NULL is NULL');

SELECT is(memory.derive_classification('{"classification": "restricted"}'), 'restricted', 'derive: valid label');
SELECT is(memory.derive_classification('{"classification": "Restricted"}'), 'internal', 'derive: invalid label -> internal');
SELECT is(memory.derive_classification('{"classification": 3}'), 'internal', 'derive: non-string -> internal');
SELECT is(memory.derive_classification('[]'), 'internal', 'derive: non-object -> internal');
SELECT is(memory.derive_classification(NULL), 'internal', 'derive: NULL -> internal');

-- Bad input --------------------------------------------------------------------------------------
SELECT throws_ok($$ SELECT memory.classify('x', NULL, 'bogus') $$, '22023', NULL, 'unknown source_type text is 22023');
SELECT throws_ok($$ SELECT memory.classify_explain('x', NULL, 'Decision') $$, '22023', NULL, 'source_type is case-sensitive like the enum');
SELECT is(memory.classify(NULL), NULL, 'NULL content classifies as NULL');
SELECT is(memory.classify('x', ARRAY[NULL, 'docs/a.md']::text[]), 'public', 'NULL elements in source_files are ignored');
SELECT is(memory.classify('x', ARRAY[NULL]::text[]), 'internal', 'only NULL paths = no paths');
SELECT is(memory.classify(repeat('lorem ipsum ', 900000) || ' ssn'), 'restricted', '10 MB content is classified');

-- Detectors GUC ------------------------------------------------------------------------------------
SET LOCAL memory.classify_detectors = off;
SELECT is(memory.classify('id 123-45-6789'), 'internal', 'detectors off: seed rules only');
RESET memory.classify_detectors;
SELECT is(memory.classify('id 123-45-6789'), 'restricted', 'detectors back on');

-- Observations ------------------------------------------------------------------------------------
INSERT INTO memory.observations (id, org_id, content, source_files, source_type)
VALUES ('00000000-0000-0000-0000-000000000001', 'acme', 'Updated docs index', ARRAY['docs/index.md'], 'fact'),
       ('00000000-0000-0000-0000-000000000002', 'acme', 'card 4111-1111-1111-1111', NULL, 'tool_result');
SELECT results_eq($$ SELECT classification::text, metadata->>'classification' FROM memory.observations WHERE org_id = 'acme' ORDER BY id $$,
                  $$ VALUES ('public', 'public'), ('restricted', 'restricted') $$, 'insert classifies into the column and metadata');

INSERT INTO memory.observations (id, org_id, content, classification) VALUES ('00000000-0000-0000-0000-000000000003', 'acme', 'plain', 'confidential');
SELECT is(classification, 'confidential', 'a stricter writer tier is kept') FROM memory.observations WHERE id = '00000000-0000-0000-0000-000000000003';
INSERT INTO memory.observations (id, org_id, content, metadata) VALUES ('00000000-0000-0000-0000-000000000004', 'acme', 'my password', '{"classification": "public", "k": 1}');
SELECT results_eq($$ SELECT classification::text, metadata FROM memory.observations WHERE id = '00000000-0000-0000-0000-000000000004' $$,
                  $$ VALUES ('confidential', '{"classification": "confidential", "k": 1}'::jsonb) $$, 'a laxer writer tier is raised, other metadata kept');

SELECT throws_ok($$ UPDATE memory.observations SET classification = 'public' WHERE id = '00000000-0000-0000-0000-000000000002' $$,
                 'MX004', NULL, 'direct downgrade of the column is MX004');
SELECT throws_ok($$ UPDATE memory.observations SET metadata = '{"classification": "internal"}' WHERE id = '00000000-0000-0000-0000-000000000002' $$,
                 'MX004', NULL, 'direct downgrade through metadata is MX004');
SELECT is(classification, 'restricted', 'the row is unchanged after a refused downgrade') FROM memory.observations WHERE id = '00000000-0000-0000-0000-000000000002';

UPDATE memory.observations SET content = 'rotate the api_key' WHERE id = '00000000-0000-0000-0000-000000000001';
SELECT is(classification, 'confidential', 'update of content re-classifies upward') FROM memory.observations WHERE id = '00000000-0000-0000-0000-000000000001';
UPDATE memory.observations SET content = 'harmless' WHERE id = '00000000-0000-0000-0000-000000000001';
SELECT is(classification, 'confidential', 'update of content never lowers') FROM memory.observations WHERE id = '00000000-0000-0000-0000-000000000001';
UPDATE memory.observations SET classification = 'restricted' WHERE id = '00000000-0000-0000-0000-000000000001';
SELECT results_eq($$ SELECT classification::text, metadata->>'classification' FROM memory.observations WHERE id = '00000000-0000-0000-0000-000000000001' $$,
                  $$ VALUES ('restricted', 'restricted') $$, 'raising the column directly is allowed and mirrored to metadata');

SELECT is(memory.reclassify('00000000-0000-0000-0000-000000000002', 'internal', 'test card number'), 'restricted', 'reclassify returns the previous tier');
SELECT results_eq($$ SELECT classification::text, metadata->>'classification' FROM memory.observations WHERE id = '00000000-0000-0000-0000-000000000002' $$,
                  $$ VALUES ('internal', 'internal') $$, 'reclassify lowers both targets');
SELECT throws_ok($$ UPDATE memory.observations SET classification = 'public' WHERE id = '00000000-0000-0000-0000-000000000002' $$,
                 'MX004', NULL, 'after reclassify, direct downgrades are refused again');
SELECT throws_ok($$ SELECT memory.reclassify('00000000-0000-0000-0000-0000000000ff', 'public', 'x') $$, '23503', NULL, 'reclassify of a missing id is 23503');
SELECT throws_ok($$ SELECT memory.reclassify('00000000-0000-0000-0000-000000000002', 'public', ' ') $$, '22023', NULL, 'reclassify needs a reason');
SELECT throws_ok($$ SELECT memory.reclassify('00000000-0000-0000-0000-000000000002', NULL, 'x') $$, '22023', NULL, 'reclassify needs a tier');
SELECT throws_ok($$ INSERT INTO memory.observations (org_id, content, source_type) VALUES ('acme', 'x', 'bogus') $$, '22P02', NULL, 'unknown source_type on the managed table is rejected by the enum');
SELECT throws_ok($$ INSERT INTO memory.observations (org_id, content) VALUES ('acme', NULL) $$, '23502', NULL, 'NULL content is rejected on the managed table');

-- Org rules -----------------------------------------------------------------------------------------
SELECT throws_ok($$ INSERT INTO memory.classification_rules (org_id, tier, target, pattern) VALUES ('acme', 'restricted', 'content', '(unclosed') $$,
                 '22023', NULL, 'an invalid org regex is 22023');
SELECT is(count(*), 0::bigint, 'and no rule was stored') FROM memory.classification_rules;
INSERT INTO memory.classification_rules (org_id, tier, target, pattern) VALUES ('acme', 'restricted', 'content', '(?i)falcon'),
                                                                            ('acme', 'public', 'content', 'password');
SELECT is(memory.classify('Falcon launch', NULL, NULL, 'acme'), 'restricted', 'org rule raises');
SELECT is(memory.classify('my password', NULL, NULL, 'acme'), 'confidential', 'org rule never lowers');
SELECT is(memory.classify('Falcon launch', NULL, NULL, 'globex'), 'internal', 'org rules stay in their org');
SELECT is(memory.classify_explain('Falcon', NULL, NULL, 'acme')->>'rule', 'org_rule:' || (SELECT min(id) FROM memory.classification_rules), 'explain names the org rule');
INSERT INTO memory.observations (org_id, content) VALUES ('acme', 'falcon notes');
SELECT is(classification, 'restricted', 'the trigger applies org rules of the row''s org') FROM memory.observations WHERE content = 'falcon notes';
UPDATE memory.classification_rules SET enabled = false;
SELECT is(memory.classify('Falcon launch', NULL, NULL, 'acme'), 'internal', 'disabled rules stop applying at once (cache invalidated)');

-- Governed application tables ------------------------------------------------------------------------
CREATE TABLE public.notes (id serial PRIMARY KEY, body text, paths text[], kind text, tier memory.classification, meta jsonb, tenant text);
SELECT lives_ok($$ SELECT memory.govern('public.notes', '{"content": "body", "source_files": "paths", "source_type": "kind", "target": ["tier", "meta"], "org": "tenant"}') $$, 'govern an application table');
SELECT lives_ok($$ SELECT memory.govern('public.notes', '{"content": "body", "source_files": "paths", "source_type": "kind", "target": ["tier", "meta"], "org": "tenant"}') $$, 'govern again (idempotent)');
SELECT is(count(*), 1::bigint, 'one classify trigger after two govern calls') FROM pg_trigger WHERE tgrelid = 'public.notes'::regclass AND tgname = 'memory_classify';
SELECT is((SELECT options->>'content' FROM memory.governed_tables WHERE table_name = 'public.notes'::regclass), 'body', 'governed_tables lists it with its mapping');
INSERT INTO public.notes (body, paths, kind, tenant) VALUES ('docs', ARRAY['docs/x.md'], 'fact', 'acme'), (NULL, NULL, NULL, 'acme');
SELECT results_eq($$ SELECT tier::text, meta->>'classification' FROM public.notes ORDER BY id $$,
                  $$ VALUES ('public', 'public'), ('internal', 'internal') $$, 'app table rows classified; NULL content and NULL jsonb handled');
-- The trigger reads source_files arrays in place: small ones stored with a 1-byte header (whose
-- elements sit off their alignment), big ones with 4; NULL elements anywhere.
INSERT INTO public.notes (body, paths, tenant)
SELECT 'x', ARRAY(SELECT CASE WHEN i = g % 7 THEN NULL
                              WHEN i = g % 5 AND g % 3 = 0 THEN 'src/auth/' || repeat('k', g % 150)
                              ELSE 'docs/' || repeat('d', (g * i) % 90) || '.md' END
                    FROM generate_series(1, g % 12) i), 'arrays'
  FROM generate_series(1, 400) g;
SELECT is((SELECT count(*) FROM public.notes WHERE tenant = 'arrays' AND tier <> memory.classify(body, paths, kind, tenant)), 0::bigint,
          'arrays read in place (1- and 4-byte headers, NULL elements) classify as memory.classify does');
SELECT is((SELECT array_agg(DISTINCT tier::text ORDER BY tier::text) FROM public.notes WHERE tenant = 'arrays'),
          ARRAY['confidential', 'internal', 'public'], 'the array cases reach every path outcome');
-- A classification column added last (the usual way to adopt memory_ext) gets its value appended
-- to the row; dev builds check each such row against heap_form_tuple byte for byte. Shapes: the
-- only NULL (bitmap dropped), beside other NULLs, more than 8 columns, a dropped column before it.
CREATE TABLE public.added (body text, paths text[], n int, extra1 text, extra2 bigint);
ALTER TABLE public.added DROP COLUMN extra1;
ALTER TABLE public.added ADD COLUMN tier memory.classification;
CREATE TABLE public.wide (c1 int, c2 text, c3 int, c4 text, c5 int, c6 text, c7 int, body text, paths text[], tier memory.classification);
SELECT memory.govern('public.added', '{"content": "body", "source_files": "paths", "target": "tier"}');
SELECT memory.govern('public.wide', '{"content": "body", "source_files": "paths", "target": "tier"}');
INSERT INTO public.added (body, paths, n, extra2)
SELECT CASE g % 4 WHEN 0 THEN 'the password' WHEN 1 THEN 'ssn ' || g ELSE 'note ' || g END,
       CASE WHEN g % 3 = 0 THEN NULL ELSE ARRAY['docs/' || g || '.md'] END, CASE WHEN g % 5 = 0 THEN NULL ELSE g END, g
  FROM generate_series(1, 200) g;
INSERT INTO public.wide (c1, c2, c3, c4, c5, c6, c7, body, paths)
SELECT g, 'x' || g, g, CASE WHEN g % 2 = 0 THEN NULL ELSE 'y' END, g, 'z', g, 'note ' || g, CASE WHEN g % 3 = 0 THEN NULL ELSE ARRAY['docs/a.md'] END
  FROM generate_series(1, 200) g;
SELECT is((SELECT count(*) FROM public.added WHERE tier = memory.classify(body, paths) AND extra2 = coalesce(n, extra2)), 200::bigint,
          'a last column appended to rows with and without other NULLs, past a dropped column');
SELECT is((SELECT count(*) FROM public.wide WHERE tier = memory.classify(body, paths) AND c7 = c1 AND c6 = 'z'), 200::bigint,
          'a last column appended to rows of more than 8 columns');
CREATE TABLE public.narrow (body text, paths text[], kind text, tier memory.classification);
SELECT memory.govern('public.narrow', '{"content": "body", "source_files": "paths", "source_type": "kind", "target": "tier"}');
INSERT INTO public.narrow (body, paths, kind)
SELECT 'note ' || g, CASE WHEN g % 2 = 0 THEN ARRAY['docs/' || g || '.md'] END, CASE WHEN g % 3 = 0 THEN 'fact' END FROM generate_series(1, 100) g;
SELECT is((SELECT count(*) FROM public.narrow WHERE tier = memory.classify(body, paths, kind) AND body LIKE 'note %'), 100::bigint,
          'a last column that was the only NULL: the null bitmap is dropped, as heap_form_tuple does');
UPDATE public.added SET tier = NULL WHERE n IS NULL;
SELECT is((SELECT count(*) FROM public.added WHERE tier IS NULL), 0::bigint, 'an UPDATE that clears the tier gets it back');
SELECT throws_ok($$ INSERT INTO public.notes (body, kind) VALUES ('x', 'bogus') $$, '22023', NULL, 'unknown source_type text in an app table is 22023');
SELECT throws_ok($$ INSERT INTO public.notes (body, meta) VALUES ('x', '[1]') $$, '22023', NULL, 'a non-object jsonb target is 22023');
SELECT throws_ok($$ SELECT memory.govern('public.notes', '{"content": "nope"}') $$, '22023', NULL, 'govern on a missing column is 22023');
SELECT throws_ok($$ SELECT memory.govern('public.notes', '{"contnet": "body"}') $$, '22023', NULL, 'govern with an unknown option is 22023');
SELECT throws_ok($$ SELECT memory.govern('public.notes', '{"content": "body", "target": "paths"}') $$, '22023', NULL, 'govern with a target of the wrong type is 22023');
SELECT is(count(*), 1::bigint, 'failed govern calls left the existing trigger in place') FROM pg_trigger WHERE tgrelid = 'public.notes'::regclass AND tgname = 'memory_classify';
CREATE TABLE public.legacy (id int, body text, tier text);
INSERT INTO public.legacy VALUES (1, 'the password', NULL), (2, 'docs', 'restricted');
SELECT is((memory.govern('public.legacy', '{"content": "body", "target": "tier", "backfill": true}')->>'backfilled')::int, 1, 'backfill touches only rows without a tier');
SELECT results_eq($$ SELECT tier FROM public.legacy ORDER BY id $$, $$ VALUES ('confidential'), ('restricted') $$, 'backfilled rows are classified, existing tiers kept');
SELECT ok(memory.ungovern('public.notes'), 'ungovern');
SELECT is(count(*), 0::bigint, 'ungovern removed the trigger and the registry row')
  FROM (SELECT 1 FROM pg_trigger WHERE tgrelid = 'public.notes'::regclass AND tgname LIKE 'memory\_%'
        UNION ALL SELECT 1 FROM memory.governed_tables WHERE table_name = 'public.notes'::regclass) x;

-- Privileges ------------------------------------------------------------------------------------------
CREATE ROLE memtest_app LOGIN;
GRANT SELECT, INSERT, UPDATE ON memory.observations TO memtest_app;
SET LOCAL ROLE memtest_app;
SELECT throws_ok($$ SET memory.classify_detectors = off $$, '42501', NULL, 'an ordinary role cannot turn detectors off');
SELECT throws_ok($$ SELECT memory.reclassify('00000000-0000-0000-0000-000000000002', 'public', 'x') $$, '42501', NULL, 'an ordinary role cannot reclassify');
SELECT throws_ok($$ SELECT memory_internal._allow_downgrade('memory.observations'::regclass::oid) $$, '42501', NULL, 'an ordinary role cannot open the downgrade gate');
SELECT throws_ok($$ SELECT * FROM memory.classification_rules $$, '42501', NULL, 'an ordinary role cannot read org rules');
RESET ROLE;

-- The classify trigger's column mapping (src/classify/columns.rs) re-checks the org column's
-- type when it is resolved again: a column retyped after memory.govern is refused, not read as text.
CREATE TABLE public.retyped (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), org_id text, body text, classification memory.classification);
SELECT memory.govern('public.retyped', '{"content": "body"}');
INSERT INTO public.retyped (org_id, body) VALUES ('acme', 'hello');
ALTER TABLE public.retyped ALTER COLUMN org_id TYPE int USING 1;
SELECT throws_ok($$ INSERT INTO public.retyped (org_id, body) VALUES (2, 'hello again') $$, '22023',
                 'the org column "org_id" of public.retyped must be text or varchar', 'an org column retyped since govern is refused');

-- Blank memories (issue 46): an empty or white-space-only content is refused (22023) and nothing is
-- written, on memory.observations always, and on a governed table whose mapping says
-- "content_required"; rows already blank (0.3.0) keep their other columns writable.
SELECT throws_ok($$ INSERT INTO memory.observations (org_id, content) VALUES ('acme', '') $$, '22023', NULL, 'an empty memory is refused');
SELECT throws_ok($$ INSERT INTO memory.observations (org_id, content) VALUES ('acme', E'  \t\n\u00a0') $$, '22023',
                 'the content of a row of memory.observations is empty or blank', 'a white-space-only memory is refused');
SELECT throws_ok($$ INSERT INTO memory.observations (org_id, content) VALUES ('acme', 'fine'), ('acme', '   ') $$, '22023', NULL,
                 'a batch with one blank memory is refused');
SELECT is((SELECT count(*) FROM memory.observations WHERE content = 'fine' OR btrim(content, E' \t\n\u00a0') = ''), 0::bigint,
          'and nothing of it was written');
INSERT INTO memory.observations (id, org_id, content) VALUES ('00000000-0000-0000-0000-0000000000b1', 'acme', 'not blank');
SELECT throws_ok($$ UPDATE memory.observations SET content = ' ' WHERE id = '00000000-0000-0000-0000-0000000000b1' $$, '22023', NULL,
                 'an UPDATE that blanks a memory is refused');
SELECT is((SELECT content FROM memory.observations WHERE id = '00000000-0000-0000-0000-0000000000b1'), 'not blank', 'and the memory is as it was');
SET LOCAL memory.restore_mode = on;   -- a row as a 0.3.0 store may hold it
INSERT INTO memory.observations (id, org_id, content, classification) VALUES ('00000000-0000-0000-0000-0000000000b2', 'acme', ' ', 'internal');
RESET memory.restore_mode;
SELECT lives_ok($$ UPDATE memory.observations SET metadata = '{"k": 1}', weight = 0.5 WHERE id = '00000000-0000-0000-0000-0000000000b2' $$,
                'a row already blank keeps its other columns writable');
SELECT is((SELECT metadata->>'k' FROM memory.observations WHERE id = '00000000-0000-0000-0000-0000000000b2'), '1', 'and the update applied');
CREATE TABLE public.required_notes (id bigserial PRIMARY KEY, org_id text, body text, classification memory.classification);
SELECT is(memory.govern('public.required_notes', '{"content": "body", "content_required": true}')->>'content_required', 'true',
          'govern records content_required');
SELECT throws_ok($$ INSERT INTO public.required_notes (org_id, body) VALUES ('acme', ' ') $$, '22023',
                 'the content of a row of public.required_notes is empty or blank', 'a governed table with content_required refuses a blank content');
SELECT is(memory.govern('public.required_notes', '{"content": "body"}') ? 'content_required', false, 'govern again without it');
SELECT lives_ok($$ INSERT INTO public.required_notes (org_id, body) VALUES ('acme', ' ') $$, 'and a blank content is taken again');
SELECT throws_ok($$ SELECT memory.govern('public.required_notes', '{"content": "body", "content_required": "yes"}') $$, '22023', NULL,
                 'content_required is a boolean');
SELECT throws_ok($$ SELECT memory.govern('public.required_notes', '{"classify": false, "audit": true, "content_required": true}') $$, '22023', NULL,
                 'content_required needs the classify trigger');

SELECT * FROM finish();
ROLLBACK;
