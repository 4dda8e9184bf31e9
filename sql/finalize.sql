-- Runs last: govern the managed store (now that every capability exists), grants, dump registration.

SELECT memory.govern('memory.observations', '{"content": "content", "source_files": "source_files",
    "source_type": "source_type", "target": ["classification", "metadata"], "org": "org_id", "audit": true,
    "weight": "weight", "stamps": true, "content_required": true}');
-- The knowledge tables get the state machine through the same mechanism.
SELECT memory.govern('memory.entities', '{"classify": false, "state": "lifecycle_state"}');
SELECT memory.govern('memory.claims', '{"classify": false, "state": "lifecycle_state"}');
UPDATE memory.governance_registry SET builtin = true
 WHERE relid IN ('memory.observations'::regclass, 'memory.entities'::regclass, 'memory.claims'::regclass);

-- ------------------------------------------------------------------------------------------------
-- Privileges and dump registration.

GRANT USAGE ON SCHEMA memory TO PUBLIC;
-- The internal functions that run with the caller's rights (row-level security policies, invoker
-- triggers) need the schema; what each role may execute is granted function by function below.
GRANT USAGE ON SCHEMA memory_internal TO PUBLIC;
GRANT SELECT ON memory.governed_tables TO PUBLIC;

-- Every function pins search_path, so a caller's search_path never changes what runs (SQL and
-- PL/pgSQL functions say so where they are defined; this covers the Rust ones) -- except what
-- resolves no name when it runs: immutable Rust functions (pure computations over their
-- arguments), the Rust triggers (classify, audit, lifecycle, and the drift detectors on memory's
-- own feedback tables; the only SQL they send runs under trust::AsOwner, which pins the path itself), memory_internal._classify/_classify_explain (likewise), and the inlinable
-- one-line SQL wrappers over them (bodies fully schema-qualified, no operator).
-- A SET clause would cost a GUC save/restore per row and stop the planner inlining the
-- wrappers. tests/sql/07_security.sql holds this list.
-- upgrade: reapply
DO $$
DECLARE f regprocedure;
BEGIN
    FOR f IN SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
              WHERE p.pronamespace IN ('memory'::regnamespace, 'memory_internal'::regnamespace)
                AND NOT EXISTS (SELECT 1 FROM unnest(coalesce(p.proconfig, '{}')) c WHERE pg_catalog.starts_with(c, 'search_path='))
                AND NOT (p.prolang = (SELECT l.oid FROM pg_catalog.pg_language l WHERE l.lanname = 'c') AND p.provolatile = 'i')
                AND p.proname <> ALL (ARRAY['classify_trigger', 'audit_trigger', 'lifecycle_trigger', '_feedback_polarity', '_detect_drift', 'classify', '_classify',
                    'classify_explain', '_classify_explain', 'risk_band', '_risk_band', 'derive_classification',
                    '_derive_classification', 'ema', '_ema', 'can_transition', '_can_transition', 'source_tier',
                    '_source_tier', 'is_stale', '_is_stale']) LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = pg_catalog, pg_temp', f);
    END LOOP;
END $$;

-- A database owner may set standard_conforming_strings = off (ALTER DATABASE), under which a
-- backslash in a string literal is an escape: the functions whose source has one (regular
-- expressions) read their literals as written, whatever the database says.
-- upgrade: reapply
DO $$
DECLARE f regprocedure;
BEGIN
    FOR f IN SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
              WHERE p.pronamespace IN ('memory'::regnamespace, 'memory_internal'::regnamespace) AND pg_catalog.strpos(p.prosrc, pg_catalog.chr(92)) > 0
                AND p.prolang <> (SELECT l.oid FROM pg_catalog.pg_language l WHERE l.lanname = 'c') LOOP
        EXECUTE format('ALTER FUNCTION %s SET standard_conforming_strings = on', f);
    END LOOP;
END $$;

