#!/usr/bin/env bash
# Usage: bash scripts/with-redis.sh <command...>
#
# Makes sure `redis-server`, `redis-cli` and `redis-sentinel` are installed, then runs the command.
# The tests and the inventory example start their own throwaway redis-server on a
# random port; this script only installs the binary. It does not start a server.
#
# - redis present (or REDIS_SERVER_BIN points to an executable): silent, just runs the command.
# - missing, Debian/Ubuntu: apt-get install redis-server redis-tools redis-sentinel (sudo if not root).
# - missing, macOS with Homebrew: brew install redis.
# - otherwise: explains what to install and exits with status 127.
set -euo pipefail

have() { command -v "$1" >/dev/null 2>&1; }

redis_present() {
    if [[ -n "${REDIS_SERVER_BIN:-}" && -x "${REDIS_SERVER_BIN}" ]]; then
        return 0
    fi
    have redis-server && have redis-cli && have redis-sentinel
}

install_redis() {
    echo "with-redis: redis-server not found on PATH; installing it" >&2
    if have apt-get; then
        local sudo=()
        if [[ "$(id -u)" -ne 0 ]]; then
            if have sudo; then
                sudo=(sudo)
            else
                echo "with-redis: not root and sudo is missing; as root run:" >&2
                echo "    apt-get update && apt-get install -y redis-server redis-tools redis-sentinel" >&2
                exit 127
            fi
        fi
        # No prompts (CI has no stdin); the Debian package may try to start a system
        # service, which is harmless: the tests and the example run their own servers.
        ${sudo[@]+"${sudo[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get update -qq
        ${sudo[@]+"${sudo[@]}"} env DEBIAN_FRONTEND=noninteractive \
            apt-get install -y -qq --no-install-recommends redis-server redis-tools redis-sentinel >/dev/null
    elif have brew; then
        brew install redis
    else
        echo "with-redis: cannot install redis automatically (no apt-get or brew)." >&2
        echo "    Install redis-server >= 6.2 yourself, or set REDIS_SERVER_BIN=/path/to/redis-server." >&2
        exit 127
    fi
    hash -r
    if ! have redis-server; then
        echo "with-redis: installation finished but redis-server is still not on PATH" >&2
        exit 127
    fi
    echo "with-redis: $(redis-server --version)" >&2
}

if [[ $# -eq 0 ]]; then
    echo "usage: bash scripts/with-redis.sh <command...>" >&2
    exit 2
fi

redis_present || install_redis
exec "$@"
