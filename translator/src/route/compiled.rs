//! The rules of every HTTP and gRPC route, compiled before the routes are assembled into
//! listeners. A route's rules depend only on the route, the backends and the client certificate
//! its Gateways give it, so they are compiled apart from attachment and assembly: on several
//! threads when the snapshot is large (compiling is about half of a translation), once per
//! client certificate however many Gateways share it, and, with a [`CompileCache`], only for
//! the routes that changed since the last translation.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;

use crate::api::{BackendTlsPolicy, ReferenceGrant, XBackend, XBackendTrafficPolicy};
use crate::backend::Backends;
use crate::config::Config;
use crate::gateway::GatewayModel;
use crate::policy::RulePolicies;
use crate::policy::backend::TurnaBackendPolicy;
use crate::policy::backend_tls;
use crate::policy::security::TurnaSecurityPolicy;
use crate::policy::traffic::TurnaTrafficPolicy;
use crate::prefetch;
use crate::snapshot::{ClusterTrustBundleFacts, ConfigMapFacts, SecretFacts, Snapshot};

use super::by_object::ByObject;
use super::http::{self, Compiled};
use super::model::{RouteKind, RouteModel};
use super::value::Regexes;
use super::{Attachment, RouteOutcome};

/// One route's rules for one client certificate.
#[derive(Clone)]
struct Entry {
    client_certificate: Option<String>,
    /// Shared with the [`CompileCache`] that keeps it.
    compiled: Arc<Compiled>,
    /// Its problems; none for almost every route, so nothing to copy or compare.
    outcome: Option<Arc<RouteOutcome>>,
    /// Whether every hostname of the route is one ([`crate::hostname::is_valid`]): its object
    /// alone decides, so it is kept with the rules instead of checked again each pass.
    valid_hostnames: bool,
    /// Gateways that still take it.
    uses: usize,
}

/// The compiled rules of every route, by route index, and whether they all came from the
/// cache.
pub struct CompiledRoutes(Vec<(Entries, bool)>);

/// A route's entries: one, inline, for almost every route (a route's Gateways rarely give it
/// different client certificates), so a pass allocates nothing for a route it reuses.
type Entries = smallvec::SmallVec<[Entry; 1]>;

impl CompiledRoutes {
    /// Compiles the HTTP and gRPC routes that attached to at least one Gateway, on `threads`
    /// threads ([`crate::parallel`]), reusing what `cache` holds for unchanged routes.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        routes: &[RouteModel<'_>],
        attachments: &[super::Attachments],
        gateways: &[GatewayModel<'_>],
        backends: &Backends<'_>,
        policies: RulePolicies<'_, '_>,
        regexes: &Regexes,
        config: &Config,
        threads: usize,
        cache: Option<&CompileCache>,
    ) -> Self {
        // Asks for what a route reads ([`crate::prefetch`]): the attachments' shared header
        // twice AHEAD routes on, then their list and the kept rules' header AHEAD on.
        let ask = |ri: usize| {
            if let Some(attached) = attachments.get(ri + 2 * prefetch::AHEAD) {
                prefetch::line(Arc::as_ptr(attached));
            }
            if let Some(attached) = attachments.get(ri + prefetch::AHEAD) {
                prefetch::line(attached.as_ptr());
                if let Some(entry) = cache.and_then(|c| c.routes.at(ri + prefetch::AHEAD)?.first()) {
                    prefetch::line(Arc::as_ptr(&entry.compiled));
                }
            }
        };
        CompiledRoutes(crate::parallel::map(routes.len(), threads, |ri| {
            ask(ri);
            let route = &routes[ri];
            // Looked up (and so kept) only for a route that will have rules this pass.
            let served = attachments[ri].iter().any(|a| a.problem.is_none());
            let cached = (cache.filter(|_| served))
                .and_then(|c| c.routes.reuse(route.object?, ri))
                .map(|entries| entries.as_slice());
            compile_one(
                route,
                &attachments[ri],
                gateways,
                backends,
                policies,
                regexes,
                config,
                cached,
            )
        }))
    }

    /// Asks for the shared header of route `ri`'s compiled rules ([`crate::prefetch`]).
    pub fn prefetch_rules(&self, ri: usize) {
        if let Some(entry) = self.first(ri) {
            prefetch::line(Arc::as_ptr(&entry.compiled));
        }
    }

