//! The history checker itself (`lockwise_testkit::checker`): it finds a synthetic overlap, a token
//! regression, a stale write, a hold count and a TTL rise, round-trips its text form, and its
//! clock is the host's monotonic clock shared by every process.

use std::time::Duration;

use crate::checker::{self, Acquisition, History, Op, TtlSample};

fn acq(
    id: &str,
    client: &str,
    owner: &str,
    invoke: u64,
    acquired: u64,
    released: u64,
) -> Acquisition {
    Acquisition {
        id: id.to_string(),
        client: client.to_string(),
        lock: "L".to_string(),
        owner: owner.to_string(),
        op: Op::Ok,
        invoke,
        acquired: Some(acquired),
        released: Some(released),
        validity: None,
        token: None,
        note: String::new(),
    }
}

#[test]
fn checker_detects_a_synthetic_overlap() {
    let h = History::new();
    h.record(acq("a", "p1", "o1", 0, 10, 100));
    h.record(acq("b", "p2", "o2", 50, 100, 200)); // starts exactly at the release: fine
    checker::assert_clean(&h.check());

    h.record(acq("c", "p3", "o3", 150, 190, 300)); // overlaps b by 10 ns
    let v = h.check_overlaps();
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].check, "overlap");
    assert!(
        v[0].message.contains("p2") && v[0].message.contains("p3"),
        "{}",
        v[0]
    );

    // Re-entry by the same owner is not an overlap.
    let h = History::new();
    h.record(acq("a", "p1", "o1", 0, 10, 100));
    h.record(acq("b", "p1", "o1", 20, 30, 40));
    assert!(h.check_overlaps().is_empty());

    // A lease bounds the interval: a holder stalled past its lease does not count after it.
    let h = History::new();
    let mut a = acq("a", "p1", "o1", 0, 10, 5_000);
    a.validity = Some(1_000);
    h.record(a);
    h.record(acq("b", "p2", "o2", 900, 1_000, 2_000));
    assert!(h.check_overlaps().is_empty());
    // Failed and unknown attempts never count.
    let mut f = acq("f", "p3", "o3", 1_100, 1_200, 1_300);
    f.op = Op::Unknown;
    h.record(f);
    assert!(h.check_overlaps().is_empty());
}

#[test]
fn checker_detects_a_token_regression_and_a_stale_write() {
    let h = History::new();
    let mut a = acq("a", "p1", "o1", 0, 10, 100);
    a.token = Some(5);
    let mut b = acq("b", "p2", "o2", 50, 110, 200);
    b.token = Some(6);
    h.record(a);
    h.record(b);
    assert!(h.check_tokens().is_empty());
    let mut c = acq("c", "p3", "o3", 150, 210, 300);
    c.token = Some(6); // not above b's
    h.record(c);
    let v = h.check_tokens();
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(v[0].message.contains("token 6"), "{}", v[0]);

    // Re-entry keeps the token.
    let h = History::new();
    let mut a = acq("a", "p1", "o1", 0, 10, 100);
    a.token = Some(5);
    let mut r = acq("r", "p1", "o1", 20, 30, 40);
    r.token = Some(5);
    h.record(a);
    h.record(r);
    assert!(h.check_tokens().is_empty());

    // Fenced writes: token 7 accepted, then token 6 accepted = stale write.
    let h = History::new();
    h.write("p2", "res", 7, checker::now_ns(), Some(true));
    h.write("p1", "res", 6, checker::now_ns(), Some(false));
    h.write("p2", "res", 7, checker::now_ns(), Some(true));
    assert!(h.check_stale_writes().is_empty());
    h.write("p1", "res", 6, checker::now_ns(), Some(true));
    let v = h.check_stale_writes();
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].check, "stale-write");
}

#[test]
fn checker_detects_hold_count_and_ttl_rise_and_round_trips_text() {
    let h = History::new();
    let mut a = acq("a", "p1", "o1", 0, 10, 100);
    a.token = Some(3);
    a.validity = Some(1_000_000_000);
    a.note = "some note with spaces".into();
    h.record(a);
    h.hold_sample(checker::HoldSample {
        lock: "L".into(),
        owner: "o1".into(),
        at: 50,
        count: 1,
    });
    let ttl = |at, pttl| TtlSample {
        lock: "L".into(),
        at,
        pttl,
        holders: "o1".into(),
    };
    h.ttl_sample(ttl(50, 900)); // while held: renewal is fine
    h.ttl_sample(ttl(60, 1000));
    assert!(h.check().is_empty(), "{:?}", h.check());
    h.ttl_sample(ttl(200, 500)); // after release at 100
    h.ttl_sample(ttl(300, 800)); // rose: a renewal after release
    h.hold_sample(checker::HoldSample {
        lock: "L".into(),
        owner: "o1".into(),
        at: 300,
        count: -1,
    });
    let v = h.check();
    assert_eq!(v.len(), 2, "{v:?}");
    assert!(v.iter().any(|v| v.check == "ttl-rise"));
    assert!(v.iter().any(|v| v.check == "hold-count"));
    let panicked = std::panic::catch_unwind(|| checker::assert_clean(&v));
    assert!(panicked.is_err());

    // Text round trip, with chatter around the lines; a later line for an id replaces it.
    let h2 = History::new();
    let text = format!("running 1 test\ntest child ... {}test ok\n", h.to_text());
    assert_eq!(h2.merge_text(&text), 7);
    assert_eq!(h2.acquisitions().len(), 1);
    assert_eq!(h2.acquisitions()[0].token, Some(3));
    assert_eq!(h2.acquisitions()[0].note, "some_note_with_spaces");
    assert_eq!(h2.check().len(), 2);
    let id = h.invoke("p9", "M");
    h2.merge_text(&h.line_of(&id));
    h.ok(&id, "o9", Some(4), None);
    h2.merge_text(&h.line_of(&id));
    let got: Vec<_> = h2
        .acquisitions()
        .into_iter()
        .filter(|a| a.lock == "M")
        .collect();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].op, Op::Ok);
    assert_eq!(got[0].token, Some(4));
}

#[test]
fn checker_clock_is_the_hosts_monotonic_clock() {
    assert!(
        checker::clock_is_monotonic(),
        "Instant is not CLOCK_MONOTONIC here"
    );
    let i = std::time::Instant::now();
    let a = checker::ns_of(i);
    std::thread::sleep(Duration::from_millis(20));
    let b = checker::now_ns();
    let d = b - a;
    assert!((20_000_000..2_000_000_000).contains(&d), "{d}");
}
