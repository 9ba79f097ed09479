-- The Redis clock: the highest value of `<ns>:{<ns>:epoch}:clock` that Postgres has
-- seen Redis hold, per namespace. Every process advances the clock in Redis on
-- each healthy check of its epoch and records the new value here; a Redis whose
-- clock is below the value recorded went back in time (a resync from a lagging
-- server in the same process, a restore, a flush), whatever its run_id says, and
-- is repaired. A repair sets the clock in Redis to the value recorded here and
-- moves this row to its epoch (the value carries over: it never goes down).
--
-- A table of its own, not a column of redis_epochs: every worker batch holds the
-- epoch row FOR SHARE for its whole transaction, and newer share locks go ahead of
-- a waiting UPDATE, so a write to that row each second could wait for as long as
-- batches overlap. Nothing else locks this row.
CREATE TABLE redis_clocks (
    namespace TEXT   PRIMARY KEY,
    -- The epoch the value was recorded in: a check records only into its own.
    epoch     BIGINT NOT NULL,
    clock     BIGINT NOT NULL CHECK (clock >= 0)
);

-- Namespaces already in service: their Redis has no clock yet (it reads 0).
INSERT INTO redis_clocks (namespace, epoch, clock) SELECT namespace, epoch, 0 FROM redis_epochs;
