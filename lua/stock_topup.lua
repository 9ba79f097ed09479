-- stock_topup.lua: put a committed top-up's units on sale, once.
--
-- KEYS[1] stock   KEYS[2] topups (set of top-up ids already added)
-- KEYS[3] seq, KEYS[4] hist: the shard's history (lua/history.lua, which this
-- script follows)
-- ARGV[1] top-up id   ARGV[2] units
-- ARGV[3] the sequences of the caller's points of the shard, ARGV[4] their names
-- ARGV[5] the name of this write
--
-- Returns {code, seq}: code 1 if the units were added now (the write at seq bears
-- ARGV[5]'s name), 0 if this top-up was already added (by this script, or counted
-- by a repair, which writes the id of every top-up Postgres had committed when it
-- read the sale), -1 if the shard's stock is not loaded (Redis lost it, or a
-- repair closed it: the top-up stays pending), -4 if the shard no longer holds a
-- point of the caller's (it went back in time: the script closes it, as
-- reserve.lua does); seq is the shard's sequence after it.
--
-- Why one script: "already added?", the increment and the mark must be one step, so
-- that the handler, a retry and the recovery pass add the units exactly once. A
-- plain INCRBY on a missing key would create it holding only the top-up, selling
-- from nothing. All keys share the shard's hash tag.
local seq = history_seq(KEYS[3])
if history_lost(seq, ARGV[3], ARGV[4], KEYS[4]) then
  redis.call('DEL', KEYS[1])
  return {-4, seq}
end
if redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 1 then
  return {0, seq}
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {-1, seq}
end
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('INCRBY', KEYS[1], ARGV[2])
return {1, history_write(KEYS[3], KEYS[4], seq, ARGV[5])}
