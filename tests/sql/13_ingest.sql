-- SQL-level suite for bulk ingest (seed "Add in bulk", FR-043-005; issue 18 item 1).
BEGIN;
SELECT plan(22);

INSERT INTO memory.entities (id, org_id, entity_type, name) VALUES
  ('e3000000-0000-0000-0000-000000000001', 'acme', 'problem', 'Asthma'),
  ('e3000000-0000-0000-0000-000000000002', 'globex', 'problem', 'Gout');
INSERT INTO memory.claims (id, org_id, entity_id, claim_text) VALUES
  ('c3000000-0000-0000-0000-000000000001', 'acme', 'e3000000-0000-0000-0000-000000000001', 'pending, so it cannot be superseded');

SET LOCAL memory.org_id = 'acme';   -- the org the batch acts for (items may name it too)
-- 1,000 claims with 10 bad ones in known places, each bad in its own way; two entities of the
-- batch that claims and a relationship name by ref; chunks of 128.
CREATE TEMP TABLE batch_out AS
SELECT * FROM memory.ingest_batch(
  entities => '[{"ref": "e1", "org_id": "acme", "entity_type": "intervention", "name": "Inhaled steroid"},
                {"ref": "e2", "org_id": "acme", "entity_type": "outcome", "name": "Fewer attacks"},
                {"ref": "e3", "org_id": "acme", "entity_type": "spaceship", "name": "bad type"}]',
  claims => (SELECT jsonb_agg(CASE g
      WHEN 7   THEN '"not an object"'::jsonb
      WHEN 100 THEN jsonb_build_object('org_id', 'acme', 'entity_id', 'e3000000-0000-0000-0000-0000000000ff', 'claim_text', 'missing entity')
      WHEN 205 THEN jsonb_build_object('org_id', 'acme', 'entity_ref', 'e1', 'claim_text', 42)
      WHEN 333 THEN jsonb_build_object('org_id', 'acme', 'entity_ref', 'e1', 'claim_text', 'x', 'lifecycle_state', 'active')
      WHEN 400 THEN jsonb_build_object('org_id', 'acme', 'entity_ref', 'e1', 'claim_text', 'x', 'colour', 'blue')
      WHEN 512 THEN jsonb_build_object('org_id', 'acme', 'entity_id', 'not-a-uuid', 'claim_text', 'x')
      WHEN 640 THEN jsonb_build_object('org_id', 'acme', 'entity_ref', 'e2', 'claim_text', 'x', 'confidence_score', 2)
      WHEN 777 THEN jsonb_build_object('org_id', 'acme', 'entity_ref', 'e3', 'claim_text', 'entity of the batch that failed')
      WHEN 888 THEN jsonb_build_object('org_id', 'acme', 'entity_ref', 'e1', 'claim_text', 'x', 'pii_fields', '["shoe_size"]'::jsonb)
      WHEN 999 THEN jsonb_build_object('org_id', 'acme', 'entity_ref', 'e1', 'claim_text', 'x', 'supersedes', 'c3000000-0000-0000-0000-000000000001')
      ELSE jsonb_build_object('org_id', 'acme', 'entity_ref', CASE WHEN g % 2 = 0 THEN 'e1' ELSE 'e2' END,
                              'claim_text', 'claim ' || g, 'source', 'PubMed', 'confidence_score', 0.7, 'field', 'f' || (g % 5))
      END ORDER BY g) FROM generate_series(0, 999) g),
  relationships => '[{"org_id": "acme", "source_ref": "e1", "target_ref": "e2", "rel_type": "improves"},
                     {"org_id": "acme", "source_ref": "e1", "target_id": "e3000000-0000-0000-0000-000000000002", "rel_type": "treats"}]',
  chunk_size => 128);

SELECT is((SELECT count(*)::int FROM batch_out), 1005, 'one row per input item');
SELECT is((SELECT array_agg(kind || ':' || item ORDER BY kind = 'relationships', kind = 'claims', item) FROM batch_out WHERE kind <> 'claims' OR item < 3),
          '{entities:0,entities:1,entities:2,claims:0,claims:1,claims:2,relationships:0,relationships:1}', 'in input order, entities first');
SELECT is((SELECT array_agg(item ORDER BY item) FROM batch_out WHERE kind = 'claims' AND NOT ok),
          '{7,100,205,333,400,512,640,777,888,999}', 'exactly the ten bad claims fail');
