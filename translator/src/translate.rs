//! The pipeline: classes, Gateways and their listeners, route attachment, backends and policies,
//! then one IR per proxy and every status.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::backend::Backends;
use crate::bundle::Bundle;
use crate::config::{Config, Mode};
use crate::gateway::{self, GatewayModel, listener_set};
use crate::hostname;
use crate::ir::{self, Listener, ListenerTls, Port, Protocol, Proxy, StreamRoute, TlsMode, Transport, VirtualHost};
use crate::object::Meta;
use crate::policy;
use crate::prefetch;
use crate::route::assembled::{Assembled, GONE, Hosts, Kept, Last, Origin, Served, Sources};
use crate::route::compiled::CompileCache;
use crate::route::http::{Compiled, PrecedenceKey, precedence_key};
use crate::route::{self, KeptOutcome, RouteKind, RouteModel, RouteOutcome};
use crate::snapshot::Snapshot;
use crate::status::Statuses;

/// The result of one translation.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Output {
    /// One IR per proxy, sorted by id.
    pub proxies: Vec<Proxy>,
    pub statuses: Statuses,
    /// What each proxy's certificate bundle holds, by proxy id.
    pub bundles: BTreeMap<String, Bundle>,
    /// Controller mode: proxies (Gateway `namespace/name`) to leave as they are, neither changed
    /// nor deleted, because the parameters of their Gateway or GatewayClass cannot be used.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub held: BTreeSet<String>,
}

/// Id of the single proxy of standalone mode.
pub const STANDALONE: &str = "standalone";

/// What one route contributes to one listener.
struct Contribution {
    route: usize,
    /// Its compiled rules (shared with the other listeners it attached to and the cache).
    rules: Arc<Compiled>,
    /// Boxed: listeners collect thousands of HTTP contributions, which have none.
    stream: Option<Box<StreamRoute>>,
}

/// Translates a snapshot.
pub fn translate(snapshot: &Snapshot, config: &Config) -> Output {
    translate_on(snapshot, config, threads_for(snapshot), None)
}

/// [`translate`], compiling only the routes that changed since the last translation with
/// `cache` (and keeping this one's rules there): the operator's loop translates so.
pub fn translate_reusing(snapshot: &Snapshot, config: &Config, cache: &mut CompileCache) -> Output {
    translate_on(snapshot, config, threads_for(snapshot), Some(cache))
}

fn threads_for(snapshot: &Snapshot) -> usize {
    crate::parallel::threads_for(routes_in(snapshot))
}

/// The routes whose rules are compiled: the work that can run on several threads.
fn routes_in(snapshot: &Snapshot) -> usize {
    snapshot.http_routes.len() + snapshot.grpc_routes.len()
}

