//! Unit tests of the sentinel master: replies read, the trust window.

use std::time::Duration;

use redis::{RedisConnectionInfo, Value};

use super::master::Verdict;
use super::SentinelSettings;

fn reply(text: &str) -> Value {
    redis::parse_redis_value(text.as_bytes()).unwrap()
}

fn settings(check_ms: u64, response_ms: u64, watchdog_ms: u64) -> SentinelSettings {
    let ms = Duration::from_millis;
    SentinelSettings {
        sentinels: Vec::new(),
        master_name: "mymaster".into(),
        master: RedisConnectionInfo::default(),
        connect_timeout: ms(5000),
        response_timeout: ms(response_ms),
        check_interval: ms(check_ms),
        watchdog_timeout: ms(watchdog_ms),
    }
}

/// The trust window is two check intervals and a response timeout, at most a third of
/// the watchdog timeout; the follower checks twice per window when that is more often
/// than the check interval.
#[test]
fn trust_window_is_bounded_by_the_watchdog_timeout() {
    let ms = Duration::from_millis;
    // The defaults: 3 s, checks every second.
    let s = settings(1000, 1000, 30_000);
    assert_eq!((s.trust_window(), s.check_every()), (ms(3000), ms(1000)));
    // The tests' short timeouts.
    let s = settings(250, 250, 3000);
    assert_eq!((s.trust_window(), s.check_every()), (ms(750), ms(250)));
    let s = settings(250, 250, 1500);
    assert_eq!((s.trust_window(), s.check_every()), (ms(500), ms(250)));
    // A 1.2 s watchdog: one renewal period, checked twice in it.
    let s = settings(1000, 1000, 1200);
    assert_eq!((s.trust_window(), s.check_every()), (ms(400), ms(200)));
    // Never zero.
    let s = settings(1, 1, 1);
    assert!(s.trust_window() >= ms(1) && s.check_every() >= ms(1));
}

/// redis-rs hands a server error back as `Ok(Value::ServerError)` from
/// `req_packed_command`: `READONLY` must be seen there (it was not, and a demoted master
/// was never left), in a single command's reply and as a pipeline's first reply.
#[test]
fn readonly_replies_are_seen_where_redis_rs_returns_them() {
    let readonly = reply("-READONLY You can't write against a read only replica.\r\n");
    assert!(matches!(
        Verdict::of(&Ok(readonly.clone())),
        Verdict::Demoted
    ));
    assert!(matches!(Verdict::of(&Ok(reply(":1\r\n"))), Verdict::Fine));
    assert!(matches!(
        Verdict::of(&Ok(reply("-ERR other\r\n"))),
        Verdict::Fine
    ));
    let wait_refused = reply("-ERR WAIT cannot be used with replica instances.\r\n");
    // Script and WAIT both refused: nothing ran, so it may be sent again.
    let (v, nothing_ran) = Verdict::of_pipeline(&Ok(vec![readonly.clone(), wait_refused]));
    assert!(matches!(v, Verdict::Demoted) && nothing_ran);
    // Something ran: a check, but no second send.
    let (v, nothing_ran) = Verdict::of_pipeline(&Ok(vec![reply(":1\r\n"), readonly]));
    assert!(matches!(v, Verdict::Demoted) && !nothing_ran);
    let io = redis::RedisError::from(std::io::Error::new(
        std::io::ErrorKind::ConnectionReset,
        "reset",
    ));
    assert!(matches!(Verdict::of(&Err(io)), Verdict::Doubtful));
}
