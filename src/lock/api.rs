//! The public methods every lock kind shares, written once as macros that each kind's file
//! invokes: the guard accessors (`name`, `owner`, `lease`, `is_lost`, `validity`, `lost`,
//! `detach`), the ownership choices (`non_reentrant`, `reentrant`, `with_owner`,
//! `is_reentrant`) and the read-only queries (`is_locked`, `hold_count`, ...). They live
//! beside the kinds, above the engine, and only forward to it.

/// The accessors every guard shares: `name`, `owner`, `lease`, `is_lost`, `validity` and
/// `lost`, each forwarded to the guard's field `hold` (an engine [`Hold`], or a kind's own
/// hold type with the same methods). `lock` is a lock handle the examples acquire with
/// `lock()` (`guard_accessors!(FairLockGuard, lock: "client.fair_lock(\"payouts\")")`).
/// The first form has the docs of a hold on one lock, and examples that take a `client`; a
/// kind whose hold means something else (Redlock: a quorum of nodes) passes its own docs for
/// `owner`, `lease`, `is_lost` and `validity`, and in `demo` the parameters of its examples'
/// hidden function.
macro_rules! guard_accessors {
    ($guard:ident, lock: $lock:literal) => {
        $crate::lock::api::guard_accessors!(
            $guard,
            demo: "client: lockwise::Client",
            lock: $lock,
            owner: "The owner field of this hold: `<client id>:<task id>`.",
            lease: "The lease this hold was taken with; `None` when the watchdog renews it.",
            is_lost: "Whether the lock must be treated as lost: the watchdog found it gone \
                (expired, force-unlocked, server restarted without persistence) or stopped \
                (client dropped), or its [`validity`](Self::validity) ran out. Computed at \
                the call, so a holder resumed from a long pause sees `true` at once, before \
                any renewal could run.",
            validity: "How long the lock is still known to be held: the TTL that the last \
                acquire or renewal gave the key, measured from the moment that call was \
                *sent* (the server ran it later, so the key lives at least that long), less \
                a safety margin for clock drift and scheduling (1 % of that TTL + 2 ms, at \
                least 100 ms or a tenth of a shorter TTL). Zero once lost. For a lease hold \
                this counts down to the end of the lease; for a watchdog hold each renewal \
                moves it forward.\n\n\
                Check it before an action that must not happen without the lock, and use \
                fencing tokens where the resource can check them: a pause after the check \
                is not covered."
        );

        impl $guard {
            /// Moves this hold to an owner of its own (`<client id>:h<n>`, see
            /// [`owner`](Self::owner)), so the task that took it no longer re-enters it:
            /// call it before the guard leaves its task (moved into `tokio::spawn`, kept in
            /// shared state) or may outlive it. Afterwards that task's next `lock()` of this
            /// lock waits for this guard, like any other owner. The lock stays held
            /// throughout, with the same TTL (and fencing token); renewals follow the hold.
            /// One script call. Handles made with `non_reentrant()` need no detach.
            ///
            /// # Errors
            /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) (argument
            /// `"guard"`), with the guard unchanged, when this is not its owner's only hold
            /// of the lock (the task re-entered it: detach the outermost guard once the
            /// inner ones are released) or a call of its owner on this lock is in flight;
            /// [`Error::NotHeld`](crate::Error::NotHeld) when the hold is gone;
            /// [`Error::Redis`](crate::Error::Redis) when Redis failed: the hold may have
            /// moved or not, which a settlement finds out in the background (if it moved,
            /// this guard becomes [lost](Self::is_lost) and the moved hold is released).
            ///
            /// # Cancel safety
            /// Dropping the future before the reply is the same as the `Error::Redis` case.
            ///
            /// # Example
            ///
            /// ```rust,no_run
            /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
            #[doc = concat!("let mut guard = ", $lock, ".lock().await?;")]
            /// guard.detach().await?; // this task no longer re-enters it
            /// tokio::spawn(async move {
            ///     // ... work that may outlive this task ...
            ///     guard.unlock().await
            /// });
            /// # Ok(()) }
            /// ```
            pub async fn detach(&mut self) -> $crate::Result<()> {
                self.hold.detach().await
            }
        }
    };
    ($guard:ident, demo: $demo:literal, lock: $lock:literal, owner: $owner:literal,
     lease: $lease:literal, is_lost: $is_lost:literal, validity: $validity:literal) => {
        impl $guard {
            /// The lock's name.
            ///
            /// # Example
            ///
            /// ```rust,no_run
            #[doc = concat!("# async fn demo(", $demo, ") -> lockwise::Result<()> {")]
            #[doc = concat!("let guard = ", $lock, ".lock().await?;")]
            /// println!("holding {}", guard.name());
            /// guard.unlock().await?;
            /// # Ok(()) }
            /// ```
            pub fn name(&self) -> &str {
                self.hold.name()
            }

            #[doc = $owner]
            ///
            /// # Example
            ///
            /// ```rust,no_run
            #[doc = concat!("# async fn demo(", $demo, ") -> lockwise::Result<()> {")]
            #[doc = concat!("let guard = ", $lock, ".lock().await?;")]
            /// println!("held as {}", guard.owner()); // the owner field in Redis
            /// guard.unlock().await?;
            /// # Ok(()) }
            /// ```
            pub fn owner(&self) -> &str {
                self.hold.owner()
            }

            #[doc = $lease]
            ///
            /// # Example
            ///
            /// ```rust,no_run
            #[doc = concat!("# async fn demo(", $demo, ") -> lockwise::Result<()> {")]
            /// let lease = std::time::Duration::from_secs(30);
            #[doc = concat!("let guard = ", $lock, ".lock_with_lease(lease).await?;")]
            /// assert_eq!(guard.lease(), Some(lease)); // it expires then, unless released
            /// guard.unlock().await?;
            /// # Ok(()) }
            /// ```
            pub fn lease(&self) -> Option<std::time::Duration> {
                self.hold.lease()
            }

            #[doc = $is_lost]
            ///
            /// # Example
            ///
            /// ```rust,no_run
            /// # async fn step(_: u32) {}
            #[doc = concat!("# async fn demo(", $demo, ") -> lockwise::Result<()> {")]
            #[doc = concat!("let guard = ", $lock, ".lock().await?;")]
            /// for batch in 0..10 {
            ///     if guard.is_lost() {
            ///         break; // stop working without the lock
            ///     }
            ///     step(batch).await;
            /// }
            /// guard.unlock().await?; // `Error::NotHeld` once lost
            /// # Ok(()) }
            /// ```
            pub fn is_lost(&self) -> bool {
                self.hold.is_lost()
            }

            #[doc = $validity]
            ///
            /// # Example
            ///
            /// ```rust,no_run
            #[doc = concat!("# async fn demo(", $demo, ") -> lockwise::Result<()> {")]
            /// use std::time::Duration;
            #[doc = concat!("let guard = ", $lock, ".lock().await?;")]
            /// // ... a long computation ...
            /// if guard.validity() > Duration::from_secs(2) {
            ///     // ... the step that must not happen without the lock ...
            /// }
            /// guard.unlock().await?;
            /// # Ok(()) }
            /// ```
            pub fn validity(&self) -> std::time::Duration {
                self.hold.validity()
            }

            /// A token cancelled when the lock is known to be lost (see
            /// [`is_lost`](Self::is_lost)). Select on `lost().cancelled()` to stop work that
            /// must not continue without the lock.
            ///
            /// # Example
            ///
            /// ```rust,no_run
            /// # async fn work() {}
            #[doc = concat!("# async fn demo(", $demo, ") -> lockwise::Result<()> {")]
            #[doc = concat!("let guard = ", $lock, ".lock().await?;")]
            /// let lost = guard.lost();
            /// tokio::select! {
            ///     () = work() => guard.unlock().await?,
            ///     () = lost.cancelled() => eprintln!("lost {}: work stopped", guard.name()),
            /// }
            /// # Ok(()) }
            /// ```
            pub fn lost(&self) -> tokio_util::sync::CancellationToken {
                self.hold.lost()
            }
        }
    };
}

