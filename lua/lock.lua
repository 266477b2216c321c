-- lock.lua: take or re-enter a reentrant lock (one attempt, never blocks).
--
-- KEYS[1]  lock hash: field "<client uuid>:<task id>" -> hold count
-- ARGV[1]  lease in milliseconds (integer >= 1): TTL of a new lock; on re-entry the TTL is
--          raised to at least this value, never lowered (an inner short lease must not cut
--          short an outer watchdog hold)
-- ARGV[2]  owner field "<client uuid>:<task id>"
--
-- Returns {1, holds}  acquired; holds = this owner's hold count after the call (1 = new lock)
--         {0, pttl}   held by another owner; pttl = its remaining TTL in ms (-1 = no TTL)
local lease = tonumber(ARGV[1])
if redis.call('exists', KEYS[1]) == 0 then
    redis.call('hset', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], lease)
    return {1, 1}
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    local holds = redis.call('hincrby', KEYS[1], ARGV[2], 1)
    if redis.call('pttl', KEYS[1]) < lease then
        redis.call('pexpire', KEYS[1], lease)
    end
    return {1, holds}
end
return {0, redis.call('pttl', KEYS[1])}
