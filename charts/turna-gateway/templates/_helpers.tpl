{{/* Names of the installation's objects; cluster-scoped ones carry the release name. */}}
{{- define "turna.name" -}}{{ .Release.Name | trunc 40 | trimSuffix "-" }}{{- end -}}
{{- define "turna.controller" -}}{{ include "turna.name" . }}-controller{{- end -}}
{{- define "turna.proxy" -}}{{ include "turna.name" . }}-proxy{{- end -}}
{{- define "turna.reader" -}}{{ include "turna.name" . }}-reader{{- end -}}
{{- define "turna.gatewayNamespace" -}}{{ include "turna.name" . }}-gateway-namespace{{- end -}}
{{- define "turna.standaloneService" -}}{{ include "turna.name" . }}-gateways{{- end -}}
{{- define "turna.standalone" -}}{{ eq .Values.mode "standalone" }}{{- end -}}

{{- define "turna.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "turna.selector" -}}
app.kubernetes.io/name: turna-gateway
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: controller
{{- end -}}

{{- define "turna.labels" -}}
app.kubernetes.io/name: turna-gateway
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* Values product.md forbids or the chart cannot render. */}}
{{- define "turna.validate" -}}
{{- if not (has .Values.scope (list "cluster" "namespace")) -}}
{{- fail (printf "scope must be cluster or namespace, not %q" .Values.scope) -}}
{{- end -}}
{{- if not (has .Values.mode (list "controller" "standalone")) -}}
{{- fail (printf "mode must be controller or standalone, not %q" .Values.mode) -}}
{{- end -}}
{{- if and (eq .Values.mode "standalone") (eq .Values.scope "namespace") -}}
{{- fail "mode=standalone needs scope=cluster" -}}
{{- end -}}
{{- if and (eq .Values.mode "standalone") (eq .Values.proxy.placement "gateway") -}}
{{- fail "mode=standalone has no proxies to place: proxy.placement=gateway does not apply" -}}
{{- end -}}
{{- if and (eq .Values.mode "standalone") .Values.metrics.podMonitor.enabled -}}
{{- fail "mode=standalone has no proxy pods: use metrics.serviceMonitor" -}}
{{- end -}}
{{- if not (has .Values.proxy.placement (list "controller" "gateway")) -}}
{{- fail (printf "proxy.placement must be controller or gateway, not %q" .Values.proxy.placement) -}}
{{- end -}}
{{- if and (eq .Values.scope "namespace") (eq .Values.proxy.placement "gateway") -}}
{{- fail "proxy.placement=gateway cannot be combined with scope=namespace" -}}
{{- end -}}
{{- if and (eq .Values.scope "namespace") .Values.gatewayClass.create -}}
{{- fail "scope=namespace cannot create the cluster-scoped GatewayClass: set gatewayClass.create=false (the cluster administrator creates it)" -}}
{{- end -}}
{{- if and (eq .Values.scope "namespace") (not .Values.gatewayClass.name) -}}
{{- fail "scope=namespace needs gatewayClass.name" -}}
{{- end -}}
{{- if and (ne .Values.scope "namespace") .Values.watchNamespaces -}}
{{- fail "watchNamespaces needs scope=namespace (scope=cluster watches every namespace)" -}}
{{- end -}}
{{- end -}}

{{/* The namespaces a scope=namespace installation watches: watchNamespaces, else the release's. */}}
{{- define "turna.watchNamespaces" -}}
{{- toJson (.Values.watchNamespaces | default (list .Release.Namespace) | uniq) -}}
{{- end -}}

{{/*
The provider configuration (providers.kubernetes). Scope cluster: a ServiceAccount per proxy
bound to the reader ClusterRole. Scope namespace: the shared proxy ServiceAccount, the release
namespace and one GatewayClass. Mode standalone: no proxies; the Gateways' addresses are the
standalone Service's. extraConfig is merged over the result.
*/}}
{{- define "turna.config" -}}
{{- $namespaced := eq .Values.scope "namespace" -}}
{{- $pull := list -}}
{{- range .Values.imagePullSecrets -}}{{- $pull = append $pull .name -}}{{- end -}}
{{- $proxy := dict
  "gateway_namespace" (eq .Values.proxy.placement "gateway")
  "cluster_role" (ternary "" (include "turna.reader" .) $namespaced)
  "image" .Values.proxy.image
  "service_account" (include "turna.proxy" .)
  "addresses_annotation" .Values.proxy.addressesAnnotation
  "replicas" (int .Values.proxy.replicas)
  "service_type" .Values.proxy.serviceType
  "shutdown_delay" (toString .Values.proxy.shutdownDelay)
  "image_pull_secrets" $pull
-}}
{{- $standalone := eq .Values.mode "standalone" -}}
{{- $k := dict
  "enabled" true
  "mode" .Values.mode
  "controller_name" .Values.controllerName
  "controller_id" (.Values.controllerId | default (printf "%s/%s" .Release.Namespace .Release.Name))
  "namespace_scoped" $namespaced
  "namespaces" (ternary (include "turna.watchNamespaces" . | fromJsonArray) (list) $namespaced)
  "gateway_class" (ternary .Values.gatewayClass.name "" $namespaced)
  "backend" (dict "allow_external_name" .Values.allowExternalNameBackends)
  "status" (dict "leader_election" (dict
      "disabled" (not .Values.leaderElection.enabled)
      "namespace" .Release.Namespace
      "name" .Release.Name))
-}}
{{- if $standalone -}}
{{- $_ := set $k.status "service" (printf "%s/%s" .Release.Namespace (include "turna.standaloneService" .)) -}}
{{- else -}}
{{- $_ := set $k "proxy" $proxy -}}
{{- end -}}
{{- $merged := mergeOverwrite $k (deepCopy .Values.extraConfig) -}}
{{- dict "providers" (dict "kubernetes" $merged) | toYaml -}}
{{- end -}}
