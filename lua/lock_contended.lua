-- lock_contended.lua: the rest of lock.lua, once the lock or its claim queue exists:
-- re-entry, a lock held by another owner (stake a claim), or a free lock whose claim queue
-- decides. Not a script of its own: src/wire/scripts.rs appends it to lock.lua and
-- lua/claim.lua, whose `lease` and helpers it uses.
--
-- KEYS[1]  lock hash (as lock.lua)
-- KEYS[2]  the overtake claim queue, or absent (as lock.lua)
-- KEYS[3]  the claim queue's deadlines (as lock.lua)
-- ARGV[2]  owner field (as lock.lua)
-- ARGV[3]  claim TTL in ms (as lock.lua)
-- ARGV[4]  how long this owner has waited, in ms (as lock.lua)
-- Returns  as lock.lua
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    local holds = redis.call('hincrby', KEYS[1], ARGV[2], 1)
    if redis.call('pttl', KEYS[1]) < lease then
        redis.call('pexpire', KEYS[1], lease)
    end
    return {1, holds}
end
local pttl = redis.call('pttl', KEYS[1])
if pttl ~= -2 then
    if KEYS[2] and pttl > 0 then
        -- The waiter mark (lua/unlock.lua): this caller may wait for the release. Not in
        -- Redisson's layout or on a RedLock node (no claim queue): Redisson's hash keeps
        -- only owner fields, and a RedLock waiter retries on its own clock. Nor on a hash
        -- without a TTL, which lockwise never writes (someone else's: left untouched).
        redis.call('hset', KEYS[1], 'waiting', '1')
    end
    local score = stake_claim(KEYS[2], KEYS[3], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]))
    if score then
        return {0, pttl, score}
    end
    return {0, pttl}
end
-- The lock is free, so the claim is what exists.
local refused, head = claim_refusal(KEYS[2], KEYS[3], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]))
if refused then
    return refused
end
--#include claim_grant.lua
return {1, 1}
