-- memory_ext 0.3.0 -> 0.4.0: what only this upgrade does. scripts/gen_upgrade.py appends the
-- definitions of 0.4.0 (functions, views, triggers, comments, grants) after it, so this file holds
-- only changes to what runs once at install: tables, columns, types, indexes, policies, event
-- triggers, data, and DROPs of functions whose arguments or result changed. What needs 0.4.0's
-- functions goes in 0.3.0--0.4.0.post.sql. tests/upgrade/run.sh upgrades 0.1.0, 0.2.0 and 0.3.0
-- databases with data and compares each with a fresh install.

-- Issue 46: run_retention sweeps the archive by its rows' stamps (partial indexes as on the hot table).
CREATE INDEX observations_archive_due_expiry ON memory.observations_archive (expires_at) WHERE soft_deleted_at IS NULL AND expires_at IS NOT NULL;
CREATE INDEX observations_archive_due_purge ON memory.observations_archive (purge_after) WHERE soft_deleted_at IS NOT NULL;
