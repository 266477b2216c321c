-- fair_force_unlock.lua: delete a fair lock whoever holds it and wake the head of its queue.
--
-- KEYS[1]  lock hash
-- KEYS[2]  queue: list of waiter ids ("<owner>:<n>"), oldest first
-- KEYS[3]  deadlines: sorted set, waiter id -> deadline in server ms
-- ARGV[1]  per-waiter channel prefix: waiter w listens on ARGV[1] .. ':' .. w
--
-- Stale waiters are purged first; the queue keys get the TTL "latest deadline + 1 s", or
-- are deleted when empty. The head is woken with the payload 'wake'.
--
-- Returns  1 the lock existed and was deleted; 0 it was not locked
local lock, queue, deadlines = KEYS[1], KEYS[2], KEYS[3]
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

for _, w in ipairs(redis.call('zrangebyscore', deadlines, '-inf', now)) do
    redis.call('lrem', queue, 0, w)
    redis.call('zrem', deadlines, w)
end
local head = redis.call('lindex', queue, 0)
while head and not redis.call('zscore', deadlines, head) do
    redis.call('lpop', queue)
    head = redis.call('lindex', queue, 0)
end

local deleted = redis.call('del', lock)
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
    redis.call('publish', ARGV[1] .. ':' .. head, 'wake')
end
return deleted
