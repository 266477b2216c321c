//! The Lua of the Redisson peer's synchronizers (`RedissonSemaphore.java` – `RedissonCountDownLatch.java`): RSemaphore,
//! RPermitExpirableSemaphore and RCountDownLatch, under the conventions of
//! [`scripts`](super::scripts).

use std::sync::LazyLock;

use redis::Script;

/// `RedissonSemaphore.java` tryAcquire. KEYS \[name\]; ARGV \[permits\]. 1/0.
pub static SEM_TRY_ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local value = redis.call('get', KEYS[1])
if value ~= false and tonumber(value) >= tonumber(ARGV[1]) then
  redis.call('decrby', KEYS[1], ARGV[1])
  return 1
end
return 0
",
    )
});

/// `RedissonSemaphore.java` release. KEYS \[name, channel\]; ARGV \[permits, publish command\]. INCRBY, publish
/// the new value; replies the new value.
pub static SEM_RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local value = redis.call('incrby', KEYS[1], ARGV[1])
redis.call(ARGV[2], KEYS[2], value)
return value
",
    )
});

/// `RedissonSemaphore.java` trySetPermits. KEYS \[name, channel\]; ARGV \[permits, publish command\]. Sets only if
/// absent and publishes the value; 1/0.
pub static SEM_TRY_SET_PERMITS: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('exists', KEYS[1]) == 0 then
  redis.call('set', KEYS[1], ARGV[1])
  redis.call(ARGV[2], KEYS[2], ARGV[1])
  return 1
end
return 0
",
    )
});

/// `RedissonSemaphore.java` addPermits. KEYS \[name, channel\]; ARGV \[permits, publish command\]. Writes value + n
/// (a missing key counts as 0) and publishes it; replies the new value.
pub static SEM_ADD_PERMITS: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local value = tonumber(redis.call('get', KEYS[1]) or '0') + tonumber(ARGV[1])
local text = string.format('%d', value)
redis.call('set', KEYS[1], text)
redis.call(ARGV[2], KEYS[2], text)
return value
",
    )
});

/// `RedissonSemaphore.java` drainPermits. KEYS \[name\]. Sets 0 and replies the old value (0 if absent).
pub static SEM_DRAIN: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local value = redis.call('get', KEYS[1])
if value == false then return 0 end
redis.call('set', KEYS[1], '0')
return tonumber(value)
",
    )
});

/// `RedissonPermitExpirableSemaphore.java` acquire. KEYS \[name, `{name}:timeout`, channel\]; ARGV \[n, expiry, now,
/// 922337203685477, publish command, id1..idn\]. `OK`, `:<earliest expiry>`, or nil.
pub static PES_ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local expired = redis.call('zrangebyscore', KEYS[2], 0, ARGV[3], 'limit', 0, ARGV[1])
if #expired > 0 then
  redis.call('zrem', KEYS[2], unpack(expired))
  local value = redis.call('incrby', KEYS[1], #expired)
  if value > 0 then redis.call(ARGV[5], KEYS[3], value) end
end
local value = redis.call('get', KEYS[1])
if value ~= false and tonumber(value) >= tonumber(ARGV[1]) then
  redis.call('decrby', KEYS[1], ARGV[1])
  for i = 6, #ARGV do
    redis.call('zadd', KEYS[2], ARGV[2], ARGV[i])
  end
  local ttl = redis.call('pttl', KEYS[1])
  if ttl > 0 then redis.call('pexpire', KEYS[2], ttl) end
  return 'OK'
end
local first = redis.call('zrange', KEYS[2], 0, 0, 'withscores')
if first[2] ~= nil and tonumber(first[2]) ~= tonumber(ARGV[4]) then
  return ':' .. first[2]
end
return nil
",
    )
});

/// `RedissonPermitExpirableSemaphore.java` tryRelease(id). KEYS \[name, channel, timeout zset\]; ARGV \[id bytes, 1, now, publish
/// command\]. 1 released; 0 unknown id or already expired.
pub static PES_RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local expiry = redis.call('zscore', KEYS[3], ARGV[1])
if redis.call('zrem', KEYS[3], ARGV[1]) == 0 then return 0 end
local value = redis.call('incrby', KEYS[1], ARGV[2])
redis.call(ARGV[4], KEYS[2], value)
if tonumber(expiry) <= tonumber(ARGV[3]) then return 0 end
return 1
",
    )
});

/// `RedissonCountDownLatch.java` trySetCount. KEYS \[name, channel\]; ARGV \[`1`, count, publish command\]. SET if
/// absent and publish `1`; 1/0.
pub static LATCH_TRY_SET_COUNT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('exists', KEYS[1]) == 0 then
  redis.call('set', KEYS[1], ARGV[2])
  redis.call(ARGV[3], KEYS[2], ARGV[1])
  return 1
end
return 0
",
    )
});

/// `RedissonCountDownLatch.java` countDown. KEYS \[name, channel\]; ARGV \[`0`, publish command\]. DECR; DEL when <= 0;
/// publish `0` when it reaches exactly 0. Replies the decremented value.
pub static LATCH_COUNT_DOWN: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local value = redis.call('decr', KEYS[1])
if value <= 0 then redis.call('del', KEYS[1]) end
if value == 0 then redis.call(ARGV[2], KEYS[2], ARGV[1]) end
return value
",
    )
});

/// `RedissonCountDownLatch.java` delete. KEYS \[name, channel\]; ARGV \[`1`, publish command\]. DEL and publish `1`;
/// 1 if a key was deleted.
pub static LATCH_DELETE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local deleted = redis.call('del', KEYS[1])
redis.call(ARGV[2], KEYS[2], ARGV[1])
return deleted
",
    )
});
