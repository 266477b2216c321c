-- rekey.lua: move an owner's single hold of a lock to a new owner, for a guard that leaves
-- the task that took it (`detach`): afterwards that task no longer re-enters the hold.
-- The part both key layouts share; `lua/rekey_end.lua` (lockwise's) or
-- `lua/redisson_rekey.lua` (Redisson's) follows it and returns.
--
-- KEYS[1]  lock hash
-- ARGV[1]  old owner field
-- ARGV[2]  new owner field (fresh, unique to the guard)
--
-- The new field is written before the old one is removed, so the hash never becomes empty
-- and keeps its TTL. A read-write lock reader's deadline field "~" .. owner moves with it
-- (`moved_deadline` tells the tail whether there was one).
--
-- Returns  2   already moved (a retry after a lost reply)
--          -1  not held by the old owner (expired, force-unlocked, or never taken)
--          -2  the old owner holds more than one hold: nothing done
--          else falls through to the tail, which returns 1 (moved)
local holds = redis.call('hget', KEYS[1], ARGV[1])
if not holds then
    if redis.call('hget', KEYS[1], ARGV[2]) == '1' then
        return 2
    end
    return -1
end
if tonumber(holds) ~= 1 then
    return -2
end
redis.call('hset', KEYS[1], ARGV[2], 1)
redis.call('hdel', KEYS[1], ARGV[1])
local deadline = redis.call('hget', KEYS[1], '~' .. ARGV[1])
local moved_deadline = deadline ~= false
if deadline then
    redis.call('hset', KEYS[1], '~' .. ARGV[2], deadline)
    redis.call('hdel', KEYS[1], '~' .. ARGV[1])
end
