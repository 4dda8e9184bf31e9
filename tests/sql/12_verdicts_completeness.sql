-- SQL-level suite for the replicator's verdicts and screening completeness (seed §4.4, §4.2;
-- issue 18 items 2 and 3).
BEGIN;
SELECT plan(33);

INSERT INTO memory.entities (id, org_id, entity_type, name) VALUES
  ('e1000000-0000-0000-0000-000000000001', 'acme', 'problem', 'Type 2 diabetes'),
  ('e1000000-0000-0000-0000-000000000002', 'globex', 'problem', 'Hypertension');
INSERT INTO memory.claims (id, org_id, entity_id, claim_text, source, confidence_score) VALUES
  ('c1000000-0000-0000-0000-000000000001', 'acme', 'e1000000-0000-0000-0000-000000000001', 'HbA1c target 7%', 'NEJM', 0.8),
  ('c1000000-0000-0000-0000-000000000002', 'acme', 'e1000000-0000-0000-0000-000000000001', 'eGFR 45', 'PubMed', 0.7),
  ('c1000000-0000-0000-0000-000000000003', 'acme', 'e1000000-0000-0000-0000-000000000001', 'metformin dose', 'PubMed', 0.6),
  ('c1000000-0000-0000-0000-000000000004', 'acme', 'e1000000-0000-0000-0000-000000000001', 'old BP reading', 'open-web', 0.5);
UPDATE memory.claims SET lifecycle_state = 'active' WHERE id::text LIKE 'c1000000-%';

-- Verdicts.
SELECT is(memory.record_verdict('c1000000-0000-0000-0000-000000000001', 'still_supported') - 'task_id',
          '{"claim_id": "c1000000-0000-0000-0000-000000000001", "verdict": "still_supported", "action": "none", "lifecycle_state": "active"}'::jsonb,
          'still_supported changes nothing');
SELECT is((SELECT count(*)::int FROM memory.recheck_tasks), 0, 'and enqueues nothing');

SELECT is(memory.record_verdict('c1000000-0000-0000-0000-000000000002', 'eroded')->>'action', 'recheck_enqueued', 'eroded enqueues a re-check');
SELECT is((SELECT row(agent_role, reason, entity_context, metadata)::text FROM memory.recheck_tasks WHERE claim_id = 'c1000000-0000-0000-0000-000000000002'),
          row('critic', 'eroded', ARRAY['e1000000-0000-0000-0000-000000000001']::uuid[],
              '{"source": "replicator", "verdict": "eroded", "original_claim_id": "c1000000-0000-0000-0000-000000000002"}'::jsonb)::text,
          'a critic task with the seed''s metadata (source replicator, original claim id)');
SELECT is((SELECT lifecycle_state::text FROM memory.claims WHERE id = 'c1000000-0000-0000-0000-000000000002'), 'active', 'the claim stays active until the critic decides');
SELECT is(memory.record_verdict('c1000000-0000-0000-0000-000000000003', 'retracted_source')->>'action', 'recheck_enqueued', 'retracted_source enqueues too');
SELECT is((SELECT reason FROM memory.recheck_tasks WHERE claim_id = 'c1000000-0000-0000-0000-000000000003'), 'retracted_source', 'with its reason');
SELECT is((SELECT count(*)::int FROM memory.claim_recheck_tasks('critic-1', 10)), 2, 'workers take them from the same queue as freshness_recheck');

SELECT is(memory.record_verdict('c1000000-0000-0000-0000-000000000004', 'broken_provenance')->>'lifecycle_state', 'retracted', 'broken_provenance retracts the claim');
SELECT is((SELECT lifecycle_state::text FROM memory.claims WHERE id = 'c1000000-0000-0000-0000-000000000004'), 'retracted', 'it is retracted');
SELECT ok((SELECT t_invalid IS NOT NULL FROM memory.claims WHERE id = 'c1000000-0000-0000-0000-000000000004'), 'and stamped t_invalid');

SELECT ok(memory.audit_integrate() >= 0, 'pending entries integrated');
SELECT is((SELECT array_agg(event_type ORDER BY seq) FROM memory.audit_log
            WHERE chain_id = 'acme' AND (event_type LIKE 'memory.govern.%' OR event_type = 'research.task.enqueued'
                                          OR (event_type = 'memory.claim.state_transition' AND payload->>'toState' = 'retracted'))),
          '{memory.govern.still_supported,memory.govern.eroded,research.task.enqueued,memory.govern.retracted_source,research.task.enqueued,memory.claim.state_transition,memory.govern.broken_provenance}',
          'every verdict is on the chain, in order');
SELECT is((SELECT payload->>'taskId' FROM memory.audit_log WHERE chain_id = 'acme' AND event_type = 'memory.govern.eroded'),
          (SELECT task_id::text FROM memory.recheck_tasks WHERE claim_id = 'c1000000-0000-0000-0000-000000000002'), 'the event names the task');
SELECT ok((SELECT bool_and(payload::text NOT LIKE '%HbA1c%' AND payload::text NOT LIKE '%eGFR%') FROM memory.audit_log WHERE chain_id = 'acme'),
          'no claim text in any event');
SELECT is((SELECT ok FROM memory.audit_verify('acme')), true, 'the chain verifies');

