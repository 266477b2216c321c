-- redisson_rw_write.lua: take or re-enter the write hold of a read-write lock in Redisson's
-- format (KeyLayout::Redisson), RReadWriteLock's write acquire in its effects (one attempt,
-- never blocks); see lua/redisson_rw_read.lua for the hash.
--
-- KEYS[1]  the lock hash `<name>`
-- ARGV[1]  lease in milliseconds (>= 1): TTL of a new lock; on re-entry the TTL is raised to
--          at least this value, never lowered
-- ARGV[2]  writer field `<owner>:write`
-- ARGV[3]  the same owner's reader field `<owner>`
--
-- Returns {1, holds}  acquired; holds = this owner's write holds after the call
--         {0, pttl}   held by others (readers, or another writer); pttl = the hash's
--                     remaining TTL in ms (-1 = no TTL)
--         error reply "LOCKWISE_UPGRADE ..." when this owner reads and does not write: an
--                     upgrade would wait for itself, so it is refused (nothing changed)
local lock, field, lease = KEYS[1], ARGV[2], tonumber(ARGV[1])
local mode = redis.call('hget', lock, 'mode')
if not mode then
    redis.call('hset', lock, 'mode', 'write', field, 1)
    redis.call('pexpire', lock, lease)
    return {1, 1}
end
if mode == 'write' and redis.call('hexists', lock, field) == 1 then
    local holds = redis.call('hincrby', lock, field, 1)
    if redis.call('pttl', lock) < lease then
        redis.call('pexpire', lock, lease)
    end
    return {1, holds}
end
if redis.call('hexists', lock, ARGV[3]) == 1 then
    return redis.error_reply('LOCKWISE_UPGRADE the owner holds a read lock: upgrade refused')
end
return {0, redis.call('pttl', lock)}
