-- The witness of a counter scope's reservations (src/sequence/witness.rs).
-- KEYS[1]: a sorted set of the ranges Postgres reserved for the scope, as this
--   Redis saw them: member "first-last", score first; adjacent ranges merged, so
--   that a scope reserved in order is one member.
-- ARGV[1], ARGV[2]: the first and the last value of a range Postgres just reserved.
-- ARGV[3]: seconds the witness is kept (a scope is a day's).
-- Ranges arrive in any order (concurrent reservations), but never overlap unless
-- Postgres reserved the same values twice (it went back in time). An overlap:
-- returns the highest value ever seen reserved, and records nothing. Otherwise
-- records the range and returns 0.
local first = tonumber(ARGV[1])
local last = tonumber(ARGV[2])
local first_of = function(member)
  return tonumber(string.match(member, '^(%d+)%-'))
end
local last_of = function(member)
  return tonumber(string.match(member, '%-(%d+)$'))
end
-- Of the ranges starting at or below `last`, the one starting highest ends
-- highest (they are disjoint): it overlaps if any does.
local below = redis.call('ZREVRANGEBYSCORE', KEYS[1], last, '-inf', 'LIMIT', 0, 1)
if #below > 0 and last_of(below[1]) >= first then
  local top = redis.call('ZREVRANGE', KEYS[1], 0, 0)
  return math.max(last_of(top[1]), last_of(below[1]))
end
-- Merged with the range ending just before it and the one starting just after.
local from, to = first, last
if #below > 0 and last_of(below[1]) + 1 == first then
  from = first_of(below[1])
  redis.call('ZREM', KEYS[1], below[1])
end
local above = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. last, '+inf', 'LIMIT', 0, 1)
if #above > 0 and first_of(above[1]) == last + 1 then
  to = last_of(above[1])
  redis.call('ZREM', KEYS[1], above[1])
end
redis.call('ZADD', KEYS[1], from, string.format('%d-%d', from, to))
redis.call('EXPIRE', KEYS[1], ARGV[3])
return 0
