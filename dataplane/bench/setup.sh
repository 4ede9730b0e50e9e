# Sourced by run.sh, protocols.sh, syscalls.sh, callgrind.sh and pgo.sh, after they declare
# PACKAGE (tool -> Debian package; a key starting with / is a file the package installs, such as
# an nginx module): a scratch folder DIR removed on exit together with every process in PIDS
# (waited for, so their ports are free for the next script), the missing tools installed from
# their Debian packages, the serve example built (profile-guided by pgo.sh, as the shipped
# binary; PGO=0 for a plain release build; TURNA_SERVE names a prebuilt one, to compare builds),
# the 1 KiB body the backend serves, `render` (the configuration files), `listening` (waits for
# ports), `ticks`, a proxy's CPU time so far, and LOAD and PROXY, the core pinning of load
# generators and proxies.
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
DIR=$(mktemp -d)
chmod 755 "$DIR"
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$DIR"
}
trap cleanup EXIT

missing=()
for tool in "${!PACKAGE[@]}"; do
  if [[ $tool == /* ]]; then
    [ -e "$tool" ] || missing+=("${PACKAGE[$tool]}")
  else
    command -v "$tool" >/dev/null || missing+=("${PACKAGE[$tool]}")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=$([ "$(id -u)" = 0 ] || echo sudo)
  $SUDO apt-get update -qq >&2 && $SUDO apt-get install -y -qq "${missing[@]}" >&2
fi

if [ -z "${TURNA_SERVE:-}" ] && [ "${PGO:-1}" = 0 ]; then
  cargo build --release -p turna-dataplane --example serve --manifest-path "$ROOT/Cargo.toml" >&2
  TURNA_SERVE=${CARGO_TARGET_DIR:-$ROOT/target}/release/examples/serve
elif [ -z "${TURNA_SERVE:-}" ]; then
  TURNA_SERVE=$("$HERE/pgo.sh")
fi
head -c 1024 /dev/zero | tr '\0' x > "$DIR/body.txt"

# The bench's configuration files in DIR: BENCH_DIR replaced by DIR, THREADS by $1.
render() { # threads file...
  local threads=$1 f
  shift
  for f in "$@"; do
    sed -e "s|BENCH_DIR|$DIR|g" -e "s|THREADS|$threads|g" "$HERE/$f" > "$DIR/$f"
  done
}

# Waits until every TCP port listens on loopback (30 s each); else stops the script with the log
# $1 (the process that should have bound it).
listening() { # log port...
  local log=$1 port
  shift
  for port in "$@"; do
    for _ in $(seq 300); do
      (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && continue 2
      sleep 0.1
    done
    echo "$(basename "$0"): nothing listens on port $port; $log:" >&2
    cat "$log" >&2 || true
    exit 1
  done
}

# User + system clock ticks of proxy $1 of the caller's PROCESS (name -> pid): its process and
# its children (nginx's workers).
ticks() { # name
  local pid=${PROCESS[$1]} total=0 p
  for p in $pid $(pgrep -P "$pid" || true); do
    total=$((total + $(awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$p/stat" 2>/dev/null || echo 0)))
  done
  echo "$total"
}
# shellcheck disable=SC2034 # used by the scripts that source this one
HZ=$(getconf CLK_TCK)

# With two or more cores (PIN=1, the default there) the proxies run on core 1 and the load
# generators and backends on core 0: commands run through "${LOAD[@]}" or "${PROXY[@]}".
PIN=${PIN:-$([ "$(nproc)" -ge 2 ] && echo 1 || echo 0)}
# shellcheck disable=SC2034 # used by the scripts that source this one
LOAD=() PROXY=()
if [ "$PIN" = 1 ]; then LOAD=(taskset -c 0) PROXY=(taskset -c 1); fi
