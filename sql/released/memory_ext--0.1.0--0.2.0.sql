-- memory_ext 0.1.0 -> 0.2.0. Run by ALTER EXTENSION memory_ext UPDATE (see README "Upgrading").
-- Statements in order: what 0.1.0 had in another shape is changed first (tables, the audit log's
-- partitions and indexes, policies, functions whose result or arguments changed), then every
-- object that is new or different in 0.2.0 is created or replaced, as the 0.2.0 install script
-- creates it. tests/upgrade/run.sh checks that the result equals a fresh install of 0.2.0.
\echo Use "ALTER EXTENSION memory_ext UPDATE TO '0.2.0'" to load this file. \quit

-- memory_ext needs a UTF-8 database: its classifiers, audit payloads (JSON, hashed as UTF-8),
-- pseudonyms and lexicons read text as UTF-8, and in another encoding non-ASCII values would
-- fail or be misread. Refused before anything is created.
DO $$
BEGIN
    IF pg_catalog.getdatabaseencoding() OPERATOR(pg_catalog.<>) 'UTF8' THEN
        RAISE EXCEPTION 'memory_ext requires a UTF-8 database; database "%" is %', pg_catalog.current_database(), pg_catalog.getdatabaseencoding()
            USING ERRCODE = '0A000', HINT = 'Create the database with ENCODING ''UTF8'' (for example CREATE DATABASE .. ENCODING ''UTF8'' TEMPLATE template0).';
    END IF;
END $$;

-- Functions 0.2.0 no longer has, or whose result type or argument names changed (CREATE OR
-- REPLACE cannot change those): dropped here, created again below where they still exist.
DROP FUNCTION memory._org_rules(text);
DROP FUNCTION memory._derive_classification(jsonb);   -- now _derive_classification(text)
DROP FUNCTION memory.audit_verify(text);              -- gains the `pending` column
DROP FUNCTION memory._audit_verify(text);
DROP FUNCTION memory._audit_current_key();           -- gains `made`

-- Feedback history is per (session, org, observation): another tenant's row with the same uuid
-- shares nothing.
ALTER TABLE memory.observation_weight_history
    DROP CONSTRAINT observation_weight_history_session_id_observation_id_key,
    ADD CONSTRAINT observation_weight_history_session_id_org_id_observation_id_key UNIQUE (session_id, org_id, observation_id);

-- A hold's reason must have a non-space character (0.1.0 let a tab or a newline through). A hold
-- whose reason is whitespace is kept as it is: the check then holds for new and changed rows only
-- (NOT VALID), and a WARNING says so.
ALTER TABLE memory.legal_holds DROP CONSTRAINT legal_holds_reason_check;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM memory.legal_holds WHERE reason OPERATOR(pg_catalog.!~) '[^[:space:]]') THEN
        RAISE WARNING 'memory.legal_holds has holds whose reason is only whitespace; they are kept, and the new reason check applies to new and changed holds only'
            USING HINT = 'Give those holds a reason, then: ALTER TABLE memory.legal_holds VALIDATE CONSTRAINT legal_holds_reason_check';
        ALTER TABLE memory.legal_holds ADD CONSTRAINT legal_holds_reason_check CHECK (reason ~ '[^[:space:]]') NOT VALID;
    ELSE
        ALTER TABLE memory.legal_holds ADD CONSTRAINT legal_holds_reason_check CHECK (reason ~ '[^[:space:]]');
    END IF;
END $$;

-- The audit log survives a dump restored in another month (issue 13): monthly partitions are
-- ordinary tables with their own indexes, not members of the extension, and the parent has no
-- index (0.2.0's CREATE EXTENSION makes only the default partition). 0.1.0 made the first months'
-- partitions members and indexed the parent: those partitions leave the extension (pg_dump then
-- writes them, their indexes and their rows), each partition gets the indexes
-- audit_ensure_partitions gives a new one, and the parent's indexes (with their per-partition
-- children) go.
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT c.oid::regclass AS rel, c.relname
               FROM pg_catalog.pg_inherits i JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid
              WHERE i.inhparent = 'memory.audit_log'::regclass AND c.relname <> 'audit_log_default'
              ORDER BY c.relname
    LOOP
        IF EXISTS (SELECT 1 FROM pg_catalog.pg_depend d
                    WHERE d.classid = 'pg_catalog.pg_class'::regclass AND d.objid = r.rel::oid
                      AND d.refclassid = 'pg_catalog.pg_extension'::regclass AND d.deptype = 'e') THEN
            EXECUTE format('ALTER EXTENSION memory_ext DROP TABLE %s', r.rel);
        END IF;
        EXECUTE format('CREATE INDEX %I ON %s (chain_id COLLATE "C", seq)', r.relname || '_chain_seq', r.rel);
        EXECUTE format('CREATE INDEX %I ON %s (workspace_id, recorded_at) WHERE workspace_id IS NOT NULL',
                       r.relname || '_workspace', r.rel);
    END LOOP;
END $$;
DROP INDEX memory.audit_log_chain_seq;
DROP INDEX memory.audit_log_workspace;

-- Row-level security by the role's bound org (SPEC §8) replaces 0.1.0's policies, which trusted
-- the memory.org_id setting; the new policies are created below for every tenant table.
DROP POLICY tenant ON memory.entities;
DROP POLICY tenant ON memory.claims;
DROP POLICY tenant ON memory.relationships;
DROP POLICY tenant ON memory.recheck_tasks;

-- ---------------------------------------------------------------------------------------------
-- New and changed objects, as 0.2.0 creates them.
-- ---------------------------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION "_audit_append_events"(
	"events" TEXT 
) RETURNS INT 
VOLATILE 
LANGUAGE c 
AS 'MODULE_PATHNAME', 'audit_append_many_wrapper';

CREATE OR REPLACE FUNCTION "_audit_append_system_text"(
	"event_type" TEXT, 
	"payload" TEXT, 
	"org_id" TEXT 
) RETURNS bigint 
VOLATILE 
LANGUAGE c 
AS 'MODULE_PATHNAME', 'audit_append_system_wrapper';

CREATE OR REPLACE FUNCTION "_audit_integrate"(
	"explicit" bool 
) RETURNS bigint 
STRICT VOLATILE 
LANGUAGE c 
AS 'MODULE_PATHNAME', 'audit_integrate_sql_wrapper';

CREATE OR REPLACE FUNCTION "_audit_integrating"() RETURNS bool 
STRICT VOLATILE 
LANGUAGE c 
AS 'MODULE_PATHNAME', 'audit_integrating_wrapper';

CREATE OR REPLACE FUNCTION "_delegated_caller"(
	"role" TEXT 
) RETURNS bool 
VOLATILE 
LANGUAGE c 
AS 'MODULE_PATHNAME', 'delegated_caller_wrapper';

CREATE OR REPLACE FUNCTION "_table_of"(
	"rel" oid 
) RETURNS oid 
STRICT STABLE 
LANGUAGE c 
AS 'MODULE_PATHNAME', 'table_of_wrapper';

CREATE OR REPLACE FUNCTION "_audit_move_gate"(
	"open" bool 
) RETURNS bool 
STRICT VOLATILE 
LANGUAGE c 
AS 'MODULE_PATHNAME', 'audit_move_gate_wrapper';

CREATE OR REPLACE FUNCTION "_audit_move_gate_open"() RETURNS bool 
STRICT VOLATILE 
LANGUAGE c 
AS 'MODULE_PATHNAME', 'audit_move_gate_open_wrapper';

CREATE OR REPLACE FUNCTION "_audit_trigger_args"(
	"id" TEXT, 
	"content" TEXT, 
	"org" TEXT, 
	"project" TEXT, 
	"workspace" TEXT, 
	"user" TEXT, 
	"tier" TEXT, 
	"tier_json" bool DEFAULT false 
) RETURNS TEXT[] 
IMMUTABLE PARALLEL SAFE 
LANGUAGE c 
AS 'MODULE_PATHNAME', 'audit_trigger_args_wrapper';

CREATE OR REPLACE FUNCTION "_audit_verify"(
	"chain_id" TEXT 
) RETURNS TABLE (
	"chain_id" TEXT,  
	"entries" bigint,  
	"ok" bool,  
	"first_bad_seq" bigint,  
	"reason" TEXT,  
	"pruned" bigint,  
	"pending" bigint  
)
VOLATILE 
LANGUAGE c 
AS 'MODULE_PATHNAME', 'audit_verify_wrapper';

CREATE OR REPLACE FUNCTION "_caller"() RETURNS oid 
STRICT STABLE PARALLEL SAFE 
LANGUAGE c 
AS 'MODULE_PATHNAME', 'caller_sql_wrapper';

CREATE OR REPLACE FUNCTION "_classify_trigger_args"(
	"content" TEXT, 
	"source_files" TEXT, 
	"source_type" TEXT, 
	"targets" TEXT[], 
	"org" TEXT, 
	"stamps" TEXT[] DEFAULT NULL 
) RETURNS TEXT[] 
IMMUTABLE PARALLEL SAFE 
LANGUAGE c 
AS 'MODULE_PATHNAME', 'classify_trigger_args_wrapper';

CREATE OR REPLACE FUNCTION "_close_governance_gate"() RETURNS bool 
STRICT VOLATILE 
LANGUAGE c 
AS 'MODULE_PATHNAME', 'close_governance_gate_wrapper';

CREATE OR REPLACE FUNCTION "_column_type_message"(
	"role" TEXT, 
	"column" TEXT, 
	"table" TEXT 
) RETURNS TEXT 
IMMUTABLE STRICT PARALLEL SAFE 
LANGUAGE c 
AS 'MODULE_PATHNAME', 'column_type_message_wrapper';

CREATE OR REPLACE FUNCTION "_consent_gate"(
	"open" bool 
) RETURNS bool 
STRICT VOLATILE 
LANGUAGE c 
AS 'MODULE_PATHNAME', 'consent_gate_wrapper';

CREATE OR REPLACE FUNCTION "_consent_gate_open"() RETURNS bool 
STRICT VOLATILE 
LANGUAGE c 
AS 'MODULE_PATHNAME', 'consent_gate_open_wrapper';

CREATE OR REPLACE FUNCTION "_creating_extension"() RETURNS bool 
STRICT VOLATILE 
LANGUAGE c 
AS 'MODULE_PATHNAME', 'creating_extension_wrapper';

CREATE OR REPLACE FUNCTION "_derive_classification"(
	"label" TEXT 
) RETURNS TEXT 
IMMUTABLE PARALLEL SAFE 
LANGUAGE c 
AS 'MODULE_PATHNAME', 'derive_label_wrapper';

CREATE OR REPLACE FUNCTION "_exec_as_caller"(
	"sql" TEXT 
) RETURNS bigint 
STRICT VOLATILE 
LANGUAGE c 
AS 'MODULE_PATHNAME', 'exec_as_caller_wrapper';

CREATE OR REPLACE FUNCTION "_exec_as_table_owner"(
	"tbl" oid, 
	"sql" TEXT, 
	"args" TEXT[] DEFAULT '{}' 
) RETURNS jsonb 
STRICT VOLATILE 
LANGUAGE c 
AS 'MODULE_PATHNAME', 'exec_as_table_owner_wrapper';

CREATE OR REPLACE FUNCTION "_governance_gate_open"(
	"tbl" oid 
) RETURNS bool 
STRICT STABLE 
LANGUAGE c 
AS 'MODULE_PATHNAME', 'governance_gate_open_wrapper';

CREATE OR REPLACE FUNCTION "_is_expired"(
	"created_at" timestamp with time zone, 
	"retention_days" INT, 
	"at" timestamp with time zone 
) RETURNS bool 
IMMUTABLE PARALLEL SAFE 
LANGUAGE c 
AS 'MODULE_PATHNAME', 'is_expired_wrapper';

CREATE OR REPLACE FUNCTION "_is_misleading"(
	"failed_sessions" bigint, 
	"successful_sessions" bigint 
) RETURNS bool 
IMMUTABLE STRICT PARALLEL SAFE 
LANGUAGE c 
AS 'MODULE_PATHNAME', 'is_misleading_sql_wrapper';

CREATE OR REPLACE FUNCTION "_is_retirement"(
	"from" TEXT, 
	"to" TEXT 
) RETURNS bool 
IMMUTABLE STRICT PARALLEL SAFE 
LANGUAGE c 
AS 'MODULE_PATHNAME', 'is_retirement_wrapper';

CREATE OR REPLACE FUNCTION "_open_governance_gate"(
	"tbl" oid 
) RETURNS bool 
VOLATILE 
LANGUAGE c 
AS 'MODULE_PATHNAME', 'open_governance_gate_wrapper';

CREATE OR REPLACE FUNCTION "_purge_due"(
	"soft_deleted_at" timestamp with time zone, 
	"purge_after" timestamp with time zone, 
	"expires_at" timestamp with time zone, 
	"at" timestamp with time zone 
) RETURNS bool 
IMMUTABLE PARALLEL SAFE 
LANGUAGE c 
AS 'MODULE_PATHNAME', 'purge_due_wrapper';

CREATE OR REPLACE FUNCTION "_redacted_marker"() RETURNS TEXT 
IMMUTABLE STRICT PARALLEL SAFE 
LANGUAGE c 
AS 'MODULE_PATHNAME', 'redacted_marker_wrapper';

CREATE OR REPLACE FUNCTION "_resolve_retention"(
	"restricted" bool, 
	"bfsi" bool, 
	"has_org" bool, 
	"org_days" INT, 
	"org_grace" INT, 
	"has_platform" bool, 
	"platform_days" INT, 
	"platform_grace" INT 
) RETURNS TABLE (
	"retention_days" INT,  
	"soft_delete_grace_days" INT,  
	"source" TEXT  
)
IMMUTABLE PARALLEL SAFE 
LANGUAGE c 
AS 'MODULE_PATHNAME', 'resolve_retention_wrapper';

CREATE OR REPLACE FUNCTION "_restore_mode"() RETURNS bool 
STRICT STABLE PARALLEL SAFE 
LANGUAGE c 
AS 'MODULE_PATHNAME', 'restore_mode_wrapper';

CREATE OR REPLACE FUNCTION "_set_superseding"(
	"claim" uuid 
) RETURNS bool 
VOLATILE 
LANGUAGE c 
AS 'MODULE_PATHNAME', 'set_superseding_wrapper';

CREATE OR REPLACE FUNCTION "_stamps_t_invalid"(
	"to" TEXT 
) RETURNS bool 
IMMUTABLE STRICT PARALLEL SAFE 
LANGUAGE c 
AS 'MODULE_PATHNAME', 'stamps_t_invalid_wrapper';

CREATE OR REPLACE FUNCTION "_superseding"() RETURNS TEXT 
STRICT VOLATILE 
LANGUAGE c 
AS 'MODULE_PATHNAME', 'superseding_wrapper';

CREATE OR REPLACE FUNCTION "audit_trigger"() RETURNS TRIGGER LANGUAGE c AS 'MODULE_PATHNAME', 'memory_audit_trigger_checked';

CREATE OR REPLACE FUNCTION "classify_trigger"() RETURNS TRIGGER LANGUAGE c AS 'MODULE_PATHNAME', 'memory_classify_trigger_checked';

CREATE OR REPLACE FUNCTION "lifecycle_trigger"() RETURNS TRIGGER LANGUAGE c AS 'MODULE_PATHNAME', 'memory_lifecycle_trigger_checked';

CREATE OR REPLACE FUNCTION "rules_changed"() RETURNS TRIGGER LANGUAGE c AS 'MODULE_PATHNAME', 'memory_rules_changed_checked';

-- The cache invalidations fire per row, so changes applied by logical replication (whose apply
-- fires row triggers only) reach the caches too, and on TRUNCATE.
DROP TRIGGER memory_rules_changed ON memory.classification_rules;
CREATE TRIGGER memory_rules_changed AFTER INSERT OR UPDATE OR DELETE ON memory.classification_rules
    FOR EACH ROW EXECUTE FUNCTION memory.rules_changed();
CREATE TRIGGER memory_rules_changed_truncate AFTER TRUNCATE ON memory.classification_rules
    FOR EACH STATEMENT EXECUTE FUNCTION memory.rules_changed();
DROP TRIGGER memory_rules_changed ON memory.retention_policies;
CREATE TRIGGER memory_rules_changed AFTER INSERT OR UPDATE OR DELETE ON memory.retention_policies
    FOR EACH ROW EXECUTE FUNCTION memory.rules_changed();
CREATE TRIGGER memory_rules_changed_truncate AFTER TRUNCATE ON memory.retention_policies
    FOR EACH STATEMENT EXECUTE FUNCTION memory.rules_changed();
DROP TRIGGER memory_rules_changed ON memory.memory_type_policies;
CREATE TRIGGER memory_rules_changed AFTER INSERT OR UPDATE OR DELETE ON memory.memory_type_policies
    FOR EACH ROW EXECUTE FUNCTION memory.rules_changed();
CREATE TRIGGER memory_rules_changed_truncate AFTER TRUNCATE ON memory.memory_type_policies
    FOR EACH STATEMENT EXECUTE FUNCTION memory.rules_changed();
DROP TRIGGER memory_rules_changed ON memory.org_settings;
CREATE TRIGGER memory_rules_changed AFTER INSERT OR UPDATE OR DELETE ON memory.org_settings
    FOR EACH ROW EXECUTE FUNCTION memory.rules_changed();
CREATE TRIGGER memory_rules_changed_truncate AFTER TRUNCATE ON memory.org_settings
    FOR EACH STATEMENT EXECUTE FUNCTION memory.rules_changed();

CREATE OR REPLACE FUNCTION memory._blank(t text)
RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp
AS $$ SELECT t IS NULL OR t !~ '[^[:space:]]' $$;

CREATE TABLE memory.org_grants (
    role_name  name NOT NULL,
    org_id     text NOT NULL CHECK (org_id = '*' OR (btrim(org_id) <> '' AND length(org_id) <= 200)),
    granted_by name NOT NULL,
    granted_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (role_name, org_id)
);

REVOKE ALL ON memory.org_grants FROM PUBLIC;

CREATE TRIGGER memory_rules_changed AFTER INSERT OR UPDATE OR DELETE ON memory.org_grants
    FOR EACH ROW EXECUTE FUNCTION memory.rules_changed();
CREATE TRIGGER memory_rules_changed_truncate AFTER TRUNCATE ON memory.org_grants
    FOR EACH STATEMENT EXECUTE FUNCTION memory.rules_changed();

COMMENT ON TABLE memory.org_grants IS
  'Tenant binding: the orgs each role may act for (''*'' = every org). Written by memory.grant_org / memory.revoke_org; roles by name, so a dump restores onto another cluster''s roles of the same names.';

CREATE OR REPLACE FUNCTION memory._is_unrestricted_role(r oid)
RETURNS boolean LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
    SELECT r IS NOT NULL AND (
           coalesce((SELECT a.rolsuper FROM pg_catalog.pg_authid a WHERE a.oid OPERATOR(pg_catalog.=) r), false)
        OR coalesce((SELECT pg_catalog.pg_has_role(r, e.extowner, 'USAGE') FROM pg_catalog.pg_extension e
                      WHERE e.extname OPERATOR(pg_catalog.=) 'memory_ext'), false))
$$;

CREATE OR REPLACE FUNCTION memory._may_act_for_role(r oid, org text)
RETURNS boolean LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
    SELECT r IS NOT NULL AND (memory._is_unrestricted_role(r) OR EXISTS (
        SELECT 1 FROM memory.org_grants g JOIN pg_catalog.pg_roles ro ON ro.rolname OPERATOR(pg_catalog.=) g.role_name
         WHERE (g.org_id OPERATOR(pg_catalog.=) '*' OR g.org_id OPERATOR(pg_catalog.=) coalesce(org, ''))
           AND pg_catalog.pg_has_role(r, ro.oid, 'USAGE')))
$$;

CREATE OR REPLACE FUNCTION memory._may_act_for(org text)
RETURNS boolean LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$ SELECT memory._may_act_for_role(memory._caller(), org) $$;

CREATE OR REPLACE FUNCTION memory._is_unrestricted()
RETURNS boolean LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$ SELECT memory._is_unrestricted_role(memory._caller()) $$;

CREATE OR REPLACE FUNCTION memory._acting_org()
RETURNS text LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
    SET citus.allow_nested_distributed_execution = on
AS $$
DECLARE
    r   oid := memory._caller();
    s   text := nullif(current_setting('memory.org_id', true), '');
    one text;
    n   int;
BEGIN
    IF r IS NULL THEN
        RETURN NULL;
    END IF;
    IF s IS NOT NULL THEN
        RETURN CASE WHEN memory._may_act_for_role(r, s) THEN s END;
    END IF;
    -- A superuser "has" every role (pg_has_role), so for it only the grants of itself and of the
    -- roles it is really a member of (pg_auth_members) count, not every other role's.
    IF coalesce((SELECT a.rolsuper FROM pg_catalog.pg_authid a WHERE a.oid OPERATOR(pg_catalog.=) r), false) THEN
        WITH RECURSIVE m(oid) AS (
            SELECT r
            UNION
            SELECT am.roleid FROM pg_catalog.pg_auth_members am JOIN m ON am.member OPERATOR(pg_catalog.=) m.oid)
        SELECT count(DISTINCT g.org_id), min(g.org_id) INTO n, one
          FROM memory.org_grants g JOIN pg_catalog.pg_roles ro ON ro.rolname OPERATOR(pg_catalog.=) g.role_name
         WHERE ro.oid IN (SELECT m.oid FROM m);
    ELSE
        SELECT count(DISTINCT g.org_id), min(g.org_id) INTO n, one
          FROM memory.org_grants g JOIN pg_catalog.pg_roles ro ON ro.rolname OPERATOR(pg_catalog.=) g.role_name
         WHERE pg_catalog.pg_has_role(r, ro.oid, 'USAGE');
    END IF;
    RETURN CASE WHEN n OPERATOR(pg_catalog.=) 1 AND one OPERATOR(pg_catalog.<>) '*' THEN one END;
END $$;

CREATE OR REPLACE FUNCTION memory._scope_org()
RETURNS text LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE a text := memory._acting_org();
BEGIN
    IF a IS NOT NULL THEN
        RETURN a;
    END IF;
    IF memory._is_unrestricted() THEN
        RETURN NULL;
    END IF;
    RAISE EXCEPTION 'role % acts for no org', coalesce(memory._caller()::regrole::text, '(none)')
        USING ERRCODE = '42501', HINT = 'SET memory.org_id to one of the role''s orgs (see memory.grant_org).';
END $$;

CREATE OR REPLACE FUNCTION memory._require_org(org text)
RETURNS text LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NOT memory._may_act_for(org) THEN
        RAISE EXCEPTION 'role % may not act for org "%"', coalesce(memory._caller()::regrole::text, '(none)'), coalesce(org, '')
            USING ERRCODE = '42501', HINT = 'An owner or a memory_admin of the org binds roles to it with memory.grant_org(role, org_id).';
    END IF;
    RETURN org;
END $$;

CREATE OR REPLACE FUNCTION memory.acting_org()
RETURNS text LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
AS $$ SELECT memory._acting_org() $$;

COMMENT ON FUNCTION memory.acting_org() IS
  'The org this session acts for: memory.org_id when the role may act for it, else the role''s only org, else NULL (row-level security then shows nothing).';

CREATE OR REPLACE FUNCTION memory.my_orgs()
RETURNS SETOF text LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
    SELECT DISTINCT g.org_id FROM memory.org_grants g JOIN pg_catalog.pg_roles ro ON ro.rolname OPERATOR(pg_catalog.=) g.role_name
     WHERE pg_catalog.pg_has_role(memory._caller(), ro.oid, 'USAGE') ORDER BY 1
$$;

COMMENT ON FUNCTION memory.my_orgs() IS 'The orgs granted to the calling role (directly or through roles it inherits); ''*'' means every org.';

CREATE OR REPLACE FUNCTION memory._may_administer(org text, target oid DEFAULT NULL)
RETURNS boolean LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
    SELECT memory._is_unrestricted() OR (
        org OPERATOR(pg_catalog.<>) '*'
        AND (target IS NULL OR (
            -- an org admin binds only roles it administers, never memory_ext's group roles
            pg_catalog.pg_has_role(memory._caller(), target, 'MEMBER WITH ADMIN OPTION')
            AND (SELECT r.rolname FROM pg_catalog.pg_roles r WHERE r.oid OPERATOR(pg_catalog.=) target)
                OPERATOR(pg_catalog.<>) ALL (ARRAY['memory_reader', 'memory_writer', 'memory_admin']::name[])))
        AND pg_catalog.to_regrole('memory_admin') IS NOT NULL
        AND memory._caller() IS NOT NULL
        AND pg_catalog.pg_has_role(memory._caller(), 'memory_admin', 'USAGE')
        AND memory._may_act_for(org))
$$;

CREATE OR REPLACE FUNCTION memory.grant_org(role regrole, org_id text)
RETURNS boolean LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE n int;
BEGIN
    IF role IS NULL OR org_id IS NULL OR (org_id OPERATOR(pg_catalog.<>) '*' AND (memory._blank(org_id) OR length(org_id) > 200)) THEN
        RAISE EXCEPTION 'memory.grant_org needs a role and an org id (1-200 characters, or ''*'')' USING ERRCODE = '22023';
    END IF;
    IF NOT memory._may_administer(org_id, role::oid) THEN
        RAISE EXCEPTION 'role % may not grant org "%"', coalesce(memory._caller()::regrole::text, '(none)'), org_id
            USING ERRCODE = '42501', HINT = 'The extension owner, a superuser, or a memory_admin of that org holding ADMIN OPTION on the role grants it; only the first two grant ''*'' or bind memory_ext''s group roles.';
    END IF;
    INSERT INTO memory.org_grants (role_name, org_id, granted_by)
    SELECT r.rolname, grant_org.org_id, coalesce(memory._caller()::regrole::text, current_user)
      FROM pg_catalog.pg_roles r WHERE r.oid OPERATOR(pg_catalog.=) grant_org.role::oid
    ON CONFLICT DO NOTHING;
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n > 0 THEN
        PERFORM memory._audit_append_system('memory.org.grant',
            jsonb_build_object('role', role::text, 'orgId', org_id), CASE WHEN org_id = '*' THEN NULL ELSE org_id END);
    END IF;
    RETURN n > 0;
END $$;

COMMENT ON FUNCTION memory.grant_org(regrole, text) IS
  'Bind a role to an org (''*'': every org). By the extension owner, a superuser, or a memory_admin of that org. True when the grant is new; audited as memory.org.grant.';

CREATE OR REPLACE FUNCTION memory.revoke_org(role regrole, org_id text)
RETURNS boolean LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n int;
    -- The name first: on Citus, org_grants is a reference table, and a change of it may not read
    -- a catalog in a subquery.
    rname name := (SELECT r.rolname FROM pg_catalog.pg_roles r WHERE r.oid OPERATOR(pg_catalog.=) revoke_org.role::oid);
BEGIN
    IF role IS NULL OR org_id IS NULL THEN
        RAISE EXCEPTION 'memory.revoke_org needs a role and an org id' USING ERRCODE = '22023';
    END IF;
    IF NOT memory._may_administer(org_id, role::oid) THEN
        RAISE EXCEPTION 'role % may not revoke org "%"', coalesce(memory._caller()::regrole::text, '(none)'), org_id
            USING ERRCODE = '42501';
    END IF;
    DELETE FROM memory.org_grants g
     WHERE g.role_name OPERATOR(pg_catalog.=) rname
       AND g.org_id OPERATOR(pg_catalog.=) revoke_org.org_id;
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n > 0 THEN
        PERFORM memory._audit_append_system('memory.org.revoke',
            jsonb_build_object('role', role::text, 'orgId', org_id), CASE WHEN org_id = '*' THEN NULL ELSE org_id END);
    END IF;
    RETURN n > 0;
END $$;

COMMENT ON FUNCTION memory.revoke_org(regrole, text) IS
  'Unbind a role from an org. By the extension owner, a superuser, or a memory_admin of that org. True when a grant was removed; audited as memory.org.revoke.';

REVOKE ALL ON FUNCTION memory._is_unrestricted_role(oid), memory._may_act_for_role(oid, text),
                       memory.grant_org(regrole, text), memory.revoke_org(regrole, text),
                       memory._open_governance_gate(oid), memory._exec_as_table_owner(oid, text, text[]) FROM PUBLIC;

SELECT pg_catalog.pg_extension_config_dump('memory.org_grants', '');

CREATE OR REPLACE FUNCTION memory.risk_band(tier memory.classification)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
AS $$ SELECT memory._risk_band(tier::pg_catalog.text) $$;

CREATE OR REPLACE FUNCTION memory.derive_classification(metadata jsonb)
RETURNS memory.classification LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT memory._derive_classification(metadata OPERATOR(pg_catalog.->>) 'classification')::memory.classification $$;

CREATE OR REPLACE VIEW memory.governed_tables AS
SELECT r.relid::regclass AS table_name,
       r.options,
       ARRAY(SELECT t.tgname::text FROM pg_catalog.pg_trigger t
              WHERE t.tgrelid = r.relid AND t.tgname LIKE 'memory\_%' ORDER BY 1) AS triggers,
       r.builtin,
       r.governed_at,
       r.governed_by
  FROM memory.governance_registry r
  JOIN pg_catalog.pg_class c ON c.oid = r.relid
 
 WHERE pg_catalog.pg_has_role(c.relowner, 'USAGE') OR pg_catalog.has_table_privilege(c.oid, 'SELECT')
    OR pg_catalog.has_table_privilege(c.oid, 'INSERT');

COMMENT ON VIEW memory.governed_tables IS 'Each governed table the caller owns or may read or write, its column mapping and the triggers attached.';

CREATE OR REPLACE FUNCTION memory._column_type_is(tbl oid, col text, typ regtype, nullable boolean DEFAULT false)
RETURNS boolean LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE WHEN col IS NULL THEN nullable ELSE EXISTS (
        SELECT 1 FROM pg_attribute a WHERE a.attrelid = tbl AND a.attname = col AND a.attnum > 0 AND NOT a.attisdropped
           AND (a.atttypid = typ OR (typ = 'text'::regtype AND a.atttypid = 'varchar'::regtype))) END
$$;

CREATE OR REPLACE FUNCTION memory._valid_governance_options(opts jsonb)
RETURNS boolean LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp
AS $$
    SELECT jsonb_typeof(opts) OPERATOR(pg_catalog.=) 'object' AND NOT EXISTS (
        SELECT 1 FROM jsonb_each(opts) e
         WHERE NOT (e.key OPERATOR(pg_catalog.=) ANY (ARRAY['classify', 'content', 'source_files', 'source_type', 'target', 'org',
                       'backfill', 'backfilled', 'audit', 'audit_tier', 'id', 'project', 'workspace', 'user', 'weight',
                       'soft_deleted', 'stamps', 'state', 'consent']))
            OR NOT (jsonb_typeof(e.value) OPERATOR(pg_catalog.=) ANY (ARRAY['string', 'boolean', 'null', 'number'])
                    OR (jsonb_typeof(e.value) OPERATOR(pg_catalog.=) 'array'
                        AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements(e.value) x WHERE jsonb_typeof(x) OPERATOR(pg_catalog.<>) 'string'))
                    OR (jsonb_typeof(e.value) OPERATOR(pg_catalog.=) 'object'
                        AND NOT EXISTS (SELECT 1 FROM jsonb_each(e.value) y
                                         WHERE jsonb_typeof(y.value) OPERATOR(pg_catalog.<>) ALL (ARRAY['string', 'null'])))))
$$;

CREATE OR REPLACE FUNCTION memory._owns_table(tbl regclass)
RETURNS boolean LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
    SELECT memory._caller() IS NOT NULL AND (memory._is_unrestricted() OR EXISTS (
        SELECT 1 FROM pg_catalog.pg_class c
         WHERE c.oid OPERATOR(pg_catalog.=) tbl
           AND pg_catalog.pg_has_role(memory._caller(), c.relowner, 'USAGE')
           AND c.relnamespace OPERATOR(pg_catalog.<>) 'memory'::pg_catalog.regnamespace))
$$;

CREATE OR REPLACE FUNCTION memory._register_governed(tbl regclass, opts jsonb)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF tbl IS NULL OR NOT memory._owns_table(tbl) THEN
        RAISE EXCEPTION 'role % does not own table %', coalesce(memory._caller()::regrole::text, '(none)'), tbl
            USING ERRCODE = '42501', HINT = 'Only the owner of a table governs it (with memory.govern).';
    END IF;
    IF NOT memory._valid_governance_options(opts) THEN
        RAISE EXCEPTION 'governance options of % are not in memory.govern''s shape', tbl USING ERRCODE = '22023';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_trigger t WHERE t.tgrelid OPERATOR(pg_catalog.=) tbl AND t.tgname LIKE 'memory\_%'
                      AND t.tgfoid IN (SELECT p.oid FROM pg_proc p WHERE p.pronamespace OPERATOR(pg_catalog.=) 'memory'::regnamespace)) THEN
        RAISE EXCEPTION 'table % carries no memory_ext trigger', tbl USING ERRCODE = '42501';
    END IF;
    -- Forget tables that were dropped since they were governed.
    DELETE FROM memory.governance_registry g WHERE NOT EXISTS (SELECT 1 FROM pg_class c WHERE c.oid OPERATOR(pg_catalog.=) g.relid);
    INSERT INTO memory.governance_registry AS g (relid, options, governed_by)
    VALUES (tbl, opts, coalesce(memory._caller()::regrole::text, current_user)::name)
    ON CONFLICT (relid) DO UPDATE SET options = excluded.options, governed_at = now(), governed_by = excluded.governed_by;
END $$;

CREATE OR REPLACE FUNCTION memory._unregister_governed(tbl regclass)
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF tbl IS NULL OR NOT memory._owns_table(tbl) THEN
        RAISE EXCEPTION 'role % does not own table %', coalesce(memory._caller()::regrole::text, '(none)'), tbl USING ERRCODE = '42501';
    END IF;
    IF EXISTS (SELECT 1 FROM pg_trigger t WHERE t.tgrelid OPERATOR(pg_catalog.=) tbl AND t.tgname LIKE 'memory\_%'
                  AND t.tgfoid IN (SELECT p.oid FROM pg_proc p WHERE p.pronamespace OPERATOR(pg_catalog.=) 'memory'::regnamespace)) THEN
        RAISE EXCEPTION 'table % still carries memory_ext triggers', tbl USING ERRCODE = '42501';
    END IF;
    DELETE FROM memory.governance_registry g WHERE g.relid OPERATOR(pg_catalog.=) tbl;
    IF FOUND THEN
        PERFORM memory._audit_append_system('memory.govern.ungovern', jsonb_build_object('table', tbl::text), NULL);
        RETURN true;
    END IF;
    RETURN false;
END $$;

CREATE OR REPLACE FUNCTION memory._audit_truncate()
RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF TG_OP OPERATOR(pg_catalog.<>) 'TRUNCATE' OR TG_LEVEL OPERATOR(pg_catalog.<>) 'STATEMENT'
       OR NOT EXISTS (SELECT 1 FROM memory.governance_registry g WHERE g.relid OPERATOR(pg_catalog.=) TG_RELID) THEN
        -- On Citus a TRUNCATE of a distributed table fires on its shards as well: the firing on
        -- the table itself, on the coordinator, records it.
        IF TG_OP OPERATOR(pg_catalog.=) 'TRUNCATE' AND TG_LEVEL OPERATOR(pg_catalog.=) 'STATEMENT' AND memory._citus_shard(TG_RELID) THEN
            RETURN NULL;
        END IF;
        RAISE EXCEPTION 'memory._audit_truncate is memory.govern''s AFTER TRUNCATE trigger of governed tables'
            USING ERRCODE = '39P01', HINT = 'Attach it with memory.govern.';
    END IF;
    PERFORM memory._audit_append_system('memory.govern.truncate',
        jsonb_build_object('table', TG_RELID::regclass::text), NULL);
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION memory._govern_classify(tbl regclass, opts jsonb, eff jsonb)
RETURNS jsonb LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    k text;
    c_content text;
    c_files text;
    c_type text;
    c_org text;
    targets text[];
    t oid;
    args text;
    cols text[];
    missing text;
    n bigint;
    a_id text;
    a_user text;
    smap jsonb;
    stamp_cols text[];
BEGIN
    -- Classification: on unless "classify": false (or only a state column is named, on a table
    -- without a content column). Column names default to the conventional ones.
    IF coalesce((opts->>'classify')::boolean,
                NOT (opts ? 'state') OR opts ?| ARRAY['content', 'source_files', 'source_type', 'target', 'stamps', 'backfill']
                OR memory._has_column(tbl, 'content')) THEN
        c_content := coalesce(opts->>'content', 'content');
        t := memory._column_type(tbl, c_content, 'content');
        IF t NOT IN ('text'::regtype, 'varchar'::regtype) THEN
            RAISE EXCEPTION '%, not %', memory._column_type_message('content', c_content, tbl::text), t::regtype USING ERRCODE = '22023';
        END IF;
        c_files := coalesce(opts->>'source_files', CASE WHEN memory._has_column(tbl, 'source_files') THEN 'source_files' END);
        IF c_files IS NOT NULL AND memory._column_type(tbl, c_files, 'source_files') NOT IN ('text[]'::regtype, 'varchar[]'::regtype) THEN
            RAISE EXCEPTION '%', memory._column_type_message('source_files', c_files, tbl::text) USING ERRCODE = '22023';
        END IF;
        c_type := coalesce(opts->>'source_type', CASE WHEN memory._has_column(tbl, 'source_type') THEN 'source_type' END);
        IF c_type IS NOT NULL AND memory._column_type(tbl, c_type, 'source_type') NOT IN ('memory.source_type'::regtype, 'text'::regtype, 'varchar'::regtype) THEN
            RAISE EXCEPTION '%', memory._column_type_message('source_type', c_type, tbl::text) USING ERRCODE = '22023';
        END IF;
        c_org := coalesce(opts->>'org', CASE WHEN memory._has_column(tbl, 'org_id') THEN 'org_id' END);
        IF c_org IS NOT NULL AND memory._column_type(tbl, c_org, 'org') NOT IN ('text'::regtype, 'varchar'::regtype) THEN
            RAISE EXCEPTION '%', memory._column_type_message('org', c_org, tbl::text) USING ERRCODE = '22023';
        END IF;
        targets := CASE WHEN opts->'target' IS NULL THEN ARRAY['classification']
                        WHEN jsonb_typeof(opts->'target') = 'string' THEN ARRAY[opts->>'target']
                        WHEN jsonb_typeof(opts->'target') = 'array'
                             THEN ARRAY(SELECT jsonb_array_elements_text(opts->'target'))
                   END;
        IF targets IS NULL OR cardinality(targets) = 0 THEN
            RAISE EXCEPTION 'option "target" must be a column name or an array of them' USING ERRCODE = '22023';
        END IF;
        FOREACH k IN ARRAY targets LOOP
            t := memory._column_type(tbl, k, 'target');
            IF t NOT IN ('memory.classification'::regtype, 'text'::regtype, 'varchar'::regtype, 'jsonb'::regtype) THEN
                RAISE EXCEPTION '%, not %', memory._column_type_message('target', k, tbl::text), t::regtype USING ERRCODE = '22023';
            END IF;
        END LOOP;

        -- Retention stamps, written with the tier: "stamps": true takes the conventional column
        -- names; an object maps them (created_at, expires_at, purge_after, archive_at, memory_type,
        -- and for run_retention soft_deleted_at, soft_delete_reason).
        IF jsonb_typeof(opts->'stamps') = 'object' OR opts->'stamps' = 'true'::jsonb THEN
            smap := jsonb_build_object('created_at', 'created_at', 'expires_at', 'expires_at', 'purge_after', 'purge_after',
                        'archive_at', 'archive_at',
                        'memory_type', CASE WHEN memory._has_column(tbl, 'memory_type') THEN 'memory_type' END,
                        'soft_deleted_at', CASE WHEN memory._has_column(tbl, 'soft_deleted_at') THEN 'soft_deleted_at' END,
                        'soft_delete_reason', CASE WHEN memory._has_column(tbl, 'soft_delete_reason') THEN 'soft_delete_reason' END);
            IF jsonb_typeof(opts->'stamps') = 'object' THEN
                FOR k IN SELECT jsonb_object_keys(opts->'stamps') LOOP
                    IF NOT k = ANY (ARRAY['created_at', 'expires_at', 'purge_after', 'archive_at', 'memory_type',
                                          'soft_deleted_at', 'soft_delete_reason']) THEN
                        RAISE EXCEPTION 'unknown stamps key "%"', k USING ERRCODE = '22023';
                    END IF;
                END LOOP;
                smap := smap || (opts->'stamps');
            END IF;
            FOREACH k IN ARRAY ARRAY['created_at', 'expires_at', 'purge_after', 'archive_at', 'soft_deleted_at'] LOOP
                CONTINUE WHEN smap->>k IS NULL AND k = 'soft_deleted_at';
                IF smap->>k IS NULL OR smap->>k LIKE '%,%'
                   OR memory._column_type(tbl, smap->>k, k) <> 'timestamptz'::regtype THEN
                    RAISE EXCEPTION '% (for retention stamps)', memory._column_type_message(k, coalesce(smap->>k, ''), tbl::text) USING ERRCODE = '22023';
                END IF;
            END LOOP;
            IF smap->>'memory_type' IS NOT NULL AND (smap->>'memory_type' LIKE '%,%'
               OR memory._column_type(tbl, smap->>'memory_type', 'memory_type') NOT IN ('memory.memory_type'::regtype, 'text'::regtype)) THEN
                RAISE EXCEPTION '%', memory._column_type_message('memory_type', smap->>'memory_type', tbl::text) USING ERRCODE = '22023';
            END IF;
            IF smap->>'soft_delete_reason' IS NOT NULL THEN
                PERFORM memory._column_type(tbl, smap->>'soft_delete_reason', 'soft_delete_reason');
            END IF;
            stamp_cols := ARRAY[smap->>'created_at', smap->>'expires_at', smap->>'purge_after', smap->>'archive_at',
                                coalesce(smap->>'memory_type', '')];
            -- run_retention finds rows by id and checks holds by org and subject.
            a_id := coalesce(a_id, opts->>'id', CASE WHEN memory._has_column(tbl, 'id') THEN 'id' END);
            a_user := coalesce(a_user, opts->>'user', CASE WHEN memory._has_column(tbl, 'user_id') THEN 'user_id' END);
            IF a_id IS NOT NULL THEN PERFORM memory._column_type(tbl, a_id, 'id'); END IF;
            IF a_user IS NOT NULL THEN PERFORM memory._column_type(tbl, a_user, 'user'); END IF;
            eff := eff || jsonb_build_object('stamps', smap, 'id', a_id, 'user', a_user);
        ELSIF opts ? 'stamps' AND opts->'stamps' <> 'false'::jsonb THEN
            RAISE EXCEPTION 'option "stamps" must be true, false or an object of column names' USING ERRCODE = '22023';
        END IF;
        -- Fire on UPDATE only when an input or a target is in the SET list.
        cols := ARRAY[c_content] || targets;
        IF c_files IS NOT NULL THEN cols := cols || c_files; END IF;
        IF c_type IS NOT NULL THEN cols := cols || c_type; END IF;
        IF c_org IS NOT NULL THEN cols := cols || c_org; END IF;

        -- The trigger-argument protocol is memory_core::protocol's (built and parsed there).
        args := (SELECT string_agg(quote_literal(a), ', ')
                   FROM unnest(memory._classify_trigger_args(c_content, c_files, c_type, targets, c_org, stamp_cols)) a);
        PERFORM memory._exec_as_caller(format('DROP TRIGGER IF EXISTS memory_classify ON %s', tbl));
        PERFORM memory._exec_as_caller(format('CREATE TRIGGER memory_classify BEFORE INSERT OR UPDATE OF %s ON %s '
                       'FOR EACH ROW EXECUTE FUNCTION memory.classify_trigger(%s)',
                       (SELECT string_agg(DISTINCT quote_ident(x), ', ') FROM unnest(cols) x), tbl, args));
        eff := eff || jsonb_build_object('classify', true, 'content', c_content, 'source_files', c_files,
                                         'source_type', c_type, 'org', c_org, 'target', to_jsonb(targets));
        -- Existing rows without a tier: touching the content column fires the trigger, which
        -- classifies a row that holds no tier yet.
        IF coalesce((opts->>'backfill')::boolean, false) THEN
            SELECT string_agg(CASE WHEN memory._column_type(tbl, x, 'target') = 'jsonb'::regtype
                                   THEN format('(%1$I IS NULL OR NOT %1$I ? %2$L)', x, 'classification')
                                   ELSE format('%I IS NULL', x) END, ' OR ')
              INTO missing FROM unnest(targets) x;
            -- The backfill fires the table's own triggers, the caller's code: the governance gate
            -- is closed while it runs, so that code cannot drop or replace memory_ext triggers.
            PERFORM memory._close_governance_gate();
            n := memory._exec_as_caller(format('UPDATE %s SET %I = %I WHERE %s', tbl, c_content, c_content, missing));
            PERFORM memory._open_governance_gate(tbl);
            -- (A table governed for the first time is not in the registry yet, which the event
            -- trigger protects: whatever the caller's code did to memory_classify during the
            -- backfill, it is removed and created again as govern means it.)
            IF NOT EXISTS (SELECT 1 FROM pg_trigger tg WHERE tg.tgrelid = tbl AND tg.tgname = 'memory_classify'
                              AND tg.tgenabled IN ('O', 'A') AND tg.tgfoid = 'memory.classify_trigger'::regproc AND tg.tgqual IS NULL) THEN
                RAISE EXCEPTION 'a trigger of % changed memory_classify during the backfill', tbl
                    USING ERRCODE = '42501', HINT = 'Governance is changed by memory.govern and memory.ungovern only.';
            END IF;
            PERFORM memory._exec_as_caller(format('DROP TRIGGER IF EXISTS memory_classify ON %s', tbl));
            PERFORM memory._exec_as_caller(format('CREATE TRIGGER memory_classify BEFORE INSERT OR UPDATE OF %s ON %s '
                           'FOR EACH ROW EXECUTE FUNCTION memory.classify_trigger(%s)',
                           (SELECT string_agg(DISTINCT quote_ident(x), ', ') FROM unnest(cols) x), tbl, args));
            eff := eff || jsonb_build_object('backfilled', n);
        END IF;
    ELSE
        IF opts ? 'stamps' AND opts->'stamps' <> 'false'::jsonb THEN
            RAISE EXCEPTION 'retention stamps follow the tier: "stamps" needs "classify"' USING ERRCODE = '22023';
        END IF;
        PERFORM memory._exec_as_caller(format('DROP TRIGGER IF EXISTS memory_classify ON %s', tbl));
        eff := eff || jsonb_build_object('classify', false);
    END IF;
    RETURN eff;
END $$;

CREATE OR REPLACE FUNCTION memory._govern_audit(tbl regclass, opts jsonb, eff jsonb)
RETURNS jsonb LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    k text;
    c_content text;
    c_org text;
    targets text[];
    args text;
    missing text;
    a_id text;
    a_project text;
    a_workspace text;
    a_user text;
    a_tier text;
BEGIN
    -- What earlier capabilities resolved (memory.govern passes their effective mapping along).
    c_content := eff->>'content';
    c_org := eff->>'org';
    targets := CASE WHEN eff ? 'target' THEN ARRAY(SELECT jsonb_array_elements_text(eff->'target')) END;
    a_id := eff->>'id';
    a_project := eff->>'project';
    a_workspace := eff->>'workspace';
    a_user := eff->>'user';

    -- Audit: statement triggers with transition tables; the chain is written once per statement.
    IF coalesce((opts->>'audit')::boolean, false) THEN
        c_content := coalesce(c_content, opts->>'content', CASE WHEN memory._has_column(tbl, 'content') THEN 'content' END);
        c_org := coalesce(c_org, opts->>'org', CASE WHEN memory._has_column(tbl, 'org_id') THEN 'org_id' END);
        a_id := coalesce(opts->>'id', CASE WHEN memory._has_column(tbl, 'id') THEN 'id' END);
        a_project := coalesce(opts->>'project', CASE WHEN memory._has_column(tbl, 'project_id') THEN 'project_id' END);
        a_workspace := coalesce(opts->>'workspace', CASE WHEN memory._has_column(tbl, 'workspace_id') THEN 'workspace_id' END);
        a_user := coalesce(opts->>'user', CASE WHEN memory._has_column(tbl, 'user_id') THEN 'user_id' END);
        a_tier := coalesce(targets[1], CASE WHEN jsonb_typeof(opts->'target') = 'string' THEN opts->>'target' END,
                           CASE WHEN memory._has_column(tbl, 'classification') THEN 'classification' END);
        FOREACH k IN ARRAY ARRAY['id', 'content', 'org', 'project', 'workspace', 'user', 'tier'] LOOP
            missing := CASE k WHEN 'id' THEN a_id WHEN 'content' THEN c_content WHEN 'org' THEN c_org
                              WHEN 'project' THEN a_project WHEN 'workspace' THEN a_workspace
                              WHEN 'user' THEN a_user ELSE a_tier END;
            CONTINUE WHEN missing IS NULL;
            PERFORM memory._column_type(tbl, missing, k);
        END LOOP;
        args := (SELECT string_agg(quote_literal(a), ', ')
                   FROM unnest(memory._audit_trigger_args(a_id, c_content, c_org, a_project, a_workspace, a_user, a_tier,
                                 a_tier IS NOT NULL AND memory._column_type(tbl, a_tier, 'tier') = 'jsonb'::regtype)) a);
        PERFORM memory._exec_as_caller(format('DROP TRIGGER IF EXISTS memory_audit_ins ON %s', tbl));
        PERFORM memory._exec_as_caller(format('DROP TRIGGER IF EXISTS memory_audit_del ON %s', tbl));
        PERFORM memory._exec_as_caller(format('DROP TRIGGER IF EXISTS memory_audit_upd ON %s', tbl));
        PERFORM memory._exec_as_caller(format('CREATE TRIGGER memory_audit_ins AFTER INSERT ON %s REFERENCING NEW TABLE AS memory_new '
                       'FOR EACH STATEMENT EXECUTE FUNCTION memory.audit_trigger(%s)', tbl, args));
        PERFORM memory._exec_as_caller(format('CREATE TRIGGER memory_audit_del AFTER DELETE ON %s REFERENCING OLD TABLE AS memory_old '
                       'FOR EACH STATEMENT EXECUTE FUNCTION memory.audit_trigger(%s)', tbl, args));
        IF a_id IS NOT NULL AND a_tier IS NOT NULL THEN
            PERFORM memory._exec_as_caller(format('CREATE TRIGGER memory_audit_upd AFTER UPDATE ON %s REFERENCING OLD TABLE AS memory_old NEW TABLE AS memory_new '
                           'FOR EACH STATEMENT EXECUTE FUNCTION memory.audit_trigger(%s)', tbl, args));
        END IF;
        eff := eff || jsonb_build_object('audit', true, 'id', a_id, 'project', a_project, 'workspace', a_workspace,
                                         'user', a_user, 'audit_tier', a_tier, 'org', c_org, 'content', c_content);
    ELSE
        PERFORM memory._exec_as_caller(format('DROP TRIGGER IF EXISTS memory_audit_ins ON %s', tbl));
        PERFORM memory._exec_as_caller(format('DROP TRIGGER IF EXISTS memory_audit_del ON %s', tbl));
        PERFORM memory._exec_as_caller(format('DROP TRIGGER IF EXISTS memory_audit_upd ON %s', tbl));
        eff := eff || jsonb_build_object('audit', false);
    END IF;
    RETURN eff;
END $$;

CREATE OR REPLACE FUNCTION memory._govern_weight(tbl regclass, opts jsonb, eff jsonb)
RETURNS jsonb LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c_org text;
    a_id text;
    a_project text;
BEGIN
    -- What earlier capabilities resolved (memory.govern passes their effective mapping along).
    c_org := eff->>'org';
    a_id := eff->>'id';
    a_project := eff->>'project';

    -- Feedback weights: record_outcome finds ids of this table (uuid id column) and updates the
    -- weight column. Needs classification or audit too (a governed table carries a trigger).
    IF opts ? 'weight' THEN
        IF jsonb_typeof(opts->'weight') <> 'string' THEN
            RAISE EXCEPTION 'option "weight" must be a column name' USING ERRCODE = '22023';
        END IF;
        IF memory._column_type(tbl, opts->>'weight', 'weight') <> 'float8'::regtype THEN
            RAISE EXCEPTION '%', memory._column_type_message('weight', opts->>'weight', tbl::text) USING ERRCODE = '22023';
        END IF;
        a_id := coalesce(a_id, opts->>'id', CASE WHEN memory._has_column(tbl, 'id') THEN 'id' END);
        IF a_id IS NULL OR memory._column_type(tbl, a_id, 'id') <> 'uuid'::regtype THEN
            RAISE EXCEPTION 'a table with a weight column needs a uuid id column (option "id")' USING ERRCODE = '22023',
                HINT = 'memory.record_outcome takes uuid ids.';
        END IF;
        c_org := coalesce(c_org, opts->>'org', CASE WHEN memory._has_column(tbl, 'org_id') THEN 'org_id' END);
        a_project := coalesce(a_project, opts->>'project', CASE WHEN memory._has_column(tbl, 'project_id') THEN 'project_id' END);
        eff := eff || jsonb_build_object('weight', opts->>'weight', 'id', a_id, 'org', c_org, 'project', a_project,
                                         'soft_deleted', CASE WHEN memory._has_column(tbl, 'soft_deleted_at') THEN 'soft_deleted_at' END);
    END IF;
    RETURN eff;
END $$;

CREATE OR REPLACE FUNCTION memory._govern_state(tbl regclass, opts jsonb, eff jsonb)
RETURNS jsonb LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t oid;
    c_state text;
BEGIN
    -- Lifecycle: the state machine of SPEC §5 on one column (memory.lifecycle_state or text).
    IF opts ? 'state' AND jsonb_typeof(opts->'state') NOT IN ('null') AND opts->'state' <> 'false'::jsonb THEN
        IF jsonb_typeof(opts->'state') <> 'string' THEN
            RAISE EXCEPTION 'option "state" must be a column name' USING ERRCODE = '22023';
        END IF;
        c_state := opts->>'state';
        t := memory._column_type(tbl, c_state, 'state');
        IF t NOT IN ('memory.lifecycle_state'::regtype, 'text'::regtype, 'varchar'::regtype) THEN
            RAISE EXCEPTION '%, not %', memory._column_type_message('state', c_state, tbl::text), t::regtype
                USING ERRCODE = '22023';
        END IF;
        PERFORM memory._exec_as_caller(format('DROP TRIGGER IF EXISTS memory_lifecycle ON %s', tbl));
        -- An enum value is always a state: only changes need checking. Text is checked on insert too.
        PERFORM memory._exec_as_caller(format('CREATE TRIGGER memory_lifecycle BEFORE %s ON %s FOR EACH ROW EXECUTE FUNCTION memory.lifecycle_trigger(%L)',
                       CASE WHEN t = 'memory.lifecycle_state'::regtype THEN format('UPDATE OF %I', c_state)
                            ELSE format('INSERT OR UPDATE OF %I', c_state) END,
                       tbl, c_state));
        eff := eff || jsonb_build_object('state', c_state);
    ELSE
        PERFORM memory._exec_as_caller(format('DROP TRIGGER IF EXISTS memory_lifecycle ON %s', tbl));
    END IF;
    RETURN eff;
END $$;

CREATE FUNCTION "_hold_gate"(
	"open" bool
) RETURNS bool
STRICT VOLATILE
LANGUAGE c
AS 'MODULE_PATHNAME', 'hold_gate_wrapper';

CREATE FUNCTION "_hold_gate_open"() RETURNS bool
STRICT VOLATILE
LANGUAGE c
AS 'MODULE_PATHNAME', 'hold_gate_open_wrapper';

-- Legal holds block writes (SPEC MX006): an UPDATE of the mapped content, org, user or id
-- column, or a DELETE, of a held row of a governed table (memory.observations among them) fails,
-- naming the hold. memory.govern attaches it as
--   BEFORE UPDATE OF <those columns> OR DELETE ... WHEN (NOT memory._hold_gate_open())
-- with TG_ARGV org, user, id and content columns ('' when the table has none). It runs with the
-- writer's rights and reads only the mapped columns, as text; the hold lookup is
-- memory._hold_for, which takes those plain values. memory_ext opens the hold gate only around
-- its own move of held rows (retention's archive step); erasure, revocation and retention skip
-- held rows themselves.
CREATE FUNCTION memory._hold_for(p_org text, p_user text, p_id text)
RETURNS bigint LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE hold bigint;
BEGIN
    IF p_org IS NULL THEN
        RETURN NULL;
    END IF;
    -- An org the caller may not act for: 42501 (no answer about another org's holds).
    PERFORM memory._require_org(p_org);
    SELECT h.id INTO hold FROM memory.legal_holds h
     WHERE h.released_at IS NULL AND h.org_id = p_org
       AND ((h.observation_id IS NOT NULL AND h.observation_id::text = p_id)
            OR (h.observation_id IS NULL AND (h.user_id IS NULL OR h.user_id = p_user)))
     ORDER BY h.id LIMIT 1;
    RETURN hold;
END $$;

CREATE FUNCTION memory._hold_guard()
RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    cols text[];
    vals text[];
    hold bigint;
BEGIN
    IF TG_WHEN OPERATOR(pg_catalog.<>) 'BEFORE' OR TG_LEVEL OPERATOR(pg_catalog.<>) 'ROW' OR TG_OP NOT IN ('UPDATE', 'DELETE')
       OR TG_NARGS OPERATOR(pg_catalog.<>) 4 THEN
        RAISE EXCEPTION 'memory._hold_guard is a BEFORE UPDATE OR DELETE row trigger attached by memory.govern' USING ERRCODE = '39P01';
    END IF;
    IF memory._restore_mode() THEN
        RETURN CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END;
    END IF;
    -- The old row's org, user and id, as text ('' columns read as NULL).
    cols := ARRAY[TG_ARGV[0], TG_ARGV[1], TG_ARGV[2]];
    EXECUTE 'SELECT ARRAY[' || (SELECT string_agg(CASE WHEN c = '' THEN 'NULL::text' ELSE format('($1).%I::text', c) END, ', ' ORDER BY o)
                                  FROM unnest(cols) WITH ORDINALITY u(c, o)) || ']'
       INTO vals USING OLD;
    hold := memory._hold_for(vals[1], vals[2], vals[3]);
    IF hold IS NOT NULL THEN
        RAISE EXCEPTION 'legal hold % covers this row of %: % is blocked', hold, TG_RELID::regclass,
                        CASE WHEN TG_OP = 'DELETE' THEN 'DELETE' ELSE 'UPDATE of ' || array_to_string(array_remove(ARRAY[TG_ARGV[3], TG_ARGV[0], TG_ARGV[1], TG_ARGV[2]], ''), ', ') END
            USING ERRCODE = 'MX006',
                  HINT = 'A memory_admin releases the hold (UPDATE memory.legal_holds SET released_at = now() WHERE id = ...).';
    END IF;
    RETURN CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END;
END $$;

CREATE OR REPLACE FUNCTION memory.govern(tbl regclass, options jsonb DEFAULT '{}')
RETURNS jsonb LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
-- (DROP TRIGGER IF EXISTS of a first govern would print a NOTICE per trigger.)
SET client_min_messages = warning
AS $$
DECLARE
    known    constant text[] := ARRAY['classify', 'content', 'source_files', 'source_type', 'target', 'org', 'backfill',
                                      'audit', 'id', 'project', 'workspace', 'user', 'weight', 'stamps', 'state', 'consent'];
    k        text;
    opts     jsonb := coalesce(options, '{}'::jsonb);
    eff      jsonb := '{}'::jsonb;
    prev     jsonb;
    h_org     text;
    h_content text;
    h_user    text;
    h_id      text;
BEGIN
    IF tbl IS NULL THEN
        RAISE EXCEPTION 'memory.govern needs a table' USING ERRCODE = '22023';
    END IF;
    IF jsonb_typeof(opts) <> 'object' THEN
        RAISE EXCEPTION 'options must be a JSON object, got %', jsonb_typeof(opts) USING ERRCODE = '22023';
    END IF;
    -- Only the table's owner governs it; the gate lets this call replace memory_ext triggers,
    -- which the event trigger refuses to anything else (SPEC §8).
    IF NOT memory._owns_table(tbl) THEN
        RAISE EXCEPTION 'role % does not own table %', coalesce(memory._caller()::regrole::text, '(none)'), tbl
            USING ERRCODE = '42501', HINT = 'Only the owner of a table governs it.';
    END IF;
    -- Only plain tables without inheritance or rules: a partition, a child table or a DO INSTEAD
    -- rule would let writes go around the triggers.
    IF (SELECT c.relkind FROM pg_class c WHERE c.oid = tbl) <> 'r'
       OR EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhrelid = tbl OR i.inhparent = tbl) THEN
        RAISE EXCEPTION '% is not a plain table without inheritance or partitions', tbl
            USING ERRCODE = '22023', HINT = 'Govern a plain table; partitioned and inherited tables could write around its triggers.';
    END IF;
    IF EXISTS (SELECT 1 FROM pg_rewrite r WHERE r.ev_class = tbl AND r.rulename <> '_RETURN') THEN
        RAISE EXCEPTION '% has rules', tbl USING ERRCODE = '22023', HINT = 'Drop its rules first: they could divert writes around governance.';
    END IF;
    -- memory_ext's own tables are governed by CREATE EXTENSION alone.
    IF EXISTS (SELECT 1 FROM memory.governance_registry g WHERE g.relid = tbl AND g.builtin) THEN
        RAISE EXCEPTION '% is managed by memory_ext', tbl USING ERRCODE = '55000';
    END IF;
    prev := (SELECT g.options FROM memory.governance_registry g WHERE g.relid = tbl);
    PERFORM memory._open_governance_gate(tbl);
    FOR k IN SELECT jsonb_object_keys(opts) LOOP
        IF NOT k = ANY (known) THEN
            RAISE EXCEPTION 'unknown memory.govern option "%"', k
                USING ERRCODE = '22023', HINT = 'Known options: ' || array_to_string(known, ', ');
        END IF;
    END LOOP;

    -- One function per capability, each adding its part of the effective mapping.
    eff := memory._govern_classify(tbl, opts, eff);
    eff := memory._govern_audit(tbl, opts, eff);
    eff := memory._govern_weight(tbl, opts, eff);
    eff := memory._govern_state(tbl, opts, eff);
    eff := memory._govern_consent(tbl, opts, eff);

    IF EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = tbl AND tgname LIKE 'memory\_%' AND tgname NOT IN ('memory_audit_truncate', 'memory_hold')) THEN
        -- TRUNCATE is recorded on the platform chain whatever else is attached.
        PERFORM memory._exec_as_caller(format('DROP TRIGGER IF EXISTS memory_audit_truncate ON %s', tbl));
        PERFORM memory._exec_as_caller(format('CREATE TRIGGER memory_audit_truncate AFTER TRUNCATE ON %s FOR EACH STATEMENT EXECUTE FUNCTION memory._audit_truncate()', tbl));
        -- Legal holds block content changes and deletes of held rows (memory._hold_guard).
        h_org := coalesce(eff->>'org', opts->>'org', CASE WHEN memory._has_column(tbl, 'org_id') THEN 'org_id' END);
        PERFORM memory._exec_as_caller(format('DROP TRIGGER IF EXISTS memory_hold ON %s', tbl));
        IF h_org IS NOT NULL THEN
            h_content := coalesce(eff->>'content', opts->>'content', CASE WHEN memory._has_column(tbl, 'content') THEN 'content' END);
            h_user := coalesce(eff->>'user', opts->>'user', CASE WHEN memory._has_column(tbl, 'user_id') THEN 'user_id' END);
            h_id := coalesce(eff->>'id', opts->>'id', CASE WHEN memory._has_column(tbl, 'id') THEN 'id' END);
            PERFORM memory._exec_as_caller(format(
                'CREATE TRIGGER memory_hold BEFORE UPDATE OF %s OR DELETE ON %s FOR EACH ROW WHEN (NOT memory._hold_gate_open()) '
                'EXECUTE FUNCTION memory._hold_guard(%L, %L, %L, %L)',
                (SELECT string_agg(DISTINCT quote_ident(c), ', ') FROM unnest(ARRAY[h_org, h_user, h_id, h_content]) c WHERE c IS NOT NULL),
                tbl, h_org, coalesce(h_user, ''), coalesce(h_id, ''), coalesce(h_content, '')));
        END IF;

        PERFORM memory._register_governed(tbl, eff);
        -- Every change of a table's governance is on the platform chain (a weaker mapping too).
        IF prev IS DISTINCT FROM eff AND NOT memory._creating_extension() THEN
            PERFORM memory._audit_append_system('memory.govern.attach',
                jsonb_build_object('table', tbl::text, 'previous', prev, 'options', eff), NULL);
        END IF;
    ELSE
        PERFORM memory._exec_as_caller(format('DROP TRIGGER IF EXISTS memory_audit_truncate ON %s', tbl));
        PERFORM memory._exec_as_caller(format('DROP TRIGGER IF EXISTS memory_hold ON %s', tbl));
        PERFORM memory._unregister_governed(tbl);
    END IF;
    PERFORM memory._close_governance_gate();
    RETURN eff;
END $$;

CREATE OR REPLACE FUNCTION memory.ungovern(tbl regclass)
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    tg name;
    was boolean;
BEGIN
    IF tbl IS NULL THEN
        RAISE EXCEPTION 'memory.ungovern needs a table' USING ERRCODE = '22023';
    END IF;
    IF EXISTS (SELECT 1 FROM memory.governance_registry g WHERE g.relid = tbl AND g.builtin) THEN
        RAISE EXCEPTION '% is managed by memory_ext and stays governed', tbl USING ERRCODE = '55000';
    END IF;
    IF NOT memory._owns_table(tbl) THEN
        RAISE EXCEPTION 'role % does not own table %', coalesce(memory._caller()::regrole::text, '(none)'), tbl
            USING ERRCODE = '42501', HINT = 'Only the owner of a table ungoverns it.';
    END IF;
    PERFORM memory._open_governance_gate(tbl);
    FOR tg IN SELECT t.tgname FROM pg_trigger t WHERE t.tgrelid = tbl AND t.tgname LIKE 'memory\_%'
                 AND t.tgfoid IN (SELECT p.oid FROM pg_proc p WHERE p.pronamespace = 'memory'::regnamespace) LOOP
        PERFORM memory._exec_as_caller(format('DROP TRIGGER %I ON %s', tg, tbl));
    END LOOP;
    was := memory._unregister_governed(tbl);
    PERFORM memory._close_governance_gate();
    RETURN was;
END $$;

CREATE FUNCTION memory._local_relation(t regclass, org text)
RETURNS regclass LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE s bigint;
BEGIN
    IF NOT memory._citus_distributed(t) THEN
        RETURN t;
    END IF;
    EXECUTE 'SELECT pg_catalog.get_shard_id_for_distribution_column($1, $2)' INTO s USING t, org;
    RETURN pg_catalog.to_regclass(t::pg_catalog.text OPERATOR(pg_catalog.||) '_' OPERATOR(pg_catalog.||) s::pg_catalog.text);
END $$;

-- The org of the row `row_id` of `tbl` (a memory_ext table keyed by (org_id, id)) that the caller
-- may act for, or NULL. Checked here, for the caller, never inside a statement: on Citus a
-- statement over a distributed table runs on a worker, as the definer. Ids are unique per org
-- there: an id of several of the caller's orgs is the org the session acts for (memory.org_id)
-- when that org holds it, and otherwise the greatest org's (bytewise), as in
-- memory.record_outcome. Not granted to PUBLIC.
CREATE FUNCTION memory._org_of(tbl regclass, row_id uuid)
RETURNS text LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c text;
    s text := nullif(pg_catalog.current_setting('memory.org_id', true), '');
BEGIN
    -- (Two statements: on Citus a statement over the table runs on a worker, and the caller's
    -- check must not go there with it.)
    IF s IS NOT NULL AND memory._may_act_for(s) THEN
        EXECUTE pg_catalog.format('SELECT EXISTS (SELECT 1 FROM %s t WHERE t.org_id OPERATOR(pg_catalog.=) $1 AND t.id OPERATOR(pg_catalog.=) $2)', tbl)
           INTO STRICT c USING s, row_id;
        IF c::boolean THEN
            RETURN s;
        END IF;
    END IF;
    FOR c IN EXECUTE pg_catalog.format('SELECT DISTINCT t.org_id COLLATE "C" FROM %s t WHERE t.id OPERATOR(pg_catalog.=) $1 ORDER BY 1 DESC', tbl)
               USING row_id LOOP
        IF memory._may_act_for(c) THEN
            RETURN c;
        END IF;
    END LOOP;
    RETURN NULL;
END $$;

CREATE FUNCTION memory._reclassify_in(org text, observation_id uuid, tier memory.classification, reason text, who jsonb)
RETURNS memory.classification LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE prev memory.classification;
BEGIN
    PERFORM memory._delegated(who);
    SELECT o.classification INTO prev FROM memory.observations o
     WHERE o.org_id OPERATOR(pg_catalog.=) org AND o.id OPERATOR(pg_catalog.=) observation_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'observation % does not exist', observation_id USING ERRCODE = '23503';
    END IF;
    PERFORM memory._allow_downgrade(memory._local_relation('memory.observations', org)::oid, reason);
    UPDATE memory.observations o
       SET classification = tier,
           metadata = o.metadata || jsonb_build_object('classification', tier::text)
     WHERE o.org_id OPERATOR(pg_catalog.=) org AND o.id OPERATOR(pg_catalog.=) observation_id;
    PERFORM memory._allow_downgrade(NULL);
    PERFORM memory._delegated_done(who);
    RETURN prev;
END $$;

CREATE OR REPLACE FUNCTION memory.reclassify(observation_id uuid, tier memory.classification, reason text)
RETURNS memory.classification LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    org  text;
    prev memory.classification;
BEGIN
    IF observation_id IS NULL OR tier IS NULL THEN
        RAISE EXCEPTION 'memory.reclassify needs an observation id and a tier' USING ERRCODE = '22023';
    END IF;
    IF memory._blank(reason) THEN
        RAISE EXCEPTION 'memory.reclassify needs a reason' USING ERRCODE = '22023',
            HINT = 'The reason is recorded with the change.';
    END IF;
    org := memory._org_of('memory.observations', observation_id);
    IF org IS NULL THEN
        RAISE EXCEPTION 'observation % does not exist', observation_id USING ERRCODE = '23503';
    END IF;
    -- Values as literals: Citus sends a call with constant arguments to the org's node (with
    -- the caller, whom the events written there name).
    EXECUTE pg_catalog.format('SELECT r FROM memory._reclassify_in(%L, %L::pg_catalog.uuid, %L::memory.classification, %L, %L::jsonb) r',
                              org, observation_id, tier, reason, memory._who_if_distributed()) INTO prev;
    RETURN prev;
END $$;

CREATE OR REPLACE FUNCTION memory._audit_current_key(OUT key_id int, OUT key bytea, OUT salt bytea, OUT made boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    made := false;
    SELECT k.key_id, k.key INTO key_id, key FROM memory.audit_keys k WHERE k.retired_at IS NULL ORDER BY k.key_id DESC LIMIT 1;
    IF NOT FOUND THEN
        made := true;
        INSERT INTO memory.audit_keys (key) VALUES (memory._random_bytes(32)) RETURNING audit_keys.key_id, audit_keys.key INTO key_id, key;
    END IF;
    SELECT s.value INTO salt FROM memory.audit_secrets s WHERE s.name = 'pseudonym_salt';
    IF NOT FOUND THEN
        made := true;
        INSERT INTO memory.audit_secrets VALUES ('pseudonym_salt', memory._random_bytes(32))
        ON CONFLICT (name) DO NOTHING;
        SELECT s.value INTO salt FROM memory.audit_secrets s WHERE s.name = 'pseudonym_salt';
    END IF;
END $$;

CREATE TRIGGER memory_keys_changed AFTER INSERT OR UPDATE OR DELETE ON memory.audit_keys
    FOR EACH ROW EXECUTE FUNCTION memory.rules_changed();
CREATE TRIGGER memory_keys_changed_truncate AFTER TRUNCATE ON memory.audit_keys
    FOR EACH STATEMENT EXECUTE FUNCTION memory.rules_changed();

CREATE TRIGGER memory_secrets_changed AFTER INSERT OR UPDATE OR DELETE ON memory.audit_secrets
    FOR EACH ROW EXECUTE FUNCTION memory.rules_changed();
CREATE TRIGGER memory_secrets_changed_truncate AFTER TRUNCATE ON memory.audit_secrets
    FOR EACH STATEMENT EXECUTE FUNCTION memory.rules_changed();

CREATE INDEX audit_log_default_chain_seq ON memory.audit_log_default (chain_id COLLATE "C", seq);

CREATE INDEX audit_log_default_workspace ON memory.audit_log_default (workspace_id, recorded_at) WHERE workspace_id IS NOT NULL;

CREATE TABLE memory.audit_pending (
    id           bigint NOT NULL,
    ord          bigint NOT NULL,
    chain_id     text NOT NULL,
    event_type   text NOT NULL,
    written_at   timestamptz NOT NULL,
    actor_id     text,
    org_id       text,
    project_id   text,
    workspace_id text,
    payload      jsonb NOT NULL,
    key_id       int NOT NULL,
    pending_hash bytea NOT NULL
) WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 20000,
        autovacuum_vacuum_insert_scale_factor = 0, autovacuum_vacuum_insert_threshold = 20000);

REVOKE ALL ON memory.audit_pending FROM PUBLIC;

COMMENT ON TABLE memory.audit_pending IS
  'Audit events written in deferred mode, not yet chained: pending_hash = HMAC-SHA256(key[key_id], JCS(event with seq = -id, prev_hash = 32 zero bytes, recorded_at = written_at)). The sequencer chains and deletes them.';

CREATE OR REPLACE FUNCTION memory._audit_pending_guard()
RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF TG_OP = 'DELETE' AND memory._audit_integrating() THEN
        RETURN NULL;
    END IF;
    RAISE EXCEPTION 'memory.audit_pending is append-only: % is not allowed', TG_OP
        USING ERRCODE = 'MX002', HINT = 'Pending entries are chained and removed by the sequencer (memory.audit_integrate).';
END $$;

CREATE TRIGGER memory_pending_guard BEFORE UPDATE OR DELETE OR TRUNCATE ON memory.audit_pending
    FOR EACH STATEMENT EXECUTE FUNCTION memory._audit_pending_guard();

CREATE OR REPLACE FUNCTION memory._audit_append_only()
RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- memory.audit_ensure_partitions moves rows, unchanged, out of the default partition into the
    -- month partition it creates for them (backend memory opened by it alone).
    IF TG_OP = 'DELETE' AND TG_TABLE_NAME = 'audit_log_default' AND memory._audit_move_gate_open() THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'memory.audit_log is append-only: % is not allowed', TG_OP
        USING ERRCODE = 'MX002', HINT = 'Entries are only added with memory.audit_append; old partitions are removed with memory.audit_seal and memory.audit_prune.';
END $$;

CREATE OR REPLACE FUNCTION memory.audit_ensure_partitions(months_ahead int DEFAULT 3, at timestamptz DEFAULT now())
RETURNS int LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
    -- (Restored on return: on Citus the move below forwards its SET LOCALs to the workers.)
    SET citus.propagate_set_commands = 'none'
AS $$
DECLARE
    m     timestamptz;
    name  text;
    made  int := 0;
    moved bigint;
    dist  constant boolean := memory._citus_distributed('memory.audit_log');
    role_was text;
BEGIN
    IF months_ahead IS NULL OR months_ahead < 0 OR months_ahead > 120 THEN
        RAISE EXCEPTION 'months_ahead must be between 0 and 120, got %', months_ahead USING ERRCODE = '22023';
    END IF;
    IF at IS NULL OR NOT isfinite(at) THEN
        RAISE EXCEPTION 'at must be a finite time, got %', at USING ERRCODE = '22023';
    END IF;
    FOR i IN 0 .. months_ahead LOOP
        m := date_trunc('month', at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' + make_interval(months => i);
        name := 'audit_log_' || to_char(m AT TIME ZONE 'UTC', 'YYYY"m"MM');
        CONTINUE WHEN to_regclass('memory.' || name) IS NOT NULL;
        CONTINUE WHEN EXISTS (SELECT 1 FROM memory.audit_seals s WHERE s.partition_name = name);
        -- Rows of this month in the default partition (appended before the month had one) move,
        -- unchanged, into the new partition: the parent is locked for the move, and the default
        -- partition's append-only trigger lets this one DELETE through.
        LOCK TABLE memory.audit_log IN ACCESS EXCLUSIVE MODE;
        CREATE TEMP TABLE memory_audit_move (LIKE memory.audit_log) ON COMMIT DROP;
        PERFORM memory._audit_move_gate(true);
        -- On Citus the DELETE runs on the workers' shards, whose guard cannot see this backend's
        -- gate: their ordinary triggers are off for it instead (SET LOCAL, sent to the workers'
        -- connections of this transaction), and as they were right after.
        IF dist THEN
            role_was := pg_catalog.current_setting('session_replication_role');
            SET LOCAL citus.propagate_set_commands = 'local';
            SET LOCAL session_replication_role = 'replica';
        END IF;
        WITH gone AS (
            DELETE FROM memory.audit_log_default d WHERE d.recorded_at >= m AND d.recorded_at < m + interval '1 month' RETURNING d.*
        )
        INSERT INTO pg_temp.memory_audit_move SELECT * FROM gone;
        GET DIAGNOSTICS moved = ROW_COUNT;
        IF dist THEN
            EXECUTE pg_catalog.format('SET LOCAL session_replication_role = %L', role_was);
        END IF;
        PERFORM memory._audit_move_gate(false);
        EXECUTE format('CREATE TABLE memory.%I PARTITION OF memory.audit_log FOR VALUES FROM (%L) TO (%L)',
                       name, m, m + interval '1 month');
        EXECUTE format('CREATE INDEX %I ON memory.%I (chain_id COLLATE "C", seq)', name || '_chain_seq', name);
        EXECUTE format('CREATE INDEX %I ON memory.%I (workspace_id, recorded_at) WHERE workspace_id IS NOT NULL',
                       name || '_workspace', name);
        EXECUTE format('CREATE TRIGGER memory_append_only_truncate BEFORE TRUNCATE ON memory.%I '
                       'FOR EACH STATEMENT EXECUTE FUNCTION memory._audit_append_only()', name);
        EXECUTE format('REVOKE ALL ON memory.%I FROM PUBLIC', name);
        IF moved > 0 THEN
            INSERT INTO memory.audit_log SELECT * FROM pg_temp.memory_audit_move;
        END IF;
        DROP TABLE pg_temp.memory_audit_move;
        made := made + 1;
    END LOOP;
    RETURN made;
END $$;

COMMENT ON FUNCTION memory.audit_ensure_partitions(int, timestamptz) IS
  'Create the monthly audit partitions from the month of `at` to months_ahead months later (UTC), moving rows of those months out of the default partition. Returns how many were created. Run by memory.run_maintenance; CREATE EXTENSION makes none, so that a dump restores into a database created in any month.';

SELECT pg_catalog.pg_extension_config_dump('memory.audit_log_default', '');

-- No SET clause on the governed tables' trigger (a GUC save and restore per statement); its SQL
-- runs under the owner switch, which pins search_path (finalize.sql lists it).
ALTER FUNCTION memory.audit_trigger() RESET search_path;

CREATE OR REPLACE FUNCTION memory.audit_append(event_type text, payload jsonb, org_id text DEFAULT NULL,
                                    project_id text DEFAULT NULL, workspace_id text DEFAULT NULL,
                                    actor_id text DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- No invisible characters in event names (a zero-width space could make a look-alike of a
    -- reserved name), and the extension's own names, compared after Unicode compatibility folding
    -- (full-width letters) and lower-casing, are written by the extension alone.
    IF event_type OPERATOR(pg_catalog.~) '[\u00AD\u034F\u061C\u115F\u1160\u17B4\u17B5\u180B-\u180F\u200B-\u200F\u202A-\u202E\u2060-\u206F\u3164\uFE00-\uFE0F\uFEFF\uFFA0[:cntrl:]]' THEN
        RAISE EXCEPTION 'event type contains invisible or control characters' USING ERRCODE = '22023';
    END IF;
    -- (Folded first, then trimmed: a compatibility space such as U+3000 folds to a space.)
    IF (pg_catalog.lower(pg_catalog.btrim(pg_catalog.normalize(event_type, 'NFKC'))) LIKE 'memory.%'
        OR pg_catalog.lower(pg_catalog.btrim(pg_catalog.normalize(event_type, 'NFKC'))) LIKE 'research.%')
       AND NOT memory._is_unrestricted() THEN
        RAISE EXCEPTION 'event type "%" is reserved for memory_ext', event_type
            USING ERRCODE = '42501', HINT = 'Name application events with a prefix of your own, e.g. app.checkout.';
    END IF;
    -- The org check is the appender's: only chains of orgs the calling role may act for.
    RETURN memory._audit_append(event_type, payload::pg_catalog.text, org_id, project_id, workspace_id, actor_id);
END $$;

COMMENT ON FUNCTION memory.audit_append(text, jsonb, text, text, text, text) IS
  'Append one event to the chain of org_id ('''' when NULL); returns its seq in immediate mode, NULL in deferred mode (the seq is assigned at integration). Only for orgs the calling role may act for (42501); memory.* and research.* event types are the extension''s own. actor_id is pseudonymised. Granted to memory_writer.';

CREATE OR REPLACE FUNCTION memory._audit_append_system(event_type text, payload jsonb, org_id text)
RETURNS bigint LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$ SELECT memory._audit_append_system_text(event_type, payload::pg_catalog.text, org_id) $$;

CREATE OR REPLACE FUNCTION memory._audit_append_many(events jsonb)
RETURNS int LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$ SELECT memory._audit_append_events(events::pg_catalog.text) $$;

REVOKE ALL ON FUNCTION memory._audit_append_system(text, jsonb, text), memory._audit_append_system_text(text, text, text),
                       memory._audit_append_many(jsonb), memory._audit_append_events(text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION memory._audit(event_type text, payload jsonb, org_id text DEFAULT NULL,
                              project_id text DEFAULT NULL, workspace_id text DEFAULT NULL)
RETURNS bigint LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$ SELECT memory._audit_append(event_type, payload::pg_catalog.text, org_id, project_id, workspace_id, NULL) $$;

CREATE OR REPLACE FUNCTION memory.audit_integrate()
RETURNS bigint LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$ SELECT memory._audit_integrate(true) $$;

COMMENT ON FUNCTION memory.audit_integrate() IS
  'Chain every committed pending audit entry (and the calling transaction''s own) now; returns how many. Waits for another integrator. Needs a read-write READ COMMITTED transaction on a primary (25006 otherwise). Owner-only.';

CREATE OR REPLACE FUNCTION memory._audit_verify_for_caller(p_chain text)
RETURNS TABLE (chain_id text, entries bigint, ok boolean, first_bad_seq bigint, reason text, pruned bigint, pending bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp



SET enable_sort = off
AS $$
DECLARE c text;
BEGIN
    -- Chain what is pending first (where this transaction can: not read-only, READ COMMITTED,
    -- on a primary); what stays pending is checked by its own HMAC and counted.
    PERFORM memory._audit_integrate(false);
    IF p_chain IS NOT NULL THEN
        PERFORM memory._require_org(p_chain);
        RETURN QUERY SELECT v.* FROM memory._audit_verify(p_chain) v;
    ELSIF memory._may_act_for('') THEN
        -- Every chain: unrestricted roles and '*' roles.
        RETURN QUERY SELECT v.* FROM memory._audit_verify(NULL) v;
    ELSE
        FOR c IN SELECT h.chain_id FROM memory.audit_heads h
                  WHERE h.chain_id OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT memory.my_orgs()))
                 UNION
                 SELECT DISTINCT p.chain_id FROM memory.audit_pending p
                  WHERE p.chain_id OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT memory.my_orgs())) ORDER BY 1 LOOP
            RETURN QUERY SELECT v.* FROM memory._audit_verify(c) v;
        END LOOP;
    END IF;
END $$;

CREATE OR REPLACE FUNCTION memory.audit_verify(chain_id text DEFAULT NULL)
RETURNS TABLE (chain_id text, entries bigint, ok boolean, first_bad_seq bigint, reason text, pruned bigint, pending bigint)
LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$ SELECT * FROM memory._audit_verify_for_caller(chain_id) $$;

COMMENT ON FUNCTION memory.audit_verify(text) IS
  'Recompute every link of one chain (or all): first bad seq and why (hash mismatch, broken link, gap, reorder, tail missing, unknown key). Sealed-and-dropped ranges count as pruned. Pending entries are integrated first where the transaction can write; those left are checked by their own HMAC and counted in `pending`.';

-- The head is read by PL/pgSQL: on Citus a SQL function's parameters cannot be planned into a
-- distributed query, a PL/pgSQL variable can.
CREATE FUNCTION memory._audit_head_for(p_chain text)
RETURNS TABLE (chain_id text, seq bigint, entry_hash bytea, merkle_root bytea)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE c text := memory._require_org(p_chain);
BEGIN
    PERFORM memory._audit_integrate(false);
    RETURN QUERY SELECT h.chain_id, h.seq, h.entry_hash, memory._merkle_frontier_root(h.merkle_frontier)
                   FROM memory.audit_heads h WHERE h.chain_id OPERATOR(pg_catalog.=) c;
END $$;

CREATE OR REPLACE FUNCTION memory.audit_head(chain_id text)
RETURNS TABLE (chain_id text, seq bigint, entry_hash bytea, merkle_root bytea)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$ SELECT * FROM memory._audit_head_for(audit_head.chain_id) $$;

CREATE OR REPLACE FUNCTION memory.audit_events(workspace_id text, event_type text DEFAULT NULL, lim int DEFAULT 50, off int DEFAULT 0)
RETURNS SETOF memory.audit_log LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    all_chains boolean;
    orgs text[];
BEGIN
    IF lim IS NULL OR lim < 0 OR lim > 10000 OR off IS NULL OR off < 0 THEN
        RAISE EXCEPTION 'lim must be in [0, 10000] and off >= 0 (got %, %)', lim, off USING ERRCODE = '22023';
    END IF;
    PERFORM memory._audit_integrate(false);
    -- Only chains the calling role may act for.
    all_chains := memory._may_act_for('');
    orgs := ARRAY(SELECT memory.my_orgs());
    RETURN QUERY SELECT * FROM memory.audit_log a
                  WHERE a.workspace_id OPERATOR(pg_catalog.=) audit_events.workspace_id
                    AND (all_chains OR a.chain_id OPERATOR(pg_catalog.=) ANY (orgs))
                    AND (audit_events.event_type IS NULL OR a.event_type OPERATOR(pg_catalog.=) audit_events.event_type)
                  ORDER BY a.recorded_at DESC, a.seq DESC
                  LIMIT lim OFFSET off;
END $$;

CREATE OR REPLACE FUNCTION memory.audit_seal(before timestamptz)
RETURNS TABLE (partition_name text, chain_id text, first_seq bigint, last_seq bigint, entries bigint, merkle_root bytea)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p record;
    c record;
BEGIN
    IF before IS NULL THEN
        RAISE EXCEPTION 'memory.audit_seal needs a time' USING ERRCODE = '22023';
    END IF;
    -- Only finished months: a partition that can still receive entries, once sealed, would have
    -- those entries dropped by audit_prune (a permanent gap), and its month could not be made again.
    IF before > date_trunc('month', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' THEN
        RAISE EXCEPTION 'memory.audit_seal seals finished months only: % is after the start of the current month', before
            USING ERRCODE = '22023',
                  HINT = 'Pass a time at or before ' || (date_trunc('month', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC')::text
                          || '; the current month can be sealed once it has ended.';
    END IF;
    -- Pending entries get their place (in this month) before months are sealed.
    PERFORM memory._audit_integrate(false);
    FOR p IN
        SELECT child.relname AS name,
               (regexp_match(pg_get_expr(child.relpartbound, child.oid), 'FROM \(''([^'']+)''\) TO \(''([^'']+)''\)'))[1]::timestamptz AS lo,
               (regexp_match(pg_get_expr(child.relpartbound, child.oid), 'FROM \(''([^'']+)''\) TO \(''([^'']+)''\)'))[2]::timestamptz AS hi
          FROM pg_inherits i JOIN pg_class child ON child.oid = i.inhrelid
         WHERE i.inhparent = 'memory.audit_log'::regclass
           AND pg_get_expr(child.relpartbound, child.oid) <> 'DEFAULT'
         ORDER BY 2
    LOOP
        CONTINUE WHEN p.hi > before;
        CONTINUE WHEN EXISTS (SELECT 1 FROM memory.audit_seals s WHERE s.partition_name = p.name);
        FOR c IN EXECUTE format(
            'SELECT chain_id, min(seq) AS lo, max(seq) AS hi, count(*) AS n,
                    (array_agg(entry_hash ORDER BY seq DESC))[1] AS last_hash,
                    memory._merkle_root(array_agg(entry_hash ORDER BY seq)) AS root
               FROM memory.%I GROUP BY chain_id', p.name)
        LOOP
            IF c.hi - c.lo + 1 <> c.n THEN
                RAISE EXCEPTION 'chain "%" is not contiguous in partition % (seq % to %, % entries)', c.chain_id, p.name, c.lo, c.hi, c.n
                    USING ERRCODE = 'MX002', HINT = 'Run memory.audit_verify first; a gap means entries were removed.';
            END IF;
            INSERT INTO memory.audit_seals (chain_id, partition_name, range_start, range_end, first_seq, last_seq, entries, last_entry_hash, merkle_root)
            VALUES (c.chain_id, p.name, p.lo, p.hi, c.lo, c.hi, c.n, c.last_hash, c.root);
            partition_name := p.name; chain_id := c.chain_id; first_seq := c.lo; last_seq := c.hi;
            entries := c.n; merkle_root := c.root;
            RETURN NEXT;
        END LOOP;
        -- An empty partition is sealed too, so that it may be dropped.
        IF NOT EXISTS (SELECT 1 FROM memory.audit_seals s WHERE s.partition_name = p.name) THEN
            INSERT INTO memory.audit_seals (chain_id, partition_name, range_start, range_end, first_seq, last_seq, entries, last_entry_hash, merkle_root)
            VALUES ('', p.name, p.lo, p.hi, 0, -1, 0, '\x', memory._merkle_root('{}'));
        END IF;
    END LOOP;
END $$;

COMMENT ON FUNCTION memory.audit_seal(timestamptz) IS
  'Seal every monthly audit partition that ends at or before `before` (at most the start of the current month, else 22023): per chain, first/last seq, last hash and RFC 9162 Merkle root.';

REVOKE ALL ON FUNCTION memory.audit_append(text, jsonb, text, text, text, text),
                       memory._audit_append_system(text, jsonb, text) FROM PUBLIC;

REVOKE ALL ON FUNCTION memory.audit_integrate(), memory._audit_integrate(boolean), memory._audit_integrating() FROM PUBLIC;

SELECT pg_catalog.pg_extension_config_dump('memory.audit_pending', '');

CREATE OR REPLACE FUNCTION memory.ema(previous float8, outcome memory.outcome, alpha_success float8 DEFAULT 0.1, alpha_failure float8 DEFAULT 0.15)
RETURNS float8 LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
AS $$ SELECT memory._ema(previous, outcome::pg_catalog.text, alpha_success, alpha_failure) $$;

CREATE OR REPLACE FUNCTION memory.record_outcome(session_id text, outcome memory.outcome, observation_ids uuid[])
RETURNS TABLE (observation_id uuid, previous_weight float8, new_weight float8, alpha float8, applied boolean, reason text)
LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$ SELECT * FROM memory._record_outcome(session_id, outcome::pg_catalog.text, observation_ids) $$;

CREATE OR REPLACE FUNCTION memory.misleading_observations(org_id text DEFAULT NULL)
RETURNS TABLE (observation_id uuid, failed_sessions int, successful_sessions int, weight float8)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- PL/pgSQL, grouped by org too: on Citus (SPEC §10) the query then runs whole on each shard
    -- (Citus plans no parameter of a SQL-language function).
    RETURN QUERY
    SELECT h.observation_id,
           count(DISTINCT h.session_id) FILTER (WHERE h.outcome OPERATOR(pg_catalog.<>) 'accepted')::int,
           count(DISTINCT h.session_id) FILTER (WHERE h.outcome OPERATOR(pg_catalog.=) 'accepted')::int,
           o.weight
      FROM memory.observation_weight_history h
      JOIN memory.observations o ON o.id OPERATOR(pg_catalog.=) h.observation_id AND o.org_id OPERATOR(pg_catalog.=) h.org_id
     WHERE (misleading_observations.org_id IS NULL OR o.org_id OPERATOR(pg_catalog.=) misleading_observations.org_id)
       AND o.soft_deleted_at IS NULL
     GROUP BY o.org_id, h.observation_id, o.weight
    HAVING memory._is_misleading(count(DISTINCT h.session_id) FILTER (WHERE h.outcome OPERATOR(pg_catalog.<>) 'accepted'),
                                 count(DISTINCT h.session_id) FILTER (WHERE h.outcome OPERATOR(pg_catalog.=) 'accepted'))
     ORDER BY 2 DESC, 1;
END $$;

CREATE OR REPLACE FUNCTION memory.recall(org_id text, query text, k int DEFAULT 10, project_id text DEFAULT NULL)
RETURNS TABLE (id uuid, content text, classification memory.classification, weight float8, score float8)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    q   tsquery;
    r   record;
    ids uuid[] := '{}';
BEGIN
    IF recall.org_id IS NULL THEN
        RAISE EXCEPTION 'memory.recall needs an org_id' USING ERRCODE = '22023';
    END IF;
    IF k IS NULL OR k < 1 OR k > 1000 THEN
        RAISE EXCEPTION 'k must be between 1 and 1000, got %', k USING ERRCODE = '22023';
    END IF;
    -- Definer (it appends memory.recall): the org is checked against the calling role here.
    PERFORM memory._require_org(recall.org_id);
    q := websearch_to_tsquery('english', coalesce(query, ''));
    -- A blank query (or one of stop words only) matches nothing: no rows, no event.
    IF numnode(q) = 0 THEN
        RETURN;
    END IF;
    FOR r IN
        SELECT o.id, o.content, o.classification, o.weight,
               (ts_rank_cd(to_tsvector('english', o.content), q) * o.weight)::float8 AS score
          FROM memory.observations o
         WHERE o.org_id = recall.org_id
           AND to_tsvector('english', o.content) @@ q
           AND o.soft_deleted_at IS NULL
           AND (o.expires_at IS NULL OR o.expires_at > now())
           AND (recall.project_id IS NULL OR o.project_id = recall.project_id)
         ORDER BY 5 DESC, o.id
         LIMIT k
    LOOP
        id := r.id; content := r.content; classification := r.classification; weight := r.weight; score := r.score;
        ids := ids || r.id;
        RETURN NEXT;
    END LOOP;
    PERFORM memory._audit_append('memory.recall',
        jsonb_build_object('ids', to_jsonb(ids), 'count', cardinality(ids), 'k', k,
                           'query_sha256', encode(sha256(convert_to(coalesce(query, ''), 'UTF8')), 'hex'))::text,
        recall.org_id, recall.project_id, NULL, NULL);
END $$;

CREATE OR REPLACE FUNCTION memory._merge_platform_policy()
RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- On Citus a trigger fires on the shards of the table (reference copies): a restore merges
    -- into the table itself, never into a shard.
    IF TG_RELID OPERATOR(pg_catalog.<>) 'memory.retention_policies'::pg_catalog.regclass THEN
        RETURN NEW;
    END IF;
    IF NEW.org_id IS NULL THEN
        UPDATE memory.retention_policies p
           SET retention_days = NEW.retention_days, soft_delete_grace_days = NEW.soft_delete_grace_days,
               created_at = NEW.created_at
         WHERE p.org_id IS NULL AND p.tier OPERATOR(pg_catalog.=) NEW.tier;
        IF FOUND THEN
            RETURN NULL;
        END IF;
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER memory_merge_default BEFORE INSERT ON memory.retention_policies
    FOR EACH ROW EXECUTE FUNCTION memory._merge_platform_policy();

ALTER TABLE memory.retention_policies ENABLE ALWAYS TRIGGER memory_merge_default;

COMMENT ON TABLE memory.memory_type_policies IS 'rt-005 schedule per memory type: TTL, archive age, cleanup mode. Inserting a type''s row sets it (every type has one).';

CREATE OR REPLACE FUNCTION memory._merge_memory_type_policy()
RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- On Citus a trigger fires on the shards of the table (reference copies): a restore merges
    -- into the table itself, never into a shard.
    IF TG_RELID OPERATOR(pg_catalog.<>) 'memory.memory_type_policies'::pg_catalog.regclass THEN
        RETURN NEW;
    END IF;
    UPDATE memory.memory_type_policies p
       SET ttl = NEW.ttl, archive_after = NEW.archive_after, cleanup = NEW.cleanup, backup = NEW.backup
     WHERE p.memory_type OPERATOR(pg_catalog.=) NEW.memory_type;
    RETURN CASE WHEN FOUND THEN NULL ELSE NEW END;
END $$;

CREATE TRIGGER memory_merge BEFORE INSERT ON memory.memory_type_policies
    FOR EACH ROW EXECUTE FUNCTION memory._merge_memory_type_policy();

ALTER TABLE memory.memory_type_policies ENABLE ALWAYS TRIGGER memory_merge;

SELECT pg_catalog.pg_extension_config_dump('memory.memory_type_policies', '');

CREATE OR REPLACE FUNCTION memory._retention_policy(p_org text, p_tier memory.classification)
RETURNS TABLE (retention_days int, soft_delete_grace_days int, source text)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    o    record;
    p    record;
    bfsi boolean;
BEGIN
    SELECT r.retention_days, r.soft_delete_grace_days INTO o
      FROM memory.retention_policies r WHERE r.org_id = p_org AND r.tier = p_tier;
    SELECT r.retention_days, r.soft_delete_grace_days INTO p
      FROM memory.retention_policies r WHERE r.org_id IS NULL AND r.tier = p_tier;
    SELECT s.bfsi_mode INTO bfsi FROM memory.org_settings s WHERE s.org_id = p_org;
    -- The override order is memory_core::retention::resolve_policy.
    RETURN QUERY SELECT * FROM memory._resolve_retention(p_tier = 'restricted', coalesce(bfsi, false),
                                                         o IS NOT NULL AND o.soft_delete_grace_days IS NOT NULL, o.retention_days, o.soft_delete_grace_days,
                                                         p IS NOT NULL AND p.soft_delete_grace_days IS NOT NULL, p.retention_days, p.soft_delete_grace_days);
END $$;

CREATE OR REPLACE FUNCTION memory.retention_policy(org_id text, tier memory.classification)
RETURNS TABLE (retention_days int, soft_delete_grace_days int, source text)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF tier IS NULL THEN
        RAISE EXCEPTION 'memory.retention_policy needs a tier' USING ERRCODE = '22023';
    END IF;
    -- An org's overrides are its own business: 42501 for roles that may not act for it.
    IF retention_policy.org_id IS NOT NULL THEN
        PERFORM memory._require_org(retention_policy.org_id);
    END IF;
    RETURN QUERY SELECT * FROM memory._retention_policy(retention_policy.org_id, retention_policy.tier);
END $$;

CREATE OR REPLACE FUNCTION memory.is_expired(created_at timestamptz, tier memory.classification, org_id text DEFAULT NULL, at timestamptz DEFAULT now())
RETURNS boolean LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
AS $$
    SELECT memory._is_expired(is_expired.created_at, p.retention_days, is_expired.at)
      FROM memory.retention_policy(is_expired.org_id, is_expired.tier) p
$$;

SELECT pg_catalog.pg_extension_config_dump('memory.retention_policies', '');

CREATE INDEX observations_user ON memory.observations (user_id) WHERE user_id IS NOT NULL;

CREATE INDEX observations_task ON memory.observations (task_id) WHERE task_id IS NOT NULL;

CREATE INDEX observations_archive_user ON memory.observations_archive (user_id) WHERE user_id IS NOT NULL;

CREATE OR REPLACE FUNCTION memory._retention_sweep(tbl regclass, opts jsonb, dry_run boolean, at timestamptz)
RETURNS jsonb LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp SET client_min_messages = warning
AS $$
DECLARE
    st       jsonb := opts->'stamps';
    idc      text := opts->>'id';
    sd       text := st->>'soft_deleted_at';
    tierc    text := coalesce(opts->>'audit_tier', opts->'target'->>0);
    org_e    text;
    user_e   text;
    tier_e   text;
    idtype   text;
    setc     text;
    g        record;
    rows     jsonb;
    ids      text[];
    soft     bigint := 0;
    hard     bigint := 0;
    denied   bigint := 0;
    actor    constant text := 'system:retention';
    -- On Citus (SPEC §10) a query over every shard cannot lock rows (FOR UPDATE): the changes
    -- below then check again that each row is still due.
    dist     constant boolean := opts->>'org' IS NOT NULL AND memory._citus_distributed(tbl);
    may_e    text;
    orgs     text[] := '{}';
BEGIN
    idtype := format_type(memory._column_type(tbl, idc, 'id'), NULL);
    org_e := CASE WHEN opts->>'org' IS NULL THEN 'NULL::pg_catalog.text' ELSE format('t.%I::pg_catalog.text', opts->>'org') END;
    user_e := CASE WHEN opts->>'user' IS NULL THEN 'NULL::pg_catalog.text' ELSE format('t.%I::pg_catalog.text', opts->>'user') END;
    tier_e := CASE WHEN tierc IS NULL THEN 'NULL::pg_catalog.text'
                   WHEN memory._column_type(tbl, tierc, 'tier') = 'jsonb'::regtype THEN format('(t.%I OPERATOR(pg_catalog.->>) %L)', tierc, 'classification')
                   ELSE format('t.%I::pg_catalog.text', tierc) END;
    setc := format('%I = $1::pg_catalog.timestamptz', sd) || CASE WHEN st->>'soft_delete_reason' IS NULL THEN ''
                                          ELSE format(', %I = %L', st->>'soft_delete_reason', 'retention') END;
    may_e := format('memory._may_act_for(%s)', org_e);
    IF dist AND opts->>'org' IS NOT NULL THEN
        -- On a Citus shard a function cannot read the registries (a distributed query from a
        -- query on a shard): the orgs the owner may act for are worked out here, from the table's
        -- distinct orgs, and the sweep names them.
        SELECT coalesce(array_agg(o), '{}') INTO orgs
          FROM pg_catalog.jsonb_array_elements_text(memory._exec_as_table_owner(tbl,
                   format('SELECT coalesce(pg_catalog.jsonb_agg(DISTINCT t.%I::pg_catalog.text), ''[]'') FROM %s t', opts->>'org', tbl), '{}')) o
         WHERE memory._may_act_for_role((SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid = tbl), o);
        may_e := format('%s OPERATOR(pg_catalog.=) ANY ($2::pg_catalog.text[])', org_e);
    END IF;
    -- Every statement on the application table runs as the table's owner, in a
    -- security-restricted operation (memory._exec_as_table_owner): whatever its columns' types,
    -- casts or triggers do runs with its owner's rights, never the maintenance role's. Only rows
    -- of orgs the table's owner may act for are swept: the org values are the owner's data, so
    -- events (memory.purge and the table's own) never name an org its owner could not write.
    -- A real run locks the rows it will change; a dry run changes nothing and locks nothing (so
    -- it runs in a read-only transaction, on a standby too). No temporary table: the due rows
    -- are one jsonb value.
    FOR step IN 1 .. 2 LOOP
        IF step = 1 THEN
            rows := memory._exec_as_table_owner(tbl, format(
                'SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_array(d.i, d.o, d.t, d.u)), ''[]'')
                   FROM (SELECT t.%1$I::pg_catalog.text AS i, %2$s AS o, %3$s AS t, %4$s AS u
                           FROM %5$s t WHERE t.%6$I IS NULL AND t.%7$I IS NOT NULL AND t.%7$I OPERATOR(pg_catalog.<=) $1::pg_catalog.timestamptz
                            AND %9$s
                            %8$s) d',
                idc, org_e, tier_e, user_e, tbl, sd, st->>'expires_at', CASE WHEN dry_run OR dist THEN '' ELSE 'FOR UPDATE OF t' END, may_e),
                ARRAY[at::text, orgs::text]);
        ELSE
            rows := memory._exec_as_table_owner(tbl, format(
                'SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_array(d.i, d.o, d.t, d.u)), ''[]'')
                   FROM (SELECT t.%1$I::pg_catalog.text AS i, %2$s AS o, %3$s AS t, %4$s AS u
                           FROM %5$s t WHERE t.%6$I IS NOT NULL AND t.%7$I IS NOT NULL AND t.%7$I OPERATOR(pg_catalog.<=) $1::pg_catalog.timestamptz
                            AND memory._purge_due(t.%6$I, t.%7$I, t.%8$I, $1::pg_catalog.timestamptz)
                            AND %10$s
                            %9$s) d',
                idc, org_e, tier_e, user_e, tbl, sd, st->>'purge_after', st->>'expires_at',
                CASE WHEN dry_run OR dist THEN '' ELSE 'FOR UPDATE OF t' END, may_e), ARRAY[at::text, orgs::text]);
        END IF;
        ids := '{}';
        -- At most 1,000 ids per event: a purge of 100,000 rows is 100 events, not one of 4 MB.
        FOR g IN SELECT d.org_id, d.tier, d.denied, array_agg(d.id ORDER BY d.id) AS ids, count(*) AS n
                   FROM (SELECT a.*, (pg_catalog.row_number() OVER (PARTITION BY a.org_id, a.tier, a.denied ORDER BY a.id) - 1) / 1000 AS part
                           FROM (SELECT x->>0 AS id, x->>1 AS org_id, x->>2 AS tier,
                                        memory._held(coalesce(x->>1, ''), x->>3, NULL) AS denied
                                   FROM jsonb_array_elements(rows) x) a) d
                  GROUP BY 1, 2, 3, d.part ORDER BY 1, 2, 3, d.part LOOP
            IF g.denied THEN
                PERFORM memory._audit('memory.purge.denied', jsonb_build_object('table', tbl::text, 'orgId', g.org_id,
                        'actorId', actor, 'observationIds', to_jsonb(g.ids), 'classification', g.tier,
                        'stage', CASE step WHEN 1 THEN 'soft_delete' ELSE 'hard_delete' END, 'reason', 'legal hold', 'dryRun', dry_run), g.org_id);
                denied := denied + g.n;
                CONTINUE;
            ELSIF step = 1 THEN
                soft := soft + g.n;
            ELSE
                PERFORM memory._audit('memory.purge', jsonb_build_object('table', tbl::text, 'workspaceId', NULL,
                        'actorId', actor, 'orgId', g.org_id, 'projectId', NULL, 'observationIds', to_jsonb(g.ids),
                        'retentionPolicyId', NULL, 'classification', g.tier, 'dryRun', dry_run), g.org_id);
                hard := hard + g.n;
            END IF;
            IF dist AND NOT dry_run THEN
                -- Citus: ids are unique only within an org (every unique key holds the org column),
                -- so each org's ids change in a statement naming the org, which also checks again
                -- that each row is still due (a query over every shard locks nothing).
                IF step = 1 THEN
                    PERFORM memory._exec_as_table_owner(tbl, format(
                        'UPDATE %s t SET %s WHERE t.%I OPERATOR(pg_catalog.=) ANY ($2::%s[]) AND t.%I OPERATOR(pg_catalog.=) $3
                            AND t.%I IS NULL AND t.%I IS NOT NULL AND t.%I OPERATOR(pg_catalog.<=) $1::pg_catalog.timestamptz',
                        tbl, setc, idc, idtype, opts->>'org', sd, st->>'expires_at', st->>'expires_at'), ARRAY[at::text, g.ids::text, g.org_id]);
                ELSE
                    PERFORM memory._hold_gate(true);
                    PERFORM memory._exec_as_table_owner(tbl, format(
                        'DELETE FROM %s t WHERE t.%I OPERATOR(pg_catalog.=) ANY ($2::%s[]) AND t.%I OPERATOR(pg_catalog.=) $3
                            AND t.%I IS NOT NULL AND memory._purge_due(t.%I, t.%I, t.%I, $1::pg_catalog.timestamptz)',
                        tbl, idc, idtype, opts->>'org', sd, sd, st->>'purge_after', st->>'expires_at'), ARRAY[at::text, g.ids::text, g.org_id]);
                    PERFORM memory._hold_gate(false);
                END IF;
            ELSE
                ids := ids || g.ids;
            END IF;
        END LOOP;
        IF NOT dry_run AND NOT dist THEN
            IF cardinality(ids) > 0 AND step = 1 THEN
                PERFORM memory._exec_as_table_owner(tbl, format('UPDATE %s t SET %s WHERE t.%I OPERATOR(pg_catalog.=) ANY ($2::%s[])',
                               tbl, setc, idc, idtype), ARRAY[at::text, ids::text]);
            ELSIF cardinality(ids) > 0 THEN
                -- (Held rows were denied above: the hold gate spares these their per-row check.)
                PERFORM memory._hold_gate(true);
                PERFORM memory._exec_as_table_owner(tbl, format('DELETE FROM %s t WHERE t.%I OPERATOR(pg_catalog.=) ANY ($1::%s[])',
                               tbl, idc, idtype), ARRAY[ids::text]);
                PERFORM memory._hold_gate(false);
            END IF;
        END IF;
    END LOOP;
    RETURN jsonb_build_object('soft_deleted', soft, 'hard_deleted', hard, 'denied', denied);
END $$;

CREATE OR REPLACE FUNCTION memory._held(p_org text, p_user text, p_id uuid)
RETURNS boolean LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
    SET citus.allow_nested_distributed_execution = on
AS $$
    SELECT EXISTS (SELECT 1 FROM memory.legal_holds h
                    WHERE h.released_at IS NULL AND h.org_id = p_org
                      AND (h.observation_id = p_id
                           OR (h.observation_id IS NULL AND h.user_id = p_user)
                           OR (h.observation_id IS NULL AND h.user_id IS NULL)))
$$;

CREATE OR REPLACE FUNCTION memory.run_retention(dry_run boolean DEFAULT false, at timestamptz DEFAULT now())
RETURNS jsonb LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp SET client_min_messages = warning
AS $$
DECLARE
    g        record;
    soft     bigint := 0;
    hard     bigint := 0;
    archived bigint := 0;
    denied   bigint := 0;
    actor    constant text := 'system:retention';
    tables   jsonb := '{}';
    skipped  jsonb := '[]';
    failed   jsonb := '{}';
    r        jsonb;
    lock     text;
    soft_ids    uuid[] := '{}';
    hard_ids    uuid[] := '{}';
    archive_ids uuid[] := '{}';
    -- Citus (SPEC §10): the observations are distributed by org.
    dist     constant boolean := memory._citus_distributed('memory.observations');
BEGIN
    IF dry_run IS NULL OR at IS NULL THEN
        RAISE EXCEPTION 'memory.run_retention needs dry_run and at' USING ERRCODE = '22023';
    END IF;

    -- The due rows of each phase come from one query; a real run locks them (FOR UPDATE), a dry
    -- run changes nothing and locks nothing, so it runs in a read-only transaction and on a hot
    -- standby (where its events are logged as not recorded). Ids are kept in arrays, not in
    -- temporary tables (nothing to create per run; nothing a standby refuses).
    -- On Citus a query over every shard locks nothing (Citus refuses FOR UPDATE there) and ids
    -- are unique only within an org: each group's rows change in a statement naming its org,
    -- which checks again that each row is still due (an event may then name a row that a
    -- concurrent change made no longer due).
    lock := CASE WHEN dry_run OR dist THEN '' ELSE ' FOR UPDATE OF o' END;

    -- 1. Expired live rows: held or refused by the org's guard -> denied; the rest -> soft delete.
    -- At most 1,000 ids per event (here and below): a run over 100,000 rows writes 100 events, not one of 4 MB.
    FOR g IN EXECUTE
        'SELECT d.org_id, d.classification, d.denied, pg_catalog.array_agg(d.id ORDER BY d.id) AS ids, pg_catalog.count(*) AS n
           FROM (SELECT a.*, (pg_catalog.row_number() OVER (PARTITION BY a.org_id, a.classification, a.denied ORDER BY a.id) OPERATOR(pg_catalog.-) 1)
                             OPERATOR(pg_catalog./) 1000 AS part
                   FROM (SELECT o.id, o.org_id, o.classification,
                                memory._held(o.org_id, o.user_id, o.id) OR NOT memory._guard_allows(s.retention_guard, o.id) AS denied
                           FROM memory.observations o LEFT JOIN memory.org_settings s ON s.org_id OPERATOR(pg_catalog.=) o.org_id
                          WHERE o.soft_deleted_at IS NULL AND o.expires_at IS NOT NULL AND o.expires_at OPERATOR(pg_catalog.<=) $1'
                          || lock || ') a) d
          GROUP BY 1, 2, 3, d.part ORDER BY 1, 2, 3, d.part' USING at
    LOOP
        IF g.denied THEN
            PERFORM memory._audit('memory.purge.denied', jsonb_build_object('orgId', g.org_id, 'actorId', actor,
                    'observationIds', to_jsonb(g.ids), 'classification', g.classification, 'stage', 'soft_delete',
                    'reason', 'legal hold or guard', 'dryRun', dry_run), g.org_id);
            denied := denied + g.n;
        ELSE
            soft_ids := soft_ids || g.ids;
            soft := soft + g.n;
            IF dist AND NOT dry_run THEN
                UPDATE memory.observations o SET soft_deleted_at = at, soft_delete_reason = 'retention'
                 WHERE o.org_id OPERATOR(pg_catalog.=) g.org_id AND o.id OPERATOR(pg_catalog.=) ANY (g.ids)
                   AND o.soft_deleted_at IS NULL AND o.expires_at OPERATOR(pg_catalog.<=) at;
            END IF;
        END IF;
    END LOOP;
    IF NOT dry_run AND NOT dist AND soft > 0 THEN
        UPDATE memory.observations o SET soft_deleted_at = at, soft_delete_reason = 'retention'
         WHERE o.id IN (SELECT u.id FROM unnest(soft_ids) u(id));
    END IF;

    -- 2. Past the grace: hard delete, memory.purge events per org and tier (the seed's payload).
    FOR g IN EXECUTE
        'SELECT d.org_id, d.classification, d.denied, pg_catalog.array_agg(d.id ORDER BY d.id) AS ids, pg_catalog.count(*) AS n,
                CASE WHEN pg_catalog.count(DISTINCT d.project_id) OPERATOR(pg_catalog.=) 1 THEN pg_catalog.min(d.project_id) END AS project_id,
                CASE WHEN pg_catalog.count(DISTINCT d.workspace_id) OPERATOR(pg_catalog.=) 1 THEN pg_catalog.min(d.workspace_id) END AS workspace_id
           FROM (SELECT a.*, (pg_catalog.row_number() OVER (PARTITION BY a.org_id, a.classification, a.denied ORDER BY a.id) OPERATOR(pg_catalog.-) 1)
                             OPERATOR(pg_catalog./) 1000 AS part
                   FROM (SELECT o.id, o.org_id, o.project_id, o.workspace_id, o.classification,
                                memory._held(o.org_id, o.user_id, o.id) AS denied
                           FROM memory.observations o
                          WHERE o.soft_deleted_at IS NOT NULL AND o.purge_after IS NOT NULL AND o.purge_after OPERATOR(pg_catalog.<=) $1
                            -- A late run still leaves the full grace after the soft delete (memory_core::retention::purge_due).
                            AND memory._purge_due(o.soft_deleted_at, o.purge_after, o.expires_at, $1)'
                          || lock || ') a) d
          GROUP BY 1, 2, 3, d.part ORDER BY 1, 2, 3, d.part' USING at
    LOOP
        IF g.denied THEN
            PERFORM memory._audit('memory.purge.denied', jsonb_build_object('orgId', g.org_id, 'actorId', actor,
                    'observationIds', to_jsonb(g.ids), 'classification', g.classification, 'stage', 'hard_delete',
                    'reason', 'legal hold', 'dryRun', dry_run), g.org_id);
            denied := denied + g.n;
        ELSE
            PERFORM memory._audit('memory.purge', jsonb_build_object('workspaceId', g.workspace_id, 'actorId', actor,
                    'orgId', g.org_id, 'projectId', g.project_id, 'observationIds', to_jsonb(g.ids),
                    'retentionPolicyId', (SELECT p.id FROM memory.retention_policies p
                                           WHERE p.tier = g.classification AND (p.org_id = g.org_id OR p.org_id IS NULL)
                                           ORDER BY p.org_id NULLS LAST LIMIT 1),
                    'classification', g.classification, 'dryRun', dry_run), g.org_id, g.project_id, g.workspace_id);
            hard_ids := hard_ids || g.ids;
            hard := hard + g.n;
            IF dist AND NOT dry_run THEN
                DELETE FROM memory.observations o
                 WHERE o.org_id OPERATOR(pg_catalog.=) g.org_id AND o.id OPERATOR(pg_catalog.=) ANY (g.ids)
                   AND o.soft_deleted_at IS NOT NULL AND o.purge_after OPERATOR(pg_catalog.<=) at
                   AND memory._purge_due(o.soft_deleted_at, o.purge_after, o.expires_at, at)
                   -- (a row held since is left, as the hold trigger on its shard would refuse it)
                   AND NOT EXISTS (SELECT 1 FROM memory.legal_holds h
                                    WHERE h.released_at IS NULL AND h.org_id OPERATOR(pg_catalog.=) o.org_id
                                      AND (h.observation_id OPERATOR(pg_catalog.=) o.id
                                           OR (h.observation_id IS NULL AND (h.user_id OPERATOR(pg_catalog.=) o.user_id OR h.user_id IS NULL))));
            END IF;
        END IF;
    END LOOP;
    IF NOT dry_run AND NOT dist AND hard > 0 THEN
        PERFORM memory._hold_gate(true);   -- held rows were denied above
        DELETE FROM memory.observations o WHERE o.id IN (SELECT u.id FROM unnest(hard_ids) u(id));
        PERFORM memory._hold_gate(false);
    END IF;

    -- 3. Live rows past archive_at move to the archive (held rows move too: the archive keeps
    -- them; on Citus they stay until the hold ends); rows this run soft-deletes are not archived
    -- by it (a dry run predicts that too).
    FOR g IN EXECUTE
        'SELECT d.org_id, pg_catalog.array_agg(d.id ORDER BY d.id) AS ids, pg_catalog.count(*) AS n
           FROM (SELECT a.*, (pg_catalog.row_number() OVER (PARTITION BY a.org_id ORDER BY a.id) OPERATOR(pg_catalog.-) 1)
                             OPERATOR(pg_catalog./) 1000 AS part
                   FROM (SELECT o.id, o.org_id
                           FROM memory.observations o
                          WHERE o.soft_deleted_at IS NULL AND o.archive_at IS NOT NULL AND o.archive_at OPERATOR(pg_catalog.<=) $1
                            AND NOT EXISTS (SELECT 1 FROM unnest($2::uuid[]) s(id) WHERE s.id OPERATOR(pg_catalog.=) o.id)
                            -- On Citus held rows stay in the table until their hold ends: the hold
                            -- gate that lets them move is this backend''s, and the hold triggers of
                            -- the shards fire in the workers'' backends.
                            AND NOT ($3 AND memory._held(o.org_id, o.user_id, o.id))'
                          || lock || ') a) d
          GROUP BY 1, d.part ORDER BY 1, d.part' USING at, soft_ids, dist
    LOOP
        PERFORM memory._audit('memory.archive', jsonb_build_object('orgId', g.org_id, 'actorId', actor,
                'observationIds', to_jsonb(g.ids), 'count', g.n, 'dryRun', dry_run), g.org_id);
        archive_ids := archive_ids || g.ids;
        archived := archived + g.n;
        IF dist AND NOT dry_run THEN
            -- The group's rows, locked on their shard, move in one statement naming the org.
            PERFORM 1 FROM memory.observations o
              WHERE o.org_id OPERATOR(pg_catalog.=) g.org_id AND o.id OPERATOR(pg_catalog.=) ANY (g.ids) FOR UPDATE;
            WITH moved AS (
                DELETE FROM memory.observations o
                 WHERE o.org_id OPERATOR(pg_catalog.=) g.org_id AND o.id OPERATOR(pg_catalog.=) ANY (g.ids)
                   AND o.soft_deleted_at IS NULL AND o.archive_at OPERATOR(pg_catalog.<=) at
                   AND NOT EXISTS (SELECT 1 FROM memory.legal_holds h
                                    WHERE h.released_at IS NULL AND h.org_id OPERATOR(pg_catalog.=) o.org_id
                                      AND (h.observation_id OPERATOR(pg_catalog.=) o.id
                                           OR (h.observation_id IS NULL AND (h.user_id OPERATOR(pg_catalog.=) o.user_id OR h.user_id IS NULL))))
                RETURNING o.*)
            INSERT INTO memory.observations_archive SELECT m.*, at FROM moved m;
        END IF;
    END LOOP;
    IF NOT dry_run AND NOT dist AND archived > 0 THEN
        INSERT INTO memory.observations_archive
        SELECT o.*, at FROM memory.observations o WHERE o.id IN (SELECT u.id FROM unnest(archive_ids) u(id));
        -- Archiving moves held rows too (their holds follow them to the archive).
        PERFORM memory._hold_gate(true);
        DELETE FROM memory.observations o WHERE o.id IN (SELECT u.id FROM unnest(archive_ids) u(id));
        PERFORM memory._hold_gate(false);
    END IF;

    -- 4. Governed application tables with stamps and a soft-delete column.
    FOR g IN SELECT t.table_name, t.options FROM memory.governed_tables t
              WHERE NOT t.builtin AND jsonb_typeof(t.options->'stamps') = 'object' ORDER BY t.table_name::text LOOP
        IF g.options->'stamps'->>'soft_deleted_at' IS NULL OR g.options->>'id' IS NULL THEN
            skipped := skipped || to_jsonb(g.table_name::text);
            CONTINUE;
        END IF;
        -- One table's failure (a column renamed since govern, the owner's trigger raising) is
        -- reported and does not stop the others.
        BEGIN
            r := memory._retention_sweep(g.table_name, g.options, dry_run, at);
        EXCEPTION WHEN OTHERS THEN
            failed := failed || jsonb_build_object(g.table_name::text, jsonb_build_object('sqlstate', SQLSTATE, 'message', SQLERRM));
            CONTINUE;
        END;
        tables := tables || jsonb_build_object(g.table_name::text, r);
        soft := soft + (r->>'soft_deleted')::bigint;
        hard := hard + (r->>'hard_deleted')::bigint;
        denied := denied + (r->>'denied')::bigint;
    END LOOP;

    RETURN jsonb_build_object('soft_deleted', soft, 'hard_deleted', hard, 'archived', archived,
                              'denied', denied, 'dry_run', dry_run, 'at', at, 'tables', tables, 'skipped_tables', skipped,
                              'failed_tables', failed);
END $$;

-- Citus (SPEC §10): the orgs of a subject's rows in a distributed application table that the
-- table's owner may act for, sorted. On a shard no function may read the registries (a
-- distributed query from a query on a shard), so erasure and export work these out here and
-- their statements name the orgs.
CREATE FUNCTION memory._subject_orgs(tbl regclass, user_col text, org_col text, subject text)
RETURNS text[] LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r jsonb := memory._exec_as_table_owner(tbl,
                   format('SELECT coalesce(pg_catalog.jsonb_agg(DISTINCT t.%I::pg_catalog.text), ''[]'') FROM %s t
                            WHERE t.%I::pg_catalog.text OPERATOR(pg_catalog.=) $1', org_col, tbl, user_col),
                   ARRAY[subject]);
BEGIN
    RETURN ARRAY(SELECT o FROM pg_catalog.jsonb_array_elements_text(r) o
                  WHERE memory._may_act_for_role((SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid = tbl), o)
                  ORDER BY 1);
END $$;

REVOKE ALL ON FUNCTION memory._subject_orgs(regclass, text, text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION memory._local_relation(regclass, text), memory._reclassify_in(text, uuid, memory.classification, text, jsonb),
                       memory._org_of(regclass, uuid) FROM PUBLIC;

CREATE OR REPLACE FUNCTION memory.erase_subject(user_id text)
RETURNS jsonb LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    subject text := erase_subject.user_id;
    counts  jsonb := '{}';
    held    bigint;
    n       bigint;
    t       record;
    r       jsonb;
    -- A role bound to orgs erases in its acting org only; unrestricted roles everywhere.
    scope   text := memory._scope_org();
    o       text;
    failed  jsonb;
    skipped jsonb := '[]';
BEGIN
    IF memory._blank(subject) THEN
        RAISE EXCEPTION 'memory.erase_subject needs a user_id' USING ERRCODE = '22023';
    END IF;
    -- The hold test is written out in the deletes (memory._held in the counts): on Citus these
    -- statements run on the shards, where Citus refuses a STABLE function of a column in a
    -- DELETE. No tenant test runs in them: the scope is worked out here, for the caller.
    SELECT count(*) INTO held FROM memory.observations o
     WHERE o.user_id = subject AND (scope IS NULL OR o.org_id = scope) AND memory._held(o.org_id, o.user_id, o.id);
    DELETE FROM memory.observation_weight_history h USING memory.observations o
     WHERE h.observation_id = o.id AND h.org_id = o.org_id AND o.user_id = subject AND (scope IS NULL OR o.org_id = scope)
       AND NOT EXISTS (SELECT 1 FROM memory.legal_holds lh
                           WHERE lh.released_at IS NULL AND lh.org_id OPERATOR(pg_catalog.=) o.org_id
                             AND (lh.observation_id OPERATOR(pg_catalog.=) o.id
                                  OR (lh.observation_id IS NULL AND (lh.user_id OPERATOR(pg_catalog.=) o.user_id OR lh.user_id IS NULL))));
    GET DIAGNOSTICS n = ROW_COUNT; counts := counts || jsonb_build_object('weight_history', n);
    DELETE FROM memory.observations o WHERE o.user_id = subject AND (scope IS NULL OR o.org_id = scope)
       AND NOT EXISTS (SELECT 1 FROM memory.legal_holds lh
                           WHERE lh.released_at IS NULL AND lh.org_id OPERATOR(pg_catalog.=) o.org_id
                             AND (lh.observation_id OPERATOR(pg_catalog.=) o.id
                                  OR (lh.observation_id IS NULL AND (lh.user_id OPERATOR(pg_catalog.=) o.user_id OR lh.user_id IS NULL))));
    GET DIAGNOSTICS n = ROW_COUNT; counts := counts || jsonb_build_object('observations', n);
    SELECT held + count(*) INTO held FROM memory.observations_archive a
     WHERE a.user_id = subject AND (scope IS NULL OR a.org_id = scope) AND memory._held(a.org_id, a.user_id, a.id);
    DELETE FROM memory.observations_archive o WHERE o.user_id = subject AND (scope IS NULL OR o.org_id = scope)
       AND NOT EXISTS (SELECT 1 FROM memory.legal_holds lh
                           WHERE lh.released_at IS NULL AND lh.org_id OPERATOR(pg_catalog.=) o.org_id
                             AND (lh.observation_id OPERATOR(pg_catalog.=) o.id
                                  OR (lh.observation_id IS NULL AND (lh.user_id OPERATOR(pg_catalog.=) o.user_id OR lh.user_id IS NULL))));
    GET DIAGNOSTICS n = ROW_COUNT; counts := counts || jsonb_build_object('archive', n);
    -- Governed application tables with a user column, each as its owner (its triggers and casts
    -- run with the owner's rights, never the definer's). A scoped erase needs the table's org column.
    FOR t IN SELECT g.relid::regclass AS table_name, g.options->>'user' AS col, g.options->>'org' AS org_col
               FROM memory.governance_registry g
              WHERE NOT g.builtin AND g.options->>'user' IS NOT NULL AND pg_catalog.to_regclass(g.relid::text) IS NOT NULL
              ORDER BY g.relid::text LOOP
        IF scope IS NOT NULL AND t.org_col IS NULL THEN
            skipped := skipped || to_jsonb(t.table_name::text);
            CONTINUE;
        END IF;
        -- Rows of orgs the table's owner may act for only (the statement runs as that owner), and
        -- one table's failure is reported without stopping the erasure elsewhere.
        BEGIN
            -- Erasure keeps its rule for application tables: the subject's rows go, held or not
            -- (the hold gate; a failure closes it with the subtransaction).
            failed := '{}';
            PERFORM memory._hold_gate(true);
            IF t.org_col IS NOT NULL AND memory._citus_distributed(t.table_name) THEN
                -- Citus (SPEC §10) runs no STABLE function of a column in a distributed DELETE,
                -- nor any that reads the registries on a shard: the DELETE names each org
                -- (memory._subject_orgs). One org at a time, on its shard: the hold gate is this
                -- backend's, and the shards' hold triggers run in the workers' backends, so a held
                -- row there still raises MX006. That org's rows stay (reported under
                -- failed_tables); the other orgs' rows go.
                n := 0;
                FOREACH o IN ARRAY memory._subject_orgs(t.table_name, t.col, t.org_col, subject) LOOP
                    CONTINUE WHEN scope IS NOT NULL AND o OPERATOR(pg_catalog.<>) scope;
                    BEGIN
                        -- (A failed org's subtransaction closed the gate: open again.)
                        PERFORM memory._hold_gate(true);
                        n := n + (memory._exec_as_table_owner(t.table_name,
                                      format('DELETE FROM %s t WHERE t.%I::pg_catalog.text OPERATOR(pg_catalog.=) $1
                                                 AND t.%I::pg_catalog.text OPERATOR(pg_catalog.=) $2',
                                             t.table_name, t.col, t.org_col),
                                      ARRAY[subject, o])->>'processed')::bigint;
                    EXCEPTION WHEN OTHERS THEN
                        failed := failed || jsonb_build_object(o, jsonb_build_object('sqlstate', SQLSTATE, 'message', SQLERRM));
                    END;
                END LOOP;
                r := jsonb_build_object('processed', n);
            ELSE
                r := memory._exec_as_table_owner(t.table_name,
                         format('DELETE FROM %s t WHERE t.%I::pg_catalog.text OPERATOR(pg_catalog.=) $1 AND memory._may_act_for(%s)%s',
                                t.table_name, t.col,
                                CASE WHEN t.org_col IS NULL THEN 'NULL' ELSE format('t.%I::pg_catalog.text', t.org_col) END,
                                CASE WHEN scope IS NULL THEN '' ELSE format(' AND t.%I::pg_catalog.text OPERATOR(pg_catalog.=) $2', t.org_col) END),
                         ARRAY[subject, scope]);
            END IF;
            PERFORM memory._hold_gate(false);
        EXCEPTION WHEN OTHERS THEN
            counts := jsonb_set(counts, '{failed_tables}', coalesce(counts->'failed_tables', '{}')
                                || jsonb_build_object(t.table_name::text, jsonb_build_object('sqlstate', SQLSTATE, 'message', SQLERRM)));
            CONTINUE;
        END;
        n := (r->>'processed')::bigint;
        counts := jsonb_set(counts, '{tables}', coalesce(counts->'tables', '{}') || jsonb_build_object(t.table_name::text, n));
        IF failed OPERATOR(pg_catalog.<>) '{}' THEN
            counts := jsonb_set(counts, '{failed_tables}', coalesce(counts->'failed_tables', '{}')
                                || jsonb_build_object(t.table_name::text, (SELECT v FROM pg_catalog.jsonb_each(failed) e(k, v) ORDER BY k LIMIT 1)
                                                                         || jsonb_build_object('orgs', failed)));
        END IF;
    END LOOP;
    IF jsonb_array_length(skipped) > 0 THEN
        counts := counts || jsonb_build_object('skipped_tables', skipped);
    END IF;
    -- The account's consent-era rows (SPEC §6), leaving a deletion stub per org.
    r := memory._erase_consent_rows(subject, scope);
    counts := counts || jsonb_build_object('consent', r);
    IF (SELECT sum(v::bigint) FROM jsonb_each_text(r) x(k, v)) > 0 THEN
        PERFORM memory._audit('memory.user.delete', jsonb_build_object('subject', memory._pseudonym(subject), 'counts', r), scope);
    END IF;
    -- One event naming the subject only by pseudonym, on the acting org's chain (the platform
    -- chain for an unrestricted erase): the log itself is never edited, so the chain still verifies.
    PERFORM memory._audit('memory.forget',
        jsonb_build_object('subject', memory._pseudonym(subject), 'counts', counts, 'held', held), scope);
    RETURN counts || jsonb_build_object('held', held);
END $$;

CREATE OR REPLACE FUNCTION memory.export_subject(user_id text, include_restricted boolean DEFAULT false)
RETURNS jsonb LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    subject  text := export_subject.user_id;
    obs      jsonb;
    arch     jsonb;
    hist     jsonb;
    manifest jsonb := '{}';
    s        record;
    t        record;
    restricted text;
    r        jsonb;
    tables   jsonb := '{}';
    scope    text;
    consent  jsonb;
BEGIN
    IF memory._blank(subject) THEN
        RAISE EXCEPTION 'memory.export_subject needs a user_id' USING ERRCODE = '22023';
    END IF;
    scope := memory._scope_org();
    -- Everything still held about the subject: expired rows too, until retention soft-deletes
    -- them (soft-deleted rows are invisible to every query function).
    SELECT coalesce(jsonb_agg(to_jsonb(o) ORDER BY o.created_at, o.id), '[]') INTO obs
      FROM memory.observations o
     WHERE o.user_id = subject AND (scope IS NULL OR o.org_id = scope) AND o.soft_deleted_at IS NULL
       AND (include_restricted OR o.classification <> 'restricted');
    SELECT coalesce(jsonb_agg(to_jsonb(a) ORDER BY a.created_at, a.id), '[]') INTO arch
      FROM memory.observations_archive a
     WHERE a.user_id = subject AND (scope IS NULL OR a.org_id = scope) AND (include_restricted OR a.classification <> 'restricted');
    SELECT coalesce(jsonb_agg(to_jsonb(h) ORDER BY h.recorded_at, h.id), '[]') INTO hist
      FROM memory.observation_weight_history h JOIN memory.observations o ON o.id = h.observation_id AND o.org_id = h.org_id
     WHERE o.user_id = subject AND (scope IS NULL OR o.org_id = scope) AND o.soft_deleted_at IS NULL
       AND (include_restricted OR o.classification <> 'restricted');
    consent := memory._export_consent_rows(subject, scope);
    FOR s IN SELECT * FROM (VALUES ('observations', obs), ('archive', arch), ('weight_history', hist),
                                   ('consents', consent->'consents'), ('user_contexts', consent->'user_contexts'),
                                   ('persona_drift', consent->'persona_drift'), ('training_candidates', consent->'training_candidates')) v(name, rows) LOOP
        manifest := manifest || jsonb_build_object(s.name, jsonb_build_object(
            'count', jsonb_array_length(s.rows),
            'sha256', encode(sha256(convert_to(s.rows::text, 'UTF8')), 'hex')));
    END LOOP;
    -- Governed application tables with a user column (what erase_subject deletes), read as each
    -- table's owner, rows of orgs that owner may act for (and of the acting org when scoped).
    FOR t IN SELECT g.relid::regclass AS table_name, g.options->>'user' AS col, g.options->>'org' AS org_col,
                    coalesce(g.options->>'audit_tier', g.options->'target'->>0) AS tier_col
               FROM memory.governance_registry g
              WHERE NOT g.builtin AND g.options->>'user' IS NOT NULL AND pg_catalog.to_regclass(g.relid::text) IS NOT NULL
              ORDER BY g.relid::text LOOP
        CONTINUE WHEN scope IS NOT NULL AND t.org_col IS NULL;
        BEGIN
            restricted := CASE WHEN include_restricted OR t.tier_col IS NULL THEN ''
                               WHEN memory._column_type(t.table_name, t.tier_col, 'tier') = 'jsonb'::regtype
                                    THEN format(' AND (t.%I OPERATOR(pg_catalog.->>) ''classification'') IS DISTINCT FROM ''restricted''', t.tier_col)
                               ELSE format(' AND t.%I::pg_catalog.text IS DISTINCT FROM ''restricted''', t.tier_col) END;
            IF t.org_col IS NOT NULL AND memory._citus_distributed(t.table_name) THEN
                -- Citus (SPEC §10): the read names the subject's orgs (memory._subject_orgs).
                r := memory._exec_as_table_owner(t.table_name, format(
                    'SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.to_jsonb(t)), ''[]'') FROM %s t
                      WHERE t.%I::pg_catalog.text OPERATOR(pg_catalog.=) $1
                        AND t.%I::pg_catalog.text OPERATOR(pg_catalog.=) ANY ($3::pg_catalog.text[])%s%s',
                    t.table_name, t.col, t.org_col,
                    CASE WHEN scope IS NULL THEN '' ELSE format(' AND t.%I::pg_catalog.text OPERATOR(pg_catalog.=) $2', t.org_col) END,
                    restricted),
                    ARRAY[subject, scope, memory._subject_orgs(t.table_name, t.col, t.org_col, subject)::text]);
            ELSE
                r := memory._exec_as_table_owner(t.table_name, format(
                    'SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.to_jsonb(t)), ''[]'') FROM %s t
                      WHERE t.%I::pg_catalog.text OPERATOR(pg_catalog.=) $1 AND memory._may_act_for(%s)%s%s',
                    t.table_name, t.col,
                    CASE WHEN t.org_col IS NULL THEN 'NULL' ELSE format('t.%I::pg_catalog.text', t.org_col) END,
                    CASE WHEN scope IS NULL THEN '' ELSE format(' AND t.%I::pg_catalog.text OPERATOR(pg_catalog.=) $2', t.org_col) END,
                    restricted),
                    ARRAY[subject, scope]);
            END IF;
        EXCEPTION WHEN OTHERS THEN
            r := jsonb_build_object('error', jsonb_build_object('sqlstate', SQLSTATE, 'message', SQLERRM));
        END;
        tables := tables || jsonb_build_object(t.table_name::text, r);
        IF jsonb_typeof(r) = 'array' THEN
            manifest := manifest || jsonb_build_object('table:' || t.table_name::text, jsonb_build_object(
                'count', jsonb_array_length(r), 'sha256', encode(sha256(convert_to(r::text, 'UTF8')), 'hex')));
        END IF;
    END LOOP;
    PERFORM memory._audit('memory.export',
        jsonb_build_object('subject', memory._pseudonym(subject), 'manifest', manifest, 'includeRestricted', include_restricted), scope);
    RETURN jsonb_build_object('schema_version', 1, 'generated_at', now(), 'include_restricted', include_restricted,
                              'manifest', manifest,
                              'sections', jsonb_build_object('observations', obs, 'archive', arch, 'weight_history', hist,
                                                             'tables', tables) || consent);
END $$;

CREATE OR REPLACE FUNCTION memory.end_task(task_id text)
RETURNS bigint LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n bigint;
    org_scope text := memory._scope_org();
BEGIN
    IF memory._blank(task_id) THEN
        RAISE EXCEPTION 'memory.end_task needs a task_id' USING ERRCODE = '22023';
    END IF;
    -- (The hold test written out, as in memory.erase_subject.)
    DELETE FROM memory.observations o
     WHERE o.task_id = end_task.task_id AND o.memory_type = 'working' AND (org_scope IS NULL OR o.org_id = org_scope)
       AND NOT EXISTS (SELECT 1 FROM memory.legal_holds lh
                           WHERE lh.released_at IS NULL AND lh.org_id OPERATOR(pg_catalog.=) o.org_id
                             AND (lh.observation_id OPERATOR(pg_catalog.=) o.id
                                  OR (lh.observation_id IS NULL AND (lh.user_id OPERATOR(pg_catalog.=) o.user_id OR lh.user_id IS NULL))));
    GET DIAGNOSTICS n = ROW_COUNT;
    -- The task's user contexts expire 24 hours after it ends (seed §3.2); maintenance purges them.
    UPDATE memory.user_contexts u SET expires_at = now() + interval '24 hours'
     WHERE u.task_id = end_task.task_id AND u.scope = 'task' AND u.expires_at IS NULL AND (org_scope IS NULL OR u.org_id = org_scope);
    RETURN n;
END $$;

COMMENT ON FUNCTION memory.end_task(text) IS 'Clear the working memories of a finished task (rt-005), except rows under a legal hold, and let its user contexts expire 24 hours later; returns how many memories were cleared.';

CREATE OR REPLACE FUNCTION memory.transfer_observations(ids uuid[], to_project_id text)
RETURNS TABLE (id uuid, transferred boolean, reason text)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r   record;
    moved jsonb := '{}';
    org text;
    cls memory.classification;
    sd  timestamptz;
BEGIN
    IF memory._blank(to_project_id) THEN
        RAISE EXCEPTION 'memory.transfer_observations needs a target project' USING ERRCODE = '22023';
    END IF;
    FOR r IN SELECT u.id AS uid, u.ord, u.ord > min(u.ord) OVER (PARTITION BY u.id) AS repeated
               FROM unnest(coalesce(ids, '{}')) WITH ORDINALITY AS u(id, ord)
              ORDER BY u.ord LOOP
        id := r.uid;
        -- The row's org, checked for the caller (memory._org_of); the row is then read
        -- and changed naming its org.
        org := CASE WHEN NOT r.repeated THEN memory._org_of('memory.observations', r.uid) END;
        IF org IS NOT NULL THEN
            SELECT o.classification, o.soft_deleted_at INTO cls, sd FROM memory.observations o
             WHERE o.org_id OPERATOR(pg_catalog.=) org AND o.id OPERATOR(pg_catalog.=) r.uid FOR UPDATE;
            IF NOT FOUND THEN
                org := NULL;
            END IF;
        END IF;
        IF r.repeated THEN
            -- An id given again is reported, not moved again (a row updated 100,000 times in one
            -- statement would cost that many row versions).
            transferred := false; reason := 'duplicate_in_call';
        ELSIF org IS NULL THEN
            transferred := false; reason := 'not_found';
        ELSIF sd IS NOT NULL THEN
            transferred := false; reason := 'soft_deleted';
        ELSIF cls > 'internal' THEN
            -- Only public and internal observations may cross projects.
            transferred := false; reason := 'classification:' || cls;
        ELSE
            UPDATE memory.observations o SET project_id = to_project_id
             WHERE o.org_id OPERATOR(pg_catalog.=) org AND o.id OPERATOR(pg_catalog.=) r.uid;
            transferred := true; reason := 'transferred';
            moved := jsonb_set(moved, ARRAY[org], coalesce(moved->org, '[]') || to_jsonb(r.uid));
        END IF;
        RETURN NEXT;
    END LOOP;
    FOR org IN SELECT jsonb_object_keys(moved) LOOP
        PERFORM memory._audit('memory.transfer', jsonb_build_object('observationIds', moved->org, 'toProjectId', to_project_id), org);
    END LOOP;
END $$;

CREATE TABLE memory.maintenance_runs (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at          timestamptz NOT NULL,
    started_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    finished_at timestamptz,
    phases      jsonb NOT NULL DEFAULT '{}',
    sqlstate    text,
    error       text
);

COMMENT ON TABLE memory.maintenance_runs IS
  'One row per memory.run_maintenance: when, what each phase did, and the error that stopped it (its work is then rolled back).';

SELECT pg_catalog.pg_extension_config_dump('memory.maintenance_runs', '');

CREATE OR REPLACE FUNCTION memory.run_maintenance(at timestamptz DEFAULT now())
RETURNS jsonb LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    ret    jsonb;
    parts  int;
    run_id bigint;
    result jsonb;
    pending bigint;
    err_state text;
    err_text text;
BEGIN
    IF at IS NULL OR NOT isfinite(at) THEN
        RAISE EXCEPTION 'memory.run_maintenance needs a finite time' USING ERRCODE = '22023';
    END IF;
    INSERT INTO memory.maintenance_runs (at) VALUES (at) RETURNING id INTO run_id;
    BEGIN
        pending := memory._audit_integrate(false);
        RAISE DEBUG 'memory maintenance: retention and archive as of %', at;
        ret := memory.run_retention(false, at);
        parts := memory.audit_ensure_partitions(3, at);
        RAISE DEBUG 'memory maintenance: % audit partition(s) created', parts;
        RAISE DEBUG 'memory maintenance: expired task contexts and drift rows due for purge';
        result := jsonb_build_object('retention', ret, 'audit_partitions_created', parts, 'audit_integrated', pending,
                                     'consent', memory._consent_maintenance(at), 'knowledge', memory._knowledge_retention(at), 'at', at);
        UPDATE memory.maintenance_runs SET finished_at = clock_timestamp(), phases = result WHERE id = run_id;
    EXCEPTION WHEN OTHERS THEN
        -- The phases' work is rolled back; the run and its error stay recorded.
        -- (Into variables first: in the UPDATE, "sqlstate" would also name the column.)
        err_state := SQLSTATE;
        err_text := SQLERRM;
        UPDATE memory.maintenance_runs m SET finished_at = clock_timestamp(), sqlstate = err_state, error = err_text WHERE m.id = run_id;
        RAISE WARNING 'memory maintenance failed: % (%)', err_text, err_state;
        result := jsonb_build_object('error', err_text, 'sqlstate', err_state, 'at', at);
    END;
    RETURN result || jsonb_build_object('run_id', run_id);
END $$;
COMMENT ON FUNCTION memory.run_maintenance(timestamptz) IS
  'Periodic work in one call: run_retention (soft delete, hard delete, archive), audit partitions ahead, expired task contexts and drift rows due for purge, knowledge retention (memory._knowledge_retention), recorded in memory.maintenance_runs (an error is recorded there and returned, its work rolled back). Schedule it with memory.schedule_maintenance.';

CREATE OR REPLACE FUNCTION memory.schedule_maintenance(schedule text DEFAULT '*/15 * * * *')
RETURNS bigint LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE job bigint;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_cron') THEN
        RAISE EXCEPTION 'pg_cron is not installed in this database' USING ERRCODE = '55000',
            HINT = 'Add pg_cron to shared_preload_libraries, set cron.database_name to this database, and CREATE EXTENSION pg_cron.';
    END IF;
    IF memory._blank(schedule) THEN
        RAISE EXCEPTION 'a cron schedule is required' USING ERRCODE = '22023';
    END IF;
    EXECUTE 'SELECT cron.schedule($1, $2, $3)' INTO job
      USING 'memory_ext maintenance', schedule, 'SELECT memory.run_maintenance()';
    RETURN job;
END $$;

CREATE OR REPLACE FUNCTION memory.can_transition("from" memory.lifecycle_state, "to" memory.lifecycle_state)
RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
AS $$ SELECT memory._can_transition($1::pg_catalog.text, $2::pg_catalog.text) $$;

CREATE INDEX recheck_tasks_claim ON memory.recheck_tasks (claim_id);

CREATE OR REPLACE FUNCTION memory._entities_guard()
RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NEW.id <> OLD.id OR NEW.org_id <> OLD.org_id OR NEW.name <> OLD.name OR NEW.entity_type <> OLD.entity_type
       OR NEW.subject_id IS DISTINCT FROM OLD.subject_id OR NEW.t_created <> OLD.t_created THEN
        RAISE EXCEPTION 'entity % cannot be edited in place (id, org_id, name, entity_type, subject_id, t_created are fixed)', OLD.id
            USING ERRCODE = '55000', HINT = 'Retract it and create a corrected entity.';
    END IF;
    -- A retirement the state machine refuses (memory_lifecycle raises MX001 next) is audited as
    -- a denied memory.govern.retire_attempt although the statement fails (seed §2).
    IF NEW.lifecycle_state <> OLD.lifecycle_state AND NEW.lifecycle_state IN ('retracted', 'archived')
       AND NOT memory.can_transition(OLD.lifecycle_state, NEW.lifecycle_state) THEN
        PERFORM memory._audit_denied('memory.govern.retire_attempt',
            jsonb_build_object('entityId', OLD.id, 'actionDetail', 'denied', 'fromState', OLD.lifecycle_state,
                               'toState', NEW.lifecycle_state, 'deniedRole', current_user::text)::text, OLD.org_id);
    END IF;
    IF NEW.lifecycle_state <> OLD.lifecycle_state AND memory._stamps_t_invalid(NEW.lifecycle_state::text) THEN
        NEW.t_invalid := coalesce(NEW.t_invalid, now());
    END IF;
    RETURN NEW;
END $$;

CREATE OR REPLACE FUNCTION memory._no_hard_delete()
RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- (memory._table_of: on Citus the trigger fires on a shard of the table.)
    IF TG_OP = 'DELETE' AND memory._table_of(TG_RELID) OPERATOR(pg_catalog.=) 'memory.claims'::regclass::oid
       AND memory._knowledge_gate_open() THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'rows of % are never hard-deleted (% is not allowed)', memory._table_of(TG_RELID)::regclass, TG_OP
        USING ERRCODE = 'MX006',
              HINT = 'Delete is a state transition: UPDATE ... SET lifecycle_state = ''retracted'' or ''archived''.';
END $$;

CREATE OR REPLACE FUNCTION memory._claims_before_insert()
RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
    SET citus.allow_nested_distributed_execution = on
AS $$
DECLARE
    old_claim memory.claims;
    bad text;
    taken boolean;
    -- On Citus it fires on a shard of the claims (the table itself holds no rows there).
    on_shard constant boolean := TG_RELID OPERATOR(pg_catalog.<>) 'memory.claims'::regclass::oid;
BEGIN
    -- A definer trigger fires only where it belongs: attached to a table of the caller's own it
    -- would otherwise supersede claims of any org. (The shard lookup only for another relation:
    -- this runs per row.)
    IF on_shard THEN
        IF memory._table_of(TG_RELID) OPERATOR(pg_catalog.<>) 'memory.claims'::regclass::oid THEN
            RAISE EXCEPTION 'memory._claims_before_insert is the BEFORE INSERT trigger of memory.claims' USING ERRCODE = '39P01';
        END IF;
    END IF;
    IF TG_WHEN OPERATOR(pg_catalog.<>) 'BEFORE' OR TG_OP OPERATOR(pg_catalog.<>) 'INSERT' OR TG_LEVEL OPERATOR(pg_catalog.<>) 'ROW' THEN
        RAISE EXCEPTION 'memory._claims_before_insert is the BEFORE INSERT trigger of memory.claims' USING ERRCODE = '39P01';
    END IF;
    PERFORM memory._require_org(NEW.org_id);
    -- A restore (memory.restore_mode, superuser-only) loads claims as they were: any state, their
    -- supersession links and stamps.
    IF memory._restore_mode() THEN
        RETURN NEW;
    END IF;
    IF NEW.lifecycle_state IS DISTINCT FROM 'pending' THEN
        RAISE EXCEPTION 'invalid lifecycle transition from (new) to %: a claim starts pending', NEW.lifecycle_state
            USING ERRCODE = 'MX001', HINT = 'Insert it pending; a memory_admin promotes it with UPDATE ... SET lifecycle_state = ''active''.';
    END IF;
    bad := memory._pii_unknown(NEW.pii_fields);
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION 'unknown pii_fields name "%"', bad
            USING ERRCODE = '22023', HINT = 'Known: claim_text, subject_id, supports, source, details.<key>.';
    END IF;
    NEW.superseded_by := '{}';
    NEW.t_invalid := NULL;
    NEW.anonymized_at := NULL;
    IF NEW.supersedes IS NULL THEN
        RETURN NEW;
    END IF;
    IF NEW.supersedes = NEW.id THEN
        RAISE EXCEPTION 'claim % cannot supersede itself', NEW.id
            USING ERRCODE = 'MX005', HINT = 'supersedes names the older claim this one replaces.';
    END IF;
    SELECT * INTO old_claim FROM memory.claims c WHERE c.id = NEW.supersedes AND c.org_id = NEW.org_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'claim % to supersede does not exist in org %', NEW.supersedes, NEW.org_id
            USING ERRCODE = '23503';
    END IF;
    IF old_claim.lifecycle_state <> 'active' THEN
        RAISE EXCEPTION 'claim % is %: only an active claim can be superseded', old_claim.id, old_claim.lifecycle_state
            USING ERRCODE = 'MX005';
    END IF;
    -- A cycle would need the new id already in the chain: supersedes is fixed once written, so a
    -- chain only grows at its newest end. An id already taken is a cycle or a duplicate.
    -- (On a single node ids are unique in the table; on Citus per org, and the statement names
    -- the org, so that it reads this shard.)
    IF NOT on_shard THEN
        taken := EXISTS (SELECT 1 FROM memory.claims c WHERE c.id = NEW.id);
    ELSE
        taken := EXISTS (SELECT 1 FROM memory.claims c WHERE c.org_id = NEW.org_id AND c.id = NEW.id);
    END IF;
    IF taken THEN
        RAISE EXCEPTION 'claim % already exists: superseding with it would close a cycle', NEW.id USING ERRCODE = 'MX005';
    END IF;
    IF NOT memory._supersession_tier_allowed(NEW.source, old_claim.source) THEN
        RAISE EXCEPTION 'a tier-3 source (%) may not supersede a tier-1 claim (%)', coalesce(NEW.source, 'unknown'), old_claim.source
            USING ERRCODE = 'MX005', HINT = 'Tier-1: NEJM, JAMA, Cochrane, NCCN. Supersede it with a tier-1 or tier-2 source, or ask a memory_admin to retract it.';
    END IF;
    PERFORM memory._set_superseding(NEW.id);
    UPDATE memory.claims c
       SET lifecycle_state = 'superseded', t_invalid = now(), superseded_by = c.superseded_by || NEW.id
     WHERE c.org_id = old_claim.org_id AND c.id = old_claim.id;
    PERFORM memory._set_superseding(NULL);
    RETURN NEW;
END $$;

CREATE OR REPLACE FUNCTION memory._claims_guard()
RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NEW.id <> OLD.id OR NEW.org_id <> OLD.org_id OR NEW.entity_id <> OLD.entity_id OR NEW.kind <> OLD.kind
       OR NEW.supersedes IS DISTINCT FROM OLD.supersedes OR NEW.t_created <> OLD.t_created OR NEW.field IS DISTINCT FROM OLD.field THEN
        RAISE EXCEPTION 'claim % cannot be edited in place (id, org_id, entity_id, kind, supersedes, t_created, field are fixed)', OLD.id
            USING ERRCODE = '55000', HINT = 'Insert a corrected claim with supersedes.';
    END IF;
    IF (NEW.claim_text <> OLD.claim_text OR NEW.supports <> OLD.supports OR NEW.pii_fields <> OLD.pii_fields
        OR NEW.subject_id IS DISTINCT FROM OLD.subject_id OR NEW.details <> OLD.details OR NEW.source IS DISTINCT FROM OLD.source
        OR NEW.anonymized_at IS DISTINCT FROM OLD.anonymized_at)
       AND NOT memory._knowledge_gate_open() THEN
        RAISE EXCEPTION 'the content of claim % is immutable', OLD.id
            USING ERRCODE = '55000', HINT = 'Insert a corrected claim with supersedes; memory.run_decay alone redacts PII.';
    END IF;
    IF NEW.lifecycle_state <> OLD.lifecycle_state THEN
        IF NOT memory._is_knowledge_admin() THEN
            -- The attempt is audited although this statement fails (seed §2).
            PERFORM memory._audit_denied('memory.govern.unauthorized_access_attempt',
                jsonb_build_object('claimId', OLD.id, 'fromState', OLD.lifecycle_state, 'toState', NEW.lifecycle_state,
                                   'deniedRole', current_user::text, 'action', 'claim.state_transition')::text, OLD.org_id);
            RAISE EXCEPTION 'changing the state of claim % (% to %) needs memory_admin', OLD.id, OLD.lifecycle_state, NEW.lifecycle_state
                USING ERRCODE = '42501', HINT = 'Writers supersede by inserting a claim with supersedes; state changes are for memory_admin.';
        END IF;
        IF memory._stamps_t_invalid(NEW.lifecycle_state::text) THEN
            NEW.t_invalid := coalesce(NEW.t_invalid, now());
        END IF;
    END IF;
    RETURN NEW;
END $$;

CREATE OR REPLACE FUNCTION memory._knowledge_audit()
RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    events jsonb;
    -- Backend memory set by _claims_before_insert, not a setting a session could set itself.
    superseding text := coalesce(memory._superseding(), '');
    -- The table (on Citus the trigger fires on a shard, `claims_102050`) and its own name.
    rel oid := memory._table_of(TG_RELID);
    tbl name := (SELECT c.relname FROM pg_catalog.pg_class c WHERE c.oid OPERATOR(pg_catalog.=) rel);
BEGIN
    IF rel OPERATOR(pg_catalog.<>) ALL (ARRAY['memory.entities'::regclass, 'memory.claims'::regclass, 'memory.relationships'::regclass]::oid[])
       OR TG_WHEN OPERATOR(pg_catalog.<>) 'AFTER' OR TG_LEVEL OPERATOR(pg_catalog.<>) 'STATEMENT' THEN
        RAISE EXCEPTION 'memory._knowledge_audit is the audit trigger of the knowledge tables' USING ERRCODE = '39P01';
    END IF;
    -- Rows loaded by a restore are not new writes: the log comes back with them.
    IF TG_OP = 'INSERT' AND memory._restore_mode() THEN
        RETURN NULL;
    END IF;
    IF tbl = 'entities' AND TG_OP = 'INSERT' THEN
        SELECT jsonb_agg(jsonb_build_object('event_type', 'memory.entity.create', 'org_id', n.org_id,
                 'payload', jsonb_build_object('entityId', n.id, 'entityType', n.entity_type, 'origin', n.origin,
                                               'lifecycleState', n.lifecycle_state, 'ontologyCodes', jsonb_array_length(n.ontology_codes),
                                               'subjectId', memory._subject_pseudonym(n.subject_id))) ORDER BY n.t_created, n.id)
          INTO events FROM memory_new n;
    ELSIF tbl = 'entities' THEN
        SELECT jsonb_agg(e ORDER BY ord) INTO events FROM (
            SELECT 1 AS ord, n.t_invalid, jsonb_build_object('event_type', 'memory.entity.state_transition', 'org_id', n.org_id,
                     'payload', jsonb_build_object('entityId', n.id, 'fromState', o.lifecycle_state, 'toState', n.lifecycle_state,
                                                   'subjectId', memory._subject_pseudonym(n.subject_id))) AS e
              FROM memory_old o JOIN memory_new n USING (org_id, id) WHERE o.lifecycle_state <> n.lifecycle_state
            UNION ALL
            SELECT 2, n.t_invalid, jsonb_build_object('event_type', 'memory.govern.retire_attempt', 'org_id', n.org_id,
                     'payload', jsonb_build_object('entityId', n.id, 'actionDetail', 'approved', 'toState', n.lifecycle_state))
              FROM memory_old o JOIN memory_new n USING (org_id, id)
             WHERE memory._is_retirement(o.lifecycle_state::text, n.lifecycle_state::text)) x;
    ELSIF tbl = 'claims' AND TG_OP = 'INSERT' THEN
        SELECT jsonb_agg(jsonb_build_object('event_type', 'memory.claim.create', 'org_id', n.org_id,
                 'payload', jsonb_build_object('claimId', n.id, 'entityId', n.entity_id, 'kind', n.kind,
                                               'lifecycleState', n.lifecycle_state, 'confidenceScore', n.confidence_score,
                                               'sourceTier', memory._source_tier(n.source), 'supportsCount', cardinality(n.supports),
                                               'piiFields', to_jsonb(n.pii_fields), 'supersedes', n.supersedes,
                                               'claimSha256', encode(sha256(convert_to(n.claim_text, 'UTF8')), 'hex'),
                                               'subjectId', memory._subject_pseudonym(n.subject_id))) ORDER BY n.t_created, n.id)
          INTO events FROM memory_new n;
    ELSIF tbl = 'claims' THEN
        SELECT jsonb_agg(jsonb_build_object(
                 'event_type', CASE WHEN n.lifecycle_state = 'superseded' AND superseding <> '' AND superseding = ANY (n.superseded_by::text[])
                                    THEN 'memory.claim.supersede' ELSE 'memory.claim.state_transition' END,
                 'org_id', n.org_id,
                 'payload', jsonb_build_object('claimId', n.id, 'fromState', o.lifecycle_state, 'toState', n.lifecycle_state,
                                               'confidenceScore', n.confidence_score, 'supersededBy', to_jsonb(n.superseded_by),
                                               'subjectId', memory._subject_pseudonym(n.subject_id))) ORDER BY n.id)
          INTO events FROM memory_old o JOIN memory_new n USING (org_id, id) WHERE o.lifecycle_state <> n.lifecycle_state;
    ELSIF tbl = 'relationships' AND TG_OP = 'INSERT' THEN
        SELECT jsonb_agg(jsonb_build_object('event_type', 'memory.relationship.created', 'org_id', n.org_id,
                 'payload', jsonb_build_object('relationshipId', n.id, 'sourceId', n.source_id, 'targetId', n.target_id,
                                               'relType', n.rel_type, 'subjectId', memory._subject_pseudonym(n.subject_id))) ORDER BY n.t_created, n.id)
          INTO events FROM memory_new n;
    ELSIF tbl = 'relationships' AND TG_OP = 'DELETE' AND NOT memory._knowledge_gate_open() THEN
        -- (memory.run_decay audits its own deletions as memory.job.decay.deleted.)
        SELECT jsonb_agg(jsonb_build_object('event_type', 'memory.relationship.deleted', 'org_id', o.org_id,
                 'payload', jsonb_build_object('relationshipId', o.id, 'relType', o.rel_type)) ORDER BY o.id)
          INTO events FROM memory_old o;
    END IF;
    PERFORM memory._audit_append_many(events);
    RETURN NULL;
END $$;

REVOKE ALL ON FUNCTION memory._knowledge_gate(boolean) FROM PUBLIC;

CREATE OR REPLACE FUNCTION memory._redact_details(details jsonb, fields text[])
RETURNS jsonb LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE WHEN pg_catalog.jsonb_typeof(details) OPERATOR(pg_catalog.=) 'object' THEN
        details OPERATOR(pg_catalog.||) coalesce((
            SELECT pg_catalog.jsonb_object_agg(k, pg_catalog.to_jsonb(memory._redacted_marker()))
              FROM (SELECT DISTINCT pg_catalog.substr(f, 9) AS k FROM pg_catalog.unnest(fields) f
                     WHERE f OPERATOR(pg_catalog.~~) 'details.%' AND pg_catalog.length(f) OPERATOR(pg_catalog.>) 8) x
             WHERE details OPERATOR(pg_catalog.?) x.k), '{}'::jsonb)
    ELSE details END
$$;

CREATE OR REPLACE FUNCTION memory.active_claims(entity_id uuid, at timestamptz DEFAULT now())
RETURNS SETOF memory.claims LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN QUERY
    SELECT c.* FROM memory.claims c
     WHERE c.entity_id = active_claims.entity_id
       AND c.lifecycle_state = 'active'
       AND c.t_created <= coalesce(active_claims.at, now())
       AND (c.decay_at IS NULL OR c.decay_at > coalesce(active_claims.at, now()))
     ORDER BY c.confidence_score DESC, c.t_created DESC;
END $$;

CREATE FUNCTION memory._claim_chain(p_claim uuid)
RETURNS TABLE (o_depth int, o_id uuid, o_state memory.lifecycle_state, o_created timestamptz, o_invalid timestamptz)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE org text;
BEGIN
    PERFORM memory._claim_must_exist(p_claim);
    FOR org IN SELECT DISTINCT c.org_id FROM memory.claims c WHERE c.id OPERATOR(pg_catalog.=) p_claim ORDER BY 1 LOOP
        RETURN QUERY
        WITH RECURSIVE chain (d, cid, st, cr, inv, sup) AS (
            SELECT 0, c.id, c.lifecycle_state, c.t_created, c.t_invalid, c.supersedes
              FROM memory.claims c WHERE c.org_id OPERATOR(pg_catalog.=) org AND c.id OPERATOR(pg_catalog.=) p_claim
            UNION ALL
            SELECT ch.d OPERATOR(pg_catalog.+) 1, c.id, c.lifecycle_state, c.t_created, c.t_invalid, c.supersedes
              FROM chain ch JOIN memory.claims c ON c.org_id OPERATOR(pg_catalog.=) org AND c.id OPERATOR(pg_catalog.=) ch.sup
             WHERE ch.d OPERATOR(pg_catalog.<) 1000000  -- a loop cannot be written (supersedes is fixed), but never spin
        )
        SELECT ch.d, ch.cid, ch.st, ch.cr, ch.inv FROM chain ch ORDER BY ch.d;
    END LOOP;
END $$;

CREATE OR REPLACE FUNCTION memory.claim_chain(claim_id uuid)
RETURNS TABLE (depth int, claim_id uuid, lifecycle_state memory.lifecycle_state, t_created timestamptz, t_invalid timestamptz)
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
AS $$
    SELECT x.o_depth, x.o_id, x.o_state, x.o_created, x.o_invalid FROM memory._claim_chain($1) x
$$;

CREATE OR REPLACE FUNCTION memory.resolve_conflict(a uuid, b uuid)
RETURNS uuid LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    ca memory.claims;
    cb memory.claims;
    loser memory.claims;
    winner memory.claims;
    org text;
BEGIN
    IF a IS NULL OR b IS NULL OR a = b THEN
        RAISE EXCEPTION 'memory.resolve_conflict needs two different claims' USING ERRCODE = '22023';
    END IF;
    -- a's org, checked for the caller (a claim of an org the caller may not act for is not
    -- there for it: 23503, as in record_verdict); then both are locked in id order, naming the
    -- org (so that two resolutions never deadlock, and on Citus on the org's shard).
    org := memory._org_of('memory.claims', a);
    IF org IS NULL THEN
        RAISE EXCEPTION 'claim % does not exist', a USING ERRCODE = '23503';
    END IF;
    PERFORM 1 FROM memory.claims c WHERE c.org_id = org AND c.id IN (a, b) ORDER BY c.id FOR UPDATE;
    SELECT * INTO ca FROM memory.claims c WHERE c.org_id = org AND c.id = a;
    IF NOT FOUND THEN RAISE EXCEPTION 'claim % does not exist', a USING ERRCODE = '23503'; END IF;
    SELECT * INTO cb FROM memory.claims c WHERE c.org_id = org AND c.id = b;
    IF NOT FOUND THEN
        -- (b in another of the caller's orgs: not about the same entity; in no org of the
        -- caller's: not there for it.)
        IF memory._org_of('memory.claims', b) IS NOT NULL THEN
            RAISE EXCEPTION 'claims % and % are not about the same entity', a, b USING ERRCODE = '22023';
        END IF;
        RAISE EXCEPTION 'claim % does not exist', b USING ERRCODE = '23503';
    END IF;
    IF ca.entity_id <> cb.entity_id THEN
        RAISE EXCEPTION 'claims % and % are not about the same entity', a, b USING ERRCODE = '22023';
    END IF;
    IF memory._conflict_loser_is_b(ca.confidence_score, ca.t_created, ca.id, cb.confidence_score, cb.t_created, cb.id) THEN
        loser := cb; winner := ca;
    ELSE
        loser := ca; winner := cb;
    END IF;
    IF ca.lifecycle_state <> 'active' OR cb.lifecycle_state <> 'active' THEN
        RAISE EXCEPTION 'only two active claims conflict (% is %, % is %)', a, ca.lifecycle_state, b, cb.lifecycle_state
            USING ERRCODE = 'MX005';
    END IF;
    UPDATE memory.claims c
       SET lifecycle_state = 'superseded', t_invalid = now(), superseded_by = c.superseded_by || winner.id
     WHERE c.org_id = org AND c.id = loser.id;
    RETURN loser.id;
END $$;

CREATE OR REPLACE FUNCTION memory.freshness_recheck(threshold float8 DEFAULT 0.5, max_age interval DEFAULT '90 days',
                                         backoff interval DEFAULT '7 days', sample_limit int DEFAULT 50,
                                         at timestamptz DEFAULT now())
RETURNS TABLE (claim_id uuid, reason text)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    max_age_us bigint;
    found_tasks jsonb;
    events jsonb;
    scope text;
    o text;
    ids uuid[];
    locked jsonb;
    r record;
    task bigint;
BEGIN
    IF threshold IS NULL OR NOT (threshold >= 0 AND threshold <= 1) THEN
        RAISE EXCEPTION 'threshold must be in [0, 1], got %', threshold USING ERRCODE = '22023';
    END IF;
    IF max_age IS NULL OR max_age <= interval '0' OR max_age > interval '1000 years' THEN
        RAISE EXCEPTION 'max_age must be positive and at most 1000 years, got %', max_age USING ERRCODE = '22023';
    END IF;
    IF backoff IS NULL OR backoff < interval '0' OR backoff > interval '1000 years' THEN
        RAISE EXCEPTION 'backoff must be between 0 and 1000 years, got %', backoff USING ERRCODE = '22023';
    END IF;
    IF sample_limit IS NULL OR sample_limit < 1 OR sample_limit > 10000 THEN
        RAISE EXCEPTION 'sample_limit must be in [1, 10000], got %', sample_limit USING ERRCODE = '22023';
    END IF;
    at := coalesce(at, now());
    max_age_us := (extract(epoch FROM max_age) * 1000000)::bigint;
    scope := memory._scope_org();

    -- Lowest confidence first, then oldest; rows a concurrent tick holds are skipped, not waited for.
    IF memory._citus_distributed('memory.claims') THEN
        -- Citus takes no FOR UPDATE over every shard: the due claims are read first, then locked
        -- org by org (skipping those a concurrent tick holds, and any no longer due), stamped and
        -- queued in statements naming their org.
        found_tasks := '[]';
        FOR o, ids IN
            SELECT d.org_id, array_agg(d.id ORDER BY d.id)
              FROM (SELECT c.org_id, c.id FROM memory.claims c
                     WHERE c.lifecycle_state = 'active'
                       AND (scope IS NULL OR c.org_id = scope)
                       AND (c.confidence_score < threshold OR c.t_created < at - max_age)
                       AND (c.freshness_recheck_requested_at IS NULL OR c.freshness_recheck_requested_at <= at - backoff)
                     ORDER BY c.confidence_score, c.t_created, c.id
                     LIMIT sample_limit) d
             GROUP BY d.org_id ORDER BY d.org_id LOOP
            SELECT coalesce(jsonb_agg(l), '[]') INTO locked FROM (
                SELECT c.id, c.entity_id, c.confidence_score,
                       memory._recheck_reason(c.confidence_score, threshold, c.t_created, max_age_us, at) AS why
                  FROM memory.claims c
                 WHERE c.org_id = o AND c.id = ANY (ids) AND c.lifecycle_state = 'active'
                   AND (c.confidence_score < threshold OR c.t_created < at - max_age)
                   AND (c.freshness_recheck_requested_at IS NULL OR c.freshness_recheck_requested_at <= at - backoff)
                   FOR UPDATE OF c SKIP LOCKED) l;
            UPDATE memory.claims c SET freshness_recheck_requested_at = at
             WHERE c.org_id = o AND c.id = ANY (ARRAY(SELECT (x->>'id')::uuid FROM jsonb_array_elements(locked) x));
            FOR r IN SELECT * FROM jsonb_to_recordset(locked) AS x(id uuid, entity_id uuid, confidence_score float8, why text)
                      ORDER BY x.confidence_score, x.id LOOP
                INSERT INTO memory.recheck_tasks (org_id, claim_id, entity_context, metadata, reason, confidence_score)
                VALUES (o, r.id, ARRAY[r.entity_id],
                        jsonb_build_object('source', 'freshness_confidence', 'trigger', 'freshness_confidence',
                                           'trigger_reason', r.why, 'original_claim_id', r.id),
                        r.why, r.confidence_score)
                RETURNING recheck_tasks.task_id INTO task;
                found_tasks := found_tasks || jsonb_build_object('task_id', task, 'org_id', o, 'claim_id', r.id,
                                                                 'reason', r.why, 'confidence', r.confidence_score);
            END LOOP;
        END LOOP;
        SELECT coalesce(jsonb_agg(x ORDER BY (x->>'task_id')::bigint), '[]') INTO found_tasks FROM jsonb_array_elements(found_tasks) x;
    ELSE
    WITH due AS (
        SELECT c.id, c.org_id, c.entity_id, c.confidence_score,
               memory._recheck_reason(c.confidence_score, threshold, c.t_created, max_age_us, at) AS why
          FROM memory.claims c
         WHERE c.lifecycle_state = 'active'
           AND (scope IS NULL OR c.org_id = scope)
           AND (c.confidence_score < threshold OR c.t_created < at - max_age)
           AND (c.freshness_recheck_requested_at IS NULL OR c.freshness_recheck_requested_at <= at - backoff)
         ORDER BY c.confidence_score, c.t_created, c.id
         LIMIT sample_limit
           FOR UPDATE OF c SKIP LOCKED
    ), stamped AS (
        UPDATE memory.claims c SET freshness_recheck_requested_at = at FROM due d WHERE c.id = d.id RETURNING c.id
    ), tasks AS (
        INSERT INTO memory.recheck_tasks (org_id, claim_id, entity_context, metadata, reason, confidence_score)
        SELECT d.org_id, d.id, ARRAY[d.entity_id],
               jsonb_build_object('source', 'freshness_confidence', 'trigger', 'freshness_confidence',
                                  'trigger_reason', d.why, 'original_claim_id', d.id),
               d.why, d.confidence_score
          FROM due d ORDER BY d.confidence_score, d.id
        RETURNING recheck_tasks.task_id, recheck_tasks.org_id, recheck_tasks.claim_id, recheck_tasks.reason, recheck_tasks.confidence_score
    )
    SELECT coalesce(jsonb_agg(jsonb_build_object('task_id', t.task_id, 'org_id', t.org_id, 'claim_id', t.claim_id,
                                                 'reason', t.reason, 'confidence', t.confidence_score) ORDER BY t.task_id), '[]')
      INTO found_tasks FROM tasks t;
    END IF;

    SELECT coalesce(jsonb_agg(jsonb_build_object('event_type', 'research.freshness_confidence.enqueued', 'org_id', x->>'org_id',
                     'payload', jsonb_build_object('claimId', x->'claim_id', 'reason', x->'reason',
                                                   'confidenceScore', x->'confidence', 'taskId', x->'task_id'))), '[]')
      INTO events FROM jsonb_array_elements(found_tasks) x;
    events := events || jsonb_build_array(jsonb_build_object('event_type', 'research.freshness_confidence.tick', 'org_id', scope,
                'payload', jsonb_build_object('enqueued', jsonb_array_length(found_tasks), 'threshold', threshold,
                                              'maxAgeSec', max_age_us / 1000000, 'backoffSec', extract(epoch FROM backoff)::bigint,
                                              'sampleLimit', sample_limit, 'at', at)));
    PERFORM memory._audit_append_many(events);
    RETURN QUERY SELECT (x->>'claim_id')::uuid, x->>'reason' FROM jsonb_array_elements(found_tasks) x;
END $$;

CREATE OR REPLACE FUNCTION memory.claim_recheck_tasks(worker text, n int DEFAULT 1, lease interval DEFAULT '15 minutes')
RETURNS SETOF memory.recheck_tasks
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    scope text := memory._scope_org();
    o     text;
    taken int := 0;
    got   int;
    ts    timestamptz;
BEGIN
    IF memory._blank(worker) THEN
        RAISE EXCEPTION 'claim_recheck_tasks needs a worker name' USING ERRCODE = '22023';
    END IF;
    IF n IS NULL OR n < 1 OR n > 1000 OR lease IS NULL OR lease <= interval '0' THEN
        RAISE EXCEPTION 'n must be in [1, 1000] and lease positive (got %, %)', n, lease USING ERRCODE = '22023';
    END IF;
    -- Open tasks nobody holds, or whose lease ran out (a worker that died); taken rows are skipped.
    IF memory._citus_distributed('memory.recheck_tasks') THEN
        -- Citus takes no FOR UPDATE over every shard: org by org, the org with the oldest open task
        -- first, each in one statement on its shard (with the time as a value: Citus evaluates no
        -- volatile function in a distributed UPDATE).
        ts := clock_timestamp();
        FOR o IN SELECT q.org_id FROM memory.recheck_tasks q
                  WHERE q.completed_at IS NULL AND (q.claimed_at IS NULL OR q.claimed_at < ts - lease)
                    AND (scope IS NULL OR q.org_id = scope)
                  GROUP BY q.org_id ORDER BY min(q.task_id) LOOP
            RETURN QUERY
            UPDATE memory.recheck_tasks t SET claimed_at = ts, claimed_by = worker
             WHERE t.org_id = o
               AND t.task_id IN (SELECT q.task_id FROM memory.recheck_tasks q
                                  WHERE q.org_id = o AND q.completed_at IS NULL
                                    AND (q.claimed_at IS NULL OR q.claimed_at < ts - lease)
                                  ORDER BY q.task_id LIMIT n - taken FOR UPDATE SKIP LOCKED)
            RETURNING t.*;
            GET DIAGNOSTICS got = ROW_COUNT;
            taken := taken + got;
            EXIT WHEN taken >= n;
        END LOOP;
        RETURN;
    END IF;
    RETURN QUERY
    UPDATE memory.recheck_tasks t SET claimed_at = clock_timestamp(), claimed_by = worker
     WHERE t.task_id IN (SELECT q.task_id FROM memory.recheck_tasks q
                          WHERE q.completed_at IS NULL AND (q.claimed_at IS NULL OR q.claimed_at < clock_timestamp() - lease)
                            AND (scope IS NULL OR q.org_id = scope)
                          ORDER BY q.task_id LIMIT n FOR UPDATE SKIP LOCKED)
    RETURNING t.*;
END $$;

CREATE OR REPLACE FUNCTION memory.complete_recheck_task(task_id bigint, outcome text)
RETURNS boolean LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    scope text := memory._scope_org();
    -- (A value: Citus evaluates no volatile function in a distributed UPDATE.)
    ts    timestamptz := clock_timestamp();
BEGIN
    IF memory._blank(outcome) THEN
        RAISE EXCEPTION 'complete_recheck_task needs an outcome' USING ERRCODE = '22023';
    END IF;
    UPDATE memory.recheck_tasks t SET completed_at = ts, outcome = complete_recheck_task.outcome
     WHERE t.task_id = complete_recheck_task.task_id AND t.completed_at IS NULL
       AND (scope IS NULL OR t.org_id = scope);
    RETURN FOUND;
END $$;

CREATE FUNCTION memory._run_decay_in(org text, at timestamptz, who jsonb)
RETURNS jsonb LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    bad record;
    n_anon int := 0; n_del int := 0; n_arch int := 0; n_rel_del int := 0; n_rel_anon int := 0;
    due_claims int; due_rels int;
    gone uuid[];
    events jsonb;
    result jsonb;
    scope text := org;
BEGIN
    PERFORM memory._delegated(who);
    at := coalesce(at, now());
    -- Nothing changes if a due claim names a field decay does not know.
    SELECT c.id, memory._pii_unknown(c.pii_fields) AS field INTO bad
      FROM memory.claims c
     WHERE c.lifecycle_state IN ('pending', 'active') AND c.decay_at < at AND (scope IS NULL OR c.org_id = scope) AND memory._pii_unknown(c.pii_fields) IS NOT NULL
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'claim % lists unknown pii_fields name "%": decay changed nothing', bad.id, bad.field
            USING ERRCODE = '22023', HINT = 'Known: claim_text, subject_id, supports, source, details.<key>.';
    END IF;
    SELECT count(*) INTO due_claims FROM memory.claims c WHERE c.lifecycle_state IN ('pending', 'active') AND c.decay_at < at AND (scope IS NULL OR c.org_id = scope);
    SELECT count(*) INTO due_rels FROM memory.relationships r WHERE r.decay_at < at AND (scope IS NULL OR r.org_id = scope) AND r.anonymized_at IS NULL;
    PERFORM memory._audit_append_many(jsonb_build_array(jsonb_build_object('event_type', 'memory.job.decay.started', 'org_id', scope,
                'payload', jsonb_build_object('at', at, 'dueClaims', due_claims, 'dueRelationships', due_rels))));

    PERFORM memory._knowledge_gate(true);

    -- PHI-bearing claims (non-empty pii_fields): redact each listed field, then archive.
    WITH due AS (
        SELECT c.id FROM memory.claims c
         WHERE c.lifecycle_state IN ('pending', 'active') AND c.decay_at < at AND (scope IS NULL OR c.org_id = scope) AND cardinality(c.pii_fields) > 0
         ORDER BY c.id FOR UPDATE
    ), upd AS (
        UPDATE memory.claims c
           SET claim_text = CASE WHEN 'claim_text' = ANY (c.pii_fields) THEN '[redacted]' ELSE c.claim_text END,
               subject_id = CASE WHEN 'subject_id' = ANY (c.pii_fields) THEN NULL ELSE c.subject_id END,
               supports   = CASE WHEN 'supports' = ANY (c.pii_fields) THEN '{}'::text[] ELSE c.supports END,
               source     = CASE WHEN 'source' = ANY (c.pii_fields) THEN '[redacted]' ELSE c.source END,
               details    = memory._redact_details(c.details, c.pii_fields),
               anonymized_at = at,
               lifecycle_state = 'archived',
               t_invalid = coalesce(c.t_invalid, at)
          FROM due WHERE c.id = due.id AND (scope IS NULL OR c.org_id = scope)
        RETURNING c.id, c.org_id, c.pii_fields
    )
    SELECT count(*), jsonb_agg(jsonb_build_object('event_type', 'memory.job.decay.anonymized', 'org_id', u.org_id,
               'payload', jsonb_build_object('claimId', u.id, 'fields', to_jsonb(u.pii_fields))) ORDER BY u.id)
      INTO n_anon, events FROM upd u;
    PERFORM memory._audit_append_many(events);

    -- Hypotheses outside any supersession chain: deleted (their re-check tasks with them).
    -- (Ids go through a variable, not a temp table: this runs as the owner, and a temp table
    -- named by the caller could carry the caller's triggers.)
    SELECT coalesce(array_agg(h.id ORDER BY h.id), '{}') INTO gone FROM (
        SELECT c.id FROM memory.claims c
         WHERE c.lifecycle_state IN ('pending', 'active') AND c.decay_at < at AND (scope IS NULL OR c.org_id = scope) AND c.kind = 'hypothesis'
           AND c.supersedes IS NULL AND c.superseded_by = '{}'
           AND NOT EXISTS (SELECT 1 FROM memory.claims s WHERE s.org_id = c.org_id AND s.supersedes = c.id)
         FOR UPDATE OF c) h;
    DELETE FROM memory.recheck_tasks t WHERE t.claim_id = ANY (gone) AND (scope IS NULL OR t.org_id = scope);
    WITH del AS (
        DELETE FROM memory.claims c WHERE c.id = ANY (gone) AND (scope IS NULL OR c.org_id = scope) RETURNING c.id, c.org_id
    )
    SELECT count(*), jsonb_agg(jsonb_build_object('event_type', 'memory.job.decay.deleted', 'org_id', d.org_id,
               'payload', jsonb_build_object('kind', 'claim', 'claimId', d.id)) ORDER BY d.id)
      INTO n_del, events FROM del d;
    PERFORM memory._audit_append_many(events);

    -- Every other due claim leaves circulation as archived (the update audits each transition).
    UPDATE memory.claims c SET lifecycle_state = 'archived', t_invalid = coalesce(c.t_invalid, at)
     WHERE c.lifecycle_state IN ('pending', 'active') AND c.decay_at < at AND (scope IS NULL OR c.org_id = scope);
    GET DIAGNOSTICS n_arch = ROW_COUNT;

    -- Relationships: without a subject they are deleted; with one, the subject and attributes go.
    WITH del AS (
        DELETE FROM memory.relationships r WHERE r.decay_at < at AND (scope IS NULL OR r.org_id = scope) AND r.subject_id IS NULL AND r.anonymized_at IS NULL
        RETURNING r.id, r.org_id
    )
    SELECT count(*), jsonb_agg(jsonb_build_object('event_type', 'memory.job.decay.deleted', 'org_id', d.org_id,
               'payload', jsonb_build_object('kind', 'relationship', 'relationshipId', d.id)) ORDER BY d.id)
      INTO n_rel_del, events FROM del d;
    PERFORM memory._audit_append_many(events);
    WITH upd AS (
        UPDATE memory.relationships r SET subject_id = NULL, attributes = '{}', anonymized_at = at
         WHERE r.decay_at < at AND (scope IS NULL OR r.org_id = scope) AND r.subject_id IS NOT NULL AND r.anonymized_at IS NULL
        RETURNING r.id, r.org_id
    )
    SELECT count(*), jsonb_agg(jsonb_build_object('event_type', 'memory.job.decay.anonymized', 'org_id', u.org_id,
               'payload', jsonb_build_object('relationshipId', u.id, 'fields', jsonb_build_array('subject_id', 'attributes'))) ORDER BY u.id)
      INTO n_rel_anon, events FROM upd u;
    PERFORM memory._audit_append_many(events);

    PERFORM memory._knowledge_gate(false);
    result := jsonb_build_object('at', at, 'claimsAnonymized', n_anon, 'claimsDeleted', n_del, 'claimsArchived', n_arch,
                                 'relationshipsDeleted', n_rel_del, 'relationshipsAnonymized', n_rel_anon);
    PERFORM memory._audit_append_many(jsonb_build_array(jsonb_build_object('event_type', 'memory.job.decay.completed',
                'org_id', scope, 'payload', result)));
    PERFORM memory._delegated_done(who);
    RETURN result;
END $$;

-- The decay job's entry point: a failure is recorded as memory.job.decay.error although its
-- transaction rolls back (memory._audit_denied hands it to the integrator), then raised again.
CREATE OR REPLACE FUNCTION memory.run_decay(at timestamptz DEFAULT now())
RETURNS jsonb LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    st    text;
    msg   text;
    scope text := memory._scope_org();
    o     text;
    one   jsonb;
    total jsonb;
BEGIN
    IF NOT memory._citus_distributed('memory.claims') THEN
        RETURN memory._run_decay_in(scope, at, NULL);
    END IF;
    -- Citus: org by org, each run on the node of the org's shards (the values as literals: Citus
    -- delegates a call with constant arguments). An org with nothing due is not visited.
    at := coalesce(at, now());
    total := jsonb_build_object('at', at, 'claimsAnonymized', 0, 'claimsDeleted', 0, 'claimsArchived', 0,
                                'relationshipsDeleted', 0, 'relationshipsAnonymized', 0);
    FOR o IN SELECT c.org_id FROM memory.claims c
              WHERE c.lifecycle_state IN ('pending', 'active') AND c.decay_at < at AND (scope IS NULL OR c.org_id = scope)
             UNION
             SELECT r.org_id FROM memory.relationships r
              WHERE r.decay_at < at AND r.anonymized_at IS NULL AND (scope IS NULL OR r.org_id = scope)
             ORDER BY 1 LOOP
        -- (In FROM: Citus delegates no call made as a PL/pgSQL simple expression.)
        -- (The time written out in ISO form, UTC: read back the same whatever the DateStyle.)
        EXECUTE pg_catalog.format('SELECT r FROM memory._run_decay_in(%L, %L::pg_catalog.timestamptz, %L::jsonb) r', o,
                                  memory._utc_text(at), memory._who()) INTO one;
        total := memory._add_counts(total, one - 'at');
    END LOOP;
    RETURN total;
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT;
    PERFORM memory._audit_denied('memory.job.decay.error',
        jsonb_build_object('sqlstate', st, 'error', msg, 'at', at)::text, memory._scope_org());
    RAISE;
END $$;
COMMENT ON FUNCTION memory.run_decay(timestamptz) IS
  'The decay job: claims (pending or active) past decay_at: PHI-bearing ones (non-empty pii_fields) redacted field by field and archived, hypotheses outside supersession chains deleted, others archived; relationships past decay_at deleted, or anonymised when they carry a subject. Audits started, anonymized, deleted, completed; a failure is audited as memory.job.decay.error although the run rolls back. Not granted to PUBLIC (memory_admin).';


CREATE TYPE memory.consent_scope AS ENUM ('create_task', 'save_to_thread', 'save_to_profile', 'training_use_allowed');

COMMENT ON TYPE memory.consent_scope IS 'What a user consented to (seed ConsentScope).';

CREATE TYPE memory.context_scope AS ENUM ('task', 'thread', 'profile');

COMMENT ON TYPE memory.context_scope IS 'Where a user context lives: one task (24 h after it ends), a thread, or the profile.';

CREATE TYPE memory.drift_signal AS ENUM ('grade_reversal', 'feedback_conflict', 'refresh_stance_flip', 'watch_question_resolved_then_reopened');

COMMENT ON TYPE memory.drift_signal IS 'Kinds of persona drift (seed §4.2).';

CREATE TABLE memory.consents (
    org_id            text NOT NULL CHECK (org_id ~ '[^[:space:]]'),
    user_id           text NOT NULL CHECK (user_id ~ '[^[:space:]]'),
    version           int NOT NULL CHECK (version >= 1),
    scopes            memory.consent_scope[] NOT NULL,
    recorded_at       timestamptz NOT NULL,
    collection_method text NOT NULL CHECK (collection_method ~ '^[a-z][a-z0-9_]{0,62}$'),
    revoked_at        timestamptz,
    revoked_scopes    memory.consent_scope[],
    recorded_by       text NOT NULL,
    receipt_id        uuid NOT NULL DEFAULT gen_random_uuid() UNIQUE,
    written_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (org_id, user_id, version)
);

COMMENT ON TABLE memory.consents IS
  'Consent versions per (org, user), append-only: version n holds every scope in force after the n-th grant or revocation (revoked_at and revoked_scopes on a revocation''s version). Written by memory.grant_consent and memory.revoke_consent.';

CREATE OR REPLACE FUNCTION memory._consent_append_only()
RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Only an account deletion (memory.erase_subject, which leaves a deletion stub) removes them.
    IF TG_OP = 'DELETE' AND memory._consent_gate_open() THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION '% is append-only: % is not allowed', memory._table_of(TG_RELID)::regclass, TG_OP
        USING ERRCODE = 'MX002', HINT = 'Consent history is compliance evidence: a grant or a revocation writes a new version.';
END $$;

CREATE TRIGGER memory_append_only BEFORE UPDATE OR DELETE ON memory.consents
    FOR EACH ROW EXECUTE FUNCTION memory._consent_append_only();

CREATE TRIGGER memory_append_only_truncate BEFORE TRUNCATE ON memory.consents
    FOR EACH STATEMENT EXECUTE FUNCTION memory._consent_append_only();

CREATE FUNCTION "_consents_changed"() RETURNS TRIGGER LANGUAGE c AS 'MODULE_PATHNAME', 'memory_consents_changed_checked';
-- A change of consent rows drops the consents the drift detectors cached per backend (src/drift.rs),
-- in every session_replication_role (finalize.sql): the trigger only sends an invalidation, before
-- the row is written (so a detector later in the same statement sees it), and returns the row.
CREATE TRIGGER memory_consents_changed BEFORE INSERT OR UPDATE OR DELETE ON memory.consents
    FOR EACH ROW EXECUTE FUNCTION memory._consents_changed();
CREATE TRIGGER memory_consents_changed_truncate AFTER TRUNCATE ON memory.consents
    FOR EACH STATEMENT EXECUTE FUNCTION memory._consents_changed();

CREATE OR REPLACE FUNCTION memory._consent_scopes(p_org text, p_user text)
RETURNS memory.consent_scope[] LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN (SELECT c.scopes FROM memory.consents c
             WHERE c.org_id OPERATOR(pg_catalog.=) p_org AND c.user_id OPERATOR(pg_catalog.=) p_user
             ORDER BY c.version DESC LIMIT 1);
END $$;

CREATE OR REPLACE FUNCTION memory._consent_scopes_locked(p_org text, p_user text)
RETURNS memory.consent_scope[] LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM 1 FROM memory.consents c
      WHERE c.org_id OPERATOR(pg_catalog.=) p_org AND c.user_id OPERATOR(pg_catalog.=) p_user
      ORDER BY c.version DESC LIMIT 1 FOR KEY SHARE;
    RETURN memory._consent_scopes(p_org, p_user);
END $$;

CREATE OR REPLACE FUNCTION memory._require_scope(p_org text, p_user text, p_scope memory.consent_scope)
RETURNS void LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NOT p_scope = ANY (coalesce(memory._consent_scopes_locked(p_org, p_user), '{}')) THEN
        RAISE EXCEPTION 'profile_consent_required' USING ERRCODE = 'MX003', DETAIL = 'required_scopes: ' || p_scope;
    END IF;
END $$;

CREATE OR REPLACE FUNCTION memory._consent_args(p_org text, p_user text, p_at timestamptz)
RETURNS void LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF memory._blank(p_org) OR memory._blank(p_user) THEN
        RAISE EXCEPTION 'consent needs an org_id and a user_id' USING ERRCODE = '22023';
    END IF;
    IF p_at IS NULL OR NOT isfinite(p_at) THEN
        RAISE EXCEPTION 'at must be a finite time, got %', p_at USING ERRCODE = '22023';
    END IF;
    -- Consent is recorded when it is given, not ahead of it.
    IF p_at > now() + interval '5 minutes' THEN
        RAISE EXCEPTION 'at may not be in the future, got %', p_at USING ERRCODE = '22023';
    END IF;
    PERFORM memory._require_org(p_org);
END $$;

CREATE OR REPLACE FUNCTION memory._consent_append(p_org text, p_user text, added memory.consent_scope[], removed memory.consent_scope[],
                                       p_at timestamptz, method text)
RETURNS memory.consents LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    prev   memory.consents;
    row    memory.consents;
    scopes memory.consent_scope[];
BEGIN
    FOR attempt IN 1 .. 100 LOOP
        SELECT * INTO prev FROM memory.consents c
         WHERE c.org_id OPERATOR(pg_catalog.=) p_org AND c.user_id OPERATOR(pg_catalog.=) p_user
         ORDER BY c.version DESC LIMIT 1 FOR UPDATE;
        -- History runs forward: a version is not recorded before the one it follows (beyond the
        -- few minutes by which concurrent transactions' clocks may cross).
        IF prev.recorded_at > p_at + interval '5 minutes' THEN
            RAISE EXCEPTION 'at (%) precedes version % of this consent (%)', p_at, prev.version, prev.recorded_at USING ERRCODE = '22023';
        END IF;
        IF removed IS NOT NULL AND prev.version IS NULL THEN
            RAISE EXCEPTION 'user "%" of org "%" has no consent to revoke', p_user, p_org
                USING ERRCODE = 'P0002', HINT = 'memory.consent_status reports not_determined for every scope.';
        END IF;
        -- (Worked out first: Citus takes no subquery in an INSERT's values.)
        scopes := ARRAY(SELECT DISTINCT x FROM unnest(coalesce(prev.scopes, '{}') || coalesce(added, '{}')) x
                         WHERE removed IS NULL OR NOT x = ANY (removed) ORDER BY x);
        BEGIN
            INSERT INTO memory.consents (org_id, user_id, version, scopes, recorded_at, collection_method, revoked_at, revoked_scopes, recorded_by)
            VALUES (p_org, p_user, coalesce(prev.version, 0) + 1, scopes,
                    p_at, coalesce(method, prev.collection_method),
                    CASE WHEN removed IS NOT NULL THEN p_at END, removed,
                    coalesce(memory._caller()::regrole::text, session_user))
            RETURNING * INTO row;
            RETURN row;
        EXCEPTION WHEN unique_violation THEN
            IF attempt = 100 OR pg_catalog.current_setting('transaction_isolation') <> 'read committed' THEN
                RAISE EXCEPTION 'consent of user "%" of org "%" is being changed concurrently', p_user, p_org
                    USING ERRCODE = '40001', HINT = 'Retry the transaction.';
            END IF;
        END;
    END LOOP;
END $$;

CREATE OR REPLACE FUNCTION memory.grant_consent(org_id text, user_id text, scopes memory.consent_scope[],
                                     preferences jsonb DEFAULT NULL, collection_method text DEFAULT 'dialog',
                                     at timestamptz DEFAULT now())
RETURNS int LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p_org   text := grant_consent.org_id;
    p_user  text := grant_consent.user_id;
    c       memory.consents;
    prefs   jsonb;
BEGIN
    PERFORM memory._consent_args(p_org, p_user, at);
    IF scopes IS NULL OR cardinality(scopes) = 0 OR array_position(scopes, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'grant_consent needs at least one scope, and no NULL' USING ERRCODE = '22023';
    END IF;
    -- A name, not free text (it is written to the audit chain).
    IF collection_method IS NULL OR collection_method !~ '^[a-z][a-z0-9_]{0,62}$' THEN
        RAISE EXCEPTION 'collection_method must be a lower-case name such as dialog or settings' USING ERRCODE = '22023';
    END IF;
    IF preferences IS NOT NULL AND jsonb_typeof(preferences) <> 'object' THEN
        RAISE EXCEPTION 'preferences must be a JSON object, got %', jsonb_typeof(preferences) USING ERRCODE = '22023';
    END IF;
    c := memory._consent_append(p_org, p_user, scopes, NULL, at, collection_method);
    PERFORM memory._audit('memory.consent.grant', jsonb_build_object(
        'userId', memory._pseudonym(p_user), 'version', c.version, 'scopes', to_jsonb(scopes), 'inForce', to_jsonb(c.scopes),
        'collectionMethod', collection_method, 'receiptId', c.receipt_id), p_org);
    -- The onboarding path: preferences given with save_to_profile become the profile context.
    IF preferences IS NOT NULL AND 'save_to_profile' = ANY (c.scopes) THEN
        prefs := (SELECT coalesce(jsonb_object_agg(k, preferences->k), '{}') FROM jsonb_object_keys(preferences) k
                   WHERE k IN ('language_preference', 'research_depth', 'risk_prompt_preference', 'user_focus_reason'));
        IF prefs <> '{}' THEN
            INSERT INTO memory.user_contexts (org_id, user_id, scope, source, fields, created_at)
            VALUES (p_org, p_user, 'profile', 'onboarding', prefs, at);
        END IF;
    END IF;
    RETURN c.version;
END $$;

COMMENT ON FUNCTION memory.grant_consent(text, text, memory.consent_scope[], jsonb, text, timestamptz) IS
  'Grant scopes to (org, user): a new consent version holding every scope in force. preferences (language_preference, research_depth, risk_prompt_preference, user_focus_reason) become the profile context when save_to_profile is in force. Emits memory.consent.grant. Returns the version.';

CREATE OR REPLACE FUNCTION memory._revoke_consent_in(org text, user_id text, gone memory.consent_scope[], at timestamptz, targets jsonb, who jsonb)
RETURNS jsonb LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p_org     text := _revoke_consent_in.org;
    p_user    text := _revoke_consent_in.user_id;
    n_prof    bigint := 0;
    n_thread  bigint := 0;
    n_drift   bigint := 0;
    n_train   bigint := 0;
    n_threads bigint := 0;
    cleared   jsonb;
BEGIN
    PERFORM memory._delegated(who);
    PERFORM memory._consent_gate(true);
    -- Profile contexts go at once (seed §10.4); thread contexts stay readable by the user but are
    -- blocked from loading; the drift log is purged by maintenance 48 hours later.
    IF 'save_to_profile' = ANY (gone) THEN
        DELETE FROM memory.user_contexts u WHERE u.org_id = p_org AND u.user_id = p_user AND u.scope = 'profile';
        GET DIAGNOSTICS n_prof = ROW_COUNT;
        UPDATE memory.persona_drift_log d SET purge_after = at + interval '48 hours'
         WHERE d.org_id = p_org AND d.user_id = p_user AND (d.purge_after IS NULL OR d.purge_after > at + interval '48 hours');
        GET DIAGNOSTICS n_drift = ROW_COUNT;
    END IF;
    IF 'save_to_thread' = ANY (gone) THEN
        UPDATE memory.user_contexts u SET consent_blocked = true
         WHERE u.org_id = p_org AND u.user_id = p_user AND u.scope = 'thread' AND NOT u.consent_blocked;
        GET DIAGNOSTICS n_thread = ROW_COUNT;
        UPDATE memory.threads t SET consent_blocked = true WHERE t.org_id = p_org AND t.user_id = p_user AND NOT t.consent_blocked;
        GET DIAGNOSTICS n_threads = ROW_COUNT;
    END IF;
    IF 'training_use_allowed' = ANY (gone) THEN
        UPDATE memory.training_candidates t SET withdrawal_status = 'revoked', withdrawn_at = at
         WHERE t.org_id = p_org AND t.user_id = p_user AND t.withdrawal_status IS DISTINCT FROM 'revoked';
        GET DIAGNOSTICS n_train = ROW_COUNT;
    END IF;
    PERFORM memory._consent_gate(false);
    -- Governed application tables whose rows hang on a revoked scope ("on_revoke": "delete").
    cleared := memory._clear_governed(p_org, p_user, targets);
    PERFORM memory._delegated_done(who);
    RETURN jsonb_build_object('profile_contexts_deleted', n_prof, 'thread_contexts_blocked', n_thread, 'threads_blocked', n_threads,
                              'drift_rows_to_purge', n_drift, 'training_candidates_revoked', n_train, 'governed', cleared);
END $$;

CREATE OR REPLACE FUNCTION memory.revoke_consent(org_id text, user_id text, scopes memory.consent_scope[] DEFAULT NULL,
                                      at timestamptz DEFAULT now())
RETURNS jsonb LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p_org    text := revoke_consent.org_id;
    p_user   text := revoke_consent.user_id;
    c        memory.consents;
    gone     memory.consent_scope[];
    done     jsonb;
    more     jsonb;
    targets  jsonb;
    counts   jsonb;
BEGIN
    PERFORM memory._consent_args(p_org, p_user, at);
    IF scopes IS NOT NULL AND (cardinality(scopes) = 0 OR array_position(scopes, NULL) IS NOT NULL) THEN
        RAISE EXCEPTION 'revoke_consent needs NULL (every scope) or at least one scope, and no NULL' USING ERRCODE = '22023';
    END IF;
    gone := coalesce(scopes, enum_range(NULL::memory.consent_scope));
    c := memory._consent_append(p_org, p_user, NULL, gone, at, NULL);
    targets := memory._revoke_targets(gone, p_org);
    IF memory._citus_distributed('memory.user_contexts') THEN
        -- On the node of the org's shards (the values as literals: Citus delegates a call with
        -- constant arguments; the time as memory._utc_text, read back the same whatever the
        -- DateStyle), with the governed tables that are there; the others from here.
        EXECUTE pg_catalog.format('SELECT r FROM memory._revoke_consent_in(%L, %L, %L::memory.consent_scope[], %L::pg_catalog.timestamptz, %L::jsonb, %L::jsonb) r',
                                  p_org, p_user, gone, memory._utc_text(at),
                                  (SELECT coalesce(jsonb_agg(x), '[]') FROM jsonb_array_elements(targets) x WHERE (x->>'there')::boolean),
                                  memory._who()) INTO done;
        more := memory._clear_governed(p_org, p_user, (SELECT coalesce(jsonb_agg(x), '[]') FROM jsonb_array_elements(targets) x
                                                         WHERE NOT (x->>'there')::boolean));
        done := jsonb_set(done, '{governed}', jsonb_build_object(
                    'deleted', (done->'governed'->'deleted') || (more->'deleted'),
                    'failed', (done->'governed'->'failed') || (more->'failed')));
    ELSE
        done := memory._revoke_consent_in(p_org, p_user, gone, at, targets, NULL);
    END IF;

    counts := jsonb_build_object('version', c.version, 'revoked', to_jsonb(gone), 'in_force', to_jsonb(c.scopes)) || (done - 'governed')
              || CASE WHEN done->'governed'->'deleted' <> '{}' THEN jsonb_build_object('tables_deleted', done->'governed'->'deleted') ELSE '{}' END
              || CASE WHEN done->'governed'->'failed' <> '{}' THEN jsonb_build_object('tables_failed', done->'governed'->'failed') ELSE '{}' END;
    PERFORM memory._audit('memory.consent.revoke', jsonb_build_object(
        'userId', memory._pseudonym(p_user), 'version', c.version, 'scopes', to_jsonb(gone), 'inForce', to_jsonb(c.scopes),
        'receiptId', c.receipt_id,
        'counts', counts - 'version' - 'revoked' - 'in_force'), p_org);
    IF (done->>'profile_contexts_deleted')::bigint > 0 THEN
        PERFORM memory._audit('memory.context.delete', jsonb_build_object(
            'userId', memory._pseudonym(p_user), 'scope', 'profile', 'count', (done->>'profile_contexts_deleted')::bigint,
            'reason', 'consent_revoked'), p_org);
    END IF;
    RETURN counts;
END $$;

COMMENT ON FUNCTION memory.revoke_consent(text, text, memory.consent_scope[], timestamptz) IS
  'Revoke scopes (NULL: every scope) of (org, user) in one transaction: a new consent version; save_to_profile deletes the profile contexts and stamps the drift log for purge 48 h later; save_to_thread blocks thread contexts; training_use_allowed revokes training candidates. Emits memory.consent.revoke with the counts, which it returns. P0002 when there is no consent.';

CREATE OR REPLACE FUNCTION memory._consent_status(p_org text, p_user text)
RETURNS TABLE (scope memory.consent_scope, state text, version int)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    cur memory.consent_scope[];
BEGIN
    PERFORM memory._consent_args(p_org, p_user, now());
    cur := memory._consent_scopes(p_org, p_user);
    -- Per scope: granted when the latest version holds it (version: the first of that unbroken
    -- run), revoked when an earlier version held it (version: the one that took it),
    -- not_determined when none did.
    RETURN QUERY
    WITH v AS (SELECT c.version, c.scopes FROM memory.consents c WHERE c.org_id = p_org AND c.user_id = p_user)
    SELECT x.s,
           CASE WHEN x.s = ANY (cur) THEN 'granted'
                WHEN EXISTS (SELECT 1 FROM v WHERE x.s = ANY (v.scopes)) THEN 'revoked'
                ELSE 'not_determined' END,
           CASE WHEN x.s = ANY (cur)
                THEN (SELECT coalesce(max(v.version) FILTER (WHERE NOT x.s = ANY (v.scopes)), 0) + 1 FROM v)
                WHEN EXISTS (SELECT 1 FROM v WHERE x.s = ANY (v.scopes))
                THEN (SELECT min(v.version) FROM v WHERE NOT x.s = ANY (v.scopes)
                        AND v.version > (SELECT max(w.version) FROM v w WHERE x.s = ANY (w.scopes))) END
      FROM unnest(enum_range(NULL::memory.consent_scope)) x(s)
     ORDER BY x.s;
END $$;

CREATE OR REPLACE FUNCTION memory.consent_status(org_id text, user_id text)
RETURNS TABLE (scope memory.consent_scope, state text, version int, since timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    st   jsonb;
    done jsonb;
BEGIN
    -- The statuses, then the versions' times by a statement of its own (on Citus the consents
    -- are distributed, and a join of a function's rows with them is not planned).
    st := (SELECT jsonb_agg(to_jsonb(x)) FROM memory._consent_status(consent_status.org_id, consent_status.user_id) x);
    done := (SELECT coalesce(jsonb_object_agg(c.version::text, c.recorded_at), '{}') FROM memory.consents c
              WHERE c.org_id OPERATOR(pg_catalog.=) consent_status.org_id AND c.user_id OPERATOR(pg_catalog.=) consent_status.user_id);
    RETURN QUERY
    SELECT x.scope, x.state, x.version, (done OPERATOR(pg_catalog.->>) x.version::text)::timestamptz
      FROM jsonb_to_recordset(st) AS x(scope memory.consent_scope, state text, version int)
     ORDER BY x.scope;
END $$;

COMMENT ON FUNCTION memory.consent_status(text, text) IS
  'Every scope of (org, user): granted, revoked or not_determined (never asked is not denied), with the version that put it there and when.';

CREATE OR REPLACE FUNCTION memory.require_consent(org_id text, user_id text, scopes memory.consent_scope[])
RETURNS void LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    missing memory.consent_scope[];
BEGIN
    PERFORM memory._consent_args(require_consent.org_id, require_consent.user_id, now());
    IF scopes IS NULL OR array_position(scopes, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'require_consent needs scopes, and no NULL' USING ERRCODE = '22023';
    END IF;
    missing := ARRAY(SELECT DISTINCT s FROM unnest(scopes) s
                      WHERE NOT s = ANY (coalesce(memory._consent_scopes(require_consent.org_id, require_consent.user_id), '{}'))
                      ORDER BY s);
    IF cardinality(missing) > 0 THEN
        RAISE EXCEPTION 'profile_consent_required' USING ERRCODE = 'MX003',
            DETAIL = 'required_scopes: ' || array_to_string(missing, ', '),
            HINT = 'Record the user''s consent with memory.grant_consent.';
    END IF;
END $$;

COMMENT ON FUNCTION memory.require_consent(text, text, memory.consent_scope[]) IS
  'Nothing when every scope is in force for (org, user); otherwise MX003 profile_consent_required with the missing scopes in DETAIL (required_scopes: ...).';

CREATE OR REPLACE FUNCTION memory.consent_receipt(org_id text, user_id text, version int DEFAULT NULL)
RETURNS jsonb LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c      memory.consents;
    anchor record;
BEGIN
    PERFORM memory._consent_args(consent_receipt.org_id, consent_receipt.user_id, now());
    SELECT * INTO c FROM memory.consents k
     WHERE k.org_id = consent_receipt.org_id AND k.user_id = consent_receipt.user_id
       AND (consent_receipt.version IS NULL OR k.version = consent_receipt.version)
     ORDER BY k.version DESC LIMIT 1;
    IF c.version IS NULL THEN
        RAISE EXCEPTION 'no consent version % for user "%" of org "%"', coalesce(consent_receipt.version::text, '(current)'),
            consent_receipt.user_id, consent_receipt.org_id USING ERRCODE = 'P0002';
    END IF;
    -- The consent event in the org's chain (pending entries are chained first where this
    -- transaction can; a receipt whose event is still pending has no anchor yet).
    PERFORM memory._audit_integrate(false);
    SELECT l.chain_id, l.seq, l.entry_hash INTO anchor FROM memory.audit_log l
     WHERE l.chain_id OPERATOR(pg_catalog.=) c.org_id COLLATE "C" AND l.recorded_at >= c.written_at
       AND l.event_type IN ('memory.consent.grant', 'memory.consent.revoke')
       AND l.payload->>'receiptId' = c.receipt_id::text
     LIMIT 1;
    RETURN jsonb_build_object(
        'receipt_id', c.receipt_id, 'org_id', c.org_id, 'user_id', c.user_id, 'version', c.version,
        'scopes', to_jsonb(c.scopes), 'recorded_at', c.recorded_at, 'written_at', c.written_at, 'revoked_at', c.revoked_at,
        'revoked_scopes', to_jsonb(c.revoked_scopes), 'collection_method', c.collection_method,
        'audit', CASE WHEN anchor.seq IS NULL THEN NULL
                      ELSE jsonb_build_object('chain_id', anchor.chain_id, 'seq', anchor.seq,
                                              'entry_hash', encode(anchor.entry_hash, 'hex')) END);
END $$;

COMMENT ON FUNCTION memory.consent_receipt(text, text, int) IS
  'A receipt for one consent version (default: the current one): receipt_id, scopes, timestamps, collection method, and the audit anchor of its consent event (chain_id, seq, entry_hash hex), to check against the chain. P0002 for a version that does not exist.';

CREATE OR REPLACE FUNCTION memory._consent_era_guard()
RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF memory._consent_gate_open() THEN
        RETURN CASE TG_OP WHEN 'DELETE' THEN OLD ELSE NEW END;
    END IF;
    RAISE EXCEPTION '% is append-only: % is not allowed', memory._table_of(TG_RELID)::regclass, TG_OP
        USING ERRCODE = 'MX002', HINT = 'These rows leave with a consent revocation, maintenance or an account deletion.';
END $$;

CREATE TABLE memory.user_contexts (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    org_id          text NOT NULL,
    user_id         text NOT NULL CHECK (user_id ~ '[^[:space:]]'),
    scope           memory.context_scope NOT NULL,
    task_id         text,
    thread_id       text,
    source          text NOT NULL CHECK (source IN ('onboarding', 'user_review', 'save_as_thread', 'refresh', 'task')),
    fields          jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(fields) = 'object'),
    consent_version int,
    consent_blocked boolean NOT NULL DEFAULT false,
    created_at      timestamptz NOT NULL DEFAULT now(),
    expires_at      timestamptz,
    CHECK (scope <> 'task' OR task_id IS NOT NULL),
    CHECK (scope <> 'thread' OR thread_id IS NOT NULL)
);

CREATE INDEX user_contexts_user ON memory.user_contexts (org_id, user_id, scope);

CREATE INDEX user_contexts_task ON memory.user_contexts (task_id) WHERE task_id IS NOT NULL;

CREATE INDEX user_contexts_expiry ON memory.user_contexts (expires_at) WHERE expires_at IS NOT NULL;

COMMENT ON TABLE memory.user_contexts IS
  'User contexts by scope (task, thread, profile). Written by plain INSERT; memory._user_context_rules enforces consent, sources and position fields in the writing transaction.';

CREATE OR REPLACE FUNCTION memory._user_context_rules()
RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    have     memory.consent_scope[];
    position text[] := ARRAY['user_stated_position_context', 'constraints', 'time_horizon'];
    known    text[] := ARRAY['language_preference', 'research_depth', 'risk_prompt_preference', 'user_focus_reason',
                             'research_style', 'user_stated_position_context', 'constraints', 'time_horizon', 'position_consent'];
    k        text;
    found    text[];
BEGIN
    -- A restore brings rows back as they were dumped (memory.restore_mode, superuser-only).
    IF memory._restore_mode() THEN
        RETURN NEW;
    END IF;
    IF TG_OP = 'UPDATE' THEN
        -- Contexts are written, not rewritten: a refresh appends a row. Only revocation changes
        -- consent_blocked, and end_task the expiry of task contexts.
        IF memory._consent_gate_open() THEN
            RETURN NEW;
        END IF;
        IF (NEW.id, NEW.org_id, NEW.user_id, NEW.scope, NEW.task_id, NEW.thread_id, NEW.source, NEW.fields, NEW.consent_version, NEW.consent_blocked, NEW.created_at)
           IS DISTINCT FROM
           (OLD.id, OLD.org_id, OLD.user_id, OLD.scope, OLD.task_id, OLD.thread_id, OLD.source, OLD.fields, OLD.consent_version, OLD.consent_blocked, OLD.created_at) THEN
            RAISE EXCEPTION 'user contexts are append-only: write a new context (a refresh appends one)' USING ERRCODE = 'MX002';
        END IF;
        RETURN NEW;
    END IF;
    PERFORM memory._require_org(NEW.org_id);
    FOR k IN SELECT jsonb_object_keys(NEW.fields) LOOP
        IF NOT k = ANY (known) THEN
            RAISE EXCEPTION 'unknown user context field "%"', k USING ERRCODE = '22023',
                HINT = 'Fields: ' || array_to_string(known, ', ');
        END IF;
        -- Values are text (position_consent a boolean): nothing nests a field inside another.
        IF jsonb_typeof(NEW.fields->k) <> (CASE WHEN k = 'position_consent' THEN 'boolean' ELSE 'string' END) THEN
            RAISE EXCEPTION 'user context field "%" must be %', k, CASE WHEN k = 'position_consent' THEN 'a boolean' ELSE 'a string' END
                USING ERRCODE = '22023';
        END IF;
        -- Sensitive input is never kept, whatever the consent (SPEC §6): every §1 detector runs on
        -- the value; the refusal names the detector and the field, never the value.
        IF k <> 'position_consent' THEN
            found := memory.detect(NEW.fields->>k);
            IF cardinality(found) > 0 THEN
                RAISE EXCEPTION 'sensitive input refused: user context field "%" matches the % detector', k, found[1]
                    USING ERRCODE = 'MX007', DETAIL = 'detector: ' || found[1],
                    HINT = 'User contexts never keep e-mail addresses, phone numbers, wallet addresses, account or card numbers, keys or tokens (memory.detectors()); remove the value.';
            END IF;
        END IF;
    END LOOP;
    -- Expiry is the extension's (end_task); a context is not written ahead of its time.
    NEW.expires_at := NULL;
    IF NEW.created_at > now() + interval '5 minutes' THEN
        RAISE EXCEPTION 'created_at may not be in the future' USING ERRCODE = '22023';
    END IF;
    have := coalesce(memory._consent_scopes_locked(NEW.org_id, NEW.user_id), '{}');
    IF NEW.scope = 'thread' AND NOT 'save_to_thread' = ANY (have) THEN
        RAISE EXCEPTION 'profile_consent_required' USING ERRCODE = 'MX003', DETAIL = 'required_scopes: save_to_thread';
    END IF;
    IF NEW.scope = 'profile' THEN
        IF NOT 'save_to_profile' = ANY (have) THEN
            RAISE EXCEPTION 'profile_consent_required' USING ERRCODE = 'MX003', DETAIL = 'required_scopes: save_to_profile';
        END IF;
        -- No implicit learning: a profile changes only at onboarding or by the user's own review.
        IF NEW.source NOT IN ('onboarding', 'user_review') THEN
            RAISE EXCEPTION 'a profile context is written only from onboarding or user_review, not %', NEW.source
                USING ERRCODE = 'MX003', DETAIL = 'required_scopes: save_to_profile';
        END IF;
    END IF;
    -- Position, constraints and horizon outside one task need save_to_profile and the user's
    -- explicit consent on the row.
    IF NEW.scope <> 'task' AND NEW.fields ?| position
       AND NOT ('save_to_profile' = ANY (have) AND coalesce(NEW.fields->'position_consent' = 'true'::jsonb, false)) THEN
        RAISE EXCEPTION 'position fields outside a task need save_to_profile and "position_consent": true'
            USING ERRCODE = 'MX003', DETAIL = 'required_scopes: save_to_profile';
    END IF;
    NEW.consent_version := (SELECT max(c.version) FROM memory.consents c WHERE c.org_id = NEW.org_id AND c.user_id = NEW.user_id);
    NEW.consent_blocked := false;
    IF NEW.created_at IS NULL OR NOT isfinite(NEW.created_at) THEN
        RAISE EXCEPTION 'created_at must be a finite time' USING ERRCODE = '22023';
    END IF;
    PERFORM memory._audit('memory.context.write', jsonb_build_object(
        'userId', memory._pseudonym(NEW.user_id), 'scope', NEW.scope, 'source', NEW.source, 'contextId', NEW.id,
        'fields', to_jsonb(ARRAY(SELECT jsonb_object_keys(NEW.fields) ORDER BY 1))), NEW.org_id);
    RETURN NEW;
END $$;

CREATE TRIGGER memory_context_rules BEFORE INSERT OR UPDATE ON memory.user_contexts
    FOR EACH ROW EXECUTE FUNCTION memory._user_context_rules();

CREATE TRIGGER memory_append_only BEFORE DELETE ON memory.user_contexts
    FOR EACH ROW EXECUTE FUNCTION memory._consent_era_guard();

CREATE TRIGGER memory_append_only_truncate BEFORE TRUNCATE ON memory.user_contexts
    FOR EACH STATEMENT EXECUTE FUNCTION memory._consent_era_guard();

CREATE TABLE memory.threads (
    thread_id        text NOT NULL CHECK (thread_id ~ '[^[:space:]]'),
    org_id           text NOT NULL,
    user_id          text NOT NULL CHECK (user_id ~ '[^[:space:]]'),
    title            text,
    cognition_object jsonb,
    status           text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'closed')),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    consent_blocked  boolean NOT NULL DEFAULT false,
    PRIMARY KEY (org_id, thread_id)
);

COMMENT ON TABLE memory.threads IS
  'A user''s research threads (title, cognition object, active or closed). A new thread needs save_to_thread; its revocation blocks the user''s threads from slice S6.';

CREATE OR REPLACE FUNCTION memory._thread_rules()
RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF memory._restore_mode() THEN
        RETURN NEW;
    END IF;
    PERFORM memory._require_org(NEW.org_id);
    PERFORM memory._require_scope(NEW.org_id, NEW.user_id, 'save_to_thread');
    NEW.consent_blocked := false;
    RETURN NEW;
END $$;

CREATE TRIGGER memory_consent BEFORE INSERT ON memory.threads
    FOR EACH ROW EXECUTE FUNCTION memory._thread_rules();

CREATE TABLE memory.training_candidates (
    id                uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    org_id            text NOT NULL,
    user_id           text NOT NULL CHECK (user_id ~ '[^[:space:]]'),
    object_ref        text NOT NULL CHECK (object_ref ~ '[^[:space:]]'),
    status            text NOT NULL DEFAULT 'pending' CHECK (status = 'pending'),
    withdrawal_status text CHECK (withdrawal_status = 'revoked'),
    withdrawn_at      timestamptz,
    created_at        timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX training_candidates_user ON memory.training_candidates (org_id, user_id);

COMMENT ON TABLE memory.training_candidates IS
  'Objects a user allowed for future training (training_use_allowed); never fed to training in V1. A revocation sets withdrawal_status = revoked.';

CREATE OR REPLACE FUNCTION memory._training_candidate_rules()
RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF memory._restore_mode() THEN
        RETURN NEW;
    END IF;
    PERFORM memory._require_org(NEW.org_id);
    PERFORM memory._require_scope(NEW.org_id, NEW.user_id, 'training_use_allowed');
    NEW.withdrawal_status := NULL;
    NEW.withdrawn_at := NULL;
    RETURN NEW;
END $$;

CREATE TRIGGER memory_consent BEFORE INSERT ON memory.training_candidates
    FOR EACH ROW EXECUTE FUNCTION memory._training_candidate_rules();

CREATE TABLE memory.persona_drift_log (
    drift_id         text PRIMARY KEY CHECK (drift_id ~ '^drift_'),
    org_id           text NOT NULL,
    user_id          text NOT NULL,
    object_ref       text NOT NULL,
    cognition_object jsonb,
    signal_kind      memory.drift_signal NOT NULL,
    prior_signal     jsonb NOT NULL,
    current_signal   jsonb NOT NULL,
    delta_summary    text NOT NULL,
    triggers_alert   boolean NOT NULL,
    schema_version   text NOT NULL DEFAULT '1.0' CHECK (schema_version = '1.0'),
    created_at       timestamptz NOT NULL DEFAULT now(),
    purge_after      timestamptz
);

CREATE INDEX persona_drift_log_user ON memory.persona_drift_log (org_id, user_id, created_at);

CREATE INDEX persona_drift_log_purge ON memory.persona_drift_log (purge_after) WHERE purge_after IS NOT NULL;

COMMENT ON TABLE memory.persona_drift_log IS
  'Persona drift observations (seed §3.3 schema plus org_id, user_id, created_at, purge_after). Append-only (MX002); a revocation of save_to_profile stamps purge_after 48 h later and maintenance purges.';

CREATE TRIGGER memory_append_only BEFORE UPDATE OR DELETE ON memory.persona_drift_log
    FOR EACH ROW EXECUTE FUNCTION memory._consent_era_guard();

CREATE TRIGGER memory_append_only_truncate BEFORE TRUNCATE ON memory.persona_drift_log
    FOR EACH STATEMENT EXECUTE FUNCTION memory._consent_era_guard();

CREATE OR REPLACE FUNCTION memory._consent_maintenance_in(org text, at timestamptz, who jsonb)
RETURNS jsonb LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n_ctx   bigint;
    n_drift bigint;
BEGIN
    PERFORM memory._delegated(who);
    PERFORM memory._consent_gate(true);
    DELETE FROM memory.user_contexts u
     WHERE u.org_id = _consent_maintenance_in.org AND u.scope = 'task' AND u.expires_at IS NOT NULL AND u.expires_at <= at;
    GET DIAGNOSTICS n_ctx = ROW_COUNT;
    IF n_ctx > 0 THEN
        PERFORM memory._audit('memory.context.delete', jsonb_build_object('scope', 'task', 'count', n_ctx, 'reason', 'task_expired'),
                              _consent_maintenance_in.org);
    END IF;
    DELETE FROM memory.persona_drift_log d
     WHERE d.org_id = _consent_maintenance_in.org AND d.purge_after IS NOT NULL AND d.purge_after <= at;
    GET DIAGNOSTICS n_drift = ROW_COUNT;
    PERFORM memory._consent_gate(false);
    PERFORM memory._delegated_done(who);
    RETURN jsonb_build_object('task_contexts_purged', n_ctx, 'drift_rows_purged', n_drift);
END $$;

CREATE OR REPLACE FUNCTION memory._consent_maintenance(at timestamptz)
RETURNS jsonb LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    dist  constant boolean := memory._citus_distributed('memory.user_contexts');
    o     text;
    one   jsonb;
    total jsonb := jsonb_build_object('task_contexts_purged', 0, 'drift_rows_purged', 0);
BEGIN
    FOR o IN SELECT u.org_id FROM memory.user_contexts u WHERE u.scope = 'task' AND u.expires_at IS NOT NULL AND u.expires_at <= at
             UNION
             SELECT d.org_id FROM memory.persona_drift_log d WHERE d.purge_after IS NOT NULL AND d.purge_after <= at
             ORDER BY 1 LOOP
        IF dist THEN
            EXECUTE pg_catalog.format('SELECT r FROM memory._consent_maintenance_in(%L, %L::pg_catalog.timestamptz, %L::jsonb) r',
                                      o, memory._utc_text(at), memory._who()) INTO one;
        ELSE
            one := memory._consent_maintenance_in(o, at, NULL);
        END IF;
        total := memory._add_counts(total, one);
    END LOOP;
    RETURN total;
END $$;

SELECT pg_catalog.pg_extension_config_dump('memory.consents', '');

SELECT pg_catalog.pg_extension_config_dump('memory.user_contexts', '');

SELECT pg_catalog.pg_extension_config_dump('memory.threads', '');

SELECT pg_catalog.pg_extension_config_dump('memory.training_candidates', '');

SELECT pg_catalog.pg_extension_config_dump('memory.persona_drift_log', '');

CREATE TABLE memory.route_slices (
    route text NOT NULL CHECK (route ~ '^[a-z][a-z0-9_]{0,62}$'),
    slice text NOT NULL CHECK (slice IN ('S1_language_pref', 'S2_research_depth', 'S3_risk_prompt_pref', 'S4_user_focus_reason',
                                         'S5_research_style', 'S6_recent_active_threads_titles',
                                         'S7_user_stated_position_context', 'S8_constraints', 'S9_persona_drift_recent')),
    mode  text NOT NULL CHECK (mode IN ('required', 'optional', 'never')),
    PRIMARY KEY (route, slice)
);

COMMENT ON TABLE memory.route_slices IS
  'The route x slice matrix (seed §6.3): required, optional or never. Editable by the extension owner; every change is audited (memory.route_slices.change).';

INSERT INTO memory.route_slices (route, slice, mode)
SELECT r.route, s.slice,
       CASE WHEN s.n = ANY (r.req) THEN 'required' WHEN s.n = ANY (r.opt) THEN 'optional' ELSE 'never' END
  FROM (VALUES ('snapshot',            ARRAY[1, 2, 3],       ARRAY[6]),
               ('thread_refresh',      ARRAY[1, 2, 3, 4, 5], ARRAY[9]),
               ('risk_challenge',      ARRAY[1, 3],          ARRAY[5]),
               ('pre_execution',       ARRAY[1, 2, 3],       ARRAY[7, 8]),
               ('evidence_audit',      ARRAY[1],             ARRAY[]::int[]),
               ('narrative_mapper',    ARRAY[1, 2],          ARRAY[6]),
               ('event_impact_reader', ARRAY[1, 2],          ARRAY[6])) AS r(route, req, opt)
 CROSS JOIN (VALUES (1, 'S1_language_pref'), (2, 'S2_research_depth'), (3, 'S3_risk_prompt_pref'), (4, 'S4_user_focus_reason'),
                    (5, 'S5_research_style'), (6, 'S6_recent_active_threads_titles'), (7, 'S7_user_stated_position_context'),
                    (8, 'S8_constraints'), (9, 'S9_persona_drift_recent')) AS s(n, slice);

CREATE OR REPLACE FUNCTION memory._merge_route_slice()
RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- On Citus a trigger fires on the shards of the table (reference copies): a restore merges
    -- into the table itself, never into a shard.
    IF TG_RELID OPERATOR(pg_catalog.<>) 'memory.route_slices'::pg_catalog.regclass THEN
        RETURN NEW;
    END IF;
    UPDATE memory.route_slices r SET mode = NEW.mode WHERE r.route = NEW.route AND r.slice = NEW.slice;
    RETURN CASE WHEN FOUND THEN NULL ELSE NEW END;
END $$;

CREATE TRIGGER memory_merge BEFORE INSERT ON memory.route_slices
    FOR EACH ROW EXECUTE FUNCTION memory._merge_route_slice();

ALTER TABLE memory.route_slices ENABLE ALWAYS TRIGGER memory_merge;

CREATE OR REPLACE FUNCTION memory._route_slices_changed()
RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- On Citus the change is made on every node's copy of the table: recorded once, by the
    -- coordinator's copy.
    IF memory._citus_other_copy(TG_RELID, 'memory.route_slices'::pg_catalog.regclass) THEN
        RETURN NULL;
    END IF;
    IF memory._creating_extension() OR memory._restore_mode() THEN
        RETURN NULL;
    END IF;
    IF TG_OP = 'TRUNCATE' THEN
        PERFORM memory._audit('memory.route_slices.change', jsonb_build_object('operation', 'truncate'), NULL);
    ELSIF TG_OP = 'UPDATE' AND (OLD.route, OLD.slice, OLD.mode) IS NOT DISTINCT FROM (NEW.route, NEW.slice, NEW.mode) THEN
        RETURN NULL;
    ELSE
        PERFORM memory._audit('memory.route_slices.change', jsonb_build_object(
            'operation', lower(TG_OP),
            'route', CASE WHEN TG_OP = 'DELETE' THEN OLD.route ELSE NEW.route END,
            'slice', CASE WHEN TG_OP = 'DELETE' THEN OLD.slice ELSE NEW.slice END,
            'from', CASE WHEN TG_OP <> 'INSERT' THEN OLD.mode END,
            'to', CASE WHEN TG_OP <> 'DELETE' THEN NEW.mode END), NULL);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER memory_audit AFTER INSERT OR UPDATE OR DELETE ON memory.route_slices
    FOR EACH ROW EXECUTE FUNCTION memory._route_slices_changed();

CREATE TRIGGER memory_audit_truncate AFTER TRUNCATE ON memory.route_slices
    FOR EACH STATEMENT EXECUTE FUNCTION memory._route_slices_changed();

CREATE OR REPLACE FUNCTION memory.advisor_order(risk_prompt_preference text DEFAULT 'balanced')
RETURNS text[] LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p text := coalesce(risk_prompt_preference, 'balanced');
BEGIN
    IF p = 'balanced' THEN
        RETURN ARRAY['asset_research', 'market_macro', 'risk', 'counter_thesis'];
    ELSIF p = 'counter_first' THEN
        RETURN ARRAY['counter_thesis', 'asset_research', 'market_macro', 'risk'];
    ELSIF p = 'risk_first' THEN
        RETURN ARRAY['risk', 'asset_research', 'counter_thesis', 'market_macro'];
    ELSIF p = 'permission_or_credential' THEN
        -- Pre-Execution Checkpoint only: its advisor first, the others in the default order.
        RETURN ARRAY['pre_execution', 'asset_research', 'market_macro', 'risk', 'counter_thesis'];
    END IF;
    RAISE EXCEPTION 'unknown risk_prompt_preference "%"', p USING ERRCODE = '22023',
        HINT = 'One of balanced, counter_first, risk_first, permission_or_credential.';
END $$;

COMMENT ON FUNCTION memory.advisor_order(text) IS
  'The advisors'' order for a risk_prompt_preference (seed §7.3): balanced (default, also for NULL), counter_first, risk_first, permission_or_credential (pre-execution first). The set of advisors never changes. Unknown -> 22023.';

CREATE OR REPLACE FUNCTION memory.load_slices(org_id text, user_id text, route text, task_id text DEFAULT NULL, thread_id text DEFAULT NULL,
                                   optional text[] DEFAULT '{}', at timestamptz DEFAULT now())
RETURNS jsonb LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p_org    text := load_slices.org_id;
    p_user   text := load_slices.user_id;
    have     memory.consent_scope[];
    profile  boolean;
    threads  boolean;
    t_fields jsonb;   -- the task's context (latest), unless expired
    h_fields jsonb;   -- the thread's context (latest), unless blocked or without consent
    p_fields jsonb;   -- the profile (latest), with save_to_profile
    wanted   text[];
    cold     boolean;
    sl       text;
    v        jsonb;
    slices   jsonb := '{}';
    loaded   text[] := '{}';
    missing  text[] := '{}';
    blocked  text[] := '{}';
    lines    text[] := '{}';
    src      constant jsonb := '{"S1_language_pref": "language_preference", "S2_research_depth": "research_depth",
                                 "S3_risk_prompt_pref": "risk_prompt_preference", "S4_user_focus_reason": "user_focus_reason",
                                 "S5_research_style": "research_style", "S7_user_stated_position_context": "user_stated_position_context",
                                 "S8_constraints": "constraints"}';
    defaults constant jsonb := '{"S1_language_pref": "English", "S2_research_depth": "standard", "S3_risk_prompt_pref": "balanced"}';
BEGIN
    -- memory._consent_args and memory._consent_scopes written out: this is the read path of every
    -- request, and each call of a function with a SET clause costs more than its query.
    IF p_org IS NULL OR p_org !~ '[^[:space:]]' OR p_user IS NULL OR p_user !~ '[^[:space:]]' THEN
        RAISE EXCEPTION 'consent needs an org_id and a user_id' USING ERRCODE = '22023';
    END IF;
    IF at IS NULL OR NOT isfinite(at) THEN
        RAISE EXCEPTION 'at must be a finite time, got %', at USING ERRCODE = '22023';
    END IF;
    IF at > now() + interval '5 minutes' THEN
        RAISE EXCEPTION 'at may not be in the future, got %', at USING ERRCODE = '22023';
    END IF;
    PERFORM memory._require_org(p_org);
    IF NOT EXISTS (SELECT 1 FROM memory.route_slices r WHERE r.route = load_slices.route) THEN
        RAISE EXCEPTION 'unknown route "%"', route USING ERRCODE = '22023',
            HINT = 'Routes: ' || (SELECT string_agg(DISTINCT r.route, ', ') FROM memory.route_slices r);
    END IF;
    IF optional IS NULL OR array_position(optional, NULL) IS NOT NULL
       OR EXISTS (SELECT 1 FROM unnest(optional) o WHERE NOT o = ANY (ARRAY(SELECT jsonb_object_keys(src)) || ARRAY['S6_recent_active_threads_titles', 'S9_persona_drift_recent'])) THEN
        RAISE EXCEPTION 'optional must name slices (S1_language_pref ... S9_persona_drift_recent)' USING ERRCODE = '22023';
    END IF;
    SELECT c.scopes INTO have FROM memory.consents c WHERE c.org_id = p_org AND c.user_id = p_user ORDER BY c.version DESC LIMIT 1;
    have := coalesce(have, '{}');
    profile := 'save_to_profile' = ANY (have);
    threads := 'save_to_thread' = ANY (have);
    -- The route's required slices and the optional ones asked for; never a `never` slice.
    wanted := ARRAY(SELECT r.slice FROM memory.route_slices r
                     WHERE r.route = load_slices.route AND (r.mode = 'required' OR (r.mode = 'optional' AND r.slice = ANY (optional)))
                     ORDER BY r.slice);
    IF task_id IS NOT NULL THEN
        SELECT u.fields INTO t_fields FROM memory.user_contexts u
         WHERE u.org_id = p_org AND u.user_id = p_user AND u.scope = 'task' AND u.task_id = load_slices.task_id
           AND (u.expires_at IS NULL OR u.expires_at > at)
         ORDER BY u.created_at DESC, u.id DESC LIMIT 1;
    END IF;
    IF thread_id IS NOT NULL AND threads THEN
        SELECT u.fields INTO h_fields FROM memory.user_contexts u
         WHERE u.org_id = p_org AND u.user_id = p_user AND u.scope = 'thread' AND u.thread_id = load_slices.thread_id
           AND NOT u.consent_blocked
         ORDER BY u.created_at DESC, u.id DESC LIMIT 1;
    END IF;
    IF profile THEN
        SELECT u.fields INTO p_fields FROM memory.user_contexts u
         WHERE u.org_id = p_org AND u.user_id = p_user AND u.scope = 'profile'
         ORDER BY u.created_at DESC, u.id DESC LIMIT 1;
    END IF;
    cold := p_fields IS NULL AND h_fields IS NULL;

    FOREACH sl IN ARRAY wanted LOOP
        v := NULL;
        IF src ? sl THEN
            -- Priority task > thread > profile; position and constraints are task-scoped only.
            v := coalesce(t_fields->(src->>sl),
                          CASE WHEN sl NOT IN ('S7_user_stated_position_context', 'S8_constraints') THEN h_fields->(src->>sl) END,
                          CASE WHEN sl NOT IN ('S7_user_stated_position_context', 'S8_constraints') THEN p_fields->(src->>sl) END);
            IF v IS NULL AND cold AND defaults ? sl THEN
                v := defaults->sl;
            END IF;
        ELSIF sl = 'S6_recent_active_threads_titles' AND threads THEN
            v := (SELECT jsonb_agg(jsonb_build_object('title', t.title, 'cognition_object', t.cognition_object) ORDER BY t.updated_at DESC)
                    FROM (SELECT * FROM memory.threads t WHERE t.org_id = p_org AND t.user_id = p_user AND t.status = 'active'
                             AND NOT t.consent_blocked
                           ORDER BY t.updated_at DESC LIMIT 3) t);
        ELSIF sl = 'S9_persona_drift_recent' AND profile THEN
            -- A count, never the rows' text.
            v := to_jsonb((SELECT count(*) FROM memory.persona_drift_log d
                            WHERE d.org_id = p_org AND d.user_id = p_user AND d.created_at > at - interval '30 days' AND d.created_at <= at));
        END IF;
        IF v IS NOT NULL AND v <> 'null'::jsonb THEN
            slices := slices || jsonb_build_object(sl, v);
            loaded := loaded || sl;
            -- One line per slice; what a user wrote cannot close the block or start a line of
            -- its own (<, > and & escaped, line breaks as spaces).
            lines := lines || (sl || ': ' || replace(replace(replace(regexp_replace(
                         CASE jsonb_typeof(v) WHEN 'string' THEN v #>> '{}' ELSE v::text END, '[\r\n]+', ' ', 'g'),
                         '&', '&amp;'), '<', '&lt;'), '>', '&gt;'));
        ELSIF (sl IN ('S1_language_pref', 'S2_research_depth', 'S3_risk_prompt_pref', 'S9_persona_drift_recent') AND NOT profile)
              OR (sl = 'S4_user_focus_reason' AND NOT (profile OR threads))
              OR (sl IN ('S5_research_style', 'S6_recent_active_threads_titles') AND NOT threads)
              OR (sl IN ('S4_user_focus_reason', 'S5_research_style') AND thread_id IS NOT NULL AND h_fields IS NULL
                  AND EXISTS (SELECT 1 FROM memory.user_contexts u WHERE u.org_id = p_org AND u.user_id = p_user AND u.scope = 'thread'
                                 AND u.thread_id = load_slices.thread_id AND u.consent_blocked)) THEN
            -- Not loaded because a scope it comes from is not in force (or its thread context was
            -- blocked by a revocation).
            blocked := blocked || sl;
        ELSE
            missing := missing || sl;
        END IF;
    END LOOP;
    RETURN jsonb_build_object(
        'route', route, 'slices', slices, 'slices_loaded', to_jsonb(loaded), 'slices_skipped_missing', to_jsonb(missing),
        'slices_blocked_by_consent', to_jsonb(blocked), 'cold_start', cold,
        'tokens_estimated', (SELECT coalesce(sum(ceil(length(l) / 4.0)), 0)::int FROM unnest(lines) l),
        'rendered', '<user_context>' || E'\n' || coalesce((SELECT string_agg(l || E'\n', '' ORDER BY n) FROM unnest(lines) WITH ORDINALITY x(l, n)), '')
                    || '</user_context>');
END $$;

COMMENT ON FUNCTION memory.load_slices(text, text, text, text, text, text[], timestamptz) IS
  'The slices of a user''s memory a request on `route` may load (seed §6): the route''s required slices and the optional ones asked for, never a `never` one; task > thread > profile; missing fields skipped; cold start (no profile or thread context) fills S1-S3 with English, standard, balanced; thread contexts blocked by a revocation are not read; S9 is a count. Returns slices, slices_loaded, slices_skipped_missing, slices_blocked_by_consent, cold_start, tokens_estimated and the rendered <user_context> block. Unknown route or slice -> 22023.';

SELECT pg_catalog.pg_extension_config_dump('memory.route_slices', '');

CREATE TABLE memory.drift_thresholds (
    name        text PRIMARY KEY,
    value       numeric NOT NULL CHECK (value >= 0),
    description text NOT NULL
);

INSERT INTO memory.drift_thresholds (name, value, description) VALUES
    ('grade_reversal_days', 14, 'a rating on the same object flips polarity within this many days'),
    ('feedback_conflict_min', 2, 'opposing feedback keywords on the same kind of object at least this many times'),
    ('refresh_changed_inferences_min', 5, 'a refresh changing more inferences than this may be a stance flip'),
    ('refresh_lookback_days', 14, 'the thesis is compared with the refresh at least this many days earlier'),
    ('refresh_jaccard_max', 0.2, 'a keyword Jaccard similarity below this is a flip'),
    ('watch_reopen_days', 14, 'a watch question reopened within this many days of being resolved'),
    ('watch_reopen_min_hours', 1, 'and not within this many hours (no instant misjudgement)'),
    ('alert_window_hours', 24, 'drift_alerts: this window'),
    ('alert_min_rows', 3, 'drift_alerts: at least this many drift rows in the window'),
    ('alert_feedback_conflicts', 5, 'drift_alerts: or at least this many feedback_conflict rows');

COMMENT ON TABLE memory.drift_thresholds IS 'Thresholds of the drift detectors and of memory.drift_alerts (seed §9.1 defaults); editable by the extension owner.';

CREATE TABLE memory.drift_lexicon (
    word     text PRIMARY KEY CHECK (word ~ '[^[:space:]]'),
    polarity smallint NOT NULL CHECK (polarity IN (-1, 1))
);

INSERT INTO memory.drift_lexicon (word, polarity) VALUES
    ('thumbs_up', 1), ('not_helpful', -1), ('agree', 1), ('disagree', -1), ('对', 1), ('错', -1);

COMMENT ON TABLE memory.drift_lexicon IS 'Feedback keywords and their polarity for feedback_conflict (the seed''s O-2 starter words); editable by the extension owner.';

CREATE OR REPLACE FUNCTION memory._merge_drift_setting()
RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- On Citus a trigger fires on the shards of the table (reference copies): a restore merges
    -- into the table itself, never into a shard.
    IF TG_RELID OPERATOR(pg_catalog.<>) 'memory.drift_thresholds'::pg_catalog.regclass AND TG_RELID OPERATOR(pg_catalog.<>) 'memory.drift_lexicon'::pg_catalog.regclass THEN
        RETURN NEW;
    END IF;
    IF TG_TABLE_NAME = 'drift_thresholds' THEN
        UPDATE memory.drift_thresholds t SET value = NEW.value, description = NEW.description WHERE t.name = NEW.name;
    ELSE
        UPDATE memory.drift_lexicon l SET polarity = NEW.polarity WHERE l.word = NEW.word;
    END IF;
    RETURN CASE WHEN FOUND THEN NULL ELSE NEW END;
END $$;

CREATE TRIGGER memory_merge BEFORE INSERT ON memory.drift_thresholds FOR EACH ROW EXECUTE FUNCTION memory._merge_drift_setting();

CREATE TRIGGER memory_merge BEFORE INSERT ON memory.drift_lexicon FOR EACH ROW EXECUTE FUNCTION memory._merge_drift_setting();

ALTER TABLE memory.drift_thresholds ENABLE ALWAYS TRIGGER memory_merge;

ALTER TABLE memory.drift_lexicon ENABLE ALWAYS TRIGGER memory_merge;

CREATE TRIGGER memory_rules_changed AFTER INSERT OR UPDATE OR DELETE ON memory.drift_thresholds
    FOR EACH ROW EXECUTE FUNCTION memory.rules_changed();
CREATE TRIGGER memory_rules_changed_truncate AFTER TRUNCATE ON memory.drift_thresholds
    FOR EACH STATEMENT EXECUTE FUNCTION memory.rules_changed();

CREATE TRIGGER memory_rules_changed AFTER INSERT OR UPDATE OR DELETE ON memory.drift_lexicon
    FOR EACH ROW EXECUTE FUNCTION memory.rules_changed();
CREATE TRIGGER memory_rules_changed_truncate AFTER TRUNCATE ON memory.drift_lexicon
    FOR EACH STATEMENT EXECUTE FUNCTION memory.rules_changed();

CREATE OR REPLACE FUNCTION memory._drift_threshold(p_name text)
RETURNS numeric LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
AS $$ SELECT t.value FROM memory.drift_thresholds t WHERE t.name OPERATOR(pg_catalog.=) p_name $$;

CREATE TABLE memory.user_feedback (
    id                 uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    org_id             text NOT NULL,
    user_id            text NOT NULL CHECK (user_id ~ '[^[:space:]]'),
    related_object_ref text NOT NULL CHECK (related_object_ref ~ '[^[:space:]]'),
    cognition_object   jsonb,
    rating             text CHECK (rating IN ('thumbs_up', 'not_helpful', 'agree', 'disagree')),
    comment            text,
    created_at         timestamptz NOT NULL DEFAULT now() CHECK (isfinite(created_at)),
    -- The comment's lexicon polarity when it was written (memory._feedback_polarity), so the
    -- conflict detector reads the latest opposing comments by an index instead of re-reading each one.
    comment_polarity   smallint CONSTRAINT user_feedback_polarity_check CHECK (comment_polarity IS NULL OR (comment_polarity IN (-1, 1) AND comment IS NOT NULL))
);

CREATE INDEX user_feedback_user ON memory.user_feedback (org_id, user_id, related_object_ref, created_at, id);
CREATE INDEX user_feedback_polarity ON memory.user_feedback (org_id, user_id, comment_polarity, created_at, id) WHERE comment_polarity IS NOT NULL;

COMMENT ON TABLE memory.user_feedback IS
  'A user''s feedback on an object (rating, comment); an insert runs the grade_reversal and feedback_conflict detectors.';

CREATE TABLE memory.thread_refreshes (
    id                 uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    org_id             text NOT NULL,
    user_id            text NOT NULL CHECK (user_id ~ '[^[:space:]]'),
    thread_id          text NOT NULL CHECK (thread_id ~ '[^[:space:]]'),
    main_thesis        text NOT NULL,
    changed_inferences int NOT NULL DEFAULT 0 CHECK (changed_inferences >= 0),
    created_at         timestamptz NOT NULL DEFAULT now() CHECK (isfinite(created_at))
);

CREATE INDEX thread_refreshes_thread ON memory.thread_refreshes (org_id, thread_id, created_at, id);

COMMENT ON TABLE memory.thread_refreshes IS 'A thread refresh (main thesis, changed inferences); an insert runs the refresh_stance_flip detector.';

CREATE TABLE memory.watch_question_updates (
    id                uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    org_id            text NOT NULL,
    user_id           text NOT NULL CHECK (user_id ~ '[^[:space:]]'),
    watch_question_id text NOT NULL CHECK (watch_question_id ~ '[^[:space:]]'),
    thread_id         text,
    status            text NOT NULL CHECK (status IN ('resolved', 'reopened')),
    created_at        timestamptz NOT NULL DEFAULT now() CHECK (isfinite(created_at))
);

CREATE INDEX watch_question_updates_question ON memory.watch_question_updates (org_id, watch_question_id, created_at, id);

COMMENT ON TABLE memory.watch_question_updates IS
  'Watch question lifecycle (resolved, reopened); an insert runs the watch_question_resolved_then_reopened detector.';

-- The detectors (src/drift.rs, rules in memory_core::drift): memory._feedback_polarity() fixes a
-- comment's lexicon polarity when it is written (a restore keeps it); memory._detect_drift() runs
-- the four detectors after each insert, for users with save_to_profile in force. Both are C
-- triggers that read and write as the extension owner; the writer's org was checked by row-level
-- security. They cache the lexicon and thresholds: a change to either table tells every backend.
CREATE FUNCTION "_feedback_polarity"() RETURNS TRIGGER LANGUAGE c AS 'MODULE_PATHNAME', 'memory_feedback_polarity_checked';
CREATE FUNCTION "_detect_drift"() RETURNS TRIGGER LANGUAGE c AS 'MODULE_PATHNAME', 'memory_detect_drift_checked';
-- No WHEN clause: a trigger's WHEN is read and prepared again by every statement, which costs a
-- single-row insert more than the functions' own early return for a row without comment or rating.
CREATE TRIGGER memory_feedback_polarity BEFORE INSERT ON memory.user_feedback
    FOR EACH ROW EXECUTE FUNCTION memory._feedback_polarity();
CREATE TRIGGER memory_drift AFTER INSERT ON memory.user_feedback
    FOR EACH ROW EXECUTE FUNCTION memory._detect_drift();

CREATE TRIGGER memory_drift AFTER INSERT ON memory.thread_refreshes FOR EACH ROW EXECUTE FUNCTION memory._detect_drift();

CREATE TRIGGER memory_drift AFTER INSERT ON memory.watch_question_updates FOR EACH ROW EXECUTE FUNCTION memory._detect_drift();

CREATE OR REPLACE VIEW memory.drift_alerts AS
SELECT d.org_id, d.user_id,
       count(*) FILTER (WHERE d.created_at > now() - make_interval(hours => memory._drift_threshold('alert_window_hours')::int)) AS drift_in_window,
       count(*) FILTER (WHERE d.signal_kind = 'feedback_conflict') AS feedback_conflicts,
       max(d.created_at) AS last_drift_at
  FROM memory.persona_drift_log d
 GROUP BY d.org_id, d.user_id
HAVING count(*) FILTER (WHERE d.created_at > now() - make_interval(hours => memory._drift_threshold('alert_window_hours')::int))
           >= memory._drift_threshold('alert_min_rows')
    OR count(*) FILTER (WHERE d.signal_kind = 'feedback_conflict') >= memory._drift_threshold('alert_feedback_conflicts');

ALTER VIEW memory.drift_alerts SET (security_invoker = true);

COMMENT ON VIEW memory.drift_alerts IS
  'Users with at least alert_min_rows drift rows in alert_window_hours, or at least alert_feedback_conflicts feedback_conflict rows (memory.drift_thresholds).';

SELECT pg_catalog.pg_extension_config_dump('memory.drift_thresholds', '');

SELECT pg_catalog.pg_extension_config_dump('memory.drift_lexicon', '');

SELECT pg_catalog.pg_extension_config_dump('memory.user_feedback', '');

SELECT pg_catalog.pg_extension_config_dump('memory.thread_refreshes', '');

SELECT pg_catalog.pg_extension_config_dump('memory.watch_question_updates', '');

CREATE TABLE memory.deletion_stubs (
    org_id                      text NOT NULL,
    user_id                     text NOT NULL,
    deleted_at                  timestamptz NOT NULL DEFAULT now(),
    consent_version_at_deletion int
);

CREATE INDEX deletion_stubs_user ON memory.deletion_stubs (org_id, user_id);

COMMENT ON TABLE memory.deletion_stubs IS
  'One row per account deletion (memory.erase_subject) of a user with consent history: when, and the consent version in force, nothing else (seed §10.5).';

SELECT pg_catalog.pg_extension_config_dump('memory.deletion_stubs', '');

CREATE FUNCTION memory._consent_era_tables()
RETURNS text[] LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp
AS $$ SELECT ARRAY['consents', 'user_contexts', 'threads', 'training_candidates', 'persona_drift_log',
                   'user_feedback', 'thread_refreshes', 'watch_question_updates'] $$;

CREATE OR REPLACE FUNCTION memory._erase_consent_in(org text, subject text, who jsonb)
RETURNS jsonb LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    counts jsonb := '{}';
    n      bigint;
    t      text;
BEGIN
    IF memory._held(org, subject, NULL) THEN
        RETURN counts;
    END IF;
    PERFORM memory._delegated(who);
    PERFORM memory._consent_gate(true);
    INSERT INTO memory.deletion_stubs (org_id, user_id, consent_version_at_deletion)
    SELECT org, subject, max(c.version) FROM memory.consents c
     WHERE c.org_id = _erase_consent_in.org AND c.user_id = subject
    HAVING count(*) > 0;
    GET DIAGNOSTICS n = ROW_COUNT;
    counts := counts || jsonb_build_object('deletion_stubs', n);
    FOREACH t IN ARRAY memory._consent_era_tables() LOOP
        EXECUTE format('DELETE FROM memory.%I x WHERE x.org_id OPERATOR(pg_catalog.=) $1 AND x.user_id OPERATOR(pg_catalog.=) $2', t)
          USING org, subject;
        GET DIAGNOSTICS n = ROW_COUNT;
        counts := counts || jsonb_build_object(t, n);
    END LOOP;
    PERFORM memory._consent_gate(false);
    PERFORM memory._delegated_done(who);
    RETURN counts;
END $$;

CREATE OR REPLACE FUNCTION memory._erase_consent_rows(p_subject text, p_scope text)
RETURNS jsonb LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    dist   constant boolean := memory._citus_distributed('memory.consents');
    counts jsonb := jsonb_build_object('deletion_stubs', 0)
                    || (SELECT jsonb_object_agg(t, 0) FROM unnest(memory._consent_era_tables()) t);
    one    jsonb;
    o      text;
BEGIN
    FOR o IN EXECUTE (SELECT string_agg(format('SELECT x.org_id FROM memory.%I x WHERE x.user_id OPERATOR(pg_catalog.=) $1'
                                               ' AND ($2 IS NULL OR x.org_id OPERATOR(pg_catalog.=) $2)', t), ' UNION ')
                        FROM unnest(memory._consent_era_tables()) t) || ' ORDER BY 1'
               USING p_subject, p_scope LOOP
        IF dist THEN
            EXECUTE pg_catalog.format('SELECT r FROM memory._erase_consent_in(%L, %L, %L::jsonb) r', o, p_subject, memory._who()) INTO one;
        ELSE
            one := memory._erase_consent_in(o, p_subject, NULL);
        END IF;
        counts := memory._add_counts(counts, one);
    END LOOP;
    RETURN counts;
END $$;

CREATE OR REPLACE FUNCTION memory._export_consent_rows(p_subject text, p_scope text)
RETURNS jsonb LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN jsonb_build_object(
        'consents', (SELECT coalesce(jsonb_agg(to_jsonb(c) ORDER BY c.org_id, c.version), '[]') FROM memory.consents c
                      WHERE c.user_id OPERATOR(pg_catalog.=) p_subject AND (p_scope IS NULL OR c.org_id OPERATOR(pg_catalog.=) p_scope)),
        'user_contexts', (SELECT coalesce(jsonb_agg(to_jsonb(u) ORDER BY u.created_at, u.id), '[]') FROM memory.user_contexts u
                           WHERE u.user_id OPERATOR(pg_catalog.=) p_subject AND (p_scope IS NULL OR u.org_id OPERATOR(pg_catalog.=) p_scope)
                             AND (u.scope OPERATOR(pg_catalog.<>) 'task' OR u.created_at OPERATOR(pg_catalog.>) (now() OPERATOR(pg_catalog.-) interval '7 days'))),
        'persona_drift', (SELECT coalesce(jsonb_agg(to_jsonb(d) ORDER BY d.created_at, d.drift_id), '[]') FROM memory.persona_drift_log d
                           WHERE d.user_id OPERATOR(pg_catalog.=) p_subject AND (p_scope IS NULL OR d.org_id OPERATOR(pg_catalog.=) p_scope)),
        'training_candidates', (SELECT coalesce(jsonb_agg(jsonb_build_object('id', t.id, 'org_id', t.org_id, 'object_ref', t.object_ref,
                                                                      'status', t.status, 'withdrawal_status', t.withdrawal_status,
                                                                      'created_at', t.created_at) ORDER BY t.created_at, t.id), '[]')
                                  FROM memory.training_candidates t
                                 WHERE t.user_id OPERATOR(pg_catalog.=) p_subject AND (p_scope IS NULL OR t.org_id OPERATOR(pg_catalog.=) p_scope)));
END $$;

CREATE OR REPLACE FUNCTION memory._has_consent(p_org text, p_user text, p_scope text)
RETURNS boolean LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- A restore brings rows back as dumped (memory.restore_mode, superuser-only).
    IF memory._restore_mode() THEN
        RETURN true;
    END IF;
    IF memory._blank(p_org) OR memory._blank(p_user) THEN
        RETURN false;
    END IF;
    PERFORM memory._require_org(p_org);
    RETURN p_scope = ANY (ARRAY(SELECT s::text FROM unnest(coalesce(memory._consent_scopes_locked(p_org, p_user), '{}')) s));
END $$;

CREATE OR REPLACE FUNCTION memory._consent_row_gate()
RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r     jsonb;
    u     text;
    o     text;
BEGIN
    r := to_jsonb(NEW);
    u := r->>TG_ARGV[0];
    o := CASE WHEN TG_ARGV[1] = '' THEN NULL ELSE r->>TG_ARGV[1] END;
    IF u IS NULL THEN
        RETURN NEW;  -- a row of no user needs no user's consent
    END IF;
    IF o IS NULL OR NOT memory._has_consent(o, u, TG_ARGV[2]) THEN
        RAISE EXCEPTION 'profile_consent_required' USING ERRCODE = 'MX003', DETAIL = 'required_scopes: ' || TG_ARGV[2],
            HINT = format('%s rows of a user need the user''s %s consent (memory.grant_consent).', memory._table_of(TG_RELID)::regclass, TG_ARGV[2]);
    END IF;
    RETURN NEW;
END $$;

CREATE OR REPLACE FUNCTION memory._govern_consent(tbl regclass, opts jsonb, eff jsonb)
RETURNS jsonb LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c       jsonb := opts->'consent';
    c_user  text;
    c_org   text;
    scope   text;
    mode    text;
BEGIN
    IF c IS NULL OR c = 'false'::jsonb OR c = 'null'::jsonb THEN
        PERFORM memory._exec_as_caller(format('DROP TRIGGER IF EXISTS memory_consent ON %s', tbl));
        RETURN eff;
    END IF;
    IF jsonb_typeof(c) <> 'object' OR EXISTS (SELECT 1 FROM jsonb_object_keys(c) k WHERE k NOT IN ('user', 'scope', 'on_revoke')) THEN
        RAISE EXCEPTION 'option "consent" must be {"user": column, "scope": consent scope, "on_revoke": "delete" or "block"}' USING ERRCODE = '22023';
    END IF;
    c_user := c->>'user';
    scope := c->>'scope';
    mode := coalesce(c->>'on_revoke', 'delete');
    c_org := coalesce(eff->>'org', opts->>'org', CASE WHEN memory._has_column(tbl, 'org_id') THEN 'org_id' END);
    IF c_user IS NULL OR NOT scope = ANY (ARRAY(SELECT s::text FROM unnest(enum_range(NULL::memory.consent_scope)) s))
       OR mode NOT IN ('delete', 'block') THEN
        RAISE EXCEPTION 'option "consent" needs "user" (a column), "scope" (one of %) and "on_revoke" delete or block',
            array_to_string(enum_range(NULL::memory.consent_scope), ', ') USING ERRCODE = '22023';
    END IF;
    IF c_org IS NULL THEN
        RAISE EXCEPTION 'option "consent" needs the table''s org column ("org")' USING ERRCODE = '22023';
    END IF;
    PERFORM memory._column_type(tbl, c_user, 'user');
    PERFORM memory._column_type(tbl, c_org, 'org');
    PERFORM memory._exec_as_caller(format('DROP TRIGGER IF EXISTS memory_consent ON %s', tbl));
    PERFORM memory._exec_as_caller(format('CREATE TRIGGER memory_consent BEFORE INSERT ON %s FOR EACH ROW '
                                          'EXECUTE FUNCTION memory._consent_row_gate(%L, %L, %L)', tbl, c_user, c_org, scope));
    RETURN eff || jsonb_build_object('consent', jsonb_build_object('user', c_user, 'org', c_org, 'scope', scope, 'on_revoke', mode));
END $$;

CREATE FUNCTION memory._clear_governed(org text, user_id text, targets jsonb)
RETURNS jsonb LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    g       record;
    r       jsonb;
    deleted jsonb := '{}';
    failed  jsonb := '{}';
BEGIN
    FOR g IN SELECT x->>'table' AS tbl, x->>'user' AS ucol, x->>'org' AS ocol
               FROM jsonb_array_elements(coalesce(targets, '[]')) x ORDER BY 1 LOOP
        BEGIN
            PERFORM memory._hold_gate(true);
            r := memory._exec_as_table_owner(g.tbl::regclass,
                     format('DELETE FROM %s t WHERE t.%I::pg_catalog.text OPERATOR(pg_catalog.=) $1 AND t.%I::pg_catalog.text OPERATOR(pg_catalog.=) $2',
                            g.tbl::regclass, g.ucol, g.ocol),
                     ARRAY[_clear_governed.user_id, _clear_governed.org]);
            PERFORM memory._hold_gate(false);
            deleted := deleted || jsonb_build_object(g.tbl, (r->>'processed')::bigint);
        EXCEPTION WHEN OTHERS THEN
            failed := failed || jsonb_build_object(g.tbl, SQLERRM);
        END;
    END LOOP;
    RETURN jsonb_build_object('deleted', deleted, 'failed', failed);
END $$;

CREATE OR REPLACE FUNCTION memory._revoke_targets(gone memory.consent_scope[], org text)
RETURNS jsonb LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    dist constant boolean := memory._citus_distributed('memory.user_contexts');
BEGIN
    RETURN (SELECT coalesce(jsonb_agg(jsonb_build_object('table', g.relid::regclass::text, 'user', g.options->'consent'->>'user',
                                                         'org', g.options->'consent'->>'org',
                                                         'there', NOT dist OR memory._colocated_with_stores(g.relid))
                                      ORDER BY g.relid::regclass::text), '[]')
              FROM memory.governance_registry g
              JOIN pg_catalog.pg_class c ON c.oid = g.relid
             WHERE NOT g.builtin AND g.options->'consent'->>'on_revoke' = 'delete'
               AND g.options->'consent'->>'scope' = ANY (ARRAY(SELECT s::text FROM unnest(gone) s))
               AND memory._may_act_for_role(c.relowner, _revoke_targets.org));
END $$;

DO $$
DECLARE t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['observations', 'observations_archive', 'observation_weight_history', 'legal_holds',
                             'classification_rules', 'org_settings', 'entities', 'claims', 'relationships', 'recheck_tasks',
                             'consents', 'user_contexts', 'threads', 'training_candidates', 'persona_drift_log',
                             'user_feedback', 'thread_refreshes', 'watch_question_updates', 'deletion_stubs'] LOOP
        EXECUTE format('ALTER TABLE memory.%I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('CREATE POLICY tenant ON memory.%I USING (org_id OPERATOR(pg_catalog.=) (SELECT memory._acting_org())) '
                       'WITH CHECK (org_id OPERATOR(pg_catalog.=) (SELECT memory._acting_org()))', t);
    END LOOP;
END $$;

ALTER TABLE memory.retention_policies ENABLE ROW LEVEL SECURITY;

CREATE POLICY platform_read ON memory.retention_policies FOR SELECT USING (org_id IS NULL);

CREATE POLICY tenant ON memory.retention_policies
    USING (org_id OPERATOR(pg_catalog.=) (SELECT memory._acting_org()))
    WITH CHECK (org_id OPERATOR(pg_catalog.=) (SELECT memory._acting_org()));

ALTER VIEW memory.live_observations SET (security_invoker = true);

ALTER VIEW memory.stats SET (security_invoker = true);

CREATE OR REPLACE FUNCTION memory._is_memory_trigger_fn(f oid)
RETURNS boolean LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
AS $$ SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_proc p WHERE p.oid OPERATOR(pg_catalog.=) f
                        AND p.pronamespace OPERATOR(pg_catalog.=) 'memory'::pg_catalog.regnamespace) $$;

CREATE OR REPLACE FUNCTION memory._guard_governance_ddl()
RETURNS event_trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r   record;
    t   record;
    rel regclass;
BEGIN
    -- Superusers and the extension owner are not stopped here (they could drop this trigger;
    -- restores run as them and re-create the triggers): the guard is for table owners.
    IF memory._is_unrestricted() AND TG_EVENT = 'ddl_command_end' THEN
        RETURN;
    END IF;
    IF TG_EVENT = 'ddl_command_end' THEN
        FOR r IN SELECT c.objid, c.command_tag FROM pg_catalog.pg_event_trigger_ddl_commands() c LOOP
            -- A child table of a governed table would take writes around its triggers.
            IF r.command_tag IN ('CREATE TABLE', 'ALTER TABLE') AND EXISTS (
                   SELECT 1 FROM pg_catalog.pg_inherits i JOIN memory.governance_registry g ON g.relid::oid = i.inhparent
                    WHERE i.inhrelid = r.objid) THEN
                RAISE EXCEPTION 'a governed table takes no child tables' USING ERRCODE = '42501',
                    HINT = 'Writes into a child table would go around the parent''s memory_ext triggers.';
            END IF;
            IF r.command_tag = 'ALTER TABLE' THEN
                CONTINUE WHEN memory._governance_gate_open(r.objid);
                FOR t IN SELECT tg.tgname FROM pg_catalog.pg_trigger tg
                          WHERE tg.tgrelid = r.objid AND memory._is_memory_trigger_fn(tg.tgfoid)
                            AND tg.tgenabled NOT IN ('O', 'A')
                            AND EXISTS (SELECT 1 FROM memory.governance_registry g WHERE g.relid::oid = tg.tgrelid) LOOP
                    RAISE EXCEPTION 'trigger % of governed table % may not be disabled', t.tgname, r.objid::regclass
                        USING ERRCODE = '42501', HINT = 'Governance is removed with memory.ungovern(table), which is audited.';
                END LOOP;
            ELSIF r.command_tag = 'CREATE TRIGGER' THEN
                -- CREATE OR REPLACE of a memory_ext trigger, or a trigger of ours under another name.
                FOR t IN SELECT tg.tgname, tg.tgrelid FROM pg_catalog.pg_trigger tg
                          WHERE tg.oid = r.objid AND (tg.tgname LIKE 'memory\_%' OR memory._is_memory_trigger_fn(tg.tgfoid))
                            AND EXISTS (SELECT 1 FROM memory.governance_registry g WHERE g.relid::oid = tg.tgrelid) LOOP
                    CONTINUE WHEN memory._governance_gate_open(t.tgrelid);
                    RAISE EXCEPTION 'memory_ext triggers of governed table % are replaced by memory.govern only', t.tgrelid::regclass
                        USING ERRCODE = '42501', HINT = 'Call memory.govern(table, options) to change the mapping.';
                END LOOP;
            ELSIF r.command_tag = 'CREATE RULE' THEN
                -- A rule could divert writes around the triggers (DO INSTEAD).
                FOR t IN SELECT rw.ev_class FROM pg_catalog.pg_rewrite rw
                          WHERE rw.oid = r.objid AND EXISTS (SELECT 1 FROM memory.governance_registry g WHERE g.relid::oid = rw.ev_class) LOOP
                    RAISE EXCEPTION 'governed table % takes no rules', t.ev_class::regclass
                        USING ERRCODE = '42501', HINT = 'Rules could divert writes around governance; ungovern the table first.';
                END LOOP;
            ELSIF r.command_tag = 'ALTER TRIGGER' THEN
                FOR t IN SELECT tg.tgname, tg.tgrelid FROM pg_catalog.pg_trigger tg
                          WHERE tg.oid = r.objid AND memory._is_memory_trigger_fn(tg.tgfoid) AND tg.tgname NOT LIKE 'memory\_%'
                            AND EXISTS (SELECT 1 FROM memory.governance_registry g WHERE g.relid::oid = tg.tgrelid) LOOP
                    CONTINUE WHEN memory._governance_gate_open(t.tgrelid);
                    RAISE EXCEPTION 'memory_ext triggers of governed table % keep their names', t.tgrelid::regclass
                        USING ERRCODE = '42501', HINT = 'Governance is removed with memory.ungovern(table), which is audited.';
                END LOOP;
            END IF;
        END LOOP;
    ELSIF TG_EVENT = 'sql_drop' THEN
        FOR r IN SELECT d.* FROM pg_catalog.pg_event_trigger_dropped_objects() d LOOP
            IF r.object_type = 'trigger' AND r.address_names[3] LIKE 'memory\_%' THEN
                -- A trigger dropped with its table is not a table left ungoverned.
                rel := pg_catalog.to_regclass(pg_catalog.quote_ident(r.address_names[1]) || '.' || pg_catalog.quote_ident(r.address_names[2]));
                IF rel IS NOT NULL AND EXISTS (SELECT 1 FROM memory.governance_registry g WHERE g.relid::oid = rel::oid)
                   AND NOT memory._governance_gate_open(rel::oid) AND NOT memory._is_unrestricted() THEN
                    RAISE EXCEPTION 'trigger % of governed table % may not be dropped', r.address_names[3], rel
                        USING ERRCODE = '42501', HINT = 'Governance is removed with memory.ungovern(table), which is audited.';
                END IF;
            ELSIF r.object_type = 'table' AND EXISTS (SELECT 1 FROM memory.governance_registry g WHERE g.relid::oid = r.objid) THEN
                DELETE FROM memory.governance_registry g WHERE g.relid::oid = r.objid;
                PERFORM memory._audit_append_system('memory.govern.drop_table', jsonb_build_object('table', r.object_identity), NULL);
            END IF;
        END LOOP;
    END IF;
END $$;

CREATE EVENT TRIGGER memory_guard_governance ON ddl_command_end WHEN TAG IN ('ALTER TABLE', 'ALTER TRIGGER', 'CREATE TRIGGER', 'CREATE RULE', 'CREATE TABLE')
    EXECUTE FUNCTION memory._guard_governance_ddl();

CREATE EVENT TRIGGER memory_guard_governance_drop ON sql_drop
    EXECUTE FUNCTION memory._guard_governance_ddl();

CREATE OR REPLACE FUNCTION memory.setup_roles()
RETURNS TABLE (role_name text, created boolean)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['memory_reader', 'memory_writer', 'memory_admin'] LOOP
        role_name := r;
        created := to_regrole(r) IS NULL;
        IF created THEN
            EXECUTE format('CREATE ROLE %I NOLOGIN', r);
        END IF;
        RETURN NEXT;
    END LOOP;
    IF NOT pg_has_role('memory_writer', 'memory_reader', 'MEMBER') THEN GRANT memory_reader TO memory_writer; END IF;
    IF NOT pg_has_role('memory_admin', 'memory_writer', 'MEMBER') THEN GRANT memory_writer TO memory_admin; END IF;

    GRANT USAGE ON SCHEMA memory TO memory_reader;
    -- Readers: their org's memories, knowledge graph, history, policies.
    GRANT SELECT ON memory.observations, memory.live_observations, memory.observations_archive,
                    memory.observation_weight_history, memory.entities, memory.claims, memory.relationships,
                    memory.retention_policies, memory.memory_type_policies, memory.org_settings, memory.stats
        TO memory_reader;
    GRANT SELECT ON memory.screen_profiles TO memory_reader;
    GRANT EXECUTE ON FUNCTION memory.completeness(uuid, text, timestamptz) TO memory_reader;
    GRANT EXECUTE ON FUNCTION memory.claim_chain(uuid), memory.active_claims(uuid, timestamptz), memory._claim_must_exist(uuid), memory._claim_chain(uuid),
                              memory.recall(text, text, int, text), memory.misleading_observations(text)
        TO memory_reader;
    -- Writers: add memories and knowledge, entity states, feedback, audit events of their orgs,
    -- the re-check queue.
    GRANT INSERT ON memory.observations, memory.entities, memory.claims, memory.relationships TO memory_writer;
    GRANT EXECUTE ON FUNCTION memory.ingest_batch(jsonb, jsonb, jsonb, int) TO memory_writer;
    -- 0.1.0 also granted writers SELECT on observations directly; they read through memory_reader.
    REVOKE SELECT ON memory.observations FROM memory_writer;
    GRANT UPDATE (lifecycle_state) ON memory.entities TO memory_writer;
    -- Writers may try to change a claim's state: memory._claims_guard refuses it unless the role is
    -- a knowledge admin (42501) and audits the attempt although the statement fails (seed §2).
    GRANT UPDATE (lifecycle_state) ON memory.claims TO memory_writer;
    -- Consent-era rows of their org's users (SPEC §6): consent through the functions below,
    -- contexts, threads and training candidates by INSERT (their triggers check consent).
    GRANT SELECT ON memory.consents, memory.user_contexts, memory.threads, memory.training_candidates,
                    memory.persona_drift_log TO memory_reader;
    GRANT INSERT ON memory.user_contexts, memory.threads, memory.training_candidates TO memory_writer;
    GRANT UPDATE (title, cognition_object, status, updated_at) ON memory.threads TO memory_writer;
    GRANT SELECT ON memory.route_slices, memory.drift_thresholds, memory.drift_lexicon, memory.drift_alerts,
                    memory.user_feedback, memory.thread_refreshes, memory.watch_question_updates TO memory_reader;
    GRANT EXECUTE ON FUNCTION memory._drift_threshold(text) TO memory_reader;
    GRANT INSERT ON memory.user_feedback, memory.thread_refreshes, memory.watch_question_updates TO memory_writer;
    GRANT EXECUTE ON FUNCTION memory.consent_status(text, text), memory.require_consent(text, text, memory.consent_scope[]),
                              memory.consent_receipt(text, text, int),
                              memory.load_slices(text, text, text, text, text, text[], timestamptz)
        TO memory_reader;
    GRANT EXECUTE ON FUNCTION memory.grant_consent(text, text, memory.consent_scope[], jsonb, text, timestamptz),
                              memory.revoke_consent(text, text, memory.consent_scope[], timestamptz)
        TO memory_writer;
    GRANT EXECUTE ON FUNCTION memory.audit_append(text, jsonb, text, text, text, text),
                              memory.record_outcome(text, memory.outcome, uuid[]), memory._record_outcome(text, text, uuid[]),
                              memory.transfer_observations(uuid[], text), memory.end_task(text),
                              memory.claim_recheck_tasks(text, int, interval), memory.complete_recheck_task(bigint, text)
        TO memory_writer;
    -- Admins: claim states and scores, org rules, holds and settings, the jobs, declassification,
    -- subject rights, audit reading, tenant grants, all within their orgs.
    GRANT UPDATE (lifecycle_state, confidence_score) ON memory.claims TO memory_admin;
    GRANT SELECT ON memory.recheck_tasks, memory.deletion_stubs TO memory_admin;
    GRANT SELECT, INSERT, UPDATE, DELETE ON memory.classification_rules TO memory_admin;
    GRANT SELECT, INSERT, UPDATE ON memory.legal_holds TO memory_admin;
    GRANT INSERT, UPDATE, DELETE ON memory.retention_policies TO memory_admin;
    GRANT INSERT, UPDATE, DELETE ON memory.screen_profiles TO memory_admin;
    -- Not retention_guard: that function runs inside maintenance, so only the owner sets it.
    GRANT INSERT (org_id, alpha_success, alpha_failure, bfsi_mode),
          UPDATE (alpha_success, alpha_failure, bfsi_mode, updated_at) ON memory.org_settings TO memory_admin;
    GRANT EXECUTE ON FUNCTION memory.resolve_conflict(uuid, uuid), memory.record_verdict(uuid, text),
                              memory.freshness_recheck(float8, interval, interval, int, timestamptz),
                              memory.run_decay(timestamptz),
                              memory.reclassify(uuid, memory.classification, text),
                              memory.audit_verify(text), memory._audit_verify_for_caller(text), memory.audit_head(text),
                              memory.audit_events(text, text, int, int),
                              memory.erase_subject(text), memory.export_subject(text, boolean),
                              memory.grant_org(regrole, text), memory.revoke_org(regrole, text)
        TO memory_admin;
END $$;

COMMENT ON FUNCTION memory.setup_roles() IS
  'Create (if missing) and grant memory_reader < memory_writer < memory_admin (the README''s grant table). Bind roles to orgs with memory.grant_org. Run it as a superuser or a role with CREATEROLE that owns the extension. Idempotent.';

-- Knowledge: screening fields on claims, the replicator's verdicts, completeness (issue 18).
ALTER TABLE memory.claims ADD COLUMN field text CONSTRAINT claims_field_check CHECK (field ~ '^[a-z][a-z0-9_]{0,62}$');
ALTER TABLE memory.recheck_tasks DROP CONSTRAINT recheck_tasks_reason_check,
    ADD CONSTRAINT recheck_tasks_reason_check
        CHECK (reason IN ('below_confidence', 'aged', 'below_confidence_and_aged', 'eroded', 'retracted_source'));
COMMENT ON TABLE memory.recheck_tasks IS
  'Critic re-check tasks enqueued by memory.freshness_recheck and by the replicator''s verdicts (memory.record_verdict); workers take them with memory.claim_recheck_tasks (FOR UPDATE SKIP LOCKED).';

-- Replicator verdicts (seed §4.4): a sampled claim re-checked against its cited sources.

CREATE FUNCTION memory.record_verdict(claim_id uuid, verdict text)
RETURNS jsonb LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p_claim uuid := record_verdict.claim_id;
    v       text := record_verdict.verdict;
    c       memory.claims;
    task    bigint;
    events  jsonb;
    org     text;
BEGIN
    IF v IS NULL OR v NOT IN ('still_supported', 'eroded', 'retracted_source', 'broken_provenance') THEN
        RAISE EXCEPTION 'unknown verdict "%"', coalesce(v, '(null)') USING ERRCODE = '22023',
            HINT = 'Verdicts: still_supported, eroded, retracted_source, broken_provenance.';
    END IF;
    IF p_claim IS NULL THEN
        RAISE EXCEPTION 'record_verdict needs a claim id' USING ERRCODE = '22023';
    END IF;
    -- A claim of an org the caller may not act for is not found (its existence is not told), and
    -- is not locked either: the org is checked before the row lock is taken.
    org := memory._org_of('memory.claims', p_claim);
    IF org IS NOT NULL THEN
        SELECT * INTO c FROM memory.claims x WHERE x.org_id = org AND x.id = p_claim FOR UPDATE;
    END IF;
    IF org IS NULL OR NOT FOUND THEN
        RAISE EXCEPTION 'claim % does not exist', p_claim USING ERRCODE = '23503';
    END IF;
    IF c.lifecycle_state NOT IN ('pending', 'active') THEN
        RAISE EXCEPTION 'claim % is %: a verdict applies to a pending or active claim', c.id, c.lifecycle_state
            USING ERRCODE = 'MX001';
    END IF;
    IF v IN ('eroded', 'retracted_source') THEN
        -- The Critic re-checks it: a task on the freshness_recheck queue, the seed's re-task shape.
        INSERT INTO memory.recheck_tasks (org_id, claim_id, agent_role, entity_context, metadata, reason, confidence_score)
        VALUES (c.org_id, c.id, 'critic', ARRAY[c.entity_id],
                jsonb_build_object('source', 'replicator', 'original_claim_id', c.id, 'verdict', v), v, c.confidence_score)
        RETURNING recheck_tasks.task_id INTO task;
        events := jsonb_build_array(
            jsonb_build_object('event_type', CASE v WHEN 'eroded' THEN 'memory.govern.eroded' ELSE 'memory.govern.retracted_source' END,
                'org_id', c.org_id,
                'payload', jsonb_build_object('claimId', c.id, 'entityId', c.entity_id, 'verdict', v, 'taskId', task,
                                              'subjectId', memory._subject_pseudonym(c.subject_id))),
            jsonb_build_object('event_type', 'research.task.enqueued', 'org_id', c.org_id,
                'payload', jsonb_build_object('taskId', task, 'claimId', c.id, 'agentRole', 'critic', 'source', 'replicator',
                                              'reason', v)));
    ELSIF v = 'broken_provenance' THEN
        -- The source is gone: the claim is retracted (its memory.claim.state_transition is
        -- recorded by the audit trigger, then the verdict).
        UPDATE memory.claims x SET lifecycle_state = 'retracted' WHERE x.org_id = c.org_id AND x.id = c.id;
        events := jsonb_build_array(jsonb_build_object('event_type', 'memory.govern.broken_provenance', 'org_id', c.org_id,
            'payload', jsonb_build_object('claimId', c.id, 'entityId', c.entity_id, 'verdict', v, 'fromState', c.lifecycle_state,
                                          'toState', 'retracted', 'subjectId', memory._subject_pseudonym(c.subject_id))));
    ELSE
        events := jsonb_build_array(jsonb_build_object('event_type', 'memory.govern.still_supported', 'org_id', c.org_id,
            'payload', jsonb_build_object('claimId', c.id, 'entityId', c.entity_id, 'verdict', v)));
    END IF;
    PERFORM memory._audit_append_many(events);
    RETURN jsonb_build_object('claim_id', c.id, 'verdict', v,
        'action', CASE v WHEN 'still_supported' THEN 'none' WHEN 'broken_provenance' THEN 'retracted' ELSE 'recheck_enqueued' END,
        'task_id', task,
        'lifecycle_state', CASE WHEN v = 'broken_provenance' THEN 'retracted' ELSE c.lifecycle_state::text END);
END $$;
COMMENT ON FUNCTION memory.record_verdict(uuid, text) IS
  'The replicator''s verdict on a pending or active claim: still_supported (recorded), eroded or retracted_source (a critic re-check task, source replicator), broken_provenance (the claim is retracted). Audited as memory.govern.<verdict> (plus research.task.enqueued). Unknown verdict 22023; missing claim 23503; other states MX001. Not granted to PUBLIC (memory_admin).';

-- ------------------------------------------------------------------------------------------------
-- Completeness (seed §4.2): how much of a screening profile an entity's active claims answer.

CREATE TABLE memory.screen_profiles (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    org_id         text,            -- NULL: a platform profile
    profile        text NOT NULL CHECK (profile ~ '[^[:space:]]'),
    field          text NOT NULL CHECK (field ~ '^[a-z][a-z0-9_]{0,62}$'),
    freshness_days int NOT NULL CHECK (freshness_days > 0),
    required       boolean NOT NULL DEFAULT true,
    UNIQUE NULLS NOT DISTINCT (org_id, profile, field)
);
COMMENT ON TABLE memory.screen_profiles IS
  'Screening profiles: the fields a profile asks for, how fresh an answer must be, and whether it counts in the score. Platform profiles (org_id NULL) serve every org that defines no profile of the same name.';

CREATE FUNCTION memory.completeness(entity_id uuid, profile text, at timestamptz DEFAULT now())
RETURNS jsonb LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p_entity  uuid := completeness.entity_id;
    p_profile text := completeness.profile;
    e_org     text;
    r         record;
    present   text[] := '{}';
    stale     text[] := '{}';
    missing   text[] := '{}';
    opt       jsonb := '{}';
    n_req     int := 0;
    state     text;
BEGIN
    IF p_entity IS NULL OR p_profile IS NULL OR p_profile !~ '[^[:space:]]' OR at IS NULL OR NOT isfinite(at) THEN
        RAISE EXCEPTION 'completeness needs an entity id, a profile name and a finite time' USING ERRCODE = '22023';
    END IF;
    -- Read with the caller's rights: an entity of another org is not there.
    SELECT e.org_id INTO e_org FROM memory.entities e WHERE e.id = p_entity;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'entity % does not exist', p_entity USING ERRCODE = '23503';
    END IF;
    FOR r IN
        SELECT p.field, p.freshness_days, p.required FROM memory.screen_profiles p
         WHERE p.profile = p_profile
           AND (p.org_id = e_org
                OR (p.org_id IS NULL AND NOT EXISTS (SELECT 1 FROM memory.screen_profiles q WHERE q.profile = p_profile AND q.org_id = e_org)))
         ORDER BY p.field
    LOOP
        -- Only active claims answer; one inside the freshness window makes the field present.
        SELECT CASE WHEN bool_or(NOT memory.is_stale(c.t_created, r.freshness_days, at)) THEN 'present'
                    WHEN count(*) > 0 THEN 'stale' ELSE 'missing' END
          INTO state
          FROM memory.claims c
         WHERE c.entity_id = p_entity AND c.org_id = e_org AND c.field = r.field
           AND c.lifecycle_state = 'active' AND c.t_created <= at;
        IF r.required THEN
            n_req := n_req + 1;
            CASE state WHEN 'present' THEN present := present || r.field;
                       WHEN 'stale' THEN stale := stale || r.field;
                       ELSE missing := missing || r.field; END CASE;
        ELSE
            opt := opt || jsonb_build_object(r.field, state);
        END IF;
    END LOOP;
    IF n_req = 0 AND opt = '{}' THEN
        RAISE EXCEPTION 'unknown screening profile "%"', p_profile USING ERRCODE = '22023',
            HINT = 'Profiles are rows of memory.screen_profiles (the org''s, else the platform''s).';
    END IF;
    RETURN jsonb_build_object('entity_id', p_entity, 'profile', p_profile, 'at', at,
        'score', CASE WHEN n_req = 0 THEN 1.0 ELSE round((cardinality(present) + 0.5 * cardinality(stale)) / n_req, 4) END,
        'required', n_req, 'present', to_jsonb(present), 'stale', to_jsonb(stale), 'missing', to_jsonb(missing),
        'optional', opt);
END $$;
COMMENT ON FUNCTION memory.completeness(uuid, text, timestamptz) IS
  'Completeness of an entity against a screening profile: score = (present + 0.5 x stale) / required fields (1.0 when none are required), with the present, stale and missing field lists and the optional fields'' states. Only active claims created by at count; present = one within freshness_days. Unknown profile 22023; missing entity 23503. Reads with the caller''s rights.';

SELECT pg_catalog.pg_extension_config_dump('memory.screen_profiles', '');
ALTER TABLE memory.screen_profiles ENABLE ROW LEVEL SECURITY;
CREATE POLICY platform_read ON memory.screen_profiles FOR SELECT USING (org_id IS NULL);
CREATE POLICY tenant ON memory.screen_profiles
    USING (org_id OPERATOR(pg_catalog.=) (SELECT memory._acting_org()))
    WITH CHECK (org_id OPERATOR(pg_catalog.=) (SELECT memory._acting_org()));

-- ------------------------------------------------------------------------------------------------
-- Bulk ingest (seed "Add in bulk", FR-043-005: partial failure). Items are checked set-wise per
-- chunk and the chunk's good items inserted by one statement; when that statement fails (a
-- trigger's rule, say a supersession), the chunk's items are inserted one by one, each in its own
-- subtransaction, so a bad item is reported and the others land.

-- A timestamp from JSON text, or NULL when it is not one.
CREATE FUNCTION memory._ingest_ts(t text)
RETURNS timestamptz LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- A finite time only ('infinity' would break the jobs that compute with it).
    RETURN CASE WHEN t IS NULL OR NOT isfinite(t::timestamptz) THEN NULL ELSE t::timestamptz END;
EXCEPTION WHEN OTHERS THEN
    RETURN NULL;
END $$;

CREATE FUNCTION memory._ingest_insert_entities(rows jsonb)
RETURNS void LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    INSERT INTO memory.entities (id, org_id, entity_type, name, taxonomy_category, ontology_codes, subject_id, origin, lifecycle_state)
    SELECT (r->>'id')::uuid, r->>'org_id', r->>'entity_type', r->>'name', r->>'taxonomy_category', r->'ontology_codes',
           r->>'subject_id', r->>'origin', (r->>'lifecycle_state')::memory.lifecycle_state
      FROM jsonb_array_elements(rows) r;
END $$;

CREATE FUNCTION memory._ingest_insert_claims(rows jsonb)
RETURNS void LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    INSERT INTO memory.claims (id, org_id, entity_id, kind, claim_text, supports, pii_fields, subject_id, details, decay_at,
                               confidence_score, source, lifecycle_state, supersedes, field, t_created)
    SELECT (r->>'id')::uuid, r->>'org_id', (r->>'entity_id')::uuid, r->>'kind', r->>'claim_text',
           ARRAY(SELECT jsonb_array_elements_text(r->'supports')), ARRAY(SELECT jsonb_array_elements_text(r->'pii_fields')),
           r->>'subject_id', r->'details', (r->>'decay_at')::timestamptz, (r->>'confidence_score')::float8, r->>'source',
           (r->>'lifecycle_state')::memory.lifecycle_state, (r->>'supersedes')::uuid, r->>'field', (r->>'t_created')::timestamptz
      FROM jsonb_array_elements(rows) r;
END $$;

CREATE FUNCTION memory._ingest_insert_relationships(rows jsonb)
RETURNS void LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    INSERT INTO memory.relationships (id, org_id, source_id, target_id, rel_type, attributes, subject_id, decay_at)
    SELECT (r->>'id')::uuid, r->>'org_id', (r->>'source_id')::uuid, (r->>'target_id')::uuid, r->>'rel_type', r->'attributes',
           r->>'subject_id', (r->>'decay_at')::timestamptz
      FROM jsonb_array_elements(rows) r;
END $$;

CREATE FUNCTION memory.ingest_batch(entities jsonb DEFAULT '[]', claims jsonb DEFAULT '[]', relationships jsonb DEFAULT '[]',
                                    chunk_size int DEFAULT 500)
RETURNS TABLE (kind text, item int, id uuid, ok boolean, sqlstate text, message text)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    caller  oid := memory._caller();
    acting  text := memory._acting_org();
    refs    jsonb := '{}';      -- batch-local entity refs -> ids of entities that landed
    dups    text[];             -- refs given to more than one entity
    allowed jsonb;              -- org -> may the caller act for it (per chunk)
    elems   jsonb[];            -- the items, split once (a query per chunk reads only its slice)
    ch      jsonb[];            -- the chunk's items
    fails   jsonb[];            -- items the one-by-one fallback could not insert
    orgs    jsonb := '{}';      -- org -> counts, for the batch events
    k       text;
    items   jsonb;
    n       int;
    lo      int;
    checked jsonb;              -- [[item, id, org, sqlstate, message, row], ...] of one chunk
    known   jsonb;              -- 'org id' of the existing entities the chunk names (as keys)
    good    jsonb;
    c       jsonb;
    st      text;
    msg     text;
BEGIN
    IF chunk_size IS NULL OR chunk_size < 1 OR chunk_size > 10000 THEN
        RAISE EXCEPTION 'chunk_size must be in [1, 10000], got %', chunk_size USING ERRCODE = '22023';
    END IF;
    -- The caller inserts through this function only what it may insert itself.
    IF caller IS NULL OR NOT (has_table_privilege(caller, 'memory.entities', 'INSERT')
                              AND has_table_privilege(caller, 'memory.claims', 'INSERT')
                              AND has_table_privilege(caller, 'memory.relationships', 'INSERT')) THEN
        RAISE EXCEPTION 'ingest_batch needs INSERT on memory.entities, memory.claims and memory.relationships' USING ERRCODE = '42501';
    END IF;
    FOREACH k IN ARRAY ARRAY['entities', 'claims', 'relationships'] LOOP
        items := CASE k WHEN 'entities' THEN ingest_batch.entities WHEN 'claims' THEN ingest_batch.claims ELSE ingest_batch.relationships END;
        IF items IS NULL OR jsonb_typeof(items) <> 'array' THEN
            RAISE EXCEPTION '% must be a JSON array', k USING ERRCODE = '22023';
        END IF;
        -- Split once: the chunk queries read a slice, never the whole argument (a large value
        -- passed to a query per chunk would be detoasted or copied whole each time).
        elems := ARRAY(SELECT e FROM jsonb_array_elements(items) e);
        n := jsonb_array_length(items);
        IF k = 'entities' THEN
            dups := ARRAY(SELECT e->>'ref' FROM jsonb_array_elements(items) e
                           WHERE jsonb_typeof(e) = 'object' AND jsonb_typeof(e->'ref') = 'string' GROUP BY 1 HAVING count(*) > 1);
        END IF;
        lo := 0;
        WHILE lo < n LOOP
            ch := elems[lo + 1 : least(lo + chunk_size, n)];
            SELECT coalesce(jsonb_object_agg(o.org, memory._may_act_for(o.org)), '{}') INTO allowed
              FROM (SELECT DISTINCT coalesce(u.j->>'org_id', acting) AS org FROM unnest(ch) u(j)
                     WHERE jsonb_typeof(u.j) = 'object') o
             WHERE o.org IS NOT NULL;
            -- The entities the chunk's claims and relationships name that exist, as 'org id': read
            -- by a statement of their own (Citus plans no correlated subquery over a distributed
            -- table in the checks below).
            IF k <> 'entities' THEN
                SELECT coalesce(jsonb_object_agg(e.org_id || ' ' || e.id::text, true), '{}') INTO known
                  FROM memory.entities e
                 WHERE e.id = ANY (ARRAY(
                         SELECT c2.v::uuid
                           FROM (SELECT u.j->>f AS v FROM unnest(ch) u(j), unnest(ARRAY['entity_id', 'source_id', 'target_id']) f
                                  WHERE jsonb_typeof(u.j) = 'object'
                                 UNION
                                 SELECT r.value #>> '{}' FROM jsonb_each(refs) r) c2
                          WHERE c2.v ~* '^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$'));
            END IF;
            -- Check the chunk's items set-wise: the first problem of each, and its normalised row.
            IF k = 'entities' THEN
                SELECT jsonb_agg(jsonb_build_array(x.i, x.rid, x.org, x.e[1], x.e[2], x.r) ORDER BY x.i) INTO checked
                  FROM (SELECT y.i, y.rid, y.org, y.r,
                               coalesce(y.shape,
                                   CASE WHEN y.org IS NULL THEN ARRAY['22023', 'no org_id (and no acting org)']
                                        WHEN NOT coalesce((allowed->>y.org)::boolean, false) THEN ARRAY['42501', format('role may not act for org "%s"', y.org)]
                                        WHEN (y.j->>'entity_type') NOT IN ('concept', 'problem', 'intervention', 'outcome', 'population')
                                            THEN ARRAY['23514', format('unknown entity_type "%s"', y.j->>'entity_type')]
                                        WHEN y.j ? 'ontology_codes' AND jsonb_typeof(y.j->'ontology_codes') <> 'array'
                                            THEN ARRAY['22023', '"ontology_codes" must be an array']
                                        WHEN y.j ? 'ref' AND (y.j->>'ref') = ANY (dups) THEN ARRAY['22023', format('ref "%s" is given to more than one entity', y.j->>'ref')]
                                   END) AS e
                          FROM (SELECT z.i, z.j, z.shape,
                                       coalesce(CASE WHEN jsonb_typeof(z.j) = 'object' THEN z.j->>'org_id' END, acting) AS org,
                                       CASE WHEN z.shape IS NULL THEN coalesce((z.j->>'id')::uuid, gen_random_uuid()) END AS rid,
                                       CASE WHEN z.shape IS NULL THEN jsonb_build_object(
                                           'org_id', coalesce(z.j->>'org_id', acting), 'entity_type', z.j->'entity_type', 'name', z.j->'name',
                                           'taxonomy_category', z.j->'taxonomy_category', 'ontology_codes', coalesce(z.j->'ontology_codes', '[]'),
                                           'subject_id', z.j->'subject_id', 'origin', coalesce(z.j->'origin', '"import"'),
                                           'lifecycle_state', coalesce(z.j->'lifecycle_state', '"active"')) END AS r
                                  FROM (SELECT w.i, w.j,
                                                 CASE WHEN jsonb_typeof(w.j) IS DISTINCT FROM 'object' THEN ARRAY['22023', 'item is not a JSON object']
                                                      WHEN (w.j - ARRAY['id', 'ref', 'org_id', 'entity_type', 'name', 'taxonomy_category', 'ontology_codes', 'subject_id', 'origin', 'lifecycle_state']::text[]) <> '{}'::jsonb
                                                          THEN ARRAY['22023', format('unknown key "%s"', (SELECT min(u) FROM jsonb_object_keys(w.j - ARRAY['id', 'ref', 'org_id', 'entity_type', 'name', 'taxonomy_category', 'ontology_codes', 'subject_id', 'origin', 'lifecycle_state']::text[]) u))]
                                                      WHEN coalesce(w.j->'entity_type', 'null') = 'null'::jsonb THEN ARRAY['22023', '"entity_type" is required']
                                                      WHEN coalesce(w.j->'name', 'null') = 'null'::jsonb THEN ARRAY['22023', '"name" is required']
                                                      WHEN jsonb_typeof(w.j->'id') NOT IN ('string', 'null') OR jsonb_typeof(w.j->'ref') NOT IN ('string', 'null') OR jsonb_typeof(w.j->'org_id') NOT IN ('string', 'null') OR jsonb_typeof(w.j->'entity_type') NOT IN ('string', 'null') OR jsonb_typeof(w.j->'name') NOT IN ('string', 'null') OR jsonb_typeof(w.j->'taxonomy_category') NOT IN ('string', 'null') OR jsonb_typeof(w.j->'subject_id') NOT IN ('string', 'null') OR jsonb_typeof(w.j->'origin') NOT IN ('string', 'null') OR jsonb_typeof(w.j->'lifecycle_state') NOT IN ('string', 'null')
                                                          THEN ARRAY['22023', format('"%s" must be a string', (SELECT min(u) FROM unnest(ARRAY['id', 'ref', 'org_id', 'entity_type', 'name', 'taxonomy_category', 'subject_id', 'origin', 'lifecycle_state']) u WHERE jsonb_typeof(w.j->u) NOT IN ('string', 'null')))]
                                                      WHEN (w.j->>'id') !~* '^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$'
                                                          THEN ARRAY['22P02', format('"%s" is not a uuid', (SELECT min(u) FROM unnest(ARRAY['id']) u WHERE (w.j->>u) !~* '^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$'))]
                                                 END AS shape
                                            FROM (SELECT (lo + u.o - 1)::int AS i, u.j FROM unnest(ch) WITH ORDINALITY u(j, o)) w) z) y) x;
            ELSIF k = 'claims' THEN
                SELECT jsonb_agg(jsonb_build_array(x.i, x.rid, x.org, x.e[1], x.e[2], x.r || jsonb_build_object('entity_id', x.ent)) ORDER BY x.i) INTO checked
                  FROM (SELECT y.i, y.rid, y.org, y.r, y.ent,
                               coalesce(y.shape,
                                   CASE WHEN y.org IS NULL THEN ARRAY['22023', 'no org_id (and no acting org)']
                                        WHEN NOT coalesce((allowed->>y.org)::boolean, false) THEN ARRAY['42501', format('role may not act for org "%s"', y.org)]
                                        WHEN y.j ? 'entity_ref' AND NOT refs ? (y.j->>'entity_ref')
                                            THEN ARRAY['23503', format('entity_ref "%s" names no entity of this batch that was inserted', y.j->>'entity_ref')]
                                        WHEN NOT (y.j ? 'entity_ref') AND NOT (y.j ? 'entity_id') THEN ARRAY['22023', '"entity_id" or "entity_ref" is required']
                                        WHEN NOT coalesce(known ? (y.org || ' ' || y.ent::text), false)
                                            THEN ARRAY['23503', format('entity %s does not exist in org %s', y.ent, y.org)]
                                        WHEN coalesce(y.j->>'kind', 'evidence') NOT IN ('evidence', 'hypothesis', 'correlator', 'replicator', 'librarian')
                                            THEN ARRAY['23514', format('unknown claim kind "%s"', y.j->>'kind')]
                                        WHEN y.j ? 'confidence_score' AND (jsonb_typeof(y.j->'confidence_score') <> 'number'
                                             OR NOT ((y.j->>'confidence_score')::float8 BETWEEN 0 AND 1))
                                            THEN ARRAY['23514', 'confidence_score must be a number in [0, 1]']
                                        WHEN coalesce(y.j->>'lifecycle_state', 'pending') <> 'pending'
                                            THEN ARRAY['MX001', format('invalid lifecycle transition from (new) to %s: a claim starts pending', y.j->>'lifecycle_state')]
                                        WHEN EXISTS (SELECT 1 FROM unnest(ARRAY['supports', 'pii_fields']) a WHERE y.j ? a
                                                      AND (jsonb_typeof(y.j->a) <> 'array' OR EXISTS (SELECT 1 FROM jsonb_array_elements(y.j->a) v WHERE jsonb_typeof(v) <> 'string')))
                                            THEN ARRAY['22023', '"supports" and "pii_fields" must be arrays of strings']
                                        WHEN y.j ? 'details' AND jsonb_typeof(y.j->'details') <> 'object' THEN ARRAY['22023', '"details" must be an object']
                                        WHEN y.j ? 'field' AND (y.j->>'field') !~ '^[a-z][a-z0-9_]{0,62}$' THEN ARRAY['23514', 'a field name is lower-case snake_case']
                                   END) AS e
                          FROM (SELECT z.i, z.j, z.shape,
                                       coalesce(CASE WHEN jsonb_typeof(z.j) = 'object' THEN z.j->>'org_id' END, acting) AS org,
                                       CASE WHEN z.shape IS NULL THEN coalesce((z.j->>'id')::uuid, gen_random_uuid()) END AS rid,
                                       CASE WHEN z.shape IS NULL THEN coalesce((refs->>(z.j->>'entity_ref'))::uuid, (z.j->>'entity_id')::uuid) END AS ent,
                                       CASE WHEN z.shape IS NULL THEN jsonb_build_object(
                                           'org_id', coalesce(z.j->>'org_id', acting), 'kind', coalesce(z.j->'kind', '"evidence"'),
                                           'claim_text', z.j->'claim_text', 'supports', coalesce(z.j->'supports', '[]'),
                                           'pii_fields', coalesce(z.j->'pii_fields', '[]'), 'subject_id', z.j->'subject_id',
                                           'details', coalesce(z.j->'details', '{}'), 'decay_at', z.j->'decay_at',
                                           'confidence_score', coalesce(z.j->'confidence_score', '0.5'), 'source', z.j->'source',
                                           'lifecycle_state', 'pending', 'supersedes', z.j->'supersedes', 'field', z.j->'field',
                                           't_created', coalesce(z.j->'t_created', to_jsonb(now()))) END AS r
                                  FROM (SELECT w.i, w.j,
                                                 CASE WHEN jsonb_typeof(w.j) IS DISTINCT FROM 'object' THEN ARRAY['22023', 'item is not a JSON object']
                                                      WHEN (w.j - ARRAY['id', 'org_id', 'entity_id', 'entity_ref', 'kind', 'claim_text', 'supports', 'pii_fields', 'subject_id', 'details', 'decay_at', 'confidence_score', 'source', 'lifecycle_state', 'supersedes', 'field', 't_created']::text[]) <> '{}'::jsonb
                                                          THEN ARRAY['22023', format('unknown key "%s"', (SELECT min(u) FROM jsonb_object_keys(w.j - ARRAY['id', 'org_id', 'entity_id', 'entity_ref', 'kind', 'claim_text', 'supports', 'pii_fields', 'subject_id', 'details', 'decay_at', 'confidence_score', 'source', 'lifecycle_state', 'supersedes', 'field', 't_created']::text[]) u))]
                                                      WHEN coalesce(w.j->'claim_text', 'null') = 'null'::jsonb THEN ARRAY['22023', '"claim_text" is required']
                                                      WHEN jsonb_typeof(w.j->'id') NOT IN ('string', 'null') OR jsonb_typeof(w.j->'org_id') NOT IN ('string', 'null') OR jsonb_typeof(w.j->'entity_id') NOT IN ('string', 'null') OR jsonb_typeof(w.j->'entity_ref') NOT IN ('string', 'null') OR jsonb_typeof(w.j->'kind') NOT IN ('string', 'null') OR jsonb_typeof(w.j->'claim_text') NOT IN ('string', 'null') OR jsonb_typeof(w.j->'subject_id') NOT IN ('string', 'null') OR jsonb_typeof(w.j->'decay_at') NOT IN ('string', 'null') OR jsonb_typeof(w.j->'source') NOT IN ('string', 'null') OR jsonb_typeof(w.j->'lifecycle_state') NOT IN ('string', 'null') OR jsonb_typeof(w.j->'supersedes') NOT IN ('string', 'null') OR jsonb_typeof(w.j->'field') NOT IN ('string', 'null') OR jsonb_typeof(w.j->'t_created') NOT IN ('string', 'null')
                                                          THEN ARRAY['22023', format('"%s" must be a string', (SELECT min(u) FROM unnest(ARRAY['id', 'org_id', 'entity_id', 'entity_ref', 'kind', 'claim_text', 'subject_id', 'decay_at', 'source', 'lifecycle_state', 'supersedes', 'field', 't_created']) u WHERE jsonb_typeof(w.j->u) NOT IN ('string', 'null')))]
                                                      WHEN (w.j->>'id') !~* '^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$' OR (w.j->>'entity_id') !~* '^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$' OR (w.j->>'supersedes') !~* '^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$'
                                                          THEN ARRAY['22P02', format('"%s" is not a uuid', (SELECT min(u) FROM unnest(ARRAY['id', 'entity_id', 'supersedes']) u WHERE (w.j->>u) !~* '^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$'))]
                                                      WHEN (w.j ? 'decay_at' AND w.j->'decay_at' <> 'null'::jsonb AND memory._ingest_ts(w.j->>'decay_at') IS NULL) OR (w.j ? 't_created' AND w.j->'t_created' <> 'null'::jsonb AND memory._ingest_ts(w.j->>'t_created') IS NULL)
                                                          THEN ARRAY['22007', 'a time is not a valid timestamp']
                                                 END AS shape
                                            FROM (SELECT (lo + u.o - 1)::int AS i, u.j FROM unnest(ch) WITH ORDINALITY u(j, o)) w) z) y) x;
            ELSE
                SELECT jsonb_agg(jsonb_build_array(x.i, x.rid, x.org, x.e[1], x.e[2],
                                                   x.r || jsonb_build_object('source_id', x.src, 'target_id', x.tgt)) ORDER BY x.i) INTO checked
                  FROM (SELECT y.i, y.rid, y.org, y.r, y.src, y.tgt,
                               coalesce(y.shape,
                                   CASE WHEN y.org IS NULL THEN ARRAY['22023', 'no org_id (and no acting org)']
                                        WHEN NOT coalesce((allowed->>y.org)::boolean, false) THEN ARRAY['42501', format('role may not act for org "%s"', y.org)]
                                        WHEN y.src IS NULL OR y.tgt IS NULL
                                            THEN ARRAY['23503', 'source and target must name entities (source_id/source_ref, target_id/target_ref)']
                                        WHEN NOT coalesce(known ? (y.org || ' ' || y.src::text), false)
                                            THEN ARRAY['23503', format('entity %s does not exist in org %s', y.src, y.org)]
                                        WHEN NOT coalesce(known ? (y.org || ' ' || y.tgt::text), false)
                                            THEN ARRAY['23503', format('entity %s does not exist in org %s', y.tgt, y.org)]
                                        WHEN (y.j->>'rel_type') !~ '^[a-z][a-z0-9_]{0,62}$' THEN ARRAY['23514', 'rel_type is lower-case snake_case']
                                        WHEN y.j ? 'attributes' AND jsonb_typeof(y.j->'attributes') <> 'object' THEN ARRAY['22023', '"attributes" must be an object']
                                   END) AS e
                          FROM (SELECT z.i, z.j, z.shape,
                                       coalesce(CASE WHEN jsonb_typeof(z.j) = 'object' THEN z.j->>'org_id' END, acting) AS org,
                                       CASE WHEN z.shape IS NULL THEN coalesce((z.j->>'id')::uuid, gen_random_uuid()) END AS rid,
                                       CASE WHEN z.shape IS NULL THEN coalesce((refs->>(z.j->>'source_ref'))::uuid, (z.j->>'source_id')::uuid) END AS src,
                                       CASE WHEN z.shape IS NULL THEN coalesce((refs->>(z.j->>'target_ref'))::uuid, (z.j->>'target_id')::uuid) END AS tgt,
                                       CASE WHEN z.shape IS NULL THEN jsonb_build_object(
                                           'org_id', coalesce(z.j->>'org_id', acting), 'rel_type', z.j->'rel_type',
                                           'attributes', coalesce(z.j->'attributes', '{}'), 'subject_id', z.j->'subject_id',
                                           'decay_at', z.j->'decay_at') END AS r
                                  FROM (SELECT w.i, w.j,
                                                 CASE WHEN jsonb_typeof(w.j) IS DISTINCT FROM 'object' THEN ARRAY['22023', 'item is not a JSON object']
                                                      WHEN (w.j - ARRAY['id', 'org_id', 'source_id', 'source_ref', 'target_id', 'target_ref', 'rel_type', 'attributes', 'subject_id', 'decay_at']::text[]) <> '{}'::jsonb
                                                          THEN ARRAY['22023', format('unknown key "%s"', (SELECT min(u) FROM jsonb_object_keys(w.j - ARRAY['id', 'org_id', 'source_id', 'source_ref', 'target_id', 'target_ref', 'rel_type', 'attributes', 'subject_id', 'decay_at']::text[]) u))]
                                                      WHEN coalesce(w.j->'rel_type', 'null') = 'null'::jsonb THEN ARRAY['22023', '"rel_type" is required']
                                                      WHEN jsonb_typeof(w.j->'id') NOT IN ('string', 'null') OR jsonb_typeof(w.j->'org_id') NOT IN ('string', 'null') OR jsonb_typeof(w.j->'source_id') NOT IN ('string', 'null') OR jsonb_typeof(w.j->'source_ref') NOT IN ('string', 'null') OR jsonb_typeof(w.j->'target_id') NOT IN ('string', 'null') OR jsonb_typeof(w.j->'target_ref') NOT IN ('string', 'null') OR jsonb_typeof(w.j->'rel_type') NOT IN ('string', 'null') OR jsonb_typeof(w.j->'subject_id') NOT IN ('string', 'null') OR jsonb_typeof(w.j->'decay_at') NOT IN ('string', 'null')
                                                          THEN ARRAY['22023', format('"%s" must be a string', (SELECT min(u) FROM unnest(ARRAY['id', 'org_id', 'source_id', 'source_ref', 'target_id', 'target_ref', 'rel_type', 'subject_id', 'decay_at']) u WHERE jsonb_typeof(w.j->u) NOT IN ('string', 'null')))]
                                                      WHEN (w.j->>'id') !~* '^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$' OR (w.j->>'source_id') !~* '^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$' OR (w.j->>'target_id') !~* '^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$'
                                                          THEN ARRAY['22P02', format('"%s" is not a uuid', (SELECT min(u) FROM unnest(ARRAY['id', 'source_id', 'target_id']) u WHERE (w.j->>u) !~* '^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$'))]
                                                      WHEN (w.j ? 'decay_at' AND w.j->'decay_at' <> 'null'::jsonb AND memory._ingest_ts(w.j->>'decay_at') IS NULL)
                                                          THEN ARRAY['22007', 'a time is not a valid timestamp']
                                                 END AS shape
                                            FROM (SELECT (lo + u.o - 1)::int AS i, u.j FROM unnest(ch) WITH ORDINALITY u(j, o)) w) z) y) x;
            END IF;
            -- The good rows of the chunk, with their ids; one statement inserts them all.
            SELECT coalesce(jsonb_agg((c2->5) || jsonb_build_object('id', c2->1) ORDER BY (c2->>0)::int), '[]') INTO good
              FROM jsonb_array_elements(checked) c2 WHERE c2->>3 IS NULL;
            BEGIN
                CASE k WHEN 'entities' THEN PERFORM memory._ingest_insert_entities(good);
                       WHEN 'claims' THEN PERFORM memory._ingest_insert_claims(good);
                       ELSE PERFORM memory._ingest_insert_relationships(good); END CASE;
            EXCEPTION WHEN OTHERS THEN
                -- One of them broke a rule the checks above do not see: insert them one by one.
                good := NULL;
            END;
            IF good IS NULL THEN
                SELECT jsonb_agg(c2 ORDER BY (c2->>0)::int) INTO checked FROM jsonb_array_elements(checked) c2;
                fails := '{}';
                FOR lo_i IN 0 .. jsonb_array_length(checked) - 1 LOOP
                    c := checked->lo_i;
                    CONTINUE WHEN c->>3 IS NOT NULL;
                    BEGIN
                        CASE k WHEN 'entities' THEN PERFORM memory._ingest_insert_entities(jsonb_build_array((c->5) || jsonb_build_object('id', c->1)));
                               WHEN 'claims' THEN PERFORM memory._ingest_insert_claims(jsonb_build_array((c->5) || jsonb_build_object('id', c->1)));
                               ELSE PERFORM memory._ingest_insert_relationships(jsonb_build_array((c->5) || jsonb_build_object('id', c->1))); END CASE;
                    EXCEPTION WHEN OTHERS THEN
                        GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT;
                        fails := fails || jsonb_build_array(c->0, c->1, c->2, st, msg, c->5);
                    END;
                END LOOP;
                -- The failures replace their items in one pass.
                SELECT jsonb_agg(coalesce(f.x, x.x) ORDER BY (x.x->>0)::int) INTO checked
                  FROM jsonb_array_elements(checked) x(x)
                  LEFT JOIN unnest(fails) f(x) ON (f.x->>0)::int = (x.x->>0)::int;
            END IF;
            -- Remember the refs of entities that landed, count per org, report the chunk.
            IF k = 'entities' THEN
                SELECT refs || coalesce(jsonb_object_agg(ch[(x->>0)::int - lo + 1]->>'ref', x->1), '{}') INTO refs
                  FROM jsonb_array_elements(checked) x
                 WHERE x->>3 IS NULL AND jsonb_typeof(ch[(x->>0)::int - lo + 1]->'ref') = 'string';
            END IF;
            FOR c IN SELECT jsonb_build_object('org', x->>2, 'ok', count(*) FILTER (WHERE x->>3 IS NULL),
                                               'bad', count(*) FILTER (WHERE x->>3 IS NOT NULL))
                       FROM jsonb_array_elements(checked) x
                      WHERE x->>2 IS NOT NULL AND coalesce((allowed->>(x->>2))::boolean, false)
                      GROUP BY x->>2 LOOP
                orgs := jsonb_set(orgs, ARRAY[c->>'org'], coalesce(orgs->(c->>'org'), '{}') || jsonb_build_object(
                    k || 'Inserted', coalesce((orgs->(c->>'org')->>(k || 'Inserted'))::int, 0) + (c->>'ok')::int,
                    k || 'Failed', coalesce((orgs->(c->>'org')->>(k || 'Failed'))::int, 0) + (c->>'bad')::int));
            END LOOP;
            RETURN QUERY SELECT k, (x->>0)::int, CASE WHEN x->>3 IS NULL THEN (x->>1)::uuid END, x->>3 IS NULL, x->>3, x->>4
                           FROM jsonb_array_elements(checked) x ORDER BY (x->>0)::int;
            lo := lo + chunk_size;
        END LOOP;
    END LOOP;
    -- One event per org the batch wrote to, with counts only.
    PERFORM memory._audit_append_many(coalesce((SELECT jsonb_agg(jsonb_build_object('event_type', 'memory.ingest.batch', 'org_id', o.key,
                'payload', jsonb_build_object('entities', jsonb_build_object('inserted', coalesce((o.value->>'entitiesInserted')::int, 0), 'failed', coalesce((o.value->>'entitiesFailed')::int, 0)),
                                              'claims', jsonb_build_object('inserted', coalesce((o.value->>'claimsInserted')::int, 0), 'failed', coalesce((o.value->>'claimsFailed')::int, 0)),
                                              'relationships', jsonb_build_object('inserted', coalesce((o.value->>'relationshipsInserted')::int, 0), 'failed', coalesce((o.value->>'relationshipsFailed')::int, 0)),
                                              'chunkSize', chunk_size)) ORDER BY o.key)
                FROM jsonb_each(orgs) o), '[]'));
END $$;
COMMENT ON FUNCTION memory.ingest_batch(jsonb, jsonb, jsonb, int) IS
  'Bulk ingest of entities, claims and relationships (arrays of objects), chunk by chunk: one row per item in input order (entities, then claims, then relationships) with its id or its SQLSTATE and message; a bad item does not stop the others. Claims and relationships may name entities of the same batch by "entity_ref" / "source_ref" / "target_ref" (an entity''s "ref"). Per-item events as for plain INSERTs, and one memory.ingest.batch event (counts only) per org. For roles with INSERT on the three tables (memory_writer).';

-- Knowledge retention (issue 18): agents' findings as claim kinds, indexes for what can come due.
ALTER TABLE memory.claims DROP CONSTRAINT claims_kind_check,
    ADD CONSTRAINT claims_kind_check CHECK (kind IN ('evidence', 'hypothesis', 'correlator', 'replicator', 'librarian'));
CREATE INDEX claims_retention_due ON memory.claims (t_created)
    WHERE lifecycle_state <> 'archived' AND (subject_id IS NOT NULL OR kind IN ('correlator', 'replicator', 'librarian'));
CREATE INDEX entities_retention_due ON memory.entities (t_created) WHERE lifecycle_state <> 'archived' AND subject_id IS NOT NULL;

-- ------------------------------------------------------------------------------------------------
-- Knowledge retention (seed §3 "Retention eventually disposes"): entities and claims about a
-- subject ride the subject's data-retention policy (the org's restricted-tier retention, from
-- t_created); the correlator's, replicator's and librarian's findings keep 180 days. Disposal is
-- a state transition to archived, logged as memory.govern.retention_disposed, never a delete.
-- A legal hold on the subject (or the org) keeps them. Part of memory.run_maintenance.

CREATE FUNCTION memory._knowledge_retention(at timestamptz DEFAULT now())
RETURNS jsonb LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    scope    text := memory._scope_org();
    orgs     text[];
    days     jsonb;
    o        text;
    claims_n int := 0;
    ents_n   int := 0;
    held_n   int := 0;
    cn       int;
    en       int;
    hn       int;
    ev       jsonb;
    budget   int := 10000;
BEGIN
    IF at IS NULL OR NOT isfinite(at) THEN
        RAISE EXCEPTION 'knowledge retention needs a finite time' USING ERRCODE = '22023';
    END IF;
    -- The orgs holding what can come due, then each one's retention for restricted data (NULL:
    -- kept indefinitely; BFSI mode applies): statements of their own, as Citus plans them.
    SELECT coalesce(array_agg(DISTINCT x.org_id ORDER BY x.org_id), '{}') INTO orgs
      FROM (SELECT c.org_id FROM memory.claims c
             WHERE c.lifecycle_state <> 'archived' AND (scope IS NULL OR c.org_id = scope)
               AND (c.subject_id IS NOT NULL OR c.kind IN ('correlator', 'replicator', 'librarian'))
            UNION
            SELECT e.org_id FROM memory.entities e
             WHERE e.lifecycle_state <> 'archived' AND e.subject_id IS NOT NULL AND (scope IS NULL OR e.org_id = scope)) x;
    SELECT coalesce(jsonb_object_agg(u.o, (SELECT r.retention_days FROM memory.retention_policy(u.o, 'restricted') r)), '{}')
      INTO days FROM unnest(orgs) u(o);

    -- One pass over the scope on a single node; on Citus one per org, each statement naming it
    -- (so that Citus runs it on the org's shards). Bounded per run (oldest first, 10,000 rows in
    -- all): a backlog is worked off over several runs, each within the limits of one event array.
    FOR o IN SELECT u.o FROM unnest(CASE WHEN memory._citus_distributed('memory.claims') THEN orgs ELSE ARRAY[scope] END) u(o) LOOP
        EXIT WHEN budget <= 0;
        WITH due AS (
            SELECT 'claim' AS kind, c.id, c.org_id, c.lifecycle_state::text AS from_state,
                   CASE WHEN c.kind IN ('correlator', 'replicator', 'librarian') AND c.t_created <= at - interval '180 days'
                        THEN 'finding_ttl' ELSE 'subject_retention' END AS why,
                   c.subject_id AS subject, memory._held(c.org_id, c.subject_id, NULL) AS held
              FROM memory.claims c
             WHERE c.lifecycle_state <> 'archived' AND (o IS NULL OR c.org_id = o)
               AND (c.subject_id IS NOT NULL OR c.kind IN ('correlator', 'replicator', 'librarian'))
               AND ((c.kind IN ('correlator', 'replicator', 'librarian') AND c.t_created <= at - interval '180 days')
                    OR (c.subject_id IS NOT NULL AND days->>c.org_id IS NOT NULL
                        AND c.t_created <= at - make_interval(days => (days->>c.org_id)::int)))
            UNION ALL
            SELECT 'entity', e.id, e.org_id, e.lifecycle_state::text, 'subject_retention', e.subject_id, memory._held(e.org_id, e.subject_id, NULL)
              FROM memory.entities e
             WHERE e.lifecycle_state <> 'archived' AND e.subject_id IS NOT NULL AND (o IS NULL OR e.org_id = o)
               AND days->>e.org_id IS NOT NULL AND e.t_created <= at - make_interval(days => (days->>e.org_id)::int)
            ORDER BY 1 LIMIT budget
        ),
        -- The transitions (their state_transition events come from the audit triggers).
        c_done AS (UPDATE memory.claims c SET lifecycle_state = 'archived' FROM due d
                    WHERE d.kind = 'claim' AND NOT d.held AND c.id = d.id AND (o IS NULL OR c.org_id = o) RETURNING c.id),
        e_done AS (UPDATE memory.entities e SET lifecycle_state = 'archived' FROM due d
                    WHERE d.kind = 'entity' AND NOT d.held AND e.id = d.id AND (o IS NULL OR e.org_id = o) RETURNING e.id)
        SELECT (SELECT count(*) FROM c_done), (SELECT count(*) FROM e_done), count(*) FILTER (WHERE d.held),
               jsonb_agg(jsonb_build_object('event_type', 'memory.govern.retention_disposed', 'org_id', d.org_id,
                         'payload', jsonb_build_object(CASE d.kind WHEN 'claim' THEN 'claimId' ELSE 'entityId' END, d.id,
                                                       'fromState', d.from_state, 'toState', 'archived', 'reason', d.why,
                                                       'subjectId', memory._subject_pseudonym(d.subject))) ORDER BY d.kind, d.id)
                         FILTER (WHERE NOT d.held)
          INTO cn, en, hn, ev FROM due d;
        claims_n := claims_n + cn;
        ents_n := ents_n + en;
        held_n := held_n + hn;
        budget := budget - cn - en - hn;
        PERFORM memory._audit_append_many(coalesce(ev, '[]'));
    END LOOP;
    RETURN jsonb_build_object('claims_disposed', claims_n, 'entities_disposed', ents_n, 'held', held_n);
END $$;
COMMENT ON FUNCTION memory._knowledge_retention(timestamptz) IS
  'Knowledge retention, run by memory.run_maintenance: subject claims and entities past the org''s restricted retention, and correlator, replicator and librarian findings older than 180 days, are archived (memory.govern.retention_disposed per row); held ones stay (counted).';

-- Denied attempts, audited although the statement fails (issue 18).
CREATE FUNCTION "_audit_denied"(
	"event_type" TEXT,
	"payload" TEXT,
	"org" TEXT
) RETURNS void
VOLATILE PARALLEL UNSAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'audit_denied_wrapper';

-- Second-generation detectors (SPEC §1): memory.detect and memory.detectors.
CREATE FUNCTION "_detect"(
	"content" TEXT,
	"detectors" TEXT[]
) RETURNS TEXT[]
IMMUTABLE PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'detect_names_wrapper';

CREATE FUNCTION "_detectors"() RETURNS TABLE (
	"name" TEXT,
	"tier" TEXT,
	"validation" TEXT,
	"context_words" TEXT[]
)
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'detectors_table_wrapper';

CREATE FUNCTION memory.detect(content text, detectors text[] DEFAULT NULL)
RETURNS text[] LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT memory._detect(content, detectors) $$;
COMMENT ON FUNCTION memory.detect(text, text[]) IS
  'Names of the detectors (all, or those listed) that match content after folding, in memory.detectors() order; never the matched value. NULL content gives NULL; an unknown or NULL name raises 22023.';

CREATE FUNCTION memory.detectors()
RETURNS TABLE (name text, tier memory.classification, validation text, context_words text[])
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT d.name, d.tier::memory.classification, d.validation, d.context_words FROM memory._detectors() d $$;
COMMENT ON FUNCTION memory.detectors() IS
  'Every detector: name (as in classify_explain.detectors and memory.detect), the tier it raises to, what validates a match, and the context words it needs nearby (empty when none).';

-- Scale-out on Citus (SPEC §10).
-- On Citus (SPEC §10), where a node puts audit events whose chain's shards are on another node
-- (events appended on the coordinator): written like pending entries, then moved into the
-- distributed memory.audit_pending by the same transaction. Always empty between transactions.
CREATE TABLE memory.audit_outbox (LIKE memory.audit_pending);
REVOKE ALL ON memory.audit_outbox FROM PUBLIC;
COMMENT ON TABLE memory.audit_outbox IS
  'Citus only: pending audit entries of chains placed on another node, moved into memory.audit_pending by the transaction that wrote them. Empty between transactions.';

CREATE FUNCTION "_audit_integrate_local"(
	"explicit" bool
) RETURNS bigint
STRICT VOLATILE
LANGUAGE c
AS 'MODULE_PATHNAME', 'audit_integrate_local_sql_wrapper';

CREATE FUNCTION "_audit_verify_local"(
	"chain_id" TEXT
) RETURNS TABLE (
	"chain_id" TEXT,
	"entries" bigint,
	"ok" bool,
	"first_bad_seq" bigint,
	"reason" TEXT,
	"pruned" bigint,
	"pending" bigint
)
VOLATILE
LANGUAGE c
AS 'MODULE_PATHNAME', 'audit_verify_local_wrapper';

-- On Citus a trigger fires on the shards of its table, and for a reference table on every
-- node's copy: whether this firing (on relation `fired`, a copy of `logical`) is on a node other
-- than the coordinator, so that what it records is recorded once.
CREATE FUNCTION memory._citus_other_copy(fired regclass, logical regclass)
RETURNS boolean LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE g int;
BEGIN
    IF fired OPERATOR(pg_catalog.=) logical THEN
        RETURN false;
    END IF;
    -- Citus's catalog, named only where Citus is installed (a shard exists only there).
    EXECUTE 'SELECT groupid FROM pg_catalog.pg_dist_local_group' INTO g;
    RETURN coalesce(g, 0) OPERATOR(pg_catalog.<>) 0;
END $$;

-- Whether a relation is a shard of a Citus table (`<table>_<shardid>`, in Citus's metadata).
CREATE FUNCTION memory._citus_shard(rel regclass)
RETURNS boolean LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    id text := pg_catalog.substring(rel::pg_catalog.text, '_([0-9]+)$');
    d  boolean;
BEGIN
    IF id IS NULL OR pg_catalog.to_regclass('pg_catalog.pg_dist_shard') IS NULL THEN
        RETURN false;
    END IF;
    -- The shard's name is its table's with _<shardid>, in the same schema (compared as regclass
    -- prints both here, schema-qualified: search_path is pg_catalog only).
    EXECUTE 'SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_shard d
                              JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) d.logicalrelid
                              JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
                             WHERE d.shardid OPERATOR(pg_catalog.=) $1
                               AND pg_catalog.quote_ident(n.nspname) OPERATOR(pg_catalog.||) ''.''
                                   OPERATOR(pg_catalog.||) pg_catalog.quote_ident(c.relname OPERATOR(pg_catalog.||) ''_'' OPERATOR(pg_catalog.||) d.shardid::pg_catalog.text)
                                   OPERATOR(pg_catalog.=) $2)'
       INTO d USING id::bigint, rel::pg_catalog.text;
    RETURN d;
END $$;

-- Whether a table's rows are sharded by Citus (hash-distributed: each org's rows on one shard,
-- whose statements run on a worker); false for reference and Citus-local tables, and where Citus
-- is not installed.
CREATE FUNCTION memory._citus_distributed(t regclass)
RETURNS boolean LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE d boolean;
BEGIN
    IF pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NULL THEN
        RETURN false;
    END IF;
    EXECUTE 'SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition WHERE logicalrelid OPERATOR(pg_catalog.=) $1
                                AND partmethod OPERATOR(pg_catalog.=) ''h'')' INTO d USING t;
    RETURN d;
END $$;

-- A time as ISO text in UTC ('2026-11-26 04:13:34.517363 AD +00'), which reads back as the same
-- time whatever the session's DateStyle: how a time goes into a call Citus delegates.
CREATE FUNCTION memory._utc_text(t timestamptz)
RETURNS text LANGUAGE sql STABLE STRICT SET search_path = pg_catalog, pg_temp
AS $$ SELECT pg_catalog.to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US BC') OPERATOR(pg_catalog.||) ' +00' $$;

CREATE FUNCTION memory._who()
RETURNS jsonb LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
AS $$
    SELECT pg_catalog.jsonb_build_object(
        'role', (SELECT r.rolname FROM pg_catalog.pg_roles r WHERE r.oid OPERATOR(pg_catalog.=) memory._caller()),
        'actor', nullif(pg_catalog.current_setting('memory.actor_id', true), ''))
$$;

CREATE FUNCTION memory._who_if_distributed()
RETURNS jsonb LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN CASE WHEN memory._citus_distributed('memory.observations') THEN memory._who() END;
END $$;

CREATE FUNCTION memory._delegated(who jsonb)
RETURNS void LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF who IS NOT NULL THEN
        -- (A coordinator that held nobody responsible passes no role: refused, not the definer.)
        IF who->>'role' IS NULL THEN
            RAISE EXCEPTION 'a delegated call names no caller' USING ERRCODE = '42501';
        END IF;
        PERFORM memory._delegated_caller(who->>'role');
        PERFORM pg_catalog.set_config('memory.actor_id', coalesce(who->>'actor', ''), true);
    END IF;
END $$;

CREATE FUNCTION memory._delegated_done(who jsonb)
RETURNS void LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF who IS NOT NULL THEN
        PERFORM memory._delegated_caller(NULL);
    END IF;
END $$;

-- Whether `t` is distributed by Citus and co-located with memory_ext's stores (its shards beside
-- each org's shards of memory.audit_pending).
CREATE FUNCTION memory._colocated_with_stores(t regclass)
RETURNS boolean LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE d boolean;
BEGIN
    IF NOT memory._citus_distributed(t) THEN
        RETURN false;
    END IF;
    EXECUTE 'SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition a, pg_catalog.pg_dist_partition b
                             WHERE a.logicalrelid OPERATOR(pg_catalog.=) $1 AND b.logicalrelid OPERATOR(pg_catalog.=) ''memory.audit_pending''::pg_catalog.regclass
                               AND a.colocationid OPERATOR(pg_catalog.=) b.colocationid)' INTO d USING t;
    RETURN d;
END $$;

-- `a` with each number of `b` added to the number under the same key in `a` (any other value of
-- `b` taken as it is): the counts of runs made org by org, summed.
CREATE FUNCTION memory._add_counts(a jsonb, b jsonb)
RETURNS jsonb LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp
AS $$
    SELECT a OPERATOR(pg_catalog.||) coalesce(pg_catalog.jsonb_object_agg(k.key,
             CASE WHEN pg_catalog.jsonb_typeof(k.value) OPERATOR(pg_catalog.=) 'number'
                  THEN pg_catalog.to_jsonb(coalesce((a OPERATOR(pg_catalog.->>) k.key)::pg_catalog.numeric, 0)
                                           OPERATOR(pg_catalog.+) (k.value OPERATOR(pg_catalog.#>>) '{}')::pg_catalog.numeric)
                  ELSE k.value END), '{}'::jsonb)
      FROM pg_catalog.jsonb_each(b) k
$$;

CREATE FUNCTION memory._in_group(rel regclass, fired oid)
RETURNS oid LANGUAGE plpgsql STABLE STRICT SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    logical oid := memory._table_of(fired);
    tbl     oid := coalesce((SELECT i.indrelid FROM pg_catalog.pg_index i WHERE i.indexrelid OPERATOR(pg_catalog.=) rel), rel);
    r       oid;
BEGIN
    IF logical OPERATOR(pg_catalog.=) fired THEN
        RETURN rel;
    END IF;
    -- Co-located tables' shards of one group cover the same hash range.
    EXECUTE 'SELECT pg_catalog.to_regclass(pg_catalog.shard_name($1, s2.shardid, false))::pg_catalog.oid
               FROM pg_catalog.pg_dist_shard s1
               JOIN pg_catalog.pg_dist_partition p1 ON p1.logicalrelid OPERATOR(pg_catalog.=) s1.logicalrelid
               JOIN pg_catalog.pg_dist_partition p2 ON p2.colocationid OPERATOR(pg_catalog.=) p1.colocationid
               JOIN pg_catalog.pg_dist_shard s2 ON s2.logicalrelid OPERATOR(pg_catalog.=) p2.logicalrelid
                                               AND s2.shardminvalue OPERATOR(pg_catalog.=) s1.shardminvalue
              WHERE s1.logicalrelid OPERATOR(pg_catalog.=) $2 AND p2.logicalrelid OPERATOR(pg_catalog.=) $3
                AND s1.shardid OPERATOR(pg_catalog.=) (SELECT pg_catalog.substring(c.relname, ''_([0-9]+)$'')::bigint
                                                         FROM pg_catalog.pg_class c WHERE c.oid OPERATOR(pg_catalog.=) $4)'
       INTO r USING rel, logical, tbl, fired;
    RETURN r;
END $$;

CREATE FUNCTION memory._distribute_quietly(t regclass, how text, col text DEFAULT NULL, colocate text DEFAULT NULL)
RETURNS void LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    saved jsonb;
    k     text;
BEGIN
    SELECT coalesce(jsonb_object_agg(tg.tgname, tg.tgenabled::text), '{}') INTO saved
      FROM pg_catalog.pg_trigger tg WHERE tg.tgrelid = t AND NOT tg.tgisinternal AND tg.tgenabled <> 'D';
    FOR k IN SELECT jsonb_object_keys(saved) LOOP
        EXECUTE format('ALTER TABLE %s DISABLE TRIGGER %I', t, k);
    END LOOP;
    IF how = 'reference' THEN
        EXECUTE 'SELECT pg_catalog.create_reference_table($1)' USING t;
    ELSE
        EXECUTE 'SELECT pg_catalog.create_distributed_table($1, $2, colocate_with := $3)' USING t, col, colocate;
    END IF;
    FOR k IN SELECT jsonb_object_keys(saved) LOOP
        EXECUTE format('ALTER TABLE %s ENABLE %s TRIGGER %I', t,
                       CASE saved->>k WHEN 'A' THEN 'ALWAYS' WHEN 'R' THEN 'REPLICA' ELSE '' END, k);
    END LOOP;
END $$;

-- Citus refuses subqueries in the policies of distributed tables: the tenant policy then calls
-- memory._acting_org() per row instead of once per statement as an InitPlan (same rows).
CREATE FUNCTION memory._policy_without_subquery(t regclass)
RETURNS void LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_policy p WHERE p.polrelid = t AND p.polname = 'tenant') THEN
        EXECUTE format('ALTER POLICY tenant ON %s USING (org_id OPERATOR(pg_catalog.=) memory._acting_org()) '
                       'WITH CHECK (org_id OPERATOR(pg_catalog.=) memory._acting_org())', t);
    END IF;
END $$;

CREATE FUNCTION memory.distribute(shard_count int DEFAULT NULL)
RETURNS jsonb LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    ref text;
    t text;
    r record;
    kind "char";
    found_coordinator boolean;
    i int;
    moved regclass[] := '{}';
    pk name;
    done jsonb := jsonb_build_object('reference', '[]'::jsonb, 'audit', '[]'::jsonb, 'governed', '[]'::jsonb, 'stores', '[]'::jsonb,
                                     'kept_local', '[]'::jsonb);
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'citus') THEN
        RAISE EXCEPTION 'memory.distribute needs the citus extension in this database'
            USING ERRCODE = '55000', HINT = 'CREATE EXTENSION citus (with citus first in shared_preload_libraries on every node), add the workers, then call memory.distribute().';
    END IF;
    IF shard_count IS NOT NULL AND (shard_count < 1 OR shard_count > 64000) THEN
        RAISE EXCEPTION 'shard_count must be between 1 and 64000 (got %)', shard_count USING ERRCODE = '22023';
    END IF;
    -- Triggers on distributed tables (classification, audit, holds, lifecycle) run on the shards.
    IF pg_catalog.current_setting('citus.enable_unsafe_triggers') <> 'on' THEN
        RAISE EXCEPTION 'memory.distribute needs citus.enable_unsafe_triggers = on'
            USING ERRCODE = '55000',
                  HINT = 'memory_ext''s triggers run on the shards, and write only co-located shards; set it on every node (ALTER SYSTEM SET citus.enable_unsafe_triggers = on; SELECT pg_reload_conf()), so that shard moves and later memory.govern() calls keep them.';
    END IF;
    -- Changes of the reference tables that memory_ext audits are recorded by the coordinator's
    -- copy (memory._citus_other_copy): the coordinator must hold one.
    EXECUTE 'SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_node WHERE groupid = 0)' INTO found_coordinator;
    IF NOT found_coordinator THEN
        RAISE EXCEPTION 'memory.distribute needs the coordinator in Citus''s metadata'
            USING ERRCODE = '55000', HINT = 'SELECT citus_set_coordinator_host(''<host>'', <port>) on the coordinator first.';
    END IF;
    IF shard_count IS NOT NULL THEN
        PERFORM pg_catalog.set_config('citus.shard_count', shard_count::text, true);
    END IF;
    -- The rows already there are loaded into the shards as they are, like a restore (no
    -- classification, stamps, rules or audit events): memory._distribute_quietly keeps the
    -- tables' triggers off for the copy on the workers, and the restore mode covers this node.
    PERFORM pg_catalog.set_config('memory.restore_mode', 'on', true);
    -- The key and the pseudonym salt exist before their tables are replicated: a worker never
    -- makes one (SPEC §10: one key set for the cluster).
    PERFORM memory._audit_current_key();

    -- Keys and registries: reference tables, a copy on every node, read by the triggers on the
    -- shards beside them.
    -- (memory.governance_registry stays each node's own: it names tables by oid, and oids are
    -- per node; the shards' triggers carry their mapping in their arguments.)
    FOREACH ref IN ARRAY ARRAY['memory.audit_keys', 'memory.audit_secrets', 'memory.org_grants',
                                'memory.org_settings', 'memory.classification_rules', 'memory.retention_policies',
                                'memory.memory_type_policies', 'memory.legal_holds', 'memory.drift_lexicon',
                                'memory.drift_thresholds', 'memory.route_slices', 'memory.screen_profiles'] LOOP
        SELECT p.partmethod INTO kind FROM pg_catalog.pg_dist_partition p WHERE p.logicalrelid = ref::regclass;
        IF kind IS NULL THEN
            PERFORM memory._policy_without_subquery(ref::regclass);
            PERFORM memory._distribute_quietly(ref::regclass, 'reference');
            moved := moved || ref::regclass;
        ELSIF kind <> 'n' THEN
            RAISE EXCEPTION '% is distributed already, but not as a reference table', ref USING ERRCODE = '55000';
        END IF;
        done := jsonb_set(done, '{reference}', (done->'reference') || to_jsonb(ref));
    END LOOP;

    -- The audit tables: by chain (= org), co-located, so a chain's pending entries, head, log and
    -- seals are one shard group, on the node of its tenant's rows.
    FOREACH t IN ARRAY ARRAY['memory.audit_pending', 'memory.audit_heads', 'memory.audit_log', 'memory.audit_seals'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition p WHERE p.logicalrelid = t::regclass) THEN
            IF t = 'memory.audit_pending' THEN
                PERFORM memory._distribute_quietly(t::regclass, 'distributed', 'chain_id', 'none');
            ELSE
                PERFORM memory._distribute_quietly(t::regclass, 'distributed', 'chain_id', 'memory.audit_pending');
            END IF;
            moved := moved || t::regclass;
        END IF;
        done := jsonb_set(done, '{audit}', (done->'audit') || to_jsonb(t));
    END LOOP;

    -- Governed application tables: by their org column, co-located with the audit tables, so
    -- that an event written by a trigger on a shard lands in the co-located shard of the log.
    FOR r IN SELECT g.relid, coalesce(g.options->>'org', CASE WHEN memory._has_column(g.relid, 'org_id') THEN 'org_id' END) AS org
               FROM memory.governance_registry g WHERE NOT g.builtin ORDER BY g.relid::text LOOP
        IF r.org IS NULL THEN
            done := jsonb_set(done, '{kept_local}', (done->'kept_local') || jsonb_build_object('table', r.relid::text, 'why', 'no org column'));
            CONTINUE;
        END IF;
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition p WHERE p.logicalrelid = r.relid) THEN
            PERFORM memory._distribute_quietly(r.relid, 'distributed', r.org, 'memory.audit_pending');
            moved := moved || r.relid;
        ELSIF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition a, pg_catalog.pg_dist_partition b
                           WHERE a.logicalrelid = r.relid AND b.logicalrelid = 'memory.audit_pending'::regclass
                             AND a.colocationid = b.colocationid) THEN
            RAISE EXCEPTION '% is distributed, but not co-located with memory.audit_pending', r.relid
                USING ERRCODE = '55000', HINT = 'SELECT alter_distributed_table(''' || r.relid::text || ''', colocate_with := ''memory.audit_pending'') first.';
        END IF;
        done := jsonb_set(done, '{governed}', (done->'governed') || to_jsonb(r.relid::text));
    END LOOP;

    -- memory_ext's stores: the observations (with their archive and weight history) and the
    -- knowledge graph (entities, claims, relationships, re-check tasks), by org, co-located with
    -- the audit tables, so a tenant's memories and knowledge, its chain and the work on them
    -- (recall, feedback, retention, erasure, decay) are one shard group. Citus requires the
    -- distribution column in every unique key: the primary keys become (org_id, id) ((org_id,
    -- task_id) for tasks), and ids are unique per org from then on (the functions that take an
    -- id name its org in their statements; an id of several of the caller's orgs is the acting
    -- org's, else the greatest). The knowledge references already stay inside one org (composite
    -- foreign keys, which Citus keeps on co-located shards; they reference (org_id, id), which
    -- stays unique); a task references its claim with its org.
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition p WHERE p.logicalrelid = 'memory.recheck_tasks'::regclass) THEN
        ALTER TABLE memory.recheck_tasks DROP CONSTRAINT recheck_tasks_claim_id_fkey;
    END IF;
    FOREACH t IN ARRAY ARRAY['memory.observations', 'memory.observations_archive', 'memory.observation_weight_history',
                             'memory.entities', 'memory.claims', 'memory.relationships', 'memory.recheck_tasks',
                             'memory.consents', 'memory.user_contexts', 'memory.threads', 'memory.training_candidates',
                             'memory.persona_drift_log', 'memory.user_feedback', 'memory.thread_refreshes',
                             'memory.watch_question_updates', 'memory.deletion_stubs'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition p WHERE p.logicalrelid = t::regclass) THEN
            SELECT c.conname INTO pk FROM pg_catalog.pg_constraint c WHERE c.conrelid = t::regclass AND c.contype = 'p';
            IF t = 'memory.recheck_tasks' THEN
                ALTER TABLE memory.recheck_tasks DROP CONSTRAINT recheck_tasks_pkey, ADD PRIMARY KEY (org_id, task_id),
                    ADD CONSTRAINT recheck_tasks_claim_id_fkey FOREIGN KEY (org_id, claim_id) REFERENCES memory.claims (org_id, id);
            ELSIF t = 'memory.consents' THEN
                -- (Its key is (org_id, user_id, version) already; a receipt is unique per org. The
                -- receipt index keeps its name: the drift detectors' cache is signalled through it.)
                ALTER TABLE memory.consents DROP CONSTRAINT consents_receipt_id_key,
                    ADD CONSTRAINT consents_receipt_id_key UNIQUE (org_id, receipt_id);
            ELSIF t = 'memory.persona_drift_log' THEN
                ALTER TABLE memory.persona_drift_log DROP CONSTRAINT persona_drift_log_pkey, ADD PRIMARY KEY (org_id, drift_id);
            ELSIF pk IS NOT NULL AND t NOT IN ('memory.threads') THEN
                EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I, ADD PRIMARY KEY (org_id, id)', t, pk);
            END IF;
            -- (The functions that take an id read its orgs first: by index, on every shard.)
            IF t IN ('memory.observations', 'memory.entities', 'memory.claims') THEN
                EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON %s (id)', pg_catalog.split_part(t, '.', 2) || '_id', t);
            END IF;
            PERFORM memory._policy_without_subquery(t::regclass);
            PERFORM memory._distribute_quietly(t::regclass, 'distributed', 'org_id', 'memory.audit_pending');
            moved := moved || t::regclass;
        END IF;
        done := jsonb_set(done, '{stores}', (done->'stores') || to_jsonb(t));
    END LOOP;

    -- The gate memory.reclassify opens to lower a tier is the backend's: the function that
    -- changes the org's row is one Citus runs on the node of that org's shard, where the shard's
    -- triggers fire.
    EXECUTE 'SELECT pg_catalog.create_distributed_function($1, ''org'', colocate_with := ''memory.audit_pending'', force_delegation := true)'
        USING 'memory._reclassify_in(text,uuid,memory.classification,text,jsonb)'::regprocedure;
    -- Likewise the decay job's run over one org, and the consent store's revocation, erasure and
    -- maintenance of one org: their gates are opened where the shards' triggers fire.
    FOREACH t IN ARRAY ARRAY['memory._run_decay_in(text,timestamptz,jsonb)', 'memory._revoke_consent_in(text,text,memory.consent_scope[],timestamptz,jsonb,jsonb)',
                             'memory._erase_consent_in(text,text,jsonb)', 'memory._consent_maintenance_in(text,timestamptz,jsonb)'] LOOP
        EXECUTE 'SELECT pg_catalog.create_distributed_function($1, ''org'', colocate_with := ''memory.audit_pending'', force_delegation := true)'
            USING t::regprocedure;
    END LOOP;

    -- Citus copies a table's rows into its shards and leaves the originals in the coordinator's
    -- table, unread: remove them, or an erased subject's rows would stay on its disk. (The log's
    -- append-only guards would refuse the TRUNCATE: ordinary triggers are off in replica mode.)
    PERFORM pg_catalog.set_config('session_replication_role', 'replica', true);
    FOR i IN 1 .. coalesce(array_length(moved, 1), 0) LOOP
        EXECUTE 'SELECT pg_catalog.truncate_local_data_after_distributing_table($1)' USING moved[i];
    END LOOP;
    PERFORM pg_catalog.set_config('session_replication_role', 'origin', true);
    PERFORM pg_catalog.set_config('memory.restore_mode', 'off', true);
    -- memory_ext's other tables stay on the coordinator, each for its reason (see README
    -- "Scale-out"): the governance registry names tables by oid, which differ between nodes; the
    -- maintenance runs are the coordinator's own record.
    FOR t IN SELECT c.oid::regclass::text FROM pg_catalog.pg_class c
              WHERE c.relnamespace = 'memory'::regnamespace AND c.relkind IN ('r', 'p') AND NOT c.relispartition
                AND c.oid NOT IN (SELECT p.logicalrelid FROM pg_catalog.pg_dist_partition p)
                AND c.relname NOT IN ('audit_outbox') ORDER BY 1 LOOP
        done := jsonb_set(done, '{kept_local}', (done->'kept_local') || jsonb_build_object('table', t, 'why',
            CASE t WHEN 'memory.governance_registry' THEN 'names tables by oid, which differ between nodes'
                   WHEN 'memory.maintenance_runs' THEN 'the coordinator''s record of its maintenance runs'
                   ELSE 'not distributed by memory_ext' END));
    END LOOP;
    PERFORM memory._audit_append_system('memory.distribute', jsonb_build_object('reference', jsonb_array_length(done->'reference'),
        'audit', jsonb_array_length(done->'audit'), 'governed', jsonb_array_length(done->'governed'),
        'stores', jsonb_array_length(done->'stores')), NULL);
    RETURN done;
END $$;
COMMENT ON FUNCTION memory.distribute(int) IS
  'Citus: distributes memory_ext (keys and registries as reference tables; the audit tables by chain_id, the observation, knowledge and consent stores by org_id and governed application tables by their org column, co-located). Idempotent. Needs citus.enable_unsafe_triggers = on. Returns what it did. Owner-only.';

DO $$
DECLARE f regprocedure;
BEGIN
    FOR f IN SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
              WHERE p.pronamespace = 'memory'::regnamespace
                AND NOT EXISTS (SELECT 1 FROM unnest(coalesce(p.proconfig, '{}')) c WHERE c LIKE 'search\_path=%')
                AND NOT (p.prolang = (SELECT l.oid FROM pg_catalog.pg_language l WHERE l.lanname = 'c') AND p.provolatile = 'i')
                AND p.proname <> ALL (ARRAY['classify_trigger', 'audit_trigger', 'lifecycle_trigger', '_feedback_polarity', '_detect_drift', 'classify', '_classify',
                    'classify_explain', '_classify_explain', 'risk_band', '_risk_band', 'derive_classification',
                    '_derive_classification', 'ema', '_ema', 'can_transition', '_can_transition', 'source_tier',
                    '_source_tier', 'is_stale', '_is_stale']) LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = pg_catalog, pg_temp', f);
    END LOOP;
END $$;

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA memory FROM PUBLIC;

GRANT EXECUTE ON FUNCTION
    
    memory.classify(text, text[], text, text), memory.classify_explain(text, text[], text, text),
    memory.risk_band(memory.classification), memory.derive_classification(jsonb),
    memory.ema(float8, memory.outcome, float8, float8), memory.can_transition(memory.lifecycle_state, memory.lifecycle_state),
    memory.source_tier(text), memory.is_stale(timestamptz, int, timestamptz),
    memory.retention_policy(text, memory.classification), memory.is_expired(timestamptz, memory.classification, text, timestamptz),
    memory.acting_org(), memory.my_orgs(), memory.advisor_order(text),
    memory.govern(regclass, jsonb), memory.ungovern(regclass),
    memory.detect(text, text[]), memory.detectors(),
    
    memory._classify(text, text[], text, text), memory._classify_explain(text, text[], text, text),
    memory._detect(text, text[]), memory._detectors(),
    memory._risk_band(text), memory._derive_classification(text), memory._ema(float8, text, float8, float8),
    memory._can_transition(text, text), memory._source_tier(text), memory._is_stale(timestamptz, int, timestamptz),
    memory._caller(), memory._may_act_for(text), memory._acting_org(),
    
    memory._is_misleading(bigint, bigint), memory._stamps_t_invalid(text), memory._is_retirement(text, text),
    memory._is_expired(timestamptz, int, timestamptz), memory._purge_due(timestamptz, timestamptz, timestamptz, timestamptz),
    
    memory._check_rule_pattern(text), memory._knowledge_gate_open(), memory._is_knowledge_admin(), memory._table_of(oid),
    
    memory.classify_trigger(), memory.audit_trigger(), memory.lifecycle_trigger(), memory._audit_truncate(),
    memory._consent_row_gate(), memory._hold_guard(), memory._hold_for(text, text, text), memory._hold_gate_open(),
    -- denied attempts, handed over by memory_ext's guards (refused unless a guard is the caller)
    memory._audit_denied(text, text, text),
    
    memory._has_consent(text, text, text)
TO PUBLIC;

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

DO $$
DECLARE cur text := coalesce(current_setting('session_preload_libraries', true), '');
BEGIN
    IF NOT ('memory_ext' = ANY (string_to_array(replace(cur, ' ', ''), ','))) THEN
        EXECUTE format('ALTER DATABASE %I SET session_preload_libraries = %L', current_database(),
                       CASE WHEN btrim(cur) = '' THEN 'memory_ext' ELSE cur || ', memory_ext' END);
    END IF;
END $$;


-- ---------------------------------------------------------------------------------------------
-- Governed tables under 0.2.0's memory.govern.
-- ---------------------------------------------------------------------------------------------

-- The extension's own tables: governed again as CREATE EXTENSION governs them (0.2.0's audit
-- trigger arguments, the TRUNCATE audit trigger); their registry rows keep when and by whom.
DO $$
DECLARE
    saved jsonb := (SELECT pg_catalog.jsonb_object_agg(g.relid::oid::text, pg_catalog.jsonb_build_array(g.governed_at, g.governed_by))
                      FROM memory.governance_registry g WHERE g.builtin);
BEGIN
    UPDATE memory.governance_registry SET builtin = false WHERE builtin;
    PERFORM memory.govern('memory.observations', '{"content": "content", "source_files": "source_files",
        "source_type": "source_type", "target": ["classification", "metadata"], "org": "org_id", "audit": true,
        "weight": "weight", "stamps": true}');
    PERFORM memory.govern('memory.entities', '{"classify": false, "state": "lifecycle_state"}');
    PERFORM memory.govern('memory.claims', '{"classify": false, "state": "lifecycle_state"}');
    UPDATE memory.governance_registry g
       SET builtin = true,
           governed_at = coalesce((saved->(g.relid::oid::text)->>0)::timestamptz, g.governed_at),
           governed_by = coalesce((saved->(g.relid::oid::text)->>1)::name, g.governed_by)
     WHERE g.relid IN ('memory.observations'::regclass, 'memory.entities'::regclass, 'memory.claims'::regclass);
END $$;

-- Application tables keep their triggers (0.2.0 reads 0.1.0's trigger arguments; the `table=`
-- argument is ignored) and gain the TRUNCATE audit trigger memory.govern now attaches.
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT g.relid FROM memory.governance_registry g
              WHERE NOT g.builtin
                AND EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t WHERE t.tgrelid = g.relid AND t.tgname LIKE 'memory\_%')
                AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t WHERE t.tgrelid = g.relid AND t.tgname = 'memory_audit_truncate')
    LOOP
        EXECUTE format('CREATE TRIGGER memory_audit_truncate AFTER TRUNCATE ON %s FOR EACH STATEMENT EXECUTE FUNCTION memory._audit_truncate()',
                       r.relid);
    END LOOP;
END $$;

-- Application tables gain the legal-hold trigger memory.govern now attaches (MX006).
DO $$
DECLARE
    r record;
    h_org text;
    h_user text;
    h_id text;
    h_content text;
BEGIN
    FOR r IN SELECT g.relid, g.options FROM memory.governance_registry g
              WHERE NOT g.builtin
                AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t WHERE t.tgrelid = g.relid AND t.tgname = 'memory_hold')
    LOOP
        h_org := coalesce(r.options->>'org', CASE WHEN memory._has_column(r.relid, 'org_id') THEN 'org_id' END);
        CONTINUE WHEN h_org IS NULL;
        h_content := coalesce(r.options->>'content', CASE WHEN memory._has_column(r.relid, 'content') THEN 'content' END);
        h_user := coalesce(r.options->>'user', CASE WHEN memory._has_column(r.relid, 'user_id') THEN 'user_id' END);
        h_id := coalesce(r.options->>'id', CASE WHEN memory._has_column(r.relid, 'id') THEN 'id' END);
        EXECUTE format('CREATE TRIGGER memory_hold BEFORE UPDATE OF %s OR DELETE ON %s FOR EACH ROW WHEN (NOT memory._hold_gate_open()) '
                       'EXECUTE FUNCTION memory._hold_guard(%L, %L, %L, %L)',
                       (SELECT string_agg(DISTINCT quote_ident(c), ', ') FROM unnest(ARRAY[h_org, h_user, h_id, h_content]) c WHERE c IS NOT NULL),
                       r.relid, h_org, coalesce(h_user, ''), coalesce(h_id, ''), coalesce(h_content, ''));
    END LOOP;
END $$;

-- The triggers that drop the backends' cached rules, policies, thresholds and org grants,
-- consents, and the audit key and salt (row triggers, as logical replication's apply fires no
-- statement trigger but TRUNCATE's) fire in every session_replication_role: a change applied by
-- logical replication or a restore run as replica must reach the caches too (they only send an
-- invalidation).
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
