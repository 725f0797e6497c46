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
