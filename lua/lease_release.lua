-- lease_release.lua: give back a lease taken with SET key token NX PX.
--
-- KEYS[1] the lease   ARGV[1] the holder's token
--
-- Returns 1 if released, 0 if the lease was no longer this holder's (it ran out,
-- perhaps another holder took it: theirs is left alone).
--
-- Why one script: comparing the token and deleting must be one step, or a holder
-- whose lease ran out could delete the next holder's.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
