-- SQL-level suite for the knowledge lifecycle (SPEC §5).
BEGIN;
SELECT plan(91);

-- ---------------------------------------------------------------------------------------------
-- The state machine.
SELECT set_eq(
  $$ SELECT f::text, t::text, memory.can_transition(f, t)
       FROM unnest(enum_range(NULL::memory.lifecycle_state)) f, unnest(enum_range(NULL::memory.lifecycle_state)) t
      WHERE memory.can_transition(f, t) $$,
  $$ VALUES ('pending', 'active', true), ('pending', 'retracted', true), ('pending', 'archived', true),
            ('active', 'superseded', true), ('active', 'retracted', true), ('active', 'archived', true),
            ('superseded', 'archived', true), ('retracted', 'archived', true) $$,
  'can_transition allows exactly the seed''s eight transitions');
SELECT is(memory.can_transition('archived', 'archived'), false, 'archived is terminal, and a state to itself is no transition');
SELECT is(memory.can_transition(NULL, 'active'), NULL, 'can_transition is strict');
SELECT throws_ok($$ SELECT memory.can_transition('pending', 'deleted') $$, '22P02', NULL, 'unknown state text is 22P02');

INSERT INTO memory.entities (id, org_id, entity_type, name, subject_id) VALUES
  ('e0000000-0000-0000-0000-000000000001', 'acme', 'problem', 'Type 2 diabetes with stage 3 CKD', NULL),
  ('e0000000-0000-0000-0000-000000000002', 'acme', 'intervention', 'Metformin', NULL),
  ('e0000000-0000-0000-0000-000000000003', 'globex', 'problem', 'Hypertension', NULL);

INSERT INTO memory.claims (id, org_id, entity_id, claim_text, source, confidence_score) VALUES
  ('c0000000-0000-0000-0000-000000000001', 'acme', 'e0000000-0000-0000-0000-000000000001', 'Evidence from NEJM 2024 study of 1,200 patients', 'NEJM', 0.9);
SELECT is(lifecycle_state, 'pending'::memory.lifecycle_state, 'a claim starts pending') FROM memory.claims WHERE id = 'c0000000-0000-0000-0000-000000000001';
SELECT throws_ok($$ INSERT INTO memory.claims (org_id, entity_id, claim_text, lifecycle_state)
                    VALUES ('acme', 'e0000000-0000-0000-0000-000000000001', 'x', 'active') $$,
                 'MX001', NULL, 'inserting a claim in another state is MX001');
SELECT throws_ok($$ INSERT INTO memory.claims (org_id, entity_id, claim_text, lifecycle_state)
                    VALUES ('acme', 'e0000000-0000-0000-0000-000000000001', 'x', 'live') $$,
                 '22P02', NULL, 'unknown state text on insert is 22P02');

UPDATE memory.claims SET lifecycle_state = 'active' WHERE id = 'c0000000-0000-0000-0000-000000000001';
SELECT is(lifecycle_state, 'active'::memory.lifecycle_state, 'pending -> active') FROM memory.claims WHERE id = 'c0000000-0000-0000-0000-000000000001';
SELECT throws_ok($$ UPDATE memory.claims SET lifecycle_state = 'pending' WHERE id = 'c0000000-0000-0000-0000-000000000001' $$,
                 'MX001', 'invalid lifecycle transition from active to pending', 'active -> pending is MX001, naming both states');
SELECT lives_ok($$ UPDATE memory.claims SET lifecycle_state = 'active', confidence_score = 0.9 WHERE id = 'c0000000-0000-0000-0000-000000000001' $$,
                'a same-state update is a no-op');
SELECT throws_ok($$ UPDATE memory.entities SET lifecycle_state = 'pending' WHERE id = 'e0000000-0000-0000-0000-000000000002' $$,
                 'MX001', NULL, 'entities follow the same table');

-- ---------------------------------------------------------------------------------------------
-- Bad input on claims: nothing is written.
SELECT throws_ok($$ INSERT INTO memory.claims (org_id, entity_id, claim_text, confidence_score) VALUES ('acme', 'e0000000-0000-0000-0000-000000000001', 'x', 1.5) $$,
                 '23514', NULL, 'confidence above 1 is refused');
