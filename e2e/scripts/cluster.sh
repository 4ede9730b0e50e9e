#!/usr/bin/env bash
# The local cluster: a host bridge, the control plane on the bridge address, the node agent
# (e2e/node-agent) running pods as processes in network namespaces, and, when present, the
# LoadBalancer controller (e2e/scripts/lb-controller.sh) and Turna from the Kustomize base.
#
#   cluster.sh up <dir> [--no-addons] [--stop-with PID]
#   cluster.sh down <dir>     # stops everything of <dir>, removes pod namespaces and the bridge
#   cluster.sh env <dir>      # `export KUBECONFIG=...` lines for eval
#   cluster.sh status <dir>
#
# up: needs root (network namespaces, bridge, mounts). Writes <dir>/kubeconfig (admin),
# <dir>/env, logs in <dir>/logs (node-agent.log, kube-apiserver.log, ...), pod state in
# <dir>/node. --no-addons skips turna-lb and the Turna install; --stop-with PID runs `down`
# once process PID has exited (for tests).
#
# Environment (defaults): TURNA_CLUSTER_BRIDGE (turna0), TURNA_POD_CIDR (10.244.0.0/16; the
# bridge and node IP is its first address), TURNA_NODE_NAME (turna-node, or turna-node-<bridge> on another bridge), TURNA_IMAGE_MAP
# (e2e/cluster/images.yaml), TURNA_NODE_AGENT_BIN (default: built with cargo into target/debug),
# TURNA_KUSTOMIZE_DIR (kustomize/turna-gateway), TURNA_LB_POOL (the CIDR's last /24).
set -euo pipefail
# shellcheck source=e2e/scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

