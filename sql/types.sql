-- memory_ext needs a UTF-8 database: its classifiers, audit payloads (JSON, hashed as UTF-8),
-- pseudonyms and lexicons read text as UTF-8, and in another encoding non-ASCII values would
-- fail or be misread. Refused before anything is created.
DO $$
BEGIN
    IF pg_catalog.getdatabaseencoding() OPERATOR(pg_catalog.<>) 'UTF8' THEN
        RAISE EXCEPTION 'memory_ext requires a UTF-8 database; database "%" is %', pg_catalog.current_database(), pg_catalog.getdatabaseencoding()
            USING ERRCODE = '0A000', HINT = 'Create the database with ENCODING ''UTF8'' (for example CREATE DATABASE .. ENCODING ''UTF8'' TEMPLATE template0).';
    END IF;
END $$;

-- memory_ext's internal functions live in a schema of their own, so that schema memory holds the
-- API and nothing else (`\df memory.*`). Nobody but the extension owner creates anything in it;
-- USAGE is granted in finalize.sql (EXECUTE per function, deny by default).
CREATE SCHEMA memory_internal;
COMMENT ON SCHEMA memory_internal IS 'memory_ext''s internal functions: not an API; they may change in any release.';

-- Enums of the public contract (docs/design.md#classification). Order matters: comparison follows declaration order,
-- so greatest() of classifications is the most restrictive one.
CREATE TYPE classification AS ENUM ('public', 'internal', 'confidential', 'restricted');
COMMENT ON TYPE classification IS 'Sensitivity tier, least to most restrictive.';

CREATE TYPE source_type AS ENUM ('decision', 'fact', 'preference', 'tool_result');
COMMENT ON TYPE source_type IS 'What an observation was derived from; decisions get the compliance rule.';

CREATE TYPE memory_type AS ENUM ('working', 'short_term', 'long_term', 'persona', 'episodic', 'entity', 'structured');
COMMENT ON TYPE memory_type IS 'Retention class of a memory (rt-005).';

CREATE TYPE outcome AS ENUM ('accepted', 'rejected', 'rework');
COMMENT ON TYPE outcome IS 'A session outcome: accepted raises weights (signal 1), rejected and rework lower them (signal 0).';

CREATE TYPE lifecycle_state AS ENUM ('pending', 'active', 'superseded', 'retracted', 'archived');
COMMENT ON TYPE lifecycle_state IS 'Lifecycle of an entity or a claim (docs/design.md#knowledge-lifecycle); delete is a transition to retracted or archived.';
