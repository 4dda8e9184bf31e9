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
-- memory.search's namespace prefix over live items (sql/items.sql's observations_item_prefix,
-- made here, after superseded_at): its predicate holds the search's `soft_deleted_at IS NULL`
-- and `superseded_at IS NULL`, so the plan does not test them on each row the range reads, and a
-- row is deformed only as far as the filter's value (superseded_at is the 30th column, value the
-- 24th: at 100,000 items, 12% of a filter search's statement). A search as of a time reads
-- observations_item_prefix (its rows may since have been deleted or superseded).
CREATE INDEX observations_item_live_prefix ON memory.observations (org_id, memory_internal._item_ns_path(namespace) COLLATE "C")
    WHERE key IS NOT NULL AND soft_deleted_at IS NULL AND superseded_at IS NULL;

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
CREATE FUNCTION memory.supersede(old_id uuid, content text, reason text, metadata jsonb DEFAULT '{}', embedding real[] DEFAULT NULL)
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
    IF supersede.embedding IS NOT NULL THEN
        PERFORM memory_internal._embedding_check('memory.supersede', supersede.embedding);
    END IF;
    org := memory_internal._org_of('memory.observations', old_id);
    IF org IS NULL THEN
        RAISE EXCEPTION 'memory % does not exist', old_id USING ERRCODE = 'P0002',
            HINT = 'Supersede a live memory of an org you write for (a forgotten one is gone).';
    END IF;
    PERFORM pg_catalog.set_config('memory.change_reason', reason, true);
    INSERT INTO memory.observations (org_id, content, metadata, supersedes)
    VALUES (org, supersede.content, supersede.metadata, old_id) RETURNING id INTO rid;
    -- The new text's embedding, as memory.remember stores it (the old one's is of the old text).
    IF supersede.embedding IS NOT NULL THEN
        EXECUTE pg_catalog.format('UPDATE memory.observations o SET embedding = $1::%I.vector WHERE o.org_id OPERATOR(pg_catalog.=) $2 AND o.id OPERATOR(pg_catalog.=) $3',
                                  memory_internal._vector_schema())
            USING supersede.embedding, org, rid;
    END IF;
    PERFORM pg_catalog.set_config('memory.change_reason', coalesce(saved, ''), true);
    RETURN rid;
END $$;
COMMENT ON FUNCTION memory.supersede(uuid, text, text, jsonb, real[]) IS
  'Replace a memory: writes the new one (classified, never below the old tier; carrying its weight and user; with embedding, its vector, as memory.remember stores one: 22023 before embeddings are enabled or for other dimensions), marks the old one superseded_by/superseded_at (kept, never recalled, retrieved or searched; in history and exports until its retention ends); audited memory.supersede with both ids. A superseded or not live memory: 22023; another org''s or a forgotten one: P0002; a held one: MX006. Returns the new id.';

