//! Workload 10, metrics: what the `metrics` feature costs on the uncontended workload (2.: 64
//! tasks, each lock() -> unlock() on its own lock).
//!
//! Built with the feature, rounds with the Prometheus recorder recording alternate with
//! rounds where it discards everything (what the facade does when no recorder is installed:
//! a global recorder cannot be uninstalled, so one that can be switched off stands in), in
//! one run, and their ratio is printed. Built without it, the row says so. Whether the
//! feature costs anything when no recorder records is measured across two builds by
//! `scripts/bench-metrics.sh`, which runs `bench --metrics-only` from each.

use serde_json::{json, Value as Json};

use super::BoxError;

/// `--metrics-only`: the uncontended workload, `rounds` rounds, one line per round:
/// `uncontended <pairs/s> <client CPU µs per pair>` (this process's user + system time:
/// less sensitive than throughput to other load on the machine), for
/// `scripts/bench-metrics.sh`.
pub(crate) async fn only(url: &str, seconds: f64, rounds: usize) -> Result<(), BoxError> {
    for _ in 0..rounds {
        let cpu = super::cpu_seconds();
        let rate = super::uncontended(url, seconds).await?;
        let cpu_us = (super::cpu_seconds() - cpu) * 1e6 / (rate.rate * seconds);
        println!("uncontended {:.0} {cpu_us:.2}", rate.rate);
    }
    Ok(())
}

#[cfg(not(feature = "metrics"))]
pub(crate) async fn run(_url: &str, _seconds: f64) -> Result<Json, BoxError> {
    println!("metrics                  (built without the `metrics` feature: skipped)");
    Ok(json!(null))
}

#[cfg(feature = "metrics")]
pub(crate) async fn run(url: &str, seconds: f64) -> Result<Json, BoxError> {
    use std::sync::atomic::Ordering;

    let switch = switch::install()?;
    let (mut off, mut on) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        switch.store(false, Ordering::SeqCst);
        off.push(super::uncontended(url, seconds).await?.rate);
        switch.store(true, Ordering::SeqCst);
        on.push(super::uncontended(url, seconds).await?.rate);
    }
    switch.store(false, Ordering::SeqCst);
    let ratios: Vec<f64> = on.iter().zip(&off).map(|(a, b)| a / b).collect();
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let (lo, hi) = ratios
        .iter()
        .fold((f64::MAX, f64::MIN), |(lo, hi), r| (lo.min(*r), hi.max(*r)));
    println!(
        "metrics (Prometheus)     {:>9.0} pairs/s recording vs {:.0} discarding: ratio {:.3} \
         (rounds {lo:.3} .. {hi:.3})",
        mean(&on),
        mean(&off),
        mean(&on) / mean(&off)
    );
    Ok(json!({
        "recording_pairs_per_s": on, "discarding_pairs_per_s": off,
        "ratio": mean(&on) / mean(&off), "round_ratios": ratios,
    }))
}

/// A global recorder that forwards to the Prometheus exporter while switched on and
/// discards everything otherwise.
#[cfg(feature = "metrics")]
mod switch {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    use metrics::{
        Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit,
    };
    use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusRecorder};

    use super::BoxError;

    struct Switch {
        on: Arc<AtomicBool>,
        inner: PrometheusRecorder,
    }

    pub(super) fn install() -> Result<Arc<AtomicBool>, BoxError> {
        let on = Arc::new(AtomicBool::new(false));
        let inner = PrometheusBuilder::new()
            .set_buckets_for_metric(
                Matcher::Full(lockwise::metric_names::ACQUIRE_WAIT_SECONDS.into()),
                &[
                    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                ],
            )?
            .build_recorder();
        // Histogram samples pile up until upkeep drains them into the buckets.
        let handle = inner.handle();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                handle.run_upkeep();
            }
        });
        metrics::set_global_recorder(Switch {
            on: on.clone(),
            inner,
        })
        .map_err(|_| "a recorder was installed already")?;
        Ok(on)
    }

    impl Recorder for Switch {
        fn describe_counter(&self, key: KeyName, unit: Option<Unit>, text: SharedString) {
            self.inner.describe_counter(key, unit, text)
        }
        fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, text: SharedString) {
            self.inner.describe_gauge(key, unit, text)
        }
        fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, text: SharedString) {
            self.inner.describe_histogram(key, unit, text)
        }
        fn register_counter(&self, key: &Key, meta: &Metadata<'_>) -> Counter {
            match self.on.load(Ordering::Relaxed) {
                true => self.inner.register_counter(key, meta),
                false => Counter::noop(),
            }
        }
        fn register_gauge(&self, key: &Key, meta: &Metadata<'_>) -> Gauge {
            match self.on.load(Ordering::Relaxed) {
                true => self.inner.register_gauge(key, meta),
                false => Gauge::noop(),
            }
        }
        fn register_histogram(&self, key: &Key, meta: &Metadata<'_>) -> Histogram {
            match self.on.load(Ordering::Relaxed) {
                true => self.inner.register_histogram(key, meta),
                false => Histogram::noop(),
            }
        }
    }
}
