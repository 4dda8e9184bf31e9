-- SQL-level suite for namespaced items (issue 48, SPEC §16): memory.put, get, delete,
-- list_namespaces, purge_expired, as tenant-bound roles.
BEGIN;
SELECT plan(116);

SELECT memory.setup_roles();
CREATE ROLE it_writer IN ROLE memory_writer;
CREATE ROLE it_globex IN ROLE memory_writer;
CREATE ROLE it_reader IN ROLE memory_reader;
CREATE ROLE it_internal IN ROLE memory_reader;
CREATE ROLE it_admin IN ROLE memory_admin;
SELECT memory.grant_org('it_writer', 'acme'), memory.grant_org('it_globex', 'globex'), memory.grant_org('it_reader', 'acme'),
       memory.grant_org('it_internal', 'acme', 'internal'), memory.grant_org('it_admin', 'acme');

-- ------------------------------------------------------------------------------------------------
-- put and get
SET ROLE it_writer;
SELECT ok(memory.put('acme', ARRAY['memories', 'dave'], 'prefs', '{"text": "dave likes tea", "tags": ["drinks"]}', user_id => 'dave') IS NOT NULL,
          'a writer puts an item');
SELECT is((SELECT count(*) FROM memory.get('acme', ARRAY['memories', 'dave'], 'prefs')), 1::bigint, 'and gets it back');
SELECT is((SELECT value FROM memory.get('acme', ARRAY['memories', 'dave'], 'prefs')), '{"text": "dave likes tea", "tags": ["drinks"]}'::jsonb, 'the value as put');
SELECT is((SELECT classification::text FROM memory.get('acme', ARRAY['memories', 'dave'], 'prefs')), 'internal', 'classified (a harmless value: internal)');
SELECT ok((SELECT updated_at IS NOT NULL AND created_at IS NOT NULL FROM memory.get('acme', ARRAY['memories', 'dave'], 'prefs')), 'created_at and updated_at');
SELECT is((SELECT count(*) FROM memory.get('acme', ARRAY['memories', 'dave'], 'nope')), 0::bigint, 'a missing key: no row');
SELECT is((SELECT count(*) FROM memory.get('acme', ARRAY['memories'], 'prefs')), 0::bigint, 'another namespace: no row');
SELECT is(memory.put('acme', ARRAY['memories', 'dave'], 'prefs', '{"text": "dave likes coffee"}'),
          (SELECT id FROM memory.get('acme', ARRAY['memories', 'dave'], 'prefs')), 'a second put of the key updates the same item');
SELECT is((SELECT value->>'text' FROM memory.get('acme', ARRAY['memories', 'dave'], 'prefs')), 'dave likes coffee', 'with the new value');
RESET ROLE;
SELECT is((SELECT count(*) FROM memory.observations WHERE org_id = 'acme' AND namespace = ARRAY['memories', 'dave'] AND key = 'prefs'), 1::bigint,
          'one row for the key');
SELECT is((SELECT user_id FROM memory.observations WHERE key = 'prefs'), 'dave', 'the user kept when a later put names none');
SELECT is((SELECT content FROM memory.observations WHERE key = 'prefs'), E'text\ndave likes coffee', 'content: every key and scalar of the value');
SELECT is((SELECT array_agg(l.event_type ORDER BY l.seq) FROM public.audit_log_now() l
            WHERE l.chain_id = 'acme' AND l.payload->>'id' = (SELECT id::text FROM memory.observations WHERE key = 'prefs')),
          ARRAY['memory.store', 'memory.update'], 'audited: memory.store on create, memory.update on change');
SELECT is((SELECT count(*) FROM memory.audit_log l WHERE l.payload::text LIKE '%likes%'), 0::bigint, 'no value in the log');
SELECT is((SELECT l.payload->>'content_sha256' FROM memory.audit_log l WHERE l.event_type = 'memory.store'
            AND l.payload->>'id' = (SELECT id::text FROM memory.observations WHERE key = 'prefs')),
          encode(sha256(convert_to(E'tags\ntext\ndrinks\ndave likes tea', 'UTF8')), 'hex'), 'memory.store names the content hash');
SELECT is((SELECT count(*) FROM memory.audit_log l WHERE l.chain_id = 'acme' AND l.event_type = 'memory.recall' AND l.payload->>'call' = 'memory.get'),
          8::bigint, 'every get is audited as memory.recall');
