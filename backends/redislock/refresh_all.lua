-- refresh_all.lua: set the TTL of the locks KEYS[1..n] to ARGV[2] milliseconds
-- if every one still holds the owner value ARGV[1], and return 1. If one does
-- not, the set is lost: delete those that still hold it (announcing each on the
-- channel ARGV[3] .. key) and return 0.
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) ~= ARGV[1] then
    for j = 1, #KEYS do
      if redis.call('GET', KEYS[j]) == ARGV[1] then
        redis.call('DEL', KEYS[j])
        redis.call('PUBLISH', ARGV[3] .. KEYS[j], '')
      end
    end
    return 0
  end
end
for i = 1, #KEYS do
  redis.call('PEXPIRE', KEYS[i], ARGV[2])
end
return 1
