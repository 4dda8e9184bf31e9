-- memory_ext walkthrough, run by `make demo`. Each step says what it shows.
\set QUIET on
\pset footer off
SET client_min_messages = warning;

\echo '== 1. Classification on insert ========================================================='
\echo 'memory.classify applies the seed''s rules (most restrictive wins) plus deterministic detectors.'
SELECT content, source_files, source_type, memory.classify(content, source_files, source_type) AS tier
  FROM (VALUES
    ('Added OAuth token rotation to auth middleware', ARRAY['src/auth/token-rotation.ts'], 'decision'),
    ('Updated API documentation for user endpoints', ARRAY['public/docs/api-reference.md'], 'fact'),
    ('We adopt the SOX change-management policy', NULL, 'decision'),
    ('Customer paid with 4111 1111 1111 1111', NULL, 'tool_result'),
    ('User prefers short answers', NULL, 'preference')) AS v(content, source_files, source_type);

\echo
\echo 'classify_explain says which rule decided, and the BFSI risk band:'
SELECT memory.classify_explain('rotate the api_key in .env', ARRAY['app/.env']) AS explain;

\echo
\echo 'Validated detectors (memory.detectors()): checksums keep look-alikes out, folding keeps evasions in;'
\echo 'explanations name detectors, never the values they matched:'
SELECT v.content, memory.classify(v.content) AS tier, memory.classify_explain(v.content)->'detectors' AS detectors
  FROM (VALUES
    ('Refund to GB82 WEST 1234 5698 7654 32'),
    ('Refund to GB82 WEST 1234 5698 7654 33'),
    ('Commit 3f2a9c1d8e7b6a5f4e3d2c1b0a9f8e7d6c5b4a39 on 2026-11-23, order ORD-2024-004512'),
    ('Reach me at ｊａｎｅ＠ｅｘａｍｐｌｅ．ｃｏｍ'),
    ('the s' || chr(8203) || 'sn is on file'),
    ('DATABASE_URL=postgres://app:s3cret@db.internal/prod')) AS v(content);

\echo
\echo '== 2. The managed observation store is governed: no client can skip classification =='
INSERT INTO memory.observations (org_id, user_id, content, source_files, source_type) VALUES
  ('acme', 'u1', 'Updated docs index', ARRAY['docs/index.md'], 'fact'),
  ('acme', 'u1', 'Customer SSN is on file', NULL, 'tool_result'),
  ('acme', 'u2', 'Set DATABASE_URL in app/.env', ARRAY['app/.env'], 'fact');
SELECT left(content, 32) AS content, classification, metadata FROM memory.observations ORDER BY created_at, content;

\echo
\echo 'A writer may supply a stricter tier (kept) but never a laxer one (raised):'
INSERT INTO memory.observations (org_id, content, classification) VALUES ('acme', 'note A', 'restricted'), ('acme', 'my password', 'public');
SELECT content, classification FROM memory.observations WHERE content IN ('note A', 'my password');

\echo
\echo 'Lowering a tier directly fails with SQLSTATE MX004:'
\set ON_ERROR_STOP off
\set VERBOSITY sqlstate
UPDATE memory.observations SET classification = 'public' WHERE content = 'Customer SSN is on file';
\set VERBOSITY default
\set ON_ERROR_STOP on
\echo 'memory.reclassify is the one way down (needs a reason; not granted to PUBLIC):'
SELECT id AS ssn_id FROM memory.observations WHERE content = 'Customer SSN is on file' \gset
SELECT memory.reclassify(:'ssn_id', 'internal', 'synthetic test record') AS previous_tier;
SELECT content, classification FROM memory.observations WHERE content = 'Customer SSN is on file';

\echo
\echo '== 3. Org rules raise tiers for one tenant only ==========================================='
INSERT INTO memory.classification_rules (org_id, tier, target, pattern, description)
VALUES ('acme', 'restricted', 'content', '(?i)project falcon', 'codename under NDA');
SELECT memory.classify('Project Falcon kickoff', NULL, NULL, 'acme') AS for_acme,
       memory.classify('Project Falcon kickoff', NULL, NULL, 'globex') AS for_globex;

