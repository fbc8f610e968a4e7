-- The deployment state's tables and the database roles of a fleet (docs/deployment.md, "Least privilege").
--
-- Run it as the owner of the state's own database (not MLflow's), once before the first start and again after an
-- upgrade; it keeps what exists:
--     psql -v ON_ERROR_STOP=1 --dbname=serving_state --file=deploy/sql/state-roles.sql
-- then give each role a password (psql's \password ROLE asks for it and sends it hashed).
--
--     serving_state_writer    the controller and the admin API: read and change the desired state, read the reports
--     serving_state_reporter  the replica agents: read the desired state, write the replicas' reports
--     serving_state_reader    the serving gateways: read the desired state, nothing else
--
-- The tables are those the services make on first use where their role may (services/lifecycle/state_db.py); here
-- the database's owner makes them, so that no service role owns, alters or drops them.
\set ON_ERROR_STOP on

SELECT format('CREATE ROLE %I LOGIN', name)
FROM unnest(ARRAY['serving_state_writer', 'serving_state_reporter', 'serving_state_reader']) AS name
WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = name)
\gexec

-- Only these roles and the owner connect; no one else creates anything here (before PostgreSQL 15 every role could).
REVOKE ALL ON DATABASE :"DBNAME" FROM PUBLIC;
GRANT CONNECT ON DATABASE :"DBNAME" TO serving_state_writer, serving_state_reporter, serving_state_reader;
REVOKE CREATE ON SCHEMA public FROM PUBLIC;

-- One row (id 1): the whole desired state as JSON, its revision (0: never written), its restore epoch. Its row is
-- written with the table only: a row deleted by hand is a lost state, never a new empty one.
DO $$
BEGIN
    IF to_regclass('serving_deployment_state') IS NULL THEN
        CREATE TABLE serving_deployment_state (
            id INTEGER NOT NULL,
            revision INTEGER NOT NULL,
            document TEXT NOT NULL,
            epoch BIGINT DEFAULT '0' NOT NULL,
            PRIMARY KEY (id)
        );
        INSERT INTO serving_deployment_state (id, revision, document) VALUES (1, 0, '{"endpoints":{}}');
    END IF;
END
$$;
ALTER TABLE serving_deployment_state ADD COLUMN IF NOT EXISTS epoch BIGINT DEFAULT '0' NOT NULL;

-- One row a Triton replica: the versions it holds ready, and when it said so.
CREATE TABLE IF NOT EXISTS serving_replica_reports (
    replica VARCHAR(255) NOT NULL,
    ready TEXT NOT NULL,
    reported_at FLOAT NOT NULL,
    PRIMARY KEY (replica)
);

REVOKE ALL ON serving_deployment_state, serving_replica_reports
    FROM PUBLIC, serving_state_writer, serving_state_reporter, serving_state_reader;
GRANT SELECT, UPDATE ON serving_deployment_state TO serving_state_writer;
GRANT SELECT ON serving_replica_reports TO serving_state_writer;
GRANT SELECT ON serving_deployment_state TO serving_state_reporter, serving_state_reader;
GRANT SELECT, INSERT, UPDATE ON serving_replica_reports TO serving_state_reporter;

-- A GRANT by a role that does not own a table only warns: fail here instead (tables an older release's service role
-- made are that role's; make this script's runner their owner first: ALTER TABLE ... OWNER TO).
DO $$
BEGIN
    IF NOT (has_table_privilege('serving_state_writer', 'serving_deployment_state', 'UPDATE')
            AND has_table_privilege('serving_state_reporter', 'serving_replica_reports', 'INSERT')
            AND has_table_privilege('serving_state_reader', 'serving_deployment_state', 'SELECT')) THEN
        RAISE EXCEPTION 'the grants did not take: run this script as the owner of the state''s tables';
    END IF;
END
$$;
