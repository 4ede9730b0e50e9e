#!/usr/bin/env bash
# Build the observability tools the tests start, each from the Go module that pins it:
#   prometheus  e2e/observability/go.mod  (operator/tests/prometheus.rs)
#   jaeger      e2e/tracing/go.mod        (Jaeger v2 all-in-one with its OTLP receivers;
#                                          dataplane/tests/tracing.rs)
# into ${XDG_CACHE_HOME:-$HOME/.cache}/turna/<module folder>/<stamp>/bin, the stamp a hash of that
# module's go.mod and go.sum, so every clone on the machine shares one build
# (TURNA_OBSERVABILITY_DIR overrides the folder of Prometheus, TURNA_TRACING_DIR Jaeger's).
# Idempotent: builds only what is missing. Prints the bin folder of each tool named, one per line.
#
#   e2e/scripts/build-observability.sh                  # build both, print both folders
#   e2e/scripts/build-observability.sh jaeger           # build Jaeger, print its folder
set -euo pipefail
# shellcheck source=e2e/scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# build NAME MODULE_FOLDER PACKAGE OVERRIDE: builds NAME when missing; prints its bin folder.
build() {
	local name="$1" module="$2" package="$3" override="$4"
	local mod_dir="$E2E_DIR/$module" stamp dir bin tmp start
	stamp="$(cat "$mod_dir/go.mod" "$mod_dir/go.sum" | sha256sum | cut -c1-16)"
	dir="${override:-${XDG_CACHE_HOME:-$HOME/.cache}/turna/$module/$stamp}"
	bin="$dir/bin"
	mkdir -p "$bin"
	(
		# One build at a time (parallel test binaries may all call this script).
		exec 9> "$dir/.lock"
		flock 9
		if [[ ! -x "$bin/$name" ]]; then
			log "building $name ($(go env GOVERSION)) into $bin"
			start=$(date +%s)
			cd "$mod_dir"
			nice -n 15 go mod download
			tmp="$(mktemp -d "$bin/.build.XXXXXX")"
			trap 'rm -rf "$tmp"' EXIT
			CGO_ENABLED=0 nice -n 15 go build -trimpath -ldflags "-s -w" -o "$tmp/" "$package"
			mv -f "$tmp/$name" "$bin/$name"
			log "$name built in $(($(date +%s) - start))s"
		fi
	)
	echo "$bin"
}

tools=("$@")
[[ ${#tools[@]} -gt 0 ]] || tools=(prometheus jaeger)
for tool in "${tools[@]}"; do
	case "$tool" in
	prometheus) build prometheus observability github.com/prometheus/prometheus/cmd/prometheus "${TURNA_OBSERVABILITY_DIR:-}" ;;
	jaeger) build jaeger tracing github.com/jaegertracing/jaeger/cmd/jaeger "${TURNA_TRACING_DIR:-}" ;;
	*) die "unknown tool $tool (prometheus or jaeger)" ;;
	esac
done
