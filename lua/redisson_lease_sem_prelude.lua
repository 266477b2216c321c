-- redisson_lease_sem_prelude.lua: helpers shared by the permit-expirable semaphore scripts
-- of Redisson's key layout (KeyLayout::Redisson), concatenated before each: Redisson's
-- RPermitExpirableSemaphore, byte for byte.
--
-- KEYS[1]  the name: a string holding the available permits as a decimal (missing: 0, unset)
-- KEYS[2]  `{name}:timeout`: sorted set, permit id (16 raw bytes) -> expiry in ms on the
--          clients' clocks, or 922337203685477 (NEVER) for a permit without lease
-- KEYS[3]  channel `redisson_sc:{name}`: messages carry the new available count (decimal)
-- ARGV     none of its own (the functions take `now`, the caller's client clock in ms)
--
-- TTLs: Redisson writes both keys without one (its acquire copies the name's PTTL onto the
-- set); lockwise keeps its idle TTL on what it writes (lsem_touch), which Java ignores (its
-- SETs may clear the name's until lockwise's next write).
--
-- Returns  nothing: it only defines functions
local NEVER = 922337203685477

-- An integer-valued number as digits (no exponent notation, which Long.valueOf rejects).
local function fmt(x)
    return string.format('%.0f', x)
end

-- The available count (0 when the key is missing). GET first: a key of another type fails
-- here (WRONGTYPE) before anything is written.
local function lsem_available()
    local value = redis.call('get', KEYS[1])
    if not value then
        return 0
    end
    local n = tonumber(value)
    if not n then
        error('semaphore ' .. KEYS[1] .. ' does not hold an integer')
    end
    return n
end

-- Redisson's reclaim: removes up to `limit` expired permits (score <= now; nil: all of them)
-- and adds their count to KEYS[1] (INCRBY, which creates a missing key, as Redisson's does).
-- Returns how many were reclaimed and the available count after that.
local function lsem_reclaim(now, limit)
    local avail = lsem_available()
    local freed = 0
    if limit then
        local expired = redis.call('zrangebyscore', KEYS[2], 0, fmt(now), 'limit', 0, limit)
        if #expired > 0 then
            redis.call('zrem', KEYS[2], unpack(expired))
            freed = #expired
        end
    else
        freed = redis.call('zremrangebyscore', KEYS[2], 0, fmt(now))
    end
    if freed > 0 then
        avail = redis.call('incrby', KEYS[1], freed)
    end
    return freed, avail
end

-- Publishes the available count `count` (decimal) on KEYS[3] when it is > 0 (a count <= 0
-- wakes nobody). pcall: the write has run, so a refused publish (ACL) must not fail it.
local function lsem_publish(publish, count)
    if count > 0 then
        redis.pcall(publish == 'spublish' and 'spublish' or 'publish', KEYS[3], fmt(count))
    end
end

-- lockwise's idle TTL, raise-only: both keys live at least `idle` ms, and never less than
-- until the latest lease expiry (NEVER aside: a permit without lease does not keep the keys
-- forever). The set never expires before the name: its expired permits are counted back
-- only when reclaimed.
local function lsem_touch(now, idle)
    local keep = idle
    local last = redis.call('zrevrangebyscore', KEYS[2], '(' .. fmt(NEVER), '-inf',
        'withscores', 'limit', 0, 1)
    if last[2] and tonumber(last[2]) - now > keep then
        keep = tonumber(last[2]) - now
    end
    local pttl = redis.call('pttl', KEYS[1])
    if pttl > keep then
        keep = pttl
    elseif pttl ~= -2 and pttl < keep then
        redis.call('pexpire', KEYS[1], fmt(keep))
    end
    local zpttl = redis.call('pttl', KEYS[2])
    if zpttl ~= -2 and zpttl < keep then
        redis.call('pexpire', KEYS[2], fmt(keep))
    end
end

-- How long in ms a waiter may sleep before looking again: until the earliest expiry
-- (0 when one is due already: more than an acquire reclaims), else the name's PTTL
-- (negative: no bound known).
local function lsem_earliest(now)
    local first = redis.call('zrangebyscore', KEYS[2], '-inf', '(' .. fmt(NEVER),
        'withscores', 'limit', 0, 1)
    if first[2] then
        return math.max(0, tonumber(first[2]) - now)
    end
    return redis.call('pttl', KEYS[1])
end
