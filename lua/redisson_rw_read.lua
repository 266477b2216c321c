-- redisson_rw_read.lua: take or re-enter a read hold of a read-write lock in Redisson's
-- format (KeyLayout::Redisson), RReadWriteLock's read acquire in its effects (one attempt,
-- never blocks). The lock is one hash: field `mode` = 'read' / 'write', reader fields
-- <owner> -> read holds, writer field <owner>:write -> write holds. Every read hold n of an
-- owner also has the string <prefix>:<owner>:rwlock_timeout:<n> = '1' with the hold's lease
-- as TTL: Redisson's read unlock keeps the hash alive while any of them lives.
--
-- KEYS[1]  the lock hash `<name>`
-- ARGV[1]  lease in milliseconds (>= 1): TTL of the new hold's timeout key; the hash's TTL
--          is raised to at least this value, never lowered
-- ARGV[2]  owner field (the reader's; its writer field is ARGV[2] .. ':write')
-- ARGV[3]  timeout key prefix: `{<name>}`, or `<name>` when the name contains `{`
--
-- Taken when the lock is free, read-locked, or write-locked by this owner's own writer
-- field (a downgrade: the writer may read).
--
-- Returns {1, holds}  acquired; holds = this owner's read holds after the call
--         {0, pttl}   write-locked by another owner; pttl = the hash's remaining TTL in ms
--                     (-1 = no TTL)
local lock, owner, lease = KEYS[1], ARGV[2], tonumber(ARGV[1])
local timeouts = ARGV[3] .. ':' .. owner .. ':rwlock_timeout:'
local mode = redis.call('hget', lock, 'mode')
if not mode then
    redis.call('hset', lock, 'mode', 'read', owner, 1)
    redis.call('set', timeouts .. '1', '1', 'px', lease)
    redis.call('pexpire', lock, lease)
    return {1, 1}
end
if mode == 'read' or redis.call('hexists', lock, owner .. ':write') == 1 then
    local holds = redis.call('hincrby', lock, owner, 1)
    redis.call('set', timeouts .. holds, '1', 'px', lease)
    if redis.call('pttl', lock) < lease then
        redis.call('pexpire', lock, lease)
    end
    return {1, holds}
end
return {0, redis.call('pttl', lock)}
