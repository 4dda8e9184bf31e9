-- Knowledge lifecycle (docs/design.md#knowledge-lifecycle): entities, claims, relationships, the
-- state machine, supersession, conflicts, staleness, re-check queue, decay, roles.

-- ------------------------------------------------------------------------------------------------
-- Rules (memory_core::lifecycle).

CREATE FUNCTION memory.can_transition("from" memory.lifecycle_state, "to" memory.lifecycle_state)
RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
AS $$ SELECT memory_internal._can_transition($1::pg_catalog.text, $2::pg_catalog.text) $$;
COMMENT ON FUNCTION memory.can_transition(memory.lifecycle_state, memory.lifecycle_state) IS
  'The transition table: pending -> active|retracted|archived; active -> superseded|retracted|archived; superseded|retracted -> archived; archived is terminal. A state to itself is not a transition (false); an UPDATE that keeps the state is a no-op.';

CREATE FUNCTION memory.source_tier(source text)
RETURNS int LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT memory_internal._source_tier(source) $$;
COMMENT ON FUNCTION memory.source_tier(text) IS
  'Source authority tier: 1 NEJM, JAMA, Cochrane, NCCN; 2 PubMed, Elsevier, Wiley, LWW, ClinicalTrials.gov, ClinVar, DrugBank; 3 patient-note, open-web, clinical-narrative and anything unknown or NULL. Case and punctuation are ignored.';

CREATE FUNCTION memory.is_stale(t_created timestamptz, freshness_days int, at timestamptz DEFAULT now())
RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
AS $$ SELECT memory_internal._is_stale(t_created, freshness_days, at) $$;
COMMENT ON FUNCTION memory.is_stale(timestamptz, int, timestamptz) IS
  'Older than freshness_days whole days at `at` (days rounded down). freshness_days < 0 raises 22023.';

-- ------------------------------------------------------------------------------------------------
-- Tables. Every row carries org_id; references stay inside one org (composite foreign keys).

CREATE TABLE memory.entities (
    id                uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    org_id            text NOT NULL,
    entity_type       text NOT NULL
                      CONSTRAINT entities_entity_type_check CHECK (entity_type IN ('concept', 'problem', 'intervention', 'outcome', 'population')),
    name              text NOT NULL,
    taxonomy_category text,
    ontology_codes    jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(ontology_codes) = 'array'),
    subject_id        text,
    origin            text NOT NULL DEFAULT 'human' CHECK (origin IN ('human', 'agent', 'import')),
    lifecycle_state   memory.lifecycle_state NOT NULL DEFAULT 'active',
    t_created         timestamptz NOT NULL DEFAULT now(),
    t_invalid         timestamptz,
    UNIQUE (org_id, id)
);
CREATE INDEX entities_retention_due ON memory.entities (t_created) WHERE lifecycle_state <> 'archived' AND subject_id IS NOT NULL;
COMMENT ON TABLE memory.entities IS
  'Knowledge-graph entities (concept, problem, intervention, outcome, population). subject_id is the person the entity is about (NULL for public ontology). No hard delete: retract or archive.';

CREATE TABLE memory.claims (
    id                             uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    org_id                         text NOT NULL,
    entity_id                      uuid NOT NULL,
    -- evidence and hypotheses, and the findings of the correlator, replicator and librarian
    -- agents (kept 180 days: memory_internal._knowledge_retention).
    kind                           text NOT NULL DEFAULT 'evidence'
                                   CONSTRAINT claims_kind_check CHECK (kind IN ('evidence', 'hypothesis', 'correlator', 'replicator', 'librarian')),
    claim_text                     text NOT NULL,
    supports                       text[] NOT NULL DEFAULT '{}',
    pii_fields                     text[] NOT NULL DEFAULT '{}',
    subject_id                     text,
    details                        jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(details) = 'object'),
    decay_at                       timestamptz,
    confidence_score               float8 NOT NULL DEFAULT 0.5
                                   CONSTRAINT claims_confidence_score_range CHECK (confidence_score >= 0 AND confidence_score <= 1),
    source                         text,
    lifecycle_state                memory.lifecycle_state NOT NULL DEFAULT 'pending',
    t_created                      timestamptz NOT NULL DEFAULT now(),
    t_invalid                      timestamptz,
    supersedes                     uuid,
    superseded_by                  uuid[] NOT NULL DEFAULT '{}',
    freshness_recheck_requested_at timestamptz,
    anonymized_at                  timestamptz,
    -- The screening field the claim answers (memory.completeness); NULL when it answers none.
    field                          text CONSTRAINT claims_field_check CHECK (field ~ '^[a-z][a-z0-9_]{0,62}$'),
    UNIQUE (org_id, id),
    FOREIGN KEY (org_id, entity_id) REFERENCES memory.entities (org_id, id),
    FOREIGN KEY (org_id, supersedes) REFERENCES memory.claims (org_id, id)
);
CREATE INDEX claims_entity ON memory.claims (entity_id, lifecycle_state);
CREATE INDEX claims_supersedes ON memory.claims (supersedes) WHERE supersedes IS NOT NULL;
-- The decay job's scan and the re-check job's scan read only live claims.
CREATE INDEX claims_decay_due ON memory.claims (decay_at) WHERE lifecycle_state IN ('pending', 'active') AND decay_at IS NOT NULL;
CREATE INDEX claims_active_recheck ON memory.claims (confidence_score, t_created) WHERE lifecycle_state = 'active';
-- memory.retrieve's full-text search reads only active claims.
CREATE INDEX claims_fts ON memory.claims USING gin (to_tsvector('english', claim_text)) WHERE lifecycle_state = 'active';
-- memory.retrieve reads an org's active claims created by its time (the vector list's exact read
-- for an org of a few thousand claims, and the list of an entity's claims): without this index the
-- planner ANDs the org's rows with claims_active_recheck's whole scan.
CREATE INDEX claims_org_active ON memory.claims (org_id, t_created) WHERE lifecycle_state = 'active';
-- Knowledge retention reads only what can come due: subject knowledge and agents' findings.
CREATE INDEX claims_retention_due ON memory.claims (t_created)
    WHERE lifecycle_state <> 'archived' AND (subject_id IS NOT NULL OR kind IN ('correlator', 'replicator', 'librarian'));
COMMENT ON TABLE memory.claims IS
  'Evidence statements about an entity. Claims start pending; content is immutable (insert a corrected claim with supersedes); no hard delete. pii_fields names what decay redacts: claim_text, subject_id, supports, source, details.<key>.';

CREATE TABLE memory.relationships (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    org_id      text NOT NULL,
    source_id   uuid NOT NULL,
    target_id   uuid NOT NULL,
    rel_type    text NOT NULL CHECK (rel_type ~ '^[a-z][a-z0-9_]{0,62}$'),
    attributes  jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(attributes) = 'object'),
    subject_id  text,
    decay_at    timestamptz,
    t_created   timestamptz NOT NULL DEFAULT now(),
    anonymized_at timestamptz,
    FOREIGN KEY (org_id, source_id) REFERENCES memory.entities (org_id, id),
    FOREIGN KEY (org_id, target_id) REFERENCES memory.entities (org_id, id)
);
CREATE INDEX relationships_source ON memory.relationships (source_id);
CREATE INDEX relationships_target ON memory.relationships (target_id);
CREATE INDEX relationships_decay_due ON memory.relationships (decay_at) WHERE decay_at IS NOT NULL AND anonymized_at IS NULL;
COMMENT ON TABLE memory.relationships IS
  'Typed edges between two entities of one org (e.g. intervention treats problem). A relationship with a subject_id carries PHI.';

CREATE TABLE memory.recheck_tasks (
    task_id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    org_id           text NOT NULL,
    claim_id         uuid NOT NULL REFERENCES memory.claims (id),
    agent_role       text NOT NULL DEFAULT 'critic',
    entity_context   uuid[] NOT NULL DEFAULT '{}',
    metadata         jsonb NOT NULL DEFAULT '{}',
    reason           text NOT NULL CONSTRAINT recheck_tasks_reason_check
                     CHECK (reason IN ('below_confidence', 'aged', 'below_confidence_and_aged', 'eroded', 'retracted_source')),
    confidence_score float8,
    enqueued_at      timestamptz NOT NULL DEFAULT now(),
    claimed_at       timestamptz,
    claimed_by       text,
    completed_at     timestamptz,
    outcome          text,
    -- The end of the lease the worker that claimed it last took (claimed_at + its lease): until
    -- then no other worker may claim it (memory.claim_recheck_tasks).
    lease_until      timestamptz
);
CREATE INDEX recheck_tasks_open ON memory.recheck_tasks (task_id) WHERE completed_at IS NULL;
CREATE INDEX recheck_tasks_claim ON memory.recheck_tasks (claim_id);
COMMENT ON TABLE memory.recheck_tasks IS
  'Critic re-check tasks enqueued by memory.freshness_recheck and by the replicator''s verdicts (memory.record_verdict); workers take them with memory.claim_recheck_tasks (FOR UPDATE SKIP LOCKED), each for a lease (lease_until), and close them with memory.complete_recheck_task.';

-- ------------------------------------------------------------------------------------------------
-- Guards.