    /// Asks for the list of the backends of route `ri`'s compiled rules: reads their header,
    /// so only once [`CompiledRoutes::prefetch_rules`] has brought it near.
    pub fn prefetch_backends(&self, ri: usize) {
        if let Some(entry) = self.first(ri) {
            prefetch::line(entry.compiled.backends.as_ptr());
        }
    }

    /// Whether every hostname of route `ri` is one, when its rules were compiled (or kept).
    pub fn valid_hostnames(&self, ri: usize) -> Option<bool> {
        self.first(ri).map(|e| e.valid_hostnames)
    }

    fn first(&self, ri: usize) -> Option<&Entry> {
        self.0.get(ri).and_then(|(entries, _)| entries.first())
    }

    /// Route `ri`'s rules for `client_certificate`, its problems added to `outcome`; empty
    /// for a route that was not compiled. Shared: the listeners the route attached to and the
    /// cache hold the same rules.
    pub fn take(&mut self, ri: usize, client_certificate: Option<&str>, outcome: &mut RouteOutcome) -> Arc<Compiled> {
        let Some(entry) = self.0[ri]
            .0
            .iter_mut()
            .find(|e| e.client_certificate.as_deref() == client_certificate && e.uses > 0)
        else {
            return Arc::default();
        };
        if let Some(problems) = &entry.outcome {
            outcome.add(problems);
        }
        entry.uses -= 1;
        entry.compiled.clone()
    }
}

