-- stock_return.lua: put a cancelled order's unit back on sale, once.
--
-- KEYS[1] stock   KEYS[2] buyers (user id -> "live order id:created_ms")
-- KEYS[3] returned (set of order ids)
-- ARGV[1] order id   ARGV[2] user id
--
-- Returns 1 if the unit went back now, 0 if this order's unit was already returned,
-- -1 if the voucher's stock is not loaded (Redis lost it; the return stays pending
-- and the stock is rebuilt from Postgres).
--
-- Why one script: "already returned?", the increment and the mark must be one step,
-- so that a redelivered timeout, a retry after a crash and a racing cancel return
-- the unit exactly once. The shopper's mark is removed only if it still names this
-- order: a shopper who already bought again keeps the new order's mark.
if redis.call('SISMEMBER', KEYS[3], ARGV[1]) == 1 then
  return 0
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  return -1
end
redis.call('SADD', KEYS[3], ARGV[1])
redis.call('INCR', KEYS[1])
-- A mark is "id:created_ms" (or, written by an older version, the id).
local mark = redis.call('HGET', KEYS[2], ARGV[2])
if mark and string.match(mark, '^[^:]*') == ARGV[1] then
  redis.call('HDEL', KEYS[2], ARGV[2])
end
return 1
