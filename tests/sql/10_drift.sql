-- SQL-level suite for the persona drift detectors (SPEC §6, seed §4, §9; issue 14).
BEGIN;
SELECT plan(36);

SELECT memory.grant_consent('acme', 'u1', '{create_task,save_to_profile}');
SELECT memory.grant_consent('acme', 'quiet', '{create_task}');

-- grade_reversal: the same object, the other polarity, within 14 days.
INSERT INTO memory.user_feedback (org_id, user_id, related_object_ref, cognition_object, rating, created_at) VALUES
  ('acme', 'u1', 'snapshot:1', '{"type": "asset", "ref": "SOL"}', 'thumbs_up', now() - interval '5 days'),
  ('acme', 'u1', 'snapshot:2', '{"type": "asset", "ref": "ETH"}', 'thumbs_up', now() - interval '20 days');
INSERT INTO memory.user_feedback (org_id, user_id, related_object_ref, cognition_object, rating) VALUES
  ('acme', 'u1', 'snapshot:1', '{"type": "asset", "ref": "SOL"}', 'not_helpful');
SELECT is((SELECT count(*)::int FROM memory.persona_drift_log WHERE signal_kind = 'grade_reversal'), 1, 'a reversal within 14 days is drift');
SELECT is((SELECT prior_signal->>'value' || ' -> ' || (current_signal->>'value') || ' alert=' || triggers_alert
             FROM memory.persona_drift_log WHERE signal_kind = 'grade_reversal'),
          'thumbs_up -> not_helpful alert=true', 'with both signals, and it triggers an alert');
SELECT ok((SELECT drift_id ~ '^drift_\d{4}-\d\d-\d\dT[0-9:.]+Z_[0-9a-f]{6}$' AND schema_version = '1.0'
             FROM memory.persona_drift_log WHERE signal_kind = 'grade_reversal'), 'the seed''s id and schema version');
INSERT INTO memory.user_feedback (org_id, user_id, related_object_ref, rating) VALUES ('acme', 'u1', 'snapshot:2', 'not_helpful');
SELECT is((SELECT count(*)::int FROM memory.persona_drift_log WHERE signal_kind = 'grade_reversal'), 1, 'not after 20 days');
INSERT INTO memory.user_feedback (org_id, user_id, related_object_ref, rating) VALUES ('acme', 'u1', 'snapshot:1', 'disagree');
SELECT is((SELECT count(*)::int FROM memory.persona_drift_log WHERE signal_kind = 'grade_reversal'), 1, 'nor for the same polarity again');
UPDATE memory.drift_thresholds SET value = 30 WHERE name = 'grade_reversal_days';
INSERT INTO memory.user_feedback (org_id, user_id, related_object_ref, rating) VALUES ('acme', 'u1', 'snapshot:2', 'agree');
SELECT is((SELECT count(*)::int FROM memory.persona_drift_log WHERE signal_kind = 'grade_reversal'), 2,
          'thresholds are read from memory.drift_thresholds (30 days now)');

-- feedback_conflict: opposing keywords on the same kind of object, at least twice.
INSERT INTO memory.user_feedback (org_id, user_id, related_object_ref, cognition_object, comment) VALUES
  ('acme', 'u1', 'snapshot:3', '{"type": "theme"}', 'I agree with the thesis'),
  ('acme', 'u1', 'snapshot:4', '{"type": "event"}', 'I agree');
INSERT INTO memory.user_feedback (org_id, user_id, related_object_ref, cognition_object, comment) VALUES
  ('acme', 'u1', 'snapshot:5', '{"type": "theme"}', 'I disagree now');
SELECT is((SELECT count(*)::int FROM memory.persona_drift_log WHERE signal_kind = 'feedback_conflict'), 0, 'one opposing comment is not enough');
INSERT INTO memory.user_feedback (org_id, user_id, related_object_ref, cognition_object, comment) VALUES
  ('acme', 'u1', 'snapshot:6', '{"type": "theme"}', 'agree, mostly');