/// [`translate`], with the work per route on `threads` threads ([`crate::parallel`]) and
/// compiled rules reused from `cache`; the output is the same for any number of threads and
/// with or without a cache.
pub fn translate_on(
    snapshot: &Snapshot,
    config: &Config,
    threads: usize,
    mut cache: Option<&mut CompileCache>,
) -> Output {
    let namespace_labels: BTreeMap<String, BTreeMap<String, String>> = snapshot
        .namespaces
        .iter()
        .map(|n| (n.name().to_string(), n.metadata.labels.clone().unwrap_or_default()))
        .collect();
    let classes = gateway::class::ours(snapshot, config);
    let mut gateways = gateway::build(snapshot, config, &classes, &namespace_labels);
    if let Some(cache) = cache.as_deref_mut() {
        cache.check(snapshot, config);
    }
    // A pass that reuses most routes does too little per route for a second thread to pay:
    // its part of the work arrives in another core's cache (measured: one route added at
    // 5,000 routes took 5.0 ms on two threads and 4.2 ms on one).
    let threads = match cache.as_deref() {
        Some(cache) => {
            crate::parallel::threads_for_work(threads, routes_in(snapshot).saturating_sub(cache.kept_routes()))
        }
        None => threads,
    };
    let backends = Backends::new(snapshot, config, cache.as_deref().and_then(|c| c.backend_index.clone()));
    let listener_servers = gateway::listener_filters::resolve(&mut gateways, &backends, config);
    let telemetry = policy::telemetry::apply(snapshot, config, &gateways, &backends);
    let security = policy::security::build(snapshot, config, &backends);
    let traffic = policy::traffic::build(snapshot, config, &backends);
    let rule_policies = policy::RulePolicies {
        security: &security,
        traffic: &traffic,
    };
    let regexes = route::value::Regexes::default();

    // Routes stay in the snapshot's order, which is the order of their memory: walking them so
    // is much faster on large snapshots than in name order. Only statuses need name order.
    let first = RouteOrder::default();
    let last_order = cache.as_deref().map_or(&first, |c| &c.route_order);
    let (routes, by_name, carried) = unique_routes(collect_routes(snapshot, config, threads), last_order, threads);
    // Age rank of each route, oldest first: precedence between routes.
    let (by_age, age_rank) = age_ranks(&routes, last_order, carried.as_ref(), threads);

    // Per Gateway, per listener (by position): the contributions; the backends and policies
    // they use.
    let mut contributions: Vec<Vec<Vec<Contribution>>> = (gateways.iter())
        .map(|g| (0..g.listeners.len()).map(|_| Vec::new()).collect())
        .collect();
    let mut seen_backends: Vec<foldhash::HashSet<*const ir::Backend>> =
        gateways.iter().map(|_| foldhash::HashSet::default()).collect();
    let mut gateway_backends: Vec<BTreeMap<ir::SmolStr, Arc<ir::Backend>>> =
        gateways.iter().map(|_| BTreeMap::new()).collect();
    let mut policy_usage: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    // The servers of listener filters are the Gateway's backends like any route's.
    for (gi, resolved) in listener_servers {
        for p in resolved.policies {
            policy_usage.entry(p).or_default().insert(gateways[gi].key());
        }
        let b = resolved.backend;
        if seen_backends[gi].insert(Arc::as_ptr(&b)) && !gateway_backends[gi].contains_key(&b.id) {
            gateway_backends[gi].insert(b.id.clone(), b);
        }
    }
    // The Gateways each route a security policy names is served on, by `Kind/namespace/name`.
    let mut route_gateways: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    // Each route's outcome, for its status after the loop.
    let mut outcomes: Vec<Option<KeptOutcome>> = (0..routes.len()).map(|_| None).collect();
    let controller_name = ir::SmolStr::new(&config.controller_name);

    let kept_attachments = cache.as_deref_mut().map(|c| &mut c.attached);
    let all_attachments = route::attach_all(
        &routes,
        &gateways,
        &namespace_labels,
        &by_age,
        kept_attachments,
        threads,
    );
    let mut compiled_routes = route::compiled::CompiledRoutes::new(
        &routes,
        &all_attachments,
        &gateways,
        &backends,
        rule_policies,
        &regexes,
        config,
        threads,
        cache.as_deref(),
    );
    if let Some(cache) = cache.as_deref_mut() {
        cache.keep(&routes, &compiled_routes);
        cache.backend_index = backends.built_index();
        cache.route_order.record(&routes, &by_name, &by_age);
    }
    // Per-route scratch, reused: the Gateways a route attached to, with their listeners, and
    // the rules it gives each (whose backends and policies count if it is accepted).
    let mut attached: Vec<(usize, smallvec::SmallVec<[usize; 2]>)> = Vec::new();
    let mut used: Vec<(usize, Arc<Compiled>)> = Vec::new();
    for (ri, route) in routes.iter().enumerate() {
        ask_for_route(&all_attachments, &compiled_routes, ri);
        let attachments = &all_attachments[ri];
        if attachments.is_empty() {
            continue;
        }
        let mut outcome = RouteOutcome::default();
        if let Some(error) = route.unreadable {
            // Its references were not read either.
            let unsupported = crate::status::condition::reason::UNSUPPORTED_VALUE;
            outcome.not_accepted = Some(gateway::Problem::new(
                unsupported,
                format!("The route has a value Turna does not support: {error}"),
            ));
            outcome.unresolved = Some(gateway::Problem::new(
                unsupported,
                "The route's references are not resolved: it cannot be read",
            ));
        } else if let Some(h) = invalid_hostname(route, &compiled_routes, ri) {
            // The proxy could not tell its requests apart.
            outcome.not_accepted = Some(gateway::Problem::new(
                crate::status::condition::reason::UNSUPPORTED_VALUE,
                format!("Invalid hostname {h:?}"),
            ));
        }
        attached.clear();
        // The attachments are shared with the cache: their listeners are copied (one or two).
        for a in attachments.iter().filter(|a| a.problem.is_none()) {
            match attached.iter_mut().find(|(g, _)| *g == a.gateway) {
                Some((_, listeners)) => listeners.extend_from_slice(&a.listeners),
                None => attached.push((a.gateway, smallvec::SmallVec::from_slice(&a.listeners))),
            }
        }
        attached.sort_unstable_by_key(|(g, _)| *g);
        for (gi, listeners) in &mut attached {
            listeners.sort_unstable();
            listeners.dedup();
            for li in listeners.iter() {
                gateways[*gi].listeners[*li].attached_routes += 1;
            }
        }
        used.clear();
        for (gi, listeners) in &attached {
            let gw = &gateways[*gi];
            let client_certificate = policy::backend_tls::route_client_certificate(
                config.mode,
                gw.client_certificate.as_deref(),
                attached.iter().map(|(g, _)| gateways[*g].client_certificate.as_deref()),
            );
            let terminated = |li: &usize| gw.listeners[*li].spec.tls_mode == Some(TlsMode::Terminate);
            // Stream entries by whether the listener terminates TLS; none for HTTP and gRPC.
            let (compiled, streams) = match route.kind {
                RouteKind::Http | RouteKind::Grpc => (compiled_routes.take(ri, client_certificate, &mut outcome), None),
                RouteKind::Tls | RouteKind::Tcp | RouteKind::Udp => {
                    let modes = listeners.iter().map(terminated).collect();
                    let (entries, c) =
                        route::stream::compile(route, &backends, &modes, client_certificate, &mut outcome);
                    (Arc::new(c), Some(entries))
                }
            };
            for li in listeners.iter() {
                contributions[*gi][*li].push(Contribution {
                    route: ri,
                    rules: compiled.clone(),
                    stream: (streams.as_ref())
                        .and_then(|s| s.get(&terminated(li)))
                        .cloned()
                        .map(Box::new),
                });
            }
            used.push((*gi, compiled));
        }
        if outcome.not_accepted.is_some() {
            // A route that is not accepted serves nothing: drop what it just added (the last
            // contributions of the listeners it attached to).
            for (gi, listeners) in &attached {
                for li in listeners {
                    let list = &mut contributions[*gi][*li];
                    while list.last().is_some_and(|c| c.route == ri) {
                        list.pop();
                    }
                }
            }
        } else {
            for (gi, compiled) in used.drain(..) {
                for b in &compiled.backends {
                    // Routes share resolved backends: a backend seen before has its id in the map.
                    if seen_backends[gi].insert(Arc::as_ptr(b)) && !gateway_backends[gi].contains_key(&b.id) {
                        gateway_backends[gi].insert(b.id.clone(), b.clone());
                    }
                }
                if !compiled.policies.is_empty() {
                    let gw = gateways[gi].key();
                    for p in &compiled.policies {
                        policy_usage.entry(p.clone()).or_default().insert(gw.clone());
                    }
                }
            }
            let (kind, ns, name) = (route.kind.name(), route.namespace, route.name);
            if (!security.is_empty() && security.targets_route(kind, ns, name))
                || (!traffic.is_empty() && traffic.targets_route(kind, ns, name))
            {
                let key = format!("{}/{}/{}", route.kind.name(), route.namespace, route.name);
                route_gateways
                    .entry(key)
                    .or_default()
                    .extend(attached.iter().map(|(gi, _)| gateways[*gi].key()));
            }
        }
        outcomes[ri] = Some(KeptOutcome::of(outcome));
    }
    if let Some(cache) = cache.as_deref_mut() {
        cache.statuses.start();
    }
    let settled = cache.as_deref().map(|c| &c.statuses);
    // Each status, and whether it is the last translation's.
    let mut route_statuses = crate::parallel::map(routes.len(), threads, |ri| {
        if let Some(settled) = settled {
            settled.prefetch(ri + prefetch::AHEAD);
        }
        let (route, attachments, outcome) = (&routes[ri], &all_attachments[ri], outcomes[ri].as_ref()?);
        Some(
            match settled.and_then(|s| s.get(ri, route, attachments, outcome, &controller_name)) {
                Some(last) => (last, true),
                None => (
                    Arc::new(route::status(route, attachments, outcome.get(), &controller_name)),
                    false,
                ),
            },
        )
    });
    if let Some(cache) = cache.as_deref_mut() {
        (cache.statuses).keep(&routes, &all_attachments, &outcomes, &route_statuses, &controller_name);
    }

    let accepted_gateways: BTreeSet<String> = gateways.iter().filter(|g| g.is_accepted()).map(|g| g.key()).collect();
    let backend_usage = (security.backend_usage(&accepted_gateways, &route_gateways).into_iter())
        .chain(traffic.backend_usage(&accepted_gateways, &route_gateways));
    for (key, gw) in backend_usage {
        policy_usage.entry(key).or_default().insert(gw);
    }
    let mut statuses = Statuses {
        gateway_classes: gateway::class::statuses(&classes, config),
        gateways: gateways.iter().map(gateway::status).collect(),
        listener_sets: gateways
            .iter()
            .flat_map(|g| g.listener_sets.iter().map(move |s| listener_set::status(s, g)))
            .collect(),
        routes: collect_within(
            by_name.len(),
            (by_name.iter()).filter_map(|&ri| route_statuses[ri].take().map(|(status, _)| status)),
        ),
        backend_tls_policies: backends.policies.statuses(&policy_usage, config),
        telemetry_policies: telemetry.statuses,
        xbackends: backends.xbackend_statuses(&policy_usage),
        xbackend_traffic_policies: backends.traffic.statuses(&policy_usage, config),
        security_policies: security.statuses(&accepted_gateways, &route_gateways, config),
        traffic_policies: traffic.statuses(&accepted_gateways, &route_gateways, config),
        backend_policies: backends.settings.statuses(&policy_usage, config),
    };
    statuses
        .listener_sets
        .sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));

    let mut proxies: BTreeMap<String, Proxy> = BTreeMap::new();
    let mut assembled = cache.map(|c| &mut c.assembled);
    if let Some(assembled) = assembled.as_deref_mut() {
        assembled.start();
    }
    for (gi, gw) in gateways.iter().enumerate() {
        // A Gateway whose addresses Turna can give none of gets no proxy (and so no address of
        // a scope it did not ask for).
        if gw.not_accepted.is_some() || !gw.is_accepted() || gw.unprovisionable() {
            continue;
        }
        let id = match config.mode {
            Mode::Controller => gw.key(),
            Mode::Standalone => STANDALONE.to_string(),
        };
        let proxy = proxies.entry(id.clone()).or_insert_with(|| Proxy {
            schema: ir::BASE_SCHEMA,
            id: id.clone(),
            connect_retries: config.backend.retry,
            ..Proxy::default()
        });
        proxy.gateways.push(gw.key());
        if config.mode == Mode::Controller {
            let infra = gw.gateway.spec.infrastructure.as_ref();
            proxy.infrastructure = Some(ir::Infrastructure {
                labels: infra.and_then(|i| i.labels.clone()).unwrap_or_default(),
                annotations: infra.and_then(|i| i.annotations.clone()).unwrap_or_default(),
                addresses: gw.load_balancer_addresses(),
                cluster_ip: gw.cluster_ip.clone(),
                cluster_only: gw.cluster_only(),
                parameters: gw.parameters.clone(),
                owners: owners(gw, &classes),
            });
        }
        let tracing = telemetry.gateways.get(&gw.key()).map(|(tracing, backend)| {
            let key = ir::SmolStr::new(gw.key());
            proxy.tracing.insert(key.clone(), tracing.clone());
            proxy.add_backend(backend);
            key
        });
        add_listeners(
            proxy,
            gw,
            &mut contributions[gi],
            &routes,
            &age_rank,
            config,
            tracing,
            rule_policies,
            &snapshot.facts,
            assembled.as_deref_mut(),
            threads,
        );
        let backends = std::mem::take(&mut gateway_backends[gi]);
        if proxy.backends.is_empty() {
            // One Gateway per proxy, untraced: its backends are the proxy's, as they are.
            proxy.backends = backends;
        } else {
            for (id, b) in backends {
                proxy.backends.entry(id).or_insert(b);
            }
        }
    }
    if let Some(assembled) = assembled {
        assembled.sweep();
    }
    for proxy in proxies.values_mut() {
        policy::security::add_to_proxy(proxy, &security);
        policy::traffic::add_to_proxy(proxy, &traffic);
        proxy.schema = proxy.required_schema();
    }
    let mut out = Output {
        proxies: proxies.into_values().collect(),
        statuses,
        bundles: BTreeMap::new(),
        held: held(snapshot, config, &classes, &gateways),
    };
    for proxy in &mut out.proxies {
        finish_proxy(proxy);
        out.bundles.insert(proxy.id.clone(), Bundle::of(proxy));
    }
    out
}

/// Asks for what the loop over the routes reads of the routes ahead ([`crate::prefetch`]):
/// the lines holding the attachments and compiled rules of the route twice
/// [`prefetch::AHEAD`] on, and what those lines point to for the route [`prefetch::AHEAD`]
/// on, whose lines have arrived by then. (A route's hostnames are read only when it has no
/// compiled rules: [`invalid_hostname`].)
fn ask_for_route(attachments: &[route::Attachments], compiled: &route::compiled::CompiledRoutes, ri: usize) {
    let far = ri + 2 * prefetch::AHEAD;
    if let Some(attached) = attachments.get(far) {
        prefetch::line(Arc::as_ptr(attached));
        compiled.prefetch_rules(far);
    }
    let near = ri + prefetch::AHEAD;
    if let Some(attached) = attachments.get(near) {
        prefetch::line(attached.as_ptr());
        compiled.prefetch_backends(near);
    }
}

/// A hostname of route `ri` that is not one ([`hostname::is_valid`]), for its status. Its
/// compiled rules know when there is none (they are kept with the route's object): only the
/// routes without rules, and those with an invalid hostname, are checked again.
fn invalid_hostname<'r>(
    route: &'r RouteModel<'_>,
    compiled: &route::compiled::CompiledRoutes,
    ri: usize,
) -> Option<&'r String> {
    if compiled.valid_hostnames(ri) == Some(true) {
        return None;
    }
    route.hostnames.iter().find(|h| !hostname::is_valid(h, true))
}