/// The ownership choices every lock handle offers (see "Ownership" in the crate docs); it
/// needs `with_owner_mode(&self, Owner) -> Self`, which returns the same lock with acquires
/// owned by the given [`Owner`](crate::engine::Owner), and `owner_mode(&self) -> &Owner`.
///
/// The examples make the handle with `lock` and take a guard from it with `acquire`
/// (`lock()` unless given); their hidden function takes a `client`, or the parameters in
/// `demo`: `owner_methods!(RwLock, lock: "client.rw_lock(\"prices\")", acquire:
/// "write().lock()")`.
macro_rules! owner_methods {
    ($handle:ident, lock: $lock:literal) => {
        $crate::lock::api::owner_methods!($handle, lock: $lock, acquire: "lock()");
    };
    ($handle:ident, lock: $lock:literal, acquire: $acquire:literal) => {
        $crate::lock::api::owner_methods!(
            $handle,
            demo: "client: lockwise::Client",
            lock: $lock,
            acquire: $acquire
        );
    };
    ($handle:ident, demo: $demo:literal, lock: $lock:literal, acquire: $acquire:literal) => {
        impl $handle {
            /// The same lock, **not reentrant**: every acquire through the returned handle
            /// takes a hold of its own (owner `<client id>:h<n>`), so a second acquire waits
            /// for the first guard, in the same task too, instead of re-entering it.
            ///
            /// Use it when a guard may leave the task that took it (moved into
            /// `tokio::spawn`, kept in shared state) or outlive it: with the default,
            /// task-owned handle, that task (for example the one task that serves every
            /// request of an HTTP/1.1 keep-alive connection) would re-enter the lock while
            /// the guard is still in use elsewhere, and tokio may give a new task the id of
            /// an ended one. Code that nests `lock()` calls in one task deadlocks with it.
            ///
            /// On such a handle [`hold_count`](Self::hold_count) and
            /// [`is_held_by_current_task`](Self::is_held_by_current_task) report no holds:
            /// a hold belongs to its guard, not to a task.
            ///
            /// # Example
            ///
            /// ```rust,no_run
            #[doc = concat!("# async fn demo(", $demo, ") -> lockwise::Result<()> {")]
            #[doc = concat!("let lock = ", $lock, ".non_reentrant();")]
            #[doc = concat!("let guard = lock.", $acquire, ".await?; // a hold of its own")]
            /// tokio::spawn(async move {
            ///     // ... work that may outlive this task ...
            ///     guard.unlock().await
            /// });
            /// # Ok(()) }
            /// ```
            pub fn non_reentrant(&self) -> Self {
                self.with_owner_mode($crate::engine::Owner::PerHold)
            }

            /// The same lock, owned by `owner` (the field `<client id>:owner:<owner>`)
            /// instead of the calling task: every task that acquires through a handle with
            /// this owner re-enters the same holds, as one task re-enters its own
            /// (Redisson's `lock(threadId)`). For re-entry across tasks on purpose; the
            /// caller then decides which work belongs to one owner.
            ///
            /// An owner id must be non-empty, at most 256 bytes, without control
            /// characters; otherwise every method of the returned handle reports
            /// [`Error::InvalidArgument`](crate::Error::InvalidArgument).
            ///
            /// # Example
            ///
            /// ```rust,no_run
            #[doc = concat!("# async fn demo(", $demo, ") -> lockwise::Result<()> {")]
            #[doc = concat!("let job = ", $lock, ".with_owner(\"import-7\");")]
            #[doc = concat!("let guard = job.", $acquire, ".await?;")]
            /// // Another task acquiring as "import-7" re-enters the hold instead of waiting:
            #[doc = concat!("let other = tokio::spawn(async move { job.", $acquire, ".await });")]
            /// other.await.expect("task panicked")?.unlock().await?;
            /// guard.unlock().await?;
            /// # Ok(()) }
            /// ```
            pub fn with_owner(&self, owner: impl AsRef<str>) -> Self {
                self.with_owner_mode($crate::engine::Owner::Named(owner.as_ref().into()))
            }

            /// The same lock, owned by the calling task (the default, unless the client was
            /// built with [`Ownership::PerHold`](crate::Ownership::PerHold)): the task
            /// that holds it re-enters it, other tasks wait.
            ///
            /// # Example
            ///
            /// ```rust,no_run
            #[doc = concat!("# async fn demo(", $demo, ") -> lockwise::Result<()> {")]
            #[doc = concat!("let lock = ", $lock, ".reentrant(); // whatever the client's default")]
            #[doc = concat!("let outer = lock.", $acquire, ".await?;")]
            #[doc = concat!("let inner = lock.", $acquire, ".await?; // the same task re-enters")]
            /// inner.unlock().await?;
            /// outer.unlock().await?;
            /// # Ok(()) }
            /// ```
            pub fn reentrant(&self) -> Self {
                self.with_owner_mode($crate::engine::Owner::Task)
            }

            /// Whether acquires through this handle may re-enter an earlier hold: `false`
            /// only for a [`non_reentrant`](Self::non_reentrant) handle.
            ///
            /// # Example
            ///
            /// ```rust,no_run
            #[doc = concat!("# async fn demo(", $demo, ") -> lockwise::Result<()> {")]
            #[doc = concat!("let lock = ", $lock, ";")]
            /// assert!(!lock.non_reentrant().is_reentrant());
            /// assert!(lock.reentrant().is_reentrant());
            /// # Ok(()) }
            /// ```
            pub fn is_reentrant(&self) -> bool {
                *self.owner_mode() != $crate::engine::Owner::PerHold
            }
        }
    };
}

