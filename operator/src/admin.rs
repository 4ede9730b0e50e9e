//! The controller's `health_address`: `/healthz` (alive), `/ready` (the first snapshot was
//! translated) and `/metrics` (Prometheus text: the operator's, and in standalone mode the
//! in-process proxy's after them).

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use http::{Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;

use crate::metrics::Metrics;

/// Set once the first snapshot was translated; read by `/ready`.
#[derive(Clone, Debug, Default)]
pub struct Readiness(Arc<AtomicBool>);

impl Readiness {
    pub fn set_ready(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    pub fn is_ready(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// Binds `health_address` as product.md writes it: `:9901` means every IPv4 address.
pub async fn bind(health_address: &str) -> std::io::Result<TcpListener> {
    let address = match health_address.strip_prefix(':') {
        Some(port) => format!("0.0.0.0:{port}"),
        None => health_address.to_string(),
    };
    TcpListener::bind(address).await
}

/// Serves the health and metrics endpoints until the task is dropped; `/metrics` adds the
/// metrics of `dataplane` when there is one (standalone mode).
pub async fn serve(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    readiness: Readiness,
    dataplane: Option<dataplane::Dataplane>,
) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(error) => {
                tracing::debug!(%error, "accepting a health connection failed");
                continue;
            }
        };
        let metrics = metrics.clone();
        let readiness = readiness.clone();
        let dataplane = dataplane.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| {
                let response = answer(&metrics, &readiness, dataplane.as_ref(), &request);
                async move { Ok::<_, Infallible>(response) }
            });
            if let Err(error) = auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                tracing::debug!(%error, "health connection ended with an error");
            }
        });
    }
}

fn answer<B>(
    metrics: &Metrics,
    readiness: &Readiness,
    dataplane: Option<&dataplane::Dataplane>,
    request: &Request<B>,
) -> Response<Full<Bytes>> {
    let (status, body, content_type) = match request.uri().path() {
        "/healthz" => (StatusCode::OK, "ok\n".to_string(), "text/plain"),
        "/ready" if readiness.is_ready() => (StatusCode::OK, "ready\n".to_string(), "text/plain"),
        "/ready" => (
            StatusCode::SERVICE_UNAVAILABLE,
            "no snapshot translated yet\n".to_string(),
            "text/plain",
        ),
        "/metrics" => (
            StatusCode::OK,
            exposition(metrics, dataplane),
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        ),
        _ => (StatusCode::NOT_FOUND, "not found\n".to_string(), "text/plain"),
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, http::HeaderValue::from_static(content_type));
    response
}

/// The operator's metrics, then the dataplane's: one OpenMetrics document, so only the last
/// part keeps its `# EOF`.
fn exposition(metrics: &Metrics, dataplane: Option<&dataplane::Dataplane>) -> String {
    let mut text = metrics.encode();
    if let Some(dataplane) = dataplane {
        if let Some(body) = text.strip_suffix("# EOF\n") {
            text.truncate(body.len());
        }
        text.push_str(&dataplane.metrics());
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(path: &str) -> Request<()> {
        Request::get(path).body(()).expect("request")
    }

    #[test]
    fn routes() {
        let metrics = Metrics::new();
        let readiness = Readiness::default();
        assert_eq!(
            answer(&metrics, &readiness, None, &get("/healthz")).status(),
            StatusCode::OK
        );
        assert_eq!(
            answer(&metrics, &readiness, None, &get("/ready")).status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        readiness.set_ready();
        assert_eq!(
            answer(&metrics, &readiness, None, &get("/ready")).status(),
            StatusCode::OK
        );
        assert_eq!(
            answer(&metrics, &readiness, None, &get("/metrics")).status(),
            StatusCode::OK
        );
        assert_eq!(
            answer(&metrics, &readiness, None, &get("/other")).status(),
            StatusCode::NOT_FOUND
        );
    }

    #[tokio::test]
    async fn standalone_metrics_are_one_document_with_the_proxys() {
        let metrics = Metrics::new();
        let dataplane = dataplane::Dataplane::new(dataplane::Settings::on([127, 0, 0, 1].into()));
        let text = exposition(&metrics, Some(&dataplane));
        assert_eq!(text.matches("# EOF").count(), 1, "{text}");
        assert!(text.ends_with("# EOF\n"));
        assert!(text.contains("turna_operator_leader"), "{text}");
        assert!(text.contains("turna_dataplane_config_version"), "{text}");
    }
}
