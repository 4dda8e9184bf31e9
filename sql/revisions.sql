-- Memory over time (SPEC §17, docs/reference.md#memory-over-time): the revisions an UPDATE of a
-- memory keeps, memory.history, and supersession (memory.supersede, the supersedes column).
-- Point-in-time reads (recall and search with as_of) are the retrieval engine's (plan.history).

-- Supersession: the replacing memory names the one it replaces (supersedes); the replaced one is
-- kept, marked (superseded_by, superseded_at), and no longer recalled, retrieved or searched.
ALTER TABLE memory.observations ADD COLUMN supersedes uuid;
ALTER TABLE memory.observations ADD COLUMN superseded_by uuid;
ALTER TABLE memory.observations ADD COLUMN superseded_at timestamptz;
ALTER TABLE memory.observations_archive ADD COLUMN supersedes uuid;
ALTER TABLE memory.observations_archive ADD COLUMN superseded_by uuid;
ALTER TABLE memory.observations_archive ADD COLUMN superseded_at timestamptz;
-- memory.live_observations is the table's every column, made again with these; a superseded
-- memory is not live.
CREATE OR REPLACE VIEW memory.live_observations AS
SELECT * FROM memory.observations o
 WHERE o.soft_deleted_at IS NULL AND (o.expires_at IS NULL OR o.expires_at > now()) AND o.superseded_at IS NULL;
COMMENT ON VIEW memory.live_observations IS 'Observations neither soft-deleted, expired nor superseded.';

-- One row per version a change replaced: rev 1 is the memory as first written, valid from its
-- creation to the change (valid_to); the memory's row is the version after the last revision.
-- Written only by the trigger memory_revisions (as the extension owner); read under the tenant
-- policy and the clearance of each revision's own tier. Removed with the memory (forget, erasure,
-- retention's hard delete, an item's replacement); kept while the memory is archived.
CREATE TABLE memory.revisions (
    org_id         text NOT NULL,
    memory_id      uuid NOT NULL,
    rev            int NOT NULL CHECK (rev >= 1),
    content        text,
    value          jsonb,
    metadata       jsonb,
    classification memory.classification NOT NULL,
    valid_from     timestamptz NOT NULL,
    valid_to       timestamptz NOT NULL,
    actor          text NOT NULL,
    reason         text,
    -- The words of content (english), as memory.observations keeps them: point-in-time reads match by them.
    content_tsv    tsvector GENERATED ALWAYS AS (to_tsvector('english'::regconfig, content)) STORED,
    PRIMARY KEY (org_id, memory_id, rev)
);
CREATE INDEX revisions_memory ON memory.revisions (memory_id);
COMMENT ON TABLE memory.revisions IS 'The versions of memories that changes replaced (content or value, metadata, tier), with when each was valid, who changed it (pseudonymised) and why (memory.change_reason).';
ALTER TABLE memory.revisions ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant ON memory.revisions USING (org_id OPERATOR(pg_catalog.=) (SELECT memory_internal._acting_org()))
    WITH CHECK (org_id OPERATOR(pg_catalog.=) (SELECT memory_internal._acting_org()));
CREATE POLICY clearance ON memory.revisions AS RESTRICTIVE FOR SELECT
    USING (classification OPERATOR(pg_catalog.<=) (SELECT memory_internal._max_tier()));
SELECT pg_catalog.pg_extension_config_dump('memory.revisions', '');

-- Who changes a memory, as audit events name the actor: the application's actor pseudonymised
-- (memory.actor_id) and the acting role.
CREATE FUNCTION memory_internal._revision_actor()
RETURNS text LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    who  text := nullif(pg_catalog.current_setting('memory.actor_id', true), '');
    role text := 'role:' OPERATOR(pg_catalog.||) coalesce((SELECT r.rolname::text FROM pg_catalog.pg_roles r
                                                            WHERE r.oid OPERATOR(pg_catalog.=) memory_internal._caller()), session_user::text);
BEGIN
    IF who IS NULL THEN
        RETURN role;
    END IF;
    RETURN memory_internal._pseudonym(who) OPERATOR(pg_catalog.||) ';' OPERATOR(pg_catalog.||) role;
END $$;

