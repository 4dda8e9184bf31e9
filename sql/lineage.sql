-- Lineage (SPEC §18, docs/reference.md#lineage): the memories a summary, reflection or extracted
-- fact was made from (derived_from), the floors a derived memory keeps (tier, trust, retention),
-- kept when a source later changes, and memory.lineage. Forgetting follows lineage
-- (memory_internal._descendants, called by memory.forget and memory.erase_subject).

ALTER TABLE memory.observations ADD COLUMN derived_from uuid[];
ALTER TABLE memory.observations_archive ADD COLUMN derived_from uuid[];
-- A source's derived memories, found by containment (derived_from @> ARRAY[id]); only rows that
-- have sources are indexed, so a plain memory's insert pays nothing for it.
CREATE INDEX observations_derived_from ON memory.observations USING gin (derived_from) WHERE derived_from IS NOT NULL;
CREATE INDEX observations_archive_derived_from ON memory.observations_archive USING gin (derived_from) WHERE derived_from IS NOT NULL;

-- How much an observation's source_type is trusted, 1 (most) to 5 (least; NULL, unknown):
-- decision 1, fact 2, preference 3, tool_result 4. A derived memory's source_type is never
-- trusted more than its least trusted source's: summarising never upgrades authority.
CREATE FUNCTION memory_internal._trust_rank(st memory.source_type)
RETURNS int LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT CASE st WHEN 'decision' THEN 1 WHEN 'fact' THEN 2 WHEN 'preference' THEN 3 WHEN 'tool_result' THEN 4 ELSE 5 END $$;

-- The source_type of a trust rank (5: NULL).
CREATE FUNCTION memory_internal._trust_type(rank int)
RETURNS memory.source_type LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT (ARRAY['decision', 'fact', 'preference', 'tool_result']::memory.source_type[])[rank] $$;

-- derived_from's checks (22023, 22004 for a NULL element): a one-dimensional array of at most
-- 1,000 ids, none NULL, not the row's own id. Returns the ids, each once, in the order given (an
-- empty array: NULL, no sources).
CREATE FUNCTION memory_internal._lineage_ids(self uuid, ids uuid[])
RETURNS uuid[] LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF ids IS NULL OR pg_catalog.cardinality(ids) OPERATOR(pg_catalog.=) 0 THEN
        RETURN NULL;
    END IF;
    IF pg_catalog.array_ndims(ids) OPERATOR(pg_catalog.>) 1 THEN
        RAISE EXCEPTION 'derived_from takes a one-dimensional array of memory ids' USING ERRCODE = '22023',
            HINT = 'Pass ARRAY[id, id, ...]: the memories this one was made from.';
    END IF;
    IF pg_catalog.cardinality(ids) OPERATOR(pg_catalog.>) 1000 THEN
        RAISE EXCEPTION 'derived_from names at most 1,000 memories (% given)', pg_catalog.cardinality(ids) USING ERRCODE = '22023',
            HINT = 'Derive from the memories the text was made from; a summary of more is better made from summaries.';
    END IF;
    IF pg_catalog.array_position(ids, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'derived_from takes no NULL id (element %)', pg_catalog.array_position(ids, NULL) USING ERRCODE = '22004',
            HINT = 'Leave NULLs out of derived_from.';
    END IF;
    IF self OPERATOR(pg_catalog.=) ANY (ids) THEN
        RAISE EXCEPTION 'memory % cannot be derived from itself', self USING ERRCODE = '22023',
            HINT = 'derived_from names other memories: a cycle in lineage is refused.';
    END IF;
    RETURN ARRAY(SELECT u.id FROM pg_catalog.unnest(ids) WITH ORDINALITY u(id, n) GROUP BY u.id ORDER BY pg_catalog.min(u.n));
END $$;

-- BEFORE INSERT OR UPDATE of a memory with sources (the trigger memory_ancestry, which fires
-- before the classify trigger): when derived_from is written, every source must be a memory of
-- the row's org (not soft-deleted) within the writer's clearance there, else 22023 (a missing id
-- and another org's alike), and an UPDATE may not make a cycle; then the floors: the tier at
-- least the strictest source's (the classify trigger keeps it as a floor and stamps retention
-- for it) and the source_type no more trusted than the least trusted source's. On every later
-- UPDATE (a source's change reaches its derived memories as one: memory_internal._lineage_down)
-- the floors are taken again from the sources still there. SECURITY DEFINER: a writer may not
-- read the sources it names. It reads only the new row's org, id and sources.
CREATE FUNCTION memory_internal._lineage_floor()
RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    tier   memory.classification;
    worst  int;
    found  int;
    cl     memory.classification;
    miss   uuid;
BEGIN
    IF memory_internal._restore_mode() THEN
        RETURN NEW;
    END IF;
    IF TG_OP OPERATOR(pg_catalog.=) 'INSERT' OR NEW.derived_from IS DISTINCT FROM OLD.derived_from THEN
        NEW.derived_from := memory_internal._lineage_ids(NEW.id, NEW.derived_from);
        IF NEW.derived_from IS NULL THEN
            RETURN NEW;
        END IF;
        PERFORM memory_internal._require_org(NEW.org_id);
        cl := memory_internal._clearance(NEW.org_id)::memory.classification;
        SELECT x.id INTO miss FROM pg_catalog.unnest(NEW.derived_from) x(id)
         WHERE NOT EXISTS (SELECT 1 FROM memory.observations s
                            WHERE s.org_id OPERATOR(pg_catalog.=) NEW.org_id AND s.id OPERATOR(pg_catalog.=) x.id
                              AND s.soft_deleted_at IS NULL AND s.classification OPERATOR(pg_catalog.<=) cl)
         LIMIT 1;
        IF miss IS NOT NULL THEN
            RAISE EXCEPTION 'derived_from names memory %, which is not a memory of org "%"', miss, NEW.org_id
                USING ERRCODE = '22023',
                      HINT = 'A memory is derived from live memories of its own org that the writer may read.';
        END IF;
        IF TG_OP OPERATOR(pg_catalog.=) 'UPDATE' AND EXISTS (
               SELECT 1 FROM memory_internal._descendants(NEW.org_id, ARRAY[NEW.id]) d
                WHERE d.id OPERATOR(pg_catalog.=) ANY (NEW.derived_from)) THEN
            RAISE EXCEPTION 'derived_from of memory % would make a cycle: a memory it names is derived from it', NEW.id
                USING ERRCODE = '22023', HINT = 'A memory cannot be derived, even indirectly, from what was made from it.';
        END IF;
    END IF;
    SELECT pg_catalog.max(s.classification), pg_catalog.max(memory_internal._trust_rank(s.source_type))
      INTO tier, worst
      FROM memory.observations s
     WHERE s.org_id OPERATOR(pg_catalog.=) NEW.org_id AND s.id OPERATOR(pg_catalog.=) ANY (NEW.derived_from) AND s.soft_deleted_at IS NULL;
    IF tier IS NOT NULL THEN
        NEW.classification := greatest(NEW.classification, tier);
        IF memory_internal._trust_rank(NEW.source_type) OPERATOR(pg_catalog.<) worst THEN
            NEW.source_type := memory_internal._trust_type(worst);
        END IF;
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER memory_ancestry BEFORE INSERT OR UPDATE ON memory.observations FOR EACH ROW
    WHEN (NEW.derived_from IS NOT NULL)
    EXECUTE FUNCTION memory_internal._lineage_floor();

-- BEFORE INSERT OR UPDATE of a memory with sources, after the classify trigger has stamped its
-- retention (the trigger memory_lineage): its retention ends no later than its sources' (the
-- earliest expires_at and purge_after). SECURITY DEFINER, as memory_internal._lineage_floor.
CREATE FUNCTION memory_internal._lineage_ceiling()
RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    e timestamptz;
    p timestamptz;
BEGIN
    IF memory_internal._restore_mode() THEN
        RETURN NEW;
    END IF;
    SELECT pg_catalog.min(s.expires_at), pg_catalog.min(s.purge_after) INTO e, p
      FROM memory.observations s
     WHERE s.org_id OPERATOR(pg_catalog.=) NEW.org_id AND s.id OPERATOR(pg_catalog.=) ANY (NEW.derived_from) AND s.soft_deleted_at IS NULL;
    NEW.expires_at := least(NEW.expires_at, e);
    NEW.purge_after := least(NEW.purge_after, p);
    RETURN NEW;
END $$;
CREATE TRIGGER memory_lineage BEFORE INSERT OR UPDATE ON memory.observations FOR EACH ROW
    WHEN (NEW.derived_from IS NOT NULL)
    EXECUTE FUNCTION memory_internal._lineage_ceiling();

-- AFTER UPDATE of a memory whose tier rose, whose retention or source_type changed: its derived
-- memories (those naming it in derived_from, live, of its org) take the floors again — each one's
-- UPDATE runs its triggers (memory_ancestry and memory_lineage recompute, classify restamps, the
-- audit trigger records memory.update, memory_revisions keeps the version), and in turn reaches
-- its own derived memories. A derived memory under a legal hold is raised too (a hold keeps a
-- memory, never a lower tier). SECURITY DEFINER: the writer may not read what was made from its
-- memory. It takes only the new row's org, id and floors.
CREATE FUNCTION memory_internal._lineage_down()
RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    was boolean;
BEGIN
    was := memory_internal._hold_gate(true);
    UPDATE memory.observations c SET classification = greatest(c.classification, NEW.classification)
     WHERE c.org_id OPERATOR(pg_catalog.=) NEW.org_id AND c.derived_from OPERATOR(pg_catalog.@>) ARRAY[NEW.id]
       AND c.soft_deleted_at IS NULL
       AND (c.classification OPERATOR(pg_catalog.<) NEW.classification
            OR (NEW.expires_at IS NOT NULL AND (c.expires_at IS NULL OR c.expires_at OPERATOR(pg_catalog.>) NEW.expires_at))
            OR (NEW.purge_after IS NOT NULL AND (c.purge_after IS NULL OR c.purge_after OPERATOR(pg_catalog.>) NEW.purge_after))
            OR memory_internal._trust_rank(c.source_type) OPERATOR(pg_catalog.<) memory_internal._trust_rank(NEW.source_type));
    PERFORM memory_internal._hold_gate(was);
    RETURN NULL;
END $$;
CREATE TRIGGER memory_lineage_down AFTER UPDATE ON memory.observations FOR EACH ROW
    WHEN (NEW.classification OPERATOR(pg_catalog.>) OLD.classification OR NEW.expires_at IS DISTINCT FROM OLD.expires_at
          OR NEW.purge_after IS DISTINCT FROM OLD.purge_after OR NEW.source_type IS DISTINCT FROM OLD.source_type)
    EXECUTE FUNCTION memory_internal._lineage_down();

-- The memories derived, directly or not, from `ids` in `org`, hot and archived, with the depth
-- at which each was first reached (1: made from one of ids). Any tier: forgetting a source
-- takes every memory made from it. Not granted to PUBLIC.
CREATE FUNCTION memory_internal._descendants(org text, ids uuid[])
RETURNS TABLE (id uuid, depth int) LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
AS $$
WITH RECURSIVE m AS (
    SELECT o.id, o.derived_from FROM memory.observations o
     WHERE o.org_id OPERATOR(pg_catalog.=) org AND o.derived_from IS NOT NULL
    UNION ALL
    SELECT a.id, a.derived_from FROM memory.observations_archive a
     WHERE a.org_id OPERATOR(pg_catalog.=) org AND a.derived_from IS NOT NULL
), d(id, depth) AS (
    SELECT m.id, 1 FROM m WHERE m.derived_from OPERATOR(pg_catalog.&&) ids
    UNION
    SELECT m.id, d.depth OPERATOR(pg_catalog.+) 1 FROM d JOIN m ON m.derived_from OPERATOR(pg_catalog.@>) ARRAY[d.id]
     WHERE d.depth OPERATOR(pg_catalog.<) 1000
) CYCLE id SET looped USING path
SELECT d.id, pg_catalog.min(d.depth)::int FROM d WHERE NOT (d.id OPERATOR(pg_catalog.=) ANY (ids)) GROUP BY d.id
$$;

-- memory.lineage: the ancestors (up) or descendants (down) of a memory, with their depth, within
-- the caller's clearance in the memory's org (an org it may act for: memory.org_id first, as
-- memory.forget finds an id). A memory it may not read has no lineage (no row).
CREATE FUNCTION memory.lineage(memory_id uuid, direction text DEFAULT 'up')
RETURNS TABLE (id uuid, depth int, classification memory.classification, source_type memory.source_type,
               content text, created_at timestamptz, live boolean)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    org text;
    cl  memory.classification;
BEGIN
    IF lineage.memory_id IS NULL THEN
        RAISE EXCEPTION 'memory.lineage needs a memory id' USING ERRCODE = '22023';
    END IF;
    IF direction IS NULL OR direction NOT IN ('up', 'down') THEN
        RAISE EXCEPTION 'memory.lineage: direction must be ''up'' or ''down'', got %', coalesce(pg_catalog.quote_literal(direction), 'NULL')
            USING ERRCODE = '22023', HINT = 'up: the memories it was made from; down: the memories made from it.';
    END IF;
    PERFORM memory_internal._check_org_setting();
    org := memory_internal._org_of('memory.observations', lineage.memory_id);
    cl := memory_internal._clearance(org)::memory.classification;
    IF org IS NULL OR cl IS NULL OR NOT EXISTS (
           SELECT 1 FROM memory.observations o WHERE o.org_id OPERATOR(pg_catalog.=) org AND o.id OPERATOR(pg_catalog.=) lineage.memory_id
              AND o.classification OPERATOR(pg_catalog.<=) cl) THEN
        RETURN;
    END IF;
    IF direction OPERATOR(pg_catalog.=) 'down' THEN
        -- A memory above the clearance is not shown, nor what was made from it (its tier is at least as high).
        RETURN QUERY
        WITH RECURSIVE d(id, depth) AS (
            SELECT o.id, 1 FROM memory.observations o
             WHERE o.org_id OPERATOR(pg_catalog.=) org AND o.derived_from OPERATOR(pg_catalog.@>) ARRAY[lineage.memory_id]
               AND o.classification OPERATOR(pg_catalog.<=) cl
            UNION
            SELECT o.id, d.depth OPERATOR(pg_catalog.+) 1 FROM d JOIN memory.observations o
                ON o.org_id OPERATOR(pg_catalog.=) org AND o.derived_from OPERATOR(pg_catalog.@>) ARRAY[d.id]
             WHERE o.classification OPERATOR(pg_catalog.<=) cl AND d.depth OPERATOR(pg_catalog.<) 1000
        ) CYCLE id SET looped USING path
        SELECT o.id, x.depth, o.classification, o.source_type, o.content, o.created_at,
               (o.soft_deleted_at IS NULL AND o.superseded_at IS NULL AND (o.expires_at IS NULL OR o.expires_at OPERATOR(pg_catalog.>) pg_catalog.now()))
          FROM (SELECT d.id, pg_catalog.min(d.depth)::int AS depth FROM d GROUP BY d.id) x
          JOIN memory.observations o ON o.org_id OPERATOR(pg_catalog.=) org AND o.id OPERATOR(pg_catalog.=) x.id
         ORDER BY x.depth, o.created_at, o.id;
    ELSE
        RETURN QUERY
        WITH RECURSIVE u(id, depth) AS (
            SELECT s.src, 1 FROM memory.observations o, pg_catalog.unnest(o.derived_from) s(src)
             WHERE o.org_id OPERATOR(pg_catalog.=) org AND o.id OPERATOR(pg_catalog.=) lineage.memory_id
            UNION
            SELECT s.src, u.depth OPERATOR(pg_catalog.+) 1 FROM u JOIN memory.observations o
                ON o.org_id OPERATOR(pg_catalog.=) org AND o.id OPERATOR(pg_catalog.=) u.id, pg_catalog.unnest(o.derived_from) s(src)
             WHERE u.depth OPERATOR(pg_catalog.<) 1000
        ) CYCLE id SET looped USING path
        SELECT o.id, x.depth, o.classification, o.source_type, o.content, o.created_at,
               (o.soft_deleted_at IS NULL AND o.superseded_at IS NULL AND (o.expires_at IS NULL OR o.expires_at OPERATOR(pg_catalog.>) pg_catalog.now()))
          FROM (SELECT u.id, pg_catalog.min(u.depth)::int AS depth FROM u GROUP BY u.id) x
          JOIN memory.observations o ON o.org_id OPERATOR(pg_catalog.=) org AND o.id OPERATOR(pg_catalog.=) x.id
         WHERE o.classification OPERATOR(pg_catalog.<=) cl
         ORDER BY x.depth, o.created_at, o.id;
    END IF;
END $$;
COMMENT ON FUNCTION memory.lineage(uuid, text) IS
  'The memories a memory was made from (direction up, its derived_from, transitively) or that were made from it (down), with depth (1: direct), tier, source_type, content, creation time and whether each is live; within the caller''s clearance in the memory''s org (nothing for a memory it may not read). A source forgotten since is no longer listed.';

-- Forgetting follows lineage (SPEC §18): after memory.forget or memory.erase_subject removed the
-- memories `ids` of `org`, the memories made from them go too, level by level through what was
-- removed (hot and archived rows, their weight history; the DELETE of hot rows fires their audit
-- trigger, memory.delete per row, and takes their revisions). A derived memory under a legal
-- hold stays, and what was made only through it stays with it. Any tier: what was made from a
-- forgotten memory goes whoever forgets it; the answer names only those within `cl`, the
-- caller's clearance. Returns {deleted: [{id, content_sha256, derived: true, visible}],
-- held: [{id, visible}]}. Not granted to PUBLIC.
CREATE FUNCTION memory_internal._erase_derived(org text, ids uuid[], cl memory.classification)
RETURNS jsonb LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    frontier uuid[] := ids;
    seen     uuid[] := ids;
    del      uuid[];
    r        record;
    deleted  jsonb := '[]';
    held     jsonb := '[]';