SELECT is((SELECT count(*)::int FROM memory.persona_drift_log WHERE signal_kind = 'feedback_conflict'), 0,
          'agreeing again opposes only one comment');
INSERT INTO memory.user_feedback (org_id, user_id, related_object_ref, cognition_object, comment) VALUES
  ('acme', 'u1', 'snapshot:7', '{"type": "theme"}', '这个判断错了');
SELECT is((SELECT count(*)::int FROM memory.persona_drift_log WHERE signal_kind = 'feedback_conflict'), 1,
          'a comment opposing two earlier ones on the same kind of object is drift (错 by the lexicon)');
SELECT is((SELECT triggers_alert FROM memory.persona_drift_log WHERE signal_kind = 'feedback_conflict'), false, 'without an alert');
SELECT ok((SELECT prior_signal->>'value' = 'positive' AND prior_signal->>'captured_in_object_ref' IN ('snapshot:3', 'snapshot:6')
                  AND (prior_signal->>'captured_at')::timestamptz = now() AND current_signal->>'value' = 'negative'
                  AND current_signal->>'captured_in_object_ref' = 'snapshot:7'
             FROM memory.persona_drift_log WHERE signal_kind = 'feedback_conflict'),
          'the prior signal is the latest opposing comment (the seed''s value, captured_at, captured_in_object_ref)');

-- refresh_stance_flip: more than 5 changed inferences and a thesis unlike the one 14+ days before.
INSERT INTO memory.thread_refreshes (org_id, user_id, thread_id, main_thesis, changed_inferences, created_at)
VALUES ('acme', 'u1', 'th-1', 'SOL bullish on unlock demand from staking', 0, now() - interval '20 days');
INSERT INTO memory.thread_refreshes (org_id, user_id, thread_id, main_thesis, changed_inferences)
VALUES ('acme', 'u1', 'th-1', 'Bearish: ETH rotation drains liquidity', 5);
SELECT is((SELECT count(*)::int FROM memory.persona_drift_log WHERE signal_kind = 'refresh_stance_flip'), 0, 'five changed inferences are not enough');
INSERT INTO memory.thread_refreshes (org_id, user_id, thread_id, main_thesis, changed_inferences)
VALUES ('acme', 'u1', 'th-1', 'SOL bullish on unlock demand, staking steady', 9);
SELECT is((SELECT count(*)::int FROM memory.persona_drift_log WHERE signal_kind = 'refresh_stance_flip'), 0, 'nor a thesis that kept its words');
INSERT INTO memory.thread_refreshes (org_id, user_id, thread_id, main_thesis, changed_inferences)
VALUES ('acme', 'u1', 'th-1', 'Bearish: ETH rotation drains liquidity', 6);
SELECT is((SELECT object_ref FROM memory.persona_drift_log WHERE signal_kind = 'refresh_stance_flip'), 'thread:th-1',
          'a new thesis with six changed inferences is a stance flip');

-- watch_question_resolved_then_reopened: within 14 days, not within the first hour.
INSERT INTO memory.watch_question_updates (org_id, user_id, watch_question_id, status, created_at) VALUES
  ('acme', 'u1', 'wq-1', 'resolved', now() - interval '3 days'),
  ('acme', 'u1', 'wq-2', 'resolved', now() - interval '30 minutes'),
  ('acme', 'u1', 'wq-3', 'resolved', now() - interval '20 days');
INSERT INTO memory.watch_question_updates (org_id, user_id, watch_question_id, status) VALUES
  ('acme', 'u1', 'wq-1', 'reopened'), ('acme', 'u1', 'wq-2', 'reopened'), ('acme', 'u1', 'wq-3', 'reopened');
SELECT is(ARRAY(SELECT object_ref FROM memory.persona_drift_log WHERE signal_kind = 'watch_question_resolved_then_reopened'),
          ARRAY['watch_question:wq-1'], 'reopened after 3 days: drift; after 30 minutes or 20 days: not');