SELECT throws_ok($$ SELECT memory.record_verdict('c1000000-0000-0000-0000-000000000001', 'wrong') $$, '22023', 'unknown verdict "wrong"', 'an unknown verdict is 22023');
SELECT throws_ok($$ SELECT memory.record_verdict('c1000000-0000-0000-0000-000000000001', NULL) $$, '22023', NULL, 'so is NULL');
SELECT throws_ok($$ SELECT memory.record_verdict('c1000000-0000-0000-0000-0000000000ff', 'eroded') $$, '23503', NULL, 'a missing claim is 23503');
SELECT throws_ok($$ SELECT memory.record_verdict('c1000000-0000-0000-0000-000000000004', 'eroded') $$, 'MX001', NULL, 'a retracted claim takes no verdict');

-- Completeness.
INSERT INTO memory.screen_profiles (profile, field, freshness_days, required) VALUES
  ('diabetes_screen', 'hba1c', 90, true), ('diabetes_screen', 'egfr', 365, true),
  ('diabetes_screen', 'bmi', 30, true), ('diabetes_screen', 'smoking', 365, false);
INSERT INTO memory.claims (id, org_id, entity_id, claim_text, field, t_created) VALUES
  ('c2000000-0000-0000-0000-000000000001', 'acme', 'e1000000-0000-0000-0000-000000000001', 'HbA1c 7.1', 'hba1c', now() - interval '10 days'),
  ('c2000000-0000-0000-0000-000000000002', 'acme', 'e1000000-0000-0000-0000-000000000001', 'eGFR 50', 'egfr', now() - interval '400 days'),
  ('c2000000-0000-0000-0000-000000000003', 'acme', 'e1000000-0000-0000-0000-000000000001', 'BMI 31', 'bmi', now() - interval '1 day'),
  ('c2000000-0000-0000-0000-000000000004', 'acme', 'e1000000-0000-0000-0000-000000000001', 'non-smoker', 'smoking', now() - interval '1 day');
UPDATE memory.claims SET lifecycle_state = 'active' WHERE id::text IN ('c2000000-0000-0000-0000-000000000001', 'c2000000-0000-0000-0000-000000000002', 'c2000000-0000-0000-0000-000000000004');
-- (the BMI claim stays pending: only active claims count)

SELECT is(memory.completeness('e1000000-0000-0000-0000-000000000001', 'diabetes_screen') - 'at' - 'entity_id',
          '{"profile": "diabetes_screen", "score": 0.5, "required": 3, "present": ["hba1c"], "stale": ["egfr"], "missing": ["bmi"], "optional": {"smoking": "present"}}'::jsonb,
          'present + 0.5 x stale over required: (1 + 0.5) / 3 = 0.5; a pending claim does not count');
SELECT is((memory.completeness('e1000000-0000-0000-0000-000000000001', 'diabetes_screen', now() - interval '20 days'))->'present',
          '[]'::jsonb, 'claims created after "at" do not count');
SELECT is((memory.completeness('e1000000-0000-0000-0000-000000000001', 'diabetes_screen', now() + interval '81 days'))->'stale',
          '["egfr", "hba1c"]'::jsonb, 'the freshness boundary: 10 + 81 = 91 days > 90 is stale');
SELECT is((memory.completeness('e1000000-0000-0000-0000-000000000001', 'diabetes_screen', now() + interval '79 days'))->'present',
          '["hba1c"]'::jsonb, '89 days is still present');
UPDATE memory.claims SET lifecycle_state = 'active' WHERE id = 'c2000000-0000-0000-0000-000000000003';
SELECT is((memory.completeness('e1000000-0000-0000-0000-000000000001', 'diabetes_screen'))->>'score', '0.8333', 'promoted: (2 + 0.5) / 3');
UPDATE memory.claims SET lifecycle_state = 'retracted' WHERE id = 'c2000000-0000-0000-0000-000000000001';
SELECT is((memory.completeness('e1000000-0000-0000-0000-000000000001', 'diabetes_screen'))->'missing', '["hba1c"]'::jsonb,
          'a retracted claim answers nothing');
-- An org's own profile of the same name replaces the platform's for its entities.
INSERT INTO memory.screen_profiles (org_id, profile, field, freshness_days) VALUES ('acme', 'diabetes_screen', 'bmi', 30);
SELECT is((memory.completeness('e1000000-0000-0000-0000-000000000001', 'diabetes_screen'))->>'required', '1', 'the org''s profile wins');
SELECT is((memory.completeness('e1000000-0000-0000-0000-000000000001', 'diabetes_screen'))->>'score', '1.0000', 'and is complete');

SELECT throws_ok($$ SELECT memory.completeness('e1000000-0000-0000-0000-000000000001', 'nope') $$, '22023', 'unknown screening profile "nope"', 'an unknown profile is 22023');
SELECT throws_ok($$ SELECT memory.completeness('e1000000-0000-0000-0000-0000000000ff', 'diabetes_screen') $$, '23503', NULL, 'a missing entity is 23503');
SELECT throws_ok($$ SELECT memory.completeness(NULL, 'diabetes_screen') $$, '22023', NULL, 'a NULL entity is 22023');
SELECT throws_ok($$ UPDATE memory.claims SET field = 'egfr' WHERE id = 'c2000000-0000-0000-0000-000000000003' $$, '55000', NULL,
                 'a claim''s field is fixed once written');
SELECT throws_ok($$ INSERT INTO memory.claims (org_id, entity_id, claim_text, field) VALUES ('acme', 'e1000000-0000-0000-0000-000000000001', 'x', 'Bad Field') $$,
                 '23514', NULL, 'a field name is lower-case snake_case');

SELECT * FROM finish();
ROLLBACK;
