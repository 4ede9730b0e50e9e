#!/usr/bin/env bash
# Build Prometheus from the Go module pinned in e2e/observability/go.mod into
# $TURNA_OBSERVABILITY_DIR/bin (default: ${XDG_CACHE_HOME:-$HOME/.cache}/turna/observability/<stamp>/bin,
# the stamp a hash of go.mod and go.sum, so every clone on the machine shares one build).
# Idempotent: builds only what is missing. Prints the bin folder on standard output.
#
#   e2e/scripts/build-observability.sh          # build what is missing, print the folder
set -euo pipefail
# shellcheck source=e2e/scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

MOD_DIR="$E2E_DIR/observability"
stamp="$(cat "$MOD_DIR/go.mod" "$MOD_DIR/go.sum" | sha256sum | cut -c1-16)"
DIR="${TURNA_OBSERVABILITY_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/turna/observability/$stamp}"
BIN="$DIR/bin"
mkdir -p "$BIN"
# One build at a time (parallel test binaries may all call this script).
exec 9> "$DIR/.lock"
flock 9
if [[ ! -x "$BIN/prometheus" ]]; then
	log "building prometheus ($(awk '$1=="github.com/prometheus/prometheus" {print $2}' "$MOD_DIR/go.mod"), $(go env GOVERSION)) into $BIN"
	start=$(date +%s)
	cd "$MOD_DIR"
	nice -n 15 go mod download
	tmp="$(mktemp -d "$BIN/.build.XXXXXX")"
	trap 'rm -rf "$tmp"' EXIT
	CGO_ENABLED=0 nice -n 15 go build -trimpath -ldflags "-s -w" -o "$tmp/" github.com/prometheus/prometheus/cmd/prometheus
	mv -f "$tmp/prometheus" "$BIN/prometheus"
	log "prometheus built in $(($(date +%s) - start))s"
fi
echo "$BIN"
