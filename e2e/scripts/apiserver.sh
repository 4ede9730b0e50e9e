#!/usr/bin/env bash
# A real Kubernetes control plane on loopback, from the binaries of build-tools.sh.
#
#   apiserver.sh start <dir> [--crds] [--with-controllers] [--with-scheduler] [--all]
#   apiserver.sh stop <dir>          # stops every process of <dir> (keeps the state)
#   apiserver.sh env <dir>           # prints `export KUBECONFIG=... PATH=...` for eval
#   apiserver.sh status <dir>
#   apiserver.sh crds <dir>          # (re)install the Gateway API CRDs into a running <dir>
#
# start: etcd + kube-apiserver on 127.0.0.1 with free ports, serving certs from a private CA
# (openssl), an admin identity (client cert in system:masters and a static bearer token),
# service-account signing keys (ServiceAccount tokens work), --authorization-mode=Node,RBAC.
# Writes <dir>/kubeconfig and <dir>/env (shell syntax, also easy to parse from Rust tests), and
# waits for /readyz. Options:
#   --crds              install the Gateway API $GATEWAY_API_VERSION experimental CRDs (from
#                       the Go module cache) and wait until they are Established
#   --with-controllers  start kube-controller-manager (service accounts and their tokens,
#                       namespaces, garbage collector, deployments, replicasets, endpoints,
#                       endpointslices, root CA configmaps, ...; TURNA_KCM_CONTROLLERS overrides)
#   --with-scheduler    start kube-scheduler
#   --all               all three
#   --stop-with PID     stop this control plane (and delete <dir> if TURNA_E2E_CLEANUP=1) once
#                       process PID has exited: for test binaries that cannot run destructors
# Restarting an existing <dir> reuses its data, certificates and (if still free) its ports.
#
# Environment: TURNA_TOOLS_DIR (binaries, see build-tools.sh), TURNA_APISERVER_ADDRESS
# (default 127.0.0.1), TURNA_START_TIMEOUT (seconds, default 90), TURNA_GATEWAY_VAP=0 to skip
# the Gateway API ValidatingAdmissionPolicy.
set -euo pipefail
# shellcheck source=e2e/scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

