-- lock_renew.lua: the watchdog extends a lease it still holds.
--
-- KEYS[1] lock hash
-- ARGV[1] owner id   ARGV[2] lease in ms
--
-- Returns 1 if renewed, 0 if the owner no longer holds the lock.
--
-- Why one script: checking the owner and extending must be one step, or a watchdog
-- could extend a lock that meanwhile passed to someone else.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