/// The routes without duplicates (the first of each kind, namespace and name is kept), in
/// their given order, and their positions in order of kind, namespace and name. The last
/// translation's name order (`last`) only arranges the routes before sorting, so that the sort
/// finds them almost in order and merges the few new ones: the result is the same for any
/// `last`; when few routes changed, the held ones keep their places without a sort
/// ([`merged_order`]). With a last order and a sort, also where the last routes are now
/// ([`Carried`]), for [`age_ranks`] to arrange them again.
fn unique_routes<'a>(
    mut routes: Vec<RouteModel<'a>>,
    last: &RouteOrder,
    threads: usize,
) -> (Vec<RouteModel<'a>>, Vec<usize>, Option<Carried>) {
    // Few routes changed since the last translation, none twice: the others keep their places.
    if let Some(by_name) = merged_order(&routes, last, &last.by_name, |i| name_key(&routes[i])) {
        return (routes, by_name, None);
    }
    // The keys sit beside the positions, so comparisons do not reach into the routes; the
    // position breaks ties, as a stable sort of the positions would.
    let carried = (!last.by_name.is_empty()).then(|| Carried::new(&last.addresses, &routes));
    let order = match &carried {
        Some(carried) => carried.arranged(routes.len(), &last.by_name),
        None => (0..routes.len()).collect(),
    };
    let keyed = crate::parallel::sorted(
        order.len(),
        threads,
        |range, keyed| keyed.extend(order[range].iter().map(|&i| (name_key(&routes[i]), i))),
        <[_]>::sort,
    );
    let duplicate: Vec<usize> = keyed.windows(2).filter(|w| w[0].0 == w[1].0).map(|w| w[1].1).collect();
    let by_name: Vec<usize> = keyed.into_iter().map(|(_, i)| i).collect();
    if duplicate.is_empty() {
        return (routes, by_name, carried);
    }
    // Rare (only hand-written snapshots repeat an object): drop the later copies and number
    // the rest again.
    let mut keep = vec![true; routes.len()];
    for i in duplicate {
        keep[i] = false;
    }
    let mut renumbered = Vec::with_capacity(routes.len());
    let mut next = 0;
    for &k in &keep {
        renumbered.push(next);
        next += usize::from(k);
    }
    let mut index = 0;
    routes.retain(|_| {
        index += 1;
        keep[index - 1]
    });
    let by_name = by_name
        .into_iter()
        .filter(|&i| keep[i])
        .map(|i| renumbered[i])
        .collect();
    // Renumbered: where the last routes are no longer holds.
    (routes, by_name, None)
}

/// A route's place in name order: kind, namespace, name.
fn name_key<'r>(r: &RouteModel<'r>) -> (RouteKind, &'r str, &'r str) {
    (r.kind, r.namespace, r.name)
}

/// A route's identity from one translation to the next: the address of its name, which the
/// object holds while the snapshot shares it (an address reused by another object only arranges
/// [`unique_routes`]' input differently).
fn name_address(route: &RouteModel<'_>) -> usize {
    route.name.as_ptr() as usize
}

fn collect_routes<'a>(snapshot: &'a Snapshot, config: &Config, threads: usize) -> Vec<RouteModel<'a>> {
    let installed = |k: RouteKind| snapshot.facts.installed(k.name());
    let watched = |ns: &str| config.watches_namespace(ns);
    // Sized once: regrowing a list of thousands of routes copies it into fresh memory.
    let mut routes = Vec::with_capacity(
        snapshot.http_routes.len()
            + snapshot.grpc_routes.len()
            + snapshot.tls_routes.len()
            + snapshot.tcp_routes.len()
            + snapshot.udp_routes.len()
            + snapshot.unreadable_routes.len(),
    );
    if installed(RouteKind::Http) {
        // Most routes are HTTPRoutes: read on several threads when there are many.
        let http = &snapshot.http_routes;
        let model = |r: &'a Arc<crate::api::HttpRoute>| {
            let mut model = RouteModel::from_http(r);
            model.object = Some(route::model::RouteObject::Http(r));
            model.sessions = Some(&snapshot.session_persistence);
            model
        };
        // The fields a model reads, of the route AHEAD on ([`crate::prefetch`]): the objects
        // lie all over memory.
        let ask = |i: usize| {
            if let Some(r) = http.get(i + prefetch::AHEAD) {
                prefetch::line(&r.metadata.name);
                prefetch::line(&r.metadata.namespace);
                prefetch::line(&r.metadata.generation);
                prefetch::line(&r.metadata.creation_timestamp);
                prefetch::line(&r.spec.hostnames);
            }
        };
        if threads <= 1 {
            // Made in place: a list of models made apart and copied over is written and read
            // once more (thousands of models, more than a core's cache holds).
            routes.extend((http.iter().enumerate()).filter_map(|(i, r)| {
                ask(i);
                Some(r).filter(|r| watched(r.namespace())).map(model)
            }));
        } else {
            let models = crate::parallel::map(http.len(), threads, |i| {
                ask(i);
                Some(&http[i]).filter(|r| watched(r.namespace())).map(model)
            });
            routes.extend(models.into_iter().flatten());
        }
    }
    if installed(RouteKind::Grpc) {
        routes.extend(snapshot.grpc_routes.iter().filter(|r| watched(r.namespace())).map(|r| {
            let mut model = RouteModel::from_grpc(r);
            model.object = Some(route::model::RouteObject::Grpc(r));
            model.sessions = Some(&snapshot.session_persistence);
            model
        }));
    }
    if installed(RouteKind::Tls) {
        routes.extend(
            snapshot
                .tls_routes
                .iter()
                .map(Arc::as_ref)
                .filter(|r| watched(r.namespace()))
                .map(RouteModel::from_tls),
        );
    }
    if installed(RouteKind::Tcp) {
        routes.extend(
            snapshot
                .tcp_routes
                .iter()
                .map(Arc::as_ref)
                .filter(|r| watched(r.namespace()))
                .map(RouteModel::from_tcp),
        );
    }
    if installed(RouteKind::Udp) {
        routes.extend(
            snapshot
                .udp_routes
                .iter()
                .map(Arc::as_ref)
                .filter(|r| watched(r.namespace()))
                .map(RouteModel::from_udp),
        );
    }
    routes.extend(
        snapshot
            .unreadable_routes
            .iter()
            .filter(|r| installed(r.kind) && watched(r.namespace()))
            .map(RouteModel::from_unreadable),
    );
    let facts = &snapshot.facts;
    if !facts.static_layer.is_empty() {
        for route in &mut routes {
            route.static_layer = facts
                .name_prefix(route.kind.name(), route.namespace, route.name)
                .is_empty();
        }
    }
    routes
}

