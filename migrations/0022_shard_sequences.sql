-- Redis state is judged shard by shard from facts held where the state is
-- (src/recovery/): every write script of a shard's hash tag bumps that shard's
-- sequence (`<ns>:{<tag>}:seq`, gen * 2^32 + writes) and returns it; a caller
-- passes the highest value it has seen, and a shard below it went back in time.
--
-- What the relays saw: the highest sequence of the outbox entries each shard's
-- relays recorded an intent for. Every process raises its own marks to these once
-- a second (and at start), so a shard that went back to before an order Postgres
-- knows of is caught by whichever process touches it next.
CREATE TABLE shard_floors (
    namespace TEXT   NOT NULL,
    -- The shard's hash tag (`v<id>` or `v<id>.<k>.<salt>`).
    tag       TEXT   NOT NULL,
    seq       BIGINT NOT NULL,
    PRIMARY KEY (namespace, tag)
);

-- One row per sale that was ever closed or repaired: its generation (the high
-- part of every shard's sequence: a repair takes the next one, so everything a
-- process saw before it is below everything after), since when it is closed
-- (a process found a shard lost or behind; null while it sells), and how long
-- repairs kept it closed in all.
CREATE TABLE sale_states (
    namespace    TEXT        NOT NULL,
    voucher_id   BIGINT      NOT NULL,
    gen          BIGINT      NOT NULL DEFAULT 0 CHECK (gen >= 0),
    repairs      INTEGER     NOT NULL DEFAULT 0,
    closed_since TIMESTAMPTZ,
    closed_ms    BIGINT      NOT NULL DEFAULT 0,
    last_reason  TEXT,
    updated_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace, voucher_id)
);

-- A relay intent now names each order's shopper and admission time, so that a
-- repair can count the orders a worker has not stored yet (and mark their
-- shoppers) from Postgres alone, without waiting for the worker. Null in rows
-- an older relay wrote.
ALTER TABLE relay_intents
    ADD COLUMN user_ids   BIGINT[],
    ADD COLUMN created_ms BIGINT[];
DO $$
BEGIN
    ALTER TABLE relay_intents
        ALTER COLUMN user_ids SET COMPRESSION lz4,
        ALTER COLUMN created_ms SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported THEN
    RAISE NOTICE 'this server has no lz4: relay_intents keeps pglz';
END
$$;
