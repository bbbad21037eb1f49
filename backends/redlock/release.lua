-- release.lua (after lib.lua): Redlock's release on one master, which wakes one
-- waiter. KEYS[1] is the lock, KEYS[2] the caller's tombstone (redisops.ReleasedKey), KEYS[3] the
-- key's queue of waiters, KEYS[4] their deadlines (wait.lua) and KEYS[5] the name of
-- the waiter the last release woke. ARGV[1] is the caller's owner value ('' for
-- none), ARGV[2] the key's release channel, ARGV[3] the caller's name in the queue
-- ('' for none), ARGV[4] '1' on a Redis Cluster node, ARGV[5] how long (ms) a
-- reservation for a woken waiter lasts.
--
-- Deletes the lock if it holds ARGV[1], leaving the tombstone for as long as the
-- lock had left to live (a release run again after a lost reply returns 1 again),
-- and takes ARGV[3] out of the queue, with the reservation for it if there is one
-- (a woken waiter that gave up, or a granted one's release on a master where the
-- grant did not land). Then, if the lock is free and this call freed it or only
-- left the queue (ARGV[1] ''; a waiter that gave up may have taken a
-- wake-up meant for the next one), it drops the waiters whose deadline passed and
-- publishes on the first remaining waiter's own channel (ARGV[2] .. '#' .. its
-- name), passing over at most 16 that nobody hears (below): one waiter wakes per
-- release however many wait. A deletion is also published on ARGV[2] itself, for
-- waiters that look at every release.
--
-- Bounded barging: a free lock goes to whoever asks first, so a woken waiter may
-- find it taken again by a caller that did not wait (the holder that released and
-- asks again). The first time a release wakes a waiter it notes its name
-- (KEYS[5]); when a later release wakes the same waiter — it was passed over —
-- the lock is not left free but reserved for it (the value '\255woken ' .. its
-- name, for ARGV[5] ms): every other vote is refused, and its own wait.lua takes
-- the reservation as free (and forgets the note). So on this master a waiter at
-- the head of the queue is passed over once, and then only by callers that come
-- after a reservation expired unused.
-- Returns 1 if the lock was deleted by this owner (now or before), else 0.
if redis.replicate_commands then
  redis.replicate_commands() -- Redis before 5: writes after TIME need it
end
local woken = '\255woken '
local deleted, freed = false, false
local cur = redis.call('GET', KEYS[1])
if ARGV[1] ~= '' and cur == ARGV[1] then
  endLease(KEYS[1], KEYS[2])
  deleted, freed, cur = true, true, false
elseif ARGV[3] ~= '' and cur == woken .. ARGV[3] then
  redis.call('DEL', KEYS[1])
  freed, cur = true, false
end
local queued = redis.call('EXISTS', KEYS[3]) == 1
if queued and ARGV[3] ~= '' then
  leaveQueue(KEYS[3], KEYS[4], ARGV[3])
end
if (freed or ARGV[1] == '') and queued and not cur then
  local t, now = clock()
  dropGone(KEYS[3], KEYS[4], now)
  -- PUBLISH counts the clients it reached on this server: a first waiter that no
  -- one hears here (its wait ended with a request this master never got, or it is
  -- between its first look and its subscription) is dropped from this master's
  -- queue, and the next one told; a live waiter puts itself back at its next look,
  -- at its old place. On a Cluster node (ARGV[4] '1') a subscriber may be connected
  -- to another node: the first waiter is told, and nobody dropped.
  for _ = 1, 16 do
    local head = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
    if not head then
      break
    end
    if redis.call('PUBLISH', ARGV[2] .. '#' .. head, '') > 0 or ARGV[4] == '1' then
      if redis.call('GET', KEYS[5]) == head then
        -- Kept (wait.lua deletes it when the waiter is granted): a reservation
        -- that expires unused is made again at the next release.
        redis.call('SET', KEYS[1], woken .. head, 'PX', ARGV[5])
      else
        -- Kept while the waiter's place is; wait.lua renews both at each look.
        local left = tonumber(redis.call('ZSCORE', KEYS[4], head) or 0) - now
        redis.call('SET', KEYS[5], head, 'PX', math.max(left, tonumber(ARGV[5])))
      end
      break
    end
    leaveQueue(KEYS[3], KEYS[4], head)
  end
end
if deleted then
  redis.call('PUBLISH', ARGV[2], '')
  return 1
end
if ARGV[1] == '' then
  return 0
end
return redis.call('EXISTS', KEYS[2])
