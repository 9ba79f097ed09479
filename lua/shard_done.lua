-- shard_done.lua: close a move on the donor once the receiver took its units.
--
-- KEYS[1] given: hash transfer id -> "dest:n"   KEYS[2] moved: completed transfer ids
-- ARGV[1] transfer id
--
-- Returns 1.
--
-- Why one script: the entry must leave `given` and enter `moved` in one step, so
-- that shard_give.lua, retried with this id at any moment, finds it in exactly one
-- of them and never gives again.
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('SADD', KEYS[2], ARGV[1])
return 1
