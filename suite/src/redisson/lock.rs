//! RLock (`RedissonLock.java`), LockTask renewal (`renewal/LockTask.java, ReadLockTask.java`), RFairLock (`RedissonFairLock.java`), RFencedLock (`RedissonFencedLock.java`) and the
//! non-reentrant lock (`RedissonNonReentrantLock.java`).

use std::collections::BTreeMap;
use std::time::Duration;

use redis::Value;

use super::pubsub::Kind;
use super::scripts::*;
use super::*;

/// The `NON_REENTRANT_REACQUIRE` error reply of a non-reentrant lock taken again by its owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NonReentrantReacquire;

impl RedissonPeer {
    /// RLock acquire: `None` = acquired (or re-entered), `Some(pttl)` = held by another owner.
    pub async fn try_lock(&self, name: &str, thread: u64, lease_ms: u64) -> Option<i64> {
        let owner = self.owner(thread);
        self.run(
            "lock",
            &LOCK_ACQUIRE,
            &[name],
            &[&dec(lease_ms), owner.as_bytes()],
        )
        .await
    }

    /// RLock `tryLock(wait, lease)`: the `RedissonLock.java` wait loop on the lock channel; false on timeout.
    pub async fn lock(&self, name: &str, thread: u64, lease_ms: u64, wait: Duration) -> bool {
        self.wait_loop(&lock_channel(name), Kind::Lock, wait, || async move {
            self.try_lock(name, thread, lease_ms)
                .await
                .map_or(Ok(()), Err)
        })
        .await
        .is_some()
    }

    /// RLock unlock with a fresh request id, DELeting the latch after the reply: `None` = not
    /// held by this owner, `Some(0)` = still held (re-entered), `Some(1)` = released.
    pub async fn unlock(&self, name: &str, thread: u64, lease_ms: u64) -> Option<i64> {
        let request = request_id();
        let out = self
            .unlock_with_request(name, thread, lease_ms, &request)
            .await;
        self.del(&unlock_latch(name, &request)).await;
        out
    }

    /// The RLock unlock script with `request_id`, leaving the latch in place (as when the reply
    /// was lost): a second call with the same id replays the first one's value.
    pub async fn unlock_with_request(
        &self,
        name: &str,
        thread: u64,
        lease_ms: u64,
        request_id: &str,
    ) -> Option<i64> {
        let owner = self.owner(thread);
        self.run(
            "unlock",
            &LOCK_UNLOCK,
            &[name, &lock_channel(name), &unlock_latch(name, request_id)],
            &[
                b"0",
                &dec(lease_ms),
                owner.as_bytes(),
                self.publish_command().as_bytes(),
                &dec(latch_ttl_ms()),
            ],
        )
        .await
    }

    /// RLock forceUnlock: DEL, publish `0` if something was deleted; true if it was.
    pub async fn force_unlock(&self, name: &str) -> bool {
        let n: i64 = self
            .run(
                "forceUnlock",
                &LOCK_FORCE_UNLOCK,
                &[name, &lock_channel(name)],
                &[b"0", self.publish_command().as_bytes()],
            )
            .await;
        n == 1
    }

    /// LockTask renewal of `(lock name, owner field)` pairs: batches of at most 100 keys (per
    /// slot in sharded/routed setups); one 1/0 per pair, in input order.
    pub async fn renew(&self, locks: &[(&str, &str)], lease_ms: u64) -> Vec<i64> {
        let mut out = vec![0; locks.len()];
        for batch in self.batches(locks.iter().map(|l| l.0), RENEW_BATCH) {
            let keys: Vec<&str> = batch.iter().map(|&i| locks[i].0).collect();
            let lease = dec(lease_ms);
            let mut args: Vec<&[u8]> = vec![&lease];
            args.extend(batch.iter().map(|&i| locks[i].1.as_bytes()));
            let got: Vec<i64> = self.run("renew", &RENEW_LOCKS, &keys, &args).await;
            for (&i, v) in batch.iter().zip(got) {
                out[i] = v;
            }
        }
        out
    }

