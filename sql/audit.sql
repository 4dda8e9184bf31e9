-- Hash-chained audit trail (docs/design.md#audit-chain).

-- Keys and the pseudonym salt: readable only by the extension owner; used through SECURITY
-- DEFINER functions with a fixed search_path.
CREATE TABLE memory.audit_keys (
    key_id     int GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    key        bytea NOT NULL CHECK (length(key) >= 32),
    created_at timestamptz NOT NULL DEFAULT now(),
    retired_at timestamptz
);
CREATE TABLE memory.audit_secrets (
    name  text PRIMARY KEY,
    value bytea NOT NULL
);
REVOKE ALL ON memory.audit_keys, memory.audit_secrets FROM PUBLIC;

-- Keys and salt are made on first use rather than in this script, so that pg_dump/restore of
-- the tables above brings back the originals instead of colliding with fresh ones.
CREATE FUNCTION memory_internal._audit_current_key(OUT key_id int, OUT key bytea, OUT salt bytea, OUT made boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    made := false;
    SELECT k.key_id, k.key INTO key_id, key FROM memory.audit_keys k WHERE k.retired_at IS NULL ORDER BY k.key_id DESC LIMIT 1;
    IF NOT FOUND THEN
        made := true;
        INSERT INTO memory.audit_keys (key) VALUES (memory_internal._random_bytes(32)) RETURNING audit_keys.key_id, audit_keys.key INTO key_id, key;
    END IF;
    SELECT s.value INTO salt FROM memory.audit_secrets s WHERE s.name = 'pseudonym_salt';
    IF NOT FOUND THEN
        made := true;
        INSERT INTO memory.audit_secrets VALUES ('pseudonym_salt', memory_internal._random_bytes(32))
        ON CONFLICT (name) DO NOTHING;
        SELECT s.value INTO salt FROM memory.audit_secrets s WHERE s.name = 'pseudonym_salt';
    END IF;
END $$;
REVOKE ALL ON FUNCTION memory_internal._audit_current_key() FROM PUBLIC;
-- Backends cache the current key and the salt (src/audit): every change to either table
-- invalidates the table's relcache entry, and with it those caches, in every backend at commit.
CREATE TRIGGER memory_keys_changed AFTER INSERT OR UPDATE OR DELETE ON memory.audit_keys
    FOR EACH ROW EXECUTE FUNCTION memory.rules_changed();
CREATE TRIGGER memory_keys_changed_truncate AFTER TRUNCATE ON memory.audit_keys
    FOR EACH STATEMENT EXECUTE FUNCTION memory.rules_changed();
CREATE TRIGGER memory_secrets_changed AFTER INSERT OR UPDATE OR DELETE ON memory.audit_secrets
    FOR EACH ROW EXECUTE FUNCTION memory.rules_changed();
CREATE TRIGGER memory_secrets_changed_truncate AFTER TRUNCATE ON memory.audit_secrets
    FOR EACH STATEMENT EXECUTE FUNCTION memory.rules_changed();

-- The log: one chain per tenant, monthly range partitions on recorded_at, append-only.
CREATE TABLE memory.audit_log (
    chain_id     text NOT NULL,
    seq          bigint NOT NULL,
    event_type   text NOT NULL,
    recorded_at  timestamptz NOT NULL,
    actor_id     text,
    org_id       text,
    project_id   text,
    workspace_id text,
    payload      jsonb NOT NULL,
    key_id       int NOT NULL,
    prev_hash    bytea NOT NULL,
    entry_hash   bytea NOT NULL
) PARTITION BY RANGE (recorded_at);
-- Dump and restore in any month: CREATE EXTENSION makes only the default partition (a member
-- of the extension, its rows kept by pg_dump through pg_extension_config_dump). The monthly
-- partitions are made later by memory.audit_ensure_partitions (maintenance), as ordinary tables
-- with their own indexes, so pg_dump writes them, their indexes and their rows, and a restore into
-- a database created in any month finds nothing of its own in the way. (An index on the parent
-- would be a member whose per-partition children a restore would create twice.)
CREATE TABLE memory.audit_log_default PARTITION OF memory.audit_log DEFAULT;
-- Bytewise order for the chain column of the index: lookups are by equality, and a linguistic
-- collation would make every insert's descent pay for strcoll(). Internal queries say
-- `chain_id = $1 COLLATE "C"` to use it; the column itself keeps the default collation.
CREATE INDEX audit_log_default_chain_seq ON memory.audit_log_default (chain_id COLLATE "C", seq);
CREATE INDEX audit_log_default_workspace ON memory.audit_log_default (workspace_id, recorded_at) WHERE workspace_id IS NOT NULL;
COMMENT ON TABLE memory.audit_log IS
  'Tamper-evident log: entry_hash = HMAC-SHA256(key[key_id], JCS(event)); see docs/audit.md for the exact format.';

-- One head per chain, locked for the transaction by every append: appends to a chain are
-- serialized, different chains never wait on each other.
CREATE TABLE memory.audit_heads (
    chain_id         text PRIMARY KEY,
    seq              bigint NOT NULL DEFAULT 0,
    entry_hash       bytea NOT NULL DEFAULT '\x0000000000000000000000000000000000000000000000000000000000000000',
    merkle_frontier  bytea NOT NULL DEFAULT '\x',
    last_recorded_at timestamptz NOT NULL DEFAULT '-infinity',
    updated_at       timestamptz NOT NULL DEFAULT now()
);
REVOKE ALL ON memory.audit_log, memory.audit_heads FROM PUBLIC;

-- Pending entries (docs/design.md#integration; memory.audit_mode = deferred, the default): a writing
-- transaction records its events here, each with its own HMAC (pending_hash: the entry hash of
-- the event with seq = -id and a zero prev_hash), and takes no chain lock. The sequencer chains
-- committed ones into memory.audit_log and deletes them, in one transaction. No index: the table
-- is kept near empty, and the sequencer reads it whole, in (chain, writer order).
CREATE TABLE memory.audit_pending (
    id           bigint NOT NULL,
    ord          bigint NOT NULL,
    chain_id     text NOT NULL,
    event_type   text NOT NULL,
    written_at   timestamptz NOT NULL,
    actor_id     text,
    org_id       text,
    project_id   text,
    workspace_id text,
    payload      jsonb NOT NULL,
    key_id       int NOT NULL,
    pending_hash bytea NOT NULL
) WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 20000,
        autovacuum_vacuum_insert_scale_factor = 0, autovacuum_vacuum_insert_threshold = 20000);
REVOKE ALL ON memory.audit_pending FROM PUBLIC;
COMMENT ON TABLE memory.audit_pending IS
  'Audit events written in deferred mode, not yet chained: pending_hash = HMAC-SHA256(key[key_id], JCS(event with seq = -id, prev_hash = 32 zero bytes, recorded_at = written_at)). The sequencer chains and deletes them.';

-- On Citus (docs/design.md#scale-out), where a node puts audit events whose chain's shards are on another node
-- (events appended on the coordinator): written like pending entries, then moved into the
-- distributed memory.audit_pending by the same transaction. Always empty between transactions.
CREATE TABLE memory.audit_outbox (LIKE memory.audit_pending);
REVOKE ALL ON memory.audit_outbox FROM PUBLIC;
COMMENT ON TABLE memory.audit_outbox IS
  'Citus only: pending audit entries of chains placed on another node, moved into memory.audit_pending by the transaction that wrote them. Empty between transactions.';

-- Only the sequencer deletes pending entries; nobody updates or truncates them.
CREATE FUNCTION memory_internal._audit_pending_guard()
RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF TG_OP = 'DELETE' AND memory_internal._audit_integrating() THEN
        RETURN NULL;
    END IF;
    RAISE EXCEPTION 'memory.audit_pending is append-only: % is not allowed', TG_OP
        USING ERRCODE = 'MX002', HINT = 'Pending entries are chained and removed by the sequencer (memory.audit_integrate).';
END $$;
CREATE TRIGGER memory_pending_guard BEFORE UPDATE OR DELETE OR TRUNCATE ON memory.audit_pending
    FOR EACH STATEMENT EXECUTE FUNCTION memory_internal._audit_pending_guard();

CREATE TABLE memory.audit_seals (
    chain_id        text NOT NULL,
    partition_name  text NOT NULL,
    range_start     timestamptz NOT NULL,
    range_end       timestamptz NOT NULL,
    first_seq       bigint NOT NULL,
    last_seq        bigint NOT NULL,
    entries         bigint NOT NULL,
    last_entry_hash bytea NOT NULL,
    merkle_root     bytea NOT NULL,
    sealed_at       timestamptz NOT NULL DEFAULT now(),
    dropped_at      timestamptz,
    PRIMARY KEY (partition_name, chain_id)
);
REVOKE ALL ON memory.audit_seals FROM PUBLIC;
COMMENT ON TABLE memory.audit_seals IS
  'RFC 9162 Merkle root of each chain''s entries in a sealed month partition; verification resumes from a seal once the partition is dropped.';

-- Append-only: no UPDATE, DELETE or TRUNCATE, whoever asks.
CREATE FUNCTION memory_internal._audit_append_only()
RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- memory.audit_ensure_partitions moves rows, unchanged, out of the default partition into the
    -- month partition it creates for them (backend memory opened by it alone).
    IF TG_OP = 'DELETE' AND TG_TABLE_NAME = 'audit_log_default' AND memory_internal._audit_move_gate_open() THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'memory.audit_log is append-only: % is not allowed', TG_OP
        USING ERRCODE = 'MX002', HINT = 'Entries are only added with memory.audit_append; old partitions are removed with memory.audit_seal and memory.audit_prune.';
END $$;
CREATE TRIGGER memory_append_only BEFORE UPDATE OR DELETE ON memory.audit_log
    FOR EACH ROW EXECUTE FUNCTION memory_internal._audit_append_only();
CREATE TRIGGER memory_append_only_truncate BEFORE TRUNCATE ON memory.audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION memory_internal._audit_append_only();
-- Statement triggers are not inherited by partitions: each partition gets its own.
CREATE TRIGGER memory_append_only_truncate BEFORE TRUNCATE ON memory.audit_log_default
    FOR EACH STATEMENT EXECUTE FUNCTION memory_internal._audit_append_only();

CREATE FUNCTION memory.audit_ensure_partitions(months_ahead int DEFAULT 3, at timestamptz DEFAULT now())
RETURNS int LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
    -- (Restored on return: on Citus the move below forwards its SET LOCALs to the workers.)
    SET citus.propagate_set_commands = 'none'
AS $$
DECLARE
    m     timestamptz;
    name  text;
    made  int := 0;
    moved bigint;
    dist  constant boolean := memory_internal._citus_distributed('memory.audit_log');
    role_was text;
BEGIN
    IF months_ahead IS NULL OR months_ahead < 0 OR months_ahead > 120 THEN
        RAISE EXCEPTION 'months_ahead must be between 0 and 120, got %', months_ahead USING ERRCODE = '22023';
    END IF;
    IF at IS NULL OR NOT isfinite(at) THEN
        RAISE EXCEPTION 'at must be a finite time, got %', at USING ERRCODE = '22023';
    END IF;
    FOR i IN 0 .. months_ahead LOOP
        m := date_trunc('month', at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' + make_interval(months => i);
        name := 'audit_log_' || to_char(m AT TIME ZONE 'UTC', 'YYYY"m"MM');
        CONTINUE WHEN to_regclass('memory.' || name) IS NOT NULL;
        CONTINUE WHEN EXISTS (SELECT 1 FROM memory.audit_seals s WHERE s.partition_name = name);
        -- Rows of this month in the default partition (appended before the month had one) move,
        -- unchanged, into the new partition: the parent is locked for the move, and the default
        -- partition's append-only trigger lets this one DELETE through.
        LOCK TABLE memory.audit_log IN ACCESS EXCLUSIVE MODE;
        CREATE TEMP TABLE memory_audit_move (LIKE memory.audit_log) ON COMMIT DROP;
        PERFORM memory_internal._audit_move_gate(true);
        -- On Citus the DELETE runs on the workers' shards, whose guard cannot see this backend's
        -- gate: their ordinary triggers are off for it instead (SET LOCAL, sent to the workers'
        -- connections of this transaction), and as they were right after.
        IF dist THEN
            role_was := pg_catalog.current_setting('session_replication_role');
            SET LOCAL citus.propagate_set_commands = 'local';
            SET LOCAL session_replication_role = 'replica';
        END IF;
        WITH gone AS (
            DELETE FROM memory.audit_log_default d WHERE d.recorded_at >= m AND d.recorded_at < m + interval '1 month' RETURNING d.*
        )
        INSERT INTO pg_temp.memory_audit_move SELECT * FROM gone;
        GET DIAGNOSTICS moved = ROW_COUNT;
        IF dist THEN
            EXECUTE pg_catalog.format('SET LOCAL session_replication_role = %L', role_was);
        END IF;
        PERFORM memory_internal._audit_move_gate(false);
        EXECUTE format('CREATE TABLE memory.%I PARTITION OF memory.audit_log FOR VALUES FROM (%L) TO (%L)',
                       name, m, m + interval '1 month');
        EXECUTE format('CREATE INDEX %I ON memory.%I (chain_id COLLATE "C", seq)', name || '_chain_seq', name);
        EXECUTE format('CREATE INDEX %I ON memory.%I (workspace_id, recorded_at) WHERE workspace_id IS NOT NULL',
                       name || '_workspace', name);
        EXECUTE format('CREATE TRIGGER memory_append_only_truncate BEFORE TRUNCATE ON memory.%I '
                       'FOR EACH STATEMENT EXECUTE FUNCTION memory_internal._audit_append_only()', name);
        EXECUTE format('REVOKE ALL ON memory.%I FROM PUBLIC', name);
        IF moved > 0 THEN
            INSERT INTO memory.audit_log SELECT * FROM pg_temp.memory_audit_move;
        END IF;
        DROP TABLE pg_temp.memory_audit_move;
        made := made + 1;
    END LOOP;
    RETURN made;
END $$;
COMMENT ON FUNCTION memory.audit_ensure_partitions(int, timestamptz) IS
  'Create the monthly audit partitions from the month of `at` to months_ahead months later (UTC), moving rows of those months out of the default partition. Returns how many were created. Run by memory.run_maintenance; CREATE EXTENSION makes none, so that a dump restores into a database created in any month.';
SELECT pg_catalog.pg_extension_config_dump('memory.audit_log_default', '');

-- The trigger of governed tables runs with the writer's rights (SECURITY INVOKER): it reads only
-- columns of built-in types and switches to the extension owner inside Rust for the append alone
-- (src/trust.rs, which pins search_path for the statements it sends), after checking that the
-- writer may act for each row's org. It has no SET clause: that would cost a GUC save and restore
-- on every governed statement (finalize.sql lists it with the other Rust triggers).

-- Public contract ---------------------------------------------------------------------------------

CREATE FUNCTION memory.audit_append(event_type text, payload jsonb, org_id text DEFAULT NULL,
                                    project_id text DEFAULT NULL, workspace_id text DEFAULT NULL,
                                    actor_id text DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- No invisible characters in event names (a zero-width space could make a look-alike of a
    -- reserved name), and the extension's own names, compared after Unicode compatibility folding
    -- (full-width letters) and lower-casing, are written by the extension alone.
    IF event_type OPERATOR(pg_catalog.~) '[\u00AD\u034F\u061C\u115F\u1160\u17B4\u17B5\u180B-\u180F\u200B-\u200F\u202A-\u202E\u2060-\u206F\u3164\uFE00-\uFE0F\uFEFF\uFFA0[:cntrl:]]' THEN
        RAISE EXCEPTION 'event type contains invisible or control characters' USING ERRCODE = '22023';
    END IF;
    -- (Folded first, then trimmed: a compatibility space such as U+3000 folds to a space.)
    IF (pg_catalog.lower(pg_catalog.btrim(pg_catalog.normalize(event_type, 'NFKC'))) LIKE 'memory.%'
        OR pg_catalog.lower(pg_catalog.btrim(pg_catalog.normalize(event_type, 'NFKC'))) LIKE 'research.%')
       AND NOT memory_internal._is_unrestricted() THEN
        RAISE EXCEPTION 'event type "%" is reserved for memory_ext', event_type
            USING ERRCODE = '42501', HINT = 'Name application events with a prefix of your own, e.g. app.checkout.';
    END IF;
    -- The org check is the appender's: only chains of orgs the calling role may act for.
    RETURN memory_internal._audit_append(event_type, payload::pg_catalog.text, org_id, project_id, workspace_id, actor_id);
END $$;
COMMENT ON FUNCTION memory.audit_append(text, jsonb, text, text, text, text) IS
  'Append one event to the chain of org_id ('''' when NULL); returns its seq in immediate mode, NULL in deferred mode (the seq is assigned at integration). Only for orgs the calling role may act for (42501); memory.* and research.* event types are the extension''s own. actor_id is pseudonymised. Granted to memory_writer.';

-- memory_ext's own records (governance DDL, org grants), whoever triggered them: the payload goes
-- to Rust as text (any jsonb is then a clean 22023 or an event). Not granted to PUBLIC.
CREATE FUNCTION memory_internal._audit_append_system(event_type text, payload jsonb, org_id text)
RETURNS bigint LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$ SELECT memory_internal._audit_append_system_text(event_type, payload::pg_catalog.text, org_id) $$;
-- Many events in one call (memory_ext's PL/pgSQL functions and knowledge triggers); as text too.
CREATE FUNCTION memory_internal._audit_append_many(events jsonb)
RETURNS int LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$ SELECT memory_internal._audit_append_events(events::pg_catalog.text) $$;
REVOKE ALL ON FUNCTION memory_internal._audit_append_system(text, jsonb, text), memory_internal._audit_append_system_text(text, text, text),
                       memory_internal._audit_append_many(jsonb), memory_internal._audit_append_events(text) FROM PUBLIC;

-- The internal door for memory_ext's own SQL functions (not granted to PUBLIC): like
-- audit_append without the reserved-name check; the appender still checks the org.
CREATE FUNCTION memory_internal._audit(event_type text, payload jsonb, org_id text DEFAULT NULL,
                              project_id text DEFAULT NULL, workspace_id text DEFAULT NULL)
RETURNS bigint LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$ SELECT memory_internal._audit_append(event_type, payload::pg_catalog.text, org_id, project_id, workspace_id, NULL) $$;

-- memory-mcp's record of one tool call (issue 39): the tool, the client's name and how many rows
-- it returned, never content or the query, on the chain of the org the caller acts for. memory.*
-- event types are memory_ext's own (audit_append refuses them to tenants), so this narrow door
-- writes that one event type and nothing else, and only for a role that may perform the tool
-- itself (remember: INSERT on memory.observations; the others: EXECUTE on the memory function of
-- that name), so a reader records no forget. Granted to memory_reader by memory.setup_roles().
-- (Issue 51: memory-mcp no longer calls it for remember, whose call its own memory.store records
-- through memory.mcp_call; it accepts remember still, for a memory-mcp of 0.3.0.)
CREATE FUNCTION memory_internal._mcp_tool_invoked(tool text, client text, count int)
RETURNS void LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    org text := memory_internal._acting_org();   -- 42501 for a memory.org_id the role lacks
    who oid := memory_internal._caller();
BEGIN
    IF tool IS NULL OR NOT tool OPERATOR(pg_catalog.=) ANY (ARRAY['remember', 'recall', 'forget', 'retrieve', 'claim_chain',
                                                                      'search', 'get', 'put', 'delete', 'record_outcome', 'context',
                                                                      'history', 'supersede', 'lineage']) THEN
        RAISE EXCEPTION 'unknown memory-mcp tool "%"', coalesce(tool, 'NULL') USING ERRCODE = '22023',
            HINT = 'Tools: remember, recall, forget, retrieve, claim_chain, search, get, put, delete, record_outcome, context, history, supersede, lineage.';
    END IF;
    IF client IS NULL OR pg_catalog.length(client) OPERATOR(pg_catalog.<) 1 OR pg_catalog.length(client) OPERATOR(pg_catalog.>) 200
       OR client OPERATOR(pg_catalog.~) '[[:cntrl:]]' THEN
        RAISE EXCEPTION 'client must be a name of 1 to 200 characters without control characters' USING ERRCODE = '22023';
    END IF;
    IF count IS NULL OR count OPERATOR(pg_catalog.<) 0 THEN
        RAISE EXCEPTION 'count must be 0 or more, got %', coalesce(count::text, 'NULL') USING ERRCODE = '22023';
    END IF;
    IF org IS NULL THEN
        RAISE EXCEPTION 'role % acts for no org', coalesce(memory_internal._caller()::regrole::text, '(none)') USING ERRCODE = '42501',
            HINT = 'SET memory.org_id to one of memory.my_orgs() (see memory.grant_org).';
    END IF;
    IF who IS NULL OR NOT (CASE WHEN tool OPERATOR(pg_catalog.=) 'remember'
                                THEN pg_catalog.has_table_privilege(who, 'memory.observations'::regclass, 'INSERT')
                                ELSE EXISTS (SELECT 1 FROM pg_catalog.pg_proc p
                                              WHERE p.pronamespace OPERATOR(pg_catalog.=) 'memory'::regnamespace
                                                AND p.proname OPERATOR(pg_catalog.=) tool
                                                AND pg_catalog.has_function_privilege(who, p.oid, 'EXECUTE')) END) THEN
        RAISE EXCEPTION 'role % may not record a % call: it may not perform it', coalesce(who::regrole::text, '(none)'), tool
            USING ERRCODE = '42501',
            HINT = CASE WHEN tool OPERATOR(pg_catalog.=) ANY (ARRAY['remember', 'forget', 'put', 'delete', 'supersede', 'record_outcome']) THEN 'The write tools are memory_writer''s (memory.setup_roles()); run memory-mcp --read-only as a reader.'
                        ELSE 'The read tools are memory_reader''s (memory.setup_roles()).' END;
    END IF;
    PERFORM memory_internal._audit('memory.mcp.tool_invoked',
        pg_catalog.jsonb_build_object('tool', tool, 'client', client, 'count', count), org);
END $$;
COMMENT ON FUNCTION memory_internal._mcp_tool_invoked(text, text, int) IS
  'memory-mcp: append memory.mcp.tool_invoked (tool, client, count; never content) to the acting org''s chain, for a role that may perform the tool (42501 otherwise); memory-mcp records every tool this way but remember (whose memory.store carries the call, memory.mcp_call). Granted to memory_reader.';

CREATE FUNCTION memory.audit_integrate()
RETURNS bigint LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$ SELECT memory_internal._audit_integrate(true) $$;
COMMENT ON FUNCTION memory.audit_integrate() IS
  'Chain every committed pending audit entry (and the calling transaction''s own) now; returns how many. Waits for another integrator. Needs a read-write READ COMMITTED transaction on a primary (25006 otherwise). Owner-only.';

CREATE FUNCTION memory_internal._audit_verify_for_caller(p_chain text)
RETURNS TABLE (chain_id text, entries bigint, ok boolean, first_bad_seq bigint, reason text, pruned bigint, pending bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
-- A chain is read in seq order through its index: a chain is appended in seq order, so the
-- heap is visited page after page, and the backend is free to copy rows out while a helper
-- thread hashes them. (A sort of a million entries would cost the backend more than hashing.)
SET enable_sort = off
AS $$
DECLARE c text;
BEGIN
    -- Chain what is pending first (where this transaction can: not read-only, READ COMMITTED,
    -- on a primary); what stays pending is checked by its own HMAC and counted.
    PERFORM memory_internal._audit_integrate(false);
    IF p_chain IS NOT NULL THEN
        PERFORM memory_internal._require_org(p_chain);
        RETURN QUERY SELECT v.* FROM memory_internal._audit_verify(p_chain) v;
    ELSIF memory_internal._may_act_for('') THEN
        -- Every chain: unrestricted roles and '*' roles.
        RETURN QUERY SELECT v.* FROM memory_internal._audit_verify(NULL) v;
    ELSE
        FOR c IN SELECT h.chain_id FROM memory.audit_heads h
                  WHERE h.chain_id OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT memory.my_orgs()))
                 UNION
                 SELECT DISTINCT p.chain_id FROM memory.audit_pending p
                  WHERE p.chain_id OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT memory.my_orgs())) ORDER BY 1 LOOP
            RETURN QUERY SELECT v.* FROM memory_internal._audit_verify(c) v;
        END LOOP;
    END IF;
END $$;

CREATE FUNCTION memory.audit_verify(chain_id text DEFAULT NULL)
RETURNS TABLE (chain_id text, entries bigint, ok boolean, first_bad_seq bigint, reason text, pruned bigint, pending bigint)
LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp
AS $$ SELECT * FROM memory_internal._audit_verify_for_caller(chain_id) $$;
COMMENT ON FUNCTION memory.audit_verify(text) IS
  'Recompute every link of one chain (or all): first bad seq and why (hash mismatch, broken link, gap, reorder, tail missing, unknown key). Sealed-and-dropped ranges count as pruned. Pending entries are integrated first where the transaction can write; those left are checked by their own HMAC and counted in `pending`.';

-- The head is read by PL/pgSQL: on Citus a SQL function's parameters cannot be planned into a
-- distributed query, a PL/pgSQL variable can.
CREATE FUNCTION memory_internal._audit_head_for(p_chain text)
RETURNS TABLE (chain_id text, seq bigint, entry_hash bytea, merkle_root bytea)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE c text := memory_internal._require_org(p_chain);
BEGIN
    PERFORM memory_internal._audit_integrate(false);
    RETURN QUERY SELECT h.chain_id, h.seq, h.entry_hash, memory_internal._merkle_frontier_root(h.merkle_frontier)
                   FROM memory.audit_heads h WHERE h.chain_id OPERATOR(pg_catalog.=) c;
END $$;

CREATE FUNCTION memory.audit_head(chain_id text)
RETURNS TABLE (chain_id text, seq bigint, entry_hash bytea, merkle_root bytea)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$ SELECT * FROM memory_internal._audit_head_for(audit_head.chain_id) $$;
COMMENT ON FUNCTION memory.audit_head(text) IS
  'The chain''s head and the RFC 9162 Merkle root of all its entry hashes: an anchor to keep outside the database.';

-- A tenant admin reads its own trail: the chains of the orgs the caller may act for (one of them
-- with org_id; another org's is 42501), filtered by workspace, event type, the application's actor
-- id (given in clear, pseudonymised here with the salt, which never leaves the function) and time.
-- It integrates nothing: an integration would take every org's chains and hold the integration
-- lock until the caller's transaction ends, keeping other orgs' entries waiting. Entries not yet
-- chained are returned too, from memory.audit_pending, with seq, prev_hash and entry_hash NULL
-- (recorded_at: when they were written); one statement reads both, so an entry integrated
-- meanwhile is seen once.
CREATE FUNCTION memory.audit_events(workspace_id text DEFAULT NULL, event_type text DEFAULT NULL, lim int DEFAULT 50, off int DEFAULT 0,
                                    org_id text DEFAULT NULL, actor text DEFAULT NULL, since timestamptz DEFAULT NULL)
RETURNS SETOF memory.audit_log LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    chains text[];
    who    text;
    cond   text := '';
BEGIN
    IF lim IS NULL OR lim < 0 OR lim > 10000 OR off IS NULL OR off < 0 THEN
        RAISE EXCEPTION 'lim must be in [0, 10000] and off >= 0 (got %, %)', lim, off USING ERRCODE = '22023';
    END IF;
    -- Only chains the calling role may act for: the org asked for, or all of them.
    IF audit_events.org_id IS NOT NULL THEN
        PERFORM memory_internal._require_org(audit_events.org_id);
        chains := ARRAY[audit_events.org_id];
    ELSIF NOT memory_internal._may_act_for('') THEN
        chains := ARRAY(SELECT memory.my_orgs());
    END IF;
    IF actor IS NOT NULL THEN
        -- No salt yet: no actor has been pseudonymised, so no event names one (and a read-only
        -- transaction could not make it).
        IF NOT EXISTS (SELECT 1 FROM memory.audit_secrets s WHERE s.name OPERATOR(pg_catalog.=) 'pseudonym_salt') THEN
            RETURN;
        END IF;
        who := memory_internal._pseudonym(actor);
    END IF;
    -- Only the filters asked for, so each query is planned with its own predicates.
    IF chains IS NOT NULL THEN
        cond := cond || ' AND (e.chain_id COLLATE "C") OPERATOR(pg_catalog.=) ANY ($1)';
    END IF;
    IF audit_events.workspace_id IS NOT NULL THEN
        cond := cond || ' AND e.workspace_id OPERATOR(pg_catalog.=) $2';
    END IF;
    IF audit_events.event_type IS NOT NULL THEN
        cond := cond || ' AND e.event_type OPERATOR(pg_catalog.=) $3';
    END IF;
    -- actor_id is `<pseudonym>;role:<role>` when the application named an actor.
    IF who IS NOT NULL THEN
        cond := cond || ' AND pg_catalog.split_part(e.actor_id, '';'', 1) OPERATOR(pg_catalog.=) $4';
    END IF;
    RETURN QUERY EXECUTE pg_catalog.format(
        'SELECT * FROM (SELECT e.* FROM memory.audit_log e WHERE true%1$s%2$s
                        UNION ALL
                        SELECT e.chain_id, NULL::bigint, e.event_type, e.written_at, e.actor_id, e.org_id, e.project_id,
                               e.workspace_id, e.payload, e.key_id, NULL::bytea, NULL::bytea
                          FROM memory.audit_pending e WHERE true%1$s%3$s) x
          ORDER BY x.recorded_at DESC, x.seq DESC NULLS FIRST
          LIMIT $6 OFFSET $7',
        cond,
        CASE WHEN since IS NULL THEN '' ELSE ' AND e.recorded_at OPERATOR(pg_catalog.>=) $5' END,
        CASE WHEN since IS NULL THEN '' ELSE ' AND e.written_at OPERATOR(pg_catalog.>=) $5' END)
    USING chains, audit_events.workspace_id, audit_events.event_type, who, since, lim, off;
END $$;
COMMENT ON FUNCTION memory.audit_events(text, text, int, int, text, text, timestamptz) IS
  'Events of the chains the caller may act for (org_id: one of them, another org''s is 42501), newest first, filtered by workspace, event type, actor (the application''s actor id in clear) and time (since). Integrates nothing: entries still pending come with seq, prev_hash and entry_hash NULL.';

-- The backlog for a DBA's dashboard (memory.audit_backlog). An unrestricted or '*' role sees the
-- database's counts; a tenant-bound admin the counts of its own orgs' chains only (how much other
-- orgs write is theirs to know), beside what is no tenant's: the integrators running.
CREATE FUNCTION memory_internal._audit_backlog_for_caller()
RETURNS TABLE (database text, chains text, pending bigint, parked bigint, oldest_pending_at timestamptz,
               oldest_pending_age interval, integrators_running int, last_integration_at timestamptz)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    mine text[];
BEGIN
    IF NOT memory_internal._may_act_for('') THEN
        mine := ARRAY(SELECT memory.my_orgs());
    END IF;
    RETURN QUERY
    WITH b AS (
        SELECT coalesce(pg_catalog.sum(c.pending), 0)::bigint AS pending, coalesce(pg_catalog.sum(c.parked), 0)::bigint AS parked,
               pg_catalog.min('epoch'::timestamptz OPERATOR(pg_catalog.+) (c.oldest_pending_micros OPERATOR(pg_catalog.*) interval '1 microsecond')) AS oldest
          FROM memory_internal._audit_backlog_chains(mine) c)
    SELECT pg_catalog.current_database()::text,
           CASE WHEN mine IS NULL THEN 'all' ELSE 'own' END,
           b.pending, b.parked, b.oldest,
           CASE WHEN b.oldest IS NOT NULL THEN GREATEST(pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) b.oldest, interval '0') END,
           -- Each background integrator holds the lock of its share for its life (src/pg/locks.rs:
           -- advisory, classid "memx", objid 1 + share, objsubid "mx"): pg_locks shows it to any
           -- role, where pg_stat_activity hides other roles' backend_type from an owner that is no
           -- superuser. (memory_ext integrator k/n in pg_stat_activity.application_name.)
           (SELECT pg_catalog.count(DISTINCT l.pid)::int FROM pg_catalog.pg_locks l
             WHERE l.locktype OPERATOR(pg_catalog.=) 'advisory'
               AND l.database OPERATOR(pg_catalog.=) (SELECT d.oid FROM pg_catalog.pg_database d
                                                       WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())
               AND l.classid OPERATOR(pg_catalog.=) 1835363704::pg_catalog.oid AND l.objsubid OPERATOR(pg_catalog.=) 28024
               AND l.objid OPERATOR(pg_catalog.<>) 0::pg_catalog.oid),
           (SELECT pg_catalog.max(h.updated_at) FROM memory.audit_heads h
             WHERE mine IS NULL OR h.chain_id OPERATOR(pg_catalog.=) ANY (mine))
      FROM b;
END $$;

CREATE VIEW memory.audit_backlog AS SELECT * FROM memory_internal._audit_backlog_for_caller();
COMMENT ON VIEW memory.audit_backlog IS
  'The audit backlog of this database: entries pending integration, entries parked (integration will never chain them; audit_verify names their chains), when the oldest pending entry was written and its age, the background integrators running, and when a chain head last moved. A role bound to orgs sees the counts of its own orgs'' chains (chains = own).';

CREATE FUNCTION memory.audit_rotate_key()
RETURNS int LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE k int;
BEGIN
    UPDATE memory.audit_keys SET retired_at = now() WHERE retired_at IS NULL;
    INSERT INTO memory.audit_keys (key) VALUES (memory_internal._random_bytes(32)) RETURNING key_id INTO k;
    RETURN k;
END $$;
COMMENT ON FUNCTION memory.audit_rotate_key() IS 'Start a new key_id for new entries; old keys stay for verification.';

-- Seal every month partition that ends at or before `before`: per chain, the RFC 9162 root of
-- its entry hashes and the last link, so the partition can then be dropped.
CREATE FUNCTION memory.audit_seal(before timestamptz)
RETURNS TABLE (partition_name text, chain_id text, first_seq bigint, last_seq bigint, entries bigint, merkle_root bytea)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p record;
    c record;
BEGIN
    IF before IS NULL THEN
        RAISE EXCEPTION 'memory.audit_seal needs a time' USING ERRCODE = '22023';
    END IF;
    -- Only finished months: a partition that can still receive entries, once sealed, would have
    -- those entries dropped by audit_prune (a permanent gap), and its month could not be made again.
    IF before > date_trunc('month', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' THEN
        RAISE EXCEPTION 'memory.audit_seal seals finished months only: % is after the start of the current month', before
            USING ERRCODE = '22023',
                  HINT = 'Pass a time at or before ' || (date_trunc('month', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC')::text
                          || '; the current month can be sealed once it has ended.';
    END IF;
    -- Pending entries get their place (in this month) before months are sealed.
    PERFORM memory_internal._audit_integrate(false);
    FOR p IN
        SELECT child.relname AS name,
               (regexp_match(pg_get_expr(child.relpartbound, child.oid), 'FROM [(]''([^'']+)''[)] TO [(]''([^'']+)''[)]'))[1]::timestamptz AS lo,
               (regexp_match(pg_get_expr(child.relpartbound, child.oid), 'FROM [(]''([^'']+)''[)] TO [(]''([^'']+)''[)]'))[2]::timestamptz AS hi
          FROM pg_inherits i JOIN pg_class child ON child.oid = i.inhrelid
         WHERE i.inhparent = 'memory.audit_log'::regclass
           AND pg_get_expr(child.relpartbound, child.oid) <> 'DEFAULT'
         ORDER BY 2
    LOOP
        CONTINUE WHEN p.hi > before;
        CONTINUE WHEN EXISTS (SELECT 1 FROM memory.audit_seals s WHERE s.partition_name = p.name);
        FOR c IN EXECUTE format(
            'SELECT chain_id, min(seq) AS lo, max(seq) AS hi, count(*) AS n,
                    (array_agg(entry_hash ORDER BY seq DESC))[1] AS last_hash,
                    memory_internal._merkle_root(array_agg(entry_hash ORDER BY seq)) AS root
               FROM memory.%I GROUP BY chain_id', p.name)
        LOOP
            IF c.hi - c.lo + 1 <> c.n THEN
                RAISE EXCEPTION 'chain "%" is not contiguous in partition % (seq % to %, % entries)', c.chain_id, p.name, c.lo, c.hi, c.n
                    USING ERRCODE = 'MX002', HINT = 'Run memory.audit_verify first; a gap means entries were removed.';
            END IF;
            INSERT INTO memory.audit_seals (chain_id, partition_name, range_start, range_end, first_seq, last_seq, entries, last_entry_hash, merkle_root)
            VALUES (c.chain_id, p.name, p.lo, p.hi, c.lo, c.hi, c.n, c.last_hash, c.root);
            partition_name := p.name; chain_id := c.chain_id; first_seq := c.lo; last_seq := c.hi;
            entries := c.n; merkle_root := c.root;
            RETURN NEXT;
        END LOOP;
        -- An empty partition is sealed too, so that it may be dropped.
        IF NOT EXISTS (SELECT 1 FROM memory.audit_seals s WHERE s.partition_name = p.name) THEN
            INSERT INTO memory.audit_seals (chain_id, partition_name, range_start, range_end, first_seq, last_seq, entries, last_entry_hash, merkle_root)
            VALUES ('', p.name, p.lo, p.hi, 0, -1, 0, pg_catalog.decode('', 'hex'), memory_internal._merkle_root('{}'));
        END IF;
    END LOOP;
END $$;
COMMENT ON FUNCTION memory.audit_seal(timestamptz) IS
  'Seal every monthly audit partition that ends at or before `before` (at most the start of the current month, else 22023): per chain, first/last seq, last hash and RFC 9162 Merkle root.';

CREATE FUNCTION memory.audit_prune(before timestamptz)
RETURNS int LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    name text;
    n int := 0;
BEGIN
    FOR name IN SELECT DISTINCT s.partition_name FROM memory.audit_seals s
                 WHERE s.range_end <= before AND s.dropped_at IS NULL AND to_regclass('memory.' || s.partition_name) IS NOT NULL
    LOOP
        EXECUTE format('ALTER TABLE memory.audit_log DETACH PARTITION memory.%I', name);
        -- Partitions made by CREATE EXTENSION are members of the extension: release them first.
        IF EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_class'::regclass AND d.objid = ('memory.' || quote_ident(name))::regclass
                      AND d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e') THEN
            EXECUTE format('ALTER EXTENSION memory_ext DROP TABLE memory.%I', name);
        END IF;
        EXECUTE format('DROP TABLE memory.%I', name);
        UPDATE memory.audit_seals s SET dropped_at = now() WHERE s.partition_name = name;
        n := n + 1;
    END LOOP;
    RETURN n;
END $$;
COMMENT ON FUNCTION memory.audit_prune(timestamptz) IS 'Drop sealed audit partitions that end at or before `before`; verification then counts them as pruned.';

REVOKE ALL ON FUNCTION memory.audit_seal(timestamptz), memory.audit_prune(timestamptz),
                       memory.audit_rotate_key(), memory.audit_ensure_partitions(int, timestamptz) FROM PUBLIC;
-- Reading the log crosses tenants: verification, heads and event listings are for auditors.
REVOKE ALL ON FUNCTION memory.audit_verify(text), memory.audit_head(text),
                       memory.audit_events(text, text, int, int, text, text, timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION memory.audit_append(text, jsonb, text, text, text, text),
                       memory_internal._audit_append_system(text, jsonb, text), memory_internal._mcp_tool_invoked(text, text, int) FROM PUBLIC;
REVOKE ALL ON FUNCTION memory.audit_integrate(), memory_internal._audit_integrate(boolean), memory_internal._audit_integrating() FROM PUBLIC;
REVOKE ALL ON FUNCTION memory_internal._audit_append(text, text, text, text, text, text),
                       memory_internal._audit_verify(text), memory_internal._random_bytes(int) FROM PUBLIC;
-- The door of read events (memory.recall, memory.retrieval.hybrid, memory.export): appended in the
-- reading transaction and handed to the integrator if it rolls back (docs/audit.md#read-events).
-- For memory_ext's own SECURITY DEFINER read functions.
REVOKE ALL ON FUNCTION memory_internal._audit_read(text, text, text, text) FROM PUBLIC;
COMMENT ON FUNCTION memory_internal._audit_read(text, text, text, text) IS
  'Append a read event (memory.recall, memory.retrieval.hybrid, memory.export) that survives the rollback of the reading transaction or savepoint: appended in it, and handed over to the integrator (shared memory) when it rolls back; 53000 when no place can be reserved for it. Not granted to PUBLIC.';

SELECT pg_catalog.pg_extension_config_dump('memory.audit_keys', '');
SELECT pg_catalog.pg_extension_config_dump('memory.audit_secrets', '');
SELECT pg_catalog.pg_extension_config_dump('memory.audit_heads', '');
SELECT pg_catalog.pg_extension_config_dump('memory.audit_seals', '');
SELECT pg_catalog.pg_extension_config_dump('memory.audit_pending', '');
