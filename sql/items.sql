-- Namespaced items (SPEC §16, docs/design.md#items): LangGraph-style JSON items addressed by
-- (org, namespace, key), stored as rows of memory.observations so that every rule of an
-- observation (classification, retention stamps, audit, holds, tenant and clearance row-level
-- security, forget, erasure and export by user, embeddings) is theirs with no second copy.
-- An item is a row whose key is not NULL; a plain observation leaves the item columns NULL and
-- pays for nothing here but a partial index's predicate.
--
--   namespace   text[]    1-20 labels, each non-blank, no '.', at most 256 bytes
--   key         text      non-blank, at most 1024 bytes; unique per (org_id, namespace)
--   value       jsonb     an object, at most 1 MiB, nested at most 64 levels
--   content     text      memory_internal._item_text(value): every key and scalar of value, one a
--                         line (what classification reads; checked on the final row)
--   search_tsv  tsvector  the words of the item's searchable text (index paths; '' when not
--                         searchable), written by memory.put
--   ttl         interval  the item's time to live (expires_at = least(policy, last put/refresh + ttl))
--   updated_at  timestamptz  the last put

ALTER TABLE memory.observations ADD COLUMN namespace text[];
ALTER TABLE memory.observations ADD COLUMN key text;
ALTER TABLE memory.observations ADD COLUMN value jsonb;
ALTER TABLE memory.observations ADD COLUMN search_tsv tsvector;
ALTER TABLE memory.observations ADD COLUMN ttl interval;
ALTER TABLE memory.observations ADD COLUMN updated_at timestamptz;
-- The archive keeps an archived item's address and value (not its words, as for content).
ALTER TABLE memory.observations_archive ADD COLUMN namespace text[];
ALTER TABLE memory.observations_archive ADD COLUMN key text;
ALTER TABLE memory.observations_archive ADD COLUMN value jsonb;
ALTER TABLE memory.observations_archive ADD COLUMN ttl interval;
ALTER TABLE memory.observations_archive ADD COLUMN updated_at timestamptz;
-- One item per key: concurrent puts of one key meet here (INSERT ... ON CONFLICT).
CREATE UNIQUE INDEX observations_item_key ON memory.observations (org_id, namespace, key) WHERE key IS NOT NULL;
CREATE INDEX observations_item_search ON memory.observations USING gin (search_tsv) WHERE search_tsv IS NOT NULL;
-- memory.search's namespace prefix: `'users.u1.' <= _item_ns_path(namespace) < 'users.u1/'` is a range of this
-- index (C collation), so a search under a prefix reads the items under it, not the org's.
CREATE INDEX observations_item_prefix ON memory.observations (org_id, memory_internal._item_ns_path(namespace) COLLATE "C")
    WHERE key IS NOT NULL;

-- memory.live_observations is the table's every column: made again with the item columns.
CREATE OR REPLACE VIEW memory.live_observations AS
SELECT * FROM memory.observations o
 WHERE o.soft_deleted_at IS NULL AND (o.expires_at IS NULL OR o.expires_at > now());