    /// Groups item indexes by hash slot (not on a single server), in chunks of `size`.
    pub(super) fn batches<'a>(
        &self,
        names: impl Iterator<Item = &'a str>,
        size: usize,
    ) -> Vec<Vec<usize>> {
        let mut groups: BTreeMap<u16, Vec<usize>> = BTreeMap::new();
        let per_slot = self.per_slot;
        for (i, name) in names.enumerate() {
            let slot = if per_slot {
                key_slot(name.as_bytes())
            } else {
                0
            };
            groups.entry(slot).or_default().push(i);
        }
        groups
            .into_values()
            .flat_map(|g| g.chunks(size).map(<[usize]>::to_vec).collect::<Vec<_>>())
            .collect()
    }

    /// Non-reentrant lock acquire (4.4+): `Ok(None)` acquired, `Ok(Some(pttl))` held by
    /// another owner, `Err` when this owner already holds it.
    pub async fn try_lock_non_reentrant(
        &self,
        name: &str,
        thread: u64,
        lease_ms: u64,
    ) -> Result<Option<i64>, NonReentrantReacquire> {
        let owner = self.owner(thread);
        match self
            .eval(
                &LOCK_ACQUIRE_NON_REENTRANT,
                &[name],
                &[&dec(lease_ms), owner.as_bytes()],
            )
            .await
        {
            Ok(v) => Ok(v),
            Err(e) if e.to_string().contains("NON_REENTRANT_REACQUIRE") => {
                Err(NonReentrantReacquire)
            }
            Err(e) => panic!("redisson non-reentrant lock on {name}: {e}"),
        }
    }

    /// RFencedLock lockAndGetToken: `Ok(token)` acquired (re-entry too), `Err(pttl)` held.
    pub async fn try_lock_fenced(
        &self,
        name: &str,
        thread: u64,
        lease_ms: u64,
    ) -> Result<i64, i64> {
        let owner = self.owner(thread);
        let r: Vec<i64> = self
            .run(
                "lockAndGetToken",
                &FENCED_ACQUIRE,
                &[name, &token_key(name)],
                &[&dec(lease_ms), owner.as_bytes()],
            )
            .await;
        match r.as_slice() {
            [-1, token] => Ok(*token),
            [pttl, _] => Err(*pttl),
            other => panic!("lockAndGetToken replied {other:?}"),
        }
    }

    /// RFencedLock `tryLockAndGetToken(wait, lease)` with the `RedissonLock.java` wait loop; `None` on
    /// timeout.
    pub async fn lock_fenced(
        &self,
        name: &str,
        thread: u64,
        lease_ms: u64,
        wait: Duration,
    ) -> Option<i64> {
        self.wait_loop(&lock_channel(name), Kind::Lock, wait, || async move {
            self.try_lock_fenced(name, thread, lease_ms).await
        })
        .await
    }

    /// RFairLock `tryLock()` (no wait; `wait` = the peer's fairLockWaitTimeout): `None` =
    /// acquired, `Some(1)` otherwise (never enqueues).
    pub async fn fair_try_lock_no_wait(
        &self,
        name: &str,
        thread: u64,
        lease_ms: u64,
    ) -> Option<i64> {
        let owner = self.owner(thread);
        self.run(
            "fair tryLock",
            &FAIR_TRY_NO_WAIT,
            &[name, &fair_queue(name), &fair_timeouts(name)],
            &[
                &dec(lease_ms),
                owner.as_bytes(),
                &dec(now_ms()),
                &dec(self.fair_wait_timeout_ms),
            ],
        )
        .await
    }

    /// One run of the RFairLock lock/tryLock(wait) script with an explicit clock: `None` =
    /// acquired, else the ttl estimate (enqueues this owner).
    pub async fn fair_try_lock(
        &self,
        name: &str,
        thread: u64,
        lease_ms: u64,
        wait_ms: u64,
        now_ms: i64,
    ) -> Option<i64> {
        let owner = self.owner(thread);
        self.run(
            "fair lock",
            &FAIR_TRY_WAIT,
            &[name, &fair_queue(name), &fair_timeouts(name)],
            &[
                &dec(lease_ms),
                owner.as_bytes(),
                &dec(wait_ms),
                &dec(now_ms),
            ],
        )
        .await
    }

    /// RFairLock `tryLock(wait, lease)`: the wait loop on this owner's private channel with
    /// `fair_wait_ms` as the scripts' `wait`; runs acquireFailed on timeout. False on timeout.
    pub async fn fair_lock(
        &self,
        name: &str,
        thread: u64,
        lease_ms: u64,
        wait: Duration,
        fair_wait_ms: u64,
    ) -> bool {
        let channel = fair_channel(name, &self.owner(thread));
        let got = self
            .wait_loop(&channel, Kind::Lock, wait, || async move {
                self.fair_try_lock(name, thread, lease_ms, fair_wait_ms, now_ms())
                    .await
                    .map_or(Ok(()), Err)
            })
            .await;
        if got.is_none() {
            self.fair_acquire_failed(name, thread, fair_wait_ms).await;
        }
        got.is_some()
    }

    /// RFairLock acquireFailed: shift the deadlines behind this owner by −`wait_ms` and
    /// leave the queue.
    pub async fn fair_acquire_failed(&self, name: &str, thread: u64, wait_ms: u64) {
        let owner = self.owner(thread);
        let _: Value = self
            .run(
                "fair acquireFailed",
                &FAIR_ACQUIRE_FAILED,
                &[&fair_queue(name), &fair_timeouts(name)],
                &[owner.as_bytes(), &dec(wait_ms)],
            )
            .await;
    }

    /// RFairLock unlock (fresh request id, latch DEL afterwards): `None` not held, `Some(0)`
    /// still held, `Some(1)` released — also when the lock key was already gone (quirk).
    pub async fn fair_unlock(&self, name: &str, thread: u64, lease_ms: u64) -> Option<i64> {
        let request = request_id();
        let out = self
            .fair_unlock_with_request(name, thread, lease_ms, &request)
            .await;
        self.del(&unlock_latch(name, &request)).await;
        out
    }

    /// The RFairLock unlock script with `request_id`, leaving the latch in place.
    pub async fn fair_unlock_with_request(
        &self,
        name: &str,
        thread: u64,
        lease_ms: u64,
        request_id: &str,
    ) -> Option<i64> {
        let owner = self.owner(thread);
        self.run(
            "fair unlock",
            &FAIR_UNLOCK,
            &[
                name,
                &fair_queue(name),
                &fair_timeouts(name),
                &lock_channel(name),
                &unlock_latch(name, request_id),
            ],
            &[
                b"0",
                &dec(lease_ms),
                owner.as_bytes(),
                &dec(now_ms()),
                self.publish_command().as_bytes(),
                &dec(latch_ttl_ms()),
            ],
        )
        .await
    }

    /// RFairLock forceUnlock: purge, DEL, notify the queue head; true if it deleted the lock.
    pub async fn fair_force_unlock(&self, name: &str) -> bool {
        let n: i64 = self
            .run(
                "fair forceUnlock",
                &FAIR_FORCE_UNLOCK,
                &[
                    name,
                    &fair_queue(name),
                    &fair_timeouts(name),
                    &lock_channel(name),
                ],
                &[b"0", &dec(now_ms()), self.publish_command().as_bytes()],
            )
            .await;
        n == 1
    }
}
