-- claim.lua: the overtake limit's claim, shared by lock.lua and fenced_lock.lua. Not a
-- script of its own: src/scripts.rs prepends it to both, so each still runs as one EVAL.
--
-- A waiter that has waited longer than its client's overtake limit stakes a claim on the
-- lock: a string key next to the lock hash (same hash tag) holding the waiter's owner field,
-- with a short TTL that each of the waiter's attempts renews. While the claim lives, a free
-- lock is refused to every other owner, so the next release goes to the claimant even when
-- another client's waiters, or the releasing task itself, send their attempt first. There is
-- one claim per lock at a time; others who waited as long stake theirs after it is served.
-- A claim only ever refuses: it never grants a lock, never refuses a re-entry, and a
-- claimant that dies blocks the free lock for at most the claim's TTL.
--
-- KEYS     none of its own: the caller passes its claim key (or nil: no claims, e.g. a
--          RedLock node) to the functions below
-- ARGV     none of its own
--
-- Defines (as locals of the script it is prepended to):
--   claim_refusal(claim, owner)
--       for an attempt on a free lock: nil when `owner` may take it (its own claim, if any,
--       is deleted); else the refusal reply {0, claim pttl}, which reads as "held" to the
--       caller: it waits for the next release or the claim's end
--   stake_claim(claim, owner, ms)
--       for an attempt on a lock held by another owner: when ms > 0 and no other owner's
--       claim lives, (re)claims the lock for `owner` for ms milliseconds and returns true
--       (the caller then answers {0, pttl, 1}, so the claimant's client wakes it at every
--       release); false otherwise
-- Returns  nothing itself (the script it is prepended to does)
local function claim_refusal(claim, owner)
    if not claim then
        return nil
    end
    local claimant = redis.call('get', claim)
    if not claimant then
        return nil
    end
    if claimant == owner then
        redis.call('del', claim)
        return nil
    end
    return {0, redis.call('pttl', claim)}
end

local function stake_claim(claim, owner, ms)
    if not claim or not ms or ms <= 0 then
        return false
    end
    local claimant = redis.call('get', claim)
    if not claimant or claimant == owner then
        redis.call('set', claim, owner, 'px', ms)
        return true
    end
    return false
end
