-- claim_drop.lua: withdraw an overtake claim (see lua/claim.lua) whose waiter stopped waiting
-- without the lock (timed out, cancelled, failed), so the free lock is not held back for the
-- claim's TTL.
--
-- KEYS[1]  the claim key
-- ARGV[1]  the waiter's owner field
--
-- Returns 1 when the claim was this owner's and is deleted, 0 otherwise (another owner's
-- claim, or none)
if redis.call('get', KEYS[1]) == ARGV[1] then
    return redis.call('del', KEYS[1])
end
return 0
