//! Stream routing: TCP, UDP and TLS passthrough listeners and their routes.

pub mod prefixed;
pub mod sni;

use std::sync::Arc;

use translator::ir;

use crate::error::ValidationError;
use crate::http::host::HostPattern;
use crate::http::rule::describe;
use crate::upstream::Upstreams;
use crate::upstream::{self, Upstream, pick_weighted};

/// The stream listeners sharing one port, most specific hostname first.
#[derive(Debug)]
pub struct StreamPort {
    listeners: Vec<StreamListener>,
}

#[derive(Debug)]
struct StreamListener {
    hostname: HostPattern,
    /// TLS listeners in Terminate mode.
    terminate: bool,
    /// HTTPS listeners sharing a TLS port: their connections are served as HTTPS.
    https: bool,
    routes: Vec<StreamRoute>,
}

/// Where a connection goes.
#[derive(Debug)]
pub enum Dispatch<'a> {
    /// To a route's backend; `terminate` when the listener terminates TLS.
    Stream { route: &'a StreamRoute, terminate: bool },
    /// To the HTTPS listeners of the port.
    Https,
}

/// One TCP, UDP or TLS route.
#[derive(Debug)]
pub struct StreamRoute {
    pub route: ir::RouteRef,
    /// SNI names; empty matches every name.
    hostnames: Vec<HostPattern>,
    backends: Vec<StreamBackend>,
}

/// A weighted share of a stream route; `None` is an invalid backend whose share is closed.
#[derive(Debug)]
pub struct StreamBackend {
    pub upstream: Option<Arc<Upstream>>,
    pub weight: u32,
}

impl StreamPort {
    pub fn compile(port: &ir::Port, upstreams: &Upstreams) -> Result<Self, ValidationError> {
        let mut listeners = Vec::with_capacity(port.listeners.len());
        for listener in &port.listeners {
            let invalid = |hostname: &str| ValidationError::Hostname {
                listener: listener.name.clone(),
                hostname: hostname.to_string(),
            };
            let hostname = match &listener.hostname {
                Some(h) => HostPattern::parse(h).ok_or_else(|| invalid(h))?,
                None => HostPattern::Any,
            };
            let routes = listener
                .stream_routes
                .iter()
                .map(|route| {
                    let context = describe(&route.route);
                    let hostnames = route
                        .hostnames
                        .iter()
                        .map(|h| HostPattern::parse(h).ok_or_else(|| invalid(h)))
                        .collect::<Result<_, _>>()?;
                    let backends = route
                        .backends
                        .iter()
                        .map(|b| {
                            let upstream = upstream::find(upstreams, b.backend.as_deref(), &context)?;
                            Ok(StreamBackend {
                                upstream,
                                weight: b.weight,
                            })
                        })
                        .collect::<Result<_, ValidationError>>()?;
                    Ok(StreamRoute {
                        route: route.route.clone(),
                        hostnames,
                        backends,
                    })
                })
                .collect::<Result<_, ValidationError>>()?;
            let terminate = listener.tls.as_ref().is_some_and(|t| t.mode == ir::TlsMode::Terminate);
            listeners.push(StreamListener {
                hostname,
                terminate,
                https: listener.protocol == ir::Protocol::Https,
                routes,
            });
        }
        listeners.sort_by_key(|l| std::cmp::Reverse(l.hostname.specificity()));
        Ok(StreamPort { listeners })
    }

    /// The route for a connection: by server name for TLS, else the first (oldest) route.
    pub fn route(&self, server_name: Option<&str>) -> Option<Dispatch<'_>> {
        let name = server_name.map(str::to_ascii_lowercase).unwrap_or_default();
        let listener = match server_name {
            Some(_) => self.listeners.iter().find(|l| l.hostname.matches(&name))?,
            None => self.listeners.first()?,
        };
        if listener.https {
            return Some(Dispatch::Https);
        }
        // The route with the most specific matching hostname; the first on ties.
        let mut best: Option<(&StreamRoute, (u8, usize))> = None;
        for route in &listener.routes {
            let specificity = if route.hostnames.is_empty() {
                Some((0, 0))
            } else {
                route
                    .hostnames
                    .iter()
                    .filter(|h| h.matches(&name))
                    .map(HostPattern::specificity)
                    .max()
            };
            if let Some(s) = specificity
                && best.is_none_or(|(_, b)| s > b)
            {
                best = Some((route, s));
            }
        }
        best.map(|(route, _)| Dispatch::Stream {
            route,
            terminate: listener.terminate,
        })
    }
}

impl StreamRoute {
    /// Picks a backend by weight; `None` when every weight is zero.
    pub fn pick_backend(&self) -> Option<&StreamBackend> {
        pick_weighted(&self.backends, |b| b.weight)
    }
}
