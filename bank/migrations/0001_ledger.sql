-- The ledger: double-entry accounts, idempotent transfers, holds and the
-- cumulative captures of every (hold, host, vm). Portable between SQLite and
-- PostgreSQL/CockroachDB: BIGINT money, times as Unix nanoseconds.
CREATE TABLE accounts (
	id      TEXT PRIMARY KEY,
	kind    TEXT NOT NULL CHECK (kind IN ('user', 'provider', 'escrow', 'mint')),
	balance BIGINT NOT NULL,
	created BIGINT NOT NULL,
	CHECK (kind = 'mint' OR balance >= 0)
);

-- Every movement of money, immutable. The id is the idempotency id; the
-- fingerprint is the request it came from, so a replay with other content is
-- a conflict.
CREATE TABLE transfers (
	id          TEXT PRIMARY KEY,
	kind        TEXT NOT NULL,
	debit       TEXT NOT NULL REFERENCES accounts (id),
	credit      TEXT NOT NULL REFERENCES accounts (id),
	amount      BIGINT NOT NULL CHECK (amount > 0),
	fingerprint TEXT NOT NULL,
	memo        TEXT NOT NULL DEFAULT '',
	at          BIGINT NOT NULL
);
CREATE INDEX transfers_debit ON transfers (debit, at);
CREATE INDEX transfers_credit ON transfers (credit, at);

CREATE TABLE holds (
	id            TEXT PRIMARY KEY,
	user_id       TEXT NOT NULL,
	amount        BIGINT NOT NULL CHECK (amount > 0),
	captured      BIGINT NOT NULL DEFAULT 0 CHECK (captured >= 0),
	released      BIGINT NOT NULL DEFAULT 0 CHECK (released >= 0),
	expires       BIGINT NOT NULL,
	status        TEXT NOT NULL CHECK (status IN ('open', 'closed')),
	beneficiaries TEXT NOT NULL DEFAULT '',
	fingerprint   TEXT NOT NULL,
	created       BIGINT NOT NULL,
	CHECK (captured + released <= amount)
);
CREATE INDEX holds_user ON holds (user_id, status);
CREATE INDEX holds_open_expiry ON holds (status, expires);

-- What each (hold, host, vm) has been charged in total.
CREATE TABLE captures (
	hold  TEXT NOT NULL REFERENCES holds (id),
	host  TEXT NOT NULL,
	vm    TEXT NOT NULL,
	total BIGINT NOT NULL CHECK (total >= 0),
	PRIMARY KEY (hold, host, vm)
);

-- Every capture leg seen, by its idempotency id "hold/host/vm/round".
CREATE TABLE capture_legs (
	id         TEXT PRIMARY KEY,
	hold       TEXT NOT NULL,
	host       TEXT NOT NULL,
	vm         TEXT NOT NULL,
	cumulative BIGINT NOT NULL,
	applied    BIGINT NOT NULL,
	at         BIGINT NOT NULL
);

-- Identities: NKey public keys with a name and a role.
CREATE TABLE principals (
	key     TEXT PRIMARY KEY,
	name    TEXT NOT NULL,
	role    TEXT NOT NULL CHECK (role IN ('admin', 'user', 'agent', 'broker')),
	created BIGINT NOT NULL
);

-- Nonces of signed requests, kept for the signature window: a replay is refused.
CREATE TABLE nonces (
	key   TEXT NOT NULL,
	nonce TEXT NOT NULL,
	at    BIGINT NOT NULL,
	PRIMARY KEY (key, nonce)
);
CREATE INDEX nonces_at ON nonces (at);

-- Income schedules: amount every period, granted once per period
-- (transfer id "income:<user>:<period>"). user_id '*' splits the amount
-- among all users.
CREATE TABLE income (
	user_id     TEXT PRIMARY KEY,
	amount      BIGINT NOT NULL CHECK (amount > 0),
	every       BIGINT NOT NULL CHECK (every > 0),
	anchor      BIGINT NOT NULL,
	last_period BIGINT NOT NULL
);
