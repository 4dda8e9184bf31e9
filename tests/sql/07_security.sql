-- SQL-level suite for the trust boundary (SPEC §8): every attack of issue 11 as its own test.
-- Each must fail with 42501 (or the rule's SQLSTATE) and change nothing.
BEGIN;
SELECT plan(155);

SELECT memory.setup_roles();
CREATE ROLE sec_mallory LOGIN;                                   -- an ordinary login role, no grants
CREATE ROLE sec_reader LOGIN IN ROLE memory_reader;
CREATE ROLE sec_writer LOGIN IN ROLE memory_writer;              -- bound to acme
CREATE ROLE sec_writer2 LOGIN IN ROLE memory_writer;             -- bound to acme and globex
CREATE ROLE sec_admin LOGIN IN ROLE memory_admin;
CREATE ROLE sec_star LOGIN IN ROLE memory_admin;                 -- '*': an application server
CREATE ROLE sec_owner LOGIN IN ROLE memory_writer;               -- owns a governed table; bound to acme
SELECT memory.grant_org('sec_reader', 'acme');
SELECT memory.grant_org('sec_writer', 'acme');
SELECT memory.grant_org('sec_writer2', 'acme');
SELECT memory.grant_org('sec_writer2', 'globex');
SELECT memory.grant_org('sec_admin', 'acme');
SELECT memory.grant_org('sec_star', '*');
SELECT memory.grant_org('sec_owner', 'acme');
GRANT CREATE ON SCHEMA public TO sec_owner, sec_mallory, sec_writer, sec_admin;

-- Tenant data written by the owner.
INSERT INTO memory.observations (id, org_id, user_id, content) VALUES
  ('a0000000-0000-0000-0000-000000000001', 'acme', 'u1', 'acme note about billing'),
  ('b0000000-0000-0000-0000-000000000001', 'globex', 'u2', 'globex secret plan about billing');
INSERT INTO memory.classification_rules (org_id, tier, target, pattern) VALUES ('globex', 'restricted', 'content', '(?i)project falcon');
INSERT INTO memory.entities (id, org_id, entity_type, name) VALUES
  ('e0000000-0000-0000-0000-0000000000a1', 'acme', 'concept', 'a'), ('e0000000-0000-0000-0000-0000000000b1', 'globex', 'concept', 'g');
INSERT INTO memory.claims (id, org_id, entity_id, claim_text, source, confidence_score) VALUES
  ('c0000000-0000-0000-0000-0000000000b1', 'globex', 'e0000000-0000-0000-0000-0000000000b1', 'globex claim', 'PubMed', 0.2);
UPDATE memory.claims SET lifecycle_state = 'active' WHERE id = 'c0000000-0000-0000-0000-0000000000b1';
SELECT count(*) FROM memory.freshness_recheck();
SELECT memory.audit_integrate();
CREATE TEMP TABLE chains AS SELECT chain_id, seq FROM memory.audit_heads;
GRANT SELECT ON chains TO PUBLIC;
-- Tenant chains other than acme are as they were, and the platform chain holds nothing but
-- memory_ext's governance records (govern of the attackers' own tables writes those).
CREATE FUNCTION pg_temp.chains_unchanged() RETURNS boolean LANGUAGE sql AS $$
  SELECT memory.audit_integrate();
  SELECT NOT EXISTS (SELECT chain_id, seq FROM memory.audit_heads WHERE chain_id NOT IN ('acme', '')
                     EXCEPT SELECT chain_id, seq FROM chains WHERE chain_id NOT IN ('acme', ''))
     AND NOT EXISTS (SELECT 1 FROM public.audit_log_now() l WHERE l.chain_id = ''
                        AND l.seq > coalesce((SELECT c.seq FROM chains c WHERE c.chain_id = ''), 0)
                        AND l.event_type NOT LIKE 'memory.govern.%' AND l.event_type NOT LIKE 'memory.org.%') $$;

-- ---------------------------------------------------------------------------------------------
-- 1. No role runs code as the extension owner through the audit trigger.
SET ROLE sec_mallory;
CREATE TEMP TABLE carrier (x int);
CREATE FUNCTION pg_temp.evil(carrier) RETURNS text LANGUAGE plpgsql AS
  $$BEGIN CREATE TEMP TABLE IF NOT EXISTS escalated AS SELECT current_user AS who; RETURN 'x'; END$$;
CREATE CAST (carrier AS text) WITH FUNCTION pg_temp.evil(carrier);
CREATE TEMP TABLE esc (id carrier, org_id text);
CREATE TRIGGER t AFTER INSERT ON esc REFERENCING NEW TABLE AS memory_new FOR EACH STATEMENT
  EXECUTE FUNCTION memory.audit_trigger('table=x', 'id=id', 'org=org_id');
SELECT throws_ok($$ INSERT INTO esc VALUES (row(1), 'globex') $$, '39P01', NULL,
                 'a column of the caller''s own type is refused before any cast runs');
SELECT is(to_regclass('pg_temp.escalated'), NULL, 'the caller''s cast never ran');
CREATE TEMP TABLE esc2 (id text, org_id text);
CREATE TRIGGER t AFTER INSERT ON esc2 REFERENCING NEW TABLE AS memory_new FOR EACH STATEMENT
  EXECUTE FUNCTION memory.audit_trigger('table=public.payments', 'id=id', 'org=org_id');
SELECT throws_ok($$ INSERT INTO esc2 VALUES ('1', 'globex') $$, '42501', NULL,
                 'the audit trigger on a caller''s table refuses rows of an org the caller may not act for');
SELECT throws_ok($$ INSERT INTO esc2 VALUES ('1', NULL) $$, '42501', NULL, 'and the platform chain');
SELECT throws_ok($$ SELECT key FROM memory.audit_keys $$, '42501', NULL, 'the keys stay closed');
RESET ROLE;
SELECT ok(pg_temp.chains_unchanged(), 'no chain moved');

-- ---------------------------------------------------------------------------------------------
-- 2. Internal definer functions are not doors.
SET ROLE sec_writer;
CREATE TEMP TABLE fake_claims (LIKE memory.claims);
SELECT throws_ok($$ CREATE TRIGGER x BEFORE INSERT ON fake_claims FOR EACH ROW EXECUTE FUNCTION memory_internal._claims_before_insert() $$,
                 '42501', NULL, '_claims_before_insert cannot be attached to a caller''s table');
