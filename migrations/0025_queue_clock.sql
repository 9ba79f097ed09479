-- A pause stops a queue's clock: the frontier does not move while the sale is
-- paused, and a turn lasts `turn_secs` of the time the sale was not paused.
-- `paused_at`: the pause going on (NULL: none); `paused_secs`: every pause that
-- ended, in total. The queue's clock at an instant t is unix time less the pauses:
-- extract(epoch from t) - paused_secs - (t - paused_at, while paused).
ALTER TABLE admission_queues
    ADD COLUMN paused_at TIMESTAMPTZ,
    ADD COLUMN paused_secs DOUBLE PRECISION NOT NULL DEFAULT 0 CHECK (paused_secs >= 0);

-- The queue's clock when the frontier moved; NULL in moves made before this
-- migration, which read as the unix time of `at` (no pause had counted then).
ALTER TABLE queue_admits ADD COLUMN clock DOUBLE PRECISION;

-- A queue sale paused now: its clock stops from here.
UPDATE admission_queues q SET paused_at = now()
  FROM seckill_vouchers s
 WHERE s.voucher_id = q.voucher_id AND s.paused;
