-- Data written by release 0.1.0 before an upgrade (tests/upgrade/run.sh), with its own API.
-- Run three times, with :phase 1, 2, 3 and the server's clock about two months back, one month
-- back and now, so the audit log spans several monthly partitions (0.1.0 made the first ones as
-- members of the extension, run_maintenance the later ones as ordinary tables).
\set ON_ERROR_STOP on
SET client_min_messages = warning;

-- Every phase: observations of three tiers and two users, a governed application table's rows,
-- feedback, a recall, an org's own events.
INSERT INTO memory.observations (org_id, user_id, task_id, content, source_files, source_type, memory_type) VALUES
  ('acme', 'u1', 'task-' || :phase, 'Updated docs index ' || :phase, ARRAY['docs/index.md'], 'fact', 'long_term'),
  ('acme', 'u2', NULL, 'Customer SSN 123-45-6789 is on file ' || :phase, NULL, 'tool_result', 'long_term'),
  ('globex', 'u3', NULL, 'Set DATABASE_URL in app/.env ' || :phase, ARRAY['app/.env'], 'fact', 'short_term'),
  ('globex', 'u3', 'task-g' || :phase, 'working note ' || :phase, NULL, NULL, 'working');
INSERT INTO public.agent_notes (org_id, body, files) VALUES
  ('acme', 'API docs refresh ' || :phase, ARRAY['docs/api.md']),
  ('globex', 'rotate secret ' || :phase, NULL);
SELECT count(*) FROM memory.record_outcome('sess-' || :phase, 'accepted',
  ARRAY(SELECT id FROM memory.observations WHERE org_id = 'acme' ORDER BY created_at, id LIMIT 2));
SELECT count(*) FROM memory.record_outcome('sess-r' || :phase, 'rejected',
  ARRAY(SELECT id FROM memory.observations WHERE org_id = 'acme' ORDER BY created_at DESC, id LIMIT 1));
SELECT count(*) FROM memory.recall('acme', 'docs index', 3);
SELECT memory.audit_append('app.checkpoint', jsonb_build_object('phase', :phase), 'acme', 'p1', 'ws-1', 'agent-7');
SELECT memory.audit_append('app.checkpoint', jsonb_build_object('phase', :phase, 'n', 1.5), 'globex');
SELECT memory.run_maintenance() IS NOT NULL AS maintained;
