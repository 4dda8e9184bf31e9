-- SQL-level suite for the audit trail (SPEC §2): chain shape, tamper matrix, seals, privileges.
BEGIN;
SELECT plan(92);

-- CREATE EXTENSION makes only the default partition; maintenance makes the months.
SELECT is(memory.audit_ensure_partitions(3), 4, 'the current month and three ahead are created');

CREATE FUNCTION pg_temp.verdict(c text) RETURNS text LANGUAGE sql AS $$
    SELECT CASE WHEN ok THEN 'ok' ELSE first_bad_seq || ' ' || split_part(reason, ':', 1) END FROM memory.audit_verify(c)
$$;
-- Tampering needs the append-only triggers out of the way: superuser, replica mode.
CREATE FUNCTION pg_temp.tamper(sql text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    SET LOCAL session_replication_role = replica;
    EXECUTE sql;
    SET LOCAL session_replication_role = origin;
END $$;

-- Chain shape ------------------------------------------------------------------------------------
SELECT is(memory.audit_append('test.event', jsonb_build_object('n', g, 'f', 0.1 * g, 'u', 'é✓'), 'acme', 'p1', 'w1', 'agent-1'),
          CASE current_setting('memory.audit_mode') WHEN 'immediate' THEN g::bigint END,
          'audit_append returns the seq in immediate mode, NULL in deferred mode (the seq comes at integration)')
  FROM generate_series(1, 10) g WHERE g = 1;
SELECT memory.audit_append('test.event', jsonb_build_object('n', g, 'f', 0.1 * g), 'acme', 'p1', 'w1', 'agent-1') FROM generate_series(2, 10) g;
SELECT memory.audit_append('platform.event', '{}');
SELECT is((SELECT seq FROM public.audit_log_now() WHERE event_type = 'platform.event'), 1::bigint, 'a NULL org appends to the platform chain ''''');
SELECT results_eq($$ SELECT count(*), min(seq), max(seq), count(DISTINCT seq) FROM public.audit_log_now() WHERE chain_id = 'acme' $$,
                  $$ VALUES (10::bigint, 1::bigint, 10::bigint, 10::bigint) $$, 'seq is gapless from 1 per chain');
SELECT is(prev_hash, '\x0000000000000000000000000000000000000000000000000000000000000000'::bytea, 'first prev_hash is 32 zero bytes')
  FROM public.audit_log_now() WHERE chain_id = 'acme' AND seq = 1;
SELECT is_empty($$ SELECT 1 FROM public.audit_log_now() a JOIN public.audit_log_now() b ON a.chain_id = b.chain_id AND b.seq = a.seq + 1
                   WHERE a.chain_id = 'acme' AND b.prev_hash <> a.entry_hash $$, 'each prev_hash is the previous entry_hash');
SELECT ok(actor_id ~ '^h:[0-9a-f]{64};role:postgres$', 'actor ids are pseudonymised, with the writing role') FROM public.audit_log_now() WHERE chain_id = 'acme' AND seq = 1;
SELECT results_eq($$ SELECT chain_id, seq, entry_hash FROM memory.audit_head('acme') $$,
                  $$ SELECT chain_id, seq, entry_hash FROM public.audit_log_now() WHERE chain_id = 'acme' AND seq = 10 $$, 'audit_head is the last entry');
SELECT is((SELECT merkle_root FROM memory.audit_head('acme')),
          memory_internal._merkle_root(ARRAY(SELECT entry_hash FROM public.audit_log_now() WHERE chain_id = 'acme' ORDER BY seq)),
          'audit_head carries the RFC 9162 root of all entry hashes');
SELECT is(pg_temp.verdict('acme'), 'ok', 'an untouched chain verifies');
SELECT is((SELECT count(*) FROM memory.audit_verify()), 2::bigint, 'audit_verify() covers every chain');
SELECT is((SELECT count(*) FROM memory.audit_events('w1', 'test.event', 3, 0)), 3::bigint, 'audit_events pages by workspace and type');
SELECT is((SELECT max(seq) FROM memory.audit_events('w1', NULL, 50, 0)), 10::bigint, 'audit_events newest first');

-- Tamper matrix ------------------------------------------------------------------------------------
SAVEPOINT t;
SELECT pg_temp.tamper($$ UPDATE memory.audit_log SET payload = payload || '{"n": 99}' WHERE chain_id = 'acme' AND seq = 5 $$);
SELECT is(pg_temp.verdict('acme'), '5 hash mismatch', 'edited payload is detected at its seq');
ROLLBACK TO t;
SELECT pg_temp.tamper($$ UPDATE memory.audit_log SET event_type = 'memory.forget' WHERE chain_id = 'acme' AND seq = 5 $$);
SELECT is(pg_temp.verdict('acme'), '5 hash mismatch', 'edited event_type');
ROLLBACK TO t;
SELECT pg_temp.tamper($$ UPDATE memory.audit_log SET actor_id = 'h:00' WHERE chain_id = 'acme' AND seq = 5 $$);
SELECT is(pg_temp.verdict('acme'), '5 hash mismatch', 'edited actor_id');
ROLLBACK TO t;
SELECT pg_temp.tamper($$ UPDATE memory.audit_log SET workspace_id = NULL WHERE chain_id = 'acme' AND seq = 5 $$);
SELECT is(pg_temp.verdict('acme'), '5 hash mismatch', 'edited workspace_id');
ROLLBACK TO t;
SELECT pg_temp.tamper($$ UPDATE memory.audit_log SET project_id = 'p2' WHERE chain_id = 'acme' AND seq = 5 $$);
SELECT is(pg_temp.verdict('acme'), '5 hash mismatch', 'edited project_id');
ROLLBACK TO t;
SELECT pg_temp.tamper($$ UPDATE memory.audit_log SET recorded_at = recorded_at + interval '1 microsecond' WHERE chain_id = 'acme' AND seq = 5 $$);
SELECT is(pg_temp.verdict('acme'), '5 hash mismatch', 'edited recorded_at (one microsecond)');
ROLLBACK TO t;
SELECT pg_temp.tamper($$ UPDATE memory.audit_log SET org_id = 'evil' WHERE chain_id = 'acme' AND seq = 5 $$);
SELECT is(pg_temp.verdict('acme'), '5 hash mismatch', 'edited org_id');
ROLLBACK TO t;
SELECT pg_temp.tamper($$ UPDATE memory.audit_log SET entry_hash = sha256(entry_hash) WHERE chain_id = 'acme' AND seq = 5 $$);
SELECT is(pg_temp.verdict('acme'), '5 hash mismatch', 'edited entry_hash');
ROLLBACK TO t;
SELECT pg_temp.tamper($$ UPDATE memory.audit_log SET prev_hash = sha256(prev_hash) WHERE chain_id = 'acme' AND seq = 5 $$);
SELECT is(pg_temp.verdict('acme'), '5 hash mismatch', 'edited prev_hash');
ROLLBACK TO t;
SELECT pg_temp.tamper($$ UPDATE memory.audit_log SET key_id = 999 WHERE chain_id = 'acme' AND seq = 5 $$);
SELECT is(pg_temp.verdict('acme'), '5 unknown key', 'an entry naming an unknown key');
ROLLBACK TO t;
SELECT pg_temp.tamper($$ DELETE FROM memory.audit_log WHERE chain_id = 'acme' AND seq = 5 $$);
SELECT is(pg_temp.verdict('acme'), '5 gap', 'deleting a middle row is a gap at its seq');
ROLLBACK TO t;
SELECT pg_temp.tamper($$ UPDATE memory.audit_log SET seq = CASE seq WHEN 4 THEN 5 ELSE 4 END WHERE chain_id = 'acme' AND seq IN (4, 5) $$);
SELECT is(pg_temp.verdict('acme'), '4 hash mismatch', 'swapping two rows is detected at the first');
ROLLBACK TO t;
SELECT pg_temp.tamper($$ INSERT INTO memory.audit_log SELECT chain_id, 6, event_type, recorded_at, actor_id, org_id, project_id, workspace_id,
                              '{"forged": true}', key_id, prev_hash, entry_hash FROM public.audit_log_now() WHERE chain_id = 'acme' AND seq = 6 $$);
SELECT is(pg_temp.verdict('acme'), '6 reorder', 'a forged row beside a real one (a duplicate seq) is detected at its seq');
ROLLBACK TO t;
SELECT pg_temp.tamper($$ INSERT INTO memory.audit_log SELECT chain_id, 11, event_type, recorded_at, actor_id, org_id, project_id, workspace_id,
                              payload, key_id, entry_hash, entry_hash FROM public.audit_log_now() WHERE chain_id = 'acme' AND seq = 10 $$);
SELECT is(pg_temp.verdict('acme'), '11 hash mismatch', 'a forged row appended past the head is detected');
ROLLBACK TO t;
SELECT pg_temp.tamper($$ DELETE FROM memory.audit_log WHERE chain_id = 'acme' AND seq >= 9 $$);
SELECT is(pg_temp.verdict('acme'), '9 tail missing', 'truncating the tail is detected against the head');
ROLLBACK TO t;
SELECT pg_temp.tamper($$ UPDATE memory.audit_heads SET entry_hash = sha256(entry_hash) WHERE chain_id = 'acme' $$);
SELECT is(pg_temp.verdict('acme'), '10 hash mismatch', 'a head that does not match the last entry');
ROLLBACK TO t;
-- Dropping the partition without a seal: everything is missing against the head.
SELECT pg_temp.tamper(format('ALTER TABLE memory.audit_log DETACH PARTITION memory.%I',
                             (SELECT c.relname FROM memory.audit_log a JOIN pg_class c ON c.oid = a.tableoid WHERE a.chain_id = 'acme' LIMIT 1)));
SELECT is(pg_temp.verdict('acme'), '1 tail missing', 'a partition dropped without a seal is detected');
ROLLBACK TO t;
RELEASE SAVEPOINT t;
SELECT is(pg_temp.verdict('acme'), 'ok', 'after the tamper cases were rolled back the chain verifies');

-- Append-only --------------------------------------------------------------------------------------
SELECT throws_ok($$ UPDATE memory.audit_log SET payload = '{}' $$, 'MX002', NULL, 'UPDATE of the log is MX002');
SELECT throws_ok($$ DELETE FROM memory.audit_log $$, 'MX002', NULL, 'DELETE from the log is MX002');
SELECT throws_ok($$ TRUNCATE memory.audit_log $$, 'MX002', NULL, 'TRUNCATE of the log is MX002');
SELECT c.relname AS part FROM memory.audit_log a JOIN pg_class c ON c.oid = a.tableoid LIMIT 1 \gset
SELECT throws_ok(format('TRUNCATE memory.%I', :'part'), 'MX002', NULL, 'TRUNCATE of a partition is MX002');
SELECT throws_ok($$ TRUNCATE memory.audit_log_default $$, 'MX002', NULL, 'TRUNCATE of the default partition is MX002');

-- Keys ----------------------------------------------------------------------------------------------
SELECT is(memory.audit_rotate_key(), 2, 'rotating starts key 2');
SELECT memory.audit_append('test.event', '{"after": "rotation"}', 'acme');
SELECT results_eq($$ SELECT key_id FROM public.audit_log_now() WHERE chain_id = 'acme' AND seq IN (10, 11) ORDER BY seq $$,
                  $$ VALUES (1), (2) $$, 'new entries carry the new key_id');
SELECT is(pg_temp.verdict('acme'), 'ok', 'a chain across two keys verifies');

-- Governed tables emit their events -------------------------------------------------------------------
CREATE TABLE public.facts (id bigserial PRIMARY KEY, tenant text, body text, tier memory.classification, user_id text);
SELECT lives_ok($$ SELECT memory.govern('public.facts', '{"content": "body", "target": "tier", "org": "tenant", "audit": true}') $$, 'govern with audit');
INSERT INTO public.facts (tenant, body, user_id) VALUES ('t1', 'a', 'alice'), ('t1', 'the password', 'bob'), ('t2', 'c', 'alice');
SELECT results_eq($$ SELECT chain_id, seq, event_type, payload->>'classification' FROM public.audit_log_now() WHERE chain_id IN ('t1', 't2') ORDER BY 1, 2 $$,
                  $$ VALUES ('t1', 1::bigint, 'memory.store', 'internal'), ('t1', 2::bigint, 'memory.store', 'confidential'), ('t2', 1::bigint, 'memory.store', 'internal') $$,
                  'one memory.store per inserted row, chained per tenant');
SELECT is(payload->>'content_sha256', encode(sha256('the password'), 'hex'), 'payloads carry content_sha256')
  FROM public.audit_log_now() WHERE chain_id = 't1' AND seq = 2;
SELECT is_empty($$ SELECT 1 FROM public.audit_log_now() WHERE payload::text LIKE '%the password%' OR payload::text LIKE '%alice%' $$,
                'no raw content or user id in payloads');
UPDATE public.facts SET tier = 'restricted' WHERE body = 'a';
DELETE FROM public.facts WHERE tenant = 't2';
SELECT results_eq($$ SELECT chain_id, event_type, payload->>'from', payload->>'to' FROM public.audit_log_now() WHERE chain_id IN ('t1', 't2') AND seq > 1 AND event_type <> 'memory.store' ORDER BY 1 $$,
                  $$ VALUES ('t1', 'memory.reclassify', 'internal', 'restricted'), ('t2', 'memory.delete', NULL, NULL) $$,
                  'updates of the tier emit memory.reclassify, deletes memory.delete');
SELECT is(pg_temp.verdict('t1'), 'ok', 'tenant chain t1 verifies');
-- The trigger lays its payloads out as jsonb itself: byte-for-byte what jsonb_in makes of their
-- text, for a NULL user, a NULL body and non-ASCII text too.
INSERT INTO public.facts (tenant, body, user_id) VALUES ('t3', 'naïve café', NULL), ('t3', NULL, 'zoë');
SELECT is((SELECT bool_and(payload = payload::text::jsonb AND pg_column_size(payload) = pg_column_size(payload::text::jsonb)
                           AND payload::text = payload::text::jsonb::text)
             FROM public.audit_log_now() WHERE chain_id IN ('t1', 't2', 't3')),
          true, 'trigger payloads are byte-for-byte the jsonb jsonb_in makes');
SELECT results_eq($$ SELECT payload->>'userId' IS NULL, payload->>'content_sha256' IS NULL FROM public.audit_log_now() WHERE chain_id = 't3' ORDER BY seq $$,
                  $$ VALUES (true, false), (false, true) $$, 'a NULL user or body is a null member');
-- Verification hashes string/null payloads straight from their jsonb bytes: edits still show.
SELECT is(pg_temp.verdict('t3'), 'ok', 'trigger-written chain t3 verifies');
SAVEPOINT flat;
SELECT pg_temp.tamper($$ UPDATE memory.audit_log SET payload = jsonb_set(payload, '{classification}', '"public"') WHERE chain_id = 't3' AND seq = 1 $$);
SELECT is(pg_temp.verdict('t3'), '1 hash mismatch', 'an edited member of a flat payload is detected');
ROLLBACK TO flat;
SELECT pg_temp.tamper($$ UPDATE memory.audit_log SET payload = payload || '{"userId": null}' WHERE chain_id = 't3' AND seq = 2 $$);
SELECT is(pg_temp.verdict('t3'), '2 hash mismatch', 'a member set to null is detected');
ROLLBACK TO flat;

-- Seal and prune --------------------------------------------------------------------------------------
-- Only finished months are sealed (sealing and pruning a past month, on a server whose clock is
-- moved into the next month, is tests/python/test_audit_seal.py).
SAVEPOINT s;
SELECT throws_ok($$ SELECT * FROM memory.audit_seal(now() + interval '10 years') $$, '22023', NULL,
                 'sealing a month that can still receive entries is 22023');
SELECT throws_ok($$ SELECT * FROM memory.audit_seal('infinity') $$, '22023', NULL, 'audit_seal(infinity) is 22023');
SELECT is((SELECT count(*) FROM memory.audit_seal(date_trunc('month', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC') WHERE chain_id = 'acme'),
          0::bigint, 'sealing up to the start of this month leaves this month''s entries alone');
SELECT is(memory.audit_prune('infinity'), 0, 'nothing unsealed is pruned');
SELECT memory.audit_append('test.event', '{"after": "seal"}', 'acme');
SELECT results_eq($$ SELECT ok, entries, pruned FROM memory.audit_verify('acme') $$, $$ VALUES (true, 12::bigint, 0::bigint) $$,
                  'the chain is whole after the refused seal');
ROLLBACK TO s;

-- Bad input --------------------------------------------------------------------------------------------
SELECT throws_ok($$ SELECT memory.audit_append(NULL, '{}') $$, '22023', NULL, 'NULL event_type is 22023');
SELECT throws_ok($$ SELECT memory.audit_append('x', '[1, 2]') $$, '22023', NULL, 'a non-object payload is 22023');
SELECT throws_ok($$ SELECT * FROM memory.audit_events('w1', NULL, -1) $$, '22023', NULL, 'negative lim is 22023');
SELECT throws_ok($$ SELECT memory.audit_seal(NULL) $$, '22023', NULL, 'audit_seal(NULL) is 22023');

-- Payloads built by the extension are written as jsonb without a text round trip; they must be
-- the very jsonb that jsonb_in makes (70 keys: offsets every 32 entries, non-ASCII, bools, nulls).
CREATE TEMP TABLE layout AS
SELECT jsonb_object_agg('key_' || g || repeat('x', g % 7),
                        CASE WHEN g % 5 = 0 THEN NULL WHEN g % 7 = 0 THEN to_jsonb(g % 2 = 0) ELSE to_jsonb('välue ' || g) END) AS o
  FROM generate_series(1, 70) g;
SELECT memory_internal._audit_append_many(jsonb_build_array(jsonb_build_object('event_type', 'x.layout', 'org_id', 'layout', 'payload', o))) FROM layout;
SELECT is((SELECT a.payload = o AND a.payload::text = o::text AND pg_column_size(a.payload) = pg_column_size(o)
             FROM layout, public.audit_log_now() a WHERE a.chain_id = 'layout'),
          true, 'a payload written without jsonb_in is byte-for-byte the jsonb jsonb_in makes');
SELECT is(pg_temp.verdict('layout'), 'ok', 'a 70-member payload with booleans verifies (decoded, not hashed in place)');

-- A statement's rows are read from its transition table directly (fewer than 10,000 rows) or
-- through SPI in chunks (more): both give the same events, for every column type the trigger reads.
CREATE TABLE public.odd_types (id char(6), org varchar(20), proj uuid, ws name, usr int8, body varchar(200), tier jsonb);
SELECT memory.govern('public.odd_types', '{"content": "body", "id": "id", "org": "org", "project": "proj", "workspace": "ws", "user": "usr", "target": "tier", "audit": true}');
INSERT INTO public.odd_types VALUES ('ab', 'oddorg', '0b5e2c1a-9a43-4f56-8d7e-3c2b1a0f9e8d', 'w s', 9000000000, 'hello  ', '{"classification": "internal"}'),
                                    ('cd  ', 'oddorg', NULL, NULL, NULL, 'the password', NULL);
INSERT INTO public.odd_types
SELECT CASE g WHEN 1 THEN 'ab' WHEN 2 THEN 'cd  ' ELSE g::text END, 'oddorg',
       CASE g WHEN 1 THEN '0b5e2c1a-9a43-4f56-8d7e-3c2b1a0f9e8d'::uuid END, CASE g WHEN 1 THEN 'w s' END, CASE g WHEN 1 THEN 9000000000 END,
       CASE g WHEN 1 THEN 'hello  ' WHEN 2 THEN 'the password' ELSE 'x' END, CASE g WHEN 1 THEN '{"classification": "internal"}'::jsonb END
  FROM generate_series(1, 10000) g;
DELETE FROM public.odd_types WHERE ctid = (SELECT min(ctid) FROM public.odd_types WHERE id = 'cd');
DELETE FROM public.odd_types;
SELECT results_eq($$ SELECT event_type, payload->>'id', count(*), count(DISTINCT (org_id, project_id, workspace_id, payload)) FROM public.audit_log_now()
                     WHERE chain_id = 'oddorg' AND payload->>'id' IN ('ab', 'cd') GROUP BY 1, 2 ORDER BY 1, 2 $$,
                  $$ VALUES ('memory.delete', 'ab', 2::bigint, 1::bigint), ('memory.delete', 'cd', 2::bigint, 1::bigint),
                            ('memory.store', 'ab', 2::bigint, 1::bigint), ('memory.store', 'cd', 2::bigint, 1::bigint) $$,
                  'a small and a large statement record the same events (char, varchar, uuid, name, int8, jsonb tier, NULLs)');
SELECT results_eq($$ SELECT project_id, workspace_id, payload->>'classification', payload->>'content_sha256', payload->>'userId' IS NOT NULL
                     FROM public.audit_log_now() WHERE chain_id = 'oddorg' AND event_type = 'memory.store' AND payload->>'id' = 'ab' LIMIT 1 $$,
                  $$ VALUES ('0b5e2c1a-9a43-4f56-8d7e-3c2b1a0f9e8d', 'w s', 'internal', encode(sha256('hello  '), 'hex'), true) $$,
                  'the columns are read as their text casts (char without trailing spaces, varchar as stored)');
SELECT is(pg_temp.verdict('oddorg'), 'ok', 'the chain of both paths verifies');

-- The direct read of a transition table spilled to disk (work_mem 64kB), and of toasted values.
CREATE TABLE public.spill (id int PRIMARY KEY, tenant text, body text);
SELECT memory.govern('public.spill', '{"content": "body", "org": "tenant", "classify": false, "audit": true}');
SET LOCAL work_mem = '64kB';
INSERT INTO public.spill SELECT g, 'spill', repeat(md5(g::text), 8) FROM generate_series(1, 3000) g;
INSERT INTO public.spill SELECT 10000 + g, 'spill', string_agg(md5(g::text || ':' || k::text), '') FROM generate_series(1, 3) g, generate_series(1, 4000) k GROUP BY g;
DELETE FROM public.spill WHERE id > 10000;
RESET work_mem;
SELECT results_eq($$ SELECT l.event_type, count(*) FROM public.audit_log_now() l JOIN public.spill s ON l.payload->>'id' = s.id::text
                     WHERE l.chain_id = 'spill' AND l.payload->>'content_sha256' = encode(sha256(convert_to(s.body, 'UTF8')), 'hex') GROUP BY 1 $$,
                  $$ VALUES ('memory.store', 3000::bigint) $$, 'a transition table spilled to disk is read whole, each row''s content hashed');
SELECT is((SELECT count(*) FROM public.audit_log_now() WHERE chain_id = 'spill' AND event_type = 'memory.delete' AND (payload->>'id')::int > 10000),
          3::bigint, 'rows with toasted content are recorded when deleted');
SELECT is(pg_temp.verdict('spill'), 'ok', 'the spilled statement''s chain verifies');

-- An UPDATE of two orgs' rows that share an id records one reclassify per row, in its own org; a
-- row moved to another org is paired with its old row when that is the only one left for its id,
-- and recorded without a previous tier when it cannot be told apart (never dropped).
CREATE TABLE public.shared_ids (tenant text, id int, body text, tier memory.classification, PRIMARY KEY (tenant, id));
SELECT memory.govern('public.shared_ids', '{"content": "body", "org": "tenant", "id": "id", "target": "tier", "audit": true}');
INSERT INTO public.shared_ids VALUES ('sh_a', 1, 'x', NULL), ('sh_b', 1, 'y', NULL), ('sh_a', 2, 'z', NULL), ('sh_a', 3, 'u', NULL), ('sh_b', 3, 'v', NULL);
UPDATE public.shared_ids SET tier = 'confidential' WHERE id IN (1, 2);
UPDATE public.shared_ids SET tenant = 'sh_c', tier = 'restricted' WHERE id = 2;
UPDATE public.shared_ids SET tier = 'restricted', tenant = CASE tenant WHEN 'sh_a' THEN 'sh_d' ELSE tenant END WHERE id = 1;
UPDATE public.shared_ids SET tier = 'restricted', tenant = CASE tenant WHEN 'sh_a' THEN 'sh_e' ELSE 'sh_f' END WHERE id = 3;
SELECT results_eq($$ SELECT chain_id, payload->>'id', payload->>'from', payload->>'to' FROM public.audit_log_now()
                     WHERE chain_id LIKE 'sh\_%' AND event_type = 'memory.reclassify' ORDER BY 1, 2, 4 $$,
                  $$ VALUES ('sh_a', '1', 'internal', 'confidential'), ('sh_a', '2', 'internal', 'confidential'),
                            ('sh_b', '1', 'internal', 'confidential'), ('sh_b', '1', 'confidential', 'restricted'),
                            ('sh_c', '2', 'confidential', 'restricted'), ('sh_d', '1', 'confidential', 'restricted'),
                            ('sh_e', '3', NULL, 'restricted'), ('sh_f', '3', NULL, 'restricted') $$,
                  'rows sharing an id are paired within their org; a moved row keeps its pairing or is recorded without its old tier');

-- A tenant admin's trail (issue 34 item 11): audit_events by org, actor in clear, time, workspace and
-- type, without integrating (pending entries are listed with a NULL seq); the backlog view.
SELECT memory.audit_append('app.read', '{"n": 1}', 'rd_a', 'p1', 'wr1');
SET LOCAL memory.actor_id = 'agent-7';
SELECT memory.audit_append('app.read', '{"n": 2}', 'rd_a', 'p1', 'wr2');
SELECT memory.audit_append('app.other', '{"n": 3}', 'rd_b', 'p1', 'wr1');
RESET memory.actor_id;
SELECT results_eq($$ SELECT chain_id, payload->>'n' FROM memory.audit_events(actor => 'agent-7') ORDER BY 2 $$,
                  $$ VALUES ('rd_a', '2'), ('rd_b', '3') $$, 'actor finds the events written under SET memory.actor_id, given in clear');
SELECT is((SELECT count(*) FROM memory.audit_events('w1', actor => 'agent-1')), 10::bigint,
          'and those audit_append named an actor for');
SELECT is((SELECT count(*) FROM memory.audit_events(actor => 'agent-9')), 0::bigint, 'an actor that wrote nothing finds nothing');
SELECT results_eq($$ SELECT payload->>'n' FROM memory.audit_events(org_id => 'rd_a') ORDER BY 1 $$,
                  $$ VALUES ('1'), ('2') $$, 'org_id lists that org''s chain');
SELECT results_eq($$ SELECT chain_id, payload->>'n' FROM memory.audit_events('wr1') ORDER BY 2 $$,
                  $$ VALUES ('rd_a', '1'), ('rd_b', '3') $$, 'workspace_id across chains');
SELECT results_eq($$ SELECT payload->>'n' FROM memory.audit_events(event_type => 'app.other') $$,
                  $$ VALUES ('3') $$, 'event_type alone');
SELECT is((SELECT count(*) FROM memory.audit_events(org_id => 'rd_a', since => now() - interval '1 minute')), 2::bigint, 'since includes what came after it');
SELECT is((SELECT count(*) FROM memory.audit_events(org_id => 'rd_a', since => now() + interval '1 day')), 0::bigint, 'and nothing before it');
SELECT is((SELECT count(*) FILTER (WHERE seq IS NULL AND entry_hash IS NULL) FROM memory.audit_events(org_id => 'rd_a')),
          CASE current_setting('memory.audit_mode') WHEN 'deferred' THEN 2 ELSE 0 END::bigint,
          'entries not yet chained are listed, with a NULL seq and entry_hash');
SELECT is((SELECT count(*) FROM memory.audit_pending WHERE chain_id IN ('rd_a', 'rd_b')),
          CASE current_setting('memory.audit_mode') WHEN 'deferred' THEN 3 ELSE 0 END::bigint,
          'audit_events integrates nothing');
SELECT results_eq($$ SELECT database = current_database(), chains, pending, parked, oldest_pending_at IS NOT NULL, coalesce(oldest_pending_age >= interval '0', false),
                            integrators_running, last_integration_at IS NOT NULL FROM memory.audit_backlog $$,
                  $$ SELECT true, 'all', CASE current_setting('memory.audit_mode') WHEN 'deferred' THEN 3 ELSE 0 END::bigint, 0::bigint,
                            current_setting('memory.audit_mode') = 'deferred', current_setting('memory.audit_mode') = 'deferred', 0, true $$,
                  'audit_backlog: the pending entries, none parked, the oldest one''s age, no integrator in this cluster');
SAVEPOINT parked;
SELECT pg_temp.tamper($$ INSERT INTO memory.audit_pending SELECT * FROM memory.audit_pending WHERE chain_id = 'rd_b' $$);
SELECT results_eq($$ SELECT pending, parked FROM memory.audit_backlog $$,
                  $$ SELECT CASE current_setting('memory.audit_mode') WHEN 'deferred' THEN 2 ELSE 0 END::bigint,
                            CASE current_setting('memory.audit_mode') WHEN 'deferred' THEN 2 ELSE 0 END::bigint $$,
                  'a copied pending entry is parked with its original');
ROLLBACK TO parked;
SELECT memory.audit_integrate();
SELECT results_eq($$ SELECT pending, parked, oldest_pending_at FROM memory.audit_backlog $$,
                  $$ VALUES (0::bigint, 0::bigint, NULL::timestamptz) $$, 'nothing pending once integrated');
SELECT is((SELECT count(*) FILTER (WHERE seq IS NOT NULL) FROM memory.audit_events(org_id => 'rd_a')), 2::bigint,
          'and audit_events lists them chained');


-- Read events survive the reader's rollback (docs/audit.md#read-events) ---------------------------
SELECT memory.setup_roles();
CREATE ROLE ar_reader IN ROLE memory_reader;
SELECT memory.grant_org('ar_reader', 'rv');
INSERT INTO memory.observations (org_id, content) VALUES ('rv', 'the roadmap ssn 123-45-6789');
INSERT INTO memory.entities (id, org_id, entity_type, name) VALUES ('00000000-0000-0000-0000-0000000000e1', 'rv', 'intervention', 'aspirin');
INSERT INTO memory.claims (org_id, entity_id, claim_text, confidence_score)
VALUES ('rv', '00000000-0000-0000-0000-0000000000e1', 'aspirin lowers stroke risk', 0.9);
UPDATE memory.claims SET lifecycle_state = 'active' WHERE org_id = 'rv';
SELECT memory.audit_integrate();
SELECT ok(NOT has_function_privilege('memory_reader', 'memory_internal._audit_read(text, text, text, text)', 'EXECUTE')
          AND NOT has_function_privilege('public', 'memory_internal._audit_read(text, text, text, text)', 'EXECUTE'),
          'the door of read events is memory_ext''s own');
SELECT throws_ok($$ SELECT memory_internal._audit_read('memory.store', '{}', 'rv', NULL) $$, '22023', NULL,
                 'it takes read events only');
SET ROLE ar_reader;
SAVEPOINT r1;
SELECT is((SELECT count(*) FROM memory.recall('rv', 'roadmap ssn')), 1::bigint, 'a reader recalls the restricted row in a savepoint');
ROLLBACK TO r1;
SAVEPOINT r2;
SELECT is((SELECT count(*) FROM memory.retrieve('rv', 'aspirin stroke')), 1::bigint, 'and retrieves a claim in another, both rolled back');
ROLLBACK TO r2;
SAVEPOINT r3;
SELECT is((SELECT count(*) FROM memory.recall('rv', 'roadmap ssn')), 1::bigint, 'a third read, whose savepoint is released');
RELEASE r3;
RESET ROLE;
SELECT results_eq($$ SELECT event_type, count(*) FROM public.audit_log_now()
                      WHERE chain_id = 'rv' AND event_type IN ('memory.recall', 'memory.retrieval.hybrid') GROUP BY 1 ORDER BY 1 $$,
                  $$ VALUES ('memory.recall', 2::bigint), ('memory.retrieval.hybrid', 1::bigint) $$,
                  'each read is in the chain once: the rolled-back ones handed over, the released one from its transaction');
SELECT is((SELECT count(DISTINCT payload) FROM memory.audit_log WHERE chain_id = 'rv' AND event_type = 'memory.recall'), 1::bigint,
          'the rolled-back recall''s event has the fields of the kept one');
SELECT is((SELECT actor_id FROM memory.audit_log WHERE chain_id = 'rv' AND event_type = 'memory.retrieval.hybrid'), 'role:ar_reader',
          'under the reader as actor');
SELECT is(pg_temp.verdict('rv'), 'ok', 'the chain verifies');
SELECT is((SELECT count(*) FROM public.audit_log_now() WHERE chain_id = 'rv' AND event_type = 'memory.recall'), 2::bigint,
          'a second integration appends nothing more');

SELECT * FROM finish();
ROLLBACK;
