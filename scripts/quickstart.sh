#!/usr/bin/env bash
# Turna's quick start: two demo backends on 127.0.0.1:9081/9082, `turna local` serving
# examples/local on 127.0.0.1:8080, and a request to each route through it.
#   scripts/quickstart.sh           keep serving until Ctrl-C
#   scripts/quickstart.sh --check   exit after the requests (non-zero if one fails)
set -euo pipefail
cd "$(dirname "$0")/.."

check=false
[ "${1:-}" = "--check" ] && check=true

work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT INT TERM

cargo build --quiet --bin turna
for name in one two; do
  mkdir -p "$work/$name/$name"
  echo "hello from backend $name" > "$work/$name/$name/index.html"
done
python3 -m http.server 9081 --bind 127.0.0.1 --directory "$work/one" >"$work/one.log" 2>&1 &
pids+=($!)
python3 -m http.server 9082 --bind 127.0.0.1 --directory "$work/two" >"$work/two.log" 2>&1 &
pids+=($!)
RUST_LOG=${RUST_LOG:-info} ./target/debug/turna local -f examples/local >"$work/turna.log" 2>&1 &
pids+=($!)

ready=false
for _ in $(seq 1 100); do
  if curl -fsS http://127.0.0.1:9901/ready >/dev/null 2>&1 \
    && curl -fsS -o /dev/null http://127.0.0.1:9081/one/ 2>/dev/null \
    && curl -fsS -o /dev/null http://127.0.0.1:9082/two/ 2>/dev/null; then
    ready=true
    break
  fi
  sleep 0.1
done
if ! $ready; then
  echo "turna local did not become ready; its log:" >&2
  cat "$work/turna.log" >&2
  exit 1
fi

passed=0
failed=0
for path in one two; do
  printf '$ curl http://127.0.0.1:8080/%s/\n' "$path"
  body=$(curl -fsS "http://127.0.0.1:8080/$path/" || true)
  echo "$body"
  if [ "$body" = "hello from backend $path" ]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
done
if $check; then
  echo "quickstart: $passed passed, $failed failed"
  [ "$failed" -eq 0 ]
  exit
fi
echo "Turna serves examples/local on http://127.0.0.1:8080 (health on :9901). Ctrl-C stops it."
wait
