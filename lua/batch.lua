-- batch.lua: the uncontended paths of lua/lock.lua and lua/unlock.lua for many calls in one
-- script call. src/engine/batch.rs sends the calls that queued on a connection while another
-- was in flight. Each item runs the common paths of its script, with the same commands,
-- effects and answers: a lock item takes a free lock, re-enters its owner's, or reports
-- another owner's; an unlock item releases one hold. An item that would need more (a free
-- lock whose claim queue decides, a release that would serve a fair queue, a refused command
-- or a key of another type) is left untouched and answered -3, and its caller then sends the full script
-- alone. So an item either did exactly what its script would have done, or nothing. Lock
-- items never stake an overtake claim (src/engine/batch.rs sends only acquires that do not)
-- and never set the waiter mark: a waiter's re-check after it subscribes goes alone, as
-- lua/lock.lua, and sets it there.
--
-- ARGV[1]  publish command: 'spublish' on a cluster with sharded pub/sub, else 'publish'
-- ARGV[2]  the message a last release publishes (the releasing client's id, as unlock.lua)
-- Then two ARGV per item, in order, and its KEYS, taken in order from KEYS[1]:
--   lock    ARGV: lease in ms (> 0), owner field
--           KEYS: lock hash, its overtake claim queue
--   unlock  ARGV: -1 - expected hold count (<= -1; expected 0 = any), owner field
--           KEYS: lock hash, its channel, the name's fair queue
--
-- Returns one integer per item, in order:
--   lock    n >= 1 acquired, n = this owner's hold count after the call (lock.lua's {1, n});
--           n <= -9 held by another owner, -10 - n = its PTTL (lock.lua's {0, pttl}); -3 not
--           tried
--   unlock  as lua/unlock.lua: n > 0 holds left, 0 last hold released (lock deleted; one
--           message published when the hold was marked), -1 not held by this owner, -2 hold count differs from the
--           expected one; -3 not tried
local pub = ARGV[1] == 'spublish' and 'spublish' or 'publish'
local message = ARGV[2]
local out = {}
local m = 0
local k = 1
-- Numbers stay strings where the commands take them: Redis turns a Lua number argument into
-- a string with printf, which costs more than the command around it.
for i = 3, #ARGV - 1, 2 do
    local a = ARGV[i]
    local owner = ARGV[i + 1]
    local lock = KEYS[k]
    local reply = -3
    if a == '-1' or string.byte(a) == 45 then
        -- An unlock ('-1': any hold count; '-1 - n': only while the count is n).
        -- The owner's count and the waiter mark (lua/unlock.lua) in one read; the fair queue
        -- is looked at only where unlock.lua would serve it: a marked last release, or none.
        local got = redis.pcall('hmget', lock, owner, 'waiting')
        -- A refused read (a key of another type) is an error table: not tried.
        if type(got) == 'table' and not got.err then
            local holds = got[1]
            if not holds then
                if redis.call('exists', KEYS[k + 2]) == 0 then
                    reply = -1
                end
            elseif a ~= '-1' and tonumber(holds) ~= -1 - tonumber(a) then
                reply = -2
            elseif holds == '1' or tonumber(holds) <= 1 then
                if not got[2] then
                    redis.call('del', lock)
                    reply = 0
                elseif redis.call('exists', KEYS[k + 2]) == 0 then
                    redis.call('del', lock)
                    redis.pcall(pub, KEYS[k + 1], message)
                    reply = 0
                end
            else
                local left = redis.pcall('hincrby', lock, owner, '-1')
                if type(left) == 'number' then
                    reply = left
                end
            end
        end
        k = k + 3
    else
        -- A lock; `a` is its lease in ms.
        if redis.call('exists', lock, KEYS[k + 1]) == 0 then
            -- pcall: a refused write (OOM) leaves this item untried, not the batch failed.
            if type(redis.pcall('hset', lock, owner, '1')) == 'number' then
                redis.call('pexpire', lock, a)
                reply = 1
            end
        else
            -- As lua/lock_contended.lua without a claim to stake.
            local mine = redis.pcall('hexists', lock, owner)
            if mine == 1 then
                local holds = redis.pcall('hincrby', lock, owner, '1')
                if type(holds) == 'number' then
                    if redis.call('pttl', lock) < tonumber(a) then
                        redis.call('pexpire', lock, a)
                    end
                    reply = holds
                end
            elseif mine == 0 then
                local pttl = redis.call('pttl', lock)
                if pttl ~= -2 then
                    reply = -10 - pttl
                end
            end
        end
        k = k + 2
    end
    m = m + 1
    out[m] = reply
end
return out
