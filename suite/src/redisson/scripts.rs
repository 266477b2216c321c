//! The Lua of the Redisson peer: one script per Redisson operation, written from what
//! Redisson's own scripts do (the Java class each mirrors is named on it). Only the effects,
//! KEYS, ARGV order, replies and payloads are the contract; the text is this crate's own.
//!
//! Conventions: `redis.call(ARGV[i], channel, payload)` publishes with the command the caller
//! passed (`publish` or `spublish`); a latch key is set with `'px', <latch ttl>`.

use std::sync::LazyLock;

use redis::Script;

/// Pops fair-queue heads whose deadline in the zset is `<= now` (the prologue of every fair
/// script, `RedissonFairLock.java`). Expects `queue`, `timeouts` and `now` as Lua locals.
const FAIR_PURGE: &str = r"
while true do
  local head = redis.call('lindex', queue, 0)
  if head == false then break end
  local deadline = redis.call('zscore', timeouts, head)
  if deadline == false or tonumber(deadline) > now then break end
  redis.call('zrem', timeouts, head)
  redis.call('lpop', queue)
end
";

fn fair(body: &str, queue: &str, timeouts: &str, now: &str) -> Script {
    Script::new(&format!(
        "local queue = {queue}\nlocal timeouts = {timeouts}\nlocal now = tonumber({now})\n{FAIR_PURGE}\n{body}"
    ))
}

/// `RedissonLock.java` acquire. KEYS \[lock\]; ARGV \[lease, owner\]. nil = acquired, else PTTL.
pub static LOCK_ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
return redis.call('pttl', KEYS[1])
",
    )
});

/// `RedissonNonReentrantLock.java` non-reentrant acquire. KEYS \[lock\]; ARGV \[lease, owner\]. nil, PTTL, or the error
/// reply `NON_REENTRANT_REACQUIRE` when the owner already holds it.
pub static LOCK_ACQUIRE_NON_REENTRANT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('exists', KEYS[1]) == 0 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  return redis.error_reply('NON_REENTRANT_REACQUIRE')
end
return redis.call('pttl', KEYS[1])
",
    )
});

/// `RedissonFencedLock.java` lockAndGetToken. KEYS \[lock, token\]; ARGV \[lease, owner\]. `{-1, token}` or
/// `{PTTL, -1}`; every successful acquire (re-entry included) INCRs the token.
pub static FENCED_ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  local token = redis.call('incr', KEYS[2])
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return {-1, token}
end
return {redis.call('pttl', KEYS[1]), -1}
",
    )
});

/// `RedissonLock.java` unlock. KEYS \[lock, channel, latch\]; ARGV \[`0`, lease, owner, publish command,
/// latch ttl\]. Latch value on replay; nil (not held); 0 (still held); 1 (released).
pub static LOCK_UNLOCK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local replay = redis.call('get', KEYS[3])
if replay ~= false then return tonumber(replay) end
if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then return nil end
if redis.call('hincrby', KEYS[1], ARGV[3], -1) > 0 then
  redis.call('pexpire', KEYS[1], ARGV[2])
  redis.call('set', KEYS[3], '0', 'px', ARGV[5])
  return 0
end
redis.call('del', KEYS[1])
redis.call(ARGV[4], KEYS[2], ARGV[1])
redis.call('set', KEYS[3], '1', 'px', ARGV[5])
return 1
",
    )
});

/// `RedissonLock.java` forceUnlock. KEYS \[lock, channel\]; ARGV \[`0`, publish command\]. 1 if deleted.
pub static LOCK_FORCE_UNLOCK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('del', KEYS[1]) == 1 then
  redis.call(ARGV[2], KEYS[2], ARGV[1])
  return 1
end
return 0
",
    )
});

