-- history.lua: the part every script that writes a shard shares (the script's own
-- text follows it: src/recovery/history.rs puts the two together). It names each
-- write and checks that the shard still holds the history its caller saw.
--
-- A shard's history is two keys of its hash tag:
--   seq   gen * 2^32 + k: the shard's k-th write of generation gen (a repair takes
--         the next generation; voucher_load.lua starts a sale's shards at 0);
--   hist  a string holding, at bytes 8(k-1) .. 8k-1, the name of write k of the
--         current generation: 8 bytes the writer drew at random (never all zero).
--         Bytes no write of this version named (a write of a version before names,
--         a shard loaded before them) are zero.
-- A caller remembers points of the history it saw: (seq, name) pairs, the name
-- of write seq. The shard holds a point when its generation is newer (a repair
-- since), or when it is the same generation, its sequence is at least the point's,
-- and its write at the point's k bears the point's name. A point whose name is all
-- zero is a count (a floor of a version before names, a generation's start): held
-- when the sequence is at least its own. Counting alone cannot tell the history a
-- caller saw from another history of the same length (a rollback followed by
-- another process's write); a name can, whoever wrote since.

local GEN = 4294967296
local NO_NAME = string.rep('\0', 8)

-- Whether the shard, at sequence `seq`, no longer holds one of the points whose
-- sequences `seqs` lists ("s1,s2,...") with their names in `names` (8 bytes each,
-- in the same order).
local function history_lost(seq, seqs, names, hist)
  local gen = math.floor(seq / GEN)
  local i = 0
  for s in string.gmatch(seqs, '%d+') do
    i = i + 1
    local p = tonumber(s)
    if p > seq then
      return true
    end
    local pgen = math.floor(p / GEN)
    if pgen == gen then
      local k = p - pgen * GEN
      local name = string.sub(names, 8 * i - 7, 8 * i)
      if k > 0 and name ~= NO_NAME and name ~= '' then
        if redis.call('GETRANGE', hist, 8 * k - 8, 8 * k - 1) ~= name then
          return true
        end
      end
    elseif pgen > gen then
      return true
    end
  end
  return false
end

-- Names the shard's next write `name` (after `seq`) and returns its sequence.
local function history_write(seqkey, hist, seq, name)
  local k = seq + 1 - math.floor((seq + 1) / GEN) * GEN
  redis.call('SETRANGE', hist, 8 * k - 8, name)
  return redis.call('INCR', seqkey)
end

-- The shard's sequence now (0 if it has none).
local function history_seq(seqkey)
  return tonumber(redis.call('GET', seqkey) or '0')
end
