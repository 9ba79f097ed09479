-- The witness of a counter scope's reservations (src/sequence/witness.rs).
-- KEYS[1]: the witness (the highest value reserved so far that this Redis saw).
-- ARGV[1], ARGV[2]: the first and the last value of a range Postgres just reserved.
-- A range at or below the witness means Postgres reserved those values before
-- and forgot it (it went back in time): returns the witness and writes nothing.
-- Otherwise records the range's last value and returns 0.
local seen = tonumber(redis.call('GET', KEYS[1]) or '0')
local first = tonumber(ARGV[1])
if seen >= first then
  return seen
end
redis.call('SET', KEYS[1], ARGV[2])
return 0
