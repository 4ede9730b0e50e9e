//! The Kubernetes API client of the `turna` binary: kube's default stack (TLS, authentication,
//! extra headers, retries of 429 and 503), with TCP keepalive.
//!
//! A watch only reads. When the network drops the API server's side of its connection (a
//! partition across an API server restart leaves it half-open), nothing tells the reader: kube's
//! client has no read timeout and no HTTP/2 pings (client-go pings every 30 s), so the watch
//! waits for events that never come and the controller falls minutes behind. Keepalive probes
//! end such a connection within [`DEAD_AFTER`]: the peer answers them with a reset, or nothing
//! answers at all; the watcher then starts again.

use std::time::Duration;

use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kube::client::ConfigExt;
use kube::client::retry::RetryPolicy;
use kube::{Client, Config};
use tower::retry::RetryLayer;
use tower::{BoxError, ServiceBuilder};

/// Idle time before the first probe.
pub const KEEPALIVE_IDLE: Duration = Duration::from_secs(10);
/// Time between unanswered probes.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
/// Unanswered probes before the connection is dead.
pub const KEEPALIVE_RETRIES: u32 = 3;
/// The longest a silently dropped connection goes unnoticed.
pub const DEAD_AFTER: Duration =
    Duration::from_secs(KEEPALIVE_IDLE.as_secs() + KEEPALIVE_INTERVAL.as_secs() * KEEPALIVE_RETRIES as u64);

/// A client for the inferred configuration (in-cluster, or the kubeconfig).
pub async fn infer() -> Result<Client, kube::Error> {
    let config = Config::infer().await.map_err(kube::Error::InferConfig)?;
    from_config(config)
}

/// A client for `config`: its TLS, authentication and extra headers, over connections with
/// TCP keepalive.
pub fn from_config(config: Config) -> Result<Client, kube::Error> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(config.connect_timeout);
    http.set_keepalive(Some(KEEPALIVE_IDLE));
    http.set_keepalive_interval(Some(KEEPALIVE_INTERVAL));
    http.set_keepalive_retries(Some(KEEPALIVE_RETRIES));
    let https = config.rustls_https_connector_with_connector(http)?;
    let client = hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build(https);
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        // As kube's own stack: 429s and 503s retried with backoff.
        .option_layer(
            config
                .default_retry
                .then(|| RetryLayer::new(RetryPolicy::server_retry())),
        )
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(client);
    Ok(Client::new(service, config.default_namespace))
}
