//! XTelemetryPolicy (GEP-4768): which Gateways are traced, where their spans go, how they are
//! sampled, and the policy's status per Gateway.
//!
//! One policy applies to a Gateway: among policies targeting the same Gateway the older wins
//! (then the first by `namespace/name`), the others are Accepted=False with reason Conflicted
//! for that Gateway. Turna's default (`ImplementationDefault`) is no tracing: the proxy passes
//! trace context through untouched. An Enabled policy whose receiver cannot be resolved is
//! ResolvedRefs=False and traces nothing until it can.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::api::XTelemetryPolicy;
use crate::api::telemetry::{Fraction, TracingConfig};
use crate::backend::{Backends, Resolved};
use crate::config::Config;
use crate::gateway::{GatewayModel, Problem};
use crate::ir::{self, AttributeSource, OtlpProtocol, SpanAttribute, Tracing};
use crate::object::{GROUP, Meta, X_GROUP};
use crate::reference_grant::From;
use crate::route::model::BackendRef;
use crate::snapshot::Snapshot;
use crate::status::{Condition, PolicyAncestorStatus, PolicyStatus, condition::kind, condition::reason};

use super::backend_tls::MAX_ANCESTORS;

/// The standard attributes of a request span that an `Attribute` source may name.
pub const SPAN_ATTRIBUTES: [&str; 12] = [
    "http.request.method",
    "http.response.status_code",
    "http.route",
    "url.path",
    "url.query",
    "url.scheme",
    "server.address",
    "client.address",
    "client.port",
    "network.protocol.version",
    "user_agent.original",
    "error.type",
];

/// What the policies decide: the tracing of each Gateway and the policies' statuses.
#[derive(Debug, Default)]
pub struct Telemetry {
    /// By Gateway `namespace/name`: its tracing and the receiver backend.
    pub gateways: BTreeMap<String, (Tracing, Arc<ir::Backend>)>,
    pub statuses: Vec<PolicyStatus>,
}

/// A policy once read: its tracing, or why it cannot be used.
struct Decision {
    tracing: Option<(Tracing, Arc<ir::Backend>)>,
    not_accepted: Option<Problem>,
    unresolved: Option<Problem>,
    /// Whether a provider was named (ResolvedRefs is reported only then).
    has_provider: bool,
}