-- The text classification reads for an item: every object key and every scalar (strings,
-- numbers, booleans) of value, in document order, one a line. Immutable: the CHECK below holds
-- every item row to it, so no writer stores a value beside a content that hides it.
CREATE FUNCTION memory_internal._item_text(value jsonb)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp
AS $$
-- A value with nothing to say (`{}`, or blank keys and strings only) reads as `{}`: an item is
-- never a blank memory (blank contents are refused), and LangGraph stores take empty values.
SELECT CASE WHEN t OPERATOR(pg_catalog.~) '[^[:space:]]' THEN t ELSE '{}' END FROM (
SELECT coalesce(pg_catalog.string_agg(x.t, E'\n' ORDER BY j.n, x.m), '') AS t
  FROM pg_catalog.jsonb_path_query(value, 'strict $.**') WITH ORDINALITY AS j(node, n)
 CROSS JOIN LATERAL (
        SELECT e.key AS t, e.m
          FROM pg_catalog.jsonb_each(CASE WHEN pg_catalog.jsonb_typeof(j.node) OPERATOR(pg_catalog.=) 'object' THEN j.node ELSE '{}'::jsonb END)
               WITH ORDINALITY AS e(key, v, m)
        UNION ALL
        SELECT j.node OPERATOR(pg_catalog.#>>) '{}', 0
         WHERE pg_catalog.jsonb_typeof(j.node) OPERATOR(pg_catalog.=) ANY (ARRAY['string', 'number', 'boolean'])) x) v
$$;

-- What is wrong with an item's namespace, or NULL (SPEC §16's rules; the key's below).
CREATE FUNCTION memory_internal._item_namespace_error(namespace text[])
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp
AS $$
SELECT CASE
    WHEN namespace IS NULL OR pg_catalog.cardinality(namespace) OPERATOR(pg_catalog.=) 0 THEN 'the namespace has no label'
    WHEN pg_catalog.array_ndims(namespace) OPERATOR(pg_catalog.>) 1 THEN 'the namespace is not a one-dimensional array'
    WHEN pg_catalog.cardinality(namespace) OPERATOR(pg_catalog.>) 20 THEN
         'the namespace has ' OPERATOR(pg_catalog.||) pg_catalog.cardinality(namespace) OPERATOR(pg_catalog.||) ' labels (at most 20)'
    WHEN pg_catalog.array_position(namespace, NULL) IS NOT NULL THEN
         'namespace label ' OPERATOR(pg_catalog.||) pg_catalog.array_position(namespace, NULL) OPERATOR(pg_catalog.||) ' is NULL'
    ELSE (SELECT 'namespace label ' OPERATOR(pg_catalog.||) u.n OPERATOR(pg_catalog.||)
                 CASE WHEN u.l OPERATOR(pg_catalog.!~) '[^[:space:]]' THEN ' is blank'
                      WHEN pg_catalog.strpos(u.l, '.') OPERATOR(pg_catalog.>) 0 THEN ' contains a period'
                      ELSE ' is over 256 bytes' END
            FROM pg_catalog.unnest(namespace) WITH ORDINALITY u(l, n)
           WHERE u.l OPERATOR(pg_catalog.!~) '[^[:space:]]' OR pg_catalog.strpos(u.l, '.') OPERATOR(pg_catalog.>) 0
              OR pg_catalog.octet_length(u.l) OPERATOR(pg_catalog.>) 256
           ORDER BY u.n LIMIT 1)
  END
$$;

CREATE FUNCTION memory_internal._item_key_error(key text)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp
AS $$
SELECT CASE
    WHEN key IS NULL OR key OPERATOR(pg_catalog.!~) '[^[:space:]]' THEN 'the key is blank'
    WHEN pg_catalog.octet_length(key) OPERATOR(pg_catalog.>) 1024 THEN 'the key is over 1024 bytes'
  END
$$;

-- Every item row, however written (memory.put or a writer's INSERT): a valid address, an object
-- value, and the content classification reads made from the value. A memory that is not an item
-- may have a namespace alone (memory.remember's), valid as an item's.
ALTER TABLE memory.observations ADD CONSTRAINT observations_item_check CHECK (
    (key IS NULL AND value IS NULL AND search_tsv IS NULL AND ttl IS NULL
     AND (namespace IS NULL OR memory_internal._item_namespace_error(namespace) IS NULL))
    OR (key IS NOT NULL AND memory_internal._item_key_error(key) IS NULL
        AND memory_internal._item_namespace_error(namespace) IS NULL
        AND pg_catalog.jsonb_typeof(value) OPERATOR(pg_catalog.=) 'object'
        AND content OPERATOR(pg_catalog.=) memory_internal._item_text(value)));

-- An index path ($, $.a.b, $.tags[*], $.a[0]) as a jsonpath with every key quoted, or NULL when it
-- is not one (the caller's text never reaches the jsonpath parser unchecked).
CREATE FUNCTION memory_internal._item_path(path text)
RETURNS jsonpath LANGUAGE sql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp
AS $$
SELECT CASE WHEN path OPERATOR(pg_catalog.~) '^\$(\.[^].["\\[:cntrl:]]+|\[(\*|[0-9]{1,6})\])*$'
              AND pg_catalog.octet_length(path) OPERATOR(pg_catalog.<=) 1024
            THEN ('strict ' OPERATOR(pg_catalog.||) pg_catalog.regexp_replace(path, '\.([^].["\\[:cntrl:]]+)', '."\1"', 'g'))::pg_catalog.jsonpath END
$$;

-- The words of an item's searchable text: the text (as memory_internal._item_text) of what each
-- index path finds in value (a path that finds nothing adds nothing); NULL paths: the whole value;
-- no path: none.
CREATE FUNCTION memory_internal._item_tsv(value jsonb, index text[])
RETURNS tsvector LANGUAGE sql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp
AS $$
SELECT pg_catalog.to_tsvector('english'::pg_catalog.regconfig,
         CASE WHEN index IS NULL THEN memory_internal._item_text(value)
              ELSE coalesce((SELECT pg_catalog.string_agg(memory_internal._item_text(f.node), E'\n' ORDER BY p.n, f.m)
                               FROM pg_catalog.unnest(index) WITH ORDINALITY p(path, n)
                              CROSS JOIN LATERAL pg_catalog.jsonb_path_query(value, memory_internal._item_path(p.path), '{}', true)
                                         WITH ORDINALITY f(node, m)), '') END)
$$;

-- The checks memory.put makes of its arguments (22023 with a hint; nothing written).
CREATE FUNCTION memory_internal._item_put_check(org text, namespace text[], key text, value jsonb, index text[], ttl interval, user_id text)
RETURNS void LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    err text;
    bad text;
BEGIN
    PERFORM memory_internal._item_address_check('memory.put', org, namespace, key);
    IF value IS NULL OR pg_catalog.jsonb_typeof(value) OPERATOR(pg_catalog.<>) 'object' THEN
        RAISE EXCEPTION 'memory.put: the value must be a JSON object, not %', coalesce(pg_catalog.jsonb_typeof(value), 'NULL')
            USING ERRCODE = '22023', HINT = 'Store {"field": ...}; wrap a scalar or an array in an object.';
    END IF;
    IF pg_catalog.octet_length(value::text) OPERATOR(pg_catalog.>) 1048576 THEN
        RAISE EXCEPTION 'memory.put: the value is % bytes as text (at most 1 MiB)', pg_catalog.octet_length(value::text)
            USING ERRCODE = '22023', HINT = 'Split a large value into several items.';
    END IF;
    IF pg_catalog.jsonb_path_exists(value, 'strict $.**{64 to last} ? (@.type() == "object" || @.type() == "array")') THEN
        RAISE EXCEPTION 'memory.put: the value is nested more than 64 levels deep' USING ERRCODE = '22023',
            HINT = 'Flatten the value: objects and arrays nest at most 64 levels.';
    END IF;
    IF index IS NOT NULL THEN
        IF pg_catalog.array_ndims(index) OPERATOR(pg_catalog.>) 1 OR pg_catalog.cardinality(index) OPERATOR(pg_catalog.>) 100 THEN
            RAISE EXCEPTION 'memory.put: index takes a one-dimensional array of at most 100 paths' USING ERRCODE = '22023',
                HINT = 'Name the fields to search, e.g. ARRAY[''$.text'', ''$.tags[*]'']; NULL: the whole value; ''{}'': not searchable.';
        END IF;
        SELECT coalesce(p, 'NULL') INTO bad FROM pg_catalog.unnest(index) p WHERE memory_internal._item_path(p) IS NULL LIMIT 1;
        IF bad IS NOT NULL THEN
            RAISE EXCEPTION 'memory.put: index path % is not a JSON path memory_ext takes', pg_catalog.quote_literal(pg_catalog.left(bad, 100))
                USING ERRCODE = '22023', HINT = 'Paths are $, $.field, $.a.b, $.list[*] or $.list[0] (keys without . [ ] " or \).';
        END IF;
    END IF;
    IF ttl IS NOT NULL AND ttl OPERATOR(pg_catalog.<=) '0'::interval THEN
        RAISE EXCEPTION 'memory.put: ttl must be positive, got %', ttl USING ERRCODE = '22023',
            HINT = 'Pass how long the item lives (e.g. interval ''30 minutes''), or NULL for the retention policy alone.';
    END IF;
    IF ttl IS NOT NULL THEN
        BEGIN
            bad := CASE WHEN pg_catalog.isfinite(pg_catalog.now() OPERATOR(pg_catalog.+) ttl) THEN NULL ELSE 'out of range' END;
        EXCEPTION WHEN datetime_field_overflow THEN
            bad := 'out of range';
        END;
        IF bad IS NOT NULL THEN
            RAISE EXCEPTION 'memory.put: ttl % is out of range', ttl USING ERRCODE = '22023', HINT = 'Pass a finite interval.';
        END IF;
    END IF;
    IF user_id IS NOT NULL AND memory_internal._blank(user_id) THEN
        RAISE EXCEPTION 'memory.put: user_id is blank' USING ERRCODE = '22023', HINT = 'Pass the end user''s id, or NULL.';
    END IF;
END $$;

-- The org, namespace and key every item function takes (22023 with a hint).
CREATE FUNCTION memory_internal._item_address_check(fn text, org text, namespace text[], key text)
RETURNS void LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE err text;
BEGIN
    IF memory_internal._blank(org) THEN
        RAISE EXCEPTION '% needs an org_id', fn USING ERRCODE = '22023', HINT = 'Pass the org of the item (one of memory.my_orgs()).';
    END IF;
    err := memory_internal._item_namespace_error(namespace);
    IF err IS NOT NULL THEN
        RAISE EXCEPTION '%: %', fn, err USING ERRCODE = '22023',
            HINT = 'A namespace is 1 to 20 labels, each non-blank, without a period, at most 256 bytes.';
    END IF;
    err := memory_internal._item_key_error(key);
    IF err IS NOT NULL THEN
        RAISE EXCEPTION '%: %', fn, err USING ERRCODE = '22023', HINT = 'A key is non-blank text of at most 1024 bytes.';
    END IF;
END $$;

-- memory.put's embedding: a vector of the observations' embedding dimensions, as pgvector's text
-- (memory_internal._query_vector: float8[], real[], a vector or text alike).
CREATE FUNCTION memory_internal._item_embedding(embedding anycompatible)
RETURNS text LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE dims int;
BEGIN
    IF NOT memory_internal._has_column('memory.observations', 'embedding') THEN
        RAISE EXCEPTION 'memory.put: embeddings are not enabled, so an item has no embedding to store' USING ERRCODE = '22023',
            HINT = 'A platform admin calls memory.enable_embeddings(dimensions) (pgvector), or pass embedding => NULL.';
    END IF;
    SELECT s.dimensions INTO dims FROM memory.ann_settings s;
    RETURN memory_internal._query_vector(embedding, dims);
END $$;

CREATE FUNCTION memory.put(org_id text, namespace text[], key text, value jsonb, index text[] DEFAULT NULL,
                           ttl interval DEFAULT NULL, embedding anycompatible DEFAULT NULL, user_id text DEFAULT NULL,
                           derived_from uuid[] DEFAULT NULL)
RETURNS uuid LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    org     text := $1;
    rid     uuid;
    txt     text;
    vs      text;
    ev      text;      -- the embedding as pgvector's text
    tier    memory.classification;
BEGIN
    -- Input first: nothing is written for a call that is refused.
    PERFORM memory_internal._item_put_check(org, put.namespace, put.key, put.value, put.index, put.ttl, put.user_id);
    IF put.embedding IS NOT NULL THEN
        ev := memory_internal._item_embedding(put.embedding);
    END IF;
    -- Definer: the org is checked against the calling role here.
    PERFORM memory_internal._require_org(org);
    tier := memory_internal._clearance(org)::memory.classification;
    txt := memory_internal._item_text(put.value);
    -- An expired or soft-deleted item of this key is gone for every read: a put makes a new item
    -- (its DELETE is audited and refused under a hold, MX006).
    WITH gone AS (
        DELETE FROM memory.observations o
         WHERE o.org_id OPERATOR(pg_catalog.=) org AND o.namespace OPERATOR(pg_catalog.=) put.namespace
           AND o.key OPERATOR(pg_catalog.=) put.key AND o.key IS NOT NULL
           AND (o.soft_deleted_at IS NOT NULL OR o.expires_at OPERATOR(pg_catalog.<=) pg_catalog.now())
        RETURNING o.id)
    DELETE FROM memory.observation_weight_history h
     WHERE h.org_id OPERATOR(pg_catalog.=) org AND h.observation_id OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT g.id FROM gone g));
    -- One statement for create and change, so concurrent puts of one key are one item. The
    -- triggers classify (a changed value never lowers the tier), stamp and audit (memory.store on
    -- create, memory.update when the content changes); expires_at NULL on change lets the
    -- stamps be computed again for the tier, then the ttl shortens them below.
    INSERT INTO memory.observations AS o (org_id, user_id, namespace, key, value, content, search_tsv, ttl, updated_at, derived_from)
    VALUES (org, put.user_id, put.namespace, put.key, put.value, txt,
            memory_internal._item_tsv(put.value, put.index), put.ttl, pg_catalog.now(), put.derived_from)
    ON CONFLICT (org_id, namespace, key) WHERE key IS NOT NULL DO UPDATE
       SET value = excluded.value, content = excluded.content, search_tsv = excluded.search_tsv, ttl = excluded.ttl,
           derived_from = memory_internal._lineage_union(o.id, o.derived_from, excluded.derived_from),
           updated_at = excluded.updated_at, user_id = coalesce(excluded.user_id, o.user_id), expires_at = NULL
     -- A live item above the caller's clearance is not its to replace, as it is not its to read
     -- (memory.get) or delete (memory.delete): decided on the locked row, so no concurrent put
     -- slips by.
     WHERE o.classification OPERATOR(pg_catalog.<=) tier
    RETURNING o.id INTO rid;
    IF rid IS NULL THEN
        RAISE EXCEPTION 'memory.put: role % is not cleared for the item at this key in org %',
                        coalesce(memory_internal._caller()::regrole::text, '(unknown)'), org
            USING ERRCODE = '42501',
                  HINT = 'An org admin clears the role for a higher tier (memory.grant_org(role, org, max_tier)), or put the value under another key.';
    END IF;
    IF put.ttl IS NOT NULL THEN
        UPDATE memory.observations o SET expires_at = least(o.expires_at, pg_catalog.now() OPERATOR(pg_catalog.+) put.ttl)
         WHERE o.org_id OPERATOR(pg_catalog.=) org AND o.id OPERATOR(pg_catalog.=) rid;
    END IF;
    IF put.embedding IS NULL THEN
        -- A put replaces the item, its embedding too: a vector of the value it replaces would
        -- find the new value by the old meaning. Without one it waits in memory.embedding_backlog.
        IF memory_internal._has_column('memory.observations', 'embedding') THEN
            EXECUTE 'UPDATE memory.observations o SET embedding = NULL WHERE o.org_id OPERATOR(pg_catalog.=) $1 AND o.id OPERATOR(pg_catalog.=) $2 AND o.embedding IS NOT NULL'
                USING org, rid;
        END IF;
    ELSE
        SELECT n.nspname INTO vs FROM pg_catalog.pg_type t JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) t.typnamespace
         WHERE t.oid OPERATOR(pg_catalog.=) (SELECT a.atttypid FROM pg_catalog.pg_attribute a
                                             WHERE a.attrelid OPERATOR(pg_catalog.=) 'memory.observations'::pg_catalog.regclass
                                               AND a.attname OPERATOR(pg_catalog.=) 'embedding');
        EXECUTE pg_catalog.format('UPDATE memory.observations o SET embedding = $1::%I.vector WHERE o.org_id OPERATOR(pg_catalog.=) $2 AND o.id OPERATOR(pg_catalog.=) $3', vs)
            USING ev, org, rid;
    END IF;
    RETURN rid;
END $$;
COMMENT ON FUNCTION memory.put(text, text[], text, jsonb, text[], interval, anycompatible, text, uuid[]) IS
  'Create or replace the item (org_id, namespace, key): a memory classified over every key and scalar of value (a change never lowers its tier), stamped for retention (ttl only shortens it), audited (memory.store, memory.update), refused under a legal hold (MX006) and, for an item above the caller''s clearance, with 42501. index: JSON paths whose text is searchable (NULL: the whole value; ''{}'': none). embedding: the value''s vector; a put without one leaves the item without one (a replaced value never keeps the vector of the value it replaces; memory.embedding_backlog lists the item). derived_from: the memories the value was made from (SPEC §18; a put adds them to the item''s sources, never drops one). Returns the item''s id.';

-- Re-stamp an item's expiry from now: the policy's stamps, shortened by its ttl.
CREATE FUNCTION memory_internal._item_refresh(org text, rid uuid, item_ttl interval)
RETURNS timestamptz LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE e timestamptz;
BEGIN
    -- expires_at NULL lengthens: the trigger computes the policy's stamps again.
    UPDATE memory.observations o SET expires_at = NULL WHERE o.org_id OPERATOR(pg_catalog.=) org AND o.id OPERATOR(pg_catalog.=) rid;
    UPDATE memory.observations o SET expires_at = least(o.expires_at, pg_catalog.now() OPERATOR(pg_catalog.+) item_ttl)
     WHERE o.org_id OPERATOR(pg_catalog.=) org AND o.id OPERATOR(pg_catalog.=) rid
    RETURNING o.expires_at INTO e;
    RETURN e;
END $$;

-- memory.get's work (PL/pgSQL refuses a result column named as an argument, as memory.get's
-- are). Not granted to PUBLIC.
CREATE FUNCTION memory_internal._item_get(org text, ns text[], k text, refresh boolean)
RETURNS TABLE (id uuid, namespace text[], key text, value jsonb, classification memory.classification,
               created_at timestamptz, updated_at timestamptz, expires_at timestamptz)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    tier memory.classification;
    r    record;