/// `renewal/LockTask.java, ReadLockTask.java` LockTask renewal. KEYS = lock keys; ARGV \[lease, owner of KEYS\[1\], owner of
/// KEYS\[2\], ...\]. One 1/0 per key.
pub static RENEW_LOCKS: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local out = {}
for i = 1, #KEYS do
  if redis.call('hexists', KEYS[i], ARGV[i + 1]) == 1 then
    redis.call('pexpire', KEYS[i], ARGV[1])
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
",
    )
});

/// `renewal/LockTask.java, ReadLockTask.java` ReadLockTask renewal. KEYS in pairs \[rwlock, key prefix\]; ARGV \[lease, then per pair
/// n, owner1..ownern\]. One 1/0 per pair.
pub static RENEW_READ_LOCKS: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local out = {}
local a = 2
for k = 1, #KEYS, 2 do
  local n = tonumber(ARGV[a])
  a = a + 1
  local alive = false
  for j = 1, n do
    local owner = ARGV[a]
    a = a + 1
    local count = redis.call('hget', KEYS[k], owner)
    if count ~= false and tonumber(count) ~= nil then
      alive = true
      for h = tonumber(count), 1, -1 do
        redis.call('pexpire', KEYS[k + 1] .. ':' .. owner .. ':rwlock_timeout:' .. h, ARGV[1])
      end
    end
  end
  if alive then
    redis.call('pexpire', KEYS[k], ARGV[1])
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
",
    )
});

/// The fair acquire/re-entry paths shared by both fair acquire scripts (`wait` local).
const FAIR_ACQUIRE: &str = r"
if redis.call('exists', KEYS[1]) == 0 and
   (redis.call('exists', KEYS[2]) == 0 or redis.call('lindex', KEYS[2], 0) == ARGV[2]) then
  redis.call('lpop', KEYS[2])
  redis.call('zrem', KEYS[3], ARGV[2])
  local rest = redis.call('zrange', KEYS[3], 0, -1)
  for i = 1, #rest do
    redis.call('zincrby', KEYS[3], -wait, rest[i])
  end
  redis.call('hset', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
";

/// `RedissonFairLock.java` tryLock() without wait. KEYS \[lock, queue, timeouts\]; ARGV \[lease, owner, now,
/// wait\]. nil = acquired, else 1 (never enqueues).
pub static FAIR_TRY_NO_WAIT: LazyLock<Script> = LazyLock::new(|| {
    fair(
        &format!("local wait = tonumber(ARGV[4])\n{FAIR_ACQUIRE}\nreturn 1\n"),
        "KEYS[2]",
        "KEYS[3]",
        "ARGV[3]",
    )
});

/// `RedissonFairLock.java` lock / tryLock(wait). KEYS \[lock, queue, timeouts\]; ARGV \[lease, owner, wait, now\].
/// nil = acquired; max(0, PTTL) when already queued; else enqueue and return the estimate.
pub static FAIR_TRY_WAIT: LazyLock<Script> = LazyLock::new(|| {
    fair(
        &format!(
            "local wait = tonumber(ARGV[3])\n{FAIR_ACQUIRE}\n{}",
            r"
if redis.call('zscore', KEYS[3], ARGV[2]) ~= false then
  return math.max(0, redis.call('pttl', KEYS[1]))
end
local ttl
local last = redis.call('lindex', KEYS[2], -1)
local last_deadline = false
if last ~= false and last ~= ARGV[2] then
  last_deadline = redis.call('zscore', KEYS[3], last)
end
if last_deadline ~= false then
  ttl = tonumber(last_deadline) - now
else
  ttl = redis.call('pttl', KEYS[1])
end
if redis.call('zadd', KEYS[3], ttl + wait + now, ARGV[2]) == 1 then
  redis.call('rpush', KEYS[2], ARGV[2])
end
return ttl
"
        ),
        "KEYS[2]",
        "KEYS[3]",
        "ARGV[4]",
    )
});

/// `RedissonFairLock.java` acquireFailed. KEYS \[queue, timeouts\]; ARGV \[owner, wait\]. No reply value.
pub static FAIR_ACQUIRE_FAILED: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local queue = redis.call('lrange', KEYS[1], 0, -1)
local behind = false
for i = 1, #queue do
  if behind then
    redis.call('zincrby', KEYS[2], -tonumber(ARGV[2]), queue[i])
  elseif queue[i] == ARGV[1] then
    behind = true
  end
end
redis.call('zrem', KEYS[2], ARGV[1])
redis.call('lrem', KEYS[1], 0, ARGV[1])
return nil
",
    )
});

