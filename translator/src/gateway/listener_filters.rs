//! Listener filters (`spec.listeners[].filters.requests`, Gateway API v1.7, GEP-5224): what
//! every request a listener accepts goes through, in order, before route matching. Turna runs
//! `ExternalAuth` there; anything else it cannot run refuses the listener, which is never served
//! without its filters.
//!
//! Conditions follow the GEP: a filter type Turna does not run (`ExtensionRef`, an unknown type)
//! gives Accepted=False `UnsupportedValue` naming the filter; a structurally invalid list (filters
//! on a listener that is not HTTP or HTTPS, more than 16, a payload that does not match its type)
//! Accepted=False `InvalidListenerFilter`; a server that does not resolve ResolvedRefs=False
//! `InvalidListenerFilterRef`, or `RefNotPermitted` without a ReferenceGrant. A listener whose
//! server does not resolve stays served, every request denied (fail closed).

use crate::api::listener_filters::{ListenerFilter, ListenerFilterType, ListenerFiltersEntry};
use crate::backend::{Backends, Resolved};
use crate::config::Config;
use crate::gateway::{GatewayModel, Owner, Problem};
use crate::ir::{self, Protocol};
use crate::object::GROUP;
use crate::policy;
use crate::reference_grant::From;
use crate::route;
use crate::route::model::BackendRef;
use crate::snapshot::Snapshot;
use crate::status::condition::reason;

/// The most filters a listener may list (the CRD's `maxItems`).
const MAX_FILTERS: usize = 16;

/// The filters the snapshot holds for listener `listener` of object `namespace/object`.
pub fn of<'s>(
    snapshot: &'s Snapshot,
    namespace: &str,
    object: &str,
    listener: &str,
) -> Option<&'s ListenerFiltersEntry> {
    // Most snapshots have none: no key is formatted for them.
    if snapshot.listener_filters.is_empty() {
        return None;
    }
    snapshot
        .listener_filters
        .get(&format!("{namespace}/{object}/{listener}"))
}

/// The filters of a listener of `protocol`, when Turna can run every one of them in its order;
/// otherwise why the listener is not accepted.
pub fn validate(protocol: Protocol, entry: &ListenerFiltersEntry) -> Result<Vec<ListenerFilter>, Problem> {
    let filters = match entry {
        Ok(filters) => &filters.requests,
        Err(error) => {
            return Err(Problem::new(
                reason::UNSUPPORTED_VALUE,
                format!("Listener filters have a value Turna does not support: {error}"),
            ));
        }
    };
    if filters.is_empty() {
        return Ok(Vec::new());
    }
    if !matches!(protocol, Protocol::Http | Protocol::Https) {
        return Err(Problem::new(
            reason::INVALID_LISTENER_FILTER,
            "Listener filters are only valid on HTTP and HTTPS listeners",
        ));
    }
    if filters.len() > MAX_FILTERS {
        return Err(Problem::new(
            reason::INVALID_LISTENER_FILTER,
            format!(
                "filters.requests lists {} filters; at most {MAX_FILTERS} are allowed",
                filters.len()
            ),
        ));
    }
    for (i, f) in filters.iter().enumerate() {
        let invalid = |message: &str| {
            Problem::new(
                reason::INVALID_LISTENER_FILTER,
                format!("filters.requests[{i}]: {message}"),
            )
        };
        match &f.r#type {
            ListenerFilterType::ExternalAuth => {
                let Some(a) = &f.external_auth else {
                    return Err(invalid("type ExternalAuth needs externalAuth"));
                };
                if f.extension_ref.is_some() {
                    return Err(invalid("extensionRef must not be set for type ExternalAuth"));
                }
                route::value::external_auth(a)
                    .map_err(|p| Problem::new(p.reason, format!("filters.requests[{i}]: {}", p.message)))?;
            }
            ListenerFilterType::ExtensionRef => {
                let name = f
                    .extension_ref
                    .as_ref()
                    .map(|e| format!(" {}/{} {}", e.group, e.kind, e.name))
                    .unwrap_or_default();
                return Err(Problem::new(
                    reason::UNSUPPORTED_VALUE,
                    format!("filters.requests[{i}]: ExtensionRef{name} is not supported"),
                ));
            }
            ListenerFilterType::Unknown(name) => {
                return Err(Problem::new(
                    reason::UNSUPPORTED_VALUE,
                    format!("filters.requests[{i}]: filter type {name:?} is not supported"),
                ));
            }
        }
    }
    Ok(filters.clone())
}

/// Resolves the filters of every accepted listener into [`ir::Filter`]s (on the listener
/// model); returns the server backends used, by Gateway index. A server that cannot be resolved
/// sets the listener's ResolvedRefs=False and leaves a filter without a backend, which denies.
pub fn resolve(gateways: &mut [GatewayModel<'_>], backends: &Backends<'_>, config: &Config) -> Vec<(usize, Resolved)> {
    let mut used = Vec::new();
    for (gi, gw) in gateways.iter_mut().enumerate() {
        if gw.listeners.iter().all(|l| l.filter_specs.is_empty()) {
            continue;
        }
        let client_certificate = policy::backend_tls::route_client_certificate(
            config.mode,
            gw.client_certificate.as_deref(),
            [gw.client_certificate.as_deref()],
        )
        .map(str::to_string);
        for l in &mut gw.listeners {
            if l.filter_specs.is_empty() || !l.is_valid() {
                continue;
            }
            // The referrer, for ReferenceGrants, is the object that declares the listener.
            let from = From {
                group: GROUP,
                kind: match l.owner {
                    Owner::Gateway => "Gateway",
                    Owner::ListenerSet { .. } => "ListenerSet",
                },
                namespace: &l.namespace,
            };
            let mut filters = Vec::with_capacity(l.filter_specs.len());
            let mut problem = None;
            for (i, f) in l.filter_specs.iter().enumerate() {
                // Validated: every filter is an ExternalAuth with its payload.
                let Some(a) = &f.external_auth else { continue };
                let resolve =
                    |r: &BackendRef<'_>| backends.resolve_for_listener(from, r, client_certificate.as_deref());
                match route::http::external_auth(a, resolve) {
                    Ok((auth, resolved)) => {
                        filters.push(ir::Filter::ExternalAuth(auth));
                        used.push((gi, resolved));
                    }
                    Err(p) => {
                        let why = if p.reason == reason::REF_NOT_PERMITTED {
                            reason::REF_NOT_PERMITTED
                        } else {
                            reason::INVALID_LISTENER_FILTER_REF
                        };
                        problem.get_or_insert(Problem::new(
                            why,
                            format!("filters.requests[{i}]: ExternalAuth.backendRef: {}", p.message),
                        ));
                        // Kept in its place, without a server: it denies every request.
                        filters.push(ir::Filter::ExternalAuth(ir::ExternalAuth {
                            protocol: match a.protocol {
                                crate::api::http::HttpRouteRulesFiltersExternalAuthProtocol::Http => {
                                    ir::AuthProtocol::Http
                                }
                                crate::api::http::HttpRouteRulesFiltersExternalAuthProtocol::Grpc => {
                                    ir::AuthProtocol::Grpc
                                }
                            },
                            backend: None,
                            path: Default::default(),
                            allowed_headers: Vec::new(),
                            allowed_response_headers: Vec::new(),
                            forward_body: 0,
                        }));
                    }
                }
            }
            if let Some(p) = problem {
                l.unresolved.get_or_insert(p);
            }
            l.filters = filters;
        }
    }
    used
}
