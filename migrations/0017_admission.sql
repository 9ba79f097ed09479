-- Fair admission (issue 25): how shoppers get the right to order a flash sale.
--
-- `first_come` (every existing sale): whoever reaches the order script first.
-- `queue`: a waiting room. Shoppers who join before `begin_at` get places in a
--   random order among themselves (the seal, at the first join, poll or advance
--   after `begin_at`, numbers them by `draw`); later ones join the end. Places
--   1..`admitted` are admitted; `admitted` grows at `admit_rate` a second, and
--   stops while the admitted shoppers who may still order could take every unit
--   left. An admitted shopper's turn lasts `turn_secs` from its admission.
-- `raffle`: entries until `draw_at`, then one draw from a seed whose SHA-256
--   (`commitment`) was public from the sale's creation (src/admit/raffle.rs
--   states the rule).
-- `pow_difficulty` > 0: joining or entering needs an ALTCHA proof of work of at
--   least that `maxnumber`.
ALTER TABLE seckill_vouchers
    ADD COLUMN admission TEXT NOT NULL DEFAULT 'first_come'
        CHECK (admission IN ('first_come', 'queue', 'raffle')),
    ADD COLUMN turn_secs INT CHECK (turn_secs > 0),
    ADD COLUMN draw_at TIMESTAMPTZ,
    ADD COLUMN pow_difficulty INT NOT NULL DEFAULT 0 CHECK (pow_difficulty >= 0);

-- One row per queue sale: joins hold it in share mode while they decide that
-- they are early, the seal and later joins hold it exclusively.
CREATE TABLE admission_queues (
    voucher_id  BIGINT PRIMARY KEY REFERENCES vouchers (id),
    admit_rate  INT NOT NULL CHECK (admit_rate > 0),
    sealed      BOOLEAN NOT NULL DEFAULT false,
    -- Places handed out (1..next_place), once sealed.
    next_place  BIGINT NOT NULL DEFAULT 0,
    -- The frontier: places 1..admitted are admitted.
    admitted    BIGINT NOT NULL DEFAULT 0 CHECK (admitted >= 0),
    -- The fraction of a shopper due at `advanced_at` and not yet admitted.
    carry       DOUBLE PRECISION NOT NULL DEFAULT 0,
    advanced_at TIMESTAMPTZ
);

CREATE TABLE queue_places (
    voucher_id BIGINT NOT NULL REFERENCES admission_queues (voucher_id),
    user_id    BIGINT NOT NULL,
    -- Random: the order of the early arrivals among themselves.
    draw       BIGINT NOT NULL,
    -- NULL for an early arrival until the seal.
    place      BIGINT,
    joined_at  TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (voucher_id, user_id),
    UNIQUE (voucher_id, place)
);

-- When the frontier moved: places up to `upto` were admitted at `at` (a turn
-- starts at its place's first row).
CREATE TABLE queue_admits (
    voucher_id BIGINT NOT NULL REFERENCES admission_queues (voucher_id),
    upto       BIGINT NOT NULL,
    at         TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (voucher_id, upto)
);

-- The frontier a turn ago (the stop rule), without reading every move.
CREATE INDEX queue_admits_at_idx ON queue_admits (voucher_id, at);

CREATE TABLE raffles (
    voucher_id BIGINT PRIMARY KEY REFERENCES vouchers (id),
    -- Secret until the draw; its SHA-256 is public from the start.
    seed       BYTEA NOT NULL,
    commitment TEXT NOT NULL,
    drawn_at   TIMESTAMPTZ,
    -- At the draw: the entries, the hash of their list, and how many won (the
    -- sale's stock at the draw, or fewer entries).
    entries    INT,
    list_hash  TEXT,
    winners    INT
);

CREATE TABLE raffle_entries (
    voucher_id BIGINT NOT NULL REFERENCES raffles (voucher_id),
    user_id    BIGINT NOT NULL,
    -- The entry as the API shows it: hex HMAC-SHA256 of "<voucher>:<user>" under
    -- a key of the service's (a shopper sees their own; nobody can tell whose
    -- the others are).
    entry      TEXT NOT NULL,
    entered_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
    -- true for the winners (set by the draw); the others stay NULL: after the
    -- draw, NULL means lost.
    won        BOOLEAN,
    PRIMARY KEY (voucher_id, user_id),
    UNIQUE (voucher_id, entry)
);

-- The winners of a raffle, in entry order, without walking every entry.
CREATE INDEX raffle_entries_won_idx ON raffle_entries (voucher_id, entry) WHERE won;
