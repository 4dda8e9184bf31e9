-- Feedback weights (docs/design.md#feedback-weights): EMA per session outcome, weight history, misleading diagnostics, recall.

CREATE TABLE memory.org_settings (
    org_id        text PRIMARY KEY,
    alpha_success float8 CHECK (alpha_success > 0 AND alpha_success <= 1),
    alpha_failure float8 CHECK (alpha_failure > 0 AND alpha_failure <= 1),
    bfsi_mode     boolean NOT NULL DEFAULT false,
    updated_at    timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE memory.org_settings IS 'Per-org overrides: EMA alphas (NULL = the memory.alpha_* settings), BFSI mode.';

CREATE TABLE memory.observation_weight_history (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    observation_id  uuid NOT NULL,
    session_id      text NOT NULL,
    outcome         memory.outcome NOT NULL,
    previous_weight float8 NOT NULL,
    new_weight      float8 NOT NULL,
    alpha           float8 NOT NULL,
    org_id          text NOT NULL,
    project_id      text,
    recorded_at     timestamptz NOT NULL DEFAULT now(),
    -- Each (session, observation) pair of an org is applied once.
    UNIQUE (session_id, org_id, observation_id)
);
CREATE INDEX observation_weight_history_obs ON memory.observation_weight_history (observation_id);
COMMENT ON TABLE memory.observation_weight_history IS 'One row per applied weight update; alpha is the one used, doubled for misleading observations.';

-- Weights are finite and non-negative (NaN and infinities written by hand are refused: 23514).
ALTER TABLE memory.observations ADD CONSTRAINT observations_weight_valid CHECK (weight >= 0 AND weight < 'Infinity'::float8);
-- Full-text index for recall, on the words kept with the row.
CREATE INDEX observations_fts ON memory.observations USING gin (content_tsv);

CREATE FUNCTION memory.ema(previous float8, outcome memory.outcome, alpha_success float8 DEFAULT 0.1, alpha_failure float8 DEFAULT 0.15)
RETURNS float8 LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
AS $$ SELECT memory_internal._ema(previous, outcome::pg_catalog.text, alpha_success, alpha_failure) $$;
COMMENT ON FUNCTION memory.ema(float8, memory.outcome, float8, float8) IS
  'previous × (1 − α) + signal × α; signal 1 for accepted (α = alpha_success), 0 otherwise (α = alpha_failure). α outside (0, 1] or a non-finite weight: 22023.';

CREATE FUNCTION memory.record_outcome(session_id text, outcome memory.outcome, observation_ids uuid[])
RETURNS TABLE (observation_id uuid, previous_weight float8, new_weight float8, alpha float8, applied boolean, reason text)
LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$ SELECT * FROM memory_internal._record_outcome(session_id, outcome::pg_catalog.text, observation_ids) $$;
COMMENT ON FUNCTION memory.record_outcome(text, memory.outcome, uuid[]) IS
  'Apply one session outcome to observations by EMA, once per (session, observation); one memory.feedback event per tenant. reason: applied, already_recorded, duplicate_in_call, not_found, soft_deleted, non_finite_weight.';

CREATE FUNCTION memory.misleading_observations(org_id text DEFAULT NULL)
RETURNS TABLE (observation_id uuid, failed_sessions int, successful_sessions int, weight float8)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- PL/pgSQL, grouped by org too: on Citus (docs/design.md#scale-out) the query then runs whole on each shard
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
    HAVING memory_internal._is_misleading(count(DISTINCT h.session_id) FILTER (WHERE h.outcome OPERATOR(pg_catalog.<>) 'accepted'),
                                 count(DISTINCT h.session_id) FILTER (WHERE h.outcome OPERATOR(pg_catalog.=) 'accepted'))
     ORDER BY 2 DESC, 1;
END $$;
COMMENT ON FUNCTION memory.misleading_observations(text) IS
  'Live observations with at least 3 distinct failed sessions and no successful one.';

SELECT pg_catalog.pg_extension_config_dump('memory.org_settings', '');
SELECT pg_catalog.pg_extension_config_dump('memory.observation_weight_history', '');
