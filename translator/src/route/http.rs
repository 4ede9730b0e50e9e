//! HTTPRoute and GRPCRoute rules to IR match entries: matches, filters, backends, timeouts and
//! retries. Their order is [`super::precedence`]'s.

use std::borrow::Cow;
use std::sync::Arc;

use smallvec::SmallVec;
use smol_str::{SmolStr, format_smolstr};

use crate::api::grpc::{GrpcRouteRules, GrpcRouteRulesMatchesHeadersType, GrpcRouteRulesMatchesMethodType};
use crate::api::http::{
    HttpRouteRules, HttpRouteRulesFilters, HttpRouteRulesFiltersExternalAuth,
    HttpRouteRulesFiltersExternalAuthProtocol as AuthProtocolSpec,
    HttpRouteRulesFiltersRequestRedirectPathType as RedirectPath, HttpRouteRulesFiltersRequestRedirectScheme as Scheme,
    HttpRouteRulesFiltersType as FilterType, HttpRouteRulesFiltersUrlRewritePathType as RewritePath,
    HttpRouteRulesMatchesHeadersType as HeaderType, HttpRouteRulesMatchesMethod as HttpMethod,
    HttpRouteRulesMatchesPathType as PathType, HttpRouteRulesMatchesQueryParamsType as QueryType,
};
use crate::backend::{Backends, Resolved};
use crate::duration;
use crate::gateway::Problem;
use crate::ir::{
    AppProtocol, AuthProtocol, Backend, Cors, ExternalAuth, Filter, HeaderModifier, HttpMatch, HttpRule, Mirror,
    PathMatch, PathModifier, Redirect, Retry, RouteRef, Timeouts, UrlRewrite, ValueMatch, ValueMatchKind,
    WeightedBackend,
};
use crate::policy::RulePolicies;
use crate::status::condition::reason;

use super::RouteOutcome;
use super::model::{BackendRef, RouteKind, RouteModel, RuleSpec};
pub use super::precedence::{PrecedenceKey, inherit_less_specific, original_hostname, precedence, precedence_key};
use super::value::{self, Regexes};

/// A filter's `backendRef` as a [`BackendRef`] of weight 1: each filter has its own generated
/// type with the same fields.
macro_rules! filter_backend_ref {
    ($b:expr) => {
        BackendRef {
            group: $b.group.as_deref().unwrap_or_default(),
            kind: $b.kind.as_deref().unwrap_or("Service"),
            namespace: $b.namespace.as_deref(),
            name: &$b.name,
            port: $b.port,
            weight: 1,
            filters: Vec::new(),
        }
    };
}

/// The compiled entries of one route for one Gateway.
#[derive(Clone, Debug, Default)]
pub struct Compiled {
    pub rules: Vec<Arc<HttpRule>>,
    /// Backends the entries reference.
    pub backends: Vec<Arc<Backend>>,
    /// BackendTLSPolicies the backends use.
    pub policies: Vec<String>,
}

