//! Listener conflicts: listeners that cannot share a port (Conflicted), overlapping TLS
//! hostnames (OverlappingTLSConfig), and in standalone mode the ports Gateways share.

use crate::hostname;
use crate::ir::{FrontendValidation, Protocol};
use crate::object;
use crate::status::condition::reason;

use super::{GatewayModel, ListenerModel, Owner, Problem};

/// The transport family a protocol shares a port with.
fn family(p: Protocol) -> (u8, u8) {
    match p {
        Protocol::Http => (0, 0),
        Protocol::Https | Protocol::Tls => (0, 1),
        Protocol::Tcp => (0, 2),
        Protocol::Udp => (1, 3),
    }
}

/// Marks listeners that cannot share their port. Two Gateway listeners that conflict are both
/// conflicted (no winner is picked); a ListenerSet listener loses to any listener before it.
pub fn resolve(listeners: &mut [ListenerModel]) {
    let n = listeners.len();
    for i in 0..n {
        for j in (i + 1)..n {
            let (a, b) = (&listeners[i], &listeners[j]);
            let (Some(pa), Some(pb)) = (a.protocol, b.protocol) else {
                continue;
            };
            if a.not_accepted.is_some() || b.not_accepted.is_some() || a.spec.port != b.spec.port {
                continue;
            }
            if a.conflicted.is_some() && a.owner != Owner::Gateway {
                continue;
            }
            let (fa, fb) = (family(pa), family(pb));
            if fa.0 != fb.0 {
                continue; // TCP and UDP sockets are distinct.
            }
            let why = if fa.1 != fb.1 {
                Some(reason::PROTOCOL_CONFLICT)
            } else if matches!(pa, Protocol::Tcp | Protocol::Udp) || a.spec.hostname == b.spec.hostname {
                Some(reason::HOSTNAME_CONFLICT)
            } else {
                None
            };
            if let Some(why) = why {
                if a.owner == Owner::Gateway && b.owner == Owner::Gateway {
                    listeners[i].conflicted = Some(why);
                }
                listeners[j].conflicted.get_or_insert(why);
            }
        }
    }
}

/// Sets OverlappingTLSConfig on served terminating listeners of one port whose distinct hostnames
/// overlap (`*.example.com` and `foo.example.com`, or any hostname and none): connection
/// coalescing may reuse one's connection for the other.
pub fn mark_overlapping_tls(listeners: &mut [ListenerModel]) {
    let n = listeners.len();
    for i in 0..n {
        for j in (i + 1)..n {
            let (a, b) = (&listeners[i], &listeners[j]);
            if !(a.is_ready() && b.is_ready() && a.terminates_tls() && b.terminates_tls()) || a.spec.port != b.spec.port
            {
                continue;
            }
            let overlap = hostnames_overlap(a.spec.hostname.as_deref(), b.spec.hostname.as_deref());
            if overlap {
                listeners[i].overlapping_tls = true;
                listeners[j].overlapping_tls = true;
            }
        }
    }
}

/// Whether two distinct listener hostnames on one port overlap. A listener without a hostname
/// matches every hostname; two without are conflicted rather than overlapping.
fn hostnames_overlap(a: Option<&str>, b: Option<&str>) -> bool {
    match (a, b) {
        (Some(ha), Some(hb)) => ha != hb && hostname::intersect(Some(ha), hb).is_some(),
        (None, None) => false,
        _ => true,
    }
}