SELECT throws_ok($$ CREATE TRIGGER x AFTER INSERT ON fake_claims REFERENCING NEW TABLE AS memory_new FOR EACH STATEMENT
                    EXECUTE FUNCTION memory_internal._knowledge_audit() $$, '42501', NULL, 'nor _knowledge_audit');
SELECT throws_ok($$ SELECT memory_internal._register_governed('memory.retention_policies', '{"id": "id", "stamps": {"expires_at": "created_at"}}') $$,
                 '42501', NULL, '_register_governed refuses a table the caller does not own');
SELECT throws_ok($$ SELECT memory_internal._org_rules('globex') $$, '42883', NULL, 'another org''s rule patterns have no door');
SELECT throws_ok($$ SELECT memory.classify('project falcon', NULL, NULL, 'globex') $$, '42501', NULL,
                 'classifying with another org''s rules is 42501');
SELECT throws_ok($$ SELECT memory.erase_subject('globex') $$, '42501', NULL, 'a writer cannot erase');
SELECT throws_ok($$ SELECT memory.run_retention() $$, '42501', NULL, 'nor run retention');
SELECT throws_ok($$ SELECT memory_internal._exec_as_table_owner('memory.observations'::regclass, 'DELETE FROM memory.observations') $$,
                 '42501', NULL, 'nor run statements as a table''s owner');
CREATE TABLE public.sec_deep (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), org_id text, content text, classification memory.classification, weight float8);
SELECT memory.govern('public.sec_deep', '{"weight": "weight"}');
SELECT throws_ok(format($$ SELECT memory.govern('public.sec_deep', '{"weight": %s}') $$, repeat('[', 200) || repeat(']', 200)),
                 '22023', NULL, 'options nested 200 deep are refused by govern');
SELECT throws_ok($$ SELECT memory_internal._register_governed('public.sec_deep', '{}') $$, '42501', NULL, 'and the registry has no other door');
RESET ROLE;
SELECT throws_ok(format($$ SELECT memory_internal._register_governed('public.sec_deep', '{"weight": %s}') $$, repeat('[', 200) || repeat(']', 200)),
                 '22023', NULL, 'which refuses options not in govern''s shape, whoever calls it');
SELECT is((SELECT count(*) FROM memory.governance_registry WHERE relid = 'memory.retention_policies'::regclass), 0::bigint,
          'the registry holds no memory_ext table the attacker named');
SELECT is((SELECT count(*) FROM memory.retention_policies WHERE org_id IS NULL), 4::bigint, 'the platform policies are intact');
SELECT ok((SELECT count(*) FROM memory.record_outcome('s-deep', 'accepted', ARRAY['a0000000-0000-0000-0000-000000000001'::uuid])) = 1,
          'record_outcome still works');

-- ---------------------------------------------------------------------------------------------
-- 3. No forged audit events.
SET ROLE sec_mallory;
SELECT throws_ok($$ SELECT memory.audit_append('memory.purge', '{"forged": true}', 'globex') $$, '42501', NULL,
                 'audit_append is not for PUBLIC');
RESET ROLE;
SET ROLE sec_writer;
SELECT throws_ok($$ SELECT memory.audit_append('app.event', '{"forged": true}', 'globex') $$, '42501', NULL,
                 'a writer appends only to orgs it may act for');
SELECT throws_ok($$ SELECT memory.audit_append('memory.purge', '{"forged": true}', 'acme') $$, '42501', NULL,
                 'memory.* event types are the extension''s own');
SELECT throws_ok($$ SELECT memory.audit_append('Research.x', '{}', 'acme') $$, '42501', NULL, 'research.* too, in any case');
SELECT throws_ok($$ SELECT memory.audit_append('app.event', '{}') $$, '42501', NULL, 'nor the platform chain');
SELECT lives_ok($$ SELECT memory.audit_append('app.checkout', '{"n": 1}', 'acme') $$, 'a writer appends to its own org');
SELECT throws_ok($$ SELECT memory_internal._audit_append('memory.purge', '{}', 'globex', NULL, NULL, NULL) $$, '42501', NULL,
                 'the internal append is closed');
SELECT throws_ok($$ SELECT memory_internal._audit_append_system('memory.purge', '{}', 'globex') $$, '42501', NULL, 'so is the system append');
RESET ROLE;
SELECT ok(pg_temp.chains_unchanged(), 'no other chain moved');
SELECT is((SELECT actor_id FROM public.audit_log_now() WHERE event_type = 'app.checkout'), 'role:sec_writer', 'the event records the writing role');

-- ---------------------------------------------------------------------------------------------
-- 4. Tenant isolation is bound to roles, not self-asserted.
SET ROLE sec_writer;
SET memory.org_id = 'globex';
SELECT throws_ok($$ SELECT memory.acting_org() $$, '42501', NULL, 'naming an org the role lacks is refused, not a silent NULL org');
SELECT throws_ok($$ SELECT count(*) FROM memory.claims $$, '42501', NULL, 'no claims of another org');
SELECT throws_ok($$ SELECT count(*) FROM memory.observations $$, '42501', NULL, 'no observations');
SELECT throws_ok($$ SELECT count(*) FROM memory.live_observations $$, '42501', NULL, 'nor through live_observations');
SELECT throws_ok($$ SELECT count(*) FROM memory.observation_weight_history $$, '42501', NULL, 'nor weight history');
SELECT throws_ok($$ SELECT memory.claim_recheck_tasks('w', 10) $$, '42501', NULL, 'no re-check tasks for an org it lacks');
RESET memory.org_id;
SELECT is(memory.acting_org(), 'acme', 'a role with one org acts for it without the setting');
SELECT is((SELECT array_agg(DISTINCT org_id) FROM memory.observations), ARRAY['acme'], 'and sees that org only');
SELECT throws_ok($$ SELECT * FROM memory.recall('globex', 'billing') $$, '42501', NULL, 'recall of another org is 42501');
SELECT is((SELECT count(*) FROM memory.recall('acme', 'billing')), 1::bigint, 'recall of its own org works');
SELECT throws_ok($$ SELECT * FROM memory.audit_head('globex') $$, '42501', NULL, 'the log of another org is closed');
SELECT is((SELECT count(*) FROM memory.transfer_observations(ARRAY['b0000000-0000-0000-0000-000000000001'::uuid], 'p9')
            WHERE transferred), 0::bigint, 'another org''s observation does not transfer');