\echo
\echo '== 4. Govern an existing application table ==============================================='
CREATE TABLE public.agent_notes (id bigserial PRIMARY KEY, body text NOT NULL, files text[], meta jsonb);
INSERT INTO public.agent_notes (body) VALUES ('written before governance');
\echo 'govern attaches the trigger from a column mapping; "backfill" classifies the rows already there:'
SELECT memory.govern('public.agent_notes', '{"content": "body", "source_files": "files", "target": "meta", "backfill": true}') AS mapping;
INSERT INTO public.agent_notes (body, files) VALUES ('API docs refresh', ARRAY['docs/api.md']), ('rotate secret', NULL);
SELECT id, body, meta FROM public.agent_notes ORDER BY id;
SELECT table_name, triggers FROM memory.governed_tables;

\echo
\echo '== 5. Every write is on a per-tenant hash chain ============================================='
\echo 'Each insert recorded a signed pending entry in its own transaction, taking no lock on the chain'
\echo '(memory.audit_mode = deferred). The sequencer chains them per org: the background integrator'
\echo 'every ~100 ms, or on demand:'
SELECT count(*) AS pending FROM memory.audit_pending;
SELECT memory.audit_integrate() AS chained;
\echo 'memory.store events with content_sha256, never content:'
SELECT chain_id, seq, event_type, left(encode(entry_hash, 'hex'), 16) || '…' AS entry_hash,
       payload->>'classification' AS tier, left(payload->>'content_sha256', 12) || '…' AS content_sha256
  FROM memory.audit_log WHERE chain_id = 'acme' ORDER BY seq LIMIT 6;
\echo
\echo 'audit_verify recomputes every HMAC link; audit_head is an anchor to keep outside the database:'
SELECT * FROM memory.audit_verify();
SELECT chain_id, seq, left(encode(merkle_root, 'hex'), 24) || '…' AS merkle_root FROM memory.audit_head('acme');
\echo
\echo 'The log is append-only, even for a superuser (MX002):'
\set ON_ERROR_STOP off
\set VERBOSITY sqlstate
DELETE FROM memory.audit_log WHERE chain_id = 'acme';
\set VERBOSITY default
\set ON_ERROR_STOP on
\echo 'Tampering (here with the append-only triggers bypassed in replica mode) is caught at the right seq:'
BEGIN;
SET LOCAL session_replication_role = replica;
UPDATE memory.audit_log SET payload = payload || '{"classification": "public"}' WHERE chain_id = 'acme' AND seq = 2;
SET LOCAL session_replication_role = origin;
SELECT chain_id, ok, first_bad_seq, reason FROM memory.audit_verify('acme');
ROLLBACK;

\echo
\echo '== 6. Feedback weights learned from session outcomes ========================================='
INSERT INTO memory.observations (id, org_id, content) VALUES
  ('00000000-0000-0000-0000-00000000000a', 'acme', 'Retry the payments worker with exponential backoff'),
  ('00000000-0000-0000-0000-00000000000b', 'acme', 'Retry the payments worker immediately, no backoff');
\echo 'An accepted session nudges weights up (alpha 0.1), a failed one down (alpha 0.15):'
SELECT observation_id, previous_weight, round(new_weight::numeric, 4) AS new_weight, alpha, applied, reason
  FROM memory.record_outcome('sess-1', 'accepted', ARRAY['00000000-0000-0000-0000-00000000000a']::uuid[]);
SELECT observation_id, previous_weight, round(new_weight::numeric, 4) AS new_weight, alpha, applied, reason
  FROM memory.record_outcome('sess-1', 'rejected', ARRAY['00000000-0000-0000-0000-00000000000b', '00000000-0000-0000-0000-00000000000a']::uuid[]);
\echo 'Three failed sessions and no success make an observation misleading: the next failure uses 2 x alpha:'
SELECT observation_id, alpha, applied FROM memory.record_outcome('sess-2', 'rejected', ARRAY['00000000-0000-0000-0000-00000000000b']::uuid[]);
SELECT observation_id, alpha, round(new_weight::numeric, 4) AS new_weight
  FROM memory.record_outcome('sess-3', 'rework', ARRAY['00000000-0000-0000-0000-00000000000b']::uuid[]);
SELECT * FROM memory.misleading_observations('acme');
\echo
\echo 'recall ranks live rows of one tenant by full-text relevance x weight (and audits ids, not content):'
SELECT left(content, 50) AS content, round(weight::numeric, 4) AS weight, round(score::numeric, 5) AS score
  FROM memory.recall('acme', 'payments worker backoff', 5);
SELECT memory.audit_integrate() \g /dev/null
SELECT event_type, payload - 'query_sha256' AS payload FROM memory.audit_log
 WHERE chain_id = 'acme' AND event_type IN ('memory.feedback', 'memory.recall') ORDER BY seq DESC LIMIT 2;

