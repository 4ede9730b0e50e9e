//! Tracing of the Gateways an XTelemetryPolicy enables (GEP-4768).
//!
//! Each traced Gateway has a [`Tracer`]: an OpenTelemetry SDK tracer provider with the policy's
//! sampler ([`sampler`]), a batch processor and an OTLP exporter that sends through the proxy's
//! own upstream code ([`export`]). A request on one of its listeners continues the W3C trace
//! context it carries (`traceparent`, `tracestate`) in a server span ([`RequestSpan`]), which
//! lasts until the response body is sent; each upstream attempt (retries included) and each
//! mirror copy is a client span under it ([`AttemptSpan`]), and the backend receives that span's
//! context. Unsampled requests are still given a fresh span id, with the sampled flag off.
//!
//! Listeners of untraced Gateways hold no tracer: their requests pay one branch, and pass trace
//! headers through untouched.
//!
//! Span attributes follow OpenTelemetry's HTTP conventions (the GEP-5253 dictionary):
//! `http.request.method`, `url.path`, `url.query`, `url.scheme`, `server.address`,
//! `client.address`, `client.port`, `network.protocol.version`, `user_agent.original`,
//! `http.route` (the route, `namespace/name`), `http.response.status_code`, `error.type`;
//! attempts add `server.address`/`server.port` of the endpoint and `http.request.resend_count`.
//! Turna's own: `turna.listener`, `turna.rule`, `turna.backend`, `turna.mirror`.

mod export;
pub mod sampler;

use std::borrow::Cow;
use std::net::SocketAddr;
use std::sync::Arc;

use arc_swap::ArcSwap;
use http::request::Parts;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{Span as _, SpanKind, Status, TraceContextExt, Tracer as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor, SdkTracer, SdkTracerProvider, Span};
use translator::ir::{self, AttributeSource};

use crate::metrics::Metrics;
use crate::table::Table;
use export::OtlpExporter;
use sampler::PolicySampler;

/// What tracers need from the dataplane: the live table (the receivers' endpoints), the runtime
/// exports run on, and the metrics they count into.
#[derive(Debug, Clone)]
pub struct Exporting {
    pub table: Arc<ArcSwap<Table>>,
    pub runtime: tokio::runtime::Handle,
    pub metrics: Arc<Metrics>,
}

/// The tracing of one Gateway.
#[derive(Debug)]
pub struct Tracer {
    /// What it was built from: an IR with the same settings keeps it.
    pub settings: ir::Tracing,
    /// An attribute of the policy copies a standard one: spans keep theirs until they end.
    copies_attributes: bool,
    provider: SdkTracerProvider,
    tracer: SdkTracer,
}

impl Tracer {
    /// Starts exporting the spans of `settings`.
    pub fn build(settings: &ir::Tracing, exporting: &Exporting) -> Tracer {
        let headers = settings
            .headers
            .iter()
            .filter_map(|(name, value)| {
                let parsed = (HeaderName::from_bytes(name.as_bytes()), HeaderValue::from_str(value));
                match parsed {
                    (Ok(name), Ok(value)) => Some((name, value)),
                    _ => {
                        tracing::warn!(policy = %settings.policy, header = %name, "export header left out: not a valid header");
                        None
                    }
                }
            })
            .collect();
        let exporter = OtlpExporter {
            table: exporting.table.clone(),
            backend: settings.backend.clone(),
            protocol: settings.protocol,
            headers,
            runtime: exporting.runtime.clone(),
            exported: exporting.metrics.spans_exported.clone(),
            dropped: exporting.metrics.spans_dropped.clone(),
            resource: (&Resource::builder_empty().build()).into(),
        };
        let batches = BatchConfigBuilder::default()
            .with_scheduled_delay(std::time::Duration::from_millis(500))
            .with_max_queue_size(8192)
            .build();
        let processor = BatchSpanProcessor::builder(exporter).with_batch_config(batches).build();
        let resource = Resource::builder()
            .with_service_name(settings.service_name.clone())
            .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
            .build();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_sampler(PolicySampler {
                root: settings.sampling,
                parent_based: settings.parent_based,
                parent: settings.parent_sampling,
            })
            .with_resource(resource)
            .build();
        let tracer = opentelemetry::trace::TracerProvider::tracer(&provider, "turna");
        Tracer {
            settings: settings.clone(),
            copies_attributes: settings
                .attributes
                .iter()
                .any(|a| matches!(a.source, AttributeSource::Attribute(_))),
            provider,
            tracer,
        }
    }

