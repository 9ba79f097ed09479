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

-- The clock follows the sale's pause flag whoever sets it: this binary's pause
-- and resume, and an older binary's during a rolling upgrade (which knows
-- nothing of the clock; a queue paused by one and resumed by the other must not
-- stay stopped).
CREATE FUNCTION queue_clock_follows_pause() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE admission_queues
       SET paused_secs = paused_secs + CASE WHEN NOT coalesce(NEW.paused, false) AND paused_at IS NOT NULL
                           THEN greatest(extract(epoch FROM clock_timestamp() - paused_at)::float8, 0) ELSE 0 END,
           paused_at = CASE WHEN coalesce(NEW.paused, false) THEN coalesce(paused_at, clock_timestamp()) END
     WHERE voucher_id = NEW.voucher_id;
    RETURN NULL;
END
$$;

CREATE TRIGGER queue_clock_follows_pause
    AFTER UPDATE OF paused ON seckill_vouchers
    FOR EACH ROW WHEN (OLD.paused IS DISTINCT FROM NEW.paused)
    EXECUTE FUNCTION queue_clock_follows_pause();

-- A move an older binary writes (without its clock): the queue's clock at `at`.
CREATE FUNCTION queue_admit_clock() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.clock IS NULL THEN
        SELECT extract(epoch FROM NEW.at)::float8 - q.paused_secs
               - CASE WHEN q.paused_at IS NOT NULL
                      THEN greatest(extract(epoch FROM NEW.at - q.paused_at)::float8, 0) ELSE 0 END
          INTO NEW.clock
          FROM admission_queues q WHERE q.voucher_id = NEW.voucher_id;
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER queue_admit_clock
    BEFORE INSERT ON queue_admits
    FOR EACH ROW EXECUTE FUNCTION queue_admit_clock();
