//! Retry pauses. Every loop that tries again after a pause (an acquire's or release's
//! resends through a failover, a Cluster's resends of what it refused unrun, a settlement,
//! resubscriptions and channel releases, following a Sentinel master and its sentinels, the
//! RESP2 listener's reconnects, a fair handoff's confirmation, a spin lock's attempts, a
//! RedLock's rounds) takes its pauses from here, jittered: the clients of a fleet that lost
//! Redis together then spread their retries when it comes back instead of arriving in step.
//!
//! The bottom layer: it imports nothing of the crate, so every layer may use it.
//!
//! Randomness has one source in the library, `fastrand` (already in the dependency tree
//! through redis-rs): a small thread-local generator seeded from the standard library's
//! per-process random keys. Nothing here needs cryptographic randomness.

use std::time::Duration;

/// Pauses that double from `initial` up to `max`, each drawn uniformly between half and all
/// of its step ("equal jitter": half of it fixed, so a pause never collapses to nothing;
/// half random, so two clients that failed together drift apart at once).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Backoff {
    pub(crate) initial: Duration,
    pub(crate) max: Duration,
}

impl Backoff {
    /// `initial`, doubling up to `max`.
    pub(crate) const fn new(initial: Duration, max: Duration) -> Backoff {
        Backoff { initial, max }
    }

    /// The step after the `n`-th failure (0-based), before jitter: `initial * 2^n`, at most
    /// `max`, at least 1 ms.
    pub(crate) fn step(&self, n: u32) -> Duration {
        self.initial
            .saturating_mul(1u32 << n.min(20))
            .min(self.max)
            .max(Duration::from_millis(1))
    }

    /// The pause after the `n`-th failure (0-based): its [`step`](Self::step), jittered.
    pub(crate) fn pause(&self, n: u32) -> Duration {
        jitter(self.step(n))
    }
}

/// The failures of one retry loop so far: [`Retries::next`] gives the pause before the next
/// try, [`Retries::reset`] starts over (after a success).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Retries {
    backoff: Backoff,
    failures: u32,
}

impl Retries {
    /// No failure yet.
    pub(crate) const fn new(backoff: Backoff) -> Retries {
        Retries {
            backoff,
            failures: 0,
        }
    }

    /// The pause after one more failure.
    pub(crate) fn next(&mut self) -> Duration {
        let pause = self.backoff.pause(self.failures);
        self.failures = self.failures.saturating_add(1);
        pause
    }

    /// Starts over from the first step.
    pub(crate) fn reset(&mut self) {
        self.failures = 0;
    }
}

/// A duration drawn uniformly between half of `d` and all of it.
pub(crate) fn jitter(d: Duration) -> Duration {
    let half = d / 2;
    let spread = u64::try_from((d - half).as_nanos()).unwrap_or(u64::MAX);
    half + Duration::from_nanos(fastrand::u64(0..=spread))
}

/// A number drawn uniformly from `0..span` (0 when `span` is 0).
pub(crate) fn below(span: u128) -> u128 {
    match span {
        0 => 0,
        _ => fastrand::u128(0..span),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_double_up_to_the_cap() {
        let b = Backoff::new(Duration::from_millis(20), Duration::from_secs(1));
        let steps: Vec<u128> = (0..8).map(|n| b.step(n).as_millis()).collect();
        assert_eq!(steps, [20, 40, 80, 160, 320, 640, 1000, 1000]);
        assert_eq!(b.step(u32::MAX), Duration::from_secs(1));
        let zero = Backoff::new(Duration::ZERO, Duration::ZERO);
        assert_eq!(zero.step(3), Duration::from_millis(1));
    }

    /// Pauses stay within [step / 2, step] and spread over that window: 1,000 clients
    /// that failed together wait 1,000 different pauses, covering most of it.
    #[test]
    fn pauses_are_jittered_within_half_to_all_of_the_step() {
        let b = Backoff::new(Duration::from_millis(50), Duration::from_secs(1));
        for n in 0..8 {
            let step = b.step(n);
            let pauses: Vec<Duration> = (0..1000).map(|_| b.pause(n)).collect();
            assert!(pauses.iter().all(|p| *p >= step / 2 && *p <= step), "{n}");
            let (lo, hi) = (pauses.iter().min().unwrap(), pauses.iter().max().unwrap());
            assert!(*hi - *lo > step * 2 / 5, "step {step:?}: {lo:?} ..= {hi:?}");
            let distinct: std::collections::BTreeSet<_> = pauses.iter().collect();
            assert!(distinct.len() > 990, "{} distinct of 1000", distinct.len());
        }
    }

    #[test]
    fn retries_move_on_and_start_over() {
        let mut r = Retries::new(Backoff::new(
            Duration::from_millis(10),
            Duration::from_secs(1),
        ));
        let first = r.next();
        assert!(first >= Duration::from_millis(5) && first <= Duration::from_millis(10));
        let second = r.next();
        assert!(second >= Duration::from_millis(10) && second <= Duration::from_millis(20));
        r.reset();
        assert!(r.next() <= Duration::from_millis(10));
        assert_eq!(jitter(Duration::ZERO), Duration::ZERO);
        assert_eq!(below(0), 0);
        assert!((0..100).all(|_| below(3) < 3));
    }
}
