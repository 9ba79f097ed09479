-- stock_return.lua: put a cancelled order's unit back on sale, once.
--
-- KEYS[1] stock   KEYS[2] buyers (user id -> "live order id:created_ms")
-- KEYS[3] returned (set of order ids)   KEYS[4] seq, KEYS[5] hist: the shard's
-- history (lua/history.lua, which this script follows)
-- ARGV[1] order id   ARGV[2] user id
-- ARGV[3] the id the shopper's mark names (the id they were given; differs from
--         ARGV[1] for an order stored under a fresh id)
-- ARGV[4] the sequences of the caller's points of the shard, ARGV[5] their names
-- ARGV[6] the name of this write
--
-- Returns {code, seq}: code 1 if the unit went back now (the write at seq bears
-- ARGV[6]'s name), 0 if this order's unit was already returned, -1 if the shard's
-- stock is not loaded (Redis lost it, or a repair closed it; the return stays
-- pending and the repair counts it from Postgres), -4 if the shard no longer holds
-- a point of the caller's (it went back in time: the script closes it, as
-- reserve.lua does); seq is the shard's sequence after it.
--
-- Why one script: "already returned?", the increment and the mark must be one step,
-- so that a redelivered timeout, a retry after a crash and a racing cancel return
-- the unit exactly once. The shopper's mark is removed only if it still names this
-- order: a shopper who already bought again keeps the new order's mark.
local seq = history_seq(KEYS[4])
if history_lost(seq, ARGV[4], ARGV[5], KEYS[5]) then
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
if mark and string.match(mark, '^[^:]*') == ARGV[3] then
  redis.call('HDEL', KEYS[2], ARGV[2])
end
return {1, history_write(KEYS[4], KEYS[5], seq, ARGV[6])}
