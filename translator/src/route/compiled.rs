//! The rules of every HTTP and gRPC route, compiled before the routes are assembled into
//! listeners. A route's rules depend only on the route, the backends and the client certificate
//! its Gateways give it, so they are compiled apart from attachment and assembly: on several
//! threads when the snapshot is large (compiling is about half of a translation), and once per
//! client certificate however many Gateways share it.

use crate::backend::Backends;
use crate::config::Config;
use crate::gateway::GatewayModel;
use crate::policy::backend_tls;

use super::http::{self, Compiled};
use super::model::{RouteKind, RouteModel};
use super::value::Regexes;
use super::{Attachment, RouteOutcome};

/// One route's rules for one client certificate.
struct Entry {
    client_certificate: Option<String>,
    compiled: Compiled,
    outcome: RouteOutcome,
    /// Gateways that still take it: the last one moves it, the others copy it.
    uses: usize,
}

/// The compiled rules of every route, by route index.
pub struct CompiledRoutes(Vec<Vec<Entry>>);

impl CompiledRoutes {
    /// Compiles the HTTP and gRPC routes that attached to at least one Gateway, on `threads`
    /// threads ([`crate::parallel`]).
    pub fn new(
        routes: &[RouteModel<'_>],
        attachments: &[Vec<Attachment>],
        gateways: &[GatewayModel<'_>],
        backends: &Backends<'_>,
        regexes: &Regexes,
        config: &Config,
        threads: usize,
    ) -> Self {
        CompiledRoutes(crate::parallel::map(routes.len(), threads, |ri| {
            compile_one(&routes[ri], &attachments[ri], gateways, backends, regexes, config)
        }))
    }

    /// Route `ri`'s rules for `client_certificate`, its problems added to `outcome`; empty
    /// for a route that was not compiled.
    pub fn take(&mut self, ri: usize, client_certificate: Option<&str>, outcome: &mut RouteOutcome) -> Compiled {
        let Some(entry) = self.0[ri]
            .iter_mut()
            .find(|e| e.client_certificate.as_deref() == client_certificate && e.uses > 0)
        else {
            return Compiled::default();
        };
        outcome.add(&entry.outcome);
        entry.uses -= 1;
        if entry.uses == 0 {
            std::mem::take(&mut entry.compiled)
        } else {
            entry.compiled.clone()
        }
    }
}

/// The entries of one route: one per distinct client certificate of the Gateways it attached
/// to without a problem, in the order translation visits those Gateways.
fn compile_one(
    route: &RouteModel<'_>,
    attachments: &[Attachment],
    gateways: &[GatewayModel<'_>],
    backends: &Backends<'_>,
    regexes: &Regexes,
    config: &Config,
) -> Vec<Entry> {
    if !matches!(route.kind, RouteKind::Http | RouteKind::Grpc) {
        return Vec::new();
    }
    let mut attached: Vec<usize> = attachments
        .iter()
        .filter(|a| a.problem.is_none())
        .map(|a| a.gateway)
        .collect();
    attached.sort_unstable();
    attached.dedup();
    let mut entries: Vec<Entry> = Vec::with_capacity(1);
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
        let mut outcome = RouteOutcome::default();
        let compiled = http::compile(route, backends, regexes, client_certificate, &mut outcome);
        entries.push(Entry {
            client_certificate: client_certificate.map(str::to_string),
            compiled,
            outcome,
            uses: 1,
        });
    }
    entries
}
