-- roles.sql — on the primary (db1), once, as the superuser:
--   sudo -u postgres psql -v ON_ERROR_STOP=1 -f roles.sql
-- then give each role a password: \password replicator, \password mrmarket,
-- \password mrmarket_nats. The standby copies all of it.

-- Streaming replication, and pg_rewind when a failed primary rejoins.
-- Under Patroni the role exists already (Patroni creates it): only the
-- grants below apply.
DO $$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'replicator') THEN
    CREATE ROLE replicator WITH LOGIN REPLICATION;
  END IF;
END $$;
GRANT EXECUTE ON FUNCTION pg_catalog.pg_ls_dir(text, boolean, boolean) TO replicator;
GRANT EXECUTE ON FUNCTION pg_catalog.pg_stat_file(text, boolean) TO replicator;
GRANT EXECUTE ON FUNCTION pg_catalog.pg_read_binary_file(text) TO replicator;
GRANT EXECUTE ON FUNCTION pg_catalog.pg_read_binary_file(text, bigint, bigint, boolean) TO replicator;

-- The banks: owner of the bank's database (its migrations run on start).
CREATE ROLE mrmarket WITH LOGIN;
CREATE DATABASE bank OWNER mrmarket;
-- A COMMIT cut while it waits for the standby stays committed on the primary
-- alone: never time the bank's statements out (bank/doc.go).
ALTER ROLE mrmarket SET statement_timeout = 0;

-- The NATS nodes: they read the principals and nothing else (nats-grants.sql,
-- once the first bank has created the tables).
CREATE ROLE mrmarket_nats WITH LOGIN;
ALTER ROLE mrmarket_nats SET statement_timeout = 0;
