-- A waiter gives up (timeout or cancellation): leave the queue, and if the lock is free wake
-- the next waiter so nobody waits for a departed head. Foreign data at the lock or queue keys
-- is reported and left untouched (prelude.lua).
-- KEYS: 1 lock, 2 queue, 3 queue expiry; ARGV: 1 token, 2 release channel
-- Returns 1, or {-1, type, key} for foreign data.
local bad = foreign_lock_or_queue(KEYS[1], KEYS[2], KEYS[3])
if bad then
  return bad
end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('PUBLISH', ARGV[2], redis.call('ZRANGE', KEYS[2], 0, 0)[1] or '')
end
return 1
