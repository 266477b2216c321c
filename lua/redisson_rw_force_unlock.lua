-- redisson_rw_force_unlock.lua: delete a read-write lock in Redisson's format
-- (KeyLayout::Redisson) whoever holds it, as RReadWriteLock's forceUnlock does: only in the
-- mode asked for (the read lock's in mode 'read', the write lock's in mode 'write'), or in
-- either (the whole lock's). Publishes `0` after deleting a read-locked hash and `1` after
-- deleting a write-locked one, as Redisson's read and write forceUnlock do. The readers'
-- timeout keys go too (Redisson leaves them to their TTL).
--
-- KEYS[1]  the lock hash `<name>`
-- KEYS[2]  the channel `redisson_rwlock:{<name>}`
-- ARGV[1]  the mode to delete in: 'read', 'write', or '' for either
-- ARGV[2]  publish command: 'spublish' on a cluster with sharded pub/sub, else 'publish'
-- ARGV[3]  timeout key prefix: `{<name>}`, or `<name>` when the name contains `{`
--
-- Returns  1 the lock was held in that mode and was deleted; 0 it was not
local lock = KEYS[1]
local mode = redis.call('hget', lock, 'mode')
if not mode or (ARGV[1] ~= '' and mode ~= ARGV[1]) then
    return 0
end
local all = redis.call('hgetall', lock)
for i = 1, #all, 2 do
    local count = all[i] ~= 'mode' and tonumber(all[i + 1])
    if count then
        for n = 1, count do
            redis.call('del', ARGV[3] .. ':' .. all[i] .. ':rwlock_timeout:' .. n)
        end
    end
end
redis.call('del', lock)
redis.pcall(ARGV[2] == 'spublish' and 'spublish' or 'publish', KEYS[2],
    mode == 'write' and '1' or '0')
return 1
