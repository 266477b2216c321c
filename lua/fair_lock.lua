-- fair_lock.lua: take or re-enter a fair (FIFO) lock, or queue up behind the waiters ahead
-- (one attempt, never blocks).
--
-- KEYS[1]  lock hash, shared by every kind of this name: field "<owner>" -> hold count
-- KEYS[2]  unlock channel (not used here; the key layout is the same for every fair script)
-- KEYS[3]  queue: list of waiter ids, oldest first
-- KEYS[4]  deadlines: sorted set, waiter id -> deadline in server ms (redis TIME)
-- ARGV[1]  lease in milliseconds (integer >= 1): TTL of a new lock; on re-entry the TTL is
--          raised to at least this value, never lowered
-- ARGV[2]  owner field "<client uuid>:<task id>"
-- ARGV[3]  waiter id: the caller's queue entry, unique per lock call ("<owner>:<n>"), so a
--          late leave of an abandoned call never removes a newer call of the same task;
--          "<owner>:g<n>" asks for a handoff: a release then gives this waiter the lock
--          while it waits (lua/fair_queue.lua's hand_over) instead of waking it
-- ARGV[4]  waiter budget in ms: the caller's queue entry lives until server now + this
--          unless refreshed by its next attempt; 0 = single attempt: never join the queue
-- ARGV[5]  per-waiter channel prefix: waiter w listens on ARGV[5] .. ':' .. w
-- ARGV[6]  publish command: 'spublish' on a cluster with sharded pub/sub, else 'publish'
--
-- Every call first purges waiters whose deadline passed (crashed or gone without leaving).
-- The lock is taken only when it is free and the queue is empty or headed by the caller.
-- A waiter joins at the tail (or refreshes its deadline if already queued). When the purge
-- made someone else head of a free lock, the lock is handed over to that head, or it is woken
-- (lua/fair_queue.lua's hand_over). The queue and deadline keys get the TTL "latest deadline
-- + 1 s", and are deleted when the queue empties.
--
-- A waiter that joins or stays in the queue behind a held lock sets the hash's waiter mark
-- "waiting" (see lua/unlock.lua), and so does a head that takes the lock with waiters
-- behind it: the release then serves the queue.
--
-- A waiter that was handed the lock and comes back before it heard so (its message was lost,
-- or it subscribed after the handoff) finds its record "!<waiter id>": the hold is the
-- handoff's, not a re-entry, so its count is not raised; the TTL is raised to the lease.
--
-- A waiter whose entry lapsed (it was paused past its deadline) or whose handed hold ended
-- before it came back (expired, force-unlocked) joins again as a new entry: `joined` says so,
-- since a 'grant' message it hears late may belong to the old entry, whose hold is gone.
--
-- Returns {1, holds, queued}  acquired; holds = this owner's hold count after the call
--                     (1 = new lock); queued = waiters left in the queue (LLEN, for metrics)
--         {0, wait, joined}   not acquired; wait = ms after which retrying is useful: for the
--                     head, the lock's pttl; for others, until the earliest queue deadline
--                     (when a stale waiter ahead could be purged); -1 = unknown; joined = 1
--                     when this call added the caller's entry to the queue (it was not in
--                     it), else 0 (refreshed, or a single attempt that never queues)
-- (queue, deadlines, now, clock, purge_expired, live_head, tidy, grow, shrink, hand_over:
-- lua/fair_queue.lua, prepended)
local lock = KEYS[1]
local owner, waiter = ARGV[2], ARGV[3]
clock()

-- Purge stale waiters, and a head without a deadline (never written by lockwise).
local purged = purge_expired()
local head, dropped = live_head()
purged = purged + dropped

local lease = tonumber(ARGV[1])
if redis.call('hexists', lock, owner) == 1 then
    if redis.call('zrem', deadlines, '!' .. waiter) == 1 then
        if redis.call('pttl', lock) < lease then
            redis.call('pexpire', lock, lease)
        end
        shrink()
        return {1, tonumber(redis.call('hget', lock, owner)), redis.call('llen', queue)}
    end
    local holds = redis.call('hincrby', lock, owner, 1)
    if redis.call('pttl', lock) < lease then
        redis.call('pexpire', lock, lease)
    end
    -- A call of the holder that had queued (e.g. two joined lock() futures of one task) is
    -- granted by re-entry: its entry goes too, or it would head the queue with nobody
    -- listening and the next waiter would sleep until its deadline. The lock stays held,
    -- so nobody needs waking.
    if redis.call('zrem', deadlines, waiter) == 1 then
        redis.call('lrem', queue, 0, waiter)
        tidy()
    elseif purged > 0 then
        tidy()
    end
    return {1, holds, redis.call('llen', queue)}
end

local free = redis.call('exists', lock) == 0
if free and (not head or head == waiter) then
    if head then
        redis.call('lpop', queue)
        redis.call('zrem', deadlines, waiter)
        tidy()
    end
    redis.call('hset', lock, owner, 1)
    redis.call('pexpire', lock, lease)
    local left = redis.call('llen', queue)
    if left > 0 then
        -- The waiter mark (lua/unlock.lua): the waiters behind need this hold's release.
        redis.call('hset', lock, 'waiting', '1')
    end
    return {1, 1, left}
end

local budget = tonumber(ARGV[4])
local joined = 0
if budget > 0 then
    -- ZADD answers 1 for a new member: only then does the waiter join the list's tail.
    if redis.call('zadd', deadlines, now + budget, waiter) == 1 then
        redis.call('rpush', queue, waiter)
        joined = 1
    end
end
if purged > 0 then
    head = tidy()
    if free and head and head ~= waiter then
        local pub = ARGV[6] == 'spublish' and 'spublish' or 'publish'
        hand_over(lock, head, pub, ARGV[5])
        head = redis.call('lindex', queue, 0)
    end
elseif budget > 0 then
    -- Nothing was removed and the caller is in the queue (at its tail if it was empty): the
    -- head stands, and only the TTLs may need raising.
    head = head or waiter
    grow()
end

local pttl
if not free then
    pttl = redis.call('pttl', lock)
    if budget > 0 and pttl > 0 then
        -- The waiter mark (lua/unlock.lua): this waiter needs the release to serve the queue
        -- (not on a hash without a TTL, which lockwise never writes).
        redis.call('hset', lock, 'waiting', '1')
    end
end
if head == waiter or budget == 0 then
    -- A free lock may have been handed over above: its TTL is read now.
    return {0, pttl or redis.call('pttl', lock), joined}
end
local first = redis.call('zrange', deadlines, 0, 0, 'withscores')
if first[2] then
    return {0, math.max(tonumber(first[2]) - now, 0) + 1, joined}
end
return {0, -1, joined}
