-- Redlock: raise this node's fencing counter to the token the round settled on, so any later
-- holder's token (above every counter a quorum reports, which overlaps ours) is strictly
-- greater; and leave this node's waiter queue (a master that did not grant us the lock still
-- lists us, and a stale head would hold everyone else back until its entry expired).
-- Invariant: the counter never decreases; foreign data at the counter or queue keys is
-- reported before anything is written (prelude.lua).
-- KEYS: 1 fencing counter, 2 queue, 3 queue expiry; ARGV: 1 token, 2 owner token.
-- Returns {1, counter after the write}, or {-1, type, key} for foreign data.
local bad = foreign(KEYS[2], 'zset') or foreign(KEYS[3], 'zset')
if bad then
  return bad
end
local c
c, bad = counter_at(KEYS[1])
if bad then
  return bad
end
redis.call('ZREM', KEYS[2], ARGV[2])
redis.call('ZREM', KEYS[3], ARGV[2])
local t = tonumber(ARGV[1])
if t > c then
  redis.call('SET', KEYS[1], ARGV[1])
  c = t
end
return {1, string.format('%d', c)}
