-- counter_raise.lua: record that the durable mark in Postgres was raised.
--
-- KEYS[1] ceiling
-- ARGV[1] the new durable mark   ARGV[2] ttl in seconds
--
-- Returns the ceiling now in force.
--
-- Why a script: two instances raising at once must leave the higher mark, never
-- lower it (compare and set in one step).
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
local proposed = tonumber(ARGV[1])
if proposed > current then
  redis.call('SET', KEYS[1], ARGV[1], 'EX', tonumber(ARGV[2]))
  return proposed
end
return current
