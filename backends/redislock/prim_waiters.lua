-- prim_waiters.lua: for the scripts it is put in front of (prim_acquire.lua,
-- prim_release.lua; after redisops' lib.lua). KEYS[4] is the read-write lock's
-- waiting writer, KEYS[5] and KEYS[6] the waiters (a lib.lua queue: arrival in
-- µs): a semaphore's, or a read-write lock's writers.

-- nextWriter makes the first live waiter the waiting writer (KEYS[4]) until its
-- place expires; there is none when no one waits.
local function nextWriter(now)
  redis.call('DEL', KEYS[4])
  dropGone(KEYS[5], KEYS[6], now)
  local head = redis.call('ZRANGE', KEYS[5], 0, 0)[1]
  local until_ = head and redis.call('ZSCORE', KEYS[6], head)
  if until_ then
    redis.call('SET', KEYS[4], head, 'PX', math.max(tonumber(until_) - now, 1))
  end
end

