-- memory_ext 0.2.0 -> 0.3.0: what only this upgrade does. scripts/gen_upgrade.py appends the
-- definitions of 0.3.0 (functions, views, triggers, comments, grants) after it, so this file holds
-- only changes to what runs once at install: tables, columns, types, indexes, policies, event
-- triggers, data, and DROPs of functions whose arguments or result changed. tests/upgrade/run.sh
-- upgrades 0.1.0 and 0.2.0 databases with data and compares each with a fresh install.

-- memory.audit_events takes org_id, actor and since, and workspace_id may be NULL (issue 34 item
-- 11): CREATE OR REPLACE cannot add arguments, and the old overload would stay behind.
DROP FUNCTION memory.audit_events(text, text, int, int);
