-- Data written with what release 0.3.0 added (tests/upgrade/run.sh, when upgrading from 0.3.0),
-- after the 0.1.0 and 0.2.0 fills: a role cleared to a tier, the agent API (recall with filters,
-- forget, retrieve) and the audit events each leaves, observations whose words are kept
-- (content_tsv), and a memory-mcp tool record.
\set ON_ERROR_STOP on
SET client_min_messages = warning;
DO $$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'upgrade_reader_030') THEN CREATE ROLE upgrade_reader_030; END IF;
END $$;
SELECT * FROM memory.setup_roles();
GRANT memory_reader TO upgrade_reader_030;
SELECT memory.grant_org('upgrade_reader_030', 'acme', 'internal');
INSERT INTO memory.observations (org_id, user_id, session_id, task_id, content, metadata) VALUES
  ('acme', 'u30', 's30', 't30', 'Prefers bank transfer at the end of the month', '{"topic": "billing"}'),
  ('acme', 'u30', 's30', 't30', 'Asked about the quarterly roadmap', '{"topic": "roadmap"}'),
  ('acme', 'u30', 's31', NULL, 'Forget me: a scratch note', '{}'),
  -- 0.3.0 took a blank memory; 0.4.0 refuses new ones and keeps this one (issue 46).
  ('acme', 'u30', 's32', NULL, '   ', '{}');
SELECT count(*) >= 1 AS recalled FROM memory.recall('acme', 'bank transfer', 5, NULL, '{"user_id": "u30"}');
SELECT memory.forget(ARRAY(SELECT id FROM memory.observations WHERE content = 'Forget me: a scratch note'), 'upgrade fill')
       IS NOT NULL AS forgot;
SELECT count(*) >= 0 AS retrieved FROM memory.retrieve('acme', 'roadmap', 5);
SET memory.org_id = 'acme';
SELECT memory_internal._mcp_tool_invoked('recall', 'upgrade-test', 1);
RESET memory.org_id;
-- Chained now, so the snapshot before the update holds them in the log (deferred mode leaves them pending).
SELECT memory.audit_integrate() >= 0 AS integrated;
