//! Which Gateway API kinds to watch, and at which version: served CRDs and granted permissions,
//! rechecked every minute so CRDs installed (or upgraded) and RBAC granted later are picked up
//! without a restart.
//!
//! A kind is watched at the version of its typed struct when the API server serves it, else at a
//! served version through [`DynamicObject`](kube::api::DynamicObject)s converted into the typed
//! struct (ReferenceGrant at v1beta1 on clusters with older CRDs; ClusterTrustBundle at v1, the
//! typed struct being v1beta1). ListenerSet, BackendTLSPolicy, XTelemetryPolicy, XBackend,
//! XBackendTrafficPolicy, TurnaProxy, TurnaSecurityPolicy, TurnaTrafficPolicy, TurnaBackendPolicy and ClusterTrustBundle are watched only
//! when a SelfSubjectAccessReview grants list, watch and (where Turna writes it) status patch; a review that fails (rather than denies) keeps the
//! previous answer and is retried at the next pass, never taken as a yes.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::authorization::v1::{ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec};
use kube::api::{ApiResource, PostParams};
use kube::discovery::ApiGroup;
use kube::{Api, Client};

use super::{Scope, Stores};

/// How often discovery runs by default.
pub const INTERVAL: Duration = Duration::from_secs(60);

/// The API groups whose kinds are watched: the Gateway API's (standard and experimental `x-k8s.io`),
/// Turna's own, and `certificates.k8s.io` for ClusterTrustBundles (GA in Kubernetes 1.37, beta and
/// off by default before).
const GROUPS: [&str; 4] = [
    translator::GROUP,
    translator::X_GROUP,
    translator::parameters::GROUP,
    translator::trust_bundle::GROUP,
];

/// A kind that needs an access review before it is watched: installations whose RBAC predates it
/// keep working without it.
struct Reviewed {
    group: &'static str,
    kind: &'static str,
    plural: &'static str,
    /// Whether Turna writes its status (patch of `status` is reviewed too).
    status: bool,
    /// Cluster-scoped: reviewed for the whole cluster whatever the scope of the installation.
    cluster: bool,
}

const REVIEWED: [Reviewed; 10] = [
    Reviewed {
        group: translator::GROUP,
        kind: "ListenerSet",
        plural: "listenersets",
        status: true,
        cluster: false,
    },
    Reviewed {
        group: translator::GROUP,
        kind: "BackendTLSPolicy",
        plural: "backendtlspolicies",
        status: true,
        cluster: false,
    },
    Reviewed {
        group: translator::X_GROUP,
        kind: "XTelemetryPolicy",
        plural: "xtelemetrypolicies",
        status: true,
        cluster: false,
    },
    Reviewed {
        group: translator::X_GROUP,
        kind: "XBackend",
        plural: "xbackends",
        status: true,
        cluster: false,
    },
    Reviewed {
        group: translator::X_GROUP,
        kind: "XBackendTrafficPolicy",
        plural: "xbackendtrafficpolicies",
        status: true,
        cluster: false,
    },
    Reviewed {
        group: translator::parameters::GROUP,
        kind: "TurnaProxy",
        plural: "turnaproxies",
        status: false,
        cluster: false,
    },
    Reviewed {
        group: translator::parameters::GROUP,
        kind: translator::policy::security::KIND,
        plural: "turnasecuritypolicies",
        status: true,
        cluster: false,
    },
    Reviewed {
        group: translator::parameters::GROUP,
        kind: translator::policy::traffic::KIND,
        plural: "turnatrafficpolicies",
        status: true,
        cluster: false,
    },
    Reviewed {
        group: translator::parameters::GROUP,
        kind: translator::policy::backend::KIND,
        plural: "turnabackendpolicies",
        status: true,
        cluster: false,
    },
    Reviewed {
        group: translator::trust_bundle::GROUP,
        kind: translator::trust_bundle::KIND,
        plural: "clustertrustbundles",
        status: false,
        cluster: true,
    },
];

/// Where a kind's watch reads from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// The version of the typed struct.
    Typed,
    /// Another served version, converted into the typed struct.
    Dynamic(ApiResource),
}

/// The versions the API server serves for each kind of the watched groups, most preferred
/// first. Kind names do not repeat across the groups.
pub type Served = BTreeMap<String, Vec<ApiResource>>;

/// The served kinds and versions of the watched groups (empty when no CRD is installed).
pub async fn served(client: &Client) -> Result<Served, kube::Error> {
    let mut served = Served::new();
    for name in GROUPS {
        let group: ApiGroup = match kube::discovery::group(client, name).await {
            Ok(group) => group,
            Err(kube::Error::Discovery(kube::error::DiscoveryError::MissingApiGroup(_))) => continue,
            Err(error) => return Err(error),
        };
        for version in group.versions() {
            for (resource, _) in group.versioned_resources(version) {
                served.entry(resource.kind.clone()).or_default().push(resource);
            }
        }
    }
    Ok(served)
}