SELECT is((SELECT reason FROM memory.record_outcome('s-x', 'rejected', ARRAY['b0000000-0000-0000-0000-000000000001'::uuid])),
          'not_found', 'record_outcome does not find another org''s observation');
SELECT is((SELECT count(*) FROM memory.claim_recheck_tasks('w', 10)), 0::bigint, 'and takes no other org''s re-check tasks');
RESET ROLE;
SET ROLE sec_admin;
SELECT is((SELECT array_agg(chain_id ORDER BY chain_id) FROM memory.audit_verify()), ARRAY['acme'], 'an admin verifies its own chains');
SELECT throws_ok($$ SELECT * FROM memory.audit_verify('globex') $$, '42501', NULL, 'and not another org''s');
SELECT throws_ok($$ SELECT * FROM memory.audit_events(org_id => 'globex') $$, '42501', NULL, 'audit_events of another org is 42501');
SELECT is((SELECT array_agg(DISTINCT chain_id) FROM memory.audit_events(lim => 10000)), ARRAY['acme'], 'audit_events lists its own chains only');
SELECT is((SELECT chains FROM memory.audit_backlog), 'own', 'audit_backlog counts its own orgs'' chains');
SELECT throws_ok($$ SELECT memory.reclassify('b0000000-0000-0000-0000-000000000001', 'public', 'x') $$, '23503', NULL,
                 'reclassify does not find another org''s observation');
SELECT throws_ok($$ SELECT memory.grant_org('sec_mallory', 'globex') $$, '42501', NULL, 'an admin grants only its own orgs');
SELECT throws_ok($$ SELECT memory.grant_org('sec_mallory', '*') $$, '42501', NULL, 'and never *');
SELECT is((SELECT (memory.erase_subject('u2'))->>'observations'), '0', 'erasure stays inside the acting org');
RESET ROLE;
SELECT is((SELECT count(*) FROM memory.observations WHERE user_id = 'u2'), 1::bigint, 'globex''s subject is untouched');
SET ROLE sec_star;
SET memory.org_id = 'globex';
SELECT is((SELECT count(*) FROM memory.observations), 1::bigint, 'a * role acts for the org it names');
RESET memory.org_id;
SELECT ok((SELECT count(*) FROM memory.audit_verify()) >= 2, 'and verifies every chain');
RESET ROLE;

-- ---------------------------------------------------------------------------------------------
-- 5. Writers write, with no further grants.
SET ROLE sec_writer;
SELECT lives_ok($$ INSERT INTO memory.observations (org_id, content, memory_type) VALUES ('acme', 'my api_key is here', 'short_term') $$,
                'a writer inserts an observation of its org');
SELECT throws_ok($$ INSERT INTO memory.observations (org_id, content) VALUES ('globex', 'x') $$, '42501', NULL,
                 'and not one of another org');
RESET ROLE;
SELECT is((SELECT classification::text || ' ' || (expires_at IS NOT NULL)::text FROM memory.observations WHERE content = 'my api_key is here'),
          'confidential true', 'classified and stamped');
SELECT is((SELECT count(*) FROM public.audit_log_now() WHERE chain_id = 'acme' AND event_type = 'memory.store' AND actor_id = 'role:sec_writer'),
          1::bigint, 'and audited under the writer''s role');
SET ROLE sec_owner;
CREATE TABLE public.sec_notes (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), org_id text, content text,
                               classification memory.classification, created_at timestamptz DEFAULT now(),
                               expires_at timestamptz, purge_after timestamptz, archive_at timestamptz);
SELECT lives_ok($$ SELECT memory.govern('public.sec_notes', '{"audit": true, "stamps": true}') $$, 'a table owner governs its table');
SELECT lives_ok($$ INSERT INTO public.sec_notes (org_id, content) VALUES ('acme', 'the password') $$,
                'and writes it with classification, stamps and audit');
SELECT throws_ok($$ INSERT INTO public.sec_notes (org_id, content) VALUES ('globex', 'x') $$, '42501', NULL,
                 'owning a table never opens another tenant''s chain');
RESET ROLE;
SELECT is((SELECT classification::text || ' ' || (expires_at IS NOT NULL)::text FROM public.sec_notes), 'confidential true',
          'the owner''s row is classified and stamped');
SELECT is((SELECT governed_by::text FROM memory.governed_tables WHERE table_name = 'public.sec_notes'::regclass), 'sec_owner',
          'governed_by records the caller, not the definer');

-- ---------------------------------------------------------------------------------------------
-- 6. A caller's search_path changes nothing that runs.
CREATE TABLE public.sec_hijacked (who text);
GRANT INSERT ON public.sec_hijacked TO PUBLIC;
CREATE SCHEMA sec_evil AUTHORIZATION sec_writer;
SET ROLE sec_writer;
CREATE FUNCTION sec_evil.ne(memory.outcome, memory.outcome) RETURNS boolean LANGUAGE plpgsql AS
  $$BEGIN INSERT INTO public.sec_hijacked VALUES (current_user); RETURN $1::text <> $2::text; END$$;
CREATE OPERATOR sec_evil.<> (FUNCTION = sec_evil.ne, LEFTARG = memory.outcome, RIGHTARG = memory.outcome);
CREATE FUNCTION sec_evil.mul(numeric, integer) RETURNS numeric LANGUAGE plpgsql AS
  $$BEGIN INSERT INTO public.sec_hijacked VALUES (current_user); RETURN $1 * $2::numeric; END$$;
CREATE OPERATOR sec_evil.* (FUNCTION = sec_evil.mul, LEFTARG = numeric, RIGHTARG = integer);
SET search_path = sec_evil, public, pg_catalog;
SELECT lives_ok($$ SELECT * FROM memory.record_outcome('s-hijack', 'rejected', ARRAY['a0000000-0000-0000-0000-000000000001'::uuid]) $$,
                'record_outcome under a hostile search_path');
