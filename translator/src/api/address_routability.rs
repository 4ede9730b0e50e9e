//! Gateway address `routability` (Gateway API v1.7, GEP-5093, experimental): where each
//! `spec.addresses` entry must be reachable from, and where each `status.addresses` entry is.
//! The `gateway-api` crate drops the field, so it is read from each Gateway's JSON on its own
//! ([`of_spec`]) and kept in the snapshot beside the typed object.

use serde_json::Value;

/// An address reachable inside the cluster: a Kubernetes Service ClusterIP.
pub const CLUSTER: &str = "Cluster";

/// Reserved for conformance: carries no guarantee, and a class claiming
/// `GatewayAddressRoutability` must support it and report it (GEP-5093). Other values under
/// `testing.x-k8s.io` are reserved and unsupported.
pub const SENTINEL: &str = "testing.x-k8s.io/sentinel";

/// What one `spec.addresses[].routability` asks of Turna.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Routability {
    /// Empty or unset: the implementation's default (the configured proxy Service type),
    /// reported as an explicit empty value.
    Default,
    /// A ClusterIP of the proxy Service.
    Cluster,
    /// [`SENTINEL`]: the default address, reported with this value.
    Sentinel,
    /// Any other value: unsatisfiable, as GEP-5093 requires of values an implementation does
    /// not recognize.
    Unsupported(String),
}

impl Routability {
    pub fn parse(value: &str) -> Routability {
        match value {
            "" => Routability::Default,
            CLUSTER => Routability::Cluster,
            SENTINEL => Routability::Sentinel,
            other => Routability::Unsupported(other.to_string()),
        }
    }

    /// The value reported in `status.addresses[].routability`.
    pub fn as_str(&self) -> &str {
        match self {
            Routability::Default => "",
            Routability::Cluster => CLUSTER,
            Routability::Sentinel => SENTINEL,
            Routability::Unsupported(v) => v,
        }
    }
}

/// The `routability` of each `spec.addresses` entry of a Gateway `spec` (as JSON), in order
/// (empty for unset); empty when no entry sets one, so most Gateways cost nothing.
pub fn of_spec(spec: Option<&Value>) -> Vec<String> {
    let values: Vec<String> = spec
        .and_then(|s| s.get("addresses"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|a| {
            a.get("routability")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    if values.iter().all(String::is_empty) {
        return Vec::new();
    }
    values
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routability_is_read_per_address_and_only_when_set() {
        let spec = serde_json::json!({"addresses": [
            {"type": "IPAddress"},
            {"type": "IPAddress", "routability": "Cluster"},
            {"value": "10.0.0.1", "routability": "example.com/internal"},
        ]});
        assert_eq!(of_spec(Some(&spec)), ["", "Cluster", "example.com/internal"]);
        let unset = serde_json::json!({"addresses": [{"type": "IPAddress", "routability": ""}]});
        assert!(of_spec(Some(&unset)).is_empty());
        assert!(of_spec(None).is_empty());
        assert_eq!(Routability::parse(""), Routability::Default);
        assert_eq!(Routability::parse(SENTINEL), Routability::Sentinel);
        assert_eq!(
            Routability::parse("testing.x-k8s.io/other"),
            Routability::Unsupported("testing.x-k8s.io/other".into())
        );
    }
}
