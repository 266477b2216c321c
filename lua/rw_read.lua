-- rw_read.lua: take or re-enter a read hold of a read-write lock (one attempt, never blocks).
--
-- KEYS[1]  readers hash R: owner -> read holds, "~" .. owner -> that reader's deadline (ms)
-- KEYS[2]  writer hash W: owner -> write holds (at most one owner)
-- KEYS[3]  waiting writers WW: sorted set, writer owner -> intent deadline (server ms)
-- KEYS[4]  the lock's overtake claim queue, shared by its readers and writers (lua/claim.lua)
-- KEYS[5]  the claim queue's deadlines
-- ARGV[1]  lease in milliseconds (>= 1): the reader's deadline becomes at least now + lease,
--          and R's TTL is raised to at least the lease (never lowered)
-- ARGV[2]  owner field
-- ARGV[3]  claim TTL in ms: > 0 queues (or renews) this owner in the claim queue when it is
--          refused; 0 does not
-- ARGV[4]  how long this owner has waited, in ms (with a claim: its place in the queue)
--
-- Granted when W is free or this owner's (read under its own write: downgrade), or when this
-- owner already reads (re-entry). Otherwise a new reader is refused while a writer holds
-- the lock; while no writer holds it, it is refused while a writer heads the claim queue,
-- and, unless it heads the queue itself, while a live writer waits (writer preference). So
-- the claim queue's head reads although writers wait (which bounds how long a stream of
-- writers overtakes a reader), and a reader at the head does not hold back other readers.
-- Readers queue as "~" .. owner, so the queue tells readers from writers. Expired readers
-- and writers are purged first.
--
-- Returns {1, holds}     acquired; holds = this owner's read holds after the call
--         {0, wait}      refused; wait = ms to wait at most before trying again (-1: unknown)
--         {0, wait, score}  refused, and this owner is in the claim queue (queued or renewed;
--                        score: its place, server ms)
-- (rw_now, rw_purge_readers, rw_purge_writers: lua/rw_prelude.lua; claim_turn,
--  stake_claim: lua/claim.lua; both prepended)
local r, w, ww = KEYS[1], KEYS[2], KEYS[3]
local lease, owner = tonumber(ARGV[1]), ARGV[2]
local claim_ms, waited = tonumber(ARGV[3]), tonumber(ARGV[4])
local member = '~' .. owner
local now = rw_now()
rw_purge_readers(r, now)
local writers, intent = rw_purge_writers(ww, now)

local function refuse(wait)
    local score = stake_claim(KEYS[4], KEYS[5], member, claim_ms, waited)
    if score then
        return {0, wait, score}
    end
    return {0, wait}
end

if redis.call('hexists', w, owner) == 0 and redis.call('hexists', r, owner) == 0 then
    if redis.call('exists', w) == 1 then
        return refuse(redis.call('pttl', w))
    end
    local turn = claim_turn(KEYS[4], KEYS[5], member)
    if type(turn) == 'number' then
        local head = redis.call('zrange', KEYS[4], 0, 0)[1]
        if string.sub(head, 1, 1) ~= '~' then
            return refuse(turn)
        end
    end
    if turn ~= 'mine' and writers > 0 then
        return refuse(math.max(intent - now, 1))
    end
    if type(turn) == 'number' then
        -- Let in behind a reader at the head: leave the queue, if in it.
        redis.call('zrem', KEYS[4], member)
        redis.call('zrem', KEYS[5], member)
    end
end
local holds = redis.call('hincrby', r, owner, 1)
local field = member
local deadline = now + lease
local old = tonumber(redis.call('hget', r, field) or '0')
if old > deadline then
    deadline = old
end
redis.call('hset', r, field, deadline)
if redis.call('pttl', r) < lease then
    redis.call('pexpire', r, lease)
end
return {1, holds}
