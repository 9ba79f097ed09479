-- late_admit.lua: account in Redis for an order admitted before a repair that the
-- repair could not see (it was in a relay's or worker's hands), before the worker
-- stores it.
--
-- KEYS[1] stock  KEYS[2] buyers  KEYS[3] orders
-- ARGV[1] user id  ARGV[2] order id  ARGV[3] created_ms
--
-- Returns 1 if Redis now counts the order (it already did, or a unit and the
-- shopper's mark were free and are now taken), 0 if it cannot: the stock was sold
-- again, or the shopper has another live order, since the repair.
--
-- Why one script: the same checks and writes as reserve.lua, in one step.
if redis.call('HEXISTS', KEYS[3], ARGV[2]) == 1 then
  return 1
end
local stock = tonumber(redis.call('GET', KEYS[1]) or '-1')
local holder = redis.call('HGET', KEYS[2], ARGV[1])
if stock <= 0 or (holder and holder ~= ARGV[2]) then
  return 0
end
redis.call('DECR', KEYS[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[3], ARGV[2], ARGV[1] .. ':' .. ARGV[3])
return 1
