-- Scale-out on Citus (docs/design.md#scale-out): one call distributes memory_ext on a Citus cluster.
--
-- The branches on Citus (memory_internal._citus_distributed) elsewhere come in these shapes:
--   - A call of one org's work on the node of that org's shards, where the gates it opens are
--     seen by the shards' triggers (reclassify, the decay job, consent revocation, erasure and
--     maintenance): always memory_internal._org_call(fn, org, args), which makes the choice
--     (delegated with the caller, or run here), over the functions of
--     memory_internal._org_functions; memory.distribute delegates that list.
--   - The rest stay in their functions, as their statements differ, not only where they run:
--     due rows read over every shard unlocked (Citus takes FOR UPDATE on one shard only), then
--     locked or changed org by org in statements naming it (freshness_recheck,
--     claim_recheck_tasks, run_retention, memory_internal._retention_sweep),
--     statements naming each org in turn (knowledge retention; erase_subject and export_subject
--     on governed tables, as the table's owner), a plan setting (forget's plan_cache_mode), a
--     replica-mode move on the workers (audit_ensure_partitions), where a relation is
--     (memory_internal._local_relation, _colocated_with_stores, _revoke_targets' "there"), and
--     a LOCK Citus cannot propagate (memory_internal._lock_nowait). run_decay works over the
--     whole scope in one call on a single node, and org by org through _org_call on Citus.

-- On Citus a trigger fires on the shards of its table, and for a reference table on every
-- node's copy: whether this firing (on relation `fired`, a copy of `logical`) is on a node other
-- than the coordinator, so that what it records is recorded once.
CREATE FUNCTION memory_internal._citus_other_copy(fired regclass, logical regclass)
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
CREATE FUNCTION memory_internal._citus_shard(rel regclass)
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
CREATE FUNCTION memory_internal._citus_distributed(t regclass)
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

-- A time as ISO text in UTC ('2026-11-26 04:13:34.517363 AD +00'; 'infinity', '-infinity'),
-- which reads back as the same time whatever the session's DateStyle and TimeZone: how a time
-- goes into a call Citus delegates (memory_internal._org_call).
CREATE FUNCTION memory_internal._utc_text(t timestamptz)
RETURNS text LANGUAGE sql STABLE STRICT SET search_path = pg_catalog, pg_temp
AS $$ SELECT CASE WHEN pg_catalog.isfinite(t)
                  THEN pg_catalog.to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US BC') OPERATOR(pg_catalog.||) ' +00'
                  ELSE t::pg_catalog.text END $$;

-- Who the caller is, for a call Citus runs on another node: the role memory_ext holds responsible
-- (by name: oids differ between nodes) and the application's actor (memory.actor_id), which the
-- delegated function takes on there (memory_internal._delegated), so the events it writes name them.
CREATE FUNCTION memory_internal._who()
RETURNS jsonb LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
AS $$
    SELECT pg_catalog.jsonb_build_object(
        'role', (SELECT r.rolname FROM pg_catalog.pg_roles r WHERE r.oid OPERATOR(pg_catalog.=) memory_internal._caller()),
        'actor', nullif(pg_catalog.current_setting('memory.actor_id', true), ''))
$$;

-- In a delegated function: take on the coordinator's caller (`who`, from memory_internal._who()) until
-- memory_internal._delegated_done(who) or the end of the transaction. NULL (a single node, where the
-- caller is known already): nothing.
CREATE FUNCTION memory_internal._delegated(who jsonb)
RETURNS void LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF who IS NOT NULL THEN
        -- (A coordinator that held nobody responsible passes no role: refused, not the definer.)
        IF who->>'role' IS NULL THEN
            RAISE EXCEPTION 'a delegated call names no caller' USING ERRCODE = '42501';
        END IF;
        PERFORM memory_internal._delegated_caller(who->>'role');
        PERFORM pg_catalog.set_config('memory.actor_id', coalesce(who->>'actor', ''), true);
    END IF;
END $$;

-- The end of what memory_internal._delegated(who) took on.
CREATE FUNCTION memory_internal._delegated_done(who jsonb)
RETURNS void LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF who IS NOT NULL THEN
        PERFORM memory_internal._delegated_caller(NULL);
    END IF;
END $$;

-- The functions memory_ext runs for one org on the node of that org's shards once Citus
-- distributes `tbl`, the table they work on (memory.distribute makes each a function Citus
-- delegates by its first argument, org; memory_internal._org_call calls them). Each takes
-- (org text, ..., who jsonb) and opens there the gates its statements need, where the shards'
-- triggers fire. (Names as text, resolved when read.)
CREATE FUNCTION memory_internal._org_functions()
RETURNS TABLE (fn regprocedure, tbl regclass) LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
AS $$
    SELECT f.fn::pg_catalog.regprocedure, f.tbl::pg_catalog.regclass
      FROM (VALUES ('memory_internal._reclassify_in(text,uuid,memory.classification,text,jsonb)', 'memory.observations'),
                   ('memory_internal._run_decay_in(text,timestamptz,jsonb)', 'memory.claims'),
                   ('memory_internal._revoke_consent_in(text,text,memory.consent_scope[],timestamptz,jsonb,jsonb)', 'memory.user_contexts'),
                   ('memory_internal._erase_consent_in(text,text,jsonb)', 'memory.consents'),
                   ('memory_internal._consent_maintenance_in(text,timestamptz,jsonb)', 'memory.user_contexts')) f(fn, tbl)
$$;

-- One org's call of `fn` (one of memory_internal._org_functions()): fn(org, args..., who), its
-- result as jsonb (to_jsonb). `args` are the arguments between org and who, as plain values: a
-- JSON array of them as to_jsonb gives them (a JSON null is NULL). Where Citus distributes fn's
-- table, the call goes to the node of the org's shards with the caller (memory_internal._who(),
-- which fn takes on there: memory_internal._delegated): Citus delegates a call whose arguments
-- are constants, so each value is written into the statement as a literal cast to fn's declared
-- argument type (a time as memory_internal._utc_text, read back the same whatever the DateStyle).
-- On a single node (or before memory.distribute) it runs here with who NULL. The statement is
-- made of fn's name, its argument types and literals only. Not granted to PUBLIC.
CREATE FUNCTION memory_internal._org_call(fn regprocedure, org text, args jsonb)
RETURNS jsonb LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    tbl   regclass;
    name  text;
    -- fn's argument types between org and who.
    types regtype[];
    cols  text;
    vals  text;
    lits  text[] := '{}';
    dist  boolean;
    res   record;
