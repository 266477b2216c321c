-- latch_state.lua: a countdown latch's count and TTL, read together (read only).
--
-- KEYS[1]  latch counter (a string)
-- ARGV     none
--
-- Returns  {count, pttl}: {0, -2} when the latch is open (no key)
local count = redis.call('get', KEYS[1])
if not count then
    return {0, -2}
end
return {tonumber(count), redis.call('pttl', KEYS[1])}