usage() { awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0" >&2; exit 2; }
[[ $# -ge 2 ]] || usage
cmd="$1"; shift
DIR="$1"; shift
SCRIPTS="$E2E_DIR/scripts"
ROOT="$(cd "$E2E_DIR/.." && pwd)"
if [[ "$cmd" == up ]]; then mkdir -p "$DIR"; fi
if [[ "$cmd" == down && ! -d "$DIR" ]]; then exit 0; fi
[[ -d "$DIR" ]] || die "$DIR does not exist"
DIR="$(cd "$DIR" && pwd)"
CONF="$DIR/cluster.conf"

# Settings: the environment, else what the first `up` of <dir> used (cluster.conf), else defaults.
if [[ -f "$CONF" ]]; then
	while IFS='=' read -r k v; do
		[[ $k == TURNA_* && -z "${!k:-}" ]] && declare "$k=$v"
	done < "$CONF"
fi
BRIDGE="${TURNA_CLUSTER_BRIDGE:-turna0}"
POD_CIDR="${TURNA_POD_CIDR:-10.244.0.0/16}"
# The agent's cleanup removes every `<node name>.*` network namespace, so a cluster on another
# bridge gets its own default node name and never cleans up the pods of this machine's other clusters.
if [[ $BRIDGE == turna0 ]]; then NODE_NAME="${TURNA_NODE_NAME:-turna-node}"; else NODE_NAME="${TURNA_NODE_NAME:-turna-node-$BRIDGE}"; fi
IMAGE_MAP="${TURNA_IMAGE_MAP:-$E2E_DIR/cluster/images.yaml}"
KUSTOMIZE_DIR="${TURNA_KUSTOMIZE_DIR:-$ROOT/kustomize/turna-gateway}"
AGENT_BIN="${TURNA_NODE_AGENT_BIN:-}"
PREFIX="${POD_CIDR#*/}"
IFS=. read -r o1 o2 o3 o4 <<< "${POD_CIDR%/*}"
NODE_IP="$o1.$o2.$o3.$((o4 + 1))"
# Load-balancer addresses: the last /24 of the pod CIDR, which the node agent never hands out.
lb_base=$(((o1 << 24 | o2 << 16 | o3 << 8 | o4) + (1 << (32 - PREFIX)) - 256))
LB_POOL="${TURNA_LB_POOL:-$((lb_base >> 24 & 255)).$((lb_base >> 16 & 255)).$((lb_base >> 8 & 255)).0/24}"
RUN="$DIR/run"
LOGS="$DIR/logs"
PKI="$DIR/pki"

agent_pid() { daemon_pid "$RUN/node-agent.pid"; }

kubectl_admin() { "$TOOLS_BIN/kubectl" --kubeconfig "$DIR/kubeconfig" "$@"; }

bridge_up() {
	if ! ip link show dev "$BRIDGE" > /dev/null 2>&1; then
		ip link add "$BRIDGE" type bridge
		log "bridge $BRIDGE created"
	fi
	ip addr replace "$NODE_IP/$PREFIX" dev "$BRIDGE"
	ip link set dev "$BRIDGE" up
	if [[ "$(cat /proc/sys/net/ipv4/ip_forward 2> /dev/null)" == 1 ]]; then
		log "WARNING: net.ipv4.ip_forward=1: pods have no default route, but the host forwards"
	fi
}

# A state dir first used on loopback has a serving certificate without the bridge address:
# re-sign it (same CA and key pair names as apiserver.sh) so pods can verify the apiserver.
serving_cert_for_node_ip() {
	local crt="$PKI/apiserver.crt"
	[[ -f $crt ]] || return 0
	openssl x509 -in "$crt" -noout -ext subjectAltName 2> /dev/null | grep -q "IP Address:$NODE_IP\b" && return 0
	log "re-signing the apiserver serving certificate for $NODE_IP"
	local san="DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc"
	san+=",DNS:kubernetes.default.svc.cluster.local,IP:127.0.0.1,IP:${TURNA_KUBERNETES_SERVICE_IP:-10.96.0.1},IP:$NODE_IP"
	openssl req -new -key "$PKI/apiserver.key" -subj "/CN=kube-apiserver" -out "$PKI/apiserver.csr" 2> /dev/null
	printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=%s\n' "$san" > "$PKI/apiserver.ext"
	openssl x509 -req -in "$PKI/apiserver.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
		-days 3650 -sha256 -extfile "$PKI/apiserver.ext" -out "$crt" 2> /dev/null
	rm -f "$PKI/apiserver.csr" "$PKI/apiserver.ext"
}

# The node's identity: system:node:<name> in system:nodes (the Node authorizer's subject).
node_kubeconfig() {
	local key="$PKI/node-$NODE_NAME.key" crt="$PKI/node-$NODE_NAME.crt" kc="$RUN/node-agent.kubeconfig"
	if [[ ! -f $crt ]]; then
		openssl genrsa -out "$key" 2048 2> /dev/null
		chmod 600 "$key"
		openssl req -new -key "$key" -subj "/O=system:nodes/CN=system:node:$NODE_NAME" -out "$PKI/node.csr" 2> /dev/null
		printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n' > "$PKI/node.ext"
		openssl x509 -req -in "$PKI/node.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
			-days 3650 -sha256 -extfile "$PKI/node.ext" -out "$crt" 2> /dev/null
		rm -f "$PKI/node.csr" "$PKI/node.ext"
	fi
	local server
	server="$(awk '$1 == "server:" {print $2; exit}' "$DIR/kubeconfig")"
	cat > "$kc" <<-KC
	apiVersion: v1
	kind: Config
	clusters:
	- name: turna-e2e
	  cluster:
	    server: $server
	    certificate-authority-data: $(base64 -w0 < "$PKI/ca.crt")
	users:
	- name: node
	  user:
	    client-certificate-data: $(base64 -w0 < "$crt")
	    client-key-data: $(base64 -w0 < "$key")
	contexts:
	- name: node
	  context: {cluster: turna-e2e, user: node}
	current-context: node
	KC
	chmod 600 "$kc"
}

agent_bin() {
	if [[ -z "$AGENT_BIN" ]]; then
		log "building the node agent (cargo build -p turna-e2e-node-agent)"
		(cd "$ROOT" && nice cargo build -q -p turna-e2e-node-agent)
		AGENT_BIN="$ROOT/target/debug/turna-node-agent"
	fi
	[[ -x "$AGENT_BIN" ]] || die "node agent binary $AGENT_BIN missing"
}

start_agent() {
	if agent_pid > /dev/null; then log "node agent already running"; return; fi
	: > "$LOGS/node-agent.log"
	local pid
	pid="$(daemon_start "$RUN/node-agent.pid" "$LOGS/node-agent.log" "$AGENT_BIN" run --node-name "$NODE_NAME" \
		--bridge "$BRIDGE" --pod-cidr "$POD_CIDR" --state-dir "$DIR/node" --kubeconfig "$RUN/node-agent.kubeconfig" \
		--image-map "$IMAGE_MAP" --client-ca-file "$PKI/ca.crt")" || die "node agent did not start"
	log "node agent started (pid $pid), log $LOGS/node-agent.log"
	local deadline=$(($(date +%s) + ${TURNA_START_TIMEOUT:-90}))
	until kubectl_admin get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}{.spec.taints}' 2> /dev/null | grep -qx True; do
		if ! agent_pid > /dev/null; then tail -n 30 "$LOGS/node-agent.log" >&2; die "node agent exited"; fi
		(($(date +%s) < deadline)) || { tail -n 30 "$LOGS/node-agent.log" >&2; die "node $NODE_NAME not Ready"; }
		sleep 0.5
	done
	log "node $NODE_NAME Ready (node IP $NODE_IP)"
}

# On SIGTERM the agent kills its pods and removes their namespaces (up to 15 s).
stop_agent() { daemon_stop "$RUN/node-agent.pid" "node agent" 15; }

install_turna() {
	if [[ ! -f "$KUSTOMIZE_DIR/kustomization.yaml" ]]; then
		log "no Kustomize base at $KUSTOMIZE_DIR: Turna not installed"
		return
	fi
	# The default image map runs target/{release,debug}/turna; another map names its own binary.
	if [[ $IMAGE_MAP == "$E2E_DIR/cluster/images.yaml" && ! -x "$ROOT/target/release/turna" && ! -x "$ROOT/target/debug/turna" ]]; then
		log "building the turna binary (the ghcr.io/rakunlabs/turna image)"
		(cd "$ROOT" && nice cargo build -q -p turna-operator --bin turna)
	fi
	log "installing Turna from $KUSTOMIZE_DIR"
	kubectl_admin apply --server-side --force-conflicts -k "$KUSTOMIZE_DIR" > "$LOGS/turna-install.log"
	local ns
	for ns in $(kubectl_admin get deploy -A -l app.kubernetes.io/name=turna-gateway,app.kubernetes.io/component=controller -o jsonpath='{range .items[*]}{.metadata.namespace}{" "}{end}' 2> /dev/null); do
		kubectl_admin -n "$ns" wait --for=condition=Available deploy -l app.kubernetes.io/name=turna-gateway,app.kubernetes.io/component=controller --timeout=180s >> "$LOGS/turna-install.log"
	done
	log "Turna installed"
}

write_env() {
	# apiserver.sh keeps these lines across its own restarts: replaced, not repeated.
	sed -i -E '/^export TURNA_(NODE|POD|CLUSTER)_/d' "$DIR/env"
	cat >> "$DIR/env" <<-EOF
	export TURNA_NODE_NAME=$NODE_NAME
	export TURNA_NODE_IP=$NODE_IP
	export TURNA_POD_CIDR=$POD_CIDR
	export TURNA_CLUSTER_BRIDGE=$BRIDGE
	EOF
}

case "$cmd" in
up)
	addons=1 stop_with=""
	while [[ $# -gt 0 ]]; do
		case "$1" in
		--no-addons) addons=0; shift ;;
		--stop-with) stop_with="${2:?--stop-with needs a pid}"; shift 2 ;;
		*) die "unknown option: $1" ;;
		esac
	done
	[[ $(id -u) == 0 ]] || die "cluster.sh up needs root (network namespaces, bridge, mounts)"
	for t in ip openssl setsid; do command -v "$t" > /dev/null || die "$t missing"; done
	t0=$(date +%s)
	mkdir -p "$RUN" "$LOGS"
	was_running=0
	if "$SCRIPTS/apiserver.sh" status "$DIR" > /dev/null 2>&1; then
		grep -q "server: https://$NODE_IP:" "$DIR/kubeconfig" 2> /dev/null ||
			die "a control plane not on $NODE_IP runs in $DIR: stop it first (apiserver.sh stop $DIR)"
		was_running=1
	fi
	# A failed or interrupted `up` of a cluster that was not running takes down what it started,
	# so nothing (processes, namespaces, the bridge, addresses) is left behind.
	# shellcheck disable=SC2317  # called by the trap
	undo_up() {
		local rc=$?
		if [[ $rc != 0 && $was_running == 0 ]]; then
			log "cluster up failed (exit $rc): taking down what it started"
			"$SCRIPTS/cluster.sh" down "$DIR" || true
		fi
		exit "$rc"
	}
	trap undo_up EXIT
	trap 'exit 143' TERM INT
	cat > "$CONF" <<-EOF
	TURNA_CLUSTER_BRIDGE=$BRIDGE
	TURNA_POD_CIDR=$POD_CIDR
	TURNA_NODE_NAME=$NODE_NAME
	TURNA_IMAGE_MAP=$IMAGE_MAP
	EOF
	"$SCRIPTS/build-tools.sh"
	agent_bin
	echo "TURNA_NODE_AGENT_BIN=$AGENT_BIN" >> "$CONF"
	if [[ -n "$stop_with" ]]; then
		# shellcheck disable=SC2016  # expanded by the inner bash
		daemon_start "$RUN/cluster-watchdog.pid" "$LOGS/watchdog.log" \
			bash -c 'while kill -0 "$1" 2>/dev/null; do sleep 1; done; "$2" down "$3"' \
			watchdog "$stop_with" "$SCRIPTS/cluster.sh" "$DIR" > /dev/null || die "watchdog did not start"
	fi
	bridge_up
	serving_cert_for_node_ip
	TURNA_APISERVER_ADDRESS="$NODE_IP" "$SCRIPTS/apiserver.sh" start "$DIR" --all
	node_kubeconfig
	write_env
	start_agent
	if [[ $addons == 1 ]]; then
		if [[ -x "$SCRIPTS/lb-controller.sh" ]]; then
			# Bounded: it may build turna-lb first, and must not hang cluster-up forever.
			TURNA_LB_INTERFACE="$BRIDGE" TURNA_LB_POOL="$LB_POOL" \
				timeout "${TURNA_LB_START_TIMEOUT:-900}" "$SCRIPTS/lb-controller.sh" start "$DIR" ||
				die "lb-controller.sh start failed or timed out"
		fi
		install_turna
	fi
	log "cluster up in $(($(date +%s) - t0))s"
	echo "export KUBECONFIG=$DIR/kubeconfig"
	;;
