-- A waiter gives up (timeout or cancellation): leave the queue and wake the new head if it
-- may hold now, so nobody waits behind a departed waiter.
-- KEYS: 1 holders, 2 queue, 3 queue expiry, 4 max; ARGV: 1 member, 2 wake-up channel
-- Returns 1, or {-1, type, key} for foreign data.
local bad = foreign_permit_keys(KEYS[1], KEYS[2], KEYS[3], KEYS[4])
if bad then
  return bad
end
local _, now_ms = server_now()
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
drop_lapsed(KEYS[1], KEYS[2], KEYS[3], now_ms)
wake_head(KEYS[1], KEYS[2], KEYS[4], ARGV[2])
settle(KEYS[1], KEYS[2], KEYS[3], KEYS[4])
return 1
