-- Key lifecycle: revoked is when a key was revoked (the bank's clock, Unix
-- ns; 0 while it is live), replaced_by the key a rotation gave its
-- principal (empty for none). A revoked key keeps its row, its cert being
-- the admin's revocation record: the newest record, and the last, since
-- the bank takes no record of a revoked key after it. The index finds a
-- principal's live key by name.
ALTER TABLE principals ADD COLUMN revoked BIGINT NOT NULL DEFAULT 0;
ALTER TABLE principals ADD COLUMN replaced_by TEXT NOT NULL DEFAULT '';
CREATE INDEX principals_by_name ON principals (role, name, revoked);
