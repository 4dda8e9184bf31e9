-- Once, before the first fill phase (release 0.1.0's API): rules, policies, settings, a governed
-- application table, holds, the knowledge graph with claims in every state, roles.
\set ON_ERROR_STOP on
SET client_min_messages = warning;
CREATE EXTENSION memory_ext VERSION :'version';
SELECT * FROM memory.setup_roles();
INSERT INTO memory.classification_rules (org_id, tier, target, pattern, description)
VALUES ('acme', 'restricted', 'content', '(?i)project falcon', 'codename under NDA'),
       ('globex', 'confidential', 'path', '^finance/', 'finance tree');
INSERT INTO memory.org_settings (org_id, alpha_success, alpha_failure, bfsi_mode) VALUES ('acme', 0.2, 0.3, true);
INSERT INTO memory.retention_policies (org_id, tier, retention_days, soft_delete_grace_days)
VALUES ('acme', 'internal', 400, 5), ('globex', 'restricted', 30, 1);
UPDATE memory.memory_type_policies SET ttl = interval '2 days' WHERE memory_type = 'short_term';
CREATE TABLE public.agent_notes (id bigserial PRIMARY KEY, org_id text NOT NULL, body text NOT NULL, files text[], meta jsonb);
INSERT INTO public.agent_notes (org_id, body) VALUES ('acme', 'written before governance');
SELECT memory.govern('public.agent_notes', '{"content": "body", "source_files": "files", "target": "meta", "backfill": true}') IS NOT NULL AS governed;
INSERT INTO memory.observations (id, org_id, user_id, content, memory_type) VALUES
  ('00000000-0000-0000-0000-0000000000d1', 'acme', 'dave', 'dave ssn on file', 'long_term');
INSERT INTO memory.legal_holds (org_id, user_id, reason) VALUES ('acme', 'dave', 'litigation hold');
INSERT INTO memory.legal_holds (org_id, observation_id, reason, released_at)
VALUES ('acme', '00000000-0000-0000-0000-0000000000d1', 'released hold', now());

INSERT INTO memory.entities (id, org_id, entity_type, name) VALUES
  ('e0000000-0000-0000-0000-000000000001', 'acme', 'problem', 'Type 2 diabetes with stage 3 CKD'),
  ('e0000000-0000-0000-0000-000000000002', 'globex', 'intervention', 'metformin');
INSERT INTO memory.claims (id, org_id, entity_id, claim_text, supports, source, confidence_score) VALUES
  ('c0000000-0000-0000-0000-000000000001', 'acme', 'e0000000-0000-0000-0000-000000000001', 'Evidence from NEJM 2024 study', ARRAY['src-1'], 'NEJM', 0.9);
UPDATE memory.claims SET lifecycle_state = 'active' WHERE id = 'c0000000-0000-0000-0000-000000000001';
INSERT INTO memory.claims (id, org_id, entity_id, claim_text, supports, source, confidence_score, supersedes) VALUES
  ('c0000000-0000-0000-0000-000000000002', 'acme', 'e0000000-0000-0000-0000-000000000001', 'Corrected: 1,250 patients', ARRAY['src-1'], 'PubMed', 0.85, 'c0000000-0000-0000-0000-000000000001');
UPDATE memory.claims SET lifecycle_state = 'active' WHERE id = 'c0000000-0000-0000-0000-000000000002';
INSERT INTO memory.claims (id, org_id, entity_id, claim_text, source, confidence_score) VALUES
  ('c0000000-0000-0000-0000-000000000003', 'acme', 'e0000000-0000-0000-0000-000000000001', 'A weaker competing claim', 'PubMed', 0.4);
UPDATE memory.claims SET lifecycle_state = 'active' WHERE id = 'c0000000-0000-0000-0000-000000000003';
SELECT memory.resolve_conflict('c0000000-0000-0000-0000-000000000002', 'c0000000-0000-0000-0000-000000000003') IS NOT NULL AS resolved;
INSERT INTO memory.claims (id, org_id, entity_id, claim_text, source, confidence_score, t_created) VALUES
  ('c0000000-0000-0000-0000-000000000004', 'acme', 'e0000000-0000-0000-0000-000000000001', 'An old finding', 'JAMA', 0.95, now() - interval '120 days');
UPDATE memory.claims SET lifecycle_state = 'active' WHERE id = 'c0000000-0000-0000-0000-000000000004';
SELECT count(*) FROM memory.freshness_recheck();
SELECT count(*) FROM memory.claim_recheck_tasks('critic-1', 10);
INSERT INTO memory.claims (id, org_id, entity_id, claim_text, subject_id, pii_fields, details, decay_at) VALUES
  ('c0000000-0000-0000-0000-000000000005', 'acme', 'e0000000-0000-0000-0000-000000000001', 'Patient 42 reports dizziness',
   'patient-42', ARRAY['claim_text', 'subject_id', 'details.mrn'], '{"mrn": "M-0042", "dose_mg": 500}', now() - interval '1 day');
INSERT INTO memory.claims (id, org_id, entity_id, claim_text, kind, decay_at) VALUES
  ('c0000000-0000-0000-0000-000000000006', 'acme', 'e0000000-0000-0000-0000-000000000001', 'Maybe the dose matters', 'hypothesis', now() - interval '1 day');
SELECT memory.run_decay() IS NOT NULL AS decayed;
INSERT INTO memory.claims (id, org_id, entity_id, claim_text) VALUES
  ('c0000000-0000-0000-0000-000000000007', 'globex', 'e0000000-0000-0000-0000-000000000002', 'still pending');
INSERT INTO memory.claims (id, org_id, entity_id, claim_text) VALUES
  ('c0000000-0000-0000-0000-000000000008', 'globex', 'e0000000-0000-0000-0000-000000000002', 'to be retracted');
UPDATE memory.claims SET lifecycle_state = 'retracted' WHERE id = 'c0000000-0000-0000-0000-000000000008';
INSERT INTO memory.relationships (org_id, source_id, target_id, rel_type, attributes) VALUES
  ('acme', 'e0000000-0000-0000-0000-000000000001', 'e0000000-0000-0000-0000-000000000001', 'related_to', '{"w": 1}');
UPDATE memory.claims SET lifecycle_state = 'archived' WHERE id = 'c0000000-0000-0000-0000-000000000004';