-- Who may change a claim's state: members of memory_admin (see memory.setup_roles), the owner of
-- the table (the extension's functions run as it) and superusers.
CREATE FUNCTION memory_internal._is_knowledge_admin()
RETURNS boolean LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
AS $$
    SELECT pg_has_role(current_user, c.relowner, 'USAGE')
        OR (to_regrole('memory_admin') IS NOT NULL AND pg_has_role(current_user, 'memory_admin', 'USAGE'))
      FROM pg_class c WHERE c.oid = 'memory.claims'::regclass
$$;

-- No hard delete of entities or claims: delete is a transition. Decay alone removes hypotheses.
CREATE FUNCTION memory_internal._no_hard_delete()
RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- (memory_internal._table_of: on Citus the trigger fires on a shard of the table.)
    IF TG_OP = 'DELETE' AND memory_internal._table_of(TG_RELID) OPERATOR(pg_catalog.=) 'memory.claims'::regclass::oid
       AND memory_internal._knowledge_gate_open() THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'rows of % are never hard-deleted (% is not allowed)', memory_internal._table_of(TG_RELID)::regclass, TG_OP
        USING ERRCODE = 'MX006',
              HINT = 'Delete is a state transition: UPDATE ... SET lifecycle_state = ''retracted'' or ''archived''.';
END $$;
CREATE TRIGGER knowledge_no_hard_delete BEFORE DELETE ON memory.entities FOR EACH ROW EXECUTE FUNCTION memory_internal._no_hard_delete();
CREATE TRIGGER knowledge_no_hard_delete BEFORE DELETE ON memory.claims FOR EACH ROW EXECUTE FUNCTION memory_internal._no_hard_delete();
CREATE TRIGGER knowledge_no_truncate BEFORE TRUNCATE ON memory.entities FOR EACH STATEMENT EXECUTE FUNCTION memory_internal._no_hard_delete();
CREATE TRIGGER knowledge_no_truncate BEFORE TRUNCATE ON memory.claims FOR EACH STATEMENT EXECUTE FUNCTION memory_internal._no_hard_delete();

-- Entities: the name and identity are fixed once written; a state change stamps t_invalid when it
-- takes the entity out of circulation.
CREATE FUNCTION memory_internal._entities_guard()
RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NEW.id <> OLD.id OR NEW.org_id <> OLD.org_id OR NEW.name <> OLD.name OR NEW.entity_type <> OLD.entity_type
       OR NEW.subject_id IS DISTINCT FROM OLD.subject_id OR NEW.t_created <> OLD.t_created THEN
        RAISE EXCEPTION 'entity % cannot be edited in place (id, org_id, name, entity_type, subject_id, t_created are fixed)', OLD.id
            USING ERRCODE = '55000', HINT = 'Retract it and create a corrected entity.';
    END IF;
    -- A retirement the state machine refuses (memory_lifecycle raises MX001 next) is audited as
    -- a denied memory.govern.retire_attempt although the statement fails (docs/design.md#denied-attempts).
    IF NEW.lifecycle_state <> OLD.lifecycle_state AND NEW.lifecycle_state IN ('retracted', 'archived')
       AND NOT memory.can_transition(OLD.lifecycle_state, NEW.lifecycle_state) THEN
        PERFORM memory_internal._audit_denied('memory.govern.retire_attempt',
            jsonb_build_object('entityId', OLD.id, 'actionDetail', 'denied', 'fromState', OLD.lifecycle_state,
                               'toState', NEW.lifecycle_state, 'deniedRole', current_user::text)::text, OLD.org_id);
    END IF;
    IF NEW.lifecycle_state <> OLD.lifecycle_state AND memory_internal._stamps_t_invalid(NEW.lifecycle_state::text) THEN
        NEW.t_invalid := coalesce(NEW.t_invalid, now());
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER knowledge_10_guard BEFORE UPDATE ON memory.entities FOR EACH ROW EXECUTE FUNCTION memory_internal._entities_guard();

-- Claims on insert: start pending, known pii_fields names, and supersession in the same statement.
-- SECURITY DEFINER so that a writer's insert may flip the superseded claim, which writers cannot
-- UPDATE themselves; it touches only that claim.
-- On Citus it fires on the org's shard of the claims, and reads and updates the superseded claim
-- there, naming its org (the one statement a trigger on a shard may send: to its own shard group).
CREATE FUNCTION memory_internal._claims_before_insert()
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
        IF memory_internal._table_of(TG_RELID) OPERATOR(pg_catalog.<>) 'memory.claims'::regclass::oid THEN
            RAISE EXCEPTION 'memory_internal._claims_before_insert is the BEFORE INSERT trigger of memory.claims' USING ERRCODE = '39P01';
        END IF;
    END IF;
    IF TG_WHEN OPERATOR(pg_catalog.<>) 'BEFORE' OR TG_OP OPERATOR(pg_catalog.<>) 'INSERT' OR TG_LEVEL OPERATOR(pg_catalog.<>) 'ROW' THEN
        RAISE EXCEPTION 'memory_internal._claims_before_insert is the BEFORE INSERT trigger of memory.claims' USING ERRCODE = '39P01';
    END IF;
    PERFORM memory_internal._require_org(NEW.org_id);
    -- A restore (memory.restore_mode, superuser-only) loads claims as they were: any state, their
    -- supersession links and stamps.
    IF memory_internal._restore_mode() THEN
        RETURN NEW;
    END IF;
    IF NEW.lifecycle_state IS DISTINCT FROM 'pending' THEN
        RAISE EXCEPTION 'invalid lifecycle transition from (new) to %: a claim starts pending', NEW.lifecycle_state
            USING ERRCODE = 'MX001', HINT = 'Insert it pending; a memory_admin promotes it with UPDATE ... SET lifecycle_state = ''active''.';
    END IF;
    bad := memory_internal._pii_unknown(NEW.pii_fields);
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
    IF NOT memory_internal._supersession_tier_allowed(NEW.source, old_claim.source) THEN
        RAISE EXCEPTION 'a tier-3 source (%) may not supersede a tier-1 claim (%)', coalesce(NEW.source, 'unknown'), old_claim.source
            USING ERRCODE = 'MX005', HINT = 'Tier-1: NEJM, JAMA, Cochrane, NCCN. Supersede it with a tier-1 or tier-2 source, or ask a memory_admin to retract it.';
    END IF;
    PERFORM memory_internal._set_superseding(NEW.id);
    UPDATE memory.claims c
       SET lifecycle_state = 'superseded', t_invalid = now(), superseded_by = c.superseded_by || NEW.id
     WHERE c.org_id = old_claim.org_id AND c.id = old_claim.id;
    PERFORM memory_internal._set_superseding(NULL);
    RETURN NEW;
END $$;
CREATE TRIGGER knowledge_10_insert BEFORE INSERT ON memory.claims FOR EACH ROW EXECUTE FUNCTION memory_internal._claims_before_insert();

-- Claims on update: identity and content are fixed (decay alone redacts), state changes need
-- memory_admin (42501) and stamp t_invalid; the state machine itself is memory.lifecycle_trigger.
-- The embedding (a column once memory.enable_embeddings ran, so read through to_jsonb) is content
-- too: fixed once written; when decay redacts the text, the embedding of the text goes with it.
CREATE FUNCTION memory_internal._claims_guard()
RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    o       jsonb := to_jsonb(OLD);
    emb_new jsonb;
BEGIN
    IF NEW.id <> OLD.id OR NEW.org_id <> OLD.org_id OR NEW.entity_id <> OLD.entity_id OR NEW.kind <> OLD.kind
       OR NEW.supersedes IS DISTINCT FROM OLD.supersedes OR NEW.t_created <> OLD.t_created OR NEW.field IS DISTINCT FROM OLD.field THEN
        RAISE EXCEPTION 'claim % cannot be edited in place (id, org_id, entity_id, kind, supersedes, t_created, field are fixed)', OLD.id
            USING ERRCODE = '55000', HINT = 'Insert a corrected claim with supersedes.';
    END IF;
    IF (NEW.claim_text <> OLD.claim_text OR NEW.supports <> OLD.supports OR NEW.pii_fields <> OLD.pii_fields
        OR NEW.subject_id IS DISTINCT FROM OLD.subject_id OR NEW.details <> OLD.details OR NEW.source IS DISTINCT FROM OLD.source
        OR NEW.anonymized_at IS DISTINCT FROM OLD.anonymized_at)
       AND NOT memory_internal._knowledge_gate_open() THEN
        RAISE EXCEPTION 'the content of claim % is immutable', OLD.id
            USING ERRCODE = '55000', HINT = 'Insert a corrected claim with supersedes; memory.run_decay alone redacts PII.';
    END IF;
    IF o OPERATOR(pg_catalog.?) 'embedding' THEN
        emb_new := nullif(to_jsonb(NEW) OPERATOR(pg_catalog.->) 'embedding', 'null'::jsonb);
        IF NEW.claim_text OPERATOR(pg_catalog.<>) OLD.claim_text THEN
            IF emb_new IS NOT NULL THEN
                NEW := jsonb_populate_record(NEW, '{"embedding": null}'::jsonb);
            END IF;
        ELSIF emb_new IS DISTINCT FROM nullif(o OPERATOR(pg_catalog.->) 'embedding', 'null'::jsonb)
              AND NOT (emb_new IS NULL AND memory_internal._knowledge_gate_open()) THEN
            RAISE EXCEPTION 'the embedding of claim % is immutable', OLD.id
                USING ERRCODE = '55000', HINT = 'Insert a corrected claim with supersedes, with the embedding of its text.';
        END IF;
    END IF;
    IF NEW.lifecycle_state <> OLD.lifecycle_state THEN
        IF NOT memory_internal._is_knowledge_admin() THEN
            -- The attempt is audited although this statement fails (docs/design.md#denied-attempts).
            PERFORM memory_internal._audit_denied('memory.govern.unauthorized_access_attempt',
                jsonb_build_object('claimId', OLD.id, 'fromState', OLD.lifecycle_state, 'toState', NEW.lifecycle_state,
                                   'deniedRole', current_user::text, 'action', 'claim.state_transition')::text, OLD.org_id);
            RAISE EXCEPTION 'changing the state of claim % (% to %) needs memory_admin', OLD.id, OLD.lifecycle_state, NEW.lifecycle_state
                USING ERRCODE = '42501', HINT = 'Writers supersede by inserting a claim with supersedes; state changes are for memory_admin.';
        END IF;
        IF memory_internal._stamps_t_invalid(NEW.lifecycle_state::text) THEN
            NEW.t_invalid := coalesce(NEW.t_invalid, now());
        END IF;
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER knowledge_10_guard BEFORE UPDATE ON memory.claims FOR EACH ROW EXECUTE FUNCTION memory_internal._claims_guard();

-- ------------------------------------------------------------------------------------------------
-- Audit events: one call per statement, payloads without names or claim text.

CREATE FUNCTION memory_internal._subject_pseudonym(subject text)
RETURNS text LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$ SELECT CASE WHEN subject IS NULL THEN NULL ELSE memory_internal._pseudonym(subject) END $$;
REVOKE ALL ON FUNCTION memory_internal._subject_pseudonym(text) FROM PUBLIC;

CREATE FUNCTION memory_internal._knowledge_audit()
RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    events jsonb;
    -- Backend memory set by _claims_before_insert, not a setting a session could set itself.
    superseding text := coalesce(memory_internal._superseding(), '');
    -- The table (on Citus the trigger fires on a shard, `claims_102050`) and its own name.
    rel oid := memory_internal._table_of(TG_RELID);
    tbl name := (SELECT c.relname FROM pg_catalog.pg_class c WHERE c.oid OPERATOR(pg_catalog.=) rel);
BEGIN
    IF rel OPERATOR(pg_catalog.<>) ALL (ARRAY['memory.entities'::regclass, 'memory.claims'::regclass, 'memory.relationships'::regclass]::oid[])
       OR TG_WHEN OPERATOR(pg_catalog.<>) 'AFTER' OR TG_LEVEL OPERATOR(pg_catalog.<>) 'STATEMENT' THEN
        RAISE EXCEPTION 'memory_internal._knowledge_audit is the audit trigger of the knowledge tables' USING ERRCODE = '39P01';
    END IF;
    -- Rows loaded by a restore are not new writes: the log comes back with them.
    IF TG_OP = 'INSERT' AND memory_internal._restore_mode() THEN
        RETURN NULL;
    END IF;
    IF tbl = 'entities' AND TG_OP = 'INSERT' THEN
        SELECT jsonb_agg(jsonb_build_object('event_type', 'memory.entity.create', 'org_id', n.org_id,
                 'payload', jsonb_build_object('entityId', n.id, 'entityType', n.entity_type, 'origin', n.origin,
                                               'lifecycleState', n.lifecycle_state, 'ontologyCodes', jsonb_array_length(n.ontology_codes),
                                               'subjectId', memory_internal._subject_pseudonym(n.subject_id))) ORDER BY n.t_created, n.id)
          INTO events FROM memory_new n;
    ELSIF tbl = 'entities' THEN
        SELECT jsonb_agg(e ORDER BY ord) INTO events FROM (
            SELECT 1 AS ord, n.t_invalid, jsonb_build_object('event_type', 'memory.entity.state_transition', 'org_id', n.org_id,
                     'payload', jsonb_build_object('entityId', n.id, 'fromState', o.lifecycle_state, 'toState', n.lifecycle_state,
                                                   'subjectId', memory_internal._subject_pseudonym(n.subject_id))) AS e
              FROM memory_old o JOIN memory_new n USING (org_id, id) WHERE o.lifecycle_state <> n.lifecycle_state
            UNION ALL
            SELECT 2, n.t_invalid, jsonb_build_object('event_type', 'memory.govern.retire_attempt', 'org_id', n.org_id,
                     'payload', jsonb_build_object('entityId', n.id, 'actionDetail', 'approved', 'toState', n.lifecycle_state))
              FROM memory_old o JOIN memory_new n USING (org_id, id)
             WHERE memory_internal._is_retirement(o.lifecycle_state::text, n.lifecycle_state::text)) x;
    ELSIF tbl = 'claims' AND TG_OP = 'INSERT' THEN
        SELECT jsonb_agg(jsonb_build_object('event_type', 'memory.claim.create', 'org_id', n.org_id,
                 'payload', jsonb_build_object('claimId', n.id, 'entityId', n.entity_id, 'kind', n.kind,
                                               'lifecycleState', n.lifecycle_state, 'confidenceScore', n.confidence_score,
                                               'sourceTier', memory_internal._source_tier(n.source), 'supportsCount', cardinality(n.supports),
                                               'piiFields', to_jsonb(n.pii_fields), 'supersedes', n.supersedes,
                                               'claimSha256', encode(sha256(convert_to(n.claim_text, 'UTF8')), 'hex'),
                                               'subjectId', memory_internal._subject_pseudonym(n.subject_id))) ORDER BY n.t_created, n.id)
          INTO events FROM memory_new n;
    ELSIF tbl = 'claims' THEN
        SELECT jsonb_agg(jsonb_build_object(
                 'event_type', CASE WHEN n.lifecycle_state = 'superseded' AND superseding <> '' AND superseding = ANY (n.superseded_by::text[])
                                    THEN 'memory.claim.supersede' ELSE 'memory.claim.state_transition' END,
                 'org_id', n.org_id,
                 'payload', jsonb_build_object('claimId', n.id, 'fromState', o.lifecycle_state, 'toState', n.lifecycle_state,
                                               'confidenceScore', n.confidence_score, 'supersededBy', to_jsonb(n.superseded_by),
                                               'subjectId', memory_internal._subject_pseudonym(n.subject_id))) ORDER BY n.id)
          INTO events FROM memory_old o JOIN memory_new n USING (org_id, id) WHERE o.lifecycle_state <> n.lifecycle_state;
    ELSIF tbl = 'relationships' AND TG_OP = 'INSERT' THEN
        SELECT jsonb_agg(jsonb_build_object('event_type', 'memory.relationship.created', 'org_id', n.org_id,
                 'payload', jsonb_build_object('relationshipId', n.id, 'sourceId', n.source_id, 'targetId', n.target_id,
                                               'relType', n.rel_type, 'subjectId', memory_internal._subject_pseudonym(n.subject_id))) ORDER BY n.t_created, n.id)
          INTO events FROM memory_new n;
    ELSIF tbl = 'relationships' AND TG_OP = 'DELETE' AND NOT memory_internal._knowledge_gate_open() THEN
        -- (memory.run_decay audits its own deletions as memory.job.decay.deleted.)
        SELECT jsonb_agg(jsonb_build_object('event_type', 'memory.relationship.deleted', 'org_id', o.org_id,
                 'payload', jsonb_build_object('relationshipId', o.id, 'relType', o.rel_type)) ORDER BY o.id)
          INTO events FROM memory_old o;
    END IF;
    PERFORM memory_internal._audit_append_many(events);
    RETURN NULL;
END $$;
CREATE TRIGGER knowledge_audit_ins AFTER INSERT ON memory.entities REFERENCING NEW TABLE AS memory_new
    FOR EACH STATEMENT EXECUTE FUNCTION memory_internal._knowledge_audit();
CREATE TRIGGER knowledge_audit_upd AFTER UPDATE ON memory.entities REFERENCING OLD TABLE AS memory_old NEW TABLE AS memory_new
    FOR EACH STATEMENT EXECUTE FUNCTION memory_internal._knowledge_audit();
CREATE TRIGGER knowledge_audit_ins AFTER INSERT ON memory.claims REFERENCING NEW TABLE AS memory_new
    FOR EACH STATEMENT EXECUTE FUNCTION memory_internal._knowledge_audit();
CREATE TRIGGER knowledge_audit_upd AFTER UPDATE ON memory.claims REFERENCING OLD TABLE AS memory_old NEW TABLE AS memory_new
    FOR EACH STATEMENT EXECUTE FUNCTION memory_internal._knowledge_audit();
CREATE TRIGGER knowledge_audit_ins AFTER INSERT ON memory.relationships REFERENCING NEW TABLE AS memory_new
    FOR EACH STATEMENT EXECUTE FUNCTION memory_internal._knowledge_audit();
CREATE TRIGGER knowledge_audit_del AFTER DELETE ON memory.relationships REFERENCING OLD TABLE AS memory_old
    FOR EACH STATEMENT EXECUTE FUNCTION memory_internal._knowledge_audit();
REVOKE ALL ON FUNCTION memory_internal._knowledge_gate(boolean) FROM PUBLIC;

-- `details` with each top-level key named `details.<key>` in `fields` set to the redaction
-- marker; jsonb operators only, so details of any depth or number range are redacted.
CREATE FUNCTION memory_internal._redact_details(details jsonb, fields text[])
RETURNS jsonb LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE WHEN pg_catalog.jsonb_typeof(details) OPERATOR(pg_catalog.=) 'object' THEN
        details OPERATOR(pg_catalog.||) coalesce((
            SELECT pg_catalog.jsonb_object_agg(k, pg_catalog.to_jsonb(memory_internal._redacted_marker()))
              FROM (SELECT DISTINCT pg_catalog.substr(f, 9) AS k FROM pg_catalog.unnest(fields) f
                     WHERE f OPERATOR(pg_catalog.~~) 'details.%' AND pg_catalog.length(f) OPERATOR(pg_catalog.>) 8) x
             WHERE details OPERATOR(pg_catalog.?) x.k), '{}'::jsonb)
    ELSE details END
$$;

-- ------------------------------------------------------------------------------------------------
-- Reading.

CREATE FUNCTION memory_internal._claim_must_exist(id uuid)
RETURNS uuid LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF id IS NULL THEN
        RAISE EXCEPTION 'a claim id is needed' USING ERRCODE = '22023';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM memory.claims c WHERE c.id = _claim_must_exist.id) THEN
        RAISE EXCEPTION 'claim % does not exist', id USING ERRCODE = 'P0002';
    END IF;
    RETURN id;
END $$;

-- The chain read org by org: it stays in its claim's org (supersedes references (org_id, id)), so
-- on Citus each read is one shard group's. (PL/pgSQL: Citus plans no parameter of a SQL function.)
CREATE FUNCTION memory_internal._claim_chain(p_claim uuid)
RETURNS TABLE (o_depth int, o_id uuid, o_state memory.lifecycle_state, o_created timestamptz, o_invalid timestamptz)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE org text;
BEGIN
    PERFORM memory_internal._claim_must_exist(p_claim);
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

-- (SQL over memory_internal._claim_chain: the argument and the output column share the name claim_id,
-- which PL/pgSQL does not allow.)
CREATE FUNCTION memory.claim_chain(claim_id uuid)
RETURNS TABLE (depth int, claim_id uuid, lifecycle_state memory.lifecycle_state, t_created timestamptz, t_invalid timestamptz)
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
AS $$
    SELECT x.o_depth, x.o_id, x.o_state, x.o_created, x.o_invalid FROM memory_internal._claim_chain($1) x
$$;
COMMENT ON FUNCTION memory.claim_chain(uuid) IS
  'The provenance trail of a claim: depth 0 is the claim, each next row the claim it superseded (walking supersedes backwards). A missing id raises P0002.';

-- (PL/pgSQL: Citus plans no parameter of a SQL function.)
CREATE FUNCTION memory.active_claims(entity_id uuid, at timestamptz DEFAULT now())
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
COMMENT ON FUNCTION memory.active_claims(uuid, timestamptz) IS
  'What retrieval may use about an entity at `at`: active claims created by then whose decay horizon has not passed, most confident first.';

-- ------------------------------------------------------------------------------------------------
-- Conflicts.

CREATE FUNCTION memory.resolve_conflict(a uuid, b uuid)
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
    org := memory_internal._org_of('memory.claims', a);
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
        IF memory_internal._org_of('memory.claims', b) IS NOT NULL THEN
            RAISE EXCEPTION 'claims % and % are not about the same entity', a, b USING ERRCODE = '22023';
        END IF;
        RAISE EXCEPTION 'claim % does not exist', b USING ERRCODE = '23503';
    END IF;
    IF ca.entity_id <> cb.entity_id THEN
        RAISE EXCEPTION 'claims % and % are not about the same entity', a, b USING ERRCODE = '22023';
    END IF;
    IF memory_internal._conflict_loser_is_b(ca.confidence_score, ca.t_created, ca.id, cb.confidence_score, cb.t_created, cb.id) THEN
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
COMMENT ON FUNCTION memory.resolve_conflict(uuid, uuid) IS
  'Supersede the loser of two active claims about one entity: the lower confidence loses; on a tie the newer loses (then the greater id). Returns the loser. Not granted to PUBLIC (memory_admin).';

-- ------------------------------------------------------------------------------------------------
-- Freshness and confidence re-checks.

-- memory.freshness_recheck on Citus, which takes no FOR UPDATE over every shard: the due claims
-- are read first, then locked org by org (skipping those a concurrent tick holds, and any no
-- longer due), stamped and queued in statements naming their org. The tasks queued
-- ([{task_id, org_id, claim_id, reason, confidence}, ...] by task id).
CREATE FUNCTION memory_internal._freshness_enqueue_by_org(scope text, threshold float8, max_age interval, max_age_us bigint,
                                                          backoff interval, sample_limit int, at timestamptz)
RETURNS jsonb LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    found_tasks jsonb;
    o text;
    ids uuid[];
    locked jsonb;
    r record;
    task bigint;
BEGIN
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
                   memory_internal._recheck_reason(c.confidence_score, threshold, c.t_created, max_age_us, at) AS why
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
    RETURN found_tasks;
END $$;
COMMENT ON FUNCTION memory_internal._freshness_enqueue_by_org(text, float8, interval, bigint, interval, int, timestamptz) IS
  'memory.freshness_recheck on Citus: the due claims read, then locked org by org (SKIP LOCKED), stamped and queued as recheck tasks; returns the tasks queued, by task id.';

CREATE FUNCTION memory.freshness_recheck(threshold float8 DEFAULT 0.5, max_age interval DEFAULT '90 days',
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
BEGIN
    PERFORM memory_internal._check_at(at, 'memory.freshness_recheck');
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
    scope := memory_internal._scope_org();

    -- Lowest confidence first, then oldest; rows a concurrent tick holds are skipped, not waited for.
    IF memory_internal._citus_distributed('memory.claims') THEN
        -- Citus takes no FOR UPDATE over every shard: org by org.
        found_tasks := memory_internal._freshness_enqueue_by_org(scope, threshold, max_age, max_age_us, backoff, sample_limit, at);
    ELSE
    WITH due AS (
        SELECT c.id, c.org_id, c.entity_id, c.confidence_score,
               memory_internal._recheck_reason(c.confidence_score, threshold, c.t_created, max_age_us, at) AS why
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
    PERFORM memory_internal._audit_append_many(events);
    RETURN QUERY SELECT (x->>'claim_id')::uuid, x->>'reason' FROM jsonb_array_elements(found_tasks) x;
END $$;
COMMENT ON FUNCTION memory.freshness_recheck(float8, interval, interval, int, timestamptz) IS
  'Enqueue Critic re-checks for active claims below the confidence threshold (strictly) or older than max_age, outside the per-claim backoff; at most sample_limit, lowest confidence first. Stamps freshness_recheck_requested_at; audits one enqueued event per claim and a tick. Not granted to PUBLIC (memory_admin).';

-- A claim is a lease (issue 34 item 21): the task is the worker's until claimed_at + the lease it
-- asked for (lease_until), whatever lease a later claimer asks for; leases are in (0, 1 day].
-- After its lease has passed another worker may take the task over; the worker that claimed it
-- last is its holder, and only the holder completes it (memory.complete_recheck_task).
CREATE FUNCTION memory.claim_recheck_tasks(worker text, n int DEFAULT 1, lease interval DEFAULT '15 minutes')
RETURNS SETOF memory.recheck_tasks
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    scope text := memory_internal._scope_org();
    o     text;
    taken int := 0;
    got   int;
    -- (A value: Citus evaluates no volatile function in a distributed UPDATE.)
    ts    timestamptz := clock_timestamp();
    -- The lease as a length of time (months of 30 days, days of 24 hours): a month-and-days
    -- interval never makes a lease other than the one checked.
    span  interval := pg_catalog.make_interval(secs => pg_catalog.date_part('epoch', lease));
BEGIN
    IF memory_internal._blank(worker) THEN
        RAISE EXCEPTION 'claim_recheck_tasks needs a worker name' USING ERRCODE = '22023';
    END IF;
    IF n IS NULL OR n OPERATOR(pg_catalog.<) 1 OR n OPERATOR(pg_catalog.>) 1000 THEN
        RAISE EXCEPTION 'n must be in [1, 1000] (got %)', n USING ERRCODE = '22023';
    END IF;
    IF span IS NULL OR span OPERATOR(pg_catalog.<=) interval '0' OR span OPERATOR(pg_catalog.>) interval '24 hours' THEN
        RAISE EXCEPTION 'lease must be more than 0 and at most 1 day (got %)', lease USING ERRCODE = '22023',
            HINT = 'A worker that needs longer claims the task again before its lease ends.';
    END IF;
    -- Open tasks nobody holds, or whose holder's lease has passed (a worker that died); taken rows
    -- are skipped.
    IF memory_internal._citus_distributed('memory.recheck_tasks') THEN
        -- Citus takes no FOR UPDATE over every shard: org by org, the org with the oldest open task
        -- first, each in one statement on its shard.
        FOR o IN SELECT q.org_id FROM memory.recheck_tasks q
                  WHERE q.completed_at IS NULL AND (q.lease_until IS NULL OR q.lease_until OPERATOR(pg_catalog.<) ts)
                    AND (scope IS NULL OR q.org_id OPERATOR(pg_catalog.=) scope)
                  GROUP BY q.org_id ORDER BY min(q.task_id) LOOP
            RETURN QUERY
            UPDATE memory.recheck_tasks t SET claimed_at = ts, claimed_by = worker, lease_until = ts OPERATOR(pg_catalog.+) span
             WHERE t.org_id OPERATOR(pg_catalog.=) o
               AND t.task_id IN (SELECT q.task_id FROM memory.recheck_tasks q
                                  WHERE q.org_id OPERATOR(pg_catalog.=) o AND q.completed_at IS NULL
                                    AND (q.lease_until IS NULL OR q.lease_until OPERATOR(pg_catalog.<) ts)
                                  ORDER BY q.task_id LIMIT n - taken FOR UPDATE SKIP LOCKED)
            RETURNING t.*;
            GET DIAGNOSTICS got = ROW_COUNT;
            taken := taken + got;
            EXIT WHEN taken >= n;
        END LOOP;
        RETURN;
    END IF;
    RETURN QUERY
    UPDATE memory.recheck_tasks t SET claimed_at = ts, claimed_by = worker, lease_until = ts OPERATOR(pg_catalog.+) span
     WHERE t.task_id IN (SELECT q.task_id FROM memory.recheck_tasks q
                          WHERE q.completed_at IS NULL AND (q.lease_until IS NULL OR q.lease_until OPERATOR(pg_catalog.<) ts)
                            AND (scope IS NULL OR q.org_id OPERATOR(pg_catalog.=) scope)
                          ORDER BY q.task_id LIMIT n FOR UPDATE SKIP LOCKED)
    RETURNING t.*;
END $$;
COMMENT ON FUNCTION memory.claim_recheck_tasks(text, int, interval) IS
  'A worker takes up to n open re-check tasks (FOR UPDATE SKIP LOCKED: concurrent workers never get the same task) for a lease in (0, 1 day] (22023 otherwise); a task is offered again only once the lease its holder took has passed.';

CREATE FUNCTION memory.complete_recheck_task(task_id bigint, worker text, outcome text)
RETURNS boolean LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    scope  text := memory_internal._scope_org();
    -- (A value: Citus evaluates no volatile function in a distributed UPDATE.)
    ts     timestamptz := clock_timestamp();
    holder text;
BEGIN
    IF memory_internal._blank(worker) THEN
        RAISE EXCEPTION 'complete_recheck_task needs a worker name' USING ERRCODE = '22023';
    END IF;
    IF memory_internal._blank(outcome) THEN
        RAISE EXCEPTION 'complete_recheck_task needs an outcome' USING ERRCODE = '22023';
    END IF;
    -- Only the task's holder (the worker that claimed it last) closes it. A concurrent claim that
    -- takes the task over is waited for, and the holder read again, by the UPDATE itself.
    UPDATE memory.recheck_tasks t SET completed_at = ts, outcome = complete_recheck_task.outcome
     WHERE t.task_id OPERATOR(pg_catalog.=) complete_recheck_task.task_id AND t.completed_at IS NULL
       AND t.claimed_by OPERATOR(pg_catalog.=) worker
       AND (scope IS NULL OR t.org_id OPERATOR(pg_catalog.=) scope);
    IF FOUND THEN
        RETURN true;
    END IF;
    SELECT t.claimed_by INTO holder FROM memory.recheck_tasks t
     WHERE t.task_id OPERATOR(pg_catalog.=) complete_recheck_task.task_id AND t.completed_at IS NULL
       AND (scope IS NULL OR t.org_id OPERATOR(pg_catalog.=) scope);
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    RAISE EXCEPTION 're-check task % is %', task_id,
          CASE WHEN holder IS NULL THEN 'not claimed' ELSE 'held by another worker' END
        USING ERRCODE = '55000',
              HINT = 'Only the worker that claimed a task last completes it: claim it with memory.claim_recheck_tasks; once a lease has passed another worker may take the task over.';
END $$;
COMMENT ON FUNCTION memory.complete_recheck_task(bigint, text, text) IS
  'The worker holding a re-check task (the one that claimed it last) closes it with its outcome; false when it was already closed or does not exist; 55000 for a task another worker holds or nobody claimed.';

-- ------------------------------------------------------------------------------------------------
-- Replicator verdicts (docs/design.md#knowledge-lifecycle): a sampled claim re-checked against its cited sources.

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
    org := memory_internal._org_of('memory.claims', p_claim);
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
        -- The Critic re-checks it: a task on the freshness_recheck queue, the re-check task's shape.
        INSERT INTO memory.recheck_tasks (org_id, claim_id, agent_role, entity_context, metadata, reason, confidence_score)
        VALUES (c.org_id, c.id, 'critic', ARRAY[c.entity_id],
                jsonb_build_object('source', 'replicator', 'original_claim_id', c.id, 'verdict', v), v, c.confidence_score)
        RETURNING recheck_tasks.task_id INTO task;
        events := jsonb_build_array(
            jsonb_build_object('event_type', CASE v WHEN 'eroded' THEN 'memory.govern.eroded' ELSE 'memory.govern.retracted_source' END,
                'org_id', c.org_id,
                'payload', jsonb_build_object('claimId', c.id, 'entityId', c.entity_id, 'verdict', v, 'taskId', task,
                                              'subjectId', memory_internal._subject_pseudonym(c.subject_id))),
            jsonb_build_object('event_type', 'research.task.enqueued', 'org_id', c.org_id,
                'payload', jsonb_build_object('taskId', task, 'claimId', c.id, 'agentRole', 'critic', 'source', 'replicator',
                                              'reason', v)));
    ELSIF v = 'broken_provenance' THEN
        -- The source is gone: the claim is retracted (its memory.claim.state_transition is
        -- recorded by the audit trigger, then the verdict).
        UPDATE memory.claims x SET lifecycle_state = 'retracted' WHERE x.org_id = c.org_id AND x.id = c.id;
        events := jsonb_build_array(jsonb_build_object('event_type', 'memory.govern.broken_provenance', 'org_id', c.org_id,
            'payload', jsonb_build_object('claimId', c.id, 'entityId', c.entity_id, 'verdict', v, 'fromState', c.lifecycle_state,
                                          'toState', 'retracted', 'subjectId', memory_internal._subject_pseudonym(c.subject_id))));
    ELSE
        events := jsonb_build_array(jsonb_build_object('event_type', 'memory.govern.still_supported', 'org_id', c.org_id,
            'payload', jsonb_build_object('claimId', c.id, 'entityId', c.entity_id, 'verdict', v)));
    END IF;
    PERFORM memory_internal._audit_append_many(events);
    RETURN jsonb_build_object('claim_id', c.id, 'verdict', v,
        'action', CASE v WHEN 'still_supported' THEN 'none' WHEN 'broken_provenance' THEN 'retracted' ELSE 'recheck_enqueued' END,
        'task_id', task,
        'lifecycle_state', CASE WHEN v = 'broken_provenance' THEN 'retracted' ELSE c.lifecycle_state::text END);
END $$;
COMMENT ON FUNCTION memory.record_verdict(uuid, text) IS
  'The replicator''s verdict on a pending or active claim: still_supported (recorded), eroded or retracted_source (a critic re-check task, source replicator), broken_provenance (the claim is retracted). Audited as memory.govern.<verdict> (plus research.task.enqueued). Unknown verdict 22023; missing claim 23503; other states MX001. Not granted to PUBLIC (memory_admin).';

-- ------------------------------------------------------------------------------------------------
-- Completeness (docs/design.md#knowledge-lifecycle): how much of a screening profile an entity's active claims answer.

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

-- A screening profile's fields for an org: the org's own profile of that name, else the
-- platform's (org_id NULL). Read with the rights of the function that calls it (completeness:
-- the caller's; retrieve: the extension owner's, for the org it checked). No rows: no such profile.
CREATE FUNCTION memory_internal._profile_rules(org text, profile text)
RETURNS TABLE (field text, freshness_days int, required boolean)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN QUERY
    SELECT p.field, p.freshness_days, p.required FROM memory.screen_profiles p
     WHERE p.profile OPERATOR(pg_catalog.=) _profile_rules.profile
       AND (p.org_id OPERATOR(pg_catalog.=) _profile_rules.org
            OR (p.org_id IS NULL AND NOT EXISTS (SELECT 1 FROM memory.screen_profiles q
                                                  WHERE q.profile OPERATOR(pg_catalog.=) _profile_rules.profile
                                                    AND q.org_id OPERATOR(pg_catalog.=) _profile_rules.org)))
     ORDER BY p.field;
END $$;

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
        SELECT p.field, p.freshness_days, p.required FROM memory_internal._profile_rules(e_org, p_profile) p ORDER BY p.field
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

-- ------------------------------------------------------------------------------------------------
-- Retrieval (docs/design.md#agent-memory-api): what an agent may use about a query, ranked.

-- The tier of a claim for clearance (claims carry no stored tier): a claim about a subject or
-- with PII fields is PHI, restricted; any other is classified by its text, with the org's rules.
CREATE FUNCTION memory_internal._claim_tier(claim_text text, subject_id text, pii_fields text[], org text)
RETURNS memory.classification LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE WHEN subject_id IS NOT NULL OR pg_catalog.cardinality(pii_fields) OPERATOR(pg_catalog.>) 0
                THEN 'restricted'::memory.classification
                ELSE memory.classify(claim_text, NULL, NULL, org) END
$$;

-- The screen profile's stale mark of a claim: NULL without a profile (rules NULL), else its field
-- when the profile's freshness_days for it say it is stale at `at`.
CREATE FUNCTION memory_internal._stale_fields(field text, t_created timestamptz, rules jsonb, at timestamptz)
RETURNS text[] LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE WHEN rules IS NULL THEN NULL
                WHEN field IS NOT NULL AND rules OPERATOR(pg_catalog.?) field
                     AND memory.is_stale(t_created, (rules OPERATOR(pg_catalog.->>) field)::int, at)
                THEN ARRAY[field] ELSE '{}'::text[] END
$$;


-- ------------------------------------------------------------------------------------------------
-- Knowledge retention (docs/design.md#knowledge-lifecycle): entities and claims about a
-- subject ride the subject's data-retention policy (the org's restricted-tier retention, from
-- t_created); the correlator's, replicator's and librarian's findings keep 180 days. Disposal is
-- a state transition to archived, logged as memory.govern.retention_disposed, never a delete.
-- A legal hold on the subject (or the org) keeps them. Part of memory.run_maintenance.

CREATE FUNCTION memory_internal._knowledge_retention(at timestamptz DEFAULT now())
RETURNS jsonb LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    scope    text := memory_internal._scope_org();
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
    FOR o IN SELECT u.o FROM unnest(CASE WHEN memory_internal._citus_distributed('memory.claims') THEN orgs ELSE ARRAY[scope] END) u(o) LOOP
        EXIT WHEN budget <= 0;
        WITH due AS (
            SELECT 'claim' AS kind, c.id, c.org_id, c.lifecycle_state::text AS from_state,
                   CASE WHEN c.kind IN ('correlator', 'replicator', 'librarian') AND c.t_created <= at - interval '180 days'
                        THEN 'finding_ttl' ELSE 'subject_retention' END AS why,
                   c.subject_id AS subject, memory_internal._held(c.org_id, c.subject_id, NULL) AS held
              FROM memory.claims c
             WHERE c.lifecycle_state <> 'archived' AND (o IS NULL OR c.org_id = o)
               AND (c.subject_id IS NOT NULL OR c.kind IN ('correlator', 'replicator', 'librarian'))
               AND ((c.kind IN ('correlator', 'replicator', 'librarian') AND c.t_created <= at - interval '180 days')
                    OR (c.subject_id IS NOT NULL AND days->>c.org_id IS NOT NULL
                        AND c.t_created <= at - make_interval(days => (days->>c.org_id)::int)))
            UNION ALL
            SELECT 'entity', e.id, e.org_id, e.lifecycle_state::text, 'subject_retention', e.subject_id, memory_internal._held(e.org_id, e.subject_id, NULL)
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
                                                       'subjectId', memory_internal._subject_pseudonym(d.subject))) ORDER BY d.kind, d.id)
                         FILTER (WHERE NOT d.held)
          INTO cn, en, hn, ev FROM due d;
        claims_n := claims_n + cn;
        ents_n := ents_n + en;
        held_n := held_n + hn;
        budget := budget - cn - en - hn;
        PERFORM memory_internal._audit_append_many(coalesce(ev, '[]'));
    END LOOP;
    RETURN jsonb_build_object('claims_disposed', claims_n, 'entities_disposed', ents_n, 'held', held_n);
END $$;
COMMENT ON FUNCTION memory_internal._knowledge_retention(timestamptz) IS
  'Knowledge retention, run by memory.run_maintenance: subject claims and entities past the org''s restricted retention, and correlator, replicator and librarian findings older than 180 days, are archived (memory.govern.retention_disposed per row); held ones stay (counted).';

-- ------------------------------------------------------------------------------------------------
-- Bulk ingest (partial failure: docs/design.md#knowledge-lifecycle). Items are checked set-wise per
-- chunk and the chunk's good items inserted by one statement; when that statement fails (a
-- trigger's rule, say a supersession), the chunk's items are inserted one by one, each in its own
-- subtransaction, so a bad item is reported and the others land.

-- A timestamp from JSON text, or NULL when it is not one.
CREATE FUNCTION memory_internal._ingest_ts(t text)
RETURNS timestamptz LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- A finite time only ('infinity' would break the jobs that compute with it).
    RETURN CASE WHEN t IS NULL OR NOT isfinite(t::timestamptz) THEN NULL ELSE t::timestamptz END;
EXCEPTION WHEN OTHERS THEN
    RETURN NULL;
END $$;

-- The inserts of checked rows (PL/pgSQL: Citus plans no parameter of a SQL function).
CREATE FUNCTION memory_internal._ingest_insert_entities(rows jsonb)
RETURNS void LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    INSERT INTO memory.entities (id, org_id, entity_type, name, taxonomy_category, ontology_codes, subject_id, origin, lifecycle_state)
    SELECT (r->>'id')::uuid, r->>'org_id', r->>'entity_type', r->>'name', r->>'taxonomy_category', r->'ontology_codes',
           r->>'subject_id', r->>'origin', (r->>'lifecycle_state')::memory.lifecycle_state
      FROM jsonb_array_elements(rows) r;
END $$;

-- A claim's "embedding" (an array of numbers, checked) goes in with it when memory.claims has the
-- column (memory.enable_embeddings): pgvector's text form is the JSON array's.
CREATE FUNCTION memory_internal._ingest_insert_claims(rows jsonb)
RETURNS void LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    emb boolean := memory_internal._has_column('memory.claims'::regclass, 'embedding');
BEGIN
    EXECUTE format(
    'INSERT INTO memory.claims (id, org_id, entity_id, kind, claim_text, supports, pii_fields, subject_id, details, decay_at,
                                confidence_score, source, lifecycle_state, supersedes, field, t_created%s)
     SELECT (r->>''id'')::uuid, r->>''org_id'', (r->>''entity_id'')::uuid, r->>''kind'', r->>''claim_text'',
            ARRAY(SELECT jsonb_array_elements_text(r->''supports'')), ARRAY(SELECT jsonb_array_elements_text(r->''pii_fields'')),
            r->>''subject_id'', r->''details'', (r->>''decay_at'')::timestamptz, (r->>''confidence_score'')::float8, r->>''source'',
            (r->>''lifecycle_state'')::memory.lifecycle_state, (r->>''supersedes'')::uuid, r->>''field'', (r->>''t_created'')::timestamptz%s
       FROM jsonb_array_elements($1) r',
        CASE WHEN emb THEN ', embedding' ELSE '' END,
        CASE WHEN emb THEN format(', (nullif(r->''embedding'', ''null''::jsonb))::text::%I.vector', memory_internal._vector_schema()) ELSE '' END)
    USING rows;
END $$;

CREATE FUNCTION memory_internal._ingest_insert_relationships(rows jsonb)
RETURNS void LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    INSERT INTO memory.relationships (id, org_id, source_id, target_id, rel_type, attributes, subject_id, decay_at)
    SELECT (r->>'id')::uuid, r->>'org_id', (r->>'source_id')::uuid, (r->>'target_id')::uuid, r->>'rel_type', r->'attributes',
           r->>'subject_id', (r->>'decay_at')::timestamptz
      FROM jsonb_array_elements(rows) r;
END $$;

-- The entities a chunk of claims or relationships names (by id, or by a ref of the batch) that
-- exist, as 'org id' keys: read by a statement of their own (Citus plans no correlated subquery
-- over a distributed table in the checks).
CREATE FUNCTION memory_internal._ingest_known(ch jsonb[], refs jsonb)
RETURNS jsonb LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    found jsonb;
BEGIN
    SELECT coalesce(jsonb_object_agg(e.org_id || ' ' || e.id::text, true), '{}') INTO found
      FROM memory.entities e
     WHERE e.id = ANY (ARRAY(
             SELECT c2.v::uuid
               FROM (SELECT u.j->>f AS v FROM unnest(ch) u(j), unnest(ARRAY['entity_id', 'source_id', 'target_id']) f
                      WHERE jsonb_typeof(u.j) = 'object'
                     UNION
                     SELECT r.value #>> '{}' FROM jsonb_each(refs) r) c2
              WHERE c2.v ~* '^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$'));
    RETURN found;
END $$;
COMMENT ON FUNCTION memory_internal._ingest_known(jsonb[], jsonb) IS
  'memory.ingest_batch: the existing entities a chunk''s claims or relationships name (by id or by a ref of the batch), as ''org id'' keys of a JSON object.';

-- The set-wise checks of a chunk `ch` of items (item numbers from `lo`), one function per kind:
-- [[item, id, org, sqlstate, message, row], ...] in item order, the first problem of each item
-- (NULL sqlstate when none) and its normalised row. `allowed`: org -> may the caller act for it.
CREATE FUNCTION memory_internal._ingest_check_entities(ch jsonb[], lo int, acting text, allowed jsonb, dups text[])
RETURNS jsonb LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    checked jsonb;
BEGIN
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
    RETURN checked;
END $$;
COMMENT ON FUNCTION memory_internal._ingest_check_entities(jsonb[], int, text, jsonb, text[]) IS
  'memory.ingest_batch: a chunk of entities checked set-wise ([item, id, org, sqlstate, message, row] per item; `dups`: refs given to more than one entity).';

CREATE FUNCTION memory_internal._ingest_check_claims(ch jsonb[], lo int, acting text, allowed jsonb, refs jsonb, known jsonb, cdims int)
RETURNS jsonb LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    checked jsonb;
BEGIN
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
                            WHEN coalesce(y.j->'embedding', 'null') = 'null'::jsonb THEN NULL
                            WHEN jsonb_typeof(y.j->'embedding') <> 'array' OR EXISTS (SELECT 1 FROM jsonb_array_elements(y.j->'embedding') v WHERE jsonb_typeof(v) <> 'number')
                                THEN ARRAY['22023', '"embedding" must be an array of numbers']
                            WHEN cdims IS NULL
                                THEN ARRAY['22023', 'memory.claims has no embeddings: memory.enable_embeddings(dimensions) adds them']
                            WHEN jsonb_array_length(y.j->'embedding') <> cdims
                                THEN ARRAY['22023', format('"embedding" has %s dimensions, the embeddings have %s', jsonb_array_length(y.j->'embedding'), cdims)]
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
                               't_created', coalesce(z.j->'t_created', to_jsonb(now())), 'embedding', z.j->'embedding') END AS r
                      FROM (SELECT w.i, w.j,
                                     CASE WHEN jsonb_typeof(w.j) IS DISTINCT FROM 'object' THEN ARRAY['22023', 'item is not a JSON object']
                                          WHEN (w.j - ARRAY['id', 'org_id', 'entity_id', 'entity_ref', 'kind', 'claim_text', 'supports', 'pii_fields', 'subject_id', 'details', 'decay_at', 'confidence_score', 'source', 'lifecycle_state', 'supersedes', 'field', 't_created', 'embedding']::text[]) <> '{}'::jsonb
                                              THEN ARRAY['22023', format('unknown key "%s"', (SELECT min(u) FROM jsonb_object_keys(w.j - ARRAY['id', 'org_id', 'entity_id', 'entity_ref', 'kind', 'claim_text', 'supports', 'pii_fields', 'subject_id', 'details', 'decay_at', 'confidence_score', 'source', 'lifecycle_state', 'supersedes', 'field', 't_created', 'embedding']::text[]) u))]
                                          WHEN coalesce(w.j->'claim_text', 'null') = 'null'::jsonb THEN ARRAY['22023', '"claim_text" is required']
                                          WHEN jsonb_typeof(w.j->'id') NOT IN ('string', 'null') OR jsonb_typeof(w.j->'org_id') NOT IN ('string', 'null') OR jsonb_typeof(w.j->'entity_id') NOT IN ('string', 'null') OR jsonb_typeof(w.j->'entity_ref') NOT IN ('string', 'null') OR jsonb_typeof(w.j->'kind') NOT IN ('string', 'null') OR jsonb_typeof(w.j->'claim_text') NOT IN ('string', 'null') OR jsonb_typeof(w.j->'subject_id') NOT IN ('string', 'null') OR jsonb_typeof(w.j->'decay_at') NOT IN ('string', 'null') OR jsonb_typeof(w.j->'source') NOT IN ('string', 'null') OR jsonb_typeof(w.j->'lifecycle_state') NOT IN ('string', 'null') OR jsonb_typeof(w.j->'supersedes') NOT IN ('string', 'null') OR jsonb_typeof(w.j->'field') NOT IN ('string', 'null') OR jsonb_typeof(w.j->'t_created') NOT IN ('string', 'null')
                                              THEN ARRAY['22023', format('"%s" must be a string', (SELECT min(u) FROM unnest(ARRAY['id', 'org_id', 'entity_id', 'entity_ref', 'kind', 'claim_text', 'subject_id', 'decay_at', 'source', 'lifecycle_state', 'supersedes', 'field', 't_created']) u WHERE jsonb_typeof(w.j->u) NOT IN ('string', 'null')))]
                                          WHEN (w.j->>'id') !~* '^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$' OR (w.j->>'entity_id') !~* '^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$' OR (w.j->>'supersedes') !~* '^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$'
                                              THEN ARRAY['22P02', format('"%s" is not a uuid', (SELECT min(u) FROM unnest(ARRAY['id', 'entity_id', 'supersedes']) u WHERE (w.j->>u) !~* '^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$'))]
                                          WHEN (w.j ? 'decay_at' AND w.j->'decay_at' <> 'null'::jsonb AND memory_internal._ingest_ts(w.j->>'decay_at') IS NULL) OR (w.j ? 't_created' AND w.j->'t_created' <> 'null'::jsonb AND memory_internal._ingest_ts(w.j->>'t_created') IS NULL)
                                              THEN ARRAY['22007', 'a time is not a valid timestamp']
                                     END AS shape
                                FROM (SELECT (lo + u.o - 1)::int AS i, u.j FROM unnest(ch) WITH ORDINALITY u(j, o)) w) z) y) x;
    RETURN checked;
END $$;
COMMENT ON FUNCTION memory_internal._ingest_check_claims(jsonb[], int, text, jsonb, jsonb, jsonb, int) IS
  'memory.ingest_batch: a chunk of claims checked set-wise ([item, id, org, sqlstate, message, row] per item; `refs`: the batch''s entity refs, `known`: memory_internal._ingest_known, `cdims`: the embeddings'' dimensions or NULL).';

CREATE FUNCTION memory_internal._ingest_check_relationships(ch jsonb[], lo int, acting text, allowed jsonb, refs jsonb, known jsonb)
RETURNS jsonb LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    checked jsonb;
BEGIN
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
                                          WHEN (w.j ? 'decay_at' AND w.j->'decay_at' <> 'null'::jsonb AND memory_internal._ingest_ts(w.j->>'decay_at') IS NULL)
                                              THEN ARRAY['22007', 'a time is not a valid timestamp']
                                     END AS shape
                                FROM (SELECT (lo + u.o - 1)::int AS i, u.j FROM unnest(ch) WITH ORDINALITY u(j, o)) w) z) y) x;
    RETURN checked;