/// Adds the ready listeners of `gw` to `proxy`, with their route tables.
#[allow(clippy::too_many_arguments)]
fn add_listeners(
    proxy: &mut Proxy,
    gw: &GatewayModel<'_>,
    contributions: &mut [Vec<Contribution>],
    routes: &[RouteModel<'_>],
    age_rank: &[usize],
    config: &Config,
    tracing: Option<ir::SmolStr>,
    policies: policy::RulePolicies<'_, '_>,
    facts: &crate::snapshot::Facts,
    mut assembled: Option<&mut Assembled>,
    threads: usize,
) {
    for (li, l) in gw.listeners.iter().enumerate() {
        if !l.is_ready() {
            continue;
        }
        let Some(protocol) = l.protocol else { continue };
        let transport = if protocol == Protocol::Udp {
            Transport::Udp
        } else {
            Transport::Tcp
        };
        let port_number = l.spec.port as u16;
        let (owner_kind, owner_name) = match &l.owner {
            gateway::Owner::Gateway => ("Gateway", &gw.name),
            gateway::Owner::ListenerSet { name, .. } => ("ListenerSet", name),
        };
        let prefix = facts.name_prefix(owner_kind, &l.namespace, owner_name);
        let mut listener = Listener {
            name: format!("{prefix}{}/{owner_name}/{}", l.namespace, l.spec.name),
            protocol,
            hostname: l.spec.hostname.clone(),
            tls: l.spec.tls_mode.map(|mode| ListenerTls {
                mode,
                certificates: if mode == TlsMode::Terminate {
                    l.certificates.clone()
                } else {
                    Vec::new()
                },
            }),
            virtual_hosts: Vec::new(),
            stream_routes: Vec::new(),
            tracing: None,
            filters: Vec::new(),
            security: None,
            traffic: None,
        };
        let list = std::mem::take(&mut contributions[li]);
        match protocol {
            Protocol::Http | Protocol::Https => {
                listener.tracing = tracing.clone();
                listener.filters = l.filters.clone();
                // A Gateway's sectionName names its own listeners only.
                let own = matches!(l.owner, gateway::Owner::Gateway).then_some(l.spec.name.as_str());
                listener.security = (policies.security).for_listener(&gw.namespace, &gw.name, own);
                listener.traffic = (policies.traffic).for_listener(&gw.namespace, &gw.name, own);
                let kept = assembled.as_deref_mut().map(|a| a.listener(&listener.name));
                listener.virtual_hosts =
                    virtual_hosts(l.spec.hostname.as_deref(), list, routes, age_rank, kept, threads);
            }
            Protocol::Tls | Protocol::Tcp | Protocol::Udp => {
                let attached = list
                    .into_iter()
                    .filter_map(|c| {
                        Some(route::stream::Attached {
                            hostnames: routes[c.route].hostnames,
                            age: age_rank[c.route],
                            entry: *c.stream?,
                        })
                    })
                    .collect();
                listener.stream_routes = route::stream::table(protocol, l.spec.hostname.as_deref(), attached);
            }
        }
        let port = match proxy
            .ports
            .iter_mut()
            .find(|p| p.transport == transport && p.port == port_number)
        {
            Some(p) => p,
            None => {
                proxy.ports.push(Port {
                    transport,
                    port: port_number,
                    bind_port: port_number.saturating_add(config.port_offset),
                    listeners: Vec::new(),
                    frontend_validation: None,
                });
                proxy.ports.last_mut().expect("just pushed")
            }
        };
        if protocol == Protocol::Https
            && let Some(v) = gw.frontend.get(&l.spec.port)
        {
            port.frontend_validation.get_or_insert_with(|| v.clone());
        }
        port.listeners.push(listener);
    }
}

/// Groups HTTP entries by effective hostname and orders each group by precedence; a host
/// `kept` from the last translation with the same sources is not ordered again.
fn virtual_hosts(
    listener_hostname: Option<&str>,
    contributions: Vec<Contribution>,
    routes: &[RouteModel<'_>],
    age_rank: &[usize],
    mut kept: Option<Hosts<'_>>,
    threads: usize,
) -> Vec<VirtualHost> {
    // Hosts list (contribution, the route's own hostname that produced the effective one).
    // Unordered: the hosts are sorted by specificity, a total order, before they are built.
    let mut hosts = HostGroups::default();
    let mut owners = Vec::with_capacity(contributions.len());
    // Shared by every host that serves them.
    let mut entries: Vec<Arc<Compiled>> = Vec::with_capacity(contributions.len());
    // Whether HTTPRoutes and GRPCRoutes both contribute: only then can they meet on a host.
    let (mut http, mut grpc) = (false, false);
    // Asks for the hostnames of the routes ahead, then for the names they point to
    // ([`crate::prefetch`]).
    let ask = |ahead: &[Contribution]| {
        if let Some(c) = ahead.get(2 * prefetch::AHEAD) {
            prefetch::line(routes[c.route].hostnames.as_ptr());
        }
        if let Some(hostname) = (ahead.get(prefetch::AHEAD)).and_then(|c| routes[c.route].hostnames.first()) {
            prefetch::line(hostname.as_ptr());
        }
    };
    let mut contributions = contributions.into_iter();
    while let Some(c) = contributions.next() {
        ask(contributions.as_slice());
        // The contribution's position: as many came before it.
        let ci = owners.len();
        let route = &routes[c.route];
        match route.kind {
            RouteKind::Grpc => grpc = true,
            _ => http = true,
        }
        let route_hostnames = route.hostnames;
        match route_hostnames {
            // Most routes name one hostname: its intersection is the one effective hostname,
            // and the hostname itself the original (no list to collect and sort).
            [only] => {
                if let Some(h) = hostname::intersection(listener_hostname, only) {
                    hosts.add(h, (ci, only));
                }
            }
            _ => {
                for h in hostname::effective(listener_hostname, route_hostnames) {
                    let original = route::http::original_hostname(listener_hostname, route_hostnames, h);
                    hosts.add(h, (ci, original));
                }
            }
        }
        owners.push(c.route);
        entries.push(c.rules);
    }
    // Scratch reused from host to host: most hosts are served by a few routes.
    let mut originals: Vec<&str> = Vec::new();
    let mut sources: Vec<(&Arc<Compiled>, usize, &str)> = Vec::new();
    let mut host_ranks: Vec<u32> = Vec::new();
    let mut order: Vec<HostKey> = Vec::new();
    // Most specific first: hostnames are distinct, so the order is total. Arranged in the last
    // translation's order first, so that the sort (which finds runs) merges the new hostnames
    // into it instead of sorting thousands of hosts again.
    let mut hosts = hosts.groups;
    let last_order = kept.as_ref().map_or(&[][..], |k| k.order());
    let arranged = previous_order(
        hosts.iter().map(|(h, _)| *h),
        last_order.iter().map(ir::SmolStr::as_str),
    );
    let mut by_specificity: Vec<_> = (arranged.into_iter())
        .map(|i| (hostname::specificity_key(hosts[i].0), i))
        .collect();
    by_specificity.sort();
    if let Some(kept) = kept.as_mut() {
        kept.keep_order(by_specificity.iter().map(|(key, _)| key.2));
    }
    let mut out: Vec<VirtualHost> = Vec::with_capacity(hosts.len());
    for (_, i) in by_specificity {
        let (hostname, mut served) = std::mem::take(&mut hosts[i]);
        // HTTPRoutes and GRPCRoutes on one hostname: the kind of the older route wins. (Each
        // look reaches into a route: skipped for a listener of one kind.)
        if http && grpc {
            let oldest_kind = served
                .iter()
                .min_by_key(|(ci, _)| age_rank[owners[*ci]])
                .map(|(ci, _)| routes[owners[*ci]].kind);
            served.retain(|(ci, _)| Some(routes[owners[*ci]].kind) == oldest_kind);
        }
        sources.clear();
        sources.extend((served.iter()).map(|&(ci, original)| (&entries[ci], age_rank[owners[ci]], original)));
        let previous = match kept.as_mut().map(|k| k.lookup(hostname, &sources)) {
            Some(Kept::Same(rules)) => {
                out.push(VirtualHost {
                    hostname: hostname.to_string(),
                    rules,
                });
                continue;
            }
            Some(Kept::Changed(last)) => Some(last),
            Some(Kept::New) | None => None,
        };
        // The route's own hostname first (exact over wildcard, longer first), then matches.
        // Keys are computed once: the entries lie all over memory. The few distinct route
        // hostnames are ranked first, so the sort compares numbers only.
        originals.clear();
        for &(_, original) in &served {
            // Few distinct route hostnames lead to one host (itself, the wildcards above it,
            // none): a short list, where sorting every route's would compare them all.
            if !originals.iter().any(|o| std::ptr::eq(*o, original) || *o == original) {
                originals.push(original);
            }
        }
        originals.sort_unstable_by(|a, b| hostname::by_specificity(a, b));
        host_ranks.clear();
        host_ranks.extend(served.iter().map(|&(_, original)| {
            match originals.as_slice() {
                [_] => 0,
                _ => originals
                    .binary_search_by(|o| hostname::by_specificity(o, original))
                    .unwrap_or_default() as u32,
            }
        }));
        // A rule's place: its route hostname's rank, its precedence (with its route's age),
        // then its source and position there (the matches of one rule keep their order).
        let key = |si: u32, k: u32| -> HostKey {
            let (compiled, age, _) = sources[si as usize];
            (
                host_ranks[si as usize],
                precedence_key(&compiled.rules[k as usize], age),
                si,
                k,
            )
        };
        let total: usize = sources.iter().map(|(compiled, _, _)| compiled.rules.len()).sum();
        // The keys of the rules of sources `range`.
        let keys = |range: std::ops::Range<usize>, order: &mut Vec<HostKey>| {
            for si in range {
                order.extend((0..sources[si].0.rules.len()).map(|k| key(si as u32, k as u32)));
            }
        };
        // A host sorted anew: its rules counted in from their origins, one list.
        let with_rules = |origins: Vec<Origin>| {
            let mut rules = ir::rules::Builder::with_capacity(origins.len());
            rules.extend((origins.iter()).map(|&(si, k)| sources[si as usize].0.rules[k as usize].clone()));
            (origins, rules.finish(), Vec::new())
        };
        let (origins, rules, now) = match previous {
            Some(last) if total >= MERGE_FROM => merged(&sources, last, key),
            // A host of thousands of routes (from scratch): its keys made and sorted on every
            // thread the translation has.
            _ if threads > 1 && sources.len() >= crate::parallel::SORT_FROM => {
                let order = crate::parallel::sorted(sources.len(), threads, keys, <[_]>::sort_unstable);
                with_rules(order.iter().map(|&(_, _, si, k)| (si, k)).collect())
            }
            // Most hosts: in the scratch list kept from host to host.
            _ => {
                order.clear();
                order.reserve(total);
                keys(0..sources.len(), &mut order);
                order.sort_unstable();
                with_rules(order.iter().map(|&(_, _, si, k)| (si, k)).collect())
            }
        };
        if let Some(kept) = kept.as_mut() {
            kept.keep(hostname, &sources, origins, &rules, &now);
        }
        out.push(VirtualHost {
            hostname: hostname.to_string(),
            rules,
        });
    }
    route::http::inherit_less_specific(&mut out);
    out
}

/// Contributions grouped by effective hostname, in the order the hostnames came.
#[derive(Default)]
struct HostGroups<'a> {
    /// Each hostname with its entries: (contribution, the route hostname that produced it).
    groups: Vec<(&'a str, Vec<(usize, &'a str)>)>,
    /// Position of each hostname in `groups`.
    index: foldhash::HashMap<&'a str, usize>,
    /// The group the last entry went to: routes of one hostname often come in runs (the same
    /// host for every route is the common large shape), and comparing the name is cheaper
    /// than hashing it.
    last: usize,
}

impl<'a> HostGroups<'a> {
    fn add(&mut self, hostname: &'a str, entry: (usize, &'a str)) {
        if let Some((h, group)) = self.groups.get_mut(self.last)
            && *h == hostname
        {
            group.push(entry);
            return;
        }
        let at = *self.index.entry(hostname).or_insert_with(|| {
            self.groups.push((hostname, Vec::new()));
            self.groups.len() - 1
        });
        self.groups[at].1.push(entry);
        self.last = at;
    }
}

/// A rule's place in its host ([`virtual_hosts`]): route hostname rank, precedence, source,
/// position in the source. All distinct, so the order is total.
type HostKey = (u32, PrecedenceKey, u32, u32);

/// Below this many rules a host that changed is sorted again rather than merged.
const MERGE_FROM: usize = 64;

