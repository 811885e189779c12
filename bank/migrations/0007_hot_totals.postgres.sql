-- A capture total is rewritten by every capture of its VM, a hold's
-- captured total by every capture group taking from it. With room left in
-- their pages PostgreSQL rewrites such a row in its page (a heap-only
-- tuple) without adding an entry to the table's primary key, four text
-- columns wide for captures; a full page moves the row and indexes it
-- anew. Pages written from now on keep that room. PostgreSQL only (SQLite
-- has no such setting): a bank on SQLite records it as applied.
ALTER TABLE captures SET (fillfactor = 50);
ALTER TABLE holds SET (fillfactor = 70)
