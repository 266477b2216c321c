#!/usr/bin/env bash
# Usage: bash scripts/check-msrv.sh
#
# Builds the workspace (the library, the CLI, the testkit, the bench programs, tests,
# examples; with the `metrics` feature,
# so its test and example build too) with the toolchain named by
# `rust-version` in Cargo.toml. Dependencies are resolved the way a user on that toolchain gets them (Cargo's
# MSRV-aware resolver: the newest versions that support it), in a scratch copy, so the
# repository's Cargo.lock, which tracks the newest versions, stays as it is.
# Installs the toolchain with rustup if it is missing.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
msrv=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml)
if ! rustup run "$msrv" rustc --version >/dev/null 2>&1; then
    rustup toolchain install "$msrv" --profile minimal
fi
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf - | tar -xf - -C "$scratch"
cd "$scratch"
CARGO_RESOLVER_INCOMPATIBLE_RUST_VERSIONS=fallback cargo "+$msrv" update
CARGO_TARGET_DIR="${MSRV_TARGET_DIR:-$scratch/target}" cargo "+$msrv" check --workspace --lib --bins --tests --examples --features metrics
echo "check-msrv: builds with rustc $msrv"
