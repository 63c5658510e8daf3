-- The limits on the requests each model provider is sent
-- (--provider-concurrency, --provider-rpm, the vendor's rate-limit
-- headers), shared by every daemon of the database: one row per provider
-- holding its allowance (a token bucket, updated under the row's lock) and
-- its hold, and one leased row per request in flight, so that the slot of
-- a daemon killed mid-call comes back when its lease ends. NULL: never.
CREATE TABLE provider_limits (
	provider    text COLLATE "C" PRIMARY KEY,
	tokens      double precision NOT NULL DEFAULT 0,
	refilled_at timestamptz,
	held_until  timestamptz
);

CREATE TABLE provider_slots (
	provider   text COLLATE "C" NOT NULL,
	holder     text COLLATE "C" NOT NULL,
	owner      text        NOT NULL DEFAULT '',
	expires_at timestamptz NOT NULL,
	PRIMARY KEY (provider, holder)
);
CREATE INDEX provider_slots_by_owner ON provider_slots (owner);
