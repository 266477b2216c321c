-- redisson_rekey.lua: the end of `lua/rekey.lua` in Redisson's key layout. In Redisson's
-- read-write format (the hash has a field `mode`) a reader's (old field not ending in
-- ':write') hold key <prefix>:<old>:rwlock_timeout:1 is renamed to <prefix>:<new>:...:1,
-- TTL kept (prefix = '{' .. KEYS[1] .. '}', or KEYS[1] when it contains '{'). A writer's
-- new field must end in ':write' as well (the caller's part).
--
-- KEYS[1]  lock hash (as in lua/rekey.lua)
-- ARGV[1]  old owner field
-- ARGV[2]  new owner field
--
-- Returns  1   moved
if not moved_deadline and string.sub(ARGV[1], -6) ~= ':write'
        and redis.call('hexists', KEYS[1], 'mode') == 1 then
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
