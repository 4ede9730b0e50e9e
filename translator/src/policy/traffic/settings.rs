//! A TurnaTrafficPolicy's spec checked and turned into [`ir::Traffic`]: units, bursts, keys,
//! durations, compression algorithms and media types, error statuses and bodies; the rate
//! limit service resolves like a policy's backend (ReferenceGrant, BackendTLSPolicy) and is
//! spoken to over gRPC.

use super::api::{self, TurnaTrafficPolicy};
use super::{KIND, Model};
use crate::backend::Backends;
use crate::duration;
use crate::gateway::Problem;
use crate::ir::traffic::{self as t, RateKey};
use crate::ir::{self, SmolStr};
use crate::object::Meta;
use crate::reference_grant::From;
use crate::route::model::BackendRef;
use crate::status::condition::reason;

/// The media types compressed when a policy names none.
pub const DEFAULT_CONTENT_TYPES: [&str; 11] = [
    "text/*",
    "application/json",
    "application/javascript",
    "application/xml",
    "application/xhtml+xml",
    "application/rss+xml",
    "application/atom+xml",
    "application/ld+json",
    "application/wasm",
    "image/svg+xml",
    "application/grpc-web+proto",
];

/// The largest error response body.
const MAX_ERROR_BODY: usize = 64 << 10;

fn invalid(message: impl Into<String>) -> Problem {
    Problem::new(reason::INVALID, message)
}

/// Reads `policy`.
pub(super) fn model<'a>(policy: &'a TurnaTrafficPolicy, id: SmolStr, backends: &Backends<'_>) -> Model<'a> {
    let spec = &policy.spec;
    let mut used = Vec::new();
    let mut uses = Vec::new();
    let has_refs = spec.rate_limit.as_ref().is_some_and(|r| r.global.is_some());
    let read = (|| -> Result<ir::Traffic, (bool, Problem)> {
        let bad = |p: Problem| (false, p);
        let nothing = spec
            .rate_limit
            .as_ref()
            .is_none_or(|r| r.local.is_none() && r.global.is_none())
            && spec.max_request_body_bytes.is_none()
            && spec.compression.is_none()
            && spec.error_responses.is_empty();
        if nothing {
            return Err(bad(invalid(
                "The policy sets nothing: set rateLimit, maxRequestBodyBytes, compression or errorResponses",
            )));
        }
        let local = spec
            .rate_limit
            .as_ref()
            .and_then(|r| r.local.as_ref())
            .map(local_limit)
            .transpose()
            .map_err(bad)?;
        let compression = spec.compression.as_ref().map(compression).transpose().map_err(bad)?;
        let error_responses = spec
            .error_responses
            .iter()
            .map(error_response)
            .collect::<Result<Vec<_>, _>>()
            .map_err(bad)?;
        let global = match spec.rate_limit.as_ref().and_then(|r| r.global.as_ref()) {
            None => None,
            Some(g) => {
                let mut global = global_limit(g).map_err(bad)?;
                let reference = BackendRef {
                    group: g.backend_ref.group.as_deref().unwrap_or_default(),
                    kind: g.backend_ref.kind.as_deref().unwrap_or("Service"),
                    namespace: g.backend_ref.namespace.as_deref(),
                    name: &g.backend_ref.name,
                    port: g.backend_ref.port,
                    weight: 1,
                    filters: Vec::new(),
                };
                let from = From {
                    group: crate::parameters::GROUP,
                    kind: KIND,
                    namespace: policy.namespace(),
                };
                match backends.resolve_for_policy(from, &reference) {
                    Ok(resolved) => {
                        // The service speaks gRPC whatever its port says.
                        let mut backend = ir::Backend::clone(&resolved.backend);
                        if backend.protocol != ir::AppProtocol::H2c {
                            backend.protocol = ir::AppProtocol::H2c;
                            backend.id = SmolStr::new(format!("{}/grpc", backend.id));
                        }
                        global.backend = Some(backend.id.clone());
                        used.push(std::sync::Arc::new(backend));
                        uses.extend(resolved.policies);
                    }
                    Err(problem) => {
                        return Err((
                            true,
                            Problem::new(
                                problem.reason,
                                format!("rateLimit.global.backendRef: {}", problem.message),
                            ),
                        ));
                    }
                }
                Some(global)
            }
        };
        Ok(ir::Traffic {
            policy: backends
                .snapshot()
                .facts
                .ir_name("TurnaTrafficPolicy", policy.namespace(), policy.name()),
            local_rate_limit: local,
            global_rate_limit: global,
            max_request_body: spec.max_request_body_bytes,
            compression,
            error_responses,
            invalid: None,
        })
    })();
    let (settings, not_accepted, unresolved) = match read {
        Ok(traffic) => (traffic, None, None),
        Err((reference, problem)) => {
            let traffic = ir::Traffic {
                policy: backends
                    .snapshot()
                    .facts
                    .ir_name("TurnaTrafficPolicy", policy.namespace(), policy.name()),
                invalid: Some(problem.message.clone()),
                ..ir::Traffic::default()
            };
            used.clear();
            uses.clear();
            if reference {
                (traffic, None, Some(problem))
            } else {
                (traffic, Some(problem), None)
            }
        }
    };
    Model {
        policy,
        id,
        settings,
        backends: used,
        uses,
        not_accepted,
        unresolved,
        has_refs,
    }
}

