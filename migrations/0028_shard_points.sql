-- Histories named, not counted (src/recovery/history.rs): every write of a shard
-- bears a name its writer drew, kept by the shard beside its sequence, and a
-- caller remembers points (sequence, name) of the history it saw. A count cannot
-- tell the history a caller saw from another of the same length: after Redis went
-- back, the next write of anyone takes the very sequence the lost one had.
--
-- What each writer saw, for every process to check: one row per shard and writer
-- (a relay, or a process's returns, top-ups and moves), its latest point. A
-- writer's points follow one another (each of its calls checked the point before),
-- so its latest stands for all; a row moves only forward. `shard_floors` (counts)
-- is still read, as counts, for the rows versions before names wrote.
CREATE TABLE shard_points (
    namespace  TEXT        NOT NULL,
    -- The shard's hash tag (`v<id>` or `v<id>.<k>.<salt>`).
    tag        TEXT        NOT NULL,
    writer     TEXT        NOT NULL,
    seq        BIGINT      NOT NULL,
    -- The 8-byte name of write `seq`.
    name       BYTEA       NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace, tag, writer)
);

-- The generation of the repair under way (null once it reopened the sale): a
-- repair that could not finish (an outbox entry it cannot read yet, Redis or
-- Postgres gone) is tried again in the same generation while the shards are as
-- its first step left them, rather than climbing a generation a try.
ALTER TABLE sale_states ADD COLUMN repair_gen BIGINT;

-- An intent a process recorded for orders it acknowledged and holds in memory,
-- after their shard was found gone back in time (src/recovery/rescue.rs), rather
-- than for orders a relay read: a repair that finds such an order nowhere else
-- (its outbox entry went with Redis going back) writes it back and names it as an
-- incident.
ALTER TABLE relay_intents ADD COLUMN rescued BOOLEAN NOT NULL DEFAULT false;
