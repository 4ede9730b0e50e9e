#!/usr/bin/env bash
# ExternalAuth (GEP-1494) and listener filters (GEP-5224) on the local cluster, end to end: the
# cases of the conformance tests proposed upstream (kubernetes-sigs/gateway-api#5082, PR #5113,
# not in the released v1.7.0 suite), against Istio's ext_authz sample server running as a pod
# (image turna.local/e2e/ext-authz, e2e/auth; it allows a request whose `x-ext-authz` header is
# `allow`, and denies others with 403, `x-ext-authz-check-result: denied` and a body):
#   - GRPC and HTTP: allowed requests reach the backend with the server's header; denied ones get
#     403 with the server's headers and body, and reach no backend;
#   - HTTP: the listed request headers reach the server (it echoes what it received);
#   - a filter whose server does not exist denies (403 or 5xx, as the proposed tests accept),
#     and the route says ResolvedRefs=False;
#   - a Gateway listener's ExternalAuth filter decides before routing.
#
#   KUBECONFIG=... e2e/external-auth/check.sh
#
# Needs a cluster with Turna installed and the image mapped (e2e/conformance/local.sh
# --external-auth does both); removes its namespace at the end.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
# shellcheck source=e2e/scripts/lib.sh
source "$ROOT/e2e/scripts/lib.sh"
PATH="$TOOLS_BIN:$PATH"
: "${KUBECONFIG:?KUBECONFIG names the cluster}"
NS=turna-external-auth
finish() {
	local rc=$?
	if [[ $rc != 0 ]]; then
		log "external-auth check failed; the objects:"
		kubectl -n "$NS" get gateways,httproutes,pods -o yaml 2> /dev/null | tail -150 || true
	fi
	kubectl delete namespace "$NS" --ignore-not-found --wait=false > /dev/null 2>&1 || true
	exit "$rc"
}
trap finish EXIT

log "external-auth: ext_authz server, echo backend, two Gateways and routes in $NS"
kubectl apply -f - > /dev/null << EOF
apiVersion: v1
kind: Namespace
metadata: {name: $NS}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: ext-authz, namespace: $NS}
spec:
  selector: {matchLabels: {app: ext-authz}}
  template:
    metadata: {labels: {app: ext-authz}}
    spec:
      containers:
        - name: ext-authz
          image: turna.local/e2e/ext-authz:latest
          args: ["-grpc", "9000", "-http", "8000"]
          readinessProbe: {tcpSocket: {port: 8000}, periodSeconds: 1}
---
apiVersion: v1
kind: Service
metadata: {name: ext-authz, namespace: $NS}
spec:
  selector: {app: ext-authz}
  ports:
    - {name: http, port: 8000}
    - {name: grpc, port: 9000, appProtocol: kubernetes.io/h2c}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: echo, namespace: $NS}
spec:
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
apiVersion: v1
kind: Service
metadata: {name: echo, namespace: $NS}
spec:
  selector: {app: echo}
  ports: [{port: 80, targetPort: 3000}]
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
metadata: {name: guarded, namespace: $NS}
spec:
  parentRefs: [{name: web}]
  rules:
    - matches: [{path: {type: PathPrefix, value: /grpc}}]
      filters:
        - type: ExternalAuth
          externalAuth: {protocol: GRPC, grpc: {}, backendRef: {name: ext-authz, port: 9000}}
      backendRefs: [{name: echo, port: 80}]
    - matches: [{path: {type: PathPrefix, value: /http}}]
      filters:
        - type: ExternalAuth
          externalAuth:
            protocol: HTTP
            http: {allowedHeaders: [x-ext-authz, x-extra]}
            backendRef: {name: ext-authz, port: 8000}
      backendRefs: [{name: echo, port: 80}]
    - matches: [{path: {type: PathPrefix, value: /missing}}]
      filters:
        - type: ExternalAuth
          externalAuth: {protocol: GRPC, grpc: {}, backendRef: {name: no-such-server, port: 9000}}
      backendRefs: [{name: echo, port: 80}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: filtered, namespace: $NS}
spec:
  gatewayClassName: ${TURNA_GATEWAY_CLASS:-turna}
  listeners:
    - name: http
      port: 80
      protocol: HTTP
      filters:
        requests:
          - type: ExternalAuth
            externalAuth: {protocol: GRPC, grpc: {}, backendRef: {name: ext-authz, port: 9000}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: open, namespace: $NS}
spec:
  parentRefs: [{name: filtered}]
  rules:
    - backendRefs: [{name: echo, port: 80}]
