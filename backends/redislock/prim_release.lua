-- prim_release.lua: remove the holder ARGV[1] of the primitive KEYS[1] (holders) /
-- KEYS[2] (settings) and tell waiters on the channel ARGV[2]. Returns 1 if it was a
-- live holder, 0 if the lease had expired or was gone (an expired holder is
-- removed all the same, and waiters told).
--
-- Idempotent: a live holder's release leaves a tombstone, KEYS[3] (this holder's
-- ReleasedKey), for as long as its lease had left, so that the same release run
-- again after its reply was lost returns 1 again.
--
-- KEYS[4], when given, is the read-write lock's waiting writer: if it names
-- ARGV[1] (a writer whose wait ended), it is deleted and waiters told.
if KEYS[4] and redis.call('GET', KEYS[4]) == ARGV[1] then
  redis.call('DEL', KEYS[4])
  redis.call('PUBLISH', ARGV[2], '')
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score then
  return redis.call('EXISTS', KEYS[3])
end
redis.call('ZREM', KEYS[1], ARGV[1])
if redis.call('HGET', KEYS[2], 'writer') == ARGV[1] then
  redis.call('HDEL', KEYS[2], 'writer')
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('DEL', KEYS[2])
end
redis.call('PUBLISH', ARGV[2], '')
if tonumber(score) <= now then
  return 0
end
redis.call('SET', KEYS[3], '1', 'PX', tonumber(score) - now)
return 1
