#!/usr/bin/env bash
# The Gateway API conformance suite (sigs.k8s.io/gateway-api/conformance, the version in
# e2e/conformance/go.mod) against the cluster of $KUBECONFIG with Turna installed.
#
#   e2e/conformance/run.sh build                   # the driver binary (cached; no-op when built)
#   e2e/conformance/run.sh vet                     # go vet + the driver's unit tests
#   e2e/conformance/run.sh run [--mode M] [--smoke] [-- suite flags...]
#
# run: all five Gateway profiles (GATEWAY-HTTP, -GRPC, -TLS, -TCP, -UDP) against GatewayClass
# $TURNA_GATEWAY_CLASS (turna). Features: TURNA_CONFORMANCE_FEATURES=inferred (default: the
# GatewayClass's status.supportedFeatures), =all (every feature but Mesh), or a comma list.
# --mode names the proxy placement being tested (default, gateway-namespace); it only labels the
# report. Writes e2e/conformance/reports/<gateway-api-version>/turna-<mode>-report.yaml and
# -summary.md next to it, and prints the summary table; the full log goes to
# e2e/.cache/conformance/turna-<mode>.log. --smoke runs only $TURNA_CONFORMANCE_SMOKE_TESTS
# (a handful of core tests) and writes no report. Exits non-zero when a test failed (the report
# is written all the same). Flags after `--` go to the suite (e.g. --run-test=A, --debug); such a
# narrowed run writes its report next to the log, not into reports/.
#
# TURNA_CONFORMANCE_REPORT_DIR and TURNA_CONFORMANCE_LOG_DIR move the outputs (the kind run does).
# GatewayStaticAddresses uses TURNA_CONFORMANCE_USABLE_ADDRESS (10.244.255.250, in turna-lb's
# pool) and TURNA_CONFORMANCE_UNUSABLE_ADDRESS (10.244.254.250, outside it).
# Binary: ${XDG_CACHE_HOME:-$HOME/.cache}/turna/conformance/<version>/conformance.test.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
# shellcheck source=e2e/scripts/lib.sh
source "$ROOT/e2e/scripts/lib.sh"

SUITE_VERSION="$(awk '$1 == "sigs.k8s.io/gateway-api/conformance" && $2 ~ /^v/ {print $2; exit}' "$HERE/go.mod")"
[[ -n $SUITE_VERSION ]] || die "no sigs.k8s.io/gateway-api/conformance version in $HERE/go.mod"
CACHE_DIR="${TURNA_CONFORMANCE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/turna/conformance/$SUITE_VERSION}"
BIN="$CACHE_DIR/conformance.test"
# The smoke subset (part of `make test`): core tests of each of the five profiles.
SMOKE_TESTS="${TURNA_CONFORMANCE_SMOKE_TESTS:-GatewayClassObservedGenerationBump,GatewayObservedGenerationBump,HTTPRouteSimpleSameNamespace,HTTPRouteCrossNamespace,HTTPRouteMatching,GRPCExactMethodMatching,TLSRouteSimpleSameNamespace,TCPRouteParentRefPortAndSectionName,TCPRouteInvalidCrossNamespaceBackendRef,UDPRoute,UDPRouteReferenceGrant}"
# The version Turna reports: the workspace version of Cargo.toml.
TURNA_VERSION="v$(awk -F'"' '/^\[workspace.package\]/ {p = 1} p && $1 ~ /^version *=/ {print $2; exit}' "$ROOT/Cargo.toml")"

