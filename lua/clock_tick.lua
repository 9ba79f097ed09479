-- clock_tick.lua: advance the Redis clock, unless Redis went back in time.
--
-- KEYS[1] the clock   ARGV[1] the highest value Postgres has recorded, read
-- before this call
--
-- Returns {1, the new value}, or {0, the value now} when the clock is below ARGV[1].
--
-- Why a script: a clock that went back is left where it is. Advanced by every
-- check regardless, it would pass the recorded value after enough checks and a
-- server that went back in time would look healthy again.
local now = tonumber(redis.call('GET', KEYS[1]) or '0')
if now < tonumber(ARGV[1]) then
  return {0, now}
end
return {1, redis.call('INCR', KEYS[1])}
