-- Durable high-water marks of the Redis daily counters (order ids, business numbers).
-- The mark is raised ahead of the counter in steps and the counter never hands out a
-- value above it, so when Redis loses a counter it restarts above every value it
-- ever issued: numbers may skip after such a loss, but never repeat.
CREATE TABLE counter_watermarks (
    scope      TEXT        PRIMARY KEY,
    high       BIGINT      NOT NULL CHECK (high >= 0),
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- Business-number rules: prefix + local date + zero-padded daily counter.
CREATE TABLE sequence_rules (
    name        TEXT        PRIMARY KEY CHECK (name ~ '^[a-z0-9_-]{1,64}$'),
    prefix      TEXT        NOT NULL CHECK (char_length(prefix) BETWEEN 1 AND 32),
    date_format TEXT        NOT NULL,
    min_width   INTEGER     NOT NULL CHECK (min_width BETWEEN 1 AND 18),
    time_zone   TEXT        NOT NULL,
    updated_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);
