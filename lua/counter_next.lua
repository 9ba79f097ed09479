-- counter_next.lua: take COUNT consecutive values from a durable daily counter.
--
-- KEYS[1] value    the last value handed out
-- KEYS[2] ceiling  the highest value the durable mark in Postgres allows
-- ARGV[1] count (>= 1)
-- ARGV[2] ttl in seconds (the key outlives its day, then expires: a new day is a
--         new key, never an expiry racing with an increment)
-- ARGV[3] floor: '' normally; after a {-1} reply, the durable mark from Postgres
--
-- Returns {1, last}: the values last-count+1 .. last are the caller's;
--         {-1, 0}:   the value key is missing (Redis lost it, or a new day): call
--                    again with ARGV[3] = the durable mark;
--         {-2, need}: handing out would pass the ceiling: raise the durable mark to
--                    at least `need`, store it with counter_raise.lua, call again.
--
-- Why one script: initialising a missing key from the floor and incrementing it must
-- not interleave with another instance doing the same (a SET racing an INCR issues
-- one number twice); the ceiling check and the increment must be one
-- step so that no value above the durable mark is ever handed out.
local count = tonumber(ARGV[1])
local ttl = tonumber(ARGV[2])
local value = redis.call('GET', KEYS[1])
if not value then
  if ARGV[3] == '' then
    return {-1, 0}
  end
  value = ARGV[3]
  redis.call('SET', KEYS[1], value, 'EX', ttl)
  -- The mark we were given is all that is known durable: hand out nothing above it
  -- until Postgres has been raised again.
  redis.call('SET', KEYS[2], value, 'EX', ttl)
end
value = tonumber(value)
local ceiling = tonumber(redis.call('GET', KEYS[2]) or '0')
if value + count > ceiling then
  return {-2, value + count}
end
return {1, redis.call('INCRBY', KEYS[1], count)}
