-- release_all.lua: delete each of the locks KEYS[1..n] that still holds the
-- owner value ARGV[1], announcing it on the channel ARGV[2] .. key. Returns how
-- many it deleted, counting those this owner had deleted already.
--
-- KEYS[n+1..2n] are the locks' tombstones for this owner (ReleasedKey): as in
-- release.lua, a release run again after its reply was lost counts the locks it
-- deleted the first time.
local n = #KEYS / 2
local done = 0
for i = 1, n do
  if redis.call('GET', KEYS[i]) == ARGV[1] then
    local pttl = redis.call('PTTL', KEYS[i])
    redis.call('DEL', KEYS[i])
    if pttl > 0 then
      redis.call('SET', KEYS[n + i], '1', 'PX', pttl)
    end
    redis.call('PUBLISH', ARGV[2] .. KEYS[i], '')
    done = done + 1
  elseif redis.call('EXISTS', KEYS[n + i]) == 1 then
    done = done + 1
  end
end
return done
