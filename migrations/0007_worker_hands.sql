-- What each live worker process holds: deliveries it received and has not settled.
-- A repair after Redis went back in time waits until every live worker has said,
-- after the queue was seen empty, that it holds nothing (see src/epoch.rs).
CREATE TABLE worker_heartbeats (
    namespace TEXT        NOT NULL,
    process   TEXT        NOT NULL,
    holding   INTEGER     NOT NULL CHECK (holding >= 0),
    seen_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace, process)
);

-- Messages on the dead-letter queue that are not order batches (nothing in them can
-- be stored as an order): kept for people to read, never silently dropped.
CREATE TABLE dead_letters (
    id          BIGINT      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    body        BYTEA       NOT NULL,
    reason      TEXT        NOT NULL,
    received_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- The Redis epoch whose counter keys may raise a durable mark. A counter of a new
-- epoch (new keys, after Redis went back in time or lost state) stamps the mark with
-- its epoch before it starts from it; from then on a process still using the old
-- epoch's keys cannot raise it, so it can issue nothing above its current ceiling,
-- which is at or below where the new keys start.
ALTER TABLE counter_watermarks ADD COLUMN epoch BIGINT NOT NULL DEFAULT 0;