/// Compiles the rules of an HTTP or gRPC route; problems go to `outcome`.
pub fn compile(
    route: &RouteModel<'_>,
    backends: &Backends<'_>,
    policies: RulePolicies<'_, '_>,
    regexes: &Regexes,
    client_certificate: Option<&str>,
    outcome: &mut RouteOutcome,
) -> Compiled {
    let mut out = Compiled {
        rules: Vec::with_capacity(route.rules().len()),
        backends: Vec::with_capacity(route.rules().iter().map(|r| r.backend_refs.len()).sum()),
        policies: Vec::new(),
    };
    let mut dropped: Vec<(String, Problem)> = Vec::new();
    // Rules whose ExternalAuth server does not resolve: kept, answering 500 (fail closed).
    let mut closed: Vec<(String, Problem)> = Vec::new();
    // Made once: every entry of the route shares them.
    let (kind, namespace, name) = (
        SmolStr::new_static(route.kind.name()),
        SmolStr::new(route.namespace),
        SmolStr::new(route.name),
    );
    for (index, rule) in route.rules().iter().enumerate() {
        let route_ref = RouteRef {
            kind: kind.clone(),
            namespace: namespace.clone(),
            name: name.clone(),
            rule: index,
            rule_name: rule.name.map(SmolStr::new),
            static_layer: route.static_layer,
        };
        let parts = match rule.spec {
            RuleSpec::Http(r) => http_parts(r, regexes),
            RuleSpec::Grpc(r) => grpc_parts(r, regexes),
            RuleSpec::Stream => continue,
        };
        let parts = parts.and_then(|p| {
            // ReplacePrefixMatch needs the matched prefix: every match must be a PathPrefix.
            let replaces =
                parts_replace_prefix(&p.filters) || rule.backend_refs.iter().any(|b| parts_replace_prefix(&b.filters));
            if replaces && p.matches.iter().any(|m| !matches!(m.path, PathMatch::Prefix(_))) {
                return Err(Problem::new(
                    reason::UNSUPPORTED_VALUE,
                    "ReplacePrefixMatch requires PathPrefix matches",
                ));
            }
            value::filters(&p.filters)?;
            for b in &rule.backend_refs {
                value::filters(&b.filters)?;
                // Authorization per backend would decide after the backend is chosen, and its
                // result could differ by backend: only a rule's own filters authorize.
                if b.filters.iter().any(|f| f.r#type == FilterType::ExternalAuth) {
                    return Err(Problem::new(
                        reason::UNSUPPORTED_VALUE,
                        "ExternalAuth is supported in a rule's filters, not in a backendRef's",
                    ));
                }
            }
            Ok(p)
        });
        let parts = parts.and_then(|mut p| {
            let session = match p.session_persistence.take() {
                Some(typed) => Some(super::session::resolve(
                    &route.session_persistence(index, typed),
                    &route.key(),
                    index,
                )?),
                None => None,
            };
            Ok((p, session))
        });
        let (parts, session_persistence) = match parts {
            Ok(p) => p,
            Err(problem) => {
                dropped.push((rule.name.map_or_else(|| format!("#{index}"), str::to_string), problem));
                continue;
            }
        };
        if session_persistence.is_some() {
            outcome.deprecated =
                Some("sessionPersistence on route rules is deprecated by Gateway API (GEP-4894) but keeps working");
        }
        let mut filters = Vec::with_capacity(parts.filters.len());
        // A filter that cannot be applied fails the requests it would process (HTTP 500).
        let mut broken = false;
        for f in parts.filters.iter() {
            match filter(f, route, backends, client_certificate, &mut out, outcome) {
                Ok(Some(f)) => filters.push(f),
                Ok(None) => {}
                Err(FilterError::Unresolved(p)) => {
                    if f.r#type == FilterType::ExternalAuth {
                        closed.push((rule.name.map_or_else(|| format!("#{index}"), str::to_string), p.clone()));
                    }
                    outcome.unresolved.get_or_insert(p);
                    broken = true;
                }
            }
        }
        let mut weighted = Vec::with_capacity(rule.backend_refs.len());
        for b in &rule.backend_refs {
            let mut backend_filters = Vec::with_capacity(b.filters.len());
            let mut backend_broken = false;
            for f in &b.filters {
                match filter(f, route, backends, client_certificate, &mut out, outcome) {
                    Ok(Some(f)) => backend_filters.push(f),
                    Ok(None) => {}
                    Err(FilterError::Unresolved(p)) => {
                        outcome.unresolved.get_or_insert(p);
                        backend_broken = true;
                    }
                }
            }
            let backend = resolve(route, b, backends, client_certificate, &mut out, outcome);
            weighted.push(WeightedBackend {
                backend: backend.filter(|_| !backend_broken),
                weight: b.weight.max(0) as u32,
                filters: if backend_broken { Vec::new() } else { backend_filters },
            });
        }
        if broken {
            // No filters and no backends: every request of the rule answers 500.
            filters.clear();
            weighted.clear();
        }
        // One entry per match: copies for all but the last, which takes the rule's parts.
        let grpc = route.kind == RouteKind::Grpc;
        let protected = (policies.security).for_rule(route.kind.name(), route.namespace, route.name, rule.name);
        let traffic = (policies.traffic).for_rule(route.kind.name(), route.namespace, route.name, rule.name);
        let mut matches = parts.matches;
        let Some(last) = matches.pop() else { continue };
        out.rules.reserve(matches.len() + 1);
        for m in matches {
            out.rules.push(Arc::new(HttpRule {
                route: route_ref.clone(),
                grpc,
                matcher: m,
                filters: filters.clone(),
                backends: weighted.clone(),
                timeouts: parts.timeouts.clone(),
                retry: parts.retry.clone(),
                session_persistence: session_persistence.clone(),
                security: protected.clone(),
                traffic: traffic.clone(),
            }));
        }
        out.rules.push(Arc::new(HttpRule {
            route: route_ref,
            grpc,
            matcher: last,
            filters,
            backends: weighted,
            timeouts: parts.timeouts,
            retry: parts.retry,
            session_persistence,
            security: protected,
            traffic,
        }));
    }
    if let Some((_, first)) = dropped.first() {
        if dropped.len() == route.rules().len() {
            // Fully invalid: not accepted, and PartiallyInvalid is not set.
            outcome.not_accepted.get_or_insert(first.clone());
        } else if outcome.partially_invalid.is_none() {
            // The spec requires the "Dropped Rule" prefix and which rules were dropped.
            outcome.partially_invalid = Some(rules_problem("Dropped Rule(s)", &dropped));
        }
    }
    // Some rules fail closed for an unresolvable ExternalAuth server while others serve: the
    // route is partially invalid (the upstream ExternalAuth conformance tests proposed in
    // kubernetes-sigs/gateway-api#5113 expect it), though those rules are kept, answering 500,
    // rather than dropped (dropping one could let a less specific rule serve it unprotected).
    if !closed.is_empty() && closed.len() < route.rules().len() && outcome.partially_invalid.is_none() {
        outcome.partially_invalid = Some(rules_problem(
            "Rule(s) failing closed (500) until their ExternalAuth server resolves",
            &closed,
        ));
    }
    out
}

