#!/usr/bin/env bash
# A Docker engine for the image test and kind where none runs (CI: .ci/run starts it, then stops
# it at the end). Root only.
#
#   deploy/image/dockerd.sh start   # installs Debian's docker.io when dockerd is missing; starts
#                                   # dockerd unless an engine answers already; waits for it
#   deploy/image/dockerd.sh stop    # stops the dockerd this script started (and its containerd);
#                                   # an engine started otherwise is left alone
#
# dockerd runs with --iptables=false --ip-forward=false: with its iptables rules Docker sets the
# FORWARD policy to DROP, and since the bridge netfilter hook is on (bridge-nf-call-iptables=1)
# that drops the bridged traffic between pods of the local cluster's bridges (turna0,
# turnasmk0, ...), which `make test` runs beside it (checked: two network namespaces on one
# bridge answer HTTP with FORWARD ACCEPT and time out with FORWARD DROP). Published ports go through docker-proxy on
# the host and containers on one Docker network reach each other over its bridge, which is all
# the image test and kind need; containers get no way off the machine, which has none anyway.
# Log and pid: /run/turna-dockerd/ (TURNA_DOCKERD_DIR).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=e2e/scripts/lib.sh
source "$ROOT/e2e/scripts/lib.sh"

DIR="${TURNA_DOCKERD_DIR:-/run/turna-dockerd}"

answers() { timeout 10 docker info > /dev/null 2>&1; }

start() {
	if answers; then log "a Docker engine answers already"; return; fi
	[[ "$(id -u)" == 0 ]] || die "starting dockerd needs root"
	if ! command -v dockerd > /dev/null; then
		log "installing Debian's docker.io"
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker.io > /dev/null
	fi
	local pid
	pid="$(daemon_start "$DIR/dockerd.pid" "$DIR/dockerd.log" dockerd --iptables=false --ip-forward=false)" ||
		die "dockerd exited at once: $(tail -5 "$DIR/dockerd.log")"
	for _ in $(seq 1 300); do
		answers && { log "dockerd (pid $pid) answers; log $DIR/dockerd.log"; return; }
		daemon_pid "$DIR/dockerd.pid" > /dev/null || die "dockerd exited: $(tail -5 "$DIR/dockerd.log")"
		sleep 0.2
	done
	die "dockerd does not answer after 60 s: $(tail -5 "$DIR/dockerd.log")"
}

stop() {
	if daemon_pid "$DIR/dockerd.pid" > /dev/null; then
		daemon_stop "$DIR/dockerd.pid" dockerd 30
	fi
}

case "${1:-}" in
start) start ;;
stop) stop ;;
*) awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"; exit 2 ;;
esac
