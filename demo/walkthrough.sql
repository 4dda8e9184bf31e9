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
SELECT memory.reclassify(id, 'internal', 'synthetic test record') AS previous_tier FROM memory.observations WHERE content = 'Customer SSN is on file';
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