BEGIN
    PERFORM memory_internal._item_address_check('memory.get', org, ns, k);
    PERFORM memory_internal._require_org(org);
    tier := memory_internal._clearance(org)::memory.classification;
    SELECT o.id, o.namespace, o.key, o.value, o.classification, o.created_at, o.updated_at, o.expires_at, o.ttl INTO r
      FROM memory.observations o
     WHERE o.org_id OPERATOR(pg_catalog.=) org AND o.namespace OPERATOR(pg_catalog.=) ns
       AND o.key OPERATOR(pg_catalog.=) k AND o.key IS NOT NULL
       AND o.soft_deleted_at IS NULL AND (o.expires_at IS NULL OR o.expires_at OPERATOR(pg_catalog.>) pg_catalog.now())
       AND o.classification OPERATOR(pg_catalog.<=) tier;
    IF r.id IS NOT NULL THEN
        id := r.id; namespace := r.namespace; key := r.key; value := r.value; classification := r.classification;
        created_at := r.created_at; updated_at := r.updated_at; expires_at := r.expires_at;
        IF refresh AND r.ttl IS NOT NULL THEN
            expires_at := memory_internal._item_refresh(org, r.id, r.ttl);
        END IF;
        RETURN NEXT;
    END IF;
    -- A read event: it survives the rollback of this transaction (memory_internal._audit_read).
    PERFORM memory_internal._audit_read('memory.recall',
        pg_catalog.jsonb_build_object('call', 'memory.get', 'ids', CASE WHEN r.id IS NULL THEN '[]'::jsonb ELSE pg_catalog.jsonb_build_array(r.id) END,
                                      'count', CASE WHEN r.id IS NULL THEN 0 ELSE 1 END)::pg_catalog.text, org, NULL);
