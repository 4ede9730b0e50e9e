//! GatewayClasses: which are Turna's, whether they are accepted, and their status.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::api::GatewayClass;
use crate::config::Config;
use crate::object::Meta;
use crate::parameters::{self, TurnaProxySpec};
use crate::snapshot::Snapshot;
use crate::status::{Condition, GatewayClassStatus, condition::kind, condition::reason};

/// Features Turna implements, as the conformance suite names them.
pub const SUPPORTED_FEATURES: &[&str] = &[
    "BackendTLSPolicy",
    "BackendTLSPolicySANValidation",
    "ClusterTrustBundle",
    "GRPCRoute",
    "GRPCRouteNamedRouteRule",
    "GRPCRouteRequestHeaderModifier",
    "Gateway",
    "GatewayAddressEmpty",
    "GatewayBackendClientCertificate",
    "GatewayFrontendClientCertificateValidation",
    "GatewayFrontendClientCertificateValidationInsecureFallback",
    "GatewayHTTPListenerIsolation",
    "GatewayHTTPSListenerDetectMisdirectedRequests",
    "GatewayListenerFilters",
    "GatewayPort8080",
    "GatewayRouteHostnameIntersectionPrecedence",
    "GatewayStaticAddresses",
    "HTTPRoute",
    "HTTPRoute303RedirectStatusCode",
    "HTTPRoute307RedirectStatusCode",
    "HTTPRoute308RedirectStatusCode",
    "HTTPRouteBackendProtocolH2C",
    "HTTPRouteBackendProtocolWebSocket",
    "HTTPRouteBackendRequestHeaderModification",
    "HTTPRouteBackendRequestRedirect",
    "HTTPRouteBackendTimeout",
    "HTTPRouteBackendURLRewrite",
    "HTTPRouteCORS",
    "HTTPRouteDestinationPortMatching",
    "HTTPRouteHostRewrite",
    "HTTPRouteMethodMatching",
    "HTTPRouteNamedRouteRule",
    "HTTPRouteParentRefPort",
    "HTTPRoutePathRedirect",
    "HTTPRoutePathRewrite",
    "HTTPRoutePortRedirect",
    "HTTPRouteQueryParamMatching",
    "HTTPRouteRequestMirror",
    "HTTPRouteRequestMultipleMirrors",
    "HTTPRouteRequestPercentageMirror",
    "HTTPRouteRequestTimeout",
    "HTTPRouteResponseHeaderModification",
    "HTTPRouteRetry",
    "HTTPRouteRetryBackendTimeout",
    "HTTPRouteRetryCodes",
    "HTTPRouteRetryConnectionError",
    "HTTPRouteSchemeRedirect",
    "ListenerSet",
    "ReferenceGrant",
    "TCPRoute",
    "TLSRoute",
    "TLSRouteModeMixed",
    "TLSRouteModeTerminate",
    "UDPRoute",
];

/// Supported only when proxies live in their Gateway's namespace: the feature's test looks
/// for the Gateway's infrastructure labels and annotations on a ServiceAccount, pod or Service
/// there (with proxies in the controller namespace, there is none).
pub const GATEWAY_INFRASTRUCTURE: &str = "GatewayInfrastructure";

/// Supported only in controller mode (GEP-5093): a `Cluster` address is the cluster IP of a
/// proxy Service Turna provisions as ClusterIP; standalone mode provisions no Service.
pub const ADDRESS_ROUTABILITY: &[&str] = &["GatewayAddressRoutability", "GatewayAddressRoutabilityCluster"];

/// The features a class's status lists under `config`, sorted.
pub fn supported_features(config: &Config) -> Vec<String> {
    let mut features: Vec<String> = SUPPORTED_FEATURES.iter().map(|s| s.to_string()).collect();
    if config.mode == crate::config::Mode::Controller {
        features.extend(ADDRESS_ROUTABILITY.iter().map(|s| s.to_string()));
        if config.gateway_namespace {
            features.push(GATEWAY_INFRASTRUCTURE.to_string());
        }
        features.sort();
    }
    features
}

/// A GatewayClass Turna serves, with its parameters: `Err` (the InvalidParameters message)
/// means it is not accepted.
pub type Class<'a> = (&'a GatewayClass, Result<Option<&'a TurnaProxySpec>, String>);

/// The GatewayClasses Turna serves, by name.
pub fn ours<'a>(snapshot: &'a Snapshot, config: &Config) -> BTreeMap<String, Class<'a>> {
    snapshot
        .gateway_classes
        .iter()
        .map(Arc::as_ref)
        .filter(|c| c.spec.controller_name == config.controller_name)
        .filter(|c| config.gateway_class.is_empty() || c.name() == config.gateway_class)
        .map(|c| {
            let parameters = parameters::of_class(c, snapshot).map(|p| p.map(|p| &p.spec));
            (c.name().to_string(), (c, parameters))
        })
        .collect()
}

/// Status of each of our classes (none in namespace-scoped installs, which cannot write it).
pub fn statuses(classes: &BTreeMap<String, Class<'_>>, config: &Config) -> Vec<GatewayClassStatus> {
    if config.namespace_scoped {
        return Vec::new();
    }
    classes
        .iter()
        .map(|(name, (class, parameters))| {
            let g = class.generation();
            let accepted = match parameters {
                Ok(_) => Condition::new(kind::ACCEPTED, true, reason::ACCEPTED, "GatewayClass is accepted", g),
                Err(why) => Condition::new(kind::ACCEPTED, false, reason::INVALID_PARAMETERS, why, g),
            };
            GatewayClassStatus {
                name: name.clone(),
                conditions: vec![
                    accepted,
                    Condition::new(
                        kind::SUPPORTED_VERSION,
                        true,
                        reason::SUPPORTED_VERSION,
                        "Gateway API v1.7 is supported",
                        g,
                    ),
                ],
                supported_features: supported_features(config),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Mode;

    fn claims_infrastructure(config: &Config) -> bool {
        supported_features(config).iter().any(|f| f == GATEWAY_INFRASTRUCTURE)
    }

    #[test]
    fn gateway_infrastructure_only_with_proxies_in_the_gateway_namespace() {
        assert!(!claims_infrastructure(&Config::default()));
        let placed = Config {
            gateway_namespace: true,
            ..Config::default()
        };
        assert!(claims_infrastructure(&placed));
        let features = supported_features(&placed);
        assert!(features.windows(2).all(|w| w[0] < w[1]), "sorted and unique");
        let standalone = Config {
            mode: Mode::Standalone,
            ..placed
        };
        assert!(!claims_infrastructure(&standalone));
    }

    #[test]
    fn address_routability_only_in_controller_mode() {
        let claims = |config: &Config| {
            let features = supported_features(config);
            ADDRESS_ROUTABILITY.iter().all(|f| features.iter().any(|g| g == f))
        };
        assert!(claims(&Config::default()));
        let standalone = Config {
            mode: Mode::Standalone,
            ..Config::default()
        };
        assert!(!claims(&standalone));
        assert!(
            supported_features(&standalone)
                .iter()
                .all(|f| !f.starts_with("GatewayAddressRoutability"))
        );
    }
}
