-- A raffle draws with public randomness that nobody knows before its entries
-- close: a drand beacon round named at the sale's creation (src/admit/beacon.rs).
-- The chain: its BLS public key (hex, G2 compressed), genesis (unix seconds) and
-- period; the round is published after draw_at. NULL in raffles drawn before this
-- migration (drawn by the seed alone; their summary says so).
ALTER TABLE raffles
    ADD COLUMN beacon_key     TEXT,
    ADD COLUMN beacon_genesis BIGINT,
    ADD COLUMN beacon_period  INT CHECK (beacon_period > 0),
    ADD COLUMN beacon_round   BIGINT CHECK (beacon_round > 0),
    -- The round named at creation, when the close had to move it (a close that
    -- ran once that round was public: see src/admit/draw.rs); NULL otherwise.
    ADD COLUMN beacon_named_round BIGINT,
    -- When the entries were closed: `entries`, `list_hash` and `winners` (the
    -- sale's total stock then, or fewer entries) are fixed from here.
    ADD COLUMN closed_at      TIMESTAMPTZ;

-- Raffles not yet drawn draw with quicknet's first round after their draw_at: a
-- round fixed by a rule, not chosen, and published after the entries closed.
UPDATE raffles r
   SET beacon_key = '83cf0f2896adee7eb8b5f01fcad3912212c437e0073e911fb90022d3e760183c8c4b450b6a0a6c3ac6a5776a2d1064510d1fec758c921cc22b0e17e63aaf4bcb5ed66304de9cf809bd274ca73bab4af5a6e9c76a4bc09e76eae8991ef5ece45a',
       beacon_genesis = 1692803367,
       beacon_period = 3,
       beacon_round = greatest(floor((extract(epoch FROM s.draw_at) - 1692803367) / 3)::bigint + 2, 1),
       entries = NULL, list_hash = NULL, winners = NULL
  FROM seckill_vouchers s
 WHERE s.voucher_id = r.voucher_id AND r.drawn_at IS NULL;


-- The round's signature, as anyone submitted it (or the service fetched it), once
-- verified against the raffle's chain; `randomness` = hex(sha256(signature)).
-- A table of its own: storing it takes no lock on the raffle's row, which the
-- close and the draw hold.
CREATE TABLE raffle_beacons (
    voucher_id  BIGINT PRIMARY KEY REFERENCES raffles (voucher_id),
    round       BIGINT NOT NULL,
    signature   TEXT NOT NULL,
    randomness  TEXT NOT NULL,
    received_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()
);

-- A raffle with a beacon is drawn only with its round's signature in. An older
-- binary draws without one (by the seed alone): its draw fails here instead.
CREATE FUNCTION raffle_drawn_with_its_beacon() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.drawn_at IS NOT NULL AND OLD.drawn_at IS NULL AND NEW.beacon_round IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM raffle_beacons b
                        WHERE b.voucher_id = NEW.voucher_id AND b.round = NEW.beacon_round) THEN
        RAISE EXCEPTION 'raffle % is drawn with its beacon round %, which is not in', NEW.voucher_id, NEW.beacon_round
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER raffle_drawn_with_its_beacon BEFORE UPDATE OF drawn_at ON raffles
    FOR EACH ROW EXECUTE FUNCTION raffle_drawn_with_its_beacon();

-- The background close and draw find their work without reading every raffle.
CREATE INDEX raffles_undrawn_idx ON raffles (voucher_id) WHERE drawn_at IS NULL;

-- A raffle's number of winners is its total stock at draw_at: no top-up after
-- (this binary refuses it with 409 raffle_closed; the trigger also stops an
-- older binary's).
CREATE FUNCTION raffle_stock_fixed_at_draw() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.total_stock > OLD.total_stock AND NEW.admission = 'raffle'
       AND NEW.draw_at IS NOT NULL AND clock_timestamp() >= NEW.draw_at THEN
        RAISE EXCEPTION 'the stock of raffle sale % is fixed at its draw_at', NEW.voucher_id
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER raffle_stock_fixed_at_draw BEFORE UPDATE OF total_stock ON seckill_vouchers
    FOR EACH ROW EXECUTE FUNCTION raffle_stock_fixed_at_draw();
