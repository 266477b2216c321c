//! RSemaphore (`RedissonSemaphore.java`), RPermitExpirableSemaphore (`RedissonPermitExpirableSemaphore.java`) and RCountDownLatch (`RedissonCountDownLatch.java`).

use std::time::{Duration, Instant};

use redis::Value;

use super::pubsub::Kind;
use super::sync_scripts::*;
use super::*;

impl RedissonPeer {
    /// RSemaphore trySetPermits: set `n` only if the key is absent and publish it; true if set.
    pub async fn sem_try_set_permits(&self, name: &str, n: i64) -> bool {
        let r: i64 = self
            .run(
                "trySetPermits",
                &SEM_TRY_SET_PERMITS,
                &[name, &semaphore_channel(name)],
                &[&dec(n), self.publish_command().as_bytes()],
            )
            .await;
        r == 1
    }

    /// RSemaphore tryAcquire(n) without waiting.
    pub async fn sem_try_acquire(&self, name: &str, n: i64) -> bool {
        let r: i64 = self
            .run("tryAcquire", &SEM_TRY_ACQUIRE, &[name], &[&dec(n)])
            .await;
        r == 1
    }

    /// RSemaphore tryAcquire(n, wait): waits on `redisson_sc:{name}`; false on timeout.
    pub async fn sem_acquire(&self, name: &str, n: i64, wait: Duration) -> bool {
        self.wait_loop(
            &semaphore_channel(name),
            Kind::Semaphore,
            wait,
            || async move {
                if self.sem_try_acquire(name, n).await {
                    Ok(())
                } else {
                    Err(-1)
                }
            },
        )
        .await
        .is_some()
    }

    /// RSemaphore release(n): INCRBY and publish the new value; returns it.
    pub async fn sem_release(&self, name: &str, n: i64) -> i64 {
        self.run(
            "release",
            &SEM_RELEASE,
            &[name, &semaphore_channel(name)],
            &[&dec(n), self.publish_command().as_bytes()],
        )
        .await
    }

    /// RSemaphore addPermits(n) (n may be negative): write value + n, publish it; returns it.
    pub async fn sem_add_permits(&self, name: &str, n: i64) -> i64 {
        self.run(
            "addPermits",
            &SEM_ADD_PERMITS,
            &[name, &semaphore_channel(name)],
            &[&dec(n), self.publish_command().as_bytes()],
        )
        .await
    }

    /// RSemaphore drainPermits: set 0, return the old value.
    pub async fn sem_drain(&self, name: &str) -> i64 {
        self.run("drainPermits", &SEM_DRAIN, &[name], &[]).await
    }

    /// RSemaphore availablePermits (0 when the key is absent). Also the free permits of an
    /// RPermitExpirableSemaphore, whose `name` string has the same shape.
    pub async fn sem_available(&self, name: &str) -> i64 {
        self.get_long(name).await
    }

    /// One RPermitExpirableSemaphore acquire run: `Ok(ids)`, or `Err(ms until the earliest
    /// expiry)` / `Err(-1)` when there is nothing to wait for but a release.
    async fn pes_attempt(
        &self,
        name: &str,
        n: usize,
        lease_ms: Option<u64>,
    ) -> Result<Vec<[u8; 16]>, i64> {
        let ids: Vec<[u8; 16]> = (0..n).map(|_| rand::rng().random()).collect();
        let now = now_ms();
        let expiry = lease_ms.map_or(PES_NEVER, |l| now + l as i64);
        let (count, expiry, now_arg, never) = (dec(n), dec(expiry), dec(now), dec(PES_NEVER));
        let mut args: Vec<&[u8]> = vec![
            &count,
            &expiry,
            &now_arg,
            &never,
            self.publish_command().as_bytes(),
        ];
        args.extend(ids.iter().map(|id| id.as_slice()));
        let reply: Value = self
            .run(
                "permit acquire",
                &PES_ACQUIRE,
                &[name, &expirable_timeouts(name), &semaphore_channel(name)],
                &args,
            )
            .await;
        match reply {
            Value::Okay => Ok(ids),
            Value::SimpleString(s) if s == "OK" => Ok(ids),
            Value::BulkString(b) if b == b"OK" => Ok(ids),
            Value::BulkString(b) if b.first() == Some(&b':') => {
                let score: f64 = std::str::from_utf8(&b[1..])
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or_else(|| panic!("permit acquire replied {b:?}"));
                Err((score as i64 - now_ms()).max(0))
            }
            Value::Nil => Err(-1),
            other => panic!("permit acquire replied {other:?}"),
        }
    }

