-- prim_waiters.lua: the waiters of a semaphore or of a read-write lock's writers,
-- for the scripts it is put in front of (prim_acquire.lua, prim_release.lua). KEYS[4]
-- is the read-write lock's waiting writer, KEYS[5] and KEYS[6] the waiters (sorted
-- sets: waiter -> arrival in µs, and waiter -> the server time in ms after which it
-- counts as gone).

-- dropGone takes the waiters whose place expired at now (ms) out.
local function dropGone(now)
  for _, gone in ipairs(redis.call('ZRANGEBYSCORE', KEYS[6], '-inf', now)) do
    redis.call('ZREM', KEYS[5], gone)
    redis.call('ZREM', KEYS[6], gone)
  end
end

-- leave takes waiter out of the waiters; true if it was one.
local function leave(waiter)
  if redis.call('ZREM', KEYS[5], waiter) == 1 then
    redis.call('ZREM', KEYS[6], waiter)
    return true
  end
  return false
end

-- nextWriter makes the first live waiter the waiting writer (KEYS[4]) until its
-- place expires; there is none when no one waits.
local function nextWriter(now)
  redis.call('DEL', KEYS[4])
  dropGone(now)
  local head = redis.call('ZRANGE', KEYS[5], 0, 0)[1]
  local until_ = head and redis.call('ZSCORE', KEYS[6], head)
  if until_ then
    redis.call('SET', KEYS[4], head, 'PX', math.max(tonumber(until_) - now, 1))
  end
end