usage() { awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0" >&2; exit 2; }

build() {
	mkdir -p "$CACHE_DIR"
	# One build at a time; the lock is held by the subshell only, not by a run that follows.
	(
		flock 8
		build_locked
	) 8> "$CACHE_DIR/.lock"
}

build_locked() {
	local stamp_now
	stamp_now="$(cat "$HERE"/go.mod "$HERE"/go.sum "$HERE"/*.go | sha256sum | cut -c1-16)"
	if [[ -x "$BIN" && "$(cat "$BIN.stamp" 2>/dev/null)" == "$stamp_now" ]]; then
		log "conformance driver up to date ($BIN)"
		return
	fi
	log "building the conformance driver (suite $SUITE_VERSION, $(go env GOVERSION)) into $BIN"
	local t0; t0=$(date +%s)
	(cd "$HERE" && nice -n 15 go test -c -o "$BIN.tmp" .)
	mv -f "$BIN.tmp" "$BIN"
	echo "$stamp_now" > "$BIN.stamp"
	log "conformance driver built in $(($(date +%s) - t0))s"
}

run_suite() {
	local mode=default smoke=0
	while [[ $# -gt 0 ]]; do
		case "$1" in
		--mode) mode="${2:?--mode needs a value}"; shift 2 ;;
		--smoke) smoke=1; shift ;;
		--) shift; break ;;
		*) die "unknown argument: $1 (suite flags go after --)" ;;
		esac
	done
	[[ -n "${KUBECONFIG:-}" ]] || die "KUBECONFIG is not set"
	build

	local args=(
		-test.v -test.timeout=150m
		--gateway-class="${TURNA_GATEWAY_CLASS:-turna}"
		--conformance-profiles=GATEWAY-HTTP,GATEWAY-GRPC,GATEWAY-TLS,GATEWAY-TCP,GATEWAY-UDP
		--mode="$mode"
		--organization=rakunlabs --project=turna --url=https://github.com/rakunlabs/turna
		--version="$TURNA_VERSION" --contact=@rakunlabs
	)
	# Set but empty: no address flag (the suite then has no address to request).
	local usable="${TURNA_CONFORMANCE_USABLE_ADDRESS-10.244.255.250}" unusable="${TURNA_CONFORMANCE_UNUSABLE_ADDRESS-10.244.254.250}"
	[[ -n $usable ]] && args+=(--usable-address="$usable")
	[[ -n $unusable ]] && args+=(--unusable-address="$unusable")
	case "${TURNA_CONFORMANCE_FEATURES:-inferred}" in
	inferred) ;;
	all) args+=(--all-features --exempt-features=Mesh) ;;
	*) args+=(--supported-features="$TURNA_CONFORMANCE_FEATURES" --exempt-features=Mesh) ;;
	esac
	local logdir="${TURNA_CONFORMANCE_LOG_DIR:-$ROOT/e2e/.cache/conformance}" report_dir="${TURNA_CONFORMANCE_REPORT_DIR:-$HERE/reports/$SUITE_VERSION}"
	# A run narrowed by suite flags (--run-test, --skip-tests, ...) is not the published report:
	# it goes next to the log unless a report dir is named.
	if [[ $# -gt 0 && -z "${TURNA_CONFORMANCE_REPORT_DIR:-}" ]]; then report_dir="$logdir"; fi
	mkdir -p "$logdir" "$report_dir"
	local logfile="$logdir/turna-$mode.log" summary
	if [[ $smoke == 1 ]]; then
		logfile="$logdir/turna-$mode-smoke.log"
		summary="$logdir/turna-$mode-smoke-summary.md"
		args+=(-test.run "^TestConformance\$/^(${SMOKE_TESTS//,/|})\$" --summary-output="$summary")
	else
		summary="$report_dir/turna-$mode-summary.md"
		args+=(-test.run '^TestConformance$' --report-output="$report_dir/turna-$mode-report.yaml" --summary-output="$summary")
	fi
	rm -f "$summary"
	log "conformance suite $SUITE_VERSION, mode $mode$([[ $smoke == 1 ]] && echo ", smoke: $SMOKE_TESTS"); log $logfile"
	local t0 rc=0; t0=$(date +%s)
	# The suite writes files relative to its working directory (none expected): keep it in the cache.
	(cd "$logdir" && "$BIN" "${args[@]}" "$@") > "$logfile" 2>&1 || rc=$?
	log "suite finished in $(($(date +%s) - t0))s (exit $rc)"
	# Per-test outcome lines, then the summary table.
	grep -E '^\s*--- (PASS|FAIL|SKIP): TestConformance/[^/ ]+ ' "$logfile" | sed 's/^ *//' | sort -k3 > "$logdir/turna-$mode$([[ $smoke == 1 ]] && echo -smoke)-results.txt" || true
	if [[ -f $summary ]]; then
		cat "$summary"
	else
		tail -40 "$logfile" >&2
		die "no summary written (see $logfile)"
	fi
	return "$rc"
}

[[ $# -ge 1 ]] || usage
cmd="$1"; shift
case "$cmd" in
build) build ;;
vet)
	cd "$HERE"
	nice -n 10 go vet ./...
	nice -n 10 go test -count=1 -run 'TestWriteSummary' ./...
	;;
run) run_suite "$@" ;;
*) usage ;;
esac
