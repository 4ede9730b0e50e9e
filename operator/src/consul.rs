//! One Consul KV key, read and watched with blocking queries (`GET /v1/kv/<key>?raw&index=N`):
//! where the static layer can come from instead of, or beside, files.
//!
//! The address is `consul://host:port/key`; with a CA file the connection is HTTPS verified
//! against it. The ACL token comes from a file or `CONSUL_HTTP_TOKEN`. Each query is one
//! HTTP/1.1 request on a new connection: one every few minutes while nothing changes.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode, header};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use rustls::pki_types::{CertificateDer, ServerName, pem::PemObject};

/// Why Consul could not be asked or did not answer.
#[derive(Debug, thiserror::Error)]
pub enum ConsulError {
    #[error("{0:?} is not a consul://host:port/key address")]
    Address(String),
    #[error("reading the Consul token file {path}: {source}")]
    Token { path: PathBuf, source: std::io::Error },
    #[error("Consul CA file {path}: {why}")]
    Ca { path: PathBuf, why: String },
    #[error("connecting to Consul at {address}: {source}")]
    Connect { address: String, source: std::io::Error },
    #[error("Consul at {address} did not answer within {0:?}", TIMEOUT)]
    Timeout { address: String },
    #[error("talking to Consul: {0}")]
    Http(#[from] hyper::Error),
    #[error("Consul answered {status} for key {key}: {body}")]
    Status {
        key: String,
        status: StatusCode,
        body: String,
    },
}

/// Connecting and the first byte of an answer may take this long beyond the query's wait.
const TIMEOUT: Duration = Duration::from_secs(10);
/// How long one blocking query waits for a change.
const WAIT: Duration = Duration::from_secs(300);
/// Waits between attempts while Consul is unreachable, doubling from the first to the last.
const RETRY: (Duration, Duration) = (Duration::from_millis(200), Duration::from_secs(5));

/// A key and how to reach it.
#[derive(Clone)]
pub struct Key {
    host: String,
    port: u16,
    key: String,
    token: Option<String>,
    tls: Option<Arc<rustls::ClientConfig>>,
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token.
        write!(f, "{}", self.address())
    }
}

/// One answer: the key's value (`None` when the key does not exist) at Consul's index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Value {
    pub index: u64,
    pub data: Option<Bytes>,
}

impl Key {
    /// `address` is `consul://host:port/key`; `token_file` (empty: `CONSUL_HTTP_TOKEN`) holds
    /// the ACL token; a `ca_file` makes the connection HTTPS verified against its certificates.
    pub fn new(address: &str, token_file: &str, ca_file: &str) -> Result<Key, ConsulError> {
        let bad = || ConsulError::Address(address.to_string());
        let rest = address.strip_prefix("consul://").ok_or_else(bad)?;
        let (authority, key) = rest.split_once('/').ok_or_else(bad)?;
        let (host, port) = authority.rsplit_once(':').ok_or_else(bad)?;
        let port: u16 = port.parse().map_err(|_| bad())?;
        let host = host.trim_start_matches('[').trim_end_matches(']').to_string();
        if host.is_empty() || key.is_empty() || key.ends_with('/') {
            return Err(bad());
        }
        let token = if token_file.is_empty() {
            std::env::var("CONSUL_HTTP_TOKEN").ok().filter(|t| !t.is_empty())
        } else {
            let text = std::fs::read_to_string(token_file).map_err(|source| ConsulError::Token {
                path: token_file.into(),
                source,
            })?;
            Some(text.trim().to_string())
        };
        let tls = if ca_file.is_empty() {
            None
        } else {
            Some(tls_config(ca_file)?)
        };
        Ok(Key {
            host,
            port,
            key: key.to_string(),
            token,
            tls,
        })
    }

    /// The address as logs show it (no token).
    pub fn address(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("consul://{}:{}/{} ({scheme})", self.host, self.port, self.key)
    }

