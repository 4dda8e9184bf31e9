-- memory_ext 0.3.0 -> 0.4.0: what only this upgrade does. scripts/gen_upgrade.py appends the
-- definitions of 0.4.0 (functions, views, triggers, comments, grants) after it, so this file holds
-- only changes to what runs once at install: tables, columns, types, indexes, policies, event
-- triggers, data, and DROPs of functions whose arguments or result changed. What needs 0.4.0's
-- functions goes in 0.3.0--0.4.0.post.sql. tests/upgrade/run.sh upgrades 0.1.0, 0.2.0 and 0.3.0
-- databases with data and compares each with a fresh install.

-- The retrieval engine (SPEC §20): memory.recall takes its query embedding as float8[] (real[]
-- and psycopg's floats alike) and returns the row's metadata after the earlier columns; the
-- one-pass and hybrid statements are rendered by memory_core::retrieval and run by
-- memory_internal._retrieve, which replaces _kept_recall and _hybrid_ctes.
DROP FUNCTION memory.recall(text, text, int, text, jsonb, real[], regclass);
DROP FUNCTION memory_internal._kept_recall(text, text, text[], int, int, text);
DROP FUNCTION memory_internal._hybrid_ctes(text, text, text, text, text, text, text, text, int, text, text);
-- Items (issue 48, SPEC §16; sql/items.sql): rows of memory.observations addressed by
-- (org_id, namespace, key). Nullable columns without defaults: no table rewrite, and plain
-- observations keep them NULL.
ALTER TABLE memory.observations ADD COLUMN namespace text[];
ALTER TABLE memory.observations ADD COLUMN key text;
ALTER TABLE memory.observations ADD COLUMN value jsonb;
ALTER TABLE memory.observations ADD COLUMN search_tsv tsvector;
ALTER TABLE memory.observations ADD COLUMN ttl interval;
ALTER TABLE memory.observations ADD COLUMN updated_at timestamptz;
ALTER TABLE memory.observations_archive ADD COLUMN namespace text[];
ALTER TABLE memory.observations_archive ADD COLUMN key text;
ALTER TABLE memory.observations_archive ADD COLUMN value jsonb;
ALTER TABLE memory.observations_archive ADD COLUMN ttl interval;
ALTER TABLE memory.observations_archive ADD COLUMN updated_at timestamptz;
CREATE UNIQUE INDEX observations_item_key ON memory.observations (org_id, namespace, key) WHERE key IS NOT NULL;
CREATE INDEX observations_item_search ON memory.observations USING gin (search_tsv) WHERE search_tsv IS NOT NULL;
-- Issue 46: run_retention sweeps the archive by its rows' stamps (partial indexes as on the hot table).
CREATE INDEX observations_archive_due_expiry ON memory.observations_archive (expires_at) WHERE soft_deleted_at IS NULL AND expires_at IS NOT NULL;
CREATE INDEX observations_archive_due_purge ON memory.observations_archive (purge_after) WHERE soft_deleted_at IS NOT NULL;

-- Issue 46: the classify trigger's arguments gain "content_required" (a blank memory is refused),
-- so their builder takes one more argument.
DROP FUNCTION memory_internal._classify_trigger_args(text, text, text, text[], text, text[]);

-- memory.health counts an org's archived rows from an index.
CREATE INDEX observations_archive_org ON memory.observations_archive (org_id, archived_at);

-- Recall of a user's memories finds the user's rows of one org by index (issue 53): the user index
-- holds (user_id, org_id), no longer the user alone (one index as before; erasure reads it too).
DROP INDEX memory.observations_user;
CREATE INDEX observations_user ON memory.observations (user_id, org_id) WHERE user_id IS NOT NULL;

-- h-revisions: memory over time (issue 49, SPEC §17; sql/revisions.sql). Supersession columns on
-- the observations and their archive (nullable, no default: no table rewrite), and the revisions
-- table with its tenant and clearance policies. A revision history starts empty for existing
-- memories. memory.recall and memory.search gain as_of (both are new in 0.4.0's signatures, so
-- the DROP of 0.3.0's recall above covers the change); their triggers and functions come with the
-- definitions.
ALTER TABLE memory.observations ADD COLUMN supersedes uuid;
ALTER TABLE memory.observations ADD COLUMN superseded_by uuid;
ALTER TABLE memory.observations ADD COLUMN superseded_at timestamptz;
ALTER TABLE memory.observations_archive ADD COLUMN supersedes uuid;
ALTER TABLE memory.observations_archive ADD COLUMN superseded_by uuid;
ALTER TABLE memory.observations_archive ADD COLUMN superseded_at timestamptz;
CREATE TABLE memory.revisions (
    org_id         text NOT NULL,
    memory_id      uuid NOT NULL,
    rev            int NOT NULL CHECK (rev >= 1),
    content        text,
    value          jsonb,
    metadata       jsonb,
    classification memory.classification NOT NULL,
    valid_from     timestamptz NOT NULL,
    valid_to       timestamptz NOT NULL,
    actor          text NOT NULL,
    reason         text,
    -- The words of content (english), as memory.observations keeps them: point-in-time reads match by them.
    content_tsv    tsvector GENERATED ALWAYS AS (to_tsvector('english'::regconfig, content)) STORED,
    PRIMARY KEY (org_id, memory_id, rev)
);
CREATE INDEX revisions_memory ON memory.revisions (memory_id);
ALTER TABLE memory.revisions ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant ON memory.revisions USING (org_id OPERATOR(pg_catalog.=) (SELECT memory_internal._acting_org()))
    WITH CHECK (org_id OPERATOR(pg_catalog.=) (SELECT memory_internal._acting_org()));
CREATE POLICY clearance ON memory.revisions AS RESTRICTIVE FOR SELECT
    USING (classification OPERATOR(pg_catalog.<=) (SELECT memory_internal._max_tier()));
SELECT pg_catalog.pg_extension_config_dump('memory.revisions', '');
-- h-rev49: the revisions of governed application tables (memory.govern's "revisions"; sql/revisions.sql),
-- in a table of their own so that memory.revisions and its readers stay as they are. Empty: a table
-- keeps revisions once its owner governs it with the option.
CREATE TABLE memory.table_revisions (
    relid          regclass NOT NULL,
    org_id         text,
    row_id         text NOT NULL,
    rev            int NOT NULL CHECK (rev >= 1),
    user_id        text,
    content        text,
    classification memory.classification NOT NULL,
    valid_from     timestamptz,
    valid_to       timestamptz NOT NULL,
    actor          text NOT NULL,
    reason         text
);
CREATE UNIQUE INDEX table_revisions_key ON memory.table_revisions (relid, row_id, rev, org_id) NULLS NOT DISTINCT;
ALTER TABLE memory.table_revisions ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant ON memory.table_revisions
    USING (pg_catalog.has_table_privilege(relid::pg_catalog.oid, 'SELECT')
           AND (org_id IS NULL OR org_id OPERATOR(pg_catalog.=) (SELECT memory_internal._acting_org())));
CREATE POLICY clearance ON memory.table_revisions AS RESTRICTIVE FOR SELECT
    USING (classification OPERATOR(pg_catalog.<=) (SELECT memory_internal._max_tier()));
SELECT pg_catalog.pg_extension_config_dump('memory.table_revisions', '');

-- Lineage (issue 50, SPEC §18; sql/lineage.sql): the sources of a derived memory (nullable, no
-- default: no table rewrite; a 0.3.0 memory has none), found by containment through partial GIN
-- indexes. The floors' triggers and memory.lineage come with the definitions.
ALTER TABLE memory.observations ADD COLUMN derived_from uuid[];
ALTER TABLE memory.observations_archive ADD COLUMN derived_from uuid[];
CREATE INDEX observations_derived_from ON memory.observations USING gin (derived_from) WITH (fastupdate = on, gin_pending_list_limit = 4096) WHERE derived_from IS NOT NULL;
CREATE INDEX observations_archive_derived_from ON memory.observations_archive USING gin (derived_from) WITH (fastupdate = on, gin_pending_list_limit = 4096) WHERE derived_from IS NOT NULL;

-- h-remember: duplicates at write and context packing (issue 49, SPEC §17; sql/remember.sql).
-- The org's dedup mode and threshold (constant defaults: no table rewrite), the normalised
-- content's hash that memory.remember keeps with a row, when and how often it was remembered
-- again. Rows of 0.3.0 have no hash, so memory.remember treats them as plain INSERTs did.
ALTER TABLE memory.org_settings ADD COLUMN dedup text NOT NULL DEFAULT 'exact';
ALTER TABLE memory.org_settings ADD COLUMN dedup_threshold float8 NOT NULL DEFAULT 0.95;
ALTER TABLE memory.observations ADD COLUMN content_sha256 text;
ALTER TABLE memory.observations ADD COLUMN last_seen_at timestamptz;
ALTER TABLE memory.observations ADD COLUMN seen_count int NOT NULL DEFAULT 1;
CREATE INDEX observations_dedup ON memory.observations (org_id, content_sha256) WHERE content_sha256 IS NOT NULL;
-- h-speed: the query embedding is anycompatible (float8[], real[], pgvector's vector or text
-- alike: memory_internal._query_vector), checked by _query_vector_floats/_query_vector_parse.
DROP FUNCTION memory.retrieve(text, text, int, uuid, text, text, real[], timestamptz);
DROP FUNCTION memory_internal._query_vector(real[], int);
DROP FUNCTION memory_internal._query_vector_check(real[], int);
-- h-speed: memory_internal._retrieve sets pgvector's iterative scan itself.
DROP FUNCTION memory_internal._hnsw_begin(int);
DROP FUNCTION memory_internal._hnsw_end(text[]);

-- h-receipts: erasure receipts (issue 50, SPEC §18; sql/subject.sql). The ids each receipt
-- covers, for memory.verify_receipt's scan (owner-only).
CREATE TABLE memory.erasure_receipts (
    event_id  uuid PRIMARY KEY,
    org_id    text NOT NULL,
    issued_at timestamptz NOT NULL,
    ids       jsonb NOT NULL
);
SELECT pg_catalog.pg_extension_config_dump('memory.erasure_receipts', '');
-- memory.retrieve (issue 47): an org's active claims created by its time, through one index
-- (sql/knowledge.sql).
CREATE INDEX claims_org_active ON memory.claims (org_id, t_created) WHERE lifecycle_state = 'active';
