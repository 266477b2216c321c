-- fair_leave.lua: a waiter that timed out or was cancelled leaves the fair lock's queue.
--
-- KEYS[1]  lock hash
-- KEYS[2]  queue: list of waiter ids ("<owner>:<n>"), oldest first
-- KEYS[3]  deadlines: sorted set, waiter id -> deadline in server ms
-- ARGV[1]  waiter id of the leaving waiter
-- ARGV[2]  per-waiter channel prefix: waiter w listens on ARGV[2] .. ':' .. w
--
-- Stale waiters are purged too. If the lock is free and the queue's head changed (the
-- leaver or a stale waiter was ahead), the new head is woken (payload 'wake') so nobody
-- stalls. The queue keys get the TTL "latest deadline + 1 s", or are deleted when empty.
--
-- Returns  1 the waiter was queued and left; 0 it was not queued
local lock, queue, deadlines = KEYS[1], KEYS[2], KEYS[3]
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local old_head = redis.call('lindex', queue, 0)
for _, w in ipairs(redis.call('zrangebyscore', deadlines, '-inf', now)) do
    redis.call('lrem', queue, 0, w)
    redis.call('zrem', deadlines, w)
end
local removed = redis.call('lrem', queue, 0, ARGV[1])
redis.call('zrem', deadlines, ARGV[1])
local head = redis.call('lindex', queue, 0)
while head and not redis.call('zscore', deadlines, head) do
    redis.call('lpop', queue)
    head = redis.call('lindex', queue, 0)
end

if not head then
    redis.call('del', queue, deadlines)
else
    local last = redis.call('zrange', deadlines, -1, -1, 'withscores')
    local ttl = 1000
    if last[2] then
        ttl = math.max(tonumber(last[2]) - now, 0) + 1000
    end
    redis.call('pexpire', queue, ttl)
    redis.call('pexpire', deadlines, ttl)
    if head ~= old_head and redis.call('exists', lock) == 0 then
        redis.call('publish', ARGV[2] .. ':' .. head, 'wake')
    end
end
if removed > 0 then
    return 1
end
return 0
