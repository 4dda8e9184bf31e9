-- memory_ext 0.3.0 -> 0.4.0, after the definitions: what needs 0.4.0's functions.

-- Every item row holds to the rules of sql/items.sql (its functions exist only now). No row of
-- 0.3.0 is an item, so the check validates at once.
ALTER TABLE memory.observations ADD CONSTRAINT observations_item_check CHECK (
    (key IS NULL AND value IS NULL AND search_tsv IS NULL AND ttl IS NULL
     AND (namespace IS NULL OR memory_internal._item_namespace_error(namespace) IS NULL))
    OR (key IS NOT NULL AND memory_internal._item_key_error(key) IS NULL
        AND memory_internal._item_namespace_error(namespace) IS NULL
        AND pg_catalog.jsonb_typeof(value) OPERATOR(pg_catalog.=) 'object'
        AND content OPERATOR(pg_catalog.=) memory_internal._item_text(value)));

-- memory.search's namespace prefix index (sql/items.sql; memory_internal._item_ns_path exists only now).
CREATE INDEX observations_item_prefix ON memory.observations (org_id, memory_internal._item_ns_path(namespace) COLLATE "C")
    WHERE key IS NOT NULL;
CREATE INDEX observations_item_live_prefix ON memory.observations (org_id, memory_internal._item_ns_path(namespace) COLLATE "C")
    WHERE key IS NOT NULL AND soft_deleted_at IS NULL AND superseded_at IS NULL;

-- memory.observations is governed again as CREATE EXTENSION governs it: its classify trigger now
-- refuses a blank content ("content_required", issue 46). Only new writes are refused (an
-- INSERT, or an UPDATE that changes the content): rows already blank in a 0.3.0 store stay, and
-- their other columns stay writable (weights, retention). Its registry row keeps when and by whom.
DO $$
DECLARE
    saved jsonb := (SELECT pg_catalog.jsonb_build_array(g.governed_at, g.governed_by)
                      FROM memory.governance_registry g WHERE g.relid = 'memory.observations'::regclass);
BEGIN
    UPDATE memory.governance_registry SET builtin = false WHERE relid = 'memory.observations'::regclass;
    PERFORM memory.govern('memory.observations', '{"content": "content", "source_files": "source_files",
        "source_type": "source_type", "target": ["classification", "metadata"], "org": "org_id", "audit": true,
        "weight": "weight", "stamps": true, "content_required": true}');
    UPDATE memory.governance_registry g
       SET builtin = true,
           governed_at = coalesce((saved->>0)::timestamptz, g.governed_at),
           governed_by = coalesce((saved->>1)::name, g.governed_by)
     WHERE g.relid = 'memory.observations'::regclass;
END $$;

-- memory.health counts an org's observations still without an embedding from an index, which
-- memory.enable_embeddings makes; a store whose embeddings were enabled in 0.3.0 gets it here.
DO $$
BEGIN
    IF memory_internal._has_column('memory.observations', 'embedding') THEN
        CREATE INDEX IF NOT EXISTS observations_no_embedding ON memory.observations (org_id)
            WHERE embedding IS NULL AND soft_deleted_at IS NULL;
    END IF;
    -- ... and the fillfactor that keeps room for memory.remember's merge on each new page
    -- (sql/vector.sql: memory_internal._observations_room; the rows already written stay where they are).
    IF EXISTS (SELECT 1 FROM memory.ann_settings) THEN
        PERFORM memory_internal._observations_room((SELECT s.dimensions FROM memory.ann_settings s));
    END IF;
END $$;
