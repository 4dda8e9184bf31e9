-- SQL-level suite for the agent API (issue 35): memory.forget (observations and governed tables)
-- and correcting a memory by UPDATE, as tenant-bound roles.
BEGIN;
SELECT plan(59);

SELECT memory.setup_roles();
CREATE ROLE aa_writer IN ROLE memory_writer;
CREATE ROLE aa_globex IN ROLE memory_writer;
CREATE ROLE aa_reader IN ROLE memory_reader;
CREATE ROLE aa_admin IN ROLE memory_admin;
CREATE ROLE aa_owner IN ROLE memory_writer;
SELECT memory.grant_org('aa_writer', 'acme'), memory.grant_org('aa_globex', 'globex'), memory.grant_org('aa_reader', 'acme'),
       memory.grant_org('aa_admin', 'acme'), memory.grant_org('aa_owner', 'acme'), memory.grant_org('aa_owner', 'globex');

INSERT INTO memory.observations (id, org_id, user_id, content) VALUES
  ('00000000-0000-0000-0000-0000000000a1', 'acme', 'dave', 'dave likes tea'),
  ('00000000-0000-0000-0000-0000000000a2', 'acme', 'dave', 'dave likes coffee'),
  ('00000000-0000-0000-0000-0000000000a3', 'acme', 'erin', 'erin prefers short answers'),
  ('00000000-0000-0000-0000-0000000000a4', 'acme', 'erin', 'erin uses vim'),
  ('00000000-0000-0000-0000-0000000000a5', 'acme', 'held', 'held note one'),
  ('00000000-0000-0000-0000-0000000000a6', 'acme', 'held', 'held note two'),
  ('00000000-0000-0000-0000-0000000000b1', 'globex', 'gina', 'globex secret plan');
-- Weight history of a1, and a1's twin in the archive (as retention leaves an archived copy).
INSERT INTO memory.observation_weight_history (observation_id, session_id, outcome, previous_weight, new_weight, alpha, org_id)
VALUES ('00000000-0000-0000-0000-0000000000a1', 's1', 'accepted', 1, 1, 0.1, 'acme');
INSERT INTO memory.observations_archive (id, org_id, user_id, content, classification) VALUES
  ('00000000-0000-0000-0000-0000000000c1', 'acme', 'dave', 'archived dave note', 'internal');
INSERT INTO memory.observation_weight_history (observation_id, session_id, outcome, previous_weight, new_weight, alpha, org_id)
VALUES ('00000000-0000-0000-0000-0000000000c1', 's1', 'rejected', 1, 0.85, 0.15, 'acme');
INSERT INTO memory.legal_holds (id, org_id, user_id, reason) OVERRIDING SYSTEM VALUE VALUES (951, 'acme', 'held', 'litigation');

-- ------------------------------------------------------------------------------------------------
-- memory.forget(ids uuid[], reason)
SET ROLE aa_writer;
SELECT is(memory.forget(ARRAY['00000000-0000-0000-0000-0000000000a1']::uuid[], 'user asked') - ARRAY['receipt', 'receipts'],
          '{"forgotten": ["00000000-0000-0000-0000-0000000000a1"], "held": [], "not_found": [], "derived_forgotten": []}'::jsonb, 'a writer forgets one of its org''s memories');
SELECT is((SELECT count(*) FROM memory.observations WHERE id = '00000000-0000-0000-0000-0000000000a1'), 0::bigint, 'it is gone from the store');
SELECT is(memory.forget(ARRAY['00000000-0000-0000-0000-0000000000a2', '00000000-0000-0000-0000-0000000000c1',
                              '00000000-0000-0000-0000-0000000000a2', '00000000-0000-0000-0000-0000000000b1',
                              '00000000-0000-0000-0000-0000000000ff', '00000000-0000-0000-0000-0000000000a5']::uuid[], 'cleanup') - ARRAY['receipt', 'receipts'],
          '{"forgotten": ["00000000-0000-0000-0000-0000000000a2", "00000000-0000-0000-0000-0000000000c1"],
            "held": ["00000000-0000-0000-0000-0000000000a5"],
            "not_found": ["00000000-0000-0000-0000-0000000000b1", "00000000-0000-0000-0000-0000000000ff"], "derived_forgotten": []}'::jsonb,
          'several at once: an archived one, a duplicate reported once, another org''s id and a missing one not_found, a held one in held');
