-- Per-key request rates (key.create ratePerSecond; 0 = no limit).
ALTER TABLE api_keys ADD COLUMN rate_per_second integer NOT NULL DEFAULT 0;
