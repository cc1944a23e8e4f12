-- Give back a held permit or side, then wake the queue's head if it may hold now.
-- Invariant: only this member's own entry is removed; a member whose lease already ended is
-- removed too but answers 0 (someone may have been granted its place meanwhile).
-- KEYS: 1 holders, 2 queue, 3 queue expiry, 4 max; ARGV: 1 member, 2 wake-up channel
-- Returns 1 when released, 0 when it no longer held, {-1, type, key} for foreign data.
local bad = foreign_permit_keys(KEYS[1], KEYS[2], KEYS[3], KEYS[4])
if bad then
  return bad
end
local _, now_ms = server_now()
local until_ms = redis.call('ZSCORE', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[1], ARGV[1])
drop_lapsed(KEYS[1], KEYS[2], KEYS[3], now_ms)
wake_head(KEYS[1], KEYS[2], KEYS[4], ARGV[2])
settle(KEYS[1], KEYS[2], KEYS[3], KEYS[4])
if until_ms and tonumber(until_ms) > now_ms then
  return 1
end
return 0