SELECT throws_ok($$ INSERT INTO memory.claims (org_id, entity_id, claim_text, confidence_score) VALUES ('acme', 'e0000000-0000-0000-0000-000000000001', 'x', -0.01) $$,
                 '23514', NULL, 'confidence below 0 is refused');
SELECT throws_ok($$ INSERT INTO memory.claims (org_id, entity_id, claim_text, confidence_score) VALUES ('acme', 'e0000000-0000-0000-0000-000000000001', 'x', 'NaN') $$,
                 '23514', NULL, 'NaN confidence is refused');
SELECT throws_ok($$ INSERT INTO memory.claims (org_id, entity_id, claim_text) VALUES ('acme', 'e0000000-0000-0000-0000-0000000000ff', 'x') $$,
                 '23503', NULL, 'a claim about a missing entity is 23503');
SELECT throws_ok($$ INSERT INTO memory.claims (org_id, entity_id, claim_text) VALUES ('acme', 'e0000000-0000-0000-0000-000000000003', 'x') $$,
                 '23503', NULL, 'a claim about another org''s entity is 23503');
SELECT throws_ok($$ INSERT INTO memory.relationships (org_id, source_id, target_id, rel_type) VALUES ('acme', 'e0000000-0000-0000-0000-000000000002', 'e0000000-0000-0000-0000-0000000000ff', 'treats') $$,
                 '23503', NULL, 'a relationship to a missing entity is 23503');
SELECT throws_ok($$ INSERT INTO memory.claims (org_id, entity_id, claim_text, pii_fields) VALUES ('acme', 'e0000000-0000-0000-0000-000000000001', 'x', '{claim_text,ssn}') $$,
                 '22023', 'unknown pii_fields name "ssn"', 'an unknown pii_fields name is 22023');
SELECT throws_ok($$ INSERT INTO memory.entities (org_id, entity_type, name) VALUES ('acme', 'gizmo', 'x') $$,
                 '23514', NULL, 'an unknown entity type is refused');
SELECT is((SELECT count(*) FROM memory.claims), 1::bigint, 'no bad claim was written');

-- ---------------------------------------------------------------------------------------------
-- Supersession.
SELECT throws_ok($$ INSERT INTO memory.claims (id, org_id, entity_id, claim_text, supersedes)
                    VALUES ('c0000000-0000-0000-0000-000000000009', 'acme', 'e0000000-0000-0000-0000-000000000001', 'x', 'c0000000-0000-0000-0000-000000000009') $$,
                 'MX005', NULL, 'a claim superseding itself is MX005');
SELECT throws_ok($$ INSERT INTO memory.claims (org_id, entity_id, claim_text, supersedes)
                    VALUES ('acme', 'e0000000-0000-0000-0000-000000000001', 'x', 'c0000000-0000-0000-0000-0000000000ff') $$,
                 '23503', NULL, 'superseding a missing claim is 23503');
SELECT throws_ok($$ INSERT INTO memory.claims (org_id, entity_id, claim_text, source, supersedes)
                    VALUES ('acme', 'e0000000-0000-0000-0000-000000000001', 'x', 'open-web', 'c0000000-0000-0000-0000-000000000001') $$,
                 'MX005', NULL, 'a tier-3 source superseding a tier-1 claim is MX005');
SELECT is(lifecycle_state, 'active'::memory.lifecycle_state, 'after the refusals the old claim is still active')
  FROM memory.claims WHERE id = 'c0000000-0000-0000-0000-000000000001';

INSERT INTO memory.claims (id, org_id, entity_id, claim_text, source, confidence_score, supersedes) VALUES
  ('c0000000-0000-0000-0000-000000000002', 'acme', 'e0000000-0000-0000-0000-000000000001', 'Corrected: 1,250 patients', 'PubMed', 0.8,
   'c0000000-0000-0000-0000-000000000001');
SELECT results_eq($$ SELECT lifecycle_state::text, t_invalid IS NOT NULL, superseded_by FROM memory.claims WHERE id = 'c0000000-0000-0000-0000-000000000001' $$,
                  $$ VALUES ('superseded', true, ARRAY['c0000000-0000-0000-0000-000000000002'::uuid]) $$,
                  'the insert superseded the old claim: state, t_invalid, superseded_by');
