//! RReadWriteLock (`RedissonReadLock.java, RedissonWriteLock.java`) and ReadLockTask renewal (`renewal/LockTask.java, ReadLockTask.java`). Readers and writers wait on the
//! shared `redisson_rwlock:{name}` channel.

use std::time::Duration;

use super::pubsub::Kind;
use super::scripts::*;
use super::*;

impl RedissonPeer {
    /// Read-lock acquire: `None` = acquired (new hold `…:rwlock_timeout:<n>` written),
    /// `Some(pttl)` = write-locked by another owner.
    pub async fn try_read_lock(&self, name: &str, thread: u64, lease_ms: u64) -> Option<i64> {
        let owner = self.owner(thread);
        self.run(
            "read lock",
            &READ_ACQUIRE,
            &[name, &rw_timeout_prefix(name, &owner)],
            &[
                &dec(lease_ms),
                owner.as_bytes(),
                self.write_owner(thread).as_bytes(),
            ],
        )
        .await
    }

    /// Read-lock `tryLock(wait, lease)` with the wait loop; false on timeout.
    pub async fn read_lock(&self, name: &str, thread: u64, lease_ms: u64, wait: Duration) -> bool {
        self.wait_loop(&rwlock_channel(name), Kind::Lock, wait, || async move {
            self.try_read_lock(name, thread, lease_ms)
                .await
                .map_or(Ok(()), Err)
        })
        .await
        .is_some()
    }

    /// Read unlock (fresh request id, latch DEL afterwards): `None` not held (or no `mode`),
    /// `Some(0)` lock still held by someone, `Some(1)` the hash was deleted.
    pub async fn read_unlock(&self, name: &str, thread: u64) -> Option<i64> {
        let request = request_id();
        let out = self.read_unlock_with_request(name, thread, &request).await;
        self.del(&unlock_latch(name, &request)).await;
        out
    }

    /// The read unlock script with `request_id`, leaving the latch in place.
    pub async fn read_unlock_with_request(
        &self,
        name: &str,
        thread: u64,
        request_id: &str,
    ) -> Option<i64> {
        let owner = self.owner(thread);
        self.run(
            "read unlock",
            &READ_UNLOCK,
            &[
                name,
                &rwlock_channel(name),
                &rw_timeout_prefix(name, &owner),
                &rw_key_prefix(name),
                &unlock_latch(name, request_id),
            ],
            &[
                b"0",
                owner.as_bytes(),
                self.publish_command().as_bytes(),
                &dec(latch_ttl_ms()),
            ],
        )
        .await
    }

    /// Write-lock acquire (owner `<id>:<thread>:write`): `None` acquired, `Some(pttl)` held.
    pub async fn try_write_lock(&self, name: &str, thread: u64, lease_ms: u64) -> Option<i64> {
        self.run(
            "write lock",
            &WRITE_ACQUIRE,
            &[name],
            &[&dec(lease_ms), self.write_owner(thread).as_bytes()],
        )
        .await
    }

    /// Write-lock `tryLock(wait, lease)` with the wait loop; false on timeout.
    pub async fn write_lock(&self, name: &str, thread: u64, lease_ms: u64, wait: Duration) -> bool {
        self.wait_loop(&rwlock_channel(name), Kind::Lock, wait, || async move {
            self.try_write_lock(name, thread, lease_ms)
                .await
                .map_or(Ok(()), Err)
        })
        .await
        .is_some()
    }

    /// Write unlock (fresh request id, latch DEL afterwards): `None` not held, `Some(0)`
    /// re-entered, `Some(1)` released (hash deleted with `1` published, or downgraded).
    pub async fn write_unlock(&self, name: &str, thread: u64, lease_ms: u64) -> Option<i64> {
        let request = request_id();
        let out = self
            .write_unlock_with_request(name, thread, lease_ms, &request)
            .await;
        self.del(&unlock_latch(name, &request)).await;
        out
    }

    /// The write unlock script with `request_id`, leaving the latch in place.
    pub async fn write_unlock_with_request(
        &self,
        name: &str,
        thread: u64,
        lease_ms: u64,
        request_id: &str,
    ) -> Option<i64> {
        self.run(
            "write unlock",
            &WRITE_UNLOCK,
            &[name, &rwlock_channel(name), &unlock_latch(name, request_id)],
            &[
                b"1",
                &dec(lease_ms),
                self.write_owner(thread).as_bytes(),
                self.publish_command().as_bytes(),
                &dec(latch_ttl_ms()),
            ],
        )
        .await
    }

    /// Read-lock forceUnlock: DEL + publish `0` only if mode=read; true if deleted.
    pub async fn read_force_unlock(&self, name: &str) -> bool {
        self.rw_force_unlock(name, b"0", b"read").await
    }

    /// Write-lock forceUnlock: DEL + publish `1` only if mode=write; true if deleted.
    pub async fn write_force_unlock(&self, name: &str) -> bool {
        self.rw_force_unlock(name, b"1", b"write").await
    }

    async fn rw_force_unlock(&self, name: &str, payload: &[u8], mode: &[u8]) -> bool {
        let n: i64 = self
            .run(
                "rw forceUnlock",
                &RW_FORCE_UNLOCK,
                &[name, &rwlock_channel(name)],
                &[payload, self.publish_command().as_bytes(), mode],
            )
            .await;
        n == 1
    }

    /// ReadLockTask renewal of `(rwlock name, this client's reader owner fields)`: KEYS in
    /// pairs \[rwlock, `{name}`\], at most 100 keys (50 pairs) per EVAL; one 1/0 per entry.
    pub async fn renew_read(&self, locks: &[(&str, Vec<String>)], lease_ms: u64) -> Vec<i64> {
        let mut out = vec![0; locks.len()];
        for batch in self.batches(locks.iter().map(|l| l.0), RENEW_BATCH / 2) {
            let prefixes: Vec<String> = batch.iter().map(|&i| rw_key_prefix(locks[i].0)).collect();
            let mut keys: Vec<&str> = Vec::new();
            for (&i, prefix) in batch.iter().zip(&prefixes) {
                keys.push(locks[i].0);
                keys.push(prefix);
            }
            let counts: Vec<Vec<u8>> = batch.iter().map(|&i| dec(locks[i].1.len())).collect();
            let lease = dec(lease_ms);
            let mut args: Vec<&[u8]> = vec![&lease];
            for (&i, count) in batch.iter().zip(&counts) {
                args.push(count);
                args.extend(locks[i].1.iter().map(|o| o.as_bytes()));
            }
            let got: Vec<i64> = self
                .run("read renew", &RENEW_READ_LOCKS, &keys, &args)
                .await;
            for (&i, v) in batch.iter().zip(got) {
                out[i] = v;
            }
        }
        out
    }
}
