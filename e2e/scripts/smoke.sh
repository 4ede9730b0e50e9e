#!/usr/bin/env bash
# Smoke check of the local control plane: start it (etcd, kube-apiserver, controller manager,
# scheduler, Gateway API CRDs) in a fresh state dir, create a GatewayClass and a Gateway with
# kubectl and read them back, check that ServiceAccount tokens authenticate and that RBAC
# denies and then allows, that a Deployment gets its ReplicaSet and Pod (controllers) and the
# Pod is judged Unschedulable (scheduler; there are no nodes), then stop and clean up.
#
#   e2e/scripts/smoke.sh [--keep] [--no-controllers]
set -euo pipefail
# shellcheck source=e2e/scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
SCRIPTS="$E2E_DIR/scripts"

keep=0 start_opts=(--all)
for a in "$@"; do
	case "$a" in
	--keep) keep=1 ;;
	--no-controllers) start_opts=(--crds) ;;
	*) die "unknown option: $a" ;;
	esac
done

t0=$(date +%s)
DIR="$(mktemp -d "${TMPDIR:-/tmp}/turna-smoke.XXXXXX")"
cleanup() {
	rc=$?
	"$SCRIPTS/apiserver.sh" stop "$DIR" || true
	if [[ $rc != 0 ]]; then
		log "FAILED; logs of $DIR/logs:"
		tail -n 15 "$DIR"/logs/*.log >&2 || true
	fi
	if [[ $keep == 1 || $rc != 0 ]]; then log "state kept in $DIR"; else rm -rf "$DIR"; fi
	exit $rc
}
trap cleanup EXIT

"$SCRIPTS/apiserver.sh" start "$DIR" "${start_opts[@]}"
eval "$("$SCRIPTS/apiserver.sh" env "$DIR")"
t_up=$(($(date +%s) - t0))
k() { kubectl "$@"; }
pass=0 fail=0
check() { # check DESCRIPTION COMMAND...
	local what="$1"; shift
	if out="$("$@" 2>&1)"; then
		pass=$((pass + 1)); log "ok: $what"
	else
		fail=$((fail + 1)); log "FAIL: $what"; printf '%s\n' "$out" >&2
	fi
}

k version -o json | jq -r '"client " + .clientVersion.gitVersion + ", server " + .serverVersion.gitVersion' >&2
check "server reports $K8S_VERSION" bash -c "kubectl version -o json | jq -e '.serverVersion.gitVersion == \"$K8S_VERSION\"'"

# --- Gateway API objects
k create namespace smoke > /dev/null
k apply -f - > /dev/null <<'EOF'
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata:
  name: turna-smoke
spec:
  controllerName: turna.dev/gateway-controller
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: smoke
  namespace: smoke
spec:
  gatewayClassName: turna-smoke
  listeners:
  - name: http
    protocol: HTTP
    port: 80
    allowedRoutes:
      namespaces:
        from: Same
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: smoke
  namespace: smoke
spec:
  parentRefs:
  - name: smoke
  rules:
  - backendRefs:
    - name: echo
      port: 8080
EOF
check "GatewayClass read back" bash -c \
	"[[ \$(kubectl get gatewayclass turna-smoke -o jsonpath='{.spec.controllerName}') == turna.dev/gateway-controller ]]"
check "Gateway read back" bash -c \
	"[[ \$(kubectl get gateway smoke -n smoke -o jsonpath='{.spec.listeners[0].port}') == 80 ]]"
check "HTTPRoute read back" kubectl get httproute smoke -n smoke
check "status subresource writable (controller-style patch)" kubectl patch gatewayclass turna-smoke \
	--subresource=status --type=merge -p \
	'{"status":{"conditions":[{"type":"Accepted","status":"True","reason":"Accepted","message":"smoke","lastTransitionTime":"2026-01-01T00:00:00Z","observedGeneration":1}]}}'
check "CRD validation rejects an invalid Gateway" bash -c '! kubectl apply -n smoke -f - 2>/dev/null <<EOF
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: bad}
spec: {gatewayClassName: turna-smoke, listeners: [{name: x, protocol: HTTP, port: 0}]}
EOF'
check "experimental channel served (ListenerSet, TCPRoute)" bash -c \
	"kubectl api-resources --api-group=gateway.networking.k8s.io -o name | grep -q listenersets && kubectl api-resources -o name | grep -q tcproutes"

# --- ServiceAccount tokens and RBAC
k create serviceaccount tester -n smoke > /dev/null
token="$(kubectl create token tester -n smoke --duration=10m)"
check "ServiceAccount token authenticates" bash -c \
	"[[ \$(kubectl --kubeconfig=/dev/null --server=$TURNA_APISERVER_URL --certificate-authority=$TURNA_APISERVER_CA --token=$token auth whoami -o jsonpath='{.status.userInfo.username}') == system:serviceaccount:smoke:tester ]]"
check "RBAC denies before a Role" bash -c \
	"! kubectl --kubeconfig=/dev/null --server=$TURNA_APISERVER_URL --certificate-authority=$TURNA_APISERVER_CA --token=$token get gateways -n smoke"
k create role gw-reader -n smoke --verb=get,list,watch --resource=gateways.gateway.networking.k8s.io > /dev/null
k create rolebinding gw-reader -n smoke --role=gw-reader --serviceaccount=smoke:tester > /dev/null
check "RBAC allows after a RoleBinding" bash -c \
	"for i in \$(seq 20); do kubectl --kubeconfig=/dev/null --server=$TURNA_APISERVER_URL --certificate-authority=$TURNA_APISERVER_CA --token=$token get gateways -n smoke && exit 0; sleep 0.5; done; exit 1"
check "RBAC still denies other namespaces" bash -c \
	"! kubectl --kubeconfig=/dev/null --server=$TURNA_APISERVER_URL --certificate-authority=$TURNA_APISERVER_CA --token=$token get gateways -n default"
check "static admin token works" bash -c \
	"curl -fsS --cacert $TURNA_APISERVER_CA -H \"Authorization: Bearer \$(cat $TURNA_APISERVER_TOKEN_FILE)\" $TURNA_APISERVER_URL/apis/gateway.networking.k8s.io/v1/namespaces/smoke/gateways/smoke | jq -e '.metadata.name == \"smoke\"'"

# --- controllers and scheduler
if [[ "${start_opts[*]}" == --all ]]; then
	check "default ServiceAccount created in a new namespace" bash -c \
		"for i in \$(seq 60); do kubectl get sa default -n smoke && exit 0; sleep 0.5; done; exit 1"
	check "kube-root-ca.crt published" bash -c \
		"for i in \$(seq 60); do kubectl get configmap kube-root-ca.crt -n smoke && exit 0; sleep 0.5; done; exit 1"
	k create deployment echo -n smoke --image=echo-basic --port=8080 > /dev/null
	k expose deployment echo -n smoke --port=8080 > /dev/null
	check "Deployment -> ReplicaSet -> Pod" bash -c \
		"for i in \$(seq 60); do [[ \$(kubectl get pods -n smoke -l app=echo -o name | wc -l) == 1 ]] && exit 0; sleep 0.5; done; exit 1"
	check "scheduler ran (Pod Unschedulable: no nodes)" bash -c \
		"for i in \$(seq 60); do kubectl get pods -n smoke -l app=echo -o jsonpath='{.items[0].status.conditions[?(@.type==\"PodScheduled\")].reason}' | grep -q Unschedulable && exit 0; sleep 0.5; done; exit 1"
	check "EndpointSlice for the Service" bash -c \
		"for i in \$(seq 60); do kubectl get endpointslices -n smoke -l kubernetes.io/service-name=echo -o name | grep -q . && exit 0; sleep 0.5; done; exit 1"
	check "namespace deletion finishes (namespace controller, GC)" bash -c \
		"kubectl delete namespace smoke --timeout=60s"
fi

log "control plane up in ${t_up}s, smoke total $(($(date +%s) - t0))s"
echo "smoke: $pass passed, $fail failed"
[[ $fail == 0 ]]
