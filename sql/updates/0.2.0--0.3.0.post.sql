-- After 0.3.0's definitions (scripts/gen_upgrade.py runs this last).

-- A weight is in [0, 1] (memory_internal._check_weight answers 22023 otherwise). Weights outside it,
-- written by clients before 0.3.0, are kept: the check then holds for new and changed rows only
-- (NOT VALID), and a WARNING says so.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM memory.observations WHERE NOT (weight >= 0 AND weight <= 1)) THEN
        RAISE WARNING 'memory.observations has weights outside [0, 1]; they are kept, and the new weight check applies to new and changed rows only'
            USING HINT = 'Set those weights into [0, 1], then: ALTER TABLE memory.observations VALIDATE CONSTRAINT observations_weight_check';
        ALTER TABLE memory.observations ADD CONSTRAINT observations_weight_check CHECK (memory_internal._check_weight(weight)) NOT VALID;
    ELSE
        ALTER TABLE memory.observations ADD CONSTRAINT observations_weight_check CHECK (memory_internal._check_weight(weight));
    END IF;
END $$;

-- Every governed table (memory_ext's own and the applications'): memory_classify and memory_hold
-- fire on every UPDATE (0.2.0 named the mapped columns in UPDATE OF, which a trigger of the
-- owner's that fires first could go around), and memory_hold_truncate refuses a TRUNCATE that
-- would take held rows. Arguments as memory.govern gave them.
DO $$
DECLARE
    r record;
    a text[];
BEGIN
    FOR r IN SELECT tg.oid, tg.tgrelid::regclass AS tbl, tg.tgname FROM pg_catalog.pg_trigger tg
               JOIN memory.governance_registry g ON g.relid::oid = tg.tgrelid
              WHERE tg.tgname IN ('memory_classify', 'memory_hold') ORDER BY tg.tgrelid, tg.tgname LOOP
        a := memory_internal._trigger_args(r.oid);
        EXECUTE format('DROP TRIGGER %I ON %s', r.tgname, r.tbl);
        IF r.tgname = 'memory_classify' THEN
            EXECUTE format('CREATE TRIGGER memory_classify BEFORE INSERT OR UPDATE ON %s FOR EACH ROW EXECUTE FUNCTION memory.classify_trigger(%s)',
                           r.tbl, (SELECT string_agg(quote_literal(x), ', ' ORDER BY n) FROM unnest(a) WITH ORDINALITY u(x, n)));
        ELSE
            EXECUTE format('CREATE TRIGGER memory_hold BEFORE UPDATE OR DELETE ON %s FOR EACH ROW WHEN (NOT memory_internal._hold_gate_open()) '
                           'EXECUTE FUNCTION memory_internal._hold_guard(%L, %L, %L, %L)', r.tbl, a[1], a[2], a[3], a[4]);
            EXECUTE format('CREATE TRIGGER memory_hold_truncate BEFORE TRUNCATE ON %s FOR EACH STATEMENT '
                           'EXECUTE FUNCTION memory_internal._hold_truncate_guard(%L, %L, %L)', r.tbl, a[1], a[2], a[3]);
        END IF;
    END LOOP;
END $$;

-- ALTER TABLE's rewrite of a governed table's rows is refused (new in 0.3.0).
CREATE EVENT TRIGGER memory_guard_governance_rewrite ON table_rewrite
    EXECUTE FUNCTION memory_internal._guard_governance_rewrite();
-- Clearance (docs/design.md#application-roles): the restrictive read policies of the tables that hold tiers (as
-- sql/security.sql makes them; on Citus-distributed tables without the subquery, as
-- memory.distribute() leaves the tenant policy).
CREATE POLICY clearance ON memory.observations AS RESTRICTIVE FOR SELECT
    USING (classification OPERATOR(pg_catalog.<=) (SELECT memory_internal._max_tier()));
CREATE POLICY clearance ON memory.observations_archive AS RESTRICTIVE FOR SELECT
    USING (classification OPERATOR(pg_catalog.<=) (SELECT memory_internal._max_tier()));
CREATE POLICY clearance ON memory.claims AS RESTRICTIVE FOR SELECT
    USING ((SELECT memory_internal._max_tier()) OPERATOR(pg_catalog.=) 'restricted'::memory.classification
           OR memory_internal._claim_tier(claim_text, subject_id, pii_fields, org_id) OPERATOR(pg_catalog.<=) (SELECT memory_internal._max_tier()));
DO $$
DECLARE t regclass;
BEGIN
    FOREACH t IN ARRAY ARRAY['memory.observations'::regclass, 'memory.observations_archive'::regclass, 'memory.claims'::regclass] LOOP
        IF memory_internal._citus_distributed(t) THEN
            PERFORM memory_internal._policy_without_subquery(t);
        END IF;
    END LOOP;
END $$;

-- The governance event triggers, off since the internal functions moved, guard again.
ALTER EVENT TRIGGER memory_guard_governance ENABLE;
ALTER EVENT TRIGGER memory_guard_governance_drop ENABLE;
-- memory.audit_events was dropped with its grant (its argument list changed): where
-- memory.setup_roles() made the roles, admins keep reading the trail, and read the new backlog.
DO $$
BEGIN
    IF to_regrole('memory_admin') IS NOT NULL AND has_schema_privilege('memory_admin', 'memory', 'USAGE') THEN
        GRANT EXECUTE ON FUNCTION memory.audit_events(text, text, int, int, text, text, timestamptz),
                                  memory_internal._audit_backlog_for_caller() TO memory_admin;
        GRANT SELECT ON memory.audit_backlog TO memory_admin;
        -- memory.recall and memory.grant_org were dropped with their grants too (new arguments).
        GRANT EXECUTE ON FUNCTION memory.recall(text, text, int, text, jsonb, real[], regclass) TO memory_reader;
        GRANT EXECUTE ON FUNCTION memory.grant_org(regrole, text, memory.classification) TO memory_admin;
    END IF;
END $$;
-- Writers forget memories and correct them (issue 35): where memory.setup_roles() made the roles,
-- as memory.setup_roles() grants it.
DO $$
BEGIN
    IF to_regrole('memory_writer') IS NOT NULL AND has_schema_privilege('memory_writer', 'memory', 'USAGE') THEN
        GRANT EXECUTE ON FUNCTION memory.forget(uuid[], text), memory.forget(regclass, text[], text) TO memory_writer;
        GRANT UPDATE (content, metadata, memory_type, source_files, source_type) ON memory.observations TO memory_writer;
    END IF;
END $$;
-- memory-mcp's audit door (issue 39): where memory.setup_roles() made the roles, as it grants it.
DO $$
BEGIN
    IF to_regrole('memory_reader') IS NOT NULL AND has_schema_privilege('memory_reader', 'memory', 'USAGE') THEN
        GRANT EXECUTE ON FUNCTION memory_internal._mcp_tool_invoked(text, text, int) TO memory_reader;
    END IF;
END $$;
