//! [`FairLock`]: the first-come, first-served reentrant lock, and its guard.
//!
//! # How it works
//!
//! Three keys per lock, all under the lock's Cluster hash tag:
//!
//! * `<ns>:lock:{name}`: the lock hash, the same key as the [`RLock`](crate::RLock) (and
//!   every other kind) of the name, so kinds of one name exclude each other and the
//!   watchdog's batched renewal works unchanged;
//! * `<ns>:fairqueue:{name}`: a list of waiter ids, oldest first;
//! * `<ns>:fairtimeouts:{name}`: a sorted set, waiter id -> deadline (server clock, ms).
//!
//! A waiter id is `<owner>:g<n>` (a watchdog hold: it takes a handoff, below) or `<owner>:<n>`
//! (a hold with a lease), one per lock call (so a late "leave" of a cancelled call never
//! removes the next call of the same task). Each waiter listens on its own channel
//! `<ns>:fairchannel:{name}:<waiter id>`. The lock script
//! (`lua/fair_lock.lua`) takes the lock only when it is free and the queue is empty or headed
//! by the caller; otherwise it appends the caller (or refreshes its deadline). An unlock (of
//! any kind of this name: they all run `lua/unlock.lua`) serves the head, on its channel, with
//! no herd. It also publishes on the lock's channel, for waiters of the other kinds: those do
//! not queue, so fairness holds among `FairLock` waiters, and a plain `lock()` of the same
//! name may take a free lock first.
//!
//! # Handoff
//!
//! A release does not merely wake a head that asked for a handoff: it gives it the lock, in
//! the unlock script (`lua/fair_queue.lua`'s `hand_over`): the head's owner field is set to 1
//! with a TTL of what is left of its queue deadline, it leaves the queue, a record
//! `!<waiter id>` stays in the deadline set until that deadline, and its channel is told
//! `grant:<waiters left>`. The waiter's `lock()` returns on that message without a call of its
//! own: its hold is registered as if its latest attempt that ran (which set that deadline) had
//! been granted with that TTL, so the hold's validity is measured from that attempt's send time.
//! Once a third of that validity has passed, it confirms in the background
//! (`lua/fair_confirm.lua`): the record goes and the TTL rises to the watchdog timeout. This
//! is the hold's first renewal; the watchdog renews it from then on. A hold released before
//! then needs no confirmation: its release names the record (`lua/unlock.lua`'s `ARGV[6]`)
//! and removes it. So a handoff costs one round trip (the unlock's reply and the message
//! travel together) instead of two, and a short critical section one script call per
//! acquisition besides the release (its place in the queue), where a confirmation sent at
//! once made two and landed on the next handoff's path.
//!
//! The handoff's TTL is the head's remaining deadline, so a dead head blocks the lock no
//! longer than its queue entry would have. When the message is lost (the subscription dropped,
//! or the waiter subscribed after the handoff), the waiter's next attempt, which a reconnect
//! makes at once, finds its record and takes the hold without counting it as a re-entry; a
//! waiter that leaves (timeout, dropped future) before it heard gives the hold back and the
//! lock goes to the next head. Since a release does for such a waiter nothing that its record
//! does not show, its look right after subscribing (which catches a release that came before
//! the subscription) is a `ZSCORE` of that record, not a lock script call: a contended
//! `lock()` costs one lock script call, not two.
//!
//! A waiter takes a handoff on a message only when its client's hold registry can count it
//! alone (no other hold or call of its owner on this lock), its last budget was at least half
//! the waiter lease (not cut short by its `try_lock` wait) and half of it is surely left, and
//! its client does not wait for replicas to acknowledge lock writes; otherwise it asks the
//! server, whose lock script finds the handoff, raises the TTL to the lease and, with replica
//! sync, waits for the replicas. A hold with a lease is never handed over: a TTL other than its lease would break the lease's promise, so
//! such a waiter is woken (`wake`) and takes the lock itself, one more round trip.
//!
//! A handoff taken on its message counts only while its hold can still be alive on the
//! server: a waiter that stood still (SIGSTOP, a blocked runtime, a stalled host) across the
//! release never takes one that expired meanwhile, so the handoff adds no window of two
//! owners to the one every lock has (a holder paused past its TTL after it took the lock:
//! use fencing tokens for that). The rules:
//!
//! * Its validity counts from the send time of the waiter's latest attempt whose *reply showed
//!   that it ran*, and so set the deadline the handoff's TTL was cut from. An attempt refused
//!   before it ran (`LOADING`, `TRYAGAIN`, `CLUSTERDOWN`, `READONLY`, ...) or whose reply was
//!   lost leaves the older record in place, which is the conservative one. The handoff is
//!   taken only while half that attempt's budget is surely left (and the reply-came-too-late
//!   check of every acquire applies on top).
//! * A message may be older than the waiter's latest attempt: a waiter resumed after a pause
//!   may send an attempt before it reads a message that waited in its socket, and by then the
//!   handed hold may have expired and the lock be another owner's. The waiter's entry was then
//!   gone, so that attempt added it to the queue again, and the lock script says so (its
//!   reply's `joined`, `lua/fair_lock.lua`). Once an attempt added the entry a second time, or
//!   an attempt's outcome is unknown (it may have done so unseen), the waiter takes no handoff
//!   on a message for the rest of that call: its lock script call takes a live handoff by its
//!   record, and finds none of a dead one (the waiter then waits on, in its new place). That
//!   costs such a waiter one round trip more.
//! * A hold that vanished after it was taken on a message (expired unseen, force-unlocked, lost
//!   to a restart) is reported by its confirmation (due a third of the hold's validity after
//!   it was taken), which finds no hold of the owner: the guard
//!   is marked lost at once ([`lost()`](FairLockGuard::lost) fires, `is_lost()` turns true),
//!   as a watchdog renewal that finds its lock gone does, and its `unlock()` is
//!   [`Error::NotHeld`](crate::Error::NotHeld) (a release finding no hold of its run answers so).
//!
//! Every script that touches the queue first purges waiters whose deadline has passed, and
//! sets the queue keys' TTL to "latest deadline + 1 s" (or deletes them when the queue is
//! empty), so nothing is left behind by a crash.
//!
//! # Waiter deadlines
//!
//! A waiter's deadline is refreshed by each of its attempts to `now + budget`, where budget is
//! the caller's remaining wait, at most the *waiter lease* `min(watchdog_timeout, 5 s)` (at
//! least 300 ms). A waiter retries at least every third of the waiter lease, so a live waiter,
//! even one waiting without limit, keeps its place; a crashed waiter is skipped at most one
//! waiter lease (or its remaining wait, if shorter) after its last attempt. Tying the lease to
//! the watchdog timeout means a dead waiter never blocks a lock longer than a dead holder
//! would; the 5 s cap bounds the stall for the default 30 s watchdog. The price is one script
//! call per waiter per third of the lease while it waits.
//!
//! A waiter that times out or whose future is dropped leaves the queue at once (awaited on
//! timeout, spawned on drop), and wakes the next head if the lock is free.
//!
//! # Layout
//!
//! - this file: the handle, its keys and queries, and the [`FairLockGuard`].
//! - [`acquire`]: the acquire methods and the queue: a waiter's entry, the lock script's
//!   attempts, leaving.

