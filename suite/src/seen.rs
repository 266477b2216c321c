//! What a `DebuggingRecorder` saw, by metric name and labels: the snapshot reader shared by
//! the metrics tests (`tests/metrics.rs`) and the Cluster metrics test
//! (`tests/deployments/observed.rs`).

use metrics_util::debugging::{DebugValue, Snapshotter};

/// What was recorded since the previous snapshot: counters and gauges summed, histogram
/// values listed, by metric name and labels.
pub struct Seen(pub Vec<Series>);

/// One series: metric name, labels, and what it recorded since the last snapshot.
pub type Series = (String, Labels, DebugValue);
/// A series' labels: (key, value) pairs.
pub type Labels = Vec<(String, String)>;

impl Seen {
    /// Drains `snapshotter`: what was recorded since its previous snapshot.
    pub fn of(snapshotter: &Snapshotter) -> Seen {
        Seen(
            snapshotter
                .snapshot()
                .into_vec()
                .into_iter()
                .map(|(key, _, _, value)| {
                    let (_, key) = key.into_parts();
                    let labels = key
                        .labels()
                        .map(|l| (l.key().to_string(), l.value().to_string()))
                        .collect();
                    (key.name().to_string(), labels, value)
                })
                .collect(),
        )
    }

    /// The values of the series named `name` that carry every label of `labels`.
    fn matching<'a>(
        &'a self,
        name: &'a str,
        labels: &'a [(&'a str, &'a str)],
    ) -> impl Iterator<Item = &'a DebugValue> + 'a {
        self.0
            .iter()
            .filter(move |(n, ls, _)| {
                n == name
                    && labels
                        .iter()
                        .all(|(k, v)| ls.iter().any(|(lk, lv)| lk == k && lv == v))
            })
            .map(|(_, _, v)| v)
    }

    /// The sum of a counter over the series with these labels.
    pub fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        self.matching(name, labels)
            .map(|v| match v {
                DebugValue::Counter(n) => *n,
                other => panic!("{name} is not a counter: {other:?}"),
            })
            .sum()
    }

    /// The change of a gauge over the series with these labels.
    pub fn gauge(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.matching(name, labels)
            .map(|v| match v {
                DebugValue::Gauge(g) => g.into_inner(),
                other => panic!("{name} is not a gauge: {other:?}"),
            })
            .sum()
    }

    /// The values recorded into a histogram over the series with these labels.
    pub fn histogram(&self, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
        self.matching(name, labels)
            .flat_map(|v| match v {
                DebugValue::Histogram(xs) => xs.iter().map(|x| x.into_inner()).collect::<Vec<_>>(),
                other => panic!("{name} is not a histogram: {other:?}"),
            })
            .collect()
    }

    /// The label sets of a histogram's series that recorded something since the last take.
    pub fn label_sets(&self, name: &str) -> Vec<Labels> {
        self.0
            .iter()
            .filter(|(n, _, v)| {
                n == name && matches!(v, DebugValue::Histogram(xs) if !xs.is_empty())
            })
            .map(|(_, ls, _)| ls.clone())
            .collect()
    }
}
