-- nats-grants.sql — on the primary, once the bootstrap (README.md, step 2) has
-- created the bank's tables:
--   sudo -u postgres psql -d bank -v ON_ERROR_STOP=1 -f nats-grants.sql
-- The NATS nodes read the principals (key, name, role, revoked) to admit the
-- live ones, and read only: opening a migrated store writes nothing, so the
-- role needs no CREATE on any schema. Nobody but the owner creates objects
-- in public either (the CVE-2018-1058 pattern: an object planted there
-- would shadow the bank's for whoever has public on its search path).
GRANT SELECT ON schema_migrations, principals TO mrmarket_nats;
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
-- The banks' role keeps CREATE for the migrations of later versions
-- (PostgreSQL before 15 gave it through PUBLIC only).
GRANT CREATE ON SCHEMA public TO mrmarket;
