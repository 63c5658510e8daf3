-- The limits on the requests each model provider is sent
-- (--provider-concurrency, --provider-rpm, the vendor's rate-limit
-- headers), as on PostgreSQL (migration 0017 there): one row per provider
-- holding its allowance and its hold, and one leased row per request in
-- flight. Times in microseconds; NULL: never.
CREATE TABLE provider_limits (
	provider    TEXT    PRIMARY KEY,
	tokens      REAL    NOT NULL DEFAULT 0,
	refilled_at INTEGER,
	held_until  INTEGER
);

CREATE TABLE provider_slots (
	provider   TEXT    NOT NULL,
	holder     TEXT    NOT NULL,
	owner      TEXT    NOT NULL DEFAULT '',
	expires_at INTEGER NOT NULL,
	PRIMARY KEY (provider, holder)
);
CREATE INDEX provider_slots_by_owner ON provider_slots (owner);