SELECT is(lifecycle_state, 'pending'::memory.lifecycle_state, 'the new claim starts pending') FROM memory.claims WHERE id = 'c0000000-0000-0000-0000-000000000002';
SELECT throws_ok($$ INSERT INTO memory.claims (org_id, entity_id, claim_text, supersedes)
                    VALUES ('acme', 'e0000000-0000-0000-0000-000000000001', 'x', 'c0000000-0000-0000-0000-000000000001') $$,
                 'MX005', NULL, 'superseding a claim that is no longer active is MX005');
SELECT throws_ok($$ INSERT INTO memory.claims (org_id, entity_id, claim_text, supersedes)
                    VALUES ('globex', 'e0000000-0000-0000-0000-000000000003', 'x', 'c0000000-0000-0000-0000-000000000002') $$,
                 '23503', NULL, 'superseding another org''s claim is 23503');
SELECT results_eq($$ SELECT event_type FROM public.audit_log_now() WHERE chain_id = 'acme' AND event_type LIKE 'memory.claim.%'
                      AND (payload->>'claimId') IN ('c0000000-0000-0000-0000-000000000001', 'c0000000-0000-0000-0000-000000000002')
                    ORDER BY seq DESC LIMIT 2 $$,
                  $$ VALUES ('memory.claim.create'), ('memory.claim.supersede') $$,
                  'supersession audits memory.claim.supersede for the old claim and memory.claim.create for the new');
SELECT throws_ok($$ UPDATE memory.claims SET supersedes = NULL WHERE id = 'c0000000-0000-0000-0000-000000000002' $$,
                 '55000', NULL, 'supersedes is fixed once written (so no cycle can be made)');
SELECT throws_ok($$ UPDATE memory.claims SET claim_text = 'edited' WHERE id = 'c0000000-0000-0000-0000-000000000002' $$,
                 '55000', NULL, 'claim text is immutable');

-- A chain three deep.
UPDATE memory.claims SET lifecycle_state = 'active' WHERE id = 'c0000000-0000-0000-0000-000000000002';
INSERT INTO memory.claims (id, org_id, entity_id, claim_text, source, confidence_score, supersedes) VALUES
  ('c0000000-0000-0000-0000-000000000003', 'acme', 'e0000000-0000-0000-0000-000000000001', 'Corrected again', 'JAMA', 0.85,
   'c0000000-0000-0000-0000-000000000002');
SELECT results_eq($$ SELECT depth, claim_id, lifecycle_state::text FROM memory.claim_chain('c0000000-0000-0000-0000-000000000003') $$,
                  $$ VALUES (0, 'c0000000-0000-0000-0000-000000000003'::uuid, 'pending'), (1, 'c0000000-0000-0000-0000-000000000002'::uuid, 'superseded'),
                            (2, 'c0000000-0000-0000-0000-000000000001'::uuid, 'superseded') $$,
                  'claim_chain walks supersedes backwards with depth');
SELECT throws_ok($$ SELECT * FROM memory.claim_chain('c0000000-0000-0000-0000-0000000000ff') $$, 'P0002', NULL, 'claim_chain of a missing id is P0002');
SELECT throws_ok($$ SELECT * FROM memory.claim_chain(NULL) $$, '22023', NULL, 'claim_chain of NULL is 22023');

-- ---------------------------------------------------------------------------------------------
-- No hard delete.
SELECT throws_ok($$ DELETE FROM memory.claims WHERE id = 'c0000000-0000-0000-0000-000000000003' $$, 'MX006', NULL, 'DELETE of a claim is MX006');
SELECT throws_ok($$ DELETE FROM memory.entities WHERE id = 'e0000000-0000-0000-0000-000000000002' $$, 'MX006', NULL, 'DELETE of an entity is MX006');
SELECT throws_ok($$ TRUNCATE memory.claims CASCADE $$, 'MX006', NULL, 'TRUNCATE of claims is MX006');
SELECT is(memory_internal._knowledge_gate_open(), false, 'and is closed outside run_decay');

-- ---------------------------------------------------------------------------------------------
-- Conflicts.
INSERT INTO memory.claims (id, org_id, entity_id, claim_text, source, confidence_score, t_created) VALUES
  ('c0000000-0000-0000-0000-000000000013', 'acme', 'e0000000-0000-0000-0000-000000000002', 'c', 'PubMed', 0.9, now()),
  ('c0000000-0000-0000-0000-000000000011', 'acme', 'e0000000-0000-0000-0000-000000000002', 'a', 'PubMed', 0.9, now() - interval '1 hour'),
  ('c0000000-0000-0000-0000-000000000012', 'acme', 'e0000000-0000-0000-0000-000000000002', 'b', 'PubMed', 0.4, now() - interval '2 hours');
