-- Take a permit or a side of a read-write lock if the admission rule (permit_prelude.lua)
-- lets this member hold now; in 'wait' mode, join (or refresh its place in) the FIFO queue
-- when it does not.
-- Invariants: a member is added to the holders only when admissible, so a semaphore never has
-- more than max live holders and a writer never shares; the fencing token is
-- max(counter + 1, server time in µs), one counter per name for every kind, so each grant's
-- token is greater than every earlier grant's; a semaphore call whose count differs from the
-- one the name is in use with changes nothing; foreign data at any key is reported and never
-- touched.
-- KEYS: 1 holders, 2 fencing counter, 3 queue, 4 queue expiry, 5 max
-- ARGV: 1 member, 2 ttl ms, 3 'try' | 'wait', 4 waiter ttl ms, 5 max count ('' for a rw lock),
-- 6 wake-up channel
-- Returns {1, token} when granted; {0, ms until the earliest holder's lease ends (-1: none),
-- queue position (-1: not queued)} when not; {-2, the count in use} for another count;
-- {-1, type, key} for foreign data.
local bad = foreign_permit_keys(KEYS[1], KEYS[3], KEYS[4], KEYS[5])
if bad then
  return bad
end
local counter, cbad = counter_at(KEYS[2])
if cbad then
  return cbad
end
if ARGV[5] ~= '' then
  local m = redis.call('GET', KEYS[5])
  if m and not string.match(m, '^%d+$') then
    return {-1, 'string (not a semaphore count)', KEYS[5]}
  end
end
local now_us, now_ms = server_now()
drop_lapsed(KEYS[1], KEYS[3], KEYS[4], now_ms)
local me = ARGV[1]
if ARGV[5] ~= '' then
  if redis.call('ZCARD', KEYS[1]) == 0 and redis.call('ZCARD', KEYS[3]) == 0 then
    redis.call('DEL', KEYS[5])
  end
  local m = redis.call('GET', KEYS[5])
  if m and m ~= ARGV[5] then
    return {-2, m}
  end
  redis.call('SET', KEYS[5], ARGV[5])
end
-- ZRANK answers false (not nil) for a member that is not queued.
local rank = redis.call('ZRANK', KEYS[3], me) or nil
if redis.call('ZSCORE', KEYS[1], me) or admissible(KEYS[1], KEYS[3], KEYS[5], me, rank) then
  redis.call('ZADD', KEYS[1], now_ms + tonumber(ARGV[2]), me)
  local fence = math.max(counter + 1, now_us)
  redis.call('SET', KEYS[2], string.format('%d', fence))
  redis.call('ZREM', KEYS[3], me)
  redis.call('ZREM', KEYS[4], me)
  wake_head(KEYS[1], KEYS[3], KEYS[5], ARGV[6])
  settle(KEYS[1], KEYS[3], KEYS[4], KEYS[5])
  return {1, string.format('%d', fence)}
end
if ARGV[3] == 'wait' then
  redis.call('ZADD', KEYS[3], 'NX', now_us, me)
  redis.call('ZADD', KEYS[4], now_ms + tonumber(ARGV[4]), me)
  rank = redis.call('ZRANK', KEYS[3], me)
end
settle(KEYS[1], KEYS[3], KEYS[4], KEYS[5])
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')[2]
return {0, first and (tonumber(first) - now_ms) or -1, rank or -1}
