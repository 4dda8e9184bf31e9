-- SQL-level suite for the second-generation detectors and folding (SPEC §1; issue 16) and the
-- consent layer's sensitive-input gate that calls them by name (SPEC §6, MX007; issue 14).
BEGIN;
SELECT plan(55);

-- The catalogue.
SELECT is((SELECT count(*)::int FROM memory.detectors()), 19, 'nineteen detectors');
SELECT is((SELECT array_agg(name ORDER BY name) FROM memory.detectors() WHERE tier = 'restricted'),
          '{aba_routing,bitcoin_address,card_number,email,ethereum_address,iban,name_dob_address,passport_number,phone,sort_code_account,ssn}',
          'personal data is restricted');
SELECT is((SELECT array_agg(name ORDER BY name) FROM memory.detectors() WHERE tier = 'confidential'),
          '{aws_access_key,github_token,google_api_key,jwt,pem_private_key,slack_token,stripe_key,url_credentials}',
          'secrets are confidential');
SELECT is((SELECT context_words FROM memory.detectors() WHERE name = 'aba_routing'), '{routing,aba,rtn,transit}',
          'context words are listed');

SELECT is((SELECT context_words FROM memory.detectors() WHERE name = 'passport_number'), '{passport}', 'the passport keyword is listed');

-- Issue 46: what a bank's reviewer calls personal data; dates, numbers and addresses alone stay as they are.
SELECT is(memory.detect('sort code 20-00-00, account 12345678'), '{sort_code_account}', 'a UK sort code with its account number');
SELECT is(memory.detect('branch sort code 20-00-00 handles ticket 12345678'), '{}', 'a sort code without an account number');
SELECT is(memory.detect('passport no. 123456789'), '{passport_number}', 'a passport number after its keyword');
SELECT is(memory.detect('the passport renewal takes 10 weeks; 123456789 forms were filed'), '{}', 'the word passport near an unrelated number');
SELECT is(memory.detect('Mr John Smith, DOB 14/03/1982, lives at 12 Acacia Avenue, Leeds'), '{name_dob_address}',
          'a name, a date of birth and a street address in one memory');
SELECT is(memory.detect('Mr John Smith visited 12 Acacia Avenue on 14/03/1982'), '{}', 'a name, a date and an address, but no date of birth');
SELECT is(memory.detect('Mr John Smith, DOB 31/02/1982, lives at 12 Acacia Avenue'), '{}', 'no 31 February');
SELECT is(memory.classify_explain('Jane Smith, born 4 July 1975, moved to SW1A 1AA')->>'rule', 'detector_name_dob_address',
          'the rule names the combination');
SELECT ok(strpos(memory.classify_explain('Mr John Smith, DOB 14/03/1982, 12 Acacia Avenue, passport no. 123456789')::text, 'Smith') = 0
          AND strpos(memory.classify_explain('Mr John Smith, DOB 14/03/1982, 12 Acacia Avenue, passport no. 123456789')::text, '123456789') = 0,
          'no name, date or number appears in an explanation');

-- memory.detect by name.
SELECT is(memory.detect('write to jane.doe@example.com'), '{email}', 'an e-mail address');
SELECT is(memory.detect('IBAN GB82 WEST 1234 5698 7654 32, card 4111 1111 1111 1111'), '{card_number,iban}',
          'every match, in catalogue order');
SELECT is(memory.detect('GB82 WEST 1234 5698 7654 33'), '{}', 'a wrong mod-97 checksum is no IBAN');
SELECT is(memory.detect('commit 3f2a9c1d8e7b6a5f4e3d2c1b0a9f8e7d6c5b4a39, id 123e4567-e89b-12d3-a456-426614174000, 2026-11-23T17:05:31Z, order ORD-2024-004512, v10.4.15'),
          '{}', 'SHAs, UUIDs, timestamps, order numbers and versions do not fire');
SELECT is(memory.detect('0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed'), '{ethereum_address}', 'an EIP-55 address');
SELECT is(memory.detect('0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAeD'), '{}', 'a broken EIP-55 checksum');
SELECT is(memory.detect('routing 021000021'), '{aba_routing}', 'a routing number with its word');
SELECT is(memory.detect('021000021'), '{}', 'and not without it');
SELECT is(memory.detect('ｊａｎｅ＠ｅｘａｍｐｌｅ．ｃｏｍ'), '{email}', 'full-width forms are folded first');
SELECT is(memory.detect(E'jane\u200B@exam\u00ADple.com'), '{email}', 'invisible characters are ignored');
SELECT is(memory.detect('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 and +44 20 7946 0958', '{phone}'), '{phone}',
          'only the detectors asked for');
