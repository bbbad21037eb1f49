-- prim_acquire.lua: take a lease of the semaphore or read-write lock whose holders
-- are the sorted set KEYS[1] (member: owner value, score: expiry in ms on the
-- server's clock) and whose settings are the hash KEYS[2] (kind, limit, writer);
-- KEYS[3] is its fencing counter (never expires); KEYS[4] the read-write lock's
-- waiting writer (a string: its owner value, expiring unless the writer asks again).
-- All in one hash slot.
-- ARGV: owner, ttl ms, kind ('semaphore' or 'rwlock'), limit (semaphore) or mode
-- ('shared' or 'exclusive'), and ARGV[5] 'wait' for an exclusive acquirer that waits.
-- Writer preference: while a writer waits (KEYS[4] names another owner), no shared
-- lease is granted; an exclusive acquirer with 'wait' that is not granted becomes
-- the waiting writer when there is none (or stays it), for ARGV[2] ms; its grant
-- ends its wait.
-- Returns {1, token} when granted, {0, ms} when full or a writer waits (ms until the
-- first holder or the waiting writer's place expires), {-1, kind} when the key is
-- held as the other kind, {-2, limit} when it is held as a semaphore with another
-- limit. Expired holders are dropped first; the settings are those of the live
-- holders, and the next acquirer's once none is left.
-- Idempotent: run again with the same owner (a retry after a lost reply) it returns
-- the grant it made.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  return {1, tonumber(redis.call('GET', KEYS[3]))}
end
local kind = ARGV[3]
local n = redis.call('ZCARD', KEYS[1])
local m
if n > 0 then
  m = redis.call('HMGET', KEYS[2], 'kind', 'limit', 'writer')
  if m[1] ~= kind then
    return {-1, m[1] or 'unknown'}
  end
end
local writer = kind == 'rwlock' and redis.call('GET', KEYS[4])
if writer and writer ~= ARGV[1] and ARGV[4] == 'shared' then
  return {0, math.max(redis.call('PTTL', KEYS[4]), 1)}
end
if n > 0 then
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  local wait = tonumber(first[2]) - now
  if kind == 'semaphore' then
    if m[2] ~= ARGV[4] then
      return {-2, m[2] or 'unknown'}
    end
    if n >= tonumber(ARGV[4]) then
      return {0, wait}
    end
  elseif ARGV[4] == 'exclusive' then
    if ARGV[5] == 'wait' and (not writer or writer == ARGV[1]) then
      redis.call('SET', KEYS[4], ARGV[1], 'PX', ARGV[2])
    end
    return {0, wait}
  elseif m[3] and redis.call('ZSCORE', KEYS[1], m[3]) then
    return {0, wait}
  end
else
  redis.call('DEL', KEYS[2])
  redis.call('HSET', KEYS[2], 'kind', kind)
  if kind == 'semaphore' then
    redis.call('HSET', KEYS[2], 'limit', ARGV[4])
  end
end
local token = redis.call('INCR', KEYS[3])
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
if ARGV[4] == 'exclusive' then
  redis.call('HSET', KEYS[2], 'writer', ARGV[1])
  if writer == ARGV[1] then
    redis.call('DEL', KEYS[4])
  end
end
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
local keep = tonumber(last[2]) - now
redis.call('PEXPIRE', KEYS[1], keep)
redis.call('PEXPIRE', KEYS[2], keep)
return {1, token}
