-- fair.lua (after lib.lua): the FIFO mode's lock, granted in arrival order. KEYS[1] is the lock,
-- KEYS[2] its fencing counter, KEYS[3] the queue (a sorted set: waiter -> arrival
-- in microseconds), KEYS[4] the waiters' deadlines (a sorted set: waiter -> the
-- server time in ms after which it counts as gone); all in one hash slot. ARGV[1]
-- is the operation, ARGV[2] the caller's owner value (also its name in the
-- queue). Waiters whose deadline passed are dropped before anything else.
--
-- 'try' (ARGV[3] lease TTL ms, ARGV[5] the barging window in microseconds) and
-- 'wait' (also ARGV[4], the waiter's TTL ms): the lock is granted when it is free
-- and either no one waits, or the caller is the first waiter, or the first waiter
-- arrived less than the barging window ago. With a window of 0 (the FIFO mode)
-- nobody overtakes the queue, neither a TryAcquire nor a holder that released and
-- asks again; with a window (the default mode) a caller may overtake waiters that
-- have not waited that long, but never one that has: a waiter's wait is bounded
-- by the window plus its place in the queue. A caller granted out of the queue
-- leaves it. 'wait' puts a caller that is not granted in the queue, or renews its
-- place there, until ARGV[4] ms from now. Returns {1, token}
-- when granted (also when the caller already holds it: a retry after a lost
-- reply), else {0, the holder's remaining ms (0 when free, -1 without expiry), the
-- caller's place (0 first, -1 not queued), ms until the first waiter's deadline}.
--
-- 'release' and 'leave' (ARGV[3] the release channel): delete the lock if it holds
-- the caller's value; 'leave' also takes the caller out of the queue (a wait that
-- ended). When the lock is then free and someone waits, publish on the first
-- waiter's own channel (ARGV[3] .. '#' .. its name: only it listens there, so a
-- release reaches one waiter however many wait) and its name on the key's channel
-- (for waiters of the other mode, which look at every release); after a release
-- with no one waiting publish '' on the key's channel (whoever listens may look). Returns 1 if
-- it deleted the lock, else 0. A release leaves a tombstone, KEYS[5] (the caller's
-- ReleasedKey), for as long as the lock had left to live: the same release run again
-- (go-redis retries a command whose reply was lost) returns 1 again.
local op, me = ARGV[1], ARGV[2]
-- Nobody waits (no queue key): the plain lock's steps, without the clock and the
-- queue's bookkeeping — the uncontended cycle costs what the plain lock costs.
if redis.call('EXISTS', KEYS[3]) == 0 then
  local holder = redis.call('GET', KEYS[1])
  if op == 'release' or op == 'leave' then
    if holder ~= me then
      return redis.call('EXISTS', KEYS[5])
    end
    endLease(KEYS[1], KEYS[5])
    redis.call('PUBLISH', ARGV[3], '')
    return 1
  end
  if holder == me then
    return {1, tonumber(redis.call('GET', KEYS[2]))}
  end
  if not holder then
    local token = redis.call('INCR', KEYS[2])
    redis.call('SET', KEYS[1], me, 'PX', ARGV[3])
    return {1, token}
  end
  if op == 'try' then
    return {0, redis.call('PTTL', KEYS[1]), -1, 0}
  end
end
local t, now = clock()
dropGone(KEYS[3], KEYS[4], now)
local holder = redis.call('GET', KEYS[1])

if op == 'release' or op == 'leave' then
  if op == 'leave' then
    leaveQueue(KEYS[3], KEYS[4], me)
  end
  local held = holder == me
  if held then
    endLease(KEYS[1], KEYS[5])
  elseif holder then
    return redis.call('EXISTS', KEYS[5])
  end
  local head = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
  if head then
    redis.call('PUBLISH', ARGV[3] .. '#' .. head, '')
  end
  if head or held then
    redis.call('PUBLISH', ARGV[3], head or '')
  end
  if held then
    return 1
  end
  return redis.call('EXISTS', KEYS[5])
end

if holder == me then
  return {1, tonumber(redis.call('GET', KEYS[2]))}
end
local first = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
local head = first[1]
local window = tonumber(ARGV[5])
if not holder and (not head or head == me or
    (window > 0 and tonumber(first[2]) + window > tonumber(t[1]) * 1000000 + tonumber(t[2]))) then
  if head then
    leaveQueue(KEYS[3], KEYS[4], me)
  end
  local token = redis.call('INCR', KEYS[2])
  redis.call('SET', KEYS[1], me, 'PX', ARGV[3])
  return {1, token}
end
local place = -1
if op == 'wait' then
  local arrival
  if not redis.call('ZSCORE', KEYS[3], me) then
    arrival = tonumber(t[1]) * 1000000 + tonumber(t[2])
    local last = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')[2]
    if last and tonumber(last) >= arrival then
      arrival = tonumber(last) + 1
    end
  end
  joinQueue(KEYS[3], KEYS[4], me, arrival, now, tonumber(ARGV[4]))
  place = redis.call('ZRANK', KEYS[3], me)
  head = head or me
end
local remaining = 0
if holder then
  remaining = redis.call('PTTL', KEYS[1])
end
local headIn = 0
if head then
  headIn = math.max(tonumber(redis.call('ZSCORE', KEYS[4], head)) - now, 0)
end
return {0, remaining, place, headIn}