SELECT throws_ok($$ SELECT memory.forget(ARRAY['00000000-0000-0000-0000-0000000000a5', '00000000-0000-0000-0000-0000000000a6']::uuid[], 'x') $$,
                 'MX006', 'legal hold 951 covers every row given (2): nothing was forgotten', 'every id held: MX006 naming the hold');
SELECT throws_ok($$ SELECT memory.forget(ARRAY['00000000-0000-0000-0000-0000000000a5']::uuid[], 'x') $$,
                 'MX006', 'legal hold 951 covers row 00000000-0000-0000-0000-0000000000a5: nothing was forgotten', 'one held id: MX006');
SELECT is(memory.forget(NULL, 'nothing'), '{"forgotten": [], "held": [], "not_found": [], "derived_forgotten": []}'::jsonb, 'NULL ids: nothing to forget');
SELECT is(memory.forget('{}', 'nothing'), '{"forgotten": [], "held": [], "not_found": [], "derived_forgotten": []}'::jsonb, 'an empty array likewise');
SELECT throws_ok($$ SELECT memory.forget(ARRAY['00000000-0000-0000-0000-0000000000a3']::uuid[], NULL) $$, '22023', 'memory.forget needs a reason', 'NULL reason');
SELECT throws_ok($$ SELECT memory.forget(ARRAY['00000000-0000-0000-0000-0000000000a3']::uuid[], E' \t') $$, '22023', NULL, 'blank reason');
SELECT throws_ok($$ SELECT memory.forget('{}', '') $$, '22023', NULL, 'the reason is checked even with no ids');
SELECT throws_ok($$ SELECT memory.forget(ARRAY['00000000-0000-0000-0000-0000000000a3']::uuid[], repeat('x', 1001)) $$, '22023', NULL, 'a reason over 1000 characters');
SELECT throws_ok($$ SELECT memory.forget(array_fill('00000000-0000-0000-0000-0000000000a3'::uuid, ARRAY[10001]), 'x') $$, '22023',
                 'memory.forget takes at most 10,000 ids (10001 given)', 'over 10,000 ids');
SELECT throws_ok($$ SELECT memory.forget(ARRAY['00000000-0000-0000-0000-0000000000a3', NULL]::uuid[], 'x') $$, '22023', NULL, 'a NULL id');
SELECT throws_ok($$ SELECT memory.forget(array_fill('00000000-0000-0000-0000-0000000000a3'::uuid, ARRAY[2, 2]), 'x') $$, '22023', NULL, 'a 2-D array');
SELECT is((SELECT count(*) FROM memory.observations WHERE id = '00000000-0000-0000-0000-0000000000a3'), 1::bigint, 'bad input changed nothing');
RESET ROLE;
SELECT is((SELECT count(*) FROM memory.observations WHERE id IN ('00000000-0000-0000-0000-0000000000a2', '00000000-0000-0000-0000-0000000000b1',
                                                                  '00000000-0000-0000-0000-0000000000a5', '00000000-0000-0000-0000-0000000000a6')),
          3::bigint, 'a2 is gone; globex''s row and the held rows stay');
SELECT is((SELECT count(*) FROM memory.observations_archive WHERE id = '00000000-0000-0000-0000-0000000000c1'), 0::bigint, 'the archived row is gone');
SELECT is((SELECT count(*) FROM memory.observation_weight_history WHERE observation_id IN ('00000000-0000-0000-0000-0000000000a1',
                                                                                          '00000000-0000-0000-0000-0000000000c1')),
          0::bigint, 'and their weight history');
SELECT is((SELECT count(*) FROM public.audit_log_now() l WHERE l.payload::text LIKE '%dave likes%' OR l.payload::text LIKE '%archived dave%'),
          0::bigint, 'no content in the log');
SELECT is((SELECT jsonb_agg(l.payload - 'part' - 'parts' ORDER BY l.seq) FROM memory.audit_log l WHERE l.chain_id = 'acme' AND l.event_type = 'memory.forget'),
          jsonb_build_array(
            jsonb_build_object('table', 'memory.observations', 'reason', 'user asked', 'held', 0, 'forgotten', jsonb_build_array(
              jsonb_build_object('id', '00000000-0000-0000-0000-0000000000a1', 'content_sha256', encode(sha256(convert_to('dave likes tea', 'UTF8')), 'hex')))),
            jsonb_build_object('table', 'memory.observations', 'reason', 'cleanup', 'held', 1, 'forgotten', jsonb_build_array(
              jsonb_build_object('id', '00000000-0000-0000-0000-0000000000a2', 'content_sha256', encode(sha256(convert_to('dave likes coffee', 'UTF8')), 'hex')),
              jsonb_build_object('id', '00000000-0000-0000-0000-0000000000c1', 'content_sha256', encode(sha256(convert_to('archived dave note', 'UTF8')), 'hex'))))),
          'one memory.forget event per call on acme''s chain: ids, content hashes, the reason');