-- Only users whose profile consent is in force are observed; drift never changes a profile.
INSERT INTO memory.user_feedback (org_id, user_id, related_object_ref, rating, created_at) VALUES
  ('acme', 'quiet', 'snapshot:1', 'thumbs_up', now() - interval '1 day');
INSERT INTO memory.user_feedback (org_id, user_id, related_object_ref, rating) VALUES ('acme', 'quiet', 'snapshot:1', 'not_helpful');
SELECT is((SELECT count(*)::int FROM memory.persona_drift_log WHERE user_id = 'quiet'), 0, 'no drift is logged without save_to_profile');
SELECT is((SELECT count(*)::int FROM memory.user_contexts), 0, 'drift wrote no context');

-- Alerts and events.
SELECT is((SELECT drift_in_window::int FROM memory.drift_alerts WHERE user_id = 'u1'), 5, 'drift_alerts: five rows in 24 hours');
SELECT is((SELECT count(*)::int FROM public.audit_log_now() WHERE event_type = 'memory.drift.detected'), 5, 'each drift is an event');
SELECT ok(NOT EXISTS (SELECT 1 FROM memory.audit_log WHERE event_type = 'memory.drift.detected'
                        AND (payload::text LIKE '%agree%' OR payload::text LIKE '%判断%' OR payload::text LIKE '%thesis%' OR payload::text LIKE '%u1%')),
          'events carry no feedback text and no plain user id');
-- Boundaries (issue 14), for another user: 13 vs 15 days, Jaccard 0.19 vs 0.21, reopened after
-- 30 minutes vs 2 hours. The threshold goes back to 14 days in this transaction: the detectors'
-- cached thresholds follow the table at once.
SELECT memory.grant_consent('acme', 'u2', '{create_task,save_to_profile}');
UPDATE memory.drift_thresholds SET value = 14 WHERE name = 'grade_reversal_days';
INSERT INTO memory.user_feedback (org_id, user_id, related_object_ref, rating, created_at) VALUES
  ('acme', 'u2', 'b:13', 'thumbs_up', now() - interval '13 days'),
  ('acme', 'u2', 'b:15', 'thumbs_up', now() - interval '15 days');
INSERT INTO memory.user_feedback (org_id, user_id, related_object_ref, rating) VALUES
  ('acme', 'u2', 'b:13', 'disagree'), ('acme', 'u2', 'b:15', 'disagree');
SELECT is(ARRAY(SELECT object_ref FROM memory.persona_drift_log WHERE user_id = 'u2' AND signal_kind = 'grade_reversal'),
          ARRAY['b:13'], 'a rating reversed after 13 days is drift, after 15 days it is not');
-- The window counts calendar days in the session's time zone, as timestamptz - interval does:
-- across the start of daylight saving time (New York, 2026-03-08) 14 days are 335 hours, so a
-- rating 14 days to the local minute before is outside, one a minute later inside.
SET LOCAL TIME ZONE 'America/New_York';
INSERT INTO memory.user_feedback (org_id, user_id, related_object_ref, rating, created_at) VALUES
  ('acme', 'u2', 'dst:edge', 'thumbs_up', '2026-03-01 12:00'), ('acme', 'u2', 'dst:in', 'thumbs_up', '2026-03-01 12:01');
INSERT INTO memory.user_feedback (org_id, user_id, related_object_ref, rating, created_at) VALUES
  ('acme', 'u2', 'dst:edge', 'disagree', '2026-03-15 12:00'), ('acme', 'u2', 'dst:in', 'disagree', '2026-03-15 12:00');
SELECT is(ARRAY(SELECT object_ref FROM memory.persona_drift_log WHERE user_id = 'u2' AND object_ref LIKE 'dst:%'),
          ARRAY['dst:in'], 'the grade_reversal window is 14 calendar days of the session''s time zone (335 hours across a DST start)');
