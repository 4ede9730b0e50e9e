//! OTLP export through the proxy's own upstream code: the receiver is a backend of the IR,
//! reached at its endpoints (BackendTLSPolicy included) like any route's backend, over OTLP/gRPC
//! (`TraceService/Export`, HTTP/2) or OTLP/HTTP (`POST /v1/traces`, protobuf).
//!
//! The SDK's batch processor calls [`OtlpExporter::export`] on a thread of its own; the request
//! itself runs on the dataplane's runtime, and the processor's thread waits for it.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use bytes::{BufMut, Bytes, BytesMut};
use http::{HeaderName, HeaderValue, Method, Request, header};
use http_body_util::BodyExt;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema;
use opentelemetry_proto::transform::trace::tonic::group_spans_by_resource_and_scope;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use prometheus_client::metrics::counter::Counter;
use prost::Message;
use translator::ir::{OtlpProtocol, SmolStr};

use crate::table::Table;
use crate::upstream::{BufferedBody, RequestBody};

/// The longest an export may take.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

const GRPC_PATH: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";
const HTTP_PATH: &str = "/v1/traces";

/// Sends span batches to one receiver.
#[derive(Debug)]
pub struct OtlpExporter {
    /// The live table, where the receiver's backend (and its endpoints of the moment) is found.
    pub table: Arc<ArcSwap<Table>>,
    pub backend: SmolStr,
    pub protocol: OtlpProtocol,
    /// The policy's headers (authentication, say).
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub runtime: tokio::runtime::Handle,
    pub exported: Counter,
    pub dropped: Counter,
    pub resource: ResourceAttributesWithSchema,
}

impl OtlpExporter {
    /// The export request of `batch`: method, path and headers, and the body.
    fn request(&self, batch: Vec<SpanData>) -> (http::request::Parts, Bytes) {
        let message = ExportTraceServiceRequest {
            resource_spans: group_spans_by_resource_and_scope(batch, &self.resource),
        };
        let (path, content_type, body) = match self.protocol {
            OtlpProtocol::Grpc => {
                // gRPC framing: no compression, length, message.
                // Measured once: a length walks every span and attribute.
                let length = message.encoded_len();
                let mut framed = BytesMut::with_capacity(5 + length);
                framed.put_u8(0);
                framed.put_u32(length as u32);
                message.encode(&mut framed).expect("a BytesMut grows");
                (GRPC_PATH, "application/grpc", framed.freeze())
            }
            OtlpProtocol::HttpProtobuf => (
                HTTP_PATH,
                "application/x-protobuf",
                Bytes::from(message.encode_to_vec()),
            ),
        };
        let mut request = Request::builder()
            .method(Method::POST)
            .uri(path)
            .header(header::CONTENT_TYPE, content_type)
            .header(header::CONTENT_LENGTH, body.len())
            .body(())
            .expect("static parts are valid");
        if self.protocol == OtlpProtocol::Grpc {
            request
                .headers_mut()
                .insert(header::TE, HeaderValue::from_static("trailers"));
        }
        for (name, value) in &self.headers {
            request.headers_mut().insert(name.clone(), value.clone());
        }
        (request.into_parts().0, body)
    }
}

/// Sends one export request and reads its answer; `Err` says why the receiver did not take it.
async fn send(
    table: Arc<ArcSwap<Table>>,
    backend: SmolStr,
    grpc: bool,
    parts: http::request::Parts,
    body: Bytes,
) -> Result<(), String> {
    let Some(upstream) = table.load().upstream(&backend).cloned() else {
        return Err(format!("backend {backend} is not in the table"));
    };
    let forwarded = upstream
        .forward(Box::new(parts), RequestBody::Buffered(BufferedBody::from(body)), 1)
        .await
        .map_err(|e| e.to_string())?;
    let status = forwarded.response.status();
    let collected = forwarded
        .response
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?;
    if !status.is_success() {
        return Err(format!("receiver answered {status}"));
    }
    if grpc {
        let trailers = collected.trailers();
        let code = trailers
            .and_then(|t| t.get("grpc-status"))
            .and_then(|v| v.to_str().ok())
            .unwrap_or("missing");
        if code != "0" {
            let message = trailers
                .and_then(|t| t.get("grpc-message"))
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default();
            return Err(format!("receiver answered grpc-status {code} {message}"));
        }
    }
    Ok(())
}

impl SpanExporter for OtlpExporter {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let spans = batch.len() as u64;
        let (parts, body) = self.request(batch);
        let grpc = self.protocol == OtlpProtocol::Grpc;
        let request = send(self.table.clone(), self.backend.clone(), grpc, parts, body);
        // The timer is made on the runtime: this thread has none.
        let sent = self
            .runtime
            .spawn(async move { tokio::time::timeout(EXPORT_TIMEOUT, request).await });
        let outcome = match sent.await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(format!("no answer within {EXPORT_TIMEOUT:?}")),
            Err(error) => Err(error.to_string()),
        };
        match outcome {
            Ok(()) => {
                self.exported.inc_by(spans);
                Ok(())
            }
            Err(error) => {
                self.dropped.inc_by(spans);
                tracing::warn!(backend = %self.backend, spans, %error, "spans not exported");
                Err(OTelSdkError::InternalFailure(error))
            }
        }
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.resource = resource.into();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_requests_are_framed() {
        let exporter = OtlpExporter {
            table: Arc::default(),
            backend: "ns/collector:4317".into(),
            protocol: OtlpProtocol::Grpc,
            headers: vec![(HeaderName::from_static("authorization"), HeaderValue::from_static("t"))],
            runtime: tokio::runtime::Runtime::new().unwrap().handle().clone(),
            exported: Counter::default(),
            dropped: Counter::default(),
            resource: (&Resource::builder_empty().build()).into(),
        };
        let (parts, body) = exporter.request(Vec::new());
        assert_eq!(parts.uri.path(), GRPC_PATH);
        assert_eq!(parts.headers[header::CONTENT_TYPE], "application/grpc");
        assert_eq!(parts.headers["authorization"], "t");
        assert_eq!(body[0], 0);
        let length = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
        assert_eq!(length, body.len() - 5);
        let decoded = ExportTraceServiceRequest::decode(&body[5..]).unwrap();
        let spans = decoded
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .flat_map(|s| &s.spans);
        assert_eq!(spans.count(), 0);
    }
}
