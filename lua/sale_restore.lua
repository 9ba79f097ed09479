-- sale_restore.lua: rewrite one flash sale's Redis state (one shard of it) during a
-- repair, fenced.
--
-- KEYS[1] stock  KEYS[2] buyers  KEYS[3] admitted  KEYS[4] returned  KEYS[5] outbox
-- KEYS[6] fence: the epoch of the newest repair that wrote this shard
-- KEYS[7] given  KEYS[8] moved  KEYS[9] taken: the shard's move ledgers
-- KEYS[10] orders: the index of admitted orders older versions wrote (dropped)
-- ARGV[1] epoch of this repair   ARGV[2] op: 'reset' | 'fill' | 'open'
--   reset:                      refuse an older epoch, take the fence, drop the shard's
--                               state and move ledgers (with the stock key gone,
--                               reserve.lua admits nothing until 'open'; the outbox
--                               stays, to be read; units in transit are counted again
--                               from Postgres)
--   fill  n_buyers, user, mark, ..., admitted, n_returned, order, ...: the marks
--                               ("order:created_ms"), the count of admitted orders
--                               (Postgres's and the outbox's; set, so a call sent
--                               twice writes the same), the returned orders
--   open  stock, group:         set the stock (re-opens the sale), make the group exist
--
-- Returns 1 when done, 0 when a newer repair has taken the sale (this one must stop).
--
-- Why a script and a fence: a repairer that lost its Postgres session (and so its
-- advisory lock) may still be running; every write it makes checks, in the same step,
-- that no newer repair has started on this sale. All keys share the shard's hash tag.
local epoch = tonumber(ARGV[1])
local fence = tonumber(redis.call('GET', KEYS[6]) or '0')
local op = ARGV[2]
if op == 'reset' then
  if fence > epoch then
    return 0
  end
  redis.call('SET', KEYS[6], epoch)
  redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[7], KEYS[8], KEYS[9], KEYS[10])
  return 1
end
if fence ~= epoch then
  return 0
end
if op == 'fill' then
  local i = 3
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
  return 1
end
if op == 'open' then
  redis.call('SET', KEYS[1], ARGV[3])
  redis.pcall('XGROUP', 'CREATE', KEYS[5], ARGV[4], '0', 'MKSTREAM')
  return 1
end
return redis.error_reply('unknown op')
