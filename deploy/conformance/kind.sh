#!/usr/bin/env bash
# Turna on a kind cluster: `make deploy` (the chart and examples/gateway-demo.yaml, a request
# through the Gateway) and `make conformance` (the Gateway API conformance suite, both
# placements). The local cluster of `make conformance-local` needs no Docker; this is the usual
# upstream setup, and it runs on this project's machines too (deploy/kind/README.md).
#
#   deploy/conformance/kind.sh [all]     # cluster, then the suite for both placements (make conformance)
#   deploy/conformance/kind.sh deploy    # cluster, Turna from the chart, the demo, a request (make deploy)
#   deploy/conformance/kind.sh cluster   # kind cluster, LoadBalancer support, CRDs, images loaded
#   deploy/conformance/kind.sh run [--mode default|gateway-namespace] [--smoke] [-- suite flags]
#   deploy/conformance/kind.sh down      # delete the cluster, stop the LoadBalancer controller
#
# Needs docker (BuildKit), kubectl and Go (GOTOOLCHAIN=go1.27.3 is set for you); kind is built
# from its Go module (deploy/kind/build.sh) unless on PATH, kubectl and helm are the e2e and
# deploy tools (built from Go modules, cached) unless on PATH.
#
# Two ways, chosen by whether kind's node image can be pulled (KIND_NODE_IMAGE forces one):
# - upstream: kind's default node image, kindnetd, cloud-provider-kind (`go install
#   sigs.k8s.io/cloud-provider-kind@$CLOUD_PROVIDER_KIND_VERSION`, run in the background) for
#   LoadBalancer addresses; the image from `make image` (the published form where its bases
#   can be pulled).
# - local (no container registry, as on this project's machines): the node image
#   turna.local/kind-node:<k8s version> built here (deploy/kind/build.sh: Debian 12, containerd,
#   runc, CNI plugins and Kubernetes from Go modules, control plane images made of the same
#   binaries), a single node with the image's CNI configuration (pods 10.247.0.0/16), turna-lb
#   for LoadBalancer addresses (pool 10.248.0.0/24 on the interface turnakind0, forwarding to the
#   pods through a route via the node), and every image built here and `kind load`ed.
# Either way kind runs through deploy/kind/bin/docker, which replaces `--privileged` with
# explicit capabilities where the capability bounding set lacks CAP_SYS_RESOURCE (and changes
# nothing elsewhere), and kubelet runs with failCgroupV1: false (cgroup v1 hosts).
#
# The suite runs on this host and dials the Gateways' addresses. Turna is installed from
# kustomize for the suite (default -> turna-gateway, gateway-namespace ->
# turna-gateway-gateway-namespace) and from the chart for `deploy`.
# Reports: e2e/conformance/reports/<version>/kind/turna-<mode>-report.yaml (+ -summary.md).
#
# Environment: KIND_CLUSTER (turna-conformance), KIND_NODE_IMAGE (see above),
# TURNA_IMAGE (ghcr.io/rakunlabs/turna:<crate version>), CLOUD_PROVIDER_KIND_VERSION (latest),
# TURNA_CONFORMANCE_USABLE_ADDRESS / _UNUSABLE_ADDRESS (GatewayStaticAddresses: an address the
# LoadBalancer controller will assign and one it will not; local way: 10.248.0.250 and
# 10.248.1.250, upstream: none unless given).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=e2e/scripts/lib.sh
source "$ROOT/e2e/scripts/lib.sh"

