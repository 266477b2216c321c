-- floor_pairs.lua (bench only, not a library script): the Redis commands of lockwise's
-- uncontended lock -> unlock pair, for many pairs in one script call. It measures what a pair
-- costs Redis once the cost of the script call itself is shared by many pairs, which is the
-- most that batching script calls could save: the floor of a hash lock's pair.
--
-- KEYS     four per pair: lock hash, overtake claim, unlock channel, fair queue (all absent
--          before the call, as for an uncontended lock)
-- ARGV[1]  owner field
-- ARGV[2]  lease in ms
-- ARGV[3]  unlock message
--
-- The commands per pair are those of lua/lock.lua and lua/unlock.lua on their fast paths:
-- lock: EXISTS (lock and claim), HSET, PEXPIRE; unlock: HGET, DEL, PUBLISH, EXISTS (queue).
--
-- Returns  the number of pairs done
local done = 0
for i = 1, #KEYS, 4 do
    local lock, claim, channel, queue = KEYS[i], KEYS[i + 1], KEYS[i + 2], KEYS[i + 3]
    if redis.call('exists', lock, claim) == 0 then
        redis.call('hset', lock, ARGV[1], 1)
        redis.call('pexpire', lock, ARGV[2])
    end
    if redis.call('hget', lock, ARGV[1]) == '1' then
        redis.call('del', lock)
        redis.call('publish', channel, ARGV[3])
        redis.call('exists', queue)
        done = done + 1
    end
end
return done