    /// Starts the server span of a request with head `parts` from `peer`, continuing the trace
    /// context it carries.
    pub fn start(
        self: &Arc<Self>,
        parts: &Parts,
        peer: SocketAddr,
        scheme: &'static str,
        host: &str,
        listener: &str,
    ) -> RequestSpan {
        let parent = TraceContextPropagator::new().extract(&Headers(&parts.headers));
        let name = match &self.settings.span_name {
            Some(name) => Cow::Owned(name.clone()),
            None => Cow::Owned(parts.method.as_str().to_string()),
        };
        let builder = self.tracer.span_builder(name).with_kind(SpanKind::Server);
        let mut span = self.tracer.build_with_context(builder, &parent);
        let mut recorded = Vec::new();
        if span.is_recording() {
            let mut attributes = vec![
                KeyValue::new("http.request.method", parts.method.as_str().to_string()),
                KeyValue::new("url.path", parts.uri.path().to_string()),
                KeyValue::new("url.scheme", scheme),
                KeyValue::new("server.address", host.to_string()),
                KeyValue::new("client.address", peer.ip().to_string()),
                KeyValue::new("client.port", i64::from(peer.port())),
                KeyValue::new("network.protocol.version", protocol_version(parts.version)),
                KeyValue::new("turna.listener", listener.to_string()),
            ];
            if let Some(query) = parts.uri.query() {
                attributes.push(KeyValue::new("url.query", query.to_string()));
            }
            if let Some(agent) = parts.headers.get(header::USER_AGENT).and_then(|v| v.to_str().ok()) {
                attributes.push(KeyValue::new("user_agent.original", agent.to_string()));
            }
            for extra in &self.settings.attributes {
                let value = match &extra.source {
                    AttributeSource::Literal(value) => Some(value.clone()),
                    AttributeSource::Header(name) => parts
                        .headers
                        .get(name)
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_string),
                    AttributeSource::Attribute(_) => None,
                };
                if let Some(value) = value {
                    span.set_attribute(KeyValue::new(extra.name.clone(), value));
                }
            }
            if self.copies_attributes {
                span.set_attributes(attributes.iter().cloned());
                recorded = attributes;
            } else {
                span.set_attributes(attributes);
            }
        }
        RequestSpan {
            tracer: self.clone(),
            span,
            recorded,
        }
    }
}

impl Drop for Tracer {
    /// Flushes and stops the exporter on a thread of its own: shutting down waits for the last
    /// export, which runs on the runtime that may be dropping this tracer.
    fn drop(&mut self) {
        let provider = self.provider.clone();
        let policy = self.settings.policy.clone();
        let spawned = std::thread::Builder::new()
            .name("turna-trace-stop".into())
            .spawn(move || {
                if let Err(error) = provider.shutdown() {
                    tracing::debug!(%policy, %error, "tracer stopped with an error");
                }
            });
        if let Err(error) = spawned {
            tracing::warn!(%error, "cannot stop a tracer: its last spans may be lost");
        }
    }
}

/// The server span of one request, ended when dropped (with its response body).
#[derive(Debug)]
pub struct RequestSpan {
    tracer: Arc<Tracer>,
    span: Span,
    /// The request attributes, for the policy's `Attribute` sources (empty when not sampled).
    recorded: Vec<KeyValue>,
}

impl RequestSpan {
    /// Names the route and rule that took the request.
    pub fn routed(&mut self, method: &http::Method, route: &ir::RouteRef) {
        if !self.span.is_recording() {
            return;
        }
        let name = format!("{}/{}", route.namespace, route.name);
        if self.tracer.settings.span_name.is_none() {
            self.span.update_name(format!("{method} {name}"));
        }
        let route_attribute = KeyValue::new("http.route", name);
        if self.tracer.copies_attributes {
            self.recorded.push(route_attribute.clone());
        }
        self.span.set_attribute(route_attribute);
        let rule = match &route.rule_name {
            Some(name) => name.to_string(),
            None => route.rule.to_string(),
        };
        self.span.set_attribute(KeyValue::new("turna.rule", rule));
    }

