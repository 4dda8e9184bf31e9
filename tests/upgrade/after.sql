-- After ALTER EXTENSION memory_ext UPDATE from 0.1.0 (tests/upgrade/run.sh): 0.1.0's data under
-- 0.2.0's functions. The schema itself is compared with a fresh install by run.sh.
\set ON_ERROR_STOP on
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS pgtap;
SELECT plan(44);

SELECT is((SELECT extversion FROM pg_extension WHERE extname = 'memory_ext'), :'new', 'the extension is at the new release');

-- The chains 0.1.0 wrote verify under 0.2.0.
SELECT is((SELECT count(*) FROM memory.audit_verify() WHERE NOT ok), 0::bigint, 'every 0.1.0 chain verifies');
SELECT ok((SELECT count(*) FROM memory.audit_verify()) >= 3, 'the platform chain and both orgs'' chains are there');
SELECT is((SELECT sum(pending) FROM memory.audit_verify()), 0::numeric, 'nothing pending');

-- The log's month partitions are ordinary tables now (pg_dump writes them and their rows).
SELECT ok((SELECT count(*) FROM pg_inherits WHERE inhparent = 'memory.audit_log'::regclass) >= 4,
          'the month partitions 0.1.0 made are still attached');
SELECT is((SELECT count(*) FROM pg_inherits i JOIN pg_depend d ON d.classid = 'pg_class'::regclass AND d.objid = i.inhrelid AND d.deptype = 'e'
            WHERE i.inhparent = 'memory.audit_log'::regclass), 1::bigint, 'of the partitions only the default one is an extension member');
SELECT is((SELECT count(*) FROM pg_index x JOIN pg_inherits i ON i.inhrelid = x.indrelid
            WHERE i.inhparent = 'memory.audit_log'::regclass AND x.indisvalid), 
          2 * (SELECT count(*) FROM pg_inherits WHERE inhparent = 'memory.audit_log'::regclass),
          'every partition has its own two indexes');
SELECT ok((SELECT 'memory.legal_holds_id_seq'::regclass::oid = ANY (extconfig) FROM pg_extension WHERE extname = 'memory_ext'),
          'identity sequences are registered for pg_dump');

-- Writes after the update, deferred audit by default: a memory of the managed store.
INSERT INTO memory.observations (id, org_id, user_id, content, source_type)
VALUES ('a0000000-0000-0000-0000-0000000000a1', 'acme', 'u1', 'Customer card 4111 1111 1111 1111 after the update', 'tool_result');
SELECT is((SELECT classification::text FROM memory.observations WHERE id = 'a0000000-0000-0000-0000-0000000000a1'), 'restricted',
          'a new memory is classified');
SELECT ok((SELECT count(*) FROM memory.audit_pending) >= 1, 'its audit event is pending (deferred mode)');
SELECT ok(memory.audit_integrate() >= 1, 'and integrated into the 0.1.0 chain');
SELECT is((SELECT payload->>'id' FROM memory.audit_log WHERE chain_id = 'acme' ORDER BY seq DESC LIMIT 1),
          'a0000000-0000-0000-0000-0000000000a1', 'the event follows the old entries of the chain');

-- A governed application table of 0.1.0 keeps working (its old trigger arguments) and audits TRUNCATE.
INSERT INTO public.agent_notes (org_id, body, files) VALUES ('acme', 'Paid with card 4111 1111 1111 1111', NULL);
SELECT is((SELECT meta->>'classification' FROM public.agent_notes WHERE body = 'Paid with card 4111 1111 1111 1111'), 'restricted',
          'an application row written after the update is classified');
SELECT ok(EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = 'public.agent_notes'::regclass AND tgname = 'memory_audit_truncate'),
          'the application table gained the TRUNCATE audit trigger');
SELECT is((SELECT count(*) FROM memory.governed_tables WHERE table_name = 'public.agent_notes'::regclass), 1::bigint,
          'and is still listed as governed');

-- Feedback continues the old history.
SELECT is((SELECT count(*)::int FROM memory.record_outcome('sess-after', 'accepted',
            ARRAY(SELECT id FROM memory.observations WHERE org_id = 'acme' AND content LIKE 'Updated docs index%' ORDER BY created_at LIMIT 1))),
          1, 'record_outcome on a 0.1.0 memory');
SELECT ok((SELECT count(*) FROM memory.observation_weight_history WHERE session_id = 'sess-after') = 1, 'its history row');
SELECT ok((SELECT count(*) FROM memory.recall('acme', 'docs index', 3)) >= 1, 'recall finds 0.1.0 memories');

-- Tenants are bound to roles now (SPEC §8): a role bound to acme, through the reader/writer roles.
DROP ROLE IF EXISTS upgrade_agent;
CREATE ROLE upgrade_agent LOGIN IN ROLE memory_writer;
SELECT ok(memory.grant_org('upgrade_agent', 'acme'), 'grant_org binds a role after the update');
SET ROLE upgrade_agent;
SELECT is((SELECT count(DISTINCT org_id) FROM memory.observations), 1::bigint, 'the bound role sees one org');
SELECT is((SELECT min(org_id) FROM memory.observations), 'acme', 'its own');
SELECT lives_ok($$ INSERT INTO memory.observations (org_id, content) VALUES ('acme', 'written by a bound role') $$,
                'it writes its org');