BEGIN
    SELECT f.tbl INTO tbl FROM memory_internal._org_functions() f WHERE f.fn OPERATOR(pg_catalog.=) _org_call.fn;
    IF tbl IS NULL THEN
        RAISE EXCEPTION '% is not a function memory_ext runs per org', fn USING ERRCODE = '22023';
    END IF;
    SELECT pg_catalog.quote_ident(n.nspname) OPERATOR(pg_catalog.||) '.' OPERATOR(pg_catalog.||) pg_catalog.quote_ident(p.proname),
           ARRAY(SELECT a.t::pg_catalog.regtype FROM pg_catalog.unnest(p.proargtypes::pg_catalog.oid[]) WITH ORDINALITY a(t, i)
                  WHERE a.i OPERATOR(pg_catalog.>) 1 AND a.i OPERATOR(pg_catalog.<) p.pronargs ORDER BY a.i)
      INTO name, types
      FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) p.pronamespace
     WHERE p.oid OPERATOR(pg_catalog.=) fn;
    IF pg_catalog.jsonb_typeof(args) IS DISTINCT FROM 'array'
       OR pg_catalog.jsonb_array_length(args) OPERATOR(pg_catalog.<>) pg_catalog.cardinality(types) THEN
        RAISE EXCEPTION '% takes % arguments between org and who, as a JSON array', fn, pg_catalog.cardinality(types)
            USING ERRCODE = '22023';
    END IF;
    dist := memory_internal._citus_distributed(tbl);
    IF dist AND org IS NULL THEN
        -- (Citus would run it here, where the gates it opens do not reach the org's shards.)
        RAISE EXCEPTION '% needs an org on Citus', fn USING ERRCODE = '22023';
    END IF;
    IF pg_catalog.cardinality(types) OPERATOR(pg_catalog.>) 0 THEN
        -- The values as fn's argument types (jsonb_to_record: a JSON array becomes an array, a
        -- string goes through the type's input), then as text that reads back as the same value.
        SELECT pg_catalog.string_agg(pg_catalog.format('a%s %s', t.i, pg_catalog.format_type(t.t, NULL)), ', ' ORDER BY t.i),
               pg_catalog.string_agg(CASE WHEN t.t OPERATOR(pg_catalog.=) 'pg_catalog.timestamptz'::pg_catalog.regtype
                                          THEN pg_catalog.format('memory_internal._utc_text(x.a%s)', t.i)
                                          ELSE pg_catalog.format('x.a%s::pg_catalog.text', t.i) END, ', ' ORDER BY t.i)
          INTO cols, vals
          FROM pg_catalog.unnest(types) WITH ORDINALITY t(t, i);
        EXECUTE pg_catalog.format('SELECT ARRAY[%s] FROM pg_catalog.jsonb_to_record($1) AS x(%s)', vals, cols)
           INTO lits
          USING (SELECT pg_catalog.jsonb_object_agg('a' OPERATOR(pg_catalog.||) v.i, v.v)
                   FROM pg_catalog.jsonb_array_elements(args) WITH ORDINALITY v(v, i));
    END IF;
    -- (In FROM: Citus delegates no call made as a PL/pgSQL simple expression.)
    EXECUTE pg_catalog.format('SELECT r FROM %s(%s) r', name, pg_catalog.array_to_string(
                ARRAY[pg_catalog.format('%L::pg_catalog.text', org)]
                OPERATOR(pg_catalog.||) ARRAY(SELECT pg_catalog.format('%L::%s', lits[t.i], pg_catalog.format_type(t.t, NULL))
                                                FROM pg_catalog.unnest(types) WITH ORDINALITY t(t, i) ORDER BY t.i)
                OPERATOR(pg_catalog.||) pg_catalog.format('%L::pg_catalog.jsonb', CASE WHEN dist THEN memory_internal._who() END), ', '))
       INTO res;
    -- (Through the row: a field's type may differ from one call to the next, a plan's may not.)
    RETURN CASE WHEN res IS NULL THEN NULL ELSE pg_catalog.to_jsonb(res) OPERATOR(pg_catalog.->) 'r' END;
END $$;

-- Whether `t` is distributed by Citus and co-located with memory_ext's stores (its shards beside
-- each org's shards of memory.audit_pending).
CREATE FUNCTION memory_internal._colocated_with_stores(t regclass)
RETURNS boolean LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE d boolean;
BEGIN
    IF NOT memory_internal._citus_distributed(t) THEN
        RETURN false;
    END IF;
    EXECUTE 'SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition a, pg_catalog.pg_dist_partition b
                             WHERE a.logicalrelid OPERATOR(pg_catalog.=) $1 AND b.logicalrelid OPERATOR(pg_catalog.=) ''memory.audit_pending''::pg_catalog.regclass
                               AND a.colocationid OPERATOR(pg_catalog.=) b.colocationid)' INTO d USING t;
    RETURN d;