    /// Records the response status (5xx marks the span as an error).
    pub fn answered(&mut self, status: StatusCode) {
        if !self.span.is_recording() {
            return;
        }
        let code = KeyValue::new("http.response.status_code", i64::from(status.as_u16()));
        if self.tracer.copies_attributes {
            self.recorded.push(code.clone());
        }
        self.span.set_attribute(code);
        if status.is_server_error() {
            let error = KeyValue::new("error.type", status.as_str().to_string());
            if self.tracer.copies_attributes {
                self.recorded.push(error.clone());
            }
            self.span.set_attribute(error);
            self.span.set_status(Status::error(""));
        }
        for extra in &self.tracer.settings.attributes {
            if let AttributeSource::Attribute(key) = &extra.source
                && let Some(found) = self.recorded.iter().find(|kv| kv.key.as_str() == key)
            {
                self.span
                    .set_attribute(KeyValue::new(extra.name.clone(), found.value.clone()));
            }
        }
    }

    /// Starts the client span of an upstream attempt (or of a mirror copy, `mirror`) to
    /// `backend`, and puts its context into the request headers the backend receives.
    pub fn attempt(
        &self,
        headers: &mut HeaderMap,
        method: &http::Method,
        backend: &str,
        attempt: u32,
        mirror: bool,
    ) -> AttemptSpan {
        let parent = Context::new().with_remote_span_context(self.span.span_context().clone());
        let name = format!("{method} {backend}");
        let builder = self.tracer.tracer.span_builder(name).with_kind(SpanKind::Client);
        let mut span = self.tracer.tracer.build_with_context(builder, &parent);
        if span.is_recording() {
            span.set_attribute(KeyValue::new("http.request.method", method.as_str().to_string()));
            span.set_attribute(KeyValue::new("turna.backend", backend.to_string()));
            if attempt > 0 {
                span.set_attribute(KeyValue::new("http.request.resend_count", i64::from(attempt)));
            }
            if mirror {
                span.set_attribute(KeyValue::new("turna.mirror", true));
            }
        }
        inject(span.span_context(), headers);
        AttemptSpan { span, done: false }
    }
}

impl Drop for RequestSpan {
    fn drop(&mut self) {
        self.span.end();
    }
}

/// The client span of one upstream attempt, ended when dropped.
#[derive(Debug)]
pub struct AttemptSpan {
    span: Span,
    /// An answer or a failure was recorded; otherwise the attempt was cut short (a backend
    /// timeout, or the client went away).
    done: bool,
}