END $$;
COMMENT ON FUNCTION memory_internal._ingest_check_relationships(jsonb[], int, text, jsonb, jsonb, jsonb) IS
  'memory.ingest_batch: a chunk of relationships checked set-wise ([item, id, org, sqlstate, message, row] per item; `refs`: the batch''s entity refs, `known`: memory_internal._ingest_known).';

-- The insert of checked rows of kind `k` ('entities', 'claims' or 'relationships').
CREATE FUNCTION memory_internal._ingest_insert(k text, rows jsonb)
RETURNS void LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    CASE k WHEN 'entities' THEN PERFORM memory_internal._ingest_insert_entities(rows);
           WHEN 'claims' THEN PERFORM memory_internal._ingest_insert_claims(rows);
           ELSE PERFORM memory_internal._ingest_insert_relationships(rows); END CASE;
END $$;
COMMENT ON FUNCTION memory_internal._ingest_insert(text, jsonb) IS
  'memory.ingest_batch: inserts checked rows of one kind (''entities'', ''claims'' or ''relationships'') by one statement.';

-- The one-by-one fallback: each good item of `checked` inserted in its own subtransaction; the
-- items with the failures (sqlstate, message) in place.
CREATE FUNCTION memory_internal._ingest_one_by_one(k text, checked jsonb)
RETURNS jsonb LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    fails jsonb[] := '{}';    -- items that could not be inserted
    c     jsonb;
    st    text;
    msg   text;