CLUSTER="${KIND_CLUSTER:-turna-conformance}"
VERSION="$(awk '/^\[workspace.package\]/ {p = 1; next} /^\[/ {p = 0} p && $1 == "version" {gsub(/"/, "", $3); print $3; exit}' "$ROOT/Cargo.toml")"
IMAGE="${TURNA_IMAGE:-ghcr.io/rakunlabs/turna:$VERSION}"
WORK="$ROOT/e2e/.cache/kind/$CLUSTER"
KUBECONFIG_FILE="$WORK/kubeconfig"
SUITE_VERSION="$(awk '$1 == "sigs.k8s.io/gateway-api/conformance" && $2 ~ /^v/ {print $2; exit}' "$ROOT/e2e/conformance/go.mod")"
KIND_CACHE="${TURNA_KIND_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/turna/kind}"
# The local way's addresses, apart from the local clusters' (10.242-10.245.0.0/16).
POD_SUBNET=10.247.0.0/16
LB_POOL=10.248.0.0/24
LB_INTERFACE=turnakind0

need() { command -v "$1" > /dev/null || die "$1 is needed ($2)"; }

# kind through the docker of deploy/kind/bin (explicit capabilities instead of --privileged where
# the machine refuses --privileged); kind, kubectl and helm built here when not on PATH.
export PATH="$ROOT/deploy/kind/bin:$PATH"
tools_on_path() {
	command -v kind > /dev/null || { "$ROOT/deploy/kind/build.sh" bins; PATH="$PATH:$KIND_CACHE/bin"; }
	# The e2e tools' kubectl when built (the cluster's version), else one on PATH, else build it.
	if [[ -x $TOOLS_BIN/kubectl ]] || ! command -v kubectl > /dev/null; then
		"$ROOT/e2e/scripts/build-tools.sh"
		PATH="$TOOLS_BIN:$PATH"
	fi
	command -v helm > /dev/null || { "$ROOT/deploy/scripts/build-tools.sh" > /dev/null; PATH="$PATH:$("$ROOT/deploy/scripts/build-tools.sh" --print-dir)"; }
}

