-- Extend our own lease. Invariant: only a key holding our token is touched; a lock key of
-- another type is reported (prelude.lua), never read as a string.
-- KEYS: 1 lock; ARGV: 1 token, 2 ttl ms.
-- Returns 1 when extended, 0 when not ours, {-1, type, key} for foreign data.
local bad = foreign(KEYS[1], 'string')
if bad then
  return bad
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
