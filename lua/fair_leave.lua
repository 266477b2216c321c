-- fair_leave.lua: a waiter that timed out or was cancelled leaves the fair lock's queue.
--
-- KEYS[1]  lock hash
-- KEYS[2]  unlock channel (not used here; the key layout is the same for every fair script)
-- KEYS[3]  queue: list of waiter ids ("<owner>:<n>"), oldest first
-- KEYS[4]  deadlines: sorted set, waiter id -> deadline in server ms
-- ARGV[1]  waiter id of the leaving waiter
-- ARGV[2]  per-waiter channel prefix: waiter w listens on ARGV[2] .. ':' .. w
-- ARGV[3]  publish command: 'spublish' on a cluster with sharded pub/sub, else 'publish'
--
-- Stale waiters are purged too. If the lock is free and the queue's head changed (the
-- leaver or a stale waiter was ahead), the new head is woken (payload 'wake') so nobody
-- stalls. The queue keys get the TTL "latest deadline + 1 s", or are deleted when empty.
--
-- Returns  1 the waiter was queued and left; 0 it was not queued
-- (queue, deadlines, now, clock, purge_expired, live_head, tidy: lua/fair_queue.lua, prepended)
local lock = KEYS[1]
clock()

local old_head = redis.call('lindex', queue, 0)
purge_expired()
local removed = redis.call('lrem', queue, 0, ARGV[1])
redis.call('zrem', deadlines, ARGV[1])
live_head()
local head = tidy()
if head and head ~= old_head and redis.call('exists', lock) == 0 then
    -- pcall: a refused publish (ACL) must not fail the script after its writes.
    redis.pcall(ARGV[3] == 'spublish' and 'spublish' or 'publish', ARGV[2] .. ':' .. head, 'wake')
end
if removed > 0 then
    return 1
end
return 0
