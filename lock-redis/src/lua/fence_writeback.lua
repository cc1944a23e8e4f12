-- Redlock: raise this node's fencing counter to the token the quorum agreed on, so any later
-- holder's token (max over a quorum, which overlaps ours) is strictly greater.
-- KEYS: 1 fencing counter; ARGV: 1 token. Returns the counter after the write.
local c = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
local t = tonumber(ARGV[1])
if t > c then
  redis.call('SET', KEYS[1], ARGV[1])
  return t
end
return c
