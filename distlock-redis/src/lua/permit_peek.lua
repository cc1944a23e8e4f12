-- Read a semaphore's or read-write lock's state for `inspect`. Invariant: writes nothing;
-- lapsed holders and waiters are not counted.
-- KEYS: 1 holders, 2 queue, 3 queue expiry, 4 max
-- Returns {live readers or permits, 1 if a writer holds else 0, live waiters, count or ''},
-- or {-1, type, key} for foreign data.
local bad = foreign_permit_keys(KEYS[1], KEYS[2], KEYS[3], KEYS[4])
if bad then
  return bad
end
local _, now_ms = server_now()
local shared, writer = 0, 0
for _, h in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now_ms, '+inf')) do
  if string.sub(h, 1, 1) == 'W' then
    writer = 1
  else
    shared = shared + 1
  end
end
local waiting = redis.call('ZCOUNT', KEYS[3], '(' .. now_ms, '+inf')
local holds_or_waits = shared + writer + waiting > 0
return {shared, writer, waiting, holds_or_waits and (redis.call('GET', KEYS[4]) or '') or ''}
