-- The trust boundary (docs/design.md#trust-boundary): row-level security on every table holding tenant rows, the
-- roles and their grants, and the event trigger that keeps governance from being switched off
-- quietly. Function EXECUTE privileges are set last, in finalize.sql (deny by default).

-- ------------------------------------------------------------------------------------------------
-- Row-level security: a role sees and writes only rows of the org it acts for
-- (memory_internal._acting_org(), evaluated once per statement as an InitPlan). The extension owner and
-- superusers bypass it, as PostgreSQL does for owners; memory_ext's own SECURITY DEFINER
-- functions run as the owner and check orgs themselves (memory_internal._may_act_for / _scope_org).

DO $$
DECLARE t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['observations', 'observations_archive', 'observation_weight_history', 'legal_holds',
                             'classification_rules', 'org_settings', 'entities', 'claims', 'relationships', 'recheck_tasks',
                             'consents', 'user_contexts', 'threads', 'training_candidates', 'persona_drift_log',
                             'user_feedback', 'thread_refreshes', 'watch_question_updates', 'deletion_stubs'] LOOP
        EXECUTE format('ALTER TABLE memory.%I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('CREATE POLICY tenant ON memory.%I USING (org_id OPERATOR(pg_catalog.=) (SELECT memory_internal._acting_org())) '
                       'WITH CHECK (org_id OPERATOR(pg_catalog.=) (SELECT memory_internal._acting_org()))', t);
    END LOOP;
END $$;
-- Clearance (docs/design.md#application-roles): a role cleared to a tier (memory.grant_org's max_tier) reads no row above
-- it from the tables that hold tiers. Restrictive, and for reading only: it narrows what the
-- tenant policy shows (SELECT, and the rows an UPDATE or DELETE with a WHERE or RETURNING
-- reads); a write is not refused for the tier it is classified into. The clearance is looked up
-- once per statement (an InitPlan); a role without a tier on its grant reads every tier, as before.
-- (memory.observation_weight_history holds no tier and no content: ids, sessions and weights.)
CREATE POLICY clearance ON memory.observations AS RESTRICTIVE FOR SELECT
    USING (classification OPERATOR(pg_catalog.<=) (SELECT memory_internal._max_tier()));
CREATE POLICY clearance ON memory.observations_archive AS RESTRICTIVE FOR SELECT
    USING (classification OPERATOR(pg_catalog.<=) (SELECT memory_internal._max_tier()));
-- Claims carry no stored tier: a claim about a subject or with PII fields is restricted, any
-- other has its text's classification (memory_internal._claim_tier, as memory.retrieve rates it),
-- so a role cleared below restricted reads by SELECT no claim retrieve would not give it. A role
-- cleared to restricted never computes it (the first arm, once per statement, is true).
CREATE POLICY clearance ON memory.claims AS RESTRICTIVE FOR SELECT
    USING ((SELECT memory_internal._max_tier()) OPERATOR(pg_catalog.=) 'restricted'::memory.classification
           OR memory_internal._claim_tier(claim_text, subject_id, pii_fields, org_id) OPERATOR(pg_catalog.<=) (SELECT memory_internal._max_tier()));

-- Retention policies: the platform rows (org_id NULL) are everyone's to read; org rows are the org's.
ALTER TABLE memory.retention_policies ENABLE ROW LEVEL SECURITY;
CREATE POLICY platform_read ON memory.retention_policies FOR SELECT USING (org_id IS NULL);
CREATE POLICY tenant ON memory.retention_policies
    USING (org_id OPERATOR(pg_catalog.=) (SELECT memory_internal._acting_org()))
    WITH CHECK (org_id OPERATOR(pg_catalog.=) (SELECT memory_internal._acting_org()));

-- Screening profiles likewise: platform profiles (org_id NULL) are everyone's to read.
ALTER TABLE memory.screen_profiles ENABLE ROW LEVEL SECURITY;
CREATE POLICY platform_read ON memory.screen_profiles FOR SELECT USING (org_id IS NULL);
CREATE POLICY tenant ON memory.screen_profiles
    USING (org_id OPERATOR(pg_catalog.=) (SELECT memory_internal._acting_org()))
    WITH CHECK (org_id OPERATOR(pg_catalog.=) (SELECT memory_internal._acting_org()));

-- Views read with the caller's rights, so the policies above apply through them.
ALTER VIEW memory.live_observations SET (security_invoker = true);
ALTER VIEW memory.stats SET (security_invoker = true);

-- ------------------------------------------------------------------------------------------------
-- Governance cannot be switched off quietly. memory.govern and memory.ungovern open a gate for
-- the table they change (memory_internal._open_governance_gate: the caller must own it); outside it,
-- dropping, disabling or renaming a memory_ext trigger of a governed table is refused, and
-- dropping a governed table is recorded on the platform chain (TRUNCATE is recorded by the
-- table's memory_audit_truncate trigger).

CREATE FUNCTION memory_internal._is_memory_trigger_fn(f oid)
RETURNS boolean LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
AS $$ SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_proc p WHERE p.oid OPERATOR(pg_catalog.=) f
                        AND p.pronamespace IN ('memory'::pg_catalog.regnamespace, 'memory_internal'::pg_catalog.regnamespace)) $$;

-- A BEFORE row trigger on INSERT or UPDATE that is not memory_ext's and fires after memory_ext's
-- (triggers fire in name order, byte by byte): it could change the row after classification and
-- the hold check. Such triggers are refused on governed tables; the owner's own BEFORE triggers
-- take names that sort before "memory_".
CREATE FUNCTION memory_internal._is_late_trigger(tg oid)
RETURNS boolean LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
AS $$ SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t
                      WHERE t.oid OPERATOR(pg_catalog.=) tg AND NOT t.tgisinternal
                        AND (t.tgtype::int OPERATOR(pg_catalog.&) 3) OPERATOR(pg_catalog.=) 3
                        AND (t.tgtype::int OPERATOR(pg_catalog.&) 20) OPERATOR(pg_catalog.<>) 0
                        AND NOT memory_internal._is_memory_trigger_fn(t.tgfoid)
                        AND (t.tgname::text COLLATE "C") OPERATOR(pg_catalog.>=) ('memory_' COLLATE "C")) $$;

-- A trigger's arguments (pg_trigger.tgargs: NUL-terminated strings), as text.
CREATE FUNCTION memory_internal._trigger_args(tg oid)
RETURNS text[] LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    b    bytea;
    n    int;
    p    int;
    args text[] := '{}';
BEGIN
    SELECT t.tgargs, t.tgnargs INTO b, n FROM pg_catalog.pg_trigger t WHERE t.oid OPERATOR(pg_catalog.=) tg;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    FOR i IN 1 .. n LOOP
        p := pg_catalog.position(b, pg_catalog.decode('00', 'hex'));
        args := args OPERATOR(pg_catalog.||) pg_catalog.convert_from(pg_catalog.substr(b, 1, p OPERATOR(pg_catalog.-) 1), 'UTF8');
        b := pg_catalog.substr(b, p OPERATOR(pg_catalog.+) 1);
    END LOOP;
    RETURN args;
END $$;

-- The columns a governed table's mapping names (memory.governance_registry.options).
CREATE FUNCTION memory_internal._mapped_columns(opts jsonb)
RETURNS text[] LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp
AS $$
SELECT coalesce(pg_catalog.array_agg(DISTINCT x.c) FILTER (WHERE x.c IS NOT NULL AND x.c OPERATOR(pg_catalog.<>) ''), '{}')
  FROM (SELECT opts OPERATOR(pg_catalog.->>) k AS c
          FROM pg_catalog.unnest(ARRAY['content', 'source_files', 'source_type', 'org', 'id', 'project', 'workspace', 'user',
                                       'weight', 'state', 'audit_tier', 'soft_deleted', 'embedding', 'derived_from']) k
         WHERE pg_catalog.jsonb_typeof(opts OPERATOR(pg_catalog.->) k) OPERATOR(pg_catalog.=) 'string'
        UNION ALL
        SELECT pg_catalog.jsonb_array_elements_text(CASE pg_catalog.jsonb_typeof(opts OPERATOR(pg_catalog.->) 'target')
                   WHEN 'array' THEN opts OPERATOR(pg_catalog.->) 'target'
                   WHEN 'string' THEN pg_catalog.jsonb_build_array(opts OPERATOR(pg_catalog.->) 'target')
                   ELSE '[]'::jsonb END)
        UNION ALL
        SELECT e.value FROM pg_catalog.jsonb_each_text(CASE pg_catalog.jsonb_typeof(opts OPERATOR(pg_catalog.->) 'stamps')
                   WHEN 'object' THEN opts OPERATOR(pg_catalog.->) 'stamps' ELSE '{}'::jsonb END) e
        UNION ALL
        SELECT (opts OPERATOR(pg_catalog.->) 'consent') OPERATOR(pg_catalog.->>) k
          FROM pg_catalog.unnest(ARRAY['user', 'org']) k
         WHERE pg_catalog.jsonb_typeof(opts OPERATOR(pg_catalog.->) 'consent') OPERATOR(pg_catalog.=) 'object') x(c) $$;

-- memory_internal._guard_governance_ddl, ddl_command_end: one command (its object and tag) by a
-- role that is not unrestricted, refused (42501) where it would change a governed table's
-- governance around memory.govern: a partition or a child table, row-level security or a
-- memory_ext trigger disabled, a trigger that fires late or replaces one of memory_ext's, a rule.
CREATE FUNCTION memory_internal._guard_ddl_command(obj oid, tag text)
RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t record;
BEGIN
    -- A governed table attached as a partition would take writes routed through its
    -- parent, whose statement triggers are not its own.
    IF tag = 'ALTER TABLE' AND EXISTS (
           SELECT 1 FROM pg_catalog.pg_inherits i JOIN memory.governance_registry g ON g.relid::oid = i.inhrelid
            WHERE i.inhparent = obj OR i.inhrelid = obj) THEN
        RAISE EXCEPTION 'a governed table may not become a partition or a child of another table (%)', obj::regclass USING ERRCODE = '42501',
            HINT = 'Writes through the parent would go around the governed table''s audit and tenant checks.';
    END IF;
    -- A child table of a governed table would take writes around its triggers.
    IF tag IN ('CREATE TABLE', 'ALTER TABLE') AND EXISTS (
           SELECT 1 FROM pg_catalog.pg_inherits i JOIN memory.governance_registry g ON g.relid::oid = i.inhparent
            WHERE i.inhrelid = obj) THEN
        RAISE EXCEPTION 'a governed table takes no child tables' USING ERRCODE = '42501',
            HINT = 'Writes into a child table would go around the parent''s memory_ext triggers.';
    END IF;
    IF tag = 'ALTER TABLE' THEN
        IF memory_internal._governance_gate_open(obj) THEN
            RETURN;
        END IF;
        -- The row-level security of "tenant_policy" stays on (memory.govern without it takes it off).
        IF EXISTS (SELECT 1 FROM memory.governance_registry g JOIN pg_catalog.pg_class c ON c.oid = g.relid::oid
                    WHERE g.relid::oid = obj AND (g.options->>'tenant_policy')::boolean AND NOT c.relrowsecurity) THEN
            RAISE EXCEPTION 'row-level security of governed table % may not be disabled', obj::regclass
                USING ERRCODE = '42501', HINT = 'Call memory.govern(table, options) without "tenant_policy" (audited) to remove it.';
        END IF;
        FOR t IN SELECT tg.tgname FROM pg_catalog.pg_trigger tg
                  WHERE tg.tgrelid = obj AND memory_internal._is_memory_trigger_fn(tg.tgfoid)
                    AND tg.tgenabled NOT IN ('O', 'A')
                    AND EXISTS (SELECT 1 FROM memory.governance_registry g WHERE g.relid::oid = tg.tgrelid) LOOP
            RAISE EXCEPTION 'trigger % of governed table % may not be disabled', t.tgname, obj::regclass
                USING ERRCODE = '42501', HINT = 'Governance is removed with memory.ungovern(table), which is audited.';
        END LOOP;
    ELSIF tag IN ('CREATE TRIGGER', 'ALTER TRIGGER') AND EXISTS (
              SELECT 1 FROM pg_catalog.pg_trigger tg JOIN memory.governance_registry g ON g.relid::oid = tg.tgrelid
               WHERE tg.oid = obj AND memory_internal._is_late_trigger(tg.oid)) THEN
        RAISE EXCEPTION 'a BEFORE row trigger of governed table % must fire before memory_ext''s',
            (SELECT tg.tgrelid::regclass FROM pg_catalog.pg_trigger tg WHERE tg.oid = obj)
            USING ERRCODE = '42501',
                  HINT = 'Triggers fire in name order: give it a name that sorts before "memory_" (for example "app_' ||
                         (SELECT tg.tgname FROM pg_catalog.pg_trigger tg WHERE tg.oid = obj) || '"), so memory_ext governs the final row.';
    ELSIF tag = 'CREATE TRIGGER' THEN
        -- CREATE OR REPLACE of a memory_ext trigger, or a trigger of ours under another name.
        FOR t IN SELECT tg.tgname, tg.tgrelid FROM pg_catalog.pg_trigger tg
                  WHERE tg.oid = obj AND (pg_catalog.starts_with(tg.tgname::text, 'memory_') OR memory_internal._is_memory_trigger_fn(tg.tgfoid))
                    AND EXISTS (SELECT 1 FROM memory.governance_registry g WHERE g.relid::oid = tg.tgrelid) LOOP
            CONTINUE WHEN memory_internal._governance_gate_open(t.tgrelid);
            RAISE EXCEPTION 'memory_ext triggers of governed table % are replaced by memory.govern only', t.tgrelid::regclass
                USING ERRCODE = '42501', HINT = 'Call memory.govern(table, options) to change the mapping.';
        END LOOP;
    ELSIF tag = 'CREATE RULE' THEN
        -- A rule could divert writes around the triggers (DO INSTEAD).
        FOR t IN SELECT rw.ev_class FROM pg_catalog.pg_rewrite rw
                  WHERE rw.oid = obj AND EXISTS (SELECT 1 FROM memory.governance_registry g WHERE g.relid::oid = rw.ev_class) LOOP
            RAISE EXCEPTION 'governed table % takes no rules', t.ev_class::regclass
                USING ERRCODE = '42501', HINT = 'Rules could divert writes around governance; ungovern the table first.';
        END LOOP;
    ELSIF tag = 'ALTER TRIGGER' THEN
        FOR t IN SELECT tg.tgname, tg.tgrelid FROM pg_catalog.pg_trigger tg
                  WHERE tg.oid = obj AND memory_internal._is_memory_trigger_fn(tg.tgfoid) AND NOT pg_catalog.starts_with(tg.tgname::text, 'memory_')
                    AND EXISTS (SELECT 1 FROM memory.governance_registry g WHERE g.relid::oid = tg.tgrelid) LOOP
            CONTINUE WHEN memory_internal._governance_gate_open(t.tgrelid);
            RAISE EXCEPTION 'memory_ext triggers of governed table % keep their names', t.tgrelid::regclass
                USING ERRCODE = '42501', HINT = 'Governance is removed with memory.ungovern(table), which is audited.';
        END LOOP;
    END IF;
END $$;
COMMENT ON FUNCTION memory_internal._guard_ddl_command(oid, text) IS
  'memory_internal._guard_governance_ddl: refuses (42501) one DDL command that would change a governed table''s governance around memory.govern (partition or child table, row-level security or a memory_ext trigger disabled, a late or replacing trigger, a rule).';

-- memory_internal._guard_governance_ddl, sql_drop: one dropped object (its type, address names,
-- oid and identity). A memory_ext trigger or tenant policy of a governed table is refused (42501)
-- unless the gate is open; a governed table is refused under an active legal hold (MX006), else
-- it leaves the registry (memory.govern.drop_table).
CREATE FUNCTION memory_internal._guard_dropped_object(kind text, names text[], obj oid, ident text)
RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    rel regclass;
BEGIN
    IF kind = 'trigger' AND pg_catalog.starts_with(names[3], 'memory_') THEN
        -- A trigger dropped with its table is not a table left ungoverned.
        rel := pg_catalog.to_regclass(pg_catalog.quote_ident(names[1]) || '.' || pg_catalog.quote_ident(names[2]));
        IF rel IS NOT NULL AND EXISTS (SELECT 1 FROM memory.governance_registry g WHERE g.relid::oid = rel::oid)
           AND NOT memory_internal._governance_gate_open(rel::oid) AND NOT memory_internal._is_unrestricted() THEN
            RAISE EXCEPTION 'trigger % of governed table % may not be dropped', names[3], rel
                USING ERRCODE = '42501', HINT = 'Governance is removed with memory.ungovern(table), which is audited.';
        END IF;
    ELSIF kind = 'policy' AND names[3] IN ('memory_tenant', 'memory_clearance') THEN
        -- A policy of "tenant_policy" dropped with its table is not a table left open.
        rel := pg_catalog.to_regclass(pg_catalog.quote_ident(names[1]) || '.' || pg_catalog.quote_ident(names[2]));
        IF rel IS NOT NULL AND EXISTS (SELECT 1 FROM memory.governance_registry g WHERE g.relid::oid = rel::oid
                                          AND (g.options->>'tenant_policy')::boolean)
           AND NOT memory_internal._governance_gate_open(rel::oid) AND NOT memory_internal._is_unrestricted() THEN
            RAISE EXCEPTION 'policy % of governed table % may not be dropped', names[3], rel
                USING ERRCODE = '42501', HINT = 'Call memory.govern(table, options) without "tenant_policy" (audited) to remove it.';
        END IF;
    ELSIF kind = 'table' AND EXISTS (SELECT 1 FROM memory.governance_registry g WHERE g.relid::oid = obj) THEN
        -- Its rows are gone from the catalog by now, so while any legal hold is active a
        -- governed table with an org column is not dropped (its rows may be held).
        IF NOT memory_internal._is_unrestricted() AND EXISTS (SELECT 1 FROM memory.legal_holds h WHERE h.released_at IS NULL)
           AND EXISTS (SELECT 1 FROM memory.governance_registry g WHERE g.relid::oid = obj
                          AND (g.options->>'org' IS NOT NULL OR g.options->'consent'->>'org' IS NOT NULL)) THEN
            RAISE EXCEPTION 'governed table % may hold rows under an active legal hold: DROP TABLE is blocked', ident
                USING ERRCODE = 'MX006',
                      HINT = 'Release the legal holds first (memory_admin: UPDATE memory.legal_holds SET released_at = now() WHERE id = ...), or delete the rows that are not held.';
        END IF;
        DELETE FROM memory.governance_registry g WHERE g.relid::oid = obj;
        -- (Its revisions go with its rows: memory.govern's "revisions".)
        DELETE FROM memory.table_revisions r WHERE r.relid::oid OPERATOR(pg_catalog.=) obj;
        PERFORM memory_internal._audit_append_system('memory.govern.drop_table', jsonb_build_object('table', ident), NULL);
    END IF;
END $$;
COMMENT ON FUNCTION memory_internal._guard_dropped_object(text, text[], oid, text) IS
  'memory_internal._guard_governance_ddl: checks one dropped object (memory_ext trigger or tenant policy of a governed table: 42501; a governed table under an active legal hold: MX006) and removes a dropped governed table from the registry (memory.govern.drop_table).';

CREATE FUNCTION memory_internal._guard_governance_ddl()
RETURNS event_trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r   record;
    t   record;
BEGIN
    -- Superusers and the extension owner are not stopped here (they could drop this trigger;
    -- restores run as them and re-create the triggers): the guard is for table owners.
    -- A mapped column of a governed table keeps its name, for every role: renamed or dropped, the
    -- mapping would name a column that is gone, or a decoy added under its name (55000).
    IF TG_EVENT = 'ddl_command_end' AND NOT memory_internal._creating_extension() AND NOT memory_internal._restore_mode_on() THEN
        FOR r IN SELECT c.objid, g.options FROM pg_catalog.pg_event_trigger_ddl_commands() c
                   JOIN memory.governance_registry g ON g.relid::oid = c.objid
                  WHERE c.command_tag = 'ALTER TABLE' LOOP
            FOR t IN SELECT m.col FROM unnest(memory_internal._mapped_columns(r.options)) m(col)
                      WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a WHERE a.attrelid = r.objid AND a.attnum > 0
                                           AND NOT a.attisdropped AND a.attname = m.col) LOOP
                RAISE EXCEPTION 'column "%" of governed table % is mapped by memory.govern and may not be renamed or dropped', t.col, r.objid::regclass
                    USING ERRCODE = '55000',
                          HINT = 'Call memory.govern(table, options) with the new mapping first (or memory.ungovern), then rename or drop the column.';
            END LOOP;
        END LOOP;
    END IF;
    IF memory_internal._is_unrestricted() AND TG_EVENT = 'ddl_command_end' THEN
        RETURN;
    END IF;
    IF TG_EVENT = 'ddl_command_end' THEN
        FOR r IN SELECT c.objid, c.command_tag FROM pg_catalog.pg_event_trigger_ddl_commands() c LOOP
            PERFORM memory_internal._guard_ddl_command(r.objid, r.command_tag);
        END LOOP;
    ELSIF TG_EVENT = 'sql_drop' THEN
        FOR r IN SELECT d.* FROM pg_catalog.pg_event_trigger_dropped_objects() d LOOP
            PERFORM memory_internal._guard_dropped_object(r.object_type, r.address_names, r.objid, r.object_identity);
        END LOOP;
    END IF;
END $$;
-- A rewrite of a governed table's rows by ALTER TABLE (ALTER COLUMN ... TYPE ... USING) changes
-- them without a row trigger: the content, the tier or the org would change ungoverned and
-- unaudited, a held row too. Refused for every role but the extension owner and superusers (who
-- could drop this trigger anyway); the owner ungoverns (audited), alters, and governs again.
CREATE FUNCTION memory_internal._guard_governance_rewrite()
RETURNS event_trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF memory_internal._is_unrestricted() OR memory_internal._creating_extension() THEN
        RETURN;
    END IF;
    IF EXISTS (SELECT 1 FROM memory.governance_registry g WHERE g.relid::oid OPERATOR(pg_catalog.=) pg_catalog.pg_event_trigger_table_rewrite_oid()) THEN
        RAISE EXCEPTION 'ALTER TABLE would rewrite the rows of governed table % without its triggers', pg_catalog.pg_event_trigger_table_rewrite_oid()::regclass
            USING ERRCODE = '42501',
                  HINT = 'Change a governed table''s column types with memory.ungovern(table) (audited), ALTER TABLE, then memory.govern(table, options).';
    END IF;
END $$;
CREATE EVENT TRIGGER memory_guard_governance_rewrite ON table_rewrite
    EXECUTE FUNCTION memory_internal._guard_governance_rewrite();

CREATE EVENT TRIGGER memory_guard_governance ON ddl_command_end WHEN TAG IN ('ALTER TABLE', 'ALTER TRIGGER', 'CREATE TRIGGER', 'CREATE RULE', 'CREATE TABLE')
    EXECUTE FUNCTION memory_internal._guard_governance_ddl();
CREATE EVENT TRIGGER memory_guard_governance_drop ON sql_drop
    EXECUTE FUNCTION memory_internal._guard_governance_ddl();

-- ------------------------------------------------------------------------------------------------
-- Roles: made by a documented setup call, not by CREATE EXTENSION (roles are cluster-wide). The
-- grants below are the grant table of docs/security.md; tests/python/test_privileges.py compares the two.

-- memory.setup_roles' first grants: the schema, what readers read (memories, knowledge, items,
-- revisions, lineage, context packing) and what writers write there (items, supersede, remember).
-- Runs as setup_roles' caller. Not granted to PUBLIC.
CREATE FUNCTION memory_internal._setup_roles_memories()
RETURNS void LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    GRANT USAGE ON SCHEMA memory TO memory_reader;
    -- Readers: their org's memories, knowledge graph, history, policies.
    GRANT SELECT ON memory.observations, memory.live_observations, memory.observations_archive,
                    memory.observation_weight_history, memory.entities, memory.claims, memory.relationships,
                    memory.retention_policies, memory.memory_type_policies, memory.org_settings, memory.stats
        TO memory_reader;
    GRANT SELECT ON memory.screen_profiles TO memory_reader;
    GRANT EXECUTE ON FUNCTION memory.completeness(uuid, text, timestamptz), memory_internal._profile_rules(text, text) TO memory_reader;
    GRANT EXECUTE ON FUNCTION memory.claim_chain(uuid), memory.active_claims(uuid, timestamptz), memory_internal._claim_must_exist(uuid), memory_internal._claim_chain(uuid),
                              memory.recall(text, text, int, text, jsonb, anycompatible, regclass, timestamptz), memory.misleading_observations(text),
                              memory.retrieve(text, text, int, uuid, text, text, anycompatible, timestamptz)
        TO memory_reader;
    -- Items (docs/design.md#items): read by key and list namespaces; writers put, delete and sweep
    -- expired ones (a TTL sweeper).
    GRANT EXECUTE ON FUNCTION memory.get(text, text[], text, boolean), memory.search(text, text[], text, jsonb, int, int, anycompatible, boolean, timestamptz),
                              memory.list_namespaces(text, text[], text[], int, int, int)
        TO memory_reader;
    GRANT EXECUTE ON FUNCTION memory.put(text, text[], text, jsonb, text[], interval, anycompatible, text, uuid[]),
                              memory.delete(text, text[], text), memory.purge_expired(text)
        TO memory_writer;
    -- Memory over time (docs/reference.md#memory-over-time): readers read the revisions of their
    -- orgs within their clearance (memory.history); writers supersede.
    GRANT SELECT ON memory.revisions TO memory_reader;
    GRANT EXECUTE ON FUNCTION memory.history(uuid), memory_internal._revision_head(text, uuid) TO memory_reader;
    -- ... and of governed tables kept with "revisions" (memory.history(table, row_id)), within their SELECT on the table.
    GRANT SELECT ON memory.table_revisions TO memory_reader;
    GRANT EXECUTE ON FUNCTION memory.history(regclass, text), memory_internal._table_revision_head(regclass, text, text, memory.classification) TO memory_reader;
    -- Lineage (docs/reference.md#lineage): readers read where a memory came from, within their clearance.
    GRANT EXECUTE ON FUNCTION memory.lineage(uuid, text) TO memory_reader;
    GRANT EXECUTE ON FUNCTION memory.supersede(uuid, text, text, jsonb, real[]) TO memory_writer;
    -- Duplicates at write and context packing (sql/remember.sql): writers remember, readers pack.
    GRANT EXECUTE ON FUNCTION memory.context(text, text, int, jsonb, real[], float8),
                              memory_internal._context_pack(text, int, float8, float8)
        TO memory_reader;
    GRANT EXECUTE ON FUNCTION memory.remember(text, text, text, text, memory.memory_type, jsonb, real[], text[], uuid[]) TO memory_writer;
END $$;


-- memory.setup_roles' writer grants: memories and knowledge, entity and claim states, the
-- consent-era rows, feedback, audit events, forgetting and the re-check queue (with what readers
-- read of those). Runs as setup_roles' caller. Not granted to PUBLIC.
CREATE FUNCTION memory_internal._setup_roles_writers()
RETURNS void LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Writers: add memories and knowledge, entity states, feedback, audit events of their orgs,
    -- the re-check queue.
    GRANT INSERT ON memory.observations, memory.entities, memory.claims, memory.relationships TO memory_writer;
    GRANT EXECUTE ON FUNCTION memory.ingest_batch(jsonb, jsonb, jsonb, int) TO memory_writer;
    -- 0.1.0 also granted writers SELECT on observations directly; they read through memory_reader.
    REVOKE SELECT ON memory.observations FROM memory_writer;
    -- Correcting a memory (docs/design.md#application-roles): its content and description, re-classified (the tier never
    -- lowered: MX004), audited with the new content hash (memory.update), refused on a held row
    -- (MX006); never its org, ids, tier, weight or retention stamps.
    GRANT UPDATE (content, metadata, memory_type, source_files, source_type) ON memory.observations TO memory_writer;
    GRANT UPDATE (lifecycle_state) ON memory.entities TO memory_writer;
    -- Writers may try to change a claim's state: memory_internal._claims_guard refuses it unless the role is
    -- a knowledge admin (42501) and audits the attempt although the statement fails (docs/design.md#denied-attempts).
    GRANT UPDATE (lifecycle_state) ON memory.claims TO memory_writer;
    -- Consent-era rows of their org's users (docs/design.md#consent-and-drift): consent through the functions below,
    -- contexts, threads and training candidates by INSERT (their triggers check consent).
    GRANT SELECT ON memory.consents, memory.user_contexts, memory.threads, memory.training_candidates,
                    memory.persona_drift_log TO memory_reader;
    GRANT INSERT ON memory.user_contexts, memory.threads, memory.training_candidates TO memory_writer;
    GRANT UPDATE (title, cognition_object, status, updated_at) ON memory.threads TO memory_writer;
    GRANT SELECT ON memory.route_slices, memory.drift_thresholds, memory.drift_lexicon, memory.drift_alerts,
                    memory.user_feedback, memory.thread_refreshes, memory.watch_question_updates TO memory_reader;
    GRANT EXECUTE ON FUNCTION memory_internal._drift_threshold(text) TO memory_reader;
    -- memory-mcp's audit record of a tool call (the acting org's chain, that one event type).
    GRANT EXECUTE ON FUNCTION memory_internal._mcp_tool_invoked(text, text, int) TO memory_reader;
    GRANT INSERT ON memory.user_feedback, memory.thread_refreshes, memory.watch_question_updates TO memory_writer;
    GRANT EXECUTE ON FUNCTION memory.consent_status(text, text), memory.require_consent(text, text, memory.consent_scope[]),
                              memory.consent_receipt(text, text, int),
                              memory.load_slices(text, text, text, text, text, text[], timestamptz)
        TO memory_reader;
    GRANT EXECUTE ON FUNCTION memory.grant_consent(text, text, memory.consent_scope[], jsonb, text, timestamptz),
                              memory.revoke_consent(text, text, memory.consent_scope[], timestamptz)
        TO memory_writer;
    GRANT EXECUTE ON FUNCTION memory.audit_append(text, jsonb, text, text, text, text),
                              memory.record_outcome(text, memory.outcome, uuid[]), memory_internal._record_outcome(text, text, uuid[]),
                              memory.transfer_observations(uuid[], text), memory.end_task(text),
                              memory.forget(uuid[], text), memory.forget(regclass, text[], text),
                              memory.claim_recheck_tasks(text, int, interval), memory.complete_recheck_task(bigint, text, text)
        TO memory_writer;
END $$;


-- memory.setup_roles' admin grants: claim states and scores, org rules, holds and settings, the
-- jobs, declassification, subject rights, audit reading, tenant grants, embeddings. Runs as
-- setup_roles' caller. Not granted to PUBLIC.
CREATE FUNCTION memory_internal._setup_roles_admins()
RETURNS void LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Admins: claim states and scores, org rules, holds and settings, the jobs, declassification,
    -- subject rights, audit reading, tenant grants, all within their orgs.
    GRANT UPDATE (lifecycle_state, confidence_score) ON memory.claims TO memory_admin;
    GRANT SELECT ON memory.recheck_tasks, memory.deletion_stubs TO memory_admin;
    -- The audit backlog: a tenant-bound admin sees its own orgs' counts (memory_internal._audit_backlog_for_caller).
    GRANT SELECT ON memory.audit_backlog TO memory_admin;
    -- The dashboard: per org of the admin's, counts only (memory_internal._health_for_caller).
    GRANT SELECT ON memory.health TO memory_admin;
    -- What waits for an embedding: per org of the admin's, ids and times only (memory_internal._embedding_backlog_for_caller).
    GRANT SELECT ON memory.embedding_backlog TO memory_admin;
    GRANT SELECT, INSERT, UPDATE, DELETE ON memory.classification_rules TO memory_admin;
    GRANT SELECT, INSERT, UPDATE ON memory.legal_holds TO memory_admin;
    GRANT INSERT, UPDATE, DELETE ON memory.retention_policies TO memory_admin;
    GRANT INSERT, UPDATE, DELETE ON memory.screen_profiles TO memory_admin;
    -- Not retention_guard: that function runs inside maintenance, so only the owner sets it.
    GRANT INSERT (org_id, alpha_success, alpha_failure, bfsi_mode, dedup, dedup_threshold),
          UPDATE (alpha_success, alpha_failure, bfsi_mode, updated_at, dedup, dedup_threshold) ON memory.org_settings TO memory_admin;
    GRANT EXECUTE ON FUNCTION memory.resolve_conflict(uuid, uuid), memory.record_verdict(uuid, text),
                              memory.freshness_recheck(float8, interval, interval, int, timestamptz),
                              memory.run_decay(timestamptz),
                              memory.reclassify(uuid, memory.classification, text),
                              memory.audit_verify(text), memory_internal._audit_verify_for_caller(text), memory.audit_head(text),
                              memory.audit_events(text, text, int, int, text, text, timestamptz),
                              memory_internal._audit_backlog_for_caller(),
                              memory_internal._health_for_caller(), memory_internal._embedding_backlog_for_caller(),
                              memory.erase_subject(text), memory.export_subject(text, boolean), memory.verify_receipt(jsonb),
                              memory.grant_org(regrole, text, memory.classification), memory.revoke_org(regrole, text)
        TO memory_admin;
    -- Embeddings of memory.observations (pgvector): platform-wide and one-way (the dimensions
    -- are fixed once set), audited on the platform chain.
    GRANT EXECUTE ON FUNCTION memory.enable_embeddings(int) TO memory_admin;
END $$;

CREATE FUNCTION memory.setup_roles()
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

    -- The grants, in three steps (memory_internal._setup_roles_memories, _setup_roles_writers,
    -- _setup_roles_admins).
    PERFORM memory_internal._setup_roles_memories();
    PERFORM memory_internal._setup_roles_writers();
    PERFORM memory_internal._setup_roles_admins();
END $$;
COMMENT ON FUNCTION memory.setup_roles() IS
  'Create (if missing) and grant memory_reader < memory_writer < memory_admin (the grant table of docs/security.md). Bind roles to orgs with memory.grant_org. Run it as a superuser or a role with CREATEROLE that owns the extension. Idempotent.';