# local: the node image and every image are built here (no registry); upstream: kind's own.
way() {
	if [[ -f $WORK/way ]]; then cat "$WORK/way"; return; fi
	if [[ -n ${KIND_NODE_IMAGE:-} ]]; then
		[[ $KIND_NODE_IMAGE == turna.local/* ]] && echo local || echo upstream
	elif docker pull -q "$(kind_default_image)" > /dev/null 2>&1; then echo upstream
	else echo local; fi
}
# kind v0.33.0's default node image (pkg/apis/config/defaults/image.go); deploy/kind/build.sh pins
# that kind when kind is not on PATH.
kind_default_image() { echo kindest/node:v1.37.0; }

cluster_config() {
	cat <<-YAML
		# Generated by deploy/conformance/kind.sh ($1).
		kind: Cluster
		apiVersion: kind.x-k8s.io/v1alpha4
		kubeadmConfigPatches:
		  - |
		    kind: KubeletConfiguration
		    # This machine's kind (cgroup v1); harmless on cgroup v2.
		    failCgroupV1: false
	YAML
	if [[ $1 == local ]]; then
		cat <<-YAML
			networking:
			  # The node image's CNI configuration (ptp, host-local on the first node's /24).
			  disableDefaultCNI: true
			  podSubnet: $POD_SUBNET
			nodes:
			  - role: control-plane
		YAML
	fi
}

node_ip() { docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$CLUSTER-control-plane"; }

# images_local: the images the suite and the demo run, made here, loaded into the cluster.
load_local_images() {
	"$ROOT/e2e/scripts/build-images.sh" > /dev/null
	local echo_bin tag ctx
	echo_bin="$(readlink -f "$HOME/.cache/turna/images/echo-basic")"
	ctx="$(mktemp -d)"
	cp "$echo_bin" "$ctx/echo-basic"
	printf 'FROM turna.local/base:debian12\nCOPY echo-basic /echo-basic\nUSER 65532:65532\nENTRYPOINT ["/echo-basic"]\n' > "$ctx/Dockerfile"
	DOCKER_BUILDKIT=1 "$(docker_client)" build -q -t registry.k8s.io/gateway-api/conformance/echo-basic:v0.1.0 "$ctx" > /dev/null
	rm -rf "$ctx"
	for tag in registry.k8s.io/gateway-api/conformance/echo-basic:v0.2.0 registry.k8s.io/gateway-api/echo-basic:v0.1.0; do
		docker tag registry.k8s.io/gateway-api/conformance/echo-basic:v0.1.0 "$tag"
	done
	kind load docker-image --name "$CLUSTER" registry.k8s.io/gateway-api/conformance/echo-basic:v0.1.0 \
		registry.k8s.io/gateway-api/conformance/echo-basic:v0.2.0 registry.k8s.io/gateway-api/echo-basic:v0.1.0
}
docker_client() {
	if docker buildx version > /dev/null 2>&1; then echo docker; elif [[ -x /usr/bin/docker ]]; then echo /usr/bin/docker; else echo docker; fi
}

overlay_of() {
	case "$1" in
	default) echo turna-gateway ;;
	gateway-namespace) echo turna-gateway-gateway-namespace ;;
	*) die "unknown mode $1 (default, gateway-namespace)" ;;
	esac
}

# install <mode>: Turna from the Kustomize variant of <mode>, with the locally built image.
install_turna() {
	local mode="$1" dir="$WORK/install-$1" name tag
	name="${IMAGE%:*}"; tag="${IMAGE##*:}"
	mkdir -p "$dir"
	cat > "$dir/kustomization.yaml" <<-YAML
		# Generated by deploy/conformance/kind.sh: Turna's $mode install with the image under test.
		apiVersion: kustomize.config.k8s.io/v1beta1
		kind: Kustomization
		resources:
		  - $(realpath --relative-to="$dir" "$ROOT/kustomize/$(overlay_of "$mode")")
		images:
		  - name: ghcr.io/rakunlabs/turna
		    newName: $name
		    newTag: $tag
	YAML
	kubectl apply --server-side --force-conflicts -k "$dir" > /dev/null
	kubectl -n turna-system rollout status deploy/turna --timeout=300s
	kubectl wait gatewayclass/turna --for=condition=Accepted --timeout=180s
}

uninstall_turna() {
	kubectl delete -k "$WORK/install-$1" --ignore-not-found --wait=true --timeout=120s > /dev/null || true
	kubectl delete deploy,svc,cm,pdb,sa -A -l app.kubernetes.io/managed-by=turna-gateway \
		--ignore-not-found --wait=true --timeout=120s > /dev/null || true
}

cluster() {
	need docker "to build the images and run kind"
	need go "for kind, the CRDs from the module cache and the suite"
	tools_on_path
	mkdir -p "$WORK"
	local w; w="$(way)"; echo "$w" > "$WORK/way"
	if ! kind get clusters 2> /dev/null | grep -qx "$CLUSTER"; then
		local node_image="${KIND_NODE_IMAGE:-}"
		if [[ $w == local && -z $node_image ]]; then
			"$ROOT/deploy/kind/build.sh" node
			node_image="$("$ROOT/deploy/kind/build.sh" --print-image)"
		fi
		cluster_config "$w" > "$WORK/kind.yaml"
		log "creating kind cluster $CLUSTER ($w${node_image:+, $node_image})"
		kind create cluster --name "$CLUSTER" --config "$WORK/kind.yaml" ${node_image:+--image "$node_image"} --wait 300s
	fi
	kind get kubeconfig --name "$CLUSTER" > "$KUBECONFIG_FILE"
	export KUBECONFIG="$KUBECONFIG_FILE"

	if [[ $w == local ]]; then
		# LoadBalancer addresses: turna-lb on the host, forwarding to the pods via the node.
		[[ "$(id -u)" == 0 ]] || die "the local way needs root (turna-lb's addresses, the route to the pods)"
		ip route replace "$POD_SUBNET" via "$(node_ip)"
		TURNA_LB_POOL="$LB_POOL" TURNA_LB_INTERFACE="$LB_INTERFACE" TURNA_LB_CREATE_INTERFACE=1 \
			"$ROOT/e2e/scripts/lb-controller.sh" start "$WORK"
	elif ! pgrep -x cloud-provider-kind > /dev/null; then
		log "starting cloud-provider-kind"
		GOBIN="$WORK/bin" go install "sigs.k8s.io/cloud-provider-kind@${CLOUD_PROVIDER_KIND_VERSION:-latest}"
		nohup "$WORK/bin/cloud-provider-kind" > "$WORK/cloud-provider-kind.log" 2>&1 < /dev/null &
		echo $! > "$WORK/cloud-provider-kind.pid"
	fi

	log "Gateway API $GATEWAY_API_VERSION experimental CRDs"
	local gwapi
	gwapi="$(cd "$ROOT/e2e/conformance" && go mod download -json "sigs.k8s.io/gateway-api@$GATEWAY_API_VERSION" | awk -F'"' '$2 == "Dir" {print $4}')"
	[[ -d $gwapi/config/crd/experimental ]] || die "no CRDs in $gwapi"
	kubectl apply --server-side --force-conflicts -k "$gwapi/config/crd/experimental" > /dev/null
	kubectl wait crd --all --for=condition=Established --timeout=120s > /dev/null

	log "building $IMAGE"
	if [[ $w == local ]]; then
		"$ROOT/deploy/image/image.sh" build --local --tag "$IMAGE" ${TURNA_IMAGE_BINARY:+--binary "$TURNA_IMAGE_BINARY"}
		load_local_images
	else
		"$ROOT/deploy/image/image.sh" build --tag "$IMAGE"
	fi
	kind load docker-image "$IMAGE" --name "$CLUSTER"
	log "cluster ready: export KUBECONFIG=$KUBECONFIG_FILE"
}

# deploy: the chart, examples/gateway-demo.yaml (with a self-signed certificate for its HTTPS
# listener), the Gateway Programmed, and requests through its address.
deploy() {
	cluster
	export KUBECONFIG="$KUBECONFIG_FILE"
	local name="${IMAGE%:*}" tag="${IMAGE##*:}"
	log "helm install turna (charts/turna-gateway, $IMAGE)"
	helm upgrade --install turna "$ROOT/charts/turna-gateway" -n turna-system --create-namespace \
		--set image.repository="$name" --set image.tag="$tag" --wait --timeout 300s
	kubectl wait gatewayclass/turna --for=condition=Accepted --timeout=120s
	kubectl apply -f "$ROOT/examples/gateway-demo.yaml"
	if ! kubectl -n demo get secret example-tls > /dev/null 2>&1; then
		openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=*.example.com" \
			-addext "subjectAltName=DNS:*.example.com" -keyout "$WORK/demo.key" -out "$WORK/demo.crt" 2> /dev/null
		kubectl -n demo create secret tls example-tls --cert="$WORK/demo.crt" --key="$WORK/demo.key"
	fi
	kubectl -n demo rollout status deploy/app-v1 deploy/app-v2 --timeout=300s 2> /dev/null ||
		kubectl -n demo wait pod --all --for=condition=Ready --timeout=300s
	kubectl -n demo wait gateway/web --for=condition=Programmed --timeout=300s
	local address body code i
	address="$(kubectl -n demo get gateway web -o jsonpath='{.status.addresses[0].value}')"
	log "Gateway demo/web Programmed, address $address"
	for i in $(seq 1 60); do
		body="$(curl -fsS --max-time 3 -H 'Host: app.example.com' -H 'x-canary: true' "http://$address/" 2> /dev/null)" && break
		sleep 1
	done
	echo "$ curl -H 'Host: app.example.com' -H 'x-canary: true' http://$address/"
	echo "$body"
	grep -q '"pod": *"app-v2-' <<< "$body" || die "the canary request did not reach app-v2"
	code="$(curl -sS -o /dev/null -w '%{http_code} %{redirect_url}' -H 'Host: old.example.com' "http://$address/docs")"
	echo "$ curl -H 'Host: old.example.com' http://$address/docs -> $code"
	[[ $code == "301 http://app.example.com/docs" ]] || die "the redirect answered $code"
	body="$(curl -fsS -k --resolve "app.example.com:443:$address" https://app.example.com/)"
	grep -q '"pod": *"app-v' <<< "$body" || die "HTTPS through the Gateway failed: $body"
	echo "$ curl -k https://app.example.com/ (resolved to $address): $(grep -o '"pod": *"[^"]*"' <<< "$body")"
	log "deployed: export KUBECONFIG=$KUBECONFIG_FILE"
}

run() {
	local mode=default pass=()
	while [[ $# -gt 0 ]]; do
		case "$1" in
		--mode) mode="${2:?}"; shift 2 ;;
		*) pass+=("$1"); shift ;;
		esac
	done
	export KUBECONFIG="$KUBECONFIG_FILE"
	[[ -f $KUBECONFIG ]] || die "no cluster: run deploy/conformance/kind.sh cluster first"
	tools_on_path
	# The chart's install of `deploy` (same GatewayClass) goes first.
	if helm status turna -n turna-system > /dev/null 2>&1; then
		kubectl delete -f "$ROOT/examples/gateway-demo.yaml" --ignore-not-found --wait=true --timeout=120s > /dev/null || true
		helm uninstall turna -n turna-system --wait > /dev/null
		kubectl delete deploy,svc,cm,pdb,sa -A -l app.kubernetes.io/managed-by=turna-gateway --ignore-not-found > /dev/null || true
	fi
	install_turna "$mode"
	local rc=0 usable="" unusable=""
	# GatewayStaticAddresses: with turna-lb, an address of its pool and one outside it.
	if [[ "$(cat "$WORK/way" 2> /dev/null)" == local ]]; then usable=10.248.0.250 unusable=10.248.1.250; fi
	TURNA_CONFORMANCE_REPORT_DIR="$ROOT/e2e/conformance/reports/$SUITE_VERSION/kind" \
		TURNA_CONFORMANCE_LOG_DIR="$WORK/logs" \
		TURNA_CONFORMANCE_USABLE_ADDRESS="${TURNA_CONFORMANCE_USABLE_ADDRESS:-$usable}" \
		TURNA_CONFORMANCE_UNUSABLE_ADDRESS="${TURNA_CONFORMANCE_UNUSABLE_ADDRESS:-$unusable}" \
		"$ROOT/e2e/conformance/run.sh" run --mode "$mode" "${pass[@]}" || rc=$?
	uninstall_turna "$mode"
	return "$rc"
}

down() {
	tools_on_path
	kind delete cluster --name "$CLUSTER" || true
	"$ROOT/e2e/scripts/lb-controller.sh" stop "$WORK" 2> /dev/null || true
	ip route del "$POD_SUBNET" 2> /dev/null || true
	ip link del "$LB_INTERFACE" 2> /dev/null || true
	rm -f "$WORK/way"
	if [[ -f $WORK/cloud-provider-kind.pid ]]; then
		kill "$(cat "$WORK/cloud-provider-kind.pid")" 2>/dev/null || true
		rm -f "$WORK/cloud-provider-kind.pid"
	fi
}

cmd="${1:-all}"; [[ $# -gt 0 ]] && shift
case "$cmd" in
cluster) cluster ;;
deploy) deploy ;;
run) run "$@" ;;
down) down ;;
all)
	cluster
	rc=0
	run --mode default || rc=$?
	run --mode gateway-namespace || rc=$?
	exit "$rc"
	;;
-h|--help) awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0" ;;
*) die "unknown command $cmd (cluster, deploy, run, down, all)" ;;
esac