END $$;

-- `a` with each number of `b` added to the number under the same key in `a` (any other value of
-- `b` taken as it is): the counts of runs made org by org, summed.
CREATE FUNCTION memory_internal._add_counts(a jsonb, b jsonb)
RETURNS jsonb LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp
AS $$
    SELECT a OPERATOR(pg_catalog.||) coalesce(pg_catalog.jsonb_object_agg(k.key,
             CASE WHEN pg_catalog.jsonb_typeof(k.value) OPERATOR(pg_catalog.=) 'number'
                  THEN pg_catalog.to_jsonb(coalesce((a OPERATOR(pg_catalog.->>) k.key)::pg_catalog.numeric, 0)
                                           OPERATOR(pg_catalog.+) (k.value OPERATOR(pg_catalog.#>>) '{}')::pg_catalog.numeric)
                  ELSE k.value END), '{}'::jsonb)
      FROM pg_catalog.jsonb_each(b) k
$$;

-- The relation `rel` (a memory_ext table, or an index of one) of the shard group that `fired`
-- belongs to, when `fired` is a Citus shard on this node (a trigger fired on it): the shard of
-- `rel`'s table co-located with `fired`, or that shard's copy of the index. `rel` itself when
-- `fired` is not a shard (a single node). The persona-drift detectors read and write their
-- tables by relation: on a worker they read these. Not granted to PUBLIC.
CREATE FUNCTION memory_internal._in_group(rel regclass, fired oid)
RETURNS oid LANGUAGE plpgsql STABLE STRICT SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    logical oid := memory_internal._table_of(fired);
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

-- Distributes table `t` by Citus's function `how` (create_reference_table, or
-- create_distributed_table by `col` co-located with `colocate`) without firing its triggers on
-- the rows already there. Citus copies them into the new shards by COPY to the workers, where
-- the shards' triggers would treat them as new writes (classify, audit, the consent and
-- knowledge rules, the drift detectors) and a restore setting of this session does not reach:
-- the table's triggers are off while the shards are made and filled (Citus makes the shards'
-- triggers as the table's are), then set back as they were (Citus forwards that to the shards).
-- Not granted to PUBLIC.
CREATE FUNCTION memory_internal._distribute_quietly(t regclass, how text, col text DEFAULT NULL, colocate text DEFAULT NULL)
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

-- Citus refuses subqueries in the policies of distributed tables: the tenant and clearance
-- policies then call memory_internal._acting_org() and _max_tier() per row instead of once per
-- statement as an InitPlan (same rows).
CREATE FUNCTION memory_internal._policy_without_subquery(t regclass)
RETURNS void LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_policy p WHERE p.polrelid = t AND p.polname = 'clearance') THEN
        -- Citus gives the shards a RESTRICTIVE policy as a permissive one, which would widen the
        -- tenant policy (rows of any org within the clearance): on a distributed table the
        -- clearance is part of the tenant policy instead (reads and the rows an UPDATE or DELETE
        -- sees; writes are checked by org only, as before).
        EXECUTE format('DROP POLICY clearance ON %s', t);
        EXECUTE format('ALTER POLICY tenant ON %s USING (org_id OPERATOR(pg_catalog.=) memory_internal._acting_org() AND %s) '
                       'WITH CHECK (org_id OPERATOR(pg_catalog.=) memory_internal._acting_org())', t,
                       CASE WHEN t OPERATOR(pg_catalog.=) 'memory.claims'::regclass
                            THEN '(memory_internal._max_tier() OPERATOR(pg_catalog.=) ''restricted''::memory.classification '
                                 'OR memory_internal._claim_tier(claim_text, subject_id, pii_fields, org_id) OPERATOR(pg_catalog.<=) memory_internal._max_tier())'
                            ELSE 'classification OPERATOR(pg_catalog.<=) memory_internal._max_tier()' END);
    ELSIF EXISTS (SELECT 1 FROM pg_catalog.pg_policy p WHERE p.polrelid = t AND p.polname = 'tenant') THEN
        EXECUTE format('ALTER POLICY tenant ON %s USING (org_id OPERATOR(pg_catalog.=) memory_internal._acting_org()) '
                       'WITH CHECK (org_id OPERATOR(pg_catalog.=) memory_internal._acting_org())', t);
    END IF;
