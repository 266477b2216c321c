-- fair_leave.lua: a waiter that timed out or was cancelled leaves the fair lock's queue.
--
-- KEYS[1]  lock hash
-- KEYS[2]  unlock channel: published to ('leave') when a handoff is given back
-- KEYS[3]  queue: list of waiter ids ("<owner>:<n>" or "<owner>:g<n>"), oldest first
-- KEYS[4]  deadlines: sorted set, waiter id -> deadline in server ms
-- ARGV[1]  waiter id of the leaving waiter
-- ARGV[2]  per-waiter channel prefix: waiter w listens on ARGV[2] .. ':' .. w
-- ARGV[3]  publish command: 'spublish' on a cluster with sharded pub/sub, else 'publish'
--
-- Stale waiters are purged too. If the lock is free and the queue's head changed (the
-- leaver or a stale waiter was ahead), the lock is handed over to the new head, or it is
-- woken (lua/fair_queue.lua's hand_over), so nobody stalls. The queue keys get the TTL
-- "latest deadline + 1 s", or are deleted when empty.
--
-- A waiter that was handed the lock (its record "!<waiter id>") but leaves before it heard
-- so gives the hold back: one hold of its owner is released (the lock deleted and its
-- channel told when it was the last), and the next head is served.
--
-- Returns  1 the waiter was queued and left; 0 it was not queued; 2 it had been handed the
--          lock, which it gave back
-- (queue, deadlines, now, clock, purge_expired, live_head, tidy, hand_over: lua/fair_queue.lua,
-- prepended)
local lock = KEYS[1]
local pub = ARGV[3] == 'spublish' and 'spublish' or 'publish'
clock()

if redis.call('zrem', deadlines, '!' .. ARGV[1]) == 1 then
    local owner = string.match(ARGV[1], '^(.+):g%d+$')
    local holds = owner and redis.call('hget', lock, owner)
    if holds then
        if tonumber(holds) > 1 then
            redis.call('hincrby', lock, owner, -1)
        else
            redis.call('del', lock)
            -- pcall: the DEL has run; a refused publish (ACL) must not fail the script.
            redis.pcall(pub, KEYS[2], 'leave')
        end
    end
    purge_expired()
    live_head()
    local head = tidy()
    if head and redis.call('exists', lock) == 0 then
        hand_over(lock, head, pub, ARGV[2])
    end
    return 2
end

local old_head = redis.call('lindex', queue, 0)
purge_expired()
local removed = redis.call('lrem', queue, 0, ARGV[1])
redis.call('zrem', deadlines, ARGV[1])
live_head()
local head = tidy()
if head and head ~= old_head and redis.call('exists', lock) == 0 then
    hand_over(lock, head, pub, ARGV[2])
end
if removed > 0 then
    return 1
end
return 0
