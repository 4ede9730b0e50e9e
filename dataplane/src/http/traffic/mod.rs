//! TurnaTrafficPolicy in the proxy: a policy of the IR compiled once per table into checks of
//! the access phase (rate limits, after the security policy's, so they can count by the client a
//! credential named), a request body limit the exchange applies to the body it reads, and
//! mechanisms of the response phase (error responses, then compression). A rule takes its own
//! policy, else its listener's.
//!
//! A policy the proxy cannot apply (the translator marked it invalid, a rate limit service the
//! IR lacks) answers its requests 500: a limit that silently does not apply must not look like
//! one that does.

mod compression;
mod error_response;
mod global_rate_limit;
mod key;
mod local_rate_limit;

use std::collections::HashMap;
use std::sync::Arc;

use translator::ir;

use super::access::{Check, Unusable};
use super::respond::Respond;
use crate::access_log::Flag;
use crate::upstream::Upstreams;

/// One policy, compiled.
#[derive(Debug)]
pub struct TrafficPolicy {
    /// The IR it was compiled from: a table with the same IR reuses it (and its buckets).
    source: ir::Traffic,
    /// Rate limits (or the refusal of an unusable policy), in the access phase.
    pub checks: Vec<Arc<dyn Check>>,
    /// The largest request body.
    pub max_request_body: Option<u64>,
    /// Error responses, then compression.
    pub respond: Vec<Arc<dyn Respond>>,
}

/// The traffic policies of a table, by IR id.
pub type TrafficPolicies = HashMap<ir::SmolStr, Arc<TrafficPolicy>>;

impl TrafficPolicy {
    /// Compiles every policy of `proxy`, reusing `previous` ones that are unchanged (their rate
    /// limit buckets carry over).
    pub fn compile_all(proxy: &ir::Proxy, upstreams: &Upstreams, previous: &TrafficPolicies) -> TrafficPolicies {
        proxy
            .traffic
            .iter()
            .map(|(id, traffic)| {
                let kept = previous.get(id).filter(|p| {
                    p.source == *traffic
                        && p.checks
                            .iter()
                            .flat_map(|c| c.upstreams())
                            .all(|u| upstreams.get(u.id.as_str()).is_some_and(|n| Arc::ptr_eq(n, u)))
                });
                let policy = match kept {
                    Some(p) => p.clone(),
                    None => Arc::new(TrafficPolicy::compile(traffic, upstreams)),
                };
                (id.clone(), policy)
            })
            .collect()
    }

    fn compile(traffic: &ir::Traffic, upstreams: &Upstreams) -> TrafficPolicy {
        let refuse = |reason: String| {
            tracing::warn!(policy = %traffic.policy, %reason, "traffic policy cannot be applied; its requests are answered 500");
            TrafficPolicy {
                source: traffic.clone(),
                checks: vec![Arc::new(Unusable {
                    policy: traffic.policy.clone(),
                    check: "TrafficPolicy",
                    flag: Flag::TrafficPolicyInvalid,
                })],
                max_request_body: None,
                respond: Vec::new(),
            }
        };
        if let Some(reason) = &traffic.invalid {
            return refuse(reason.clone());
        }
        let mut checks: Vec<Arc<dyn Check>> = Vec::new();
        if let Some(l) = &traffic.local_rate_limit {
            checks.push(Arc::new(local_rate_limit::LocalRateLimit::compile(l)));
        }
        if let Some(g) = &traffic.global_rate_limit {
            match global_rate_limit::GlobalRateLimit::compile(g, upstreams) {
                Ok(g) => checks.push(Arc::new(g)),
                Err(reason) => return refuse(reason),
            }
        }
        let mut respond: Vec<Arc<dyn Respond>> = Vec::new();
        if !traffic.error_responses.is_empty() {
            respond.push(Arc::new(error_response::ErrorResponses::compile(
                &traffic.error_responses,
            )));
        }
        if let Some(c) = &traffic.compression {
            respond.push(Arc::new(compression::Compression::compile(c)));
        }
        TrafficPolicy {
            source: traffic.clone(),
            checks,
            max_request_body: traffic.max_request_body,
            respond,
        }
    }
}