/// The origins of a host's rules in order, from the order `last` assembled them in: the rules
/// of sources still served unchanged (the same compiled rules, from the same route hostname)
/// keep their order, and only the rules of new or changed sources are sorted and merged in.
/// Their order holds because only ages and route hostname ranks can differ for an unchanged
/// source, and both are ranks in orders that a change only extends: two unchanged routes
/// compare as they did. `key` gives a rule's place now (by source position in `sources`).
///
/// The host's rules are built alongside: the runs of unchanged rules shared from the host as
/// last assembled (`last.rules`), the others counted in one by one.
fn merged(
    sources: &Sources<'_>,
    last: Last<'_>,
    key: impl Fn(u32, u32) -> HostKey,
) -> (Vec<Origin>, ir::Rules, Vec<u32>) {
    let now = carried_sources(sources, last.served);
    let mut added: Vec<HostKey> = Vec::new();
    let mut found = vec![false; sources.len()];
    for &si in now.iter().filter(|&&si| si != GONE) {
        found[si as usize] = true;
    }
    for (si, &(compiled, _, _)) in sources.iter().enumerate().filter(|&(si, _)| !found[si]) {
        added.extend((0..compiled.rules.len() as u32).map(|k| key(si as u32, k)));
    }
    added.sort_unstable();
    // The origins kept, renumbered, in one walk over the last ones; and where they start runs
    // of consecutive rules of the host as last assembled (a gone source's rules end one):
    // `(position in kept, position last)`.
    let mut kept: Vec<Origin> = Vec::with_capacity(last.origins.len());
    let mut runs: Vec<(u32, u32)> = Vec::new();
    let mut after_gap = true;
    for (at, &(p, k)) in last.origins.iter().enumerate() {
        let si = now[p as usize];
        if si == GONE {
            after_gap = true;
            continue;
        }
        if after_gap {
            runs.push((kept.len() as u32, at as u32));
            after_gap = false;
        }
        kept.push((si, k));
    }
    let mut out = Vec::with_capacity(kept.len() + added.len());
    let mut rules = ir::rules::Builder::default();
    // Kept origins `from..to` and their rules, each run of them shared at once.
    let mut run = 0;
    let mut keep = |from: usize, to: usize, out: &mut Vec<Origin>, rules: &mut ir::rules::Builder| {
        out.extend_from_slice(&kept[from..to]);
        let mut i = from;
        while i < to {
            while runs.get(run + 1).is_some_and(|&(start, _)| start as usize <= i) {
                run += 1;
            }
            let (start, at) = runs[run];
            let end = runs.get(run + 1).map_or(kept.len(), |&(next, _)| next as usize).min(to);
            let first = at as usize + (i - start as usize);
            rules.extend_from(last.rules, first..first + (end - i));
            i = end;
        }
    };
    let mut from = 0;
    for &(_, _, si, k) in &added {
        let at = from + kept[from..].partition_point(|&(ksi, kk)| key(ksi, kk) < key(si, k));
        keep(from, at, &mut out, &mut rules);
        out.push((si, k));
        rules.push(Arc::clone(&sources[si as usize].0.rules[k as usize]));
        from = at;
    }
    keep(from, kept.len(), &mut out, &mut rules);
    debug_assert!(
        out.windows(2).all(|w| key(w[0].0, w[0].1) < key(w[1].0, w[1].1)),
        "a merged host is in order"
    );
    let rules = rules.finish();
    debug_assert!(
        rules.len() == out.len()
            && (rules.iter().zip(&out)).all(|(r, &(si, k))| Arc::ptr_eq(r, &sources[si as usize].0.rules[k as usize])),
        "a merged host's rules are its origins' rules"
    );
    (out, rules, now)
}

/// Where each source of a host as last assembled (`last`) is in `sources`, [`GONE`] for one
/// no longer there: the same compiled rules from the same route hostname, each matched once.
/// Sources mostly keep their order from pass to pass (routes keep their places in the
/// snapshot), so each is looked for where the last match leads: there, or one further (the
/// one there is gone); when its follower is one further, the one there was replaced. The
/// others (added, replacing, moved) are looked up by address once the walk is done, among the
/// last sources it did not find: a few, where a map of every last source (a large host's
/// thousands) was made for one route appended at the end. A source not found is new: its
/// rules are merged in (a last one taken as new costs that merge, never the result).
fn carried_sources(sources: &Sources<'_>, last: &[Served]) -> Vec<u32> {
    let mut now = vec![GONE; last.len()];
    let is = |p: usize, (compiled, _, original): (&Arc<Compiled>, usize, &str), now: &[u32]| {
        last.get(p)
            .is_some_and(|s| now[p] == GONE && Arc::ptr_eq(&s.compiled, compiled) && s.original == original)
    };
    let mut next = 0;
    let mut elsewhere: Vec<usize> = Vec::new();
    for (si, &source) in sources.iter().enumerate() {
        let following = sources.get(si + 1).copied();
        let p = if is(next, source, &now) {
            Some(next)
        } else if is(next + 1, source, &now) {
            Some(next + 1)
        } else {
            // Added, replacing the one there, or moved: looked up after the walk.
            if following.is_some_and(|f| !is(next, f, &now) && is(next + 1, f, &now)) {
                next += 1;
            }
            elsewhere.push(si);
            None
        };
        if let Some(p) = p {
            now[p] = si as u32;
            next = p + 1;
        }
    }
    if !elsewhere.is_empty() {
        let by_address: foldhash::HashMap<*const Compiled, usize> = (now.iter().enumerate())
            .filter(|&(_, &si)| si == GONE)
            .map(|(p, _)| (Arc::as_ptr(&last[p].compiled), p))
            .collect();
        for si in elsewhere {
            let source = sources[si];
            if let Some(&p) = by_address.get(&Arc::as_ptr(source.0))
                && is(p, source, &now)
            {
                now[p] = si as u32;
            }
        }
    }
    now
}

/// The positions of items (given by their identities, in their order) arranged in a previous
/// order: first those `previous` names, in its order (an identity it repeats counts once), then
/// the rest in their order. Sorts that start from the result find the last order's runs and
/// only merge what changed; identities are addresses, which a sort's result never depends on.
/// Without a previous order (a first translation) the items keep theirs, with no lookups.
fn previous_order<K: std::hash::Hash + Eq>(
    identities: impl ExactSizeIterator<Item = K>,
    previous: impl ExactSizeIterator<Item = K>,
) -> Vec<usize> {
    let len = identities.len();
    if previous.len() == 0 {
        return (0..len).collect();
    }
    let position = positions(identities);
    arranged_from(len, previous.filter_map(|identity| position.get(&identity).copied()))
}

/// Items' positions by identity.
type Positions<K> = foldhash::HashMap<K, usize>;

fn positions<K: std::hash::Hash + Eq>(identities: impl Iterator<Item = K>) -> Positions<K> {
    identities.enumerate().map(|(i, k)| (k, i)).collect()
}

/// The positions `previous` gives (each once, in its order, those out of range skipped), then
/// the rest of `0..len` in order.
fn arranged_from(len: usize, previous: impl Iterator<Item = usize>) -> Vec<usize> {
    let mut taken = vec![false; len];
    let mut order = Vec::with_capacity(len);
    for i in previous {
        if i < len && !std::mem::replace(&mut taken[i], true) {
            order.push(i);
        }
    }
    order.extend((0..len).filter(|&i| !taken[i]));
    order
}

/// The last translation's routes: their identities ([`name_address`]) by position, and their
/// positions in name order and oldest first. The next translation starts its sorts from these
/// orders.
#[derive(Default)]
pub(crate) struct RouteOrder {
    addresses: Vec<usize>,
    by_name: Vec<usize>,
    by_age: Vec<usize>,
    /// The last translation's HTTPRoute and GRPCRoute objects by position, held: a route found
    /// at the same position with the address of the one held there is that object, so its
    /// place in both orders is known without reading its keys ([`merged_order`]).
    held: Vec<Option<Arc<dyn std::any::Any + Send + Sync>>>,
}

impl RouteOrder {
    /// Whether the route at `i` is the object held at `i`.
    fn holds(&self, i: usize, route: &RouteModel<'_>) -> bool {
        match (self.held.get(i), route.object) {
            (Some(Some(held)), Some(object)) => Arc::as_ptr(held).cast::<()>() as usize == object.address(),
            _ => false,
        }
    }

