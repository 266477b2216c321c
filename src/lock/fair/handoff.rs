//! A fair waiter's record of its handoff: where a release's message comes, and what its
//! attempts that ran showed of its queue entry, so a message is taken only while its hold
//! can still be alive (see "Handoff" in [`fair`](super)).

use std::sync::atomic::{AtomicBool, AtomicU32};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// What a waiter that asked for a handoff keeps: its channel, where the release's message
/// comes; what its attempts that ran showed of its queue entry ([`Seen`]); whether it took a
/// handoff on a message (it is then confirmed); and what its look right after subscribing
/// needs (see "Handoff" in [`fair`](super)).
pub(super) struct Handoff {
    pub(super) channel: String,
    pub(super) seen: Mutex<Seen>,
    pub(super) taken: AtomicBool,
    /// Attempts made so far.
    pub(super) attempts: AtomicU32,
    /// The wait bound of the latest script attempt that left the waiter queued.
    pub(super) queued: Mutex<Option<Duration>>,
}

impl Handoff {
    /// Records what an attempt that queued (budget > 0), sent at `sent`, showed: its reply
    /// (`[0, wait, joined]` from `lua/fair_lock.lua`), or its error.
    pub(super) fn saw(
        &self,
        sent: Instant,
        budget: Duration,
        reply: std::result::Result<&[i64], &redis::RedisError>,
    ) {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        match reply {
            // Granted: the call ends here.
            Ok([1, ..]) => {}
            // Ran: the entry's deadline is now at least `sent + budget`.
            Ok([0, _, joined]) => {
                if *joined == 1 {
                    // Added again: a message heard from now on may be the old entry's.
                    seen.doubtful |= seen.joined;
                    seen.joined = true;
                }
                seen.last = Some((sent, budget));
            }
            // A reply that does not say whether the entry was added: it ran, but a message
            // can no longer be matched to the entry.
            Ok([0, ..]) => {
                seen.doubtful = true;
                seen.last = Some((sent, budget));
            }
            // Not a reply of the lock script (the call fails): nothing to go by.
            Ok(_) => seen.doubtful = true,
            // Refused before it ran (`LOADING`, `TRYAGAIN`, `CLUSTERDOWN`, ...): nothing
            // changed on the server; the older record stands (it is the conservative one).
            Err(e) if crate::error::did_not_run(e) => {}
            // It may have run (a lost reply, a timeout) and added the entry again, unseen;
            // the older record stands.
            Err(_) => seen.doubtful = true,
        }
    }
}

/// What a watchdog waiter's attempts that ran showed of its queue entry: a release that
/// hands the lock to the waiter sets the hold's TTL to what is left of the entry's deadline,
/// and the waiter's attempts set that deadline.
#[derive(Default)]
pub(super) struct Seen {
    /// Send time and budget of the latest attempt whose reply showed it ran and set the
    /// entry's deadline (the server's clock read it after the send, so the deadline is at
    /// least `sent + budget`). Never from an attempt that failed or whose reply was lost,
    /// whether or not it ran: the older record is the conservative one.
    pub(super) last: Option<(Instant, Duration)>,
    /// An attempt that ran added the entry to the queue.
    pub(super) joined: bool,
    /// A handoff message may be of an earlier entry, whose hold is gone: an attempt that ran
    /// added the entry a second time (the first entry lapsed, or its handed hold ended, while
    /// the waiter stood still), or an attempt may have done so unseen (its outcome is
    /// unknown). A handoff is then taken by the lock script only, which finds it by its
    /// record while its hold lives.
    pub(super) doubtful: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handoff() -> Handoff {
        Handoff {
            channel: String::new(),
            seen: Mutex::new(Seen::default()),
            taken: AtomicBool::new(false),
            attempts: AtomicU32::new(0),
            queued: Mutex::new(None),
        }
    }

    fn seen(h: &Handoff) -> (Option<(Instant, Duration)>, bool) {
        let s = h.seen.lock().unwrap();
        (s.last, s.doubtful)
    }

    fn server_error(reply: &str) -> redis::RedisError {
        let value = redis::parse_redis_value(format!("-{reply}\r\n").as_bytes()).unwrap();
        value.extract_error().unwrap_err()
    }

    const BUDGET: Duration = Duration::from_secs(1);

    /// The record a handoff's validity counts from is the latest attempt that ran: one
    /// refused before it ran, or whose reply was lost, leaves the older record in place.
    #[test]
    fn validity_counts_only_from_attempts_that_ran() {
        let h = handoff();
        let ran = Instant::now();
        h.saw(ran, BUDGET, Ok(&[0, 900, 1]));
        assert_eq!(seen(&h), (Some((ran, BUDGET)), false));
        let later = ran + Duration::from_millis(300);
        for reply in [
            "LOADING Redis is loading the dataset in memory",
            "TRYAGAIN Multiple keys request during rehashing of slot",
            "CLUSTERDOWN The cluster is down",
            "READONLY You can't write against a read only replica.",
        ] {
            h.saw(later, BUDGET, Err(&server_error(reply)));
            assert_eq!(seen(&h), (Some((ran, BUDGET)), false), "{reply}");
        }
        // A refresh that ran moves the record.
        h.saw(later, BUDGET, Ok(&[0, 600, 0]));
        assert_eq!(seen(&h), (Some((later, BUDGET)), false));
        // A reply lost to a timeout: it may have run, unseen. The record stays, and a
        // message can no longer be matched to the entry.
        let timeout = redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut));
        h.saw(later + BUDGET, BUDGET, Err(&timeout));
        assert_eq!(seen(&h), (Some((later, BUDGET)), true));
    }

    /// An entry added a second time (the first lapsed, or its handed hold ended) makes a
    /// handoff message untrustworthy: it may be the first entry's.
    #[test]
    fn an_entry_added_again_makes_handoff_messages_doubtful() {
        let h = handoff();
        let t = Instant::now();
        h.saw(t, BUDGET, Ok(&[0, 900, 1]));
        h.saw(t, BUDGET, Ok(&[0, 900, 0]));
        assert!(!seen(&h).1);
        h.saw(t, BUDGET, Ok(&[0, 900, 1]));
        assert!(seen(&h).1);
        // A reply without the flag cannot say: doubtful too.
        let h = handoff();
        h.saw(t, BUDGET, Ok(&[0, 900]));
        assert_eq!(seen(&h), (Some((t, BUDGET)), true));
    }
}