SELECT is((SELECT l.payload->>'content_sha256' FROM memory.audit_log l WHERE l.chain_id = 'acme' AND l.event_type = 'memory.store'
            AND l.payload->>'id' = '00000000-0000-0000-0000-0000000000a1'),
          encode(sha256(convert_to('dave likes tea', 'UTF8')), 'hex'), 'the hash is the one memory.store recorded');
SELECT is((SELECT count(*) FROM memory.audit_log l WHERE l.chain_id = 'globex' AND l.event_type = 'memory.forget'), 0::bigint, 'nothing on globex''s chain');
SELECT ok((SELECT bool_and(ok) FROM memory.audit_verify()), 'every chain verifies');

-- Several orgs: a role acting for both gets one event per org.
CREATE ROLE aa_both IN ROLE memory_writer;
SELECT memory.grant_org('aa_both', 'acme'), memory.grant_org('aa_both', 'globex');
INSERT INTO memory.observations (id, org_id, content) VALUES ('00000000-0000-0000-0000-0000000000b2', 'globex', 'globex note');
SET ROLE aa_both;
SELECT is(memory.forget(ARRAY['00000000-0000-0000-0000-0000000000a4', '00000000-0000-0000-0000-0000000000b2']::uuid[], 'two orgs')->'forgotten',
          '["00000000-0000-0000-0000-0000000000a4", "00000000-0000-0000-0000-0000000000b2"]'::jsonb, 'a role of two orgs forgets in both');
RESET ROLE;
SELECT is((SELECT array_agg(l.chain_id ORDER BY l.chain_id) FROM public.audit_log_now() l WHERE l.event_type = 'memory.forget' AND l.payload->>'reason' = 'two orgs'),
          ARRAY['acme', 'globex'], 'one event per org, each on its chain');

SET ROLE aa_reader;
SELECT throws_ok($$ SELECT memory.forget(ARRAY['00000000-0000-0000-0000-0000000000a3']::uuid[], 'x') $$, '42501', NULL, 'a reader cannot forget');
RESET ROLE;

-- ------------------------------------------------------------------------------------------------
-- memory.forget(tbl, ids text[], reason) on governed tables
GRANT CREATE ON SCHEMA public TO aa_owner;
SET ROLE aa_owner;
CREATE TABLE public.aa_notes (id bigint PRIMARY KEY, tenant text NOT NULL, person text, body text, meta jsonb);
SELECT memory.govern('public.aa_notes', '{"content": "body", "target": "meta", "org": "tenant", "user": "person", "id": "id", "audit": true}');
CREATE TABLE public.aa_plain (k text PRIMARY KEY, tenant text, body text, classification memory.classification);
SELECT memory.govern('public.aa_plain', '{"content": "body", "org": "tenant"}');
CREATE TABLE public.aa_ungoverned (id bigint PRIMARY KEY);
INSERT INTO public.aa_notes VALUES (1, 'acme', 'dave', 'note one'), (2, 'acme', 'dave', 'note two'), (3, 'acme', 'held', 'held row'),
                                   (4, 'globex', 'gina', 'globex row');
GRANT SELECT, DELETE ON public.aa_notes, public.aa_plain, public.aa_ungoverned TO aa_writer;
GRANT SELECT ON public.aa_notes TO aa_globex;
RESET ROLE;
SET ROLE aa_writer;
SELECT is(memory.forget('public.aa_notes', ARRAY['1', '02', '4', '9', '3'], 'user asked') - ARRAY['receipt', 'receipts'],
          '{"forgotten": ["1", "2"], "held": ["3"], "kept": [], "not_found": ["4", "9"]}'::jsonb,
          'a governed table: ids as its id column writes them; another org''s row not_found, a held one in held');
SELECT throws_ok($$ SELECT memory.forget('public.aa_notes', ARRAY['3'], 'x') $$, 'MX006', NULL, 'every id held: MX006');
SELECT throws_ok($$ SELECT memory.forget('public.aa_notes', ARRAY['x'], 'x') $$, '22023', NULL, 'an id the column cannot hold');
SELECT throws_ok($$ SELECT memory.forget('public.aa_notes', ARRAY['1'], NULL) $$, '22023', NULL, 'NULL reason');
SELECT throws_ok($$ SELECT memory.forget('public.aa_notes', array_fill('1'::text, ARRAY[10001]), 'x') $$, '22023', NULL, 'over 10,000 ids');
SELECT throws_ok($$ SELECT memory.forget(NULL::regclass, ARRAY['1'], 'x') $$, '22023', NULL, 'no table');
SELECT throws_ok($$ SELECT memory.forget('public.aa_ungoverned', ARRAY['1'], 'x') $$, '22023', 'table public.aa_ungoverned is not governed by memory_ext',
                 'a table that is not governed');
