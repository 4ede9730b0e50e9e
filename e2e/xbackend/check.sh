#!/usr/bin/env bash
# XBackend (GEP-4894) and XBackendTrafficPolicy on the local cluster, end to end: an
# EndpointSelector XBackend selects the pods of an echo Deployment (two replicas) by label, the
# controller keeps a headless Service for it (turna-xb-echo-<hash>, owner reference, label
# gateway.turna.rakunlabs.com/xbackend) whose EndpointSlices Kubernetes fills, an HTTPRoute sends
# to the XBackend, and its cookie session keeps a client on one pod. The XBackend and an
# XBackendTrafficPolicy targeting it get status ancestors with Accepted=True.
#
#   KUBECONFIG=... e2e/xbackend/check.sh
#
# Needs a cluster with Turna installed (e2e/conformance/local.sh --xbackend runs it after the
# suite); removes its namespace at the end.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
# shellcheck source=e2e/scripts/lib.sh
source "$ROOT/e2e/scripts/lib.sh"
PATH="$TOOLS_BIN:$PATH"
: "${KUBECONFIG:?KUBECONFIG names the cluster}"
NS=turna-xbackend
WORK="$(mktemp -d)"
finish() {
	local rc=$?
	if [[ $rc != 0 ]]; then
		log "xbackend check failed; the objects:"
		kubectl -n "$NS" get xbackends,xbackendtrafficpolicies,httproutes,services,endpointslices -o yaml 2> /dev/null | tail -150 || true
	fi
	kubectl delete namespace "$NS" --ignore-not-found --wait=false > /dev/null 2>&1 || true
	rm -rf "$WORK"
	exit "$rc"
}
trap finish EXIT

log "xbackend: echo Deployment, XBackend, XBackendTrafficPolicy, Gateway and HTTPRoute in $NS"
kubectl apply -f - > /dev/null << EOF
apiVersion: v1
kind: Namespace
metadata: {name: $NS}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: echo, namespace: $NS}
spec:
  replicas: 2
  selector: {matchLabels: {app: echo}}
  template:
    metadata: {labels: {app: echo}}
    spec:
      containers:
        - name: echo
          image: registry.k8s.io/gateway-api/echo-basic:v20251204-v1.4.1
          env:
            - {name: POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}
            - {name: NAMESPACE, valueFrom: {fieldRef: {fieldPath: metadata.namespace}}}
---
apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackend
metadata: {name: echo, namespace: $NS}
spec:
  type: EndpointSelector
  endpointSelector:
    matchLabels: {app: echo}
  port: {number: 3000}
  sessionPersistence:
    type: Cookie
    cookie: {name: echo-session}
---
apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XBackendTrafficPolicy
metadata: {name: echo, namespace: $NS}
spec:
  targetRefs: [{group: gateway.networking.x-k8s.io, kind: XBackend, name: echo}]
  retryConstraint:
    budget: {percent: 20, interval: 10s}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: web, namespace: $NS}
spec:
  gatewayClassName: ${TURNA_GATEWAY_CLASS:-turna}
  listeners: [{name: http, port: 80, protocol: HTTP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: shop, namespace: $NS}
spec:
  parentRefs: [{name: web}]
  rules:
    - backendRefs: [{group: gateway.networking.x-k8s.io, kind: XBackend, name: echo}]
EOF
kubectl -n "$NS" wait --for=condition=Programmed gateway/web --timeout=180s > /dev/null
kubectl -n "$NS" wait --for=condition=Available deploy/echo --timeout=180s > /dev/null
address="$(kubectl -n "$NS" get gateway web -o jsonpath='{.status.addresses[0].value}')"
[[ -n $address ]] || die "Gateway $NS/web has no address"

# The controller's Service for the XBackend: its name, owner reference, the label.
service=""
deadline=$((SECONDS + 30))
until [[ -n $service ]]; do
	((SECONDS < deadline)) || die "no Service labelled for XBackend echo"
	service="$(kubectl -n "$NS" get services -l gateway.turna.rakunlabs.com/xbackend=echo -o jsonpath='{.items[0].metadata.name}' 2> /dev/null || true)"
	[[ -n $service ]] || sleep 0.5
done
[[ $service == turna-xb-echo-* ]] || die "no Service labelled for XBackend echo (got '${service}')"
owner="$(kubectl -n "$NS" get service "$service" -o jsonpath='{.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name}')"
[[ $owner == XBackend/echo ]] || die "Service $service is owned by '$owner', not XBackend/echo"
log "xbackend: Service $service owned by $owner"

# pod_of ARGS...: the pod that answered a GET through the Gateway ("" on failure).
pod_of() {
	curl -s --max-time 5 "$@" "http://$address/shop" | python3 -c 'import json, sys
try:
    print(json.load(sys.stdin).get("pod", ""))
except Exception:
    print("")'
}
deadline=$((SECONDS + 90))
until [[ -n "$(pod_of)" ]]; do
	((SECONDS < deadline)) || die "no answer through $address to the XBackend"
	sleep 0.5
done
# Both pods serve without a session; with the cookie every request reaches the same one.
declare -A seen=()
for _ in $(seq 1 40); do
	p="$(pod_of)"
	[[ -n $p ]] && seen[$p]=1
done
((${#seen[@]} == 2)) || die "requests without a session reached ${#seen[@]} pod(s), not 2: ${!seen[*]}"
cookie="$(curl -s -o /dev/null -D - --max-time 5 "http://$address/shop" | sed -n 's/^[Ss]et-[Cc]ookie: \(echo-session=[^;]*\).*/\1/p' | tr -d '\r')"
[[ -n $cookie ]] || die "no echo-session cookie from the XBackend's session persistence"
first="$(pod_of -H "Cookie: $cookie")"
for _ in $(seq 1 20); do
	p="$(pod_of -H "Cookie: $cookie")"
	[[ $p == "$first" ]] || die "the session moved from $first to $p"
done
log "xbackend: 40 requests over both pods; 20 with the session cookie all on $first"

# status.ancestors of the XBackend and of the policy: the Gateway, Accepted=True.
accepted() {
	kubectl -n "$NS" get "$1" -o jsonpath='{range .status.ancestors[*]}{.ancestorRef.name}={.conditions[?(@.type=="Accepted")].status}{"\n"}{end}'
}
deadline=$((SECONDS + 60))
until [[ "$(accepted xbackend/echo)" == "web=True" && "$(accepted xbackendtrafficpolicy/echo)" == "web=True" ]]; do
	((SECONDS < deadline)) || die "statuses: XBackend '$(accepted xbackend/echo)', policy '$(accepted xbackendtrafficpolicy/echo)'"
	sleep 1
done
log "xbackend: XBackend and XBackendTrafficPolicy report Accepted=True for Gateway web"
