-- shard_give.lua: the donor's half of a move of units between two shards of a sale.
--
-- KEYS[1] stock of the donor shard   KEYS[2] given: hash transfer id -> "dest:n"
-- KEYS[3] moved: set of the transfer ids completed   KEYS[4] seq, KEYS[5] hist: the
-- shard's history (lua/history.lua, which this script follows)
-- ARGV[1] transfer id (fresh per move)   ARGV[2] receiving shard   ARGV[3] units wanted
-- ARGV[4] the sequences of the caller's points of the shard, ARGV[5] their names
-- ARGV[6] the name of this write
--
-- Returns {n, seq, wrote}: n the units given (the same n again for a transfer id
-- already given, 0 for one already completed or spent, or when the shard has
-- nothing to give: that spends the id), -3 if the shard's stock is not loaded, -4
-- if the shard no longer holds a point of the caller's (it went back in time: the
-- script closes it, as reserve.lua does); seq the shard's sequence after it; wrote
-- 1 if this call wrote (its write at seq bears ARGV[6]'s name). The receiver takes
-- the units only within the generation of seq (shard_take.lua): a repair between
-- the two steps rebuilt the receiver from Postgres, which counts them already.
--
-- Why one script: taking the units off the stock and recording them in the ledger
-- must be one step: the units are then always either on sale here or in `given`
-- (in transit, counted by the audit) and a retry with the same id (a timeout) finds
-- the entry and gives nothing more. The receiver is another slot, so it cannot be in
-- this script: shard_take.lua adds the units there, shard_done.lua closes the entry.
local seq = history_seq(KEYS[4])
if history_lost(seq, ARGV[4], ARGV[5], KEYS[5]) then
  redis.call('DEL', KEYS[1])
  return {-4, seq, 0}
end
local entry = redis.call('HGET', KEYS[2], ARGV[1])
if entry then
  return {tonumber(string.match(entry, ':(%d+)$')), seq, 0}
end
if redis.call('SISMEMBER', KEYS[3], ARGV[1]) == 1 then
  return {0, seq, 0}
end
local stock = redis.call('GET', KEYS[1])
if not stock then
  return {-3, seq, 0}
end
local n = math.min(tonumber(ARGV[3]), tonumber(stock))
if n <= 0 then
  -- Nothing to give: the id is spent all the same, so that this move, retried
  -- later (by its mover or by the recovery pass, which may have run it first),
  -- never gives after the recovery pass forgot it.
  redis.call('SADD', KEYS[3], ARGV[1])
  return {0, history_write(KEYS[4], KEYS[5], seq, ARGV[6]), 1}
end
redis.call('DECRBY', KEYS[1], n)
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2] .. ':' .. n)
return {n, history_write(KEYS[4], KEYS[5], seq, ARGV[6]), 1}
