#!/usr/bin/env bash
# Records the functions `turna` runs to start and to proxy requests, in the order callgrind
# first saw them, into operator/layout/functions.txt: build.rs places them at the start of
# .text (see there why). Run it again (`make layout-record`) when the start-up or the request
# path changes much; a stale list only places fewer of the right functions together, it never
# breaks a build. Needs valgrind, curl and python3; about 15 minutes on 2 cores (two builds).
#
# What runs, each built without the current list (TURNA_LAYOUT=off):
# 1. `turna local` (release build) serving examples/local on port 28080 (two python backends
#    on 9081 and 9082), HTTP/1.1 and h2c requests to both routes, then a graceful stop;
# 2. the same release `turna` as `turna proxy`, as a proxy pod runs it, pushed its IR by a
#    controller against the e2e kube-apiserver and serving the convergence benchmark's requests
#    (`make bench-operator` at 1 route: TURNA_BENCH_PROXY_BINARY and _PREFIX);
# 3. the same with the benchmark's own (bench-profile) build, which inlines differently, so
#    that `make bench-operator` measures the layout too.
# The names keep their legacy-mangling hash, which tells apart the copies of a generic
# function; it changes with the build profile and the toolchain, so build.rs also places every
# copy of each listed function after the exact ones (for the builds the list does not match).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT="$ROOT/operator/layout/functions.txt"
WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT
command -v valgrind >/dev/null || { echo "record.sh: needs valgrind (apt install valgrind)" >&2; exit 1; }
export TURNA_LAYOUT=off
cd "$ROOT"

# 1. turna local. Built as the shipped binary is (`make release-pgo`, the Dockerfile): `-p
# turna-operator`. A workspace build enables more features of shared dependencies (the e2e
# crates' tokio `full`), which gives every crate after them other hashes.
cargo build --release -p turna-operator --bin turna >&2
cp target/release/turna "$WORK/turna-release"
for port in 9081 9082; do
  mkdir -p "$WORK/$port/one" "$WORK/$port/two"
  echo "backend $port" > "$WORK/$port/one/index.html"
  echo "backend $port" > "$WORK/$port/two/index.html"
  python3 -m http.server --bind 127.0.0.1 --directory "$WORK/$port" "$port" >/dev/null 2>&1 &
  PIDS+=($!)
done
valgrind --tool=callgrind --demangle=no --callgrind-out-file="$WORK/local.out" \
  "$WORK/turna-release" local -f examples/local --port-offset 20000 2>"$WORK/turna.log" &
turna=$!
PIDS+=("$turna")
ready=false
for _ in $(seq 600); do
  curl -fs -o /dev/null http://127.0.0.1:28080/one/ && ready=true && break
  sleep 0.1
done
$ready || { echo "record.sh: turna local did not serve within 60 s; its log:" >&2; cat "$WORK/turna.log" >&2; exit 1; }
for path in /one/ /two/ /none; do
  curl -s -o /dev/null "http://127.0.0.1:28080$path"
  curl -s -o /dev/null --http2-prior-knowledge "http://127.0.0.1:28080$path"
done
kill -INT "$turna"
wait "$turna" || true

# 2 and 3. turna proxy, release then bench profile. The benchmark kills its proxy at the
# end, so callgrind dumps every second.
cargo bench -p turna-operator --bench convergence --no-run >&2
cp target/release/turna "$WORK/turna-bench"
bench=$(ls -t target/release/deps/convergence-* | grep -v '\.d$' | head -1)
(while sleep 1; do callgrind_control -d >/dev/null 2>&1 || true; done) &
PIDS+=($!)
for build in release bench; do
  TURNA_BENCH_ROUTES=1 TURNA_BENCH_SAMPLES=5 TURNA_BENCH_PROXY_BINARY="$WORK/turna-$build" \
    TURNA_BENCH_PROXY_PREFIX="valgrind --tool=callgrind --demangle=no --callgrind-out-file=$WORK/proxy-$build.out" \
    "$bench" >&2
done

python3 - "$OUT" "$WORK" <<'PY'
import glob, re, subprocess, sys
out, work = sys.argv[1:]

def ours(binary):
    names = set()
    for line in subprocess.run(['nm', '--defined-only', binary], capture_output=True, text=True, check=True).stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in 'tTwW':
            names.add(parts[2])
    return names

listed, seen = [], set()
# The proxy's first: a cluster runs one per Gateway (or per node), `turna local` runs once, and
# the functions only `turna local` runs (translation, file watching) would otherwise sit among
# the proxy's and keep their pages resident in every proxy.
steps = (
    ('turna-release', sorted(glob.glob(f'{work}/proxy-release.out*'))),
    ('turna-bench', sorted(glob.glob(f'{work}/proxy-bench.out*'))),
    ('turna-release', [f'{work}/local.out']),
)
for binary, profiles in steps:
    known = ours(f'{work}/{binary}')
    for profile in profiles:
        names = {}
        for line in open(profile):
            m = re.match(r'^(c?fn)=\((\d+)\)(?: (.*))?$', line.rstrip('\n'))
            if not m:
                continue
            if m.group(3):
                names[m.group(2)] = m.group(3)
            if m.group(1) != 'fn' or names[m.group(2)] not in known:
                continue  # libc's and the loader's
            name = re.sub(r'\.llvm\.\d+$', '', names[m.group(2)])
            if name not in seen:
                seen.add(name)
                listed.append(name)
with open(out, 'w') as f:
    f.write('\n'.join(listed) + '\n')
print(f"record.sh: {len(listed)} functions in {out}", file=sys.stderr)
PY
