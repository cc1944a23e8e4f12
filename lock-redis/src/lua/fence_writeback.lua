-- Redlock: raise this node's fencing counter to the token the quorum agreed on, so any later
-- holder's token (max over a quorum, which overlaps ours) is strictly greater; and leave this
-- node's waiter queue (a master that did not grant us the lock still lists us, and a stale head
-- would hold everyone else back until its entry expired).
-- KEYS: 1 fencing counter, 2 queue, 3 queue expiry; ARGV: 1 token, 2 owner token.
-- Returns the counter after the write.
redis.call('ZREM', KEYS[2], ARGV[2])
redis.call('ZREM', KEYS[3], ARGV[2])
local c = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
local t = tonumber(ARGV[1])
if t > c then
  redis.call('SET', KEYS[1], ARGV[1])
  return t
end
return c
