-- fenced_set.lua: a Redis write that refuses a fencing token older than the newest
-- one it has seen.
--
-- KEYS[1] the protected key   KEYS[2] the newest token seen for it
-- ARGV[1] fencing token   ARGV[2] value
--
-- Returns 1 if written, 0 if refused (a newer holder has written since).
--
-- Why one script: comparing tokens and writing must be one step, or a stalled
-- holder could pass the check just before the new holder's write and then overwrite it.
local seen = tonumber(redis.call('GET', KEYS[2]) or '0')
local token = tonumber(ARGV[1])
if token < seen then
  return 0
end
redis.call('SET', KEYS[2], token)
redis.call('SET', KEYS[1], ARGV[2])
return 1
