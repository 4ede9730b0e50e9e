//! Helpers shared by the operator's integration tests (each test binary includes this module).
#![allow(dead_code)]

use std::future::Future;
use std::time::{Duration, Instant};

use crate::control_plane::ControlPlane;

/// A client for the control plane's admin kubeconfig.
pub async fn client(cp: &ControlPlane) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(cp.kubeconfig()).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("config");
    kube::Client::try_from(config).expect("client")
}

/// Polls `probe` every 100 ms until it returns `Some`, failing after `limit`.
pub async fn within<T, F: Future<Output = Option<T>>>(limit: Duration, what: &str, mut probe: impl FnMut() -> F) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// [`within`] 30 seconds.
pub async fn eventually<T, F: Future<Output = Option<T>>>(what: &str, probe: impl FnMut() -> F) -> T {
    within(Duration::from_secs(30), what, probe).await
}
