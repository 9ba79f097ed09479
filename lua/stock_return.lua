-- stock_return.lua: put a cancelled order's unit back on sale, once.
--
-- KEYS[1] stock   KEYS[2] buyers (user id -> "live order id:created_ms")
-- KEYS[3] returned (set of order ids)   KEYS[4] the shard's sequence
-- ARGV[1] order id   ARGV[2] user id   ARGV[3] the caller's floor for the shard
-- ARGV[4] the id the shopper's mark names (the id they were given; differs from
--         ARGV[1] for an order stored under a fresh id; absent: ARGV[1])
--
-- Returns {code, seq}: code 1 if the unit went back now, 0 if this order's unit was
-- already returned, -1 if the shard's stock is not loaded (Redis lost it, or a
-- repair closed it; the return stays pending and the repair counts it from
-- Postgres), -4 if the shard is behind the caller's floor (it went back in time:
-- the script closes it, as reserve.lua does); seq is the shard's sequence after it.
--
-- Why one script: "already returned?", the increment and the mark must be one step,
-- so that a redelivered timeout, a retry after a crash and a racing cancel return
-- the unit exactly once. The shopper's mark is removed only if it still names this
-- order: a shopper who already bought again keeps the new order's mark.
local seq = tonumber(redis.call('GET', KEYS[4]) or '0')
if seq < tonumber(ARGV[3]) then
  redis.call('DEL', KEYS[1])
  return {-4, seq}
end
if redis.call('SISMEMBER', KEYS[3], ARGV[1]) == 1 then
  return {0, seq}
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {-1, seq}
end
redis.call('SADD', KEYS[3], ARGV[1])
redis.call('INCR', KEYS[1])
-- A mark is "id:created_ms" (or, written by an older version, the id).
local mark = redis.call('HGET', KEYS[2], ARGV[2])
if mark and string.match(mark, '^[^:]*') == (ARGV[4] or ARGV[1]) then
  redis.call('HDEL', KEYS[2], ARGV[2])
end
return {1, redis.call('INCR', KEYS[4])}