    /// Records `routes` (this translation's, without duplicates) and their orders; only the
    /// positions whose object changed take a new hold.
    fn record(&mut self, routes: &[RouteModel<'_>], by_name: &[usize], by_age: &[usize]) {
        self.addresses.clear();
        self.addresses.extend(routes.iter().map(name_address));
        self.by_name.clear();
        self.by_name.extend_from_slice(by_name);
        self.by_age.clear();
        self.by_age.extend_from_slice(by_age);
        self.held.truncate(routes.len());
        for (i, route) in routes.iter().enumerate() {
            if !self.holds(i, route) {
                let object = route.object.map(route::model::RouteObject::shared);
                match self.held.get_mut(i) {
                    Some(held) => *held = object,
                    None => self.held.push(object),
                }
            }
        }
    }
}

/// The positions of `routes` in order of `key`, from `last` (the last translation's positions
/// in that order) when most routes are the objects held at their positions then: those keep
/// their order (their keys are the same), and the others (new, replaced) are sorted and put in
/// by binary search, so the held routes' keys (spread over memory) are read only where a new
/// one goes. `None` when this cannot be done or cannot tell: many routes changed, or two routes
/// have equal keys (duplicates: the caller's sort decides). The same result as sorting all
/// positions by `key`, then position.
fn merged_order<K: Ord>(
    routes: &[RouteModel<'_>],
    order: &RouteOrder,
    last: &[usize],
    key: impl Fn(usize) -> K,
) -> Option<Vec<usize>> {
    let len = routes.len();
    if last.is_empty() {
        return None;
    }
    let held: Vec<bool> = (routes.iter().enumerate())
        .map(|(i, route)| order.holds(i, route))
        .collect();
    let mut new: Vec<(K, usize)> = (0..len).filter(|&i| !held[i]).map(|i| (key(i), i)).collect();
    // Many changes: sorting them all is no slower.
    if new.len() > 64.max(len / 8) {
        return None;
    }
    new.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(&b.1)));
    if new.windows(2).any(|w| w[0].0 == w[1].0) {
        return None;
    }
    // Held routes sit at their last positions, so the last order is theirs (tied keys
    // included: their positions compare as they did). It names each of them once.
    let mut seen = vec![false; len];
    let kept: Vec<usize> = collect_within(
        last.len(),
        (last.iter().copied()).filter(|&j| j < len && held[j] && !std::mem::replace(&mut seen[j], true)),
    );
    if kept.len() + new.len() != len {
        return None;
    }
    let mut out = Vec::with_capacity(len);
    let mut from = 0;
    for (k, i) in new {
        let at = from + kept[from..].partition_point(|&j| key(j).cmp(&k).then(j.cmp(&i)).is_lt());
        // An equal key sorts beside it, before or after by position.
        let equal = |j: Option<&usize>| j.is_some_and(|&j| key(j) == k);
        if equal(kept.get(at)) || equal(at.checked_sub(1).and_then(|b| kept.get(b))) {
            return None;
        }
        out.extend_from_slice(&kept[from..at]);
        out.push(i);
        from = at;
    }
    out.extend_from_slice(&kept[from..]);
    Some(out)
}

/// Where each of the last translation's routes (by its position then) is in this one, if it
/// still is. The operator's snapshot keeps its routes in place between passes (new ones are
/// appended, a removed one's place taken by the last), so most are found at their last position
/// without hashing; only the others are looked up by identity.
struct Carried(Vec<Option<usize>>);