SELECT lives_ok($$ SELECT * FROM memory.misleading_observations() $$, 'misleading_observations too');
SELECT lives_ok($$ INSERT INTO memory.observations (org_id, content, memory_type) VALUES ('acme', 'an episode', 'episodic') $$,
                'an episodic insert too');
RESET search_path;
RESET ROLE;
SELECT is((SELECT count(*) FROM public.sec_hijacked), 0::bigint, 'no operator of the caller ran');

-- ---------------------------------------------------------------------------------------------
-- 7. Governance is not switched off quietly.
SET ROLE sec_owner;
SELECT throws_ok($$ ALTER TABLE public.sec_notes DISABLE TRIGGER USER $$, '42501', NULL, 'DISABLE TRIGGER USER is refused');
SELECT throws_ok($$ ALTER TABLE public.sec_notes DISABLE TRIGGER memory_classify $$, '42501', NULL, 'so is disabling one trigger');
SELECT throws_ok($$ DROP TRIGGER memory_audit_ins ON public.sec_notes $$, '42501', NULL, 'DROP TRIGGER is refused');
SELECT throws_ok($$ ALTER TRIGGER memory_classify ON public.sec_notes RENAME TO hidden $$, '42501', NULL, 'renaming is refused');
SELECT lives_ok($$ TRUNCATE public.sec_notes $$, 'TRUNCATE works');
RESET ROLE;
SELECT is((SELECT payload->>'table' FROM public.audit_log_now() WHERE event_type = 'memory.govern.truncate'), 'public.sec_notes',
          'and is audited');
SET ROLE sec_owner;
SELECT lives_ok($$ SELECT memory.ungovern('public.sec_notes') $$, 'ungovern removes the triggers');
SELECT lives_ok($$ SELECT memory.govern('public.sec_notes', '{"audit": true}') $$, 'govern again');
SELECT lives_ok($$ DROP TABLE public.sec_notes $$, 'DROP TABLE of a governed table');
RESET ROLE;
SELECT results_eq($$ SELECT event_type, payload->>'table' FROM public.audit_log_now()
                     WHERE event_type LIKE 'memory.govern.%' AND chain_id = '' AND payload->>'table' = 'public.sec_notes' ORDER BY seq $$,
                  $$ VALUES ('memory.govern.attach', 'public.sec_notes'), ('memory.govern.truncate', 'public.sec_notes'),
                            ('memory.govern.ungovern', 'public.sec_notes'), ('memory.govern.attach', 'public.sec_notes'),
                            ('memory.govern.drop_table', 'public.sec_notes') $$,
                  'govern, ungovern, TRUNCATE and DROP TABLE are on the platform chain');
SELECT is((SELECT count(*) FROM memory.governance_registry WHERE relid::text = 'public.sec_notes'), 0::bigint, 'and the registry forgot it');
SELECT results_eq($$ SELECT bool_and(ok) FROM memory.audit_verify() $$, $$ VALUES (true) $$, 'every chain verifies');

-- ---------------------------------------------------------------------------------------------
-- 8. Found by review: the gate, CREATE OR REPLACE TRIGGER, rules, maintenance through an owner's
-- trigger, an owner's type on a weighted table, another org's rules through a trigger.
SET ROLE sec_owner;
CREATE TABLE public.sec_app (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), org_id text, user_id text, content text,
                             classification memory.classification, weight float8 NOT NULL DEFAULT 1,
                             created_at timestamptz DEFAULT now(), expires_at timestamptz, purge_after timestamptz,
                             archive_at timestamptz, soft_deleted_at timestamptz);
SELECT memory.govern('public.sec_app', '{"audit": true, "stamps": true, "weight": "weight"}');
SELECT throws_ok($$ SELECT memory_internal._open_governance_gate('public.sec_app'::regclass) $$, '42501', NULL,
                 'the governance gate is not for PUBLIC');
SELECT throws_ok($$ SELECT memory_internal._register_governed('public.sec_app', '{}') $$, '42501', NULL, 'nor the registry door');
SELECT throws_ok($$ CREATE OR REPLACE TRIGGER memory_audit_ins AFTER INSERT ON public.sec_app REFERENCING NEW TABLE AS memory_new
                    FOR EACH STATEMENT WHEN (false) EXECUTE FUNCTION memory.audit_trigger('id=id') $$, '42501', NULL,
                 'CREATE OR REPLACE of a memory_ext trigger is refused');
CREATE TABLE public.sec_shadow (LIKE public.sec_app);
SELECT throws_ok($$ CREATE RULE divert AS ON INSERT TO public.sec_app DO INSTEAD INSERT INTO public.sec_shadow VALUES (NEW.*) $$,
                 '42501', NULL, 'rules on a governed table are refused');
-- The owner's own trigger writes rows of another org while maintenance deletes.
CREATE FUNCTION public.sec_forge() RETURNS trigger LANGUAGE plpgsql AS
  $$BEGIN INSERT INTO public.sec_app (org_id, user_id, content) VALUES ('globex', 'x', 'forged'); RETURN OLD; END$$;
CREATE TRIGGER forge BEFORE DELETE ON public.sec_app FOR EACH ROW EXECUTE FUNCTION public.sec_forge();
INSERT INTO public.sec_app (org_id, user_id, content) VALUES ('acme', 'victim', 'v');
RESET ROLE;
SET ROLE sec_admin;
SELECT is((SELECT memory.erase_subject('victim')->'failed_tables' ? 'public.sec_app'), true,
          'an owner''s trigger forging another org''s row makes its table fail in erasure, reported');
RESET ROLE;
SELECT is((SELECT count(*) FROM public.audit_log_now() WHERE chain_id = 'globex' AND payload->>'table' = 'public.sec_app'), 0::bigint,
          'and nothing reaches another org''s chain');
SELECT is((SELECT (memory.run_retention(false, now() + interval '100 years'))->'failed_tables'), '{}'::jsonb,
          'retention soft-deletes through the owner''s table');
