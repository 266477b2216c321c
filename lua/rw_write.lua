-- rw_write.lua: take or re-enter the write hold of a read-write lock (one attempt, never
-- blocks); a writer that must wait registers its intent, which holds back new readers.
--
-- KEYS[1]  writer hash W: owner -> write holds (at most one owner)
-- KEYS[2]  readers hash R (see lua/rw_read.lua)
-- KEYS[3]  waiting writers WW: sorted set, writer owner -> intent deadline (server ms)
-- ARGV[1]  lease in milliseconds (>= 1): TTL of W; on re-entry raised to at least this
-- ARGV[2]  owner field
-- ARGV[3]  intent window in ms: a refused writer's intent lives this long (0: do not
--          register, a single attempt)
--
-- Returns {1, holds}  acquired; holds = this owner's write holds after the call
--         {0, wait}   refused; wait = ms to wait at most before trying again (re-registers
--                     the intent before it lapses)
--         error reply "LOCKWISE_UPGRADE ..." when this owner reads and does not write: an
--                     upgrade would wait for itself, so it is refused (nothing changed)
-- (rw_now, rw_purge_readers, rw_purge_writers, rw_tidy_writers: lua/rw_prelude.lua)
local w, r, ww = KEYS[1], KEYS[2], KEYS[3]
local lease, owner, window = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
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
if free and readers == 0 then
    redis.call('hset', w, owner, 1)
    redis.call('pexpire', w, lease)
    if redis.call('zrem', ww, owner) == 1 then
        rw_tidy_writers(ww, now)
    end
    return {1, 1}
end
local wait
if free then
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
return {0, wait}
