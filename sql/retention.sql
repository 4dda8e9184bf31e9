-- Retention policies (docs/design.md#retention): the schedules and their
-- resolution. The pipeline that applies them (stamps, soft/hard delete, archive) is not built yet.

CREATE TABLE memory.retention_policies (
    id                     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    org_id                 text,            -- NULL: the platform default
    tier                   memory.classification NOT NULL,
    retention_days         int,             -- NULL: kept indefinitely
    soft_delete_grace_days int NOT NULL DEFAULT 0,
    created_at             timestamptz NOT NULL DEFAULT now(),
    UNIQUE NULLS NOT DISTINCT (org_id, tier)
);
COMMENT ON TABLE memory.retention_policies IS
  'Retention per tier: platform defaults (org_id NULL) and org overrides. Changes never backdate rows already stamped.';

CREATE FUNCTION memory_internal._check_retention_policy()
RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NEW.retention_days IS NOT NULL AND (NEW.retention_days < 0 OR NEW.retention_days > 36500) THEN
        RAISE EXCEPTION 'retention_days must be between 0 and 36500 (100 years) or NULL for indefinite, got %', NEW.retention_days
            USING ERRCODE = '22023';
    END IF;
    IF NEW.soft_delete_grace_days IS NULL OR NEW.soft_delete_grace_days < 0 OR NEW.soft_delete_grace_days > 3650 THEN
        RAISE EXCEPTION 'soft_delete_grace_days must be between 0 and 3650, got %', NEW.soft_delete_grace_days
            USING ERRCODE = '22023';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER memory_check BEFORE INSERT OR UPDATE ON memory.retention_policies
    FOR EACH ROW EXECUTE FUNCTION memory_internal._check_retention_policy();

-- A platform default is one row per tier, seeded below: inserting one for a tier that has one
-- sets it instead (so a dump, which carries every row, restores edited defaults over the seeded
-- ones). The UPDATE runs with the inserting role's rights: row-level security lets only the
-- owner and superusers change platform rows; anyone else falls through to the INSERT, which the
-- policies refuse.
CREATE FUNCTION memory_internal._merge_platform_policy()
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
    FOR EACH ROW EXECUTE FUNCTION memory_internal._merge_platform_policy();
-- Also in replica mode (a restore with session_replication_role = replica).
ALTER TABLE memory.retention_policies ENABLE ALWAYS TRIGGER memory_merge_default;

-- The platform schedule (docs/design.md#retention).
INSERT INTO memory.retention_policies (org_id, tier, retention_days, soft_delete_grace_days) VALUES
    (NULL, 'public', NULL, 0),
    (NULL, 'internal', 365, 30),
    (NULL, 'confidential', 90, 14),
    (NULL, 'restricted', 30, 7);

-- rt-005: retention by memory type.
CREATE TABLE memory.memory_type_policies (
    memory_type   memory.memory_type PRIMARY KEY,
    ttl           interval,                  -- NULL: no TTL
    archive_after interval,                  -- NULL: never moved to the archive
    cleanup       text NOT NULL CHECK (cleanup IN ('task_end', 'ttl', 'manual', 'never')),
    backup        boolean NOT NULL
);
INSERT INTO memory.memory_type_policies VALUES
    ('working',    NULL,       NULL,       'task_end', false),
    ('short_term', '1 hour',   NULL,       'ttl',      false),
    ('long_term',  NULL,       '365 days', 'manual',   true),
    ('persona',    NULL,       NULL,       'never',    true),
    ('episodic',   '90 days',  '90 days',  'ttl',      true),
    ('entity',     NULL,       NULL,       'manual',   true),
    ('structured', NULL,       '180 days', 'manual',   true);
COMMENT ON TABLE memory.memory_type_policies IS 'rt-005 schedule per memory type: TTL, archive age, cleanup mode. Inserting a type''s row sets it (every type has one).';
-- Every memory type has its row: inserting one sets it (so a dump restores edited schedules over
-- the seeded ones). Only the owner and superusers write this table.
CREATE FUNCTION memory_internal._merge_memory_type_policy()
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
    FOR EACH ROW EXECUTE FUNCTION memory_internal._merge_memory_type_policy();
ALTER TABLE memory.memory_type_policies ENABLE ALWAYS TRIGGER memory_merge;
SELECT pg_catalog.pg_extension_config_dump('memory.memory_type_policies', '');

-- BFSI strict mode keeps restricted memories 7 years (SR 11-7), whatever else says.
-- The policy that applies, for memory_ext's own use (stamping at write): no org check, not
-- granted to PUBLIC. memory.retention_policy is the checked public door.
CREATE FUNCTION memory_internal._retention_policy(p_org text, p_tier memory.classification)
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
    RETURN QUERY SELECT * FROM memory_internal._resolve_retention(p_tier = 'restricted', coalesce(bfsi, false),
                                                         o IS NOT NULL AND o.soft_delete_grace_days IS NOT NULL, o.retention_days, o.soft_delete_grace_days,
                                                         p IS NOT NULL AND p.soft_delete_grace_days IS NOT NULL, p.retention_days, p.soft_delete_grace_days);
END $$;

CREATE FUNCTION memory.retention_policy(org_id text, tier memory.classification)
RETURNS TABLE (retention_days int, soft_delete_grace_days int, source text)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF tier IS NULL THEN
        RAISE EXCEPTION 'memory.retention_policy needs a tier' USING ERRCODE = '22023';
    END IF;
    -- An org's overrides are its own business: 42501 for roles that may not act for it.
    IF retention_policy.org_id IS NOT NULL THEN
        PERFORM memory_internal._require_org(retention_policy.org_id);
    END IF;
    RETURN QUERY SELECT * FROM memory_internal._retention_policy(retention_policy.org_id, retention_policy.tier);
END $$;
COMMENT ON FUNCTION memory.retention_policy(text, memory.classification) IS
  'The retention that applies to a tier in an org: the org override, else the platform default; BFSI mode keeps restricted 2555 days. source: org, platform or bfsi.';

CREATE FUNCTION memory.is_expired(created_at timestamptz, tier memory.classification, org_id text DEFAULT NULL, at timestamptz DEFAULT now())
RETURNS boolean LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
AS $$
    SELECT memory_internal._is_expired(is_expired.created_at, p.retention_days, is_expired.at)
      FROM memory.retention_policy(is_expired.org_id, is_expired.tier) p
$$;
COMMENT ON FUNCTION memory.is_expired(timestamptz, memory.classification, text, timestamptz) IS
  'True when `at` is at or past created_at + the retention days of the tier (false for indefinite retention).';

-- Stamping caches these per backend: any change tells every backend to drop its copy.
CREATE TRIGGER memory_rules_changed AFTER INSERT OR UPDATE OR DELETE ON memory.retention_policies
    FOR EACH ROW EXECUTE FUNCTION memory.rules_changed();
CREATE TRIGGER memory_rules_changed_truncate AFTER TRUNCATE ON memory.retention_policies
    FOR EACH STATEMENT EXECUTE FUNCTION memory.rules_changed();
CREATE TRIGGER memory_rules_changed AFTER INSERT OR UPDATE OR DELETE ON memory.memory_type_policies
    FOR EACH ROW EXECUTE FUNCTION memory.rules_changed();
CREATE TRIGGER memory_rules_changed_truncate AFTER TRUNCATE ON memory.memory_type_policies
    FOR EACH STATEMENT EXECUTE FUNCTION memory.rules_changed();
CREATE TRIGGER memory_rules_changed AFTER INSERT OR UPDATE OR DELETE ON memory.org_settings
    FOR EACH ROW EXECUTE FUNCTION memory.rules_changed();
CREATE TRIGGER memory_rules_changed_truncate AFTER TRUNCATE ON memory.org_settings
    FOR EACH STATEMENT EXECUTE FUNCTION memory.rules_changed();

-- Every row, platform defaults too (edited defaults restore over the seeded ones, above).
SELECT pg_catalog.pg_extension_config_dump('memory.retention_policies', '');

-- ------------------------------------------------------------------------------------------------
-- The pipeline: expired live rows -> hold/guard check -> soft delete -> after grace, hard delete;
-- rows past archive_at -> memory.observations_archive, where the same schedule goes on. Cost
-- follows the rows due (partial indexes on the stamps, of both tables), not the table.

CREATE INDEX observations_due_expiry ON memory.observations (expires_at) WHERE soft_deleted_at IS NULL AND expires_at IS NOT NULL;
CREATE INDEX observations_due_purge ON memory.observations (purge_after) WHERE soft_deleted_at IS NOT NULL;
-- Erasure finds a subject's rows, and task end a task's, by index; recall of a user's memories
-- finds that user's rows of one org by the same index (user ids repeat across orgs: with the
-- user alone it intersected the user's rows of every org with the org's).
CREATE INDEX observations_user ON memory.observations (user_id, org_id) WHERE user_id IS NOT NULL;
CREATE INDEX observations_task ON memory.observations (task_id) WHERE task_id IS NOT NULL;
CREATE INDEX observations_due_archive ON memory.observations (archive_at) WHERE soft_deleted_at IS NULL AND archive_at IS NOT NULL;

CREATE TABLE memory.legal_holds (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    org_id         text NOT NULL,
    observation_id uuid,          -- one observation, or
    user_id        text,          -- every observation of a subject, or (both NULL) the whole org
    reason         text NOT NULL CHECK (reason ~ '[^[:space:]]'),
    created_at     timestamptz NOT NULL DEFAULT now(),
    released_at    timestamptz
);
CREATE INDEX legal_holds_active ON memory.legal_holds (org_id) WHERE released_at IS NULL;
COMMENT ON TABLE memory.legal_holds IS 'Active holds (released_at NULL) keep matching observations from retention and erasure.';

ALTER TABLE memory.org_settings ADD COLUMN retention_guard regproc;
COMMENT ON COLUMN memory.org_settings.retention_guard IS
  'Optional function(uuid) returning boolean, asked before an observation of the org is soft-deleted; false, an error or a missing function deny.';

CREATE TABLE memory.observations_archive (LIKE memory.observations INCLUDING DEFAULTS);
-- Cold storage keeps the content, not recall's words of it (LIKE copies them as a plain column).
ALTER TABLE memory.observations_archive DROP COLUMN content_tsv;
ALTER TABLE memory.observations_archive ADD COLUMN archived_at timestamptz NOT NULL DEFAULT now();
ALTER TABLE memory.observations_archive ADD PRIMARY KEY (id);
CREATE INDEX observations_archive_user ON memory.observations_archive (user_id) WHERE user_id IS NOT NULL;
-- Archived rows keep their stamps and run_retention sweeps them by these.
CREATE INDEX observations_archive_due_expiry ON memory.observations_archive (expires_at) WHERE soft_deleted_at IS NULL AND expires_at IS NOT NULL;
CREATE INDEX observations_archive_due_purge ON memory.observations_archive (purge_after) WHERE soft_deleted_at IS NOT NULL;
-- memory.health: an org's archived rows and the oldest.
CREATE INDEX observations_archive_org ON memory.observations_archive (org_id, archived_at);
COMMENT ON TABLE memory.observations_archive IS 'Cold storage: observations past archive_at, moved out of the hot table.';

CREATE VIEW memory.live_observations AS
SELECT * FROM memory.observations o
 WHERE o.soft_deleted_at IS NULL AND (o.expires_at IS NULL OR o.expires_at > now());
COMMENT ON VIEW memory.live_observations IS 'Observations neither soft-deleted nor expired.';

-- Whether an active legal hold covers (org, user, observation). On Citus it runs on the shards
-- of a query over the observations, and reads the holds (a reference table) from the node's own
-- copy (see memory_internal._acting_org). The match itself is memory_internal._hold_matches (core's
-- rule), which every hold lookup uses; statements that change rows call it directly, as Citus
-- refuses a STABLE function of a column there (an IMMUTABLE one it runs on the shards).
CREATE FUNCTION memory_internal._held(p_org text, p_user text, p_id uuid)
RETURNS boolean LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
    SET citus.allow_nested_distributed_execution = on
AS $$
    SELECT EXISTS (SELECT 1 FROM memory.legal_holds h
                    WHERE h.released_at IS NULL AND h.org_id = p_org
                      AND memory_internal._hold_matches(h.observation_id::text, h.user_id, p_id::text, p_user))
$$;

-- Legal holds block writes (MX006): an UPDATE of the mapped content, org, user or id
-- column, or a DELETE, of a held row of a governed table (memory.observations among them) fails,
-- naming the hold. memory.govern attaches it as
--   BEFORE UPDATE OF <those columns> OR DELETE ... WHEN (NOT memory_internal._hold_gate_open())
-- with TG_ARGV org, user, id and content columns ('' when the table has none). It runs with the
-- writer's rights and reads only the mapped columns, as text; the hold lookup is
-- memory_internal._hold_for, which takes those plain values. memory_ext opens the hold gate only around
-- its own move of held rows (retention's archive step); erasure, revocation and retention skip
-- held rows themselves.
CREATE FUNCTION memory_internal._hold_for(p_org text, p_user text, p_id text)
RETURNS bigint LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE hold bigint;
BEGIN
    IF p_org IS NULL THEN
        RETURN NULL;
    END IF;
    -- An org the caller may not act for: 42501 (no answer about another org's holds).
    PERFORM memory_internal._require_org(p_org);
    SELECT h.id INTO hold FROM memory.legal_holds h
     WHERE h.released_at IS NULL AND h.org_id = p_org
       AND memory_internal._hold_matches(h.observation_id::text, h.user_id, p_id, p_user)
     ORDER BY h.id LIMIT 1;
    RETURN hold;
END $$;

CREATE FUNCTION memory_internal._hold_guard()
RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    cols text[];
    vals text[];
    hold bigint;
    same boolean;
BEGIN
    IF TG_WHEN OPERATOR(pg_catalog.<>) 'BEFORE' OR TG_LEVEL OPERATOR(pg_catalog.<>) 'ROW' OR TG_OP NOT IN ('UPDATE', 'DELETE')
       OR TG_NARGS OPERATOR(pg_catalog.<>) 4 THEN
        RAISE EXCEPTION 'memory_internal._hold_guard is a BEFORE UPDATE OR DELETE row trigger attached by memory.govern' USING ERRCODE = '39P01';
    END IF;
    IF memory_internal._restore_mode() THEN
        RETURN CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END;
    END IF;
    -- memory_ext's own store (the archive has no memory_hold trigger), whose mapped columns are known
    -- (org_id, user_id, id, content): read directly, without building a statement per row.
    IF TG_RELID OPERATOR(pg_catalog.=) 'memory.observations'::pg_catalog.regclass
       AND TG_ARGV[0] = 'org_id' AND TG_ARGV[1] = 'user_id' AND TG_ARGV[2] = 'id' AND TG_ARGV[3] = 'content' THEN
        IF TG_OP = 'UPDATE' AND OLD.org_id IS NOT DISTINCT FROM NEW.org_id AND OLD.user_id IS NOT DISTINCT FROM NEW.user_id
           AND OLD.id IS NOT DISTINCT FROM NEW.id AND OLD.content IS NOT DISTINCT FROM NEW.content THEN
            RETURN NEW;
        END IF;
        vals := ARRAY[OLD.org_id, OLD.user_id, OLD.id::text];
    ELSE
        -- An UPDATE that leaves the mapped columns (org, user, id, content) as they were changes
        -- nothing a hold protects; the final row is compared, whatever the SET list named.
        IF TG_OP = 'UPDATE' THEN
            cols := array_remove(ARRAY[TG_ARGV[0], TG_ARGV[1], TG_ARGV[2], TG_ARGV[3]], '');
            EXECUTE 'SELECT ' || (SELECT string_agg(format('($1).%1$I::text IS NOT DISTINCT FROM ($2).%1$I::text', c), ' AND ') FROM unnest(cols) c)
               INTO same USING OLD, NEW;
            IF same THEN
                RETURN NEW;
            END IF;
        END IF;
        -- The old row's org, user and id, as text ('' columns read as NULL).
        cols := ARRAY[TG_ARGV[0], TG_ARGV[1], TG_ARGV[2]];
        EXECUTE 'SELECT ARRAY[' || (SELECT string_agg(CASE WHEN c = '' THEN 'NULL::text' ELSE format('($1).%I::text', c) END, ', ' ORDER BY o)
                                      FROM unnest(cols) WITH ORDINALITY u(c, o)) || ']'
           INTO vals USING OLD;
    END IF;
    -- memory.erase_subject and consent revocation delete the subject's rows of an application
    -- table held or not (their rule): only a DELETE of this table's rows of that subject.
    IF TG_OP = 'DELETE' AND memory_internal._hold_erasing(TG_RELID, vals[2]) THEN
        RETURN OLD;
    END IF;
    hold := memory_internal._hold_for(vals[1], vals[2], vals[3]);
    IF hold IS NOT NULL THEN
        RAISE EXCEPTION 'legal hold % covers this row of %: % is blocked', hold, TG_RELID::regclass,
                        CASE WHEN TG_OP = 'DELETE' THEN 'DELETE' ELSE 'UPDATE of ' || array_to_string(array_remove(ARRAY[TG_ARGV[3], TG_ARGV[0], TG_ARGV[1], TG_ARGV[2]], ''), ', ') END
            USING ERRCODE = 'MX006',
                  HINT = 'A memory_admin releases the hold (UPDATE memory.legal_holds SET released_at = now() WHERE id = ...).';
    END IF;
    RETURN CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END;
END $$;

-- One active legal hold covering a row of governed table tbl, or NULL, for TRUNCATE (which would
-- take every row at once). The mapped org, user and id columns are those memory.govern gave the
-- table's memory_hold_truncate trigger; the rows are read as the table's owner in a
-- security-restricted operation (as maintenance reads them) and compared as text with the holds.
-- Answers only a role that owns the table or may truncate it (42501), and only about the orgs that
-- role may act for: a table holding rows of another org is not truncated by it at all (42501), so
-- nothing is learnt about another org's holds and nothing of another org's is removed.
CREATE FUNCTION memory_internal._hold_on_rows(tbl regclass)
RETURNS bigint LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    args  text[];
    holds jsonb;
    found jsonb;
    who   oid := memory_internal._caller();
    -- The orgs the role may act for; NULL when it may act for every org.
    mine  text[];
BEGIN
    IF who IS NULL OR who = 0 OR NOT (pg_has_role(who, (SELECT c.relowner FROM pg_class c WHERE c.oid = tbl), 'USAGE')
                                      OR has_table_privilege(who, tbl, 'TRUNCATE')) THEN
        RAISE EXCEPTION 'permission denied to ask for the legal holds on rows of %', tbl USING ERRCODE = '42501';
    END IF;
    SELECT memory_internal._trigger_args(tg.oid) INTO args FROM pg_trigger tg
     WHERE tg.tgrelid = tbl AND tg.tgname = 'memory_hold_truncate' AND tg.tgfoid = 'memory_internal._hold_truncate_guard'::regproc;
    IF coalesce(args[1], '') = '' OR NOT EXISTS (SELECT 1 FROM memory.governance_registry g WHERE g.relid = tbl) THEN
        RETURN NULL;
    END IF;
    IF NOT memory_internal._may_act_for('') THEN
        mine := ARRAY(SELECT memory.my_orgs());
    END IF;
    SELECT coalesce(jsonb_agg(jsonb_build_object('id', h.id, 'org', h.org_id, 'usr', h.user_id, 'oid', h.observation_id::text)), '[]')
      INTO holds FROM memory.legal_holds h
     WHERE h.released_at IS NULL AND (mine IS NULL OR h.org_id OPERATOR(pg_catalog.=) ANY (mine));
    found := memory_internal._exec_as_table_owner(tbl, format(
        'SELECT pg_catalog.jsonb_build_array('
        '  $2::pg_catalog.text[] IS NOT NULL AND EXISTS (SELECT 1 FROM %1$s t WHERE t.%2$I IS NOT NULL AND NOT (t.%2$I::text OPERATOR(pg_catalog.=) ANY ($2::pg_catalog.text[]))),'
        '  (SELECT h.id FROM %1$s t JOIN pg_catalog.jsonb_to_recordset($1::pg_catalog.jsonb) h(id bigint, org text, usr text, oid text) '
        '   ON t.%2$I::text OPERATOR(pg_catalog.=) h.org AND memory_internal._hold_matches(h.oid, h.usr, %3$s, %4$s) '
        '   ORDER BY h.id LIMIT 1))',
        tbl, args[1],
        CASE WHEN coalesce(args[3], '') = '' THEN 'NULL' ELSE format('t.%I::text', args[3]) END,
        CASE WHEN coalesce(args[2], '') = '' THEN 'NULL' ELSE format('t.%I::text', args[2]) END),
        ARRAY[holds::text, mine::text]);
    IF (found->>0)::boolean THEN
        RAISE EXCEPTION 'role % may not remove rows of % that belong to orgs it may not act for', who::regrole, tbl
            USING ERRCODE = '42501', HINT = 'Delete your own orgs'' rows instead; an owner of every org (or the extension owner) truncates.';
    END IF;
    RETURN (found->>1)::bigint;
END $$;

-- BEFORE TRUNCATE of a governed table (memory.govern attaches it with memory_hold): a table
-- holding a row under an active legal hold is not truncated (MX006).
CREATE FUNCTION memory_internal._hold_truncate_guard()
RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
DECLARE hold bigint;
BEGIN
    IF TG_WHEN OPERATOR(pg_catalog.<>) 'BEFORE' OR TG_OP OPERATOR(pg_catalog.<>) 'TRUNCATE' OR TG_NARGS OPERATOR(pg_catalog.<>) 3 THEN
        RAISE EXCEPTION 'memory_internal._hold_truncate_guard is a BEFORE TRUNCATE trigger attached by memory.govern' USING ERRCODE = '39P01';
    END IF;
    IF memory_internal._restore_mode() OR memory_internal._hold_gate_open() THEN
        RETURN NULL;
    END IF;
    hold := memory_internal._hold_on_rows(TG_RELID);
    IF hold IS NOT NULL THEN
        RAISE EXCEPTION 'legal hold % covers rows of %: TRUNCATE is blocked', hold, TG_RELID::regclass
            USING ERRCODE = 'MX006',
                  HINT = 'A memory_admin releases the hold (UPDATE memory.legal_holds SET released_at = now() WHERE id = ...).';
    END IF;
    RETURN NULL;
END $$;

-- The org's guard, asked per row; a guard that raises or does not exist denies.
CREATE FUNCTION memory_internal._guard_allows(guard regproc, id uuid)
RETURNS boolean LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE ok boolean;
BEGIN
    IF guard IS NULL THEN
        RETURN true;
    END IF;
    EXECUTE format('SELECT %s($1)', guard::regprocedure::text::regproc) INTO ok USING id;
    RETURN coalesce(ok, false);
EXCEPTION WHEN OTHERS THEN
    RETURN false;
END $$;


-- Maintenance never waits on one tenant (run_retention, erase_subject): before working on a
-- governed application table it takes the table's lock in `mode` without waiting, as the
-- table's owner (memory_internal._exec_as_table_owner). False when another session holds a conflicting
-- lock (55P03): the caller skips the table and reports it under locked_tables. The lock, when
-- taken, is kept to the end of the transaction.
CREATE FUNCTION memory_internal._lock_nowait(tbl regclass, mode text)
RETURNS boolean LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF mode IS NULL OR mode NOT IN ('ACCESS SHARE', 'ROW EXCLUSIVE') THEN
        RAISE EXCEPTION 'memory_internal._lock_nowait takes ACCESS SHARE or ROW EXCLUSIVE, got %', mode USING ERRCODE = '22023';
    END IF;
    PERFORM memory_internal._exec_as_table_owner(tbl, format('LOCK TABLE ONLY %s IN %s MODE NOWAIT', tbl, mode));
    RETURN true;
EXCEPTION
    WHEN lock_not_available THEN
        RETURN false;
    WHEN OTHERS THEN
        -- Citus: a LOCK it cannot propagate to the shards leaves the table to the statements, as
        -- before this check (they may then wait).
        IF memory_internal._citus_distributed(tbl) THEN
            RETURN true;
        END IF;
        RAISE;
END $$;

-- memory_internal._retention_sweep's soft deletes on the governed table `tbl` (its mapping `opts`):
-- rows past expires_at not yet soft-deleted, of orgs the table's owner may act for. Held rows are
-- denied (memory.purge.denied); the rest get soft_deleted_at (and soft_delete_reason) set, as the
-- table's owner. `e`: the expressions _retention_sweep worked out (idtype, org_e, user_e, tier_e,
-- setc, may_e, orgs); `dist`: the table is distributed on Citus. Returns how many were
-- soft-deleted and denied. Not granted to PUBLIC.
CREATE FUNCTION memory_internal._retention_sweep_soft(tbl regclass, opts jsonb, dry_run boolean, at timestamptz, dist boolean, e jsonb,
                                                      OUT soft bigint, OUT denied bigint)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    st       jsonb := opts->'stamps';
    idc      text := opts->>'id';
    sd       text := st->>'soft_deleted_at';
    idtype   text := e->>'idtype';
    org_e    text := e->>'org_e';
    user_e   text := e->>'user_e';
    tier_e   text := e->>'tier_e';
    may_e    text := e->>'may_e';
    orgs     text[] := (e->>'orgs')::text[];
    g        record;
    rows     jsonb;
    setc     text := e->>'setc';
    ids      text[] := '{}';
    actor    constant text := 'system:retention';
BEGIN
    soft := 0;
    denied := 0;
    rows := memory_internal._exec_as_table_owner(tbl, format(
        'SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_array(d.i, d.o, d.t, d.u)), ''[]'')
           FROM (SELECT t.%1$I::pg_catalog.text AS i, %2$s AS o, %3$s AS t, %4$s AS u
                   FROM %5$s t WHERE t.%6$I IS NULL AND t.%7$I IS NOT NULL AND t.%7$I OPERATOR(pg_catalog.<=) $1::pg_catalog.timestamptz
                    AND %9$s
                    %8$s) d',
        idc, org_e, tier_e, user_e, tbl, sd, st->>'expires_at', CASE WHEN dry_run OR dist THEN '' ELSE 'FOR UPDATE OF t SKIP LOCKED' END, may_e),
        ARRAY[at::text, orgs::text]);
    -- At most 1,000 ids per event: a purge of 100,000 rows is 100 events, not one of 4 MB.
    FOR g IN SELECT d.org_id, d.tier, d.denied, array_agg(d.id ORDER BY d.id) AS ids, count(*) AS n
               FROM (SELECT a.*, (pg_catalog.row_number() OVER (PARTITION BY a.org_id, a.tier, a.denied ORDER BY a.id) - 1) / 1000 AS part
                       FROM (SELECT x->>0 AS id, x->>1 AS org_id, x->>2 AS tier,
                                    memory_internal._held(coalesce(x->>1, ''), x->>3, NULL) AS denied
                               FROM jsonb_array_elements(rows) x) a) d
              GROUP BY 1, 2, 3, d.part ORDER BY 1, 2, 3, d.part LOOP
        IF g.denied THEN
            PERFORM memory_internal._audit('memory.purge.denied', jsonb_build_object('table', tbl::text, 'orgId', g.org_id,
                    'actorId', actor, 'observationIds', to_jsonb(g.ids), 'classification', g.tier,
                    'stage', 'soft_delete', 'reason', 'legal hold', 'dryRun', dry_run), g.org_id);
            denied := denied + g.n;
            CONTINUE;
        END IF;
        soft := soft + g.n;
        IF dist AND NOT dry_run THEN
            -- Citus: ids are unique only within an org (every unique key holds the org column),
            -- so each org's ids change in a statement naming the org, which also checks again
            -- that each row is still due (a query over every shard locks nothing).
            PERFORM memory_internal._exec_as_table_owner(tbl, format(
                'UPDATE %s t SET %s WHERE t.%I OPERATOR(pg_catalog.=) ANY ($2::%s[]) AND t.%I OPERATOR(pg_catalog.=) $3
                    AND t.%I IS NULL AND t.%I IS NOT NULL AND t.%I OPERATOR(pg_catalog.<=) $1::pg_catalog.timestamptz',
                tbl, setc, idc, idtype, opts->>'org', sd, st->>'expires_at', st->>'expires_at'), ARRAY[at::text, g.ids::text, g.org_id]);
        ELSE
            ids := ids || g.ids;
        END IF;
    END LOOP;
    IF NOT dry_run AND NOT dist AND cardinality(ids) > 0 THEN
        PERFORM memory_internal._exec_as_table_owner(tbl, format('UPDATE %s t SET %s WHERE t.%I OPERATOR(pg_catalog.=) ANY ($2::%s[])',
                       tbl, setc, idc, idtype), ARRAY[at::text, ids::text]);
    END IF;
END $$;

-- memory_internal._retention_sweep's hard deletes on the governed table `tbl` (its mapping `opts`):
-- soft-deleted rows past the grace (memory_internal._purge_due), of orgs the table's owner may act
-- for. Held rows are denied (memory.purge.denied); the rest are deleted as the table's owner, with
-- memory.purge events naming the table. `e` and `dist` as for memory_internal._retention_sweep_soft.
-- Returns how many were hard-deleted and denied. Not granted to PUBLIC.
CREATE FUNCTION memory_internal._retention_sweep_hard(tbl regclass, opts jsonb, dry_run boolean, at timestamptz, dist boolean, e jsonb,
                                                      OUT hard bigint, OUT denied bigint)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    st       jsonb := opts->'stamps';
    idc      text := opts->>'id';
    sd       text := st->>'soft_deleted_at';
    idtype   text := e->>'idtype';
    org_e    text := e->>'org_e';
    user_e   text := e->>'user_e';
    tier_e   text := e->>'tier_e';
    may_e    text := e->>'may_e';
    orgs     text[] := (e->>'orgs')::text[];
    g        record;
    rows     jsonb;
    ids      text[] := '{}';
    actor    constant text := 'system:retention';
BEGIN
    hard := 0;
    denied := 0;
    rows := memory_internal._exec_as_table_owner(tbl, format(
        'SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_array(d.i, d.o, d.t, d.u)), ''[]'')
           FROM (SELECT t.%1$I::pg_catalog.text AS i, %2$s AS o, %3$s AS t, %4$s AS u
                   FROM %5$s t WHERE t.%6$I IS NOT NULL AND t.%7$I IS NOT NULL AND t.%7$I OPERATOR(pg_catalog.<=) $1::pg_catalog.timestamptz
                    AND memory_internal._purge_due(t.%6$I, t.%7$I, t.%8$I, $1::pg_catalog.timestamptz)
                    AND %10$s
                    %9$s) d',
        idc, org_e, tier_e, user_e, tbl, sd, st->>'purge_after', st->>'expires_at',
        CASE WHEN dry_run OR dist THEN '' ELSE 'FOR UPDATE OF t SKIP LOCKED' END, may_e), ARRAY[at::text, orgs::text]);
    -- At most 1,000 ids per event: a purge of 100,000 rows is 100 events, not one of 4 MB.
    FOR g IN SELECT d.org_id, d.tier, d.denied, array_agg(d.id ORDER BY d.id) AS ids, count(*) AS n
               FROM (SELECT a.*, (pg_catalog.row_number() OVER (PARTITION BY a.org_id, a.tier, a.denied ORDER BY a.id) - 1) / 1000 AS part
                       FROM (SELECT x->>0 AS id, x->>1 AS org_id, x->>2 AS tier,
                                    memory_internal._held(coalesce(x->>1, ''), x->>3, NULL) AS denied
                               FROM jsonb_array_elements(rows) x) a) d
              GROUP BY 1, 2, 3, d.part ORDER BY 1, 2, 3, d.part LOOP
        IF g.denied THEN
            PERFORM memory_internal._audit('memory.purge.denied', jsonb_build_object('table', tbl::text, 'orgId', g.org_id,
                    'actorId', actor, 'observationIds', to_jsonb(g.ids), 'classification', g.tier,
                    'stage', 'hard_delete', 'reason', 'legal hold', 'dryRun', dry_run), g.org_id);
            denied := denied + g.n;
            CONTINUE;
        END IF;
        PERFORM memory_internal._audit('memory.purge', jsonb_build_object('table', tbl::text, 'workspaceId', NULL,
                'actorId', actor, 'orgId', g.org_id, 'projectId', NULL, 'observationIds', to_jsonb(g.ids),
                'retentionPolicyId', NULL, 'classification', g.tier, 'dryRun', dry_run), g.org_id);
        hard := hard + g.n;
        IF dist AND NOT dry_run THEN
            -- Citus: ids are unique only within an org, so each org's ids go in a statement naming
            -- the org, which also checks again that each row is still due.
            PERFORM memory_internal._exec_as_table_owner(tbl, format(
                'DELETE FROM %s t WHERE t.%I OPERATOR(pg_catalog.=) ANY ($2::%s[]) AND t.%I OPERATOR(pg_catalog.=) $3
                    AND t.%I IS NOT NULL AND memory_internal._purge_due(t.%I, t.%I, t.%I, $1::pg_catalog.timestamptz)',
                tbl, idc, idtype, opts->>'org', sd, sd, st->>'purge_after', st->>'expires_at'), ARRAY[at::text, g.ids::text, g.org_id]);
        ELSE
            ids := ids || g.ids;
        END IF;
    END LOOP;
    IF NOT dry_run AND NOT dist AND cardinality(ids) > 0 THEN
        -- Held rows were denied above. The per-row hold check still runs (no hold gate): the DELETE
        -- runs as the table's owner and fires the owner's triggers, which must meet every hold; a
        -- row held since it was read fails this table's sweep (MX006) rather than going.
        PERFORM memory_internal._exec_as_table_owner(tbl, format('DELETE FROM %s t WHERE t.%I OPERATOR(pg_catalog.=) ANY ($1::%s[])',
                       tbl, idc, idtype), ARRAY[ids::text]);
    END IF;
END $$;

-- One governed application table with stamps and a soft-delete column: the same soft/hard steps
-- as for memory.observations (no archive: that table is the application's). Holds apply by org
-- and subject. Returns its counts.
CREATE FUNCTION memory_internal._retention_sweep(tbl regclass, opts jsonb, dry_run boolean, at timestamptz)
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
    e        jsonb;
    soft     bigint;
    hard     bigint;
    denied   bigint;
    n        bigint;
    -- On Citus (docs/design.md#scale-out) a query over every shard cannot lock rows (FOR UPDATE): the changes
    -- below then check again that each row is still due.
    dist     constant boolean := opts->>'org' IS NOT NULL AND memory_internal._citus_distributed(tbl);
    may_e    text;
    orgs     text[] := '{}';
BEGIN
    idtype := format_type(memory_internal._column_type(tbl, idc, 'id'), NULL);
    org_e := CASE WHEN opts->>'org' IS NULL THEN 'NULL::pg_catalog.text' ELSE format('t.%I::pg_catalog.text', opts->>'org') END;
    user_e := CASE WHEN opts->>'user' IS NULL THEN 'NULL::pg_catalog.text' ELSE format('t.%I::pg_catalog.text', opts->>'user') END;
    tier_e := CASE WHEN tierc IS NULL THEN 'NULL::pg_catalog.text'
                   WHEN memory_internal._column_type(tbl, tierc, 'tier') = 'jsonb'::regtype THEN format('(t.%I OPERATOR(pg_catalog.->>) %L)', tierc, 'classification')
                   ELSE format('t.%I::pg_catalog.text', tierc) END;
    setc := format('%I = $1::pg_catalog.timestamptz', sd) || CASE WHEN st->>'soft_delete_reason' IS NULL THEN ''
                                          ELSE format(', %I = %L', st->>'soft_delete_reason', 'retention') END;
    may_e := format('memory_internal._may_act_for(%s)', org_e);
    IF dist AND opts->>'org' IS NOT NULL THEN
        -- On a Citus shard a function cannot read the registries (a distributed query from a
        -- query on a shard): the orgs the owner may act for are worked out here, from the table's
        -- distinct orgs, and the sweep names them.
        SELECT coalesce(array_agg(o), '{}') INTO orgs
          FROM pg_catalog.jsonb_array_elements_text(memory_internal._exec_as_table_owner(tbl,
                   format('SELECT coalesce(pg_catalog.jsonb_agg(DISTINCT t.%I::pg_catalog.text), ''[]'') FROM %s t', opts->>'org', tbl), '{}')) o
         WHERE memory_internal._may_act_for_role((SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid = tbl), o);
        may_e := format('%s OPERATOR(pg_catalog.=) ANY ($2::pg_catalog.text[])', org_e);
    END IF;
    -- Every statement on the application table runs as the table's owner, in a
    -- security-restricted operation (memory_internal._exec_as_table_owner): whatever its columns' types,
    -- casts or triggers do runs with its owner's rights, never the maintenance role's. Only rows
    -- of orgs the table's owner may act for are swept: the org values are the owner's data, so
    -- events (memory.purge and the table's own) never name an org its owner could not write.
    -- A real run locks the rows it will change, skipping rows another session holds locked (they
    -- are due again at the next run); a dry run changes nothing and locks no rows (so it runs in a
    -- read-only transaction, on a standby too). No temporary table: the due rows
    -- are one jsonb value.
    -- Each step (memory_internal._retention_sweep_soft, then _retention_sweep_hard) takes these
    -- expressions as one jsonb value.
    e := jsonb_build_object('idtype', idtype, 'org_e', org_e, 'user_e', user_e, 'tier_e', tier_e, 'setc', setc,
                            'may_e', may_e, 'orgs', orgs::text);
    SELECT s.soft, s.denied INTO soft, denied FROM memory_internal._retention_sweep_soft(tbl, opts, dry_run, at, dist, e) s;
    SELECT s.hard, s.denied INTO hard, n FROM memory_internal._retention_sweep_hard(tbl, opts, dry_run, at, dist, e) s;
    denied := denied + n;
    RETURN jsonb_build_object('soft_deleted', soft, 'hard_deleted', hard, 'denied', denied);
END $$;

-- The columns an archived row carries over, by name (memory.observations' columns the archive
-- has): the archive's own archived_at sits before columns added to both later.
CREATE FUNCTION memory_internal._archive_columns()
RETURNS text LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
AS $$
SELECT pg_catalog.string_agg(pg_catalog.quote_ident(a.attname), ', ' ORDER BY a.attnum)
  FROM pg_catalog.pg_attribute a
 WHERE a.attrelid OPERATOR(pg_catalog.=) 'memory.observations'::pg_catalog.regclass AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped
   AND EXISTS (SELECT 1 FROM pg_catalog.pg_attribute b
                WHERE b.attrelid OPERATOR(pg_catalog.=) 'memory.observations_archive'::pg_catalog.regclass
                  AND b.attname OPERATOR(pg_catalog.=) a.attname AND b.attnum OPERATOR(pg_catalog.>) 0 AND NOT b.attisdropped) $$;

-- memory.run_retention's step 1, on memory.observations: expired live rows. Held rows, and rows
-- the org's guard refuses, are denied (memory.purge.denied); the rest are soft-deleted. Returns
-- how many were soft-deleted (soft) and denied, and the ids soft-deleted (step 3 leaves them).
-- Not granted to PUBLIC.
CREATE FUNCTION memory_internal._retention_hot_soft(dry_run boolean, at timestamptz, dist boolean,
                                                    OUT soft bigint, OUT denied bigint, OUT soft_ids uuid[])
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    g     record;
    actor constant text := 'system:retention';
    -- A real run locks the due rows; a dry run and Citus (`dist`) lock none (memory.run_retention).
    lock  constant text := CASE WHEN dry_run OR dist THEN '' ELSE ' FOR UPDATE OF o' END;
BEGIN
    soft := 0;
    denied := 0;
    soft_ids := '{}';
    -- At most 1,000 ids per event (in every step): a run over 100,000 rows writes 100 events, not one of 4 MB.
    FOR g IN EXECUTE
        'SELECT d.org_id, d.classification, d.denied, pg_catalog.array_agg(d.id ORDER BY d.id) AS ids, pg_catalog.count(*) AS n
           FROM (SELECT a.*, (pg_catalog.row_number() OVER (PARTITION BY a.org_id, a.classification, a.denied ORDER BY a.id) OPERATOR(pg_catalog.-) 1)
                             OPERATOR(pg_catalog./) 1000 AS part
                   FROM (SELECT o.id, o.org_id, o.classification,
                                memory_internal._held(o.org_id, o.user_id, o.id) OR NOT memory_internal._guard_allows(s.retention_guard, o.id) AS denied
                           FROM memory.observations o LEFT JOIN memory.org_settings s ON s.org_id OPERATOR(pg_catalog.=) o.org_id
                          WHERE o.soft_deleted_at IS NULL AND o.expires_at IS NOT NULL AND o.expires_at OPERATOR(pg_catalog.<=) $1'
                          || lock || ') a) d
          GROUP BY 1, 2, 3, d.part ORDER BY 1, 2, 3, d.part' USING at
    LOOP
        IF g.denied THEN
            PERFORM memory_internal._audit('memory.purge.denied', jsonb_build_object('orgId', g.org_id, 'actorId', actor,
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
END $$;

-- memory.run_retention's step 2, on memory.observations: soft-deleted rows past the grace. Held
-- rows are denied (memory.purge.denied); the rest are hard-deleted, with memory.purge events per
-- org and tier (the documented payload, docs/design.md#retention). Returns how many were
-- hard-deleted (hard) and denied. Not granted to PUBLIC.
CREATE FUNCTION memory_internal._retention_hot_hard(dry_run boolean, at timestamptz, dist boolean,
                                                    OUT hard bigint, OUT denied bigint)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    g     record;
    actor constant text := 'system:retention';
    -- A real run locks the due rows; a dry run and Citus (`dist`) lock none (memory.run_retention).
    lock  constant text := CASE WHEN dry_run OR dist THEN '' ELSE ' FOR UPDATE OF o' END;
    hard_ids uuid[] := '{}';
BEGIN
    hard := 0;
    denied := 0;
    FOR g IN EXECUTE
        'SELECT d.org_id, d.classification, d.denied, pg_catalog.array_agg(d.id ORDER BY d.id) AS ids, pg_catalog.count(*) AS n,
                CASE WHEN pg_catalog.count(DISTINCT d.project_id) OPERATOR(pg_catalog.=) 1 THEN pg_catalog.min(d.project_id) END AS project_id,
                CASE WHEN pg_catalog.count(DISTINCT d.workspace_id) OPERATOR(pg_catalog.=) 1 THEN pg_catalog.min(d.workspace_id) END AS workspace_id
           FROM (SELECT a.*, (pg_catalog.row_number() OVER (PARTITION BY a.org_id, a.classification, a.denied ORDER BY a.id) OPERATOR(pg_catalog.-) 1)
                             OPERATOR(pg_catalog./) 1000 AS part
                   FROM (SELECT o.id, o.org_id, o.project_id, o.workspace_id, o.classification,
                                memory_internal._held(o.org_id, o.user_id, o.id) AS denied
                           FROM memory.observations o
                          WHERE o.soft_deleted_at IS NOT NULL AND o.purge_after IS NOT NULL AND o.purge_after OPERATOR(pg_catalog.<=) $1
                            -- A late run still leaves the full grace after the soft delete (memory_core::retention::purge_due).
                            AND memory_internal._purge_due(o.soft_deleted_at, o.purge_after, o.expires_at, $1)'
                          || lock || ') a) d
          GROUP BY 1, 2, 3, d.part ORDER BY 1, 2, 3, d.part' USING at
    LOOP
        IF g.denied THEN
            PERFORM memory_internal._audit('memory.purge.denied', jsonb_build_object('orgId', g.org_id, 'actorId', actor,
                    'observationIds', to_jsonb(g.ids), 'classification', g.classification, 'stage', 'hard_delete',
                    'reason', 'legal hold', 'dryRun', dry_run), g.org_id);
            denied := denied + g.n;
        ELSE
            PERFORM memory_internal._audit('memory.purge', jsonb_build_object('workspaceId', g.workspace_id, 'actorId', actor,
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
                   AND memory_internal._purge_due(o.soft_deleted_at, o.purge_after, o.expires_at, at)
                   -- (a row held since is left, as the hold trigger on its shard would refuse it)
                   AND NOT EXISTS (SELECT 1 FROM memory.legal_holds h
                                    WHERE h.released_at IS NULL AND h.org_id OPERATOR(pg_catalog.=) o.org_id
                                      AND memory_internal._hold_matches(h.observation_id::text, h.user_id, o.id::text, o.user_id));
            END IF;
        END IF;
    END LOOP;
    IF NOT dry_run AND NOT dist AND hard > 0 THEN
        PERFORM memory_internal._hold_gate(true);   -- held rows were denied above
        DELETE FROM memory.observations o WHERE o.id IN (SELECT u.id FROM unnest(hard_ids) u(id));
        PERFORM memory_internal._hold_gate(false);
    END IF;
END $$;

-- memory.run_retention's step 3: live rows of memory.observations past archive_at move to
-- memory.observations_archive (memory.archive events), except those step 1 soft-deleted
-- (`soft_ids`). Returns how many moved (archived) and their ids. Not granted to PUBLIC.
CREATE FUNCTION memory_internal._retention_archive_move(dry_run boolean, at timestamptz, dist boolean, soft_ids uuid[],
                                                        OUT archived bigint, OUT archive_ids uuid[])
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    g     record;
    actor constant text := 'system:retention';
    -- A real run locks the due rows; a dry run and Citus (`dist`) lock none (memory.run_retention).
    lock  constant text := CASE WHEN dry_run OR dist THEN '' ELSE ' FOR UPDATE OF o' END;
BEGIN
    archived := 0;
    archive_ids := '{}';
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
                            AND NOT ($3 AND memory_internal._held(o.org_id, o.user_id, o.id))'
                          || lock || ') a) d
          GROUP BY 1, d.part ORDER BY 1, d.part' USING at, soft_ids, dist
    LOOP
        PERFORM memory_internal._audit('memory.archive', jsonb_build_object('orgId', g.org_id, 'actorId', actor,
                'observationIds', to_jsonb(g.ids), 'count', g.n, 'dryRun', dry_run), g.org_id);
        archive_ids := archive_ids || g.ids;
        archived := archived + g.n;
        IF dist AND NOT dry_run THEN
            -- The group's rows, locked on their shard, move in one statement naming the org.
            PERFORM 1 FROM memory.observations o
              WHERE o.org_id OPERATOR(pg_catalog.=) g.org_id AND o.id OPERATOR(pg_catalog.=) ANY (g.ids) FOR UPDATE;
            -- By column name: the archive's archived_at comes before columns added to both
            -- later (memory.enable_embeddings' embedding).
            EXECUTE format(
           'WITH moved AS (
                DELETE FROM memory.observations o
                 WHERE o.org_id OPERATOR(pg_catalog.=) $1 AND o.id OPERATOR(pg_catalog.=) ANY ($2)
                   AND o.soft_deleted_at IS NULL AND o.archive_at OPERATOR(pg_catalog.<=) $3
                   AND NOT EXISTS (SELECT 1 FROM memory.legal_holds h
                                    WHERE h.released_at IS NULL AND h.org_id OPERATOR(pg_catalog.=) o.org_id
                                      AND memory_internal._hold_matches(h.observation_id::text, h.user_id, o.id::text, o.user_id))
                RETURNING o.*)
            INSERT INTO memory.observations_archive (%1$s, archived_at) SELECT %1$s, $3 FROM moved', memory_internal._archive_columns())
            USING g.org_id, g.ids, at;
        END IF;
    END LOOP;
    IF NOT dry_run AND NOT dist AND archived > 0 THEN
        EXECUTE format('INSERT INTO memory.observations_archive (%1$s, archived_at) SELECT %1$s, $1 FROM memory.observations
                         WHERE id IN (SELECT u.id FROM pg_catalog.unnest($2) u(id))', memory_internal._archive_columns())
            USING at, archive_ids;
        -- Archiving moves held rows too (their holds follow them to the archive).
        PERFORM memory_internal._hold_gate(true);
        DELETE FROM memory.observations o WHERE o.id IN (SELECT u.id FROM unnest(archive_ids) u(id));
        PERFORM memory_internal._hold_gate(false);
    END IF;
END $$;

-- memory.run_retention's step 4, soft deletes: expired rows of memory.observations_archive, except
-- those step 3 archived (`archive_ids`). Held or guard-refused rows are denied
-- (memory.purge.denied); the rest are soft-deleted. Returns how many were soft-deleted (asoft)
-- and denied (adenied). Not granted to PUBLIC.
CREATE FUNCTION memory_internal._retention_archive_soft(dry_run boolean, at timestamptz, dist boolean, archive_ids uuid[],
                                                        OUT asoft bigint, OUT adenied bigint)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    g     record;
    actor constant text := 'system:retention';
    -- A real run locks the due rows; a dry run and Citus (`dist`) lock none (memory.run_retention).
    lock  constant text := CASE WHEN dry_run OR dist THEN '' ELSE ' FOR UPDATE OF o' END;
    asoft_ids uuid[] := '{}';
BEGIN
    asoft := 0;
    adenied := 0;
    FOR g IN EXECUTE
        'SELECT d.org_id, d.classification, d.denied, pg_catalog.array_agg(d.id ORDER BY d.id) AS ids, pg_catalog.count(*) AS n
           FROM (SELECT a.*, (pg_catalog.row_number() OVER (PARTITION BY a.org_id, a.classification, a.denied ORDER BY a.id) OPERATOR(pg_catalog.-) 1)
                             OPERATOR(pg_catalog./) 1000 AS part
                   FROM (SELECT o.id, o.org_id, o.classification,
                                memory_internal._held(o.org_id, o.user_id, o.id) OR NOT memory_internal._guard_allows(s.retention_guard, o.id) AS denied
                           FROM memory.observations_archive o LEFT JOIN memory.org_settings s ON s.org_id OPERATOR(pg_catalog.=) o.org_id
                          WHERE o.soft_deleted_at IS NULL AND o.expires_at IS NOT NULL AND o.expires_at OPERATOR(pg_catalog.<=) $1
                            AND NOT EXISTS (SELECT 1 FROM unnest($2::uuid[]) x(id) WHERE x.id OPERATOR(pg_catalog.=) o.id)'
                          || lock || ') a) d
          GROUP BY 1, 2, 3, d.part ORDER BY 1, 2, 3, d.part' USING at, archive_ids
    LOOP
        IF g.denied THEN
            PERFORM memory_internal._audit('memory.purge.denied', jsonb_build_object('table', 'memory.observations_archive',
                    'orgId', g.org_id, 'actorId', actor, 'observationIds', to_jsonb(g.ids), 'classification', g.classification,
                    'stage', 'soft_delete', 'reason', 'legal hold or guard', 'dryRun', dry_run), g.org_id);
            adenied := adenied + g.n;
        ELSE
            asoft_ids := asoft_ids || g.ids;
            asoft := asoft + g.n;
            IF dist AND NOT dry_run THEN
                UPDATE memory.observations_archive o SET soft_deleted_at = at, soft_delete_reason = 'retention'
                 WHERE o.org_id OPERATOR(pg_catalog.=) g.org_id AND o.id OPERATOR(pg_catalog.=) ANY (g.ids)
                   AND o.soft_deleted_at IS NULL AND o.expires_at OPERATOR(pg_catalog.<=) at;
            END IF;
        END IF;
    END LOOP;
    IF NOT dry_run AND NOT dist AND asoft > 0 THEN
        UPDATE memory.observations_archive o SET soft_deleted_at = at, soft_delete_reason = 'retention'
         WHERE o.id IN (SELECT u.id FROM unnest(asoft_ids) u(id));
    END IF;
END $$;

-- memory.run_retention's step 4, hard deletes: soft-deleted rows of memory.observations_archive
-- past the grace. Held rows are denied (memory.purge.denied); the rest are hard-deleted with
-- memory.purge events naming the table. Returns how many were hard-deleted (ahard) and denied
-- (adenied). Not granted to PUBLIC.
CREATE FUNCTION memory_internal._retention_archive_hard(dry_run boolean, at timestamptz, dist boolean,
                                                        OUT ahard bigint, OUT adenied bigint)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    g     record;
    actor constant text := 'system:retention';
    -- A real run locks the due rows; a dry run and Citus (`dist`) lock none (memory.run_retention).
    lock  constant text := CASE WHEN dry_run OR dist THEN '' ELSE ' FOR UPDATE OF o' END;
    ahard_ids uuid[] := '{}';
BEGIN
    ahard := 0;
    adenied := 0;
    FOR g IN EXECUTE
        'SELECT d.org_id, d.classification, d.denied, pg_catalog.array_agg(d.id ORDER BY d.id) AS ids, pg_catalog.count(*) AS n,
                CASE WHEN pg_catalog.count(DISTINCT d.project_id) OPERATOR(pg_catalog.=) 1 THEN pg_catalog.min(d.project_id) END AS project_id,
                CASE WHEN pg_catalog.count(DISTINCT d.workspace_id) OPERATOR(pg_catalog.=) 1 THEN pg_catalog.min(d.workspace_id) END AS workspace_id
           FROM (SELECT a.*, (pg_catalog.row_number() OVER (PARTITION BY a.org_id, a.classification, a.denied ORDER BY a.id) OPERATOR(pg_catalog.-) 1)
                             OPERATOR(pg_catalog./) 1000 AS part
                   FROM (SELECT o.id, o.org_id, o.project_id, o.workspace_id, o.classification,
                                memory_internal._held(o.org_id, o.user_id, o.id) AS denied
                           FROM memory.observations_archive o
                          WHERE o.soft_deleted_at IS NOT NULL AND o.purge_after IS NOT NULL AND o.purge_after OPERATOR(pg_catalog.<=) $1
                            AND memory_internal._purge_due(o.soft_deleted_at, o.purge_after, o.expires_at, $1)'
                          || lock || ') a) d
          GROUP BY 1, 2, 3, d.part ORDER BY 1, 2, 3, d.part' USING at
    LOOP
        IF g.denied THEN
            PERFORM memory_internal._audit('memory.purge.denied', jsonb_build_object('table', 'memory.observations_archive',
                    'orgId', g.org_id, 'actorId', actor, 'observationIds', to_jsonb(g.ids), 'classification', g.classification,
                    'stage', 'hard_delete', 'reason', 'legal hold', 'dryRun', dry_run), g.org_id);
            adenied := adenied + g.n;
        ELSE
            PERFORM memory_internal._audit('memory.purge', jsonb_build_object('table', 'memory.observations_archive',
                    'workspaceId', g.workspace_id, 'actorId', actor,
                    'orgId', g.org_id, 'projectId', g.project_id, 'observationIds', to_jsonb(g.ids),
                    'retentionPolicyId', (SELECT p.id FROM memory.retention_policies p
                                           WHERE p.tier = g.classification AND (p.org_id = g.org_id OR p.org_id IS NULL)
                                           ORDER BY p.org_id NULLS LAST LIMIT 1),
                    'classification', g.classification, 'dryRun', dry_run), g.org_id, g.project_id, g.workspace_id);
            ahard_ids := ahard_ids || g.ids;
            ahard := ahard + g.n;
            IF dist AND NOT dry_run THEN
                DELETE FROM memory.observations_archive o
                 WHERE o.org_id OPERATOR(pg_catalog.=) g.org_id AND o.id OPERATOR(pg_catalog.=) ANY (g.ids)
                   AND o.soft_deleted_at IS NOT NULL AND o.purge_after OPERATOR(pg_catalog.<=) at
                   AND memory_internal._purge_due(o.soft_deleted_at, o.purge_after, o.expires_at, at)
                   AND NOT EXISTS (SELECT 1 FROM memory.legal_holds h
                                    WHERE h.released_at IS NULL AND h.org_id OPERATOR(pg_catalog.=) o.org_id
                                      AND memory_internal._hold_matches(h.observation_id::text, h.user_id, o.id::text, o.user_id));
            END IF;
        END IF;
    END LOOP;
    IF NOT dry_run AND NOT dist AND ahard > 0 THEN
        DELETE FROM memory.observations_archive o WHERE o.id IN (SELECT u.id FROM unnest(ahard_ids) u(id));
    END IF;
END $$;

-- memory.run_retention's step 5: governed application tables with stamps and a soft-delete
-- column, each swept by memory_internal._retention_sweep. Returns the counts of each table swept
-- (tables), the tables skipped (no soft-delete or id column), locked by another session and
-- failed, and the totals over them (soft, hard, denied). Not granted to PUBLIC.
CREATE FUNCTION memory_internal._retention_tables(dry_run boolean, at timestamptz,
                                                  OUT tables jsonb, OUT skipped jsonb, OUT locked jsonb, OUT failed jsonb,
                                                  OUT soft bigint, OUT hard bigint, OUT denied bigint)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    g     record;
    r     jsonb;
BEGIN
    tables := '{}';
    skipped := '[]';
    locked := '[]';
    failed := '{}';
    soft := 0;
    hard := 0;
    denied := 0;
    FOR g IN SELECT t.table_name, t.options FROM memory.governed_tables t
              WHERE NOT t.builtin AND jsonb_typeof(t.options->'stamps') = 'object' ORDER BY t.table_name::text LOOP
        IF g.options->'stamps'->>'soft_deleted_at' IS NULL OR g.options->>'id' IS NULL THEN
            skipped := skipped || to_jsonb(g.table_name::text);
            CONTINUE;
        END IF;
        -- A table another session holds locked (a writer's LOCK TABLE, DDL) is not waited for:
        -- it is listed under locked_tables and swept by the next run.
        -- One table's failure (a column renamed since govern, the owner's trigger raising) is
        -- reported and does not stop the others.
        BEGIN
            IF NOT memory_internal._lock_nowait(g.table_name, CASE WHEN dry_run THEN 'ACCESS SHARE' ELSE 'ROW EXCLUSIVE' END) THEN
                locked := locked || to_jsonb(g.table_name::text);
                CONTINUE;
            END IF;
            r := memory_internal._retention_sweep(g.table_name, g.options, dry_run, at);
        EXCEPTION WHEN OTHERS THEN
            failed := failed || jsonb_build_object(g.table_name::text, jsonb_build_object('sqlstate', SQLSTATE, 'message', SQLERRM));
            CONTINUE;
        END;
        tables := tables || jsonb_build_object(g.table_name::text, r);
        soft := soft + (r->>'soft_deleted')::bigint;
        hard := hard + (r->>'hard_deleted')::bigint;
        denied := denied + (r->>'denied')::bigint;
    END LOOP;
END $$;

CREATE FUNCTION memory.run_retention(dry_run boolean DEFAULT false, at timestamptz DEFAULT now())
RETURNS jsonb LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp SET client_min_messages = warning
AS $$
DECLARE
    soft     bigint;
    hard     bigint;
    archived bigint;
    denied   bigint;
    n        bigint;
    tables   jsonb;
    skipped  jsonb;
    locked   jsonb;
    failed   jsonb;
    soft_ids    uuid[];
    archive_ids uuid[];
    items    bigint;
    asoft    bigint;
    ahard    bigint;
    adenied  bigint;
    ts       bigint;
    th       bigint;
    td       bigint;
    -- Citus (docs/design.md#scale-out): the observations are distributed by org.
    dist     constant boolean := memory_internal._citus_distributed('memory.observations');
BEGIN
    PERFORM memory_internal._check_at(at, 'memory.run_retention');
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
    -- Each step below is a function of its own (memory_internal._retention_hot_soft, ...), in
    -- this order: its state comes in as arguments and goes out as its results.

    -- 0. Items whose ttl has run out (memory.purge_expired for every org): deleted, not held ones.
    items := memory_internal._purge_items(NULL, at, dry_run);

    -- 1. Expired live rows: held or refused by the org's guard -> denied; the rest -> soft delete.
    SELECT s.soft, s.denied, s.soft_ids INTO soft, denied, soft_ids FROM memory_internal._retention_hot_soft(dry_run, at, dist) s;

    -- 2. Past the grace: hard delete, memory.purge events per org and tier (the documented payload, docs/design.md#retention).
    SELECT s.hard, s.denied INTO hard, n FROM memory_internal._retention_hot_hard(dry_run, at, dist) s;
    denied := denied + n;

    -- 3. Live rows past archive_at move to the archive (held rows move too: the archive keeps
    -- them; on Citus they stay until the hold ends); rows this run soft-deletes are not archived
    -- by it (a dry run predicts that too).
    SELECT s.archived, s.archive_ids INTO archived, archive_ids FROM memory_internal._retention_archive_move(dry_run, at, dist, soft_ids) s;

    -- 4. The archive follows its rows' schedule (the stamps move with them): archived rows past
    -- expires_at are soft-deleted, held or guard-refused ones skipped with memory.purge.denied;
    -- after the grace they are hard-deleted with memory.purge, like hot rows (events name the
    -- table). A held expired row moved to the archive is swept by the first run after its hold
    -- is released. Rows this run archived are not swept by it (a dry run predicts that too).
    -- On Citus each org's rows change in a statement naming the org, checking again that they
    -- are still due (and, for the hard delete, not held since), as above.
    SELECT s.asoft, s.adenied INTO asoft, adenied FROM memory_internal._retention_archive_soft(dry_run, at, dist, archive_ids) s;
    SELECT s.ahard, s.adenied INTO ahard, n FROM memory_internal._retention_archive_hard(dry_run, at, dist) s;
    adenied := adenied + n;
    soft := soft + asoft;
    hard := hard + ahard;
    denied := denied + adenied;

    -- 5. Governed application tables with stamps and a soft-delete column.
    SELECT s.tables, s.skipped, s.locked, s.failed, s.soft, s.hard, s.denied INTO tables, skipped, locked, failed, ts, th, td
      FROM memory_internal._retention_tables(dry_run, at) s;
    soft := soft + ts;
    hard := hard + th;
    denied := denied + td;

    RETURN jsonb_build_object('soft_deleted', soft, 'hard_deleted', hard, 'archived', archived, 'items_purged', items,
                              'denied', denied, 'dry_run', dry_run, 'at', at,
                              'archive', jsonb_build_object('soft_deleted', asoft, 'hard_deleted', ahard, 'denied', adenied),
                              'tables', tables, 'skipped_tables', skipped,
                              'locked_tables', locked, 'failed_tables', failed);
END $$;
COMMENT ON FUNCTION memory.run_retention(boolean, timestamptz) IS
  'Apply retention as of `at`: delete items whose ttl has run out (items_purged; not held ones), soft-delete expired live rows (held or guard-refused rows are skipped with memory.purge.denied), hard-delete past the grace with memory.purge, archive past archive_at; archived rows follow the same schedule (counted under archive and in the totals). A governed application table another session holds locked is not waited for: it is listed under locked_tables and swept by the next run. A dry run changes nothing but reports and audits with dryRun true.';

SELECT pg_catalog.pg_extension_config_dump('memory.legal_holds', '');
SELECT pg_catalog.pg_extension_config_dump('memory.observations_archive', '');