SELECT is((SELECT (memory.run_retention(false, now() + interval '200 years'))->'failed_tables' ? 'public.sec_app'), true,
          'and when the owner''s trigger forges on the hard delete, reports the table and goes on');
-- An owner's own type with a cast on the id column of a weighted table: record_outcome skips it.
SET ROLE sec_owner;
CREATE TYPE public.sec_myid AS ENUM ('x');
CREATE FUNCTION public.sec_trojan(public.sec_myid) RETURNS uuid LANGUAGE plpgsql AS
  $$BEGIN INSERT INTO public.sec_hijacked VALUES (current_user); RETURN gen_random_uuid(); END$$;
CREATE CAST (public.sec_myid AS uuid) WITH FUNCTION public.sec_trojan(public.sec_myid) AS IMPLICIT;
CREATE TABLE public.sec_w (id public.sec_myid PRIMARY KEY, org_id text, weight float8);
GRANT SELECT, UPDATE ON public.sec_w TO PUBLIC;
RESET ROLE;
INSERT INTO memory.governance_registry (relid, options) VALUES ('public.sec_w', '{"id": "id", "weight": "weight", "org": "org_id"}');
SELECT is((SELECT reason FROM memory.record_outcome('s-trojan', 'accepted', ARRAY[gen_random_uuid()])), 'not_found',
          'record_outcome skips a weighted table whose id is not uuid');
SELECT is((SELECT count(*) FROM public.sec_hijacked), 0::bigint, 'and the owner''s cast never ran as the caller');
DELETE FROM memory.governance_registry WHERE relid = 'public.sec_w'::regclass;
-- Another org's rules through the classify trigger of one's own table.
SET ROLE sec_mallory;
CREATE TABLE public.sec_probe (org_id text, content text, classification memory.classification);
SELECT memory.govern('public.sec_probe', '{}');
SELECT throws_ok($$ INSERT INTO public.sec_probe (org_id, content) VALUES ('globex', 'launch of project falcon') $$, '42501', NULL,
                 'a row of an org with rules is classified only for a role that may act for it');
SELECT throws_ok($$ INSERT INTO public.sec_probe (org_id, content) VALUES ('nobody-org', 'launch of project falcon') $$, '42501', NULL,
                 'nor a row of any other org: owning a table never writes another tenant''s rows');
SELECT lives_ok($$ INSERT INTO public.sec_probe (org_id, content) VALUES (NULL, 'launch of project falcon') $$,
                'a row without an org is classified by the platform rules');
SELECT throws_ok($$ SELECT memory.audit_append(E'memory\u200b.purge', '{}', 'acme') $$, '42501', NULL,
                 'look-alike event names (PUBLIC has no audit_append at all)');
RESET ROLE;
SET ROLE sec_writer;
SELECT throws_ok($$ SELECT memory.audit_append(E'memory\u200b.purge', '{}', 'acme') $$, '22023', NULL,
                 'event names hold no invisible characters, so no look-alike of a reserved name');
SELECT throws_ok($$ SELECT memory.audit_append('ｍｅｍｏｒｙ.purge', '{}', 'acme') $$, '42501', NULL,
                 'and full-width forms of a reserved name are reserved too');
RESET ROLE;

-- The caller's own trigger firing during govern's backfill finds the governance gate closed.
SET ROLE sec_owner;
CREATE TABLE public.sec_bf (id int, content text, classification memory.classification);
INSERT INTO public.sec_bf VALUES (1, 'a note');
CREATE FUNCTION public.sec_bf_drop() RETURNS trigger LANGUAGE plpgsql AS
  $$BEGIN DROP TRIGGER IF EXISTS memory_classify ON public.sec_bf; RETURN NEW; END$$;
CREATE TRIGGER zz_drop AFTER UPDATE ON public.sec_bf FOR EACH ROW EXECUTE FUNCTION public.sec_bf_drop();
SELECT throws_ok($$ SELECT memory.govern('public.sec_bf', '{"backfill": true}') $$, '42501', NULL,
                 'a trigger of the caller''s that drops memory_classify during a first backfill is refused');
DROP TRIGGER zz_drop ON public.sec_bf;
SELECT lives_ok($$ SELECT memory.govern('public.sec_bf', '{"backfill": true}') $$, 'without it, the backfill runs');
RESET ROLE;
SELECT is((SELECT count(*) FROM pg_trigger WHERE tgrelid = 'public.sec_bf'::regclass AND tgname = 'memory_classify'), 1::bigint,
          'and the classify trigger is still there');

-- Found by the second review: another role's SECURITY DEFINER function that calls memory_ext
-- acts with that role's identity, never with its caller's (a superuser's, an admin's of another org).
CREATE TABLE public.sec_ran_as (who text);
GRANT INSERT ON public.sec_ran_as TO PUBLIC;
SET ROLE sec_mallory;
CREATE TABLE public.sec_m (content text, classification memory.classification);
INSERT INTO public.sec_m VALUES ('hello');
CREATE FUNCTION public.sec_m_trg() RETURNS trigger LANGUAGE plpgsql AS
  $$BEGIN INSERT INTO public.sec_ran_as VALUES (current_user); RETURN NEW; END$$;
CREATE TRIGGER app_zz BEFORE UPDATE ON public.sec_m FOR EACH ROW EXECUTE FUNCTION public.sec_m_trg();
CREATE FUNCTION public.sec_version() RETURNS text LANGUAGE plpgsql SECURITY DEFINER AS
  $$BEGIN PERFORM memory.govern('public.sec_m', '{"backfill": true}'); RETURN 'v1'; END$$;
CREATE FUNCTION public.sec_steal() RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER AS
  $$BEGIN RETURN (SELECT count(*) FROM memory.recall('globex', 'billing')); END$$;
RESET ROLE;
SELECT lives_ok($$ SELECT public.sec_version() $$, 'a superuser calls a function of mallory''s that governs mallory''s table');
SELECT is((SELECT array_agg(DISTINCT who) FROM public.sec_ran_as), ARRAY['sec_mallory'],
          'mallory''s trigger ran as mallory, not as the superuser who called');
SET ROLE sec_admin;
CREATE FUNCTION public.sec_grab() RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER AS
  $$BEGIN RETURN memory.grant_org('sec_admin', 'globex'); END$$;
