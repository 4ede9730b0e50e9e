//! Generated scenarios for the property tests: a snapshot's objects as JSON (so checks can read
//! what was asked for independently of the translator's own parsing), the Secret and ConfigMap
//! facts, load balancer addresses and a configuration.

mod objects;

use std::collections::BTreeSet;

use proptest::prelude::*;
use serde_json::{Value, json};
use translator::snapshot::{AssignedAddress, ConfigMapFacts, SecretFacts};
use translator::{Config, GROUP, Output, Snapshot};

pub use objects::ROUTE_KINDS;
use objects::*;

/// Generated objects with what the checks need to know about them.
#[derive(Clone)]
pub struct Scenario {
    /// Kubernetes objects as JSON, unique by kind, namespace and name.
    pub objects: Vec<Value>,
    pub secrets: Vec<SecretFacts>,
    pub config_maps: Vec<ConfigMapFacts>,
    /// Which Gateways (namespace x name, in pool order) the load balancer gave an address; the
    /// last flag gives standalone mode its configured status address.
    pub addressed: Vec<bool>,
    pub config: Config,
    /// Seeds the shuffle of the order-independence property.
    pub seed: u64,
}

/// Up to `max` values of `f(0)`, `f(1)`, ...
fn indexed<T: std::fmt::Debug, S: Strategy<Value = T> + 'static>(
    max: usize,
    f: fn(usize) -> S,
) -> BoxedStrategy<Vec<T>> {
    (0..=max)
        .prop_flat_map(move |n| (0..n).map(f).collect::<Vec<_>>())
        .boxed()
}

pub fn scenario() -> impl Strategy<Value = Scenario> {
    (
        prop::collection::vec(gateway(), 1..4),
        prop::collection::vec(listener_set(), 0..3),
        prop::collection::vec(route(), 0..8),
        indexed(6, service),
        indexed(2, endpoint_slice),
        indexed(4, reference_grant),
        (indexed(2, backend_tls_policy), indexed(3, security_policy)),
        prop::collection::vec(secret(), 2..8),
        prop::collection::vec(config_map(), 0..2),
        prop::collection::vec(prop::bool::weighted(0.8), 7),
        config(),
        any::<u64>(),
    )
        .prop_map(
            |(
                gateways,
                sets,
                routes,
                services,
                slices,
                grants,
                (policies, security_policies),
                secrets,
                config_maps,
                addressed,
                config,
                seed,
            )| {
                let mut objects = vec![
                    json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
                           "metadata": {"name": CLASS, "generation": 1},
                           "spec": {"controllerName": Config::default().controller_name}}),
                    json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
                           "metadata": {"name": "foreign", "generation": 1},
                           "spec": {"controllerName": "example.com/other"}}),
                ];
                for (i, ns) in NAMESPACES.iter().enumerate() {
                    let env = ["dev", "infra", "prod"][i];
                    objects.push(json!({"apiVersion": "v1", "kind": "Namespace",
                                        "metadata": {"name": ns, "labels": {"env": env}}}));
                }
                let mut seen = BTreeSet::new();
                let all = [
                    gateways,
                    sets,
                    routes,
                    services.concat(),
                    slices,
                    grants,
                    policies,
                    security_policies,
                ];
                for o in all.into_iter().flatten() {
                    if seen.insert((o["kind"].clone().to_string(), namespace_of(&o), name_of(&o))) {
                        objects.push(o);
                    }
                }
                let mut secrets_seen = BTreeSet::new();
                let secrets = secrets
                    .into_iter()
                    .filter(|s| secrets_seen.insert((s.namespace.clone(), s.name.clone())))
                    .collect();
                let mut cm_seen = BTreeSet::new();
                let config_maps = config_maps
                    .into_iter()
                    .filter(|c| cm_seen.insert(c.namespace.clone()))
                    .collect();
                let mut config = config;
                if addressed[6] {
                    config.status_addresses = vec!["192.0.2.10".into()];
                }
                Scenario {
                    objects,
                    secrets,
                    config_maps,
                    addressed,
                    config,
                    seed,
                }
            },
        )
}

/// Shown as the YAML of a golden case (`input.yaml`, then the facts and config), so a failing
/// case can be replayed with the golden harness.
impl std::fmt::Debug for Scenario {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "\n# input.yaml")?;
        for o in &self.objects {
            writeln!(f, "---\n{}", yaml(o))?;
        }
        writeln!(f, "# secrets\n{}", yaml(&self.secrets))?;
        writeln!(f, "# config maps\n{}", yaml(&self.config_maps))?;
        writeln!(f, "# facts.yaml\n{}", yaml(&self.snapshot().facts))?;
        writeln!(f, "# config.yaml\n{}", yaml(&self.config))?;
        writeln!(f, "# shuffle seed: {}", self.seed)
    }
}

fn yaml<T: serde::Serialize>(value: &T) -> String {
    serde_yaml::to_string(value).unwrap_or_default()
}

pub fn name_of(o: &Value) -> String {
    o["metadata"]["name"].as_str().unwrap_or_default().to_string()
}

