//! One clock for every process of the host, and signals to other processes: what the chaos
//! soak needs to compare timestamps across processes and to stop, resume and kill the
//! server and its workers.

use std::time::Duration;

use rustix::process::{kill_process, Pid, Signal};
use rustix::time::{clock_gettime, ClockId};

/// Nanoseconds of `CLOCK_MONOTONIC`. On Linux this clock is system-wide, so readings taken in
/// different processes of one host compare directly (unlike `Instant`, which cannot leave its
/// process). It does not jump with the wall clock, and keeps running while a process is
/// stopped.
pub fn now_ns() -> u64 {
    let t = clock_gettime(ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// `ns` (a difference of two [`now_ns`] readings) in milliseconds, for printing.
pub fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// A duration in nanoseconds of [`now_ns`].
pub fn ns(d: Duration) -> u64 {
    d.as_nanos() as u64
}

/// The signals the chaos soak sends (it kills with `Child::kill`).
#[derive(Clone, Copy, Debug)]
pub enum Sig {
    Stop,
    Cont,
}

/// Sends `sig` to the process `pid`.
pub fn signal(pid: u32, sig: Sig) -> std::io::Result<()> {
    let pid = i32::try_from(pid)
        .ok()
        .and_then(Pid::from_raw)
        .ok_or_else(|| std::io::Error::other(format!("bad pid {pid}")))?;
    let sig = match sig {
        Sig::Stop => Signal::STOP,
        Sig::Cont => Signal::CONT,
    };
    kill_process(pid, sig)?;
    Ok(())
}
