-- counter_next.lua: take COUNT consecutive values from a durable daily counter.
--
-- KEYS[1] value    the last value handed out
-- KEYS[2] ceiling  the highest value this key may hand out
-- ARGV[1] count (>= 1)
-- ARGV[2] ttl in seconds (the key outlives its day, then expires: a new day is a
--         new key, never an expiry racing with an increment)
-- ARGV[3] floor: '' normally; after a {-1} reply, the durable mark from Postgres
-- ARGV[4], ARGV[5] '' and '' normally; after a {-2} reply, a range lo..hi (lo
--         excluded) that Postgres reserved for this call alone
--
-- Invariant: every value above `value` up to `ceiling` belongs to this key alone:
-- it lies in a range Postgres reserved once, for the one call that applied it here.
--
-- A missing key (either of the two) restarts at the floor with nothing to hand out
-- (value = ceiling = floor): a floor read before one loss may arrive after another,
-- below values issued in between, so it is never trusted to be free (the value
-- going back is harmless for the same reason). Values come from reservations only:
--   key missing           -> value = lo, ceiling = hi
--   lo == ceiling         -> ceiling = hi (adjacent: no value skipped)
--   lo >  ceiling         -> value = lo, ceiling = hi (what lies between is someone
--                            else's, or nobody's: skipped, never issued)
--   lo <  ceiling         -> the key already holds a newer range; this one is dropped
--
-- Returns {1, last, 0}:       the values last-count+1 .. last are the caller's;
--         {-1, 0, 0}:         the value key or the ceiling key is missing (Redis
--                             lost it, or a new day): call again with the
--                             durable mark as floor;
--         {-2, need, ceiling}: handing out would pass the ceiling: call again with
--                             a reservation of at least `count` values.
--
-- Why one script: initialising a missing key and incrementing it must not
-- interleave with another instance doing the same (a SET racing an INCR issues one
-- number twice); the ceiling check and the increment must be one step so that no
-- value outside a reserved range is ever handed out.
local count = tonumber(ARGV[1])
local ttl = tonumber(ARGV[2])
local value = redis.call('GET', KEYS[1])
local ceiling_held = redis.call('GET', KEYS[2])
local ceiling = tonumber(ceiling_held or '0')
if ARGV[4] ~= '' then
  local lo = tonumber(ARGV[4])
  if (not value) or lo > ceiling then
    value = ARGV[4]
    ceiling = tonumber(ARGV[5])
    redis.call('SET', KEYS[1], ARGV[4], 'EX', ttl)
    redis.call('SET', KEYS[2], ARGV[5], 'EX', ttl)
  elseif lo == ceiling then
    ceiling = tonumber(ARGV[5])
    redis.call('SET', KEYS[2], ARGV[5], 'EX', ttl)
  end
elseif (not value) or (not ceiling_held) then
  if ARGV[3] == '' then
    return {-1, 0, 0}
  end
  value = ARGV[3]
  ceiling = tonumber(ARGV[3])
  redis.call('SET', KEYS[1], ARGV[3], 'EX', ttl)
  redis.call('SET', KEYS[2], ARGV[3], 'EX', ttl)
end
value = tonumber(value)
if value + count > ceiling then
  return {-2, value + count, ceiling}
end
return {1, redis.call('INCRBY', KEYS[1], count), 0}
