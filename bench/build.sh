# Sourced by the benchmark scripts: builds the daemon and the load generator
# and names them.
#   CAUSEWAY_PROFILE=release (the default: `cargo run --release`'s build) or
#   dist (the Dockerfile's: thin LTO across crates, BENCHMARKS.md "Build
#   profiles" has what it is worth), or profiling (release with debug info).
# The load generator and sink are always `release`, so that only the daemon
# under test changes between profiles.
# Sets T (the target directory), PROFILE, DAEMON (the daemon's binary) and
# LG (the load generator's).
T=${CARGO_TARGET_DIR:-${HOME:-/root}/.cache/causeway-target}
export CARGO_TARGET_DIR=$T
PROFILE=${CAUSEWAY_PROFILE:-release}
cargo build --release -q -p causeway-loadgen
cargo build --profile "$PROFILE" -q -p causeway
DAEMON=$T/$PROFILE/causeway
LG=$T/release/loadgen

# A process's CPU time so far (user + system, in clock ticks).
cpu_ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }

# Wait (10 s at most) until 127.0.0.1:$1 accepts.
wait_port() {
  for _ in $(seq 1 200); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.05
  done
  echo "port $1 never opened" >&2; return 1
}
