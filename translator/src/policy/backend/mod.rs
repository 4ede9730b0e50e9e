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
    if spec.load_balancer.is_none() && spec.circuit_breaker.is_none() && spec.health_check.is_none() {
        return Err(invalid(
            "The policy sets nothing: set loadBalancer, circuitBreaker or healthCheck",
        ));
    }
    let health = spec.health_check.as_ref().map(health_check).transpose()?;
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
        health,
        ..BackendTraffic::default()
    })
}

/// A duration of `field` within `range` (milliseconds), `default` when unset.
fn millis(text: &Option<String>, field: &str, default: u64, range: (u64, u64)) -> Result<u64, Problem> {
    match text {
        None => Ok(default),
        Some(t) => match duration::parse_ms(t) {
            Some(ms) if (range.0..=range.1).contains(&ms) => Ok(ms),
            _ => Err(invalid(format!(
                "{field} {t:?} is not a duration from {}ms to {}ms",
                range.0, range.1
            ))),
        },
    }
}

fn health_check(h: &api::HealthCheck) -> Result<ir::HealthCheck, Problem> {
    if h.active.is_none() && h.outlier_detection.is_none() && h.panic_threshold.is_none() {
        return Err(invalid("healthCheck sets nothing"));
    }
    let panic_threshold = h.panic_threshold.unwrap_or(0);
    if panic_threshold > 100 {
        return Err(invalid("healthCheck.panicThreshold is a percent (0 to 100)"));
    }
    let active = h
        .active
        .as_ref()
        .map(|a| {
            let probe = match a.kind.as_str() {
                "HTTP" => {
                    let path = a.path.clone().unwrap_or_else(|| "/".into());
                    if !path.starts_with('/') || path.bytes().any(|b| b <= b' ' || b == 0x7f) {
                        return Err(invalid(format!("healthCheck.active.path {path:?} is not a path")));
                    }
                    if a.expected_statuses.iter().any(|s| !(100..=599).contains(s)) {
                        return Err(invalid("healthCheck.active.expectedStatuses are HTTP statuses"));
                    }
                    ir::Probe::Http {
                        path,
                        statuses: a.expected_statuses.clone(),
                    }
                }
                "TCP" => ir::Probe::Tcp,
                "GRPC" => ir::Probe::Grpc {
                    service: a.grpc_service.clone().unwrap_or_default(),
                },
                other => {
                    return Err(invalid(format!(
                        "healthCheck.active.type {other:?} is not HTTP, TCP or GRPC"
                    )));
                }
            };
            let interval_ms = millis(&a.interval, "healthCheck.active.interval", 5_000, (1_000, 300_000))?;
            Ok(ir::ActiveCheck {
                probe,
                interval_ms,
                jitter_ms: millis(&a.jitter, "healthCheck.active.jitter", 0, (0, interval_ms))?,
                timeout_ms: millis(
                    &a.timeout,
                    "healthCheck.active.timeout",
                    1_000.min(interval_ms),
                    (1, interval_ms),
                )?,
                unhealthy_threshold: a.unhealthy_threshold.unwrap_or(3).max(1),
                healthy_threshold: a.healthy_threshold.unwrap_or(2).max(1),
            })
        })
        .transpose()?;
    let outlier = h
        .outlier_detection
        .as_ref()
        .map(|o| {
            if o.consecutive_5xx.is_none() && o.consecutive_gateway_errors.is_none() {
                return Err(invalid(
                    "healthCheck.outlierDetection needs consecutive5xx or consecutiveGatewayErrors",
                ));
            }
            if o.consecutive_5xx == Some(0) || o.consecutive_gateway_errors == Some(0) {
                return Err(invalid("healthCheck.outlierDetection counts must be at least 1"));
            }
            let max = o.max_ejection_percent.unwrap_or(10);
            if max > 100 {
                return Err(invalid("healthCheck.outlierDetection.maxEjectionPercent is a percent"));
            }
            Ok(ir::Outlier {
                consecutive_5xx: o.consecutive_5xx,
                consecutive_gateway_errors: o.consecutive_gateway_errors,
                ejection_ms: millis(
                    &o.base_ejection_time,
                    "healthCheck.outlierDetection.baseEjectionTime",
                    30_000,
                    (1, 3_600_000),
                )?,
                max_ejection_percent: max,
            })
        })
        .transpose()?;
    Ok(ir::HealthCheck {
        active,
        outlier,
        panic_threshold,
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