BEGIN
    SELECT jsonb_agg(c2 ORDER BY (c2->>0)::int) INTO checked FROM jsonb_array_elements(checked) c2;
    FOR lo_i IN 0 .. jsonb_array_length(checked) - 1 LOOP
        c := checked->lo_i;
        CONTINUE WHEN c->>3 IS NOT NULL;
        BEGIN
            PERFORM memory_internal._ingest_insert(k, jsonb_build_array((c->5) || jsonb_build_object('id', c->1)));
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT;
            fails := fails || jsonb_build_array(c->0, c->1, c->2, st, msg, c->5);
        END;
    END LOOP;
    -- The failures replace their items in one pass.
    SELECT jsonb_agg(coalesce(f.x, x.x) ORDER BY (x.x->>0)::int) INTO checked
      FROM jsonb_array_elements(checked) x(x)
      LEFT JOIN unnest(fails) f(x) ON (f.x->>0)::int = (x.x->>0)::int;
    RETURN checked;
END $$;
COMMENT ON FUNCTION memory_internal._ingest_one_by_one(text, jsonb) IS
  'memory.ingest_batch: the good items of a checked chunk inserted one by one, each in its own subtransaction; returns the chunk with each failure''s SQLSTATE and message in place.';

-- A chunk's good items inserted by one statement; when that fails (a trigger's rule the checks
-- do not see, say a supersession), one by one. Returns the chunk with the failures in place.
CREATE FUNCTION memory_internal._ingest_insert_checked(k text, checked jsonb)
RETURNS jsonb LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    good jsonb;
BEGIN
    SELECT coalesce(jsonb_agg((c2->5) || jsonb_build_object('id', c2->1) ORDER BY (c2->>0)::int), '[]') INTO good
      FROM jsonb_array_elements(checked) c2 WHERE c2->>3 IS NULL;
    BEGIN
        PERFORM memory_internal._ingest_insert(k, good);
    EXCEPTION WHEN OTHERS THEN
        -- One of them broke a rule the checks do not see: insert them one by one.
        good := NULL;
    END;
    IF good IS NULL THEN
        RETURN memory_internal._ingest_one_by_one(k, checked);
    END IF;
    RETURN checked;
