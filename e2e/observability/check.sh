#!/usr/bin/env bash
# Prometheus discovers and scrapes Turna on the local cluster the way a cluster's Prometheus
# does without the Prometheus Operator: by the pods' prometheus.io/scrape, /port and /path
# annotations (kubernetes_sd_configs, role pod), which the Kustomize base puts on the
# controller's pods and the controller on every proxy pod it provisions.
#
#   KUBECONFIG=... e2e/observability/check.sh
#
# Needs a cluster with Turna installed (e2e/conformance/local.sh runs it after the smoke suite):
# applies a Gateway, an HTTPRoute and an echo backend in namespace turna-observability, sends
# requests through the Gateway's address, starts Prometheus (built from e2e/observability/go.mod)
# on loopback, and queries it until the controller's reconcile series and the proxy's request
# series for the route are there; removes the namespace and stops Prometheus at the end.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
# shellcheck source=e2e/scripts/lib.sh
source "$ROOT/e2e/scripts/lib.sh"
PATH="$TOOLS_BIN:$PATH"
: "${KUBECONFIG:?KUBECONFIG names the cluster}"
NS=turna-observability
REQUESTS=20

PROMETHEUS="$("$ROOT/e2e/scripts/build-observability.sh" prometheus)/prometheus"
WORK="$(mktemp -d)"
prometheus_pid=
finish() {
	local rc=$?
	[[ -n $prometheus_pid ]] && kill "$prometheus_pid" 2> /dev/null && wait "$prometheus_pid" 2> /dev/null
	if [[ $rc != 0 ]]; then
		log "observability check failed; Prometheus's targets and log:"
		cat "$WORK/targets.json" 2> /dev/null || true
		tail -20 "$WORK/prometheus.log" 2> /dev/null || true
	fi
	kubectl delete namespace "$NS" --ignore-not-found --wait=false > /dev/null 2>&1 || true
	rm -rf "$WORK"
	exit "$rc"
}
trap finish EXIT

log "observability: Gateway, HTTPRoute and echo backend in $NS"
kubectl apply -f - > /dev/null << EOF
apiVersion: v1
kind: Namespace
metadata: {name: $NS}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: echo, namespace: $NS}
spec:
  replicas: 1
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
  ports: [{port: 8080, targetPort: 3000}]
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
  rules: [{backendRefs: [{name: echo, port: 8080}]}]
EOF
kubectl -n "$NS" wait --for=condition=Programmed gateway/web --timeout=180s > /dev/null
kubectl -n "$NS" wait --for=condition=Available deploy/echo --timeout=180s > /dev/null
address="$(kubectl -n "$NS" get gateway web -o jsonpath='{.status.addresses[0].value}')"
[[ -n $address ]] || die "Gateway $NS/web has no address"

log "observability: $REQUESTS requests through $address"
ok=0
deadline=$((SECONDS + 60))
while ((ok < REQUESTS)); do
	code="$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "http://$address/shop" || true)"
	if [[ $code == 200 ]]; then
		ok=$((ok + 1))
	elif ((SECONDS > deadline)); then
		die "requests through $address answer $code"
	else
		sleep 0.2
	fi
done

port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
cat > "$WORK/prometheus.yml" << EOF
global: {scrape_interval: 1s, evaluation_interval: 1s}
scrape_configs:
  - job_name: kubernetes-pods
    kubernetes_sd_configs:
      - role: pod
        kubeconfig_file: $KUBECONFIG
    relabel_configs:
      - source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_scrape]
        action: keep
        regex: "true"
      - source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_path]
        action: replace
        regex: (.+)
        target_label: __metrics_path__
      - source_labels: [__meta_kubernetes_pod_ip, __meta_kubernetes_pod_annotation_prometheus_io_port]
        action: replace
        regex: (.+);(.+)
        replacement: "\${1}:\${2}"
        target_label: __address__
      - source_labels: [__meta_kubernetes_namespace]
        target_label: namespace
      - source_labels: [__meta_kubernetes_pod_name]
        target_label: pod
      - source_labels: [__meta_kubernetes_pod_label_app_kubernetes_io_component]
        target_label: component
EOF
log "observability: Prometheus on 127.0.0.1:$port, discovering pods by annotation"
"$PROMETHEUS" --config.file="$WORK/prometheus.yml" --storage.tsdb.path="$WORK/data" \
	--web.listen-address="127.0.0.1:$port" > "$WORK/prometheus.log" 2>&1 &
prometheus_pid=$!

# query EXPR: the first sample's value of an instant query ("" when none).
query() {
	curl -s --max-time 5 "http://127.0.0.1:$port/api/v1/query" --data-urlencode "query=$1" |
		python3 -c 'import json, sys
r = json.load(sys.stdin).get("data", {}).get("result", [])
print(r[0]["value"][1] if r else "")' 2> /dev/null || true
}

requests="sum(turna_dataplane_requests_total{route=\"k8s-HTTPRoute $NS/shop rule 0\",code=\"200\"})"
reconciles='sum(turna_operator_reconciles_total{kind="status"})'
controller='sum(up{component="controller"})'
deadline=$((SECONDS + 90))
while :; do
	seen_requests="$(query "$requests")"
	seen_reconciles="$(query "$reconciles")"
	up_controllers="$(query "$controller")"
	if [[ -n $seen_requests && ${seen_requests%.*} -ge $REQUESTS && -n $seen_reconciles && -n $up_controllers && ${up_controllers%.*} -ge 1 ]]; then
		break
	fi
	if ((SECONDS > deadline)); then
		curl -s "http://127.0.0.1:$port/api/v1/targets" > "$WORK/targets.json" || true
		die "Prometheus has requests=${seen_requests:-none} reconciles=${seen_reconciles:-none} controllers up=${up_controllers:-none}"
	fi
	sleep 1
done
log "observability: Prometheus scraped the proxy ($seen_requests requests of $NS/shop) and $up_controllers controller pod(s) ($seen_reconciles status passes), found by their annotations"
