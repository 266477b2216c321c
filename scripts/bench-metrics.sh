#!/usr/bin/env bash
# Usage: bash scripts/bench-metrics.sh [rounds (default 5)] [seconds per round (default 3)]
#
# What the `metrics` feature costs when no recorder is installed: builds the bench (release)
# without the feature and with it, then runs the uncontended workload (64 tasks, each
# lock() -> unlock() on its own lock; `bench --metrics-only`) from each build in turn (the
# order alternates, so drift on a shared machine hits both), and prints per round the
# pairs/s and the client's CPU time per pair of each, and the ratios with / without (CPU
# per pair is the steadier figure when other work shares the cores). Each run starts its
# own throwaway redis-server (or uses REDIS_URL). What recording costs (Prometheus
# recorder on vs off) is workload 10 of the full bench:
# `cargo run --release -p lockwise-bench --features metrics --bin bench`.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
rounds="${1:-5}"
seconds="${2:-3}"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# Both builds write target/release/bench: keep a copy of each.
cargo build -j 1 --release -p lockwise-bench --bin bench
cp target/release/bench "$scratch/bench-off"
cargo build -j 1 --release -p lockwise-bench --features metrics --bin bench
cp target/release/bench "$scratch/bench-on"

# "<pairs/s> <cpu µs per pair>"
run() { "$scratch/$1" --metrics-only --seconds "$seconds" | sed -n 's/^uncontended //p'; }

results=()
for ((i = 1; i <= rounds; i++)); do
    if ((i % 2)); then
        off=$(run bench-off); on=$(run bench-on)
    else
        on=$(run bench-on); off=$(run bench-off)
    fi
    results+=("$off $on")
    echo "$i $off $on" | awk '{ printf "round %d: without the feature %6.0f pairs/s %6.2f µs CPU/pair; with it (no recorder) %6.0f pairs/s %6.2f µs CPU/pair; ratios: throughput %.3f, CPU/pair %.3f\n", $1, $2, $3, $4, $5, $4 / $2, $5 / $3 }'
done
printf '%s\n' "${results[@]}" | awk '{
    n++; r = $3 / $1; c = $4 / $2; so += $1; sw += $3; co += $2; cw += $4;
    if (n == 1 || r < rlo) rlo = r; if (n == 1 || r > rhi) rhi = r;
    if (n == 1 || c < clo) clo = c; if (n == 1 || c > chi) chi = c }
END {
    printf "mean of %d rounds: throughput without %.0f, with %.0f pairs/s: ratio %.3f (rounds %.3f .. %.3f)\n", n, so / n, sw / n, sw / so, rlo, rhi
    printf "                   CPU per pair without %.2f, with %.2f µs: ratio %.3f (rounds %.3f .. %.3f)\n", co / n, cw / n, cw / co, clo, chi
}'
