-- rw_read.lua: take or re-enter a read hold of a read-write lock (one attempt, never blocks).
--
-- KEYS[1]  readers hash R: owner -> read holds, "~" .. owner -> that reader's deadline (ms)
-- KEYS[2]  writer hash W: owner -> write holds (at most one owner)
-- KEYS[3]  waiting writers WW: sorted set, writer owner -> intent deadline (server ms)
-- ARGV[1]  lease in milliseconds (>= 1): the reader's deadline becomes at least now + lease,
--          and R's TTL is raised to at least the lease (never lowered)
-- ARGV[2]  owner field
--
-- Granted when W is free or this owner's (read under its own write: downgrade), or when this
-- owner already reads (re-entry). A new reader is refused while a live writer waits (writer
-- preference). Expired readers and writers are purged first.
--
-- Returns {1, holds}  acquired; holds = this owner's read holds after the call
--         {0, wait}   refused; wait = ms to wait at most before trying again (-1: unknown)
-- (rw_now, rw_purge_readers, rw_purge_writers: lua/rw_prelude.lua, prepended)
local r, w, ww = KEYS[1], KEYS[2], KEYS[3]
local lease, owner = tonumber(ARGV[1]), ARGV[2]
local now = rw_now()
rw_purge_readers(r, now)
local writers, intent = rw_purge_writers(ww, now)
if redis.call('hexists', w, owner) == 0 and redis.call('hexists', r, owner) == 0 then
    if redis.call('exists', w) == 1 then
        return {0, redis.call('pttl', w)}
    end
    if writers > 0 then
        return {0, math.max(intent - now, 1)}
    end
end
local holds = redis.call('hincrby', r, owner, 1)
local field = '~' .. owner
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
