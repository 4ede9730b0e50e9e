#!/usr/bin/env bash
# `make reliability`: Turna under churn, faults, bad input and scale (e2e/reliability/README.md).
#
#   e2e/reliability/run.sh [--keep] [--no-fuzz] [--no-bad-input] [-- SUITE ARGS...]
#
# 1. builds what is missing: turna and the suite with the `e2e` profile (optimized, thin LTO),
#    the node agent, the echo backend, turna-lb (all cached);
# 2. the bad-input tests: the translator's (invalid objects beside valid ones) and the proxy's
#    limits (cargo test; --no-bad-input skips them);
# 3. a local cluster of its own (bridge turnarel0, pods in 10.246.0.0/16, node
#    turna-reliability, state in e2e/.cache/reliability/cluster; TURNA_CLUSTER_BRIDGE,
#    TURNA_POD_CIDR and E2E_CLUSTER_DIR pick others) with Turna installed from the Kustomize
#    base in controller mode;
# 4. the scenarios (`turna-reliability`; SUITE ARGS pick scenarios and tune them, e.g.
#    `-- route-flip endpoint-churn --flips 10`; `-- --help` lists them), the table printed and
#    written to e2e/.cache/reliability/reliability.md and .json;
# 5. the fuzz targets for FUZZ_SECONDS each (default 60; --no-fuzz skips them);
# 6. cluster down (unless --keep).
# Needs root (the cluster). Exits non-zero when a target was missed or a step failed.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
# shellcheck source=e2e/scripts/lib.sh
source "$ROOT/e2e/scripts/lib.sh"

keep=0 fuzz=1 bad_input=1 suite_args=()
while [[ $# -gt 0 ]]; do
	case "$1" in
	--keep) keep=1; shift ;;
	--no-fuzz) fuzz=0; shift ;;
	--no-bad-input) bad_input=0; shift ;;
	--) shift; suite_args=("$@"); break ;;
	-h|--help) awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"; exit 0 ;;
	*) die "unknown argument: $1 (suite arguments go after --)" ;;
	esac
done

OUT="$ROOT/e2e/.cache/reliability"
CLUSTER_DIR="${E2E_CLUSTER_DIR:-$OUT/cluster}"
export TURNA_CLUSTER_BRIDGE="${TURNA_CLUSTER_BRIDGE:-turnarel0}"
export TURNA_POD_CIDR="${TURNA_POD_CIDR:-10.246.0.0/16}"
# A node name of its own: `cluster.sh down` of another cluster never removes this one's pods.
export TURNA_NODE_NAME="${TURNA_NODE_NAME:-turna-reliability}"
IFS=. read -r o1 o2 _ <<< "$TURNA_POD_CIDR"
export TURNA_LB_POOL="${TURNA_LB_POOL:-$o1.$o2.255.0/24}"

start=$(date +%s)
step() { log "== $* ($(($(date +%s) - start))s)"; }
rc=0

step "build"
(cd "$ROOT" && nice cargo build --profile e2e -p turna-operator -p turna-e2e-reliability --bin turna --bin turna-reliability)
(cd "$ROOT" && nice cargo build -p turna-e2e-node-agent)
"$ROOT/e2e/scripts/build-tools.sh"
"$ROOT/e2e/scripts/build-images.sh"
"$ROOT/e2e/scripts/lb-controller.sh" build

if [[ $bad_input == 1 ]]; then
	step "bad input: translator and proxy limits"
	(cd "$ROOT" && nice cargo test -p turna-translator --test bad_input && nice cargo test -p turna-dataplane --test limits) || rc=1
fi

# Every run starts from an empty cluster (a directory left by an interrupted run still has its
# etcd data).
if "$ROOT/e2e/scripts/apiserver.sh" status "$CLUSTER_DIR" > /dev/null 2>&1; then
	die "a cluster runs in $CLUSTER_DIR: e2e/scripts/cluster.sh down $CLUSTER_DIR first"
fi
if [[ -d $CLUSTER_DIR ]]; then
	"$ROOT/e2e/scripts/cluster.sh" down "$CLUSTER_DIR" > /dev/null 2>&1 || true
	rm -rf "$CLUSTER_DIR"
fi
mkdir -p "$CLUSTER_DIR/image"
cp "$ROOT/target/e2e/turna" "$CLUSTER_DIR/image/turna"
export TURNA_IMAGE_MAP="$CLUSTER_DIR/images.yaml"
image_map_with_turna "$CLUSTER_DIR/image/turna" "$TURNA_IMAGE_MAP"
export TURNA_NODE_AGENT_BIN="$ROOT/target/debug/turna-node-agent"

cleanup() {
	local code=$?
	if [[ $keep == 0 ]]; then
		step "cluster down"
		"$ROOT/e2e/scripts/cluster.sh" down "$CLUSTER_DIR" || true
	else
		log "cluster kept: eval \"\$(e2e/scripts/apiserver.sh env $CLUSTER_DIR)\""
	fi
	log "reliability finished in $(($(date +%s) - start))s (exit $code)"
	exit "$code"
}
trap cleanup EXIT

step "cluster up"
"$ROOT/e2e/scripts/cluster.sh" up "$CLUSTER_DIR"
step "scenarios"
"$ROOT/target/e2e/turna-reliability" --cluster-dir "$CLUSTER_DIR" --out "$OUT" "${suite_args[@]}" || rc=1
kubectl_logs() { "$TOOLS_BIN/kubectl" --kubeconfig "$CLUSTER_DIR/kubeconfig" "$@"; }
kubectl_logs -n turna-system logs deploy/turna --tail=-1 > "$OUT/controller.log" 2>&1 || true

if [[ $fuzz == 1 ]]; then
	step "fuzz targets (${FUZZ_SECONDS:-60}s each)"
	make -C "$ROOT" fuzz || rc=1
fi
exit "$rc"