/// Where to watch a kind whose typed struct is at `typed_version`, given the versions served.
pub fn source(typed_version: &str, served: &[ApiResource]) -> Option<Source> {
    if served.iter().any(|r| r.version == typed_version) {
        return Some(Source::Typed);
    }
    served.first().cloned().map(Source::Dynamic)
}

/// The watch source of every kind in `typed` (kind → typed version): `None` when not served or
/// not `permitted`.
pub fn plan(
    typed: &BTreeMap<&'static str, String>,
    served: &Served,
    permitted: impl Fn(&str) -> bool,
) -> BTreeMap<&'static str, Option<Source>> {
    typed
        .iter()
        .map(|(&kind, version)| {
            let source = served
                .get(kind)
                .filter(|_| permitted(kind))
                .and_then(|versions| source(version, versions));
            (kind, source)
        })
        .collect()
}

/// Whether this identity may do `verb` on `resource` (and `subresource`) of `group` in
/// `namespace` (`None`: every namespace).
async fn allowed(
    client: &Client,
    namespace: Option<&str>,
    group: &str,
    resource: &str,
    subresource: Option<&str>,
    verb: &str,
) -> Result<bool, kube::Error> {
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                group: Some(group.into()),
                resource: Some(resource.into()),
                subresource: subresource.map(Into::into),
                verb: Some(verb.into()),
                namespace: namespace.map(Into::into),
                ..ResourceAttributes::default()
            }),
            ..SelfSubjectAccessReviewSpec::default()
        },
        ..SelfSubjectAccessReview::default()
    };
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let answer = api.create(&PostParams::default(), &review).await?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

/// list and watch of the kind and, when Turna writes its status, patch of its status, all granted
/// in every namespace of the scope (for a cluster-scoped kind: in the cluster).
async fn permitted(client: &Client, scope: &Scope, kind: &Reviewed) -> Result<bool, kube::Error> {
    let status = kind.status.then_some((Some("status"), "patch"));
    let targets = if kind.cluster { vec![None] } else { scope.targets() };
    for namespace in targets {
        for (subresource, verb) in [(None, "list"), (None, "watch")].into_iter().chain(status) {
            if !allowed(client, namespace.as_deref(), kind.group, kind.plural, subresource, verb).await? {
                return Ok(false);
            }
        }
    }
    Ok(true)
}

/// The access review answers so far.
#[derive(Debug, Default)]
pub struct Permissions {
    /// Last answer per reviewed kind; absent until a review succeeded.
    answers: BTreeMap<&'static str, bool>,
    /// Kinds whose denial was logged (once until granted again).
    warned: BTreeSet<&'static str>,
}

impl Permissions {
    /// Records a review of `kind`: an answer replaces the previous one; a failed review keeps
    /// it (none yet: not permitted). Logs a denial once.
    pub fn record<E: std::fmt::Display>(&mut self, kind: &'static str, review: Result<bool, E>) {
        match review {
            Ok(true) => {
                self.answers.insert(kind, true);
                self.warned.remove(kind);
            }
            Ok(false) => {
                self.answers.insert(kind, false);
                if self.warned.insert(kind) {
                    tracing::warn!(
                        kind,
                        "no permission to list and watch {kind} (and patch its status where Turna writes it); its objects are not watched"
                    );
                }
            }
            Err(error) => {
                tracing::warn!(kind, %error, "access review failed; keeping the previous answer and retrying at the next discovery");
            }
        }
    }

    /// Whether `kind` may be watched: kinds without review always, reviewed kinds only after a
    /// review said yes.
    pub fn permits(&self, kind: &str) -> bool {
        !REVIEWED.iter().any(|r| r.kind == kind) || self.answers.get(kind).copied().unwrap_or(false)
    }

    /// Whether a denial of `kind` was logged and not yet lifted.
    pub fn warned(&self, kind: &str) -> bool {
        self.warned.contains(kind)
    }
}

/// Runs discovery passes and starts, switches or stops the watches of [`Stores`].
pub struct Discovery {
    client: Client,
    scope: Scope,
    stores: Stores,
    permissions: Permissions,
    last_plan: Option<BTreeMap<&'static str, Option<Source>>>,
}

impl Discovery {
    pub fn new(client: Client, scope: Scope, stores: Stores) -> Discovery {
        Discovery {
            client,
            scope,
            stores,
            permissions: Permissions::default(),
            last_plan: None,
        }
    }