END $$;

-- memory.distribute's checks, in this order: the citus extension (55000), shard_count between 1 and
-- 64000 (22023), citus.enable_unsafe_triggers on (55000), the coordinator in Citus's metadata
-- (55000). Not granted to PUBLIC.
CREATE FUNCTION memory_internal._distribute_check(shard_count int)
RETURNS void LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    found_coordinator boolean;
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
    -- copy (memory_internal._citus_other_copy): the coordinator must hold one.
    EXECUTE 'SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_node WHERE groupid = 0)' INTO found_coordinator;
    IF NOT found_coordinator THEN
        RAISE EXCEPTION 'memory.distribute needs the coordinator in Citus''s metadata'
            USING ERRCODE = '55000', HINT = 'SELECT citus_set_coordinator_host(''<host>'', <port>) on the coordinator first.';
    END IF;
END $$;

-- memory.distribute's reference tables: memory_ext's keys and registries, a copy on every node.
-- Adds them to done's reference list and those it distributed now to `moved`. Not granted to PUBLIC.
CREATE FUNCTION memory_internal._distribute_reference(INOUT done jsonb, INOUT moved regclass[])
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    ref text;
    kind "char";
BEGIN
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
            PERFORM memory_internal._policy_without_subquery(ref::regclass);
            PERFORM memory_internal._distribute_quietly(ref::regclass, 'reference');
            moved := moved || ref::regclass;
        ELSIF kind <> 'n' THEN
            RAISE EXCEPTION '% is distributed already, but not as a reference table', ref USING ERRCODE = '55000';
        END IF;
        done := jsonb_set(done, '{reference}', (done->'reference') || to_jsonb(ref));
    END LOOP;
