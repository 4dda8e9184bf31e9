-- Data in the tables release 0.2.0 added (tests/upgrade/run.sh, when upgrading from 0.2.0), written
-- with 0.2.0's API after the three fill phases: consent versions, user contexts of every scope,
-- threads, feedback that drifts, refreshes, a watch question, a training candidate, a revocation.
\set ON_ERROR_STOP on
SET client_min_messages = warning;
SELECT memory.grant_consent('acme', 'u5', '{create_task,save_to_thread,save_to_profile,training_use_allowed}',
                            '{"language_preference": "English", "research_depth": "deep", "risk_prompt_preference": "cautious"}');
INSERT INTO memory.user_contexts (org_id, user_id, scope, thread_id, source, fields)
VALUES ('acme', 'u5', 'thread', 'th-5', 'save_as_thread', '{"user_focus_reason": "SOL unlocks", "research_style": "bottom-up"}');
INSERT INTO memory.user_contexts (org_id, user_id, scope, task_id, source, fields)
VALUES ('acme', 'u5', 'task', 't-5', 'task', '{"research_depth": "quick", "constraints": "no leverage"}');
INSERT INTO memory.threads (thread_id, org_id, user_id, title, status, updated_at) VALUES
  ('th-5', 'acme', 'u5', 'SOL unlock schedule', 'active', now() - interval '1 day');
INSERT INTO memory.user_feedback (org_id, user_id, related_object_ref, cognition_object, rating, created_at) VALUES
  ('acme', 'u5', 'snapshot:1', '{"type": "asset", "ref": "SOL"}', 'thumbs_up', now() - interval '5 days');
INSERT INTO memory.user_feedback (org_id, user_id, related_object_ref, cognition_object, rating) VALUES
  ('acme', 'u5', 'snapshot:1', '{"type": "asset", "ref": "SOL"}', 'not_helpful');
INSERT INTO memory.thread_refreshes (org_id, user_id, thread_id, main_thesis, changed_inferences, created_at)
VALUES ('acme', 'u5', 'th-5', 'SOL bullish on unlock demand from staking', 0, now() - interval '20 days');
INSERT INTO memory.thread_refreshes (org_id, user_id, thread_id, main_thesis, changed_inferences)
VALUES ('acme', 'u5', 'th-5', 'Bearish: ETH rotation drains liquidity', 6);
INSERT INTO memory.watch_question_updates (org_id, user_id, watch_question_id, status, created_at) VALUES
  ('acme', 'u5', 'wq-1', 'resolved', now() - interval '3 days');
INSERT INTO memory.watch_question_updates (org_id, user_id, watch_question_id, status) VALUES ('acme', 'u5', 'wq-1', 'reopened');
INSERT INTO memory.training_candidates (org_id, user_id, object_ref) VALUES ('acme', 'u5', 'snapshot:1');
SELECT memory.load_slices('acme', 'u5', 'thread_refresh', NULL, 'th-5') IS NOT NULL AS loaded;
SELECT memory.grant_consent('globex', 'u6', '{create_task,save_to_thread}');
SELECT memory.revoke_consent('globex', 'u6', '{save_to_thread}') IS NOT NULL AS revoked;
SELECT memory.run_maintenance() IS NOT NULL AS maintained;
