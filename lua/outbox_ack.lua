-- outbox_ack.lua: acknowledge outbox entries a relay published (the broker confirmed
-- them), then drop every entry of the stream that no relay needs any more.
--
-- KEYS[1] the outbox stream
-- ARGV[1] the relays' consumer group   ARGV[2..] the ids of the published entries
--
-- Returns the number of entries dropped. Afterwards the stream holds exactly the
-- entries not acknowledged yet (its length is the backlog the console reports). A
-- repair reads the outboxes before the relays' intents and Postgres, so an entry
-- acknowledged while it rebuilds the sale is counted from the intent its relay
-- recorded before publishing it (src/recovery/).
--
-- Why not XDEL the ids: XDEL seeks each id through the stream's nodes, and cost
-- Redis about 8 us per order under a crowd, more than a third of the script that
-- admitted it. The entries an outbox still needs are those a relay read and has not
-- acknowledged (the group's pending list) and those no relay has read yet (after the
-- group's last-delivered id): everything below the smaller of the two is
-- acknowledged, and one XTRIM MINID drops it (whole nodes, and the boundary node's
-- entries one by one). Entries are only ever added with '*', so ids only grow, and
-- nothing below the last-delivered id can still be unread. Acknowledged ids at or
-- above that floor (another relay still holds older entries) are XDELed as before:
-- rare, and the stream never keeps what is published.
if redis.call('EXISTS', KEYS[1]) == 0 then
  -- Gone meanwhile: nothing to acknowledge or drop.
  return 0
end
local group = ARGV[1]
local n = #ARGV
local i = 2
while i <= n do
  local j = math.min(i + 499, n)
  redis.call('XACK', KEYS[1], group, unpack(ARGV, i, j))
  i = j + 1
end
local floor = nil
-- Whether stream id a is below stream id b.
local function below(a, b)
  local a1, a2 = string.match(a, '^(%d+)-(%d+)$')
  local b1, b2 = string.match(b, '^(%d+)-(%d+)$')
  return #a1 < #b1 or (#a1 == #b1 and (a1 < b1 or (a1 == b1 and (#a2 < #b2 or (#a2 == #b2 and a2 < b2)))))
end
local function lower(id)
  if floor == nil or below(id, floor) then
    floor = id
  end
end
for _, g in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
  local name, last
  for k = 1, #g, 2 do
    if g[k] == 'name' then
      name = g[k + 1]
    elseif g[k] == 'last-delivered-id' then
      last = g[k + 1]
    end
  end
  local pending = redis.call('XPENDING', KEYS[1], name)
  if pending[1] > 0 then
    lower(pending[2])
  else
    -- Nothing pending: everything up to the last-delivered id is acknowledged.
    local ms, seq = string.match(last, '^(%d+)-(%d+)$')
    lower(ms .. '-' .. string.format('%.0f', tonumber(seq) + 1))
  end
end
local dropped = 0
if floor ~= nil then
  dropped = redis.call('XTRIM', KEYS[1], 'MINID', floor)
end
local above = {}
for k = 2, n do
  if floor == nil or not below(ARGV[k], floor) then
    above[#above + 1] = ARGV[k]
  end
end
i = 1
while i <= #above do
  local j = math.min(i + 499, #above)
  dropped = dropped + redis.call('XDEL', KEYS[1], unpack(above, i, j))
  i = j + 1
end
return dropped