RESET ROLE;
SELECT throws_ok($$ SELECT public.sec_grab() $$, '42501', NULL, 'an acme admin''s function cannot grant itself globex, whoever calls it');
SELECT throws_ok($$ SELECT public.sec_steal() $$, '42501', NULL, 'nor can mallory''s function recall globex with its caller''s rights');

-- Partitions, child tables and rules could route writes around the triggers: not governed.
SET ROLE sec_owner;
CREATE TABLE public.sec_pt (org_id text, content text, classification memory.classification) PARTITION BY LIST (org_id);
CREATE TABLE public.sec_pt_acme PARTITION OF public.sec_pt FOR VALUES IN ('acme');
SELECT throws_ok($$ SELECT memory.govern('public.sec_pt', '{"audit": true}') $$, '22023', NULL, 'a partitioned table is not governed');
SELECT throws_ok($$ SELECT memory.govern('public.sec_pt_acme', '{"audit": true}') $$, '22023', NULL, 'nor a partition');
CREATE TABLE public.sec_ru (org_id text, content text, classification memory.classification);
CREATE TABLE public.sec_ru_shadow (LIKE public.sec_ru);
CREATE RULE divert AS ON INSERT TO public.sec_ru DO INSTEAD INSERT INTO public.sec_ru_shadow VALUES (NEW.*);
SELECT throws_ok($$ SELECT memory.govern('public.sec_ru', '{"audit": true}') $$, '22023', NULL, 'nor a table with rules');
SELECT throws_ok($$ CREATE TABLE public.sec_child () INHERITS (public.sec_app) $$, '42501', NULL, 'nor may a governed table get a child table');
RESET ROLE;
SELECT throws_ok($$ SELECT memory.govern('memory.observations', '{"classify": false}') $$, '55000', NULL,
                 'memory_ext''s own tables are governed by CREATE EXTENSION alone, even for a superuser');

-- An org admin binds only roles it administers, never memory_ext's group roles.
SET ROLE sec_admin;
SELECT throws_ok($$ SELECT memory.grant_org('memory_writer', 'acme') $$, '42501', NULL, 'an acme admin cannot bind memory_writer to acme');
SELECT throws_ok($$ SELECT memory.grant_org('sec_writer2', 'acme') $$, '42501', NULL, 'nor a role it does not administer');
SELECT throws_ok($$ SELECT memory.revoke_org('sec_writer', 'acme') $$, '42501', NULL, 'nor revoke one');
RESET ROLE;

-- Feedback history is per org: a uuid another tenant's table holds shares no sessions or counts.
INSERT INTO memory.observations (id, org_id, content) VALUES ('b0000000-0000-0000-0000-0000000000ff', 'globex', 'shared id');
SET ROLE sec_owner;
INSERT INTO public.sec_app (id, org_id, content) VALUES ('b0000000-0000-0000-0000-0000000000ff', 'acme', 'shared id');
SELECT count(*) FROM generate_series(1, 3) g,
       LATERAL memory.record_outcome('r' || g, 'rejected', ARRAY['b0000000-0000-0000-0000-0000000000ff'::uuid]) o WHERE o.applied;
RESET ROLE;
SET ROLE sec_writer2;
SET memory.org_id = 'globex';
SELECT is((SELECT alpha FROM memory.record_outcome('r1', 'rejected', ARRAY['b0000000-0000-0000-0000-0000000000ff'::uuid])), 0.15::float8,
          'another org''s failures on a row with the same id neither count against this one nor block its session');
RESET memory.org_id;
RESET ROLE;

-- ---------------------------------------------------------------------------------------------
-- Consent (SPEC §6) for a role with no grants: the one PUBLIC door answers nothing about an org
-- it is not bound to, and the rest are closed.
SELECT memory.grant_consent('acme', 'victim', '{save_to_profile}');
SET ROLE sec_mallory;
SELECT throws_ok($$ SELECT memory_internal._has_consent('acme', 'victim', 'save_to_profile') $$, '42501', NULL,
                 'a role with no grants learns nothing of another org''s consent');
SELECT throws_ok($$ SELECT memory.grant_consent('acme', 'victim', '{training_use_allowed}') $$, '42501', NULL,
                 'nor records consent');
SELECT throws_ok($$ SELECT * FROM memory.consent_status('acme', 'victim') $$, '42501', NULL, 'nor reads its status');
SELECT throws_ok($$ SELECT memory_internal._consent_gate(true) $$, '42501', NULL, 'nor opens the consent gate');
RESET ROLE;
SELECT is((SELECT max(version) FROM memory.consents WHERE user_id = 'victim'), 1, 'the victim''s consent is as it was');

-- ---------------------------------------------------------------------------------------------
-- memory-mcp's audit door (issue 39): a tenant cannot append memory.* events itself; the door
-- writes only memory.mcp.tool_invoked with plain values, on the chain of the org it acts for.
SET ROLE sec_mallory;
SELECT throws_ok($$ SELECT memory_internal._mcp_tool_invoked('recall', 'x', 1) $$, '42501', NULL,
                 'a role without memory_reader may not write memory-mcp''s event');
RESET ROLE;
SET ROLE sec_writer;
SELECT throws_ok($$ SELECT memory.audit_append('memory.mcp.tool_invoked', '{"tool": "recall"}', 'acme') $$, '42501', NULL,
                 'audit_append refuses the reserved event type to a tenant');
RESET ROLE;
SET ROLE sec_reader;
SELECT lives_ok($$ SELECT memory_internal._mcp_tool_invoked('recall', 'claude-code', 3) $$, 'a reader records a tool call');
SELECT throws_ok($$ SELECT memory_internal._mcp_tool_invoked('audit_append', 'claude-code', 1) $$, '22023', NULL,
                 'only memory-mcp''s tools are named');
SELECT throws_ok($$ SELECT memory_internal._mcp_tool_invoked('recall', E'bad\nname', 1) $$, '22023', NULL,
                 'nor a client name with control characters');