SELECT is(memory.detect('anything', '{}'), '{}', 'an empty list asks for none');
SELECT is(memory.detect(NULL), NULL, 'NULL content gives NULL');
SELECT throws_ok($$ SELECT memory.detect('x', '{email,nope}') $$, '22023', 'unknown detector "nope"', 'an unknown name is 22023');
SELECT throws_ok($$ SELECT memory.detect('x', ARRAY['email', NULL]) $$, '22023', 'detector names must not be NULL', 'so is a NULL name');

-- Classification through SQL: folding, evidence as written, detector names and never values.
SELECT is(memory.classify('my ｓｓｎ is on file'), 'restricted', 'full-width keyword');
SELECT is(memory.classify(E'the pass\u200Bword'), 'confidential', 'zero-width space inside a keyword');
SELECT is(memory.classify('x', ARRAY['src/ａｕｔｈ/x.ts']), 'confidential', 'full-width path segment');
SELECT is(memory.classify_explain('my ｓｓｎ is on file')->>'evidence', 'ｓｓｎ', 'evidence is what the writer wrote');
SELECT is(memory.classify_explain('mail jane@example.com, key sk_live_4eC39HqLyjWDarjtT1zdp7dc')->'detectors',
          '["email", "stripe_key"]'::jsonb, 'explain names every detector that matched');
SELECT is(memory.classify_explain('mail jane@example.com')->>'rule', 'detector_email', 'the rule names the deciding one');
SELECT ok(strpos(memory.classify_explain('mail jane@example.com, card 4111 1111 1111 1111')::text, 'jane') = 0
          AND strpos(memory.classify_explain('mail jane@example.com, card 4111 1111 1111 1111')::text, '4111') = 0,
          'no detector value appears in an explanation');
SELECT is(memory.classify_explain('x')->>'detector_set', 'on', 'the detector set in force');