SELECT is((SELECT l.payload - 'call' FROM memory.audit_log l WHERE l.chain_id = 'acme' AND l.payload->>'call' = 'memory.get' ORDER BY l.seq DESC LIMIT 1),
          jsonb_build_object('ids', jsonb_build_array((SELECT id FROM memory.observations WHERE key = 'prefs')), 'count', 1),
          'with the ids and count only');

-- Classification over every string of the value, nested keys and values, whatever index says.
SET ROLE it_writer;
SELECT memory.put('acme', ARRAY['memories', 'dave'], 'card', '{"a": {"b": [{"note": "paid with 4111 1111 1111 1111 yesterday"}]}, "text": "lunch"}',
                  index => ARRAY['$.text'], user_id => 'dave');
SELECT is((SELECT classification::text FROM memory.get('acme', ARRAY['memories', 'dave'], 'card')), 'restricted',
          'a card number nested three levels down makes the item restricted (index never narrows it)');
SELECT memory.put('acme', ARRAY['memories', 'dave'], 'secretkey', '{"api_key": "x"}');
SELECT is((SELECT classification::text FROM memory.get('acme', ARRAY['memories', 'dave'], 'secretkey')), 'confidential', 'a key of the value counts too');
SELECT memory.put('acme', ARRAY['memories', 'dave'], 'card', '{"text": "lunch"}', index => ARRAY['$.text']);
SELECT is((SELECT classification::text FROM memory.get('acme', ARRAY['memories', 'dave'], 'card')), 'restricted',
          'a changed harmless value never lowers the tier');
RESET ROLE;
SELECT is((SELECT search_tsv FROM memory.observations WHERE key = 'card'), to_tsvector('english', 'lunch'), 'search_tsv: the words of the index paths');
SELECT is((SELECT search_tsv FROM memory.observations WHERE key = 'secretkey'), to_tsvector('english', E'api_key\nx'), 'index NULL: the whole value');
SET ROLE it_writer;
SELECT memory.put('acme', ARRAY['docs'], 'nosearch', '{"text": "hidden words"}', index => '{}');
SELECT memory.put('acme', ARRAY['docs'], 'tags', '{"text": "t", "tags": ["alpha", "beta"], "a": {"b": "gamma"}}', index => ARRAY['$.tags[*]', '$.a.b', '$.missing']);
RESET ROLE;
SELECT is((SELECT search_tsv FROM memory.observations WHERE key = 'nosearch'), ''::tsvector, 'index ''{}'': not searchable');
SELECT is((SELECT search_tsv FROM memory.observations WHERE key = 'tags'), to_tsvector('english', E'alpha\nbeta\ngamma'), 'array and nested paths; a missing path adds nothing');

-- Clearance and tenants.
SET ROLE it_internal;
SELECT is((SELECT count(*) FROM memory.get('acme', ARRAY['memories', 'dave'], 'card')), 0::bigint, 'a reader cleared to internal does not get a restricted item');
SELECT is((SELECT count(*) FROM memory.get('acme', ARRAY['memories', 'dave'], 'prefs')), 1::bigint, 'but gets an internal one');
SET ROLE it_reader;
SELECT is((SELECT count(*) FROM memory.get('acme', ARRAY['memories', 'dave'], 'card')), 1::bigint, 'a reader without a tier gets it');
SELECT throws_ok($$ SELECT memory.put('acme', ARRAY['x'], 'k', '{}') $$, '42501', NULL, 'a reader may not put');
SET ROLE it_globex;
SELECT throws_ok($$ SELECT * FROM memory.get('acme', ARRAY['memories', 'dave'], 'prefs') $$, '42501', NULL, 'another tenant may not read acme''s items');
SELECT throws_ok($$ SELECT memory.put('acme', ARRAY['memories', 'dave'], 'prefs', '{"text": "hijacked"}') $$, '42501', NULL, 'nor write them');
SELECT throws_ok($$ SELECT memory.delete('acme', ARRAY['memories', 'dave'], 'prefs') $$, '42501', NULL, 'nor delete them');
SELECT throws_ok($$ SELECT memory.list_namespaces('acme') $$, '42501', NULL, 'nor list their namespaces');
SELECT throws_ok($$ SELECT memory.purge_expired('acme') $$, '42501', NULL, 'nor purge them');
SELECT memory.put('globex', ARRAY['memories', 'dave'], 'prefs', '{"text": "globex dave"}');
SELECT is((SELECT value->>'text' FROM memory.get('globex', ARRAY['memories', 'dave'], 'prefs')), 'globex dave', 'the same address in another org is another item');
SELECT is((SELECT count(*) FROM memory.observations WHERE org_id = 'acme'), 0::bigint, 'row-level security hides acme''s rows');
RESET ROLE;
SELECT is((SELECT value->>'text' FROM memory.observations WHERE org_id = 'acme' AND key = 'prefs'), 'dave likes coffee', 'acme''s item unchanged');

