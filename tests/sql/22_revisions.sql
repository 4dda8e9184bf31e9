-- SQL-level suite for memory over time (issue 49, SPEC §17): revisions and memory.history,
-- memory.change_reason, supersession, point-in-time recall and search (as_of), clearance per
-- revision, forget over revisions, as tenant-bound roles. The file runs in one transaction, so
-- "earlier" times are made by backdating created_at as the superuser.
BEGIN;
SELECT plan(77);

SELECT memory.setup_roles();
CREATE ROLE rv_writer IN ROLE memory_writer;
CREATE ROLE rv_globex IN ROLE memory_writer;
CREATE ROLE rv_reader IN ROLE memory_reader;
CREATE ROLE rv_internal IN ROLE memory_reader;
CREATE ROLE rv_admin IN ROLE memory_admin;
GRANT EXECUTE ON FUNCTION memory.reclassify(uuid, memory.classification, text) TO rv_admin;
SELECT memory.grant_org('rv_writer', 'acme'), memory.grant_org('rv_globex', 'globex'), memory.grant_org('rv_reader', 'acme'),
       memory.grant_org('rv_internal', 'acme', 'internal'), memory.grant_org('rv_admin', 'acme');

-- ------------------------------------------------------------------------------------------------
-- A correction is kept as a revision and seen in history.
SET ROLE rv_writer;
INSERT INTO memory.observations (org_id, user_id, content) VALUES ('acme', 'dave', 'Dave prefers to be contacted by email');
RESET ROLE;
CREATE TEMP TABLE ids (name text PRIMARY KEY, id uuid);
GRANT SELECT, INSERT ON ids TO PUBLIC;
INSERT INTO ids SELECT 'pref', id FROM memory.observations WHERE content LIKE 'Dave prefers%';
UPDATE memory.observations SET created_at = '2026-01-01 00:00+00' WHERE id = (SELECT id FROM ids WHERE name = 'pref');
SELECT is((SELECT count(*) FROM memory.revisions), 0::bigint, 'a change of created_at alone keeps no revision');

SET ROLE rv_writer;
SET memory.actor_id = 'agent-7';
SET LOCAL memory.change_reason = 'the customer corrected it';
UPDATE memory.observations SET content = 'Dave prefers to be contacted by phone' WHERE id = (SELECT id FROM ids WHERE name = 'pref');
RESET memory.change_reason;
RESET memory.actor_id;
SET ROLE rv_reader;
SELECT is((SELECT array_agg(rev ORDER BY ord) FROM memory.history((SELECT id FROM ids WHERE name = 'pref')) WITH ORDINALITY h(rev, content, metadata, classification, valid_from, valid_to, actor, reason, ord)),
          ARRAY[2, 1], 'history: newest first, the current version and the one it replaced');
SELECT is((SELECT content FROM memory.history((SELECT id FROM ids WHERE name = 'pref')) WHERE rev = 1), 'Dave prefers to be contacted by email',
          'the revision keeps the old content');
SELECT is((SELECT content FROM memory.history((SELECT id FROM ids WHERE name = 'pref')) WHERE rev = 2), 'Dave prefers to be contacted by phone',
          'the current version is the corrected one');
SELECT is((SELECT reason FROM memory.history((SELECT id FROM ids WHERE name = 'pref')) WHERE rev = 1), 'the customer corrected it',
          'memory.change_reason is the revision''s reason');
SELECT ok((SELECT actor LIKE 'h:%;role:rv_writer' AND actor NOT LIKE '%agent-7%' FROM memory.history((SELECT id FROM ids WHERE name = 'pref')) WHERE rev = 1),
          'the actor is pseudonymised as the audit names it, with the role');
SELECT is((SELECT valid_from FROM memory.history((SELECT id FROM ids WHERE name = 'pref')) WHERE rev = 1), '2026-01-01 00:00+00'::timestamptz,
          'the first revision is valid from the memory''s creation');
