-- Embeddings and hybrid recall (docs/design.md#agent-memory-api, issue 36). pgvector is optional: memory_ext neither
-- requires it nor links it. Everything that names its type, operators or index method is dynamic
-- SQL, qualified with the schema pgvector was created in (memory_internal._vector_schema()).

-- The schema of the `vector` extension in this database, or NULL when it is not created.
-- (PL/pgSQL, planned once a session: hybrid recall asks it a few times a call.)
CREATE FUNCTION memory_internal._vector_schema()
RETURNS text LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN (SELECT n.nspname::pg_catalog.text FROM pg_catalog.pg_extension e JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) e.extnamespace
             WHERE e.extname OPERATOR(pg_catalog.=) 'vector');
END $$;

-- The schema of pgvector, or 0A000 with a hint naming it.
CREATE FUNCTION memory_internal._require_vector(what text)
RETURNS text LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE s text := memory_internal._vector_schema();
BEGIN
    IF s IS NULL THEN
        RAISE EXCEPTION '% needs pgvector, which is not installed in this database', what USING ERRCODE = '0A000',
            HINT = 'Install pgvector (your distribution''s package, e.g. postgresql-15-pgvector) and run CREATE EXTENSION vector; memory_ext works without it, by full text only.';
    END IF;
    RETURN s;
END $$;

-- The dimensions of a pgvector column (its typmod), NULL for an unconstrained vector, or 22023
-- when the column is not a pgvector vector (saying so when the database has no pgvector).
CREATE FUNCTION memory_internal._embedding_dims(tbl regclass, col text)
RETURNS int LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s   text := memory_internal._vector_schema();
    typ oid;
    mod int;
BEGIN
    SELECT a.atttypid, a.atttypmod INTO typ, mod FROM pg_catalog.pg_attribute a
     WHERE a.attrelid OPERATOR(pg_catalog.=) tbl AND a.attname OPERATOR(pg_catalog.=) col AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped;
    IF typ IS NULL THEN
        RAISE EXCEPTION 'table % has no column "%" (the embedding column)', tbl, col USING ERRCODE = '22023',
            HINT = 'Pass {"embedding": "<column>"} naming a pgvector vector(n) column in the options of memory.govern.';
    END IF;
    IF s IS NULL THEN
        RAISE EXCEPTION 'column "%" of % is %, not pgvector''s vector (the embedding column): pgvector is not installed in this database',
            col, tbl, typ::regtype USING ERRCODE = '22023',
            HINT = 'Install pgvector and run CREATE EXTENSION vector, then map a vector(n) column; memory_ext works without it, by full text only.';
    END IF;
    IF typ OPERATOR(pg_catalog.<>) pg_catalog.to_regtype(pg_catalog.quote_ident(s) || '.vector') THEN
        RAISE EXCEPTION 'column "%" of % is %, not pgvector''s vector (the embedding column)', col, tbl, typ::regtype USING ERRCODE = '22023',
            HINT = 'The embedding mapping names a column of type vector(n) (CREATE EXTENSION vector).';
    END IF;
    RETURN nullif(mod, -1);
END $$;

-- The platform's embeddings (memory.observations' and memory.claims'): the one row says their
-- dimensions. A configuration table (pg_dump dumps its row): its trigger adds the columns and the
-- indexes, both when memory.enable_embeddings writes the row and when a restore loads it. (A column
-- added to an extension's table is not in a dump, whose COPY of the table names it: the row must
-- be restored first. pg_dump orders the tables' data by name, so this one's sorts before every
-- table with embeddings: "ann", approximate nearest neighbours.)
CREATE TABLE memory.ann_settings (
    singleton  boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    dimensions int NOT NULL CHECK (dimensions BETWEEN 1 AND 2000),
    enabled_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE memory.ann_settings IS 'Set by memory.enable_embeddings: the dimensions of the embedding columns of memory.observations, its archive and memory.claims.';

-- Whether btree_gin is created in this database by a superuser or by memory_ext's owner: the
-- tenant full-text indexes depend on its operator classes, and whoever owns it may drop it with
-- them (DROP EXTENSION btree_gin CASCADE).
CREATE FUNCTION memory_internal._btree_gin_usable()
RETURNS boolean LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM pg_catalog.pg_extension e JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) e.extowner
                    WHERE e.extname OPERATOR(pg_catalog.=) 'btree_gin'
                      AND (r.rolsuper OR e.extowner OPERATOR(pg_catalog.=) (SELECT x.extowner FROM pg_catalog.pg_extension x
                                                                             WHERE x.extname OPERATOR(pg_catalog.=) 'memory_ext')));
