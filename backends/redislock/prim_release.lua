-- prim_release.lua (after lib.lua and prim_waiters.lua): remove the holder ARGV[1] of the primitive KEYS[1] (holders) /
-- KEYS[2] (settings), or take it out of the waiters (a wait that ended), and wake
-- the waiters that may now be granted. Returns 1 if it was a live holder, 0 if the
-- lease had expired or was gone (an expired holder is removed all the same).
--
-- Idempotent: a live holder's release leaves a tombstone, KEYS[3] (this holder's
-- ReleasedKey), for as long as its lease had left, so that the same release run
-- again after its reply was lost returns 1 again.
--
-- ARGV[2] is the primitive's release channel, ARGV[3] the semaphore's limit ('' for
-- a read-write lock). ARGV[1] leaves the waiters (KEYS[5], KEYS[6]; see
-- prim_acquire.lua), and the place of the read-write lock's waiting writer
-- (KEYS[4]), which then goes to the next waiting writer. Then the waiters that may
-- now be granted are told: a semaphore's first f waiters, f the permits free, on
-- their own channels (ARGV[2] .. '#' .. waiter), so a release wakes one waiter
-- however many wait, and '' on ARGV[2] for waiters that look at every release; a
-- read-write lock's waiting writer alone on its own channel once no lease is left
-- (readers could not come in), or, when no writer waits, every waiter on ARGV[2].
if redis.replicate_commands then
  redis.replicate_commands() -- Redis before 5: writes after TIME need it
end
local me, channel, limit = ARGV[1], ARGV[2], ARGV[3]
local t, now = clock()
local waited = leaveQueue(KEYS[5], KEYS[6], me)
if limit == '' and redis.call('GET', KEYS[4]) == me then
  nextWriter(now)
  waited = true
end
local score = redis.call('ZSCORE', KEYS[1], me)
local result
if score then
  redis.call('ZREM', KEYS[1], me)
  if redis.call('HGET', KEYS[2], 'writer') == me then
    redis.call('HDEL', KEYS[2], 'writer')
  end
  if redis.call('EXISTS', KEYS[1]) == 0 then
    redis.call('DEL', KEYS[2])
  end
  result = 0
  if tonumber(score) > now then
    redis.call('SET', KEYS[3], '1', 'PX', tonumber(score) - now)
    result = 1
  end
elseif waited then
  result = redis.call('EXISTS', KEYS[3])
else
  return redis.call('EXISTS', KEYS[3])
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local n = redis.call('ZCARD', KEYS[1])
if limit ~= '' then
  redis.call('PUBLISH', channel, '')
  local free = tonumber(limit) - n
  if free > 0 then
    dropGone(KEYS[5], KEYS[6], now)
    for _, w in ipairs(redis.call('ZRANGE', KEYS[5], 0, free - 1)) do
      redis.call('PUBLISH', channel .. '#' .. w, '')
    end
  end
else
  local writer = redis.call('GET', KEYS[4])
  if not writer then
    redis.call('PUBLISH', channel, '')
  elseif n == 0 then
    redis.call('PUBLISH', channel .. '#' .. writer, '')
  end
end
return result