-- (issue 53) Only a role that may perform a tool records its invocation: a reader, no write tool.
SELECT throws_ok($$ SELECT memory_internal._mcp_tool_invoked('forget', 'claude-code', 42) $$, '42501', NULL,
                 'a reader records no forget it may not perform');
SELECT throws_ok($$ SELECT memory_internal._mcp_tool_invoked('remember', 'claude-code', 1) $$, '42501', NULL,
                 'nor a remember');
SELECT throws_ok($$ SELECT memory_internal._mcp_tool_invoked('put', 'claude-code', 1) $$, '42501', NULL,
                 'nor a put (issue 51: the item tools are named, and put needs EXECUTE on memory.put)');
SELECT throws_ok($$ SELECT memory_internal._mcp_tool_invoked('record_outcome', 'claude-code', 1) $$, '42501', NULL,
                 'nor a record_outcome');
SELECT throws_ok($$ SELECT memory_internal._mcp_tool_invoked('supersede', 'claude-code', 1) $$, '42501', NULL,
                 'nor a supersede (it needs EXECUTE on memory.supersede)');
SELECT lives_ok($$ SELECT memory_internal._mcp_tool_invoked('history', 'claude-code', 2), memory_internal._mcp_tool_invoked('lineage', 'claude-code', 0) $$,
                'a reader records history and lineage');
SET memory.org_id = 'globex';
SELECT throws_ok($$ SELECT memory_internal._mcp_tool_invoked('recall', 'claude-code', 1) $$, '42501', NULL,
                 'nor on the chain of an org the role may not act for');
RESET memory.org_id;
RESET ROLE;
SET ROLE sec_writer2;
SELECT throws_ok($$ SELECT memory_internal._mcp_tool_invoked('recall', 'claude-code', 1) $$, '42501', NULL,
                 'a role of two orgs names the one it acts for');
RESET ROLE;
SET ROLE sec_writer;
SELECT lives_ok($$ SELECT memory_internal._mcp_tool_invoked('forget', 'claude-code', 2) $$, 'a writer records the forget it may perform');
RESET ROLE;
SELECT memory.audit_integrate();
SELECT results_eq($$ SELECT chain_id, payload, actor_id FROM public.audit_log_now() WHERE event_type = 'memory.mcp.tool_invoked' ORDER BY seq $$,
                  $$ VALUES ('acme'::text, '{"tool": "recall", "count": 3, "client": "claude-code"}'::jsonb, 'role:sec_reader'::text),
                            ('acme'::text, '{"tool": "history", "count": 2, "client": "claude-code"}'::jsonb, 'role:sec_reader'::text),
                            ('acme'::text, '{"tool": "lineage", "count": 0, "client": "claude-code"}'::jsonb, 'role:sec_reader'::text),
                            ('acme'::text, '{"tool": "forget", "count": 2, "client": "claude-code"}'::jsonb, 'role:sec_writer'::text) $$,
                  'one event a call recorded, on the acting org''s chain: tool, client and count only');
-- (issue 51) remember's call is recorded by its own write: memory.mcp_call (TOOL:CLIENT, set locally
-- by memory-mcp with the org and actor) is carried by the memory.store of an INSERT into
-- memory.observations, and by no other event. A reader inserts nothing, so it records no call
-- this way: not a forget, not a remember.
SET ROLE sec_reader;
SET memory.mcp_call = 'forget:claude-code';
SELECT throws_ok($$ INSERT INTO memory.observations (org_id, content) VALUES ('acme', 'a forged forget') $$, '42501', NULL,
                 'a reader naming a forget in memory.mcp_call inserts nothing, so records nothing');
SELECT lives_ok($$ SELECT count(*) FROM memory.recall('acme', 'episode', 5) $$, 'its recall runs (its read event carries no call)');
RESET memory.mcp_call;
RESET ROLE;
SET ROLE sec_writer;
SET memory.mcp_call = 'forget:claude-code';
SELECT lives_ok($$ INSERT INTO memory.observations (org_id, content) VALUES ('acme', 'stored, not forgotten') $$,
                'a writer naming a forget stores a memory (its event records no forget)');
SET memory.mcp_call = 'remember:claude-code';
SELECT lives_ok($$ INSERT INTO memory.observations (org_id, content) VALUES ('acme', 'remembered through memory-mcp') $$,
                'a writer''s remember through memory-mcp');
SET memory.mcp_call = 'audit_append:claude-code';
SELECT throws_ok($$ INSERT INTO memory.observations (org_id, content) VALUES ('acme', 'x') $$, '22023', NULL,
                 'a setting naming no memory-mcp tool is refused');
SET memory.mcp_call = 'remember';
SELECT throws_ok($$ INSERT INTO memory.observations (org_id, content) VALUES ('acme', 'x') $$, '22023', NULL,
                 'as is one without a client');
RESET memory.mcp_call;
RESET ROLE;
SELECT results_eq($$ SELECT chain_id, event_type, payload->>'mcp_tool', payload->>'mcp_client', payload->>'table', actor_id FROM public.audit_log_now()
                      WHERE payload ? 'mcp_tool' OR payload ? 'mcp_client' ORDER BY chain_id, seq $$,
                  $$ VALUES ('acme'::text, 'memory.store'::text, 'remember'::text, 'claude-code'::text, 'memory.observations'::text, 'role:sec_writer'::text) $$,
                  'only the remember''s own memory.store carries the call (mcp_tool, mcp_client)');
SELECT results_eq($$ SELECT bool_and(ok) FROM memory.audit_verify() $$, $$ VALUES (true) $$, 'every chain verifies with the call in a payload');

-- ---------------------------------------------------------------------------------------------
-- Definer functions: none executable by PUBLIC off the allow-list of docs/security.md; every function pins search_path.
SELECT is(ARRAY(SELECT p.oid::regprocedure::text FROM pg_proc p
                 WHERE p.pronamespace IN ('memory'::regnamespace, 'memory_internal'::regnamespace) AND p.prosecdef
                   AND has_function_privilege('sec_mallory', p.oid, 'EXECUTE') ORDER BY 1),
          ARRAY['memory.govern(regclass,jsonb)', 'memory.my_orgs()', 'memory.retention_policy(text,memory.classification)',
                'memory.ungovern(regclass)',
                'memory_internal._acting_org()', 'memory_internal._audit_truncate()', 'memory_internal._drop_table_revisions()',
                'memory_internal._has_consent(text,text,text)',
                'memory_internal._hold_for(text,text,text)', 'memory_internal._hold_on_rows(regclass)', 'memory_internal._keep_table_revision()',
                'memory_internal._max_tier()', 'memory_internal._table_lineage_ceiling()', 'memory_internal._table_lineage_floor()'],
          'SECURITY DEFINER functions executable by PUBLIC are exactly the allow-list');
