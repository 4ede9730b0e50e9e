#!/usr/bin/env bash
# turna-lb, the LoadBalancer controller of the local cluster (e2e/lb-controller/README.md).
#
#   lb-controller.sh build                  # build turna-lb (cached; a no-op when built)
#   lb-controller.sh start <dir> [flags...] # run it against <dir>/kubeconfig in the background
#   lb-controller.sh stop <dir>             # stop it; it removes the addresses it added
#   lb-controller.sh status <dir>
#   lb-controller.sh test                   # its tests (root: a network namespace, lo addresses)
#
# start: log in <dir>/logs/turna-lb.log, pid in <dir>/run/turna-lb.pid; waits until it serves.
# Flags after <dir> go to turna-lb (see `turna-lb -h`); the defaults come from
# TURNA_LB_POOL (10.244.255.0/24), TURNA_LB_INTERFACE (turna0) and TURNA_LB_CREATE_INTERFACE=1
# (create the interface as an empty bridge when it does not exist).
# Binary: ${XDG_CACHE_HOME:-$HOME/.cache}/turna/e2e-bin/turna-lb, rebuilt when its sources change.
set -euo pipefail
# shellcheck source=e2e/scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

LB_MOD_DIR="$E2E_DIR/lb-controller"
BIN_DIR="${TURNA_E2E_BIN_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/turna/e2e-bin}"
LB_BIN="$BIN_DIR/turna-lb"

usage() { awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0" >&2; exit 2; }

build() {
	mkdir -p "$BIN_DIR"
	# One build at a time; only the subshell holds the lock (a started turna-lb must not).
	(
		flock 8
		build_locked
	) 8> "$BIN_DIR/.turna-lb.lock"
}

build_locked() {
	local stamp_now
	stamp_now="$(cat "$LB_MOD_DIR"/go.mod "$LB_MOD_DIR"/go.sum "$LB_MOD_DIR"/*.go | sha256sum | cut -c1-16)"
	if [[ -x "$LB_BIN" && "$(cat "$LB_BIN.stamp" 2>/dev/null)" == "$stamp_now" ]]; then
		log "turna-lb up to date ($LB_BIN)"
		return
	fi
	log "building turna-lb into $LB_BIN"
	local t0; t0=$(date +%s)
	(cd "$LB_MOD_DIR" && CGO_ENABLED=0 nice -n 15 go build -trimpath -ldflags "-s -w" -o "$LB_BIN.tmp" .)
	mv -f "$LB_BIN.tmp" "$LB_BIN"
	echo "$stamp_now" > "$LB_BIN.stamp"
	log "turna-lb built in $(($(date +%s) - t0))s"
}

running_pid() { daemon_pid "$1/run/turna-lb.pid"; }

[[ $# -ge 1 ]] || usage
cmd="$1"; shift
case "$cmd" in
build) build ;;
test)
	cd "$LB_MOD_DIR"
	nice -n 10 go test -count=1 ./...
	;;
start)
	[[ $# -ge 1 ]] || usage
	dir="$(cd "$1" && pwd)"; shift
	[[ -f "$dir/kubeconfig" ]] || die "$dir/kubeconfig missing: start the control plane first"
	build
	if pid="$(running_pid "$dir")"; then log "turna-lb already running (pid $pid)"; exit 0; fi
	mkdir -p "$dir/logs" "$dir/run"
	args=(--kubeconfig "$dir/kubeconfig" --pool "${TURNA_LB_POOL:-10.244.255.0/24}"
		--interface "${TURNA_LB_INTERFACE:-turna0}")
	[[ "${TURNA_LB_CREATE_INTERFACE:-0}" == 1 ]] && args+=(--create-interface)
	logfile="$dir/logs/turna-lb.log"
	# The log is appended to: only what this start adds counts.
	offset=$(stat -c %s "$logfile" 2> /dev/null || echo 0)
	# Whatever ends this script before turna-lb serves (its own timeout, a signal, a failure)
	# stops it again: a failed start leaves no process behind.
	serving=0
	# shellcheck disable=SC2317  # called by the trap
	undo_start() { local rc=$?; [[ $serving == 1 ]] || daemon_stop "$dir/run/turna-lb.pid" turna-lb; exit "$rc"; }
	trap undo_start EXIT
	trap 'exit 143' TERM INT
	pid="$(daemon_start "$dir/run/turna-lb.pid" "$logfile" "$LB_BIN" "${args[@]}" "$@")" ||
		die "turna-lb did not start"
	for _ in $(seq 1 300); do
		if tail -c +"$((offset + 1))" "$logfile" | grep -q "caches synced"; then
			serving=1
			log "turna-lb serving (pid $pid), log $logfile"
			exit 0
		fi
		running_pid "$dir" > /dev/null || { tail -c +"$((offset + 1))" "$logfile" | tail -20 >&2; die "turna-lb exited"; }
		sleep 0.1
	done
	die "turna-lb did not sync within 30s (log $logfile)"
	;;
stop)
	[[ $# -ge 1 ]] || usage
	daemon_stop "$1/run/turna-lb.pid" turna-lb
	;;
status)
	[[ $# -ge 1 ]] || usage
	if pid="$(running_pid "$1")"; then echo "turna-lb running (pid $pid)"; else echo "turna-lb not running"; exit 1; fi
	;;
*) usage ;;
esac