END $$;

-- memory.observations' heap pages keep room for one more version of a row with its embedding
-- (fillfactor memory_internal._observations_fillfactor(n): 76 for 384 dimensions, three rows of
-- ~1.7 kB a page instead of four, a third more heap; 94 where pgvector stores the vector out of
-- line), so that an UPDATE changing no indexed column (memory.remember's merge: metadata, tier,
-- last_seen_at, seen_count) is a HOT update on the row's page, not a new version on another page
-- with an entry in every index, the HNSW one a full insertion (issue 49: at a million memories
-- 11.6 ms of a 14.9 ms merge). Set once: a fillfactor the operator set is kept. New pages only:
-- rows written before keep full pages until the table is rewritten (VACUUM FULL, pg_repack).
CREATE FUNCTION memory_internal._observations_room(dims int)
RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_class c, pg_catalog.unnest(c.reloptions) o
                    WHERE c.oid OPERATOR(pg_catalog.=) 'memory.observations'::regclass AND pg_catalog.starts_with(o, 'fillfactor=')) THEN
        EXECUTE pg_catalog.format('ALTER TABLE memory.observations SET (fillfactor = %s)', memory_internal._observations_fillfactor(dims));
    END IF;
END $$;
COMMENT ON FUNCTION memory_internal._observations_room(int) IS
  'Sets memory.observations'' fillfactor for embeddings of the given dimensions (memory_internal._observations_fillfactor: room on each page for one more version of a row, so memory.remember''s merge is a HOT update) unless the table has one. Called by memory.enable_embeddings (its trigger) and the upgrade to 0.4.0; not for PUBLIC.';
COMMENT ON FUNCTION memory_internal._observations_fillfactor(int) IS
  'The fillfactor memory.enable_embeddings gives memory.observations for embeddings of the given dimensions (memory_core::vector::observations_fillfactor): room on each page for one more version of a typical row; NULL outside 1..2000.';

-- Adds embedding vector(n) to memory.observations, memory.observations_archive and memory.claims
-- when missing, and the HNSW indexes (cosine, m = 16, ef_construction = 64) of the observations and
-- of the active claims (what memory.retrieve reads). Idempotent.
CREATE FUNCTION memory_internal._embeddings_apply()
RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s   text;
    t   text;
    n   int;
