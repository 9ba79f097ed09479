-- late_admit.lua: account in Redis for an order admitted before a repair that the
-- repair could not see (it was in a relay's or worker's hands), before the worker
-- stores it.
--
-- KEYS[1] stock  KEYS[2] buyers  KEYS[3] admitted (the shard's count of admitted orders)
-- ARGV[1] user id  ARGV[2] order id  ARGV[3] created_ms
--
-- Returns 1 if Redis now counts the order (it already did, or a unit and the
-- shopper's mark were free and are now taken), 0 if it cannot: the stock was sold
-- again, or the shopper has another live order, since the repair.
--
-- "Already counted" is the shopper's mark naming this order: the worker calls this
-- only for an order Postgres does not hold (under the voucher's lock), and only a
-- stored order's cancellation removes a mark, so an order not stored is counted
-- exactly when its shopper's mark names it (its decrement was written with the
-- mark, here, by reserve.lua or by the repair's fill).
--
-- Why one script: the same checks and writes as reserve.lua, in one step.
local holder = redis.call('HGET', KEYS[2], ARGV[1])
-- A mark is "id:created_ms" (or, written by an older version, the id).
if holder and string.match(holder, '^[^:]*') == ARGV[2] then
  return 1
end
local stock = tonumber(redis.call('GET', KEYS[1]) or '-1')
if stock <= 0 or holder then
  return 0
end
redis.call('DECR', KEYS[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2] .. ':' .. ARGV[3])
redis.call('INCR', KEYS[3])
return 1
