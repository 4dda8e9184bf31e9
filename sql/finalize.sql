-- Runs last: govern the managed store (now that every capability exists), grants, dump registration.

SELECT memory.govern('memory.observations', '{"content": "content", "source_files": "source_files",
    "source_type": "source_type", "target": ["classification", "metadata"], "org": "org_id", "audit": true,
    "weight": "weight", "stamps": true}');
-- The knowledge tables get the state machine through the same mechanism.
SELECT memory.govern('memory.entities', '{"classify": false, "state": "lifecycle_state"}');
SELECT memory.govern('memory.claims', '{"classify": false, "state": "lifecycle_state"}');
UPDATE memory.governance_registry SET builtin = true
 WHERE relid IN ('memory.observations'::regclass, 'memory.entities'::regclass, 'memory.claims'::regclass);

-- ------------------------------------------------------------------------------------------------
-- Privileges and dump registration.

REVOKE ALL ON FUNCTION memory._allow_downgrade(oid, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION memory.reclassify(uuid, memory.classification, text) FROM PUBLIC;
GRANT USAGE ON SCHEMA memory TO PUBLIC;
GRANT SELECT ON memory.governed_tables TO PUBLIC;

SELECT pg_catalog.pg_extension_config_dump('memory.observations', '');
SELECT pg_catalog.pg_extension_config_dump('memory.entities', '');
SELECT pg_catalog.pg_extension_config_dump('memory.claims', '');
SELECT pg_catalog.pg_extension_config_dump('memory.relationships', '');
SELECT pg_catalog.pg_extension_config_dump('memory.recheck_tasks', '');
SELECT pg_catalog.pg_extension_config_dump('memory.classification_rules', '');
SELECT pg_catalog.pg_extension_config_dump('memory.governance_registry', 'WHERE NOT builtin');