/// `RedissonFairLock.java` unlock. KEYS \[lock, queue, timeouts, lock channel, latch\]; ARGV \[`0`, lease, owner,
/// now, publish command, latch ttl\]. Publishes to `<lock channel>:<head owner>`.
pub static FAIR_UNLOCK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r"
local replay = redis.call('get', KEYS[5])
if replay ~= false then return tonumber(replay) end
local queue = KEYS[2]
local timeouts = KEYS[3]
local now = tonumber(ARGV[4])
{FAIR_PURGE}
if redis.call('exists', KEYS[1]) == 0 then
  local head = redis.call('lindex', KEYS[2], 0)
  if head ~= false then
    redis.call(ARGV[5], KEYS[4] .. ':' .. head, ARGV[1])
  end
  redis.call('set', KEYS[5], '1', 'px', ARGV[6])
  return 1
end
if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then return nil end
if redis.call('hincrby', KEYS[1], ARGV[3], -1) > 0 then
  redis.call('pexpire', KEYS[1], ARGV[2])
  redis.call('set', KEYS[5], '0', 'px', ARGV[6])
  return 0
end
redis.call('del', KEYS[1])
redis.call('set', KEYS[5], '1', 'px', ARGV[6])
local head = redis.call('lindex', KEYS[2], 0)
if head ~= false then
  redis.call(ARGV[5], KEYS[4] .. ':' .. head, ARGV[1])
end
return 1
"
    ))
});

/// `RedissonFairLock.java` forceUnlock. KEYS \[lock, queue, timeouts, channel\]; ARGV \[`0`, now, publish
/// command\]. 1 if deleted (and the head notified), else 0.
pub static FAIR_FORCE_UNLOCK: LazyLock<Script> = LazyLock::new(|| {
    fair(
        r"
if redis.call('del', KEYS[1]) == 1 then
  local head = redis.call('lindex', KEYS[2], 0)
  if head ~= false then
    redis.call(ARGV[3], KEYS[4] .. ':' .. head, ARGV[1])
  end
  return 1
end
return 0
",
        "KEYS[2]",
        "KEYS[3]",
        "ARGV[2]",
    )
});

/// `RedissonReadLock.java, RedissonWriteLock.java` read acquire. KEYS \[rwlock, `{name}:<owner>:rwlock_timeout`\]; ARGV \[lease, owner,
/// `<owner>:write`\]. nil = acquired, else PTTL.
pub static READ_ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
  redis.call('hset', KEYS[1], 'mode', 'read')
  redis.call('hset', KEYS[1], ARGV[2], 1)
  redis.call('set', KEYS[2] .. ':1', '1')
  redis.call('pexpire', KEYS[2] .. ':1', ARGV[1])
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
if mode == 'read' or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1) then
  local n = redis.call('hincrby', KEYS[1], ARGV[2], 1)
  local hold = KEYS[2] .. ':' .. n
  redis.call('set', hold, '1')
  redis.call('pexpire', hold, ARGV[1])
  redis.call('pexpire', KEYS[1], math.max(redis.call('pttl', KEYS[1]), tonumber(ARGV[1])))
  return nil
end
return redis.call('pttl', KEYS[1])
",
    )
});