\echo
\echo '== 7. Retention stamps, the pipeline, and the data subject ==================================='
\echo 'Every write is stamped from its tier and memory type (restricted: 30 days + 7 days grace; short_term: 1 hour):'
INSERT INTO memory.observations (org_id, user_id, content, memory_type, created_at) VALUES
  ('acme', 'carol', 'carol card 4111 1111 1111 1111', 'long_term', now() - interval '40 days'),
  ('acme', 'carol', 'carol likes dark mode', 'short_term', now() - interval '2 hours'),
  ('acme', 'dave', 'dave ssn on file', 'long_term', now() - interval '40 days');
INSERT INTO memory.legal_holds (org_id, user_id, reason) VALUES ('acme', 'dave', 'litigation hold');
SELECT user_id, memory_type, classification, expires_at::date, purge_after::date, archive_at::date
  FROM memory.observations WHERE user_id IN ('carol', 'dave') ORDER BY user_id, memory_type;
\echo 'Export everything held about a subject, with a manifest (restricted rows only when asked):'
SELECT jsonb_pretty(memory.export_subject('carol', true)->'manifest') AS export_manifest;
\echo 'A dry run reports (and audits) without changing anything; then the real run soft-deletes, skipping the held row:'
SELECT memory.run_retention(true) - 'at' AS dry_run;
SELECT memory.run_retention() - 'at' AS run;
SELECT user_id, soft_deleted_at IS NOT NULL AS soft_deleted FROM memory.observations WHERE user_id IN ('carol', 'dave') ORDER BY 1, 2;
\echo 'Erasure of a subject: held rows stay (and are reported), the chain still verifies:'
SELECT memory.erase_subject('dave') AS erased;
SELECT chain_id, ok FROM memory.audit_verify();

\echo
\echo '== 8. Knowledge lifecycle: entities, claims, supersession, no hard delete ==================='
INSERT INTO memory.entities (id, org_id, entity_type, name) VALUES
  ('e0000000-0000-0000-0000-000000000001', 'acme', 'problem', 'Type 2 diabetes with stage 3 CKD');
INSERT INTO memory.claims (id, org_id, entity_id, claim_text, supports, source, confidence_score) VALUES
  ('c0000000-0000-0000-0000-000000000001', 'acme', 'e0000000-0000-0000-0000-000000000001',
   'Evidence from NEJM 2024 study of 1,200 patients', ARRAY['src-1'], 'NEJM', 0.9);
\echo 'A claim starts pending; an admin (here the superuser) promotes it:'
UPDATE memory.claims SET lifecycle_state = 'active' WHERE id = 'c0000000-0000-0000-0000-000000000001';
\echo 'The transition table is enforced (MX001 names both states), and nothing is hard-deleted (MX006):'
\set ON_ERROR_STOP off
UPDATE memory.claims SET lifecycle_state = 'pending' WHERE id = 'c0000000-0000-0000-0000-000000000001';
DELETE FROM memory.claims WHERE id = 'c0000000-0000-0000-0000-000000000001';
\echo 'A tier-3 source may not supersede a tier-1 claim (MX005):'
INSERT INTO memory.claims (org_id, entity_id, claim_text, source, supersedes) VALUES
  ('acme', 'e0000000-0000-0000-0000-000000000001', 'a blog says otherwise', 'open-web', 'c0000000-0000-0000-0000-000000000001');
\set ON_ERROR_STOP on
\echo 'A correction supersedes the old claim in the same statement; claim_chain shows the provenance:'
INSERT INTO memory.claims (id, org_id, entity_id, claim_text, supports, source, confidence_score, supersedes) VALUES
  ('c0000000-0000-0000-0000-000000000002', 'acme', 'e0000000-0000-0000-0000-000000000001',
   'Corrected: 1,250 patients', ARRAY['src-1'], 'PubMed', 0.85, 'c0000000-0000-0000-0000-000000000001');
SELECT * FROM memory.claim_chain('c0000000-0000-0000-0000-000000000002');
SELECT memory.audit_integrate() \g /dev/null
SELECT event_type, payload - 'claimSha256' - 'subjectId' AS payload FROM memory.audit_log
 WHERE chain_id = 'acme' AND event_type LIKE 'memory.claim.%' ORDER BY seq DESC LIMIT 2;
