//! Property tests: random but plausible snapshots, built from small name pools so references
//! sometimes resolve and sometimes do not, must translate without panicking, independently of
//! object order, and keep the invariants product.md promises (statuses for everything we own,
//! endpoints only from the snapshot, hostnames within listeners, Secrets only with grants, a
//! valid route served whatever invalid objects surround it).

use std::collections::{BTreeMap, BTreeSet};

use common::{ROUTE_KINDS, Scenario, add_good, good_route_problem, name_of, namespace_of, scenario};
use proptest::prelude::*;
use serde_json::Value;
use translator::ir::delta::{Difference, difference};
use translator::{Output, Snapshot, translate};

mod common;

/// A tiny deterministic generator for shuffling (the order must not matter, so any will do).
struct SplitMix(u64);

impl SplitMix {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) % n as u64) as usize
    }

    fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i + 1);
            v.swap(i, j);
        }
    }
}

/// The snapshot with every list in another order.
fn shuffled(snapshot: &Snapshot, seed: u64) -> Snapshot {
    let mut s = snapshot.clone();
    let mut rng = SplitMix(seed);
    rng.shuffle(&mut s.gateway_classes);
    rng.shuffle(&mut s.gateways);
    rng.shuffle(&mut s.listener_sets);
    rng.shuffle(&mut s.http_routes);
    rng.shuffle(&mut s.grpc_routes);
    rng.shuffle(&mut s.tls_routes);
    rng.shuffle(&mut s.tcp_routes);
    rng.shuffle(&mut s.udp_routes);
    rng.shuffle(&mut s.unreadable_routes);
    rng.shuffle(&mut s.reference_grants);
    rng.shuffle(&mut s.backend_tls_policies);
    rng.shuffle(&mut s.turna_proxies);
    rng.shuffle(&mut s.security_policies);
    rng.shuffle(&mut s.services);
    rng.shuffle(&mut s.endpoint_slices);
    rng.shuffle(&mut s.namespaces);
    rng.shuffle(&mut s.secrets);
    rng.shuffle(&mut s.config_maps);
    s
}

/// The snapshot's objects split in two layers at random (side maps in both), as a cluster and
/// a static layer holding them between them would.
fn split(snapshot: &Snapshot, seed: u64) -> (Snapshot, Snapshot) {
    let mut rng = SplitMix(seed ^ 0x5EED);
    let mut cluster = snapshot.clone();
    let mut layer = Snapshot {
        listener_filters: snapshot.listener_filters.clone(),
        session_persistence: snapshot.session_persistence.clone(),
        address_routability: snapshot.address_routability.clone(),
        ..Snapshot::default()
    };
    macro_rules! split {
        ($($field:ident),*) => {$(
            let all = std::mem::take(&mut cluster.$field);
            for object in all {
                if rng.below(2) == 0 {
                    cluster.$field.push(object);
                } else {
                    layer.$field.push(object);
                }
            }
        )*};
    }
    split!(
        gateway_classes,
        gateways,
        listener_sets,
        http_routes,
        grpc_routes,
        tls_routes,
        tcp_routes,
        udp_routes,
        unreadable_routes,
        reference_grants,
        backend_tls_policies,
        turna_proxies,
        security_policies,
        traffic_policies,
        backend_policies,
        services,
        endpoint_slices,
        namespaces,
        secrets,
        config_maps
    );
    (cluster, layer)
}

/// Whether `pattern` (a listener or route hostname) covers every host `host` names: equal, or a
/// wildcard whose suffix `host` has (a wildcard `host` included).
fn covers(pattern: &str, host: &str) -> bool {
    if pattern.eq_ignore_ascii_case(host) || pattern == "*" {
        return true;
    }
    match pattern.strip_prefix('*') {
        Some(suffix) => host.len() > suffix.len() && host.to_ascii_lowercase().ends_with(suffix),
        None => false,
    }
}

fn run(scenario: &Scenario) -> (Snapshot, Output) {
    let snapshot = scenario.snapshot();
    let output = translate(&snapshot, &scenario.config);
    (snapshot, output)
}