END $$;
COMMENT ON FUNCTION memory_internal._ingest_insert_checked(text, jsonb) IS
  'memory.ingest_batch: a checked chunk''s good items inserted by one statement, or one by one when that fails; returns the chunk with the failures in place.';

-- The per-org counts of a checked chunk of kind `k` added to `orgs` (org -> {kInserted, kFailed}),
-- for the orgs the caller may act for.
CREATE FUNCTION memory_internal._ingest_tally(orgs jsonb, k text, checked jsonb, allowed jsonb)
RETURNS jsonb LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c jsonb;
BEGIN
    FOR c IN SELECT jsonb_build_object('org', x->>2, 'ok', count(*) FILTER (WHERE x->>3 IS NULL),
                                       'bad', count(*) FILTER (WHERE x->>3 IS NOT NULL))
               FROM jsonb_array_elements(checked) x
              WHERE x->>2 IS NOT NULL AND coalesce((allowed->>(x->>2))::boolean, false)
              GROUP BY x->>2 LOOP
        orgs := jsonb_set(orgs, ARRAY[c->>'org'], coalesce(orgs->(c->>'org'), '{}') || jsonb_build_object(
            k || 'Inserted', coalesce((orgs->(c->>'org')->>(k || 'Inserted'))::int, 0) + (c->>'ok')::int,
            k || 'Failed', coalesce((orgs->(c->>'org')->>(k || 'Failed'))::int, 0) + (c->>'bad')::int));
    END LOOP;
    RETURN orgs;
