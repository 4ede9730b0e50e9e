//! TurnaBackendPolicy: load balancing (an algorithm, consistent hashing, slow start) and circuit
//! breaking for the Services and XBackends it targets. Which policy applies and its status are
//! [`super::backend_targets`]'s; this reads a spec into [`ir::BackendTraffic`].

pub mod api;

use std::sync::Arc;

pub use api::TurnaBackendPolicy;

use super::backend_targets::{BackendPolicies, BackendPolicy};
use crate::api::telemetry::LocalPolicyTargetReference;
use crate::duration;
use crate::gateway::Problem;
use crate::ir::{self, BackendTraffic};
use crate::snapshot::Snapshot;
use crate::status::condition::reason;

/// The kind, as `installed_kinds` and statuses name it.
pub const KIND: &str = "TurnaBackendPolicy";

/// The longest slow start.
const MAX_SLOW_START_MS: u64 = 600_000;

/// Every TurnaBackendPolicy, by the backends they target.
pub type BackendSettings<'a> = BackendPolicies<'a, TurnaBackendPolicy>;

impl BackendPolicy for TurnaBackendPolicy {
    const KIND: &'static str = KIND;

    fn target_refs(&self) -> &[LocalPolicyTargetReference] {
        &self.spec.target_refs
    }

    fn settings(&self) -> Result<BackendTraffic, Problem> {
        settings(&self.spec)
    }

    fn policies(snapshot: &Snapshot) -> &[Arc<Self>] {
        &snapshot.backend_policies
    }
}

fn invalid(message: impl Into<String>) -> Problem {
    Problem::new(reason::INVALID, message)
}

/// The IR settings of a policy, or why it is invalid.
fn settings(spec: &api::TurnaBackendPolicySpec) -> Result<BackendTraffic, Problem> {
    if spec.load_balancer.is_none() && spec.circuit_breaker.is_none() {
        return Err(invalid("The policy sets nothing: set loadBalancer or circuitBreaker"));
    }
    let load_balancer = spec.load_balancer.as_ref().map(load_balancer).transpose()?;
    let circuit_breaker = spec
        .circuit_breaker
        .as_ref()
        .map(|c| {
            let limits = [c.max_pending_requests, c.max_requests, c.max_retries];
            if limits.iter().all(Option::is_none) {
                return Err(invalid("circuitBreaker sets no limit"));
            }
            if limits.iter().flatten().any(|l| *l == 0) {
                return Err(invalid("circuitBreaker limits must be at least 1"));
            }
            Ok(ir::CircuitBreaker {
                max_pending_requests: c.max_pending_requests,
                max_requests: c.max_requests,
                max_retries: c.max_retries,
            })
        })
        .transpose()?;
    Ok(BackendTraffic {
        load_balancer,
        circuit_breaker,
        ..BackendTraffic::default()
    })
}

fn load_balancer(l: &api::LoadBalancer) -> Result<ir::LoadBalancer, Problem> {
    let algorithm = match l.kind.as_str() {
        "RoundRobin" => ir::Algorithm::RoundRobin,
        "Random" => ir::Algorithm::Random,
        "LeastRequest" => ir::Algorithm::LeastRequest,
        "RingHash" => ir::Algorithm::RingHash,
        "Maglev" => ir::Algorithm::Maglev,
        other => {
            return Err(invalid(format!(
                "loadBalancer.type {other:?} is not RoundRobin, Random, LeastRequest, RingHash or Maglev"
            )));
        }
    };
    let hashing = matches!(algorithm, ir::Algorithm::RingHash | ir::Algorithm::Maglev);
    let hash_on = match (&l.hash_on, hashing) {
        (None, true) => return Err(invalid(format!("loadBalancer.type {} needs hashOn", l.kind))),
        (Some(_), false) => {
            return Err(invalid(format!(
                "loadBalancer.hashOn needs RingHash or Maglev, not {}",
                l.kind
            )));
        }
        (None, false) => None,
        (Some(h), true) => {
            let name = || {
                h.name
                    .as_deref()
                    .filter(|n| !n.is_empty() && n.len() <= 256 && !n.bytes().any(|b| b <= b' ' || b == b';'))
                    .map(ir::SmolStr::new)
                    .ok_or_else(|| invalid(format!("loadBalancer.hashOn type {} needs a valid name", h.kind)))
            };
            Some(match h.kind.as_str() {
                "Header" => ir::HashOn::Header {
                    name: ir::SmolStr::new(name()?.to_ascii_lowercase()),
                },
                "Cookie" => ir::HashOn::Cookie { name: name()? },
                "QueryParameter" => ir::HashOn::QueryParameter { name: name()? },
                "ClientAddress" => ir::HashOn::ClientAddress,
                other => {
                    return Err(invalid(format!(
                        "loadBalancer.hashOn.type {other:?} is not Header, Cookie, QueryParameter or ClientAddress"
                    )));
                }
            })
        }
    };
    let slow_start_ms = match &l.slow_start {
        None => None,
        Some(_) if hashing => {
            return Err(invalid(
                "loadBalancer.slowStart applies to RoundRobin, Random and LeastRequest",
            ));
        }
        Some(text) => match duration::parse_ms(text) {
            Some(ms) if (1..=MAX_SLOW_START_MS).contains(&ms) => Some(ms),
            _ => {
                return Err(invalid(format!(
                    "loadBalancer.slowStart {text:?} is not a duration up to 10m"
                )));
            }
        },
    };
    Ok(ir::LoadBalancer {
        algorithm,
        hash_on,
        slow_start_ms,
    })
}