SELECT is((SELECT array_agg(item || ' ' || sqlstate ORDER BY item) FROM batch_out WHERE kind = 'claims' AND NOT ok),
          '{"7 22023","100 23503","205 22023","333 MX001","400 22023","512 22P02","640 23514","777 23503","888 22023","999 MX005"}',
          'each with its SQLSTATE (shape, missing entity, type, transition, unknown key, uuid, range, failed ref, and the triggers'' own rules)');
SELECT is((SELECT message FROM batch_out WHERE kind = 'claims' AND item = 400), 'unknown key "colour"', 'with a message');
SELECT is((SELECT count(*)::int FROM memory.claims WHERE claim_text LIKE 'claim %'), 990, '990 claims landed');
SELECT is((SELECT count(*)::int FROM batch_out b JOIN memory.claims c ON c.id = b.id WHERE b.kind = 'claims' AND b.ok), 990,
          'each reported id is the claim''s');
SELECT ok((SELECT bool_and(id IS NULL) FROM batch_out WHERE NOT ok), 'failed items have no id');
SELECT is((SELECT count(DISTINCT c.entity_id)::int FROM memory.claims c WHERE c.claim_text LIKE 'claim %'), 2,
          'claims found the batch''s entities by ref');
SELECT is((SELECT sqlstate FROM batch_out WHERE kind = 'entities' AND item = 2), '23514', 'an unknown entity type fails the entity');
SELECT is((SELECT array_agg(ok::text || coalesce(sqlstate, '') ORDER BY item) FROM batch_out WHERE kind = 'relationships'),
          '{true,false23503}', 'a relationship to another org''s entity fails; the one by refs lands');
SELECT is((SELECT count(*)::int FROM memory.claims WHERE lifecycle_state = 'pending' AND claim_text LIKE 'claim %'), 990, 'claims start pending');
SELECT is((SELECT count(*)::int FROM memory.claims WHERE field = 'f3'), 198, 'fields are kept');

SELECT ok(memory.audit_integrate() >= 0, 'integrated');
SELECT is((SELECT payload - 'chunkSize' FROM memory.audit_log WHERE chain_id = 'acme' AND event_type = 'memory.ingest.batch'),
          '{"claims": {"failed": 10, "inserted": 990}, "entities": {"failed": 1, "inserted": 2}, "relationships": {"failed": 1, "inserted": 1}}'::jsonb,
          'one memory.ingest.batch event with counts only');
SELECT is((SELECT count(*)::int FROM memory.audit_log WHERE chain_id = 'acme' AND event_type = 'memory.claim.create'), 991,
          'plus the per-item events (990 and the claim made before)');
SELECT is((SELECT ok FROM memory.audit_verify('acme')), true, 'the chain verifies');

-- Bad arguments and privileges.
SELECT throws_ok($$ SELECT * FROM memory.ingest_batch(claims => '{}') $$, '22023', 'claims must be a JSON array', 'a non-array is 22023');
SELECT throws_ok($$ SELECT * FROM memory.ingest_batch(chunk_size => 0) $$, '22023', NULL, 'so is a chunk size of 0');
SELECT memory.setup_roles();
CREATE ROLE ing_reader LOGIN IN ROLE memory_reader;
CREATE ROLE ing_writer LOGIN IN ROLE memory_writer;
SELECT memory.grant_org('ing_writer', 'acme');
GRANT EXECUTE ON FUNCTION memory.ingest_batch(jsonb, jsonb, jsonb, int) TO ing_reader;
SET ROLE ing_reader;
SELECT throws_ok($$ SELECT * FROM memory.ingest_batch(claims => '[]') $$, '42501', NULL, 'a role without INSERT on the tables gets 42501 even with EXECUTE');
RESET ROLE;
SET ROLE ing_writer;
SELECT is((SELECT array_agg(coalesce(sqlstate, 'ok') ORDER BY item) FROM memory.ingest_batch(claims =>
            '[{"org_id": "globex", "entity_id": "e3000000-0000-0000-0000-000000000002", "claim_text": "x"},
              {"entity_id": "e3000000-0000-0000-0000-000000000001", "claim_text": "acme by default"}]')),
          '{42501,ok}', 'a writer: another org''s item fails with 42501, the acting org is the default');
RESET ROLE;
SELECT is((SELECT count(*)::int FROM memory.claims WHERE org_id = 'globex'), 0, 'a writer bound to acme wrote nothing to globex');

SELECT * FROM finish();
ROLLBACK;
