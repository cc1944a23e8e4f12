-- Take the lock if it is free and no live waiter is queued ahead of us, or if it already holds
-- our own token (an earlier round's undo that never arrived, or a reply that came too late to
-- use: nobody else can hold it here, so it counts as granted); in 'wait' mode, join (or
-- refresh our place in) the FIFO queue when we do not get it.
-- Invariants: the lock key is only ever SET when it does not exist (as SET NX would) or already
-- holds our token (then the token is the counter's, already ours); a new fencing token is
-- max(counter + 1, floor), the floor being the server time
-- in µs (or, for Redlock, the client's), so tokens strictly increase per name even after a
-- restart without persistence wiped the counter; data of a type or shape distlock does not
-- write, at any of the four keys, is reported and never touched (see prelude.lua).
-- KEYS: 1 lock, 2 fencing counter, 3 queue (token -> arrival µs), 4 queue expiry (token -> ms)
-- ARGV: 1 token, 2 ttl ms, 3 'try' | 'wait', 4 waiter ttl ms, 5 queue score ('' = server time
-- in µs; Redlock passes the waiter's own arrival time so every master orders its queue alike),
-- 6 token floor ('' = server time in µs; Redlock passes one client time per round so masters
-- with equal counters grant equal tokens and the token write-back round can be skipped),
-- 7 `lock_delay=` in ms ('' or 0: none; then KEYS 5 epoch and 6 quiet, see prelude.lua)
-- Returns {1, token} when acquired, {0, pttl ms, queue position, counter} when not (Redlock
-- takes its token above every counter it hears of, granting or not), {-1, type, key} for
-- foreign data.
local counter, bad, queued = check_lock_keys(KEYS[1], KEYS[2], KEYS[3], KEYS[4])
if bad then
  return bad
end
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now_ms = math.floor(now_us / 1000)
-- Without a queue (the uncontended case) there is no queue upkeep to do.
if queued then
  local stale = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now_ms)
  for _, w in ipairs(stale) do
    redis.call('ZREM', KEYS[3], w)
    redis.call('ZREM', KEYS[4], w)
  end
end
local function grant()
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  local fence = math.max(counter + 1, tonumber(ARGV[6]) or now_us)
  redis.call('SET', KEYS[2], string.format('%d', fence))
  -- A single instance leaves its queue now; a Redlock waiter keeps its place (a split round's
  -- undo then does not send it to the back of the line) until its release takes it out
  -- (release.lua), or a write-back does.
  if queued and ARGV[5] == '' then
    redis.call('ZREM', KEYS[3], ARGV[1])
    redis.call('ZREM', KEYS[4], ARGV[1])
  end
  return {1, string.format('%d', fence)}
end
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  -- Ours already (a release's grant, or an undo that never arrived): refresh the lease and keep
  -- the token the counter holds, the one the grant gave us, so `inspect` and `leader` name the
  -- token the guard has (a new draw here, racing the grant's delivery, once left a master's
  -- counter above the guard's token). A missing counter draws afresh.
  if counter == 0 then
    return grant()
  end
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  if queued and ARGV[5] == '' then
    redis.call('ZREM', KEYS[3], ARGV[1])
    redis.call('ZREM', KEYS[4], ARGV[1])
  end
  return {1, string.format('%d', counter)}
end
local head = nil
if queued then
  head = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
end
local quiet = 0
if not holder and (head == nil or head == ARGV[1]) then
  quiet = quiet_ms(KEYS[5], KEYS[6], tonumber(ARGV[7]) or 0)
  if quiet == 0 then
    return grant()
  end
end
if ARGV[3] == 'wait' then
  redis.call('ZADD', KEYS[3], 'NX', tonumber(ARGV[5]) or now_us, ARGV[1])
  redis.call('ZADD', KEYS[4], now_ms + tonumber(ARGV[4]), ARGV[1])
  -- The queue vanishes on its own once nobody refreshes it.
  redis.call('PEXPIRE', KEYS[3], tonumber(ARGV[4]) * 2)
  redis.call('PEXPIRE', KEYS[4], tonumber(ARGV[4]) * 2)
end
local rank = redis.call('ZRANK', KEYS[3], ARGV[1]) or -1
-- A new master's quiet time stands in for the holder's lease.
local pttl = quiet > 0 and quiet or redis.call('PTTL', KEYS[1])
return {0, pttl, rank, string.format('%d', counter)}
