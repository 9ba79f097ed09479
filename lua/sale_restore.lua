-- sale_restore.lua: rewrite one shard of a flash sale in Redis during a repair.
--
-- KEYS[1] stock  KEYS[2] buyers  KEYS[3] admitted  KEYS[4] returned  KEYS[5] outbox
-- KEYS[6] seq, KEYS[12] hist: the shard's history (lua/history.lua, which this
-- script follows)
-- KEYS[7] given  KEYS[8] moved  KEYS[9] taken: the shard's move ledgers
-- KEYS[10] orders: the index of admitted orders older versions wrote (dropped)
-- KEYS[11] topups: the top-ups the shard counts
-- ARGV[1] the repair's generation   ARGV[2] op   ARGV[3] for every op but close:
-- the sequence the repairer left the shard at (its last step's reply)
-- ARGV[4] for every op but close: the name of the op's write
--   close:                      refuse a repair older than the shard's generation;
--                               drop the stock key (with it gone, no script sells,
--                               returns, tops up, moves or admits late until
--                               'open') and start the generation's history (the
--                               sequence at gen * 2^32, no names); everything else
--                               stays, to be read (the outbox) and answered from
--                               (the marks) until 'clear'. A shard this generation
--                               closed already, and nothing wrote since, is closed
--                               again (a repair that could not finish, tried again
--                               in its generation)
--   clear:                      drop the shard's state and move ledgers (the
--                               outbox stays)
--   fill  n_buyers, user, mark, ..., admitted, n_returned, order, ..., n_topups, id, ...:
--                               the marks ("order:created_ms"), the count of
--                               admitted orders (set, not added), the returned
--                               orders, the top-ups Postgres had committed
--   requeue voucher, orders[, format]:
--                               append an outbox entry of `orders` ("id,user,created_ms,...",
--                               as reserve.lua writes them) with the shard's sequence
--                               and the write's name, in `format`
--                               (src/ordering/outbox/format.rs; absent or 1: no `f`)
--   open  stock, group:         set the stock (re-opens the shard), make the group exist
--
-- Returns {1, seq} when done (seq: the sequence now, to pass to the next step), or
-- {0, seq} when the shard is not where this repairer left it: a newer repair took
-- it, or it went back in time during this repair (this repair must stop; the next
-- one starts over).
--
-- Why a script and an exact sequence: a repairer that lost its lease may still be
-- running, and Redis may go back in time during a repair; every step checks, in
-- the same step, that the shard holds exactly what this repairer's previous step
-- left. All keys share the shard's hash tag.
local gen = tonumber(ARGV[1])
local base = gen * GEN
local seq = history_seq(KEYS[6])
local op = ARGV[2]
if op == 'close' then
  if seq > base then
    return {0, seq}
  end
  redis.call('DEL', KEYS[1], KEYS[12])
  redis.call('SET', KEYS[6], string.format('%.0f', base))
  return {1, base}
end
if seq ~= tonumber(ARGV[3]) or seq < base or seq >= base + GEN then
  return {0, seq}
end
local name = ARGV[4]
if op == 'clear' then
  redis.call('DEL', KEYS[2], KEYS[3], KEYS[4], KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11])
  return {1, history_write(KEYS[6], KEYS[12], seq, name)}
end
if op == 'fill' then
  local i = 5
  local n = tonumber(ARGV[i])
  for j = 1, n do
    redis.call('HSET', KEYS[2], ARGV[i + 2 * j - 1], ARGV[i + 2 * j])
  end
  i = i + 2 * n + 1
  redis.call('SET', KEYS[3], ARGV[i])
  i = i + 1
  n = tonumber(ARGV[i])
  for j = 1, n do
    redis.call('SADD', KEYS[4], ARGV[i + j])
  end
  i = i + n + 1
  n = tonumber(ARGV[i])
  for j = 1, n do
    redis.call('SADD', KEYS[11], ARGV[i + j])
  end
  return {1, history_write(KEYS[6], KEYS[12], seq, name)}
end
if op == 'requeue' then
  local entry = {'v', ARGV[5], 'b', ARGV[6], 's', string.format('%.0f', seq + 1), 'h', name}
  if ARGV[7] and ARGV[7] ~= '1' then
    entry[9] = 'f'
    entry[10] = ARGV[7]
  end
  redis.call('XADD', KEYS[5], '*', unpack(entry))
  return {1, history_write(KEYS[6], KEYS[12], seq, name)}
end
if op == 'open' then
  redis.call('SET', KEYS[1], ARGV[5])
  redis.pcall('XGROUP', 'CREATE', KEYS[5], ARGV[6], '0', 'MKSTREAM')
  return {1, history_write(KEYS[6], KEYS[12], seq, name)}
end
return redis.error_reply('unknown op')