-- Recall's one pass runs the SQL it is given (as its caller: memory_ext's owner inside recall):
-- no role but the owner may call it, nor the query embedding's check (found by review).
SELECT is(ARRAY(SELECT f FROM unnest(ARRAY['memory_internal._retrieve(text,boolean)',
                                           'memory_internal._query_vector_floats(double precision[],integer)',
                                           'memory_internal._query_vector_parse(text,integer)']) f
                 WHERE has_function_privilege('sec_mallory', f, 'EXECUTE') OR has_function_privilege('memory_reader', f, 'EXECUTE')
                    OR has_function_privilege('memory_admin', f, 'EXECUTE')),
          '{}'::text[], 'recall''s one-pass and embedding-check functions are the owner''s only');
SELECT is(ARRAY(SELECT p.oid::regprocedure::text FROM pg_proc p
                 WHERE p.pronamespace IN ('memory'::regnamespace, 'memory_internal'::regnamespace)
                   AND NOT EXISTS (SELECT 1 FROM unnest(coalesce(p.proconfig, '{}')) c WHERE c = 'search_path=pg_catalog, pg_temp')
                   AND NOT (p.prolang = (SELECT oid FROM pg_language WHERE lanname = 'c') AND p.provolatile = 'i')
                 ORDER BY p.oid::regprocedure::text COLLATE "C"),
          ARRAY['memory.audit_trigger()',
                'memory.can_transition(memory.lifecycle_state,memory.lifecycle_state)',
                'memory.classify(text,text[],text,text)', 'memory.classify_explain(text,text[],text,text)',
                'memory.classify_trigger()', 'memory.derive_classification(jsonb)',
                'memory.ema(double precision,memory.outcome,double precision,double precision)',
                'memory.is_stale(timestamp with time zone,integer,timestamp with time zone)',
                'memory.lifecycle_trigger()', 'memory.risk_band(memory.classification)', 'memory.source_tier(text)',
                'memory_internal._classify(text,text[],text,text)', 'memory_internal._classify_explain(text,text[],text,text)',
                'memory_internal._detect_drift()', 'memory_internal._feedback_polarity()'],
          'every function pins search_path = pg_catalog, pg_temp but immutable Rust functions and the per-row hot path, which resolve no name');
SELECT is(ARRAY(SELECT p.oid::regprocedure::text FROM pg_proc p
                 WHERE p.pronamespace IN ('memory'::regnamespace, 'memory_internal'::regnamespace) AND p.prosecdef
                   AND NOT EXISTS (SELECT 1 FROM unnest(coalesce(p.proconfig, '{}')) c WHERE c = 'search_path=pg_catalog, pg_temp')),
          '{}'::text[], 'every SECURITY DEFINER function among them');

-- Schema memory is the API: memory_ext's internal functions live in memory_internal.
SELECT is(ARRAY(SELECT p.proname::text FROM pg_proc p WHERE p.pronamespace = 'memory'::regnamespace AND p.proname LIKE '\_%' ORDER BY 1),
          '{}'::text[], 'no function in schema memory starts with _ (internals are in memory_internal)');

-- ---------------------------------------------------------------------------------------------
-- Governed tables and tenants (issue 46): "tenant_policy" keeps plain SELECTs apart by org; a '*'
-- role reads any org by naming it.
SET ROLE sec_owner;
CREATE TABLE public.sec_tenant (id bigserial PRIMARY KEY, org_id text, content text, classification memory.classification);
GRANT SELECT ON public.sec_tenant TO sec_reader, sec_star;
SELECT memory.govern('public.sec_tenant', '{"audit": true}');
INSERT INTO public.sec_tenant (org_id, content) VALUES ('acme', 'acme note');
RESET ROLE;
INSERT INTO public.sec_tenant (org_id, content) VALUES ('globex', 'globex note');
SET ROLE sec_reader;
SELECT is((SELECT array_agg(org_id ORDER BY org_id) FROM public.sec_tenant), '{acme,globex}',
          'without tenant_policy a reader bound to acme selects globex''s rows of a governed table');
RESET ROLE;
SET ROLE sec_owner;
SELECT lives_ok($$ SELECT memory.govern('public.sec_tenant', '{"audit": true, "tenant_policy": true}') $$, 'the owner adds tenant_policy');
RESET ROLE;
SET ROLE sec_reader;
SELECT is((SELECT array_agg(org_id ORDER BY org_id) FROM public.sec_tenant), '{acme}', 'with it, only acme''s rows');
SELECT is((SELECT count(*) FROM public.sec_tenant WHERE org_id = 'globex'), 0::bigint, 'naming globex finds nothing');
RESET ROLE;
SET ROLE sec_star;
SELECT is((SELECT count(*) FROM public.sec_tenant), 0::bigint, 'a ''*'' role acting for no org sees no row');
SET memory.org_id = 'globex';
SELECT is((SELECT array_agg(org_id) FROM public.sec_tenant), '{globex}', 'a ''*'' role reads any org by naming it');
RESET memory.org_id;
RESET ROLE;
SET ROLE sec_owner;
SELECT is((SELECT count(*) FROM public.sec_tenant), 2::bigint, 'the owner keeps access to every row');
SELECT throws_ok($$ ALTER TABLE public.sec_tenant DISABLE ROW LEVEL SECURITY $$, '42501', NULL,
                 'the owner does not switch its row-level security off behind govern''s back');
SELECT memory.ungovern('public.sec_tenant');
RESET ROLE;
SELECT is((SELECT relrowsecurity FROM pg_class WHERE oid = 'public.sec_tenant'::regclass), false, 'ungovern removes what govern made');

SELECT * FROM finish();
ROLLBACK;