SELECT throws_ok($$ INSERT INTO memory.observations (org_id, content) VALUES ('globex', 'not mine') $$, '42501', NULL,
                 'and not another');
RESET ROLE;

-- The agent API (0.3.0) on the upgraded memories, as that bound role: recall's positional call of
-- 0.2.0 and its new arguments, forget, retrieve over the upgraded claims.
SET ROLE upgrade_agent;
SELECT results_eq($$ SELECT id FROM memory.recall('acme', 'docs index', 3) $$,
                  $$ SELECT id FROM memory.recall(org_id => 'acme', query => 'docs index', k => 3, filters => '{}') $$,
                  'the positional call of 0.2.0 answers as the call with the new arguments');
SELECT ok((SELECT count(*) FROM memory.recall('acme', 'docs index', 3, filters => jsonb_build_object('created_before', now()::text))) >= 1,
          'recall with a filter finds the upgraded memories');
SELECT is((SELECT count(*) FROM memory.recall('acme', '', 5, filters => '{"user_id": "nobody-here"}')), 0::bigint,
          'a blank query with a filter that matches nothing lists nothing');
SELECT is(memory.forget(ARRAY(SELECT id FROM memory.observations WHERE org_id = 'acme' AND content = 'written by a bound role'), 'upgrade test')
            ->'forgotten'->>0 IS NOT NULL, true, 'forget removes a memory of the upgraded store');
SELECT is((SELECT count(*) FROM memory.observations WHERE content = 'written by a bound role'), 0::bigint, 'it is gone');
SELECT lives_ok($$ SELECT * FROM memory.retrieve('acme', 'docs') $$, 'retrieve over the upgraded claims');
RESET ROLE;
SELECT ok(EXISTS (SELECT 1 FROM memory.audit_pending WHERE event_type = 'memory.forget' UNION ALL
                  SELECT 1 FROM memory.audit_log WHERE event_type = 'memory.forget'), 'the forget is audited');

-- The knowledge graph: old claims in their states, transitions and chains.
SELECT is((SELECT lifecycle_state::text FROM memory.claims WHERE id = 'c0000000-0000-0000-0000-000000000001'), 'superseded',
          'a superseded 0.1.0 claim');
SELECT ok((SELECT count(*) FROM memory.claim_chain('c0000000-0000-0000-0000-000000000002')) = 2, 'its supersession chain');
UPDATE memory.claims SET lifecycle_state = 'active' WHERE id = 'c0000000-0000-0000-0000-000000000007';
SELECT is((SELECT lifecycle_state::text FROM memory.claims WHERE id = 'c0000000-0000-0000-0000-000000000007'), 'active',
          'a pending 0.1.0 claim becomes active');
SELECT throws_ok($$ UPDATE memory.claims SET lifecycle_state = 'pending' WHERE id = 'c0000000-0000-0000-0000-000000000007' $$,
                 'MX001', NULL, 'and the state machine still holds');

-- Blank memories (0.4.0): refused from now on; one written blank before (fill-0.3.0) stays, and
-- its other columns stay writable.
SELECT throws_ok($$ INSERT INTO memory.observations (org_id, content) VALUES ('acme', ' ') $$, '22023', NULL,
                 'a blank memory is refused after the update');
SELECT lives_ok($$ UPDATE memory.observations SET weight = 0.5, metadata = metadata || '{"kept": true}' WHERE btrim(content) = '' $$,
                'a memory written blank before the update keeps its other columns writable');

-- Holds, erasure, export, maintenance.
SELECT ok((memory.erase_subject('dave')->>'held')::int >= 1, 'erase_subject keeps what a 0.1.0 hold holds');
SELECT ok(EXISTS (SELECT 1 FROM memory.observations WHERE user_id = 'dave'), 'dave''s held memory is still there');
SELECT ok(jsonb_typeof(memory.export_subject('u1')->'manifest') = 'object', 'export_subject of a 0.1.0 subject');
SELECT ok(memory.run_maintenance() ? 'retention', 'run_maintenance');
SELECT ok(EXISTS (SELECT 1 FROM memory.maintenance_runs WHERE error IS NULL), 'recorded in maintenance_runs');
SELECT ok(memory.audit_rotate_key() > 1, 'audit_rotate_key continues the key ids');

-- Sealing the months 0.1.0 filled, then every chain again.
SELECT ok((SELECT count(*) FROM memory.audit_seal(date_trunc('month', now()))) >= 1, 'audit_seal of the finished months');
SELECT is((SELECT count(*) FROM memory.audit_verify() WHERE NOT ok), 0::bigint, 'every chain verifies after the writes, the rotation and the seal');
SELECT * FROM finish();
