-- The extension's schema as sorted text lines, for comparing an upgraded database with a fresh
-- install (tests/upgrade/run.sh). Covers every object in schema memory and every member of the
-- extension: functions (definition, volatility, security, settings, privileges), tables (columns,
-- defaults, constraints, indexes, triggers, policies, row security, options, privileges, membership),
-- types and enums, views, sequences, comments, the extension's configuration tables.
-- Partitions of the audit log made by a month's first entry are left out (they depend on when
-- the database was used, not on the version); the parent and its definition are compared.
WITH rels AS (
    SELECT c.oid, c.relname, c.relkind, c.relacl, c.reloptions, c.relrowsecurity, c.relforcerowsecurity,
           c.relpersistence, c.relispartition
      FROM pg_catalog.pg_class c
     WHERE c.relnamespace = 'memory'::regnamespace
       AND NOT (c.relname ~ '^audit_log_[0-9]{4}m[0-9]{2}' OR c.relname ~ '^audit_log_[0-9]{4}m[0-9]{2}_')
), members AS (
    SELECT pg_catalog.pg_describe_object(d.classid, d.objid, d.objsubid) AS obj
      FROM pg_catalog.pg_depend d
     WHERE d.refclassid = 'pg_extension'::regclass
       AND d.refobjid = (SELECT oid FROM pg_catalog.pg_extension WHERE extname = 'memory_ext')
       AND d.deptype = 'e'
)
SELECT pg_catalog.regexp_replace(line, '\s+', ' ', 'g') AS line FROM (
    SELECT 'member ' || obj AS line FROM members
     WHERE obj !~ 'audit_log_[0-9]{4}m[0-9]{2}'
    UNION ALL
    SELECT 'relation ' || relname || ' kind=' || relkind::text || ' persistence=' || relpersistence::text
           || ' rls=' || relrowsecurity || ' force=' || relforcerowsecurity
           || ' options=' || coalesce(reloptions::text, '') || ' acl=' || coalesce((SELECT pg_catalog.string_agg(x::text, ',' ORDER BY x::text) FROM unnest(relacl) x), '')
           || ' partition=' || relispartition
      FROM rels
    UNION ALL
    SELECT 'column ' || r.relname || '.' || a.attname || ' ' || pg_catalog.format_type(a.atttypid, a.atttypmod)
           || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END
           || coalesce(' default ' || pg_catalog.pg_get_expr(ad.adbin, ad.adrelid), '')
           || CASE WHEN a.attidentity <> '' THEN ' identity ' || a.attidentity::text ELSE '' END
           || CASE WHEN a.attgenerated <> '' THEN ' generated' ELSE '' END
           || ' collation=' || coalesce(NULLIF(a.attcollation, 0)::regcollation::text, '')
           || ' acl=' || coalesce((SELECT pg_catalog.string_agg(x::text, ',' ORDER BY x::text) FROM unnest(a.attacl) x), '')
      FROM rels r
      JOIN pg_catalog.pg_attribute a ON a.attrelid = r.oid AND a.attnum > 0 AND NOT a.attisdropped
      LEFT JOIN pg_catalog.pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
     WHERE r.relkind IN ('r', 'p', 'v', 'c', 'm', 'f')
    UNION ALL
    SELECT 'constraint ' || r.relname || '.' || co.conname || ' ' || pg_catalog.pg_get_constraintdef(co.oid)
      FROM rels r JOIN pg_catalog.pg_constraint co ON co.conrelid = r.oid
    UNION ALL
    SELECT 'index ' || pg_catalog.regexp_replace(pg_catalog.pg_get_indexdef(i.indexrelid), 'INDEX \S+ ON', 'INDEX ON')
           || ' name=' || ic.relname
      FROM rels r JOIN pg_catalog.pg_index i ON i.indrelid = r.oid
      JOIN pg_catalog.pg_class ic ON ic.oid = i.indexrelid
    UNION ALL
    SELECT 'trigger ' || r.relname || ' ' || pg_catalog.pg_get_triggerdef(t.oid) || ' enabled=' || t.tgenabled::text
      FROM rels r JOIN pg_catalog.pg_trigger t ON t.tgrelid = r.oid AND NOT t.tgisinternal
    UNION ALL
    SELECT 'policy ' || p.tablename || '.' || p.policyname || ' ' || p.permissive || ' ' || p.roles::text || ' '
           || p.cmd || ' using=' || coalesce(p.qual, '') || ' check=' || coalesce(p.with_check, '')
      FROM pg_catalog.pg_policies p WHERE p.schemaname = 'memory'
    UNION ALL
    SELECT 'view ' || r.relname || ' ' || pg_catalog.pg_get_viewdef(r.oid)
      FROM rels r WHERE r.relkind IN ('v', 'm')
    UNION ALL
    SELECT 'sequence ' || r.relname || ' ' || s.seqtypid::regtype || ' ' || s.seqstart || ' ' || s.seqincrement
           || ' ' || s.seqmax || ' ' || s.seqmin || ' ' || s.seqcache || ' ' || s.seqcycle
      FROM rels r JOIN pg_catalog.pg_sequence s ON s.seqrelid = r.oid
    UNION ALL
    SELECT 'function ' || p.oid::regprocedure::text || ' returns ' || pg_catalog.pg_get_function_result(p.oid)
           || ' args(' || pg_catalog.pg_get_function_arguments(p.oid) || ')'
           || ' kind=' || p.prokind::text || ' lang=' || l.lanname || ' volatile=' || p.provolatile::text
           || ' strict=' || p.proisstrict || ' secdef=' || p.prosecdef || ' leakproof=' || p.proleakproof
           || ' parallel=' || p.proparallel::text || ' cost=' || p.procost || ' rows=' || p.prorows
           || ' config=' || coalesce(p.proconfig::text, '') || ' acl=' || coalesce((SELECT pg_catalog.string_agg(x::text, ',' ORDER BY x::text) FROM unnest(p.proacl) x), '')
           || ' owner=' || p.proowner::regrole::text
           || ' body=' || pg_catalog.md5(CASE WHEN l.lanname = 'c' THEN p.prosrc || '|' || coalesce(p.probin, '')
                                              ELSE p.prosrc END)
      FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_language l ON l.oid = p.prolang
     WHERE p.pronamespace IN ('memory'::regnamespace, 'memory_internal'::regnamespace)
    UNION ALL
    SELECT 'type ' || t.typname || ' kind=' || t.typtype::text || ' acl=' || coalesce((SELECT pg_catalog.string_agg(x::text, ',' ORDER BY x::text) FROM unnest(t.typacl) x), '')
           || coalesce(' labels=' || (SELECT pg_catalog.string_agg(e.enumlabel, ',' ORDER BY e.enumsortorder)
                                        FROM pg_catalog.pg_enum e WHERE e.enumtypid = t.oid), '')
      FROM pg_catalog.pg_type t
     WHERE t.typnamespace = 'memory'::regnamespace AND t.typtype IN ('e', 'd', 'c') AND t.typrelid = 0
        OR t.typnamespace = 'memory'::regnamespace AND t.typtype IN ('e', 'd')
    UNION ALL
    SELECT 'comment ' || pg_catalog.pg_describe_object(d.classoid, d.objoid, d.objsubid) || ' = ' || d.description
      FROM pg_catalog.pg_description d
     WHERE pg_catalog.pg_describe_object(d.classoid, d.objoid, d.objsubid) ~ '\mmemory(_internal)?\.'
    UNION ALL
    SELECT 'config ' || c::regclass::text || ' where=' || coalesce(w, '')
      FROM pg_catalog.pg_extension e,
           LATERAL unnest(e.extconfig, coalesce(e.extcondition, array_fill(''::text, ARRAY[cardinality(e.extconfig)]))) AS x(c, w)
     WHERE e.extname = 'memory_ext'
    UNION ALL
    SELECT 'schema ' || n.nspname || ' owner=' || n.nspowner::regrole::text || ' acl=' || coalesce((SELECT pg_catalog.string_agg(x::text, ',' ORDER BY x::text) FROM unnest(n.nspacl) x), '')
           || ' member=' || EXISTS (SELECT 1 FROM pg_catalog.pg_depend d WHERE d.classid = 'pg_namespace'::regclass AND d.objid = n.oid AND d.deptype = 'e')::text
      FROM pg_catalog.pg_namespace n WHERE n.nspname IN ('memory', 'memory_internal')
) s
WHERE line IS NOT NULL
ORDER BY line COLLATE "C";