RESET TimeZone;
-- Two theses 20 days apart with 100 distinct words between them, sharing 19 or 21.
CREATE FUNCTION pg_temp.words(prefix text, n int) RETURNS text LANGUAGE sql
AS $f$ SELECT string_agg(prefix || i, ' ') FROM generate_series(1, n) i $f$;
INSERT INTO memory.thread_refreshes (org_id, user_id, thread_id, main_thesis, changed_inferences, created_at) VALUES
  ('acme', 'u2', 'th-19', pg_temp.words('s', 19) || ' ' || pg_temp.words('a', 40), 0, now() - interval '20 days'),
  ('acme', 'u2', 'th-21', pg_temp.words('s', 21) || ' ' || pg_temp.words('a', 39), 0, now() - interval '20 days');
INSERT INTO memory.thread_refreshes (org_id, user_id, thread_id, main_thesis, changed_inferences) VALUES
  ('acme', 'u2', 'th-19', pg_temp.words('s', 19) || ' ' || pg_temp.words('b', 41), 6),
  ('acme', 'u2', 'th-21', pg_temp.words('s', 21) || ' ' || pg_temp.words('b', 40), 6);
SELECT is(ARRAY(SELECT object_ref FROM memory.persona_drift_log WHERE user_id = 'u2' AND signal_kind = 'refresh_stance_flip'),
          ARRAY['thread:th-19'], 'a thesis at Jaccard 0.19 is a stance flip, at 0.21 it is not');
SELECT is((SELECT (current_signal->>'changed_inferences')::int FROM memory.persona_drift_log WHERE object_ref = 'thread:th-19'), 6,
          'the flip records its changed inferences');
INSERT INTO memory.watch_question_updates (org_id, user_id, watch_question_id, status, created_at) VALUES
  ('acme', 'u2', 'wq-30m', 'resolved', now() - interval '30 minutes'),
  ('acme', 'u2', 'wq-2h', 'resolved', now() - interval '2 hours');
INSERT INTO memory.watch_question_updates (org_id, user_id, watch_question_id, status) VALUES
  ('acme', 'u2', 'wq-30m', 'reopened'), ('acme', 'u2', 'wq-2h', 'reopened');
SELECT is(ARRAY(SELECT object_ref FROM memory.persona_drift_log WHERE user_id = 'u2' AND signal_kind = 'watch_question_resolved_then_reopened'),
          ARRAY['watch_question:wq-2h'], 'reopened after 2 hours is drift, after 30 minutes it is not');
-- A lexicon edit applies to the next comment at once; stored polarities stay.
INSERT INTO memory.drift_lexicon (word, polarity) VALUES ('wrong', -1);
INSERT INTO memory.user_feedback (org_id, user_id, related_object_ref, comment) VALUES ('acme', 'u2', 'c:1', 'That call was WRONG.');
SELECT is((SELECT comment_polarity::int FROM memory.user_feedback WHERE related_object_ref = 'c:1'), -1,
          'a word added to the lexicon sets the polarity of the next comment');
SELECT is((SELECT count(*)::int FROM memory.user_feedback WHERE comment_polarity IS NOT NULL AND user_id = 'u1'), 5,
          'earlier comments keep the polarity they were written with');

-- feedback_conflict_min = 0 flags every polar comment; with no earlier opposing comment the
-- prior signal names only its value (no time, no object).
SELECT memory.grant_consent('acme', 'u3', '{create_task,save_to_profile}');
UPDATE memory.drift_thresholds SET value = 0 WHERE name = 'feedback_conflict_min';
INSERT INTO memory.user_feedback (org_id, user_id, related_object_ref, comment) VALUES ('acme', 'u3', 'c:9', 'I agree');
SELECT is((SELECT prior_signal FROM memory.persona_drift_log WHERE user_id = 'u3' AND signal_kind = 'feedback_conflict'),
          '{"value": "negative"}'::jsonb, 'a conflict with no earlier opposing comment has no prior time or object');
UPDATE memory.drift_thresholds SET value = 2 WHERE name = 'feedback_conflict_min';

