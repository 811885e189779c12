-- Every id a principal chooses lives in that principal's namespace, so that
-- nobody blocks another's request by taking its id first. A hold is keyed by
-- (user, id); a transfer by (scope, id), its scope the account of whoever
-- chose the id: the user's account for a transfer, hold, extension or
-- release, the host's provider account for a capture (its legs are the
-- agent's), the mint for grants and income (the admins' and the bank's).
-- Capture legs are keyed by (host, id). The tables are recreated, the only
-- way SQLite changes a primary key; rows keep their ids and get the scope
-- their kind implies.
CREATE TABLE transfers_v3 (
	scope       TEXT NOT NULL,
	id          TEXT NOT NULL,
	kind        TEXT NOT NULL,
	debit       TEXT NOT NULL REFERENCES accounts (id),
	credit      TEXT NOT NULL REFERENCES accounts (id),
	amount      BIGINT NOT NULL CHECK (amount > 0),
	fingerprint TEXT NOT NULL,
	memo        TEXT NOT NULL DEFAULT '',
	at          BIGINT NOT NULL,
	PRIMARY KEY (scope, id)
);
INSERT INTO transfers_v3 (scope, id, kind, debit, credit, amount, fingerprint, memo, at)
	SELECT CASE WHEN kind IN ('release', 'expire', 'capture') THEN credit ELSE debit END,
		id, kind, debit, credit, amount, fingerprint, memo, at FROM transfers;
DROP TABLE transfers;
ALTER TABLE transfers_v3 RENAME TO transfers;
CREATE INDEX transfers_debit ON transfers (debit, at);
CREATE INDEX transfers_credit ON transfers (credit, at);

CREATE TABLE holds_v3 (
	user_id       TEXT NOT NULL,
	id            TEXT NOT NULL,
	amount        BIGINT NOT NULL CHECK (amount > 0),
	captured      BIGINT NOT NULL DEFAULT 0 CHECK (captured >= 0),
	released      BIGINT NOT NULL DEFAULT 0 CHECK (released >= 0),
	expires       BIGINT NOT NULL,
	status        TEXT NOT NULL CHECK (status IN ('open', 'closed')),
	beneficiaries TEXT NOT NULL DEFAULT '',
	fingerprint   TEXT NOT NULL,
	created       BIGINT NOT NULL,
	CHECK (captured + released <= amount),
	PRIMARY KEY (user_id, id)
);
INSERT INTO holds_v3 (user_id, id, amount, captured, released, expires, status, beneficiaries, fingerprint, created)
	SELECT user_id, id, amount, captured, released, expires, status, beneficiaries, fingerprint, created FROM holds;

CREATE TABLE captures_v3 (
	hold_user TEXT NOT NULL,
	hold      TEXT NOT NULL,
	host      TEXT NOT NULL,
	vm        TEXT NOT NULL,
	total     BIGINT NOT NULL CHECK (total >= 0),
	PRIMARY KEY (hold_user, hold, host, vm),
	FOREIGN KEY (hold_user, hold) REFERENCES holds_v3 (user_id, id)
);
INSERT INTO captures_v3 (hold_user, hold, host, vm, total)
	SELECT h.user_id, c.hold, c.host, c.vm, c.total FROM captures c JOIN holds h ON h.id = c.hold;

CREATE TABLE capture_legs_v3 (
	host       TEXT NOT NULL,
	id         TEXT NOT NULL,
	hold_user  TEXT NOT NULL,
	hold       TEXT NOT NULL,
	vm         TEXT NOT NULL,
	cumulative BIGINT NOT NULL,
	applied    BIGINT NOT NULL,
	at         BIGINT NOT NULL,
	PRIMARY KEY (host, id)
);
INSERT INTO capture_legs_v3 (host, id, hold_user, hold, vm, cumulative, applied, at)
	SELECT l.host, l.id, coalesce(h.user_id, ''), l.hold, l.vm, l.cumulative, l.applied, l.at
	FROM capture_legs l LEFT JOIN holds h ON h.id = l.hold;

DROP TABLE capture_legs;
DROP TABLE captures;
DROP TABLE holds;
ALTER TABLE holds_v3 RENAME TO holds;
ALTER TABLE captures_v3 RENAME TO captures;
ALTER TABLE capture_legs_v3 RENAME TO capture_legs;
CREATE INDEX holds_id ON holds (id);
CREATE INDEX holds_user ON holds (user_id, status);
CREATE INDEX holds_open_expiry ON holds (status, expires);