usage() { awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0" >&2; exit 2; }
[[ $# -ge 2 ]] || usage
cmd="$1"; shift
DIR="$1"; shift
if [[ "$cmd" == start ]]; then mkdir -p "$DIR"; fi
if [[ "$cmd" == stop && ! -d "$DIR" ]]; then exit 0; fi
[[ -d "$DIR" ]] || die "$DIR does not exist"
DIR="$(cd "$DIR" && pwd)"

ADDR="${TURNA_APISERVER_ADDRESS:-127.0.0.1}"
TIMEOUT="${TURNA_START_TIMEOUT:-90}"
PKI="$DIR/pki"
LOGS="$DIR/logs"
RUN="$DIR/run"
KUBECONFIG_FILE="$DIR/kubeconfig"
ENV_FILE="$DIR/env"
SERVICE_CIDR="${TURNA_SERVICE_CIDR:-10.96.0.0/16}"
SERVICE_IP="${TURNA_KUBERNETES_SERVICE_IP:-10.96.0.1}"
KCM_CONTROLLERS="${TURNA_KCM_CONTROLLERS:-serviceaccount-controller,serviceaccount-token-controller,legacy-serviceaccount-token-cleaner-controller,root-ca-certificate-publisher-controller,namespace-controller,garbage-collector-controller,deployment-controller,replicaset-controller,endpoints-controller,endpointslice-controller,endpointslice-mirroring-controller,pod-garbage-collector-controller,ttl-after-finished-controller,job-controller,statefulset-controller,daemonset-controller,disruption-controller,clusterrole-aggregation-controller,cronjob-controller,resourcequota-controller,service-cidr-controller,validatingadmissionpolicy-status-controller}"

# ---------------------------------------------------------------- helpers

bin() {
	local b="$TOOLS_BIN/$1"
	[[ -x "$b" ]] || die "$b missing: run e2e/scripts/build-tools.sh (make cluster-tools)"
	echo "$b"
}

port_free() { ! ss -Hltn "sport = :$1" 2>/dev/null | grep -q .; }

free_port() {
	local p
	for _ in $(seq 1 200); do
		# Below the kernel's ephemeral range (32768+), so outgoing connections do not take it.
		p=$((20000 + RANDOM % 12000))
		if port_free "$p" && ! grep -qx "$p" "$RUN/.ports-taken" 2>/dev/null; then
			echo "$p" >> "$RUN/.ports-taken"
			echo "$p"
			return
		fi
	done
	die "no free port found"
}

pid_alive() { daemon_pid "$RUN/$1.pid" > /dev/null; }

# Components this invocation started: stopped again when it fails, so a failed start leaves no
# process behind.
STARTED=()

# launch NAME BINARY ARGS...: detached (own session, survives this script), logs to logs/NAME.log.
launch() {
	local name="$1" pid; shift
	if pid_alive "$name"; then log "$name already running (pid $(daemon_pid "$RUN/$name.pid"))"; return; fi
	: > "$LOGS/$name.log"
	pid="$(daemon_start "$RUN/$name.pid" "$LOGS/$name.log" "$@")" || die "$name did not start"
	STARTED+=("$name")
	log "$name started (pid $pid), log $LOGS/$name.log"
}

# wait_for NAME SECONDS COMMAND...: poll COMMAND until it succeeds, failing fast if NAME died.
# Returns 3 if NAME died because its port was taken meanwhile (the caller retries).
wait_for() {
	local name="$1" secs="$2"; shift 2
	local deadline=$(($(date +%s) + secs))
	until "$@" > /dev/null 2>&1; do
		if ! pid_alive "$name"; then
			if grep -q "address already in use" "$LOGS/$name.log"; then
				log "$name: port taken meanwhile"
				rm -f "$RUN/$name.pid"
				return 3
			fi
			tail -n 30 "$LOGS/$name.log" >&2 || true
			die "$name exited; see $LOGS/$name.log"
		fi
		if (($(date +%s) > deadline)); then
			tail -n 30 "$LOGS/$name.log" >&2 || true
			die "$name not ready after ${secs}s; see $LOGS/$name.log"
		fi
		sleep 0.5
	done
}

stop_one() { daemon_stop "$RUN/$1.pid" "$1"; }

# ---------------------------------------------------------------- certificates

gen_key() { openssl genrsa -out "$1" 2048 2> /dev/null; chmod 600 "$1"; }

# sign NAME SUBJECT EXTENSIONS: NAME.key/NAME.crt signed by the CA.
sign() {
	local name="$1" subj="$2" ext="$3"
	gen_key "$PKI/$name.key"
	openssl req -new -key "$PKI/$name.key" -subj "$subj" -out "$PKI/$name.csr" 2> /dev/null
	printf '%b\n' "$ext" > "$PKI/$name.ext"
	openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
		-days 3650 -sha256 -extfile "$PKI/$name.ext" -out "$PKI/$name.crt" 2> /dev/null
	rm -f "$PKI/$name.csr" "$PKI/$name.ext"
}

client_ext='basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth'

gen_pki() {
	[[ -f "$PKI/.done" ]] && return
	mkdir -p "$PKI"
	log "generating certificates in $PKI"
	gen_key "$PKI/ca.key"
	openssl req -x509 -new -key "$PKI/ca.key" -subj "/CN=turna-e2e-ca" -days 3650 -sha256 \
		-addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
		-out "$PKI/ca.crt" 2> /dev/null
	local san="DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc"
	san+=",DNS:kubernetes.default.svc.cluster.local,IP:127.0.0.1,IP:$SERVICE_IP"
	[[ "$ADDR" == 127.0.0.1 ]] || san+=",IP:$ADDR"
	sign apiserver "/CN=kube-apiserver" \
		"basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=$san"
	# Identities: admin (system:masters), the control-plane components (bootstrap RBAC binds
	# these user names), and the apiserver's client identity towards kubelets (logs/exec).
	sign admin "/O=system:masters/CN=turna-admin" "$client_ext"
	sign controller-manager "/CN=system:kube-controller-manager" "$client_ext"
	sign scheduler "/CN=system:kube-scheduler" "$client_ext"
	sign apiserver-kubelet-client "/CN=kube-apiserver-kubelet-client" "$client_ext"
	# Service-account token signing key pair.
	gen_key "$PKI/sa.key"
	openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2> /dev/null
	# Static bearer token for curl and quick tools: token,user,uid,"group1,group2".
	local token
	token="$(openssl rand -hex 24)"
	echo "$token" > "$PKI/admin.token"
	echo "$token,turna-admin-token,turna-admin-token,\"system:masters\"" > "$PKI/tokens.csv"
	chmod 600 "$PKI/admin.token" "$PKI/tokens.csv"
	touch "$PKI/.done"
}

# write_kubeconfig FILE USER-CERT-NAME: kubeconfig with embedded credentials.
write_kubeconfig() {
	local file="$1" who="$2"
	cat > "$file" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: turna-e2e
  cluster:
    server: https://$ADDR:$API_PORT
    certificate-authority-data: $(base64 -w0 < "$PKI/ca.crt")
users:
- name: $who
  user:
    client-certificate-data: $(base64 -w0 < "$PKI/$who.crt")
    client-key-data: $(base64 -w0 < "$PKI/$who.key")
contexts:
- name: turna-e2e
  context:
    cluster: turna-e2e
    user: $who
current-context: turna-e2e
EOF
	chmod 600 "$file"
}

# ---------------------------------------------------------------- ports

load_ports() {
	rm -f "$RUN/.ports-taken"
	if [[ -f "$RUN/ports" ]]; then
		# shellcheck disable=SC1091
		source "$RUN/ports"
		# A component still running holds its own ports (the API server restarted alone, say):
		# only the ports of the others must be free.
		local entry name p taken=""
		for entry in "etcd:$ETCD_CLIENT_PORT" "etcd:$ETCD_PEER_PORT" "kube-apiserver:$API_PORT" \
			"kube-controller-manager:$KCM_PORT" "kube-scheduler:$SCHED_PORT"; do
			name="${entry%%:*}" p="${entry#*:}"
			pid_alive "$name" && continue
			port_free "$p" || { taken="$p"; break; }
		done
		if [[ -n $taken ]]; then
			log "port $taken of the previous run is taken now: choosing new ports (the running components stop)"
			for name in kube-scheduler kube-controller-manager kube-apiserver etcd; do stop_one "$name"; done
			rm -f "$RUN/ports"
		fi
	fi
	if [[ ! -f "$RUN/ports" ]]; then
		ETCD_CLIENT_PORT=$(free_port); ETCD_PEER_PORT=$(free_port); API_PORT=$(free_port)
		KCM_PORT=$(free_port); SCHED_PORT=$(free_port)
		cat > "$RUN/ports" <<EOF
ETCD_CLIENT_PORT=$ETCD_CLIENT_PORT
ETCD_PEER_PORT=$ETCD_PEER_PORT
API_PORT=$API_PORT
KCM_PORT=$KCM_PORT
SCHED_PORT=$SCHED_PORT
EOF
	fi
}

api_curl() {
	curl -fsS --max-time 5 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
		"https://$ADDR:$API_PORT$1"
}

# ---------------------------------------------------------------- components

start_etcd() {
	mkdir -p "$DIR/etcd"
	chmod 700 "$DIR/etcd"
	launch etcd "$(bin etcd)" \
		--name=turna-e2e --data-dir="$DIR/etcd" \
		--listen-client-urls="http://127.0.0.1:$ETCD_CLIENT_PORT" \
		--advertise-client-urls="http://127.0.0.1:$ETCD_CLIENT_PORT" \
		--listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
		--initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
		--initial-cluster="turna-e2e=http://127.0.0.1:$ETCD_PEER_PORT" \
		--unsafe-no-fsync --snapshot-count=10000 --quota-backend-bytes=2147483648 \
		--log-level=warn
	wait_for etcd "$TIMEOUT" curl -fsS --max-time 2 "http://127.0.0.1:$ETCD_CLIENT_PORT/health"
}

start_apiserver() {
	local admission=()
	# Without the controller manager nothing creates the `default` ServiceAccount, and the
	# ServiceAccount admission plugin would then reject every pod (envtest does the same).
	[[ $with_controllers == 1 ]] || admission=(--disable-admission-plugins=ServiceAccount)
	# The endpoint reconciler refuses a loopback advertise address; the `kubernetes` Service
	# then has no endpoints (a node agent giving pods their own network sets
	# TURNA_APISERVER_ADDRESS to a bridge address instead).
	local reconciler=lease
	[[ "$ADDR" != 127.* ]] || reconciler=none
	launch kube-apiserver "$(bin kube-apiserver)" \
		--etcd-servers="http://127.0.0.1:$ETCD_CLIENT_PORT" \
		--bind-address="$ADDR" --advertise-address="$ADDR" --secure-port="$API_PORT" \
		--tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
		--client-ca-file="$PKI/ca.crt" --token-auth-file="$PKI/tokens.csv" \
		--authorization-mode=Node,RBAC --endpoint-reconciler-type="$reconciler" \
		--service-account-issuer=https://kubernetes.default.svc.cluster.local \
		--service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
		--service-cluster-ip-range="$SERVICE_CIDR" \
		--kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" \
		--kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
		--kubelet-preferred-address-types="${TURNA_KUBELET_ADDRESS_TYPES:-InternalIP,Hostname}" \
		--allow-privileged=true --profiling=false --enable-priority-and-fairness=false \
		"${admission[@]}" \
		--v="${TURNA_APISERVER_V:-1}"
	wait_for kube-apiserver "$TIMEOUT" api_curl /readyz || return
	log "kube-apiserver ready at https://$ADDR:$API_PORT"
}

start_controller_manager() {
	write_kubeconfig "$RUN/controller-manager.kubeconfig" controller-manager
	local kc="$RUN/controller-manager.kubeconfig"
	local attempt rc
	for attempt in 1 2 3; do
		launch kube-controller-manager "$(bin kube-controller-manager)" \
			--kubeconfig="$kc" --authentication-kubeconfig="$kc" --authorization-kubeconfig="$kc" \
			--bind-address=127.0.0.1 --secure-port="$KCM_PORT" \
			--controllers="$KCM_CONTROLLERS" \
			--service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" \
			--use-service-account-credentials=true \
			--service-cluster-ip-range="$SERVICE_CIDR" \
			--leader-elect=false --v="${TURNA_KCM_V:-1}"
		rc=0
		wait_for kube-controller-manager "$TIMEOUT" \
			curl -fsSk --max-time 2 "https://127.0.0.1:$KCM_PORT/healthz" || rc=$?
		[[ $rc == 3 && $attempt != 3 ]] || break
		KCM_PORT=$(free_port); sed -i "s/^KCM_PORT=.*/KCM_PORT=$KCM_PORT/" "$RUN/ports"
	done
	[[ $rc == 0 ]] || die "could not start kube-controller-manager"
	# The first sign that it works: the `default` ServiceAccount of `default`.
	wait_for kube-controller-manager "$TIMEOUT" "$(bin kubectl)" --kubeconfig "$KUBECONFIG_FILE" \
		get serviceaccount default -n default
	log "kube-controller-manager ready (default ServiceAccount exists)"
}

start_scheduler() {
	write_kubeconfig "$RUN/scheduler.kubeconfig" scheduler
	local kc="$RUN/scheduler.kubeconfig"
	local attempt rc
	for attempt in 1 2 3; do
		launch kube-scheduler "$(bin kube-scheduler)" \
			--kubeconfig="$kc" --authentication-kubeconfig="$kc" --authorization-kubeconfig="$kc" \
			--bind-address=127.0.0.1 --secure-port="$SCHED_PORT" \
			--leader-elect=false --v="${TURNA_SCHEDULER_V:-1}"
		rc=0
		wait_for kube-scheduler "$TIMEOUT" curl -fsSk --max-time 2 "https://127.0.0.1:$SCHED_PORT/healthz" || rc=$?
		[[ $rc == 3 && $attempt != 3 ]] || break
		SCHED_PORT=$(free_port); sed -i "s/^SCHED_PORT=.*/SCHED_PORT=$SCHED_PORT/" "$RUN/ports"
	done
	[[ $rc == 0 ]] || die "could not start kube-scheduler"
	log "kube-scheduler ready"
}

gateway_api_dir() {
	local d
	d="$(cd "${TMPDIR:-/tmp}" && GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/gateway-api@$GATEWAY_API_VERSION" | jq -r .Dir)"
	[[ -d "$d/config/crd/experimental" ]] || die "no CRDs under $d/config/crd/experimental"
	echo "$d"
}

install_crds() {
	local d files=()
	d="$(gateway_api_dir)/config/crd/experimental"
	local f
	for f in "$d"/*.yaml; do
		case "$(basename "$f")" in
		kustomization.yaml) ;;
		*_vap_*) [[ "${TURNA_GATEWAY_VAP:-1}" == 0 ]] || files+=(-f "$f") ;;
		*) files+=(-f "$f") ;;
		esac
	done
	log "installing Gateway API $GATEWAY_API_VERSION experimental CRDs from $d"
	local k
	k="$(bin kubectl)"
	"$k" --kubeconfig "$KUBECONFIG_FILE" apply --server-side --force-conflicts "${files[@]}" > "$LOGS/crds.log"
	"$k" --kubeconfig "$KUBECONFIG_FILE" wait --for condition=Established --timeout="${TIMEOUT}s" crd --all >> "$LOGS/crds.log"
	# Discovery must show the group before clients (kubectl, kube-rs) can use it.
	wait_for kube-apiserver "$TIMEOUT" api_curl /apis/gateway.networking.k8s.io/v1
	log "CRDs established: $(grep -c 'condition met' "$LOGS/crds.log")"
}

write_env() {
	# Lines others added (cluster.sh: the node and pod network) survive a restart.
	local kept=""
	[[ -f $ENV_FILE ]] && kept="$(grep -E '^export TURNA_(NODE|POD|CLUSTER)_' "$ENV_FILE" || true)"
	cat > "$ENV_FILE" <<EOF
# Turna e2e control plane in $DIR (written by e2e/scripts/apiserver.sh)
export KUBECONFIG=$KUBECONFIG_FILE
export TURNA_E2E_DIR=$DIR
export TURNA_APISERVER_URL=https://$ADDR:$API_PORT
export TURNA_APISERVER_CA=$PKI/ca.crt
export TURNA_APISERVER_TOKEN_FILE=$PKI/admin.token
export TURNA_SA_SIGNING_KEY=$PKI/sa.key
export TURNA_ETCD_URL=http://127.0.0.1:$ETCD_CLIENT_PORT
export TURNA_TOOLS_BIN=$TOOLS_BIN
export PATH=$TOOLS_BIN:\$PATH
EOF
	[[ -z $kept ]] || echo "$kept" >> "$ENV_FILE"
}

# ---------------------------------------------------------------- commands

with_crds=0 with_controllers=0 with_scheduler=0 stop_with=""
while [[ $# -gt 0 ]]; do
	a="$1"; shift
	case "$a" in
	--stop-with) stop_with="${1:?--stop-with needs a pid}"; shift ;;
	--crds) with_crds=1 ;;
	--with-controllers) with_controllers=1 ;;
	--with-scheduler) with_scheduler=1 ;;
	--all) with_crds=1; with_controllers=1; with_scheduler=1 ;;
	*) die "unknown option: $a" ;;
	esac
done

case "$cmd" in
start)
	t0=$(date +%s)
	mkdir -p "$LOGS" "$RUN"
	# A failed start stops what it started (newest first) instead of leaving it running.
	# shellcheck disable=SC2317  # called by the trap
	undo_start() {
		local rc=$? i
		if [[ $rc != 0 ]]; then
			for ((i = ${#STARTED[@]} - 1; i >= 0; i--)); do stop_one "${STARTED[i]}"; done
		fi
		exit "$rc"
	}
	trap undo_start EXIT
	command -v openssl > /dev/null || die "openssl missing (apt-get install openssl)"
	gen_pki
	if pid_alive kube-apiserver; then
		# shellcheck disable=SC1091
		source "$RUN/ports"
		log "control plane of $DIR already running"
	else
		for attempt in 1 2 3; do
			load_ports
			rc=0
			start_etcd && start_apiserver || rc=$?
			[[ $rc != 0 ]] || break
			[[ $rc == 3 && $attempt != 3 ]] || die "could not start etcd and kube-apiserver"
			stop_one kube-apiserver; stop_one etcd
			rm -f "$RUN/ports"
		done
	fi
	write_kubeconfig "$KUBECONFIG_FILE" admin
	write_env
	[[ $with_controllers == 1 ]] && start_controller_manager
	[[ $with_scheduler == 1 ]] && start_scheduler
	[[ $with_crds == 1 ]] && install_crds
	if [[ -n "$stop_with" ]]; then
		# A watchdog in its own session: polls the pid, then stops everything of DIR.
		# shellcheck disable=SC2016  # expanded by the inner bash
		pid="$(daemon_start "$RUN/watchdog.pid" "$LOGS/watchdog.log" bash -c 'while kill -0 "$1" 2>/dev/null; do sleep 1; done
			"$2" stop "$3"
			[[ "${TURNA_E2E_CLEANUP:-0}" == 1 ]] && rm -rf "$3"' \
			watchdog "$stop_with" "$(cd "$(dirname "$0")" && pwd)/$(basename "$0")" "$DIR")" || die "watchdog did not start"
		log "will stop when pid $stop_with exits (watchdog pid $pid)"
	fi
	log "up in $(($(date +%s) - t0))s: eval \"\$($0 env $DIR)\""
	;;
stop)
	# The API clients and the apiserver stop in parallel (each takes ~2s to shut down), etcd last.
	for c in kube-scheduler kube-controller-manager kube-apiserver; do stop_one "$c" & done
	wait
	stop_one etcd
	# The watchdog, unless it is the caller.
	# (Not its process group: the caller may be the watchdog's own `stop`.)
	if pid="$(daemon_pid "$RUN/watchdog.pid")" && [[ $pid != "$PPID" ]]; then
		kill "$pid" 2> /dev/null || true
	fi
	rm -f "$RUN/watchdog.pid"
	;;
env)
	[[ -f "$ENV_FILE" ]] || die "$DIR has no env file: start it first"
	cat "$ENV_FILE"
	;;
status)
	rc=0
	for c in etcd kube-apiserver kube-controller-manager kube-scheduler; do
		if pid="$(daemon_pid "$RUN/$c.pid")"; then echo "$c running (pid $pid)"; else echo "$c stopped"; [[ $c == etcd || $c == kube-apiserver ]] && rc=1; fi
	done
	exit $rc
	;;
crds)
	# shellcheck disable=SC1091
	source "$RUN/ports"
	install_crds
	;;
*) usage ;;
esac
