-- Attacker review of memory.mcp_call (issue 51) and keep_sqlstate, as the application's roles: a
-- malformed setting fails only the INSERT whose memory.store would carry the call (docs/audit.md),
-- never another table's write, a delete or memory.forget; an MX error under memory_ext's own
-- statement, caught by the caller, leaves it acting as itself.
BEGIN;
SELECT plan(14);

SELECT memory.setup_roles();
CREATE ROLE rv_writer LOGIN IN ROLE memory_writer;               -- bound to acme; owns an audited table
SELECT memory.grant_org('rv_writer', 'acme');
GRANT CREATE ON SCHEMA public TO rv_writer;

SET ROLE rv_writer;
CREATE TABLE public.rv_notes (id bigint PRIMARY KEY, tenant text NOT NULL, person text, body text, meta jsonb);
SELECT lives_ok($$ SELECT memory.govern('public.rv_notes', '{"content": "body", "target": "meta", "org": "tenant", "user": "person",
                                                            "audit": true, "tenant_policy": true}') $$,
                'a writer governs its own table, audited');
INSERT INTO public.rv_notes VALUES (1, 'acme', 'erin', 'one'), (2, 'acme', 'erin', 'two'), (3, 'acme', 'erin', 'three');

-- A session-level malformed setting (not TOOL:CLIENT).
SET memory.mcp_call = 'bogus';
SELECT lives_ok($$ DELETE FROM public.rv_notes WHERE id = 1 $$,
                'a malformed memory.mcp_call does not fail a DELETE of another governed table (it would mark no event)');
SELECT lives_ok($$ INSERT INTO public.rv_notes VALUES (4, 'acme', 'erin', 'four') $$,
                'nor an INSERT into another governed table');
SELECT lives_ok($$ SELECT memory.forget('public.rv_notes', ARRAY['2'], 'review') $$, 'nor memory.forget');
SELECT throws_ok($$ INSERT INTO memory.observations (org_id, content) VALUES ('acme', 'marked') $$, '22023', NULL,
                 'it fails the INSERT into memory.observations whose memory.store would carry it');
RESET memory.mcp_call;
SELECT is((SELECT count(*) FROM memory.observations WHERE content = 'marked'), 0::bigint, 'which stored nothing');
SELECT is((SELECT array_agg(id ORDER BY id) FROM public.rv_notes), ARRAY[3, 4]::bigint[], 'the other writes took effect');
RESET ROLE;
SELECT is((SELECT count(*) FROM public.audit_log_now() WHERE payload->>'table' = 'public.rv_notes'
             AND event_type IN ('memory.delete', 'memory.forget', 'memory.store')) >= 3, true,
          'and were audited (their events carry no call)');
SELECT is((SELECT count(*) FROM memory.audit_log WHERE payload ? 'mcp_tool'), 0::bigint, 'no event carries a call');

-- memory-mcp's remember inserts one row: a statement of several rows carries no call.
SET ROLE rv_writer;
SELECT set_config('memory.mcp_call', 'remember:rv-client', true);
INSERT INTO memory.observations (org_id, content) VALUES ('acme', 'one of many'), ('acme', 'two of many'), ('acme', 'three of many');
INSERT INTO memory.observations (org_id, content) VALUES ('acme', 'a single memory');
SELECT set_config('memory.mcp_call', '', true);
RESET ROLE;
SELECT is((SELECT count(*) FROM public.audit_log_now() WHERE payload ? 'mcp_tool' AND event_type = 'memory.store'), 1::bigint,
          'a three-row INSERT under remember:<client> carries no call; the single-row one does');
SELECT is((SELECT payload->>'mcp_client' FROM memory.audit_log WHERE payload ? 'mcp_tool'), 'rv-client', 'naming the client set');

-- keep_sqlstate: an MX error raised under forget's own statement by the owner's trigger, caught by
-- the caller, surfaces with its code, and the caller is itself again (not the table's owner).
SET ROLE rv_writer;
CREATE FUNCTION public.rv_boom() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
    BEGIN RAISE EXCEPTION 'caught inside' USING ERRCODE = 'MX006'; EXCEPTION WHEN others THEN NULL; END;
    RAISE EXCEPTION 'held by the owner''s rule' USING ERRCODE = 'MX006';
END $f$;
CREATE TRIGGER rv_boom AFTER DELETE ON public.rv_notes FOR EACH ROW EXECUTE FUNCTION public.rv_boom();
RESET ROLE;
GRANT SELECT, DELETE ON public.rv_notes TO memory_writer;
CREATE ROLE rv_caller LOGIN IN ROLE memory_writer;
SELECT memory.grant_org('rv_caller', 'acme');
SET ROLE rv_caller;
SELECT throws_ok($$ SELECT memory.forget('public.rv_notes', ARRAY['3'], 'review') $$, 'MX006', 'held by the owner''s rule',
                 'an MX006 under forget''s DELETE keeps its code and message (not the one caught inside)');
SELECT is(current_user::text, 'rv_caller', 'after it the caller acts as itself');
SELECT is((SELECT count(*) FROM public.rv_notes WHERE id = 3), 1::bigint, 'and the row is kept');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