SELECT throws_ok($$ SELECT memory.forget('public.aa_plain', ARRAY['1'], 'x') $$, '22023', 'table public.aa_plain has no id column mapping',
                 'a governed table without an id mapping');
SELECT throws_ok($$ SELECT memory.forget('memory.observations', ARRAY['1'], 'x') $$, '42501', NULL, 'a writer holds no DELETE on memory_ext''s store');
SELECT is(memory.forget('public.aa_notes', '{}', 'x'), '{"forgotten": [], "held": [], "kept": [], "not_found": []}'::jsonb, 'no ids: nothing');
RESET ROLE;
SET ROLE aa_globex;
SELECT throws_ok($$ SELECT memory.forget('public.aa_notes', ARRAY['4'], 'x') $$, '42501', 'permission denied to forget rows of public.aa_notes',
                 'a role that may not DELETE from the table');
RESET ROLE;
SELECT throws_ok($$ SELECT memory.forget('memory.observations', ARRAY['1'], 'x') $$, '22023', 'table memory.observations is managed by memory_ext',
                 'memory_ext''s own table: the uuid form forgets observations');
SELECT is((SELECT array_agg(id ORDER BY id) FROM public.aa_notes), ARRAY[3, 4]::bigint[], 'rows 1 and 2 are gone; the held and globex rows stay');
SELECT is((SELECT l.payload - 'part' - 'parts' FROM public.audit_log_now() l WHERE l.chain_id = 'acme' AND l.event_type = 'memory.forget'
            AND l.payload->>'table' = 'public.aa_notes'),
          jsonb_build_object('table', 'public.aa_notes', 'reason', 'user asked', 'held', 1, 'forgotten', jsonb_build_array(
            jsonb_build_object('id', '1', 'content_sha256', encode(sha256(convert_to('note one', 'UTF8')), 'hex')),
            jsonb_build_object('id', '2', 'content_sha256', encode(sha256(convert_to('note two', 'UTF8')), 'hex')))),
          'the table''s memory.forget event');
SELECT is((SELECT count(*) FROM memory.audit_log l WHERE l.event_type = 'memory.delete' AND l.payload->>'table' = 'public.aa_notes'
            AND l.actor_id = 'role:aa_writer'), 2::bigint, 'the rows were deleted as the caller, as its own DELETE (the audit trigger recorded them as aa_writer)');

-- (issue 53) Forget on a table is the caller's own DELETE: the table's row-level security holds
-- (a row its policy hides is not_found, as a missing id, and stays).
SET ROLE aa_owner;
INSERT INTO public.aa_notes VALUES (5, 'acme', 'aa_writer', 'the writer''s note'), (6, 'acme', 'erin', 'erin''s note');
ALTER TABLE public.aa_notes ENABLE ROW LEVEL SECURITY;
CREATE POLICY own_rows ON public.aa_notes USING (person = current_user);
RESET ROLE;
SET ROLE aa_writer;
SELECT is(memory.forget('public.aa_notes', ARRAY['6', '5', '4'], 'user asked') - ARRAY['receipt', 'receipts'],
          '{"forgotten": ["5"], "held": [], "kept": [], "not_found": ["6", "4"]}'::jsonb,
          'rows the table''s policy hides from the caller are not_found: forget deletes what its own DELETE could');
RESET ROLE;
SELECT is((SELECT array_agg(id ORDER BY id) FROM public.aa_notes), ARRAY[3, 4, 6]::bigint[], 'the hidden rows stay');

-- ------------------------------------------------------------------------------------------------
-- Correcting a memory: a writer UPDATEs its org's rows.
SET ROLE aa_writer;
UPDATE memory.observations SET content = 'erin prefers long answers' WHERE id = '00000000-0000-0000-0000-0000000000a3';
SELECT is((SELECT content FROM memory.observations WHERE id = '00000000-0000-0000-0000-0000000000a3'), 'erin prefers long answers', 'a writer corrects a memory');
UPDATE memory.observations SET content = 'erin''s api_key is in the vault', source_files = ARRAY['docs/x.md'], source_type = 'fact',
                               memory_type = 'episodic', metadata = '{"note": "corrected"}'
 WHERE id = '00000000-0000-0000-0000-0000000000a3';