\echo
\echo 'Conflicts: the lower confidence loses (a tie: the newer loses):'
UPDATE memory.claims SET lifecycle_state = 'active' WHERE id = 'c0000000-0000-0000-0000-000000000002';
INSERT INTO memory.claims (id, org_id, entity_id, claim_text, source, confidence_score) VALUES
  ('c0000000-0000-0000-0000-000000000003', 'acme', 'e0000000-0000-0000-0000-000000000001', 'A weaker competing claim', 'PubMed', 0.4);
UPDATE memory.claims SET lifecycle_state = 'active' WHERE id = 'c0000000-0000-0000-0000-000000000003';
SELECT memory.resolve_conflict('c0000000-0000-0000-0000-000000000002', 'c0000000-0000-0000-0000-000000000003') AS loser;
\echo
\echo 'Freshness: low-confidence or aged active claims are queued for a re-check (once per backoff):'
INSERT INTO memory.claims (id, org_id, entity_id, claim_text, source, confidence_score, t_created) VALUES
  ('c0000000-0000-0000-0000-000000000004', 'acme', 'e0000000-0000-0000-0000-000000000001', 'An old finding', 'JAMA', 0.95, now() - interval '120 days');
UPDATE memory.claims SET lifecycle_state = 'active' WHERE id = 'c0000000-0000-0000-0000-000000000004';
SELECT * FROM memory.freshness_recheck();
SELECT task_id, claim_id, reason, claimed_by FROM memory.claim_recheck_tasks('critic-1', 10);
\echo 'The replicator''s verdicts: eroded queues the critic, broken provenance retracts:'
SELECT memory.record_verdict('c0000000-0000-0000-0000-000000000004', 'eroded') AS eroded;
\echo
\echo 'Bulk ingest: one row per item; a bad item is reported with its SQLSTATE and the rest land.'
\echo 'Claims name an entity of the same batch by its ref:'
SELECT kind, item, ok, sqlstate, message
  FROM memory.ingest_batch(
    entities => '[{"ref": "ics", "org_id": "acme", "entity_type": "intervention", "name": "Inhaled corticosteroid"}]',
    claims => '[{"org_id": "acme", "entity_ref": "ics", "claim_text": "Reduces exacerbations (Cochrane 2024)", "source": "Cochrane"},
                {"org_id": "acme", "entity_ref": "ics", "claim_text": "Starts active", "lifecycle_state": "active"},
                {"org_id": "acme", "entity_id": "00000000-0000-0000-0000-0000000000ff", "claim_text": "No such entity"},
                {"org_id": "acme", "entity_ref": "ics", "claim_text": 42}]');
\echo
\echo 'Decay: a PHI claim past decay_at is redacted field by field and archived; a hypothesis is deleted:'
INSERT INTO memory.claims (id, org_id, entity_id, claim_text, subject_id, pii_fields, details, decay_at) VALUES
  ('c0000000-0000-0000-0000-000000000005', 'acme', 'e0000000-0000-0000-0000-000000000001', 'Patient 42 reports dizziness',
   'patient-42', ARRAY['claim_text', 'subject_id', 'details.mrn'], '{"mrn": "M-0042", "dose_mg": 500}', now() - interval '1 day');
INSERT INTO memory.claims (org_id, entity_id, claim_text, kind, decay_at) VALUES
  ('acme', 'e0000000-0000-0000-0000-000000000001', 'Maybe the dose matters', 'hypothesis', now() - interval '1 day');
SELECT memory.run_decay() - 'at' AS decay;
SELECT claim_text, subject_id, details, lifecycle_state FROM memory.claims WHERE id = 'c0000000-0000-0000-0000-000000000005';
\echo 'Roles come from a setup call (memory_reader < memory_writer < memory_admin); the chains still verify:'
SELECT * FROM memory.setup_roles();
SELECT chain_id, entries, ok FROM memory.audit_verify();
\echo
\echo 'Tenants are bound to roles (SPEC §8): an agent role may act for acme only; naming another org in'
\echo 'memory.org_id is refused (42501, with a hint), and writing another org is refused:'
DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'demo_agent') THEN CREATE ROLE demo_agent; END IF; END $$;
GRANT memory_writer TO demo_agent;
SELECT memory.grant_org('demo_agent', 'acme') AS granted;
SET ROLE demo_agent;
INSERT INTO memory.observations (org_id, content) VALUES ('acme', 'agent note: rotate the api_key before Friday');
SELECT memory.acting_org() AS acting_org, count(*) AS visible_observations, array_agg(DISTINCT org_id) AS orgs FROM memory.observations;
\set ON_ERROR_STOP off
SET memory.org_id = 'globex';
SELECT memory.acting_org() AS acting_org_after_naming_globex, count(*) AS visible_observations FROM memory.observations;
RESET memory.org_id;
INSERT INTO memory.observations (org_id, content) VALUES ('globex', 'sneaky');
SELECT memory.audit_append('memory.purge', '{"forged": true}', 'acme');
\set ON_ERROR_STOP on
RESET ROLE;
SELECT memory.audit_integrate() \g /dev/null
SELECT actor_id, event_type, payload->>'classification' AS tier FROM memory.audit_log
 WHERE chain_id = 'acme' AND actor_id = 'role:demo_agent';