mod acquire;
mod handoff;
mod redisson;

use std::sync::Arc;
use std::time::Duration;

use crate::engine::{Base, Core, Hold, Owner};
use crate::error::Result;
use crate::lock::api::{guard_accessors, inspect_methods, owner_methods};
use crate::wire::keys::Role;

/// Upper bound of the waiter lease (see the module docs).
const MAX_WAITER_LEASE: Duration = Duration::from_secs(5);
/// Lower bound of the waiter lease, so a tiny watchdog timeout does not make waiters spin.
const MIN_WAITER_LEASE: Duration = Duration::from_millis(300);

/// A reentrant distributed lock that is granted in the order it was asked for (FIFO), across
/// tasks, clients and processes.
///
/// Get one from [`Client::fair_lock`](crate::Client::fair_lock); it is a cheap handle
/// (`Clone`, `Send`, `Sync`) and sends nothing until used. Ownership, re-entry, the watchdog
/// and leases work as for [`RLock`](crate::RLock); each [`FairLockGuard`] is one hold.
///
/// # When to use it
/// When waiters must not starve: with an [`RLock`](crate::RLock) whichever waiter retries
/// first after an unlock wins, so a busy process can overtake others indefinitely. A fair
/// lock hands the lock to the longest-waiting live waiter. Re-entry by the holder does not
/// queue.
///
/// # What it guarantees
/// * Mutual exclusion as for [`RLock`](crate::RLock) (and the same caveat: use fencing tokens
///   when a paused holder must not write after its TTL ran out).
/// * Waiters acquire in the order their first attempt reached Redis. A single attempt
///   (`try_lock(Duration::ZERO, ..)`) succeeds only when nobody is queued.
/// * A waiter that crashed delays the others by at most its *waiter lease*
///   `min(watchdog_timeout, 5 s)` (at least 300 ms), or its remaining `try_lock` wait if
///   shorter. A live waiter refreshes its place at least every third of that lease; a waiter
///   paused longer than the lease (SIGSTOP, a blocked runtime) loses its place and queues
///   again at the tail.
///
/// # What it costs
/// Compared with an [`RLock`](crate::RLock): two more keys per contended lock (a list and a
/// sorted set, with TTLs, deleted when the queue empties), scripts that touch three keys and
/// purge stale waiters, one channel subscription per waiting task (instead of one per lock
/// and client), and one refresh script call per waiter every third of the waiter lease. An
/// unlock hands the lock to the next waiter, so a handoff costs one round trip: the unlock
/// script, and then, for a hold kept longer than about a third of the waiter lease, one
/// confirmation script call in the background (see
/// [the guide](crate::guide::locks#fairlock-first-come-first-served)). A waiter with a lease
/// is woken instead and makes its own lock script call: two round trips.
///
/// # Example
///
/// ```rust,no_run
/// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
/// let lock = client.fair_lock("payouts");
/// let guard = lock.lock().await?; // served in the order the waiters asked
/// println!("{} waiters queued behind us", lock.queue_len().await?);
/// guard.unlock().await?; // hands the lock to the queue's head
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct FairLock {
    inner: Arc<Inner>,
}

