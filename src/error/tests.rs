//! The error type's classification: what is retryable, transient, or did not run.

use super::*;

fn server_error(reply: &str) -> Error {
    let value = redis::parse_redis_value(format!("-{reply}\r\n").as_bytes()).unwrap();
    Error::Redis(value.extract_error().unwrap_err())
}

#[test]
fn failover_states_are_retryable_and_data_errors_are_not() {
    for reply in [
        "TRYAGAIN Multiple keys request during rehashing of slot",
        "CLUSTERDOWN The cluster is down",
        "MOVED 3999 127.0.0.1:6381",
        "ASK 3999 127.0.0.1:6381",
        "READONLY You can't write against a read only replica.",
        "MASTERDOWN Link with MASTER is down",
        "LOADING Redis is loading the dataset in memory",
        "BUSY Redis is busy running a script",
        "OOM command not allowed when used memory > 'maxmemory'.",
    ] {
        assert!(server_error(reply).is_retryable(), "{reply}");
    }
    for reply in [
        "WRONGTYPE Operation against a key",
        "NOSCRIPT No matching script",
    ] {
        assert!(!server_error(reply).is_retryable(), "{reply}");
        assert!(!server_error(reply).is_transient(), "{reply}");
    }
    // What a waiting acquire and an unlock retry through: never OOM or BUSY (a full or
    // stuck server is not a failover), never a refused permission.
    for reply in [
        "MOVED 3999 127.0.0.1:6381",
        "CLUSTERDOWN down",
        "READONLY ro",
    ] {
        assert!(server_error(reply).did_not_run(), "{reply}");
        assert!(server_error(reply).is_transient(), "{reply}");
    }
    for reply in ["OOM full", "BUSY script", "NOPERM no"] {
        assert!(!server_error(reply).did_not_run(), "{reply}");
        assert!(!server_error(reply).is_transient(), "{reply}");
    }
}

#[test]
fn a_cluster_command_without_a_connection_did_not_run() {
    // redis-rs's Cluster client raises it before it writes anything: safe to send again.
    let e = Error::Redis(redis::RedisError::from((
        redis::ErrorKind::ClusterConnectionNotFound,
        "No connections found",
    )));
    assert!(
        e.did_not_run() && e.is_transient() && e.is_retryable(),
        "{e}"
    );
    // A dropped connection is not: the server may have run the command.
    let dropped = Error::Redis(redis::RedisError::from(std::io::Error::from(
        std::io::ErrorKind::ConnectionReset,
    )));
    assert!(!dropped.did_not_run(), "{dropped}");
    assert!(
        dropped.is_transient() && dropped.is_retryable(),
        "{dropped}"
    );
}
