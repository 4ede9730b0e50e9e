#!/usr/bin/env bash
# Bounded cargo-fuzz runs of the dataplane's fuzz targets (not part of `make test`):
# FUZZ_SECONDS per target (default 60). Needs a nightly toolchain; installs cargo-fuzz when
# missing. Builds into target/fuzz of the project; the working corpus and crash artifacts live
# there too, the corpus seeded from dataplane/fuzz/seeds. A crash fails the run.
set -euo pipefail

SECONDS_PER_TARGET=${FUZZ_SECONDS:-60}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUT=$ROOT/target/fuzz

if ! rustup toolchain list | grep -q '^nightly'; then
  echo "cargo-fuzz needs a nightly toolchain: rustup toolchain install nightly" >&2
  exit 1
fi
command -v cargo-fuzz >/dev/null || cargo install --locked cargo-fuzz >&2

cd "$HERE"
for target in ir_validation client_hello; do
  corpus=$OUT/corpus/$target
  mkdir -p "$corpus" "$OUT/artifacts/$target"
  cp -n "$HERE/seeds/$target"/* "$corpus"/
  echo "fuzzing $target for ${SECONDS_PER_TARGET}s" >&2
  nice cargo +nightly fuzz run --target-dir "$OUT/build" "$target" "$corpus" -- \
    -max_total_time="$SECONDS_PER_TARGET" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$OUT/artifacts/$target/"
done
