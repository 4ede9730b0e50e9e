#!/usr/bin/env bash
# Bounded cargo-fuzz runs of every fuzz target (not part of `make test`): FUZZ_SECONDS per
# target (default 60); FUZZ_TARGETS picks some (names as below). Installs a nightly toolchain
# and cargo-fuzz when missing. Both fuzz crates build into target/fuzz/build of the project;
# the working corpus and crash artifacts live in target/fuzz too, the corpus seeded from each
# crate's seeds/<target>. A crash fails the run; the stats of each run are in its log,
# target/fuzz/logs/<target>.log.
set -euo pipefail

SECONDS_PER_TARGET=${FUZZ_SECONDS:-60}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=$ROOT/target/fuzz

# target -> fuzz crate
declare -A CRATES=(
  [translate]=translator/fuzz
  [ir_validation]=dataplane/fuzz
  [client_hello]=dataplane/fuzz
  [http_front]=dataplane/fuzz
)
TARGETS=${FUZZ_TARGETS:-translate ir_validation client_hello http_front}

# cargo-fuzz needs a nightly toolchain (sanitizer flags); installed when missing.
if ! rustup toolchain list | grep -q '^nightly'; then
  echo "installing the nightly toolchain for cargo-fuzz" >&2
  rustup toolchain install nightly --profile minimal >&2
fi
command -v cargo-fuzz >/dev/null || cargo install --locked cargo-fuzz >&2

mkdir -p "$OUT/logs"
for target in $TARGETS; do
  crate=${CRATES[$target]:-}
  if [ -z "$crate" ]; then
    echo "unknown fuzz target $target (known: ${!CRATES[*]})" >&2
    exit 1
  fi
  corpus=$OUT/corpus/$target
  mkdir -p "$corpus" "$OUT/artifacts/$target"
  cp -n "$ROOT/$crate/seeds/$target"/* "$corpus"/ 2>/dev/null || true
  echo "fuzzing $target for ${SECONDS_PER_TARGET}s" >&2
  log=$OUT/logs/$target.log
  if ! (cd "$ROOT/$crate" && nice cargo +nightly fuzz run --target-dir "$OUT/build" "$target" "$corpus" -- \
    -max_total_time="$SECONDS_PER_TARGET" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$OUT/artifacts/$target/") >"$log" 2>&1; then
    tail -n 80 "$log" >&2
    echo "fuzz target $target failed: $log, inputs in $OUT/artifacts/$target/" >&2
    exit 1
  fi
  grep -E '^(Done |stat::)' "$log" >&2 || true
done