    /// One pass; on failure nothing changes and the next pass retries.
    pub async fn pass(&mut self) -> Result<(), kube::Error> {
        let served = served(&self.client).await?;
        for reviewed in &REVIEWED {
            if !served.contains_key(reviewed.kind) {
                continue;
            }
            let review = permitted(&self.client, &self.scope, reviewed).await;
            self.permissions.record(reviewed.kind, review);
        }
        let permissions = &self.permissions;
        let typed = self.stores.typed_versions();
        let plan = plan(&typed, &served, |kind| permissions.permits(kind));
        if self.last_plan.as_ref() != Some(&plan) {
            let watched: BTreeMap<&str, String> = plan
                .iter()
                .filter_map(|(kind, source)| {
                    let version = match source.as_ref()? {
                        Source::Typed => typed.get(kind).cloned().unwrap_or_default(),
                        Source::Dynamic(r) => r.version.clone(),
                    };
                    Some((*kind, version))
                })
                .collect();
            tracing::info!(?watched, "Gateway API kinds to watch");
            for (kind, source) in &plan {
                self.stores.set_source(kind, source.clone());
            }
            self.last_plan = Some(plan);
        }
        Ok(())
    }

    /// Runs passes until one succeeds, with backoff from 200ms to 30s.
    pub async fn first_pass(&mut self) {
        let mut backoff = Duration::from_millis(200);
        while let Err(error) = self.pass().await {
            tracing::warn!(%error, retry_in = ?backoff, "discovery failed");
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(30));
        }
    }

    /// Runs a pass every `interval` forever (the first one an interval from now).
    pub async fn run(mut self, interval: Duration) {
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            if let Err(error) = self.pass().await {
                tracing::warn!(%error, "discovery failed; retrying at the next pass");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resource(kind: &str, version: &str) -> ApiResource {
        ApiResource {
            group: translator::GROUP.into(),
            version: version.into(),
            api_version: format!("{}/{version}", translator::GROUP),
            kind: kind.into(),
            plural: format!("{}s", kind.to_lowercase()),
        }
    }

    #[test]
    fn typed_version_wins_and_older_versions_are_converted() {
        assert_eq!(
            source(
                "v1",
                &[resource("ReferenceGrant", "v1"), resource("ReferenceGrant", "v1beta1")]
            ),
            Some(Source::Typed)
        );
        assert_eq!(
            source("v1", &[resource("ReferenceGrant", "v1beta1")]),
            Some(Source::Dynamic(resource("ReferenceGrant", "v1beta1")))
        );
        assert_eq!(source("v1", &[]), None);
    }

    #[test]
    fn failed_reviews_are_never_a_yes_and_denials_warn_once() {
        let mut p = Permissions::default();
        assert!(p.permits("HTTPRoute"), "kinds without review are always permitted");
        assert!(!p.permits("ListenerSet"), "no answer yet");
        p.record("ListenerSet", Err::<bool, _>("API server unavailable"));
        assert!(!p.permits("ListenerSet"), "a failed review is not a yes");
        p.record("ListenerSet", Ok::<_, &str>(false));
        assert!(p.warned("ListenerSet"));
        p.record("ListenerSet", Ok::<_, &str>(false));
        assert!(p.warned("ListenerSet"), "still warned, not warned again");
        p.record("ListenerSet", Ok::<_, &str>(true));
        assert!(p.permits("ListenerSet") && !p.warned("ListenerSet"));
        p.record("ListenerSet", Err::<bool, _>("timeout"));
        assert!(p.permits("ListenerSet"), "a failed review keeps the last answer");
        p.record("BackendTLSPolicy", Ok::<_, &str>(false));
        p.record("BackendTLSPolicy", Err::<bool, _>("timeout"));
        assert!(!p.permits("BackendTLSPolicy"));
    }

    #[test]
    fn missing_crds_and_denied_kinds_are_not_watched() {
        let typed: BTreeMap<&'static str, String> = [
            ("HTTPRoute", "v1".to_string()),
            ("TCPRoute", "v1alpha2".to_string()),
            ("ListenerSet", "v1".to_string()),
        ]
        .into();
        let served: Served = [
            ("HTTPRoute".to_string(), vec![resource("HTTPRoute", "v1")]),
            ("ListenerSet".to_string(), vec![resource("ListenerSet", "v1")]),
        ]
        .into();
        let p = plan(&typed, &served, |kind| kind != "ListenerSet");
        assert_eq!(p["HTTPRoute"], Some(Source::Typed));
        assert_eq!(p["TCPRoute"], None, "CRD missing");
        assert_eq!(p["ListenerSet"], None, "not permitted");
    }
}
