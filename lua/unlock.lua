-- unlock.lua: release one hold of a reentrant lock; the last hold deletes the lock and
-- publishes a wakeup on its channel.
--
-- KEYS[1]  lock hash
-- KEYS[2]  unlock channel (same hash tag as KEYS[1])
-- ARGV[1]  owner field "<client uuid>:<task id>"
-- ARGV[2]  message to publish: the releasing client's id (lets that client skip its own
--          echo: it already woke its local waiters)
-- ARGV[3]  expected hold count before the release, or 0 for "any". Used to undo an acquire
--          whose reply was lost (timeout, cancelled future): release only if that acquire
--          really added its hold, never a hold the caller did not take.
-- ARGV[4]  publish command: 'spublish' on a cluster with sharded pub/sub, else 'publish'
--
-- Returns  n > 0  released one hold, n holds remain (TTL unchanged)
--          0      released the last hold: lock deleted, wakeup published
--          -1     not held by this owner (expired, force-unlocked, or never taken)
--          -2     hold count differs from ARGV[3]: nothing done
local holds = redis.call('hget', KEYS[1], ARGV[1])
if not holds then
    return -1
end
local expected = tonumber(ARGV[3])
if expected > 0 and tonumber(holds) ~= expected then
    return -2
end
holds = redis.call('hincrby', KEYS[1], ARGV[1], -1)
if holds > 0 then
    return holds
end
redis.call('del', KEYS[1])
redis.call(ARGV[4] == 'spublish' and 'spublish' or 'publish', KEYS[2], ARGV[2])
return 0