struct Inner {
    /// Name, keys and the lock hash (the `lock` role, as every kind), shared by the hold
    /// entries.
    base: Base,
    waiter_lease: Duration,
}

impl FairLock {
    pub(crate) fn new(core: Arc<Core>, name: &str) -> FairLock {
        let waiter_lease = core
            .watchdog_timeout
            .clamp(MIN_WAITER_LEASE, MAX_WAITER_LEASE.max(MIN_WAITER_LEASE));
        let base = Base::new(core, name, Role::Lock);
        // A fair lock's release hands the lock to its queue's head (never batched; in
        // Redisson's layout RFairLock's, to the head's own channel).
        let release = crate::layout::fair_release(base.core.layout, &base.keys, &base.core.id_str);
        let base = base.with_release(release);
        FairLock {
            inner: Arc::new(Inner { waiter_lease, base }),
        }
    }

    fn owner_mode(&self) -> &Owner {
        &self.inner.base.owner
    }

    fn with_owner_mode(&self, owner: Owner) -> FairLock {
        let inner = &self.inner;
        FairLock {
            inner: Arc::new(Inner {
                base: inner.base.with_owner(owner),
                waiter_lease: inner.waiter_lease,
            }),
        }
    }

    /// The lock's name.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let lock = client.fair_lock("payouts");
    /// let guard = lock.lock().await?;
    /// println!("holding {}", lock.name());
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        &self.inner.base.name
    }

    /// The Redis key of the lock hash (`<namespace>:lock:{<name>}`, shared with every kind
    /// of the name).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let lock = client.fair_lock("payouts");
    /// // The same hash as `client.lock("payouts")`: the two kinds exclude each other.
    /// assert_eq!(lock.key(), client.lock("payouts").key());
    /// # Ok(()) }
    /// ```
    pub fn key(&self) -> &str {
        &self.inner.base.key
    }

    /// The Redis key of the waiters' queue, a list (`<namespace>:fairqueue:{<name>}`).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let lock = client.fair_lock("payouts");
    /// println!("waiters queue in the list {}", lock.queue_key());
    /// println!("{} of them now", lock.queue_len().await?);
    /// # Ok(()) }
    /// ```
    pub fn queue_key(&self) -> &str {
        &self.inner.base.keys.queue
    }

    /// The Redis key of the waiters' deadlines, a sorted set scored by server time in ms
    /// (`<namespace>:fairtimeouts:{<name>}`).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let lock = client.fair_lock("payouts");
    /// // A sorted set: waiter id -> deadline (server time, ms).
    /// println!("waiter deadlines in {}", lock.timeouts_key());
    /// # Ok(()) }
    /// ```
    pub fn timeouts_key(&self) -> &str {
        &self.inner.base.keys.deadlines
    }

    /// How long a waiter's queue entry lives without a refresh: `min(watchdog_timeout, 5 s)`,
    /// at least 300 ms. A crashed waiter delays the queue at most this long.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// use std::time::Duration;
    /// let lock = client.fair_lock("payouts");
    /// // 5 s with the default 30 s watchdog timeout.
    /// assert!(lock.waiter_lease() <= Duration::from_secs(5));
    /// # Ok(()) }
    /// ```
    pub fn waiter_lease(&self) -> Duration {
        self.inner.waiter_lease
    }

    fn keys(&self) -> [&str; 4] {
        self.inner.base.keys.script_keys()
    }

    /// Deletes the lock whoever holds it and serves the head of the queue (hands it the lock,
    /// or wakes it: see [the guide](crate::guide::locks#fairlock-first-come-first-served));
    /// the queue is kept.
    /// Returns whether it was locked. The former holders' guards then fail to unlock with
    /// [`Error::NotHeld`](crate::Error::NotHeld); watchdog holders also see [`FairLockGuard::lost`] fire at their
    /// next renewal.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for an invalid name; [`Error::Redis`](crate::Error::Redis) when Redis fails.
    ///
    /// # Cancel safety
    /// Dropping the future may or may not have deleted the lock.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let lock = client.fair_lock("payouts");
    /// if lock.force_unlock().await? {
    ///     println!("deleted; {} waiters still queued", lock.queue_len().await?);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn force_unlock(&self) -> Result<bool> {
        if !crate::layout::fair_handoff(self.inner.base.core.layout) {
            return self.force_unlock_redisson().await;
        }
        self.inner.base.force_unlock().await
    }

    /// How many waiters are queued (LLEN of the queue), including crashed waiters whose
    /// deadline has passed but who were not purged yet (the next script call does that).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for an invalid name; [`Error::Redis`](crate::Error::Redis) when Redis fails.
    ///
    /// # Cancel safety
    /// Cancel safe (read only).
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let lock = client.fair_lock("payouts");
    /// let queued = lock.queue_len().await?;
    /// if queued > 10 {
    ///     eprintln!("{queued} waiters queued for {}", lock.name());
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn queue_len(&self) -> Result<usize> {
        self.inner.base.check()?;
        Ok(redis::cmd("LLEN")
            .arg(&self.inner.base.keys.queue)
            .query_async(&mut self.inner.base.core.conn.clone())
            .await?)
    }
}

