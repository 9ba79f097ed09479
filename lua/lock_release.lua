-- lock_release.lua: release one hold of a reentrant lock.
--
-- KEYS[1] lock hash
-- ARGV[1] owner id   ARGV[2] channel to tell waiters on   ARGV[3] lock name
--
-- Returns the holds left (0: the lock is free now), -1 if the lock no longer exists
-- (the lease ran out), -2 if another owner holds it (we lost it and someone else
-- took it). Nothing changes in the last two cases.
--
-- Why one script: comparing the owner and deleting must be one step, or a holder
-- whose lease ran out could delete the lock of the next holder (the classic GET then
-- DEL bug); the wake-up must follow the delete with nothing in between.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return -1
end
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  return -2
end
local left = redis.call('HINCRBY', KEYS[1], ARGV[1], -1)
if left > 0 then
  return left
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[2], ARGV[3])
return 0