END $$;
CREATE FUNCTION memory.get(org_id text, namespace text[], key text, refresh_ttl boolean DEFAULT false)
RETURNS TABLE (id uuid, namespace text[], key text, value jsonb, classification memory.classification,
               created_at timestamptz, updated_at timestamptz, expires_at timestamptz)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$ SELECT * FROM memory_internal._item_get($1, $2, $3, coalesce($4, false)) $$;
COMMENT ON FUNCTION memory.get(text, text[], text, boolean) IS
  'The item (org_id, namespace, key) when it is live and within the caller''s clearance, else no row; refresh_ttl restarts its ttl. Audited as memory.recall (id and count only).';

CREATE FUNCTION memory.delete(org_id text, namespace text[], key text)
RETURNS boolean LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    org text := delete.org_id;
    rid uuid;
    res jsonb;
BEGIN
    PERFORM memory_internal._item_address_check('memory.delete', org, delete.namespace, delete.key);
    PERFORM memory_internal._require_org(org);
    -- Whatever its state (expired, soft-deleted, archived): deleting is forgetting.
    SELECT x.id INTO rid FROM (
        SELECT o.id FROM memory.observations o
         WHERE o.org_id OPERATOR(pg_catalog.=) org AND o.namespace OPERATOR(pg_catalog.=) delete.namespace
           AND o.key OPERATOR(pg_catalog.=) delete.key AND o.key IS NOT NULL
        UNION ALL
        SELECT a.id FROM memory.observations_archive a
         WHERE a.org_id OPERATOR(pg_catalog.=) org AND a.namespace OPERATOR(pg_catalog.=) delete.namespace
           AND a.key OPERATOR(pg_catalog.=) delete.key) x
     LIMIT 1;
    IF rid IS NULL THEN
        RETURN false;
    END IF;
    -- memory.forget: the rows (hot and archived) and weights gone, one memory.forget event; MX006 when held.
    res := memory.forget(ARRAY[rid], 'memory.delete');
    RETURN res OPERATOR(pg_catalog.->) 'forgotten' OPERATOR(pg_catalog.?) rid::text;
