{{/*
RBAC rules, each exactly what the operator does (deploy/tests/rbac-needs.txt lists it; the
deploy tests check both directions). "read" is get, list and watch.
*/}}

{{/* Read the Gateway API kinds; with .cluster also GatewayClass (cluster-scoped). */}}
{{- define "turna.rules.gatewayApiRead" -}}
- apiGroups: ["gateway.networking.k8s.io"]
  resources:
    {{- if .cluster }}
    - gatewayclasses
    {{- end }}
    - gateways
    - listenersets
    - httproutes
    - grpcroutes
    - tlsroutes
    - tcproutes
    - udproutes
    - referencegrants
    - backendtlspolicies
  verbs: ["get", "list", "watch"]
{{- end -}}

{{/* Turna's own kinds: the proxy parameters GatewayClasses and Gateways name (read), and
security, traffic and backend policies (read, and status). */}}
{{- define "turna.rules.turnaRead" -}}
- apiGroups: ["gateway.turna.rakunlabs.com"]
  resources: ["turnaproxies", "turnasecuritypolicies", "turnatrafficpolicies", "turnabackendpolicies"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["gateway.turna.rakunlabs.com"]
  resources: ["turnasecuritypolicies/status", "turnatrafficpolicies/status", "turnabackendpolicies/status"]
  verbs: ["patch"]
{{- end -}}

{{/* Experimental Gateway API kinds Turna implements (XTelemetryPolicy, XBackend,
XBackendTrafficPolicy): read, and status. */}}
{{- define "turna.rules.experimentalPolicies" -}}
- apiGroups: ["gateway.networking.x-k8s.io"]
  resources: ["xtelemetrypolicies", "xbackends", "xbackendtrafficpolicies"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["gateway.networking.x-k8s.io"]
  resources: ["xtelemetrypolicies/status", "xbackends/status", "xbackendtrafficpolicies/status"]
  verbs: ["patch"]
{{- end -}}

{{/* The headless Service of each EndpointSelector XBackend, in its namespace
(operator/src/xbackend.rs); read by coreRead. */}}
{{- define "turna.rules.xbackendServices" -}}
- apiGroups: [""]
  resources: ["services"]
  verbs: ["create", "patch", "delete"]
{{- end -}}

{{/* ClusterTrustBundles CA certificate references may name (cluster-scoped, so only where the
controller has a ClusterRole): watched, and listed by name for the proxies' bundle Secrets. */}}
{{- define "turna.rules.trustBundleRead" -}}
- apiGroups: ["certificates.k8s.io"]
  resources: ["clustertrustbundles"]
  verbs: ["list", "watch"]
{{- end -}}

{{/* Status is written with server-side apply (patch); GatewayClass status only cluster-wide. */}}
{{- define "turna.rules.gatewayApiStatus" -}}
- apiGroups: ["gateway.networking.k8s.io"]
  resources:
    {{- if .cluster }}
    - gatewayclasses/status
    {{- end }}
    - gateways/status
    - listenersets/status
    - httproutes/status
    - grpcroutes/status
    - tlsroutes/status
    - tcproutes/status
    - udproutes/status
    - backendtlspolicies/status
  verbs: ["patch"]
{{- end -}}

{{/* Backends and the facts of Secrets and ConfigMaps (certificates, CA bundles). */}}
{{- define "turna.rules.coreRead" -}}
- apiGroups: [""]
  resources:
    {{- if .cluster }}
    - namespaces
    {{- end }}
    - services
    - secrets
    - configmaps
  verbs: ["get", "list", "watch"]
- apiGroups: ["discovery.k8s.io"]
  resources: ["endpointslices"]
  verbs: ["get", "list", "watch"]
{{- end -}}

{{/* Proxy objects: applied (create, patch), garbage-collected (list, delete). Services and
ConfigMaps are already listed by coreRead. */}}
{{- define "turna.rules.proxyObjects" -}}
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["list", "watch", "create", "patch", "delete"]
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["list", "watch", "create", "patch", "delete"]
- apiGroups: ["autoscaling"]
  resources: ["horizontalpodautoscalers"]
  verbs: ["list", "watch", "create", "patch", "delete"]
- apiGroups: [""]
  resources: ["services", "configmaps"]
  verbs: ["create", "patch", "delete"]
{{- end -}}

{{/* A ServiceAccount per proxy (proxy.cluster_role). */}}
{{- define "turna.rules.proxyServiceAccounts" -}}
- apiGroups: [""]
  resources: ["serviceaccounts"]
  verbs: ["list", "watch", "create", "patch", "delete"]
{{- end -}}

{{/* The controller's namespace: its own pod (the proxies' image), the leader Lease, the
certificate bundle Secrets (read by coreRead). */}}
{{- define "turna.rules.home" -}}
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get"]
{{- if .Values.leaderElection.enabled }}
{{ include "turna.rules.lease" . }}
{{- end }}
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["create", "patch", "delete"]
{{- end -}}

{{/* The leader Lease. */}}
{{- define "turna.rules.lease" -}}
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  verbs: ["create"]
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  resourceNames: [{{ .Release.Name | quote }}]
  verbs: ["get", "update"]
{{- end -}}
