//! Active health checks (TurnaBackendPolicy `healthCheck.active`): each proxy probes each
//! endpoint of the backend every interval (plus jitter) with a TCP connection, an HTTP GET or a
//! gRPC `grpc.health.v1.Health/Check`, through the endpoint's own pool (its TLS and protocol).
//! Failed probes in a row mark the endpoint down; passed ones bring it back ([`Health::probed`]).
//!
//! One task per endpoint. The health of an endpoint outlives table swaps, and so does its
//! prober: a rebuilt backend's task takes over from the previous one (the previous one sees the
//! generation move on and ends), and a task ends when its backend is dropped or the endpoint
//! leaves.
//!
//! [`Health::probed`]: super::health::Health::probed

use std::sync::{Arc, Weak};
use std::time::Duration;

use http::header::{self, HeaderValue};
use http::{Request, Response};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use translator::ir;

use super::pool::{Checkout, Pool, Sender};
use super::{BufferedBody, Endpoint, RequestBody, Upstream, client, grpc};

/// The most of an HTTP probe's answer read (the rest is not waited for).
const MAX_ANSWER: usize = 64 * 1024;

/// `grpc.health.v1.HealthCheckRequest`.
#[derive(Clone, PartialEq, prost::Message)]
struct HealthCheckRequest {
    #[prost(string, tag = "1")]
    service: String,
}

/// `grpc.health.v1.HealthCheckResponse`.
#[derive(Clone, PartialEq, prost::Message)]
struct HealthCheckResponse {
    /// `ServingStatus`: 1 is SERVING.
    #[prost(int32, tag = "1")]
    status: i32,
}

const SERVING: i32 = 1;

impl Upstream {
    /// Starts a prober per endpoint when the backend's policy asks for active checks.
    pub(super) fn start_probes(self: &Arc<Self>) {
        let check = self.spec.traffic.health.as_ref().and_then(|h| h.active.clone());
        let check = check.filter(|c| {
            let usable = !matches!(c.probe, ir::Probe::Grpc { .. }) || self.spec.protocol == ir::AppProtocol::H2c;
            if !usable {
                // A gRPC server speaks HTTP/2; probing over HTTP/1.1 would mark every endpoint down.
                tracing::warn!(backend = %self.id, "gRPC health checks need an HTTP/2 backend (appProtocol kubernetes.io/h2c): not probing");
            }
            usable
        });
        let Some(check) = check else {
            // Endpoints kept from a backend that was probed are not left down.
            for endpoint in &self.endpoints {
                endpoint.health.stop_probes();
            }
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(backend = %self.id, "no runtime: active health checks not started");
            return;
        };
        for (index, endpoint) in self.endpoints.iter().enumerate() {
            let generation = endpoint.health.take_prober();
            runtime.spawn(run(Arc::downgrade(self), index, generation, check.clone()));
        }
    }
}

/// Probes endpoint `index` of `upstream` until the upstream is gone, the endpoint left or a
/// newer prober took over.
async fn run(upstream: Weak<Upstream>, index: usize, generation: u64, check: ir::ActiveCheck) {
    let timeout = Duration::from_millis(check.timeout_ms);
    loop {
        {
            let Some(upstream) = upstream.upgrade() else {
                return;
            };
            let endpoint = &upstream.endpoints[index];
            if endpoint.pool.retired() || !endpoint.health.is_prober(generation) {
                return;
            }
            let result = match tokio::time::timeout(timeout, probe(endpoint, &check.probe)).await {
                Ok(result) => result,
                Err(_) => Err(format!("no answer within {}ms", check.timeout_ms)),
            };
            if let Err(why) = &result {
                tracing::debug!(backend = %upstream.id, endpoint = %endpoint.pool.authority(), %why, "health check failed");
            }
            match endpoint.health.probed(result.is_ok(), &check) {
                Some(true) => {
                    upstream.ejections.inc();
                    tracing::warn!(backend = %upstream.id, endpoint = %endpoint.pool.authority(), why = %result.err().unwrap_or_default(), "endpoint down: health checks failed");
                }
                Some(false) => {
                    tracing::info!(backend = %upstream.id, endpoint = %endpoint.pool.authority(), "endpoint up: health checks passed");
                }
                None => {}
            }
        }
        let jitter = if check.jitter_ms == 0 {
            0
        } else {
            fastrand::u64(0..=check.jitter_ms)
        };
        tokio::time::sleep(Duration::from_millis(check.interval_ms + jitter)).await;
    }
}

/// One probe of `endpoint`: `Ok` when it passed, else why not.
async fn probe(endpoint: &Endpoint, probe: &ir::Probe) -> Result<(), String> {
    match probe {
        ir::Probe::Tcp => tokio::net::TcpStream::connect(endpoint.pool.authority().as_str())
            .await
            .map(drop)
            .map_err(|e| format!("connect: {e}")),
        ir::Probe::Http { path, statuses } => {
            let mut request = Request::new(RequestBody::Buffered(BufferedBody::default()));
            *request.uri_mut() = path.parse().map_err(|_| format!("path {path:?}"))?;
            request
                .headers_mut()
                .insert(header::USER_AGENT, HeaderValue::from_static("turna-health-check"));
            let (response, sender) = send(&endpoint.pool, request).await?;
            let status = response.status().as_u16();
            // Read whole, the connection can take the next request.
            Limited::new(response.into_body(), MAX_ANSWER)
                .collect()
                .await
                .map_err(|e| format!("answer: {e}"))?;
            drop(Pool::checkin(&endpoint.pool, sender));
            let passed = if statuses.is_empty() {
                (200..400).contains(&status)
            } else {
                statuses.contains(&status)
            };
            if passed {
                Ok(())
            } else {
                Err(format!("answered {status}"))
            }
        }
        ir::Probe::Grpc { service } => {
            let ask = HealthCheckRequest {
                service: service.clone(),
            };
            let request = grpc::request("/grpc.health.v1.Health/Check", &ask).map_err(|e| e.to_string())?;
            let (response, _) = send(&endpoint.pool, request).await?;
            let answer = grpc::answer(response, MAX_ANSWER).await.map_err(|e| e.to_string())?;
            let answer = <HealthCheckResponse as prost::Message>::decode(answer)
                .map_err(|e| format!("the answer is not a HealthCheckResponse: {e}"))?;
            if answer.status == SERVING {
                Ok(())
            } else {
                Err(format!("serving status {}", answer.status))
            }
        }
    }
}

/// Sends `request` on a connection of `pool`, reused or new.
async fn send(pool: &Arc<Pool>, request: Request<RequestBody>) -> Result<(Response<Incoming>, Sender), String> {
    let (checkout, _) = pool.checkout(false).await.map_err(|e| format!("connect: {e}"))?;
    let Checkout::Hyper(mut sender) = checkout else {
        return Err("no client connection".into());
    };
    let (parts, body) = request.into_parts();
    let request = client::origin_request(Box::new(parts), body, &sender, pool.authority());
    let response = sender
        .send(request)
        .await
        .map_err(|e| format!("request: {}", e.into_error()))?;
    Ok((response, sender))
}
