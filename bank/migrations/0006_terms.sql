-- Hold terms: what a broker's hold may be captured for, from its user's
-- mandate (package mandate). terms says which rule a hold's captures
-- follow: 'old' for the holds placed before this migration (the rule they
-- were placed under, until they close), 'none' for a hold placed without a
-- mandate (a user's own, a broker's without identities: no agent captures
-- it when the bank knows identities), 'mandate' for a hold bound to its
-- user's signed request. vm_share is the most one VM may take of what the
-- schedule allows, in millionths.
ALTER TABLE holds ADD COLUMN terms TEXT NOT NULL DEFAULT 'old';
ALTER TABLE holds ADD COLUMN vm_share BIGINT NOT NULL DEFAULT 0;

-- A mandate hold's schedule: the hold's amount from its creation (ext ''),
-- and each extension's from when it was made (ext: its id), each paid no
-- faster than evenly over its pace (Unix ns; the bank's clock). A capture
-- reads them by hold id, as it reads the holds.
CREATE TABLE hold_terms (
	hold_user TEXT NOT NULL,
	hold      TEXT NOT NULL,
	ext       TEXT NOT NULL,
	amount    BIGINT NOT NULL CHECK (amount > 0),
	start     BIGINT NOT NULL,
	pace      BIGINT NOT NULL CHECK (pace > 0),
	PRIMARY KEY (hold_user, hold, ext)
);
CREATE INDEX hold_terms_hold ON hold_terms (hold);

-- A mandate hold's placement: the host each of its VMs runs on, the only
-- host whose agent captures for it.
CREATE TABLE hold_vms (
	hold_user TEXT NOT NULL,
	hold      TEXT NOT NULL,
	vm        TEXT NOT NULL,
	host      TEXT NOT NULL,
	PRIMARY KEY (hold_user, hold, vm)
);
CREATE INDEX hold_vms_host ON hold_vms (host, hold);
