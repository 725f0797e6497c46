#!/usr/bin/env bash
# The test suite: makes sure a Kafka-protocol broker (tansu) is installed for
# the Kafka tests, then runs `cargo test --workspace` (extra args go to cargo).
# Each Kafka test starts its own broker on a free 127.0.0.1 port.
set -euo pipefail
cd "$(dirname "$0")/.."

TANSU_VERSION=0.6.0
TANSU_ROOT="${CAUSEWAY_TANSU_ROOT:-${HOME:-/root}/.cache/tansu}"
if [[ -z "${CAUSEWAY_TANSU:-}" ]]; then
  if [[ -x "$TANSU_ROOT/bin/tansu" ]] && "$TANSU_ROOT/bin/tansu" --version 2>/dev/null | grep -q "$TANSU_VERSION"; then
    :
  elif command -v tansu >/dev/null && tansu --version 2>/dev/null | grep -q "$TANSU_VERSION"; then
    TANSU_ROOT="$(dirname "$(dirname "$(command -v tansu)")")"
  else
    echo "== installing the tansu broker $TANSU_VERSION to $TANSU_ROOT (once; long)"
    # Its own target directory, so the workspace build cache is not disturbed.
    CARGO_TARGET_DIR="$TANSU_ROOT/target" cargo install tansu --version "$TANSU_VERSION" \
      --features dynostore,libsql --locked --root "$TANSU_ROOT"
    rm -rf "$TANSU_ROOT/target"
  fi
  export CAUSEWAY_TANSU="$TANSU_ROOT/bin/tansu"
fi
echo "== broker: $CAUSEWAY_TANSU ($("$CAUSEWAY_TANSU" --version 2>/dev/null || echo '?'))"

cargo test --workspace "$@"
