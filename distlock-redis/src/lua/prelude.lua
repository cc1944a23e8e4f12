-- Prepended to every other script (see scripts.rs). Invariant: distlock writes only keys whose
-- type and shape are its own; anything else is reported as {-1, type, key} before the script
-- writes anything, and left untouched.
-- The lock key is a string (our token, or another client's such as redis-py's), the fencing
-- counter a string holding a decimal integer below 2^53 (exact in Lua's numbers), the queue
-- and queue-expiry keys sorted sets.

-- {-1, type, key} when `key` exists with a type other than `want`, else nil and whether the
-- key exists (so a caller learns it without another call).
local function foreign(key, want)
  local kind = redis.call('TYPE', key)['ok']
  if kind ~= 'none' and kind ~= want then
    return {-1, kind, key}
  end
  return nil, kind ~= 'none'
end

-- The fencing counter at `key` (0 when absent), or nil and the {-1, …} report when the key is
-- not a counter distlock could have written.
local function counter_at(key)
  local bad = foreign(key, 'string')
  if bad then
    return nil, bad
  end
  local v = redis.call('GET', key)
  if not v then
    return 0
  end
  if not string.match(v, '^%d+$') or #v > 16 or tonumber(v) >= 9007199254740992 then
    return nil, {-1, 'string (not a fencing counter)', key}
  end
  return tonumber(v)
end

-- The first foreign report among the lock key and the two queue keys, or nil and whether
-- either queue key exists (no queue: nobody waits, and the queue upkeep can be skipped).
local function foreign_lock_or_queue(lock, queue, qexp)
  local bad = foreign(lock, 'string')
  if bad then
    return bad
  end
  local bad_q, has_q = foreign(queue, 'zset')
  if bad_q then
    return bad_q
  end
  local bad_e, has_e = foreign(qexp, 'zset')
  if bad_e then
    return bad_e
  end
  return nil, has_q or has_e
end

-- Checks all four keys of a lock and reads its fencing counter: the counter, or nil and the
-- first foreign report; third, whether a queue key exists.
local function check_lock_keys(lock, counter, queue, qexp)
  local bad, queued = foreign_lock_or_queue(lock, queue, qexp)
  if bad then
    return nil, bad
  end
  local n, bad_c = counter_at(counter)
  return n, bad_c, queued
end


-- `lock_delay=` (delay_ms > 0): how long this master still grants nothing, in ms (0: grant).
-- The first call on a master whose run id is not the one recorded at `epoch_key` (a promoted
-- replica, or a restarted server that lost its data) records its id and starts a quiet time
-- of delay_ms at `quiet_key`: a holder whose grant the old master never passed on runs out of
-- lease before this master grants the name again.
local function quiet_ms(epoch_key, quiet_key, delay_ms)
  if delay_ms <= 0 then
    return 0
  end
  local id = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
  if redis.call('GET', epoch_key) ~= id then
    redis.call('SET', epoch_key, id)
    redis.call('SET', quiet_key, '1', 'PX', delay_ms)
    return delay_ms
  end
  return math.max(redis.call('PTTL', quiet_key), 0)
end
