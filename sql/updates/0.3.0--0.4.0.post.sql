-- memory_ext 0.3.0 -> 0.4.0, after the definitions: what needs 0.4.0's functions.

-- Every item row holds to the rules of sql/items.sql (its functions exist only now). No row of
-- 0.3.0 is an item, so the check validates at once.
ALTER TABLE memory.observations ADD CONSTRAINT observations_item_check CHECK (
    (key IS NULL AND namespace IS NULL AND value IS NULL AND search_tsv IS NULL AND ttl IS NULL)
    OR (key IS NOT NULL AND memory_internal._item_key_error(key) IS NULL
        AND memory_internal._item_namespace_error(namespace) IS NULL
        AND pg_catalog.jsonb_typeof(value) OPERATOR(pg_catalog.=) 'object'
        AND content OPERATOR(pg_catalog.=) memory_internal._item_text(value)));
