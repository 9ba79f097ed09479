-- shard_read.lua: read a shard as a caller that remembers points of its history
-- (lua/history.lua, which this script follows): whether its stock is there,
-- whether it still holds the caller's points, and a shopper's mark, all at one
-- instant. Writes nothing.
--
-- KEYS[1] stock  KEYS[2] seq  KEYS[3] hist  KEYS[4] (optional) buyers
-- ARGV[1] the sequences of the caller's points of the shard, ARGV[2] their names
-- ARGV[3] (with KEYS[4]) the shopper whose mark to read
--
-- Returns {stock present (1/0), seq, lost (1/0), mark or false}: lost is 1 when the
-- shard no longer holds a point of the caller's (it went back in time: a lookup
-- must not answer "no such order" from it).
--
-- Why one script: a mark read from a shard is only an answer if the shard holds
-- the history its caller saw at the instant the mark is read.
local seq = history_seq(KEYS[2])
local lost = 0
if history_lost(seq, ARGV[1], ARGV[2], KEYS[3]) then
  lost = 1
end
local mark = false
if KEYS[4] then
  mark = redis.call('HGET', KEYS[4], ARGV[3])
end
return {redis.call('EXISTS', KEYS[1]), seq, lost, mark}
