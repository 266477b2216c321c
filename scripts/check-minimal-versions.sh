#!/usr/bin/env bash
# Usage: bash scripts/check-minimal-versions.sh
#
# Checks that the dependency minimums in Cargo.toml are enough: resolves every direct
# dependency to the lowest version Cargo.toml allows (nightly's -Z direct-minimal-versions)
# in a scratch copy of the crate, then builds the library (with the optional `metrics`
# facade) against that. Needs a nightly
# toolchain; without one it says so and exits 0 (the check is skipped, not failed).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
if ! cargo +nightly --version >/dev/null 2>&1; then
    echo "check-minimal-versions: no nightly toolchain; skipped" >&2
    exit 0
fi
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
# The crate's files as committed or changed in the work tree (not target/).
git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf - | tar -xf - -C "$scratch"
cd "$scratch"
# Only the published crates' minimums matter. The bench (not published) also builds other
# lock crates for comparison, whose own minimums (tokio, futures) are above ours and would
# make the resolution fail; it leaves the scratch workspace, as do the soak and chaos
# programs (stress/, not published) and the protocol model (not published either:
# stateright asks for a newer dashmap than the library's minimum).
sed -i -E '/^members = /{s/"bench", ?//;s/"stress", ?//;s/, ?"model"//;s/"model", ?//}' Cargo.toml
if grep -q -E '^members = .*"(bench|stress|model)"' Cargo.toml; then
    echo "check-minimal-versions: could not drop the bench, stress and model crates from the workspace members" >&2
    exit 1
fi
rm -rf bench stress model
cargo +nightly update -Z direct-minimal-versions
echo "check-minimal-versions: resolved"
for dep in redis tokio tokio-util futures uuid dashmap tracing metrics; do
    printf '  %-10s %s\n' "$dep" "$(cargo +nightly pkgid "$dep" 2>/dev/null | sed 's/.*[@#]//')"
done
CARGO_TARGET_DIR="${MINIMAL_VERSIONS_TARGET_DIR:-$scratch/target}" cargo +nightly check --features metrics,serde --lib
echo "check-minimal-versions: the library builds with the minimum versions"
