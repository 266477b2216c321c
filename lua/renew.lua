-- renew.lua: the watchdog's batched renewal; one call renews many locks.
--
-- KEYS[1..n]  lock hashes (in Cluster: all in one slot)
-- ARGV[1]     new TTL in milliseconds (the watchdog timeout)
-- ARGV[i+1]   owner field expected in KEYS[i]
--
-- Returns  an array of n integers: 1 = renewed, 0 = gone (key missing or no longer held
--          by that owner; such a lock is never touched, so a released lock's TTL never rises)
--
-- A renewal only extends: a longer TTL (the same owner also holds it with a longer lease)
-- is kept.
local ttl = tonumber(ARGV[1])
local result = {}
for i = 1, #KEYS do
    if redis.call('hexists', KEYS[i], ARGV[i + 1]) == 1 then
        if redis.call('pttl', KEYS[i]) < ttl then
            redis.call('pexpire', KEYS[i], ttl)
        end
        result[i] = 1
    else
        result[i] = 0
    end
end
return result