fn key(k: Option<&api::RateLimitKey>, field: &str) -> Result<RateKey, Problem> {
    let Some(k) = k else { return Ok(RateKey::None) };
    let name = || {
        k.name
            .as_deref()
            .filter(|n| !n.is_empty())
            .ok_or_else(|| invalid(format!("{field}: type {} needs a name", k.kind)))
    };
    Ok(match k.kind.as_str() {
        "None" => RateKey::None,
        "ClientAddress" => RateKey::ClientAddress,
        "Header" => {
            let name = name()?.to_ascii_lowercase();
            if http_token(&name) {
                RateKey::Header { name: name.into() }
            } else {
                return Err(invalid(format!("{field}: {name:?} is not a header name")));
            }
        }
        "JWTClaim" => RateKey::JwtClaim {
            name: name()?.to_string(),
        },
        "APIKey" => RateKey::ApiKey,
        other => {
            return Err(invalid(format!(
                "{field}: type {other:?} is not None, ClientAddress, Header, JWTClaim or APIKey"
            )));
        }
    })
}

fn http_token(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

fn local_limit(l: &api::LocalRateLimit) -> Result<t::LocalRateLimit, Problem> {
    let interval_ms = match l.unit.as_str() {
        "Second" => 1_000,
        "Minute" => 60_000,
        "Hour" => 3_600_000,
        other => {
            return Err(invalid(format!(
                "rateLimit.local.unit {other:?} is not Second, Minute or Hour"
            )));
        }
    };
    if l.requests == 0 || l.burst == Some(0) {
        return Err(invalid("rateLimit.local: requests and burst must be at least 1"));
    }
    Ok(t::LocalRateLimit {
        requests: l.requests,
        interval_ms,
        burst: l.burst.unwrap_or(l.requests),
        key: key(l.key.as_ref(), "rateLimit.local.key")?,
    })
}

fn global_limit(g: &api::GlobalRateLimit) -> Result<t::GlobalRateLimit, Problem> {
    if g.domain.is_empty() {
        return Err(invalid("rateLimit.global.domain must not be empty"));
    }
    let fail_open = match g.failure_mode.as_deref() {
        None | Some("Allow") => true,
        Some("Deny") => false,
        Some(other) => {
            return Err(invalid(format!(
                "rateLimit.global.failureMode {other:?} is not Allow or Deny"
            )));
        }
    };
    let timeout_ms = match &g.timeout {
        None => 100,
        Some(text) => match duration::parse_ms(text) {
            Some(ms) if (1..=10_000).contains(&ms) => ms,
            _ => {
                return Err(invalid(format!(
                    "rateLimit.global.timeout {text:?} is not a duration from 1ms to 10s"
                )));
            }
        },
    };
    if g.descriptor.is_empty() {
        return Err(invalid("rateLimit.global.descriptor needs at least one entry"));
    }
    let entries = g
        .descriptor
        .iter()
        .map(|e| {
            if e.key.is_empty() {
                return Err(invalid("rateLimit.global.descriptor: every entry needs a key"));
            }
            match (&e.value, &e.value_from) {
                (Some(v), None) => Ok(t::DescriptorEntry {
                    key: e.key.clone(),
                    value: Some(v.clone()),
                    value_from: None,
                }),
                (None, Some(from)) => Ok(t::DescriptorEntry {
                    key: e.key.clone(),
                    value: None,
                    value_from: Some(key(Some(from), "rateLimit.global.descriptor.valueFrom")?),
                }),
                _ => Err(invalid(format!(
                    "rateLimit.global.descriptor entry {:?}: set exactly one of value and valueFrom",
                    e.key
                ))),
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(t::GlobalRateLimit {
        backend: None,
        domain: g.domain.clone(),
        entries,
        fail_open,
        timeout_ms,
    })
}

fn compression(c: &api::Compression) -> Result<t::Compression, Problem> {
    let algorithms: Vec<SmolStr> = if c.algorithms.is_empty() {
        ["zstd", "br", "gzip"].into_iter().map(SmolStr::new_static).collect()
    } else {
        let mut seen = Vec::new();
        for a in &c.algorithms {
            if !matches!(a.as_str(), "zstd" | "br" | "gzip") {
                return Err(invalid(format!(
                    "compression.algorithms: {a:?} is not zstd, br or gzip"
                )));
            }
            if !seen.iter().any(|s: &SmolStr| s == a) {
                seen.push(SmolStr::new(a));
            }
        }
        seen
    };
    let content_types = if c.content_types.is_empty() {
        DEFAULT_CONTENT_TYPES.iter().map(|s| s.to_string()).collect()
    } else {
        c.content_types
            .iter()
            .map(|m| {
                let m = m.trim().to_ascii_lowercase();
                match m.split_once('/') {
                    Some((a, b)) if http_token(a) && (b == "*" || http_token(b)) => Ok(m),
                    _ => Err(invalid(format!("compression.contentTypes: {m:?} is not a media type"))),
                }
            })
            .collect::<Result<Vec<_>, _>>()?
    };
    Ok(t::Compression {
        algorithms,
        min_size: c.min_size.unwrap_or(1024),
        content_types,
    })
}

fn error_response(e: &api::ErrorResponse) -> Result<t::ErrorResponse, Problem> {
    if e.status_codes.is_empty() || e.status_codes.iter().any(|s| !(400..=599).contains(s)) {
        return Err(invalid("errorResponses: statusCodes must be 400 to 599"));
    }
    if e.body.len() > MAX_ERROR_BODY {
        return Err(invalid("errorResponses: a body is at most 64 KiB"));
    }
    let content_type = e
        .content_type
        .clone()
        .unwrap_or_else(|| "text/plain; charset=utf-8".into());
    // A header value: visible ASCII and spaces.
    if content_type.is_empty()
        || !content_type
            .bytes()
            .all(|b| b == b' ' || b == b'\t' || (0x21..0x7f).contains(&b))
    {
        return Err(invalid(format!(
            "errorResponses: {content_type:?} is not a content type"
        )));
    }
    Ok(t::ErrorResponse {
        statuses: e.status_codes.clone(),
        body: e.body.clone(),
        content_type,
    })
}
