//! Redisson's key and channel names and the Cluster hash slot.

/// Redis Cluster hash slot of `key` (CRC16/XMODEM of the hash tag or the whole key).
pub fn key_slot(key: &[u8]) -> u16 {
    let tagged = key
        .iter()
        .position(|&c| c == b'{')
        .and_then(|open| {
            key[open + 1..]
                .iter()
                .position(|&c| c == b'}')
                .filter(|&len| len > 0)
                .map(|len| &key[open + 1..open + 1 + len])
        })
        .unwrap_or(key);
    let mut crc: u16 = 0;
    for &byte in tagged {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

/// Redisson's `prefixName(p, name)`: `p:{name}`, or `p:name` when name contains `{`.
pub fn prefix_name(prefix: &str, name: &str) -> String {
    if name.contains('{') {
        format!("{prefix}:{name}")
    } else {
        format!("{prefix}:{{{name}}}")
    }
}

/// Redisson's `suffixName(name, s)`: `{name}:s`, or `name:s` when name contains `{`.
pub fn suffix_name(name: &str, suffix: &str) -> String {
    if name.contains('{') {
        format!("{name}:{suffix}")
    } else {
        format!("{{{name}}}:{suffix}")
    }
}

/// The lock channel `redisson_lock__channel:{name}` (RLock, fenced, rwlock-free locks).
pub fn lock_channel(name: &str) -> String {
    prefix_name("redisson_lock__channel", name)
}

/// The unlock latch `redisson_unlock_latch:{name}:<request id>`.
pub fn unlock_latch(name: &str, request_id: &str) -> String {
    format!(
        "{}:{request_id}",
        prefix_name("redisson_unlock_latch", name)
    )
}

/// The RFencedLock token counter `redisson_lock_token:{name}`.
pub fn token_key(name: &str) -> String {
    prefix_name("redisson_lock_token", name)
}

/// The fair-lock queue list `redisson_lock_queue:{name}`.
pub fn fair_queue(name: &str) -> String {
    prefix_name("redisson_lock_queue", name)
}

/// The fair-lock deadline zset `redisson_lock_timeout:{name}`.
pub fn fair_timeouts(name: &str) -> String {
    prefix_name("redisson_lock_timeout", name)
}

/// A fair waiter's private channel `redisson_lock__channel:{name}:<owner>`.
pub fn fair_channel(name: &str, owner: &str) -> String {
    format!("{}:{owner}", lock_channel(name))
}

/// The read-write lock channel `redisson_rwlock:{name}`.
pub fn rwlock_channel(name: &str) -> String {
    prefix_name("redisson_rwlock", name)
}

/// The read-hold timeout prefix `{name}:<owner>:rwlock_timeout` (suffixName rule).
pub fn rw_timeout_prefix(name: &str, owner: &str) -> String {
    format!("{}:rwlock_timeout", suffix_name(name, owner))
}

/// The read-write key prefix `{name}` (`name` when it contains `{`): the timeout prefix
/// without `:<owner>:rwlock_timeout`.
pub fn rw_key_prefix(name: &str) -> String {
    if name.contains('{') {
        name.to_string()
    } else {
        format!("{{{name}}}")
    }
}

/// The semaphore channel `redisson_sc:{name}` (RSemaphore and RPermitExpirableSemaphore).
pub fn semaphore_channel(name: &str) -> String {
    prefix_name("redisson_sc", name)
}

/// The permit zset `{name}:timeout` of RPermitExpirableSemaphore.
pub fn expirable_timeouts(name: &str) -> String {
    suffix_name(name, "timeout")
}

/// The count-down latch channel `redisson_countdownlatch__channel__{name}` (braces always).
pub fn latch_channel(name: &str) -> String {
    format!("redisson_countdownlatch__channel__{{{name}}}")
}
