-- fair_force_unlock.lua: delete a fair lock whoever holds it and wake the head of its queue.
--
-- KEYS[1]  lock hash
-- KEYS[2]  queue: list of waiter ids ("<owner>:<n>"), oldest first
-- KEYS[3]  deadlines: sorted set, waiter id -> deadline in server ms
-- ARGV[1]  per-waiter channel prefix: waiter w listens on ARGV[1] .. ':' .. w
-- ARGV[2]  publish command: 'spublish' on a cluster with sharded pub/sub, else 'publish'
--
-- Stale waiters are purged first; the queue keys get the TTL "latest deadline + 1 s", or
-- are deleted when empty. The head is woken with the payload 'wake'.
--
-- Returns  1 the lock existed and was deleted; 0 it was not locked
-- (queue, deadlines, now, purge_expired, live_head, tidy: lua/fair_queue.lua, prepended)
local lock = KEYS[1]

purge_expired()
live_head()
local deleted = redis.call('del', lock)
local head = tidy()
if head then
    redis.call(ARGV[2] == 'spublish' and 'spublish' or 'publish', ARGV[1] .. ':' .. head, 'wake')
end
return deleted