EOF
for gw in web filtered; do
	kubectl -n "$NS" wait --for=condition=Programmed "gateway/$gw" --timeout=180s > /dev/null
done
kubectl -n "$NS" wait --for=condition=Available deploy/echo deploy/ext-authz --timeout=180s > /dev/null
web="$(kubectl -n "$NS" get gateway web -o jsonpath='{.status.addresses[0].value}')"
filtered="$(kubectl -n "$NS" get gateway filtered -o jsonpath='{.status.addresses[0].value}')"
[[ -n $web && -n $filtered ]] || die "the Gateways have no addresses"

# call ADDRESS PATH [HEADER...]: "<status> <body>" of a GET, headers to $WORK_HEADERS.
WORK_HEADERS="$(mktemp)"
call() {
	local address="$1" path="$2"
	shift 2
	local args=()
	for h in "$@"; do args+=(-H "$h"); done
	curl -s --max-time 5 -D "$WORK_HEADERS" -o /dev/stdout -w ' %{http_code}' "${args[@]}" "http://$address$path" || true
}
status_of() { echo "${1##* }"; }
body_of() { echo "${1% *}"; }
# echoed BODY NAME: the value of request header NAME the echo backend saw.
echoed() {
	python3 -c 'import json, sys
try:
    h = json.loads(sys.argv[1]).get("headers", {})
    print(",".join(next((v for k, v in h.items() if k.lower() == sys.argv[2]), [])))
except Exception:
    print("")' "$1" "$2"
}

deadline=$((SECONDS + 90))
until [[ "$(status_of "$(call "$web" /grpc/x "x-ext-authz: allow")")" == 200 ]]; do
	((SECONDS < deadline)) || die "no allowed request through $web/grpc"
	sleep 0.5
done
for path in /grpc/items /http/items; do
	reply="$(call "$web" "$path" "x-ext-authz: allow" "x-extra: seen")"
	[[ "$(status_of "$reply")" == 200 ]] || die "$path allowed: $reply"
	result="$(echoed "$(body_of "$reply")" x-ext-authz-check-result)"
	[[ $result == allowed ]] || die "$path: the backend did not get the server's header (got '$result')"
	reply="$(call "$web" "$path" "x-ext-authz: deny")"
	[[ "$(status_of "$reply")" == 403 ]] || die "$path denied: $reply"
	grep -qi '^x-ext-authz-check-result: denied' "$WORK_HEADERS" || die "$path: the client did not get the server's header on a denial"
	[[ "$(body_of "$reply")" == *"denied by ext_authz"* ]] || die "$path: the client did not get the server's body: $reply"
	[[ "$(body_of "$reply")" != *'"pod"'* ]] || die "$path: a denied request reached the backend"
done
log "external-auth: GRPC and HTTP allow (the server's header upstream) and deny (its status, headers and body)"

# HTTP: the allowed request headers reach the server, which says what it received.
reply="$(call "$web" /http/items "x-ext-authz: allow" "x-extra: seen")"
received="$(echoed "$(body_of "$reply")" x-ext-authz-check-received)"
[[ $received == *x-extra* || $received == *X-Extra* ]] || die "the HTTP server did not receive x-extra: '$received'"
log "external-auth: HTTP allowedHeaders reach the server"

# A server that does not exist: denied (403 or 5xx), never let through; ResolvedRefs=False.
code="$(status_of "$(call "$web" /missing/x "x-ext-authz: allow")")"
[[ $code == 403 || $code == 5* ]] || die "a filter without a server answered $code"
resolved="$(kubectl -n "$NS" get httproute guarded -o jsonpath='{.status.parents[0].conditions[?(@.type=="ResolvedRefs")].status}')"
[[ $resolved == False ]] || die "the route with a missing auth server says ResolvedRefs=$resolved"
log "external-auth: a missing server denies ($code) and the route says ResolvedRefs=False"

# The listener's filter decides before routing.
deadline=$((SECONDS + 60))
until [[ "$(status_of "$(call "$filtered" /any "x-ext-authz: allow")")" == 200 ]]; do
	((SECONDS < deadline)) || die "no allowed request through the filtered listener"
	sleep 0.5
done
code="$(status_of "$(call "$filtered" /any "x-ext-authz: deny")")"
[[ $code == 403 ]] || die "the listener filter let a denied request through ($code)"
log "external-auth: the Gateway listener's ExternalAuth filter allows and denies before routing"
rm -f "$WORK_HEADERS"
