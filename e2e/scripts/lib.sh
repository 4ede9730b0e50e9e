# Shared settings for the e2e scripts. Source it; do not run it.
# shellcheck shell=bash disable=SC2034  # variables for the scripts that source this
#
# The e2e Go modules (the conformance driver) need Go 1.27 (sigs.k8s.io/gateway-api v1.7.0);
# the tools module itself builds with Go 1.26, but one toolchain everywhere keeps the build
# cache shared. The machine's go env says GOTOOLCHAIN=local, so set it explicitly (the Go
# module proxy serves the toolchain); TURNA_GOTOOLCHAIN overrides.
export GOTOOLCHAIN="${TURNA_GOTOOLCHAIN:-go1.27.3}"
export GOFLAGS="${GOFLAGS:--buildvcs=false}"

E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS_MOD_DIR="$E2E_DIR/tools"

# The Kubernetes version, read from e2e/tools/go.mod (no network, no go command needed).
K8S_VERSION="${K8S_VERSION:-$(awk '$1=="k8s.io/kubernetes" && $2 ~ /^v/ {print $2; exit}' "$TOOLS_MOD_DIR/go.mod")}"
ETCD_VERSION="$(awk '{for (i = 1; i < NF; i++) if ($i == "go.etcd.io/etcd/server/v3") {print $(i+1); exit}}' "$TOOLS_MOD_DIR/go.mod")"
GATEWAY_API_VERSION="${GATEWAY_API_VERSION:-v1.7.0}"

# Binaries live outside git, keyed by Kubernetes version, so every clone on this machine shares them.
TURNA_TOOLS_DIR="${TURNA_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/turna/tools/$K8S_VERSION}"
TOOLS_BIN="$TURNA_TOOLS_DIR/bin"

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# ---- background processes: started detached, found again without races or pid reuse ----
# A pid file holds "<pid> <start time>": the kernel's start time (clock ticks since boot) tells
# the recorded process from a later one that reused its pid.

# proc_start_time PID: the start time of PID; fails when PID does not exist.
proc_start_time() {
	local stat
	stat="$(cat "/proc/$1/stat" 2> /dev/null)" || return 1
	# Fields after the command name, which may hold spaces and parentheses: the start time is
	# the 22nd field of the line, the 20th after "pid (comm) ".
	# shellcheck disable=SC2086  # split on purpose
	set -- ${stat##*) }
	[[ $1 != Z ]] || return 1 # a zombie has exited
	echo "${20}"
}

# daemon_pid PIDFILE: prints the recorded pid if that very process still runs.
daemon_pid() {
	local pid started
	[[ -f $1 ]] || return 1
	read -r pid started < "$1" || [[ -n ${pid:-} ]] || return 1
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	[[ "$(proc_start_time "$pid")" == "${started:-}" ]] || return 1
	echo "$pid"
}

# daemon_start PIDFILE LOG PROGRAM [ARGS...]: runs PROGRAM in a session of its own (detached from
# this script and its terminal), appending its output to LOG, and prints its pid. The pid file
# names the process by pid and start time, which the fork sets and the exec keeps: the record
# is right from the first instant, whereas a check of the process name right after the fork
# sees the forked shell, not PROGRAM, and fails at random.
daemon_start() {
	local pidfile="$1" logfile="$2" pid started; shift 2
	command -v "$1" > /dev/null || die "$1 not found"
	mkdir -p "$(dirname "$pidfile")" "$(dirname "$logfile")"
	# The script's lock descriptors (8, 9) must not outlive it in the daemon.
	setsid "$@" >> "$logfile" 2>&1 < /dev/null 8>&- 9>&- &
	pid=$!
	# Gone already (it failed at once): no record, and the caller's readiness check says why.
	started="$(proc_start_time "$pid")" || return 1
	echo "$pid $started" > "$pidfile"
	echo "$pid"
}

# daemon_stop PIDFILE NAME [SECONDS]: SIGTERM to the recorded process and its process group,
# SIGKILL to what is left after SECONDS (default 10); removes PIDFILE. A no-op when it is gone.
daemon_stop() {
	local pidfile="$1" name="$2" secs="${3:-10}" pid i
	if pid="$(daemon_pid "$pidfile")"; then
		# setsid made it a group leader: its children go with it.
		kill -TERM -- "-$pid" 2> /dev/null || kill -TERM "$pid" 2> /dev/null || true
		for ((i = 0; i < secs * 10; i++)); do
			[[ "$(proc_start_time "$pid" 2> /dev/null)" ]] || break
			sleep 0.1
		done
		if [[ "$(proc_start_time "$pid" 2> /dev/null)" ]]; then
			log "$name (pid $pid) still running ${secs}s after SIGTERM: SIGKILL"
		fi
		kill -KILL -- "-$pid" 2> /dev/null || true
		# SIGKILL is delivered, not done: until the process has exited, its sockets are still
		# open, and whoever tears down what it leaves behind (its connections) must not start
		# before that.
		for ((i = 0; i < 100; i++)); do
			[[ "$(proc_start_time "$pid" 2> /dev/null)" ]] || break
			sleep 0.1
		done
		log "$name stopped (pid $pid)"
	fi
	rm -f "$pidfile"
}

# image_map_with_turna BINARY OUT: writes e2e/cluster/images.yaml to OUT with Turna's image
# (ghcr.io/rakunlabs/turna) mapped to BINARY. Runs use a copy of the binary they built: not
# whichever of target/release and target/debug the default map finds first (a stale build would
# run), and not a file that a later build in the tree rewrites while proxies are still started.
image_map_with_turna() {
	local binary="$1" out="$2" root
	root="$(cd "$E2E_DIR/.." && pwd)"
	awk -v root="$root" -v turna="$binary" '
		/^base:/ { print "base: " root; next }
		$1 == "ghcr.io/rakunlabs/turna:" { print "  ghcr.io/rakunlabs/turna: " turna; found = 1; next }
		{ print }
		END { if (!found) exit 1 }' "$E2E_DIR/cluster/images.yaml" > "$out" ||
		die "no ghcr.io/rakunlabs/turna entry in e2e/cluster/images.yaml"
}