END $$;
COMMENT ON FUNCTION memory_internal._ingest_tally(jsonb, text, jsonb, jsonb) IS
  'memory.ingest_batch: the per-org inserted and failed counts of a checked chunk added to the batch''s (for the orgs the caller may act for).';

-- The memory.ingest.batch events of a batch: one per org it wrote to (`orgs`: org -> counts, of
-- memory_internal._ingest_tally), with counts only.
CREATE FUNCTION memory_internal._ingest_batch_events(orgs jsonb, chunk_size int)
RETURNS void LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM memory_internal._audit_append_many(coalesce((SELECT jsonb_agg(jsonb_build_object('event_type', 'memory.ingest.batch', 'org_id', o.key,
                'payload', jsonb_build_object('entities', jsonb_build_object('inserted', coalesce((o.value->>'entitiesInserted')::int, 0), 'failed', coalesce((o.value->>'entitiesFailed')::int, 0)),
                                              'claims', jsonb_build_object('inserted', coalesce((o.value->>'claimsInserted')::int, 0), 'failed', coalesce((o.value->>'claimsFailed')::int, 0)),
                                              'relationships', jsonb_build_object('inserted', coalesce((o.value->>'relationshipsInserted')::int, 0), 'failed', coalesce((o.value->>'relationshipsFailed')::int, 0)),
                                              'chunkSize', chunk_size)) ORDER BY o.key)
                FROM jsonb_each(orgs) o), '[]'));
