-- SQL-level suite for knowledge retention disposition (seed §3; issue 18 item 4).
BEGIN;
SELECT plan(13);

INSERT INTO memory.entities (id, org_id, entity_type, name, subject_id, t_created) VALUES
  ('e4000000-0000-0000-0000-000000000001', 'acme', 'problem', 'p1 asthma', 'p1', now() - interval '40 days'),
  ('e4000000-0000-0000-0000-000000000002', 'acme', 'concept', 'Asthma (ontology)', NULL, now() - interval '400 days'),
  ('e4000000-0000-0000-0000-000000000003', 'bank', 'problem', 'p9 debt', 'p9', now() - interval '40 days');
INSERT INTO memory.claims (id, org_id, entity_id, kind, claim_text, subject_id, t_created) VALUES
  ('c4000000-0000-0000-0000-000000000001', 'acme', 'e4000000-0000-0000-0000-000000000001', 'evidence', 'p1 old', 'p1', now() - interval '40 days'),
  ('c4000000-0000-0000-0000-000000000002', 'acme', 'e4000000-0000-0000-0000-000000000001', 'evidence', 'p1 new', 'p1', now() - interval '10 days'),
  ('c4000000-0000-0000-0000-000000000003', 'acme', 'e4000000-0000-0000-0000-000000000002', 'correlator', 'a correlation', NULL, now() - interval '200 days'),
  ('c4000000-0000-0000-0000-000000000004', 'acme', 'e4000000-0000-0000-0000-000000000002', 'librarian', 'a citation', NULL, now() - interval '100 days'),
  ('c4000000-0000-0000-0000-000000000005', 'acme', 'e4000000-0000-0000-0000-000000000002', 'evidence', 'public evidence', NULL, now() - interval '400 days'),
  ('c4000000-0000-0000-0000-000000000006', 'acme', 'e4000000-0000-0000-0000-000000000002', 'evidence', 'p2 old, held', 'p2', now() - interval '40 days'),
  ('c4000000-0000-0000-0000-000000000007', 'bank', 'e4000000-0000-0000-0000-000000000003', 'evidence', 'p9 old, BFSI', 'p9', now() - interval '40 days');
UPDATE memory.claims SET lifecycle_state = 'active' WHERE id::text IN ('c4000000-0000-0000-0000-000000000001', 'c4000000-0000-0000-0000-000000000003');
INSERT INTO memory.legal_holds (org_id, user_id, reason) VALUES ('acme', 'p2', 'litigation');
INSERT INTO memory.org_settings (org_id, bfsi_mode) VALUES ('bank', true);

SELECT is(memory_internal._knowledge_retention(), '{"held": 1, "claims_disposed": 2, "entities_disposed": 1}'::jsonb,
          'two claims and one entity disposed, one held');
SELECT is((SELECT array_agg(id::text || ' ' || lifecycle_state ORDER BY id) FROM memory.claims WHERE id::text LIKE 'c4%'),
          '{"c4000000-0000-0000-0000-000000000001 archived","c4000000-0000-0000-0000-000000000002 pending","c4000000-0000-0000-0000-000000000003 archived","c4000000-0000-0000-0000-000000000004 pending","c4000000-0000-0000-0000-000000000005 pending","c4000000-0000-0000-0000-000000000006 pending","c4000000-0000-0000-0000-000000000007 pending"}',
          'past the subject''s retention (30 days restricted) or a finding past 180 days: archived; the rest stay');
SELECT is((SELECT lifecycle_state::text FROM memory.entities WHERE id = 'e4000000-0000-0000-0000-000000000001'), 'archived', 'the subject''s entity too');
SELECT is((SELECT lifecycle_state::text FROM memory.entities WHERE id = 'e4000000-0000-0000-0000-000000000002'), 'active', 'not an entity without a subject');
SELECT is((SELECT lifecycle_state::text FROM memory.entities WHERE id = 'e4000000-0000-0000-0000-000000000003'), 'active', 'BFSI mode keeps restricted data 2555 days');
SELECT is((SELECT count(*)::int FROM memory.claims WHERE id::text LIKE 'c4%'), 7, 'nothing is deleted');
SELECT ok((SELECT bool_and(t_invalid IS NOT NULL) FROM memory.claims WHERE lifecycle_state = 'archived' AND id::text LIKE 'c4%'), 'archived claims are stamped t_invalid');

SELECT ok(memory.audit_integrate() >= 0, 'integrated');
SELECT is((SELECT array_agg(coalesce(payload->>'claimId', payload->>'entityId') || ' ' || (payload->>'fromState') || ' ' || (payload->>'reason') ORDER BY seq)
             FROM memory.audit_log WHERE event_type = 'memory.govern.retention_disposed'),
          '{"c4000000-0000-0000-0000-000000000001 active subject_retention","c4000000-0000-0000-0000-000000000003 active finding_ttl","e4000000-0000-0000-0000-000000000001 active subject_retention"}',
          'one memory.govern.retention_disposed event per row, with the reason');
SELECT ok((SELECT bool_and(payload->>'subjectId' IS NULL OR payload->>'subjectId' LIKE 'h:%') FROM memory.audit_log
            WHERE event_type = 'memory.govern.retention_disposed'), 'subjects are pseudonymised');
SELECT is((SELECT count(*)::int FROM memory.audit_log WHERE event_type = 'memory.claim.state_transition' AND payload->>'toState' = 'archived'), 2,
          'and the transitions are on the chain as transitions');

SELECT is(memory_internal._knowledge_retention(), '{"held": 1, "claims_disposed": 0, "entities_disposed": 0}'::jsonb, 'a second run finds nothing new');
SELECT ok((memory.run_maintenance()) ? 'knowledge', 'run_maintenance runs it');

SELECT * FROM finish();
ROLLBACK;
