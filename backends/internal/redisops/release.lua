-- release.lua (after lib.lua): delete the lock KEYS[1] if it still holds the owner value
-- ARGV[1], and tell waiters on the channel ARGV[2] unless it is empty. Returns 1
-- if it deleted the lock, 0 if the lock is gone or someone else's (then nothing is
-- published).
--
-- Idempotent: the release leaves a tombstone, KEYS[2] (this owner's ReleasedKey),
-- for as long as the lock had left to live, so that the same release run again —
-- go-redis retries a command whose reply was lost with its connection — returns 1
-- again instead of "gone": it was this owner that deleted the lock.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  endLease(KEYS[1], KEYS[2])
  if ARGV[2] ~= '' then
    redis.call('PUBLISH', ARGV[2], '')
  end
  return 1
end
return redis.call('EXISTS', KEYS[2])
