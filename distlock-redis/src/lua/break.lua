-- An operator's forced release (`distlock break`): delete the lock key whoever holds it and
-- advance the fencing counter past the holder's token, in one script; then wake the queue's
-- head as a release does (a wake-up, never a grant: the head takes the lock by its own round).
-- Invariants: foreign data at any of the lock's keys is reported (prelude.lua) and nothing is
-- written; a lock key with no fencing counter beside it, or with no expiry (distlock always
-- sets one), is not distlock's (a redis-py lock, a fenced value, another application's string)
-- and is reported, never deleted; the counter only rises, so the
-- next holder's token (max(counter + 1, floor), acquire.lua) is above the broken one.
-- KEYS: 1 lock, 2 fencing counter, 3 queue, 4 queue expiry; ARGV: 1 release channel
-- Returns {1, holder's value, holder's token (the counter), pttl ms} when broken, {0} when
-- nobody held it, {-1, type, key} for foreign data.
local counter, bad = check_lock_keys(KEYS[1], KEYS[2], KEYS[3], KEYS[4])
if bad then
  return bad
end
local holder = redis.call('GET', KEYS[1])
if not holder then
  return {0}
end
if redis.call('EXISTS', KEYS[2]) == 0 then
  return {-1, 'string (a lock with no fencing counter: not distlock\'s)', KEYS[1]}
end
local pttl = redis.call('PTTL', KEYS[1])
if pttl < 0 then
  return {-1, 'string (no expiry: not a lease distlock holds)', KEYS[1]}
end
redis.call('DEL', KEYS[1])
redis.call('SET', KEYS[2], string.format('%d', counter + 1))
local head = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
redis.call('PUBLISH', ARGV[1], head or '')
return {1, holder, string.format('%d', counter), pttl}
