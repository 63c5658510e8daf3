-- The id a call gives the turn it starts, chosen before it acts: an
-- unknown outcome names it (operation_outcome_unknown data.turnId).
ALTER TABLE operation_receipts ADD COLUMN turn_id text NOT NULL DEFAULT '';
