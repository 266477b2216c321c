//! Sentinel: the current master of a Sentinel-monitored set, and following it.
//!
//! redis-rs resolves a Sentinel master once and never again, so a failover would leave the
//! client writing to a demoted replica, or worse, to a deposed master that has not been
//! demoted yet (a master stalled past `down-after-milliseconds` and resumed after the
//! failover stays writable until the sentinels reconfigure it, about 8 s later). So
//! [`SentinelMaster`] follows the master itself:
//!
//! * **Checks.** One follower task per client asks *every* sentinel for the master
//!   (`SENTINEL MASTER <name>`, in parallel) and takes the answer with the highest
//!   configuration epoch, so a sentinel that lags behind a failover (one that was stalled,
//!   say) cannot lead the client back to the old master. A master it has not used yet must
//!   answer `ROLE` as a master before any command goes there. A check runs every
//!   [`check_interval`](SentinelSettings::check_interval) (1 s by default; more often if
//!   the trust window below is short), and at once when a sentinel announces
//!   `+switch-master`, when the master answers `READONLY`, and after a connection error or
//!   timeout.
//! * **The gate.** A command goes to the current master only if a check that *started*
//!   recently confirmed it: within the [trust window](SentinelSettings::trust_window), and
//!   after the master last gave a reason for doubt (a connection error, a timeout,
//!   `READONLY`, an announced switch). Otherwise it waits for the next check (one round trip
//!   to the sentinels). So a switch cannot be missed: a process that was paused while the
//!   master moved, or whose announcement got lost, or whose earlier check was still waiting
//!   on the stalled master, asks again before it writes.
//! * **Silence confirms nothing** (DESIGN invariant 15). A check that no sentinel answers
//!   is recorded as silent, never as a confirmation: the master the client has may have been
//!   deposed by a failover the client cannot see (a deposed master that the sentinels cannot
//!   reach stays writable). Commands keep going to it while an earlier confirmation is
//!   within the trust window; past it, each command waits for a check and, if that check
//!   hears no sentinel, fails unsent with a retryable `Error::Redis` (an I/O timeout). The
//!   watchdog's renewals are such commands, so they stop too, and each watchdog hold is told
//!   lost when its last renewal runs out: at most the trust window plus the watchdog timeout
//!   after the last confirmation. The first check a sentinel answers again lets commands
//!   through.
//! * **`READONLY`.** The command did not run. The client checks at once and, if the master
//!   moved, sends the command once more to the new one.
//!
//! Calls waiting on the old master when it moves are abandoned with a connection error
//! (their outcome is unknown, which the lock paths settle), and the subscription listener
//! follows each new master through a [`watch`](tokio::sync::watch) channel.
//!
//! # Layout
//! - this file: what the others share: the settings ([`SentinelSettings`], with the trust
//!   window) and the master's credentials ([`MasterAuth`]).
//! - [`master`]: the master, its gate, one check, and how a reply is judged.
//! - [`ask`]: asking the sentinels, and connecting to a master they name.
//! - [`follow`]: the follower task (checks) and the `+switch-master` watcher.
//! - [`connect`](mod@connect): connecting a Sentinel deployment, and starting the follower.

mod ask;
mod connect;
mod follow;
mod master;

use std::time::Duration;

use redis::{ConnectionInfo, RedisConnectionInfo};

pub(super) use connect::connect;
pub(crate) use master::SentinelMaster;
pub(super) use master::{Retry, Verdict};

/// Credentials and database of a Sentinel master (set only for Sentinel deployments).
#[derive(Clone, Default)]
pub(crate) struct MasterAuth {
    pub(crate) username: Option<String>,
    pub(crate) password: Option<String>,
    pub(crate) db: Option<i64>,
}

/// How to reach and authenticate with a Sentinel-monitored master.
#[derive(Clone)]
pub(crate) struct SentinelSettings {
    /// The sentinels' addresses (their own credentials, if any, in the URLs).
    pub(crate) sentinels: Vec<ConnectionInfo>,
    /// The monitored master's name (`sentinel monitor <name> ...`).
    pub(crate) master_name: String,
    /// Credentials, database and protocol for the master itself.
    pub(crate) master: RedisConnectionInfo,
    pub(crate) connect_timeout: Duration,
    pub(crate) response_timeout: Duration,
    /// How often the follower asks the sentinels for the master without being asked to (at
    /// most; see [`check_every`](Self::check_every)).
    pub(crate) check_interval: Duration,
    /// The client's watchdog timeout, which bounds the [trust window](Self::trust_window).
    pub(crate) watchdog_timeout: Duration,
}

impl SentinelSettings {
    /// How long a check's confirmation of the master is trusted: two check intervals and a
    /// response timeout (3 s with the defaults), so one late or lost check does not hold up
    /// commands, but at most a third of the watchdog timeout (one renewal period).
    ///
    /// Past it, with no newer confirmation, nothing is sent (see "Silence confirms nothing"
    /// in the module docs). The bound keeps what a client cut off from the sentinels can
    /// still write to a master they may have deposed to a fraction of a lock's TTL: its
    /// renewals stop at most one renewal period after the last confirmation, so each of its
    /// watchdog holds is told lost at most 4/3 of the watchdog timeout after it, while the
    /// copy of the lock on a promoted replica lives at least until a watchdog timeout after
    /// the last renewal that reached the replica.
    fn trust_window(&self) -> Duration {
        (self.check_interval * 2 + self.response_timeout)
            .min(self.watchdog_timeout / 3)
            .max(Duration::from_millis(1))
    }

    /// How often the follower checks unprompted: every check interval, or twice per trust
    /// window if that is shorter (a window bounded by a short watchdog timeout), so a
    /// healthy client's commands never wait for a check.
    fn check_every(&self) -> Duration {
        self.check_interval
            .min(self.trust_window() / 2)
            .max(Duration::from_millis(1))
    }

    /// Longest wait of a command for a check (the sentinels are asked with the response
    /// timeout; a new master is connected within the connect timeout).
    fn check_wait(&self) -> Duration {
        self.connect_timeout + self.response_timeout * 2
    }
}

#[cfg(test)]
mod tests;
