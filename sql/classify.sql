-- Classification (docs/design.md#classification): public wrappers, org rules, governed tables, the observation store.

-- ------------------------------------------------------------------------------------------------
-- Public functions. The Rust functions (memory_internal._classify, ...) work on labels; these wrappers are
-- simple SQL functions the planner inlines, so the casts cost nothing extra.

CREATE FUNCTION memory.classify(content text, source_files text[] DEFAULT NULL,
                                source_type text DEFAULT NULL, org_id text DEFAULT NULL)
RETURNS memory.classification LANGUAGE sql STABLE PARALLEL RESTRICTED
AS $$ SELECT memory_internal._classify(content, source_files, source_type, org_id)::memory.classification $$;
COMMENT ON FUNCTION memory.classify(text, text[], text, text) IS
  'Sensitivity tier of a memory: built-in rules, detectors (memory.classify_detectors) and, given org_id, that org''s rules. NULL content gives NULL.';

CREATE FUNCTION memory.classify_explain(content text, source_files text[] DEFAULT NULL,
                                        source_type text DEFAULT NULL, org_id text DEFAULT NULL)
RETURNS jsonb LANGUAGE sql STABLE PARALLEL RESTRICTED
AS $$ SELECT memory_internal._classify_explain(content, source_files, source_type, org_id) $$;
COMMENT ON FUNCTION memory.classify_explain(text, text[], text, text) IS
  'Like classify, as jsonb: tier, rule (which rule decided), risk_band, evidence (matched keyword or path; never a detector match).';

CREATE FUNCTION memory.risk_band(tier memory.classification)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
AS $$ SELECT memory_internal._risk_band(tier::pg_catalog.text) $$;
COMMENT ON FUNCTION memory.risk_band(memory.classification) IS
  'BFSI risk band: public low, internal medium, confidential high, restricted critical.';

CREATE FUNCTION memory.derive_classification(metadata jsonb)
RETURNS memory.classification LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT memory_internal._derive_classification(metadata OPERATOR(pg_catalog.->>) 'classification')::memory.classification $$;
COMMENT ON FUNCTION memory.derive_classification(jsonb) IS
  'metadata->>''classification'' when it is a valid tier, else internal (the safe default).';

-- The validated detectors (docs/design.md#classification), by name, for rules outside
-- classification (the consent layer's sensitive-input gate) and for applications.
CREATE FUNCTION memory.detect(content text, detectors text[] DEFAULT NULL)
RETURNS text[] LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT memory_internal._detect(content, detectors) $$;
COMMENT ON FUNCTION memory.detect(text, text[]) IS
  'Names of the detectors (all, or those listed) that match content after folding, in memory.detectors() order; never the matched value. NULL content gives NULL; an unknown or NULL name raises 22023.';

CREATE FUNCTION memory.detectors()
RETURNS TABLE (name text, tier memory.classification, validation text, context_words text[])
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT d.name, d.tier::memory.classification, d.validation, d.context_words FROM memory_internal._detectors() d $$;
COMMENT ON FUNCTION memory.detectors() IS
  'Every detector: name (as in classify_explain.detectors and memory.detect), the tier it raises to, what validates a match, and the context words it needs nearby (empty when none).';

-- ------------------------------------------------------------------------------------------------
-- Org rules: raise only. Patterns are checked on write (22023) and compiled once per backend;
-- a statement trigger tells every backend to drop its compiled copy.

CREATE TABLE memory.classification_rules (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    org_id      text NOT NULL,
    tier        memory.classification NOT NULL,
    target      text NOT NULL CHECK (target IN ('content', 'path')),
    pattern     text NOT NULL CHECK (memory_internal._check_rule_pattern(pattern)),
    source_type memory.source_type,
    enabled     boolean NOT NULL DEFAULT true,
    description text,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ON memory.classification_rules (org_id) WHERE enabled;
COMMENT ON TABLE memory.classification_rules IS
  'Per-org classification rules. A matching rule raises the tier to its own; it never lowers one.';

CREATE TRIGGER memory_rules_changed AFTER INSERT OR UPDATE OR DELETE ON memory.classification_rules
    FOR EACH ROW EXECUTE FUNCTION memory.rules_changed();
CREATE TRIGGER memory_rules_changed_truncate AFTER TRUNCATE ON memory.classification_rules
    FOR EACH STATEMENT EXECUTE FUNCTION memory.rules_changed();

-- The classify trigger reads rules as the extension owner (src/classify.rs, load_rules): the table
-- stays closed, and no role reads another org's patterns.

-- ------------------------------------------------------------------------------------------------
-- Governed tables.

-- regclass, not oid: pg_dump writes the table's name, so a restore finds the new table.
CREATE TABLE memory.governance_registry (
    relid       regclass PRIMARY KEY,
    options     jsonb NOT NULL,
    builtin     boolean NOT NULL DEFAULT false,
    governed_at timestamptz NOT NULL DEFAULT now(),
    governed_by name NOT NULL DEFAULT current_user
);
COMMENT ON TABLE memory.governance_registry IS 'Tables governed by memory.govern; read memory.governed_tables.';

CREATE VIEW memory.governed_tables AS
SELECT r.relid::regclass AS table_name,
       r.options,
       ARRAY(SELECT t.tgname::text FROM pg_catalog.pg_trigger t
              WHERE t.tgrelid = r.relid AND pg_catalog.starts_with(t.tgname::text, 'memory_') ORDER BY 1) AS triggers,
       r.builtin,
       r.governed_at,
       r.governed_by
  FROM memory.governance_registry r
  JOIN pg_catalog.pg_class c ON c.oid = r.relid
 -- The tables the caller owns or may read or write.
 WHERE pg_catalog.pg_has_role(c.relowner, 'USAGE') OR pg_catalog.has_table_privilege(c.oid, 'SELECT')
    OR pg_catalog.has_table_privilege(c.oid, 'INSERT');
COMMENT ON VIEW memory.governed_tables IS 'Each governed table the caller owns or may read or write, its column mapping and the triggers attached.';

-- (PL/pgSQL: its plan is made once a session; a SQL function with a SET clause is planned on every
-- call, and recall asks it several times a call.)
CREATE FUNCTION memory_internal._has_column(tbl regclass, col text)
RETURNS boolean LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = tbl AND a.attname = col AND a.attnum > 0 AND NOT a.attisdropped);
END $$;

-- Whether column col of tbl has type typ (a NULL col passes when nullable is true).
CREATE FUNCTION memory_internal._column_type_is(tbl oid, col text, typ regtype, nullable boolean DEFAULT false)
RETURNS boolean LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE WHEN col IS NULL THEN nullable ELSE EXISTS (
        SELECT 1 FROM pg_attribute a WHERE a.attrelid = tbl AND a.attname = col AND a.attnum > 0 AND NOT a.attisdropped
           AND (a.atttypid = typ OR (typ = 'text'::regtype AND a.atttypid = 'varchar'::regtype))) END
$$;

-- Type of a column of tbl, or an error naming it.
CREATE FUNCTION memory_internal._column_type(tbl regclass, col text, role text)
RETURNS oid LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE t oid;
BEGIN
    SELECT a.atttypid INTO t FROM pg_attribute a
     WHERE a.attrelid = tbl AND a.attname = col AND a.attnum > 0 AND NOT a.attisdropped;
    IF t IS NULL THEN
        RAISE EXCEPTION 'table % has no column "%" (the % column)', tbl, col, role
            USING ERRCODE = '22023', HINT = format('Pass {"%s": "<column>"} in the options of memory.govern.', role);
    END IF;
    RETURN t;
END $$;

-- What memory.govern records: an object of known keys whose values are strings, booleans,
-- numbers, nulls, arrays of strings, or objects of strings (the stamps map), nothing deeper.
CREATE FUNCTION memory_internal._valid_governance_options(opts jsonb)
RETURNS boolean LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp
AS $$
    SELECT jsonb_typeof(opts) OPERATOR(pg_catalog.=) 'object' AND NOT EXISTS (
        SELECT 1 FROM jsonb_each(opts) e
         WHERE NOT (e.key OPERATOR(pg_catalog.=) ANY (ARRAY['classify', 'content', 'source_files', 'source_type', 'target', 'org',
                       'backfill', 'backfilled', 'audit', 'audit_tier', 'id', 'project', 'workspace', 'user', 'weight',
                       'soft_deleted', 'stamps', 'state', 'consent', 'embedding', 'content_required', 'tenant_policy', 'tenant_rls',
                       'revisions', 'derived_from', 'derived_tier_kind']))
            OR NOT (jsonb_typeof(e.value) OPERATOR(pg_catalog.=) ANY (ARRAY['string', 'boolean', 'null', 'number'])
                    OR (jsonb_typeof(e.value) OPERATOR(pg_catalog.=) 'array'
                        AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements(e.value) x WHERE jsonb_typeof(x) OPERATOR(pg_catalog.<>) 'string'))
                    OR (jsonb_typeof(e.value) OPERATOR(pg_catalog.=) 'object'
                        AND NOT EXISTS (SELECT 1 FROM jsonb_each(e.value) y
                                         WHERE jsonb_typeof(y.value) OPERATOR(pg_catalog.<>) ALL (ARRAY['string', 'null'])))))
$$;

-- Whether the caller owns tbl (or is unrestricted): the right to govern it.
CREATE FUNCTION memory_internal._owns_table(tbl regclass)
RETURNS boolean LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
    SELECT memory_internal._caller() IS NOT NULL AND (memory_internal._is_unrestricted() OR EXISTS (
        SELECT 1 FROM pg_catalog.pg_class c
         WHERE c.oid OPERATOR(pg_catalog.=) tbl
           AND pg_catalog.pg_has_role(memory_internal._caller(), c.relowner, 'USAGE')
           AND c.relnamespace OPERATOR(pg_catalog.<>) 'memory'::pg_catalog.regnamespace))
$$;

-- Records tbl as governed. SECURITY DEFINER because the registry is closed; a narrow door: the
-- caller must own the table (memory's own tables only for unrestricted roles), the table must
-- carry one of our triggers, and the options must have memory.govern's shape.
CREATE FUNCTION memory_internal._register_governed(tbl regclass, opts jsonb)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF tbl IS NULL OR NOT memory_internal._owns_table(tbl) THEN
        RAISE EXCEPTION 'role % does not own table %', coalesce(memory_internal._caller()::regrole::text, '(none)'), tbl
            USING ERRCODE = '42501', HINT = 'Only the owner of a table governs it (with memory.govern).';
    END IF;
    IF NOT memory_internal._valid_governance_options(opts) THEN
        RAISE EXCEPTION 'governance options of % are not in memory.govern''s shape', tbl USING ERRCODE = '22023';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_trigger t WHERE t.tgrelid OPERATOR(pg_catalog.=) tbl AND pg_catalog.starts_with(t.tgname::text, 'memory_')
                      AND t.tgfoid IN (SELECT p.oid FROM pg_proc p WHERE p.pronamespace IN ('memory'::regnamespace, 'memory_internal'::regnamespace))) THEN
        RAISE EXCEPTION 'table % carries no memory_ext trigger', tbl USING ERRCODE = '42501';
    END IF;
    -- Forget tables that were dropped since they were governed.
    DELETE FROM memory.governance_registry g WHERE NOT EXISTS (SELECT 1 FROM pg_class c WHERE c.oid OPERATOR(pg_catalog.=) g.relid);
    INSERT INTO memory.governance_registry AS g (relid, options, governed_by)
    VALUES (tbl, opts, coalesce(memory_internal._caller()::regrole::text, current_user)::name)
    ON CONFLICT (relid) DO UPDATE SET options = excluded.options, governed_at = now(), governed_by = excluded.governed_by;
END $$;

CREATE FUNCTION memory_internal._unregister_governed(tbl regclass)
RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF tbl IS NULL OR NOT memory_internal._owns_table(tbl) THEN
        RAISE EXCEPTION 'role % does not own table %', coalesce(memory_internal._caller()::regrole::text, '(none)'), tbl USING ERRCODE = '42501';
    END IF;
    IF EXISTS (SELECT 1 FROM pg_trigger t WHERE t.tgrelid OPERATOR(pg_catalog.=) tbl AND pg_catalog.starts_with(t.tgname::text, 'memory_')
                  AND t.tgfoid IN (SELECT p.oid FROM pg_proc p WHERE p.pronamespace IN ('memory'::regnamespace, 'memory_internal'::regnamespace))) THEN
        RAISE EXCEPTION 'table % still carries memory_ext triggers', tbl USING ERRCODE = '42501';
    END IF;
    DELETE FROM memory.governance_registry g WHERE g.relid OPERATOR(pg_catalog.=) tbl;
    IF FOUND THEN
        PERFORM memory_internal._audit_append_system('memory.govern.ungovern', jsonb_build_object('table', tbl::text), NULL);
        RETURN true;
    END IF;
    RETURN false;
END $$;

-- TRUNCATE of a governed table is recorded on the platform chain (it removes every org's rows).
CREATE FUNCTION memory_internal._audit_truncate()
RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF TG_OP OPERATOR(pg_catalog.<>) 'TRUNCATE' OR TG_LEVEL OPERATOR(pg_catalog.<>) 'STATEMENT'
       OR NOT EXISTS (SELECT 1 FROM memory.governance_registry g WHERE g.relid OPERATOR(pg_catalog.=) TG_RELID) THEN
        -- On Citus a TRUNCATE of a distributed table fires on its shards as well: the firing on
        -- the table itself, on the coordinator, records it.
        IF TG_OP OPERATOR(pg_catalog.=) 'TRUNCATE' AND TG_LEVEL OPERATOR(pg_catalog.=) 'STATEMENT' AND memory_internal._citus_shard(TG_RELID) THEN
            RETURN NULL;
        END IF;
        RAISE EXCEPTION 'memory_internal._audit_truncate is memory.govern''s AFTER TRUNCATE trigger of governed tables'
            USING ERRCODE = '39P01', HINT = 'Attach it with memory.govern.';
    END IF;
    PERFORM memory_internal._audit_append_system('memory.govern.truncate',
        jsonb_build_object('table', TG_RELID::regclass::text), NULL);
    RETURN NULL;
END $$;

-- Drops memory_ext trigger `name` of tbl, as the caller, when it is there (DROP TRIGGER IF EXISTS
-- would tell the caller, in a NOTICE, of every trigger a first govern does not find).
CREATE FUNCTION memory_internal._drop_trigger(tbl regclass, name text)
RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_trigger t WHERE t.tgrelid = tbl AND t.tgname = name) THEN
        PERFORM memory_internal._exec_as_caller(format('DROP TRIGGER %I ON %s', name, tbl));
    END IF;
END $$;

-- memory.govern, classification: the content, source files, source type and org columns and the
-- target columns the options name (or the conventional ones), checked.
CREATE FUNCTION memory_internal._govern_classify_columns(tbl regclass, opts jsonb, OUT c_content text, OUT c_files text,
                                                         OUT c_type text, OUT c_org text, OUT targets text[])
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    k text;
    t oid;
BEGIN
    c_content := coalesce(opts->>'content', 'content');
    t := memory_internal._column_type(tbl, c_content, 'content');
    IF t NOT IN ('text'::regtype, 'varchar'::regtype) THEN
        RAISE EXCEPTION '%, not %', memory_internal._column_type_message('content', c_content, tbl::text), t::regtype USING ERRCODE = '22023';
    END IF;
    c_files := coalesce(opts->>'source_files', CASE WHEN memory_internal._has_column(tbl, 'source_files') THEN 'source_files' END);
    IF c_files IS NOT NULL AND memory_internal._column_type(tbl, c_files, 'source_files') NOT IN ('text[]'::regtype, 'varchar[]'::regtype) THEN
        RAISE EXCEPTION '%', memory_internal._column_type_message('source_files', c_files, tbl::text) USING ERRCODE = '22023';
    END IF;
    c_type := coalesce(opts->>'source_type', CASE WHEN memory_internal._has_column(tbl, 'source_type') THEN 'source_type' END);
    IF c_type IS NOT NULL AND memory_internal._column_type(tbl, c_type, 'source_type') NOT IN ('memory.source_type'::regtype, 'text'::regtype, 'varchar'::regtype) THEN
        RAISE EXCEPTION '%', memory_internal._column_type_message('source_type', c_type, tbl::text) USING ERRCODE = '22023';
    END IF;
    c_org := coalesce(opts->>'org', CASE WHEN memory_internal._has_column(tbl, 'org_id') THEN 'org_id' END);
    IF c_org IS NOT NULL AND memory_internal._column_type(tbl, c_org, 'org') NOT IN ('text'::regtype, 'varchar'::regtype) THEN
        RAISE EXCEPTION '%', memory_internal._column_type_message('org', c_org, tbl::text) USING ERRCODE = '22023';
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
        t := memory_internal._column_type(tbl, k, 'target');
        IF t NOT IN ('memory.classification'::regtype, 'text'::regtype, 'varchar'::regtype, 'jsonb'::regtype) THEN
            RAISE EXCEPTION '%, not %', memory_internal._column_type_message('target', k, tbl::text), t::regtype USING ERRCODE = '22023';
        END IF;
    END LOOP;
END $$;
COMMENT ON FUNCTION memory_internal._govern_classify_columns(regclass, jsonb) IS
  'memory.govern: the classify trigger''s columns (content, source_files, source_type, org, targets) from the options or the conventional names, their types checked (22023).';

-- memory.govern, retention stamps (written with the tier): "stamps": true takes the conventional
-- column names; an object maps them (created_at, expires_at, purge_after, archive_at, memory_type,
-- and for run_retention soft_deleted_at, soft_delete_reason). The effective mapping
-- {stamps, id, user}, or NULL without stamps.
CREATE FUNCTION memory_internal._govern_stamps(tbl regclass, opts jsonb)
RETURNS jsonb LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    k text;
    a_id text;
    a_user text;
    smap jsonb;
BEGIN
    IF jsonb_typeof(opts->'stamps') = 'object' OR opts->'stamps' = 'true'::jsonb THEN
        smap := jsonb_build_object('created_at', 'created_at', 'expires_at', 'expires_at', 'purge_after', 'purge_after',
                    'archive_at', 'archive_at',
                    'memory_type', CASE WHEN memory_internal._has_column(tbl, 'memory_type') THEN 'memory_type' END,
                    'soft_deleted_at', CASE WHEN memory_internal._has_column(tbl, 'soft_deleted_at') THEN 'soft_deleted_at' END,
                    'soft_delete_reason', CASE WHEN memory_internal._has_column(tbl, 'soft_delete_reason') THEN 'soft_delete_reason' END);
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
               OR memory_internal._column_type(tbl, smap->>k, k) <> 'timestamptz'::regtype THEN
                RAISE EXCEPTION '% (for retention stamps)', memory_internal._column_type_message(k, coalesce(smap->>k, ''), tbl::text) USING ERRCODE = '22023';
            END IF;
        END LOOP;
        IF smap->>'memory_type' IS NOT NULL AND (smap->>'memory_type' LIKE '%,%'
           OR memory_internal._column_type(tbl, smap->>'memory_type', 'memory_type') NOT IN ('memory.memory_type'::regtype, 'text'::regtype)) THEN
            RAISE EXCEPTION '%', memory_internal._column_type_message('memory_type', smap->>'memory_type', tbl::text) USING ERRCODE = '22023';
        END IF;
        IF smap->>'soft_delete_reason' IS NOT NULL THEN
            PERFORM memory_internal._column_type(tbl, smap->>'soft_delete_reason', 'soft_delete_reason');
        END IF;
        -- run_retention finds rows by id and checks holds by org and subject.
        a_id := coalesce(a_id, opts->>'id', CASE WHEN memory_internal._has_column(tbl, 'id') THEN 'id' END);
        a_user := coalesce(a_user, opts->>'user', CASE WHEN memory_internal._has_column(tbl, 'user_id') THEN 'user_id' END);
        IF a_id IS NOT NULL THEN PERFORM memory_internal._column_type(tbl, a_id, 'id'); END IF;
        IF a_user IS NOT NULL THEN PERFORM memory_internal._column_type(tbl, a_user, 'user'); END IF;
        RETURN jsonb_build_object('stamps', smap, 'id', a_id, 'user', a_user);
    ELSIF opts ? 'stamps' AND opts->'stamps' <> 'false'::jsonb THEN
        RAISE EXCEPTION 'option "stamps" must be true, false or an object of column names' USING ERRCODE = '22023';
    END IF;
    RETURN NULL;
END $$;
COMMENT ON FUNCTION memory_internal._govern_stamps(regclass, jsonb) IS
  'memory.govern: the retention stamp columns the options name (or the conventional ones), checked (22023), with the id and user columns run_retention uses; NULL without stamps.';

-- memory.govern: the memory_classify trigger of tbl (re)created, as the caller, with the
-- trigger arguments `args`. Every UPDATE fires it, not only those that name a mapped column: a
-- trigger of the owner's that fires first may change the content (the trigger compares the old
-- and the new row).
CREATE FUNCTION memory_internal._govern_classify_trigger(tbl regclass, args text)
RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM memory_internal._drop_trigger(tbl, 'memory_classify');
    PERFORM memory_internal._exec_as_caller(format('CREATE TRIGGER memory_classify BEFORE INSERT OR UPDATE ON %s '
                   'FOR EACH ROW EXECUTE FUNCTION memory.classify_trigger(%s)', tbl, args));
END $$;
COMMENT ON FUNCTION memory_internal._govern_classify_trigger(regclass, text) IS
  'memory.govern: drops and creates the memory_classify trigger of a table, as the caller, with the given trigger arguments.';

-- memory.govern, backfill: existing rows without a tier; touching the content column fires the
-- trigger, which classifies a row that holds no tier yet. The number of rows touched.
CREATE FUNCTION memory_internal._govern_classify_backfill(tbl regclass, c_content text, targets text[], args text)
RETURNS bigint LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    missing text;
    n bigint;
BEGIN
    SELECT string_agg(CASE WHEN memory_internal._column_type(tbl, x, 'target') = 'jsonb'::regtype
                           THEN format('(%1$I IS NULL OR NOT %1$I ? %2$L)', x, 'classification')
                           ELSE format('%I IS NULL', x) END, ' OR ')
      INTO missing FROM unnest(targets) x;
    -- The backfill fires the table's own triggers, the caller's code: the governance gate
    -- is closed while it runs, so that code cannot drop or replace memory_ext triggers.
    PERFORM memory_internal._close_governance_gate();
    n := memory_internal._exec_as_caller(format('UPDATE %s SET %I = %I WHERE %s', tbl, c_content, c_content, missing));
    PERFORM memory_internal._open_governance_gate(tbl);
    -- (A table governed for the first time is not in the registry yet, which the event
    -- trigger protects: whatever the caller's code did to memory_classify during the
    -- backfill, it is removed and created again as govern means it.)
    IF NOT EXISTS (SELECT 1 FROM pg_trigger tg WHERE tg.tgrelid = tbl AND tg.tgname = 'memory_classify'
                      AND tg.tgenabled IN ('O', 'A') AND tg.tgfoid = 'memory.classify_trigger'::regproc AND tg.tgqual IS NULL) THEN
        RAISE EXCEPTION 'a trigger of % changed memory_classify during the backfill', tbl
            USING ERRCODE = '42501', HINT = 'Governance is changed by memory.govern and memory.ungovern only.';
    END IF;
    PERFORM memory_internal._govern_classify_trigger(tbl, args);
    RETURN n;
END $$;
COMMENT ON FUNCTION memory_internal._govern_classify_backfill(regclass, text, text[], text) IS
  'memory.govern: classifies the existing rows of a table that hold no tier (the governance gate closed while the table''s own triggers run), then checks and recreates memory_classify; returns the number of rows touched.';

-- memory.govern, classification and retention stamps: the classify trigger, and the backfill.
CREATE FUNCTION memory_internal._govern_classify(tbl regclass, opts jsonb, eff jsonb)
RETURNS jsonb LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c_content text;
    c_files text;
    c_type text;
    c_org text;
    targets text[];
    args text;
    st jsonb;
    stamp_cols text[];
BEGIN
    -- Classification: on unless "classify": false (or only a state column is named, on a table
    -- without a content column). Column names default to the conventional ones.
    IF coalesce((opts->>'classify')::boolean,
                NOT (opts ? 'state') OR opts ?| ARRAY['content', 'source_files', 'source_type', 'target', 'stamps', 'backfill']
                OR memory_internal._has_column(tbl, 'content')) THEN
        SELECT * INTO c_content, c_files, c_type, c_org, targets FROM memory_internal._govern_classify_columns(tbl, opts);
        st := memory_internal._govern_stamps(tbl, opts);
        IF st IS NOT NULL THEN
            stamp_cols := ARRAY[st->'stamps'->>'created_at', st->'stamps'->>'expires_at', st->'stamps'->>'purge_after',
                                st->'stamps'->>'archive_at', coalesce(st->'stamps'->>'memory_type', '')];
            eff := eff || st;
        END IF;
        -- The trigger-argument protocol is memory_core::protocol's (built and parsed there).
        -- "content_required": an empty or blank content is refused (22023), as on memory.observations.
        IF coalesce(jsonb_typeof(opts->'content_required'), 'null') NOT IN ('boolean', 'null') THEN
            RAISE EXCEPTION 'option "content_required" must be true or false' USING ERRCODE = '22023';
        END IF;
        args := (SELECT string_agg(quote_literal(a), ', ')
                   FROM unnest(memory_internal._classify_trigger_args(c_content, c_files, c_type, targets, c_org, stamp_cols,
                                                                       coalesce((opts->>'content_required')::boolean, false))) a);
        PERFORM memory_internal._govern_classify_trigger(tbl, args);
        eff := eff || jsonb_build_object('classify', true, 'content', c_content, 'source_files', c_files,
                                         'source_type', c_type, 'org', c_org, 'target', to_jsonb(targets));
        IF coalesce((opts->>'content_required')::boolean, false) THEN
            eff := eff || jsonb_build_object('content_required', true);
        END IF;
        -- Existing rows without a tier: touching the content column fires the trigger, which
        -- classifies a row that holds no tier yet.
        IF coalesce((opts->>'backfill')::boolean, false) THEN
            eff := eff || jsonb_build_object('backfilled', memory_internal._govern_classify_backfill(tbl, c_content, targets, args));
        END IF;
    ELSE
        IF opts ? 'stamps' AND opts->'stamps' <> 'false'::jsonb THEN
            RAISE EXCEPTION 'retention stamps follow the tier: "stamps" needs "classify"' USING ERRCODE = '22023';
        END IF;
        IF coalesce((opts->>'content_required')::boolean, false) THEN
            RAISE EXCEPTION 'the classify trigger checks the content: "content_required" needs "classify"' USING ERRCODE = '22023';
        END IF;
        PERFORM memory_internal._drop_trigger(tbl, 'memory_classify');
        eff := eff || jsonb_build_object('classify', false);
    END IF;
    RETURN eff;
END $$;

-- memory.govern, audit: the statement triggers with transition tables.
CREATE FUNCTION memory_internal._govern_audit(tbl regclass, opts jsonb, eff jsonb)
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
        c_content := coalesce(c_content, opts->>'content', CASE WHEN memory_internal._has_column(tbl, 'content') THEN 'content' END);
        c_org := coalesce(c_org, opts->>'org', CASE WHEN memory_internal._has_column(tbl, 'org_id') THEN 'org_id' END);
        a_id := coalesce(opts->>'id', CASE WHEN memory_internal._has_column(tbl, 'id') THEN 'id' END);
        a_project := coalesce(opts->>'project', CASE WHEN memory_internal._has_column(tbl, 'project_id') THEN 'project_id' END);
        a_workspace := coalesce(opts->>'workspace', CASE WHEN memory_internal._has_column(tbl, 'workspace_id') THEN 'workspace_id' END);
        a_user := coalesce(opts->>'user', CASE WHEN memory_internal._has_column(tbl, 'user_id') THEN 'user_id' END);
        a_tier := coalesce(targets[1], CASE WHEN jsonb_typeof(opts->'target') = 'string' THEN opts->>'target' END,
                           CASE WHEN memory_internal._has_column(tbl, 'classification') THEN 'classification' END);
        FOREACH k IN ARRAY ARRAY['id', 'content', 'org', 'project', 'workspace', 'user', 'tier'] LOOP
            missing := CASE k WHEN 'id' THEN a_id WHEN 'content' THEN c_content WHEN 'org' THEN c_org
                              WHEN 'project' THEN a_project WHEN 'workspace' THEN a_workspace
                              WHEN 'user' THEN a_user ELSE a_tier END;
            CONTINUE WHEN missing IS NULL;
            PERFORM memory_internal._column_type(tbl, missing, k);
        END LOOP;
        args := (SELECT string_agg(quote_literal(a), ', ')
                   FROM unnest(memory_internal._audit_trigger_args(a_id, c_content, c_org, a_project, a_workspace, a_user, a_tier,
                                 a_tier IS NOT NULL AND memory_internal._column_type(tbl, a_tier, 'tier') = 'jsonb'::regtype)) a);
        PERFORM memory_internal._drop_trigger(tbl, 'memory_audit_ins');
        PERFORM memory_internal._drop_trigger(tbl, 'memory_audit_del');
        PERFORM memory_internal._drop_trigger(tbl, 'memory_audit_upd');
        PERFORM memory_internal._exec_as_caller(format('CREATE TRIGGER memory_audit_ins AFTER INSERT ON %s REFERENCING NEW TABLE AS memory_new '
                       'FOR EACH STATEMENT EXECUTE FUNCTION memory.audit_trigger(%s)', tbl, args));
        PERFORM memory_internal._exec_as_caller(format('CREATE TRIGGER memory_audit_del AFTER DELETE ON %s REFERENCING OLD TABLE AS memory_old '
                       'FOR EACH STATEMENT EXECUTE FUNCTION memory.audit_trigger(%s)', tbl, args));
        IF a_id IS NOT NULL AND a_tier IS NOT NULL THEN
            PERFORM memory_internal._exec_as_caller(format('CREATE TRIGGER memory_audit_upd AFTER UPDATE ON %s REFERENCING OLD TABLE AS memory_old NEW TABLE AS memory_new '
                           'FOR EACH STATEMENT EXECUTE FUNCTION memory.audit_trigger(%s)', tbl, args));
        END IF;
        eff := eff || jsonb_build_object('audit', true, 'id', a_id, 'project', a_project, 'workspace', a_workspace,
                                         'user', a_user, 'audit_tier', a_tier, 'org', c_org, 'content', c_content);
    ELSE
        PERFORM memory_internal._drop_trigger(tbl, 'memory_audit_ins');
        PERFORM memory_internal._drop_trigger(tbl, 'memory_audit_del');
        PERFORM memory_internal._drop_trigger(tbl, 'memory_audit_upd');
        eff := eff || jsonb_build_object('audit', false);
    END IF;
    RETURN eff;
END $$;

-- memory.govern, feedback weights: what memory.record_outcome needs to find and update rows.
CREATE FUNCTION memory_internal._govern_weight(tbl regclass, opts jsonb, eff jsonb)
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
        IF memory_internal._column_type(tbl, opts->>'weight', 'weight') <> 'float8'::regtype THEN
            RAISE EXCEPTION '%', memory_internal._column_type_message('weight', opts->>'weight', tbl::text) USING ERRCODE = '22023';
        END IF;
        a_id := coalesce(a_id, opts->>'id', CASE WHEN memory_internal._has_column(tbl, 'id') THEN 'id' END);
        IF a_id IS NULL OR memory_internal._column_type(tbl, a_id, 'id') <> 'uuid'::regtype THEN
            RAISE EXCEPTION 'a table with a weight column needs a uuid id column (option "id")' USING ERRCODE = '22023',
                HINT = 'memory.record_outcome takes uuid ids.';
        END IF;
        c_org := coalesce(c_org, opts->>'org', CASE WHEN memory_internal._has_column(tbl, 'org_id') THEN 'org_id' END);
        a_project := coalesce(a_project, opts->>'project', CASE WHEN memory_internal._has_column(tbl, 'project_id') THEN 'project_id' END);
        eff := eff || jsonb_build_object('weight', opts->>'weight', 'id', a_id, 'org', c_org, 'project', a_project,
                                         'soft_deleted', CASE WHEN memory_internal._has_column(tbl, 'soft_deleted_at') THEN 'soft_deleted_at' END);
    END IF;
    RETURN eff;
END $$;

-- memory.govern, lifecycle: the state machine on one column.
CREATE FUNCTION memory_internal._govern_state(tbl regclass, opts jsonb, eff jsonb)
RETURNS jsonb LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t oid;
    c_state text;
BEGIN
    -- Lifecycle: the state machine of docs/design.md#knowledge-lifecycle on one column (memory.lifecycle_state or text).
    IF opts ? 'state' AND jsonb_typeof(opts->'state') NOT IN ('null') AND opts->'state' <> 'false'::jsonb THEN
        IF jsonb_typeof(opts->'state') <> 'string' THEN
            RAISE EXCEPTION 'option "state" must be a column name' USING ERRCODE = '22023';
        END IF;
        c_state := opts->>'state';
        t := memory_internal._column_type(tbl, c_state, 'state');
        IF t NOT IN ('memory.lifecycle_state'::regtype, 'text'::regtype, 'varchar'::regtype) THEN
            RAISE EXCEPTION '%, not %', memory_internal._column_type_message('state', c_state, tbl::text), t::regtype
                USING ERRCODE = '22023';
        END IF;
        PERFORM memory_internal._drop_trigger(tbl, 'memory_lifecycle');
        -- An enum value is always a state: only changes need checking. Text is checked on insert too.
        PERFORM memory_internal._exec_as_caller(format('CREATE TRIGGER memory_lifecycle BEFORE %s ON %s FOR EACH ROW EXECUTE FUNCTION memory.lifecycle_trigger(%L)',
                       CASE WHEN t = 'memory.lifecycle_state'::regtype THEN format('UPDATE OF %I', c_state)
                            ELSE format('INSERT OR UPDATE OF %I', c_state) END,
                       tbl, c_state));
        eff := eff || jsonb_build_object('state', c_state);
    ELSE
        PERFORM memory_internal._drop_trigger(tbl, 'memory_lifecycle');
    END IF;
    RETURN eff;
END $$;

-- memory.govern, "tenant_policy": row-level security on the table's org column, as memory_ext's own
-- tables have it (sql/security.sql): the policy memory_tenant shows and takes only rows of the org
-- the session acts for (memory.acting_org(), once per statement), and the restrictive policy
-- memory_clearance hides rows above the role's clearance (its tier column; a row without a tier
-- counts as restricted). The owner keeps access (RLS is enabled, not forced). Without the option
-- the policies are removed, and row-level security is switched off again when govern switched it
-- on ("tenant_rls") and no other policy is left. Runs as the caller (the table's owner).
CREATE FUNCTION memory_internal._govern_tenant_policy(tbl regclass, opts jsonb, eff jsonb, prev jsonb)
RETURNS jsonb LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c_org  text;
    c_tier text;
    t      oid;
    tier   text;
    rls_on boolean;
    ours   boolean;
    pol    name;
BEGIN
    IF coalesce(jsonb_typeof(opts->'tenant_policy'), 'null') NOT IN ('boolean', 'null') THEN
        RAISE EXCEPTION 'option "tenant_policy" must be true or false' USING ERRCODE = '22023';
    END IF;
    rls_on := (SELECT c.relrowsecurity FROM pg_class c WHERE c.oid = tbl);
    IF NOT coalesce((opts->>'tenant_policy')::boolean, false) THEN
        ours := false;
        FOR pol IN SELECT p.polname FROM pg_policy p WHERE p.polrelid = tbl AND p.polname IN ('memory_tenant', 'memory_clearance') LOOP
            PERFORM memory_internal._exec_as_caller(format('DROP POLICY %I ON %s', pol, tbl));
            ours := true;
        END LOOP;
        IF ours AND rls_on AND coalesce((prev->>'tenant_rls')::boolean, false)
           AND NOT EXISTS (SELECT 1 FROM pg_policy p WHERE p.polrelid = tbl) THEN
            PERFORM memory_internal._exec_as_caller(format('ALTER TABLE %s DISABLE ROW LEVEL SECURITY', tbl));
        END IF;
        RETURN eff;
    END IF;
    c_org := coalesce(eff->>'org', opts->>'org', CASE WHEN memory_internal._has_column(tbl, 'org_id') THEN 'org_id' END);
    IF c_org IS NULL THEN
        RAISE EXCEPTION '"tenant_policy" needs an org column, and % has none', tbl USING ERRCODE = '22023',
            HINT = 'Map the tenant column with {"org": "<column>"} (text), or leave "tenant_policy" out.';
    END IF;
    IF memory_internal._column_type(tbl, c_org, 'org') NOT IN ('text'::regtype, 'varchar'::regtype) THEN
        RAISE EXCEPTION '%', memory_internal._column_type_message('org', c_org, tbl::text) USING ERRCODE = '22023';
    END IF;
    FOR pol IN SELECT p.polname FROM pg_policy p WHERE p.polrelid = tbl AND p.polname IN ('memory_tenant', 'memory_clearance') LOOP
        PERFORM memory_internal._exec_as_caller(format('DROP POLICY %I ON %s', pol, tbl));
    END LOOP;
    PERFORM memory_internal._exec_as_caller(format(
        'CREATE POLICY memory_tenant ON %s USING (%2$I OPERATOR(pg_catalog.=) (SELECT memory.acting_org())) '
        'WITH CHECK (%2$I OPERATOR(pg_catalog.=) (SELECT memory.acting_org()))', tbl, c_org));
    -- Clearance from the first tier column the classify trigger writes.
    c_tier := eff->'target'->>0;
    IF c_tier IS NOT NULL THEN
        t := memory_internal._column_type(tbl, c_tier, 'target');
        tier := CASE WHEN t = 'memory.classification'::regtype THEN format('%I', c_tier)
                     WHEN t = 'jsonb'::regtype THEN format('(%I OPERATOR(pg_catalog.->>) ''classification'')::memory.classification', c_tier)
                     ELSE format('%I::text::memory.classification', c_tier) END;
        PERFORM memory_internal._exec_as_caller(format(
            'CREATE POLICY memory_clearance ON %s AS RESTRICTIVE FOR SELECT '
            'USING (COALESCE(%s, ''restricted''::memory.classification) OPERATOR(pg_catalog.<=) (SELECT memory_internal._max_tier()))',
            tbl, tier));
    END IF;
    IF NOT rls_on THEN
        PERFORM memory_internal._exec_as_caller(format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', tbl));
    END IF;
    eff := eff || jsonb_build_object('tenant_policy', true);
    -- Whether govern switched row-level security on (kept across calls, for its removal).
    IF NOT rls_on OR coalesce((prev->>'tenant_rls')::boolean, false) THEN
        eff := eff || jsonb_build_object('tenant_rls', true);
    END IF;
    RETURN eff;
END $$;

-- memory.govern's checks of the table and its options, in this order: a table (22023), options a
-- JSON object (22023), the caller owns the table (42501), a plain table without inheritance,
-- partitions (22023), rules (22023) or a BEFORE row trigger that would fire after memory_ext's
-- (22023), not one of memory_ext's own (55000). Not granted to PUBLIC.
CREATE FUNCTION memory_internal._govern_check(tbl regclass, opts jsonb)
RETURNS void LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF tbl IS NULL THEN
        RAISE EXCEPTION 'memory.govern needs a table' USING ERRCODE = '22023';
    END IF;
    IF jsonb_typeof(opts) <> 'object' THEN
        RAISE EXCEPTION 'options must be a JSON object, got %', jsonb_typeof(opts) USING ERRCODE = '22023';
    END IF;
    -- Only the table's owner governs it; the gate lets this call replace memory_ext triggers,
    -- which the event trigger refuses to anything else (docs/design.md#trust-boundary).
    IF NOT memory_internal._owns_table(tbl) THEN
        RAISE EXCEPTION 'role % does not own table %', coalesce(memory_internal._caller()::regrole::text, '(none)'), tbl
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
    -- The final row is what memory_ext governs: a BEFORE row trigger that would fire after its
    -- triggers (name order) could change the row after them.
    IF EXISTS (SELECT 1 FROM pg_trigger tg WHERE tg.tgrelid = tbl AND memory_internal._is_late_trigger(tg.oid)) THEN
        RAISE EXCEPTION '% has a BEFORE row trigger (%) that would fire after memory_ext''s', tbl,
                        (SELECT string_agg(tg.tgname, ', ' ORDER BY tg.tgname) FROM pg_trigger tg WHERE tg.tgrelid = tbl AND memory_internal._is_late_trigger(tg.oid))
            USING ERRCODE = '22023', HINT = 'Triggers fire in name order: rename it to sort before "memory_" (ALTER TRIGGER .. RENAME TO app_..), then govern the table.';
    END IF;
    -- memory_ext's own tables are governed by CREATE EXTENSION alone.
    IF EXISTS (SELECT 1 FROM memory.governance_registry g WHERE g.relid = tbl AND g.builtin) THEN
        RAISE EXCEPTION '% is managed by memory_ext', tbl USING ERRCODE = '55000';
    END IF;
END $$;

-- memory.govern's triggers of a governed table `tbl` (its options `opts`, the effective mapping
-- so far `eff`): TRUNCATE recorded on the platform chain (memory_audit_truncate) and, with an org
-- column, legal holds guarding updates, deletes and TRUNCATE (memory_hold, memory_hold_truncate),
-- each created as the caller. Returns the org column the hold triggers read (NULL: none, and no
-- hold triggers). Not granted to PUBLIC.
CREATE FUNCTION memory_internal._govern_hold_triggers(tbl regclass, opts jsonb, eff jsonb)
RETURNS text LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    h_org     text;
    h_content text;
    h_user    text;
    h_id      text;
BEGIN
    -- TRUNCATE is recorded on the platform chain whatever else is attached.
    PERFORM memory_internal._drop_trigger(tbl, 'memory_audit_truncate');
    PERFORM memory_internal._exec_as_caller(format('CREATE TRIGGER memory_audit_truncate AFTER TRUNCATE ON %s FOR EACH STATEMENT EXECUTE FUNCTION memory_internal._audit_truncate()', tbl));
    -- Legal holds block content changes and deletes of held rows (memory_internal._hold_guard).
    h_org := coalesce(eff->>'org', opts->>'org', CASE WHEN memory_internal._has_column(tbl, 'org_id') THEN 'org_id' END);
    PERFORM memory_internal._drop_trigger(tbl, 'memory_hold');
    PERFORM memory_internal._drop_trigger(tbl, 'memory_hold_truncate');
    IF h_org IS NOT NULL THEN
        h_content := coalesce(eff->>'content', opts->>'content', CASE WHEN memory_internal._has_column(tbl, 'content') THEN 'content' END);
        h_user := coalesce(eff->>'user', opts->>'user', CASE WHEN memory_internal._has_column(tbl, 'user_id') THEN 'user_id' END);
        h_id := coalesce(eff->>'id', opts->>'id', CASE WHEN memory_internal._has_column(tbl, 'id') THEN 'id' END);
        -- Every UPDATE (the guard compares the old and the new row's mapped columns): a trigger
        -- of the owner's that fires first may change them whatever the SET list names.
        PERFORM memory_internal._exec_as_caller(format(
            'CREATE TRIGGER memory_hold BEFORE UPDATE OR DELETE ON %s FOR EACH ROW WHEN (NOT memory_internal._hold_gate_open()) '
            'EXECUTE FUNCTION memory_internal._hold_guard(%L, %L, %L, %L)',
            tbl, h_org, coalesce(h_user, ''), coalesce(h_id, ''), coalesce(h_content, '')));
        PERFORM memory_internal._exec_as_caller(format(
            'CREATE TRIGGER memory_hold_truncate BEFORE TRUNCATE ON %s FOR EACH STATEMENT '
            'EXECUTE FUNCTION memory_internal._hold_truncate_guard(%L, %L, %L)', tbl, h_org, coalesce(h_user, ''), coalesce(h_id, '')));
    END IF;
    RETURN h_org;
END $$;

-- memory.govern, lineage ("derived_from", SPEC §18, sql/lineage.sql): a uuid[] column of the
-- table naming the memories of memory.observations (of the row's org) each row was made from. It
-- needs the classify trigger's tier column and an org column (the floors and the sources' org) and
-- an id column (forgetting a source names the rows that went with it); not on a Citus-distributed
-- table (0A000: the triggers would fire on the shards, away from the sources). Creates, as the
-- caller, memory_ancestry (the sources checked and the tier and trust floors, before
-- memory_classify) and, with retention stamps, memory_lineage (the retention ceiling, after it).
CREATE FUNCTION memory_internal._govern_lineage(tbl regclass, opts jsonb, eff jsonb)
RETURNS jsonb LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    col  text;
    c_id text;
    tier text := eff->'target'->>0;
    kind text;
BEGIN
    IF coalesce(jsonb_typeof(opts->'derived_from'), 'null') NOT IN ('string', 'null') THEN
        RAISE EXCEPTION 'option "derived_from" must be a column name' USING ERRCODE = '22023';
    END IF;
    col := opts->>'derived_from';
    IF (SELECT c.relnamespace FROM pg_class c WHERE c.oid = tbl) = 'memory'::regnamespace THEN
        IF col IS NOT NULL THEN
            RAISE EXCEPTION '"derived_from" is for application tables' USING ERRCODE = '22023',
                HINT = 'memory.observations has its own derived_from column.';
        END IF;
        RETURN eff;
    END IF;
    PERFORM memory_internal._drop_trigger(tbl, 'memory_ancestry');
    PERFORM memory_internal._drop_trigger(tbl, 'memory_ancestry_unset');
    PERFORM memory_internal._drop_trigger(tbl, 'memory_lineage');
    PERFORM memory_internal._drop_trigger(tbl, 'memory_lineage_unset');
    IF col IS NULL THEN
        RETURN eff;
    END IF;
    IF memory_internal._citus_distributed(tbl) THEN
        RAISE EXCEPTION '"derived_from" is not supported on a distributed table (%)', tbl USING ERRCODE = '0A000',
            HINT = 'Lineage runs on a single node: keep the table local to the coordinator, or leave "derived_from" out.';
    END IF;
    IF memory_internal._column_type(tbl, col, 'derived_from') <> 'uuid[]'::regtype THEN
        RAISE EXCEPTION '%', memory_internal._column_type_message('derived_from', col, tbl::text) USING ERRCODE = '22023',
            HINT = 'The derived_from column is uuid[]: the ids of the memories (memory.observations) a row was made from.';
    END IF;
    IF tier IS NULL OR eff->>'org' IS NULL THEN
        RAISE EXCEPTION '"derived_from" needs classification with a tier column and an org column, and % has %', tbl,
                        CASE WHEN tier IS NULL THEN 'no tier column' ELSE 'no org column' END USING ERRCODE = '22023',
            HINT = 'A derived row keeps its sources'' tier (the "target" column) and its sources are memories of its org ("org").';
    END IF;
    c_id := coalesce(eff->>'id', opts->>'id', CASE WHEN memory_internal._has_column(tbl, 'id') THEN 'id' END);
    IF c_id IS NULL THEN
        RAISE EXCEPTION '"derived_from" needs an id column, and % has none', tbl USING ERRCODE = '22023',
            HINT = 'Map the column that identifies a row with {"id": "<column>"}: forgetting a source names the rows that went with it.';
    END IF;
    PERFORM memory_internal._column_type(tbl, c_id, 'id');
    kind := CASE memory_internal._column_type(tbl, tier, 'target') WHEN 'memory.classification'::regtype THEN 'classification'
                 WHEN 'jsonb'::regtype THEN 'jsonb' ELSE 'text' END;
    -- (The _unset twins: an UPDATE that takes every source away keeps the floors it had; they
    -- sort right after their pair, memory_ancestry_unset still before memory_classify.)
    PERFORM memory_internal._exec_as_caller(format('CREATE TRIGGER memory_ancestry BEFORE INSERT OR UPDATE ON %s FOR EACH ROW '
                   'WHEN (NEW.%I IS NOT NULL) EXECUTE FUNCTION memory_internal._table_lineage_floor()', tbl, col));
    PERFORM memory_internal._exec_as_caller(format('CREATE TRIGGER memory_ancestry_unset BEFORE UPDATE ON %s FOR EACH ROW '
                   'WHEN (OLD.%2$I IS NOT NULL AND NEW.%2$I IS NULL) EXECUTE FUNCTION memory_internal._table_lineage_floor()', tbl, col));
    IF eff->'stamps'->>'expires_at' IS NOT NULL THEN
        PERFORM memory_internal._exec_as_caller(format('CREATE TRIGGER memory_lineage BEFORE INSERT OR UPDATE ON %s FOR EACH ROW '
                       'WHEN (NEW.%I IS NOT NULL) EXECUTE FUNCTION memory_internal._table_lineage_ceiling()', tbl, col));
        PERFORM memory_internal._exec_as_caller(format('CREATE TRIGGER memory_lineage_unset BEFORE UPDATE ON %s FOR EACH ROW '
                       'WHEN (OLD.%2$I IS NOT NULL AND NEW.%2$I IS NULL) EXECUTE FUNCTION memory_internal._table_lineage_ceiling()', tbl, col));
    END IF;
    RETURN eff || jsonb_build_object('derived_from', col, 'derived_tier_kind', kind, 'id', c_id);
END $$;

-- SECURITY DEFINER so that it alone may open the governance gate and write the closed registry;
-- it refuses a table the caller does not own, and runs every statement on the table (trigger DDL,
-- the backfill) as the caller, in a security-restricted operation (memory_internal._exec_as_caller).
CREATE FUNCTION memory.govern(tbl regclass, options jsonb DEFAULT '{}')
RETURNS jsonb LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    known    constant text[] := ARRAY['classify', 'content', 'source_files', 'source_type', 'target', 'org', 'backfill',
                                      'audit', 'id', 'project', 'workspace', 'user', 'weight', 'stamps', 'state', 'consent', 'embedding',
                                      'content_required', 'tenant_policy', 'revisions', 'derived_from'];
    k        text;
    opts     jsonb := coalesce(options, '{}'::jsonb);
    eff      jsonb := '{}'::jsonb;
    prev     jsonb;
    h_org    text;
BEGIN
    -- The table and the caller (memory_internal._govern_check).
    PERFORM memory_internal._govern_check(tbl, opts);
    prev := (SELECT g.options FROM memory.governance_registry g WHERE g.relid = tbl);
    PERFORM memory_internal._open_governance_gate(tbl);
    FOR k IN SELECT jsonb_object_keys(opts) LOOP
        IF NOT k = ANY (known) THEN
            RAISE EXCEPTION 'unknown memory.govern option "%"', k
                USING ERRCODE = '22023', HINT = 'Known options: ' || array_to_string(known, ', ');
        END IF;
    END LOOP;

    -- One function per capability, each adding its part of the effective mapping.
    eff := memory_internal._govern_classify(tbl, opts, eff);
    eff := memory_internal._govern_audit(tbl, opts, eff);
    eff := memory_internal._govern_weight(tbl, opts, eff);
    eff := memory_internal._govern_state(tbl, opts, eff);
    eff := memory_internal._govern_consent(tbl, opts, eff);
    -- Revisions of the rows (sql/revisions.sql): after classification and audit, whose tier column it reads.
    eff := memory_internal._govern_revisions(tbl, opts, eff);
    -- Lineage of the rows (sql/lineage.sql): after classification, whose tier, org and stamps it reads.
    eff := memory_internal._govern_lineage(tbl, opts, eff);
    -- The table's own pgvector column, for memory.recall's query_embedding (docs/design.md#agent-memory-api): checked
    -- (a vector column: 22023 otherwise) and recorded; its index stays the owner's.
    IF opts ? 'embedding' AND jsonb_typeof(opts->'embedding') <> 'null' THEN
        IF jsonb_typeof(opts->'embedding') <> 'string' THEN
            RAISE EXCEPTION 'option "embedding" must be a column name' USING ERRCODE = '22023';
        END IF;
        PERFORM memory_internal._embedding_dims(tbl, opts->>'embedding');
        eff := eff || jsonb_build_object('embedding', opts->>'embedding');
    END IF;

    IF EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = tbl AND pg_catalog.starts_with(tgname::text, 'memory_') AND tgname NOT IN ('memory_audit_truncate', 'memory_hold', 'memory_hold_truncate')) THEN
        -- TRUNCATE and legal holds (memory_internal._govern_hold_triggers).
        h_org := memory_internal._govern_hold_triggers(tbl, opts, eff);

        -- Row-level security by org ("tenant_policy"); without it, a table with an org column is
        -- kept apart by recall, forget and the audit chain only: a NOTICE says so.
        eff := memory_internal._govern_tenant_policy(tbl, opts, eff, prev);
        IF h_org IS NOT NULL AND NOT (eff ? 'tenant_policy') AND NOT memory_internal._creating_extension() THEN
            RAISE NOTICE 'governed table % has an org column ("%") but no row-level security: a role bound to one org can SELECT another org''s rows directly', tbl, h_org
                USING HINT = 'Pass "tenant_policy": true to memory.govern to add row-level security by org and clearance (docs/security.md#governed-tables-and-tenants).';
        END IF;
        PERFORM memory_internal._register_governed(tbl, eff);
        -- Every change of a table's governance is on the platform chain (a weaker mapping too).
        IF prev IS DISTINCT FROM eff AND NOT memory_internal._creating_extension() THEN
            PERFORM memory_internal._audit_append_system('memory.govern.attach',
                jsonb_build_object('table', tbl::text, 'previous', prev, 'options', eff), NULL);
        END IF;
    ELSE
        PERFORM memory_internal._drop_trigger(tbl, 'memory_audit_truncate');
        PERFORM memory_internal._drop_trigger(tbl, 'memory_hold');
        PERFORM memory_internal._drop_trigger(tbl, 'memory_hold_truncate');
        IF coalesce((opts->>'tenant_policy')::boolean, false) THEN
            RAISE EXCEPTION '"tenant_policy" needs a governed table (classification or audit)' USING ERRCODE = '22023';
        END IF;
        PERFORM memory_internal._govern_tenant_policy(tbl, '{}', eff, prev);
        PERFORM memory_internal._unregister_governed(tbl);
    END IF;
    PERFORM memory_internal._close_governance_gate();
    RETURN eff;
END $$;
COMMENT ON FUNCTION memory.govern(regclass, jsonb) IS
  'Attach memory_ext triggers to a table from a column mapping. Idempotent: calling again replaces the mapping. Returns the effective mapping.';

CREATE FUNCTION memory.ungovern(tbl regclass)
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
    IF NOT memory_internal._owns_table(tbl) THEN
        RAISE EXCEPTION 'role % does not own table %', coalesce(memory_internal._caller()::regrole::text, '(none)'), tbl
            USING ERRCODE = '42501', HINT = 'Only the owner of a table ungoverns it.';
    END IF;
    PERFORM memory_internal._open_governance_gate(tbl);
    -- The revisions of its rows go with the triggers that removed them with the rows (MX006 under a hold).
    PERFORM memory_internal._drop_governed_revisions(tbl);
    FOR tg IN SELECT t.tgname FROM pg_trigger t WHERE t.tgrelid = tbl AND pg_catalog.starts_with(t.tgname::text, 'memory_')
                 AND t.tgfoid IN (SELECT p.oid FROM pg_proc p WHERE p.pronamespace IN ('memory'::regnamespace, 'memory_internal'::regnamespace)) LOOP
        PERFORM memory_internal._exec_as_caller(format('DROP TRIGGER %I ON %s', tg, tbl));
    END LOOP;
    -- The row-level security govern added ("tenant_policy") goes with it.
    PERFORM memory_internal._govern_tenant_policy(tbl, '{}', '{}',
                                                  (SELECT g.options FROM memory.governance_registry g WHERE g.relid = tbl));
    was := memory_internal._unregister_governed(tbl);
    PERFORM memory_internal._close_governance_gate();
    RETURN was;
END $$;
COMMENT ON FUNCTION memory.ungovern(regclass) IS 'Remove every memory_ext trigger (and the row-level security of "tenant_policy") from a table; true when it was governed.';

-- ------------------------------------------------------------------------------------------------
-- The observation store, governed like any application table.

CREATE TABLE memory.observations (
    id                 uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    org_id             text NOT NULL,
    project_id         text,
    workspace_id       text,
    user_id            text,
    session_id         text,
    task_id            text,
    memory_type        memory.memory_type NOT NULL DEFAULT 'long_term',
    content            text NOT NULL,
    source_files       text[],
    source_type        memory.source_type,
    metadata           jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(metadata) = 'object'),
    -- No default: the classify trigger always sets it, and a supplied tier is kept as a floor.
    classification     memory.classification NOT NULL,
    -- In [0, 1] (22023 otherwise): a client's value never steers recall.
    weight             float8 NOT NULL DEFAULT 1.0 CONSTRAINT observations_weight_check CHECK (memory_internal._check_weight(weight)),
    created_at         timestamptz NOT NULL DEFAULT now(),
    expires_at         timestamptz,
    purge_after        timestamptz,
    archive_at         timestamptz,
    soft_deleted_at    timestamptz,
    soft_delete_reason text,
    -- The words of content (english), written with the row: recall matches and ranks by them
    -- without parsing content again (docs/vector.md). Generated: a client never writes it.
    content_tsv        tsvector GENERATED ALWAYS AS (to_tsvector('english'::regconfig, content)) STORED
);
CREATE INDEX observations_org_created ON memory.observations (org_id, created_at);
COMMENT ON TABLE memory.observations IS 'Managed observation store; governed by memory.govern like an application table.';

-- Citus (docs/design.md#scale-out): the relation whose rows of `org` a statement of this backend changes: on a
-- distributed table the org's shard when it is on this node (NULL when it is not), else t.
-- The gates a function opens for its own statements (a tier lowered, a held row moved) name
-- the relation the triggers fire on.
CREATE FUNCTION memory_internal._local_relation(t regclass, org text)
RETURNS regclass LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE s bigint;
BEGIN
    IF NOT memory_internal._citus_distributed(t) THEN
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
CREATE FUNCTION memory_internal._org_of(tbl regclass, row_id uuid)
RETURNS text LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c text;
    s text := nullif(pg_catalog.current_setting('memory.org_id', true), '');
BEGIN
    -- (Two statements: on Citus a statement over the table runs on a worker, and the caller's
    -- check must not go there with it.)
    IF s IS NOT NULL AND memory_internal._may_act_for(s) THEN
        EXECUTE pg_catalog.format('SELECT EXISTS (SELECT 1 FROM %s t WHERE t.org_id OPERATOR(pg_catalog.=) $1 AND t.id OPERATOR(pg_catalog.=) $2)', tbl)
           INTO STRICT c USING s, row_id;
        IF c::boolean THEN
            RETURN s;
        END IF;
    END IF;
    FOR c IN EXECUTE pg_catalog.format('SELECT DISTINCT t.org_id COLLATE "C" FROM %s t WHERE t.id OPERATOR(pg_catalog.=) $1 ORDER BY 1 DESC', tbl)
               USING row_id LOOP
        IF memory_internal._may_act_for(c) THEN
            RETURN c;
        END IF;
    END LOOP;
    RETURN NULL;
END $$;

-- memory.reclassify's change of one row of one org, after the caller's check. On Citus,
-- memory.distribute() makes it a function Citus runs on the node of the org's shard, so that
-- the downgrade gate is open in the backend where the shard's triggers fire. Not granted to PUBLIC.
CREATE FUNCTION memory_internal._reclassify_in(org text, observation_id uuid, tier memory.classification, reason text, who jsonb)
RETURNS memory.classification LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE prev memory.classification;
BEGIN
    PERFORM memory_internal._delegated(who);
    SELECT o.classification INTO prev FROM memory.observations o
     WHERE o.org_id OPERATOR(pg_catalog.=) org AND o.id OPERATOR(pg_catalog.=) observation_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'observation % does not exist', observation_id USING ERRCODE = '23503';
    END IF;
    PERFORM memory_internal._allow_downgrade(memory_internal._local_relation('memory.observations', org)::oid, reason);
    UPDATE memory.observations o
       SET classification = tier,
           metadata = o.metadata || jsonb_build_object('classification', tier::text)
     WHERE o.org_id OPERATOR(pg_catalog.=) org AND o.id OPERATOR(pg_catalog.=) observation_id;
    PERFORM memory_internal._allow_downgrade(NULL);
    PERFORM memory_internal._delegated_done(who);
    RETURN prev;
END $$;

-- The one way to lower a tier. SECURITY DEFINER and not granted to PUBLIC: grant it to the roles
-- that may declassify.
CREATE FUNCTION memory.reclassify(observation_id uuid, tier memory.classification, reason text)
RETURNS memory.classification LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    org  text;
    prev memory.classification;
BEGIN
    IF observation_id IS NULL OR tier IS NULL THEN
        RAISE EXCEPTION 'memory.reclassify needs an observation id and a tier' USING ERRCODE = '22023';
    END IF;
    IF memory_internal._blank(reason) THEN
        RAISE EXCEPTION 'memory.reclassify needs a reason' USING ERRCODE = '22023',
            HINT = 'The reason is recorded with the change.';
    END IF;
    org := memory_internal._org_of('memory.observations', observation_id);
    IF org IS NULL THEN
        RAISE EXCEPTION 'observation % does not exist', observation_id USING ERRCODE = '23503';
    END IF;
    -- On Citus on the org's node (with the caller, whom the events written there name).
    prev := memory_internal._org_call('memory_internal._reclassify_in(text,uuid,memory.classification,text,jsonb)', org,
                                      pg_catalog.jsonb_build_array(observation_id, tier, reason)) OPERATOR(pg_catalog.#>>) '{}';
    RETURN prev;
END $$;
COMMENT ON FUNCTION memory.reclassify(uuid, memory.classification, text) IS
  'Set an observation''s tier, lower or higher, with a reason. The only way to lower a tier. Returns the previous tier.';

