-- claim_drop.lua: a waiter leaves the lock's overtake claim queue (see lua/claim.lua)
-- because it stopped waiting without the lock (timed out, cancelled, failed), so the free
-- lock is not held back for its claim's TTL.
--
-- KEYS[1]  the claim queue
-- KEYS[2]  the lock hash (same hash tag)
-- KEYS[3]  the lock's unlock channel (same hash tag)
-- KEYS[4]  the claim queue's deadlines
-- KEYS[5]  optional: a second channel to wake (a read-write lock's readers' channel; KEYS[3]
--          is then its writers' and KEYS[2] its writer hash)
-- ARGV[1]  the waiter's owner field
-- ARGV[2]  message to publish: the withdrawing client's id (that client wakes its own
--          waiters, as after an unlock)
-- ARGV[3]  publish command: 'spublish' on a cluster with sharded pub/sub, else 'publish'
--
-- A lock that is free when its queue's head leaves was refused to the waiters that tried it
-- meanwhile: they are woken as by an unlock, rather than left asleep until the claim's TTL.
--
-- Returns 1 when the owner was in the queue and left it, 0 otherwise
local head = redis.call('zrange', KEYS[1], 0, 0)[1]
if redis.call('zrem', KEYS[1], ARGV[1]) == 0 then
    return 0
end
redis.call('zrem', KEYS[4], ARGV[1])
if head == ARGV[1] and redis.call('exists', KEYS[2]) == 0 then
    local pub = ARGV[3] == 'spublish' and 'spublish' or 'publish'
    redis.call(pub, KEYS[3], ARGV[2])
    if KEYS[5] then
        redis.call(pub, KEYS[5], ARGV[2])
    end
end
return 1