BEGIN
    WHILE pg_catalog.cardinality(frontier) OPERATOR(pg_catalog.>) 0 LOOP
        del := '{}';
        FOR r IN WITH k AS (
                     SELECT o.id, o.user_id, o.content, o.classification, 0 AS src FROM memory.observations o
                      WHERE o.org_id OPERATOR(pg_catalog.=) org AND o.derived_from OPERATOR(pg_catalog.&&) frontier
                     UNION ALL
                     SELECT a.id, a.user_id, a.content, a.classification, 1 AS src FROM memory.observations_archive a
                      WHERE a.org_id OPERATOR(pg_catalog.=) org AND a.derived_from OPERATOR(pg_catalog.&&) frontier)
                 SELECT DISTINCT ON (k.id) k.id, k.content, k.classification OPERATOR(pg_catalog.<=) cl AS visible,
                        memory_internal._held(org, k.user_id, k.id) AS is_held
                   FROM k WHERE NOT k.id OPERATOR(pg_catalog.=) ANY (seen)
                  ORDER BY k.id, k.src LOOP
            seen := seen OPERATOR(pg_catalog.||) r.id;
            IF r.is_held THEN
                held := held OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_object('id', r.id, 'visible', r.visible);
            ELSE
                del := del OPERATOR(pg_catalog.||) r.id;
                deleted := deleted OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_object('id', r.id,
                    'content_sha256', pg_catalog.encode(pg_catalog.sha256(pg_catalog.convert_to(r.content, 'UTF8')), 'hex'),
                    'derived', true, 'visible', r.visible);
            END IF;
        END LOOP;
        IF pg_catalog.cardinality(del) OPERATOR(pg_catalog.>) 0 THEN
            DELETE FROM memory.observation_weight_history h
             WHERE h.org_id OPERATOR(pg_catalog.=) org AND h.observation_id OPERATOR(pg_catalog.=) ANY (del);
            DELETE FROM memory.observations o WHERE o.org_id OPERATOR(pg_catalog.=) org AND o.id OPERATOR(pg_catalog.=) ANY (del);
            DELETE FROM memory.observations_archive a WHERE a.org_id OPERATOR(pg_catalog.=) org AND a.id OPERATOR(pg_catalog.=) ANY (del);
        END IF;
        frontier := del;
    END LOOP;
    RETURN pg_catalog.jsonb_build_object('deleted', deleted, 'held', held);
END $$;

-- A kept memory's sources with more added (memory.remember's duplicate and merge): each once, in
-- order, never the memory itself (a text remembered again as a summary of itself).
CREATE FUNCTION memory_internal._lineage_union(self uuid, have uuid[], more uuid[])
RETURNS uuid[] LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp
AS $$
SELECT CASE WHEN more IS NULL THEN have
            ELSE ARRAY(SELECT u.id FROM pg_catalog.unnest(coalesce(have, '{}') OPERATOR(pg_catalog.||) more) WITH ORDINALITY u(id, n)
                        WHERE u.id IS DISTINCT FROM self GROUP BY u.id ORDER BY pg_catalog.min(u.n)) END
$$;
