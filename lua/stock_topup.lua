-- stock_topup.lua: put a committed top-up's units on sale, once.
--
-- KEYS[1] stock   KEYS[2] topups (set of top-up ids already added)
-- KEYS[3] repair fence (the epoch of the newest repair that rewrote this sale)
-- ARGV[1] top-up id   ARGV[2] units   ARGV[3] the newest epoch Postgres has committed
--
-- Returns 1 if the units were added now, 0 if this top-up was already added,
-- -1 if the voucher's stock is not loaded (Redis lost it), -2 if a repair newer than
-- ARGV[3] (one under way) rewrote the sale. In both last cases nothing changes and
-- the top-up stays pending in Postgres: the repair rebuilds the stock from
-- Postgres, which already counts it, and marks it done.
--
-- Why one script: "already added?", the increment and the mark must be one step, so
-- that the handler, a retry and the recovery pass add the units exactly once. A
-- plain INCRBY on a missing key would create it holding only the top-up, selling
-- from nothing. The fence keeps units out of a stock that a repair under way has
-- already rebuilt with them. All keys share the voucher's hash tag.
if redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 1 then
  return 0
end
if tonumber(redis.call('GET', KEYS[3]) or '0') > tonumber(ARGV[3]) then
  return -2
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  return -1
end
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('INCRBY', KEYS[1], ARGV[2])
return 1
