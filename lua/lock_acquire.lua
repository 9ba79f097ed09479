-- lock_acquire.lua: take (or re-enter) a reentrant lock with a lease.
--
-- KEYS[1] lock   hash: owner id -> hold count, plus the field "fence"
-- KEYS[2] fence  counter of grants of this lock in this Redis epoch (never expires
--                with the lock)
-- ARGV[1] owner id (instance + task, never a thread id)   ARGV[2] lease in ms
-- ARGV[3] the Redis epoch (src/epoch.rs): a token is epoch * 2^32 + the counter, so
--         tokens keep growing after Redis went back in time and a new epoch began
--         with a new counter (exact: Lua numbers hold integers up to 2^53)
--
-- Returns {1, fence} when granted (the owner's fencing token: a new, larger one for
-- a new grant, the same one when the owner re-enters), or {0, pttl} when another
-- owner holds it (pttl: ms until its lease runs out).
--
-- Why one script: "is it free or mine?" and "take it" must be one step, or two
-- owners could both see it free (the classic SETNX-then-EXPIRE gap); the fencing
-- token must be drawn in the same step as the grant so that tokens order grants.
if redis.call('EXISTS', KEYS[1]) == 0 then
  local fence = tonumber(ARGV[3]) * 4294967296 + redis.call('INCR', KEYS[2])
  redis.call('HSET', KEYS[1], ARGV[1], 1, 'fence', fence)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, fence}
end
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, tonumber(redis.call('HGET', KEYS[1], 'fence'))}
end
return {0, redis.call('PTTL', KEYS[1])}
