//! The fix for each reason a condition can give, as words and a YAML snippet where one helps.

use std::collections::BTreeSet;

use super::Context;

/// The fix for a condition with `reason`, when one can be said.
pub fn for_reason(reason: &str, context: Context<'_>) -> Option<String> {
    let route = context.route;
    Some(match reason {
        "NotAllowedByListeners" => {
            let (kind, namespace) = route.map_or(("HTTPRoute", "<route namespace>"), |r| (r.kind, r.namespace));
            format!(
                "let a listener allow the route, in the Gateway's listener:\n\
                 allowedRoutes:\n  namespaces:\n    from: All          # or Selector, with labels namespace {namespace} has\n  \
                 kinds: [{{kind: {kind}}}]\n\
                 or give namespace {namespace} the labels the selector asks for:\n\
                 kubectl label namespace {namespace} <key>=<value>"
            )
        }
        "NoMatchingListenerHostname" => "give the route a hostname under a listener's hostname (or none, to take the \
             listener's), or widen the listener's hostname:\n\
             spec:\n  hostnames: [app.example.com]   # under the listener's *.example.com"
            .into(),
        "NoMatchingParent" => "name a listener the parent has in the parentRef's sectionName (and its port), or leave \
             both out to attach to every listener that allows the route:\n\
             parentRefs:\n- name: <gateway>\n  sectionName: <listener name>"
            .into(),
        "BackendNotFound" => "create the Service, or correct the backendRef: its name, namespace and port (the \
             Service's port, not the target port)"
            .into(),
        "RefNotPermitted" => reference_grant(context)?,
        "InvalidKind" => "a backendRef names a Service (group \"\", kind Service) or another kind Turna serves".into(),
        "UnsupportedValue" => "the message names the field: remove it or use a value Turna supports (README, \
             Supported features)"
            .into(),
        "IncompatibleFilters" => "use RequestRedirect or URLRewrite in a rule, not both".into(),
        "InvalidCertificateRef" => {
            let namespace = context.gateway_namespace.unwrap_or("<gateway namespace>");
            format!(
                "create the certificate Secret, of type kubernetes.io/tls with tls.crt and tls.key, where the \
                 certificateRef points:\n\
                 kubectl -n {namespace} create secret tls <name> --cert=cert.pem --key=key.pem"
            )
        }
        "InvalidRouteKinds" => "allowedRoutes.kinds may name HTTPRoute, GRPCRoute, TLSRoute, TCPRoute and UDPRoute of \
             group gateway.networking.k8s.io"
            .into(),
        "HostnameConflict" | "ProtocolConflict" => "give the listeners that share this port distinct hostnames and \
             compatible protocols, or move one to another port"
            .into(),
        "PortUnavailable" => "choose another port: the listener's port plus port_offset must not be the proxies' \
             health port"
            .into(),
        "UnsupportedProtocol" => "a listener's protocol is HTTP, HTTPS, TLS, TCP or UDP; a backend Service port's \
             appProtocol one Turna speaks (http, h2c, https with a BackendTLSPolicy, kubernetes.io/ws, \
             kubernetes.io/wss)"
            .into(),
        "AddressNotAssigned" => "the proxy Service has no load balancer address yet: check the cloud or MetalLB \
             controller, or set proxy.service_type (NodePort, ClusterIP)"
            .into(),
        "InvalidParameters" => "correct the parametersRef: a TurnaProxy (group gateway.turna.rakunlabs.com) that \
             exists, in the namespace the reference names, with values that make sense"
            .into(),
        _ => return None,
    })
}

/// A ReferenceGrant letting the route (or the Gateway) refer to what it names in other
/// namespaces.
fn reference_grant(context: Context<'_>) -> Option<String> {
    let grant = |namespace: &str, from_kind: &str, from_namespace: &str, to_kind: &str| {
        format!(
            "apiVersion: gateway.networking.k8s.io/v1beta1\nkind: ReferenceGrant\nmetadata:\n  name: \
             allow-{from_namespace}\n  namespace: {namespace}\nspec:\n  from:\n  - group: \
             gateway.networking.k8s.io\n    kind: {from_kind}\n    namespace: {from_namespace}\n  to:\n  - \
             group: \"\"\n    kind: {to_kind}\n"
        )
    };
    if let Some(route) = context.route {
        let namespaces: BTreeSet<&str> = (route.object["spec"]["rules"].as_array().into_iter().flatten())
            .filter_map(|rule| rule["backendRefs"].as_array())
            .flatten()
            .filter_map(|b| b["namespace"].as_str())
            .filter(|ns| *ns != route.namespace)
            .collect();
        if namespaces.is_empty() {
            return None;
        }
        let grants: Vec<String> = namespaces
            .iter()
            .map(|ns| grant(ns, route.kind, route.namespace, "Service"))
            .collect();
        return Some(format!(
            "a ReferenceGrant in each namespace the route's backendRefs point into:\n{}",
            grants.join("---\n")
        ));
    }
    let namespace = context.gateway_namespace?;
    Some(format!(
        "a ReferenceGrant in the namespace of the Secret the certificateRef names:\n{}",
        grant("<secret namespace>", "Gateway", namespace, "Secret")
    ))
}
