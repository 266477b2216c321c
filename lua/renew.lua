-- renew.lua: the watchdog's batched renewal; one call renews many locks.
--
-- KEYS[1..n]  lock hashes (in Cluster: all in one slot)
-- ARGV[1]     new TTL in milliseconds (the watchdog timeout)
-- ARGV[i+1]   owner field expected in KEYS[i]
--
-- Returns  an array of n integers: 1 = renewed, 0 = gone (key missing or no longer held
--          by that owner; such a lock is never touched, so a released lock's TTL never rises)
--
-- A renewal only extends: a longer TTL (the same owner also holds it with a longer lease)
-- is kept. A read-write lock's readers hash (a key whose name has ':rwread') also keeps a
-- deadline per reader in the field "~" .. owner: it is raised to now + ttl (server clock,
-- one TIME per call at most), so the watchdog renews only this client's own reader holds.
-- A read-write lock in Redisson's format (KeyLayout::Redisson: the hash has a field `mode`,
-- which no other hash of either layout has) keeps, for each read hold n of a reader
-- (an owner field not ending in ':write'), the key <prefix>:<owner>:rwlock_timeout:<n>,
-- prefix = '{' .. KEYS[i] .. '}' (KEYS[i] itself when it contains '{'): those of holds
-- 1..count are extended the same way, as Redisson's ReadLockTask does for its own readers.
-- Other keys cost no command more than before (the field and `mode` come in one HMGET).
local ttl = tonumber(ARGV[1])
local result = {}
local now
for i = 1, #KEYS do
    local owner = ARGV[i + 1]
    local got = redis.call('hmget', KEYS[i], owner, 'mode')
    if got[1] then
        if redis.call('pttl', KEYS[i]) < ttl then
            redis.call('pexpire', KEYS[i], ttl)
        end
        if got[2] then
            if string.sub(owner, -6) ~= ':write' then
                local prefix = KEYS[i]
                if not string.find(prefix, '{', 1, true) then
                    prefix = '{' .. prefix .. '}'
                end
                prefix = prefix .. ':' .. owner .. ':rwlock_timeout:'
                for n = 1, tonumber(got[1]) or 0 do
                    if redis.call('pttl', prefix .. n) < ttl then
                        redis.call('pexpire', prefix .. n, ttl)
                    end
                end
            end
        elseif string.find(KEYS[i], ':rwread', 1, true) then
            local field = '~' .. owner
            local deadline = redis.call('hget', KEYS[i], field)
            if deadline then
                if not now then
                    local t = redis.call('time')
                    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
                end
                if tonumber(deadline) < now + ttl then
                    redis.call('hset', KEYS[i], field, now + ttl)
                end
            end
        end
        result[i] = 1
    else
        result[i] = 0
    end
end
return result