/// The entries of one route: one per distinct client certificate of the Gateways it attached
/// to without a problem, in the order translation visits those Gateways; and whether each
/// came from `cached`.
#[allow(clippy::too_many_arguments)]
fn compile_one(
    route: &RouteModel<'_>,
    attachments: &[Attachment],
    gateways: &[GatewayModel<'_>],
    backends: &Backends<'_>,
    policies: RulePolicies<'_, '_>,
    regexes: &Regexes,
    config: &Config,
    cached: Option<&[Entry]>,
) -> (Entries, bool) {
    if !matches!(route.kind, RouteKind::Http | RouteKind::Grpc) {
        return (Entries::new(), false);
    }
    let compile = |client_certificate: Option<&str>| {
        let mut outcome = RouteOutcome::default();
        let compiled = http::compile(route, backends, policies, regexes, client_certificate, &mut outcome);
        Entry {
            client_certificate: client_certificate.map(str::to_string),
            compiled: Arc::new(compiled),
            outcome: (outcome != RouteOutcome::default()).then(|| Arc::new(outcome)),
            valid_hostnames: route.hostnames.iter().all(|h| crate::hostname::is_valid(h, true)),
            uses: 1,
        }
    };
    let reused = |client_certificate: Option<&str>| {
        cached.and_then(|c| c.iter().find(|e| e.client_certificate.as_deref() == client_certificate))
    };
    let mut served = attachments.iter().filter(|a| a.problem.is_none()).map(|a| a.gateway);
    let Some(first) = served.next() else {
        return (Entries::new(), cached.is_some_and(|c| c.is_empty()));
    };
    if served.all(|gi| gi == first) {
        // One Gateway, as almost every route has (through one listener or several): its own
        // certificate, whatever the mode, and one entry.
        let client_certificate = gateways[first].client_certificate.as_deref();
        return match reused(client_certificate) {
            Some(e) => (
                Entries::from_buf([Entry { uses: 1, ..e.clone() }]),
                cached.is_some_and(|c| c.len() == 1),
            ),
            None => (Entries::from_buf([compile(client_certificate)]), false),
        };
    }
    let mut all_reused = true;
    let mut attached: smallvec::SmallVec<[usize; 2]> = attachments
        .iter()
        .filter(|a| a.problem.is_none())
        .map(|a| a.gateway)
        .collect();
    attached.sort_unstable();
    attached.dedup();
    let mut entries = Entries::new();
    for gi in &attached {
        let client_certificate = backend_tls::route_client_certificate(
            config.mode,
            gateways[*gi].client_certificate.as_deref(),
            attached.iter().map(|g| gateways[*g].client_certificate.as_deref()),
        );
        if let Some(e) = entries
            .iter_mut()
            .find(|e| e.client_certificate.as_deref() == client_certificate)
        {
            e.uses += 1;
            continue;
        }
        entries.push(match reused(client_certificate) {
            Some(e) => Entry { uses: 1, ..e.clone() },
            None => {
                all_reused = false;
                compile(client_certificate)
            }
        });
    }
    // The same entries as kept: a route that lost a certificate keeps fewer.
    let kept_all = cached.is_some_and(|c| c.len() == entries.len());
    (entries, all_reused && kept_all)
}

/// The compiled rules and route statuses of the last translation, kept to translate the next
/// snapshot faster (statuses: [`super::settled`]). Rules:
/// a route whose object is the same (the snapshot shares unchanged objects) keeps its rules
/// while nothing else that compiling reads has changed. Any change to Services,
/// EndpointSlices, ReferenceGrants, BackendTLSPolicies, security policies, ConfigMaps, ClusterTrustBundles or the
/// configuration compiles every route again. The output is the same as without the cache (a
/// property test holds it to that).
#[derive(Default)]
pub struct CompileCache {
    inputs: Option<Inputs>,
    /// Each route's entries.
    /// Inline: finding a route's entries is one lookup, not a lookup and a list elsewhere.
    routes: ByObject<Entries>,
    /// Of the routes the last translation compiled: how many it took from the cache, and how
    /// many it compiled (the operator logs them: a cache that keeps nothing is a slow pass).
    last: (usize, usize),
    /// The route statuses of the last translation.
    pub(crate) statuses: super::settled::Settled,
    /// The last translation's routes, in name order and oldest first: the next one starts its
    /// sorts from there (`translate::unique_routes`, `translate::age_ranks`).
    pub(crate) route_order: crate::translate::RouteOrder,
    /// The virtual hosts of the last translation.
    pub(crate) assembled: super::assembled::Assembled,
    /// The Services and EndpointSlices of the last translation's snapshot, indexed (while
    /// they are the same objects).
    pub(crate) backend_index: Option<Arc<crate::backend::Index>>,
    /// Where the last translation's routes attached.
    pub(crate) attached: super::attached::Attached,
}

/// Everything besides the route that compiling reads, as the snapshot shares it.
struct Inputs {
    services: Vec<Arc<Service>>,
    endpoint_slices: Vec<Arc<EndpointSlice>>,
    reference_grants: Vec<Arc<ReferenceGrant>>,
    backend_tls_policies: Vec<Arc<BackendTlsPolicy>>,
    xbackends: Vec<Arc<XBackend>>,
    xbackend_traffic_policies: Vec<Arc<XBackendTrafficPolicy>>,
    /// Which policies apply to which rule.
    security_policies: Vec<Arc<TurnaSecurityPolicy>>,
    traffic_policies: Vec<Arc<TurnaTrafficPolicy>>,
    /// What backends are resolved with.
    backend_policies: Vec<Arc<TurnaBackendPolicy>>,
    /// Only while XBackends exist: their client certificates are checked against them.
    secrets: Vec<SecretFacts>,
    config_maps: Vec<ConfigMapFacts>,
    cluster_trust_bundles: Vec<ClusterTrustBundleFacts>,
    backend_tls_installed: bool,
    /// Whether the XBackend and XBackendTrafficPolicy CRDs are installed.
    xbackend_installed: (bool, bool),
    trust_bundles_installed: bool,
    config: Config,
}

fn xbackend_installed(snapshot: &Snapshot) -> (bool, bool) {
    let facts = &snapshot.facts;
    (facts.installed("XBackend"), facts.installed("XBackendTrafficPolicy"))
}

/// The Secret facts compiling depends on: XBackend client certificates, so none without XBackends.
fn xbackend_secrets(snapshot: &Snapshot) -> Vec<SecretFacts> {
    if snapshot.xbackends.is_empty() {
        Vec::new()
    } else {
        snapshot.secrets.clone()
    }
}

impl Inputs {
    fn of(snapshot: &Snapshot, config: &Config) -> Self {
        Inputs {
            services: snapshot.services.clone(),
            endpoint_slices: snapshot.endpoint_slices.clone(),
            reference_grants: snapshot.reference_grants.clone(),
            backend_tls_policies: snapshot.backend_tls_policies.clone(),
            xbackends: snapshot.xbackends.clone(),
            xbackend_traffic_policies: snapshot.xbackend_traffic_policies.clone(),
            security_policies: snapshot.security_policies.clone(),
            traffic_policies: snapshot.traffic_policies.clone(),
            backend_policies: snapshot.backend_policies.clone(),
            secrets: xbackend_secrets(snapshot),
            config_maps: snapshot.config_maps.clone(),
            cluster_trust_bundles: snapshot.cluster_trust_bundles.clone(),
            backend_tls_installed: snapshot.facts.installed("BackendTLSPolicy"),
            xbackend_installed: xbackend_installed(snapshot),
            trust_bundles_installed: snapshot.facts.installed(crate::trust_bundle::KIND),
            config: config.clone(),
        }
    }

    /// Whether `snapshot` and `config` hold the same objects (the same shared ones, in the
    /// same order) and values.
    fn same(&self, snapshot: &Snapshot, config: &Config) -> bool {
        fn shared<T>(a: &[Arc<T>], b: &[Arc<T>]) -> bool {
            a.len() == b.len() && a.iter().zip(b).all(|(a, b)| Arc::ptr_eq(a, b))
        }
        shared(&self.services, &snapshot.services)
            && shared(&self.endpoint_slices, &snapshot.endpoint_slices)
            && shared(&self.reference_grants, &snapshot.reference_grants)
            && shared(&self.backend_tls_policies, &snapshot.backend_tls_policies)
            && shared(&self.xbackends, &snapshot.xbackends)
            && shared(&self.xbackend_traffic_policies, &snapshot.xbackend_traffic_policies)
            && shared(&self.security_policies, &snapshot.security_policies)
            && shared(&self.traffic_policies, &snapshot.traffic_policies)
            && shared(&self.backend_policies, &snapshot.backend_policies)
            && (snapshot.xbackends.is_empty() || self.secrets == snapshot.secrets)
            && self.config_maps == snapshot.config_maps
            && self.cluster_trust_bundles == snapshot.cluster_trust_bundles
            && self.trust_bundles_installed == snapshot.facts.installed(crate::trust_bundle::KIND)
            && self.backend_tls_installed == snapshot.facts.installed("BackendTLSPolicy")
            && self.xbackend_installed == xbackend_installed(snapshot)
            && self.config == *config
    }
}

impl CompileCache {
    /// Forgets every route if something besides the routes changed since the last
    /// translation; the cache then describes `snapshot`'s other inputs. Starts a pass: the
    /// rules it does not reuse or keep go at [`CompileCache::keep`].
    pub fn check(&mut self, snapshot: &Snapshot, config: &Config) {
        if !self.inputs.as_ref().is_some_and(|i| i.same(snapshot, config)) {
            self.routes.clear();
            self.backend_index = None;
            self.inputs = Some(Inputs::of(snapshot, config));
        }
        self.routes.start();
    }

    /// Keeps the rules just compiled for `routes`, and only those: removed routes go.
    pub fn keep(&mut self, routes: &[RouteModel<'_>], compiled: &CompiledRoutes) {
        self.last = (0, 0);
        for (ri, (route, (entries, all_reused))) in routes.iter().zip(&compiled.0).enumerate() {
            let Some(object) = route.object.filter(|_| !entries.is_empty()) else {
                continue;
            };
            if *all_reused {
                // Kept as they are by the lookup that found them.
                self.last.0 += 1;
                continue;
            }
            // A route whose rules came from the cache keeps its entries as they are.
            let reused = |kept: &Entries| {
                kept.len() == entries.len()
                    && (kept.iter().zip(entries)).all(|(a, b)| Arc::ptr_eq(&a.compiled, &b.compiled))
            };
            if self.routes.keep(object, ri, reused, || entries.clone()) {
                self.last.0 += 1;
            } else {
                self.last.1 += 1;
            }
        }
        self.routes.sweep();
    }

    /// How many routes have rules kept: a pass over as many routes mostly reuses them.
    pub fn kept_routes(&self) -> usize {
        self.routes.count()
    }

    /// Of the HTTP and gRPC routes the last translation compiled: how many came from the cache
    /// and how many were compiled again.
    pub fn last_pass(&self) -> (usize, usize) {
        self.last
    }
}