/// One problem for some rules of a route, `rules` non-empty: the first's reason, and a message
/// naming each rule with its own message after `what`.
fn rules_problem(what: &str, rules: &[(String, Problem)]) -> Problem {
    let which: Vec<String> = rules
        .iter()
        .map(|(rule, p)| format!("{rule} ({})", p.message))
        .collect();
    Problem::new(rules[0].1.reason, format!("{what}: {}", which.join(", ")))
}

/// Resolves a backendRef, recording the backend and any problem. `None` for an invalid ref.
pub fn resolve(
    route: &RouteModel<'_>,
    b: &BackendRef<'_>,
    backends: &Backends<'_>,
    client_certificate: Option<&str>,
    out: &mut Compiled,
    outcome: &mut RouteOutcome,
) -> Option<SmolStr> {
    let tls = matches!(route.kind, RouteKind::Http | RouteKind::Grpc);
    match backends.resolve(route.kind, route.namespace, b, tls, client_certificate) {
        Ok(resolved) => {
            let id = resolved.backend.id.clone();
            out.policies.extend(resolved.policies);
            out.backends.push(resolved.backend);
            Some(id)
        }
        Err(p) => {
            outcome.unresolved.get_or_insert(p);
            None
        }
    }
}

/// Whether any of `filters` rewrites or redirects with `ReplacePrefixMatch`.
fn parts_replace_prefix(filters: &[HttpRouteRulesFilters]) -> bool {
    filters.iter().any(|f| {
        f.request_redirect
            .as_ref()
            .and_then(|r| r.path.as_ref())
            .is_some_and(|p| p.r#type == RedirectPath::ReplacePrefixMatch)
            || f.url_rewrite
                .as_ref()
                .and_then(|r| r.path.as_ref())
                .is_some_and(|p| p.r#type == RewritePath::ReplacePrefixMatch)
    })
}

struct Parts<'r> {
    /// Usually one: stored inline.
    matches: SmallVec<[HttpMatch; 1]>,
    /// The rule's own filters (HTTPRoute), or converted to their shape (GRPCRoute).
    filters: Cow<'r, [HttpRouteRulesFilters]>,
    timeouts: Timeouts,
    retry: Option<Retry>,
    /// The rule's `sessionPersistence` as the typed route has it (its v1.7 fields are in the
    /// snapshot: [`RouteModel::session_persistence`]).
    session_persistence: Option<SessionPersistenceTyped>,
}

/// The typed `sessionPersistence` of an HTTPRoute or GRPCRoute rule, as JSON.
type SessionPersistenceTyped = serde_json::Value;

/// A header (`header`) or query parameter match.
fn value_match(name: &str, value: &str, regex: bool, header: bool, regexes: &Regexes) -> Result<ValueMatch, Problem> {
    if regex {
        regexes.check(value)?;
    }
    if header {
        value::header_name(name)?;
    }
    let lower = header;
    Ok(ValueMatch {
        name: if lower {
            SmolStr::from(name.to_ascii_lowercase())
        } else {
            SmolStr::new(name)
        },
        kind: if regex {
            ValueMatchKind::RegularExpression
        } else {
            ValueMatchKind::Exact
        },
        value: SmolStr::new(value),
    })
}

fn http_parts<'r>(rule: &'r HttpRouteRules, regexes: &Regexes) -> Result<Parts<'r>, Problem> {
    let mut matches = SmallVec::new();
    for m in rule.matches.iter().flatten() {
        let path = match &m.path {
            None => PathMatch::Prefix("/".into()),
            Some(p) => {
                let value = p.value.as_deref().unwrap_or("/");
                match p.r#type {
                    Some(PathType::Exact) => {
                        value::path(value)?;
                        PathMatch::Exact(value.into())
                    }
                    Some(PathType::RegularExpression) => {
                        regexes.check(value)?;
                        PathMatch::RegularExpression(value.into())
                    }
                    Some(PathType::PathPrefix) | None => {
                        value::path(value)?;
                        let trimmed = value.trim_end_matches('/');
                        PathMatch::Prefix(if trimmed.is_empty() { "/".into() } else { trimmed.into() })
                    }
                }
            }
        };
        let headers = m
            .headers
            .iter()
            .flatten()
            .map(|h| {
                value_match(
                    &h.name,
                    &h.value,
                    matches!(h.r#type, Some(HeaderType::RegularExpression)),
                    true,
                    regexes,
                )
            })
            .collect::<Result<_, _>>()?;
        let query_params = m
            .query_params
            .iter()
            .flatten()
            .map(|q| {
                value_match(
                    &q.name,
                    &q.value,
                    matches!(q.r#type, Some(QueryType::RegularExpression)),
                    false,
                    regexes,
                )
            })
            .collect::<Result<_, _>>()?;
        let method = m.method.as_ref().map(|m| SmolStr::new_static(method_name(m)));
        matches.push(HttpMatch {
            path,
            method,
            headers,
            query_params,
        });
    }
    if matches.is_empty() {
        matches.push(HttpMatch::default());
    }
    let filters = Cow::Borrowed(rule.filters.as_deref().unwrap_or_default());
    let has = |t: FilterType| filters.iter().any(|f| f.r#type == t);
    if has(FilterType::RequestRedirect) && has(FilterType::UrlRewrite) {
        return Err(Problem::new(
            reason::INCOMPATIBLE_FILTERS,
            "RequestRedirect and URLRewrite cannot be combined",
        ));
    }
    let timeouts = rule
        .timeouts
        .as_ref()
        .map(|t| -> Result<Timeouts, Problem> {
            let parse = |d: &Option<String>| -> Result<Option<u64>, Problem> {
                match d {
                    None => Ok(None),
                    Some(s) => match duration::parse_ms(s) {
                        Some(0) => Ok(None),
                        Some(ms) => Ok(Some(ms)),
                        None => Err(Problem::new(
                            reason::UNSUPPORTED_VALUE,
                            format!("Invalid duration {s:?}"),
                        )),
                    },
                }
            };
            let t = Timeouts {
                request_ms: parse(&t.request)?,
                backend_request_ms: parse(&t.backend_request)?,
            };
            if let (Some(r), Some(b)) = (t.request_ms, t.backend_request_ms)
                && b > r
            {
                return Err(Problem::new(
                    reason::UNSUPPORTED_VALUE,
                    "backendRequest timeout exceeds the request timeout",
                ));
            }
            Ok(t)
        })
        .transpose()?
        .unwrap_or_default();
    let retry = match &rule.retry {
        None => None,
        Some(r) => {
            let backoff_ms =
                match &r.backoff {
                    None => None,
                    Some(b) => Some(duration::parse_ms(b).ok_or_else(|| {
                        Problem::new(reason::UNSUPPORTED_VALUE, format!("Invalid retry backoff {b:?}"))
                    })?),
                };
            let mut codes: Vec<u16> = r
                .codes
                .iter()
                .flatten()
                .filter_map(|c| u16::try_from(*c).ok())
                .collect();
            if codes.is_empty() {
                codes = vec![502, 503, 504];
            }
            Some(Retry {
                codes,
                attempts: r.attempts.unwrap_or(1).clamp(0, 100) as u32,
                backoff_ms,
            })
        }
    };
    Ok(Parts {
        matches,
        filters,
        timeouts,
        retry,
        session_persistence: rule
            .session_persistence
            .as_ref()
            .and_then(|s| serde_json::to_value(s).ok()),
    })
}

/// The method as the API spells it.
fn method_name(m: &HttpMethod) -> &'static str {
    match m {
        HttpMethod::Get => "GET",
        HttpMethod::Head => "HEAD",
        HttpMethod::Post => "POST",
        HttpMethod::Put => "PUT",
        HttpMethod::Delete => "DELETE",
        HttpMethod::Connect => "CONNECT",
        HttpMethod::Options => "OPTIONS",
        HttpMethod::Trace => "TRACE",
        HttpMethod::Patch => "PATCH",
    }
}