UPDATE memory.claims SET lifecycle_state = 'active' WHERE id IN ('c0000000-0000-0000-0000-000000000011', 'c0000000-0000-0000-0000-000000000012', 'c0000000-0000-0000-0000-000000000013');
SELECT is(memory.resolve_conflict('c0000000-0000-0000-0000-000000000011', 'c0000000-0000-0000-0000-000000000012'),
          'c0000000-0000-0000-0000-000000000012'::uuid, 'the lower confidence loses');
SELECT results_eq($$ SELECT lifecycle_state::text, superseded_by FROM memory.claims WHERE id = 'c0000000-0000-0000-0000-000000000012' $$,
                  $$ VALUES ('superseded', ARRAY['c0000000-0000-0000-0000-000000000011'::uuid]) $$, 'the loser is superseded by the winner');
SELECT is(memory.resolve_conflict('c0000000-0000-0000-0000-000000000013', 'c0000000-0000-0000-0000-000000000011'),
          'c0000000-0000-0000-0000-000000000013'::uuid, 'on a tie the newer loses');
SELECT throws_ok($$ SELECT memory.resolve_conflict('c0000000-0000-0000-0000-000000000011', 'c0000000-0000-0000-0000-000000000012') $$,
                 'MX005', NULL, 'a claim that is not active cannot lose again');
SELECT throws_ok($$ SELECT memory.resolve_conflict('c0000000-0000-0000-0000-000000000011', 'c0000000-0000-0000-0000-000000000003') $$,
                 '22023', NULL, 'claims about different entities do not conflict');
SELECT throws_ok($$ SELECT memory.resolve_conflict('c0000000-0000-0000-0000-000000000011', 'c0000000-0000-0000-0000-0000000000ff') $$,
                 '23503', NULL, 'a missing claim is 23503');
SELECT is((SELECT payload->>'toState' FROM public.audit_log_now() WHERE chain_id = 'acme' AND event_type = 'memory.claim.state_transition'
            AND payload->>'claimId' = 'c0000000-0000-0000-0000-000000000013' ORDER BY seq DESC LIMIT 1), 'superseded',
          'the resolution is audited as a state transition');

-- ---------------------------------------------------------------------------------------------
-- Tiers, staleness, active claims.
SELECT results_eq($$ SELECT memory.source_tier(s) FROM unnest(ARRAY['NEJM', 'jama', 'PubMed', 'ClinicalTrials.gov', 'patient-note', 'somewhere', NULL]) s $$,
                  $$ VALUES (1), (1), (2), (2), (3), (3), (3) $$, 'source_tier follows the seed map; unknown and NULL are tier 3');
SELECT is(memory.is_stale('2026-01-01', 30, '2026-01-31 23:59'), false, '30 days and change is not older than 30 whole days');
SELECT is(memory.is_stale('2026-01-01', 30, '2026-02-01'), true, '31 days is stale');
SELECT throws_ok($$ SELECT memory.is_stale(now(), -1) $$, '22023', NULL, 'negative freshness_days is 22023');
SELECT results_eq($$ SELECT id FROM memory.active_claims('e0000000-0000-0000-0000-000000000002') $$,
                  $$ VALUES ('c0000000-0000-0000-0000-000000000011'::uuid) $$, 'active_claims lists only what is active');

-- ---------------------------------------------------------------------------------------------
-- Freshness re-checks.
INSERT INTO memory.claims (id, org_id, entity_id, claim_text, source, confidence_score, t_created) VALUES
  ('c0000000-0000-0000-0000-000000000021', 'acme', 'e0000000-0000-0000-0000-000000000002', 'low', 'PubMed', 0.3, now()),
  ('c0000000-0000-0000-0000-000000000022', 'acme', 'e0000000-0000-0000-0000-000000000002', 'old', 'PubMed', 0.95, now() - interval '100 days'),
  ('c0000000-0000-0000-0000-000000000023', 'acme', 'e0000000-0000-0000-0000-000000000002', 'both', 'PubMed', 0.2, now() - interval '100 days');