-- list_namespaces
SET ROLE it_writer;
SELECT memory.put('acme', ARRAY['memories', 'erin', 'work'], 'k1', '{"text": "erin"}');
SELECT is(ARRAY(SELECT array_to_string(n, '.') FROM memory.list_namespaces('acme') n),
          ARRAY['docs', 'memories.dave', 'memories.erin.work'], 'every namespace, sorted');
SELECT is(ARRAY(SELECT array_to_string(n, '.') FROM memory.list_namespaces('acme', prefix => ARRAY['memories']) n),
          ARRAY['memories.dave', 'memories.erin.work'], 'by prefix');
SELECT is(ARRAY(SELECT array_to_string(n, '.') FROM memory.list_namespaces('acme', prefix => ARRAY['*', 'erin']) n),
          ARRAY['memories.erin.work'], '''*'' matches any one label');
SELECT is(ARRAY(SELECT array_to_string(n, '.') FROM memory.list_namespaces('acme', suffix => ARRAY['dave']) n),
          ARRAY['memories.dave'], 'by suffix');
SELECT is(ARRAY(SELECT array_to_string(n, '.') FROM memory.list_namespaces('acme', max_depth => 1) n),
          ARRAY['docs', 'memories'], 'truncated to max_depth, distinct');
SELECT is(ARRAY(SELECT array_to_string(n, '.') FROM memory.list_namespaces('acme', k => 1, "offset" => 1) n),
          ARRAY['memories.dave'], 'k and offset page');
SELECT memory.put('acme', ARRAY['secret'], 'x', '{"text": "number 123-45-6789 given"}');
SELECT ok(EXISTS (SELECT 1 FROM memory.list_namespaces('acme') n WHERE n = ARRAY['secret']), 'a writer (no tier) lists it');
SET ROLE it_internal;
SELECT ok(NOT EXISTS (SELECT 1 FROM memory.list_namespaces('acme') n WHERE n = ARRAY['secret']), 'a namespace of restricted items only is not listed to a reader cleared to internal');

-- delete (forget)
SET ROLE it_writer;
SELECT ok(memory.delete('acme', ARRAY['docs'], 'nosearch'), 'delete forgets an item');
SELECT ok(NOT memory.delete('acme', ARRAY['docs'], 'nosearch'), 'a second delete finds nothing');
RESET ROLE;
SELECT is((SELECT count(*) FROM memory.observations WHERE key = 'nosearch'), 0::bigint, 'the row is gone');
SELECT is((SELECT count(*) FROM public.audit_log_now() l WHERE l.chain_id = 'acme' AND l.event_type = 'memory.forget' AND l.payload->>'reason' = 'memory.delete'),
          1::bigint, 'one memory.forget event');
-- forget by id (an item is a memory)
SET ROLE it_writer;
SELECT id AS tags_id FROM memory.get('acme', ARRAY['docs'], 'tags') \gset
SELECT is(memory.forget(ARRAY[:'tags_id'::uuid], 'user asked')->'forgotten'->>0, :'tags_id', 'memory.forget takes an item''s id');
SELECT is((SELECT count(*) FROM memory.get('acme', ARRAY['docs'], 'tags')), 0::bigint, 'and the item is gone');

-- Holds
RESET ROLE;
INSERT INTO memory.legal_holds (id, org_id, user_id, reason) OVERRIDING SYSTEM VALUE VALUES (961, 'acme', 'held', 'litigation');
SET ROLE it_writer;
SELECT memory.put('acme', ARRAY['memories', 'held'], 'h', '{"text": "kept"}', user_id => 'held');
SELECT throws_ok($$ SELECT memory.put('acme', ARRAY['memories', 'held'], 'h', '{"text": "changed"}') $$, 'MX006', NULL, 'a held item cannot be changed');
SELECT throws_ok($$ SELECT memory.delete('acme', ARRAY['memories', 'held'], 'h') $$, 'MX006', NULL, 'nor deleted');
SELECT is((SELECT value->>'text' FROM memory.get('acme', ARRAY['memories', 'held'], 'h')), 'kept', 'the held item is unchanged');

-- TTL
SELECT memory.put('acme', ARRAY['cache'], 'short', '{"text": "soon gone"}', ttl => interval '1 hour');
SELECT memory.put('acme', ARRAY['cache'], 'held', '{"text": "held"}', ttl => interval '1 hour', user_id => 'held');
SELECT ok((SELECT expires_at <= now() + interval '1 hour' FROM memory.get('acme', ARRAY['cache'], 'short')), 'ttl shortens expires_at');
RESET ROLE;
SELECT ok((SELECT expires_at > now() + interval '1 day' FROM memory.observations WHERE org_id = 'acme' AND key = 'prefs'), 'an item without ttl keeps its policy''s expiry');
UPDATE memory.observations SET expires_at = now() - interval '1 minute' WHERE key IN ('short', 'held') AND namespace = ARRAY['cache'];
SELECT id AS short_id FROM memory.observations WHERE key = 'short' \gset
SET ROLE it_writer;
SELECT is((SELECT count(*) FROM memory.get('acme', ARRAY['cache'], 'short')), 0::bigint, 'an expired item is not returned');
SELECT is(memory.purge_expired('acme'), 1::bigint, 'purge_expired deletes the expired item, not the held one');
RESET ROLE;
SELECT is((SELECT count(*) FROM memory.observations WHERE namespace = ARRAY['cache']), 1::bigint, 'the held expired item stays');
SELECT is((SELECT count(*) FROM public.audit_log_now() l WHERE l.chain_id = 'acme' AND l.event_type = 'memory.delete' AND l.payload->>'id' = :'short_id'), 1::bigint, 'the purge is audited');
-- A put of an expired key makes a new item.
SET ROLE it_writer;
SELECT memory.put('acme', ARRAY['cache'], 'again', '{"text": "v1"}', ttl => interval '1 hour');
RESET ROLE;
UPDATE memory.observations SET expires_at = now() - interval '1 minute' WHERE key = 'again';
SET ROLE it_writer;
SELECT memory.put('acme', ARRAY['cache'], 'again', '{"text": "v2"}');
SELECT is((SELECT value->>'text' FROM memory.get('acme', ARRAY['cache'], 'again')), 'v2', 'a put over an expired item makes it live again');
SELECT ok((SELECT expires_at IS NULL OR expires_at > now() + interval '1 day' FROM memory.get('acme', ARRAY['cache'], 'again')), 'without the old ttl');
-- refresh_ttl
SELECT memory.put('acme', ARRAY['cache'], 'refresh', '{"text": "r"}', ttl => interval '1 hour');
RESET ROLE;
UPDATE memory.observations SET expires_at = now() + interval '1 minute' WHERE key = 'refresh';
SET ROLE it_writer;
SELECT ok((SELECT expires_at < now() + interval '2 minutes' FROM memory.get('acme', ARRAY['cache'], 'refresh')), 'a get without refresh keeps the expiry');
SELECT ok((SELECT expires_at > now() + interval '59 minutes' FROM memory.get('acme', ARRAY['cache'], 'refresh', refresh_ttl => true)), 'refresh_ttl restarts it');
RESET ROLE;
SELECT ok((SELECT expires_at > now() + interval '59 minutes' FROM memory.observations WHERE key = 'refresh'), 'and stores it');
-- run_retention purges expired items too.
UPDATE memory.observations SET expires_at = now() - interval '1 minute' WHERE key = 'refresh';
SELECT is((memory.run_retention()->>'items_purged')::int, 1, 'run_retention deletes expired ttl items');

-- Subjects: erase and export reach a user's items.
SELECT is((memory.export_subject('dave', true)->'manifest'->'observations'->>'count')::int, 2, 'export_subject includes the user''s items');
SELECT ok((SELECT bool_and(e ? 'value' AND NOT e ? 'search_tsv') FROM jsonb_array_elements(memory.export_subject('dave', true)->'sections'->'observations') e),
          'with their values, not their words');
SELECT ok((memory.erase_subject('dave')->>'observations')::int >= 2, 'erase_subject erases them');
SELECT is((SELECT count(*) FROM memory.observations WHERE user_id = 'dave'), 0::bigint, 'gone');

-- A writer's INSERT of an item is held to the same rules.
SET ROLE it_writer;
SELECT throws_ok($$ INSERT INTO memory.observations (org_id, namespace, key, value, content) VALUES ('acme', ARRAY['x'], 'k', '{"ssn": "123-45-6789"}', 'harmless') $$,
                 '23514', NULL, 'an item whose content is not its value''s text is refused');
INSERT INTO memory.observations (org_id, content) VALUES ('acme', 'a plain observation');
SELECT is((SELECT count(*) FROM memory.observations WHERE content = 'a plain observation' AND key IS NULL), 1::bigint, 'a plain observation is as before');

-- Bad input: 22023, nothing written.
SELECT throws_ok($$ SELECT memory.put('', ARRAY['a'], 'k', '{}') $$, '22023', NULL, 'blank org');
SELECT throws_ok($$ SELECT memory.put('acme', NULL, 'k', '{}') $$, '22023', NULL, 'NULL namespace');
SELECT throws_ok($$ SELECT memory.put('acme', '{}', 'k', '{}') $$, '22023', NULL, 'empty namespace');
SELECT throws_ok($$ SELECT memory.put('acme', ARRAY['a.b'], 'k', '{}') $$, '22023', 'memory.put: namespace label 1 contains a period', 'a label with a period');
SELECT throws_ok($$ SELECT memory.put('acme', ARRAY['a', ' '], 'k', '{}') $$, '22023', 'memory.put: namespace label 2 is blank', 'a blank label');
SELECT throws_ok($$ SELECT memory.put('acme', array_fill('a'::text, ARRAY[21]), 'k', '{}') $$, '22023', NULL, '21 labels');
SELECT throws_ok($$ SELECT memory.put('acme', ARRAY[repeat('a', 257)], 'k', '{}') $$, '22023', NULL, 'a label over 256 bytes');
SELECT throws_ok($$ SELECT memory.put('acme', ARRAY['a'], '', '{}') $$, '22023', 'memory.put: the key is blank', 'blank key');
SELECT throws_ok($$ SELECT memory.put('acme', ARRAY['a'], repeat('k', 1025), '{}') $$, '22023', NULL, 'a key over 1024 bytes');
SELECT throws_ok($$ SELECT memory.put('acme', ARRAY['a'], 'k', '[1]') $$, '22023', NULL, 'a value that is not an object');
SELECT throws_ok($$ SELECT memory.put('acme', ARRAY['a'], 'k', jsonb_build_object('x', repeat('y', 1048577))) $$, '22023', NULL, 'a value over 1 MiB');
SELECT throws_ok($$ SELECT memory.put('acme', ARRAY['a'], 'k', (repeat('{"a":', 70) || '1' || repeat('}', 70))::jsonb) $$, '22023', NULL, 'nested over 64 levels');
SELECT throws_ok($$ SELECT memory.put('acme', ARRAY['a'], 'k', '{}', index => ARRAY['$.a ? (@ like_regex "x")']) $$, '22023', NULL, 'an index path that is not a plain path');
SELECT throws_ok($$ SELECT memory.put('acme', ARRAY['a'], 'k', '{}', ttl => interval '-1 hour') $$, '22023', NULL, 'a negative ttl');
SELECT throws_ok($$ SELECT memory.get('acme', ARRAY['a.b'], 'k') $$, '22023', NULL, 'get checks the address');
SELECT throws_ok($$ SELECT memory.list_namespaces('acme', k => 0) $$, '22023', NULL, 'list_namespaces: k 0');
RESET ROLE;
SELECT is((SELECT count(*) FROM memory.observations WHERE namespace = ARRAY['a'] OR key = 'k'), 0::bigint, 'bad input wrote nothing');

-- ------------------------------------------------------------------------------------------------
-- search under a prefix (read through observations_item_prefix): label by label
SELECT is(memory_internal._item_ns_path(ARRAY['users', 'u1']), 'users.u1.', 'a namespace''s path: each label followed by a period');
SET ROLE it_writer;
SELECT memory.put('acme', ARRAY['pfx', 'u1'], 'a', '{"t": 1}'), memory.put('acme', ARRAY['pfx', 'u10'], 'b', '{"t": 2}'),
       memory.put('acme', ARRAY['pfx', 'u1', 'deep'], 'c', '{"t": 3}');
SELECT is((SELECT array_agg(key ORDER BY key) FROM memory.search('acme', ARRAY['pfx', 'u1'])), ARRAY['a', 'c'],
          'a prefix finds its namespace and those under it, not u10');
-- The prefix is the index range alone (no label holds a '.'): labels next to '.' and '/' in byte
-- order, the range's ends, and LIKE's metacharacters are labels like any other.
SELECT memory.put('acme', ARRAY['pfx', 'u1/'], 'slash', '{"t": 4}'), memory.put('acme', ARRAY['pfx', 'u1-'], 'dash', '{"t": 5}'),
       memory.put('acme', ARRAY['pfx', 'u1%'], 'pct', '{"t": 6}'), memory.put('acme', ARRAY['pfx', 'u_'], 'under', '{"t": 7}'),
       memory.put('acme', ARRAY['pfx', '%'], 'any', '{"t": 8}'), memory.put('acme', ARRAY['pfx', 'u1\'], 'bs', '{"t": 9}'),
       memory.put('acme', ARRAY['pfx', 'u1', '/'], 'd2', '{"t": 10}'), memory.put('acme', ARRAY['pfxu1'], 'flat', '{"t": 11}');
SELECT is((SELECT array_agg(key ORDER BY key) FROM memory.search('acme', ARRAY['pfx', 'u1'])), ARRAY['a', 'c', 'd2'],
          'u1 finds neither u1/, u1-, u1%, u1\ nor u10, and finds u1/''s deeper namespace');
SELECT is((SELECT array_agg(key ORDER BY key) FROM memory.search('acme', ARRAY[p, l])), ARRAY[k], 'the prefix ' || l || ' finds its own only')
  FROM (VALUES ('pfx', 'u1/', 'slash'), ('pfx', 'u1-', 'dash'), ('pfx', 'u1%', 'pct'), ('pfx', 'u_', 'under'), ('pfx', '%', 'any'),
               ('pfx', 'u1\', 'bs')) v(p, l, k);
SELECT is((SELECT count(*) FROM memory.search('acme', ARRAY['pfx'], k => 100)), 10::bigint, 'pfx finds every namespace under it, not pfxu1');
SELECT is((SELECT count(*) FROM memory.search('acme', ARRAY['pf'])), 0::bigint, 'a label is whole: pf finds nothing under pfx');
-- A field of one key that could be an array's index is a path (#>); any other key is read by ->,
-- or equal to a scalar, by containment (an array holding the scalar is not equal to it): the same
-- items every way.
SELECT memory.put('acme', ARRAY['fld'], 'o', '{"0": "zero", "kind": "note", "n": 7, "arr": [5, 6]}'),
       memory.put('acme', ARRAY['fld'], 'p', '{"kind": ["note"], "n": "7", "arr": {"0": 5}}');
SELECT is((SELECT array_agg(key ORDER BY key) FROM memory.search('acme', ARRAY['fld'], filter => f)), ks, f::text)
  FROM (VALUES ('{"kind": "note"}'::jsonb, ARRAY['o']), ('{"kind": ["note"]}', ARRAY['p']), ('{"0": "zero"}', ARRAY['o']),
               ('{"n": {"$gt": 6}}', ARRAY['o']), ('{"n": {"$gte": "7"}}', ARRAY['p']), ('{"arr.0": 5}', ARRAY['o', 'p']),
               ('{"kind": {"$ne": "note"}}', ARRAY['p']), ('{"kind": {"$in": ["note", "x"]}}', ARRAY['o']),
               ('{"kind": {"$contains": "note"}}', ARRAY['o', 'p']), ('{"missing": {"$exists": false}}', ARRAY['o', 'p']),
               ('{"arr": {"$exists": true}, "zero": {"$exists": true}}', NULL), ('{"n": 7.0}', ARRAY['o']),
               ('{"kind": {"$ne": null}}', ARRAY['o', 'p']), ('{"arr": {"0": 5}}', ARRAY['p']), ('{"kind": null}', NULL),
               ('{"arr": 5}', NULL), ('{"kind": {"$eq": "note"}, "n": {"$ne": 7}}', NULL)) v(f, ks);
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