fn grpc_parts(rule: &GrpcRouteRules, regexes: &Regexes) -> Result<Parts<'static>, Problem> {
    let mut matches = SmallVec::new();
    for m in rule.matches.iter().flatten() {
        let path = match &m.method {
            None => PathMatch::Prefix("/".into()),
            Some(method) => {
                let regex = matches!(method.r#type, Some(GrpcRouteRulesMatchesMethodType::RegularExpression));
                match (method.service.as_deref(), method.method.as_deref(), regex) {
                    (Some(s), Some(me), false) => PathMatch::Exact(format_smolstr!("/{s}/{me}")),
                    (Some(s), None, false) => PathMatch::Prefix(format_smolstr!("/{s}")),
                    (None, Some(me), false) => {
                        PathMatch::RegularExpression(format_smolstr!("/[^/]+/{}", regex::escape(me)))
                    }
                    (None, None, _) => PathMatch::Prefix("/".into()),
                    (s, me, true) => {
                        let s = s.unwrap_or("[^/]+");
                        let me = me.unwrap_or("[^/]+");
                        // Each part alone first: its error names it.
                        regexes.check(s)?;
                        regexes.check(me)?;
                        PathMatch::RegularExpression(format_smolstr!("/(?:{s})/(?:{me})"))
                    }
                }
            }
        };
        if let PathMatch::RegularExpression(pattern) = &path {
            // As the proxy compiles it: the parts may fit its limits while the whole does not.
            regexes.check(pattern)?;
        }
        let headers = m
            .headers
            .iter()
            .flatten()
            .map(|h| {
                value_match(
                    &h.name,
                    &h.value,
                    matches!(h.r#type, Some(GrpcRouteRulesMatchesHeadersType::RegularExpression)),
                    true,
                    regexes,
                )
            })
            .collect::<Result<_, _>>()?;
        matches.push(HttpMatch {
            path,
            method: None,
            headers,
            query_params: Vec::new(),
        });
    }
    if matches.is_empty() {
        matches.push(HttpMatch::default());
    }
    let filters = Cow::Owned(
        rule.filters
            .iter()
            .flatten()
            .filter_map(crate::object::recast)
            .collect(),
    );
    Ok(Parts {
        matches,
        filters,
        timeouts: Timeouts::default(),
        retry: None,
        session_persistence: rule
            .session_persistence
            .as_ref()
            .and_then(|s| serde_json::to_value(s).ok()),
    })
}

/// The `name`/`value` pairs of a header modifier list (each list has its own generated type).
macro_rules! pairs {
    ($items:expr) => {
        $items
            .iter()
            .flatten()
            .map(|h| (SmolStr::new(&h.name), SmolStr::new(&h.value)))
            .collect::<Vec<(SmolStr, SmolStr)>>()
    };
}

/// Why a filter cannot be applied.
enum FilterError {
    /// The filter references something unknown or unusable: its requests answer 500.
    Unresolved(Problem),
}

/// One filter to its IR form. `Ok(None)` for filters without effect.
fn filter(
    f: &HttpRouteRulesFilters,
    route: &RouteModel<'_>,
    backends: &Backends<'_>,
    client_certificate: Option<&str>,
    out: &mut Compiled,
    outcome: &mut RouteOutcome,
) -> Result<Option<Filter>, FilterError> {
    Ok(Some(match f.r#type {
        FilterType::RequestHeaderModifier => {
            let Some(m) = &f.request_header_modifier else {
                return Ok(None);
            };
            Filter::RequestHeaderModifier(HeaderModifier {
                set: pairs!(m.set),
                add: pairs!(m.add),
                remove: m.remove.iter().flatten().map(SmolStr::new).collect(),
            })
        }
        FilterType::ResponseHeaderModifier => {
            let Some(m) = &f.response_header_modifier else {
                return Ok(None);
            };
            Filter::ResponseHeaderModifier(HeaderModifier {
                set: pairs!(m.set),
                add: pairs!(m.add),
                remove: m.remove.iter().flatten().map(SmolStr::new).collect(),
            })
        }
        FilterType::RequestRedirect => {
            let Some(r) = &f.request_redirect else { return Ok(None) };
            let path = r.path.as_ref().and_then(|p| match p.r#type {
                RedirectPath::ReplaceFullPath => p.replace_full_path.clone().map(PathModifier::ReplaceFullPath),
                RedirectPath::ReplacePrefixMatch => {
                    p.replace_prefix_match.clone().map(PathModifier::ReplacePrefixMatch)
                }
            });
            Filter::RequestRedirect(Redirect {
                scheme: r.scheme.as_ref().map(|s| match s {
                    Scheme::Http => "http".to_string(),
                    Scheme::Https => "https".to_string(),
                }),
                hostname: r.hostname.clone(),
                path,
                port: r.port.and_then(|p| u16::try_from(p).ok()),
                status_code: r.status_code.and_then(|c| u16::try_from(c).ok()).unwrap_or(302),
            })
        }
        FilterType::UrlRewrite => {
            let Some(r) = &f.url_rewrite else { return Ok(None) };
            let path = r.path.as_ref().and_then(|p| match p.r#type {
                RewritePath::ReplaceFullPath => p.replace_full_path.clone().map(PathModifier::ReplaceFullPath),
                RewritePath::ReplacePrefixMatch => p.replace_prefix_match.clone().map(PathModifier::ReplacePrefixMatch),
            });
            Filter::UrlRewrite(UrlRewrite {
                hostname: r.hostname.clone(),
                path,
            })
        }
        FilterType::RequestMirror => {
            let Some(m) = &f.request_mirror else { return Ok(None) };
            let b = &m.backend_ref;
            let backend_ref = filter_backend_ref!(b);
            let backend = resolve(route, &backend_ref, backends, client_certificate, out, outcome);
            let (numerator, denominator) = match (&m.fraction, m.percent) {
                (Some(fr), _) => (fr.numerator.max(0) as u32, fr.denominator.unwrap_or(100).max(1) as u32),
                (None, Some(p)) => (p.clamp(0, 100) as u32, 100),
                (None, None) => (100, 100),
            };
            Filter::RequestMirror(Mirror {
                backend,
                numerator,
                denominator,
            })
        }
        FilterType::Cors => {
            let Some(c) = &f.cors else { return Ok(None) };
            Filter::Cors(Cors {
                allow_origins: c.allow_origins.clone().unwrap_or_default(),
                allow_methods: c.allow_methods.clone().unwrap_or_default(),
                allow_headers: c.allow_headers.clone().unwrap_or_default(),
                expose_headers: c.expose_headers.clone().unwrap_or_default(),
                max_age: c.max_age.and_then(|a| u32::try_from(a).ok()),
                allow_credentials: c.allow_credentials.unwrap_or(false),
            })
        }
        FilterType::ExtensionRef => {
            let target = f
                .extension_ref
                .as_ref()
                .map(|e| format!("{}/{} {}", e.group, e.kind, e.name))
                .unwrap_or_default();
            return Err(FilterError::Unresolved(Problem::new(
                reason::INVALID_KIND,
                format!("ExtensionRef filter {target} is not a kind Turna knows; its requests answer 500"),
            )));
        }
        FilterType::ExternalAuth => {
            let Some(a) = &f.external_auth else { return Ok(None) };
            Filter::ExternalAuth(route_external_auth(a, route, backends, client_certificate, out)?)
        }
    }))
}