UPDATE memory.claims SET lifecycle_state = 'active' WHERE id::text LIKE 'c0000000-0000-0000-0000-00000000002_';
SELECT results_eq($$ SELECT claim_id, reason FROM memory.freshness_recheck() ORDER BY claim_id $$,
                  $$ VALUES ('c0000000-0000-0000-0000-000000000021'::uuid, 'below_confidence'), ('c0000000-0000-0000-0000-000000000022'::uuid, 'aged'),
                            ('c0000000-0000-0000-0000-000000000023'::uuid, 'below_confidence_and_aged') $$,
                  'freshness_recheck: below threshold, aged, both');
SELECT is((SELECT count(*) FROM memory.freshness_recheck()), 0::bigint, 'a second tick inside the backoff enqueues nothing');
SELECT is((SELECT count(*) FROM memory.freshness_recheck(at => now() + interval '8 days', sample_limit => 2)), 2::bigint,
          'after the backoff they come back, at most sample_limit');
SELECT is((SELECT count(*) FROM memory.recheck_tasks), 5::bigint, 'each enqueued claim has a task');
SELECT is((SELECT count(*) FROM memory.claims WHERE freshness_recheck_requested_at IS NOT NULL), 3::bigint, 'and carries the backoff stamp');
SELECT throws_ok($$ SELECT * FROM memory.freshness_recheck(threshold => 1.5) $$, '22023', NULL, 'a threshold outside [0,1] is 22023');
SELECT throws_ok($$ SELECT * FROM memory.freshness_recheck(sample_limit => 0) $$, '22023', NULL, 'sample_limit 0 is 22023');
SELECT is((SELECT count(*) FROM memory.claim_recheck_tasks('w1', 3)), 3::bigint, 'a worker takes three tasks');
SELECT is((SELECT count(*) FROM memory.claim_recheck_tasks('w2', 10)), 2::bigint, 'another gets only the rest');
SELECT ok(memory.complete_recheck_task((SELECT min(task_id) FROM memory.recheck_tasks), 'still_supported'), 'a task is completed once');
SELECT ok(NOT memory.complete_recheck_task((SELECT min(task_id) FROM memory.recheck_tasks), 'still_supported'), 'and not twice');
SELECT is((SELECT count(*) FROM public.audit_log_now() WHERE event_type = 'research.freshness_confidence.enqueued'), 5::bigint,
          'each enqueue is audited');

-- ---------------------------------------------------------------------------------------------
-- Decay.
INSERT INTO memory.claims (id, org_id, entity_id, claim_text, subject_id, pii_fields, details, decay_at) VALUES
  ('c0000000-0000-0000-0000-000000000031', 'acme', 'e0000000-0000-0000-0000-000000000001', 'patient 42 reports x', 'pat-42',
   '{claim_text,subject_id,details.mrn}', '{"mrn": "M-42", "dose_mg": 500}', now() - interval '1 day');
INSERT INTO memory.claims (id, org_id, entity_id, claim_text, kind, decay_at) VALUES
  ('c0000000-0000-0000-0000-000000000032', 'acme', 'e0000000-0000-0000-0000-000000000001', 'maybe y', 'hypothesis', now() - interval '1 day'),
  ('c0000000-0000-0000-0000-000000000033', 'acme', 'e0000000-0000-0000-0000-000000000001', 'evidence z', 'evidence', now() - interval '1 day'),
  ('c0000000-0000-0000-0000-000000000034', 'acme', 'e0000000-0000-0000-0000-000000000001', 'not yet', 'hypothesis', now() + interval '1 day');
INSERT INTO memory.relationships (id, org_id, source_id, target_id, rel_type, subject_id, attributes, decay_at) VALUES
  ('a0000000-0000-0000-0000-000000000001', 'acme', 'e0000000-0000-0000-0000-000000000002', 'e0000000-0000-0000-0000-000000000001', 'treats', NULL, '{"evidence_class": "RCT"}', now() - interval '1 hour'),
  ('a0000000-0000-0000-0000-000000000002', 'acme', 'e0000000-0000-0000-0000-000000000002', 'e0000000-0000-0000-0000-000000000001', 'prescribed_for', 'pat-42', '{"dose": 1}', now() - interval '1 hour');