/// The read-only queries every hash-based handle shares, on the lock's
/// [`Base`](crate::engine::Base) at the field path given after the handle; `lock` makes the
/// handle in the examples, from a `client`
/// (`inspect_methods!(FairLock: inner.base, lock: "client.fair_lock(\"payouts\")")`).
macro_rules! inspect_methods {
    ($handle:ident: $($base:ident).+, lock: $lock:literal) => {
        impl $handle {
            /// Whether any owner holds the lock.
            ///
            /// # Errors
            /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for an invalid name;
            /// [`Error::Redis`](crate::Error::Redis) when Redis fails.
            ///
            /// # Cancel safety
            /// Cancel safe (read only).
            ///
            /// # Example
            ///
            /// ```rust,no_run
            /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
            #[doc = concat!("let lock = ", $lock, ";")]
            /// if lock.is_locked().await? {
            ///     println!("{} is taken", lock.name());
            /// }
            /// # Ok(()) }
            /// ```
            pub async fn is_locked(&self) -> $crate::Result<bool> {
                self.$($base).+.is_locked().await
            }

            /// Whether the calling task (through this client) holds the lock.
            ///
            /// # Errors
            /// As for [`is_locked`](Self::is_locked).
            ///
            /// # Cancel safety
            /// Cancel safe (read only).
            ///
            /// # Example
            ///
            /// ```rust,no_run
            /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
            #[doc = concat!("let lock = ", $lock, ";")]
            /// let guard = lock.lock().await?;
            /// assert!(lock.is_held_by_current_task().await?);
            /// guard.unlock().await?;
            /// # Ok(()) }
            /// ```
            pub async fn is_held_by_current_task(&self) -> $crate::Result<bool> {
                Ok(self.hold_count().await? > 0)
            }

            /// How many holds the calling task (through this client) has on the lock; 0 if
            /// none.
            ///
            /// # Errors
            /// As for [`is_locked`](Self::is_locked).
            ///
            /// # Cancel safety
            /// Cancel safe (read only).
            ///
            /// # Example
            ///
            /// ```rust,no_run
            /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
            #[doc = concat!("let lock = ", $lock, ";")]
            /// let outer = lock.lock().await?;
            /// let inner = lock.lock().await?; // re-entered
            /// assert_eq!(lock.hold_count().await?, 2);
            /// inner.unlock().await?;
            /// outer.unlock().await?;
            /// # Ok(()) }
            /// ```
            pub async fn hold_count(&self) -> $crate::Result<u32> {
                self.$($base).+.hold_count().await
            }

            /// Time until the lock expires; `None` when it is not locked. A lock without TTL
            /// (never written by lockwise) reports `Duration::MAX`.
            ///
            /// # Errors
            /// As for [`is_locked`](Self::is_locked).
            ///
            /// # Cancel safety
            /// Cancel safe (read only).
            ///
            /// # Example
            ///
            /// ```rust,no_run
            /// # async fn demo(client: lockwise::Client) -> lockwise::Result<()> {
            #[doc = concat!("let lock = ", $lock, ";")]
            /// match lock.remaining_ttl().await? {
            ///     Some(ttl) => println!("taken; expires in {ttl:?} unless renewed"),
            ///     None => println!("free"),
            /// }
            /// # Ok(()) }
            /// ```
            pub async fn remaining_ttl(&self) -> $crate::Result<Option<std::time::Duration>> {
                self.$($base).+.remaining_ttl().await
            }
        }
    };
}

pub(crate) use {guard_accessors, inspect_methods, owner_methods};
