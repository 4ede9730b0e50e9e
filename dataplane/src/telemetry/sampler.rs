//! The XTelemetryPolicy's sampling: a share of new traces, and for requests that carry a
//! sampled parent, that parent's decision with a share of its own (parent-based sampling).
//!
//! Decisions are made on the trace id (its last 8 bytes as a fraction of 2^64, as OpenTelemetry's
//! TraceIdRatioBased sampler does), so every proxy with the same rate takes the same decision
//! for a trace. Spans whose parent is the proxy's own request span follow it.

use opentelemetry::trace::{Link, SpanKind, TraceContextExt, TraceId};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{SamplingDecision, SamplingResult, ShouldSample};
use translator::ir::Fraction;

/// The policy's sampler.
#[derive(Clone, Debug)]
pub struct PolicySampler {
    /// New traces (no parent, or parents ignored).
    pub root: Fraction,
    /// Whether a remote parent's sampled flag is followed.
    pub parent_based: bool,
    /// The share of sampled remote parents sampled here too.
    pub parent: Fraction,
}

/// Whether `trace_id` falls in the share `fraction` of all trace ids.
pub fn within(fraction: Fraction, trace_id: TraceId) -> bool {
    if fraction.numerator >= fraction.denominator {
        return true;
    }
    let bytes = trace_id.to_bytes();
    let mut low = [0u8; 8];
    low.copy_from_slice(&bytes[8..]);
    // x / 2^64 < numerator / denominator, exactly.
    u128::from(u64::from_be_bytes(low)) * u128::from(fraction.denominator) < u128::from(fraction.numerator) << 64
}

impl PolicySampler {
    /// Whether a span of `trace_id` under `parent` is sampled.
    pub fn decide(&self, parent: Option<&Context>, trace_id: TraceId) -> bool {
        let parent = parent
            .filter(|cx| cx.has_active_span())
            .map(|cx| cx.span().span_context().clone());
        match parent {
            Some(p) if p.is_valid() && !p.is_remote() => p.is_sampled(),
            Some(p) if p.is_valid() && self.parent_based => p.is_sampled() && within(self.parent, trace_id),
            _ => within(self.root, trace_id),
        }
    }
}

impl ShouldSample for PolicySampler {
    fn should_sample(
        &self,
        parent_context: Option<&Context>,
        trace_id: TraceId,
        _name: &str,
        _span_kind: &SpanKind,
        _attributes: &[KeyValue],
        _links: &[Link],
    ) -> SamplingResult {
        let decision = if self.decide(parent_context, trace_id) {
            SamplingDecision::RecordAndSample
        } else {
            SamplingDecision::Drop
        };
        let trace_state = parent_context
            .filter(|cx| cx.has_active_span())
            .map(|cx| cx.span().span_context().trace_state().clone())
            .unwrap_or_default();
        SamplingResult {
            decision,
            attributes: Vec::new(),
            trace_state,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceState};

    fn fraction(numerator: u32, denominator: u32) -> Fraction {
        Fraction { numerator, denominator }
    }

    fn parent(sampled: bool, remote: bool) -> Context {
        let flags = if sampled {
            TraceFlags::SAMPLED
        } else {
            TraceFlags::default()
        };
        let span = SpanContext::new(
            TraceId::from(7u128),
            SpanId::from(9u64),
            flags,
            remote,
            TraceState::default(),
        );
        Context::new().with_remote_span_context(span)
    }

    #[test]
    fn ratio_is_a_share_of_trace_ids() {
        let quarter = fraction(25, 100);
        let sampled = (0..10_000u128)
            .filter(|i| {
                within(
                    quarter,
                    TraceId::from(i.wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835)),
                )
            })
            .count();
        assert!((2_250..2_750).contains(&sampled), "{sampled} of 10000");
        assert!(!within(fraction(0, 100), TraceId::from(0u128)));
        assert!(within(fraction(1, 1), TraceId::from(u128::MAX)));
        // The same trace id, the same decision.
        let id = TraceId::from(0x1234_5678_9abc_def0_0fed_cba9_8765_4321u128);
        assert_eq!(within(quarter, id), within(quarter, id));
    }

    #[test]
    fn parent_based_follows_the_remote_parent() {
        let sampler = PolicySampler {
            root: fraction(0, 100),
            parent_based: true,
            parent: fraction(100, 100),
        };
        let id = TraceId::from(7u128);
        assert!(sampler.decide(Some(&parent(true, true)), id));
        assert!(!sampler.decide(Some(&parent(false, true)), id));
        // No parent: the root share (none).
        assert!(!sampler.decide(None, id));
        assert!(!sampler.decide(Some(&Context::new()), id));
    }

    #[test]
    fn parents_ignored_when_parent_based_sampling_is_disabled() {
        let sampler = PolicySampler {
            root: fraction(100, 100),
            parent_based: false,
            parent: fraction(100, 100),
        };
        let id = TraceId::from(7u128);
        assert!(sampler.decide(Some(&parent(false, true)), id));
        let none = PolicySampler {
            root: fraction(0, 1),
            ..sampler
        };
        assert!(!none.decide(Some(&parent(true, true)), id));
    }

    #[test]
    fn parent_share_thins_sampled_parents() {
        let sampler = PolicySampler {
            root: fraction(0, 1),
            parent_based: true,
            parent: fraction(0, 1),
        };
        assert!(!sampler.decide(Some(&parent(true, true)), TraceId::from(7u128)));
    }

    #[test]
    fn local_parents_decide_for_their_children() {
        let sampler = PolicySampler {
            root: fraction(0, 1),
            parent_based: false,
            parent: fraction(0, 1),
        };
        assert!(sampler.decide(Some(&parent(true, false)), TraceId::from(7u128)));
        assert!(!sampler.decide(Some(&parent(false, false)), TraceId::from(7u128)));
    }
}
