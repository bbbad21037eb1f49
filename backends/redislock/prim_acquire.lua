-- prim_acquire.lua: take a lease of the semaphore or read-write lock whose holders
-- are the sorted set KEYS[1] (member: owner value, score: expiry in ms on the
-- server's clock) and whose settings are the hash KEYS[2] (kind, limit, writer);
-- KEYS[3] is its fencing counter (never expires). All in one hash slot.
-- ARGV: owner, ttl ms, kind ('semaphore' or 'rwlock'), limit (semaphore) or mode
-- ('shared' or 'exclusive').
-- Returns {1, token} when granted, {0, ms} when full (ms until the first holder
-- expires), {-1, kind} when the key is held as the other kind, {-2, limit} when it
-- is held as a semaphore with another limit. Expired holders are dropped first; the
-- settings are those of the live holders, and the next acquirer's once none is left.
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
if n > 0 then
  local m = redis.call('HMGET', KEYS[2], 'kind', 'limit', 'writer')
  if m[1] ~= kind then
    return {-1, m[1] or 'unknown'}
  end
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
end
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
local keep = tonumber(last[2]) - now
redis.call('PEXPIRE', KEYS[1], keep)
redis.call('PEXPIRE', KEYS[2], keep)
return {1, token}