inspect_methods!(FairLock: inner.base, lock: "client.fair_lock(\"payouts\")");
owner_methods!(FairLock, lock: "client.fair_lock(\"payouts\")");

impl std::fmt::Debug for FairLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FairLock")
            .field("name", &self.inner.base.name)
            .field("key", &self.inner.base.key)
            .field("waiter_lease", &self.inner.waiter_lease)
            .finish()
    }
}

/// One hold of a [`FairLock`]. Release it with [`unlock`](FairLockGuard::unlock), which
/// reports errors; dropping it releases in the background instead.
///
/// The guard may be moved to, and unlocked from, any task: it remembers its owner.
///
/// # Dropping without `unlock`
/// `Drop` cannot wait, so it stops the watchdog for this hold and hands the unlock script to
/// the runtime without waiting (never `block_on`). If that unlock cannot reach Redis, the lock
/// expires with its TTL (the lease, or the watchdog timeout), and the head of the queue takes
/// it then.
///
/// # Example
///
/// ```rust,no_run
/// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
/// let guard = client.fair_lock("payouts").lock().await?;
/// assert!(!guard.is_lost());
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[must_use = "the lock is released when the guard is dropped; call .unlock().await"]
pub struct FairLockGuard {
    hold: Hold,
}

impl FairLockGuard {
    /// Releases this hold; the last hold hands the lock to the head of the queue (or wakes
    /// only that head, if it waits with a lease).
    ///
    /// Not retried on failure: a retried unlock could release a hold that is no longer this
    /// guard's. On an error the hold is left to expire with its TTL.
    ///
    /// # Errors
    /// [`Error::NotHeld`](crate::Error::NotHeld) when the hold was already gone (expired, force-unlocked, taken over):
    /// nothing was released. [`Error::Redis`](crate::Error::Redis) when Redis failed.
    ///
    /// # Cancel safety
    /// Once called, the release happens: dropping the future lets it finish in the background.
    ///
    /// # Example
    ///
    /// ```rust,no_run
    /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
    /// let guard = client.fair_lock("payouts").lock().await?;
    /// // ... the critical section ...
    /// guard.unlock().await?; // wakes only the next waiter in line
    /// # Ok(()) }
    /// ```
    pub async fn unlock(mut self) -> Result<()> {
        self.hold.unlock().await
    }
}

guard_accessors!(FairLockGuard, lock: "client.fair_lock(\"payouts\")");

impl std::fmt::Debug for FairLockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FairLockGuard")
            .field("name", &self.name())
            .field("owner", &self.owner())
            .field("lease", &self.lease())
            .field("lost", &self.is_lost())
            .finish()
    }
}

crate::lock::contract::impl_lock!(crate::FairLock, crate::FairLockGuard);
