-- Lineage (SPEC §18, docs/reference.md#lineage): the memories a summary, reflection or extracted
-- fact was made from (derived_from), the floors a derived memory keeps (tier, trust, retention),
-- kept when a source later changes, and memory.lineage. Forgetting follows lineage
-- (memory_internal._descendants, called by memory.forget and memory.erase_subject).

ALTER TABLE memory.observations ADD COLUMN derived_from uuid[];
ALTER TABLE memory.observations_archive ADD COLUMN derived_from uuid[];
-- A source's derived memories, found by containment (derived_from @> ARRAY[id]); only rows that
-- have sources are indexed, so a plain memory's insert pays nothing for it. With GIN's pending
-- list (fastupdate) and a limit of 4 MB: a derived insert appends its entries to the list (one
-- page write) instead of inserting each into the entry tree (a descent and a posting list
-- decoded, merged and re-encoded for each of its sources: about a third of a derived insert's
-- extra time). The list is moved into the tree off the writers' path: by the background
-- integrator after its rounds, at most once a second (src/audit/worker.rs), and by forgetting
-- before it searches (memory_internal._lineage_flush), as a search reads every pending entry
-- against every id it looks for; a writer moves it only past 4 MB (in a database no integrator
-- serves; autovacuum moves it too).
CREATE INDEX observations_derived_from ON memory.observations USING gin (derived_from) WITH (fastupdate = on, gin_pending_list_limit = 4096) WHERE derived_from IS NOT NULL;
CREATE INDEX observations_archive_derived_from ON memory.observations_archive USING gin (derived_from) WITH (fastupdate = on, gin_pending_list_limit = 4096) WHERE derived_from IS NOT NULL;

-- Moves the pending entries of the derived_from indexes into their trees (gin_clean_pending_list,
-- which only the indexes' owner may run: SECURITY DEFINER), so that the searches after it read
-- none; returns the pages moved. Called by memory_internal._erase_derived (forget, erasure)
-- before it searches. Not granted to PUBLIC.
CREATE FUNCTION memory_internal._lineage_flush()
RETURNS bigint LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
SELECT pg_catalog.gin_clean_pending_list('memory.observations_derived_from'::pg_catalog.regclass)
       OPERATOR(pg_catalog.+) pg_catalog.gin_clean_pending_list('memory.observations_archive_derived_from'::pg_catalog.regclass)
$$;
REVOKE ALL ON FUNCTION memory_internal._lineage_flush() FROM PUBLIC;
COMMENT ON FUNCTION memory_internal._lineage_flush() IS
  'Moves the pending entries of the derived_from GIN indexes of memory.observations and memory.observations_archive into their trees (gin_clean_pending_list) before forgetting searches them; returns the pages moved. Internal.';

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

-- derived_from's checks (22023): a one-dimensional array of at most
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
        RAISE EXCEPTION 'derived_from takes no NULL id (element %)', pg_catalog.array_position(ids, NULL) USING ERRCODE = '22023',
            HINT = 'Leave NULLs out of derived_from.';
    END IF;
    IF self OPERATOR(pg_catalog.=) ANY (ids) THEN
        RAISE EXCEPTION 'memory % cannot be derived from itself', self USING ERRCODE = '22023',
            HINT = 'derived_from names other memories: a cycle in lineage is refused.';
    END IF;
    RETURN ARRAY(SELECT u.id FROM pg_catalog.unnest(ids) WITH ORDINALITY u(id, n) GROUP BY u.id ORDER BY pg_catalog.min(u.n));
END $$;

-- The memories reached from `ids` in `org` through lineage: `down` what was made from them, `up`
-- what they were made from; each once, at the least depth it is reached at (1: direct), at most
-- 10,000 levels. With `cl`, only memories of at most that tier are reached, and nothing through
-- one above it (a reader's walk); NULL: every tier. One recursive statement whose rows are
-- (id, depth) pairs (a memory reached at several depths is a few rows, never a row per path).
-- Hot rows only. Not granted to PUBLIC.
CREATE FUNCTION memory_internal._lineage_walk(org text, ids uuid[], direction text, cl memory.classification)
RETURNS TABLE (id uuid, depth int) LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
AS $$
WITH RECURSIVE w(id, depth) AS (
    SELECT x, 0 FROM pg_catalog.unnest(ids) x
    UNION
    SELECT n.id, w.depth OPERATOR(pg_catalog.+) 1 FROM w, LATERAL (
        SELECT o.id FROM memory.observations o
         WHERE direction OPERATOR(pg_catalog.=) 'down' AND o.org_id OPERATOR(pg_catalog.=) org
           AND o.derived_from OPERATOR(pg_catalog.@>) ARRAY[w.id] AND (cl IS NULL OR o.classification OPERATOR(pg_catalog.<=) cl)
        UNION ALL
        SELECT p.id FROM memory.observations o JOIN memory.observations p
            ON p.org_id OPERATOR(pg_catalog.=) org AND p.id OPERATOR(pg_catalog.=) ANY (o.derived_from)
         WHERE direction OPERATOR(pg_catalog.=) 'up' AND o.org_id OPERATOR(pg_catalog.=) org AND o.id OPERATOR(pg_catalog.=) w.id
           AND (cl IS NULL OR p.classification OPERATOR(pg_catalog.<=) cl)) n
     WHERE w.depth OPERATOR(pg_catalog.<) 10000
)
SELECT w.id, pg_catalog.min(w.depth)::int FROM w WHERE NOT w.id OPERATOR(pg_catalog.=) ANY (ids) GROUP BY w.id
$$;

-- BEFORE UPDATE of a memory with sources (the trigger memory_ancestry, which fires before the
-- classify trigger; an INSERT's sources are the classify trigger's Rust pass, with the same rules).
-- The sources a write adds (on UPDATE those not there before: taking one away needs no check; the
-- function keeps its INSERT branch for a trigger attached otherwise) must each be a memory of the row's org, not
-- soft-deleted, within the writer's clearance there, else 22023 (a missing id and another org's
-- alike); a concurrent forget or reclassify of a source waits for the write (and then takes it
-- along) or the write waits for it (advisory locks, below); an UPDATE may not make a cycle. Then the floors: the tier at least the strictest source's (the classify
-- trigger keeps it as a floor and stamps retention for it) and the source_type no more trusted
-- than the least trusted source's when the sources are written, nor than it was (an UPDATE never
-- raises a derived memory's trust). SECURITY DEFINER: a writer may not read the sources it names. It reads only the new
-- row's org, id and sources.
CREATE FUNCTION memory_internal._lineage_floor()
RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    ranks  CONSTANT memory.source_type[] := '{decision,fact,preference,tool_result}';
    tier   memory.classification;
    worst  int;
    added  uuid[];
BEGIN
    IF memory_internal._restore_mode() THEN
        RETURN NEW;
    END IF;
    -- On Citus the row trigger fires on the org's shard, where no statement may read the
    -- distributed store: lineage is not offered there (nothing derived is written unchecked).
    IF TG_RELID OPERATOR(pg_catalog.<>) 'memory.observations'::pg_catalog.regclass THEN
        RAISE EXCEPTION 'derived_from is not supported on a distributed store (memory.distribute)' USING ERRCODE = '0A000',
            HINT = 'Write the memory without derived_from; lineage runs on a single node.';
    END IF;
    IF TG_OP OPERATOR(pg_catalog.=) 'INSERT' OR NEW.derived_from IS DISTINCT FROM OLD.derived_from THEN
        NEW.derived_from := memory_internal._lineage_ids(NEW.id, NEW.derived_from);
        IF NEW.derived_from IS NULL THEN
            RETURN NEW;
        END IF;
        added := CASE WHEN TG_OP OPERATOR(pg_catalog.=) 'INSERT' THEN NEW.derived_from
                      ELSE ARRAY(SELECT x FROM pg_catalog.unnest(NEW.derived_from) x WHERE NOT x OPERATOR(pg_catalog.=) ANY (coalesce(OLD.derived_from, '{}'))) END;
        IF pg_catalog.cardinality(added) OPERATOR(pg_catalog.>) 0 THEN
            -- The org, the lineage locks (advisory, shared on the org and each source until
            -- commit: memory.forget and memory.erase_subject take the org's exclusively, a
            -- tightening source, memory_internal._lineage_down, its own) and each source added: a
            -- live memory of the org within the writer's clearance (memory_internal._lineage_check_sources).
            PERFORM memory_internal._lineage_check_sources(NEW.org_id, added);
            IF TG_OP OPERATOR(pg_catalog.=) 'UPDATE' AND EXISTS (
                   SELECT 1 FROM memory_internal._lineage_walk(NEW.org_id, ARRAY[NEW.id], 'down', NULL) w
                    WHERE w.id OPERATOR(pg_catalog.=) ANY (added)) THEN
                RAISE EXCEPTION 'derived_from of memory % would make a cycle: a memory it names is derived from it', NEW.id
                    USING ERRCODE = '22023', HINT = 'A memory cannot be derived, even indirectly, from what was made from it.';
            END IF;
        END IF;
    END IF;
    -- (The trust rank of memory_internal._trust_rank, written out: no function call a row.)
    SELECT pg_catalog.max(s.classification), pg_catalog.max(coalesce(pg_catalog.array_position(ranks, s.source_type), 5))
      INTO tier, worst
      FROM memory.observations s
     WHERE s.org_id OPERATOR(pg_catalog.=) NEW.org_id AND s.id OPERATOR(pg_catalog.=) ANY (NEW.derived_from) AND s.soft_deleted_at IS NULL;
    -- An UPDATE that keeps the sources keeps the trust it had or lower (a source's later fall in
    -- trust reaches it through memory_internal._lineage_down, within the changing role's clearance).
    IF TG_OP OPERATOR(pg_catalog.=) 'UPDATE' AND NEW.derived_from IS NOT DISTINCT FROM OLD.derived_from THEN
        worst := coalesce(pg_catalog.array_position(ranks, OLD.source_type), 5);
    ELSIF TG_OP OPERATOR(pg_catalog.=) 'UPDATE' THEN
        worst := greatest(worst, coalesce(pg_catalog.array_position(ranks, OLD.source_type), 5));
    END IF;
    NEW.classification := greatest(NEW.classification, tier);
    IF coalesce(pg_catalog.array_position(ranks, NEW.source_type), 5) OPERATOR(pg_catalog.<) worst THEN
        NEW.source_type := ranks[worst];
    END IF;
    RETURN NEW;
END $$;
-- (An INSERT is the classify trigger's: its Rust pass, src/classify/lineage.rs, applies the same
-- checks and floors in two kept statements.)
CREATE TRIGGER memory_ancestry BEFORE UPDATE ON memory.observations FOR EACH ROW
    WHEN (NEW.derived_from IS NOT NULL)
    EXECUTE FUNCTION memory_internal._lineage_floor();

-- BEFORE UPDATE of a memory with sources, after the classify trigger has stamped its retention
-- (the trigger memory_lineage; an INSERT's ceiling is the classify trigger's): its retention ends no later than its sources' (the
-- earliest expires_at and purge_after) when its sources are written, and an UPDATE that keeps
-- them never makes it later than it was. SECURITY DEFINER, as memory_internal._lineage_floor.
CREATE FUNCTION memory_internal._lineage_ceiling()
RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    e timestamptz;
    p timestamptz;
BEGIN
    IF memory_internal._restore_mode() OR TG_RELID OPERATOR(pg_catalog.<>) 'memory.observations'::pg_catalog.regclass THEN
        RETURN NEW;
    END IF;
    IF TG_OP OPERATOR(pg_catalog.=) 'UPDATE' AND NEW.derived_from IS NOT DISTINCT FROM OLD.derived_from THEN
        -- The sources unchanged: never later than it was (a source's later cut reaches it through
        -- memory_internal._lineage_down, within the changing role's clearance).
        e := OLD.expires_at;
        p := OLD.purge_after;
    ELSE
        SELECT pg_catalog.min(s.expires_at), pg_catalog.min(s.purge_after) INTO e, p
          FROM memory.observations s
         WHERE s.org_id OPERATOR(pg_catalog.=) NEW.org_id AND s.id OPERATOR(pg_catalog.=) ANY (NEW.derived_from) AND s.soft_deleted_at IS NULL;
    END IF;
    NEW.expires_at := least(NEW.expires_at, e);
    NEW.purge_after := least(NEW.purge_after, p);
    RETURN NEW;
END $$;
CREATE TRIGGER memory_lineage BEFORE UPDATE ON memory.observations FOR EACH ROW
    WHEN (NEW.derived_from IS NOT NULL)
    EXECUTE FUNCTION memory_internal._lineage_ceiling();

-- AFTER UPDATE of a memory whose tier rose, whose retention shortened or whose trust fell: every
-- memory made from it, directly or not (live, of its org; for retention and trust, within the
-- changing role's clearance), takes the floors in one UPDATE (each
-- row's triggers run: memory_ancestry and memory_lineage recompute, classify restamps, the audit
-- trigger records a raised tier as memory.reclassify, memory_revisions keeps the version). The
-- lineage gate keeps their own memory_lineage_down quiet meanwhile: however deep the lineage,
-- one statement. A memory under a legal hold is raised too (a hold keeps a memory, never a
-- lower tier). SECURITY DEFINER: the writer may not read what was made from its memory. It takes
-- only the new row's org, id and floors.
CREATE FUNCTION memory_internal._lineage_down()
RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    cl   memory.classification := coalesce(memory_internal._clearance(NEW.org_id)::memory.classification, 'restricted');
    tr   int := memory_internal._trust_rank(NEW.source_type);
    d    uuid[];
    hold boolean;
    gate boolean;
BEGIN
    -- (On a Citus shard nothing is derived: memory_internal._lineage_floor refuses it there.)
    IF TG_RELID OPERATOR(pg_catalog.<>) 'memory.observations'::pg_catalog.regclass THEN
        RETURN NULL;
    END IF;
    -- A derived write naming this memory waits, or is waited for (memory_internal._lineage_floor).
    PERFORM pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtextextended('memory_ext.lineage:' OPERATOR(pg_catalog.||) NEW.id::text, 0));
    -- What needs the new floors, walked only through what does (what meets them already, so does
    -- everything made from it); each memory once, however it is reached.
    WITH RECURSIVE w(id) AS (
        SELECT NEW.id
        UNION
        SELECT o.id FROM w JOIN memory.observations o
            ON o.org_id OPERATOR(pg_catalog.=) NEW.org_id AND o.derived_from OPERATOR(pg_catalog.@>) ARRAY[w.id]
         WHERE o.soft_deleted_at IS NULL
           AND (o.classification OPERATOR(pg_catalog.<) NEW.classification
                OR (o.classification OPERATOR(pg_catalog.<=) cl
                    AND ((NEW.expires_at IS NOT NULL AND (o.expires_at IS NULL OR o.expires_at OPERATOR(pg_catalog.>) NEW.expires_at))
                         OR (NEW.purge_after IS NOT NULL AND (o.purge_after IS NULL OR o.purge_after OPERATOR(pg_catalog.>) NEW.purge_after))
                         OR memory_internal._trust_rank(o.source_type) OPERATOR(pg_catalog.<) tr))))
    SELECT ARRAY(SELECT w.id FROM w WHERE w.id OPERATOR(pg_catalog.<>) NEW.id) INTO d;
    -- Rows of governed tables made from it or from what needed the floors (a derived memory that
    -- met them already passed them on when its rows were written).
    PERFORM memory_internal._lineage_down_tables(NEW.org_id, NEW.id OPERATOR(pg_catalog.||) d, NEW.classification, tr,
                                                 NEW.expires_at, NEW.purge_after, cl);
    IF pg_catalog.cardinality(d) OPERATOR(pg_catalog.=) 0 THEN
        RETURN NULL;
    END IF;
    hold := memory_internal._hold_gate(true);
    gate := memory_internal._lineage_gate(true);
    -- A tier rises everywhere; shorter retention and lower trust reach only what the changing
    -- role may read: a writer never cuts the life of a memory above its clearance through a
    -- source of its own.
    UPDATE memory.observations c
       SET classification = greatest(c.classification, NEW.classification),
           expires_at = CASE WHEN c.classification OPERATOR(pg_catalog.<=) cl THEN least(c.expires_at, NEW.expires_at) ELSE c.expires_at END,
           purge_after = CASE WHEN c.classification OPERATOR(pg_catalog.<=) cl THEN least(c.purge_after, NEW.purge_after) ELSE c.purge_after END,
           source_type = CASE WHEN c.classification OPERATOR(pg_catalog.<=) cl
                              THEN memory_internal._trust_type(greatest(memory_internal._trust_rank(c.source_type), tr)) ELSE c.source_type END
     WHERE c.org_id OPERATOR(pg_catalog.=) NEW.org_id AND c.id OPERATOR(pg_catalog.=) ANY (d);
    PERFORM memory_internal._lineage_gate(gate);
    PERFORM memory_internal._hold_gate(hold);
    RETURN NULL;
END $$;
CREATE TRIGGER memory_lineage_down AFTER UPDATE ON memory.observations FOR EACH ROW
    WHEN ((NEW.classification OPERATOR(pg_catalog.>) OLD.classification
           OR (NEW.expires_at IS NOT NULL AND (OLD.expires_at IS NULL OR NEW.expires_at OPERATOR(pg_catalog.<) OLD.expires_at))
           OR (NEW.purge_after IS NOT NULL AND (OLD.purge_after IS NULL OR NEW.purge_after OPERATOR(pg_catalog.<) OLD.purge_after))
           OR memory_internal._trust_rank(NEW.source_type) OPERATOR(pg_catalog.>) memory_internal._trust_rank(OLD.source_type))
          AND NOT memory_internal._lineage_gate_open())
    EXECUTE FUNCTION memory_internal._lineage_down();

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
    -- The walk goes only through memories within the clearance (none above it is shown, nor
    -- what lies beyond one).
    RETURN QUERY
    SELECT o.id, w.depth, o.classification, o.source_type, o.content, o.created_at,
           (o.soft_deleted_at IS NULL AND o.superseded_at IS NULL AND (o.expires_at IS NULL OR o.expires_at OPERATOR(pg_catalog.>) pg_catalog.now()))
      FROM memory_internal._lineage_walk(org, ARRAY[lineage.memory_id], direction, cl) w
      JOIN memory.observations o ON o.org_id OPERATOR(pg_catalog.=) org AND o.id OPERATOR(pg_catalog.=) w.id
     ORDER BY w.depth, o.created_at, o.id;
END $$;
COMMENT ON FUNCTION memory.lineage(uuid, text) IS
  'The memories a memory was made from (direction up, its derived_from, transitively) or that were made from it (down), with depth (1: direct), tier, source_type, content, creation time and whether each is live; within the caller''s clearance in the memory''s org (nothing for a memory it may not read). A source forgotten since is no longer listed.';

-- A memory made from one of `ids` (removed memories of `org`) no longer names them, hot or
-- archived: so an id written again later (an INSERT may choose its id) never becomes the source
-- of what was made before. Its tier and trust floors stay. Held rows too (the hold gate).
-- Not granted to PUBLIC.
CREATE FUNCTION memory_internal._lineage_strip(org text, ids uuid[])
RETURNS void LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE hold boolean;
BEGIN
    -- Governed tables' rows made from them too (memory_internal._lineage_strip_tables).
    PERFORM memory_internal._lineage_strip_tables(org, ids);
    -- Is anything made from them? Asked as PERFORM (planned for every row, so through the
    -- derived_from index), not EXISTS: under memory.forget's generic plans a LIMIT 1 over an array
    -- of unknown length looks cheapest as a sequential scan, which read the whole table.
    PERFORM 1 FROM memory.observations c WHERE c.org_id OPERATOR(pg_catalog.=) org AND c.derived_from OPERATOR(pg_catalog.&&) ids;
    IF NOT FOUND THEN
        PERFORM 1 FROM memory.observations_archive c WHERE c.org_id OPERATOR(pg_catalog.=) org AND c.derived_from OPERATOR(pg_catalog.&&) ids;
        IF NOT FOUND THEN
            RETURN;
        END IF;
    END IF;
    hold := memory_internal._hold_gate(true);
    UPDATE memory.observations c
       SET derived_from = nullif(ARRAY(SELECT x FROM pg_catalog.unnest(c.derived_from) x WHERE NOT x OPERATOR(pg_catalog.=) ANY (ids)), '{}')
     WHERE c.org_id OPERATOR(pg_catalog.=) org AND c.derived_from OPERATOR(pg_catalog.&&) ids;
    UPDATE memory.observations_archive c
       SET derived_from = nullif(ARRAY(SELECT x FROM pg_catalog.unnest(c.derived_from) x WHERE NOT x OPERATOR(pg_catalog.=) ANY (ids)), '{}')
     WHERE c.org_id OPERATOR(pg_catalog.=) org AND c.derived_from OPERATOR(pg_catalog.&&) ids;
    PERFORM memory_internal._hold_gate(hold);
END $$;

-- AFTER DELETE of memories (retention's purge, end_task, an item's replacement, an application's
-- DELETE; forget and erasure strip what they leave themselves, with the lineage gate open): the
-- ids gone from both stores (not moved to the archive) are stripped from what was made from
-- them (memory_internal._lineage_strip). SECURITY DEFINER, as memory_internal._drop_revisions; it
-- reads only the deleted rows' org and id.
CREATE FUNCTION memory_internal._lineage_gone()
RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE g record;
BEGIN
    IF memory_internal._lineage_gate_open() OR TG_RELID OPERATOR(pg_catalog.<>) 'memory.observations'::pg_catalog.regclass THEN
        RETURN NULL;
    END IF;
    FOR g IN SELECT o.org_id, pg_catalog.array_agg(o.id) AS ids FROM memory_old o
              WHERE NOT EXISTS (SELECT 1 FROM memory.observations h WHERE h.org_id OPERATOR(pg_catalog.=) o.org_id AND h.id OPERATOR(pg_catalog.=) o.id)
                AND NOT EXISTS (SELECT 1 FROM memory.observations_archive a WHERE a.org_id OPERATOR(pg_catalog.=) o.org_id AND a.id OPERATOR(pg_catalog.=) o.id)
              GROUP BY o.org_id LOOP
        PERFORM memory_internal._lineage_strip(g.org_id, g.ids);
    END LOOP;
    RETURN NULL;
END $$;
CREATE TRIGGER memory_lineage_gone AFTER DELETE ON memory.observations REFERENCING OLD TABLE AS memory_old
    FOR EACH STATEMENT EXECUTE FUNCTION memory_internal._lineage_gone();

-- memory.forget and memory.erase_subject, before they delete in `orgs`: the orgs' lineage locks,
-- exclusively and in order, held to commit (a derived write of those orgs waits for them, or they
-- for it: memory_internal._lineage_floor), so what was made from what they remove is never
-- written beside them unseen. Not granted to PUBLIC.
CREATE FUNCTION memory_internal._lineage_lock_orgs(orgs text[])
RETURNS void LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtextextended('memory_ext.lineage:' OPERATOR(pg_catalog.||) x.o, 0))
       FROM (SELECT DISTINCT u.o COLLATE "C" AS o FROM pg_catalog.unnest(orgs) u(o) WHERE u.o IS NOT NULL) x ORDER BY x.o;