-- AFTER UPDATE of a memory whose content, value, metadata or tier changed (the trigger's WHEN):
-- keep the old version as the next revision. SECURITY DEFINER: writers do not write revisions
-- themselves. It takes only the old row of memory.observations (or of its Citus shard, when the
-- revision goes to the co-located shard of memory.revisions on the same node).
CREATE FUNCTION memory_internal._keep_revision()
RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    rel    regclass;
    n      int;
    since  timestamptz;
    actor  text := memory_internal._revision_actor();
    reason text := nullif(pg_catalog.current_setting('memory.change_reason', true), '');
    -- A tier raised while the text stays (reclassify, a near merge): the same text must not stay
    -- readable below it, so the version kept now and every earlier one are kept at least at the
    -- new tier. A changed text keeps the tier it had.
    tier   memory.classification := CASE WHEN OLD.content IS NOT DISTINCT FROM NEW.content AND OLD.value IS NOT DISTINCT FROM NEW.value
                                         THEN greatest(OLD.classification, NEW.classification) ELSE OLD.classification END;
BEGIN
    IF TG_RELID OPERATOR(pg_catalog.=) 'memory.observations'::regclass THEN
        IF tier OPERATOR(pg_catalog.>) OLD.classification THEN
            UPDATE memory.revisions r SET classification = tier
             WHERE r.org_id OPERATOR(pg_catalog.=) OLD.org_id AND r.memory_id OPERATOR(pg_catalog.=) OLD.id
               AND r.classification OPERATOR(pg_catalog.<) tier;
        END IF;
        SELECT max(r.rev), max(r.valid_to) INTO n, since FROM memory.revisions r
         WHERE r.org_id OPERATOR(pg_catalog.=) OLD.org_id AND r.memory_id OPERATOR(pg_catalog.=) OLD.id;
        INSERT INTO memory.revisions (org_id, memory_id, rev, content, value, metadata, classification, valid_from, valid_to, actor, reason)
        VALUES (OLD.org_id, OLD.id, coalesce(n, 0) OPERATOR(pg_catalog.+) 1, OLD.content, OLD.value, OLD.metadata, tier,
                least(coalesce(since, OLD.created_at), pg_catalog.now()), pg_catalog.now(), actor, reason);
    ELSE
        rel := memory_internal._local_relation('memory.revisions', OLD.org_id);
        IF tier OPERATOR(pg_catalog.>) OLD.classification THEN
            EXECUTE pg_catalog.format('UPDATE %s r SET classification = $3 WHERE r.org_id OPERATOR(pg_catalog.=) $1 AND r.memory_id OPERATOR(pg_catalog.=) $2
                                          AND r.classification OPERATOR(pg_catalog.<) $3', rel)
              USING OLD.org_id, OLD.id, tier;
        END IF;
        EXECUTE pg_catalog.format('SELECT max(r.rev), max(r.valid_to) FROM %s r WHERE r.org_id OPERATOR(pg_catalog.=) $1 AND r.memory_id OPERATOR(pg_catalog.=) $2', rel)
           INTO n, since USING OLD.org_id, OLD.id;
        EXECUTE pg_catalog.format('INSERT INTO %s (org_id, memory_id, rev, content, value, metadata, classification, valid_from, valid_to, actor, reason)
                                   VALUES ($1, $2, $3, $4, $5, $6, $7, $8, pg_catalog.now(), $9, $10)', rel)
          USING OLD.org_id, OLD.id, coalesce(n, 0) OPERATOR(pg_catalog.+) 1, OLD.content, OLD.value, OLD.metadata, tier,
                least(coalesce(since, OLD.created_at), pg_catalog.now()), actor, reason;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER memory_revisions AFTER UPDATE ON memory.observations FOR EACH ROW
    WHEN (OLD.content IS DISTINCT FROM NEW.content OR OLD.value IS DISTINCT FROM NEW.value
          OR OLD.metadata IS DISTINCT FROM NEW.metadata OR OLD.classification IS DISTINCT FROM NEW.classification)
    EXECUTE FUNCTION memory_internal._keep_revision();

-- AFTER DELETE of memories (forget, erasure, retention's hard delete, end_task, an item's
-- replacement, an application's DELETE) and of archived ones: their revisions go with them, once
-- no copy of the memory is left (a row moved to the archive keeps its revisions; forget and
-- erasure delete both copies). Org by org on the org's relations, so that on Citus the
-- statements stay on the shards of this node (memory_internal._local_relation). SECURITY
-- DEFINER: writers do not delete revisions themselves. It reads only the deleted rows' org and id.
CREATE FUNCTION memory_internal._drop_revisions()
RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE g record;
BEGIN
    FOR g IN SELECT o.org_id, pg_catalog.array_agg(o.id) AS ids FROM memory_old o GROUP BY o.org_id LOOP
        EXECUTE pg_catalog.format(
            'DELETE FROM %s r WHERE r.org_id OPERATOR(pg_catalog.=) $1 AND r.memory_id OPERATOR(pg_catalog.=) ANY ($2)
                AND NOT EXISTS (SELECT 1 FROM %s h WHERE h.org_id OPERATOR(pg_catalog.=) $1 AND h.id OPERATOR(pg_catalog.=) r.memory_id)
                AND NOT EXISTS (SELECT 1 FROM %s a WHERE a.org_id OPERATOR(pg_catalog.=) $1 AND a.id OPERATOR(pg_catalog.=) r.memory_id)',
            memory_internal._local_relation('memory.revisions', g.org_id),
            memory_internal._local_relation('memory.observations', g.org_id),
            memory_internal._local_relation('memory.observations_archive', g.org_id)) USING g.org_id, g.ids;
    END LOOP;
    RETURN NULL;
END $$;
CREATE TRIGGER memory_revisions_gone AFTER DELETE ON memory.observations REFERENCING OLD TABLE AS memory_old
    FOR EACH STATEMENT EXECUTE FUNCTION memory_internal._drop_revisions();
CREATE TRIGGER memory_revisions_gone AFTER DELETE ON memory.observations_archive REFERENCING OLD TABLE AS memory_old
    FOR EACH STATEMENT EXECUTE FUNCTION memory_internal._drop_revisions();

-- How many revisions a memory of `org` has and when the last one ended, whatever their tiers (a
-- reader cleared below one still numbers the versions it sees as they are numbered). Only for an
-- org the caller may act for (else nothing). Not granted to PUBLIC: memory.history's.
CREATE FUNCTION memory_internal._revision_head(org text, memory_id uuid, OUT rev int, OUT valid_to timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NOT memory_internal._may_act_for(org) THEN
        RETURN;
    END IF;
    -- Nothing about a memory above the caller's clearance (its existence included).
    IF NOT EXISTS (SELECT 1 FROM memory.observations o WHERE o.org_id OPERATOR(pg_catalog.=) org AND o.id OPERATOR(pg_catalog.=) _revision_head.memory_id
                      AND o.classification OPERATOR(pg_catalog.<=) memory_internal._clearance(org)::memory.classification
                   UNION ALL
                   SELECT 1 FROM memory.observations_archive a WHERE a.org_id OPERATOR(pg_catalog.=) org AND a.id OPERATOR(pg_catalog.=) _revision_head.memory_id
                      AND a.classification OPERATOR(pg_catalog.<=) memory_internal._clearance(org)::memory.classification) THEN
        RETURN;
    END IF;
    SELECT max(r.rev), max(r.valid_to) INTO rev, valid_to FROM memory.revisions r
     WHERE r.org_id OPERATOR(pg_catalog.=) org AND r.memory_id OPERATOR(pg_catalog.=) _revision_head.memory_id;
END $$;

-- The versions of a memory, newest first: the memory as it is now (valid_to NULL), then each
-- revision, as the caller reads them (the tenant policy, and each version within the caller's
-- clearance). A superseded memory has its history too. Nothing for an unknown id.
CREATE FUNCTION memory.history(memory_id uuid)
RETURNS TABLE (rev int, content text, metadata jsonb, classification memory.classification,
               valid_from timestamptz, valid_to timestamptz, actor text, reason text)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    o record;
    h record;
BEGIN
    IF history.memory_id IS NULL THEN
        RAISE EXCEPTION 'memory.history needs a memory id' USING ERRCODE = '22023', HINT = 'Pass the id of a memory.';
    END IF;
    -- (One table a statement: on Citus each is a plain read of a distributed table.)
    FOR o IN SELECT a.org_id, a.content, a.metadata, a.classification, a.created_at FROM memory.observations a
              WHERE a.id OPERATOR(pg_catalog.=) history.memory_id LOOP
        h := memory_internal._revision_head(o.org_id, history.memory_id);
        RETURN QUERY SELECT coalesce(h.rev, 0) OPERATOR(pg_catalog.+) 1, o.content, o.metadata, o.classification,
                            coalesce(h.valid_to, o.created_at), NULL::timestamptz, NULL::text, NULL::text;
    END LOOP;
    FOR o IN SELECT a.org_id, a.content, a.metadata, a.classification, a.created_at FROM memory.observations_archive a
              WHERE a.id OPERATOR(pg_catalog.=) history.memory_id LOOP
        h := memory_internal._revision_head(o.org_id, history.memory_id);
        RETURN QUERY SELECT coalesce(h.rev, 0) OPERATOR(pg_catalog.+) 1, o.content, o.metadata, o.classification,
                            coalesce(h.valid_to, o.created_at), NULL::timestamptz, NULL::text, NULL::text;
    END LOOP;
    RETURN QUERY
    SELECT r.rev, r.content, r.metadata, r.classification, r.valid_from, r.valid_to, r.actor, r.reason
      FROM memory.revisions r WHERE r.memory_id OPERATOR(pg_catalog.=) history.memory_id
     ORDER BY r.rev DESC;
END $$;
COMMENT ON FUNCTION memory.history(uuid) IS
  'The versions of a memory, newest first: the current one (valid_to NULL), then each revision a change kept (rev, content, metadata, tier, valid_from, valid_to, actor pseudonymised, reason from memory.change_reason), as the caller reads them: its orgs, each version within its clearance.';

-- BEFORE INSERT of a memory that names the one it replaces (supersedes): the old memory must be
-- of the same org, live, not superseded already, readable at the caller's clearance (P0002,
-- 22023 otherwise; a held one MX006, naming the hold); the new one carries its
-- weight and user and never a lower tier (memory.reclassify lowers it afterwards); the old one is
-- marked superseded_by/superseded_at; one memory.supersede event with both ids and the reason
-- (memory.change_reason). SECURITY DEFINER: writers do not mark memories themselves; it runs
-- before memory_classify (names sort), so the tier floor is classified with the row.
CREATE FUNCTION memory_internal._supersede_row()
RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    old  memory.observations%ROWTYPE;
    hold bigint;
    src  uuid[];
BEGIN
    IF NOT memory_internal._may_act_for(NEW.org_id) THEN
        RAISE EXCEPTION 'role % may not write memories of org %', coalesce(memory_internal._caller()::regrole::text, '(unknown)'), NEW.org_id
            USING ERRCODE = '42501', HINT = 'An org admin binds the role to the org (memory.grant_org).';
    END IF;
    -- As a derived write (memory_internal._lineage_floor), before the old memory's row lock: a
    -- concurrent forget in the org finishes first, taking the old memory with it, or waits.
    SELECT o.derived_from INTO src FROM memory.observations o
     WHERE o.org_id OPERATOR(pg_catalog.=) NEW.org_id AND o.id OPERATOR(pg_catalog.=) NEW.supersedes;
    IF src IS NOT NULL THEN
        PERFORM pg_catalog.pg_advisory_xact_lock_shared(pg_catalog.hashtextextended('memory_ext.lineage:' OPERATOR(pg_catalog.||) NEW.org_id, 0));
    END IF;
    SELECT * INTO old FROM memory.observations o
     WHERE o.org_id OPERATOR(pg_catalog.=) NEW.org_id AND o.id OPERATOR(pg_catalog.=) NEW.supersedes FOR UPDATE;
    IF NOT FOUND OR old.classification OPERATOR(pg_catalog.>) memory_internal._clearance(NEW.org_id)::memory.classification THEN
        RAISE EXCEPTION 'memory % does not exist in org %', NEW.supersedes, NEW.org_id USING ERRCODE = 'P0002',
            HINT = 'Supersede a live memory of the org you write for (a forgotten one is gone).';
    END IF;
    IF old.superseded_by IS NOT NULL THEN
        RAISE EXCEPTION 'memory % is already superseded by %', old.id, old.superseded_by USING ERRCODE = '22023',
            HINT = 'Supersede the memory that replaced it.';
    END IF;
    IF old.soft_deleted_at IS NOT NULL OR old.expires_at OPERATOR(pg_catalog.<=) pg_catalog.now() THEN
        RAISE EXCEPTION 'memory % is not live (deleted or expired)', old.id USING ERRCODE = '22023',
            HINT = 'Only a live memory is superseded; write a new one instead.';
    END IF;
    hold := memory_internal._hold_for(old.org_id, old.user_id, old.id::text);
    IF hold IS NOT NULL THEN
        RAISE EXCEPTION 'memory % is under legal hold %', old.id, hold USING ERRCODE = 'MX006',
            HINT = 'A held memory is not superseded until its hold is released.';
    END IF;
    IF NEW.id OPERATOR(pg_catalog.=) old.id THEN
        RAISE EXCEPTION 'a memory does not supersede itself' USING ERRCODE = '22023';
    END IF;
    NEW.weight := old.weight;
    NEW.user_id := coalesce(NEW.user_id, old.user_id);
    NEW.classification := greatest(NEW.classification, old.classification);
    -- What the old one was made from, the new one is too (SPEC §18: forgetting a source takes the
    -- correction; its trust no higher than the old one's, which its sources bound).
    IF old.derived_from IS NOT NULL THEN
        NEW.derived_from := nullif(memory_internal._lineage_union(NEW.id, ARRAY(SELECT s.id FROM memory.observations s
                                WHERE s.org_id OPERATOR(pg_catalog.=) NEW.org_id AND s.id OPERATOR(pg_catalog.=) ANY (old.derived_from)
                                  AND s.soft_deleted_at IS NULL), NEW.derived_from), '{}');
        NEW.source_type := memory_internal._trust_type(greatest(memory_internal._trust_rank(NEW.source_type), memory_internal._trust_rank(old.source_type)));
    END IF;
    NEW.superseded_by := NULL;
    NEW.superseded_at := NULL;
    UPDATE memory.observations o SET superseded_by = NEW.id, superseded_at = pg_catalog.now()
     WHERE o.org_id OPERATOR(pg_catalog.=) old.org_id AND o.id OPERATOR(pg_catalog.=) old.id;
    PERFORM memory_internal._audit('memory.supersede', pg_catalog.jsonb_build_object('id', NEW.id, 'supersedes', old.id,
                'reason', nullif(pg_catalog.current_setting('memory.change_reason', true), '')),
            NEW.org_id, NEW.project_id, NEW.workspace_id);
    RETURN NEW;
END $$;
CREATE TRIGGER memory_carry_superseded BEFORE INSERT ON memory.observations FOR EACH ROW
    WHEN (NEW.supersedes IS NOT NULL) EXECUTE FUNCTION memory_internal._supersede_row();

-- Replace a memory with a corrected one (SPEC §17): the new memory (classified, never below the
-- old tier), the old one marked and kept, out of every read but history and exports. SECURITY
-- DEFINER, as memory.put: the org is the old memory's among those the caller may act for
-- (memory_internal._org_of), and the triggers above check the rest for the caller. Granted to
-- memory_writer.
CREATE FUNCTION memory.supersede(old_id uuid, content text, reason text, metadata jsonb DEFAULT '{}')
RETURNS uuid LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    org   text;
    rid   uuid;
    saved text := pg_catalog.current_setting('memory.change_reason', true);
BEGIN
    IF old_id IS NULL THEN
        RAISE EXCEPTION 'memory.supersede needs the id of the memory it replaces' USING ERRCODE = '22023', HINT = 'Pass old_id.';
    END IF;
    IF memory_internal._blank(supersede.content) THEN
        RAISE EXCEPTION 'memory.supersede needs the new content' USING ERRCODE = '22023', HINT = 'Pass the corrected memory''s text.';
    END IF;
    IF memory_internal._blank(reason) THEN
        RAISE EXCEPTION 'memory.supersede needs a reason' USING ERRCODE = '22023', HINT = 'The reason is recorded with the change (memory.supersede event).';
    END IF;
    IF supersede.metadata IS NULL OR pg_catalog.jsonb_typeof(supersede.metadata) OPERATOR(pg_catalog.<>) 'object' THEN
        RAISE EXCEPTION 'memory.supersede: metadata must be a JSON object' USING ERRCODE = '22023', HINT = 'Pass ''{}'' for none.';
    END IF;
    org := memory_internal._org_of('memory.observations', old_id);
    IF org IS NULL THEN
        RAISE EXCEPTION 'memory % does not exist', old_id USING ERRCODE = 'P0002',
            HINT = 'Supersede a live memory of an org you write for (a forgotten one is gone).';
    END IF;
    PERFORM pg_catalog.set_config('memory.change_reason', reason, true);
    INSERT INTO memory.observations (org_id, content, metadata, supersedes)
    VALUES (org, supersede.content, supersede.metadata, old_id) RETURNING id INTO rid;
    PERFORM pg_catalog.set_config('memory.change_reason', coalesce(saved, ''), true);
    RETURN rid;
END $$;
COMMENT ON FUNCTION memory.supersede(uuid, text, text, jsonb) IS
  'Replace a memory: writes the new one (classified, never below the old tier; carrying its weight and user), marks the old one superseded_by/superseded_at (kept, never recalled, retrieved or searched; in history and exports until its retention ends); audited memory.supersede with both ids. A superseded or not live memory: 22023; another org''s or a forgotten one: P0002; a held one: MX006. Returns the new id.';
