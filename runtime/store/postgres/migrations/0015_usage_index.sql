-- usage.summary reads the usage events of a time window: only those are indexed.
CREATE INDEX events_usage_ts ON events (ts) WHERE kind = 'usage';
