-- memory_ext 0.2.0 -> 0.3.0: what only this upgrade does. scripts/gen_upgrade.py appends the
-- definitions of 0.3.0 (functions, views, triggers, comments, grants) after it, so this file holds
-- only changes to what runs once at install: tables, columns, types, indexes, policies, event
-- triggers, data, and DROPs of functions whose arguments or result changed. tests/upgrade/run.sh
-- upgrades 0.1.0 and 0.2.0 databases with data and compares each with a fresh install.

-- The drift detectors compare a user's activity only with the same user's earlier activity
-- (issue 34 item 17): the refresh and watch-question lookups are keyed by (org, user, object).
DROP INDEX memory.thread_refreshes_thread;
CREATE INDEX thread_refreshes_thread ON memory.thread_refreshes (org_id, user_id, thread_id, created_at, id);
DROP INDEX memory.watch_question_updates_question;
CREATE INDEX watch_question_updates_question ON memory.watch_question_updates (org_id, user_id, watch_question_id, created_at, id);

-- Re-check leases are held (issue 34 item 21): each claim records the end of its lease, and only
-- the worker holding a task completes it (complete_recheck_task gains a worker argument). Tasks
-- claimed under 0.2.0 keep the default lease of 15 minutes from their claim.
ALTER TABLE memory.recheck_tasks ADD COLUMN lease_until timestamptz;
UPDATE memory.recheck_tasks SET lease_until = claimed_at + interval '15 minutes' WHERE claimed_at IS NOT NULL;
DROP FUNCTION memory.complete_recheck_task(bigint, text);

-- memory.audit_events takes org_id, actor and since, and workspace_id may be NULL (issue 34 item
-- 11): CREATE OR REPLACE cannot add arguments, and the old overload would stay behind.
DROP FUNCTION memory.audit_events(text, text, int, int);

-- Clearance (docs/design.md#application-roles, issue 34): an org grant carries the most sensitive tier its role reads;
-- grants made before keep reading every tier. memory.grant_org gains the max_tier argument.
-- (The restrictive policies that apply it need 0.3.0's functions: the post part makes them.)
ALTER TABLE memory.org_grants ADD COLUMN max_tier memory.classification NOT NULL DEFAULT 'restricted';
DROP FUNCTION memory.grant_org(regrole, text);

-- memory.recall takes filters, a query embedding and a source table, and returns more columns
-- (docs/design.md#agent-memory-api, issue 35): CREATE OR REPLACE cannot change either. Positional calls of 0.2.0's four
-- arguments keep working against the new function.
DROP FUNCTION memory.recall(text, text, int, text);

-- memory.retrieve (docs/design.md#agent-memory-api, issue 35) searches the active claims' text: its full-text index.
CREATE INDEX claims_fts ON memory.claims USING gin (to_tsvector('english', claim_text)) WHERE lifecycle_state = 'active';

-- Recall matches and ranks by the words kept with the row (issue 36): a stored generated column
-- (adding it rewrites memory.observations once, under its ACCESS EXCLUSIVE lock), and the
-- full-text index on it in place of the one on the expression.
ALTER TABLE memory.observations ADD COLUMN content_tsv tsvector GENERATED ALWAYS AS (to_tsvector('english'::regconfig, content)) STORED;
DROP INDEX memory.observations_fts;
CREATE INDEX observations_fts ON memory.observations USING gin (content_tsv);

-- Embeddings (docs/design.md#agent-memory-api, issue 36): memory.enable_embeddings records the dimensions here; the
-- row's trigger (made with 0.3.0's definitions) adds the columns and indexes, also on restore.
CREATE TABLE memory.ann_settings (
    singleton  boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    dimensions int NOT NULL CHECK (dimensions BETWEEN 1 AND 2000),
    enabled_at timestamptz NOT NULL DEFAULT now()
);
SELECT pg_catalog.pg_extension_config_dump('memory.ann_settings', '');

-- The calls memory_ext delegates to an org's node on Citus go through one helper
-- (memory_internal._org_call), which passes the caller itself: reclassify's own lookup is gone.
DROP FUNCTION memory._who_if_distributed();

-- Internal functions move to schema memory_internal, so that schema memory holds the API and
-- nothing else. Moved, not made again: the triggers, policies, defaults and event triggers that
-- use them keep pointing at them. (Keep this last: statements above name them in memory.)
-- The governance event triggers are off until the post part: their functions move now and get
-- 0.3.0's bodies only below, and the DDL in between must not run 0.2.0's bodies, which name
-- the internal functions in schema memory.
ALTER EVENT TRIGGER memory_guard_governance DISABLE;
ALTER EVENT TRIGGER memory_guard_governance_drop DISABLE;
CREATE SCHEMA memory_internal;
DO $$
DECLARE f regprocedure;
BEGIN
    FOR f IN SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
              WHERE p.pronamespace = 'memory'::regnamespace AND pg_catalog.starts_with(p.proname::text, '_') LOOP
        EXECUTE format('ALTER FUNCTION %s SET SCHEMA memory_internal', f);
    END LOOP;
END $$;