SELECT is(memory.run_decay() - 'at',
          '{"claimsAnonymized": 1, "claimsDeleted": 1, "claimsArchived": 1, "relationshipsDeleted": 1, "relationshipsAnonymized": 1}'::jsonb,
          'run_decay reports what it did');
SELECT results_eq($$ SELECT claim_text, subject_id, details, lifecycle_state::text, anonymized_at IS NOT NULL FROM memory.claims WHERE id = 'c0000000-0000-0000-0000-000000000031' $$,
                  $$ VALUES ('[redacted]', NULL::text, '{"mrn": "[redacted]", "dose_mg": 500}'::jsonb, 'archived', true) $$,
                  'a PHI claim is redacted field by field and archived');
SELECT is((SELECT count(*) FROM memory.claims WHERE id = 'c0000000-0000-0000-0000-000000000032'), 0::bigint, 'a decayed hypothesis is deleted');
SELECT is((SELECT lifecycle_state::text FROM memory.claims WHERE id = 'c0000000-0000-0000-0000-000000000033'), 'archived', 'other decayed claims are archived');
SELECT is((SELECT lifecycle_state::text FROM memory.claims WHERE id = 'c0000000-0000-0000-0000-000000000034'), 'pending', 'claims not yet due are untouched');
SELECT results_eq($$ SELECT rel_type, subject_id, attributes FROM memory.relationships ORDER BY rel_type $$,
                  $$ VALUES ('prescribed_for', NULL::text, '{}'::jsonb) $$,
                  'the non-PHI relationship is deleted, the PHI one anonymised');
SELECT results_eq($$ SELECT event_type FROM public.audit_log_now() WHERE event_type LIKE 'memory.job.decay.%' ORDER BY chain_id, seq $$,
                  $$ VALUES ('memory.job.decay.started'), ('memory.job.decay.completed'), ('memory.job.decay.anonymized'),
                            ('memory.job.decay.deleted'), ('memory.job.decay.deleted'), ('memory.job.decay.anonymized') $$,
                  'decay audits started, anonymized, deleted and completed');
SELECT is(memory_internal._knowledge_gate_open(), false, 'the gate is closed again after decay');

-- A row with an unknown field (written around the insert check) stops decay before any change.
-- (Disabling a memory_ext trigger of a governed table is refused; a superuser's replica mode is
-- the one way around triggers.)
SET session_replication_role = replica;
INSERT INTO memory.claims (id, org_id, entity_id, claim_text, pii_fields, decay_at, lifecycle_state) VALUES
  ('c0000000-0000-0000-0000-000000000041', 'acme', 'e0000000-0000-0000-0000-000000000001', 'odd', '{mrn}', now() - interval '1 day', 'pending');
SET session_replication_role = origin;
UPDATE memory.claims SET decay_at = now() - interval '1 hour' WHERE id = 'c0000000-0000-0000-0000-000000000034';
SELECT throws_ok($$ SELECT memory.run_decay() $$, '22023', NULL, 'decay over an unknown pii_fields name is 22023');
SELECT is((SELECT count(*) FROM memory.claims WHERE id = 'c0000000-0000-0000-0000-000000000034'), 1::bigint, 'and nothing was deleted');

-- ---------------------------------------------------------------------------------------------
-- Payloads carry no names and no claim text; the chain verifies.
SELECT is((SELECT count(*) FROM public.audit_log_now() WHERE payload::text LIKE '%diabetes%' OR payload::text LIKE '%Metformin%'
            OR payload::text LIKE '%patients%' OR payload::text LIKE '%pat-42%'), 0::bigint, 'no name, claim text or raw subject id in any payload');
SELECT results_eq($$ SELECT bool_and(ok) FROM memory.audit_verify() $$, $$ VALUES (true) $$, 'every chain verifies');

-- ---------------------------------------------------------------------------------------------
-- Roles.
SELECT is((SELECT count(*) FROM memory.setup_roles()), 3::bigint, 'setup_roles makes three roles');
CREATE ROLE kw_writer LOGIN IN ROLE memory_writer;
CREATE ROLE kw_admin LOGIN IN ROLE memory_admin;
CREATE ROLE kw_nobody LOGIN;
-- Tenants are bound to roles: the writer may act for two orgs (so it names one), the admin for acme.
SELECT memory.grant_org('kw_writer', 'acme');
SELECT memory.grant_org('kw_writer', 'beta');
SELECT memory.grant_org('kw_admin', 'acme');
INSERT INTO memory.claims (id, org_id, entity_id, claim_text, source, confidence_score) VALUES
  ('c0000000-0000-0000-0000-000000000051', 'acme', 'e0000000-0000-0000-0000-000000000002', 'role test', 'PubMed', 0.7);