impl Carried {
    /// `last`: the last translation's routes' identities, by position.
    fn new(last: &[usize], routes: &[RouteModel<'_>]) -> Self {
        let in_place = |i: usize, route: &RouteModel<'_>| last.get(i) == Some(&name_address(route));
        let mut now: Vec<Option<usize>> = (0..last.len())
            .map(|j| routes.get(j).filter(|r| in_place(j, r)).map(|_| j))
            .collect();
        if now.iter().any(Option::is_none) {
            let elsewhere: Positions<usize> = (routes.iter().enumerate())
                .filter(|&(i, r)| !in_place(i, r))
                .map(|(i, r)| (name_address(r), i))
                .collect();
            for (j, now) in now.iter_mut().enumerate() {
                if now.is_none() {
                    *now = elsewhere.get(&last[j]).copied();
                }
            }
        }
        Carried(now)
    }

    /// The positions of `len` routes arranged in the order `previous` (positions of the last
    /// translation's routes) gives, as [`previous_order`] arranges them.
    fn arranged(&self, len: usize, previous: &[usize]) -> Vec<usize> {
        arranged_from(len, previous.iter().filter_map(|&j| self.0.get(j).copied().flatten()))
    }
}

/// The items of `items`, at most `bound` of them, in a list sized for `bound`: collected from
/// a filter (whose lower bound is zero), a list of thousands grew by doubling, copying itself
/// over fresh memory each time.
fn collect_within<T>(bound: usize, items: impl Iterator<Item = T>) -> Vec<T> {
    let mut list = Vec::with_capacity(bound);
    list.extend(items);
    list
}

/// Sorts what needs a canonical order.
fn finish_proxy(proxy: &mut Proxy) {
    proxy.gateways.sort();
    proxy.ports.sort_by_key(|p| (p.transport, p.port));
    for port in &mut proxy.ports {
        port.listeners.sort_by(|a, b| {
            hostname::by_listener_specificity(a.hostname.as_deref(), b.hostname.as_deref())
                .then_with(|| a.name.cmp(&b.name))
        });
    }
}

/// The Gateways whose proxies stay as they are: their parametersRef, or their class's, cannot be
/// used (controller mode; standalone proxies are not provisioned per Gateway).
fn held(
    snapshot: &Snapshot,
    config: &Config,
    classes: &BTreeMap<String, gateway::class::Class<'_>>,
    gateways: &[gateway::GatewayModel<'_>],
) -> BTreeSet<String> {
    if config.mode != Mode::Controller {
        return BTreeSet::new();
    }
    let of_invalid_classes = snapshot
        .gateways
        .iter()
        .filter(|g| {
            classes
                .get(&g.spec.gateway_class_name)
                .is_some_and(|(_, parameters)| parameters.is_err())
        })
        .map(|g| g.key())
        .filter(|key| config.gateways.is_empty() || config.gateways.contains(key));
    gateways
        .iter()
        .filter(|g| g.invalid_parameters)
        .map(|g| g.key())
        .chain(of_invalid_classes)
        .collect()
}

/// The UIDs of `gw` and its class, when both have one.
fn owners(gw: &GatewayModel<'_>, classes: &BTreeMap<String, gateway::class::Class<'_>>) -> Option<ir::Owners> {
    let class_name = &gw.gateway.spec.gateway_class_name;
    let (class, _) = classes.get(class_name)?;
    Some(ir::Owners {
        gateway_uid: gw.gateway.metadata.uid.clone()?,
        gateway_class: class_name.clone(),
        gateway_class_uid: class.metadata.uid.clone()?,
    })
}

/// The positions of `routes` oldest first, and each route's rank in that order (precedence
/// between routes). Creation time, namespace and name order them; their position breaks the
/// rare remaining ties (routes of two kinds with one name, created in the same second), so that
/// the order does not depend on the one sorted from. The last translation's routes oldest first
/// (`last`) arrange them first, so that the sort finds them almost in order and merges the few
/// new ones; `carried` says where those routes are now when [`unique_routes`] found it.
fn age_ranks(
    routes: &[RouteModel<'_>],
    last: &RouteOrder,
    carried: Option<&Carried>,
    threads: usize,
) -> (Vec<usize>, Vec<usize>) {
    let by_age = match merged_order(routes, last, &last.by_age, |i| routes[i].age_key()) {
        Some(by_age) => by_age,
        None => sorted_by_age(routes, last, carried, threads),
    };
    let mut age_rank = vec![0; routes.len()];
    for (rank, i) in by_age.iter().enumerate() {
        age_rank[*i] = rank;
    }
    (by_age, age_rank)
}

/// The positions of `routes` oldest first, sorted from the last translation's age order.
fn sorted_by_age(
    routes: &[RouteModel<'_>],
    last: &RouteOrder,
    carried: Option<&Carried>,
    threads: usize,
) -> Vec<usize> {
    // Keys beside the positions: comparisons do not reach into the routes.
    let order = match carried {
        _ if last.by_age.is_empty() => (0..routes.len()).collect(),
        Some(carried) => carried.arranged(routes.len(), &last.by_age),
        None => Carried::new(&last.addresses, routes).arranged(routes.len(), &last.by_age),
    };
    let keyed = crate::parallel::sorted(
        order.len(),
        threads,
        |range, keyed| keyed.extend(order[range].iter().map(|&i| (routes[i].age_key(), i))),
        <[_]>::sort,
    );
    keyed.into_iter().map(|(_, i)| i).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A host large enough to be sorted from its last order (routes added, removed, changed
    /// and reordered between translations that share the unchanged ones) gets what a fresh
    /// translation gives it.
    #[test]
    fn large_hosts_sorted_from_their_last_order_translate_as_fresh_ones() {
        // Every route on one hostname; then a listener of that hostname whose routes name it or
        // a wildcard above it (two route hostnames, ranked, in one host).
        for (listener, wildcard_every) in [("", usize::MAX), ("hostname: app.test, ", 3)] {
            large_host_steps(listener, wildcard_every, 60);
        }
        // Long enough for runs of unchanged rules to be shared with the host's last version.
        large_host_steps("", usize::MAX, 400);
    }

    fn large_host_steps(listener: &str, wildcard_every: usize, count: usize) {
        let head = format!(
            "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\n\
             metadata: {{name: turna}}\nspec: {{controllerName: rakunlabs.com/turna}}\n\
             ---\napiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\n\
             metadata: {{name: edge, namespace: infra}}\nspec:\n  gatewayClassName: turna\n\
             \x20 listeners: [{{name: http, port: 80, {listener}protocol: HTTP}}]\n"
        );
        let route = |i: usize| {
            let path = format!("/p{}", (i * 7919) % 37);
            let hostname = if i.is_multiple_of(wildcard_every) {
                "'*.test'"
            } else {
                "app.test"
            };
            format!(
                "---\napiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\n\
                 metadata: {{name: r{i}, namespace: infra, creationTimestamp: '2026-01-01T00:00:{:02}Z'}}\n\
                 spec:\n  parentRefs: [{{name: edge}}]\n  hostnames: [{hostname}]\n  rules:\n\
                 \x20 - matches: [{{path: {{type: PathPrefix, value: {path}}}}}, {{path: {{type: Exact, value: {path}/x}}}}]\n",
                (i * 13) % 60
            )
        };
        let routes = |range: std::ops::Range<usize>| -> Vec<Arc<crate::api::HttpRoute>> {
            let yaml: String = range.map(route).collect();
            Snapshot::from_yaml(&yaml).expect("routes parse").http_routes
        };
        let mut snapshot = Snapshot::from_yaml(&head).expect("objects parse");
        snapshot.http_routes = routes(0..count);
        let mut steps = vec![snapshot.clone()];
        // One more route; then one gone and one changed (a new object); then their order
        // reversed; then back to the first.
        snapshot.http_routes.extend(routes(count..count + 1));
        steps.push(snapshot.clone());
        snapshot.http_routes.remove(7);
        snapshot.http_routes[20] = routes(20..21).remove(0);
        steps.push(snapshot.clone());
        snapshot.http_routes.reverse();
        steps.push(snapshot.clone());
        steps.push(steps[0].clone());
        let config = Config::default();
        let mut cache = CompileCache::default();
        let mut last: Option<crate::Output> = None;
        for (step, snapshot) in steps.iter().enumerate() {
            let reused = translate_on(snapshot, &config, 1, Some(&mut cache));
            let host = |out: &crate::Output| out.proxies[0].ports[0].listeners[0].virtual_hosts[0].rules.clone();
            let rules = host(&reused);
            assert!(rules.len() >= MERGE_FROM, "step {step}: {} rules", rules.len());
            // A route added to a host of hundreds of rules: the rules around it are the last
            // version's, shared, not counted in again one by one.
            if step == 1 && count >= 200 {
                let before = host(last.as_ref().expect("step 0"));
                let shared = (rules.slices().filter(|s| s.len() >= 64))
                    .filter(|s| before.slices().any(|b| b.as_ptr_range().contains(&s.as_ptr())))
                    .map(<[_]>::len)
                    .sum::<usize>();
                assert!(
                    shared >= rules.len() * 3 / 4,
                    "step {step}: {shared} of {} shared",
                    rules.len()
                );
            }
            assert_eq!(
                serde_json::to_string(&reused).expect("serializes"),
                serde_json::to_string(&translate(snapshot, &config)).expect("serializes"),
                "step {step}"
            );
            last = Some(reused);
        }
    }

    /// A host's last sources are found where they are now, each once and only as the same
    /// compiled rules from the same route hostname: in place, after routes added, removed,
    /// replaced, moved to a removed one's place (the snapshot's `swap_remove`) or elsewhere,
    /// reversed, and with another route hostname.
    #[test]
    fn carried_sources_are_the_same_rules_from_the_same_hostnames() {
        let compiled: Vec<Arc<Compiled>> = (0..12).map(|_| Arc::new(Compiled::default())).collect();
        let last: Vec<Served> = (0..10)
            .map(|i| Served {
                compiled: compiled[i].clone(),
                age: i,
                original: ir::SmolStr::new(if i == 4 { "*.test" } else { "app.test" }),
            })
            .collect();
        let host = |i: usize| if i == 4 { "*.test" } else { "app.test" };
        let sources_of = |order: &[usize]| -> Vec<(&Arc<Compiled>, usize, &str)> {
            order.iter().map(|&i| (&compiled[i], i, host(i))).collect()
        };
        let mut reversed: Vec<usize> = (0..10).collect();
        reversed.reverse();
        // The last sources not found: those gone.
        for (case, order, gone) in [
            ("same", vec![0, 1, 2, 3, 4, 5, 6, 7, 8, 9], vec![]),
            ("added", vec![0, 1, 2, 10, 3, 4, 5, 6, 7, 8, 9, 11], vec![]),
            ("removed", vec![0, 1, 3, 4, 5, 6, 8, 9], vec![2, 7]),
            ("replaced", vec![10, 1, 2, 3, 11, 5, 6, 7, 8, 9], vec![0, 4]),
            ("swap removed", vec![0, 1, 9, 3, 4, 5, 6, 7, 8], vec![2]),
            ("reversed", reversed, vec![]),
            ("moved", vec![0, 7, 1, 2, 3, 4, 5, 6, 8, 9], vec![]),
            ("rotated", vec![5, 6, 7, 8, 9, 0, 1, 2, 3, 4], vec![]),
            ("appended", vec![0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10], vec![]),
            ("last replaced", vec![0, 1, 2, 3, 4, 5, 6, 7, 8, 10], vec![9]),
            (
                "one replaced, one appended",
                vec![0, 1, 2, 10, 4, 5, 6, 7, 8, 9, 11],
                vec![3],
            ),
        ] {
            let sources = sources_of(&order);
            let now = carried_sources(&sources, &last);
            let mut seen = vec![false; sources.len()];
            for (p, &si) in now.iter().enumerate() {
                assert_eq!(si == GONE, gone.contains(&p), "{case}: {p}");
                if si == GONE {
                    continue;
                }
                let (c, _, original) = sources[si as usize];
                assert!(
                    Arc::ptr_eq(c, &last[p].compiled) && original == last[p].original,
                    "{case}: {p}"
                );
                assert!(!std::mem::replace(&mut seen[si as usize], true), "{case}: {si} twice");
            }
        }
        // The same rules from another route hostname are another source.
        let mut sources = sources_of(&[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
        sources[4].2 = "app.test";
        assert_eq!(carried_sources(&sources, &last)[4], GONE);
    }

    /// Snapshots large enough for the name, age and rule sorts to run on several threads
    /// ([`crate::parallel::sorted`]) translate as on one, with a cache too (routes attached on
    /// several threads, then found there): routes listed in a scrambled order,
    /// ages tied and missing, most routes on one hostname (a host of thousands of rules) and
    /// the others on a wildcard above it.
    #[test]
    fn large_snapshots_translate_alike_on_any_number_of_threads() {
        let count = 4_200;
        let mut yaml = String::from(
            "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\n\
             metadata: {name: turna}\nspec: {controllerName: rakunlabs.com/turna}\n\
             ---\napiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\n\
             metadata: {name: edge, namespace: infra}\nspec:\n  gatewayClassName: turna\n\
             \x20 listeners: [{name: http, port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: All}}}]\n",
        );
        for i in 0..count {
            let j = (i * 7919) % count;
            let created = if j % 11 == 0 {
                String::new()
            } else {
                format!(
                    ", creationTimestamp: '2026-01-01T00:{:02}:{:02}Z'",
                    (j / 60) % 60,
                    j % 60
                )
            };
            let hostname = if j % 5 == 0 { "'*.test'" } else { "app.test" };
            let path = format!("/p{}", j % 37);
            yaml.push_str(&format!(
                "---\napiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\n\
                 metadata: {{name: r{j}, namespace: n{}{created}}}\n\
                 spec:\n  parentRefs: [{{name: edge, namespace: infra}}]\n  hostnames: [{hostname}]\n  rules:\n\
                 \x20 - matches: [{{path: {{type: PathPrefix, value: {path}}}}}, {{path: {{type: Exact, value: {path}/x}}}}]\n",
                j % 5
            ));
        }
        let snapshot = Snapshot::from_yaml(&yaml).expect("objects parse");
        let config = Config::default();
        let one = translate_on(&snapshot, &config, 1, None);
        // Four in five routes serve app.test, two rules each (and the wildcard's after them).
        assert!(count * 4 / 5 >= crate::parallel::SORT_FROM);
        let host = &one.proxies[0].ports[0].listeners[0].virtual_hosts[0];
        assert_eq!((host.hostname.as_str(), host.rules.len()), ("app.test", 2 * count));
        let one = serde_json::to_string(&one).expect("serializes");
        for threads in 2..4 {
            let many = serde_json::to_string(&translate_on(&snapshot, &config, threads, None)).expect("serializes");
            assert!(one == many, "{threads} threads change the output");
            // As the operator starts: from scratch into an empty cache, then reusing all of it.
            let mut cache = CompileCache::default();
            for pass in ["first", "second"] {
                let reused = translate_on(&snapshot, &config, threads, Some(&mut cache));
                let reused = serde_json::to_string(&reused).expect("serializes");
                assert!(one == reused, "{threads} threads change the {pass} output with a cache");
            }
        }
    }

    /// Orders merged from the objects the last translation held are the sorts' own, and are
    /// merged (not sorted again) when a few routes were added or replaced: routes added,
    /// replaced, removed, listed twice, named like another, and tied in age.
    #[test]
    fn merged_orders_are_the_sorted_ones() {
        let mut yaml = String::new();
        for i in 0..40 {
            // Three routes share each creation time: ties broken by namespace and name.
            yaml.push_str(&format!(
                "---\napiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\n\
                 metadata: {{name: r{}, namespace: n{}, creationTimestamp: '2026-01-01T00:00:{:02}Z'}}\nspec: {{}}\n",
                (i * 7) % 40,
                i % 3,
                i / 3
            ));
        }
        let first = Snapshot::from_yaml(&yaml).expect("objects parse");
        let config = Config::default();
        let orders = |snapshot: &Snapshot, last: &RouteOrder| -> (Vec<usize>, Vec<usize>, bool, bool) {
            // Duplicates are seen (and dropped) in the routes as the snapshot lists them.
            let listed = collect_routes(snapshot, &config, 1);
            let merged_name = merged_order(&listed, last, &last.by_name, |i| name_key(&listed[i])).is_some();
            let (routes, by_name, _) = unique_routes(listed, last, 1);
            let merged_age = merged_order(&routes, last, &last.by_age, |i| routes[i].age_key()).is_some();
            let (by_age, _) = age_ranks(&routes, last, None, 1);
            (by_name, by_age, merged_name, merged_age)
        };
        let mut last = RouteOrder::default();
        {
            let (routes, by_name, _) = unique_routes(collect_routes(&first, &config, 1), &last, 1);
            let (by_age, _) = age_ranks(&routes, &last, None, 1);
            last.record(&routes, &by_name, &by_age);
        }
        let extra = |name: &str| {
            Snapshot::from_yaml(&format!(
                "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\n\
                 metadata: {{name: {name}, namespace: n1, creationTimestamp: '2026-01-01T00:00:05Z'}}\nspec: {{}}\n"
            ))
            .expect("object parses")
            .http_routes
            .remove(0)
        };
        let mut added = first.clone();
        added.http_routes.push(extra("r55"));
        let mut replaced = first.clone();
        replaced.http_routes[5] = Arc::new((*replaced.http_routes[5]).clone());
        let mut removed = first.clone();
        removed.http_routes.swap_remove(3);
        let mut twice = first.clone();
        twice.http_routes.push(twice.http_routes[9].clone());
        let mut named_alike = first.clone();
        let name = named_alike.http_routes[2].metadata.name.clone().expect("named");
        let mut alike = (*extra(&name)).clone();
        alike
            .metadata
            .namespace
            .clone_from(&named_alike.http_routes[2].metadata.namespace);
        named_alike.http_routes.push(Arc::new(alike));
        // Whether the name and age orders merge: duplicates leave the name order to the sort,
        // and are gone from the routes the age order is made of.
        for (case, snapshot, merges) in [
            ("same", &first, (true, true)),
            ("added", &added, (true, true)),
            ("replaced", &replaced, (true, true)),
            ("removed", &removed, (true, true)),
            ("listed twice", &twice, (false, true)),
            ("named alike", &named_alike, (false, true)),
        ] {
            let (by_name, by_age, merged_name, merged_age) = orders(snapshot, &last);
            let (fresh_name, fresh_age, _, _) = orders(snapshot, &RouteOrder::default());
            assert_eq!(by_name, fresh_name, "{case}: name order");
            assert_eq!(by_age, fresh_age, "{case}: age order");
            assert_eq!((merged_name, merged_age), merges, "{case}: merged");
        }
    }

    /// The name order and the duplicates dropped are the same whatever arrangement the last
    /// translation's order suggests: none, the right one, reversed, or addresses of nothing.
    #[test]
    fn unique_routes_ignore_how_the_last_order_arranges_them() {
        let mut yaml = String::new();
        for (namespace, name) in [("b", "x"), ("a", "y"), ("a", "x"), ("b", "x"), ("c", "a"), ("a", "y")] {
            yaml.push_str(&format!(
                "---\napiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\n\
                 metadata: {{name: {name}, namespace: {namespace}}}\nspec: {{}}\n"
            ));
        }
        let mut snapshot = Snapshot::from_yaml(&yaml).expect("objects parse");
        // Hand-written snapshots may repeat an object: the first copy is kept.
        let copies = snapshot.http_routes.clone();
        snapshot.http_routes.extend(copies);
        let config = Config::default();
        let names =
            |(routes, by_name, _): (Vec<RouteModel<'_>>, Vec<usize>, Option<Carried>)| -> Vec<(String, String, usize)> {
                by_name
                    .iter()
                    .map(|&i| (routes[i].namespace.to_string(), routes[i].name.to_string(), i))
                    .collect()
            };
        let fresh = names(unique_routes(
            collect_routes(&snapshot, &config, 1),
            &RouteOrder::default(),
            1,
        ));
        let expected: Vec<(String, String)> = [("a", "x"), ("a", "y"), ("b", "x"), ("c", "a")]
            .iter()
            .map(|(n, m)| (n.to_string(), m.to_string()))
            .collect();
        assert_eq!(
            fresh.iter().map(|(n, m, _)| (n.clone(), m.clone())).collect::<Vec<_>>(),
            expected
        );
        let routes = collect_routes(&snapshot, &config, 1);
        let (kept, by_name, _) = unique_routes(collect_routes(&snapshot, &config, 1), &RouteOrder::default(), 1);
        let addresses: Vec<usize> = routes.iter().map(name_address).collect();
        let kept_addresses: Vec<usize> = kept.iter().map(name_address).collect();
        let reversed: Vec<usize> = (0..routes.len()).rev().collect();
        let doubled: Vec<usize> = (0..routes.len()).chain(0..routes.len()).collect();
        let mut moved = addresses.clone();
        moved.rotate_left(2);
        for (addresses, by_name) in [
            (kept_addresses, by_name),
            (addresses.clone(), reversed.clone()),
            (addresses.clone(), doubled),
            (moved, reversed),
            (addresses, vec![7, 8, 9]),
            (vec![1, 2, 3], vec![2, 1, 0]),
        ] {
            let last = RouteOrder {
                addresses,
                by_name,
                by_age: Vec::new(),
                held: Vec::new(),
            };
            let arranged = names(unique_routes(collect_routes(&snapshot, &config, 1), &last, 1));
            assert_eq!(arranged, fresh);
        }
    }

    /// The age order is the same whatever arrangement the last translation's order suggests,
    /// ties (no creation time; an HTTPRoute and a GRPCRoute of one name) included.
    #[test]
    fn age_ranks_ignore_how_the_last_order_arranges_them() {
        let mut yaml = String::new();
        for (kind, namespace, name, created) in [
            ("HTTPRoute", "b", "x", Some("2026-01-02T00:00:00Z")),
            ("GRPCRoute", "b", "x", Some("2026-01-02T00:00:00Z")),
            ("HTTPRoute", "a", "y", None),
            ("HTTPRoute", "a", "x", Some("2026-01-01T00:00:00Z")),
            ("GRPCRoute", "a", "x", None),
            ("HTTPRoute", "c", "a", Some("2026-01-02T00:00:00Z")),
        ] {
            let created = created.map_or(String::new(), |c| format!(", creationTimestamp: \"{c}\""));
            yaml.push_str(&format!(
                "---\napiVersion: gateway.networking.k8s.io/v1\nkind: {kind}\n\
                 metadata: {{name: {name}, namespace: {namespace}{created}}}\nspec: {{}}\n"
            ));
        }
        let snapshot = Snapshot::from_yaml(&yaml).expect("objects parse");
        let config = Config::default();
        let routes = collect_routes(&snapshot, &config, 1);
        assert_eq!(routes.len(), 6);
        let fresh = age_ranks(&routes, &RouteOrder::default(), None, 1);
        let oldest: Vec<(RouteKind, &str, &str)> = (fresh.0.iter())
            .map(|&i| (routes[i].kind, routes[i].namespace, routes[i].name))
            .collect();
        use RouteKind::{Grpc, Http};
        // No creation time first; then by time, namespace and name; the tie in collection order.
        assert_eq!(
            oldest,
            [
                (Grpc, "a", "x"),
                (Http, "a", "y"),
                (Http, "a", "x"),
                (Http, "b", "x"),
                (Grpc, "b", "x"),
                (Http, "c", "a")
            ]
        );
        let addresses: Vec<usize> = routes.iter().map(name_address).collect();
        let right = fresh.0.clone();
        let reversed: Vec<usize> = right.iter().rev().copied().collect();
        let doubled: Vec<usize> = right.iter().chain(&reversed).copied().collect();
        let mut moved = addresses.clone();
        moved.rotate_left(1);
        for (addresses, by_age) in [
            (addresses.clone(), right),
            (addresses.clone(), reversed.clone()),
            (addresses.clone(), doubled),
            (moved, reversed),
            (addresses, vec![7, 8, 9]),
            (vec![1, 2, 3], vec![0, 1, 2]),
        ] {
            let last = RouteOrder {
                by_name: Vec::new(),
                by_age,
                addresses,
                held: Vec::new(),
            };
            assert_eq!(age_ranks(&routes, &last, None, 1), fresh);
            let carried = Carried::new(&last.addresses, &routes);
            assert_eq!(age_ranks(&routes, &last, Some(&carried), 1), fresh);
        }
    }

    /// The last routes are found where they stay, where they moved, and not when they went.
    #[test]
    fn carried_routes_are_found_in_place_or_by_identity() {
        let mut yaml = String::new();
        for name in ["a", "b", "c", "d"] {
            yaml.push_str(&format!(
                "---\napiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\n\
                 metadata: {{name: {name}, namespace: n}}\nspec: {{}}\n"
            ));
        }
        let snapshot = Snapshot::from_yaml(&yaml).expect("objects parse");
        let config = Config::default();
        let routes = collect_routes(&snapshot, &config, 1);
        let (a, b, c, d) = (
            name_address(&routes[0]),
            name_address(&routes[1]),
            name_address(&routes[2]),
            name_address(&routes[3]),
        );
        // Last time: a, b, x (gone), d, c; now a, b, c, d.
        let carried = Carried::new(&[a, b, 1, d, c], &routes);
        assert_eq!(carried.0, [Some(0), Some(1), None, Some(3), Some(2)]);
        assert_eq!(carried.arranged(4, &[4, 2, 3, 0]), [2, 3, 0, 1]);
        assert_eq!(Carried::new(&[], &routes).arranged(4, &[]), [0, 1, 2, 3]);
    }

    /// Named items come first in the previous order, once each; unknown names are skipped; the
    /// rest keep their order.
    #[test]
    fn previous_order_puts_the_named_first_then_the_rest() {
        let items = ["a", "b", "c", "d", "e"];
        let order = |previous: &[&'static str]| previous_order(items.iter().copied(), previous.iter().copied());
        assert_eq!(order(&[]), [0, 1, 2, 3, 4]);
        assert_eq!(order(&["d", "x", "b", "d"]), [3, 1, 0, 2, 4]);
        assert_eq!(order(&["e", "d", "c", "b", "a"]), [4, 3, 2, 1, 0]);
        assert_eq!(
            previous_order(std::iter::empty::<&str>(), ["a"].into_iter()),
            Vec::<usize>::new()
        );
    }
}
