-- redisson_fair_unlock.lua: release one hold of a fair lock in Redisson's layout
-- (RFairLock's unlock, in its effects): the last hold deletes the hash and publishes `0` on
-- the queue head's own channel only. When the owner holds nothing and the lock is free,
-- the head is woken too (a head stuck behind a release whose message was lost).
--
-- KEYS[1]  lock hash `<name>`
-- KEYS[2]  lock channel `redisson_lock__channel:{<name>}` (not published to: Redisson's fair
--          waiters listen on their own channels)
-- KEYS[3]  queue `redisson_lock_queue:{<name>}`
-- KEYS[4]  deadlines `redisson_lock_timeout:{<name>}`
-- ARGV[1]  owner field
-- ARGV[2]  message: `0`
-- ARGV[3]  expected hold count before the release, or 0 for "any" (as lua/unlock.lua)
-- ARGV[4]  publish command: 'spublish' on a cluster with sharded pub/sub, else 'publish'
-- ARGV[5]  per-waiter channel prefix `redisson_lock__channel:{<name>}`
-- ARGV[6]  now: the client's clock in ms
--
-- Returns as lua/unlock.lua: n > 0 holds left; 0 released the last; -1 not held; -2 the
-- count differs from ARGV[3]
-- (fair_purge, fair_keep: lua/redisson_fair_prelude.lua, prepended)
local function wake_head()
    fair_purge(KEYS[3], KEYS[4], tonumber(ARGV[6]))
    local head = redis.call('lindex', KEYS[3], 0)
    if head then
        redis.pcall(ARGV[4] == 'spublish' and 'spublish' or 'publish', ARGV[5] .. ':' .. head, ARGV[2])
    end
end
local holds = redis.call('hget', KEYS[1], ARGV[1])
if not holds then
    if redis.call('exists', KEYS[1]) == 0 then
        wake_head()
    end
    return -1
end
holds = tonumber(holds)
local expected = tonumber(ARGV[3])
if expected > 0 and holds ~= expected then
    return -2
end
if holds > 1 then
    return redis.call('hincrby', KEYS[1], ARGV[1], -1)
end
redis.call('del', KEYS[1])
wake_head()
return 0