    /// RPermitExpirableSemaphore tryAcquire(n, lease) without waiting: the 16-byte permit ids
    /// (stored raw in `{name}:timeout`), or `None`.
    pub async fn pes_try_acquire(
        &self,
        name: &str,
        n: usize,
        lease_ms: Option<u64>,
    ) -> Option<Vec<[u8; 16]>> {
        self.pes_attempt(name, n, lease_ms).await.ok()
    }

    /// RPermitExpirableSemaphore tryAcquire(n, wait, lease): waits on `redisson_sc:{name}` (at
    /// most until the earliest expiry per round); `None` on timeout.
    pub async fn pes_acquire(
        &self,
        name: &str,
        n: usize,
        lease_ms: Option<u64>,
        wait: Duration,
    ) -> Option<Vec<[u8; 16]>> {
        self.wait_loop(
            &semaphore_channel(name),
            Kind::Semaphore,
            wait,
            || async move { self.pes_attempt(name, n, lease_ms).await },
        )
        .await
    }

    /// RPermitExpirableSemaphore tryRelease(id): true if the permit was live and released.
    pub async fn pes_release(&self, name: &str, id: &[u8; 16]) -> bool {
        let r: i64 = self
            .run(
                "permit release",
                &PES_RELEASE,
                &[name, &semaphore_channel(name), &expirable_timeouts(name)],
                &[
                    id.as_slice(),
                    b"1",
                    &dec(now_ms()),
                    self.publish_command().as_bytes(),
                ],
            )
            .await;
        r == 1
    }

    /// RCountDownLatch trySetCount(n): SET if absent, publish `1`; true if set.
    pub async fn latch_try_set_count(&self, name: &str, n: i64) -> bool {
        let r: i64 = self
            .run(
                "trySetCount",
                &LATCH_TRY_SET_COUNT,
                &[name, &latch_channel(name)],
                &[b"1", &dec(n), self.publish_command().as_bytes()],
            )
            .await;
        r == 1
    }

    /// RCountDownLatch countDown: DECR (DEL at <= 0, publish `0` at exactly 0); returns the
    /// decremented value.
    pub async fn latch_count_down(&self, name: &str) -> i64 {
        self.run(
            "countDown",
            &LATCH_COUNT_DOWN,
            &[name, &latch_channel(name)],
            &[b"0", self.publish_command().as_bytes()],
        )
        .await
    }

    /// RCountDownLatch getCount (0 when absent).
    pub async fn latch_count(&self, name: &str) -> i64 {
        self.get_long(name).await
    }

    /// RCountDownLatch await(wait): subscribe to the latch channel, then until the count is 0
    /// wait for the local latch to open (`0`); false on timeout.
    pub async fn latch_await(&self, name: &str, wait: Duration) -> bool {
        let start = Instant::now();
        if self.latch_count(name).await == 0 {
            return true;
        }
        let channel = latch_channel(name);
        let wake = self.subscribe(&channel, Kind::Latch).await;
        let out = loop {
            if self.latch_count(name).await == 0 {
                break true;
            }
            let remaining = wait.saturating_sub(start.elapsed());
            if remaining.is_zero() {
                break false;
            }
            wake.wait_open(remaining).await;
        };
        self.unsubscribe(&channel).await;
        out
    }

    /// RCountDownLatch delete: DEL and publish `1`; true if a key was deleted.
    pub async fn latch_delete(&self, name: &str) -> bool {
        let r: i64 = self
            .run(
                "latch delete",
                &LATCH_DELETE,
                &[name, &latch_channel(name)],
                &[b"1", self.publish_command().as_bytes()],
            )
            .await;
        r == 1
    }
}
