-- redlock_release.lua: release holds of one owner on one Redlock node; releasing the last
-- hold deletes the lock and publishes a wakeup on its channel. unlock.lua, plus ARGV[5].
--
-- KEYS[1]  lock hash on this node
-- KEYS[2]  unlock channel (same hash tag as KEYS[1])
-- ARGV[1]  owner field "<set id>:<task id>"
-- ARGV[2]  message to publish: the releasing set's id
-- ARGV[3]  expected hold count before the release, or 0 for "any". Used to undo an acquire
--          whose reply was lost: release only if that acquire really added its hold.
-- ARGV[4]  publish command: 'spublish' on a cluster with sharded pub/sub, else 'publish'
-- ARGV[5]  how many holds to release (>= 1). More than one when the last guard of a hold run
--          leaves a node where the run also holds counts that no guard can claim (holds of
--          lost guards of the same owner); a count that is smaller is released entirely.
--
-- Returns  n > 0  released, n holds remain (TTL unchanged)
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
holds = redis.call('hincrby', KEYS[1], ARGV[1], -tonumber(ARGV[5]))
if holds > 0 then
    return holds
end
redis.call('del', KEYS[1])
redis.call(ARGV[4] == 'spublish' and 'spublish' or 'publish', KEYS[2], ARGV[2])
return 0
