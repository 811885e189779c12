-- nats-grants.sql — on the primary, once the bootstrap (README.md, step 2) has
-- created the bank's tables:
--   sudo -u postgres psql -d bank -v ON_ERROR_STOP=1 -f nats-grants.sql
-- The NATS nodes read the principals (key, name, role, revoked) to admit the live ones.
GRANT SELECT ON schema_migrations, principals TO mrmarket_nats;
-- Opening the store runs CREATE TABLE IF NOT EXISTS schema_migrations, which
-- PostgreSQL refuses without CREATE on the schema even when the table exists.
-- The role can then create objects of its own in public, but not read or
-- change the ledger (README.md, "What this layout does not cover").
GRANT CREATE ON SCHEMA public TO mrmarket_nats;