END $$;

-- Forgetting follows lineage (SPEC §18): after memory.forget or memory.erase_subject removed the
-- memories `ids` of `org` (with the lineage gate open, so their references are still there), the
-- memories made from them go too, level by level through what is removed (hot and archived rows,
-- their weight history; the DELETE of hot rows fires their audit trigger, memory.delete per row,
-- and takes their revisions). A derived memory under a legal hold stays, and what was made only
-- through it stays with it. With `cl` (forget: the caller's clearance) a derived memory above it
-- stays too, as a held one, unnamed (a caller never removes or learns of what it may not read;
-- memory.forget's event names them, derived_kept, for the org's admins); NULL (erasure): every tier.
-- Rows in `skip`, and rows of user `skip_user` (the erased subject's own, held), are neither
-- counted nor followed. What stays no longer names what went (memory_internal._lineage_strip).
-- Rows of governed tables made from what went follow (memory_internal._erase_derived_tables).
-- Returns {deleted: [{id, content_sha256, derived: true}], held: [id], above: [id],
-- tables: {table: [{id, content_sha256, derived: true}]}}. Not granted
-- to PUBLIC.
CREATE FUNCTION memory_internal._erase_derived(org text, ids uuid[], cl memory.classification, skip uuid[] DEFAULT '{}',
                                              skip_user text DEFAULT NULL)
RETURNS jsonb LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    frontier uuid[] := ids;
    seen     jsonb := coalesce((SELECT pg_catalog.jsonb_object_agg(x::text, true) FROM pg_catalog.unnest(ids OPERATOR(pg_catalog.||) skip) x), '{}');
    lvl      uuid[];
    del      uuid[];
    sha      text[];
    kept     uuid[];
    gone     uuid[] := '{}';
    r        record;
    deleted  jsonb := '[]';
    held     uuid[] := '{}';
    above    uuid[] := '{}';
    tabs     jsonb;
    hgate    boolean;
BEGIN
    -- Each level's search reads GIN's pending list whole: moved into the tree first.
    PERFORM memory_internal._lineage_flush();
    WHILE pg_catalog.cardinality(frontier) OPERATOR(pg_catalog.>) 0 LOOP
        lvl := '{}';
        del := '{}';
        sha := '{}';
        FOR r IN WITH k AS (
                     SELECT o.id, o.user_id, o.content, o.classification, 0 AS src FROM memory.observations o
                      WHERE o.org_id OPERATOR(pg_catalog.=) org AND o.derived_from OPERATOR(pg_catalog.&&) frontier
                     UNION ALL
                     SELECT a.id, a.user_id, a.content, a.classification, 1 AS src FROM memory.observations_archive a
                      WHERE a.org_id OPERATOR(pg_catalog.=) org AND a.derived_from OPERATOR(pg_catalog.&&) frontier)
                 SELECT DISTINCT ON (k.id) k.id, k.user_id, cl IS NOT NULL AND k.classification OPERATOR(pg_catalog.>) cl AS hidden,
                        pg_catalog.encode(pg_catalog.sha256(pg_catalog.convert_to(k.content, 'UTF8')), 'hex') AS sha
                   FROM k WHERE NOT seen OPERATOR(pg_catalog.?) k.id::text
                  ORDER BY k.id, k.src LOOP
            lvl := lvl OPERATOR(pg_catalog.||) r.id;
            IF r.user_id IS NOT DISTINCT FROM skip_user AND skip_user IS NOT NULL THEN
                CONTINUE;
            ELSIF r.hidden THEN
                above := above OPERATOR(pg_catalog.||) r.id;
            ELSE
                del := del OPERATOR(pg_catalog.||) r.id;
                sha := sha OPERATOR(pg_catalog.||) r.sha;
            END IF;
        END LOOP;
        seen := seen OPERATOR(pg_catalog.||) coalesce((SELECT pg_catalog.jsonb_object_agg(x::text, true) FROM pg_catalog.unnest(lvl) x), '{}');
        IF pg_catalog.cardinality(del) OPERATOR(pg_catalog.>) 0 THEN
            -- The legal hold is asked in the DELETE (that trigger per row is what the gate
            -- skips): a held row stays, held. The rows are locked first, in their own statement, so
            -- the DELETE's snapshot (READ COMMITTED) is taken after any wait for another session's
            -- lock and sees a hold committed meanwhile, as the trigger (run once the row was locked) saw it.
            PERFORM 1 FROM memory.observations o WHERE o.org_id OPERATOR(pg_catalog.=) org AND o.id OPERATOR(pg_catalog.=) ANY (del) ORDER BY o.id FOR UPDATE;
            PERFORM 1 FROM memory.observations_archive a WHERE a.org_id OPERATOR(pg_catalog.=) org AND a.id OPERATOR(pg_catalog.=) ANY (del) ORDER BY a.id FOR UPDATE;
            hgate := memory_internal._hold_gate(true);
            DELETE FROM memory.observations o WHERE o.org_id OPERATOR(pg_catalog.=) org AND o.id OPERATOR(pg_catalog.=) ANY (del)
               AND NOT memory_internal._held(org, o.user_id, o.id);
            DELETE FROM memory.observations_archive a WHERE a.org_id OPERATOR(pg_catalog.=) org AND a.id OPERATOR(pg_catalog.=) ANY (del)
               AND NOT memory_internal._held(org, a.user_id, a.id);
            PERFORM memory_internal._hold_gate(hgate);
            kept := ARRAY(SELECT o.id FROM memory.observations o WHERE o.org_id OPERATOR(pg_catalog.=) org AND o.id OPERATOR(pg_catalog.=) ANY (del)
                          UNION SELECT a.id FROM memory.observations_archive a WHERE a.org_id OPERATOR(pg_catalog.=) org AND a.id OPERATOR(pg_catalog.=) ANY (del)
                          ORDER BY 1);
            held := held OPERATOR(pg_catalog.||) kept;
            deleted := deleted OPERATOR(pg_catalog.||) coalesce((SELECT pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object('id', d.id, 'content_sha256', d.sha, 'derived', true) ORDER BY d.n)
                                                                   FROM ROWS FROM (pg_catalog.unnest(del), pg_catalog.unnest(sha)) WITH ORDINALITY d(id, sha, n) WHERE NOT d.id OPERATOR(pg_catalog.=) ANY (kept)), '[]');
            del := ARRAY(SELECT x FROM pg_catalog.unnest(del) x WHERE NOT x OPERATOR(pg_catalog.=) ANY (kept));
            DELETE FROM memory.observation_weight_history h
             WHERE h.org_id OPERATOR(pg_catalog.=) org AND h.observation_id OPERATOR(pg_catalog.=) ANY (del);
            gone := gone OPERATOR(pg_catalog.||) del;
        END IF;
        frontier := del;
    END LOOP;
    -- Rows of governed tables made from what went (memory_internal._erase_derived_tables).
    tabs := memory_internal._erase_derived_tables(org, ids OPERATOR(pg_catalog.||) gone, cl, skip_user);
    PERFORM memory_internal._lineage_strip(org, ids OPERATOR(pg_catalog.||) gone);
    RETURN pg_catalog.jsonb_build_object('deleted', deleted, 'held', pg_catalog.to_jsonb(held) OPERATOR(pg_catalog.||) (tabs OPERATOR(pg_catalog.->) 'held'),
                                         'above', pg_catalog.to_jsonb(above) OPERATOR(pg_catalog.||) (tabs OPERATOR(pg_catalog.->) 'above'),
                                         'tables', tabs OPERATOR(pg_catalog.->) 'deleted');
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

-- ------------------------------------------------------------------------------------------------
-- Lineage on governed tables (SPEC §18, docs/reference.md#lineage): memory.govern's "derived_from"
-- names a uuid[] column whose elements are memories of memory.observations of the row's org (a
-- governed row is never a source: lineage runs from memories to what was made from them). The row
-- keeps the floors an observation keeps (tier, trust when the table maps source_type, retention
-- when it has stamps), raised when a source tightens, and goes when a source is forgotten or erased.

-- The lineage mapping of governed table `tbl` from the closed registry: {derived_from, org, id,
-- content, user, tier, tier_kind (classification, text or jsonb), source_type, expires_at,
-- purge_after}; never from trigger arguments (a table's owner could pass any). NULL when `tbl` is
-- not governed with "derived_from". Not granted to PUBLIC.
CREATE FUNCTION memory_internal._table_lineage_mapping(tbl oid)
RETURNS jsonb LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
AS $$
SELECT pg_catalog.jsonb_build_object('derived_from', g.options OPERATOR(pg_catalog.->>) 'derived_from',
           'org', g.options OPERATOR(pg_catalog.->>) 'org', 'id', g.options OPERATOR(pg_catalog.->>) 'id',
           'content', g.options OPERATOR(pg_catalog.->>) 'content', 'user', g.options OPERATOR(pg_catalog.->>) 'user',
           'tier', g.options OPERATOR(pg_catalog.->) 'target' OPERATOR(pg_catalog.->>) 0,
           'tier_kind', g.options OPERATOR(pg_catalog.->>) 'derived_tier_kind',
           'source_type', g.options OPERATOR(pg_catalog.->>) 'source_type',
           'expires_at', g.options OPERATOR(pg_catalog.->) 'stamps' OPERATOR(pg_catalog.->>) 'expires_at',
           'purge_after', g.options OPERATOR(pg_catalog.->) 'stamps' OPERATOR(pg_catalog.->>) 'purge_after')
  FROM memory.governance_registry g
 WHERE g.relid OPERATOR(pg_catalog.=) tbl AND NOT g.builtin AND g.options OPERATOR(pg_catalog.->>) 'derived_from' IS NOT NULL
$$;

-- The sources a derived write adds (`added`, of org `org`): the writer may act for the org, the
-- lineage locks are taken (shared, as memory_internal._lineage_floor's), and each is a live
-- memory of the org within the writer's clearance, else 22023 (a missing id and another org's
-- alike). Not granted to PUBLIC.
CREATE FUNCTION memory_internal._lineage_check_sources(org text, added uuid[])
RETURNS void LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    cl   memory.classification;
    got  uuid[];
    miss uuid;
BEGIN
    IF org IS NULL THEN
        RAISE EXCEPTION 'a row with derived_from needs an org' USING ERRCODE = '22023',
            HINT = 'Its sources are memories of the row''s org: write the org column.';
    END IF;
    PERFORM memory_internal._require_org(org);
    cl := memory_internal._clearance(org)::memory.classification;
    PERFORM pg_catalog.pg_advisory_xact_lock_shared(pg_catalog.hashtextextended('memory_ext.lineage:' OPERATOR(pg_catalog.||) org, 0));
    PERFORM pg_catalog.pg_advisory_xact_lock_shared(pg_catalog.hashtextextended('memory_ext.lineage:' OPERATOR(pg_catalog.||) x::text, 0))
       FROM pg_catalog.unnest(added) x ORDER BY x;
    IF pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.=) 'read committed' THEN
        -- (A statement's snapshot taken after the locks: a forget committed meanwhile is seen.)
        SELECT pg_catalog.array_agg(s.id) INTO got FROM memory.observations s
         WHERE s.org_id OPERATOR(pg_catalog.=) org AND s.id OPERATOR(pg_catalog.=) ANY (added)
           AND s.soft_deleted_at IS NULL AND s.classification OPERATOR(pg_catalog.<=) cl;
    ELSE
        -- REPEATABLE READ and above read under the transaction's snapshot, which may be older
        -- than a forget that has released the locks: the sources are locked (KEY SHARE), so one
        -- changed or removed since the snapshot fails the write (40001), as any write of it would.
        SELECT pg_catalog.array_agg(x.id) INTO got FROM (
            SELECT s.id FROM memory.observations s
             WHERE s.org_id OPERATOR(pg_catalog.=) org AND s.id OPERATOR(pg_catalog.=) ANY (added)
               AND s.soft_deleted_at IS NULL AND s.classification OPERATOR(pg_catalog.<=) cl
               FOR KEY SHARE OF s) x;
    END IF;
    IF coalesce(pg_catalog.cardinality(got), 0) OPERATOR(pg_catalog.<) pg_catalog.cardinality(added) THEN
        miss := (SELECT x FROM pg_catalog.unnest(added) x WHERE NOT x OPERATOR(pg_catalog.=) ANY (coalesce(got, '{}')) LIMIT 1);
        RAISE EXCEPTION 'derived_from names memory %, which is not a memory of org "%"', miss, org
            USING ERRCODE = '22023', HINT = 'A memory or row is derived from live memories of its own org that the writer may read.';
    END IF;
END $$;

-- The uuid[] column `col` of a row read as jsonb (`r`): 22023 for an array of arrays; then
-- memory_internal._lineage_ids' checks (at most 1,000 ids, none NULL), each once.
CREATE FUNCTION memory_internal._table_lineage_ids(r jsonb, col text)
RETURNS uuid[] LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF r OPERATOR(pg_catalog.->) col IS NULL OR pg_catalog.jsonb_typeof(r OPERATOR(pg_catalog.->) col) OPERATOR(pg_catalog.<>) 'array' THEN
        RETURN NULL;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_catalog.jsonb_array_elements(r OPERATOR(pg_catalog.->) col) e WHERE pg_catalog.jsonb_typeof(e) OPERATOR(pg_catalog.=) 'array') THEN
        RAISE EXCEPTION 'derived_from takes a one-dimensional array of memory ids' USING ERRCODE = '22023',
            HINT = 'Write ARRAY[id, id, ...]: the memories this row was made from.';
    END IF;
    RETURN memory_internal._lineage_ids(NULL, ARRAY(SELECT (e.v OPERATOR(pg_catalog.#>>) '{}')::uuid
                                                    FROM pg_catalog.jsonb_array_elements(r OPERATOR(pg_catalog.->) col) WITH ORDINALITY e(v, n) ORDER BY e.n));
END $$;

-- The mapped lineage columns of a governed table's row `r` (NEW or OLD of memory_ancestry or
-- memory_lineage) as jsonb {column: value} by mapping `m` (memory_internal._table_lineage_mapping):
-- derived_from as a jsonb array of ids, a jsonb tier as jsonb, the others as text (JSON null for
-- NULL). Only these columns are read, each through its type's output function
-- (memory_internal._row_text), never pg_catalog.to_jsonb of the row: to_jsonb calls a cast to
-- json of a column's type, and the table's owner may create one for a type it owns (an enum of
-- another column), which the SECURITY DEFINER triggers would run with the extension owner's
-- rights. NULL without a mapping. Not granted to PUBLIC.
CREATE FUNCTION memory_internal._table_lineage_row(r anyelement, m jsonb)
RETURNS jsonb LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    d  text := m OPERATOR(pg_catalog.->>) 'derived_from';
    t  text := m OPERATOR(pg_catalog.->>) 'tier';
    v  jsonb;
BEGIN
    IF m IS NULL THEN
        RETURN NULL;
    END IF;
    v := memory_internal._row_text(r, ARRAY[d, m OPERATOR(pg_catalog.->>) 'org', t, m OPERATOR(pg_catalog.->>) 'source_type',
                                            m OPERATOR(pg_catalog.->>) 'expires_at', m OPERATOR(pg_catalog.->>) 'purge_after']);
    v := v OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_object(d, pg_catalog.to_jsonb((v OPERATOR(pg_catalog.->>) d)::uuid[]));
    IF m OPERATOR(pg_catalog.->>) 'tier_kind' OPERATOR(pg_catalog.=) 'jsonb' THEN
        v := v OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_object(t, (v OPERATOR(pg_catalog.->>) t)::jsonb);
    END IF;
    RETURN v;
END $$;

-- BEFORE INSERT OR UPDATE of a governed table's row with sources (the trigger memory_ancestry,
-- which fires before memory_classify): the sources the write adds are checked
-- (memory_internal._lineage_check_sources; 22023), the column keeps each once, and the floors are
-- written: the tier column at least the strictest live source's (memory_classify keeps a written
-- tier as a floor and stamps retention for it), the mapped source_type no more trusted than the
-- least trusted source's, nor than it was on an UPDATE. The mapping is read from the registry
-- (39P01 on a table not governed with "derived_from"). SECURITY DEFINER: a writer may not read
-- the sources it names; it reads only the new and old row's mapped columns.
CREATE FUNCTION memory_internal._table_lineage_floor()
RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    ranks CONSTANT text[] := '{decision,fact,preference,tool_result}';
    m     jsonb := memory_internal._table_lineage_mapping(TG_RELID);
    n     jsonb := memory_internal._table_lineage_row(NEW, m);
    o     jsonb := CASE WHEN TG_OP OPERATOR(pg_catalog.=) 'UPDATE' THEN memory_internal._table_lineage_row(OLD, m) END;
    ids   uuid[];
    olds  uuid[];
    org   text;
    tier  memory.classification;
    worst int;
    cur   text;
    put   jsonb := '{}';
