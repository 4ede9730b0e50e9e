//! TLSRoute, TCPRoute and UDPRoute rules to weighted backends.

use crate::backend::Backends;
use crate::ir::{RouteRef, StreamRoute, WeightedBackend};

use super::RouteOutcome;
use super::http::{Compiled, resolve};
use super::model::{RouteKind, RouteModel};

/// Compiles a stream route into one entry (all rules' backends), hostnames left empty; the
/// caller fills them per listener. `tls` says whether BackendTLSPolicy applies (TLSRoute behind
/// a Terminate listener).
pub fn compile(
    route: &RouteModel<'_>,
    backends: &Backends<'_>,
    tls_terminated: bool,
    client_certificate: Option<&str>,
    outcome: &mut RouteOutcome,
) -> (StreamRoute, Compiled) {
    let mut out = Compiled::default();
    let mut weighted = Vec::new();
    for rule in &route.rules {
        for b in &rule.backend_refs {
            let backend = if tls_terminated && route.kind == RouteKind::Tls {
                match backends.resolve(route.kind, &route.namespace, b, true, client_certificate) {
                    Ok(r) => {
                        if let Some(p) = r.policy {
                            out.policies.push(p);
                        }
                        let id = r.backend.id.clone();
                        out.backends.push(r.backend);
                        Some(id)
                    }
                    Err(p) => {
                        outcome.unresolved.get_or_insert(p);
                        None
                    }
                }
            } else {
                resolve(route, b, backends, None, &mut out, outcome)
            };
            weighted.push(WeightedBackend {
                backend,
                weight: b.weight.max(0) as u32,
                filters: Vec::new(),
            });
        }
    }
    let entry = StreamRoute {
        route: RouteRef {
            kind: route.kind.name().into(),
            namespace: route.namespace.clone(),
            name: route.name.clone(),
            rule: 0,
            rule_name: route.rules.first().and_then(|r| r.name.clone()),
        },
        hostnames: Vec::new(),
        backends: weighted,
    };
    (entry, out)
}
