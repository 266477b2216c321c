-- fair_unlock.lua: release one hold of a fair lock; the last hold deletes the lock and wakes
-- only the head of the queue, on its own channel.
--
-- KEYS[1]  lock hash
-- KEYS[2]  queue: list of waiter ids ("<owner>:<n>"), oldest first
-- KEYS[3]  deadlines: sorted set, waiter id -> deadline in server ms
-- ARGV[1]  owner field "<client uuid>:<task id>"
-- ARGV[2]  expected hold count before the release, or 0 for "any" (see lua/unlock.lua: used
--          to undo an acquire whose reply was lost, never releasing a hold not taken)
-- ARGV[3]  per-waiter channel prefix: waiter w listens on ARGV[3] .. ':' .. w
-- ARGV[4]  publish command: 'spublish' on a cluster with sharded pub/sub, else 'publish'
--
-- Stale waiters are purged first. Whenever the lock is free afterwards and someone waits,
-- the head is woken with the payload 'wake' (never the releasing client's id, so a head in
-- the same client hears it too). The queue keys get the TTL "latest deadline + 1 s" and are
-- deleted when the queue is empty.
--
-- Returns  n > 0  released one hold, n holds remain (TTL unchanged)
--          0      released the last hold: lock deleted, head woken
--          -1     not held by this owner (expired, force-unlocked, or never taken)
--          -2     hold count differs from ARGV[2]: nothing released
-- (queue, deadlines, now, purge_expired, live_head, tidy: lua/fair_queue.lua, prepended)
local lock = KEYS[1]
local owner = ARGV[1]

local purged = purge_expired()
local head, dropped = live_head()
purged = purged + dropped

local function wake_head()
    head = tidy()
    if head and redis.call('exists', lock) == 0 then
        redis.call(ARGV[4] == 'spublish' and 'spublish' or 'publish', ARGV[3] .. ':' .. head, 'wake')
    end
end

local holds = redis.call('hget', lock, owner)
if not holds then
    wake_head()
    return -1
end
local expected = tonumber(ARGV[2])
if expected > 0 and tonumber(holds) ~= expected then
    if purged > 0 then
        tidy()
    end
    return -2
end
holds = redis.call('hincrby', lock, owner, -1)
if holds > 0 then
    if purged > 0 then
        tidy()
    end
    return holds
end
redis.call('del', lock)
wake_head()
return 0