pub fn namespace_of(o: &Value) -> String {
    o["metadata"]["namespace"].as_str().unwrap_or("default").to_string()
}

impl Scenario {
    pub fn of_kind<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
        self.objects.iter().filter(move |o| o["kind"] == kind)
    }

    pub fn snapshot(&self) -> Snapshot {
        let mut snapshot = Snapshot::default();
        for (i, o) in self.objects.iter().enumerate() {
            if let Err(e) = snapshot.add_value(i, o.clone()) {
                panic!("generated object does not load: {e}\n{o:#}");
            }
        }
        snapshot.secrets = self.secrets.clone();
        snapshot.config_maps = self.config_maps.clone();
        let mut flags = self.addressed.iter();
        for ns in NAMESPACES {
            for gw in GATEWAYS {
                if flags.next().copied().unwrap_or(false) {
                    snapshot.facts.gateway_addresses.insert(
                        format!("{ns}/{gw}"),
                        vec![AssignedAddress {
                            kind: "IPAddress".into(),
                            value: "192.0.2.1".into(),
                        }],
                    );
                }
            }
        }
        snapshot
    }

    /// `namespace/name` of the Gateways of our class.
    pub fn our_gateways(&self) -> BTreeSet<String> {
        self.of_kind("Gateway")
            .filter(|g| g["spec"]["gatewayClassName"] == CLASS)
            .map(|g| format!("{}/{}", namespace_of(g), name_of(g)))
            .collect()
    }

    /// Whether a ReferenceGrant lets `from_kind` objects of `from_ns` reference `to_kind` `to_name`
    /// in `to_ns` (same-namespace references need none).
    pub fn grant_permits(&self, from_kind: &str, from_ns: &str, to_kind: &str, to_ns: &str, to_name: &str) -> bool {
        from_ns == to_ns
            || self.of_kind("ReferenceGrant").any(|g| {
                namespace_of(g) == to_ns
                    && g["spec"]["from"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|f| f["group"] == GROUP && f["kind"] == from_kind && f["namespace"] == from_ns)
                    && g["spec"]["to"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|t| t["group"] == "" && t["kind"] == to_kind && t.get("name").is_none_or(|n| n == to_name))
            })
    }
}

/// A valid Gateway and HTTPRoute that no generated object can disturb or be disturbed by:
/// namespace `good` and port 8888 are outside the pools (so no generated object references them
/// or shares their port in standalone mode), and no generated wildcard covers `good.example.org`.
const GOOD: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: good, namespace: good, creationTimestamp: "2020-01-01T00:00:00Z"}
spec:
  gatewayClassName: turna
  listeners: [{name: http, port: 8888, protocol: HTTP, hostname: good.example.org}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: good, namespace: good, creationTimestamp: "2020-01-01T00:00:00Z"}
spec:
  parentRefs: [{name: good}]
  rules: [{backendRefs: [{name: good, port: 80}]}]
---
apiVersion: v1
kind: Service
metadata: {name: good, namespace: good}
spec: {ports: [{port: 80}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: good, namespace: good, labels: {kubernetes.io/service-name: good}}
addressType: IPv4
ports: [{port: 8080}]
endpoints: [{addresses: [10.9.9.9]}]
"#;

/// Adds the good objects to `snapshot`.
pub fn add_good(snapshot: &mut Snapshot) {
    snapshot.add_yaml(GOOD).expect("the good objects load");
}

/// Why the good route is not accepted, resolved and served to its endpoint, if it is not.
pub fn good_route_problem(output: &Output, config: &Config) -> Option<String> {
    let status = output
        .statuses
        .routes
        .iter()
        .find(|r| r.namespace == "good" && r.name == "good");
    let conditions = status.and_then(|s| s.parents.first()).map(|p| &p.conditions);
    let ok = |kind: &str| conditions.is_some_and(|c| c.iter().any(|c| c.kind == kind && c.is_true()));
    if !ok("Accepted") || !ok("ResolvedRefs") {
        return Some(format!("the good route is not accepted and resolved: {status:?}"));
    }
    let id = match config.mode {
        translator::Mode::Controller => "good/good",
        translator::Mode::Standalone => "standalone",
    };
    let Some(proxy) = output.proxies.iter().find(|p| p.id == id) else {
        return Some(format!("no proxy {id}"));
    };
    let served = proxy
        .ports
        .iter()
        .filter(|p| p.port == 8888)
        .flat_map(|p| &p.listeners)
        .filter(|l| l.name == "k8s-good/good/http")
        .flat_map(|l| &l.virtual_hosts)
        .filter(|v| v.hostname == "good.example.org")
        .flat_map(|v| &v.rules)
        .filter(|r| r.route.namespace == "good" && r.route.name == "good")
        .flat_map(|r| &r.backends)
        .filter_map(|b| proxy.backends.get(b.backend.as_ref()?))
        .any(|b| b.endpoints.iter().any(|e| e.address == "10.9.9.9" && e.port == 8080));
    (!served).then(|| format!("proxy {id} does not route good.example.org to 10.9.9.9:8080"))
}
