-- rekey.lua: move an owner's single hold of a lock to a new owner, for a guard that leaves
-- the task that took it (`detach`): afterwards that task no longer re-enters the hold.
--
-- KEYS[1]  lock hash
-- ARGV[1]  old owner field
-- ARGV[2]  new owner field (fresh, unique to the guard)
--
-- The new field is written before the old one is removed, so the hash never becomes empty
-- and keeps its TTL. A read-write lock reader's deadline field "~" .. owner moves with it;
-- in Redisson's format (the hash has a field `mode`) a reader's (old field not ending in
-- ':write') hold key <prefix>:<old>:rwlock_timeout:1 is renamed to <prefix>:<new>:...:1,
-- TTL kept (prefix = '{' .. KEYS[1] .. '}', or KEYS[1] when it contains '{'). A writer's
-- new field must end in ':write' as well (the caller's part).
--
-- Returns  1   moved
--          2   already moved (a retry after a lost reply)
--          -1  not held by the old owner (expired, force-unlocked, or never taken)
--          -2  the old owner holds more than one hold: nothing done
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
if deadline then
    redis.call('hset', KEYS[1], '~' .. ARGV[2], deadline)
    redis.call('hdel', KEYS[1], '~' .. ARGV[1])
elseif string.sub(ARGV[1], -6) ~= ':write' and redis.call('hexists', KEYS[1], 'mode') == 1 then
    local prefix = KEYS[1]
    if not string.find(prefix, '{', 1, true) then
        prefix = '{' .. prefix .. '}'
    end
    local old = prefix .. ':' .. ARGV[1] .. ':rwlock_timeout:1'
    if redis.call('exists', old) == 1 then
        redis.call('rename', old, prefix .. ':' .. ARGV[2] .. ':rwlock_timeout:1')
    end
end
return 1