BEGIN
    IF TG_OP OPERATOR(pg_catalog.=) 'UPDATE' AND NEW.dimensions OPERATOR(pg_catalog.<>) OLD.dimensions THEN
        RAISE EXCEPTION 'embeddings have % dimensions; they cannot change to %', OLD.dimensions, NEW.dimensions
            USING ERRCODE = '55000';
    END IF;
    s := memory_internal._require_vector('memory.enable_embeddings');
    FOREACH t IN ARRAY ARRAY['observations', 'observations_archive', 'claims'] LOOP
        IF memory_internal._has_column(format('memory.%I', t)::regclass, 'embedding') THEN
            n := memory_internal._embedding_dims(format('memory.%I', t)::regclass, 'embedding');
            IF n IS DISTINCT FROM NEW.dimensions THEN
                RAISE EXCEPTION 'memory.%.embedding has % dimensions, not %', t, coalesce(n::text, 'no fixed'), NEW.dimensions USING ERRCODE = '55000';
            END IF;
        ELSE
            EXECUTE format('ALTER TABLE memory.%I ADD COLUMN embedding %I.vector(%s)', t, s, NEW.dimensions);
        END IF;
    END LOOP;
    PERFORM memory_internal._observations_room(NEW.dimensions);
    -- The archive is cold storage, never recalled: its embeddings are kept without an index.
    EXECUTE format('CREATE INDEX IF NOT EXISTS observations_embedding ON memory.observations USING hnsw (embedding %I.vector_cosine_ops) '
                   'WITH (m = 16, ef_construction = 64)', s);
    EXECUTE format('CREATE INDEX IF NOT EXISTS claims_embedding ON memory.claims USING hnsw (embedding %I.vector_cosine_ops) '
                   'WITH (m = 16, ef_construction = 64) WHERE lifecycle_state = ''active''', s);
    -- memory.health: an org's live observations still waiting for an embedding.
    CREATE INDEX IF NOT EXISTS observations_no_embedding ON memory.observations (org_id)
        WHERE embedding IS NULL AND soft_deleted_at IS NULL;
    -- Hybrid recall's full-text list under its tenant (and user) condition: with btree_gin (a
    -- contrib extension) one GIN index holds the org, the user and the words, and its scan
    -- intersects them inside the index, reading no more of a common word's posting list than the
    -- tenant's part. Without it the full-text index hands the whole posting list to a bitmap AND
    -- (docs/vector.md). Made when btree_gin is there; memory.enable_embeddings again makes them
    -- after CREATE EXTENSION btree_gin.
    IF memory_internal._btree_gin_usable() THEN
        CREATE INDEX IF NOT EXISTS observations_fts_tenant ON memory.observations
            USING gin (org_id, user_id, content_tsv);
        CREATE INDEX IF NOT EXISTS claims_fts_tenant ON memory.claims
            USING gin (org_id, to_tsvector('english'::regconfig, claim_text)) WHERE lifecycle_state = 'active';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER ann_settings_apply AFTER INSERT OR UPDATE ON memory.ann_settings
    FOR EACH ROW EXECUTE FUNCTION memory_internal._embeddings_apply();
-- A restore run as replica loads the row too: the column must be there before the observations.
ALTER TABLE memory.ann_settings ENABLE ALWAYS TRIGGER ann_settings_apply;
-- memory.recall keeps the dimensions per backend (src/recall/body.rs): a row written drops them.
CREATE TRIGGER memory_rules_changed AFTER INSERT OR UPDATE OR DELETE ON memory.ann_settings
    FOR EACH ROW EXECUTE FUNCTION memory.rules_changed();
CREATE TRIGGER memory_rules_changed_truncate AFTER TRUNCATE ON memory.ann_settings
    FOR EACH STATEMENT EXECUTE FUNCTION memory.rules_changed();

CREATE FUNCTION memory.enable_embeddings(dimensions int)
RETURNS jsonb LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    have  int;
    gin   boolean;
    event jsonb;   -- the memory.embeddings.enable event's payload, when something changes
