-- release_all.lua: delete each of the locks KEYS[1..n] that still holds the
-- owner value ARGV[1], announcing it on the channel ARGV[2] .. key. Returns how
-- many it deleted.
local n = 0
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[1] then
    redis.call('DEL', KEYS[i])
    redis.call('PUBLISH', ARGV[2] .. KEYS[i], '')
    n = n + 1
  end
end
return n
