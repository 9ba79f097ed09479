-- voucher_load.lua: put a flash-sale voucher's stock into Redis and make its outbox
-- stream and relay consumer group exist.
--
-- KEYS[1] stock   KEYS[2] outbox stream   KEYS[3] the shard's sequence
-- ARGV[1] stock to load   ARGV[2] consumer group name
--
-- Returns 1 if the stock was loaded, 0 if a stock key already existed (it is left as
-- it is: it counts orders already admitted). A shard's sequence starts at 0 (the
-- first generation) and is never set back.
--
-- Why one script: the stock key and the consumer group must appear together; a
-- stream without its group would make every relay read fail (NOGROUP), and creating
-- the group must not fail when it already exists (pcall swallows BUSYGROUP).
local loaded = redis.call('SET', KEYS[1], ARGV[1], 'NX')
redis.call('SET', KEYS[3], '0', 'NX')
redis.pcall('XGROUP', 'CREATE', KEYS[2], ARGV[2], '0', 'MKSTREAM')
if loaded then
  return 1
end
return 0
