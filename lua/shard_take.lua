-- shard_take.lua: the receiver's half of a move of units between two shards.
--
-- KEYS[1] stock of the receiving shard   KEYS[2] taken: set of the transfer ids it took
-- KEYS[3] seq, KEYS[4] hist: the shard's history (lua/history.lua, which this
-- script follows)
-- ARGV[1] transfer id   ARGV[2] units (as shard_give.lua gave them)
-- ARGV[3] the sequences of the caller's points of the shard, ARGV[4] their names
-- ARGV[5] the donor's sequence when it gave (its generation is the high part)
-- ARGV[6] the name of this write
--
-- Returns {code, seq}: code 1 if the units were added now (the write at seq bears
-- ARGV[6]'s name), 0 if this transfer was already taken, -2 if a repair of the sale
-- began after the give (this shard's generation is newer: the repair counted the
-- sale from Postgres, units in transit included, and the donor's ledger is gone),
-- -3 if the stock is not loaded, -4 if the shard no longer holds a point of the
-- caller's (it went back in time: the script closes it, as reserve.lua does); seq
-- the shard's sequence after it.
--
-- Why one script: "already taken?", the increment and the mark must be one step, so
-- that a retry, a second recovering process or a replay adds the units exactly once.
local seq = history_seq(KEYS[3])
if history_lost(seq, ARGV[3], ARGV[4], KEYS[4]) then
  redis.call('DEL', KEYS[1])
  return {-4, seq}
end
if redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 1 then
  return {0, seq}
end
if math.floor(seq / GEN) > math.floor(tonumber(ARGV[5]) / GEN) then
  return {-2, seq}
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {-3, seq}
end
redis.call('INCRBY', KEYS[1], tonumber(ARGV[2]))
redis.call('SADD', KEYS[2], ARGV[1])
return {1, history_write(KEYS[3], KEYS[4], seq, ARGV[6])}