BEGIN
    IF m IS NULL THEN
        RAISE EXCEPTION 'memory_internal._table_lineage_floor() fires only on a table governed with "derived_from"' USING ERRCODE = '39P01';
    END IF;
    IF memory_internal._restore_mode() THEN
        RETURN NEW;
    END IF;
    org := n OPERATOR(pg_catalog.->>) (m OPERATOR(pg_catalog.->>) 'org');
    ids := memory_internal._table_lineage_ids(n, m OPERATOR(pg_catalog.->>) 'derived_from');
    olds := memory_internal._table_lineage_ids(o, m OPERATOR(pg_catalog.->>) 'derived_from');
    put := pg_catalog.jsonb_build_object(m OPERATOR(pg_catalog.->>) 'derived_from', pg_catalog.to_jsonb(ids));
    IF ids IS NOT NULL AND (o IS NULL OR ids IS DISTINCT FROM olds
                            OR org IS DISTINCT FROM o OPERATOR(pg_catalog.->>) (m OPERATOR(pg_catalog.->>) 'org')) THEN
        PERFORM memory_internal._lineage_check_sources(org,
            ARRAY(SELECT x FROM pg_catalog.unnest(ids) x
                   WHERE o IS NULL OR org IS DISTINCT FROM o OPERATOR(pg_catalog.->>) (m OPERATOR(pg_catalog.->>) 'org')
                      OR NOT x OPERATOR(pg_catalog.=) ANY (coalesce(olds, '{}'))));
    END IF;
    SELECT pg_catalog.max(s.classification), pg_catalog.max(coalesce(pg_catalog.array_position(ranks, s.source_type::text), 5))
      INTO tier, worst FROM memory.observations s
     WHERE s.org_id OPERATOR(pg_catalog.=) org AND s.id OPERATOR(pg_catalog.=) ANY (ids) AND s.soft_deleted_at IS NULL;
    -- The tier: written as a floor for memory_classify, in the column's kind.
    cur := CASE m OPERATOR(pg_catalog.->>) 'tier_kind' WHEN 'jsonb' THEN n OPERATOR(pg_catalog.->) (m OPERATOR(pg_catalog.->>) 'tier') OPERATOR(pg_catalog.->>) 'classification'
                ELSE n OPERATOR(pg_catalog.->>) (m OPERATOR(pg_catalog.->>) 'tier') END;
    IF tier IS NOT NULL AND (cur IS NULL OR (cur OPERATOR(pg_catalog.=) ANY (pg_catalog.enum_range(NULL::memory.classification)::text[])
                                             AND cur::memory.classification OPERATOR(pg_catalog.<) tier)) THEN
        put := put OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_object(m OPERATOR(pg_catalog.->>) 'tier',
                   CASE m OPERATOR(pg_catalog.->>) 'tier_kind' WHEN 'jsonb'
                        THEN CASE WHEN pg_catalog.jsonb_typeof(n OPERATOR(pg_catalog.->) (m OPERATOR(pg_catalog.->>) 'tier')) OPERATOR(pg_catalog.=) 'object'
                                  THEN n OPERATOR(pg_catalog.->) (m OPERATOR(pg_catalog.->>) 'tier') ELSE '{}'::jsonb END
                             OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_object('classification', tier::text)
                        ELSE pg_catalog.to_jsonb(tier::text) END);
    END IF;
    -- The trust: never above the least trusted source's, and an UPDATE never raises it.
    IF m OPERATOR(pg_catalog.->>) 'source_type' IS NOT NULL THEN
        IF o IS NOT NULL THEN
            worst := CASE WHEN ids IS NOT DISTINCT FROM olds THEN 1 ELSE worst END;
            worst := greatest(worst, coalesce(pg_catalog.array_position(ranks, o OPERATOR(pg_catalog.->>) (m OPERATOR(pg_catalog.->>) 'source_type')), 5));
        END IF;
        IF coalesce(pg_catalog.array_position(ranks, n OPERATOR(pg_catalog.->>) (m OPERATOR(pg_catalog.->>) 'source_type')), 5) OPERATOR(pg_catalog.<) worst THEN
            put := put OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_object(m OPERATOR(pg_catalog.->>) 'source_type', ranks[worst]);
        END IF;
    END IF;
    NEW := pg_catalog.jsonb_populate_record(NEW, put);
    RETURN NEW;