-- ------------------------------------------------------------------------------------------------
-- Revisions of governed application tables (memory.govern's "revisions" option): the version an
-- UPDATE of a row's content (or a raise of its tier) replaces, kept as memory.revisions keeps a
-- memory's, in a table of their own so that memory.revisions and its readers stay as they are.
-- One row per version replaced, keyed by the table, the row's org (NULL for a table without an
-- org column) and its id (as text, whatever the id column's type); rev 1 is the row as it was
-- first governed or written. Written only by the trigger memory_revisions (as the extension
-- owner); read under the tenant policy, the reader's SELECT on the table, and the clearance of
-- each revision's own tier. Removed with the row (any DELETE: forget, erasure, retention's hard
-- delete, the application's own), with the table's TRUNCATE or DROP, and when the option is
-- turned off; a held row is neither deleted nor changed, so its revisions stay.
CREATE TABLE memory.table_revisions (
    relid          regclass NOT NULL,
    org_id         text,
    row_id         text NOT NULL,
    rev            int NOT NULL CHECK (rev >= 1),
    user_id        text,
    content        text,
    classification memory.classification NOT NULL,
    valid_from     timestamptz,
    valid_to       timestamptz NOT NULL,
    actor          text NOT NULL,
    reason         text
);
CREATE UNIQUE INDEX table_revisions_key ON memory.table_revisions (relid, row_id, rev, org_id) NULLS NOT DISTINCT;
COMMENT ON TABLE memory.table_revisions IS 'The versions of rows of governed application tables (memory.govern "revisions") that changes replaced (content, tier), with when each was valid, who changed it (pseudonymised) and why (memory.change_reason).';
ALTER TABLE memory.table_revisions ENABLE ROW LEVEL SECURITY;
-- The reader may read the table, and the revision is of the org it acts for (or of a table
-- without an org column).
CREATE POLICY tenant ON memory.table_revisions
    USING (pg_catalog.has_table_privilege(relid::pg_catalog.oid, 'SELECT')
           AND (org_id IS NULL OR org_id OPERATOR(pg_catalog.=) (SELECT memory_internal._acting_org())));
CREATE POLICY clearance ON memory.table_revisions AS RESTRICTIVE FOR SELECT
    USING (classification OPERATOR(pg_catalog.<=) (SELECT memory_internal._max_tier()));
SELECT pg_catalog.pg_extension_config_dump('memory.table_revisions', '');

-- A tier read from a governed table's tier column (a label, or a jsonb target's classification
-- key): the tier, or restricted when there is none or it is not a tier (as memory_clearance reads it).
CREATE FUNCTION memory_internal._tier_of(label text)
RETURNS memory.classification LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF label IS NULL OR NOT label OPERATOR(pg_catalog.=) ANY (pg_catalog.enum_range(NULL::memory.classification)::text[]) THEN
        RETURN 'restricted';
    END IF;
    RETURN label::memory.classification;
END $$;

-- Columns `cols` of row `r` (a trigger's NEW or OLD) as jsonb {column: text}, JSON null for NULL,
-- each through its type's output function (format's %s): never pg_catalog.to_jsonb of the row,
-- which calls a cast to json of a column's type; the table's owner may create one for a type it
-- owns (an enum column), and a SECURITY DEFINER trigger would run it with the extension owner's
-- rights. Only the columns named are read. Not granted to PUBLIC.
CREATE FUNCTION memory_internal._row_text(r anyelement, cols text[])
RETURNS jsonb LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    parts text[];
    c     text;
    v     jsonb;
BEGIN
    FOREACH c IN ARRAY cols LOOP
        CONTINUE WHEN c IS NULL OR c OPERATOR(pg_catalog.=) '';
        parts := parts OPERATOR(pg_catalog.||) ARRAY[pg_catalog.quote_literal(c),
                     pg_catalog.format('CASE WHEN ($1).%1$I IS NULL THEN NULL ELSE pg_catalog.format(''%%s'', ($1).%1$I) END', c)];
    END LOOP;
    IF parts IS NULL THEN
        RETURN '{}';
    END IF;
    EXECUTE 'SELECT pg_catalog.jsonb_build_object(' OPERATOR(pg_catalog.||) pg_catalog.array_to_string(parts, ', ') OPERATOR(pg_catalog.||) ')'
       INTO STRICT v USING r;
    RETURN v;
END $$;

-- AFTER UPDATE row trigger of a table governed with "revisions" (memory_revisions; its WHEN: the
-- content, the tier, the id or the org changed). Arguments: the id, content, org, user, tier
-- columns, the tier column's kind (jsonb or not) and the created_at stamp ('' for none). Keeps the
-- old version as the next revision of the row (a tier raised while the text stays raises the
-- earlier ones too, as on memory.observations); a row whose id or org changed takes its revisions
-- along. SECURITY DEFINER: writers do not write revisions themselves; it reads only the old and
-- new row of a table that is governed with the option.
CREATE FUNCTION memory_internal._keep_table_revision()
RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    o      jsonb;
    n      jsonb;
    old_t  memory.classification;
    new_t  memory.classification;
    tier   memory.classification;
    head   int;
    since  timestamptz;
