-- reserve.lua: admit one flash-sale order, or refuse it.
--
-- KEYS[1] stock   remaining stock of the voucher (integer string)
-- KEYS[2] buyers  hash user id -> order id of each shopper's live order
-- KEYS[3] orders  hash order id -> "user_id:created_ms" of every accepted order
-- KEYS[4] outbox  the voucher's outbox stream, read by the relay
-- ARGV[1] user id   ARGV[2] order id   ARGV[3] created_ms   ARGV[4] voucher id
--
-- Returns the stock left after this order (>= 0) when accepted, or
--   -1 sold out, {-2, order id} the shopper already has an order (its id, from the
--   buyers hash: the shopper learns it without another round trip), -3 the
--   voucher's stock is not loaded (Redis lost it: the caller must refuse rather
--   than sell from nothing).
--
-- Why one script: Redis runs it without interleaving any other command, so the stock
-- check, the one-per-shopper check, the decrement, the shopper mark and the outbox
-- append happen together or not at all. Two shoppers racing for the last unit cannot
-- both pass the check, one shopper's concurrent requests cannot both pass, and an
-- order is never admitted without being in the outbox (a crash of the API after this
-- script, or RabbitMQ being down, cannot lose it). All four keys share the voucher's
-- hash tag, so the script also runs on Redis Cluster.
local stock = redis.call('GET', KEYS[1])
if not stock then
  return -3
end
local existing = redis.call('HGET', KEYS[2], ARGV[1])
if existing then
  return {-2, existing}
end
stock = tonumber(stock)
if stock <= 0 then
  return -1
end
redis.call('DECR', KEYS[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[3], ARGV[2], ARGV[1] .. ':' .. ARGV[3])
redis.call('XADD', KEYS[4], '*', 'o', ARGV[2], 'u', ARGV[1], 'v', ARGV[4], 't', ARGV[3])
return stock - 1