down)
	if [[ -x "$SCRIPTS/lb-controller.sh" ]]; then "$SCRIPTS/lb-controller.sh" stop "$DIR" || true; fi
	stop_agent
	if [[ -n "$AGENT_BIN" && -x "$AGENT_BIN" ]]; then
		"$AGENT_BIN" cleanup --node-name "$NODE_NAME" --bridge "$BRIDGE" --state-dir "$DIR/node" 2>> "$LOGS/node-agent.log" || true
	fi
	"$SCRIPTS/apiserver.sh" stop "$DIR"
	if ip link show dev "$BRIDGE" > /dev/null 2>&1; then
		ip link del dev "$BRIDGE" && log "bridge $BRIDGE removed"
	fi
	# (Not its process group: the caller may be the watchdog's own `down`.)
	if pid="$(daemon_pid "$RUN/cluster-watchdog.pid")" && [[ $pid != "$PPID" ]]; then
		kill "$pid" 2> /dev/null || true
	fi
	rm -f "$RUN/cluster-watchdog.pid"
	;;
env)
	"$SCRIPTS/apiserver.sh" env "$DIR"
	;;
status)
	rc=0
	"$SCRIPTS/apiserver.sh" status "$DIR" || rc=1
	if pid="$(agent_pid)"; then echo "node-agent running (pid $pid)"; else echo "node-agent stopped"; rc=1; fi
	if ip link show dev "$BRIDGE" > /dev/null 2>&1; then echo "bridge $BRIDGE up ($NODE_IP/$PREFIX)"; else echo "bridge $BRIDGE missing"; rc=1; fi
	exit $rc
	;;
*) usage ;;
esac