END $$;
COMMENT ON FUNCTION memory_internal._ingest_batch_events(jsonb, int) IS
  'memory.ingest_batch: appends one memory.ingest.batch event (counts only) per org the batch wrote to.';

CREATE FUNCTION memory.ingest_batch(entities jsonb DEFAULT '[]', claims jsonb DEFAULT '[]', relationships jsonb DEFAULT '[]',
                                    chunk_size int DEFAULT 500)
RETURNS TABLE (kind text, item int, id uuid, ok boolean, sqlstate text, message text)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    caller  oid := memory_internal._caller();
    acting  text := memory_internal._acting_org();
    refs    jsonb := '{}';      -- batch-local entity refs -> ids of entities that landed
    dups    text[];             -- refs given to more than one entity
    allowed jsonb;              -- org -> may the caller act for it (per chunk)
    elems   jsonb[];            -- the items, split once (a query per chunk reads only its slice)
    ch      jsonb[];            -- the chunk's items
    orgs    jsonb := '{}';      -- org -> counts, for the batch events
    k       text;
    items   jsonb;
    n       int;
    lo      int;
    checked jsonb;              -- [[item, id, org, sqlstate, message, row], ...] of one chunk
    known   jsonb;              -- 'org id' of the existing entities the chunk names (as keys)
    -- The dimensions of the claims' embeddings (NULL: memory.enable_embeddings has not run).
    cdims   int := CASE WHEN memory_internal._has_column('memory.claims'::regclass, 'embedding')
                        THEN memory_internal._embedding_dims('memory.claims'::regclass, 'embedding') END;
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
            SELECT coalesce(jsonb_object_agg(o.org, memory_internal._may_act_for(o.org)), '{}') INTO allowed
              FROM (SELECT DISTINCT coalesce(u.j->>'org_id', acting) AS org FROM unnest(ch) u(j)
                     WHERE jsonb_typeof(u.j) = 'object') o
             WHERE o.org IS NOT NULL;
            -- The entities the chunk's claims and relationships name that exist.
            IF k <> 'entities' THEN
                known := memory_internal._ingest_known(ch, refs);
            END IF;
            -- Check the chunk's items set-wise: the first problem of each, and its normalised row.
            IF k = 'entities' THEN
                checked := memory_internal._ingest_check_entities(ch, lo, acting, allowed, dups);
            ELSIF k = 'claims' THEN
                checked := memory_internal._ingest_check_claims(ch, lo, acting, allowed, refs, known, cdims);
            ELSE
                checked := memory_internal._ingest_check_relationships(ch, lo, acting, allowed, refs, known);
            END IF;
            -- The good rows of the chunk in by one statement (or one by one).
            checked := memory_internal._ingest_insert_checked(k, checked);
            -- Remember the refs of entities that landed, count per org, report the chunk.
            IF k = 'entities' THEN
                SELECT refs || coalesce(jsonb_object_agg(ch[(x->>0)::int - lo + 1]->>'ref', x->1), '{}') INTO refs
                  FROM jsonb_array_elements(checked) x
                 WHERE x->>3 IS NULL AND jsonb_typeof(ch[(x->>0)::int - lo + 1]->'ref') = 'string';
            END IF;
            orgs := memory_internal._ingest_tally(orgs, k, checked, allowed);
            RETURN QUERY SELECT k, (x->>0)::int, CASE WHEN x->>3 IS NULL THEN (x->>1)::uuid END, x->>3 IS NULL, x->>3, x->>4
                           FROM jsonb_array_elements(checked) x ORDER BY (x->>0)::int;
            lo := lo + chunk_size;
        END LOOP;
    END LOOP;
    -- One event per org the batch wrote to, with counts only.
    PERFORM memory_internal._ingest_batch_events(orgs, chunk_size);
END $$;
COMMENT ON FUNCTION memory.ingest_batch(jsonb, jsonb, jsonb, int) IS
  'Bulk ingest of entities, claims and relationships (arrays of objects), chunk by chunk: one row per item in input order (entities, then claims, then relationships) with its id or its SQLSTATE and message; a bad item does not stop the others. Claims and relationships may name entities of the same batch by "entity_ref" / "source_ref" / "target_ref" (an entity''s "ref"); a claim''s "embedding" (an array of numbers, once memory.enable_embeddings ran) is written with it. Per-item events as for plain INSERTs, and one memory.ingest.batch event (counts only) per org. For roles with INSERT on the three tables (memory_writer).';

