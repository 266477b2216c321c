-- rw_write.lua: take or re-enter the write hold of a read-write lock (one attempt, never
-- blocks); a writer that must wait registers its intent, which holds back new readers.
--
-- KEYS[1]  writer hash W: owner -> write holds (at most one owner)
-- KEYS[2]  readers hash R (see lua/rw_read.lua)
-- KEYS[3]  waiting writers WW: sorted set, writer owner -> intent deadline (server ms)
-- KEYS[4]  the lock's overtake claim queue, shared by its readers and writers (lua/claim.lua)
-- KEYS[5]  the claim queue's deadlines
-- ARGV[1]  lease in milliseconds (>= 1): TTL of W; on re-entry raised to at least this
-- ARGV[2]  owner field
-- ARGV[3]  intent window in ms: a refused writer's intent lives this long (0: do not
--          register, a single attempt)
-- ARGV[4]  claim TTL in ms: > 0 queues (or renews) this owner in the claim queue when it is
--          refused; 0 does not
-- ARGV[5]  how long this owner has waited, in ms (with a claim: its place in the queue)
--
-- A free lock (no writer, no reader) goes to the claim queue's head while the queue is not
-- empty, else to any writer.
--
-- Returns {1, holds}     acquired; holds = this owner's write holds after the call
--         {0, wait}      refused; wait = ms to wait at most before trying again
--                        (re-registers the intent before it lapses)
--         {0, wait, score}  refused, and this owner is in the claim queue (queued or renewed;
--                        score: its place, server ms)
--         error reply "LOCKWISE_UPGRADE ..." when this owner reads and does not write: an
--                     upgrade would wait for itself, so it is refused (nothing changed)
-- (rw_now, rw_purge_readers, rw_purge_writers, rw_tidy_writers: lua/rw_prelude.lua;
--  claim_turn, stake_claim: lua/claim.lua; both prepended)
local w, r, ww = KEYS[1], KEYS[2], KEYS[3]
local lease, owner, window = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local claim_ms, waited = tonumber(ARGV[4]), tonumber(ARGV[5])
local now = rw_now()
local readers, last = rw_purge_readers(r, now)
rw_purge_writers(ww, now)
if redis.call('hexists', w, owner) == 1 then
    local holds = redis.call('hincrby', w, owner, 1)
    if redis.call('pttl', w) < lease then
        redis.call('pexpire', w, lease)
    end
    return {1, holds}
end
if redis.call('hexists', r, owner) == 1 then
    return redis.error_reply('LOCKWISE_UPGRADE the owner holds a read lock: upgrade refused')
end
local free = redis.call('exists', w) == 0
local turn = 'open'
if free and readers == 0 then
    turn = claim_turn(KEYS[4], KEYS[5], owner)
end
if free and readers == 0 and (turn == 'open' or turn == 'mine') then
    redis.call('hset', w, owner, 1)
    redis.call('pexpire', w, lease)
    if redis.call('zrem', ww, owner) == 1 then
        rw_tidy_writers(ww, now)
    end
    return {1, 1}
end
local wait
if type(turn) == 'number' then
    wait = turn
elseif free then
    wait = last - now
else
    wait = redis.call('pttl', w)
end
if window > 0 then
    redis.call('zadd', ww, now + window, owner)
    rw_tidy_writers(ww, now)
    local refresh = math.max(math.floor(window / 2), 1)
    if wait < 0 or wait > refresh then
        wait = refresh
    end
end
local score = stake_claim(KEYS[4], KEYS[5], owner, claim_ms, waited)
if score then
    return {0, wait, score}
end
return {0, wait}
