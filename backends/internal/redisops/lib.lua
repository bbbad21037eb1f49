-- lib.lua: Lua functions the Redis backends' scripts share (LuaLib is put in front
-- of each script that uses them).

-- clock reads the server's time: the TIME reply and the same in ms. (Redis before
-- 5 needs replicate_commands to write after TIME.)
local function clock()
  if redis.replicate_commands then
    redis.replicate_commands()
  end
  local t = redis.call('TIME')
  return t, tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- endLease deletes the lock key lock (whose holder the caller checked) and leaves
-- the tombstone tomb for as long as the lock had left to live, so that the same
-- release run again (a reply lost) can tell it was this holder's.
local function endLease(lock, tomb)
  local pttl = redis.call('PTTL', lock)
  redis.call('DEL', lock)
  if pttl > 0 then
    redis.call('SET', tomb, '1', 'PX', pttl)
  end
end

-- A key's waiters: a queue is two sorted sets in the key's hash slot: queue (waiter -> arrival, a
-- score the caller chooses) and dead (waiter -> the server time in ms after which
-- the waiter counts as gone). A waiter keeps its place by asking again before its
-- deadline; scripts drop those that did not.

-- dropGone takes the waiters whose deadline passed at now (ms) out of the queue.
local function dropGone(queue, dead, now)
  for _, gone in ipairs(redis.call('ZRANGEBYSCORE', dead, '-inf', now)) do
    redis.call('ZREM', queue, gone)
    redis.call('ZREM', dead, gone)
  end
end

-- leaveQueue takes who out of the queue; true if it was in it.
local function leaveQueue(queue, dead, who)
  if redis.call('ZREM', queue, who) == 1 then
    redis.call('ZREM', dead, who)
    return true
  end
  return false
end

-- joinQueue puts who in the queue at arrival unless it is in it already (arrival
-- nil: it is), sets its deadline to now + wttl ms, and keeps both sets at least
-- that long.
local function joinQueue(queue, dead, who, arrival, now, wttl)
  if arrival then
    redis.call('ZADD', queue, 'NX', arrival, who)
  end
  redis.call('ZADD', dead, now + wttl, who)
  for _, k in ipairs({queue, dead}) do
    if redis.call('PTTL', k) < wttl then
      redis.call('PEXPIRE', k, wttl)
    end
  end
end

