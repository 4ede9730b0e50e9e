#!/usr/bin/env bash
# `make conformance-local`: the conformance suite against Turna on the local cluster.
#
#   e2e/conformance/local.sh [--smoke] [--modes default,gateway-namespace] [--keep]
#       [--observability] [--xbackend] [--external-auth]
#
# 1. builds what is missing (all cached): the turna binary (the ghcr.io/rakunlabs/turna image;
#    the run uses a copy, so later builds in the same tree do not change it mid-run),
#    the image binaries (e2e/scripts/build-images.sh), turna-lb, the conformance driver;
# 2. `make cluster-up` (control plane, node agent, bridge; $E2E_CLUSTER_DIR, default
#    e2e/.cache/cluster; TURNA_CLUSTER_BRIDGE and TURNA_POD_CIDR pick another bridge and pod
#    network, e.g. next to a development cluster) and turna-lb on the bridge unless cluster-up
#    started it;
# 3. per mode, installs Turna the way users do (kubectl apply -k of the Kustomize base:
#    default -> kustomize/turna-gateway, gateway-namespace ->
#    kustomize/turna-gateway-gateway-namespace), waits for the controller and the
#    GatewayClass, runs e2e/conformance/run.sh run --mode <mode>, uninstalls;
# 4. `make cluster-down` (unless --keep).
# --smoke runs the smoke subset in the default mode only. --observability runs
# e2e/observability/check.sh after the suite of each mode (Prometheus finds the controller and a
# proxy by their pod annotations and scrapes them). --xbackend runs e2e/xbackend/check.sh after
# the suite of each mode (an EndpointSelector XBackend with session persistence and an
# XBackendTrafficPolicy, end to end). --external-auth runs e2e/external-auth/check.sh after the
# suite of each mode (ExternalAuth on routes and listeners against an ext_authz server pod, the
# cases the upstream conformance tests propose; it builds that server first). Exits non-zero
# when a test failed.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
# shellcheck source=e2e/scripts/lib.sh
source "$ROOT/e2e/scripts/lib.sh"

smoke=0 keep=0 observability=0 xbackend=0 external_auth=0 modes=default,gateway-namespace
while [[ $# -gt 0 ]]; do
	case "$1" in
	--smoke) smoke=1; shift ;;
	--keep) keep=1; shift ;;
	--observability) observability=1; shift ;;
	--xbackend) xbackend=1; shift ;;
	--external-auth) external_auth=1; shift ;;
	--modes) modes="${2:?--modes needs a list}"; shift 2 ;;
	-h|--help) awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"; exit 0 ;;
	*) die "unknown argument: $1" ;;
	esac
done
[[ $smoke == 1 && $modes == default,gateway-namespace ]] && modes=default

CLUSTER_DIR="${E2E_CLUSTER_DIR:-$ROOT/e2e/.cache/cluster}"
# turna-lb's pool and the suite's static addresses follow the pod network (cluster.sh's
# TURNA_POD_CIDR): the pool is its x.y.255.0/24, which the node agent never hands out.
IFS=. read -r o1 o2 _ <<< "${TURNA_POD_CIDR:-10.244.0.0/16}"
export TURNA_LB_POOL="${TURNA_LB_POOL:-$o1.$o2.255.0/24}"
export TURNA_CONFORMANCE_USABLE_ADDRESS="${TURNA_CONFORMANCE_USABLE_ADDRESS-$o1.$o2.255.250}"
export TURNA_CONFORMANCE_UNUSABLE_ADDRESS="${TURNA_CONFORMANCE_UNUSABLE_ADDRESS-$o1.$o2.254.250}"
overlay_of() {
	case "$1" in
	default) echo "$ROOT/kustomize/turna-gateway" ;;
	gateway-namespace) echo "$ROOT/kustomize/turna-gateway-gateway-namespace" ;;
	*) die "unknown mode $1 (default, gateway-namespace)" ;;
	esac
}
has_make_target() { make -C "$ROOT" -n "$1" > /dev/null 2>&1; }

start=$(date +%s)
step() { log "== $* ($(($(date +%s) - start))s)"; }

step "build"
(cd "$ROOT" && nice -n 10 cargo build -p turna-operator --bin turna)
"$ROOT/e2e/scripts/build-images.sh"
"$ROOT/e2e/scripts/lb-controller.sh" build
"$HERE/run.sh" build
if [[ $external_auth == 1 ]]; then
	# The ext_authz server pod's image (turna.local/e2e/ext-authz in e2e/cluster/images.yaml).
	auth_bin="$("$ROOT/e2e/scripts/build-observability.sh" extauthz | tail -1)"
	mkdir -p "$HOME/.cache/turna/images"
	ln -sfn "$auth_bin/extauthz" "$HOME/.cache/turna/images/ext-authz"
fi

