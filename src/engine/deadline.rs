//! How long a key surely lives after a call that set its TTL: the loss deadline of a hold,
//! with a safety margin for clock drift and scheduling delays.

use std::time::Duration;

use tokio::time::Instant;

/// Safety margin of the loss deadline: clock-rate differences between client and server (as
/// Redlock's drift: 1 % of the TTL + 2 ms), but at least 100 ms (capped at a tenth of the
/// TTL) for scheduling delays: on a loaded 2-core machine the watchdog task and the holder's
/// own task ran up to ~40 ms late, and a holder told 4 ms after the lock expired during a
/// cluster failover overlapped the next owner (tests/deployments/).
fn drift(timeout: Duration) -> Duration {
    let clock = timeout / 100 + Duration::from_millis(2);
    clock.max((timeout / 10).min(Duration::from_millis(100)))
}

/// The moment a key whose TTL was set to `ttl` by a call sent at `sent` surely still lives.
pub(crate) fn safe_until(sent: Instant, ttl: Duration) -> Instant {
    sent + ttl.saturating_sub(drift(ttl))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loss_margin_covers_clock_drift_and_scheduling() {
        let ms = Duration::from_millis;
        assert_eq!(drift(Duration::from_secs(30)), ms(302)); // 1 % + 2 ms
        assert_eq!(drift(Duration::from_secs(3)), ms(100)); // scheduling floor
        assert_eq!(drift(Duration::from_secs(1)), ms(100));
        assert_eq!(drift(ms(100)), ms(10)); // a tenth of a tiny TTL
    }
}