SELECT ok((SELECT valid_to IS NULL AND valid_from = now() FROM memory.history((SELECT id FROM ids WHERE name = 'pref')) WHERE rev = 2),
          'the current version is valid from the change, with no end');
SELECT is((SELECT count(*) FROM memory.revisions), 1::bigint, 'a reader of the org reads the revisions table');
RESET ROLE;
SELECT is((SELECT array[l.payload->>'rev', l.payload->>'previous_content_sha256', l.payload->>'content_sha256']
             FROM public.audit_log_now() l WHERE l.event_type = 'memory.update' AND l.payload->>'id' = (SELECT id::text FROM ids WHERE name = 'pref')),
          ARRAY['1', encode(sha256(convert_to('Dave prefers to be contacted by email', 'UTF8')), 'hex'),
                encode(sha256(convert_to('Dave prefers to be contacted by phone', 'UTF8')), 'hex')],
          'memory.update carries the revision and both content hashes');
SELECT is((SELECT count(*) FROM memory.audit_log l WHERE l.payload::text LIKE '%contacted%'), 0::bigint, 'no content in the log');
UPDATE memory.observations SET weight = 0.5 WHERE id = (SELECT id FROM ids WHERE name = 'pref');
SELECT is((SELECT count(*) FROM memory.revisions), 1::bigint, 'a change of weight keeps no revision');
SET ROLE rv_writer;
UPDATE memory.observations SET metadata = '{"channel": "phone"}' WHERE id = (SELECT id FROM ids WHERE name = 'pref');
RESET ROLE;
SELECT is((SELECT max(rev) FROM memory.revisions WHERE memory_id = (SELECT id FROM ids WHERE name = 'pref')), 2,
          'a change of metadata keeps one (rev 2)');
SELECT is((SELECT valid_from FROM memory.revisions WHERE memory_id = (SELECT id FROM ids WHERE name = 'pref') AND rev = 2), now(),
          'each revision is valid from the end of the one before');
SET ROLE rv_globex;
SELECT is((SELECT count(*) FROM memory.history((SELECT id FROM ids WHERE name = 'pref'))), 0::bigint, 'another tenant sees no history');
SELECT is((SELECT count(*) FROM memory.revisions), 0::bigint, 'nor any revision');
SELECT throws_ok($$ INSERT INTO memory.revisions VALUES ('globex', gen_random_uuid(), 1, 'x', NULL, '{}', 'public', now(), now(), 'me', NULL) $$,
                 '42501', NULL, 'a writer does not write revisions');

-- ------------------------------------------------------------------------------------------------
-- Point in time: recall as of a time answers what was known then.
SET ROLE rv_reader;
SELECT is((SELECT content FROM memory.recall('acme', 'how does Dave prefer to be contacted')), 'Dave prefers to be contacted by phone',
          'recall today: the corrected memory');
SELECT is((SELECT content FROM memory.recall('acme', 'how does Dave prefer to be contacted', as_of => '2026-02-01 00:00+00')),
          'Dave prefers to be contacted by email', 'recall as of February: the version valid then');
SELECT is((SELECT content FROM memory.recall('acme', 'email', as_of => '2026-02-01 00:00+00')), 'Dave prefers to be contacted by email',
          'matched by the words of the version valid then');
SELECT is((SELECT count(*) FROM memory.recall('acme', 'email')), 0::bigint, 'which today''s memory no longer has');
SELECT ok((SELECT NOT (metadata ? 'channel') FROM memory.recall('acme', 'contacted', as_of => '2026-02-01 00:00+00')), 'with the metadata valid then');
SELECT is((SELECT metadata->>'channel' FROM memory.recall('acme', 'contacted')), 'phone', 'and today''s today');
SELECT is((SELECT count(*) FROM memory.recall('acme', 'contacted', as_of => '2025-12-01 00:00+00')), 0::bigint,
          'as of a time before the memory was written: nothing');
SELECT is((SELECT array_agg(id) FROM memory.recall('acme', 'contacted', 10, NULL, '{}', NULL::real[], NULL)),
          (SELECT array_agg(id) FROM memory.recall(org_id => 'acme', query => 'contacted')),
          'a positional call of 0.3.0''s arguments answers as the named one');
