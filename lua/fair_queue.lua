-- fair_queue.lua: the fair-queue helpers shared by the fair-lock scripts and by the release
-- scripts of every kind (a lock of one name is one hash for every kind, so any release may
-- have to wake a fair waiter). Not a script of its own: src/wire/scripts.rs prepends it to
-- fair_lock.lua, fair_leave.lua and force_unlock.lua, and puts it after unlock.lua's fast
-- path (before unlock_fair.lua), so each still runs as one EVAL.
--
-- KEYS[3]  queue: list of waiter ids ("<owner>:<n>", or "<owner>:g<n>" for a waiter that takes
--          a handoff), oldest first
-- KEYS[4]  deadlines: sorted set, waiter id -> deadline in server ms (redis TIME); also the
--          handoff records "!<waiter id>" -> the deadline the waiter had when it was handed
--          the lock (see hand_over)
-- ARGV     none of its own
--
-- Defines (as locals of the script it is prepended to):
--   queue, deadlines        the two keys
--   now, clock()            the server time in ms, read by clock() (call it before the others)
--   wake_fair(lock, pub, prefix)
--                           when the queue exists: purges stale waiters and, if `lock` is
--                           free, hands it over to the head (hand_over)
--   wake_head(lock, pub, prefix)
--                           wake_fair for a caller that already saw the queue exist; only
--                           removes entries, so it never touches the keys' TTLs
--   hand_over(lock, head, pub, prefix, deadline)
--                           `lock` is free and `head` heads the queue; `deadline` is its
--                           deadline if the caller read it already (else read here): a
--                           waiter "<owner>:g<n>"
--                           is given the lock (its owner field set to 1, TTL = what is left
--                           of its deadline, so a dead head blocks no longer than its queue
--                           entry would), leaves the queue, is recorded as "!<waiter id>" in
--                           the deadlines, and is told 'grant:<waiters left>' on
--                           `prefix .. ':' .. head`; its lock() returns on that message.
--                           Any other head is told 'wake' and takes the lock itself.
--   purge_expired()         drops waiters past their deadline; Returns how many
--   live_head()             drops heads without a deadline (never written by lockwise);
--                           Returns the head (or false), how many were dropped, and the
--                           head's deadline (a number, or false)
--   tidy()                  deletes the queue when it is empty, and the deadlines when they
--                           are empty too (handoff records stay until their deadline); sets
--                           the TTL of what is left to "latest deadline + 1 s"; Returns the
--                           head (or false)
--   grow()                  after entries were added or refreshed, nothing removed, and the
--                           queue is not empty: sets both keys' TTL to "latest deadline + 1 s"
--   shrink()                after removals only (nothing added or refreshed, so no TTL needs
--                           raising): deletes the queue when it is empty and the deadlines when
--                           they are empty too; Returns the queue's length
local queue, deadlines = KEYS[3], KEYS[4]
local now = 0

local function clock()
    local t = redis.call('time')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function purge_expired()
    local n = 0
    for _, w in ipairs(redis.call('zrangebyscore', deadlines, '-inf', now)) do
        redis.call('lrem', queue, 0, w)
        redis.call('zrem', deadlines, w)
        n = n + 1
    end
    return n
end

local function live_head()
    local n = 0
    local head = redis.call('lindex', queue, 0)
    local deadline = head and redis.call('zscore', deadlines, head)
    while head and not deadline do
        redis.call('lpop', queue)
        n = n + 1
        head = redis.call('lindex', queue, 0)
        deadline = head and redis.call('zscore', deadlines, head)
    end
    return head, n, deadline and tonumber(deadline)
end

local function tidy()
    local last = redis.call('zrange', deadlines, -1, -1, 'withscores')
    local ttl = 1000
    if last[2] then
        ttl = math.max(tonumber(last[2]) - now, 0) + 1000
    end
    if redis.call('llen', queue) == 0 then
        if last[2] then
            -- Only handoff records are left: they stay until their deadline.
            redis.call('del', queue)
            redis.call('pexpire', deadlines, ttl)
        else
            redis.call('del', queue, deadlines)
        end
        return false
    end
    redis.call('pexpire', queue, ttl)
    redis.call('pexpire', deadlines, ttl)
    return redis.call('lindex', queue, 0)
end

local function grow()
    local last = redis.call('zrange', deadlines, -1, -1, 'withscores')
    local ttl = math.max(tonumber(last[2]) - now, 0) + 1000
    redis.call('pexpire', queue, ttl)
    redis.call('pexpire', deadlines, ttl)
end

local function shrink()
    local left = redis.call('llen', queue)
    if left == 0 then
        if redis.call('zcard', deadlines) == 0 then
            redis.call('del', queue, deadlines)
        else
            redis.call('del', queue)
        end
    end
    return left
end

local function hand_over(lock, head, pub, prefix, deadline)
    deadline = deadline or tonumber(redis.call('zscore', deadlines, head))
    local owner = string.match(head, '^(.+):g%d+$')
    if owner and deadline and deadline > now then
        redis.call('hset', lock, owner, 1)
        redis.call('pexpire', lock, deadline - now)
        redis.call('lpop', queue)
        -- The record first: removing the last member first would delete the key, and the
        -- record would then make it again without a TTL.
        redis.call('zadd', deadlines, deadline, '!' .. head)
        redis.call('zrem', deadlines, head)
        -- pcall: a refused publish (ACL) must not fail the caller after its writes; the
        -- waiter then finds its handoff at its next attempt (lua/fair_lock.lua).
        local left = shrink()
        if left > 0 then
            -- The waiter mark (lua/unlock.lua): the waiters behind need this hold's release.
            redis.call('hset', lock, 'waiting', '1')
        end
        redis.pcall(pub, prefix .. ':' .. head, 'grant:' .. left)
    else
        -- pcall: a refused publish (ACL) must not fail the caller after its writes.
        redis.pcall(pub, prefix .. ':' .. head, 'wake')
    end
end

local function wake_head(lock, pub, prefix)
    clock()
    local purged = purge_expired()
    local head, dropped, deadline = live_head()
    if head and redis.call('exists', lock) == 0 then
        hand_over(lock, head, pub, prefix, deadline)
    elseif purged + dropped > 0 then
        shrink()
    end
end

local function wake_fair(lock, pub, prefix)
    if redis.call('exists', queue) == 1 then
        wake_head(lock, pub, prefix)
    end
end
