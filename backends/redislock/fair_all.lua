-- fair_all.lua (after lib.lua): fair.lua for a set of n keys, taken all or nothing. KEYS holds
-- five groups of n keys, in the order of the set's keys: the locks (1..n), their
-- fencing counters (n+1..2n), their queues (2n+1..3n), their waiters' deadlines
-- (3n+1..4n) and the release's tombstones for the caller (4n+1..5n); all in one
-- hash slot. ARGV[1] is the operation, ARGV[2] the caller's owner value (its name
-- in every queue), ARGV[6] the release channels' prefix (a key's channel is it
-- followed by the key, which is also the lock's Redis key).
--
-- 'try' (ARGV[3] lease TTL ms, ARGV[5] the barging window in µs) and 'wait' (also
-- ARGV[4], the waiter's TTL ms): the set is granted when, for every key, the lock
-- is free (or the caller's already: a retry after a lost reply) and no one waits
-- ahead of the caller — the queue is empty, the caller is first, or the first
-- waiter arrived less than the window ago — as fair.lua grants one key. A set
-- waiter is in the queue of each of its keys, with one arrival in all of them, and
-- the queues are ordered by arrival (then name): the waiter that arrived first of
-- all is first in every queue it is in, so it is granted once its keys are free,
-- and no set of waiters waits in a cycle. 'wait' puts a caller that is not granted
-- in every queue, or renews its place, until ARGV[4] ms from now. Returns {1,
-- token1, ..., tokenN} when granted, else {0, the smallest remaining ms of a lock
-- held by another (0 when none is), the caller's largest place (0: first
-- everywhere, -1 not queued), ms until the deadline of the first waiter ahead of it
-- that expires first}.
--
-- 'release' and 'leave': delete each lock that holds the caller's value; 'leave'
-- also takes the caller out of every queue. For each key that is then free:
-- publish on its first waiter's own channel, and the waiter's name ('' when none
-- waits, after a release) on the key's channel, as fair.lua does. Returns how many
-- locks it deleted, counting those this owner had deleted already (tombstones).
local op, me = ARGV[1], ARGV[2]
local n = #KEYS / 5
local function key(group, i) return KEYS[group * n + i] end
local LOCK, FENCE, QUEUE, DEAD, TOMB = 0, 1, 2, 3, 4

local queued = false
for i = 1, n do
  if redis.call('EXISTS', key(QUEUE, i)) == 1 then
    queued = true
    break
  end
end
local t, now, nowus
if queued or op == 'wait' then
  t, now = clock()
  nowus = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
if queued then
  for i = 1, n do
    dropGone(key(QUEUE, i), key(DEAD, i), now)
  end
end

if op == 'release' or op == 'leave' then
  local done = 0
  for i = 1, n do
    if op == 'leave' then
      leaveQueue(key(QUEUE, i), key(DEAD, i), me)
    end
    local holder = redis.call('GET', key(LOCK, i))
    local held = holder == me
    if held then
      endLease(key(LOCK, i), key(TOMB, i))
      done = done + 1
    elseif redis.call('EXISTS', key(TOMB, i)) == 1 then
      done = done + 1
    end
    if held or not holder then
      local channel = ARGV[6] .. key(LOCK, i)
      local head = redis.call('ZRANGE', key(QUEUE, i), 0, 0)[1]
      if head then
        redis.call('PUBLISH', channel .. '#' .. head, '')
      end
      if head or held then
        redis.call('PUBLISH', channel, head or '')
      end
    end
  end
  return done
end

local window = tonumber(ARGV[5])
local granted = true
local remaining, place, headIn = 0, -1, -1
for i = 1, n do
  local holder = redis.call('GET', key(LOCK, i))
  if holder and holder ~= me then
    granted = false
    local pttl = redis.call('PTTL', key(LOCK, i))
    if pttl > 0 and (remaining == 0 or pttl < remaining) then
      remaining = pttl
    end
  elseif not holder and queued then
    local first = redis.call('ZRANGE', key(QUEUE, i), 0, 0, 'WITHSCORES')
    local head = first[1]
    if head and head ~= me and not (window > 0 and tonumber(first[2]) + window > nowus) then
      granted = false
      local d = redis.call('ZSCORE', key(DEAD, i), head)
      if d then
        d = math.max(tonumber(d) - now, 0)
        if headIn < 0 or d < headIn then
          headIn = d
        end
      end
    end
  end
end

if granted then
  local res = {1}
  for i = 1, n do
    if redis.call('GET', key(LOCK, i)) == me then
      res[i + 1] = tonumber(redis.call('GET', key(FENCE, i)))
    else
      res[i + 1] = redis.call('INCR', key(FENCE, i))
      redis.call('SET', key(LOCK, i), me, 'PX', ARGV[3])
    end
    if queued then
      leaveQueue(key(QUEUE, i), key(DEAD, i), me)
    end
  end
  return res
end

if op == 'wait' then
  -- One arrival in every queue: the caller's own if it is queued already (it keeps
  -- its place), else now, but after the last waiter of each queue.
  local arrival
  for i = 1, n do
    local s = redis.call('ZSCORE', key(QUEUE, i), me)
    if s and (not arrival or tonumber(s) < arrival) then
      arrival = tonumber(s)
    end
  end
  if not arrival then
    arrival = nowus
    for i = 1, n do
      local last = redis.call('ZRANGE', key(QUEUE, i), -1, -1, 'WITHSCORES')[2]
      if last and tonumber(last) >= arrival then
        arrival = tonumber(last) + 1
      end
    end
  end
  local wttl = tonumber(ARGV[4])
  place = 0
  for i = 1, n do
    redis.call('ZADD', key(QUEUE, i), arrival, me) -- the same arrival in every queue
    joinQueue(key(QUEUE, i), key(DEAD, i), me, nil, now, wttl)
    place = math.max(place, redis.call('ZRANK', key(QUEUE, i), me))
  end
end
return {0, remaining, place, math.max(headIn, 0)}