/// `RedissonReadLock.java, RedissonWriteLock.java` read unlock. KEYS \[rwlock, rwlock channel, my timeout prefix, key prefix, latch\];
/// ARGV \[`0`, owner, publish command, latch ttl\].
pub static READ_UNLOCK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local replay = redis.call('get', KEYS[5])
if replay ~= false then return tonumber(replay) end
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
  redis.call(ARGV[3], KEYS[2], ARGV[1])
  redis.call('set', KEYS[5], '1', 'px', ARGV[4])
  return nil
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then return nil end
local left = redis.call('hincrby', KEYS[1], ARGV[2], -1)
if left == 0 then redis.call('hdel', KEYS[1], ARGV[2]) end
redis.call('del', KEYS[3] .. ':' .. (left + 1))
if redis.call('hlen', KEYS[1]) > 1 then
  local max_ttl = -3
  local fields = redis.call('hkeys', KEYS[1])
  for _, field in ipairs(fields) do
    local count = tonumber(redis.call('hget', KEYS[1], field))
    if count ~= nil then
      for h = count, 1, -1 do
        local t = redis.call('pttl', KEYS[4] .. ':' .. field .. ':rwlock_timeout:' .. h)
        max_ttl = math.max(max_ttl, t)
      end
    end
  end
  if max_ttl > 0 then
    redis.call('pexpire', KEYS[1], max_ttl)
    redis.call('set', KEYS[5], '0', 'px', ARGV[4])
    return 0
  end
  if mode == 'write' then
    redis.call('set', KEYS[5], '0', 'px', ARGV[4])
    return 0
  end
end
redis.call('del', KEYS[1])
redis.call(ARGV[3], KEYS[2], ARGV[1])
redis.call('set', KEYS[5], '1', 'px', ARGV[4])
return 1
",
    )
});

/// `RedissonReadLock.java, RedissonWriteLock.java` write acquire. KEYS \[rwlock\]; ARGV \[lease, `<owner>:write`\]. nil = acquired, else
/// PTTL; re-entry extends the TTL to PTTL + lease.
pub static WRITE_ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
  redis.call('hset', KEYS[1], 'mode', 'write')
  redis.call('hset', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
if mode == 'write' and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], redis.call('pttl', KEYS[1]) + tonumber(ARGV[1]))
  return nil
end
return redis.call('pttl', KEYS[1])
",
    )
});

/// `RedissonReadLock.java, RedissonWriteLock.java` write unlock. KEYS \[rwlock, channel, latch\]; ARGV \[`1`, lease, `<owner>:write`,
/// publish command, latch ttl\].
pub static WRITE_UNLOCK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local replay = redis.call('get', KEYS[3])
if replay ~= false then return tonumber(replay) end
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
  redis.call(ARGV[4], KEYS[2], ARGV[1])
  redis.call('set', KEYS[3], '1', 'px', ARGV[5])
  return nil
end
if mode ~= 'write' or redis.call('hexists', KEYS[1], ARGV[3]) == 0 then return nil end
if redis.call('hincrby', KEYS[1], ARGV[3], -1) > 0 then
  redis.call('pexpire', KEYS[1], ARGV[2])
  redis.call('set', KEYS[3], '0', 'px', ARGV[5])
  return 0
end
redis.call('hdel', KEYS[1], ARGV[3])
if redis.call('hlen', KEYS[1]) == 1 then
  redis.call('del', KEYS[1])
  redis.call(ARGV[4], KEYS[2], ARGV[1])
else
  redis.call('hset', KEYS[1], 'mode', 'read')
end
redis.call('set', KEYS[3], '1', 'px', ARGV[5])
return 1
",
    )
});

/// `RedissonReadLock.java, RedissonWriteLock.java` read/write forceUnlock. KEYS \[rwlock, channel\]; ARGV \[payload (`0` read, `1`
/// write), publish command, mode (`read`/`write`)\]. DEL + publish only in that mode.
pub static RW_FORCE_UNLOCK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('hget', KEYS[1], 'mode') == ARGV[3] then
  redis.call('del', KEYS[1])
  redis.call(ARGV[2], KEYS[2], ARGV[1])
  return 1
end
return 0
",
    )
});
