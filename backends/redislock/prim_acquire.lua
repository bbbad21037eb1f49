-- prim_acquire.lua (after lib.lua and prim_waiters.lua): take a lease of the semaphore or read-write lock whose holders
-- are the sorted set KEYS[1] (member: owner value, score: expiry in ms on the
-- server's clock) and whose settings are the hash KEYS[2] (kind, limit, writer);
-- KEYS[3] is its fencing counter (never expires); KEYS[4] the read-write lock's
-- waiting writer (a string: its owner value, expiring unless the writer asks again);
-- KEYS[5] and KEYS[6] the waiters (sorted sets: waiter -> arrival in µs, and waiter
-- -> the server time in ms after which it counts as gone): a semaphore's, or a
-- read-write lock's writers. All in one hash slot.
-- ARGV: owner, ttl ms, kind ('semaphore' or 'rwlock'), limit (semaphore) or mode
-- ('shared' or 'exclusive'), ARGV[5] 'wait' for a caller that waits, ARGV[6] the
-- semaphore's barging window in µs.
-- A caller with 'wait' that is not granted joins the waiters (a semaphore acquirer
-- or a writer; or renews its place there) for ARGV[2] ms; its grant takes it out.
-- Writer preference: while a writer waits (KEYS[4] names another owner), no shared
-- lease is granted; a waiting writer that is not granted becomes the waiting writer
-- when there is none (or stays it), for ARGV[2] ms; its grant ends its wait, and
-- the first live writer among the waiters becomes the waiting writer.
-- Semaphore: a free permit is not granted past waiters that arrived ARGV[6] µs ago
-- or earlier: with f permits free, a caller is granted only when fewer than f such
-- waiters come before it. Releases wake the first waiters (prim_release.lua).
-- Returns {1, token} when granted, {0, ms} when full or a writer waits or waiters
-- come first (ms until the first holder, the waiting writer's place or the first
-- waiter's place expires), {-1, kind} when the key is held as the other kind,
-- {-2, limit} when it is held as a semaphore with another limit. Expired holders
-- and waiters are dropped first; the settings are those of the live holders, and
-- the next acquirer's once none is left.
-- Idempotent: run again with the same owner (a retry after a lost reply) it returns
-- the grant it made.
local t, now = clock()
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
  if kind == 'semaphore' and m[2] ~= ARGV[4] then
    return {-2, m[2] or 'unknown'}
  end
end
local waits = ARGV[5] == 'wait'
local writer = kind == 'rwlock' and redis.call('GET', KEYS[4])
if writer and writer ~= ARGV[1] and ARGV[4] == 'shared' then
  return {0, math.max(redis.call('PTTL', KEYS[4]), 1)}
end
local wait -- ms until a look may find otherwise; nil: granted
if n > 0 then
  wait = tonumber(redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')[2]) - now
end
if kind == 'semaphore' then
  local free = tonumber(ARGV[4]) - n
  if free > 0 and redis.call('EXISTS', KEYS[5]) == 1 then
    dropGone(KEYS[5], KEYS[6], now)
    local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
    -- The waiters that have waited the window come first (the lock user's ACL
    -- has no ZCOUNT: at most free of them are counted, which is all it takes).
    local ahead = #redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', us - tonumber(ARGV[6]), 'LIMIT', 0, free)
    local rank = redis.call('ZRANK', KEYS[5], ARGV[1])
    if rank then
      ahead = math.min(ahead, rank)
    end
    local gone = redis.call('ZRANGE', KEYS[6], 0, 0, 'WITHSCORES')[2]
    if ahead >= free and gone then
      wait = math.max(math.min(tonumber(gone) - now, wait or tonumber(gone) - now), 1)
      free = 0
    end
  end
  if free > 0 then
    wait = nil
  end
  if wait and waits then
    joinQueue(KEYS[5], KEYS[6], ARGV[1], tonumber(t[1]) * 1000000 + tonumber(t[2]), now, tonumber(ARGV[2]))
  end
elseif n > 0 and ARGV[4] == 'exclusive' then
  if waits then
    joinQueue(KEYS[5], KEYS[6], ARGV[1], tonumber(t[1]) * 1000000 + tonumber(t[2]), now, tonumber(ARGV[2]))
    if not writer or writer == ARGV[1] then
      redis.call('SET', KEYS[4], ARGV[1], 'PX', ARGV[2])
    end
  end
elseif not (n > 0 and m[3] and redis.call('ZSCORE', KEYS[1], m[3])) then
  wait = nil
end
if wait then
  return {0, wait}
end
if n == 0 then
  redis.call('DEL', KEYS[2])
  redis.call('HSET', KEYS[2], 'kind', kind)
  if kind == 'semaphore' then
    redis.call('HSET', KEYS[2], 'limit', ARGV[4])
  end
end
if waits then
  leaveQueue(KEYS[5], KEYS[6], ARGV[1])
end
local token = redis.call('INCR', KEYS[3])
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
if ARGV[4] == 'exclusive' then
  redis.call('HSET', KEYS[2], 'writer', ARGV[1])
  if writer == ARGV[1] then
    nextWriter(now) -- the next writer waits now
  end
end
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
local keep = tonumber(last[2]) - now
redis.call('PEXPIRE', KEYS[1], keep)
redis.call('PEXPIRE', KEYS[2], keep)
return {1, token}