BEGIN
    IF dimensions IS NULL OR dimensions < 1 OR dimensions > 2000 THEN
        RAISE EXCEPTION 'dimensions must be between 1 and 2000, got %', coalesce(dimensions::text, 'NULL') USING ERRCODE = '22023',
            HINT = 'The size of your embedding model''s vectors (e.g. 384, 768, 1536); pgvector''s HNSW index takes up to 2000.';
    END IF;
    PERFORM memory_internal._require_vector('memory.enable_embeddings');
    -- Platform-wide (every org's tables take the column, of one size for good): for who may act
    -- for every org, as the platform chain's writers, not for one org's admin.
    IF NOT memory_internal._may_act_for('') THEN
        RAISE EXCEPTION 'memory.enable_embeddings changes every org''s tables; role % may act only for its own orgs',
            memory_internal._caller()::regrole USING ERRCODE = '42501',
            HINT = 'A memory_admin bound to every org (memory.grant_org(role, ''*'')), the extension owner or a superuser enables embeddings.';
    END IF;
    SELECT e.dimensions INTO have FROM memory.ann_settings e;
    IF have IS NOT NULL AND have OPERATOR(pg_catalog.<>) enable_embeddings.dimensions THEN
        RAISE EXCEPTION 'embeddings are enabled with % dimensions, not %', have, enable_embeddings.dimensions
            USING ERRCODE = '55000', HINT = 'The dimensions are fixed once enabled: embed with the same model, or re-embed into a governed table of your own (memory.govern with the embedding key).';
    END IF;
    gin := memory_internal._btree_gin_usable();
    IF NOT gin THEN
        RAISE NOTICE 'hybrid recall''s full-text list is not narrowed by tenant inside an index: btree_gin is not installed (or not by a superuser or memory_ext''s owner)'
            USING HINT = 'CREATE EXTENSION btree_gin (contrib) as a superuser or memory_ext''s owner, then call memory.enable_embeddings again: it adds the indexes observations_fts_tenant and claims_fts_tenant.';
    END IF;
    IF have IS NULL THEN
        INSERT INTO memory.ann_settings (dimensions) VALUES (enable_embeddings.dimensions);
        event := '{}';
    ELSIF gin AND (pg_catalog.to_regclass('memory.observations_fts_tenant') IS NULL OR pg_catalog.to_regclass('memory.claims_fts_tenant') IS NULL) THEN
        -- Enabled: the same dimensions again build the tenant full-text indexes btree_gin allows
        -- since (through the trigger), and do nothing (no lock) when they are there or cannot be.
        UPDATE memory.ann_settings SET dimensions = have;
        event := '{"tenant_text_index": true}';
    END IF;
    IF event IS NOT NULL THEN
        PERFORM memory_internal._audit_append_system('memory.embeddings.enable',
            jsonb_build_object('tables', jsonb_build_array('memory.observations', 'memory.claims'), 'dimensions', enable_embeddings.dimensions) || event, NULL);
    END IF;
    RETURN jsonb_build_object('dimensions', enable_embeddings.dimensions, 'changed', have IS NULL,
                              'tenant_text_index', pg_catalog.to_regclass('memory.observations_fts_tenant') IS NOT NULL);
END $$;
COMMENT ON FUNCTION memory.enable_embeddings(int) IS
  'Give memory.observations (and its archive) and memory.claims an embedding vector(n) column, written with the row (a claim''s is fixed like its text), behind HNSW indexes (cosine, m = 16, ef_construction = 64; the claims'': of the active ones); with btree_gin installed also the tenant full-text indexes hybrid recall reads (observations_fts_tenant: org, user, words; claims_fts_tenant: org, words; tenant_text_index in the result). Needs pgvector (0A000 otherwise); n in 1..2000 (22023); the same n again changes nothing but the indexes btree_gin allows since, another is 55000. Platform-wide, audited as memory.embeddings.enable.';

-- The query embedding checked against the source's column: one-dimensional, of the column's
-- dimensions, finite components (as reals), not all zero (cosine distance has no direction):
-- 22023 otherwise (memory_core::vector). Returns it as pgvector's text form. Polymorphic
-- (anycompatible), so a caller passes what it has and gets the same answer and the same errors:
-- float8[] (psycopg's list of floats), real[], numeric[] or integer[], pgvector's vector (or
-- halfvec), or text; an untyped literal is text, in pgvector's form '[1,2,3]' or an array's
-- '{1,2,3}'. Any other type is 22023. Needs no pgvector: a vector is recognised by its type's
-- name in pgvector's schema and read by its text form.
CREATE FUNCTION memory_internal._query_vector(query_embedding anycompatible, dims int)
RETURNS text LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t regtype := pg_typeof(query_embedding);
    v float8[];
    s text;
BEGIN
    IF t OPERATOR(pg_catalog.=) ANY ('{float8[],real[]}'::regtype[]) THEN
        v := query_embedding::float8[];
        IF array_ndims(v) IS DISTINCT FROM 1 THEN
            RAISE EXCEPTION 'query_embedding must be a one-dimensional array of numbers' USING ERRCODE = '22023',
                HINT = 'Pass float8[] (e.g. a Python list), real[], a pgvector vector, or the text [1,2,3].';
        END IF;
        RETURN memory_internal._query_vector_floats(v, dims);
    END IF;
    IF t OPERATOR(pg_catalog.<>) ALL ('{text,varchar,numeric[],int2[],int4[],int8[]}'::regtype[]) THEN
        s := memory_internal._vector_schema();
        IF s IS NULL OR t OPERATOR(pg_catalog.<>) ALL (ARRAY[pg_catalog.to_regtype(pg_catalog.quote_ident(s) || '.vector'),
                                                            pg_catalog.to_regtype(pg_catalog.quote_ident(s) || '.halfvec')]) THEN
            RAISE EXCEPTION 'query_embedding is %, not an array of numbers or a pgvector vector', t USING ERRCODE = '22023',
                HINT = 'Pass float8[] (e.g. a Python list), real[], a pgvector vector, or the text [1,2,3].';
        END IF;
    END IF;
    RETURN memory_internal._query_vector_parse(query_embedding::text, dims);
END $$;

SELECT pg_catalog.pg_extension_config_dump('memory.ann_settings', '');

-- What waits for an embedding (memory.embedding_backlog): per org the caller may act for, chosen
-- as memory.health chooses them, the live observations and items whose embedding is NULL (a
-- memory stored while the embedder failed or timed out), oldest first. Ids and times only, never
-- content, and only rows within the caller's clearance in their org. SECURITY DEFINER (it reads
-- past row-level security, as memory.health counts); each org is an index scan of observations_no_embedding. No rows while embeddings are
-- not enabled (nothing can wait for one). Not granted to PUBLIC (memory_admin, through the view).
CREATE FUNCTION memory_internal._embedding_backlog_for_caller()
RETURNS TABLE (org_id text, id uuid, namespace text[], key text, classification memory.classification, created_at timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    orgs text[];
    s    text := nullif(pg_catalog.current_setting('memory.org_id', true), '');
BEGIN
    IF s IS NOT NULL THEN
        orgs := ARRAY[memory_internal._require_org(s)];
    ELSIF memory_internal._may_act_for('') THEN
        orgs := NULL;   -- every org
    ELSE
        orgs := ARRAY(SELECT m.o FROM memory.my_orgs() m(o) WHERE m.o OPERATOR(pg_catalog.<>) '*' AND memory_internal._may_act_for(m.o));
    END IF;
    IF NOT memory_internal._has_column('memory.observations', 'embedding') THEN
        RETURN;
    END IF;
    RETURN QUERY EXECUTE $q$
        SELECT x.org_id, x.id, x.namespace, x.key, x.classification, x.created_at
          FROM memory.observations x
         WHERE x.embedding IS NULL AND x.soft_deleted_at IS NULL AND x.superseded_at IS NULL
           AND (x.expires_at IS NULL OR x.expires_at OPERATOR(pg_catalog.>) pg_catalog.now())
           -- within the caller's clearance in the row's org (a label of a row above it is not shown)
           AND x.classification OPERATOR(pg_catalog.<=) memory_internal._clearance(x.org_id)::memory.classification
           AND ($1::pg_catalog.text[] IS NULL OR x.org_id OPERATOR(pg_catalog.=) ANY ($1::pg_catalog.text[]))
         ORDER BY x.org_id, x.created_at, x.id $q$
    USING orgs;
END $$;

CREATE VIEW memory.embedding_backlog AS SELECT * FROM memory_internal._embedding_backlog_for_caller();
COMMENT ON VIEW memory.embedding_backlog IS
  'Live observations and items waiting for an embedding (stored while the embedder failed or timed out), of each org the caller may act for (the org memory.org_id names, when set; a role bound to every org: every org), oldest first: org_id, id, namespace, key, classification, created_at; no content. Empty while embeddings are not enabled. Granted to memory_admin.';
