-- Release only our own lock, then wake the next queued waiter.
-- Invariant: a key that does not hold our token (expired and re-taken, a redis-py holder) is
-- never deleted; foreign data at the lock or queue keys is reported before anything is written
-- (prelude.lua) — the lock, if still ours, then frees itself when its lease runs out.
-- KEYS: 1 lock, 2 queue, 3 queue expiry; ARGV: 1 token, 2 release channel
-- Returns 1 when released, 0 when the lock was not ours, {-1, type, key} for foreign data.
local bad, queued = foreign_lock_or_queue(KEYS[1], KEYS[2], KEYS[3])
if bad then
  return bad
end
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
if not queued then
  -- Nobody is queued (the uncontended case): no queue upkeep; the empty message still wakes
  -- any local waiter whose queue entry ran out.
  redis.call('PUBLISH', ARGV[2], '')
  return 1
end
-- A Redlock holder may still be listed in this master's queue: never wake a departed head.
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local stale = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now_ms)
for _, w in ipairs(stale) do
  redis.call('ZREM', KEYS[2], w)
  redis.call('ZREM', KEYS[3], w)
end
redis.call('PUBLISH', ARGV[2], redis.call('ZRANGE', KEYS[2], 0, 0)[1] or '')
return 1
