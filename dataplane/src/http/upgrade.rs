//! HTTP/1.1 upgrades (WebSocket): the request keeps its `Upgrade` header, and after the
//! backend's `101 Switching Protocols` the two connections are joined byte for byte.

use http::header::{self, HeaderMap, HeaderValue};
use http::request::Parts;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;

/// The client side of an upgrade request, taken from the request before it is forwarded.
#[derive(Debug)]
pub struct UpgradeRequest {
    protocol: HeaderValue,
    client: OnUpgrade,
}

impl UpgradeRequest {
    /// Takes the upgrade out of `parts` when the request asks for one.
    pub fn take(parts: &mut Parts) -> Option<UpgradeRequest> {
        let asks = parts.version == http::Version::HTTP_11
            && parts
                .headers
                .get_all(header::CONNECTION)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .flat_map(|v| v.split(','))
                .any(|token| token.trim().eq_ignore_ascii_case("upgrade"));
        if !asks {
            return None;
        }
        let protocol = parts.headers.get(header::UPGRADE)?.clone();
        let client = parts.extensions.remove::<OnUpgrade>()?;
        Some(UpgradeRequest { protocol, client })
    }

    /// Restores the upgrade headers after hop-by-hop headers were removed.
    pub fn restore_headers(&self, headers: &mut HeaderMap) {
        headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        headers.insert(header::UPGRADE, self.protocol.clone());
    }

    /// Joins the client and the backend once both connections are upgraded.
    pub fn join(self, backend: OnUpgrade) {
        tokio::spawn(async move {
            let (client, backend) = match tokio::try_join!(self.client, backend) {
                Ok(pair) => pair,
                Err(error) => {
                    tracing::debug!(%error, "upgrade failed");
                    return;
                }
            };
            let mut client = TokioIo::new(client);
            let mut backend = TokioIo::new(backend);
            if let Err(error) = tokio::io::copy_bidirectional(&mut client, &mut backend).await {
                tracing::debug!(%error, "upgraded connection ended with an error");
            }
        });
    }
}