END $$;

-- memory.distribute's audit tables, by chain_id, co-located with memory.audit_pending. Adds them to
-- done's audit list and those it distributed now to `moved`. Not granted to PUBLIC.
CREATE FUNCTION memory_internal._distribute_audit(INOUT done jsonb, INOUT moved regclass[])
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t text;
BEGIN
    -- The audit tables: by chain (= org), co-located, so a chain's pending entries, head, log and
    -- seals are one shard group, on the node of its tenant's rows.
    FOREACH t IN ARRAY ARRAY['memory.audit_pending', 'memory.audit_heads', 'memory.audit_log', 'memory.audit_seals'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition p WHERE p.logicalrelid = t::regclass) THEN
            IF t = 'memory.audit_pending' THEN
                PERFORM memory_internal._distribute_quietly(t::regclass, 'distributed', 'chain_id', 'none');
            ELSE
                PERFORM memory_internal._distribute_quietly(t::regclass, 'distributed', 'chain_id', 'memory.audit_pending');
            END IF;
            moved := moved || t::regclass;
        END IF;
        done := jsonb_set(done, '{audit}', (done->'audit') || to_jsonb(t));
    END LOOP;
END $$;

-- memory.distribute's governed application tables, by their org column, co-located with
-- memory.audit_pending (a table without one is kept local). Adds them to done's governed (or
-- kept_local) list and those it distributed now to `moved`. Not granted to PUBLIC.
CREATE FUNCTION memory_internal._distribute_governed(INOUT done jsonb, INOUT moved regclass[])
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r record;
BEGIN
    -- Governed application tables: by their org column, co-located with the audit tables, so
    -- that an event written by a trigger on a shard lands in the co-located shard of the log.
    FOR r IN SELECT g.relid, coalesce(g.options->>'org', CASE WHEN memory_internal._has_column(g.relid, 'org_id') THEN 'org_id' END) AS org
               FROM memory.governance_registry g WHERE NOT g.builtin ORDER BY g.relid::text LOOP
        IF r.org IS NULL THEN
            done := jsonb_set(done, '{kept_local}', (done->'kept_local') || jsonb_build_object('table', r.relid::text, 'why', 'no org column'));
            CONTINUE;
        END IF;
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition p WHERE p.logicalrelid = r.relid) THEN
            PERFORM memory_internal._distribute_quietly(r.relid, 'distributed', r.org, 'memory.audit_pending');
            moved := moved || r.relid;
        ELSIF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition a, pg_catalog.pg_dist_partition b
                           WHERE a.logicalrelid = r.relid AND b.logicalrelid = 'memory.audit_pending'::regclass
                             AND a.colocationid = b.colocationid) THEN
            RAISE EXCEPTION '% is distributed, but not co-located with memory.audit_pending', r.relid
                USING ERRCODE = '55000', HINT = 'SELECT alter_distributed_table(''' || r.relid::text || ''', colocate_with := ''memory.audit_pending'') first.';
        END IF;
        done := jsonb_set(done, '{governed}', (done->'governed') || to_jsonb(r.relid::text));
    END LOOP;
END $$;

-- memory.distribute's stores (observations, knowledge, consent-era rows, revisions), by org_id,
-- co-located with memory.audit_pending, their keys made to hold org_id. Adds them to done's stores
-- list and those it distributed now to `moved`. Not granted to PUBLIC.
CREATE FUNCTION memory_internal._distribute_stores(INOUT done jsonb, INOUT moved regclass[])
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t text;
    pk name;
BEGIN
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
                             'memory.watch_question_updates', 'memory.deletion_stubs', 'memory.revisions'] LOOP
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
            ELSIF pk IS NOT NULL AND t NOT IN ('memory.threads', 'memory.revisions') THEN
                EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I, ADD PRIMARY KEY (org_id, id)', t, pk);
            END IF;
            -- (The functions that take an id read its orgs first: by index, on every shard.)
            IF t IN ('memory.observations', 'memory.entities', 'memory.claims') THEN
                EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON %s (id)', pg_catalog.split_part(t, '.', 2) || '_id', t);
            END IF;
            PERFORM memory_internal._policy_without_subquery(t::regclass);
            PERFORM memory_internal._distribute_quietly(t::regclass, 'distributed', 'org_id', 'memory.audit_pending');
            moved := moved || t::regclass;
        END IF;
        done := jsonb_set(done, '{stores}', (done->'stores') || to_jsonb(t));
    END LOOP;
END $$;

-- memory.distribute's last list: memory_ext's tables it left on the coordinator, each with why.
-- Returns `done` with them added under kept_local. Not granted to PUBLIC.
CREATE FUNCTION memory_internal._distribute_kept_local(INOUT done jsonb)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t text;
BEGIN
    -- memory_ext's other tables stay on the coordinator, each for its reason (see
    -- docs/scale-out.md): the governance registry names tables by oid, which differ between nodes; the
    -- maintenance runs are the coordinator's own record; the embedding settings are the coordinator's,
    -- whose trigger's ALTER TABLE and CREATE INDEX Citus propagates.
    FOR t IN SELECT c.oid::regclass::text FROM pg_catalog.pg_class c
              WHERE c.relnamespace = 'memory'::regnamespace AND c.relkind IN ('r', 'p') AND NOT c.relispartition
                AND c.oid NOT IN (SELECT p.logicalrelid FROM pg_catalog.pg_dist_partition p)
                AND c.relname NOT IN ('audit_outbox') ORDER BY 1 LOOP
        done := jsonb_set(done, '{kept_local}', (done->'kept_local') || jsonb_build_object('table', t, 'why',
            CASE t WHEN 'memory.governance_registry' THEN 'names tables by oid, which differ between nodes'
                   WHEN 'memory.maintenance_runs' THEN 'the coordinator''s record of its maintenance runs'
                   WHEN 'memory.erasure_receipts' THEN 'the ids erasure receipts cover, written and read on the coordinator, where forget, erase_subject and verify_receipt run'
                   WHEN 'memory.ann_settings' THEN 'the embedding dimensions, set on the coordinator: the DDL its trigger runs reaches the workers through Citus'
                   WHEN 'memory.table_revisions' THEN 'the revisions of governed application tables, kept only for tables that are not distributed (memory.govern refuses its revisions option on a distributed table: 0A000)'
                   ELSE 'not distributed by memory_ext' END));
    END LOOP;
END $$;

CREATE FUNCTION memory.distribute(shard_count int DEFAULT NULL)
RETURNS jsonb LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t text;
    i int;
    moved regclass[] := '{}';
    done jsonb := jsonb_build_object('reference', '[]'::jsonb, 'audit', '[]'::jsonb, 'governed', '[]'::jsonb, 'stores', '[]'::jsonb,
                                     'kept_local', '[]'::jsonb);
BEGIN
    -- Citus, its settings and the coordinator (memory_internal._distribute_check).
    PERFORM memory_internal._distribute_check(shard_count);
    IF shard_count IS NOT NULL THEN
        PERFORM pg_catalog.set_config('citus.shard_count', shard_count::text, true);
    END IF;
    -- The rows already there are loaded into the shards as they are, like a restore (no
    -- classification, stamps, rules or audit events): memory_internal._distribute_quietly keeps the
    -- tables' triggers off for the copy on the workers, and the restore mode covers this node.
    PERFORM pg_catalog.set_config('memory.restore_mode', 'on', true);
    -- The key and the pseudonym salt exist before their tables are replicated: a worker never
    -- makes one (docs/design.md#scale-out: one key set for the cluster).
    PERFORM memory_internal._audit_current_key();

    -- Keys and registries, the audit tables, governed application tables, then memory_ext's
    -- stores, each a step (memory_internal._distribute_reference, _distribute_audit,
    -- _distribute_governed, _distribute_stores).
    SELECT d.done, d.moved INTO done, moved FROM memory_internal._distribute_reference(done, moved) d;
    SELECT d.done, d.moved INTO done, moved FROM memory_internal._distribute_audit(done, moved) d;
    SELECT d.done, d.moved INTO done, moved FROM memory_internal._distribute_governed(done, moved) d;
    SELECT d.done, d.moved INTO done, moved FROM memory_internal._distribute_stores(done, moved) d;

    -- The gate memory.reclassify opens to lower a tier is the backend's: the function that
    -- changes the org's row is one Citus runs on the node of that org's shard, where the shard's
    -- triggers fire.
    -- Likewise the decay job's run over one org, and the consent store's revocation, erasure and
    -- maintenance of one org: their gates are opened where the shards' triggers fire. (The list:
    -- memory_internal._org_functions, which memory_internal._org_call calls.)
    FOR t IN SELECT f.fn::text FROM memory_internal._org_functions() f LOOP
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
    -- memory_ext's other tables stay on the coordinator (memory_internal._distribute_kept_local).
    done := memory_internal._distribute_kept_local(done);
    PERFORM memory_internal._audit_append_system('memory.distribute', jsonb_build_object('reference', jsonb_array_length(done->'reference'),
        'audit', jsonb_array_length(done->'audit'), 'governed', jsonb_array_length(done->'governed'),
        'stores', jsonb_array_length(done->'stores')), NULL);
    RETURN done;
END $$;
COMMENT ON FUNCTION memory.distribute(int) IS
  'Citus: distributes memory_ext (keys and registries as reference tables; the audit tables by chain_id, the observation, knowledge and consent stores by org_id and governed application tables by their org column, co-located). Idempotent. Needs citus.enable_unsafe_triggers = on. Returns what it did. Owner-only.';
