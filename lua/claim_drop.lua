-- claim_drop.lua: withdraw an overtake claim (see lua/claim.lua) whose waiter stopped waiting
-- without the lock (timed out, cancelled, failed), so the free lock is not held back for the
-- claim's TTL.
--
-- KEYS[1]  the claim key
-- KEYS[2]  the lock hash (same hash tag)
-- KEYS[3]  the lock's unlock channel (same hash tag)
-- ARGV[1]  the waiter's owner field
-- ARGV[2]  message to publish: the withdrawing client's id (that client wakes its own
--          waiters, as after an unlock)
-- ARGV[3]  publish command: 'spublish' on a cluster with sharded pub/sub, else 'publish'
--
-- A lock that is free when its claim is withdrawn was refused to the waiters that tried it
-- meanwhile: they are woken as by an unlock, rather than left asleep until the claim's TTL.
--
-- Returns 1 when the claim was this owner's and is deleted, 0 otherwise (another owner's
-- claim, or none)
if redis.call('get', KEYS[1]) ~= ARGV[1] then
    return 0
end
redis.call('del', KEYS[1])
if redis.call('exists', KEYS[2]) == 0 then
    local pub = ARGV[3] == 'spublish' and 'spublish' or 'publish'
    redis.call(pub, KEYS[3], ARGV[2])
end
return 1
