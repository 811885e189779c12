-- The audit outbox: every request that moves money (or registers a
-- principal, or sets income) writes its audit event here in the same
-- transaction as the movement, and the bank's publisher sends the events to
-- the MRM_EVENTS stream in seq order and deletes each once the stream has
-- acknowledged it (outbox.go). id is the event's id, its JetStream dedupe
-- id; event is its JSON. seq is AUTOINCREMENT on SQLite, BIGSERIAL on
-- PostgreSQL (migrate rewrites it): a sequence, not a counter row every
-- transaction would write.
CREATE TABLE outbox (
	seq     INTEGER PRIMARY KEY AUTOINCREMENT,
	id      TEXT NOT NULL UNIQUE,
	subject TEXT NOT NULL,
	event   TEXT NOT NULL,
	at      BIGINT NOT NULL
);

-- Which bank replica publishes the outbox, until when: one at a time.
CREATE TABLE outbox_lease (
	name   TEXT PRIMARY KEY,
	holder TEXT NOT NULL,
	until  BIGINT NOT NULL
);
