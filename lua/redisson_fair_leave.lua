-- redisson_fair_leave.lua: a fair waiter in Redisson's layout leaves the queue after a
-- timeout or a dropped call (RFairLock's acquireFailed, in its effects): every waiter
-- queued behind it gets its wait back (ZINCRBY -wait), then its entry goes; a leaver that
-- headed the queue of a free lock wakes the next head with `0` on its channel.
--
-- KEYS[1]  lock hash `<name>`
-- KEYS[2]  queue `redisson_lock_queue:{<name>}`
-- KEYS[3]  deadlines `redisson_lock_timeout:{<name>}`
-- ARGV[1]  owner field of the leaver
-- ARGV[2]  the wait it queued with, in ms
-- ARGV[3]  per-waiter channel prefix `redisson_lock__channel:{<name>}` (waiter w: `<prefix>:w`)
-- ARGV[4]  publish command: 'spublish' on a cluster with sharded pub/sub, else 'publish'
-- ARGV[5]  now: the client's clock in ms
--
-- Returns  1 the entry was there and went; 0 it was not queued
-- (fair_purge, fair_keep: lua/redisson_fair_prelude.lua, prepended)
local owner, wait, now = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[5])
local head = redis.call('lindex', KEYS[2], 0)
local queue = redis.call('lrange', KEYS[2], 0, -1)
local found = false
for _, waiter in ipairs(queue) do
    if found then
        redis.call('zincrby', KEYS[3], -wait, waiter)
    elseif waiter == owner then
        found = true
    end
end
redis.call('zrem', KEYS[3], owner)
redis.call('lrem', KEYS[2], 0, owner)
fair_purge(KEYS[2], KEYS[3], now)
if head == owner and redis.call('exists', KEYS[1]) == 0 then
    local next_head = redis.call('lindex', KEYS[2], 0)
    if next_head then
        redis.pcall(ARGV[4] == 'spublish' and 'spublish' or 'publish', ARGV[3] .. ':' .. next_head, '0')
    end
end
fair_keep(KEYS[2], KEYS[3], now, 0)
return found and 1 or 0
