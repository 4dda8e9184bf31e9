//! In-database tests (`cargo pgrx test`). SQLSTATE-level checks live in the pgTAP suite.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    fn tier_of(sql: &str) -> String {
        Spi::get_one::<String>(sql).expect("query ran").expect("not null")
    }

    /// The shared classification vectors (core/tests/vectors/classification.json) through SQL.
    #[pg_test]
    fn classify_function_follows_the_shared_vectors() {
        let vectors: serde_json::Value =
            serde_json::from_str(include_str!("../core/tests/vectors/classification.json")).expect("vectors are JSON");
        for v in vectors.as_array().expect("an array") {
            let got = Spi::get_two_with_args::<String, String>(
                "SELECT memory.classify(v.content, v.paths, v.source_type)::text,
                        memory.classify_explain(v.content, v.paths, v.source_type)->>'rule'
                   FROM jsonb_to_record($1) AS v(content text, paths text[], source_type text)",
                &[pgrx::JsonB(v.clone()).into()],
            )
            .expect("query ran");
            assert_eq!(got.0.as_deref(), v["tier"].as_str(), "tier of vector {}", v["name"]);
            assert_eq!(got.1.as_deref(), v["rule"].as_str(), "rule of vector {}", v["name"]);
        }
    }

    #[pg_test]
    fn observation_insert_is_classified_in_both_targets() {
        Spi::run("INSERT INTO memory.observations (org_id, content) VALUES ('o1', 'card 4111 1111 1111 1111')").unwrap();
        assert_eq!(tier_of("SELECT classification::text FROM memory.observations WHERE org_id = 'o1'"), "restricted");
        assert_eq!(tier_of("SELECT metadata->>'classification' FROM memory.observations WHERE org_id = 'o1'"), "restricted");
    }

    #[pg_test]
    fn writer_tier_is_a_floor() {
        Spi::run("INSERT INTO memory.observations (org_id, content, classification) VALUES ('o2', 'plain note', 'confidential')").unwrap();
        assert_eq!(tier_of("SELECT classification::text FROM memory.observations WHERE org_id = 'o2'"), "confidential");
        Spi::run("INSERT INTO memory.observations (org_id, content, classification) VALUES ('o3', 'my password', 'public')").unwrap();
        assert_eq!(tier_of("SELECT classification::text FROM memory.observations WHERE org_id = 'o3'"), "confidential");
    }

    #[pg_test(error = "classification of a row of memory.observations cannot be lowered from restricted to public")]
    fn direct_downgrade_is_refused() {
        Spi::run("INSERT INTO memory.observations (org_id, content) VALUES ('o4', 'ssn 123-45-6789')").unwrap();
        Spi::run("UPDATE memory.observations SET classification = 'public' WHERE org_id = 'o4'").unwrap();
    }

    #[pg_test]
    fn reclassify_lowers_and_then_guards_again() {
        Spi::run("INSERT INTO memory.observations (org_id, content) VALUES ('o5', 'pii inside')").unwrap();
        let prev = tier_of("SELECT memory.reclassify(id, 'internal', 'false positive')::text FROM memory.observations WHERE org_id = 'o5'");
        assert_eq!(prev, "restricted");
        assert_eq!(tier_of("SELECT classification::text FROM memory.observations WHERE org_id = 'o5'"), "internal");
        assert_eq!(tier_of("SELECT metadata->>'classification' FROM memory.observations WHERE org_id = 'o5'"), "internal");
    }

    #[pg_test]
    fn org_rules_raise_and_cache_refreshes() {
        Spi::run("INSERT INTO memory.observations (org_id, content) VALUES ('acme', 'Project Falcon kickoff')").unwrap();
        assert_eq!(tier_of("SELECT classification::text FROM memory.observations WHERE org_id = 'acme'"), "internal");
        Spi::run("INSERT INTO memory.classification_rules (org_id, tier, target, pattern) VALUES ('acme', 'restricted', 'content', '(?i)falcon')").unwrap();
        Spi::run("INSERT INTO memory.observations (org_id, content) VALUES ('acme', 'Falcon budget')").unwrap();
        assert_eq!(tier_of("SELECT classification::text FROM memory.observations WHERE content = 'Falcon budget'"), "restricted");
        // Another org is not affected.
        Spi::run("INSERT INTO memory.observations (org_id, content) VALUES ('other', 'Falcon budget')").unwrap();
        assert_eq!(tier_of("SELECT classification::text FROM memory.observations WHERE org_id = 'other'"), "internal");
    }

    #[pg_test]
    fn govern_text_and_jsonb_targets() {
        Spi::run("CREATE TABLE app_notes (id serial, body text, paths text[], tier text, meta jsonb)").unwrap();
        Spi::run("SELECT memory.govern('app_notes', '{\"content\": \"body\", \"source_files\": \"paths\", \"target\": [\"tier\", \"meta\"]}')").unwrap();
        Spi::run("INSERT INTO app_notes (body, paths, meta) VALUES ('docs change', ARRAY['docs/x.md'], '{\"k\": 1}')").unwrap();
        assert_eq!(tier_of("SELECT tier FROM app_notes"), "public");
        assert_eq!(tier_of("SELECT meta::text FROM app_notes"), "{\"k\": 1, \"classification\": \"public\"}");
        // Re-classified on update of an input, never lowered.
        Spi::run("UPDATE app_notes SET body = 'rotate the api_key'").unwrap();
        assert_eq!(tier_of("SELECT tier FROM app_notes"), "confidential");
        Spi::run("UPDATE app_notes SET body = 'harmless again'").unwrap();
        assert_eq!(tier_of("SELECT tier FROM app_notes"), "confidential");
        assert!(Spi::get_one::<bool>("SELECT memory.ungovern('app_notes')").unwrap().unwrap());
    }

    #[pg_test]
    fn lifecycle_trigger_allows_the_table_and_same_state_updates() {
        Spi::run("CREATE TABLE lc_t (id int, s memory.lifecycle_state, t text)").unwrap();
        Spi::run("CREATE TRIGGER a BEFORE UPDATE ON lc_t FOR EACH ROW EXECUTE FUNCTION memory.lifecycle_trigger('s')").unwrap();
        Spi::run("CREATE TRIGGER b BEFORE INSERT OR UPDATE ON lc_t FOR EACH ROW EXECUTE FUNCTION memory.lifecycle_trigger('t')").unwrap();
        Spi::run("INSERT INTO lc_t VALUES (1, 'pending', 'pending')").unwrap();
        Spi::run("UPDATE lc_t SET s = 'active', t = 'active'").unwrap();
        Spi::run("UPDATE lc_t SET s = 'active', t = 'active'").unwrap();
        Spi::run("UPDATE lc_t SET s = 'archived', t = 'retracted'").unwrap();
        assert_eq!(tier_of("SELECT s::text || '/' || t FROM lc_t"), "archived/retracted");
    }

    #[pg_test(error = "invalid lifecycle transition from retracted to active")]
    fn lifecycle_trigger_refuses_text_state_going_back() {
        Spi::run("CREATE TABLE lc_u (id int, t text)").unwrap();
        Spi::run("SELECT memory.govern('lc_u', '{\"state\": \"t\"}')").unwrap();
        Spi::run("INSERT INTO lc_u VALUES (1, 'retracted')").unwrap();
        Spi::run("UPDATE lc_u SET t = 'active'").unwrap();
    }

    /// The sequencer keeps head positions as tid text (pg::bulk::tid_text / parse_tid): both agree
    /// with PostgreSQL's own tid text, past block 65,535 too (the block's high half).
    #[pg_test]
    fn tid_text_round_trips_as_postgres_writes_it() {
        for s in ["(0,1)", "(70000,12)", "(4294967294,65535)"] {
            let t = crate::pg::bulk::parse_tid(s).expect("a tid");
            let pg = Spi::get_one_with_args::<String>("SELECT $1::tid::text", &[s.into()]).expect("query ran").expect("not null");
            assert_eq!(crate::pg::bulk::tid_text(&t), pg);
            assert_eq!(pgrx::itemptr::item_pointer_get_both(t).0, s[1..s.find(',').unwrap()].parse::<u32>().unwrap());
        }
        for s in ["", "(1,2", "1,2)", "(a,1)", "(1,70000)", "(-1,1)"] {
            assert!(crate::pg::bulk::parse_tid(s).is_none(), "{s}");
        }
    }
}