impl AttemptSpan {
    /// The endpoint (`host:port`) that took the attempt.
    pub fn endpoint(&mut self, authority: &str) {
        if !self.span.is_recording() {
            return;
        }
        let (host, port) = match authority.rsplit_once(':') {
            Some((host, port)) => (host, port.parse::<i64>().ok()),
            None => (authority, None),
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        self.span
            .set_attribute(KeyValue::new("server.address", host.to_string()));
        if let Some(port) = port {
            self.span.set_attribute(KeyValue::new("server.port", port));
        }
    }

    /// The backend's answer.
    pub fn answered(&mut self, status: StatusCode) {
        self.done = true;
        if self.span.is_recording() {
            self.span
                .set_attribute(KeyValue::new("http.response.status_code", i64::from(status.as_u16())));
            if status.is_server_error() {
                self.span
                    .set_attribute(KeyValue::new("error.type", status.as_str().to_string()));
                self.span.set_status(Status::error(""));
            }
        }
    }

    /// No answer: why (a response flag, such as `upstream_connect_failure`).
    pub fn failed(&mut self, why: &'static str) {
        self.done = true;
        if self.span.is_recording() {
            self.span.set_attribute(KeyValue::new("error.type", why));
            self.span.set_status(Status::error(why));
        }
    }
}

impl Drop for AttemptSpan {
    fn drop(&mut self) {
        if !self.done && self.span.is_recording() {
            self.span.set_attribute(KeyValue::new("error.type", "cancelled"));
            self.span.set_status(Status::error("cancelled"));
        }
        self.span.end();
    }
}

/// Puts `span`'s context into `headers` (W3C `traceparent`, and `tracestate` when it has one),
/// replacing what the client sent. Written by hand: the propagator formats through `format!`,
/// several times the cost, on every attempt.
fn inject(span: &opentelemetry::trace::SpanContext, headers: &mut HeaderMap) {
    let mut value = [0u8; 55];
    value[..3].copy_from_slice(b"00-");
    let mut at = put_hex(&mut value, 3, &span.trace_id().to_bytes());
    value[at] = b'-';
    at = put_hex(&mut value, at + 1, &span.span_id().to_bytes());
    value[at] = b'-';
    at = put_hex(&mut value, at + 1, &[span.trace_flags().to_u8() & 1]);
    if let Ok(traceparent) = HeaderValue::from_bytes(&value[..at]) {
        headers.insert(TRACEPARENT, traceparent);
    }
    let state = span.trace_state().header();
    match HeaderValue::from_str(&state) {
        Ok(state) if !state.is_empty() => {
            headers.insert(TRACESTATE, state);
        }
        _ => {
            headers.remove(TRACESTATE);
        }
    }
}

/// Writes `bytes` as lowercase hex into `out` from `at`; returns the position after them.
fn put_hex(out: &mut [u8], mut at: usize, bytes: &[u8]) -> usize {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for b in bytes {
        out[at] = HEX[usize::from(b >> 4)];
        out[at + 1] = HEX[usize::from(b & 0xf)];
        at += 2;
    }
    at
}

const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
const TRACESTATE: HeaderName = HeaderName::from_static("tracestate");

fn protocol_version(version: http::Version) -> &'static str {
    match version {
        http::Version::HTTP_10 => "1.0",
        http::Version::HTTP_11 => "1.1",
        http::Version::HTTP_2 => "2",
        http::Version::HTTP_3 => "3",
        _ => "0.9",
    }
}

/// Request headers as the propagator reads them.
struct Headers<'a>(&'a HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(HeaderName::as_str).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::propagation::Injector;

    /// Request headers as the propagator writes them, to compare [`inject`] with.
    struct HeadersMut<'a>(&'a mut HeaderMap);

    impl Injector for HeadersMut<'_> {
        fn set(&mut self, key: &str, value: String) {
            if let (Ok(name), Ok(value)) = (HeaderName::from_bytes(key.as_bytes()), HeaderValue::from_str(&value)) {
                self.0.insert(name, value);
            }
        }
    }

    #[test]
    fn injected_context_is_what_the_propagator_writes() {
        use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};
        let state = TraceState::from_key_value([("vendor", "x")]).unwrap();
        for (flags, state) in [
            (TraceFlags::SAMPLED, state),
            (TraceFlags::default(), TraceState::default()),
        ] {
            let span = SpanContext::new(
                TraceId::from(0x4bf9_2f35_77b3_4da6_a3ce_929d_0e0e_4736u128),
                SpanId::from(0x00f0_67aa_0ba9_02b7u64),
                flags,
                false,
                state,
            );
            let mut ours = HeaderMap::new();
            ours.insert("tracestate", HeaderValue::from_static("stale=1"));
            inject(&span, &mut ours);
            let mut theirs = HeaderMap::new();
            let context = Context::new().with_remote_span_context(span);
            TraceContextPropagator::new().inject_context(&context, &mut HeadersMut(&mut theirs));
            assert_eq!(ours["traceparent"], theirs["traceparent"]);
            // The propagator writes an empty tracestate; the client's stale one goes either way.
            let state = theirs.get("tracestate").filter(|v| !v.is_empty());
            assert_eq!(ours.get("tracestate"), state);
        }
    }

    #[test]
    fn trace_context_round_trips_through_headers() {
        let mut headers = HeaderMap::new();
        headers.insert(
            "traceparent",
            HeaderValue::from_static("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
        );
        headers.insert("tracestate", HeaderValue::from_static("vendor=x"));
        let context = TraceContextPropagator::new().extract(&Headers(&headers));
        let span = context.span().span_context().clone();
        assert!(span.is_remote() && span.is_sampled());
        assert_eq!(span.trace_id().to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
        let mut out = HeaderMap::new();
        TraceContextPropagator::new().inject_context(&context, &mut HeadersMut(&mut out));
        assert_eq!(out["traceparent"], headers["traceparent"]);
        assert_eq!(out["tracestate"], "vendor=x");
    }
}
