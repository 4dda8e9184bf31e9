-- Tenants bound to roles (docs/design.md#trust-boundary). A role may act for the orgs granted to it (or to a role it
-- inherits from); '*' grants every org. A session acts for the org in the setting memory.org_id
-- when its role may act for it, or, without the setting, for its role's only org. Row-level
-- security on every table holding tenant rows compares org_id with that acting org; functions
-- that take an org, or read the audit log, ask memory_internal._may_act_for.
--
-- Who "the role" is: memory_internal._caller(), the session's role (SET ROLE or the login), which
-- SECURITY DEFINER functions do not change (see src/trust.rs for the two exceptions).
-- Superusers and members of the extension owner are unrestricted: they may act for every org and
-- write the platform chain ('').

-- memory_internal._blank(t), whether a text argument is missing (NULL, empty, or only white
-- space), is src/trust.rs's.

CREATE TABLE memory.org_grants (
    role_name  name NOT NULL,
    org_id     text NOT NULL CHECK (org_id = '*' OR (btrim(org_id) <> '' AND length(org_id) <= 200)),
    granted_by name NOT NULL,
    granted_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (role_name, org_id),
    -- Clearance (docs/design.md#application-roles): the most sensitive tier the role reads in the org ('restricted': all).
    max_tier   memory.classification NOT NULL DEFAULT 'restricted'
);
REVOKE ALL ON memory.org_grants FROM PUBLIC;
-- Backends cache who may act for which org; any change here tells them to drop it.
CREATE TRIGGER memory_rules_changed AFTER INSERT OR UPDATE OR DELETE ON memory.org_grants
    FOR EACH ROW EXECUTE FUNCTION memory.rules_changed();
CREATE TRIGGER memory_rules_changed_truncate AFTER TRUNCATE ON memory.org_grants
    FOR EACH STATEMENT EXECUTE FUNCTION memory.rules_changed();
COMMENT ON TABLE memory.org_grants IS
  'Tenant binding: the orgs each role may act for (''*'' = every org). Written by memory.grant_org / memory.revoke_org; roles by name, so a dump restores onto another cluster''s roles of the same names.';
COMMENT ON COLUMN memory.org_grants.max_tier IS
  'Clearance: the most sensitive tier the role reads in the org (row-level security on the observations, memory.recall). Of several grants that apply to a role in one org (its own, its parents'', ''*''), the highest counts.';

CREATE FUNCTION memory_internal._is_unrestricted_role(r oid)
RETURNS boolean LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
    SELECT r IS NOT NULL AND (
           coalesce((SELECT a.rolsuper FROM pg_catalog.pg_authid a WHERE a.oid OPERATOR(pg_catalog.=) r), false)
        OR coalesce((SELECT pg_catalog.pg_has_role(r, e.extowner, 'USAGE') FROM pg_catalog.pg_extension e
                      WHERE e.extname OPERATOR(pg_catalog.=) 'memory_ext'), false))
$$;

-- Whether role r may act for org ('' or NULL: the platform chain, which only unrestricted roles
-- and '*' roles write).
CREATE FUNCTION memory_internal._may_act_for_role(r oid, org text)
RETURNS boolean LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
    SELECT r IS NOT NULL AND (memory_internal._is_unrestricted_role(r) OR EXISTS (
        SELECT 1 FROM memory.org_grants g JOIN pg_catalog.pg_roles ro ON ro.rolname OPERATOR(pg_catalog.=) g.role_name
         WHERE (g.org_id OPERATOR(pg_catalog.=) '*' OR g.org_id OPERATOR(pg_catalog.=) coalesce(org, ''))
           AND pg_catalog.pg_has_role(r, ro.oid, 'USAGE')))
$$;

-- memory_internal._may_act_for(org), about the caller only, is src/trust.rs's: it caches the
-- answer of _may_act_for_role per caller and org until the grants or a role change.

CREATE FUNCTION memory_internal._is_unrestricted()
RETURNS boolean LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$ SELECT memory_internal._is_unrestricted_role(memory_internal._caller()) $$;

-- Clearance (docs/design.md#application-roles): the most sensitive tier role r reads in org, or NULL when it may not act
-- for the org. Grants are unioned as PostgreSQL unions a role's privileges: of the grants that
-- apply (the role's own, those of roles it inherits from, '*' grants), the highest max_tier
-- counts. Unrestricted roles read every tier.
CREATE FUNCTION memory_internal._max_tier_role(r oid, org text)
RETURNS memory.classification LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
    SET citus.allow_nested_distributed_execution = on
AS $$
    SELECT CASE WHEN r IS NULL THEN NULL
                WHEN memory_internal._is_unrestricted_role(r) THEN 'restricted'::memory.classification
                ELSE (SELECT pg_catalog.max(g.max_tier)
                        FROM memory.org_grants g JOIN pg_catalog.pg_roles ro ON ro.rolname OPERATOR(pg_catalog.=) g.role_name
                       WHERE (g.org_id OPERATOR(pg_catalog.=) '*' OR g.org_id OPERATOR(pg_catalog.=) coalesce(org, ''))
                         AND pg_catalog.pg_has_role(r, ro.oid, 'USAGE')) END
$$;

-- The caller's clearance in the org it acts for (NULL without one): the restrictive policy
-- `clearance` of the observation tables calls it once per statement, as an InitPlan. About the
-- caller only, so open to every role. Through memory_internal._clearance (src/trust.rs: cached per
-- caller and org, refilled under a snapshot taken then), so a clearance lowered by another
-- session reaches a running REPEATABLE READ transaction from its next statement, as a
-- revocation does, rather than the grant its snapshot still shows.
CREATE FUNCTION memory_internal._max_tier()
RETURNS memory.classification LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
    SET citus.allow_nested_distributed_execution = on
AS $$ SELECT memory_internal._clearance(memory_internal._acting_org())::memory.classification $$;

-- Time travel is the owner's: an `at` more than memory_internal._max_clock_skew() (5 minutes,
-- memory_core::retention::MAX_CLOCK_SKEW_US) after the transaction time, passed to a maintenance or decay function, is for
-- the extension owner and superusers (tests, backfills); anyone else gets 22023. Returns `at`.
CREATE FUNCTION memory_internal._check_at(at timestamptz, fn text)
RETURNS timestamptz LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF at OPERATOR(pg_catalog.>) (now() OPERATOR(pg_catalog.+) memory_internal._max_clock_skew()) AND NOT memory_internal._is_unrestricted() THEN
        RAISE EXCEPTION '%: at (%) is more than % minutes after the transaction time', fn, at,
            pg_catalog.date_part('epoch', memory_internal._max_clock_skew()) OPERATOR(pg_catalog./) 60 USING ERRCODE = '22023',
            HINT = 'Omit at to run for now; a later time is for the extension owner and superusers (tests, backfills).';
    END IF;
    RETURN at;
END $$;

-- The org the session acts for: memory.org_id when the role may act for it; else the role's only
-- org (a '*' grant is not one org); else NULL, which row-level security matches with nothing.
-- On Citus the tenant policies of distributed tables call it on the workers' shards, where it
-- reads the grants, a reference table, from the node's own copy: Citus allows that read from a
-- query on a shard only with citus.allow_nested_distributed_execution (a setting of its own,
-- unknown and without effect where Citus is not loaded).
CREATE FUNCTION memory_internal._acting_org()
RETURNS text LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
    SET citus.allow_nested_distributed_execution = on
AS $$
DECLARE
    r   oid := memory_internal._caller();
    s   text := nullif(current_setting('memory.org_id', true), '');
    one text;
    n   int;
BEGIN
    IF r IS NULL THEN
        RETURN NULL;
    END IF;
    -- An org the role may not act for is refused, never a silent NULL org (a write would then
    -- fail row-level security with no word of why).
    IF s IS NOT NULL THEN
        -- (r is the caller: memory_internal._may_act_for answers for it, from the cache per org.)
        IF NOT memory_internal._may_act_for(s) THEN
            RAISE EXCEPTION 'role % may not act for org "%" (memory.org_id)', r::regrole, s USING ERRCODE = '42501',
                HINT = 'Bind the role to the org with memory.grant_org(role, org) (an org admin or the extension owner), or set memory.org_id to one of memory.my_orgs().';
        END IF;
        RETURN s;
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
    -- (The grants above are read under the transaction's snapshot: the org is still the role's
    -- now, as memory_internal._may_act_for reads it, or none, so a grant revoked since a
    -- REPEATABLE READ transaction began no longer counts there.)
    RETURN CASE WHEN n OPERATOR(pg_catalog.=) 1 AND one OPERATOR(pg_catalog.<>) '*' AND memory_internal._may_act_for(one) THEN one END;
END $$;

-- The orgs a definer function may work on for its caller: NULL means every org (an unrestricted
-- caller with no memory.org_id set); otherwise the acting org, or 42501 when there is none.
CREATE FUNCTION memory_internal._scope_org()
RETURNS text LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE a text := memory_internal._acting_org();
BEGIN
    IF a IS NOT NULL THEN
        RETURN a;
    END IF;
    IF memory_internal._is_unrestricted() THEN
        RETURN NULL;
    END IF;
    RAISE EXCEPTION 'role % acts for no org', coalesce(memory_internal._caller()::regrole::text, '(none)')
        USING ERRCODE = '42501', HINT = 'SET memory.org_id to one of the role''s orgs (see memory.grant_org).';
END $$;

-- 42501 unless the caller may act for org, and for the org memory.org_id names when set
-- (memory_internal._check_org_setting: never a silent or substituted org); returns org.
CREATE FUNCTION memory_internal._require_org(org text)
RETURNS text LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM memory_internal._check_org_setting();
    IF NOT memory_internal._may_act_for(org) THEN
        RAISE EXCEPTION 'role % may not act for org "%"', coalesce(memory_internal._caller()::regrole::text, '(none)'), coalesce(org, '')
            USING ERRCODE = '42501', HINT = 'An owner or a memory_admin of the org binds roles to it with memory.grant_org(role, org_id).';
    END IF;
    RETURN org;
END $$;

CREATE FUNCTION memory.acting_org()
RETURNS text LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
AS $$ SELECT memory_internal._acting_org() $$;
COMMENT ON FUNCTION memory.acting_org() IS
  'The org this session acts for: memory.org_id (42501 when the role may not act for it), else the role''s only org, else NULL (row-level security then shows nothing).';

CREATE FUNCTION memory.my_orgs()
RETURNS SETOF text LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
    SELECT DISTINCT g.org_id FROM memory.org_grants g JOIN pg_catalog.pg_roles ro ON ro.rolname OPERATOR(pg_catalog.=) g.role_name
     WHERE pg_catalog.pg_has_role(memory_internal._caller(), ro.oid, 'USAGE') ORDER BY 1
$$;
COMMENT ON FUNCTION memory.my_orgs() IS 'The orgs granted to the calling role (directly or through roles it inherits); ''*'' means every org.';

-- Owner, superuser, or a memory_admin member who may act for the org ('*' only for the first
-- two) and, for a grant or revoke, holds ADMIN OPTION on the target role.
CREATE FUNCTION memory_internal._may_administer(org text, target oid DEFAULT NULL)
RETURNS boolean LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
    SELECT memory_internal._is_unrestricted() OR (
        org OPERATOR(pg_catalog.<>) '*'
        AND (target IS NULL OR (
            -- an org admin binds only roles it administers, never memory_ext's group roles
            pg_catalog.pg_has_role(memory_internal._caller(), target, 'MEMBER WITH ADMIN OPTION')
            AND (SELECT r.rolname FROM pg_catalog.pg_roles r WHERE r.oid OPERATOR(pg_catalog.=) target)
                OPERATOR(pg_catalog.<>) ALL (ARRAY['memory_reader', 'memory_writer', 'memory_admin']::name[])))
        AND pg_catalog.to_regrole('memory_admin') IS NOT NULL
        AND memory_internal._caller() IS NOT NULL
        AND pg_catalog.pg_has_role(memory_internal._caller(), 'memory_admin', 'USAGE')
        AND memory_internal._may_act_for(org))
$$;

CREATE FUNCTION memory.grant_org(role regrole, org_id text, max_tier memory.classification DEFAULT 'restricted')
RETURNS boolean LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n   int;
    own memory.classification;
BEGIN
    IF role IS NULL OR org_id IS NULL OR (org_id OPERATOR(pg_catalog.<>) '*' AND (memory_internal._blank(org_id) OR length(org_id) > 200)) THEN
        RAISE EXCEPTION 'memory.grant_org needs a role and an org id (1-200 characters, or ''*'')' USING ERRCODE = '22023';
    END IF;
    IF max_tier IS NULL THEN
        RAISE EXCEPTION 'memory.grant_org needs a max_tier' USING ERRCODE = '22023',
            HINT = 'Omit max_tier to clear the role for every tier (''restricted''), or pass public, internal or confidential.';
    END IF;
    IF NOT memory_internal._may_administer(org_id, role::oid) THEN
        RAISE EXCEPTION 'role % may not grant org "%"', coalesce(memory_internal._caller()::regrole::text, '(none)'), org_id
            USING ERRCODE = '42501', HINT = 'The extension owner, a superuser, or a memory_admin of that org holding ADMIN OPTION on the role grants it; only the first two grant ''*'' or bind memory_ext''s group roles.';
    END IF;
    -- An org admin clears roles no higher than itself: a role it administers could otherwise
    -- become its way to the tiers above its own.
    own := memory_internal._max_tier_role(memory_internal._caller(), org_id);
    IF own IS NULL OR max_tier OPERATOR(pg_catalog.>) own THEN
        RAISE EXCEPTION 'role % may not clear a role for tier % in org "%" (its own clearance there is %)',
            coalesce(memory_internal._caller()::regrole::text, '(none)'), max_tier, org_id, coalesce(own::text, 'none')
            USING ERRCODE = '42501', HINT = 'Pass a max_tier at most the granting role''s own, or have the extension owner grant it.';
    END IF;
    -- A new grant, or a grant of the same org with another tier (the tier given replaces it).
    INSERT INTO memory.org_grants AS g (role_name, org_id, granted_by, max_tier)
    SELECT r.rolname, grant_org.org_id, coalesce(memory_internal._caller()::regrole::text, current_user), grant_org.max_tier
      FROM pg_catalog.pg_roles r WHERE r.oid OPERATOR(pg_catalog.=) grant_org.role::oid
    ON CONFLICT ON CONSTRAINT org_grants_pkey DO UPDATE SET max_tier = excluded.max_tier, granted_by = excluded.granted_by, granted_at = excluded.granted_at
     WHERE g.max_tier OPERATOR(pg_catalog.<>) excluded.max_tier;
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n > 0 THEN
        PERFORM memory_internal._audit_append_system('memory.org.grant',
            jsonb_build_object('role', role::text, 'orgId', org_id, 'maxTier', max_tier), CASE WHEN org_id = '*' THEN NULL ELSE org_id END);
    END IF;
    RETURN n > 0;
END $$;
COMMENT ON FUNCTION memory.grant_org(regrole, text, memory.classification) IS
  'Bind a role to an org (''*'': every org), cleared to read tiers up to max_tier (default restricted: all). By the extension owner, a superuser, or a memory_admin of that org (who clears no higher than itself). True when the grant is new or its tier changed; audited as memory.org.grant.';

CREATE FUNCTION memory.revoke_org(role regrole, org_id text)
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
    IF NOT memory_internal._may_administer(org_id, role::oid) THEN
        RAISE EXCEPTION 'role % may not revoke org "%"', coalesce(memory_internal._caller()::regrole::text, '(none)'), org_id
            USING ERRCODE = '42501';
    END IF;
    DELETE FROM memory.org_grants g
     WHERE g.role_name OPERATOR(pg_catalog.=) rname
       AND g.org_id OPERATOR(pg_catalog.=) revoke_org.org_id;
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n > 0 THEN
        PERFORM memory_internal._audit_append_system('memory.org.revoke',
            jsonb_build_object('role', role::text, 'orgId', org_id), CASE WHEN org_id = '*' THEN NULL ELSE org_id END);
    END IF;
    RETURN n > 0;
END $$;
COMMENT ON FUNCTION memory.revoke_org(regrole, text) IS
  'Unbind a role from an org. By the extension owner, a superuser, or a memory_admin of that org. True when a grant was removed; audited as memory.org.revoke.';

REVOKE ALL ON FUNCTION memory_internal._is_unrestricted_role(oid), memory_internal._may_act_for_role(oid, text),
                       memory_internal._max_tier_role(oid, text),
                       memory.grant_org(regrole, text, memory.classification), memory.revoke_org(regrole, text),
                       memory_internal._open_governance_gate(oid), memory_internal._exec_as_table_owner(oid, text, text[]) FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('memory.org_grants', '');