/// `cases` scenarios per property; the whole file stays within a few seconds in debug builds.
fn cases(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        // Integration tests have no lib.rs to store regressions beside; failures print the case.
        failure_persistence: None,
        max_shrink_iters: 2_000,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(cases(256))]

    /// Routes compiled on several threads translate as on one, byte for byte.
    #[test]
    fn threads_do_not_matter(scenario in scenario(), threads in 2usize..5) {
        let (snapshot, output) = run(&scenario);
        let one = translator::translate_on(&snapshot, &scenario.config, 1, None);
        let many = translator::translate_on(&snapshot, &scenario.config, threads, None);
        let one = serde_json::to_string(&one).expect("output serializes");
        let many = serde_json::to_string(&many).expect("output serializes");
        prop_assert!(one == many, "threads change the output:\n{}", first_difference(&one, &many));
        prop_assert!(one == serde_json::to_string(&output).expect("output serializes"));
    }

    /// Object order never shows in the output (serialized, byte for byte).
    #[test]
    fn object_order_does_not_matter(scenario in scenario()) {
        let (snapshot, output) = run(&scenario);
        let again = translate(&shuffled(&snapshot, scenario.seed), &scenario.config);
        let a = serde_json::to_string(&output).expect("output serializes");
        let b = serde_json::to_string(&again).expect("output serializes");
        prop_assert!(a == b, "output depends on object order:\n{}", first_difference(&a, &b));
    }

    /// Every Gateway of our class gets a status, and every route naming one of them as a
    /// parent gets a parent status for that parentRef.
    #[test]
    fn owned_objects_get_statuses(scenario in scenario()) {
        let (_, output) = run(&scenario);
        let ours = scenario.our_gateways();
        let reported: BTreeSet<String> =
            output.statuses.gateways.iter().map(|g| format!("{}/{}", g.namespace, g.name)).collect();
        for gw in &ours {
            prop_assert!(reported.contains(gw), "Gateway {gw} has no status");
        }
        for set in scenario.of_kind("ListenerSet") {
            let parent = &set["spec"]["parentRef"];
            let parent_ns = parent["namespace"].as_str().map_or_else(|| namespace_of(set), str::to_string);
            let gateway = parent.get("kind").is_none_or(|k| k == "Gateway");
            if gateway && ours.contains(&format!("{parent_ns}/{}", parent["name"].as_str().unwrap_or_default())) {
                let (ns, name) = (namespace_of(set), name_of(set));
                let found = output.statuses.listener_sets.iter().any(|s| s.namespace == ns && s.name == name);
                prop_assert!(found, "ListenerSet {ns}/{name} of our Gateway has no status");
            }
        }
        for kind in ROUTE_KINDS {
            for route in scenario.of_kind(kind) {
                let (ns, name) = (namespace_of(route), name_of(route));
                let status = output.statuses.routes.iter().find(|r| r.kind == *kind && r.namespace == ns && r.name == name);
                for p in route["spec"]["parentRefs"].as_array().into_iter().flatten() {
                    let p_ns = p["namespace"].as_str().unwrap_or(&ns);
                    let is_gateway = p.get("kind").is_none_or(|k| k == "Gateway");
                    if !is_gateway || !ours.contains(&format!("{p_ns}/{}", p["name"].as_str().unwrap_or_default())) {
                        continue;
                    }
                    let found = status.is_some_and(|s| s.parents.iter().any(|sp| {
                        sp.parent_ref.kind == "Gateway"
                            && sp.parent_ref.namespace == p_ns
                            && sp.parent_ref.name.as_str() == p["name"]
                            && sp.parent_ref.section_name.as_deref() == p["sectionName"].as_str()
                            && sp.parent_ref.port.map(i64::from) == p["port"].as_i64()
                            && !sp.conditions.is_empty()
                    }));
                    prop_assert!(found, "{kind} {ns}/{name} has no parent status for {p}");
                }
            }
        }
    }

    /// A valid Gateway and route of their own are accepted and served beside whatever else the
    /// snapshot holds (invalid listeners, regexes, filters and enum values, conflicts, missing
    /// references, foreign classes), and still every object of ours gets a status.
    #[test]
    fn a_valid_route_is_served_beside_anything(scenario in scenario()) {
        let mut snapshot = scenario.snapshot();
        add_good(&mut snapshot);
        let output = translate(&snapshot, &scenario.config);
        if let Some(problem) = good_route_problem(&output, &scenario.config) {
            prop_assert!(false, "{problem}");
        }
        let without = translate(&scenario.snapshot(), &scenario.config);
        prop_assert!(
            statuses_of_objects(&output) == statuses_of_objects(&without),
            "adding the good objects changed the statuses of the others"
        );
    }

    /// Endpoints come from ready EndpointSlice endpoints of the backend's Service, or are its
    /// cluster IP / external name when the configuration says so.
    #[test]
    fn endpoints_come_from_the_snapshot(scenario in scenario()) {
        let (_, output) = run(&scenario);
        let backend = &scenario.config.backend;
        for proxy in &output.proxies {
            for b in proxy.backends.values() {
                let (ns, name) = b.service.split_once('/').expect("service is namespace/name");
                let service = scenario.of_kind("Service").find(|s| namespace_of(s) == ns && name_of(s) == name);
                for e in &b.endpoints {
                    let from_slice = scenario.of_kind("EndpointSlice").any(|s| {
                        namespace_of(s) == ns
                            && s["metadata"]["labels"]["kubernetes.io/service-name"] == name
                            && s["ports"].as_array().into_iter().flatten().any(|p| p["port"] == e.port)
                            && s["endpoints"].as_array().into_iter().flatten().any(|ep| {
                                ep["conditions"]["ready"] != false
                                    && ep["addresses"].as_array().into_iter().flatten().any(|a| a == e.address.as_str())
                            })
                    });
                    let spec = service.map(|s| &s["spec"]);
                    let cluster_ip = backend.use_service_ip
                        && spec.is_some_and(|s| s["clusterIP"] == e.address.as_str() && e.port == b.port);
                    let external = backend.allow_external_name
                        && spec.is_some_and(|s| s["type"] == "ExternalName" && s["externalName"] == e.address.as_str());
                    prop_assert!(from_slice || cluster_ip || external,
                        "endpoint {}:{} of backend {} is not in the snapshot", e.address, e.port, b.id);
                }
            }
        }
    }

    /// A security policy never leaves what it names open: every rule of a route it names (or of
    /// the rule it names), and every listener of a Gateway it names, carries a policy, valid or
    /// not (an unusable one answers 500), and every policy a listener or rule names is in the
    /// proxy with the credentials it reads in the bundle. The oldest policy naming a target is
    /// the one applied there.
    #[test]
    fn security_policies_leave_nothing_they_name_open(scenario in scenario()) {
        let (_, output) = run(&scenario);
        let policies: Vec<&serde_json::Value> = scenario.of_kind("TurnaSecurityPolicy").collect();
        let names = |kind: &str, ns: &str, name: &str, section: Option<&str>| -> bool {
            policies.iter().any(|p| {
                namespace_of(p) == ns
                    && p["spec"]["targetRefs"].as_array().into_iter().flatten().any(|t| {
                        t["kind"] == kind
                            && t["name"] == name
                            && (t["sectionName"].is_null() || t["sectionName"].as_str() == section)
                    })
            })
        };
        for proxy in &output.proxies {
            let bundle = &output.bundles[&proxy.id];
            for (id, security) in &proxy.security {
                // Keyed by `namespace/name`, logged with the prefix of names generated from the cluster.
                prop_assert_eq!(Some(id.as_str()), security.policy.strip_prefix(translator::layer::GENERATED_PREFIX));
                for c in security.basic_auth.iter().map(|b| &b.users)
                    .chain(security.api_key.iter().flat_map(|a| &a.credentials))
                {
                    prop_assert!(bundle.credentials.contains(c), "{id}: {c:?} is not in the bundle");
                }
            }
            for l in proxy.ports.iter().flat_map(|p| &p.listeners) {
                if let Some(id) = &l.security {
                    prop_assert!(proxy.security.contains_key(id), "listener {} names missing {id}", l.name);
                }
                let mut parts = l.name.splitn(3, '/');
                let (ns, owner, listener) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""), parts.next().unwrap_or(""));
                let http = matches!(l.protocol, translator::ir::Protocol::Http | translator::ir::Protocol::Https);
                if http && names("Gateway", ns, owner, Some(listener)) {
                    prop_assert!(l.security.is_some(), "listener {} of a named Gateway is open", l.name);
                }
                for rule in l.virtual_hosts.iter().flat_map(|v| &v.rules) {
                    if let Some(id) = &rule.security {
                        prop_assert!(proxy.security.contains_key(id), "a rule names missing {id}");
                    }
                    let r = &rule.route;
                    if names(&r.kind, &r.namespace, &r.name, r.rule_name.as_deref()) {
                        prop_assert!(rule.security.is_some(), "rule {} of {}/{} is open", r.rule, r.namespace, r.name);
                    }
                }
            }
        }
    }

    /// Virtual hosts and TLS route hostnames stay within their listener's hostname, and every
    /// rule of a virtual host comes from a route whose hostnames reach it.
    #[test]
    fn routes_stay_within_listener_hostnames(scenario in scenario()) {
        let (_, output) = run(&scenario);
        let route_hosts: BTreeMap<(String, String, String), Vec<String>> = ROUTE_KINDS
            .iter()
            .flat_map(|k| scenario.of_kind(k))
            .map(|r| {
                let hosts = r["spec"]["hostnames"].as_array().into_iter().flatten()
                    .filter_map(|h| h.as_str().map(str::to_string)).collect();
                ((r["kind"].as_str().unwrap_or_default().to_string(), namespace_of(r), name_of(r)), hosts)
            })
            .collect();
        for listener in output.proxies.iter().flat_map(|p| &p.ports).flat_map(|p| &p.listeners) {
            let lh = listener.hostname.as_deref().unwrap_or("*");
            for vh in &listener.virtual_hosts {
                prop_assert!(covers(lh, &vh.hostname), "virtual host {} on listener {} ({lh})", vh.hostname, listener.name);
                for rule in &vh.rules {
                    let key = (rule.route.kind.to_string(), rule.route.namespace.to_string(), rule.route.name.to_string());
                    let hosts = route_hosts.get(&key).cloned().unwrap_or_default();
                    // A route without hostnames serves every host of the listener (its rules
                    // may also back more specific virtual hosts); otherwise one of its
                    // hostnames must cover the virtual host, never the other way round.
                    let reaches = hosts.is_empty() || hosts.iter().any(|h| covers(h, &vh.hostname));
                    prop_assert!(reaches, "{key:?} with hostnames {hosts:?} serves {} on {}", vh.hostname, listener.name);
                }
            }
            for s in &listener.stream_routes {
                for h in &s.hostnames {
                    prop_assert!(covers(lh, h), "TLS route hostname {h} on listener {} ({lh})", listener.name);
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(cases(256))]

    /// A static layer holding some of the objects beside a cluster holding the rest: every
    /// static object is served or refused (never both, never lost), the cluster's objects all
    /// stay, the merge does not depend on the static layer's order, and where nothing is
    /// refused the translation is the one of all objects in one place.
    #[test]
    fn a_static_layer_serves_as_if_its_objects_were_in_the_cluster(scenario in scenario()) {
        let snapshot = scenario.snapshot();
        let (cluster, layer) = split(&snapshot, scenario.seed);
        let layered = translator::layer::merge(&cluster, &layer, "static");
        let count = |s: &Snapshot| s.gateways.len() + s.http_routes.len() + s.grpc_routes.len()
            + s.tls_routes.len() + s.tcp_routes.len() + s.udp_routes.len() + s.services.len()
            + s.endpoint_slices.len() + s.reference_grants.len() + s.security_policies.len()
            + s.secrets.len() + s.config_maps.len() + s.listener_sets.len();
        let served: usize = count(&layered.snapshot) - count(&cluster);
        let offered = count(&layer);
        let refused = layered.refused.iter().filter(|r| !matches!(
            r.kind.as_str(),
            "GatewayClass" | "TLSRoute" | "TCPRoute" | "UDPRoute" | "BackendTLSPolicy" | "TurnaProxy"
                | "TurnaTrafficPolicy" | "TurnaBackendPolicy" | "Namespace"
        )).count();
        prop_assert_eq!(served + refused, offered, "static objects lost or doubled");
        let again = translator::layer::merge(&cluster, &shuffled(&layer, scenario.seed), "static");
        let a = serde_json::to_string(&translate(&layered.snapshot, &scenario.config)).expect("output serializes");
        let b = serde_json::to_string(&translate(&again.snapshot, &scenario.config)).expect("output serializes");
        prop_assert!(a == b, "the merge depends on the static layer's order:\n{}", first_difference(&a, &b));
        if layered.refused.is_empty() && snapshot.facts.installed_kinds.is_none() {
            // The same objects in one place, the static ones marked so: their IR names carry
            // no generated prefix either.
            let mut marked = snapshot.clone();
            marked.facts.static_layer = layered.snapshot.facts.static_layer.clone();
            let whole = serde_json::to_string(&translate(&marked, &scenario.config)).expect("output serializes");
            prop_assert!(a == whole, "a split in two layers translates differently:\n{}", first_difference(&whole, &a));
        }
        // Copies of cluster objects in the static layer are refused and change nothing.
        let mut copies = layer.clone();
        copies.http_routes.extend(cluster.http_routes.first().cloned());
        copies.services.extend(cluster.services.first().cloned());
        copies.secrets.extend(cluster.secrets.first().cloned());
        copies.gateways.extend(cluster.gateways.first().cloned());
        let added = count(&copies) - count(&layer);
        let with_copies = translator::layer::merge(&cluster, &copies, "static");
        prop_assert_eq!(with_copies.refused.len(), layered.refused.len() + added);
        let c = serde_json::to_string(&translate(&with_copies.snapshot, &scenario.config)).expect("output serializes");
        prop_assert!(a == c, "a refused copy changed the translation:\n{}", first_difference(&a, &c));
    }
}

proptest! {
    #![proptest_config(cases(256))]

    /// The delta between a proxy's IR before and after objects were removed (routes, Services,
    /// endpoints, grants, Secrets), and back, turns one into exactly the other, or says it cannot.
    #[test]
    fn deltas_turn_one_version_into_the_next(scenario in scenario(), dropped in prop::collection::vec(any::<prop::sample::Index>(), 1..3)) {
        // Objects a Gateway's listeners do not depend on, so that most pairs differ in routes;
        // the good route and its endpoints are among them, so that some pairs serve routes.
        let mut fewer = scenario.clone();
        for index in &dropped {
            let removable: Vec<usize> = (0..fewer.objects.len())
                .filter(|i| !matches!(fewer.objects[*i]["kind"].as_str(), Some("Gateway" | "GatewayClass" | "ListenerSet")))
                .collect();
            if !removable.is_empty() {
                fewer.objects.remove(removable[index.index(removable.len())]);
            }
        }
        let mut all = scenario.snapshot();
        add_good(&mut all);
        let mut some = fewer.snapshot();
        add_good(&mut some);
        let good = |n: &str, ns: Option<&str>| n == "good" && ns == Some("good");
        match dropped[0].index(3) {
            0 => some.http_routes.retain(|r| !good(r.metadata.name.as_deref().unwrap_or_default(), r.metadata.namespace.as_deref())),
            1 => some.endpoint_slices.clear(),
            _ => {}
        }
        let before = translate(&all, &scenario.config);
        let after = translate(&some, &scenario.config);
        for (from, to) in [(&before, &after), (&after, &before)] {
            for new in &to.proxies {
                let Some(old) = from.proxies.iter().find(|p| p.id == new.id) else { continue };
                match difference(old, new) {
                    Difference::Same => prop_assert_eq!(old, new),
                    Difference::Whole => prop_assert_ne!(old, new),
                    Difference::Delta(delta) => {
                        let mut patched = old.clone();
                        prop_assert!(delta.apply(&mut patched).is_ok());
                        prop_assert_eq!(&patched, new);
                    }
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(cases(256))]

    /// Rules and route statuses reused from earlier translations (a `CompileCache`) give the
    /// output of a fresh translation: with nothing changed, after objects of any kind the rules
    /// or the statuses read were removed or replaced by changed copies, listed in another order,
    /// and back again; on one thread and several.
    #[test]
    fn reused_rules_translate_as_fresh_ones(
        scenario in scenario(),
        changes in prop::collection::vec((0usize..10, any::<prop::sample::Index>()), 1..4),
    ) {
        let mut all = scenario.snapshot();
        add_good(&mut all);
        // Shares every unchanged object with `all`, as the operator's snapshots share them.
        let mut some = all.clone();
        for (kind, index) in &changes {
            macro_rules! remove {
                ($list:expr) => {
                    if !$list.is_empty() {
                        $list.remove(index.index($list.len()));
                    }
                };
            }
            match kind {
                0 => remove!(some.http_routes),
                1 => remove!(some.grpc_routes),
                2 => remove!(some.services),
                3 => remove!(some.endpoint_slices),
                4 => remove!(some.reference_grants),
                5 => remove!(some.config_maps),
                // Where routes attach, and so their statuses, without a change to the routes.
                6 => remove!(some.gateways),
                7 => remove!(some.listener_sets),
                8 => remove!(some.namespaces),
                _ => {
                    // The same route, changed: a new object under the same name, in half the
                    // cases with a hostname that is not one (its status says so on every pass,
                    // reused or not).
                    if !some.http_routes.is_empty() {
                        let n = some.http_routes.len();
                        let pick = index.index(2 * n);
                        let mut changed = (*some.http_routes[pick % n]).clone();
                        let hostname = if pick < n { "changed.example.com" } else { "-changed.example.com" };
                        changed.spec.hostnames = Some(vec![hostname.into()]);
                        some.http_routes[pick % n] = std::sync::Arc::new(changed);
                    }
                }
            }
        }
        // The same routes listed in another order (kept values are found by position first).
        let mut reordered = some.clone();
        reordered.http_routes.reverse();
        if !reordered.grpc_routes.is_empty() {
            reordered.grpc_routes.rotate_left(1);
        }
        let mut cache = translator::CompileCache::default();
        for (step, snapshot) in [&all, &all, &some, &some, &reordered, &all].into_iter().enumerate() {
            let reused = translator::translate_on(snapshot, &scenario.config, 1 + step % 3, Some(&mut cache));
            let reused = serde_json::to_string(&reused).expect("output serializes");
            let fresh = serde_json::to_string(&translate(snapshot, &scenario.config)).expect("output serializes");
            prop_assert!(reused == fresh, "step {}: reused rules differ:\n{}", step, first_difference(&fresh, &reused));
        }
    }
}

proptest! {
    // Cross-namespace certificates that also resolve are rarer than the rest: more cases.
    #![proptest_config(cases(768))]

    /// A Secret in another namespace than every Gateway or ListenerSet referencing it reaches a
    /// proxy's bundle only through a ReferenceGrant.
    #[test]
    fn secrets_cross_namespaces_only_with_grants(scenario in scenario()) {
        let (_, output) = run(&scenario);
        for proxy in &output.proxies {
            let bundle = &output.bundles[&proxy.id];
            // (referrer kind, referrer namespace, secret namespace, secret name)
            let mut refs: Vec<(&str, String, String, String)> = Vec::new();
            let mut add = |kind: &'static str, owner_ns: &str, r: &Value| {
                let is_secret = r.get("kind").is_none_or(|k| k == "Secret");
                if is_secret {
                    let ns = r["namespace"].as_str().unwrap_or(owner_ns).to_string();
                    refs.push((kind, owner_ns.to_string(), ns, r["name"].as_str().unwrap_or_default().to_string()));
                }
            };
            for gw in scenario.of_kind("Gateway") {
                let ns = namespace_of(gw);
                if !proxy.gateways.contains(&format!("{ns}/{}", name_of(gw))) {
                    continue;
                }
                for l in gw["spec"]["listeners"].as_array().into_iter().flatten() {
                    for r in l["tls"]["certificateRefs"].as_array().into_iter().flatten() {
                        add("Gateway", &ns, r);
                    }
                }
                let client = &gw["spec"]["tls"]["backend"]["clientCertificateRef"];
                if client.is_object() {
                    add("Gateway", &ns, client);
                }
            }
            for ls in scenario.of_kind("ListenerSet") {
                let ns = namespace_of(ls);
                let parent = &ls["spec"]["parentRef"];
                let parent_key = format!("{}/{}", parent["namespace"].as_str().unwrap_or(&ns), parent["name"].as_str().unwrap_or_default());
                if !proxy.gateways.contains(&parent_key) {
                    continue;
                }
                for l in ls["spec"]["listeners"].as_array().into_iter().flatten() {
                    for r in l["tls"]["certificateRefs"].as_array().into_iter().flatten() {
                        add("ListenerSet", &ns, r);
                    }
                }
            }
            for secret in &bundle.secrets {
                let (s_ns, s_name) = secret.split_once('/').expect("secret is namespace/name");
                let permitted = refs.iter().any(|(kind, owner_ns, ns, name)| {
                    ns == s_ns && name == s_name && scenario.grant_permits(kind, owner_ns, "Secret", s_ns, s_name)
                });
                prop_assert!(permitted, "Secret {secret} is in proxy {}'s bundle without a permitted reference", proxy.id);
            }
        }
    }
}

/// The statuses of every object but the good ones of [`add_good`], serialized.
fn statuses_of_objects(output: &Output) -> String {
    let mut statuses = output.statuses.clone();
    statuses.gateways.retain(|g| g.namespace != "good");
    statuses.routes.retain(|r| r.namespace != "good");
    serde_json::to_string(&statuses).expect("statuses serialize")
}

/// Where two renderings part, with some context.
fn first_difference(a: &str, b: &str) -> String {
    let at = a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
    let from = at.saturating_sub(200);
    let end = |s: &str| (at + 200).min(s.len());
    format!(
        "original: …{}…\nshuffled: …{}…",
        a.get(from..end(a)).unwrap_or_default(),
        b.get(from..end(b)).unwrap_or_default()
    )
}

/// The properties above are only as strong as the generator: it must reach served rules,
/// endpoints, TLS routes, bundle Secrets (also across namespaces) and unreadable routes often
/// enough.
#[test]
fn generator_reaches_interesting_cases() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;

    let mut runner = TestRunner::deterministic();
    let strategy = scenario();
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for _ in 0..400 {
        let scenario = strategy.new_tree(&mut runner).expect("generates").current();
        let (snapshot, output) = run(&scenario);
        let listeners: Vec<_> = output
            .proxies
            .iter()
            .flat_map(|p| &p.ports)
            .flat_map(|p| &p.listeners)
            .collect();
        let mut count = |what, hit: bool| *seen.entry(what).or_default() += usize::from(hit);
        count("proxy", !output.proxies.is_empty());
        count("unreadable route", !snapshot.unreadable_routes.is_empty());
        count(
            "http rule",
            listeners
                .iter()
                .any(|l| l.virtual_hosts.iter().any(|v| !v.rules.is_empty())),
        );
        count(
            "wildcard virtual host",
            listeners
                .iter()
                .any(|l| l.virtual_hosts.iter().any(|v| v.hostname.starts_with("*."))),
        );
        count("stream route", listeners.iter().any(|l| !l.stream_routes.is_empty()));
        count(
            "endpoint",
            output
                .proxies
                .iter()
                .any(|p| p.backends.values().any(|b| !b.endpoints.is_empty())),
        );
        count("bundle secret", output.bundles.values().any(|b| !b.secrets.is_empty()));
        count(
            "cross-namespace bundle secret",
            output.proxies.iter().any(|p| {
                let gateway_namespaces: BTreeSet<&str> = p
                    .gateways
                    .iter()
                    .filter_map(|g| g.split_once('/'))
                    .map(|(ns, _)| ns)
                    .collect();
                output.bundles[&p.id]
                    .secrets
                    .iter()
                    .filter_map(|s| s.split_once('/'))
                    .any(|(ns, _)| !gateway_namespaces.contains(ns))
            }),
        );
        count(
            "accepted route parent",
            output
                .statuses
                .routes
                .iter()
                .flat_map(|r| &r.parents)
                .any(|p| p.conditions.iter().any(|c| c.kind == "Accepted" && c.is_true())),
        );
    }
    for (what, n) in &seen {
        assert!(*n >= 5, "only {n} of 400 scenarios have a {what}: {seen:?}");
    }
    assert_eq!(seen.len(), 9, "{seen:?}");
}
