-- Release only our own lock, then wake the next queued waiter — by handing it the lock: the
-- message that wakes the head *is* its grant, so the head needs no round trip of its own before
-- it holds (issue 20's fair handoff). A Redlock head holds once a quorum of masters granted it
-- (acquire.rs); a grant from fewer is only its place, kept until its next round.
-- Invariants: a key that does not hold our token (expired and re-taken, a redis-py holder) is
-- never deleted; foreign data at the lock or queue keys is reported before anything is written
-- (prelude.lua) — the lock, if still ours, then frees itself when its lease runs out. A direct
-- grant follows acquire.lua's rules: the lock goes to the first live waiter of the queue (FIFO),
-- its fencing token is max(counter + 1, floor), and it leaves the queue (a Redlock head stays
-- listed: below). Its lease is the rest
-- of the head's place (at most the waiter ttl, 3 s): a head that died while still queued holds
-- the lock no longer than its place would have held the queue back; the head extends the lease
-- to its own ttl once it holds. A Redlock round that missed its quorum undoes itself without a
-- grant (it wakes the head), so an undo never hands a master to a waiter the others did not.
-- KEYS: 1 lock, 2 queue, 3 queue expiry, 4 fencing counter; ARGV: 1 token, 2 release channel,
-- 3 '1' to grant the head directly, '' to wake it, 4 the grant's token floor ('' = the server's
-- time in µs; Redlock passes the releasing client's, one for every master, so masters whose
-- counters agree grant one token and the head needs no write-back round), 5 the release's id
-- ('' on a single instance; Redlock: one random id for every master of one release, carried in
-- the grant's message so the head counts a quorum of grants of one release only; the head then
-- stays listed in the queue — its own release takes it out — so a grant that makes no quorum
-- does not cost it its place)
-- Returns 1 when released, 0 when the lock was not ours, {-1, type, key} for foreign data.
-- Publishes '' (nobody queued: wakes every local waiter), the head's queue member (a wake-up), or
-- the head's member, a tab and its fencing token, and for Redlock a tab and the release's id (a
-- grant; a member is a token, or a token, a newline and the holder identity, which may hold
-- spaces but no control character).
local bad, queued = foreign_lock_or_queue(KEYS[1], KEYS[2], KEYS[3])
if bad then
  return bad
end
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  -- Not ours here, but a Redlock holder may still be listed in this master's queue (it holds
  -- on a quorum elsewhere and sends no write-back to leave): a releasing client never waits.
  if queued then
    redis.call('ZREM', KEYS[2], ARGV[1])
    redis.call('ZREM', KEYS[3], ARGV[1])
  end
  return 0
end
redis.call('DEL', KEYS[1])
if not queued then
  -- Nobody is queued (the uncontended case): no queue upkeep; a holder's release still wakes
  -- any local waiter whose queue entry ran out with the empty message. A Redlock round's undo
  -- ('' for ARGV[3]) wakes nobody here: the undoing waiter would only wake itself.
  if ARGV[3] == '1' then
    redis.call('PUBLISH', ARGV[2], '')
  end
  return 1
end
-- A Redlock holder may still be listed in this master's queue: never wake a departed head.
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now_ms = math.floor(now_us / 1000)
local stale = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now_ms)
for _, w in ipairs(stale) do
  redis.call('ZREM', KEYS[2], w)
  redis.call('ZREM', KEYS[3], w)
end
local head = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
if head and ARGV[3] == '1' then
  local place_ends = tonumber(redis.call('ZSCORE', KEYS[3], head))
  local counter, bad_c = counter_at(KEYS[4])
  -- A counter distlock could not have written is left alone: the head then only wakes, and
  -- its own acquire reports the foreign data.
  if not bad_c and place_ends and place_ends > now_ms then
    redis.call('SET', KEYS[1], head, 'PX', place_ends - now_ms)
    local fence = string.format('%d', math.max(counter + 1, tonumber(ARGV[4]) or now_us))
    redis.call('SET', KEYS[4], fence)
    local message = head .. '\t' .. fence
    if ARGV[5] == '' then
      redis.call('ZREM', KEYS[2], head)
      redis.call('ZREM', KEYS[3], head)
    else
      message = message .. '\t' .. ARGV[5]
    end
    redis.call('PUBLISH', ARGV[2], message)
    return 1
  end
end
-- A round's undo wakes the head, if any (never the empty message, which would wake the undoing
-- waiter itself and have it round again at once).
if head or ARGV[3] == '1' then
  redis.call('PUBLISH', ARGV[2], head or '')
end
return 1
