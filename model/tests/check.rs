//! The model checked in the test suite: today's code holds every property at
//! [`Bounds::QUICK`] (and two owners with one acquire each), and each fix, reverted, yields a
//! counterexample of the property it protects. The CI bounds run in release (`.ci/run`:
//! `cargo run --release -p lockwise-model`).

use lockwise_model::registry::Fixes;
use lockwise_model::{explain, Accounting, Bounds};
use stateright::{Checker, Model};

fn check(bounds: Bounds, fixes: Fixes) -> Vec<(&'static str, usize)> {
    let model = Accounting { bounds, fixes };
    let checker = model.checker().threads(2).spawn_bfs().join();
    eprintln!(
        "{fixes:?} at {bounds:?}: {} unique states",
        checker.unique_state_count()
    );
    model
        .properties()
        .iter()
        .filter_map(|p| {
            checker.discovery(p.name).map(|path| {
                let (text, steps) = explain(&model, p, &path);
                eprintln!("{}:\n{text}", p.name);
                (p.name, steps)
            })
        })
        .collect()
}

#[test]
fn todays_code_holds_every_property() {
    assert_eq!(check(Bounds::QUICK, Fixes::ALL), []);
    let two_owners = Bounds {
        owners: 2,
        acquires: 1,
        ..Bounds::QUICK
    };
    assert_eq!(check(two_owners, Fixes::ALL), []);
}

/// Each reverted fix and the property whose counterexample it must produce.
#[test]
fn each_fix_reverted_yields_a_counterexample() {
    let revert = |f: fn(&mut Fixes)| {
        let mut fixes = Fixes::ALL;
        f(&mut fixes);
        fixes
    };
    let cases: [(&str, Fixes, &str); 6] = [
        (
            "item 1: overlapping calls, 'any hold' releases, lost runs joined",
            revert(|f| {
                f.one_call = false;
                f.exact_count = false;
                f.new_run = false;
            }),
            "no two owners",
        ),
        (
            "item 1: a grant joins a lost run",
            revert(|f| f.new_run = false),
            "a new guard is not lost",
        ),
        (
            "item 2: a script resent after its reply was lost",
            revert(|f| f.no_resend = false),
            "a release takes only its own run's hold",
        ),
        (
            "item 3: an abandoned re-entry's grant adopted",
            revert(|f| f.abandoned_run_check = false),
            "a believing guard is backed",
        ),
        (
            "a settlement's verdict from a count read before the hand-over",
            revert(|f| f.verdict_after_handover = false),
            "unlock Ok only if the hold lasted",
        ),
        (
            "a timed-out re-entry that ran after a force unlock adopted",
            revert(|f| f.unverified_reentry = false),
            "a believing guard is backed",
        ),
    ];
    for (what, fixes, property) in cases {
        let found = check(Bounds::QUICK, fixes);
        let steps = found.iter().find(|f| f.0 == property).map(|f| f.1);
        eprintln!("{what}: {found:?}");
        assert!(
            steps.is_some(),
            "{what}: no counterexample of {property:?} (found {found:?})"
        );
    }
}