END $$;
COMMENT ON FUNCTION memory.delete(text, text[], text) IS
  'Forget the item (org_id, namespace, key) as memory.forget does (hot and archived rows, weights; one memory.forget event); MX006 when it is held. True when an item was forgotten.';

-- Whether a namespace matches a pattern of the same length label by label ('*' matches any label).
CREATE FUNCTION memory_internal._item_ns_match(ns text[], pattern text[])
RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp
AS $$
SELECT pg_catalog.cardinality(ns) OPERATOR(pg_catalog.=) pg_catalog.cardinality(pattern)
   AND NOT EXISTS (SELECT 1 FROM ROWS FROM (pg_catalog.unnest(ns), pg_catalog.unnest(pattern)) u(l, p)
                    WHERE u.p OPERATOR(pg_catalog.<>) '*' AND u.l IS DISTINCT FROM u.p)
$$;

CREATE FUNCTION memory.list_namespaces(org_id text, prefix text[] DEFAULT NULL, suffix text[] DEFAULT NULL,
                                       max_depth int DEFAULT NULL, k int DEFAULT 100, "offset" int DEFAULT 0)
RETURNS SETOF text[] LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    org  text := list_namespaces.org_id;
    tier memory.classification;
    n    int;
BEGIN
    PERFORM memory_internal._check_read_args('memory.list_namespaces', org, k);
    IF "offset" IS NULL OR "offset" OPERATOR(pg_catalog.<) 0 THEN
        RAISE EXCEPTION 'memory.list_namespaces: offset must be 0 or more, got %', coalesce("offset"::text, 'NULL')
            USING ERRCODE = '22023', HINT = 'Page with offset => 0, k, 2k, ...';
    END IF;
    IF max_depth IS NOT NULL AND max_depth OPERATOR(pg_catalog.<) 1 THEN
        RAISE EXCEPTION 'memory.list_namespaces: max_depth must be 1 or more, got %', max_depth
            USING ERRCODE = '22023', HINT = 'Pass NULL for whole namespaces.';
    END IF;
    IF (prefix IS NOT NULL AND (pg_catalog.array_ndims(prefix) OPERATOR(pg_catalog.>) 1 OR pg_catalog.array_position(prefix, NULL) IS NOT NULL
                                OR pg_catalog.cardinality(prefix) OPERATOR(pg_catalog.>) 20))
       OR (suffix IS NOT NULL AND (pg_catalog.array_ndims(suffix) OPERATOR(pg_catalog.>) 1 OR pg_catalog.array_position(suffix, NULL) IS NOT NULL
                                   OR pg_catalog.cardinality(suffix) OPERATOR(pg_catalog.>) 20)) THEN
        RAISE EXCEPTION 'memory.list_namespaces: prefix and suffix are one-dimensional arrays of at most 20 labels, none NULL'
            USING ERRCODE = '22023', HINT = 'Pass labels, ''*'' for any one label, or NULL.';
    END IF;
    PERFORM memory_internal._require_org(org);
    tier := memory_internal._clearance(org)::memory.classification;
    RETURN QUERY
    SELECT d.ns FROM (
        SELECT DISTINCT CASE WHEN max_depth IS NULL THEN o.namespace ELSE o.namespace[1:max_depth] END AS ns
          FROM memory.observations o
         WHERE o.org_id OPERATOR(pg_catalog.=) org AND o.key IS NOT NULL
           AND o.soft_deleted_at IS NULL AND (o.expires_at IS NULL OR o.expires_at OPERATOR(pg_catalog.>) pg_catalog.now())
           AND o.classification OPERATOR(pg_catalog.<=) tier
           AND (prefix IS NULL OR pg_catalog.cardinality(prefix) OPERATOR(pg_catalog.=) 0
                OR memory_internal._item_ns_match(o.namespace[1:pg_catalog.cardinality(prefix)], prefix))
           AND (suffix IS NULL OR pg_catalog.cardinality(suffix) OPERATOR(pg_catalog.=) 0
                OR memory_internal._item_ns_match(o.namespace[pg_catalog.cardinality(o.namespace) OPERATOR(pg_catalog.-) pg_catalog.cardinality(suffix) OPERATOR(pg_catalog.+) 1:], suffix))) d
     ORDER BY d.ns COLLATE "C"
     LIMIT k OFFSET "offset";
    GET DIAGNOSTICS n = ROW_COUNT;
    PERFORM memory_internal._audit_read('memory.recall', pg_catalog.jsonb_build_object('call', 'memory.list_namespaces', 'count', n)::pg_catalog.text, org, NULL);