SELECT throws_ok($$ SELECT * FROM memory.recall('acme', 'x', as_of => 'infinity') $$, '22023', NULL, 'a non-finite as_of: 22023');
SELECT throws_ok($$ SELECT * FROM memory.search('acme', ARRAY['x'], as_of => '-infinity') $$, '22023', NULL, 'search too');
RESET ROLE;
SELECT is((SELECT payload->>'as_of' FROM public.audit_log_now() l WHERE l.event_type = 'memory.recall' AND l.payload ? 'as_of' ORDER BY seq LIMIT 1),
          memory_internal._utc_text('2026-02-01 00:00+00'), 'the recall event names the time it read as of');
-- The rows no revision covers are told by a binary search of the covered ids, sorted
-- (memory_internal._sorted_uuids_hold, the engine's).
SELECT ok((SELECT bool_and(memory_internal._sorted_uuids_hold(s.a, md5(i::text)::uuid))
             FROM (SELECT array_agg(md5(i::text)::uuid ORDER BY md5(i::text)::uuid) a FROM generate_series(1, 300) i) s, generate_series(1, 300) i),
          'every id of a sorted array is found');
SELECT ok((SELECT NOT bool_or(memory_internal._sorted_uuids_hold(s.a, md5(j::text)::uuid))
             FROM (SELECT array_agg(md5(i::text)::uuid ORDER BY md5(i::text)::uuid) a FROM generate_series(1, 300) i) s, generate_series(301, 600) j),
          'and no other');
SELECT ok(NOT memory_internal._sorted_uuids_hold(NULL::uuid[], gen_random_uuid()), 'a NULL array holds nothing');
SELECT ok(NOT memory_internal._sorted_uuids_hold('{}'::uuid[], gen_random_uuid()), 'nor an empty one');

-- Items: a put of a changed value is an UPDATE, so it keeps a revision; search reads as of a time.
SET ROLE rv_writer;
SELECT memory.put('acme', ARRAY['prefs', 'dave'], 'colour', '{"text": "blue"}');
RESET ROLE;
UPDATE memory.observations SET created_at = '2026-01-01 00:00+00', updated_at = '2026-01-01 00:00+00' WHERE key = 'colour';
SET ROLE rv_writer;
SELECT memory.put('acme', ARRAY['prefs', 'dave'], 'colour', '{"text": "green"}');
SELECT memory.put('acme', ARRAY['prefs', 'dave'], 'colour', '{"text": "green"}');
SET ROLE rv_reader;
SELECT is((SELECT array_agg(rev ORDER BY rev) FROM memory.history((SELECT id FROM memory.get('acme', ARRAY['prefs', 'dave'], 'colour')))), ARRAY[1, 2],
          'a put of a changed value keeps a revision, a put of the same value none');
SELECT is((SELECT value->>'text' FROM memory.search('acme', ARRAY['prefs'])), 'green', 'search today: the value now');
SELECT is((SELECT value->>'text' FROM memory.search('acme', ARRAY['prefs'], as_of => '2026-02-01 00:00+00')), 'blue', 'search as of February: the value then');
SELECT is((SELECT count(*) FROM memory.search('acme', ARRAY['prefs'], query => 'blue', as_of => '2026-02-01 00:00+00')), 1::bigint,
          'matched by the words of the value then');
SELECT is((SELECT count(*) FROM memory.search('acme', ARRAY['prefs'], query => 'blue')), 0::bigint, 'which today''s value does not have');
RESET ROLE;
-- refresh_ttl as of a time re-stamps only what is live now: an item whose TTL ran out is found as
-- it was then, and stays expired (a reader's search does not bring it back for everyone).
SET ROLE rv_writer;
SELECT memory.put('acme', ARRAY['cache'], 'gone', '{"text": "a short-lived note"}', ttl => interval '1 hour');
RESET ROLE;
UPDATE memory.observations SET created_at = '2026-01-01 00:00+00', expires_at = now() - interval '1 minute' WHERE key = 'gone';
SET ROLE rv_reader;
SELECT is((SELECT count(*) FROM memory.search('acme', ARRAY['cache'], as_of => now() - interval '10 minutes', refresh_ttl => true)), 1::bigint,
          'an item expired since is found as of a time before');
SELECT is((SELECT count(*) FROM memory.get('acme', ARRAY['cache'], 'gone')), 0::bigint, 'and stays expired after refresh_ttl');
RESET ROLE;
SELECT ok((SELECT expires_at < now() FROM memory.observations WHERE key = 'gone'), 'its expiry is not re-stamped');

-- ------------------------------------------------------------------------------------------------
-- Clearance per revision: a reader cleared below a revision's tier does not see it.
SET ROLE rv_writer;
INSERT INTO memory.observations (org_id, content, classification) VALUES ('acme', 'Quarterly pricing plan draft', 'confidential');
RESET ROLE;
INSERT INTO ids SELECT 'plan', id FROM memory.observations WHERE content = 'Quarterly pricing plan draft';
UPDATE memory.observations SET created_at = '2026-01-01 00:00+00' WHERE id = (SELECT id FROM ids WHERE name = 'plan');
SET ROLE rv_admin;
SELECT memory.reclassify((SELECT id FROM ids WHERE name = 'plan'), 'internal', 'published');
SET ROLE rv_internal;
SELECT is((SELECT array_agg(rev) FROM memory.history((SELECT id FROM ids WHERE name = 'plan'))), ARRAY[2],
          'a reader cleared to internal sees the internal version only');
SELECT is((SELECT count(*) FROM memory.revisions WHERE memory_id = (SELECT id FROM ids WHERE name = 'plan')), 0::bigint,
          'and not the confidential revision');
SELECT is((SELECT count(*) FROM memory.recall('acme', 'pricing plan')), 1::bigint, 'it recalls the memory today');
SELECT is((SELECT count(*) FROM memory.recall('acme', 'pricing plan', as_of => '2026-02-01 00:00+00')), 0::bigint,
          'but not as of a time its version was confidential');
SET ROLE rv_reader;
SELECT is((SELECT array_agg(rev ORDER BY rev DESC) FROM memory.history((SELECT id FROM ids WHERE name = 'plan'))), ARRAY[2, 1],
          'a reader without a tier sees both');
SELECT is((SELECT classification::text FROM memory.recall('acme', 'pricing plan', as_of => '2026-02-01 00:00+00')), 'confidential',
          'and recalls it as of then with the tier it had');

-- ------------------------------------------------------------------------------------------------
-- A tier raised while the text stays (reclassify up): the kept versions rise with it, so the same
-- text is not readable below the new tier through revisions, history or as_of.
SET ROLE rv_writer;
INSERT INTO memory.observations (org_id, content) VALUES ('acme', 'Acquisition target shortlist for next year');
UPDATE memory.observations SET content = 'Acquisition target shortlist for next year, revised'
 WHERE content = 'Acquisition target shortlist for next year';
RESET ROLE;
INSERT INTO ids SELECT 'deal', id FROM memory.observations WHERE content LIKE 'Acquisition target shortlist%';
UPDATE memory.revisions SET valid_from = '2026-01-01 00:00+00', valid_to = '2026-03-01 00:00+00'
 WHERE memory_id = (SELECT id FROM ids WHERE name = 'deal');
UPDATE memory.observations SET created_at = '2026-01-01 00:00+00' WHERE id = (SELECT id FROM ids WHERE name = 'deal');
SET ROLE rv_admin;
SELECT memory.reclassify((SELECT id FROM ids WHERE name = 'deal'), 'restricted', 'M&A');
SET ROLE rv_internal;
SELECT is((SELECT count(*) FROM memory.revisions WHERE memory_id = (SELECT id FROM ids WHERE name = 'deal')), 0::bigint,
          'a tier raised without a new text: no version is left below it in memory.revisions');
SELECT is((SELECT count(*) FROM memory.history((SELECT id FROM ids WHERE name = 'deal'))), 0::bigint, 'nor in history');
SELECT is((SELECT count(*) FROM memory.recall('acme', 'acquisition shortlist', as_of => '2026-02-01 00:00+00')), 0::bigint,
          'nor as of a time before the raise');
SELECT is((SELECT count(*) FROM memory_internal._revision_head('acme', (SELECT id FROM ids WHERE name = 'deal'))
            WHERE rev IS NOT NULL), 0::bigint, '_revision_head tells nothing of a memory above the caller''s clearance');
RESET ROLE;
SELECT is((SELECT array_agg(classification::text ORDER BY rev) FROM memory.revisions WHERE memory_id = (SELECT id FROM ids WHERE name = 'deal')),
          ARRAY['restricted', 'restricted'], 'both kept versions are restricted now');

-- as_of reads content, words and tier of then; a filter or a vector would read today's row: refused.
SET ROLE rv_internal;
SELECT throws_ok($$ SELECT * FROM memory.recall('acme', 'acquisition', filters => '{"metadata": {"x": 1}}', as_of => '2026-02-01 00:00+00') $$,
                 '0A000', NULL, 'recall: as_of with a metadata filter is 0A000');
SELECT throws_ok($$ SELECT * FROM memory.search('acme', ARRAY['hr'], filter => '{"salary": {"$gt": 1}}', as_of => '2026-02-01 00:00+00') $$,
                 '0A000', NULL, 'search: as_of with a filter is 0A000');
SELECT throws_ok($$ SELECT * FROM memory.search('acme', ARRAY['hr'], query_embedding => '{1,0,0}', as_of => '2026-02-01 00:00+00') $$,
                 '0A000', NULL, 'search: as_of with a query_embedding is 0A000');
RESET ROLE;

-- ------------------------------------------------------------------------------------------------
-- Supersession.
SET ROLE rv_writer;
SELECT throws_ok($$ SELECT memory.supersede((SELECT id FROM ids WHERE name = 'pref'), 'x', '  ') $$, '22023', NULL, 'a blank reason: 22023');
SELECT throws_ok($$ SELECT memory.supersede((SELECT id FROM ids WHERE name = 'pref'), NULL, 'r') $$, '22023', NULL, 'NULL content: 22023');
SELECT throws_ok($$ SELECT memory.supersede(NULL, 'x', 'r') $$, '22023', NULL, 'NULL old_id: 22023');
SELECT throws_ok($$ SELECT memory.supersede(gen_random_uuid(), 'x', 'r') $$, 'P0002', NULL, 'an unknown memory: P0002');
SELECT throws_ok($$ SELECT memory.supersede((SELECT id FROM ids WHERE name = 'pref'), 'x', 'r', embedding => '{1,0,0}') $$, '22023',
                 'memory.supersede: embeddings are not enabled, so a memory has no embedding to store', 'an embedding before memory.enable_embeddings: 22023');
RESET ROLE;
SELECT is((SELECT count(*) FROM memory.observations WHERE org_id = 'acme'), 5::bigint, 'nothing written by the refused calls (the five memories above)');
SET ROLE rv_globex;
SELECT throws_ok($$ SELECT memory.supersede((SELECT id FROM ids WHERE name = 'pref'), 'hijack', 'r') $$, 'P0002', NULL,
                 'another org''s memory: P0002');
SET ROLE rv_writer;
INSERT INTO ids SELECT 'sms', memory.supersede((SELECT id FROM ids WHERE name = 'pref'), 'Dave prefers to be contacted by SMS', 'he changed his mind');
RESET ROLE;
SELECT is((SELECT superseded_by FROM memory.observations WHERE id = (SELECT id FROM ids WHERE name = 'pref')), (SELECT id FROM ids WHERE name = 'sms'),
          'the old memory is marked superseded_by the new one');
SELECT ok((SELECT superseded_at = now() FROM memory.observations WHERE id = (SELECT id FROM ids WHERE name = 'pref')), 'at the supersession');
SELECT is((SELECT array[user_id, weight::text, supersedes::text] FROM memory.observations WHERE id = (SELECT id FROM ids WHERE name = 'sms')),
          ARRAY['dave', '0.5', (SELECT id::text FROM ids WHERE name = 'pref')], 'the new memory carries user and weight and names the old one');
SELECT is((SELECT payload->>'supersedes' FROM public.audit_log_now() l WHERE l.event_type = 'memory.supersede'
            AND l.payload->>'id' = (SELECT id::text FROM ids WHERE name = 'sms')), (SELECT id::text FROM ids WHERE name = 'pref'),
          'audited memory.supersede with both ids');
SET ROLE rv_reader;
SELECT is((SELECT array_agg(content) FROM memory.recall('acme', 'how does Dave prefer to be contacted')), ARRAY['Dave prefers to be contacted by SMS'],
          'a superseded memory is never recalled: only the new one');
SELECT is((SELECT array_agg(content) FROM memory.recall('acme', 'how does Dave prefer to be contacted', as_of => '2026-02-01 00:00+00')),
          ARRAY['Dave prefers to be contacted by email'], 'as of before the supersession: the old memory as it was then');
SELECT is((SELECT count(*) FROM memory.history((SELECT id FROM ids WHERE name = 'pref'))), 3::bigint, 'the superseded memory keeps its history');
SELECT is((SELECT count(*) FROM memory.live_observations WHERE id = (SELECT id FROM ids WHERE name = 'pref')), 0::bigint,
          'a superseded memory is not live (memory.live_observations)');
SET ROLE rv_writer;
SELECT throws_ok($$ SELECT memory.supersede((SELECT id FROM ids WHERE name = 'pref'), 'again', 'r') $$, '22023', NULL, 'a superseded memory: 22023');
-- The same by INSERT with supersedes, and the tier floor.
INSERT INTO memory.observations (org_id, content, supersedes) VALUES ('acme', 'Pricing plan, final', (SELECT id FROM ids WHERE name = 'plan'));
RESET ROLE;
SELECT is((SELECT classification::text FROM memory.observations WHERE supersedes = (SELECT id FROM ids WHERE name = 'plan')), 'internal',
          'an INSERT with supersedes: never below the old tier');
SELECT ok((SELECT superseded_by IS NOT NULL FROM memory.observations WHERE id = (SELECT id FROM ids WHERE name = 'plan')), 'and marks the old one');
-- A held memory: MX006.
INSERT INTO memory.legal_holds (org_id, observation_id, reason) VALUES ('acme', (SELECT id FROM ids WHERE name = 'sms'), 'litigation');
SET ROLE rv_writer;
SELECT throws_ok($$ SELECT memory.supersede((SELECT id FROM ids WHERE name = 'sms'), 'Dave prefers letters', 'r') $$, 'MX006', NULL, 'a held memory: MX006');
RESET ROLE;
SELECT is((SELECT count(*) FROM memory.observations WHERE content = 'Dave prefers letters'), 0::bigint, 'and nothing written');
UPDATE memory.legal_holds SET released_at = now();

-- ------------------------------------------------------------------------------------------------
-- Forget removes every revision of the memory.
SET ROLE rv_writer;
SELECT is((memory.forget(ARRAY[(SELECT id FROM ids WHERE name = 'pref')], 'user asked')->'forgotten')::jsonb ? (SELECT id::text FROM ids WHERE name = 'pref'), true,
          'forget the corrected memory');
RESET ROLE;
SELECT is((SELECT count(*) FROM memory.revisions WHERE memory_id = (SELECT id FROM ids WHERE name = 'pref')), 0::bigint, 'its revisions are gone');
SELECT is((SELECT count(*) FROM memory.revisions WHERE memory_id = (SELECT id FROM ids WHERE name = 'plan')), 1::bigint, 'another memory''s stay');

SELECT * FROM finish();
ROLLBACK;
