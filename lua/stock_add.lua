-- stock_add.lua: add stock to a running sale.
--
-- KEYS[1] stock
-- ARGV[1] how many units to add (> 0)
--
-- Returns the new stock, or -1 if the stock key is missing.
--
-- Why a script: a plain INCRBY on a missing key would create it holding only the
-- top-up, selling from nothing after Redis lost the voucher (and its shopper marks).
-- Checking existence and adding must be one step.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return -1
end
return redis.call('INCRBY', KEYS[1], ARGV[1])
