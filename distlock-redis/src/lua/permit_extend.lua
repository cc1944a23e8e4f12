-- Extend a held permit's or side's lease. Invariant: only a live entry of this member is
-- touched.
-- KEYS: 1 holders, 2 queue, 3 queue expiry, 4 max; ARGV: 1 member, 2 ttl ms
-- Returns 1 when extended, 0 when it no longer held, {-1, type, key} for foreign data.
local bad = foreign_permit_keys(KEYS[1], KEYS[2], KEYS[3], KEYS[4])
if bad then
  return bad
end
local _, now_ms = server_now()
local until_ms = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not until_ms or tonumber(until_ms) <= now_ms then
  return 0
end
redis.call('ZADD', KEYS[1], 'XX', now_ms + tonumber(ARGV[2]), ARGV[1])
settle(KEYS[1], KEYS[2], KEYS[3], KEYS[4])
return 1
