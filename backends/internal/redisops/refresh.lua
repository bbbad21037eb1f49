-- refresh.lua: set the TTL of the lock KEYS[1] to ARGV[2] milliseconds if it
-- still holds the owner value ARGV[1]. Returns 1 if it did, 0 if the lock is
-- gone or someone else's.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