/// Standalone mode: listeners of different Gateways on one port share a socket. Gateway
/// listeners come first (older Gateways first), then ListenerSet listeners (older ListenerSets
/// first); a listener conflicting with one before it loses. HTTPS listeners on one port must
/// also ask for the same client certificate validation, else the later one cannot use the port.
pub fn resolve_shared_ports(models: &mut [GatewayModel<'_>]) {
    // Gateways that are not accepted get no proxy, so they hold no port.
    let mut gateways: Vec<usize> = (0..models.len()).filter(|gi| models[*gi].is_accepted()).collect();
    gateways.sort_by(|a, b| object::by_age(models[*a].gateway, models[*b].gateway));
    let mut order: Vec<(usize, usize)> = Vec::new();
    for &gi in &gateways {
        order.extend(
            models[gi]
                .listeners
                .iter()
                .enumerate()
                .filter(|(_, l)| l.owner == Owner::Gateway)
                .map(|(li, _)| (gi, li)),
        );
    }
    let mut from_sets: Vec<(usize, usize)> = gateways
        .iter()
        .flat_map(|&gi| {
            models[gi]
                .listeners
                .iter()
                .enumerate()
                .filter(|(_, l)| l.owner != Owner::Gateway)
                .map(move |(li, _)| (gi, li))
        })
        .collect();
    from_sets.sort_by(|a, b| {
        let set = |(gi, li): (usize, usize)| {
            let owner = &models[gi].listeners[li].owner;
            models[gi]
                .listener_sets
                .iter()
                .find(|s| s.owns(owner))
                .map(|s| s.listener_set)
        };
        match (set(*a), set(*b)) {
            (Some(x), Some(y)) => object::by_age(x, y),
            _ => std::cmp::Ordering::Equal,
        }
    });
    order.extend(from_sets);

    // Winners so far: protocol, port, hostname, and the port's client certificate validation.
    let mut seen: Vec<(Protocol, i32, Option<String>, Option<FrontendValidation>)> = Vec::new();
    for (gi, li) in order {
        let l = &models[gi].listeners[li];
        let Some(p) = l.protocol else { continue };
        if !l.is_ready() {
            continue;
        }
        let validation = (p == Protocol::Https)
            .then(|| models[gi].frontend.get(&l.spec.port).cloned())
            .flatten();
        let clash = seen.iter().find(|(sp, port, host, _)| {
            *port == l.spec.port
                && family(*sp).0 == family(p).0
                && (family(*sp).1 != family(p).1
                    || *host == l.spec.hostname
                    || matches!(p, Protocol::Tcp | Protocol::Udp))
        });
        if let Some((sp, ..)) = clash {
            let why = if family(*sp).1 != family(p).1 {
                reason::PROTOCOL_CONFLICT
            } else {
                reason::HOSTNAME_CONFLICT
            };
            models[gi].listeners[li].conflicted = Some(why);
            continue;
        }
        let differs = p == Protocol::Https
            && seen
                .iter()
                .any(|(sp, port, _, v)| *sp == Protocol::Https && *port == l.spec.port && *v != validation);
        if differs {
            models[gi].listeners[li].not_accepted = Some(Problem::new(
                reason::PORT_UNAVAILABLE,
                format!(
                    "Port {} is used by HTTPS listeners of another Gateway with a different client certificate validation",
                    l.spec.port
                ),
            ));
            continue;
        }
        seen.push((p, l.spec.port, l.spec.hostname.clone(), validation));
    }

    // Served terminating listeners of all Gateways on one port share its TLS handshakes: their
    // overlaps are recomputed over the shared port.
    for &gi in &gateways {
        for l in &mut models[gi].listeners {
            l.overlapping_tls = false;
        }
    }
    let served: Vec<(usize, usize)> = gateways
        .iter()
        .flat_map(|&gi| (0..models[gi].listeners.len()).map(move |li| (gi, li)))
        .filter(|(gi, li)| {
            let l = &models[*gi].listeners[*li];
            l.is_ready() && l.terminates_tls()
        })
        .collect();
    for (i, &(ga, la)) in served.iter().enumerate() {
        for &(gb, lb) in &served[i + 1..] {
            let (a, b) = (&models[ga].listeners[la], &models[gb].listeners[lb]);
            if a.spec.port == b.spec.port && hostnames_overlap(a.spec.hostname.as_deref(), b.spec.hostname.as_deref()) {
                models[ga].listeners[la].overlapping_tls = true;
                models[gb].listeners[lb].overlapping_tls = true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::gateway::listener::{self, AllowedNamespaces, ListenerSpec};
    use crate::snapshot::Snapshot;

    fn listener(owner: Owner, port: i32, protocol: &str, hostname: Option<&str>) -> ListenerModel {
        let spec = ListenerSpec {
            name: format!("{protocol}-{port}-{}", hostname.unwrap_or("any")),
            port,
            protocol: protocol.into(),
            hostname: hostname.map(Into::into),
            tls_mode: None,
            certificate_refs: Vec::new(),
            has_tls: false,
            allowed_kinds: None,
            allowed_namespaces: AllowedNamespaces::Same,
        };
        listener::validate(
            spec,
            owner,
            "ns",
            "Gateway",
            1,
            None,
            &Snapshot::default(),
            &Config::default(),
        )
    }

    fn set(name: &str) -> Owner {
        Owner::ListenerSet {
            namespace: "ns".into(),
            name: name.into(),
        }
    }

    #[test]
    fn gateway_listeners_in_conflict_are_all_conflicted() {
        let mut ls = vec![
            listener(Owner::Gateway, 80, "HTTP", Some("a.example.com")),
            listener(Owner::Gateway, 80, "HTTP", Some("a.example.com")),
            listener(Owner::Gateway, 80, "HTTP", Some("b.example.com")),
        ];
        resolve(&mut ls);
        let reasons: Vec<_> = ls.iter().map(|l| l.conflicted).collect();
        assert_eq!(
            reasons,
            [Some(reason::HOSTNAME_CONFLICT), Some(reason::HOSTNAME_CONFLICT), None]
        );
    }

    #[test]
    fn listener_set_listeners_lose_to_earlier_listeners() {
        let mut ls = vec![
            listener(Owner::Gateway, 80, "HTTP", Some("a.example.com")),
            listener(set("first"), 80, "TCP", None),
            listener(set("first"), 80, "HTTP", Some("b.example.com")),
            listener(set("second"), 80, "HTTP", Some("b.example.com")),
        ];
        resolve(&mut ls);
        let reasons: Vec<_> = ls.iter().map(|l| l.conflicted).collect();
        assert_eq!(
            reasons,
            [
                None,
                Some(reason::PROTOCOL_CONFLICT),
                None,
                Some(reason::HOSTNAME_CONFLICT)
            ]
        );
    }

    #[test]
    fn tcp_and_udp_share_a_port_number() {
        let mut ls = vec![
            listener(Owner::Gateway, 53, "TCP", None),
            listener(Owner::Gateway, 53, "UDP", None),
        ];
        resolve(&mut ls);
        assert!(ls.iter().all(|l| l.conflicted.is_none()));
    }
}