-- ------------------------------------------------------------------------------------------------
-- Decay (docs/design.md#knowledge-lifecycle): PHI claims past decay_at are redacted field by field and
-- archived; hypotheses and non-PHI relationships are deleted; other claims are archived.

-- One decay run over org `org` (NULL: every org; memory.run_decay passes the caller's scope).
-- Every statement names the org when there is one: on Citus memory.distribute() makes this a
-- function Citus runs on the node of the org's shards, where its statements are local and the
-- gate it opens is seen by the shards' triggers. Not granted to PUBLIC.
-- memory_internal._run_decay_in, claims (the gate open): PHI-bearing ones redacted field by field
-- and archived, hypotheses outside any supersession chain deleted, every other due claim
-- archived; their events appended. The counts {claimsAnonymized, claimsDeleted, claimsArchived}.
CREATE FUNCTION memory_internal._decay_claims(scope text, at timestamptz)
RETURNS jsonb LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n_anon int := 0; n_del int := 0; n_arch int := 0;
    gone uuid[];
    events jsonb;
BEGIN
    -- PHI-bearing claims (non-empty pii_fields): redact each listed field, then archive.
    WITH due AS (
        SELECT c.id FROM memory.claims c
         WHERE c.lifecycle_state IN ('pending', 'active') AND c.decay_at < at AND (scope IS NULL OR c.org_id = scope) AND cardinality(c.pii_fields) > 0
         ORDER BY c.id FOR UPDATE
    ), upd AS (
        UPDATE memory.claims c
           SET claim_text = CASE WHEN 'claim_text' = ANY (c.pii_fields) THEN memory_internal._redacted_marker() ELSE c.claim_text END,
               subject_id = CASE WHEN 'subject_id' = ANY (c.pii_fields) THEN NULL ELSE c.subject_id END,
               supports   = CASE WHEN 'supports' = ANY (c.pii_fields) THEN '{}'::text[] ELSE c.supports END,
               source     = CASE WHEN 'source' = ANY (c.pii_fields) THEN memory_internal._redacted_marker() ELSE c.source END,
               details    = memory_internal._redact_details(c.details, c.pii_fields),
               anonymized_at = at,
               lifecycle_state = 'archived',
               t_invalid = coalesce(c.t_invalid, at)
          FROM due WHERE c.id = due.id AND (scope IS NULL OR c.org_id = scope)
        RETURNING c.id, c.org_id, c.pii_fields
    )
    SELECT count(*), jsonb_agg(jsonb_build_object('event_type', 'memory.job.decay.anonymized', 'org_id', u.org_id,
               'payload', jsonb_build_object('claimId', u.id, 'fields', to_jsonb(u.pii_fields))) ORDER BY u.id)
      INTO n_anon, events FROM upd u;
    PERFORM memory_internal._audit_append_many(events);

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
    PERFORM memory_internal._audit_append_many(events);

    -- Every other due claim leaves circulation as archived (the update audits each transition).
    UPDATE memory.claims c SET lifecycle_state = 'archived', t_invalid = coalesce(c.t_invalid, at)
     WHERE c.lifecycle_state IN ('pending', 'active') AND c.decay_at < at AND (scope IS NULL OR c.org_id = scope);
    GET DIAGNOSTICS n_arch = ROW_COUNT;
    RETURN jsonb_build_object('claimsAnonymized', n_anon, 'claimsDeleted', n_del, 'claimsArchived', n_arch);
END $$;
COMMENT ON FUNCTION memory_internal._decay_claims(text, timestamptz) IS
  'memory.run_decay: the due claims of an org (NULL: every org) redacted and archived (PHI-bearing), deleted (hypotheses outside supersession chains) or archived, with their events; returns the counts.';

-- memory_internal._run_decay_in, relationships (the gate open): without a subject they are
-- deleted; with one, the subject and attributes go; their events appended. The counts
-- {relationshipsDeleted, relationshipsAnonymized}.
CREATE FUNCTION memory_internal._decay_relationships(scope text, at timestamptz)
RETURNS jsonb LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n_rel_del int := 0; n_rel_anon int := 0;
    events jsonb;
BEGIN
    -- Relationships: without a subject they are deleted; with one, the subject and attributes go.
    WITH del AS (
        DELETE FROM memory.relationships r WHERE r.decay_at < at AND (scope IS NULL OR r.org_id = scope) AND r.subject_id IS NULL AND r.anonymized_at IS NULL
        RETURNING r.id, r.org_id
    )
    SELECT count(*), jsonb_agg(jsonb_build_object('event_type', 'memory.job.decay.deleted', 'org_id', d.org_id,
               'payload', jsonb_build_object('kind', 'relationship', 'relationshipId', d.id)) ORDER BY d.id)
      INTO n_rel_del, events FROM del d;
    PERFORM memory_internal._audit_append_many(events);
    WITH upd AS (
        UPDATE memory.relationships r SET subject_id = NULL, attributes = '{}', anonymized_at = at
         WHERE r.decay_at < at AND (scope IS NULL OR r.org_id = scope) AND r.subject_id IS NOT NULL AND r.anonymized_at IS NULL
        RETURNING r.id, r.org_id
    )
    SELECT count(*), jsonb_agg(jsonb_build_object('event_type', 'memory.job.decay.anonymized', 'org_id', u.org_id,
               'payload', jsonb_build_object('relationshipId', u.id, 'fields', jsonb_build_array('subject_id', 'attributes'))) ORDER BY u.id)
      INTO n_rel_anon, events FROM upd u;
    PERFORM memory_internal._audit_append_many(events);
    RETURN jsonb_build_object('relationshipsDeleted', n_rel_del, 'relationshipsAnonymized', n_rel_anon);
END $$;
COMMENT ON FUNCTION memory_internal._decay_relationships(text, timestamptz) IS
  'memory.run_decay: the due relationships of an org (NULL: every org) deleted, or anonymised when they carry a subject, with their events; returns the counts.';

CREATE FUNCTION memory_internal._run_decay_in(org text, at timestamptz, who jsonb)
RETURNS jsonb LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    bad record;
    due_claims int; due_rels int;
    result jsonb;
    scope text := org;
BEGIN
    PERFORM memory_internal._delegated(who);
    at := coalesce(at, now());
    -- Nothing changes if a due claim names a field decay does not know.
    SELECT c.id, memory_internal._pii_unknown(c.pii_fields) AS field INTO bad
      FROM memory.claims c
     WHERE c.lifecycle_state IN ('pending', 'active') AND c.decay_at < at AND (scope IS NULL OR c.org_id = scope) AND memory_internal._pii_unknown(c.pii_fields) IS NOT NULL
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'claim % lists unknown pii_fields name "%": decay changed nothing', bad.id, bad.field
            USING ERRCODE = '22023', HINT = 'Known: claim_text, subject_id, supports, source, details.<key>.';
    END IF;
    SELECT count(*) INTO due_claims FROM memory.claims c WHERE c.lifecycle_state IN ('pending', 'active') AND c.decay_at < at AND (scope IS NULL OR c.org_id = scope);
    SELECT count(*) INTO due_rels FROM memory.relationships r WHERE r.decay_at < at AND (scope IS NULL OR r.org_id = scope) AND r.anonymized_at IS NULL;
    PERFORM memory_internal._audit_append_many(jsonb_build_array(jsonb_build_object('event_type', 'memory.job.decay.started', 'org_id', scope,
                'payload', jsonb_build_object('at', at, 'dueClaims', due_claims, 'dueRelationships', due_rels))));

    PERFORM memory_internal._knowledge_gate(true);

    result := jsonb_build_object('at', at) || memory_internal._decay_claims(scope, at);
    result := result || memory_internal._decay_relationships(scope, at);
    PERFORM memory_internal._knowledge_gate(false);
    PERFORM memory_internal._audit_append_many(jsonb_build_array(jsonb_build_object('event_type', 'memory.job.decay.completed',
                'org_id', scope, 'payload', result)));
    PERFORM memory_internal._delegated_done(who);
    RETURN result;
END $$;
-- The decay job's entry point: a failure is recorded as memory.job.decay.error although its
-- transaction rolls back (memory_internal._audit_denied hands it to the integrator), then raised again.
CREATE FUNCTION memory.run_decay(at timestamptz DEFAULT now())
RETURNS jsonb LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    st    text;
    msg   text;
    scope text := memory_internal._scope_org();
    o     text;
    one   jsonb;
    total jsonb;
BEGIN
    PERFORM memory_internal._check_at(at, 'memory.run_decay');
    IF NOT memory_internal._citus_distributed('memory.claims') THEN
        RETURN memory_internal._run_decay_in(scope, at, NULL);
    END IF;
    -- Citus: org by org, each run on the node of the org's shards (memory_internal._org_call). An
    -- org with nothing due is not visited.
    at := coalesce(at, now());
    total := jsonb_build_object('at', at, 'claimsAnonymized', 0, 'claimsDeleted', 0, 'claimsArchived', 0,
                                'relationshipsDeleted', 0, 'relationshipsAnonymized', 0);
    FOR o IN SELECT c.org_id FROM memory.claims c
              WHERE c.lifecycle_state IN ('pending', 'active') AND c.decay_at < at AND (scope IS NULL OR c.org_id = scope)
             UNION
             SELECT r.org_id FROM memory.relationships r
              WHERE r.decay_at < at AND r.anonymized_at IS NULL AND (scope IS NULL OR r.org_id = scope)
             ORDER BY 1 LOOP
        one := memory_internal._org_call('memory_internal._run_decay_in(text,timestamptz,jsonb)', o, jsonb_build_array(at));
        total := memory_internal._add_counts(total, one - 'at');
    END LOOP;
    RETURN total;
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT;
    PERFORM memory_internal._audit_denied('memory.job.decay.error',
        jsonb_build_object('sqlstate', st, 'error', msg, 'at', at)::text, memory_internal._scope_org());
    RAISE;
END $$;
COMMENT ON FUNCTION memory.run_decay(timestamptz) IS
  'The decay job: claims (pending or active) past decay_at: PHI-bearing ones (non-empty pii_fields) redacted field by field and archived, hypotheses outside supersession chains deleted, others archived; relationships past decay_at deleted, or anonymised when they carry a subject. Audits started, anonymized, deleted, completed; a failure is audited as memory.job.decay.error although the run rolls back. Not granted to PUBLIC (memory_admin).';