END $$;
COMMENT ON FUNCTION memory.list_namespaces(text, text[], text[], int, int, int) IS
  'Distinct namespaces of the org''s live items the caller is cleared for, matching prefix and suffix (''*'' matches any one label), cut to max_depth labels, sorted bytewise; k and offset page. Audited as memory.recall (count only).';

-- Items of org (every org: NULL) whose ttl has run out by `at`, not under a legal hold, deleted
-- (their weights with them; the DELETE fires the audit trigger's memory.delete), or only counted
-- (dry_run). Returns how many.
CREATE FUNCTION memory_internal._purge_items(org text, at timestamptz, dry_run boolean DEFAULT false)
RETURNS bigint LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE ids uuid[]; o_org text; n bigint := 0;
BEGIN
    IF org IS NULL THEN
        -- Org by org: a row lock on a distributed table needs the org's equality (Citus).
        FOR o_org IN SELECT DISTINCT o.org_id FROM memory.observations o
                      WHERE o.key IS NOT NULL AND o.ttl IS NOT NULL AND o.expires_at OPERATOR(pg_catalog.<=) at LOOP
            n := n OPERATOR(pg_catalog.+) memory_internal._purge_items(o_org, at, dry_run);
        END LOOP;
        RETURN n;
    END IF;
    IF dry_run THEN
        RETURN (SELECT count(*) FROM memory.observations o
                 WHERE o.org_id OPERATOR(pg_catalog.=) org AND o.key IS NOT NULL AND o.ttl IS NOT NULL
                   AND o.expires_at OPERATOR(pg_catalog.<=) at AND NOT memory_internal._held(o.org_id, o.user_id, o.id));
    END IF;
    -- (Rows another session holds locked are left for the next sweep.) Run as a statement of its
    -- own, planned with the org's value, so Citus routes the lock to the org's shard.
    EXECUTE 'SELECT coalesce(pg_catalog.array_agg(d.id ORDER BY d.id), ''{}'')
               FROM (SELECT o.id FROM memory.observations o
                      WHERE o.org_id OPERATOR(pg_catalog.=) $1 AND o.key IS NOT NULL AND o.ttl IS NOT NULL
                        AND o.expires_at OPERATOR(pg_catalog.<=) $2
                        AND NOT memory_internal._held(o.org_id, o.user_id, o.id)
                        FOR UPDATE OF o SKIP LOCKED) d' INTO ids USING org, at;
    IF pg_catalog.cardinality(ids) OPERATOR(pg_catalog.=) 0 THEN
        RETURN 0;
    END IF;
    DELETE FROM memory.observation_weight_history h WHERE h.org_id OPERATOR(pg_catalog.=) org AND h.observation_id OPERATOR(pg_catalog.=) ANY (ids);
    DELETE FROM memory.observations o WHERE o.org_id OPERATOR(pg_catalog.=) org AND o.id OPERATOR(pg_catalog.=) ANY (ids);
    RETURN pg_catalog.cardinality(ids);
END $$;

CREATE FUNCTION memory.purge_expired(org_id text)
RETURNS bigint LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF memory_internal._blank(purge_expired.org_id) THEN
        RAISE EXCEPTION 'memory.purge_expired needs an org_id' USING ERRCODE = '22023',
            HINT = 'Pass the org whose expired items go (one of memory.my_orgs()).';
    END IF;
    PERFORM memory_internal._require_org(purge_expired.org_id);
    RETURN memory_internal._purge_items(purge_expired.org_id, pg_catalog.now());
END $$;
COMMENT ON FUNCTION memory.purge_expired(text) IS
  'Delete the org''s items whose ttl has run out, except those under a legal hold; each deletion audited (memory.delete). Returns how many. memory.run_retention does the same for every org.';