END $$;

-- BEFORE INSERT OR UPDATE of a governed table's row with sources, after memory_classify stamped
-- its retention (the trigger memory_lineage, on a table with retention stamps): expires_at and
-- purge_after end no later than the sources' (the earliest) when the sources are written, and an
-- UPDATE that keeps them never makes them later than they were. SECURITY DEFINER, as
-- memory_internal._table_lineage_floor.
CREATE FUNCTION memory_internal._table_lineage_ceiling()
RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    m   jsonb := memory_internal._table_lineage_mapping(TG_RELID);
    n   jsonb := memory_internal._table_lineage_row(NEW, m);
    o   jsonb := CASE WHEN TG_OP OPERATOR(pg_catalog.=) 'UPDATE' THEN memory_internal._table_lineage_row(OLD, m) END;
    ec  text := m OPERATOR(pg_catalog.->>) 'expires_at';
    pc  text := m OPERATOR(pg_catalog.->>) 'purge_after';
    ids uuid[];
    e   timestamptz;
    p   timestamptz;
BEGIN
    IF m IS NULL THEN
        RAISE EXCEPTION 'memory_internal._table_lineage_ceiling() fires only on a table governed with "derived_from"' USING ERRCODE = '39P01';
    END IF;
    IF memory_internal._restore_mode() OR ec IS NULL THEN
        RETURN NEW;
    END IF;
    ids := memory_internal._table_lineage_ids(n, m OPERATOR(pg_catalog.->>) 'derived_from');
    IF ids IS NOT NULL AND (o IS NULL OR ids IS DISTINCT FROM memory_internal._table_lineage_ids(o, m OPERATOR(pg_catalog.->>) 'derived_from')) THEN
        SELECT pg_catalog.min(s.expires_at), pg_catalog.min(s.purge_after) INTO e, p FROM memory.observations s
         WHERE s.org_id OPERATOR(pg_catalog.=) (n OPERATOR(pg_catalog.->>) (m OPERATOR(pg_catalog.->>) 'org'))
           AND s.id OPERATOR(pg_catalog.=) ANY (ids) AND s.soft_deleted_at IS NULL;
    END IF;
    -- An UPDATE never makes them later than they were, whether it keeps, replaces or takes away
    -- the sources (as the trust: a row's sources rewritten do not relax its floors).
    IF o IS NOT NULL THEN
        e := least(e, (o OPERATOR(pg_catalog.->>) ec)::timestamptz);
        p := least(p, (o OPERATOR(pg_catalog.->>) pc)::timestamptz);
    END IF;
    NEW := pg_catalog.jsonb_populate_record(NEW, pg_catalog.jsonb_strip_nulls(
               pg_catalog.jsonb_build_object(ec, least((n OPERATOR(pg_catalog.->>) ec)::timestamptz, e))
               OPERATOR(pg_catalog.||) CASE WHEN pc IS NULL THEN '{}'::jsonb
                                            ELSE pg_catalog.jsonb_build_object(pc, least((n OPERATOR(pg_catalog.->>) pc)::timestamptz, p)) END));
    RETURN NEW;
END $$;

-- A source of `org` tightened (memory_internal._lineage_down): the rows of governed tables made
-- from `ids` (the source and its derived memories) take the floors in one UPDATE a table, as the
-- table's owner (memory_internal._exec_as_table_owner: its triggers run with the owner's rights;
-- memory_classify keeps the raised tier, the audit trigger records the change): the tier `tier`
-- everywhere, and for rows within the changing role's clearance `cl` the trust rank `tr` (1 most
-- trusted .. 5) and the retention `e` / `p`. A hold keeps a row, never a lower tier: the memory_hold
-- trigger lets these columns change, and the hold gate is closed (the owner's triggers run here).
-- Not granted to PUBLIC.
CREATE FUNCTION memory_internal._lineage_down_tables(org text, ids uuid[], tier memory.classification, tr int,
                                                     e timestamptz, p timestamptz, cl memory.classification)
RETURNS void LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    g    record;
    m    jsonb;
    tc   text;
    te   text;
    low  text;
    clr  text;
    sets text[];
    need text[];
    hold boolean;
BEGIN
    FOR g IN SELECT r.relid::regclass AS tbl FROM memory.governance_registry r
              WHERE NOT r.builtin AND r.options OPERATOR(pg_catalog.->>) 'derived_from' IS NOT NULL
                AND pg_catalog.to_regclass(r.relid::pg_catalog.text) IS NOT NULL ORDER BY r.relid LOOP
        m := memory_internal._table_lineage_mapping(g.tbl);
        tc := m OPERATOR(pg_catalog.->>) 'tier';
        te := CASE m OPERATOR(pg_catalog.->>) 'tier_kind' WHEN 'jsonb' THEN pg_catalog.format('(t.%I OPERATOR(pg_catalog.->>) ''classification'')', tc)
                   ELSE pg_catalog.format('t.%I::pg_catalog.text', tc) END;
        -- The row's tier is below the source's (or unknown), and the row is within the clearance.
        low := pg_catalog.format('coalesce(%s::memory.classification OPERATOR(pg_catalog.<) $3::memory.classification, true)', te);
        need := ARRAY[low];
        -- The row is within the changing role's clearance (every row for one cleared to restricted).
        clr := pg_catalog.format('coalesce(%s::memory.classification OPERATOR(pg_catalog.<=) $7::memory.classification, $7 OPERATOR(pg_catalog.=) ''restricted'')', te);
        sets := ARRAY[pg_catalog.format('%I = CASE WHEN %s THEN %s ELSE t.%I END', tc, low,
                    CASE m OPERATOR(pg_catalog.->>) 'tier_kind'
                         WHEN 'jsonb' THEN pg_catalog.format('(CASE WHEN pg_catalog.jsonb_typeof(t.%1$I) OPERATOR(pg_catalog.=) ''object'' THEN t.%1$I ELSE ''{}''::jsonb END) '
                                                             'OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_object(''classification'', $3)', tc)
                         ELSE pg_catalog.format('$3::%s', memory_internal._column_type(g.tbl, tc, 'target')::regtype) END, tc)];
        IF m OPERATOR(pg_catalog.->>) 'source_type' IS NOT NULL THEN
            sets := sets OPERATOR(pg_catalog.||) pg_catalog.format(
                '%1$I = CASE WHEN (%2$s) AND coalesce(pg_catalog.array_position(''{decision,fact,preference,tool_result}''::pg_catalog.text[], t.%1$I::pg_catalog.text), 5) OPERATOR(pg_catalog.<) $4::int '
                'THEN (''{decision,fact,preference,tool_result}''::pg_catalog.text[])[$4::int]::%3$s ELSE t.%1$I END',
                m OPERATOR(pg_catalog.->>) 'source_type', clr,
                memory_internal._column_type(g.tbl, m OPERATOR(pg_catalog.->>) 'source_type', 'source_type')::regtype);
            need := need OPERATOR(pg_catalog.||) pg_catalog.format(
                '(%s AND coalesce(pg_catalog.array_position(''{decision,fact,preference,tool_result}''::pg_catalog.text[], t.%I::pg_catalog.text), 5) OPERATOR(pg_catalog.<) $4::int)',
                clr, m OPERATOR(pg_catalog.->>) 'source_type');
        END IF;
        IF m OPERATOR(pg_catalog.->>) 'expires_at' IS NOT NULL THEN
            sets := sets OPERATOR(pg_catalog.||) pg_catalog.format('%1$I = CASE WHEN %2$s THEN least(t.%1$I, $5::timestamptz) ELSE t.%1$I END',
                        m OPERATOR(pg_catalog.->>) 'expires_at', clr)
                         OPERATOR(pg_catalog.||) pg_catalog.format('%1$I = CASE WHEN %2$s THEN least(t.%1$I, $6::timestamptz) ELSE t.%1$I END',
                        m OPERATOR(pg_catalog.->>) 'purge_after', clr);
            need := need OPERATOR(pg_catalog.||) pg_catalog.format(
                '(%3$s AND (($5 IS NOT NULL AND (t.%1$I IS NULL OR t.%1$I OPERATOR(pg_catalog.>) $5::timestamptz)) '
                'OR ($6 IS NOT NULL AND (t.%2$I IS NULL OR t.%2$I OPERATOR(pg_catalog.>) $6::timestamptz))))',
                m OPERATOR(pg_catalog.->>) 'expires_at', m OPERATOR(pg_catalog.->>) 'purge_after', clr);
        END IF;
        -- With the hold gate closed, even when a caller had it open: the table owner's own
        -- triggers run in this UPDATE, and memory_hold lets a held row's floors rise (not columns it protects).
        hold := memory_internal._hold_gate(false);
        PERFORM memory_internal._exec_as_table_owner(g.tbl, pg_catalog.format(
            'UPDATE %s t SET %s WHERE t.%I OPERATOR(pg_catalog.&&) $1::uuid[] AND t.%I::pg_catalog.text OPERATOR(pg_catalog.=) $2 AND (%s)',
            g.tbl, pg_catalog.array_to_string(sets, ', '), m OPERATOR(pg_catalog.->>) 'derived_from', m OPERATOR(pg_catalog.->>) 'org',
            pg_catalog.array_to_string(need, ' OR ')),
            ARRAY[ids::text, org, tier::text, tr::text, e::text, p::text, cl::text]);
        PERFORM memory_internal._hold_gate(hold);
    END LOOP;
END $$;

-- Which of the rows `ids` (the mapped id column's text) of org `org` of governed table `tbl`
-- (lineage mapping `m`) the caller's own SELECT reads (its grants and the table's row-level
-- security; memory_internal._read_as_caller), as a jsonb array of ids. Not granted to PUBLIC.
CREATE FUNCTION memory_internal._table_ids_read_by_caller(tbl regclass, m jsonb, org text, ids text[])
RETURNS jsonb LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
SELECT CASE WHEN coalesce(pg_catalog.cardinality(ids), 0) OPERATOR(pg_catalog.=) 0 THEN '[]'::jsonb
            ELSE coalesce(memory_internal._read_as_caller(pg_catalog.format(
                'SELECT coalesce(pg_catalog.jsonb_agg(t.%1$I::pg_catalog.text), ''[]'') FROM %2$s t
                  WHERE t.%1$I::pg_catalog.text OPERATOR(pg_catalog.=) ANY ($1::pg_catalog.text[]) AND t.%3$I::pg_catalog.text OPERATOR(pg_catalog.=) $2',
                m OPERATOR(pg_catalog.->>) 'id', tbl, m OPERATOR(pg_catalog.->>) 'org'), ARRAY[ids::text, org]), '[]') END
$$;

-- Forgetting follows lineage into governed tables (memory_internal._erase_derived): the rows of
-- org `org` of each table governed with "derived_from" made from `ids` (memories removed) go,
-- unless held or (with `cl`, forget: the caller's clearance) above `cl` or of user `skip_user`
-- (erasure: the subject's own rows, which memory.erase_subject removes itself). With `cl` the
-- rows are deleted as the caller (memory_internal._write_as_caller: its grants and the table's
-- row-level security; a table it may not DELETE from or whose columns it may not read keeps them,
-- as does a row its DELETE does not reach); without (erasure, memory_admin) as the table's owner.
-- What stays is reported as above (named only in memory.forget's event, for the org's admins)
-- or held (a held row the forgetting caller's SELECT does not read is reported as above). Returns
-- {deleted: {table: [{id, content_sha256, derived: true}]}, held: [id], above: [id]}. Not granted
-- to PUBLIC.
CREATE FUNCTION memory_internal._erase_derived_tables(org text, ids uuid[], cl memory.classification, skip_user text)
RETURNS jsonb LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    g       record;
    m       jsonb;
    who     oid := memory_internal._caller();
    rows_   jsonb;
    del     text[];
    hc      text[];
    vis     jsonb;
    stmt    text;
    gone    jsonb;
    deleted jsonb := '{}';
    held    jsonb := '[]';
    above   jsonb := '[]';
BEGIN
    FOR g IN SELECT r.relid::regclass AS tbl FROM memory.governance_registry r
              WHERE NOT r.builtin AND r.options OPERATOR(pg_catalog.->>) 'derived_from' IS NOT NULL
                AND pg_catalog.to_regclass(r.relid::pg_catalog.text) IS NOT NULL ORDER BY r.relid LOOP
        m := memory_internal._table_lineage_mapping(g.tbl);
        -- The rows made from them, read as the table's owner: [id, user, tier].
        rows_ := memory_internal._exec_as_table_owner(g.tbl, pg_catalog.format(
            'SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_array(t.%1$I::pg_catalog.text, %2$s, %3$s)), ''[]'') FROM %4$s t
              WHERE t.%5$I OPERATOR(pg_catalog.&&) $1::uuid[] AND t.%6$I::pg_catalog.text OPERATOR(pg_catalog.=) $2',
            m OPERATOR(pg_catalog.->>) 'id',
            CASE WHEN m OPERATOR(pg_catalog.->>) 'user' IS NULL THEN 'NULL::pg_catalog.text' ELSE pg_catalog.format('t.%I::pg_catalog.text', m OPERATOR(pg_catalog.->>) 'user') END,
            CASE m OPERATOR(pg_catalog.->>) 'tier_kind' WHEN 'jsonb' THEN pg_catalog.format('(t.%I OPERATOR(pg_catalog.->>) ''classification'')', m OPERATOR(pg_catalog.->>) 'tier')
                 ELSE pg_catalog.format('t.%I::pg_catalog.text', m OPERATOR(pg_catalog.->>) 'tier') END,
            g.tbl, m OPERATOR(pg_catalog.->>) 'derived_from', m OPERATOR(pg_catalog.->>) 'org'), ARRAY[ids::text, org]);
        CONTINUE WHEN rows_ IS NULL OR pg_catalog.jsonb_array_length(rows_) OPERATOR(pg_catalog.=) 0;
        -- A forgetting caller without DELETE on the table or SELECT on its mapped columns reaches none.
        IF cl IS NOT NULL AND NOT (pg_catalog.has_table_privilege(who, g.tbl, 'DELETE') AND NOT EXISTS (
                   SELECT 1 FROM pg_catalog.jsonb_each_text(m) c
                    WHERE c.key OPERATOR(pg_catalog.=) ANY (ARRAY['derived_from', 'org', 'id', 'content', 'user', 'tier'])
                      AND NOT pg_catalog.has_column_privilege(who, g.tbl, c.value, 'SELECT'))) THEN
            above := above OPERATOR(pg_catalog.||) (SELECT pg_catalog.jsonb_agg(r OPERATOR(pg_catalog.->) 0) FROM pg_catalog.jsonb_array_elements(rows_) r);
            CONTINUE;
        END IF;
        del := '{}';
        hc := '{}';
        FOR i IN 0 .. pg_catalog.jsonb_array_length(rows_) OPERATOR(pg_catalog.-) 1 LOOP
            IF skip_user IS NOT NULL AND rows_ OPERATOR(pg_catalog.->) i OPERATOR(pg_catalog.->>) 1 IS NOT DISTINCT FROM skip_user THEN
                CONTINUE;
            ELSIF cl IS NOT NULL AND cl OPERATOR(pg_catalog.<>) 'restricted' AND NOT coalesce(
                      (rows_ OPERATOR(pg_catalog.->) i OPERATOR(pg_catalog.->>) 2) OPERATOR(pg_catalog.=) ANY (
                          ARRAY(SELECT x::pg_catalog.text FROM pg_catalog.unnest(pg_catalog.enum_range(NULL, cl)) x)), false) THEN
                above := above OPERATOR(pg_catalog.||) (rows_ OPERATOR(pg_catalog.->) i OPERATOR(pg_catalog.->) 0);
            ELSIF memory_internal._held(org, rows_ OPERATOR(pg_catalog.->) i OPERATOR(pg_catalog.->>) 1,
                      CASE WHEN rows_ OPERATOR(pg_catalog.->) i OPERATOR(pg_catalog.->>) 0 OPERATOR(pg_catalog.~*) '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
                           THEN (rows_ OPERATOR(pg_catalog.->) i OPERATOR(pg_catalog.->>) 0)::uuid END) THEN
                hc := hc OPERATOR(pg_catalog.||) (rows_ OPERATOR(pg_catalog.->) i OPERATOR(pg_catalog.->>) 0);
            ELSE
                del := del OPERATOR(pg_catalog.||) (rows_ OPERATOR(pg_catalog.->) i OPERATOR(pg_catalog.->>) 0);
            END IF;
        END LOOP;
        -- A held row is named to a forgetting caller only when its SELECT reads it (the table's
        -- row-level security); else, as one above the clearance, in the event alone.
        vis := CASE WHEN cl IS NULL THEN pg_catalog.to_jsonb(hc) ELSE memory_internal._table_ids_read_by_caller(g.tbl, m, org, hc) END;
        held := held OPERATOR(pg_catalog.||) vis;
        above := above OPERATOR(pg_catalog.||) pg_catalog.to_jsonb(ARRAY(SELECT x FROM pg_catalog.unnest(hc) x WHERE NOT vis OPERATOR(pg_catalog.?) x));
        CONTINUE WHEN pg_catalog.cardinality(del) OPERATOR(pg_catalog.=) 0;
        stmt := pg_catalog.format(
            'WITH d AS (DELETE FROM %1$s t WHERE t.%2$I::pg_catalog.text OPERATOR(pg_catalog.=) ANY ($1::pg_catalog.text[])
                          AND t.%3$I::pg_catalog.text OPERATOR(pg_catalog.=) $2 AND t.%4$I OPERATOR(pg_catalog.&&) $3::uuid[]
                        RETURNING t.%2$I::pg_catalog.text AS id, %5$s AS sha)
             SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(''id'', d.id, ''content_sha256'', d.sha, ''derived'', true)), ''[]'') FROM d',
            g.tbl, m OPERATOR(pg_catalog.->>) 'id', m OPERATOR(pg_catalog.->>) 'org', m OPERATOR(pg_catalog.->>) 'derived_from',
            CASE WHEN m OPERATOR(pg_catalog.->>) 'content' IS NULL THEN 'NULL::pg_catalog.text'
                 ELSE pg_catalog.format('pg_catalog.encode(pg_catalog.sha256(pg_catalog.convert_to(t.%I::pg_catalog.text, ''UTF8'')), ''hex'')', m OPERATOR(pg_catalog.->>) 'content') END);
        gone := CASE WHEN cl IS NULL THEN memory_internal._exec_as_table_owner(g.tbl, stmt, ARRAY[del::text, org, ids::text])
                     ELSE memory_internal._write_as_caller(stmt, ARRAY[del::text, org, ids::text]) END;
        IF pg_catalog.jsonb_array_length(gone) OPERATOR(pg_catalog.>) 0 THEN
            deleted := deleted OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_object(g.tbl::pg_catalog.text, gone);
        END IF;
        -- What its DELETE did not reach (row-level security, a BEFORE DELETE trigger) stays.
        above := above OPERATOR(pg_catalog.||) coalesce((SELECT pg_catalog.jsonb_agg(x) FROM pg_catalog.unnest(del) x
                  WHERE NOT pg_catalog.jsonb_build_object('id', x) OPERATOR(pg_catalog.<@) ANY (ARRAY(SELECT pg_catalog.jsonb_array_elements(gone)))), '[]');
    END LOOP;
    RETURN pg_catalog.jsonb_build_object('deleted', deleted, 'held', held, 'above', above);
END $$;

-- A governed table's rows of `org` that stay (held, above a clearance, kept by the table) no
-- longer name the removed memories `ids` (memory_internal._lineage_strip), as the table's owner
-- (held rows too: memory_hold lets derived_from change; the hold gate is closed, as the owner's
-- triggers run here); their floors stay. Not granted to PUBLIC.
CREATE FUNCTION memory_internal._lineage_strip_tables(org text, ids uuid[])
RETURNS void LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    g    record;
    hold boolean;
BEGIN
    FOR g IN SELECT r.relid::regclass AS tbl, r.options OPERATOR(pg_catalog.->>) 'derived_from' AS col, r.options OPERATOR(pg_catalog.->>) 'org' AS org_col
               FROM memory.governance_registry r
              WHERE NOT r.builtin AND r.options OPERATOR(pg_catalog.->>) 'derived_from' IS NOT NULL
                AND pg_catalog.to_regclass(r.relid::pg_catalog.text) IS NOT NULL ORDER BY r.relid LOOP
        -- With the hold gate closed, even when a caller had it open (retention's purge, whose
        -- memory_lineage_gone strips): the table owner's own triggers run in this UPDATE, and the
        -- memory_hold trigger lets a held row's derived_from change (not a column it protects).
        hold := memory_internal._hold_gate(false);
        PERFORM memory_internal._exec_as_table_owner(g.tbl, pg_catalog.format(
            'UPDATE %1$s t SET %2$I = nullif(ARRAY(SELECT x FROM pg_catalog.unnest(t.%2$I) x WHERE NOT x OPERATOR(pg_catalog.=) ANY ($1::uuid[])), ''{}'')
              WHERE t.%2$I OPERATOR(pg_catalog.&&) $1::uuid[] AND t.%3$I::pg_catalog.text OPERATOR(pg_catalog.=) $2', g.tbl, g.col, g.org_col),
            ARRAY[ids::text, org]);
        PERFORM memory_internal._hold_gate(hold);
    END LOOP;
END $$;