SET ROLE kw_writer;
SELECT is((SELECT count(*) FROM memory.claims), 0::bigint, 'a writer that names no org sees no rows');
SET memory.org_id = 'acme';
SELECT is((SELECT count(DISTINCT org_id) FROM memory.entities), 1::bigint, 'with memory.org_id set it sees its own org only');
SELECT throws_ok($$ INSERT INTO memory.entities (org_id, entity_type, name) VALUES ('globex', 'concept', 'x') $$,
                 '42501', NULL, 'and cannot write into another org');
SELECT throws_ok($$ UPDATE memory.claims SET lifecycle_state = 'active' WHERE id = 'c0000000-0000-0000-0000-000000000051' $$,
                 '42501', NULL, 'a writer cannot change a claim''s state');
SELECT lives_ok($$ UPDATE memory.entities SET lifecycle_state = 'retracted' WHERE id = 'e0000000-0000-0000-0000-000000000002' $$,
                'a writer may retire an entity');
SELECT throws_ok($$ SELECT memory.run_decay() $$, '42501', NULL, 'a writer cannot run decay');
RESET ROLE;
GRANT UPDATE ON memory.claims TO kw_writer;
SET ROLE kw_writer;
SELECT throws_ok($$ UPDATE memory.claims SET lifecycle_state = 'active' WHERE id = 'c0000000-0000-0000-0000-000000000051' $$,
                 '42501', NULL, 'even with a table grant, a claim state change needs memory_admin');
RESET ROLE;
SET ROLE kw_admin;
SELECT lives_ok($$ UPDATE memory.claims SET lifecycle_state = 'active' WHERE id = 'c0000000-0000-0000-0000-000000000051' $$,
                'an admin changes a claim''s state');
RESET ROLE;
SET ROLE kw_writer;
SELECT lives_ok($$ INSERT INTO memory.claims (org_id, entity_id, claim_text, source, supersedes)
                   VALUES ('acme', 'e0000000-0000-0000-0000-000000000002', 'role test v2', 'PubMed', 'c0000000-0000-0000-0000-000000000051') $$,
                'a writer supersedes by inserting');
RESET ROLE;
RESET memory.org_id;
SET ROLE kw_nobody;
SELECT throws_ok($$ SELECT count(*) FROM memory.claims $$, '42501', NULL, 'an ordinary role cannot read claims');
RESET ROLE;

-- ---------------------------------------------------------------------------------------------
-- The state machine on an application table, and its bad input.
CREATE TABLE docs (id int PRIMARY KEY, status text, n int);
SELECT is(memory.govern('docs', '{"state": "status"}')->>'state', 'status', 'govern attaches the lifecycle trigger to a text column');
SELECT throws_ok($$ INSERT INTO docs VALUES (1, 'published', 0) $$, '22P02', NULL, 'unknown state text on a governed text column is 22P02');
INSERT INTO docs VALUES (2, 'pending', 0);
SELECT throws_ok($$ UPDATE docs SET status = 'superseded' WHERE id = 2 $$, 'MX001', 'invalid lifecycle transition from pending to superseded',
                 'a governed table gets the same transition table');
SELECT throws_ok($$ SELECT memory.govern('docs', '{"state": "n"}') $$, '22023', NULL, 'a state column of another type is 22023');
SELECT throws_ok($$ SELECT memory.govern('docs', '{"state": 7}') $$, '22023', NULL, 'a state option that is not a column name is 22023');
CREATE TABLE docs2 (id int, status text);
CREATE TRIGGER wrong AFTER UPDATE ON docs2 FOR EACH ROW EXECUTE FUNCTION memory.lifecycle_trigger('status');
INSERT INTO docs2 VALUES (1, 'pending');
SELECT throws_ok($$ UPDATE docs2 SET status = 'active' $$, '39P01', NULL, 'the trigger fired the wrong way is 39P01');

SELECT * FROM finish();
ROLLBACK;
