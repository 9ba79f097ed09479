-- reserve.lua: admit or refuse a batch of flash-sale orders for one shard of a
-- sale, each exactly as if it ran alone, one after the other in the batch's order.
--
-- KEYS[1] stock     remaining stock of the shard (integer string)
-- KEYS[2] buyers    hash user id -> "order_id:created_ms" of each shopper's live
--                   order (a mark written before this version is the id alone)
-- KEYS[3] admitted  the number of orders the shard admitted (integer string)
-- KEYS[4] outbox    the shard's outbox stream, read by the relay: one entry per call
--                   that accepted any order, fields `v` the voucher id, `b` the
--                   accepted orders as "id,user,created_ms,id,user,created_ms,..."
--                   `s` the shard's sequence after the call and `h` the name of its
--                   write (lua/history.lua); from format 2 on, field `f` the format
--                   (src/ordering/outbox/format.rs)
-- KEYS[5] seq       the shard's sequence, KEYS[6] hist its writes' names (see
--                   lua/history.lua, which this script follows)
-- ARGV[1] voucher id
-- ARGV[2] the sequences of the caller's points of the shard ("s1,s2,...")
-- ARGV[3] their names (8 bytes each, in order)
-- ARGV[4] the name of this call's write (8 bytes the caller drew)
-- ARGV[5] the outbox entry's `b` for the call's orders, all of them, in order
--         (what the entry holds when every order is accepted; the caller builds
--         it from the same orders as the marks)
-- ARGV[6] the outbox format to write: 1 (no `f` field) or newer (stamped in `f`);
--         the caller writes only a format every live relay reads
-- then for each order two values: the user id and its mark, "order_id:created_ms"
--
-- Returns {status, seq, wrote, replies...}:
--   status 1: one reply per order follows, in order: the stock left after it
--     (>= 0) when accepted, or -1 sold out, {-2, order id} the shopper already has
--     an order (its id: the shopper learns it without another round trip; also when
--     the shopper's first order is earlier in this batch); seq is the sequence after
--     the call, wrote 1 if the call wrote (its write at seq bears ARGV[4]'s name),
--     0 if it admitted nothing (seq unchanged);
--   status 0: the shard no longer holds a point of the caller's: it went back in
--     time and lost writes someone saw (or holds another history of the same
--     length). The script closes it (drops the stock key, so that no caller sells
--     from it, whatever it knows) and writes nothing else; seq is the sequence it
--     found;
--   status -1: the shard's stock is not loaded (Redis lost it, or a repair closed
--     it): the caller must refuse rather than sell from nothing.
--
-- Why one script: Redis runs it without interleaving any other command, so for each
-- order the stock check, the one-per-shopper check, the decrement, the shopper mark
-- and the outbox append happen together or not at all. Two shoppers racing for the
-- last unit cannot both pass the check, one shopper's concurrent requests cannot both
-- pass, and an order is never admitted without being in the outbox (a crash of the
-- API after this script, or RabbitMQ being down, cannot lose it). The sequence is
-- checked in the same step that would use the state: a shard that lost writes is
-- caught by the first call that knows of them, before it sells. All keys share the
-- shard's hash tag, so the script also runs on Redis Cluster.
--
-- Nothing is written before every order is decided, and the writes come in the
-- order of a single order's script: the decrement, the marks, the count, the
-- outbox entry, then the write's name and the sequence. A stock that is not an integer, or a call of
-- more orders than a call may carry, is an error before any write.
--
-- Why a batch: the orders that reach one API process for one shard while its
-- previous call is in flight travel in the next call (see src/ordering/gates.rs), so
-- Redis parses, runs and answers one call for many orders. The marks, the count,
-- the decrement and the outbox entry are written once per call, after every order
-- was decided: one stream entry for the call's orders costs Redis one XADD (and
-- the relay one entry to read, acknowledge and trim) where one per order cost as
-- many.
--
-- Why a count and no index by order id: the shopper's mark already names the order
-- and its time, which is all an owner's lookup needs. A second hash entry per order
-- (order id -> shopper) cost about a fifth of Redis's CPU per order in a cost run
-- (docs/PERFORMANCE.md) for two uses: counts, which the `admitted` counter keeps
-- now, and an admin's lookup of an order not yet in Postgres, which scans the
-- marks now (src/ordering/status.rs).
local n = (#ARGV - 6) / 2
if n ~= math.floor(n) or n > 1000 then
  return redis.error_reply('reserve.lua: a voucher id, points, a name, an outbox entry, a format and two values per order, at most 1000 orders')
end
-- The outbox entry of the call's orders `b`, its sequence `s` and the write's name `h`.
local function append(b, s)
  if ARGV[6] == '1' then
    redis.call('XADD', KEYS[4], '*', 'v', ARGV[1], 'b', b, 's', s, 'h', ARGV[4])
  else
    redis.call('XADD', KEYS[4], '*', 'v', ARGV[1], 'b', b, 's', s, 'h', ARGV[4], 'f', ARGV[6])
  end
end
local seq = history_seq(KEYS[5])
if history_lost(seq, ARGV[2], ARGV[3], KEYS[6]) then
  redis.call('DEL', KEYS[1])
  return {0, seq, 0}
end
local out = {1, seq, 0}
if n == 0 then
  return out
end
local stock = redis.call('GET', KEYS[1])
if not stock then
  return {-1, seq, 0}
end
if not string.match(stock, '^%-?%d+$') then
  return redis.error_reply('reserve.lua: the stock is not an integer')
end
stock = tonumber(stock)
-- Every shopper's mark in one read (one HMGET rather than a call per order: a
-- call from Lua into Redis costs about as much as the check it makes).
local users = {}
for i = 1, n do
  users[i] = ARGV[2 * i + 5]