# Every run starts from an empty cluster: a directory left by an interrupted run still has its
# etcd data (Gateways, pods bound to an old node), which apiserver.sh would reuse.
if "$ROOT/e2e/scripts/apiserver.sh" status "$CLUSTER_DIR" > /dev/null 2>&1; then
	die "a cluster runs in $CLUSTER_DIR: make cluster-down E2E_CLUSTER_DIR=$CLUSTER_DIR, or pick another E2E_CLUSTER_DIR"
fi
if [[ -d $CLUSTER_DIR ]]; then
	make -C "$ROOT" cluster-down E2E_CLUSTER_DIR="$CLUSTER_DIR" > /dev/null 2>&1 || true
	rm -rf "$CLUSTER_DIR"
fi

# The node name prefixes the pods' network namespaces, and `cluster.sh down` of any cluster with
# the same node name removes them: a name of its own keeps a development cluster's teardown
# from pulling this run's namespaces away.
export TURNA_NODE_NAME="${TURNA_NODE_NAME:-turna-conformance}"
# Turna's image is a copy of the binary built above, taken now (image_map_with_turna says why).
mkdir -p "$CLUSTER_DIR/image"
cp "$ROOT/target/debug/turna" "$CLUSTER_DIR/image/turna"
export TURNA_IMAGE_MAP="${TURNA_IMAGE_MAP:-$CLUSTER_DIR/images.yaml}"
if [[ $TURNA_IMAGE_MAP == "$CLUSTER_DIR/images.yaml" ]]; then
	image_map_with_turna "$CLUSTER_DIR/image/turna" "$TURNA_IMAGE_MAP"
fi

has_make_target cluster-up || die "make cluster-up does not exist yet (the local cluster, e2e/README.md)"
step "cluster up"
cleanup() {
	local rc=$?
	if [[ $keep == 0 ]]; then
		step "cluster down"
		"$ROOT/e2e/scripts/lb-controller.sh" stop "$CLUSTER_DIR" || true
		make -C "$ROOT" cluster-down E2E_CLUSTER_DIR="$CLUSTER_DIR" || true
	else
		log "cluster kept: eval \"\$(e2e/scripts/apiserver.sh env $CLUSTER_DIR)\""
	fi
	log "conformance-local finished in $(($(date +%s) - start))s (exit $rc)"
	exit "$rc"
}
trap cleanup EXIT
make -C "$ROOT" cluster-up E2E_CLUSTER_DIR="$CLUSTER_DIR"
export KUBECONFIG="${TURNA_CLUSTER_KUBECONFIG:-$CLUSTER_DIR/kubeconfig}"
[[ -f $KUBECONFIG ]] || die "cluster-up wrote no kubeconfig at $KUBECONFIG"
PATH="$TOOLS_BIN:$PATH"
if ! "$ROOT/e2e/scripts/lb-controller.sh" status "$CLUSTER_DIR" > /dev/null 2>&1; then
	"$ROOT/e2e/scripts/lb-controller.sh" start "$CLUSTER_DIR"
fi

uninstall() {
	local overlay="$1"
	kubectl delete -k "$overlay" --ignore-not-found --wait=true --timeout=120s > /dev/null || true
	# Proxies the controller created (their owner is gone with the install).
	kubectl delete deploy,svc,cm,pdb,sa -A -l app.kubernetes.io/managed-by=turna-gateway \
		--ignore-not-found --wait=true --timeout=120s > /dev/null || true
}

rc=0
IFS=, read -r -a mode_list <<< "$modes"
for mode in "${mode_list[@]}"; do
	overlay="$(overlay_of "$mode")"
	[[ -f $overlay/kustomization.yaml ]] || die "$overlay/kustomization.yaml missing (the Kustomize install)"
	step "install Turna ($mode: ${overlay#"$ROOT"/})"
	kubectl apply --server-side --force-conflicts -k "$overlay" > /dev/null
	kubectl -n turna-system rollout status deploy/turna --timeout=300s
	kubectl wait gatewayclass/"${TURNA_GATEWAY_CLASS:-turna}" --for=condition=Accepted --timeout=180s
	step "conformance suite ($mode)"
	suite_args=(--mode "$mode")
	[[ $smoke == 1 ]] && suite_args+=(--smoke)
	"$HERE/run.sh" run "${suite_args[@]}" || rc=$?
	if [[ $observability == 1 ]]; then
		step "observability check ($mode)"
		"$ROOT/e2e/observability/check.sh" || rc=$?
	fi
	if [[ $xbackend == 1 ]]; then
		step "xbackend check ($mode)"
		"$ROOT/e2e/xbackend/check.sh" || rc=$?
	fi
	if [[ $external_auth == 1 ]]; then
		step "external-auth check ($mode)"
		"$ROOT/e2e/external-auth/check.sh" || rc=$?
	fi
	kubectl -n turna-system logs deploy/turna --tail=-1 > "$ROOT/e2e/.cache/conformance/turna-$mode-controller.log" 2>&1 || true
	step "uninstall Turna ($mode)"
	uninstall "$overlay"
done
exit "$rc"