\echo
\echo 'Consent (SPEC §6): the onboarding grant records consent and, with save_to_profile, the user''s'
\echo 'preferences as a profile context; the consent event anchors a receipt in the chain:'
SELECT memory.grant_consent('acme', 'carol', '{create_task,save_to_thread,save_to_profile}',
                            '{"language_preference": "English", "research_depth": "deep", "risk_prompt_preference": "counter_first"}') AS version;
SELECT scope, state, version FROM memory.consent_status('acme', 'carol');
SELECT r->>'version' AS version, r->'scopes' AS scopes, r->'audit'->>'chain_id' AS chain, r->'audit'->>'seq' AS seq
  FROM memory.consent_receipt('acme', 'carol') r;
\echo 'A thread context (save_to_thread); a position outside a task needs explicit consent:'
INSERT INTO memory.user_contexts (org_id, user_id, scope, thread_id, source, fields)
VALUES ('acme', 'carol', 'thread', 'th-sol', 'save_as_thread', '{"user_focus_reason": "SOL unlock schedule", "research_style": "bottom-up"}');
\set ON_ERROR_STOP off
\set VERBOSITY sqlstate
INSERT INTO memory.user_contexts (org_id, user_id, scope, thread_id, source, fields)
VALUES ('acme', 'carol', 'thread', 'th-sol', 'refresh', '{"user_stated_position_context": "long 10 SOL"}');
\set VERBOSITY default
\echo 'Sensitive input is refused whatever the consent (MX007), naming the detector, never the value:'
INSERT INTO memory.user_contexts (org_id, user_id, scope, thread_id, source, fields)
VALUES ('acme', 'carol', 'thread', 'th-sol', 'refresh', '{"user_focus_reason": "ping me at carol@example.com"}');
\set ON_ERROR_STOP on
\echo 'Slices for two routes: snapshot loads S1-S3; thread_refresh adds the thread''s S4 and S5.'
\echo 'evidence_audit would load S1 only (evidence is never personalised):'
SELECT r->'slices_loaded' AS loaded, r->'cold_start' AS cold_start, r->'tokens_estimated' AS tokens
  FROM memory.load_slices('acme', 'carol', 'snapshot') r;
SELECT r->>'rendered' AS rendered FROM memory.load_slices('acme', 'carol', 'thread_refresh', NULL, 'th-sol') r;
SELECT memory.advisor_order('counter_first') AS advisor_order;
\echo 'A grade reversal on the same snapshot is persona drift (observed, never written to the profile):'
INSERT INTO memory.user_feedback (org_id, user_id, related_object_ref, rating, created_at)
VALUES ('acme', 'carol', 'snapshot:sol-1', 'thumbs_up', now() - interval '3 days');
INSERT INTO memory.user_feedback (org_id, user_id, related_object_ref, rating) VALUES ('acme', 'carol', 'snapshot:sol-1', 'not_helpful');
SELECT signal_kind, prior_signal->>'value' AS prior, current_signal->>'value' AS current, triggers_alert FROM memory.persona_drift_log;
\echo 'Revoking every scope, in one transaction: the profile goes, the thread context stays blocked,'
\echo 'the drift log is purged 48 hours later by maintenance; the next load is a cold start:'
SELECT memory.revoke_consent('acme', 'carol') - 'revoked' - 'in_force' AS revoked;
SELECT r->'slices' AS slices, r->'slices_blocked_by_consent' AS blocked, r->'cold_start' AS cold_start
  FROM memory.load_slices('acme', 'carol', 'thread_refresh', NULL, 'th-sol') r;
SELECT memory.audit_integrate() \g /dev/null
SELECT chain_id, entries, ok FROM memory.audit_verify() WHERE chain_id = 'acme';
