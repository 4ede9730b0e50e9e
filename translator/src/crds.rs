//! Turna's own CRDs, generated from their Rust types: `turna crds` prints them, and a test
//! checks the YAML the chart and Kustomize install against this (no hand-written schema).

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

use crate::parameters::TurnaProxy;
use crate::policy::backend::TurnaBackendPolicy;
use crate::policy::security::TurnaSecurityPolicy;
use crate::policy::traffic::TurnaTrafficPolicy;

/// Every CRD of Turna's own API group.
pub fn all() -> Vec<CustomResourceDefinition> {
    vec![
        TurnaProxy::crd(),
        TurnaSecurityPolicy::crd(),
        TurnaTrafficPolicy::crd(),
        TurnaBackendPolicy::crd(),
    ]
}

/// [`all`] as multi-document YAML, as committed in the chart and the Kustomize base.
pub fn yaml() -> String {
    let mut text = String::from("# Generated from Turna's types by `turna crds`; do not edit.\n");
    for crd in all() {
        text.push_str("---\n");
        // A CRD is plain data with string keys: rendering it cannot fail.
        text.push_str(&serde_yaml::to_string(&crd).unwrap_or_default());
    }
    text
}
