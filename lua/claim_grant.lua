-- claim_grant.lua: a free lock taken by an attempt its claim queue let through (the lock
-- scripts that honour overtake claims: lua/lock_contended.lua, lua/fenced_lock.lua). Not a
-- script of its own: spliced in where a line reads `--#include claim_grant.lua`
-- (src/wire/scripts.rs), after the script set `lease` (ARGV[1] as a number) and `head`
-- (whether the attempt was the claim queue's head, lua/claim.lua's claim_refusal).
--
-- KEYS[1]  lock hash
-- ARGV[2]  owner field
-- Returns  nothing: the script returns its own grant reply after it
redis.call('hset', KEYS[1], ARGV[2], 1)
if head then
    -- The claim queue's head: waiters refused while the lock was free wait for its
    -- release (the waiter mark, lua/unlock.lua).
    redis.call('hset', KEYS[1], 'waiting', '1')
end
redis.call('pexpire', KEYS[1], lease)