-- EXECUTE is denied by default and granted to PUBLIC only for what any role may call: pure
-- functions, the tenant lookups about the caller itself, govern/ungovern for table owners, and
-- the internal pieces those call with the caller's rights. Everything else is granted to roles
-- by memory.setup_roles(). docs/security.md lists the SECURITY DEFINER ones and why.
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA memory, memory_internal FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    -- pure or caller-scoped public functions
    memory.classify(text, text[], text, text), memory.classify_explain(text, text[], text, text),
    memory.risk_band(memory.classification), memory.derive_classification(jsonb),
    memory.ema(float8, memory.outcome, float8, float8), memory.can_transition(memory.lifecycle_state, memory.lifecycle_state),
    memory.source_tier(text), memory.is_stale(timestamptz, int, timestamptz),
    memory.retention_policy(text, memory.classification), memory.is_expired(timestamptz, memory.classification, text, timestamptz),
    memory.acting_org(), memory.my_orgs(), memory.advisor_order(text),
    memory.govern(regclass, jsonb), memory.ungovern(regclass),
    memory.detect(text, text[]), memory.detectors(),
    -- what those call with the caller's rights
    memory_internal._classify(text, text[], text, text), memory_internal._classify_explain(text, text[], text, text),
    memory_internal._detect(text, text[]), memory_internal._detectors(),
    memory_internal._risk_band(text), memory_internal._derive_classification(text), memory_internal._ema(float8, text, float8, float8),
    memory_internal._can_transition(text, text), memory_internal._source_tier(text), memory_internal._is_stale(timestamptz, int, timestamptz),
    memory_internal._caller(), memory_internal._may_act_for(text), memory_internal._acting_org(), memory_internal._max_tier(),
    memory_internal._claim_tier(text, text, text[], text),
    -- rules of the core the caller's own statements use (pure functions)
    memory_internal._is_misleading(bigint, bigint), memory_internal._stamps_t_invalid(text), memory_internal._is_retirement(text, text),
    memory_internal._is_expired(timestamptz, int, timestamptz), memory_internal._purge_due(timestamptz, timestamptz, timestamptz, timestamptz),
    memory_internal._max_clock_skew(), memory_internal._hold_matches(text, text, text, text),
    memory_internal._tier_of(text),
    -- row-level checks that run as the writing role (CHECK constraints, invoker triggers)
    memory_internal._check_rule_pattern(text), memory_internal._knowledge_gate_open(), memory_internal._is_knowledge_admin(), memory_internal._table_of(oid),
    -- trigger functions memory.govern attaches to a caller's table (EXECUTE is checked at CREATE TRIGGER)
    memory.classify_trigger(), memory.audit_trigger(), memory.lifecycle_trigger(), memory_internal._audit_truncate(),
    memory_internal._consent_row_gate(), memory_internal._hold_guard(), memory_internal._hold_for(text, text, text), memory_internal._hold_gate_open(), memory_internal._hold_erasing(oid, text),
    memory_internal._lineage_gate_open(), memory_internal._trust_rank(memory.source_type),
    memory_internal._hold_truncate_guard(), memory_internal._hold_on_rows(regclass), memory_internal._restore_mode(),
    memory_internal._keep_table_revision(), memory_internal._drop_table_revisions(),
    memory_internal._table_lineage_floor(), memory_internal._table_lineage_ceiling(),
    -- the CHECKs of memory.observations.weight and of its items (run as the writing role)
    memory_internal._check_weight(float8), memory_internal._item_text(jsonb), memory_internal._item_key_error(text),
    memory_internal._item_namespace_error(text[]),
    -- the check of an org's dedup setting (an admin's INSERT or UPDATE of memory.org_settings)
    memory_internal._dedup_setting_check(text, float8),
    -- denied attempts, handed over by memory_ext's guards (refused unless a guard is the caller)
    memory_internal._audit_denied(text, text, text),
    -- the consent check that trigger makes (SECURITY DEFINER; answers only for orgs the caller may act for)
    memory_internal._has_consent(text, text, text)
