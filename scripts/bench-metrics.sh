#!/usr/bin/env bash
# Usage: bash scripts/bench-metrics.sh [rounds (default 5)] [seconds per round (default 3)]
#
# What the `metrics` feature costs when no recorder is installed: builds the bench (release)
# without the feature and with it, then runs the uncontended workload (64 tasks, each
# lock() -> unlock() on its own lock; `bench --metrics-only`) from each build in turn, so
# drift on a shared machine hits both, and prints pairs/s per round and the ratio
# with / without. Each run starts its own throwaway redis-server (or uses REDIS_URL).
# What recording costs (Prometheus recorder on vs off) is workload 10 of the full bench:
# `cargo run --release --features metrics --example bench`.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
rounds="${1:-5}"
seconds="${2:-3}"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# Both builds write target/release/examples/bench: keep a copy of each.
cargo build -j 1 --release --example bench
cp target/release/examples/bench "$scratch/bench-off"
cargo build -j 1 --release --features metrics --example bench
cp target/release/examples/bench "$scratch/bench-on"

rate() { "$scratch/$1" --metrics-only --seconds "$seconds" | sed -n 's/^uncontended //p'; }

off=()
on=()
for ((i = 1; i <= rounds; i++)); do
    # Alternate which build goes first.
    if ((i % 2)); then
        a=$(rate bench-off); b=$(rate bench-on)
    else
        b=$(rate bench-on); a=$(rate bench-off)
    fi
    off+=("$a"); on+=("$b")
    printf 'round %d: without the feature %8s pairs/s, with it (no recorder) %8s pairs/s, ratio %s\n' \
        "$i" "$a" "$b" "$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", b / a }')"
done
awk -v off="${off[*]}" -v on="${on[*]}" 'BEGIN {
    n = split(off, o, " "); split(on, w, " ");
    for (i = 1; i <= n; i++) { so += o[i]; sw += w[i]; r = w[i] / o[i];
        if (i == 1 || r < lo) lo = r; if (i == 1 || r > hi) hi = r }
    printf "mean: without %.0f pairs/s, with %.0f pairs/s: ratio %.3f (rounds %.3f .. %.3f)\n",
        so / n, sw / n, sw / so, lo, hi
}'
