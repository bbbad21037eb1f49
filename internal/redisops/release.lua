-- release.lua: delete the lock KEYS[1] if it still holds the owner value
-- ARGV[1], and tell waiters on the channel ARGV[2] unless it is empty. Returns 1
-- if it deleted the lock, 0 if the lock is gone or someone else's (then nothing is
-- published).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if ARGV[2] ~= '' then
    redis.call('PUBLISH', ARGV[2], '')
  end
  return 1
end
return 0