TO PUBLIC;

-- upgrade: reapply
SELECT pg_catalog.pg_extension_config_dump('memory.observations', '');
-- upgrade: reapply
SELECT pg_catalog.pg_extension_config_dump('memory.entities', '');
-- upgrade: reapply
SELECT pg_catalog.pg_extension_config_dump('memory.claims', '');
-- upgrade: reapply
SELECT pg_catalog.pg_extension_config_dump('memory.screen_profiles', '');
-- upgrade: reapply
SELECT pg_catalog.pg_extension_config_dump('memory.relationships', '');
-- upgrade: reapply
SELECT pg_catalog.pg_extension_config_dump('memory.recheck_tasks', '');
-- upgrade: reapply
SELECT pg_catalog.pg_extension_config_dump('memory.classification_rules', '');
-- upgrade: reapply
SELECT pg_catalog.pg_extension_config_dump('memory.governance_registry', 'WHERE NOT builtin');

-- Identity sequences of the tables pg_dump keeps are kept too, so that after a restore new rows
-- (keys, history, holds, rules, policies, tasks) do not collide with restored ones.
-- upgrade: reapply
DO $$
DECLARE q text;
BEGIN
    FOR q IN SELECT pg_catalog.pg_get_serial_sequence(c.oid::regclass::text, a.attname)
               FROM pg_catalog.pg_extension e
               CROSS JOIN LATERAL unnest(e.extconfig) AS cfg(oid)
               JOIN pg_catalog.pg_class c ON c.oid = cfg.oid AND c.relkind = 'r'
               JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attidentity <> '' AND NOT a.attisdropped
              WHERE e.extname = 'memory_ext' LOOP
        PERFORM pg_catalog.pg_extension_config_dump(q::regclass, '');
    END LOOP;
END $$;

-- memory_ext tracks who calls it through SECURITY DEFINER functions (src/pg/identity.rs) from
-- the moment its library is loaded; loaded in the middle of such a call, it cannot know the
-- caller and refuses (42501) until the transaction ends. So new sessions of this database load
-- it at start.
-- upgrade: reapply
DO $$
DECLARE cur text := coalesce(current_setting('session_preload_libraries', true), '');
BEGIN
    IF NOT ('memory_ext' = ANY (string_to_array(replace(cur, ' ', ''), ','))) THEN
        EXECUTE format('ALTER DATABASE %I SET session_preload_libraries = %L', current_database(),
                       CASE WHEN btrim(cur) = '' THEN 'memory_ext' ELSE cur || ', memory_ext' END);
    END IF;
END $$;

-- The triggers that drop the backends' cached rules, policies, thresholds and org grants,
-- consents, and the audit key and salt (row triggers, as logical replication's apply fires no
-- statement trigger but TRUNCATE's) fire in every session_replication_role: a change applied by
-- logical replication or a restore run as replica must reach the caches too (they only send an
-- invalidation).
-- upgrade: reapply
DO $$
DECLARE t regclass; n name;
BEGIN
    FOR t, n IN SELECT tg.tgrelid::regclass, tg.tgname FROM pg_catalog.pg_trigger tg
               JOIN pg_catalog.pg_class c ON c.oid = tg.tgrelid
              WHERE tg.tgname IN ('memory_rules_changed', 'memory_keys_changed', 'memory_secrets_changed', 'memory_consents_changed',
                                  'memory_rules_changed_truncate', 'memory_keys_changed_truncate', 'memory_secrets_changed_truncate',
                                  'memory_consents_changed_truncate')
                AND c.relnamespace = 'memory'::regnamespace
    LOOP
        EXECUTE format('ALTER TABLE %s ENABLE ALWAYS TRIGGER %I', t, n);
    END LOOP;
END $$;
