-- redisson_fair_lock.lua: one attempt at a fair lock in Redisson's layout (RFairLock's
-- `tryLock(wait)` script, in its effects): take it when it is free and this owner heads the
-- queue (or the queue is empty), re-enter it, or queue this owner behind the last waiter.
--
-- KEYS[1]  lock hash `<name>`: owner field -> hold count
-- KEYS[2]  queue `redisson_lock_queue:{<name>}`: owner fields, oldest first
-- KEYS[3]  deadlines `redisson_lock_timeout:{<name>}`: owner -> deadline (client ms)
-- ARGV[1]  lease in ms: TTL of a new lock; on re-entry raised to at least this
-- ARGV[2]  owner field
-- ARGV[3]  wait in ms: the caller's wait, or the fleet's fairLockWaitTimeout (300000 by
--          default): each waiter's deadline is the one before it + wait, and an acquire
--          moves every deadline behind it forward by its own wait
-- ARGV[4]  now: the client's clock in ms (Redisson's fleets compare client clocks)
-- ARGV[5]  1: do not queue (a single attempt: RFairLock's `tryLock()`); 0: queue
--
-- Returns  {1, holds, queued}  acquired; holds = the owner's hold count after the call,
--                              queued = waiters left behind
--          {0, ttl}            not acquired: the lock's PTTL (0 when free but another
--                              waiter heads the queue), or, having just queued, the time
--                              until the waiter before it is due (its wait bound)
-- (fair_purge, fair_keep: lua/redisson_fair_prelude.lua, prepended)
local lease, owner = tonumber(ARGV[1]), ARGV[2]
local wait, now = tonumber(ARGV[3]), tonumber(ARGV[4])
fair_purge(KEYS[2], KEYS[3], now)
if redis.call('exists', KEYS[1]) == 0 then
    local head = redis.call('lindex', KEYS[2], 0)
    if not head or head == owner then
        redis.call('lpop', KEYS[2])
        redis.call('zrem', KEYS[3], owner)
        local behind = redis.call('zrange', KEYS[3], 0, -1)
        for _, waiter in ipairs(behind) do
            redis.call('zincrby', KEYS[3], -wait, waiter)
        end
        redis.call('hset', KEYS[1], owner, 1)
        redis.call('pexpire', KEYS[1], lease)
        return {1, 1, #behind}
    end
elseif redis.call('hexists', KEYS[1], owner) == 1 then
    local holds = redis.call('hincrby', KEYS[1], owner, 1)
    if redis.call('pttl', KEYS[1]) < lease then
        redis.call('pexpire', KEYS[1], lease)
    end
    return {1, holds, 0}
end
local pttl = math.max(0, redis.call('pttl', KEYS[1]))
if ARGV[5] == '1' or redis.call('zscore', KEYS[3], owner) then
    return {0, pttl}
end
local ttl = pttl
local last = redis.call('lindex', KEYS[2], -1)
if last then
    local due = redis.call('zscore', KEYS[3], last)
    if due then
        ttl = tonumber(due) - now
    end
end
redis.call('zadd', KEYS[3], ttl + wait + now, owner)
redis.call('rpush', KEYS[2], owner)
fair_keep(KEYS[2], KEYS[3], now, wait)
return {0, math.max(0, ttl)}
