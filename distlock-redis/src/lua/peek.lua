-- Read a lock's state for `inspect`. Invariant: writes nothing; data of a type or shape
-- distlock does not write, at any of the lock's keys, is reported (prelude.lua), never read as
-- if it were ours.
-- KEYS: 1 lock, 2 fencing counter, 3 queue, 4 queue expiry
-- Returns {holder's token or nil, pttl ms, counter or nil, queued waiters}, or
-- {-1, type, key} for foreign data.
local _, bad = check_lock_keys(KEYS[1], KEYS[2], KEYS[3], KEYS[4])
if bad then
  return bad
end
return {
  redis.call('GET', KEYS[1]),
  redis.call('PTTL', KEYS[1]),
  redis.call('GET', KEYS[2]),
  redis.call('ZCARD', KEYS[3]),
}