/// An `ExternalAuth` filter of a route rule; a server that cannot be reached fails the rule's
/// requests closed (500), never open.
fn route_external_auth(
    a: &HttpRouteRulesFiltersExternalAuth,
    route: &RouteModel<'_>,
    backends: &Backends<'_>,
    client_certificate: Option<&str>,
    out: &mut Compiled,
) -> Result<ExternalAuth, FilterError> {
    let (auth, resolved) = external_auth(a, |r| {
        backends.resolve(route.kind, route.namespace, r, true, client_certificate)
    })
    .map_err(FilterError::Unresolved)?;
    out.policies.extend(resolved.policies);
    out.backends.push(resolved.backend);
    Ok(auth)
}

/// An `ExternalAuth` filter, of a route rule or of a listener (`filters.requests`), with the
/// server backend `resolve` gives: each referrer resolves the backendRef as itself (its
/// namespace, and its kind for ReferenceGrants). The server is a backend like any other
/// (endpoints, BackendTLSPolicy); a gRPC server is spoken to over HTTP/2 whatever its port
/// declares, so the returned backend may be a copy of the resolved one.
pub fn external_auth(
    a: &HttpRouteRulesFiltersExternalAuth,
    resolve: impl FnOnce(&BackendRef<'_>) -> Result<Resolved, Problem>,
) -> Result<(ExternalAuth, Resolved), Problem> {
    let b = &a.backend_ref;
    let backend_ref = filter_backend_ref!(b);
    let protocol = match a.protocol {
        AuthProtocolSpec::Http => AuthProtocol::Http,
        AuthProtocolSpec::Grpc => AuthProtocol::Grpc,
    };
    let mut resolved = resolve(&backend_ref)?;
    if protocol == AuthProtocol::Grpc && resolved.backend.protocol != AppProtocol::H2c {
        let mut grpc = Backend::clone(&resolved.backend);
        grpc.protocol = AppProtocol::H2c;
        grpc.id = format_smolstr!("{}/grpc", grpc.id);
        resolved.backend = Arc::new(grpc);
    }
    let lower = |names: Option<&Vec<String>>| -> Vec<SmolStr> {
        names
            .into_iter()
            .flatten()
            .map(|n| SmolStr::new(n.to_ascii_lowercase()))
            .collect()
    };
    let http = a.http.as_ref().filter(|_| protocol == AuthProtocol::Http);
    let auth = ExternalAuth {
        protocol,
        backend: Some(resolved.backend.id.clone()),
        path: http
            .and_then(|h| h.path.as_deref())
            .map(SmolStr::new)
            .unwrap_or_default(),
        allowed_headers: match protocol {
            AuthProtocol::Http => lower(http.and_then(|h| h.allowed_headers.as_ref())),
            AuthProtocol::Grpc => lower(a.grpc.as_ref().and_then(|g| g.allowed_headers.as_ref())),
        },
        allowed_response_headers: lower(http.and_then(|h| h.allowed_response_headers.as_ref())),
        // Bounded by the value checks (value::MAX_FORWARD_BODY).
        forward_body: a
            .forward_body
            .as_ref()
            .and_then(|b| b.max_size)
            .and_then(|s| u32::try_from(s).ok())
            .unwrap_or(0),
    };
    Ok((auth, resolved))
}