-- The drift row is written straight into the table: its signals and summary are what
-- jsonb_build_object, to_char and format make of the same values, in the session's time zone.
SET LOCAL TimeZone = 'America/St_Johns';
SELECT memory.grant_consent('acme', 'u4', '{create_task,save_to_profile}');
INSERT INTO memory.user_feedback (org_id, user_id, related_object_ref, cognition_object, rating, created_at) VALUES
  ('acme', 'u4', 'tz:1', '{"type": "asset", "ref": "ETH"}', 'agree', now() - interval '3 days 5 hours');
INSERT INTO memory.user_feedback (org_id, user_id, related_object_ref, cognition_object, rating) VALUES
  ('acme', 'u4', 'tz:1', '{"type": "asset", "ref": "ETH"}', 'disagree');
WITH d AS (SELECT * FROM memory.persona_drift_log WHERE user_id = 'u4'),
     p AS (SELECT created_at FROM memory.user_feedback WHERE user_id = 'u4' AND rating = 'agree'),
     c AS (SELECT created_at FROM memory.user_feedback WHERE user_id = 'u4' AND rating = 'disagree')
SELECT is((SELECT (d.prior_signal, d.current_signal, d.cognition_object, d.signal_kind::text, d.triggers_alert, d.schema_version, d.object_ref)::text FROM d),
          (SELECT (jsonb_build_object('value', 'agree', 'captured_at', p.created_at, 'captured_in_object_ref', 'tz:1'),
                   jsonb_build_object('value', 'disagree', 'captured_at', c.created_at, 'captured_in_object_ref', 'tz:1'),
                   '{"type": "asset", "ref": "ETH"}'::jsonb, 'grade_reversal', true, '1.0', 'tz:1')::text FROM p, c),
          'the drift row''s signals are jsonb_build_object''s, timestamps in the session''s time zone');
WITH d AS (SELECT * FROM memory.persona_drift_log WHERE user_id = 'u4'),
     p AS (SELECT created_at FROM memory.user_feedback WHERE user_id = 'u4' AND rating = 'agree'),
     c AS (SELECT created_at FROM memory.user_feedback WHERE user_id = 'u4' AND rating = 'disagree')
SELECT is((SELECT delta_summary FROM d),
          (SELECT format('%s graded agree, then %s graded disagree', to_char(p.created_at, 'YYYY-MM-DD'), to_char(c.created_at, 'YYYY-MM-DD')) FROM p, c),
          'the summary is format() of to_char() of both times');
SELECT is((SELECT created_at FROM memory.persona_drift_log WHERE user_id = 'u4'), now(), 'the drift row is stamped with the transaction''s time, as DEFAULT now()');
RESET TimeZone;

SELECT throws_ok($$ INSERT INTO memory.user_feedback (org_id, user_id, related_object_ref, rating) VALUES ('acme', 'u1', 'x', 'meh') $$,
                 '23514', NULL, 'an unknown rating is refused');

-- Every detector compares a user only with the same user's earlier rows (issue 34 item 17), as a
-- tenant-bound writer writes them: Bob's refresh of a thread, resolution of a question, rating of
-- an object and comments on a kind of object never make drift for Alice; Alice's own do.
SELECT memory.setup_roles();
CREATE ROLE drift_writer IN ROLE memory_writer;
SELECT memory.grant_org('drift_writer', 'acme');
SET ROLE drift_writer;
SELECT memory.grant_consent('acme', 'alice', '{create_task,save_to_profile}');
SELECT memory.grant_consent('acme', 'bob', '{create_task,save_to_profile}');
INSERT INTO memory.thread_refreshes (org_id, user_id, thread_id, main_thesis, changed_inferences, created_at)
VALUES ('acme', 'bob', 'th-x', 'SOL bullish on unlock demand from staking', 0, now() - interval '20 days');
INSERT INTO memory.watch_question_updates (org_id, user_id, watch_question_id, status, created_at)
VALUES ('acme', 'bob', 'wq-x', 'resolved', now() - interval '3 days');
INSERT INTO memory.user_feedback (org_id, user_id, related_object_ref, cognition_object, rating, comment, created_at) VALUES
  ('acme', 'bob', 'x:1', '{"type": "sector"}', 'thumbs_up', NULL, now() - interval '2 days'),
  ('acme', 'bob', 'x:2', '{"type": "sector"}', NULL, 'I agree', now() - interval '2 days'),
  ('acme', 'bob', 'x:3', '{"type": "sector"}', NULL, 'I agree', now() - interval '2 days');
