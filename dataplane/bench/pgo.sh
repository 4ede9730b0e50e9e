#!/usr/bin/env bash
# Profile-guided build of the proxy. The serve example is built instrumented and run through
# the benchmark's job (HTTP/1.1 with 1 and 64 connections, h2c with 16x8 streams, each
# TRAIN_SECONDS, default 4), its profile is merged into target/pgo/proxy.profdata, and the
# binary named by the arguments (cargo build arguments; default the serve example) is built
# with it in target/pgo-use. Prints that binary's path on stdout.
#
#   dataplane/bench/pgo.sh                                  # the proxy the benchmarks measure
#   dataplane/bench/pgo.sh -p turna-operator --bin turna    # the shipped binary (Dockerfile)
#
# The profile covers the proxy; code it does not run (the controller's) has no profile and is
# optimized as without one. Needs nginx (the backend), wrk and h2load (Debian nginx-light, wrk,
# nghttp2-client, installed when missing) and rustup's llvm-tools component (added when missing).
set -euo pipefail

TRAIN_SECONDS=${TRAIN_SECONDS:-4}
declare -A PACKAGE=([wrk]=wrk [h2load]=nghttp2-client [nginx]=nginx-light)
# The benchmarks' scratch folder, packages and body; the proxy is what this script builds.
TURNA_SERVE=built-here
# shellcheck source=setup.sh
source "$(dirname "$0")/setup.sh"
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
[ $# -gt 0 ] || set -- -p turna-dataplane --example serve
PROFDATA="$(rustc --print sysroot)/lib/rustlib/$(rustc -vV | awk '/^host:/ {print $2}')/bin/llvm-profdata"
[ -x "$PROFDATA" ] || rustup component add llvm-tools >&2

# 1. The instrumented proxy. (Same flags each time, so cargo rebuilds only what changed.)
RAW="$TARGET/pgo/raw"
RUSTFLAGS="-Cprofile-generate=$RAW" cargo build --release -p turna-dataplane --example serve \
  --manifest-path "$ROOT/Cargo.toml" --target-dir "$TARGET/pgo-generate" >&2

# 2. The job of run.sh through it, unless this instrumented build was trained already: a new
# profile makes cargo rebuild everything that uses it.
INSTRUMENTED="$TARGET/pgo-generate/release/examples/serve"
STAMP="$TARGET/pgo/proxy.profdata.source"
mkdir -p "$TARGET/pgo"
if [ -f "$TARGET/pgo/proxy.profdata" ] && [ "$(sha256sum < "$INSTRUMENTED")" = "$(cat "$STAMP" 2>/dev/null)" ]; then
  echo "pgo: the profile of this build is there already" >&2
else
  # One nginx backend serving 1 KiB.
  rm -rf "$RAW"
  sed -e "s|BENCH_DIR|$DIR|g" "$HERE/backend.conf" > "$DIR/backend.conf"
  nginx -c "$DIR/backend.conf" & PIDS+=($!)
  TOKIO_WORKER_THREADS=1 "$INSTRUMENTED" "$HERE/turna.yaml" 127.0.0.1 127.0.0.1:0 \
    2>"$DIR/serve.log" & PIDS+=($!)
  serve=$!
  for _ in $(seq 100); do
    (exec 3<>/dev/tcp/127.0.0.1/8083) 2>/dev/null && break
    sleep 0.1
  done
  wrk -t1 -c1 -d"${TRAIN_SECONDS}s" http://127.0.0.1:8083/ >&2
  wrk -t1 -c64 -d"${TRAIN_SECONDS}s" http://127.0.0.1:8083/ >&2
  h2load -c16 -m8 -D "$TRAIN_SECONDS" http://127.0.0.1:8083/ 2>/dev/null | grep -E '^(finished|requests)' >&2
  # The profile is written when the proxy exits.
  kill -INT "$serve"
  wait "$serve" || true
  "$PROFDATA" merge -o "$TARGET/pgo/proxy.profdata" "$RAW"
  sha256sum < "$INSTRUMENTED" > "$STAMP"
fi

# 3. The binary built with the profile.
RUSTFLAGS="-Cprofile-use=$TARGET/pgo/proxy.profdata" cargo build --release "$@" \
  --manifest-path "$ROOT/Cargo.toml" --target-dir "$TARGET/pgo-use" --message-format=json-render-diagnostics \
  | awk -F'"executable":"' 'NF > 1 { split($2, a, "\""); path = a[1] } END { print path }'