BEGIN
    IF TG_WHEN OPERATOR(pg_catalog.<>) 'AFTER' OR TG_LEVEL OPERATOR(pg_catalog.<>) 'ROW' OR TG_OP OPERATOR(pg_catalog.<>) 'UPDATE' OR TG_NARGS OPERATOR(pg_catalog.<>) 7
       OR NOT EXISTS (SELECT 1 FROM memory.governance_registry g WHERE g.relid OPERATOR(pg_catalog.=) TG_RELID::regclass
                         AND NOT g.builtin AND g.options OPERATOR(pg_catalog.@>) '{"revisions": true}') THEN
        RAISE EXCEPTION 'memory_internal._keep_table_revision is the AFTER UPDATE row trigger memory.govern attaches with "revisions"' USING ERRCODE = '39P01';
    END IF;
    -- The mapped columns only, as text (memory_internal._row_text: no cast of the owner's runs here).
    o := memory_internal._row_text(OLD, TG_ARGV[0:4] OPERATOR(pg_catalog.||) TG_ARGV[6]);
    n := memory_internal._row_text(NEW, TG_ARGV[0:4] OPERATOR(pg_catalog.||) TG_ARGV[6]);
    IF TG_ARGV[4] OPERATOR(pg_catalog.=) '' THEN
        old_t := 'restricted';
        new_t := 'restricted';
    ELSIF TG_ARGV[5] OPERATOR(pg_catalog.=) 'jsonb' THEN
        old_t := memory_internal._tier_of((o OPERATOR(pg_catalog.->>) TG_ARGV[4])::jsonb OPERATOR(pg_catalog.->>) 'classification');
        new_t := memory_internal._tier_of((n OPERATOR(pg_catalog.->>) TG_ARGV[4])::jsonb OPERATOR(pg_catalog.->>) 'classification');
    ELSE
        old_t := memory_internal._tier_of(o OPERATOR(pg_catalog.->>) TG_ARGV[4]);
        new_t := memory_internal._tier_of(n OPERATOR(pg_catalog.->>) TG_ARGV[4]);
    END IF;
    -- A row whose id or org changed: its revisions follow it.
    IF (o OPERATOR(pg_catalog.->>) TG_ARGV[0]) IS DISTINCT FROM (n OPERATOR(pg_catalog.->>) TG_ARGV[0])
       OR (o OPERATOR(pg_catalog.->>) TG_ARGV[2]) IS DISTINCT FROM (n OPERATOR(pg_catalog.->>) TG_ARGV[2]) THEN
        UPDATE memory.table_revisions r SET row_id = n OPERATOR(pg_catalog.->>) TG_ARGV[0], org_id = n OPERATOR(pg_catalog.->>) TG_ARGV[2]
         WHERE r.relid OPERATOR(pg_catalog.=) TG_RELID::regclass AND r.row_id OPERATOR(pg_catalog.=) (o OPERATOR(pg_catalog.->>) TG_ARGV[0])
           AND r.org_id IS NOT DISTINCT FROM (o OPERATOR(pg_catalog.->>) TG_ARGV[2]);
    END IF;
    -- The same text, and the same tier or a first one (govern's backfill classifying a row): no version replaced.
    IF (o OPERATOR(pg_catalog.->) TG_ARGV[1]) IS NOT DISTINCT FROM (n OPERATOR(pg_catalog.->) TG_ARGV[1])
       AND (old_t OPERATOR(pg_catalog.=) new_t
            OR (TG_ARGV[4] OPERATOR(pg_catalog.<>) '' AND coalesce(o OPERATOR(pg_catalog.->) TG_ARGV[4], 'null') OPERATOR(pg_catalog.=) 'null'::jsonb)) THEN
        RETURN NULL;
    END IF;
    -- A tier raised while the text stays: the same text does not stay readable below it.
    tier := CASE WHEN (o OPERATOR(pg_catalog.->) TG_ARGV[1]) IS NOT DISTINCT FROM (n OPERATOR(pg_catalog.->) TG_ARGV[1])
                 THEN greatest(old_t, new_t) ELSE old_t END;
    IF tier OPERATOR(pg_catalog.>) old_t THEN
        UPDATE memory.table_revisions r SET classification = tier
         WHERE r.relid OPERATOR(pg_catalog.=) TG_RELID::regclass AND r.row_id OPERATOR(pg_catalog.=) (n OPERATOR(pg_catalog.->>) TG_ARGV[0])
           AND r.org_id IS NOT DISTINCT FROM (n OPERATOR(pg_catalog.->>) TG_ARGV[2]) AND r.classification OPERATOR(pg_catalog.<) tier;
    END IF;
    SELECT max(r.rev), max(r.valid_to) INTO head, since FROM memory.table_revisions r
     WHERE r.relid OPERATOR(pg_catalog.=) TG_RELID::regclass AND r.row_id OPERATOR(pg_catalog.=) (n OPERATOR(pg_catalog.->>) TG_ARGV[0])
       AND r.org_id IS NOT DISTINCT FROM (n OPERATOR(pg_catalog.->>) TG_ARGV[2]);
    -- Valid from the end of the one before, else the row's created_at stamp; unknown (NULL) without one.
    since := coalesce(since, (o OPERATOR(pg_catalog.->>) TG_ARGV[6])::timestamptz);
    IF since OPERATOR(pg_catalog.>) pg_catalog.now() THEN
        since := pg_catalog.now();
    END IF;
    INSERT INTO memory.table_revisions (relid, org_id, row_id, rev, user_id, content, classification, valid_from, valid_to, actor, reason)
    VALUES (TG_RELID::regclass, n OPERATOR(pg_catalog.->>) TG_ARGV[2], n OPERATOR(pg_catalog.->>) TG_ARGV[0], coalesce(head, 0) OPERATOR(pg_catalog.+) 1,
            o OPERATOR(pg_catalog.->>) TG_ARGV[3], o OPERATOR(pg_catalog.->>) TG_ARGV[1], tier,
            since, pg_catalog.now(),
            memory_internal._revision_actor(), nullif(pg_catalog.current_setting('memory.change_reason', true), ''));
    RETURN NULL;
END $$;

-- AFTER DELETE (transition table memory_old) and AFTER TRUNCATE statement triggers of a table
-- governed with "revisions" (memory_revisions_gone, memory_revisions_truncate). Arguments: the id
-- and org columns. The deleted rows' revisions go with them (a held row is not deleted: its
-- hold trigger refuses first); a TRUNCATE takes every revision of the table. SECURITY DEFINER:
-- writers do not delete revisions themselves; it touches only the revisions of the firing table.
CREATE FUNCTION memory_internal._drop_table_revisions()
RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF TG_WHEN OPERATOR(pg_catalog.<>) 'AFTER' OR TG_LEVEL OPERATOR(pg_catalog.<>) 'STATEMENT' OR TG_OP NOT IN ('DELETE', 'TRUNCATE')
       OR TG_NARGS OPERATOR(pg_catalog.<>) 2 THEN
        RAISE EXCEPTION 'memory_internal._drop_table_revisions is the AFTER DELETE and TRUNCATE statement trigger memory.govern attaches with "revisions"'
            USING ERRCODE = '39P01';
    END IF;
    IF TG_OP OPERATOR(pg_catalog.=) 'TRUNCATE' THEN
        DELETE FROM memory.table_revisions r WHERE r.relid OPERATOR(pg_catalog.=) TG_RELID::regclass;
    ELSE
        DELETE FROM memory.table_revisions r
         USING (SELECT DISTINCT j OPERATOR(pg_catalog.->>) TG_ARGV[0] AS id, j OPERATOR(pg_catalog.->>) TG_ARGV[1] AS org
                  FROM memory_old m CROSS JOIN LATERAL pg_catalog.to_jsonb(m) j) d
         WHERE r.relid OPERATOR(pg_catalog.=) TG_RELID::regclass AND r.row_id OPERATOR(pg_catalog.=) d.id
           AND r.org_id IS NOT DISTINCT FROM d.org;
    END IF;
    RETURN NULL;
END $$;

-- The revisions of a governed table go (its "revisions" option turned off, memory.ungovern): no
-- trigger would remove them with their rows any more. Refused (MX006) while one of them is of a
-- row under an active legal hold. Called by memory.govern and memory.ungovern (SECURITY DEFINER,
-- after their owner check); not granted to PUBLIC.
CREATE FUNCTION memory_internal._drop_governed_revisions(tbl regclass)
RETURNS bigint LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    hold bigint;
    n    bigint;
BEGIN
    SELECT h.id INTO hold FROM memory.table_revisions r JOIN memory.legal_holds h
        ON h.released_at IS NULL AND h.org_id OPERATOR(pg_catalog.=) r.org_id
       AND memory_internal._hold_matches(h.observation_id::text, h.user_id, r.row_id, r.user_id)
     WHERE r.relid OPERATOR(pg_catalog.=) tbl ORDER BY h.id LIMIT 1;
    IF hold IS NOT NULL THEN
        RAISE EXCEPTION 'revisions of % are under legal hold %', tbl, hold USING ERRCODE = 'MX006',
            HINT = 'Keep "revisions": true until the hold is released; the revisions of held rows are kept with them.';
    END IF;
    DELETE FROM memory.table_revisions r WHERE r.relid OPERATOR(pg_catalog.=) tbl;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END $$;

-- memory.govern, "revisions": the triggers that keep and remove the revisions of a table with an
-- id column and a content column (22023 with a hint otherwise); without the option they are
-- dropped, and the table's revisions with them (memory_internal._drop_governed_revisions). Runs
-- inside memory.govern (the gate open), the triggers created as the caller.
CREATE FUNCTION memory_internal._govern_revisions(tbl regclass, opts jsonb, eff jsonb)
RETURNS jsonb LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    c_id      text;
    c_content text;
    c_org     text;
    c_user    text;
    c_tier    text;
    c_created text;
    args      text;
BEGIN
    IF coalesce(jsonb_typeof(opts->'revisions'), 'null') NOT IN ('boolean', 'null') THEN
        RAISE EXCEPTION 'option "revisions" must be true or false' USING ERRCODE = '22023';
    END IF;
    -- memory_ext's own tables keep theirs (memory.observations: the trigger memory_revisions above).
    IF (SELECT c.relnamespace FROM pg_class c WHERE c.oid = tbl) = 'memory'::regnamespace THEN
        IF coalesce((opts->>'revisions')::boolean, false) THEN
            RAISE EXCEPTION '"revisions" is for application tables' USING ERRCODE = '22023',
                HINT = 'memory.observations keeps its revisions in memory.revisions without it.';
        END IF;
        RETURN eff;
    END IF;
    IF NOT coalesce((opts->>'revisions')::boolean, false) THEN
        PERFORM memory_internal._drop_trigger(tbl, 'memory_revisions');
        PERFORM memory_internal._drop_trigger(tbl, 'memory_revisions_gone');
        PERFORM memory_internal._drop_trigger(tbl, 'memory_revisions_truncate');
        PERFORM memory_internal._drop_governed_revisions(tbl);
        RETURN eff;
    END IF;
    -- (On Citus the triggers would fire on the shards, on the workers, away from the table's revisions.)
    IF memory_internal._citus_distributed(tbl) THEN
        RAISE EXCEPTION '"revisions" is not supported on a distributed table (%)', tbl USING ERRCODE = '0A000',
            HINT = 'Keep revisions of a table that stays local to the coordinator, or leave "revisions" out.';
    END IF;
    c_id := coalesce(eff->>'id', opts->>'id', CASE WHEN memory_internal._has_column(tbl, 'id') THEN 'id' END);
    IF c_id IS NULL THEN
        RAISE EXCEPTION '"revisions" needs an id column, and % has none', tbl USING ERRCODE = '22023',
            HINT = 'Map the column that identifies a row with {"id": "<column>"} (its revisions are kept by it), or leave "revisions" out.';
    END IF;
    PERFORM memory_internal._column_type(tbl, c_id, 'id');
    c_content := coalesce(eff->>'content', opts->>'content', CASE WHEN memory_internal._has_column(tbl, 'content') THEN 'content' END);
    IF c_content IS NULL THEN
        RAISE EXCEPTION '"revisions" needs a content column, and % has none', tbl USING ERRCODE = '22023',
            HINT = 'Map the text a revision keeps with {"content": "<column>"}, or leave "revisions" out.';
    END IF;
    PERFORM memory_internal._column_type(tbl, c_content, 'content');
    c_org := coalesce(eff->>'org', opts->>'org', CASE WHEN memory_internal._has_column(tbl, 'org_id') THEN 'org_id' END);
    c_user := coalesce(eff->>'user', opts->>'user', CASE WHEN memory_internal._has_column(tbl, 'user_id') THEN 'user_id' END);
    c_tier := coalesce(eff->'target'->>0, eff->>'audit_tier');
    c_created := coalesce(eff->'stamps'->>'created_at', '');
    FOREACH args IN ARRAY array_remove(ARRAY[c_org, c_user, c_tier, nullif(c_created, '')], NULL) LOOP
        PERFORM memory_internal._column_type(tbl, args, 'revisions');
    END LOOP;
    args := format('%L, %L, %L, %L, %L, %L, %L', c_id, c_content, coalesce(c_org, ''), coalesce(c_user, ''), coalesce(c_tier, ''),
                   CASE WHEN c_tier IS NOT NULL AND memory_internal._column_type(tbl, c_tier, 'target') = 'jsonb'::regtype THEN 'jsonb' ELSE '' END,
                   c_created);
    PERFORM memory_internal._drop_trigger(tbl, 'memory_revisions');
    PERFORM memory_internal._drop_trigger(tbl, 'memory_revisions_gone');
    PERFORM memory_internal._drop_trigger(tbl, 'memory_revisions_truncate');
    PERFORM memory_internal._exec_as_caller(format(
        'CREATE TRIGGER memory_revisions AFTER UPDATE ON %s FOR EACH ROW WHEN (%s) EXECUTE FUNCTION memory_internal._keep_table_revision(%s)',
        tbl, (SELECT string_agg(format('OLD.%1$I IS DISTINCT FROM NEW.%1$I', c), ' OR ') FROM unnest(array_remove(ARRAY[c_id, c_content, c_org, c_tier], NULL)) c),
        args));
    PERFORM memory_internal._exec_as_caller(format(
        'CREATE TRIGGER memory_revisions_gone AFTER DELETE ON %s REFERENCING OLD TABLE AS memory_old FOR EACH STATEMENT '
        'EXECUTE FUNCTION memory_internal._drop_table_revisions(%L, %L)', tbl, c_id, coalesce(c_org, '')));
    PERFORM memory_internal._exec_as_caller(format(
        'CREATE TRIGGER memory_revisions_truncate AFTER TRUNCATE ON %s FOR EACH STATEMENT '
        'EXECUTE FUNCTION memory_internal._drop_table_revisions(%L, %L)', tbl, c_id, coalesce(c_org, '')));
    RETURN eff || jsonb_strip_nulls(jsonb_build_object('revisions', true, 'id', c_id, 'content', c_content, 'org', c_org, 'user', c_user));
END $$;

-- How many revisions row `row_id` of org `org` (NULL: a table without an org column) of governed
-- table tbl has and when the last one ended, whatever their tiers (a reader cleared below one
-- numbers the versions it sees as they are numbered), with whether the current version (of tier
-- `tier`, as the caller read it) is within the caller's clearance. Only for a table the caller
-- may SELECT and an org it may act for (else nothing). Not granted to PUBLIC: memory.history's.
CREATE FUNCTION memory_internal._table_revision_head(tbl regclass, org text, row_id text, tier memory.classification,
                                                     OUT rev int, OUT valid_to timestamptz, OUT cleared boolean)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF tbl IS NULL OR row_id IS NULL OR NOT pg_catalog.has_table_privilege(memory_internal._caller(), tbl::pg_catalog.oid, 'SELECT')
       OR (org IS NOT NULL AND NOT memory_internal._may_act_for(org)) THEN
        RETURN;
    END IF;
    -- (The clearance in the row's org; for a table without an org column, in the org the caller acts for.)
    cleared := coalesce(coalesce(tier, 'restricted') OPERATOR(pg_catalog.<=)
                        memory_internal._clearance(coalesce(org, memory_internal._acting_org()))::memory.classification, false);
    SELECT max(r.rev), max(r.valid_to) INTO rev, valid_to FROM memory.table_revisions r
     WHERE r.relid OPERATOR(pg_catalog.=) tbl AND r.row_id OPERATOR(pg_catalog.=) _table_revision_head.row_id
       AND r.org_id IS NOT DISTINCT FROM org;
END $$;

-- The versions of row `row_id` of a table governed with "revisions", newest first: each current
-- row of that id the caller reads (with its own privileges and the table's policies; the version
-- within its clearance), valid_to NULL, then each revision as the caller reads them (memory.table_revisions'
-- policies: the org it acts for, its SELECT on the table, each revision within its clearance).
-- Runs as the caller. Nothing for an unknown id.
CREATE FUNCTION memory.history(tbl regclass, row_id text)
RETURNS TABLE (rev int, content text, classification memory.classification,
               valid_from timestamptz, valid_to timestamptz, actor text, reason text)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    opts jsonb;
    tier text;
    cur  record;
    h    record;
BEGIN
    IF tbl IS NULL OR row_id IS NULL THEN
        RAISE EXCEPTION 'memory.history(table, row_id) needs a table and a row id' USING ERRCODE = '22023',
            HINT = 'Pass a table governed with "revisions" and the id of one of its rows (as text).';
    END IF;
    IF NOT pg_catalog.has_table_privilege(tbl, 'SELECT') THEN
        RAISE EXCEPTION 'permission denied for table %', tbl USING ERRCODE = '42501', HINT = 'The table''s owner grants SELECT on it.';
    END IF;
    SELECT g.options INTO opts FROM memory.governed_tables g WHERE g.table_name OPERATOR(pg_catalog.=) tbl;
    IF opts IS NULL OR NOT opts OPERATOR(pg_catalog.@>) '{"revisions": true}' THEN
        RAISE EXCEPTION 'table % keeps no revisions', tbl USING ERRCODE = '22023',
            HINT = 'Its owner turns them on with memory.govern(table, ''{..., "revisions": true}'').';
    END IF;
    tier := coalesce(opts->'target'->>0, opts->>'audit_tier');
    tier := CASE WHEN tier IS NULL THEN 'NULL::text'
                 WHEN EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid OPERATOR(pg_catalog.=) tbl AND a.attname OPERATOR(pg_catalog.=) tier
                                 AND a.atttypid OPERATOR(pg_catalog.=) 'jsonb'::regtype) THEN format('t.%I OPERATOR(pg_catalog.->>) ''classification''', tier)
                 ELSE format('t.%I::text', tier) END;
    FOR cur IN EXECUTE format('SELECT t.%I::text AS content, %s::text AS org, memory_internal._tier_of(%s) AS tier, %s AS created_at
                                 FROM %s t WHERE t.%I OPERATOR(pg_catalog.=) $1::%s',
                              opts->>'content', CASE WHEN opts->>'org' IS NULL THEN 'NULL' ELSE format('t.%I', opts->>'org') END, tier,
                              CASE WHEN opts->'stamps'->>'created_at' IS NULL THEN 'NULL::timestamptz'
                                   ELSE format('t.%I::timestamptz', opts->'stamps'->>'created_at') END,
                              tbl, opts->>'id', (SELECT a.atttypid::regtype FROM pg_attribute a WHERE a.attrelid OPERATOR(pg_catalog.=) tbl
                                                   AND a.attname OPERATOR(pg_catalog.=) (opts->>'id') AND NOT a.attisdropped)) USING row_id LOOP
        h := memory_internal._table_revision_head(tbl, cur.org, row_id, cur.tier);
        CONTINUE WHEN NOT coalesce(h.cleared, false);
        RETURN QUERY SELECT coalesce(h.rev, 0) OPERATOR(pg_catalog.+) 1, cur.content, cur.tier,
                            coalesce(h.valid_to, cur.created_at), NULL::timestamptz, NULL::text, NULL::text;
    END LOOP;
    -- The revisions, as memory.table_revisions' policies let the caller read them (also those of a
    -- row whose current version is above its clearance: each version has its own tier).
    RETURN QUERY
    SELECT r.rev, r.content, r.classification, r.valid_from, r.valid_to, r.actor, r.reason
      FROM memory.table_revisions r
     WHERE r.relid OPERATOR(pg_catalog.=) tbl AND r.row_id OPERATOR(pg_catalog.=) history.row_id
     ORDER BY r.org_id, r.rev DESC;
END $$;
COMMENT ON FUNCTION memory.history(regclass, text) IS
  'The versions of a row of a table governed with "revisions", newest first: the row as the caller reads it now (valid_to NULL; within its clearance), then each revision an UPDATE kept (rev, content, tier, valid_from, valid_to, actor pseudonymised, reason from memory.change_reason), within the caller''s org and clearance. A table without the option: 22023.';
