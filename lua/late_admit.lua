-- late_admit.lua: account in Redis for an order a relay read before a repair of its
-- sale and that the repair could not count (its outbox entry was lost with Redis
-- going back in time before the relay recorded its intent), before the relay
-- publishes it (src/outbox/relay/late.rs).
--
-- KEYS[1] stock  KEYS[2] buyers  KEYS[3] admitted  KEYS[4] the shard's sequence
-- ARGV[1] user id  ARGV[2] order id  ARGV[3] created_ms  ARGV[4] the caller's floor
--
-- Returns {code, seq}: code 1 if the shard now counts the order (its shopper's mark
-- already names it, or a unit and the mark were free and are now taken), 0 if it
-- cannot (the unit or the shopper was sold again since: the order is stored
-- `failed`, an incident), -1 if the stock is not loaded (lost, or closed for a
-- repair: try again later), -4 if the shard is behind the caller's floor (closed
-- now, as reserve.lua does); seq the shard's sequence after it.
--
-- Why one script: the same checks and writes as reserve.lua, in one step.
local seq = tonumber(redis.call('GET', KEYS[4]) or '0')
if seq < tonumber(ARGV[4]) then
  redis.call('DEL', KEYS[1])
  return {-4, seq}
end
local holder = redis.call('HGET', KEYS[2], ARGV[1])
-- A mark is "id:created_ms" (or, written by an older version, the id).
if holder and string.match(holder, '^[^:]*') == ARGV[2] then
  return {1, seq}
end
local stock = redis.call('GET', KEYS[1])
if not stock then
  return {-1, seq}
end
if tonumber(stock) <= 0 or holder then
  return {0, seq}
end
redis.call('DECR', KEYS[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2] .. ':' .. ARGV[3])
redis.call('INCR', KEYS[3])
return {1, redis.call('INCR', KEYS[4])}
