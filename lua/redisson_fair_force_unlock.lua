-- redisson_fair_force_unlock.lua: delete a fair lock in Redisson's layout whoever holds it
-- and wake the head of its queue (RFairLock's forceUnlock, in its effects); the queue is
-- kept.
--
-- KEYS[1]  lock hash `<name>`
-- KEYS[2]  queue `redisson_lock_queue:{<name>}`
-- KEYS[3]  deadlines `redisson_lock_timeout:{<name>}`
-- ARGV[1]  per-waiter channel prefix `redisson_lock__channel:{<name>}`
-- ARGV[2]  publish command: 'spublish' on a cluster with sharded pub/sub, else 'publish'
-- ARGV[3]  now: the client's clock in ms
--
-- Returns  1 the lock existed and was deleted; 0 it was not locked
-- (fair_purge, fair_keep: lua/redisson_fair_prelude.lua, prepended)
fair_purge(KEYS[2], KEYS[3], tonumber(ARGV[3]))
local deleted = redis.call('del', KEYS[1])
local head = redis.call('lindex', KEYS[2], 0)
if deleted == 1 and head then
    redis.pcall(ARGV[2] == 'spublish' and 'spublish' or 'publish', ARGV[1] .. ':' .. head, '0')
end
return deleted
