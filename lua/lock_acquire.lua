-- lock_acquire.lua: take (or re-enter) a reentrant lock with a lease.
--
-- KEYS[1] lock   hash: owner id -> hold count, plus the field "fence"
-- KEYS[2] fence  the lock's last fencing token (never expires with the lock)
-- ARGV[1] owner id (instance + task, never a thread id)   ARGV[2] lease in ms
-- ARGV[3] the highest token of this lock the caller's process has seen (0 if none)
--
-- Returns {1, fence} when granted (the owner's fencing token: a new, larger one for
-- a new grant, the same one when the owner re-enters), or {0, pttl} when another
-- owner holds it (pttl: ms until its lease runs out).
--
-- A new token is above the counter and above ARGV[3]: a Redis that went back in
-- time with an old counter cannot hand the calling process a token it has seen
-- handed out before (src/lock/owner.rs).
--
-- Why one script: "is it free or mine?" and "take it" must be one step, or two
-- owners could both see it free (the classic SETNX-then-EXPIRE gap); the fencing
-- token must be drawn in the same step as the grant so that tokens order grants.
if redis.call('EXISTS', KEYS[1]) == 0 then
  local fence = math.max(tonumber(redis.call('GET', KEYS[2]) or '0'), tonumber(ARGV[3])) + 1
  redis.call('SET', KEYS[2], string.format('%.0f', fence))
  redis.call('HSET', KEYS[1], ARGV[1], 1, 'fence', string.format('%.0f', fence))
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, fence}
end
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, tonumber(redis.call('HGET', KEYS[1], 'fence'))}
end
return {0, redis.call('PTTL', KEYS[1])}