SELECT is((SELECT classification::text FROM memory.observations WHERE id = '00000000-0000-0000-0000-0000000000a3'), 'confidential',
          'the new content is re-classified');
SELECT is((SELECT metadata FROM memory.observations WHERE id = '00000000-0000-0000-0000-0000000000a3'),
          '{"note": "corrected", "classification": "confidential"}'::jsonb, 'metadata keeps the tier');
UPDATE memory.observations SET content = 'erin is fine' WHERE id = '00000000-0000-0000-0000-0000000000a3';
SELECT is((SELECT classification::text FROM memory.observations WHERE id = '00000000-0000-0000-0000-0000000000a3'), 'confidential',
          'harmless new content keeps the tier (never lowered)');
SELECT throws_ok($$ UPDATE memory.observations SET metadata = '{"classification": "public"}' WHERE id = '00000000-0000-0000-0000-0000000000a3' $$,
                 'MX004', NULL, 'nor can metadata lower it');
SELECT throws_ok($$ UPDATE memory.observations SET content = 'changed' WHERE id = '00000000-0000-0000-0000-0000000000a6' $$,
                 'MX006', NULL, 'a held memory cannot be corrected');
SELECT throws_ok($$ UPDATE memory.observations SET classification = 'public' WHERE id = '00000000-0000-0000-0000-0000000000a3' $$,
                 '42501', NULL, 'a writer may not set the tier');
SELECT throws_ok($$ UPDATE memory.observations SET weight = 0.1 WHERE id = '00000000-0000-0000-0000-0000000000a3' $$, '42501', NULL, 'nor the weight');
SELECT throws_ok($$ UPDATE memory.observations SET created_at = now() - interval '10 years' WHERE id = '00000000-0000-0000-0000-0000000000a3' $$,
                 '42501', NULL, 'nor created_at');
SELECT throws_ok($$ UPDATE memory.observations SET expires_at = NULL WHERE id = '00000000-0000-0000-0000-0000000000a3' $$, '42501', NULL, 'nor expires_at');
SELECT throws_ok($$ UPDATE memory.observations SET org_id = 'globex' WHERE id = '00000000-0000-0000-0000-0000000000a3' $$, '42501', NULL, 'nor the org');
SELECT throws_ok($$ DELETE FROM memory.observations WHERE id = '00000000-0000-0000-0000-0000000000a3' $$, '42501', NULL,
                 'nor DELETE: memory.forget is the way');
UPDATE memory.observations SET content = 'hijacked' WHERE id = '00000000-0000-0000-0000-0000000000b1';
RESET ROLE;
SELECT is((SELECT content FROM memory.observations WHERE id = '00000000-0000-0000-0000-0000000000b1'), 'globex secret plan',
          'another org''s row is invisible to the writer''s UPDATE');
SELECT is((SELECT jsonb_agg(jsonb_build_object('type', l.event_type, 'hash', l.payload->'content_sha256', 'tier', coalesce(l.payload->'classification', l.payload->'to')) ORDER BY l.seq)
             FROM public.audit_log_now() l WHERE l.chain_id = 'acme' AND l.payload->>'id' = '00000000-0000-0000-0000-0000000000a3' AND l.event_type <> 'memory.store'),
          jsonb_build_array(
            jsonb_build_object('type', 'memory.update', 'hash', encode(sha256(convert_to('erin prefers long answers', 'UTF8')), 'hex'), 'tier', 'internal'),
            jsonb_build_object('type', 'memory.update', 'hash', encode(sha256(convert_to('erin''s api_key is in the vault', 'UTF8')), 'hex'), 'tier', 'confidential'),
            jsonb_build_object('type', 'memory.reclassify', 'hash', NULL, 'tier', 'confidential'),
            jsonb_build_object('type', 'memory.update', 'hash', encode(sha256(convert_to('erin is fine', 'UTF8')), 'hex'), 'tier', 'confidential')),
          'each correction is audited with the new content hash (memory.update), a raised tier also as memory.reclassify');
SELECT is((SELECT count(*) FROM memory.audit_log l WHERE l.payload::text LIKE '%erin prefers long%'), 0::bigint, 'never the content');
SELECT ok((SELECT bool_and(ok) FROM memory.audit_verify()), 'every chain still verifies');

SELECT * FROM finish();
ROLLBACK;
