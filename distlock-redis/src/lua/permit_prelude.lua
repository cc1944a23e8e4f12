-- Prepended (after prelude.lua) to every semaphore and read-write lock script (see
-- scripts.rs and permits/mod.rs). One name's keys:
--   holders  sorted set: member -> lease end (server ms); a member whose lease ended no longer
--            holds, whether or not a script has removed it yet
--   queue    sorted set: member -> arrival (server µs), the FIFO order of waiters
--   qexp     sorted set: member -> waiter expiry (ms); a waiter that stops refreshing lapses
--   max      string: a semaphore's count while it has holders or waiters (unused by rw locks)
-- A member is one character of kind ('P' permit, 'R' reader, 'W' writer) and the acquisition's
-- random token. The one admission rule (mirrors distlock-core's permits.rs):
--   P: nobody queued ahead of it, and fewer than max live holders;
--   R: no writer holds, and no writer is queued ahead of it;
--   W: nobody holds, and nobody is queued ahead of it.

-- Server time: µs and ms.
local function server_now()
  local t = redis.call('TIME')
  local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  return us, math.floor(us / 1000)
end

-- The first foreign report among a name's keys (KEYS[1] holders, the queue pair, max), or nil.
local function foreign_permit_keys(holders, queue, qexp, max)
  return foreign(holders, 'zset') or foreign(queue, 'zset') or foreign(qexp, 'zset')
    or foreign(max, 'string')
end

-- Drops holders whose lease ended and waiters that stopped refreshing.
local function drop_lapsed(holders, queue, qexp, now_ms)
  redis.call('ZREMRANGEBYSCORE', holders, '-inf', now_ms)
  local stale = redis.call('ZRANGEBYSCORE', qexp, '-inf', now_ms)
  for _, w in ipairs(stale) do
    redis.call('ZREM', queue, w)
    redis.call('ZREM', qexp, w)
  end
end

-- Whether `member` may hold now. `rank`: its place in the queue (nil: not queued, so every
-- queued waiter is ahead of it).
local function admissible(holders, queue, max, member, rank)
  local ahead
  if rank == nil then
    ahead = redis.call('ZRANGE', queue, 0, -1)
  elseif rank > 0 then
    ahead = redis.call('ZRANGE', queue, 0, rank - 1)
  else
    ahead = {}
  end
  local kind = string.sub(member, 1, 1)
  if kind == 'P' then
    local m = tonumber(redis.call('GET', max) or '0') or 0
    return #ahead == 0 and redis.call('ZCARD', holders) < m
  elseif kind == 'W' then
    return #ahead == 0 and redis.call('ZCARD', holders) == 0
  end
  for _, a in ipairs(ahead) do
    if string.sub(a, 1, 1) == 'W' then
      return false
    end
  end
  for _, h in ipairs(redis.call('ZRANGE', holders, 0, -1)) do
    if string.sub(h, 1, 1) == 'W' then
      return false
    end
  end
  return true
end

-- Wakes the queue's head if it may hold now (each grant wakes the next, so several free
-- permits, or readers behind a departed writer, are handed out one after another).
local function wake_head(holders, queue, max, channel)
  local head = redis.call('ZRANGE', queue, 0, 0)[1]
  if head and admissible(holders, queue, max, head, 0) then
    redis.call('PUBLISH', channel, head)
  end
end

-- Lets every key of the name vanish by itself once its last lease and waiter lapse (the
-- fencing counter is kept, as the mutex keeps its own); forgets the count once nobody holds or
-- waits.
local function settle(holders, queue, qexp, max)
  if redis.call('ZCARD', holders) == 0 and redis.call('ZCARD', queue) == 0 then
    redis.call('DEL', max)
    return
  end
  local last = 0
  for _, k in ipairs({holders, qexp}) do
    local top = redis.call('ZRANGE', k, -1, -1, 'WITHSCORES')[2]
    if top and tonumber(top) > last then
      last = tonumber(top)
    end
  end
  for _, k in ipairs({holders, queue, qexp, max}) do
    redis.call('PEXPIREAT', k, last + 1)
  end
end
