-- Principal records sealed by the admin key ([trust]): each principal keeps
-- the record it was registered with (cert, JSON of a wire.Sealed) and when it
-- was sealed (cert_time, Unix ns; 0 for none): a re-registration is taken only
-- if sealed no earlier. The bank's own key gets its role. The table is
-- recreated, the only way SQLite changes a CHECK constraint.
CREATE TABLE principals_v2 (
	key       TEXT PRIMARY KEY,
	name      TEXT NOT NULL,
	role      TEXT NOT NULL CHECK (role IN ('admin', 'user', 'agent', 'broker', 'bank')),
	created   BIGINT NOT NULL,
	cert      TEXT,
	cert_time BIGINT NOT NULL DEFAULT 0
);
INSERT INTO principals_v2 (key, name, role, created) SELECT key, name, role, created FROM principals;
DROP TABLE principals;
ALTER TABLE principals_v2 RENAME TO principals;
