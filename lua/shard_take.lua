-- shard_take.lua: the receiver's half of a move of units between two shards.
--
-- KEYS[1] stock of the receiving shard   KEYS[2] taken: set of the transfer ids it took
-- KEYS[3] the shard's repair fence
-- ARGV[1] transfer id   ARGV[2] units (as shard_give.lua gave them)
-- ARGV[3] the Redis epoch the caller verified
--
-- Returns 1 if the units were added now, 0 if this transfer was already taken, -2 if
-- a repair newer than ARGV[3] rewrote the shard, -3 if its stock is not loaded (the
-- units stay in the donor's ledger; the repair rebuilds the sale from Postgres).
--
-- Why one script: "already taken?", the increment and the mark must be one step, so
-- that a retry, a second recovering process or a replay adds the units exactly once.
if redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 1 then
  return 0
end
if tonumber(redis.call('GET', KEYS[3]) or '0') > tonumber(ARGV[3]) then
  return -2
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  return -3
end
redis.call('INCRBY', KEYS[1], tonumber(ARGV[2]))
redis.call('SADD', KEYS[2], ARGV[1])
return 1