/// Applies the policies to `gateways` (Turna's, accepted or not).
pub fn apply(snapshot: &Snapshot, config: &Config, gateways: &[GatewayModel<'_>], backends: &Backends) -> Telemetry {
    if snapshot.telemetry_policies.is_empty() || !snapshot.facts.installed("XTelemetryPolicy") {
        return Telemetry::default();
    }
    let policies = super::oldest_first(&snapshot.telemetry_policies, config);
    let ours: BTreeMap<(&str, &str), &GatewayModel<'_>> = gateways
        .iter()
        .map(|g| ((g.namespace.as_str(), g.name.as_str()), g))
        .collect();
    let mut out = Telemetry::default();
    for policy in policies {
        let ns = policy.namespace();
        // The Gateways of ours it targets, each once.
        let mut targets: Vec<&GatewayModel<'_>> = Vec::new();
        for t in &policy.spec.target_refs {
            if t.group != GROUP || t.kind != "Gateway" {
                continue;
            }
            if let Some(gw) = ours.get(&(ns, t.name.as_str()))
                && !targets.iter().any(|g| g.name == gw.name)
            {
                targets.push(gw);
            }
        }
        if targets.is_empty() {
            continue;
        }
        let decision = decide(policy, backends);
        let g = policy.generation();
        let mut ancestors = Vec::new();
        for gw in targets.into_iter().take(MAX_ANCESTORS) {
            let key = gw.key();
            // Policies come oldest first: a Gateway an older accepted policy has is taken.
            let taken = claimed(&out.statuses, gw);
            let accepted = if taken {
                Condition::new(
                    kind::ACCEPTED,
                    false,
                    reason::CONFLICTED,
                    "An older XTelemetryPolicy targets this Gateway",
                    g,
                )
            } else {
                super::accepted(decision.not_accepted.as_ref(), g)
            };
            let mut conditions = vec![accepted];
            if decision.has_provider {
                conditions.push(super::resolved_refs(decision.unresolved.as_ref(), g));
            }
            if !taken && let Some((tracing, backend)) = &decision.tracing {
                // The policy's serviceName, else the Gateway's `name.namespace`.
                let service_name = (policy.spec.tracing.as_ref())
                    .and_then(|t| t.service_name.clone())
                    .unwrap_or_else(|| format!("{}.{}", gw.name, gw.namespace));
                let tracing = Tracing {
                    service_name,
                    ..tracing.clone()
                };
                out.gateways.insert(key, (tracing, backend.clone()));
            }
            ancestors.push(PolicyAncestorStatus {
                ancestor_ref: super::gateway_ancestor(&gw.namespace, &gw.name),
                controller_name: config.controller_name.clone(),
                conditions,
            });
        }
        out.statuses.push(PolicyStatus {
            namespace: ns.into(),
            name: policy.name().into(),
            ancestors,
        });
    }
    out.statuses
        .sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    out
}

/// Whether an older policy is accepted for `gw` (traced or not): an invalid policy takes no
/// Gateway from a valid one.
fn claimed(statuses: &[PolicyStatus], gw: &GatewayModel<'_>) -> bool {
    statuses.iter().any(|s| {
        s.ancestors.iter().any(|a| {
            a.ancestor_ref.namespace == gw.namespace.as_str()
                && a.ancestor_ref.name == gw.name.as_str()
                && a.conditions.first().is_some_and(Condition::is_true)
        })
    })
}

/// Reads a policy: what it asks, and whether it can be done.
fn decide(policy: &XTelemetryPolicy, backends: &Backends) -> Decision {
    let mut decision = Decision {
        tracing: None,
        not_accepted: None,
        unresolved: None,
        has_provider: false,
    };
    let Some(config) = &policy.spec.tracing else {
        return decision;
    };
    decision.has_provider = config.provider.is_some();
    match config.mode.as_deref().unwrap_or("ImplementationDefault") {
        "Enabled" => {}
        "Disabled" | "ImplementationDefault" => {
            if config.provider.is_some() {
                decision.not_accepted = Some(Problem::new(
                    reason::INVALID,
                    "tracing.provider may be set only when tracing.mode is Enabled",
                ));
            }
            return decision;
        }
        other => {
            decision.not_accepted = Some(Problem::new(
                reason::INVALID,
                format!("tracing.mode {other:?} is not Enabled, Disabled or ImplementationDefault"),
            ));
            return decision;
        }
    }
    let Some(provider) = &config.provider else {
        decision.not_accepted = Some(Problem::new(
            reason::INVALID,
            "tracing.provider is required when tracing.mode is Enabled",
        ));
        return decision;
    };
    let r = &provider.backend_ref;
    let reference = BackendRef {
        group: r.group.as_deref().unwrap_or_default(),
        kind: r.kind.as_deref().unwrap_or("Service"),
        namespace: r.namespace.as_deref(),
        name: &r.name,
        port: r.port,
        weight: 1,
        filters: Vec::new(),
    };
    let from = From {
        group: X_GROUP,
        kind: "XTelemetryPolicy",
        namespace: policy.namespace(),
    };
    let resolved = backends.resolve_for_policy(from, &reference);
    let tracing = match settings(policy, config, backends.snapshot()) {
        Ok(tracing) => tracing,
        Err(problem) => {
            decision.not_accepted = Some(problem);
            decision.unresolved = resolved.err();
            return decision;
        }
    };
    match resolved {
        Ok(Resolved { backend, .. }) => {
            let protocol = match backend.protocol {
                ir::AppProtocol::H2c => OtlpProtocol::Grpc,
                _ => OtlpProtocol::HttpProtobuf,
            };
            let tracing = Tracing {
                backend: backend.id.clone(),
                protocol,
                headers: provider
                    .headers
                    .iter()
                    .map(|h| (h.name.to_ascii_lowercase(), h.value.clone()))
                    .collect(),
                ..tracing
            };
            decision.tracing = Some((tracing, backend));
        }
        Err(problem) => decision.unresolved = Some(problem),
    }
    decision
}

/// The tracing a valid Enabled policy asks for (backend not resolved yet).
fn settings(policy: &XTelemetryPolicy, config: &TracingConfig, snapshot: &Snapshot) -> Result<Tracing, Problem> {
    let sampling = fraction(config.sampling_rate, "tracing.samplingRate")?.unwrap_or(ir::Fraction::ALL);
    let parent = config.parent_based_sampling.as_ref();
    let parent_based = match parent.and_then(|p| p.mode.as_deref()) {
        None | Some("ImplementationDefault") | Some("Enabled") => true,
        Some("Disabled") => false,
        Some(other) => {
            return Err(Problem::new(
                reason::INVALID,
                format!("parentBasedSampling.mode {other:?} is not Enabled, Disabled or ImplementationDefault"),
            ));
        }
    };
    let parent_sampling = fraction(
        parent.and_then(|p| p.sampling_rate),
        "tracing.parentBasedSampling.samplingRate",
    )?
    .unwrap_or(ir::Fraction::ALL);
    let mut attributes = Vec::new();
    for a in &config.attributes {
        let source = match a.source_type.as_str() {
            "Literal" => a.literal_value.clone().map(AttributeSource::Literal),
            "Header" => a
                .header_name
                .as_ref()
                .map(|h| AttributeSource::Header(h.to_ascii_lowercase())),
            "Attribute" => match a.attribute_key.as_deref() {
                Some(key) if SPAN_ATTRIBUTES.contains(&key) => Some(AttributeSource::Attribute(key.to_string())),
                Some(key) => {
                    return Err(Problem::new(
                        reason::INVALID,
                        format!(
                            "attribute {:?}: attributeKey {key:?} is not one Turna records ({})",
                            a.name,
                            SPAN_ATTRIBUTES.join(", ")
                        ),
                    ));
                }
                None => None,
            },
            other => {
                return Err(Problem::new(
                    reason::INVALID,
                    format!(
                        "attribute {:?}: sourceType {other:?} is not Header, Literal or Attribute",
                        a.name
                    ),
                ));
            }
        };
        let Some(source) = source else {
            return Err(Problem::new(
                reason::INVALID,
                format!("attribute {:?} has no value for sourceType {}", a.name, a.source_type),
            ));
        };
        attributes.push(SpanAttribute {
            name: a.name.clone(),
            source,
        });
    }
    Ok(Tracing {
        policy: snapshot
            .facts
            .ir_name("XTelemetryPolicy", policy.namespace(), policy.name()),
        backend: Default::default(),
        protocol: OtlpProtocol::HttpProtobuf,
        headers: Vec::new(),
        sampling,
        parent_based,
        parent_sampling,
        // Per Gateway (apply).
        service_name: String::new(),
        span_name: config.span_name.clone(),
        attributes,
    })
}

/// A validated fraction (denominator 100 when absent).
fn fraction(f: Option<Fraction>, field: &str) -> Result<Option<ir::Fraction>, Problem> {
    let Some(f) = f else { return Ok(None) };
    let denominator = f.denominator.unwrap_or(100);
    if f.numerator < 0 || denominator <= 0 || f.numerator > denominator {
        return Err(Problem::new(
            reason::INVALID,
            format!(
                "{field} {}/{denominator} is not a fraction between 0 and 1",
                f.numerator
            ),
        ));
    }
    Ok(Some(ir::Fraction {
        numerator: f.numerator as u32,
        denominator: denominator as u32,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fractions_are_checked() {
        let f = |n, d| Fraction {
            numerator: n,
            denominator: d,
        };
        assert_eq!(
            fraction(Some(f(5, None)), "x").unwrap(),
            Some(ir::Fraction {
                numerator: 5,
                denominator: 100
            })
        );
        assert!(fraction(Some(f(3, Some(2))), "x").is_err());
        assert!(fraction(Some(f(0, Some(0))), "x").is_err());
        assert!(fraction(Some(f(-1, Some(2))), "x").is_err());
        assert_eq!(fraction(None, "x").unwrap(), None);
    }
}
