-- claim.lua: the overtake limit's claim queue, shared by lock.lua, fenced_lock.lua,
-- rw_read.lua and rw_write.lua. Not a script of its own: src/wire/scripts.rs prepends it to
-- each (for lock.lua: after its fast path, before lock_contended.lua), so each still runs as
-- one EVAL.
--
-- A waiter that has waited longer than its client's overtake limit joins the lock's claim
-- queue (a read-write lock has its own, shared by its readers and writers): a sorted set
-- next to the lock hash (same hash tag) of owner fields, scored by when
-- each waiter *started* waiting (the server clock less the time the waiter says it has
-- waited), and a second sorted set of the same owners scored by a deadline that each of the
-- waiter's attempts renews. While the queue is not empty, a free lock is refused to every
-- owner but its head, the waiter that started first: the next release goes to the oldest
-- overdue waiter even when another client's waiters, or the releasing task itself, send
-- their attempt first, and a waiter that started more than the limit after another one is
-- never served before it. A claim only ever refuses: it never grants a lock, never refuses
-- a re-entry, and a queued waiter that dies holds a free lock back for at most its claim's
-- TTL (every script purges the entries whose deadline passed).
--
-- KEYS     none of its own: the caller passes its claim queue and its deadlines (or nil: no
--          claims, e.g. a RedLock node) to the functions below
-- ARGV     none of its own
--
-- Defines (as locals of the script it is prepended to):
--   claim_refusal(claim, deadlines, owner, ms, waited)
--       for an attempt on a free lock: nil when `owner` may take it (no queue, or `owner`
--       is its head, whose entry is then removed; a second result says which: true for the
--       head, whose release other waiters, refused meanwhile, wait for); else the refusal reply {0, ms until the
--       head's claim lapses}, which reads as "held" to the caller: it waits for the next
--       release or the head's end. An overdue owner (`ms` > 0) that is refused joins (or
--       renews) its place in the queue as with stake_claim, and is told so:
--       {0, ms until the head's claim lapses, its score}
--   claim_turn(claim, deadlines, owner)
--       whose turn a free lock is: 'open' (no queue), 'mine' (`owner` heads the queue; its
--       entry is removed), or the ms until the head's claim lapses (another waiter's turn)
--   stake_claim(claim, deadlines, owner, ms, waited)
--       for an attempt on a lock held by another owner: when ms > 0, queues `owner` (scored
--       by the server time less `waited` ms; a waiter already queued keeps its place) with a
--       deadline ms from now, and returns its score (the caller then answers
--       {0, pttl, score}: the client ranks its own queued waiters by (score, owner), as the
--       queue does, and wakes the first at every release); false otherwise
-- Returns  nothing itself (the script it is prepended to does)
local function claim_now()
    local t = redis.call('time')
    return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function claim_purge(claim, deadlines, now)
    local gone = redis.call('zrangebyscore', deadlines, '-inf', now)
    if #gone > 0 then
        redis.call('zrem', deadlines, unpack(gone))
        redis.call('zrem', claim, unpack(gone))
    end
end

local function stake_claim(claim, deadlines, owner, ms, waited)
    if not claim or not ms or ms <= 0 then
        return false
    end
    local now = claim_now()
    claim_purge(claim, deadlines, now)
    redis.call('zadd', claim, 'NX', now - (waited or 0), owner)
    redis.call('zadd', deadlines, now + ms, owner)
    for _, key in ipairs({claim, deadlines}) do
        if redis.call('pttl', key) < ms then
            redis.call('pexpire', key, ms)
        end
    end
    return tonumber(redis.call('zscore', claim, owner))
end

local function claim_turn(claim, deadlines, owner)
    if not claim or redis.call('exists', claim) == 0 then
        return 'open'
    end
    local now = claim_now()
    claim_purge(claim, deadlines, now)
    local head = redis.call('zrange', claim, 0, 0)[1]
    if not head then
        return 'open'
    end
    if head == owner then
        redis.call('zrem', claim, owner)
        redis.call('zrem', deadlines, owner)
        return 'mine'
    end
    return math.max(1, (tonumber(redis.call('zscore', deadlines, head)) or now) - now)
end

local function claim_refusal(claim, deadlines, owner, ms, waited)
    local turn = claim_turn(claim, deadlines, owner)
    if turn == 'open' or turn == 'mine' then
        return nil, turn == 'mine'
    end
    local score = stake_claim(claim, deadlines, owner, ms, waited)
    if score then
        return {0, turn, score}
    end
    return {0, turn}
end
