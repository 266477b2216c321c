-- lock.lua: take or re-enter a reentrant lock (one attempt, never blocks).
--
-- KEYS[1]  lock hash: field "<client uuid>:<task id>" -> hold count
-- ARGV[1]  lease in milliseconds (integer >= 1): TTL of a new lock; on re-entry the TTL is
--          raised to at least this value, never lowered (an inner short lease must not cut
--          short an outer watchdog hold)
-- ARGV[2]  owner field "<client uuid>:<task id>"
-- KEYS[2]  optional: the lock's overtake claim queue (lua/claim.lua, prepended); absent on
--          a RedLock node, which neither stakes nor honours claims
-- KEYS[3]  the claim queue's deadlines (with KEYS[2])
-- ARGV[3]  claim TTL in ms: > 0 queues (or renews) this owner's claim when the lock is held
--          by another owner; 0 does not (only with KEYS[2])
-- ARGV[4]  how long this owner has waited, in ms (with a claim: its place in the queue)
--
-- Returns {1, holds}     acquired; holds = this owner's hold count after the call (1 = new lock)
--         {0, pttl}      held by another owner; pttl = its remaining TTL in ms (-1 = no TTL)
--         {0, pttl}      also when free but another waiter heads the claim queue
--                        (lua/claim.lua); pttl is then the time until the head's claim lapses
--                        ({0, pttl, score} when this owner is in the queue too, or joined it)
--         {0, pttl, score}  held by another owner, and this owner is in the claim queue now
--                        (queued or renewed by this call); score = its place (server ms)
local lease = tonumber(ARGV[1])
-- One EXISTS over the lock and its claim: a free, unclaimed lock (the common case) is taken
-- with three commands in all. Redis spends about as much on each command inside a script as
-- on a plain command, so the fast path is kept to the fewest.
local busy
if KEYS[2] then
    busy = redis.call('exists', KEYS[1], KEYS[2])
else
    busy = redis.call('exists', KEYS[1])
end
if busy > 0 then
    if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
        local holds = redis.call('hincrby', KEYS[1], ARGV[2], 1)
        if redis.call('pttl', KEYS[1]) < lease then
            redis.call('pexpire', KEYS[1], lease)
        end
        return {1, holds}
    end
    local pttl = redis.call('pttl', KEYS[1])
    if pttl ~= -2 then
        local score = stake_claim(KEYS[2], KEYS[3], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]))
        if score then
            return {0, pttl, score}
        end
        return {0, pttl}
    end
    -- The lock is free, so the claim is what exists.
    local refused = claim_refusal(KEYS[2], KEYS[3], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]))
    if refused then
        return refused
    end
end
redis.call('hset', KEYS[1], ARGV[2], 1)
redis.call('pexpire', KEYS[1], lease)
return {1, 1}
