-- Retention policies (SPEC §4, seeds feedback-retention-audit and rt-005): the schedules and their
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

CREATE FUNCTION memory._check_retention_policy()
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
    FOR EACH ROW EXECUTE FUNCTION memory._check_retention_policy();

-- The seed's platform schedule.
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
COMMENT ON TABLE memory.memory_type_policies IS 'rt-005 schedule per memory type: TTL, archive age, cleanup mode.';

-- BFSI strict mode keeps restricted memories 7 years (SR 11-7), whatever else says.
CREATE FUNCTION memory.retention_policy(org_id text, tier memory.classification)
RETURNS TABLE (retention_days int, soft_delete_grace_days int, source text)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p    record;
    bfsi boolean;
BEGIN
    IF tier IS NULL THEN
        RAISE EXCEPTION 'memory.retention_policy needs a tier' USING ERRCODE = '22023';
    END IF;
    SELECT r.retention_days, r.soft_delete_grace_days, 'org' AS src INTO p
      FROM memory.retention_policies r WHERE r.org_id = retention_policy.org_id AND r.tier = retention_policy.tier;
    IF NOT FOUND THEN
        SELECT r.retention_days, r.soft_delete_grace_days, 'platform' AS src INTO p
          FROM memory.retention_policies r WHERE r.org_id IS NULL AND r.tier = retention_policy.tier;
    END IF;
    SELECT s.bfsi_mode INTO bfsi FROM memory.org_settings s WHERE s.org_id = retention_policy.org_id;
    IF tier = 'restricted' AND coalesce(bfsi, false) THEN
        retention_days := 2555; soft_delete_grace_days := coalesce(p.soft_delete_grace_days, 7); source := 'bfsi';
    ELSE
        retention_days := p.retention_days; soft_delete_grace_days := coalesce(p.soft_delete_grace_days, 0);
        source := coalesce(p.src, 'platform');
    END IF;
    RETURN NEXT;
END $$;
COMMENT ON FUNCTION memory.retention_policy(text, memory.classification) IS
  'The retention that applies to a tier in an org: the org override, else the platform default; BFSI mode keeps restricted 2555 days. source: org, platform or bfsi.';

CREATE FUNCTION memory.is_expired(created_at timestamptz, tier memory.classification, org_id text DEFAULT NULL, at timestamptz DEFAULT now())
RETURNS boolean LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE WHEN is_expired.created_at IS NULL OR is_expired.at IS NULL THEN NULL
                WHEN p.retention_days IS NULL THEN false
                ELSE is_expired.at >= is_expired.created_at + make_interval(days => p.retention_days) END
      FROM memory.retention_policy(is_expired.org_id, is_expired.tier) p
$$;
COMMENT ON FUNCTION memory.is_expired(timestamptz, memory.classification, text, timestamptz) IS
  'True when `at` is at or past created_at + the retention days of the tier (false for indefinite retention).';

-- Stamping caches these per backend: any change tells every backend to drop its copy.
CREATE TRIGGER memory_rules_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON memory.retention_policies
    FOR EACH STATEMENT EXECUTE FUNCTION memory.rules_changed();
CREATE TRIGGER memory_rules_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON memory.memory_type_policies
    FOR EACH STATEMENT EXECUTE FUNCTION memory.rules_changed();
CREATE TRIGGER memory_rules_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON memory.org_settings
    FOR EACH STATEMENT EXECUTE FUNCTION memory.rules_changed();

SELECT pg_catalog.pg_extension_config_dump('memory.retention_policies', 'WHERE org_id IS NOT NULL');
