//! The objects the scenarios deploy: echo backends, Gateways and routes, as YAML.

use std::net::{IpAddr, SocketAddr};

use crate::load::Target;

/// The echo backend's image (the conformance suite's echo-basic; `e2e/cluster/images.yaml`).
pub const ECHO_IMAGE: &str = "registry.k8s.io/gateway-api/echo-basic:v0.1.0";
/// The GatewayClass the local cluster's Turna installation creates.
pub const CLASS: &str = "turna";

/// A Deployment of echo backends listening on `target_port` and a Service `name` in front of
/// it on `port`. Each answer names the Service and the pod. No preStop hook and no SIGTERM
/// handling: echo-basic exits at once, the hardest case for a proxy.
pub fn echo_backend(ns: &str, name: &str, replicas: u32, port: u16, target_port: u16) -> String {
    format!(
        r#"
apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: {ns}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      terminationGracePeriodSeconds: 5
      containers:
      - name: echo
        image: {ECHO_IMAGE}
        env:
        - {{name: HTTP_PORT, value: "{target_port}"}}
        - {{name: SERVICE_NAME, value: {name}}}
        - {{name: POD_NAME, valueFrom: {{fieldRef: {{fieldPath: metadata.name}}}}}}
        - {{name: NAMESPACE, valueFrom: {{fieldRef: {{fieldPath: metadata.namespace}}}}}}
        ports: [{{containerPort: {target_port}}}]
        readinessProbe:
          httpGet: {{path: /, port: {target_port}}}
          periodSeconds: 1
---
apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: {ns}}}
spec:
  selector: {{app: {name}}}
  ports: [{{name: http, port: {port}, targetPort: {target_port}}}]
"#
    )
}

/// A Gateway of class [`CLASS`] with `listeners` (YAML list items, indented by two spaces).
pub fn gateway(ns: &str, name: &str, listeners: &str) -> String {
    format!(
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: {name}, namespace: {ns}}}
spec:
  gatewayClassName: {CLASS}
  listeners:
{listeners}
"#
    )
}

/// A plain HTTP listener on `port` for routes of the same namespace.
pub fn http_listener(name: &str, port: u16) -> String {
    format!("  - {{name: {name}, port: {port}, protocol: HTTP, allowedRoutes: {{namespaces: {{from: Same}}}}}}\n")
}

/// An HTTPS listener terminating TLS with the kubernetes.io/tls Secret `secret`.
pub fn https_listener(name: &str, port: u16, hostname: &str, secret: &str) -> String {
    format!(
        "  - {{name: {name}, port: {port}, protocol: HTTPS, hostname: {hostname}, tls: {{mode: Terminate, certificateRefs: [{{name: {secret}}}]}}, allowedRoutes: {{namespaces: {{from: Same}}}}}}\n"
    )
}

/// An HTTPRoute on Gateway `gateway` for `hostname` with `rules` (YAML list items, indented by
/// two spaces).
pub fn http_route(ns: &str, name: &str, gateway: &str, hostname: &str, rules: &str) -> String {
    format!(
        r#"
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: {name}, namespace: {ns}}}
spec:
  parentRefs: [{{name: {gateway}}}]
  hostnames: ["{hostname}"]
  rules:
{rules}
"#
    )
}

/// One rule sending everything to `service`:`port`.
pub fn rule_to(service: &str, port: u16) -> String {
    format!("  - backendRefs: [{{name: {service}, port: {port}}}]\n")
}

/// A load target: `host` and `path` on the Gateway's `address`:`port`.
pub fn target(label: &str, address: IpAddr, port: u16, host: &str, path: &str) -> Target {
    Target {
        label: label.into(),
        addr: SocketAddr::new(address, port),
        host: host.into(),
        path: path.into(),
        tls: None,
    }
}
