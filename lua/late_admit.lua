-- late_admit.lua: account in Redis for an order a relay read before a repair of its
-- sale and that the repair could not count (its outbox entry was lost with Redis
-- going back in time before the relay recorded its intent), or that the process
-- which acknowledged it holds in memory after Redis lost it (src/recovery/rescue.rs),
-- and put it back into the shard's outbox, as a new entry, for a relay to publish
-- (src/ordering/outbox/relay/read_before_repair.rs).
--
-- KEYS[1] stock  KEYS[2] buyers  KEYS[3] admitted  KEYS[4] returned  KEYS[5] outbox
-- KEYS[6] seq, KEYS[7] hist: the shard's history (lua/history.lua, which this
-- script follows)
-- ARGV[1] voucher id  ARGV[2] user id  ARGV[3] order id  ARGV[4] created_ms
-- ARGV[5] the sequences of the caller's points of the shard, ARGV[6] their names:
--         among them the sale's generation * 2^32 (a count), so that a shard the
--         sale's last repair has not reset yet is refused
-- ARGV[7] the name of this write
-- ARGV[8] the outbox format to write (src/ordering/outbox/format.rs; absent or 1: no `f`
--         field, as before formats were stamped)
--
-- Returns {code, seq}: code 1 if the shard counts the order now (a unit and the
-- shopper's mark were free and are taken, and the order is in the outbox again;
-- the write at seq bears ARGV[7]'s name), 2 if it counted it already (its
-- shopper's mark names it, or its unit came back: it was returned), 0 if it cannot
-- (the unit or the shopper was sold again since: the order is stored `failed`, an
-- incident), -1 if the stock is not loaded (lost, or closed for a repair: try again
-- later), -4 if the shard no longer holds a point of the caller's (closed now, as
-- reserve.lua does); seq the sequence after it.
--
-- Why one script: the same checks and writes as reserve.lua, in one step.
local seq = history_seq(KEYS[6])
if history_lost(seq, ARGV[5], ARGV[6], KEYS[7]) then
  redis.call('DEL', KEYS[1])
  return {-4, seq}
end
local stock = redis.call('GET', KEYS[1])
if not stock then
  return {-1, seq}
end
local holder = redis.call('HGET', KEYS[2], ARGV[2])
-- A mark is "id:created_ms" (or, written by an older version, the id).
if holder and string.match(holder, '^[^:]*') == ARGV[3] then
  return {2, seq}
end
if redis.call('SISMEMBER', KEYS[4], ARGV[3]) == 1 then
  return {2, seq}
end
if tonumber(stock) <= 0 or holder then
  return {0, seq}
end
redis.call('DECR', KEYS[1])
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3] .. ':' .. ARGV[4])
redis.call('INCR', KEYS[3])
local entry = {'v', ARGV[1], 'b', ARGV[3] .. ',' .. ARGV[2] .. ',' .. ARGV[4],
  's', string.format('%.0f', seq + 1), 'h', ARGV[7]}
if ARGV[8] and ARGV[8] ~= '1' then
  entry[9] = 'f'
  entry[10] = ARGV[8]
end
redis.call('XADD', KEYS[5], '*', unpack(entry))
return {1, history_write(KEYS[6], KEYS[7], seq, ARGV[7])}
