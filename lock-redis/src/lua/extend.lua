-- Extend our own lease. Invariant: only a key holding our token is touched.
-- KEYS: 1 lock; ARGV: 1 token, 2 ttl ms. Returns 1 when extended, 0 when not ours.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