INSERT INTO memory.thread_refreshes (org_id, user_id, thread_id, main_thesis, changed_inferences)
VALUES ('acme', 'alice', 'th-x', 'Bearish: ETH rotation drains liquidity', 9);
INSERT INTO memory.watch_question_updates (org_id, user_id, watch_question_id, status) VALUES ('acme', 'alice', 'wq-x', 'reopened');
INSERT INTO memory.user_feedback (org_id, user_id, related_object_ref, cognition_object, rating, comment) VALUES
  ('acme', 'alice', 'x:1', '{"type": "sector"}', 'not_helpful', NULL),
  ('acme', 'alice', 'x:4', '{"type": "sector"}', NULL, 'I disagree');
RESET ROLE;
SELECT is((SELECT count(*)::int FROM memory.persona_drift_log WHERE user_id IN ('alice', 'bob')), 0,
          'Bob''s refresh, resolution, rating and comments make no drift for Alice (nor for Bob)');
SET ROLE drift_writer;
INSERT INTO memory.thread_refreshes (org_id, user_id, thread_id, main_thesis, changed_inferences, created_at)
VALUES ('acme', 'alice', 'th-x', 'SOL bullish on unlock demand from staking', 0, now() - interval '18 days');
INSERT INTO memory.thread_refreshes (org_id, user_id, thread_id, main_thesis, changed_inferences)
VALUES ('acme', 'alice', 'th-x', 'Bearish: ETH rotation drains liquidity', 9);
INSERT INTO memory.watch_question_updates (org_id, user_id, watch_question_id, status, created_at)
VALUES ('acme', 'alice', 'wq-x', 'resolved', now() - interval '2 days');
INSERT INTO memory.watch_question_updates (org_id, user_id, watch_question_id, status) VALUES ('acme', 'alice', 'wq-x', 'reopened');
INSERT INTO memory.user_feedback (org_id, user_id, related_object_ref, cognition_object, rating, comment, created_at) VALUES
  ('acme', 'alice', 'x:5', '{"type": "sector"}', 'thumbs_up', NULL, now() - interval '1 day'),
  ('acme', 'alice', 'x:6', '{"type": "sector"}', NULL, 'I agree', now() - interval '1 day'),
  ('acme', 'alice', 'x:7', '{"type": "sector"}', NULL, 'I agree', now() - interval '1 day');
INSERT INTO memory.user_feedback (org_id, user_id, related_object_ref, cognition_object, rating, comment) VALUES
  ('acme', 'alice', 'x:5', '{"type": "sector"}', 'disagree', NULL),
  ('acme', 'alice', 'x:8', '{"type": "sector"}', NULL, 'I disagree');
RESET ROLE;
SELECT is(ARRAY(SELECT signal_kind::text FROM memory.persona_drift_log WHERE user_id = 'alice' ORDER BY 1),
          '{feedback_conflict,grade_reversal,refresh_stance_flip,watch_question_resolved_then_reopened}',
          'Alice''s own sequence is drift, once for each detector');
SELECT is(ARRAY(SELECT (d.prior_signal->>'captured_at')::timestamptz FROM memory.persona_drift_log d
                 WHERE d.user_id = 'alice' ORDER BY d.signal_kind::text),
          ARRAY[now() - interval '1 day', now() - interval '1 day', now() - interval '18 days', now() - interval '2 days'],
          'each prior signal is Alice''s own earlier row');
SELECT is((SELECT count(*)::int FROM memory.persona_drift_log WHERE user_id = 'bob'), 0, 'and Alice''s rows make no drift for Bob');

SELECT * FROM finish();
ROLLBACK;
