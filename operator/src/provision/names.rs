//! Names and labels of generated proxy objects.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

/// Label marking objects this installation manages.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "turna-gateway");
/// Label carrying the hash of `controller_id` (label values cannot hold `/`).
pub const CONTROLLER_ID_LABEL: &str = "turna.rakunlabs.com/controller-id";
/// Gateway API's well-known label naming the Gateway of generated resources.
pub const GATEWAY_NAME_LABEL: &str = "gateway.networking.k8s.io/gateway-name";
/// Label naming the Gateway's namespace.
pub const GATEWAY_NAMESPACE_LABEL: &str = "turna.rakunlabs.com/gateway-namespace";

/// Hex SHA-256 prefix of `text`.
pub fn hash(text: &str, len: usize) -> String {
    let digest = Sha256::digest(text.as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect::<String>()[..len].to_string()
}

/// The names and selector labels of one Gateway's proxy objects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Names {
    /// Deployment, Service, ConfigMap, PDB and ServiceAccount name: a DNS-1035 label of at most 63 characters.
    pub proxy: String,
    /// The certificate bundle Secret (controller namespace).
    pub bundle: String,
    pub gateway_namespace: String,
    pub gateway_name: String,
    pub controller_hash: String,
}

impl Names {
    pub fn new(gateway_namespace: &str, gateway_name: &str, controller_id: &str) -> Names {
        let digest = hash(&format!("{gateway_namespace}/{gateway_name}"), 8);
        let mut stem: String = gateway_name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '-'
                }
            })
            .take(63 - "turna-".len() - 1 - digest.len())
            .collect();
        while stem.ends_with('-') {
            stem.pop();
        }
        let proxy = if stem.is_empty() {
            format!("turna-{digest}")
        } else {
            format!("turna-{stem}-{digest}")
        };
        Names {
            bundle: format!("{proxy}-certs"),
            proxy,
            gateway_namespace: gateway_namespace.into(),
            gateway_name: gateway_name.into(),
            controller_hash: hash(controller_id, 16),
        }
    }

    /// Labels that select this proxy's pods and mark ownership.
    pub fn selector(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("app.kubernetes.io/name".into(), "turna-proxy".into()),
            ("app.kubernetes.io/instance".into(), self.proxy.clone()),
            (CONTROLLER_ID_LABEL.into(), self.controller_hash.clone()),
        ])
    }

    /// Every label of generated objects: the selector, ownership and the Gateway's name.
    pub fn labels(&self) -> BTreeMap<String, String> {
        let mut labels = self.selector();
        labels.insert(MANAGED_BY.0.into(), MANAGED_BY.1.into());
        // Label values are at most 63 characters; longer Gateway names are truncated here only.
        labels.insert(GATEWAY_NAME_LABEL.into(), label_value(&self.gateway_name));
        labels.insert(GATEWAY_NAMESPACE_LABEL.into(), label_value(&self.gateway_namespace));
        labels
    }
}

fn label_value(v: &str) -> String {
    let mut out: String = v.chars().take(63).collect();
    while out.ends_with(|c: char| !c.is_ascii_alphanumeric()) {
        out.pop();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_short_distinct_and_stable() {
        let a = Names::new("a-b", "c", "turna-system/turna");
        let b = Names::new("a", "b-c", "turna-system/turna");
        assert_ne!(a.proxy, b.proxy, "ambiguous namespace/name pairs get different proxies");
        assert_eq!(a, Names::new("a-b", "c", "turna-system/turna"));
        let long = Names::new("ns", &"x".repeat(253), "id");
        assert!(long.proxy.len() <= 63, "{}", long.proxy);
        assert!(long.labels().values().all(|v| v.len() <= 63));
        let odd = Names::new("ns", "Web.Gateway_1", "id");
        assert!(odd.proxy.starts_with("turna-web-gateway-1-"), "{}", odd.proxy);
    }
}