-- The setting: on (default), first_generation (0.1.0's set), off; 0.1.0's boolean spellings.
SET LOCAL memory.classify_detectors = first_generation;
SELECT is(memory.classify('mail jane@example.com'), 'internal', 'first_generation: no e-mail detector');
SELECT is(memory.classify('4111 1111 1111 1111'), 'restricted', 'first_generation: card numbers still');
SET LOCAL memory.classify_detectors = off;
SELECT is(memory.classify('4111 1111 1111 1111'), 'internal', 'off: the seed rules only');
SET LOCAL memory.classify_detectors = true;
SELECT is(memory.classify('mail jane@example.com'), 'restricted', 'true is on (0.1.0 spelling)');
RESET memory.classify_detectors;

-- The managed store classifies with them.
INSERT INTO memory.observations (id, org_id, content)
VALUES ('00000000-0000-0000-0000-0000000000d1', 'acme', 'refund to DE89 3704 0044 0532 0130 00'),
       ('00000000-0000-0000-0000-0000000000d2', 'acme', 'deploy with postgres://app:s3cret@db.internal/prod');
SELECT is((SELECT array_agg(classification::text ORDER BY id) FROM memory.observations
            WHERE id IN ('00000000-0000-0000-0000-0000000000d1', '00000000-0000-0000-0000-0000000000d2')),
          '{restricted,confidential}', 'an IBAN and a URL with credentials, on insert');

-- Any role may call the detectors (pure functions); none may choose a smaller set.
SELECT memory.setup_roles();
CREATE ROLE det_nobody LOGIN;
SET ROLE det_nobody;
SELECT is(memory.detect('jane@example.com'), '{email}', 'a role with no grants may run the detectors');
SELECT is(memory.detect('passport no. 123456789'), '{passport_number}', 'the new ones too');
SELECT throws_ok($$ SET memory.classify_detectors = first_generation $$, '42501', NULL,
                 'but may not turn detectors down');
RESET ROLE;

-- The application's writer, bound to its org, stores the three memories of the trial: each is restricted.
CREATE ROLE det_writer LOGIN IN ROLE memory_writer;
SELECT memory.grant_org('det_writer', 'bank');
SET ROLE det_writer;
INSERT INTO memory.observations (id, org_id, content) VALUES
  ('00000000-0000-0000-0000-0000000000e1', 'bank', 'Customer Mr John Smith, DOB 14/03/1982, lives at 12 Acacia Avenue, Leeds LS1 4AB'),
  ('00000000-0000-0000-0000-0000000000e2', 'bank', 'Refund to sort code 20-00-00, account 12345678'),
  ('00000000-0000-0000-0000-0000000000e3', 'bank', 'Identity checked: passport no. 123456789'),
  ('00000000-0000-0000-0000-0000000000e4', 'bank', 'Branch 20-00-00 opened on 14/03/1982 at 12 Acacia Avenue; 123456789 forms');
RESET ROLE;
SELECT is((SELECT array_agg(classification::text ORDER BY id) FROM memory.observations WHERE org_id = 'bank'),
          '{restricted,restricted,restricted,internal}', 'written as the application: the three are restricted, the look-alike internal');

-- The sensitive-input gate of user contexts (MX007): the detector and the field are named, the
-- value never is, and nothing is written.
SELECT memory.grant_consent('acme', 'sg1', '{create_task,save_to_thread,save_to_profile}');
SELECT throws_ok($$ INSERT INTO memory.user_contexts (org_id, user_id, scope, thread_id, source, fields)
                    VALUES ('acme', 'sg1', 'thread', 'th-s', 'save_as_thread', '{"user_focus_reason": "reach me at jane@example.com"}') $$,
                 'MX007', 'sensitive input refused: user context field "user_focus_reason" matches the email detector',
                 'an e-mail address in a thread context');
SELECT throws_ok($$ INSERT INTO memory.user_contexts (org_id, user_id, scope, task_id, source, fields)
                    VALUES ('acme', 'sg1', 'task', 't-s', 'task', '{"constraints": "call +1 415 555 2671 first"}') $$,
                 'MX007', 'sensitive input refused: user context field "constraints" matches the phone detector',
                 'a phone number in a task context');
SELECT throws_ok($$ INSERT INTO memory.user_contexts (org_id, user_id, scope, source, fields)
                    VALUES ('acme', 'sg1', 'profile', 'onboarding', '{"research_style": "my wallet 0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed"}') $$,
                 'MX007', 'sensitive input refused: user context field "research_style" matches the ethereum_address detector',
                 'a wallet address in a profile');
SELECT throws_ok($$ INSERT INTO memory.user_contexts (org_id, user_id, scope, task_id, source, fields)
                    VALUES ('acme', 'sg1', 'task', 't-s', 'task', '{"user_focus_reason": "use 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"}') $$,
                 'MX007', 'sensitive input refused: user context field "user_focus_reason" matches the github_token detector',
                 'an API token');
SELECT throws_ok($$ INSERT INTO memory.user_contexts (org_id, user_id, scope, task_id, source, fields)
                    VALUES ('acme', 'sg1', 'task', 't-s', 'task', '{"user_focus_reason": "-----BEGIN EC PRIVATE KEY-----"}') $$,
                 'MX007', 'sensitive input refused: user context field "user_focus_reason" matches the pem_private_key detector',
                 'a private key');
SELECT throws_ok($$ INSERT INTO memory.user_contexts (org_id, user_id, scope, task_id, source, fields)
                    VALUES ('acme', 'sg1', 'task', 't-s', 'task', '{"user_focus_reason": "ｊａｎｅ＠ｅｘａｍｐｌｅ．ｃｏｍ"}') $$,
                 'MX007', NULL, 'full-width evasion is caught too');
SELECT throws_ok($$ INSERT INTO memory.user_contexts (org_id, user_id, scope, task_id, source, fields)
                    VALUES ('acme', 'sg1', 'task', 't-s', 'task', '{"constraints": "use passport no. 123456789"}') $$,
                 'MX007', 'sensitive input refused: user context field "constraints" matches the passport_number detector',
                 'a passport number');
SELECT is((SELECT count(*)::int FROM memory.user_contexts WHERE user_id = 'sg1'), 0, 'nothing was written');
SELECT lives_ok($$ INSERT INTO memory.user_contexts (org_id, user_id, scope, task_id, source, fields)
                   VALUES ('acme', 'sg1', 'task', 't-s', 'task', '{"user_focus_reason": "SOL thesis after block 245,812,331 on 2026-11-23", "research_depth": "deep"}') $$,
                'ordinary text with numbers and dates is kept');

SELECT * FROM finish();
ROLLBACK;
