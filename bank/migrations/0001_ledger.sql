-- The ledger: double-entry accounts, idempotent transfers, holds and the
-- cumulative captures of every (hold, host, vm).
CREATE TABLE accounts (
	id      TEXT PRIMARY KEY,
	kind    TEXT NOT NULL CHECK (kind IN ('user', 'provider', 'escrow', 'mint')),
	balance INTEGER NOT NULL,
	CHECK (kind = 'mint' OR balance >= 0)
);

-- Every movement of money. id is the idempotency id; fingerprint is the
-- request it came from, so a replay with other content is a conflict.
CREATE TABLE transfers (
	id          TEXT PRIMARY KEY,
	kind        TEXT NOT NULL,
	debit       TEXT NOT NULL REFERENCES accounts (id),
	credit      TEXT NOT NULL REFERENCES accounts (id),
	amount      INTEGER NOT NULL CHECK (amount > 0),
	fingerprint TEXT NOT NULL,
	at          INTEGER NOT NULL
);

CREATE TABLE holds (
	id          TEXT PRIMARY KEY,
	user_id     TEXT NOT NULL,
	amount      INTEGER NOT NULL CHECK (amount > 0),
	captured    INTEGER NOT NULL DEFAULT 0 CHECK (captured >= 0),
	released    INTEGER NOT NULL DEFAULT 0 CHECK (released >= 0),
	expires     INTEGER NOT NULL,
	status      TEXT NOT NULL CHECK (status IN ('open', 'closed')),
	fingerprint TEXT NOT NULL,
	created     INTEGER NOT NULL,
	CHECK (captured + released <= amount)
);
CREATE INDEX holds_user ON holds (user_id, status);
CREATE INDEX holds_open_expiry ON holds (status, expires);

-- What each (hold, host, vm) has been charged in total.
CREATE TABLE captures (
	hold  TEXT NOT NULL REFERENCES holds (id),
	host  TEXT NOT NULL,
	vm    TEXT NOT NULL,
	total INTEGER NOT NULL CHECK (total >= 0),
	PRIMARY KEY (hold, host, vm)
);

-- Every capture leg seen, by its idempotency id "hold/host/vm/tick".
CREATE TABLE capture_legs (
	id         TEXT PRIMARY KEY,
	hold       TEXT NOT NULL,
	host       TEXT NOT NULL,
	vm         TEXT NOT NULL,
	cumulative INTEGER NOT NULL,
	applied    INTEGER NOT NULL,
	at         INTEGER NOT NULL
);