end
local held = redis.call('HMGET', KEYS[2], unpack(users))
-- The common case while a sale lasts: n distinct shoppers, none of whom holds an
-- order, and n units left. Then every order is accepted, in order, and the writes
-- are the call's arguments as they are: the marks are ARGV[7..], the outbox entry
-- ARGV[5]. Lua then builds no string and writes no table entry per order but the
-- shopper's: in a cost run the script's own Lua work, not its Redis commands, was
-- about 60 % of its time (INFO commandstats, docs/PERFORMANCE.md).
local all = stock >= n
if all then
  local seen = {}
  for i = 1, n do
    local user = users[i]
    if held[i] or seen[user] then
      all = false
      break
    end
    seen[user] = true
  end
end
if all then
  redis.call('DECRBY', KEYS[1], n)
  redis.call('HSET', KEYS[2], unpack(ARGV, 7, 6 + 2 * n))
  redis.call('INCRBY', KEYS[3], n)
  append(ARGV[5], string.format('%.0f', seq + 1))
  out[2] = history_write(KEYS[5], KEYS[6], seq, ARGV[4])
  out[3] = 1
  for i = 1, n do
    out[i + 3] = stock - i
  end
  return out
end
-- Otherwise each order in turn, as alone.
local taken = 0
local marks = {}
local mine = {}
local packed = {}
for i = 1, n do
  local user = users[i]
  local existing = mine[user] or held[i]
  if existing then
    -- A mark is "id:created_ms" (or, written by an older version, the id).
    out[i + 3] = {-2, string.match(existing, '^[^:]*')}
  elseif stock <= 0 then
    out[i + 3] = -1
  else
    local mark = ARGV[2 * i + 6]
    local id = string.match(mark, '^[^:]*')
    stock = stock - 1
    taken = taken + 1
    mine[user] = id
    marks[#marks + 1] = user
    marks[#marks + 1] = mark
    packed[#packed + 1] = id
    packed[#packed + 1] = user
    packed[#packed + 1] = string.sub(mark, #id + 2)
    out[i + 3] = stock
  end
end
if taken > 0 then
  redis.call('DECRBY', KEYS[1], taken)
  redis.call('HSET', KEYS[2], unpack(marks))
  redis.call('INCRBY', KEYS[3], taken)
  append(table.concat(packed, ','), string.format('%.0f', seq + 1))
  out[2] = history_write(KEYS[5], KEYS[6], seq, ARGV[4])
  out[3] = 1
end
return out