    /// The value now (`index` 0), or once its index moves past `index`, or after `wait`
    /// (then the same index comes back).
    pub async fn get(&self, index: u64, wait: Duration) -> Result<Value, ConsulError> {
        let address = format!("{}:{}", self.host, self.port);
        let timeout = || ConsulError::Timeout {
            address: address.clone(),
        };
        let tcp = tokio::time::timeout(TIMEOUT, tokio::net::TcpStream::connect((self.host.as_str(), self.port)))
            .await
            .map_err(|_| timeout())?
            .map_err(|source| ConsulError::Connect {
                address: address.clone(),
                source,
            })?;
        let _ = tcp.set_nodelay(true);
        let mut path = format!("/v1/kv/{}?raw", self.key);
        if index > 0 {
            path.push_str(&format!("&index={index}&wait={}ms", wait.as_millis()));
        }
        let mut request = Request::get(path).header(header::HOST, &address);
        if let Some(token) = &self.token {
            request = request.header("X-Consul-Token", token);
        }
        let request = request.body(Empty::<Bytes>::new()).expect("a GET with valid headers");
        // Consul adds up to a sixteenth of the wait as jitter.
        let limit = TIMEOUT + wait + wait / 16;
        let response = match &self.tls {
            None => send(TokioIo::new(tcp), request, limit).await,
            Some(config) => {
                let name = ServerName::try_from(self.host.clone()).map_err(|_| ConsulError::Address(self.address()))?;
                let stream = tokio::time::timeout(
                    TIMEOUT,
                    tokio_rustls::TlsConnector::from(config.clone()).connect(name, tcp),
                )
                .await
                .map_err(|_| timeout())?
                .map_err(|source| ConsulError::Connect {
                    address: address.clone(),
                    source,
                })?;
                send(TokioIo::new(stream), request, limit).await
            }
        }
        .ok_or_else(timeout)??;
        let status = response.status();
        let index = response
            .headers()
            .get("X-Consul-Index")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let body = tokio::time::timeout(TIMEOUT, response.into_body().collect())
            .await
            .map_err(|_| timeout())??
            .to_bytes();
        match status {
            StatusCode::OK => Ok(Value {
                index,
                data: Some(body),
            }),
            StatusCode::NOT_FOUND => Ok(Value { index, data: None }),
            status => Err(ConsulError::Status {
                key: self.key.clone(),
                status,
                body: String::from_utf8_lossy(&body).chars().take(200).collect(),
            }),
        }
    }
}

impl Key {
    /// Follows the key with blocking queries from `index`, where `last` was read, calling
    /// `changed` with each different value (`None`: the key was deleted) until it returns
    /// false. While Consul is unreachable it asks again every 200 ms to 5 s, so a change made
    /// during an outage is seen when it ends.
    pub async fn follow(
        &self,
        mut index: u64,
        mut last: Option<Bytes>,
        mut changed: impl FnMut(Option<&Bytes>) -> bool,
    ) {
        let mut retry = RETRY.0;
        let mut down = false;
        loop {
            let value = match self.get(index, WAIT).await {
                Ok(value) => value,
                Err(error) => {
                    if !down {
                        tracing::warn!(%error, "Consul unreachable; the last good value keeps serving");
                    }
                    down = true;
                    tokio::time::sleep(retry).await;
                    retry = (retry * 2).min(RETRY.1);
                    continue;
                }
            };
            if down {
                tracing::info!(key = %self.address(), "Consul reachable again");
                down = false;
            }
            retry = RETRY.0;
            // Consul's rules for blocking queries: an index that went backwards (a restored or
            // new cluster) starts over, and an index is never below 1.
            index = value.index.max(1);
            if value.data == last {
                continue;
            }
            if !changed(value.data.as_ref()) {
                return;
            }
            last = value.data;
        }
    }
}

/// Sends `request` on `io`; `None` when the answer's head took longer than `limit`.
async fn send<T>(
    io: TokioIo<T>,
    request: Request<Empty<Bytes>>,
    limit: Duration,
) -> Option<Result<http::Response<hyper::body::Incoming>, ConsulError>>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let exchange = async {
        let (mut sender, connection) = hyper::client::conn::http1::handshake(io).await?;
        tokio::spawn(connection);
        Ok(sender.send_request(request).await?)
    };
    tokio::time::timeout(limit, exchange).await.ok()
}

fn tls_config(ca_file: &str) -> Result<Arc<rustls::ClientConfig>, ConsulError> {
    let ca = |why: String| ConsulError::Ca {
        path: ca_file.into(),
        why,
    };
    let pem = std::fs::read(ca_file).map_err(|e| ca(e.to_string()))?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        roots
            .add(cert.map_err(|e| ca(e.to_string()))?)
            .map_err(|e| ca(e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(ca("no certificate in it".into()));
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| ca(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_name_host_port_and_key() {
        let key = Key::new("consul://127.0.0.1:8500/turna/static", "", "").unwrap();
        assert_eq!(key.address(), "consul://127.0.0.1:8500/turna/static (http)");
        for bad in [
            "http://127.0.0.1:8500/k",
            "consul://127.0.0.1/k",
            "consul://127.0.0.1:8500",
            "consul://127.0.0.1:8500/",
            "consul://127.0.0.1:8500/folder/",
            "consul://:8500/k",
        ] {
            assert!(Key::new(bad, "", "").is_err(), "{bad}");
        }
        assert!(matches!(
            Key::new("consul://h:1/k", "/nonexistent/token", ""),
            Err(ConsulError::Token { .. })
        ));
    }

    #[tokio::test]
    async fn an_unreachable_consul_is_an_error_naming_it() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let key = Key::new(&format!("consul://127.0.0.1:{port}/k"), "", "").unwrap();
        let error = key.get(0, Duration::ZERO).await.unwrap_err();
        assert!(error.to_string().contains(&format!("127.0.0.1:{port}")), "{error}");
    }
}
