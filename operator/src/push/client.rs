//! The proxy's side of IR push: connects to the operator with its ServiceAccount token, pins the
//! operator's CA, applies every received version atomically and reports rejections. The operator
//! is found through its Service's EndpointSlices when told the Service ([`super::endpoints`]),
//! else at the push URL. While the operator is away it keeps serving the last good IR and
//! reconnects with backoff (200ms to 30s).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use dataplane::{ApplyError, Dataplane, Material};
use http::{Method, Request, Response, StatusCode, Uri, header};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::sync::watch;
use translator::ir;

use super::endpoints::Resolver;
use super::protocol::{DELTAS_QUERY, Message, REJECTIONS_PATH, RULES_QUERY, Rejection, STREAM_PATH};

const BACKOFF_MIN: Duration = Duration::from_millis(200);
const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// Longest wait for one TCP connection to a push endpoint.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Where the operator is and how to prove who we are.
#[derive(Clone, Debug)]
pub struct Options {
    /// `https://host:port` of the operator's push server.
    pub url: Uri,
    /// The CA certificate (PEM) the operator's push certificate must chain to.
    pub ca_pem: String,
    /// The ServiceAccount token, read again for every connection (kubelet rotates it).
    pub token_file: PathBuf,
    /// The controller Service, whose ready endpoints are tried before the URL's host.
    pub endpoints: Option<Resolver>,
}

/// Why talking to the operator failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("push URL {0} has no host")]
    Url(Uri),
    #[error("operator CA: {0}")]
    Ca(String),
    #[error("reading the token {path}: {source}")]
    Token { path: PathBuf, source: std::io::Error },
    #[error("connecting to the operator: {0}")]
    Connect(#[from] std::io::Error),
    #[error("HTTP: {0}")]
    Http(#[from] hyper::Error),
    #[error("building the request: {0}")]
    Request(#[from] http::Error),
    #[error("the operator answered {0}")]
    Status(StatusCode),
    #[error("invalid message: {0}")]
    Message(#[from] serde_json::Error),
    #[error("the operator ended the stream")]
    Ended,
    #[error("IR version {version}: {why}")]
    Delta { version: u64, why: String },
}

/// Sends `body` to `path` on a new connection; the response, whatever its status.
pub async fn request(
    options: &Options,
    method: Method,
    path: &str,
    body: Bytes,
) -> Result<Response<Incoming>, ClientError> {
    let host = options
        .url
        .host()
        .ok_or_else(|| ClientError::Url(options.url.clone()))?;
    let host = host.trim_start_matches('[').trim_end_matches(']').to_string();
    let port = options.url.port_u16().unwrap_or(443);
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(options.ca_pem.as_bytes()) {
        let cert = cert.map_err(|e| ClientError::Ca(e.to_string()))?;
        roots.add(cert).map_err(|e| ClientError::Ca(e.to_string()))?;
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| ClientError::Ca(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = ServerName::try_from(host.clone()).map_err(|e| ClientError::Ca(e.to_string()))?;
    let tcp = connect(options, &host, port).await?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await?;
    tokio::spawn(connection);
    let token = std::fs::read_to_string(&options.token_file).map_err(|source| ClientError::Token {
        path: options.token_file.clone(),
        source,
    })?;
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header(header::HOST, format!("{host}:{port}"))
        .header(header::AUTHORIZATION, format!("Bearer {}", token.trim()))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Full::new(body))?;
    Ok(sender.send_request(request).await?)
}

/// The push endpoints to try, in order: the controller Service's ready endpoints, then the URL.
async fn targets(options: &Options, host: &str, port: u16) -> Vec<(String, u16)> {
    let mut targets = Vec::new();
    if let Some(resolver) = &options.endpoints {
        match resolver.endpoints(port).await {
            Ok(found) if found.is_empty() => {
                tracing::debug!(service = %resolver.service(), "no ready push endpoints; using the push URL");
            }
            Ok(found) => targets = found,
            Err(error) => {
                tracing::warn!(service = %resolver.service(), %error, "cannot read the push endpoints; using the push URL");
            }
        }
    }
    let url = (host.to_string(), port);
    if !targets.contains(&url) {
        targets.push(url);
    }
    targets
}

/// A TCP connection to the first push endpoint that accepts one.
async fn connect(options: &Options, host: &str, port: u16) -> Result<tokio::net::TcpStream, ClientError> {
    let mut last = std::io::Error::new(std::io::ErrorKind::NotFound, "no push endpoint");
    for (address, port) in targets(options, host, port).await {
        match tokio::time::timeout(
            CONNECT_TIMEOUT,
            tokio::net::TcpStream::connect((address.as_str(), port)),
        )
        .await
        {
            Ok(Ok(stream)) => return Ok(stream),
            Ok(Err(error)) => {
                tracing::debug!(%address, port, %error, "push endpoint refused the connection");
                last = error;
            }
            Err(_) => {
                tracing::debug!(%address, port, "push endpoint did not answer in time");
                last = std::io::Error::new(std::io::ErrorKind::TimedOut, format!("connecting to {address}:{port}"));
            }
        }
    }
    Err(ClientError::Connect(last))
}

/// One version of this proxy's IR, as received whole or built from deltas.
#[derive(Debug)]
pub struct Version {
    pub version: u64,
    pub proxy: ir::Proxy,
    /// The static layer's key material pushed with it ([`super::material`]), served beside the
    /// bundle Secret's.
    pub material: Material,
}

/// The operator's stream of IR [`Message`]s for this proxy's Gateway, deltas (narrowed to rules)
/// asked for.
pub struct Stream {
    body: Incoming,
    buffer: BytesMut,
    /// How much of `buffer` is known to hold no newline.
    scanned: usize,
}

impl Stream {
    /// Connects and asks for the stream; fails unless the operator answers 200.
    pub async fn open(options: &Options) -> Result<Stream, ClientError> {
        let path = format!("{STREAM_PATH}?{DELTAS_QUERY}&{RULES_QUERY}");
        let response = request(options, Method::GET, &path, Bytes::new()).await?;
        if response.status() != StatusCode::OK {
            return Err(ClientError::Status(response.status()));
        }
        Ok(Stream {
            body: response.into_body(),
            buffer: BytesMut::new(),
            scanned: 0,
        })
    }

    /// The next message. Cancel safe: what was read stays buffered until its message is returned.
    pub async fn next(&mut self) -> Result<Message, ClientError> {
        loop {
            if let Some(end) = self.buffer[self.scanned..].iter().position(|b| *b == b'\n') {
                let line = self.buffer.split_to(self.scanned + end + 1);
                self.scanned = 0;
                return Ok(serde_json::from_slice(line.chunk())?);
            }
            self.scanned = self.buffer.len();
            let Some(frame) = self.body.frame().await else {
                return Err(ClientError::Ended);
            };
            if let Ok(data) = frame?.into_data() {
                self.buffer.extend_from_slice(&data);
            }
        }
    }
}

/// Receives IR versions forever, applying each with the current `material`; re-applies the last
/// version when the material changes.
pub async fn run(options: Options, dataplane: Dataplane, mut material: watch::Receiver<Material>) {
    let mut backoff = BACKOFF_MIN;
    let mut last: Option<Version> = None;
    loop {
        match follow(&options, &dataplane, &mut material, &mut last, &mut backoff).await {
            Err(ClientError::Status(code)) if code == StatusCode::UNAUTHORIZED || code == StatusCode::FORBIDDEN => {
                tracing::error!(%code, "the operator refused this proxy's identity");
            }
            Err(error) => tracing::warn!(%error, retry_in = ?backoff, "IR stream interrupted"),
            Ok(()) => {}
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

async fn follow(
    options: &Options,
    dataplane: &Dataplane,
    material: &mut watch::Receiver<Material>,
    last: &mut Option<Version>,
    backoff: &mut Duration,
) -> Result<(), ClientError> {
    let mut stream = Stream::open(options).await?;
    tracing::info!(operator = %options.url, "IR stream connected");
    // A closed Secret watch keeps the material we have.
    let mut watching = material.has_changed().is_ok();
    loop {
        tokio::select! {
            message = stream.next() => {
                tracing::debug!("IR message received");
                let received = receive(last, message?)?;
                *backoff = BACKOFF_MIN;
                let current = material.borrow_and_update().clone();
                apply(options, dataplane, received, &current).await;
            }
            changed = material.changed(), if watching => {
                if changed.is_err() {
                    watching = false;
                    continue;
                }
                let current = material.borrow_and_update().clone();
                if let Some(version) = last.as_ref() {
                    tracing::info!(version = version.version, "certificate bundle changed; re-applying");
                    apply(options, dataplane, version, &current).await;
                }
            }
        }
    }
}

/// The version `message` makes of `last`: its whole IR, or its delta applied to the version
/// before. A delta for a version this proxy does not have ends the stream; the operator sends
/// the whole IR on the next connection.
pub fn receive(last: &mut Option<Version>, message: Message) -> Result<&Version, ClientError> {
    let version = message.version;
    let refused = |why: String| ClientError::Delta { version, why };
    let material = message.material.map(|m| m.to_material());
    match (message.proxy, message.base, message.delta) {
        (Some(proxy), _, _) => Ok(last.insert(Version {
            version,
            proxy,
            material: material.unwrap_or_default(),
        })),
        (None, Some(base), Some(delta)) => {
            let Some(mut current) = last.take_if(|c| c.version == base) else {
                let have = last
                    .as_ref()
                    .map(|c| c.version.to_string())
                    .unwrap_or_else(|| "none".into());
                return Err(refused(format!("a delta from version {base}, this proxy has {have}")));
            };
            // On error, partly changed: no longer any version.
            delta.apply(&mut current.proxy).map_err(|e| refused(e.to_string()))?;
            current.version = version;
            if let Some(material) = material {
                current.material = material;
            }
            Ok(last.insert(current))
        }
        _ => Err(refused("neither an IR nor a delta".into())),
    }
}

/// Applies one version with the bundle Secret's `material` and its own static material; a
/// rejection is reported to the operator (best effort).
async fn apply(options: &Options, dataplane: &Dataplane, message: &Version, material: &Material) {
    let combined;
    let material = if message.material.is_empty() {
        material
    } else {
        let mut both = material.clone();
        both.extend(&message.material);
        combined = both;
        &combined
    };
    match dataplane.apply_with(&message.proxy, material).await {
        Ok(()) => tracing::info!(version = message.version, "IR version applied"),
        Err(ApplyError::Ports(errors)) => {
            tracing::warn!(
                version = message.version,
                ports = errors.len(),
                "IR version applied, some ports not served"
            );
        }
        Err(error) => {
            tracing::error!(version = message.version, %error, "IR version rejected");
            let rejection = Rejection {
                version: message.version,
                error: error.to_string(),
            };
            let body = Bytes::from(serde_json::to_vec(&rejection).unwrap_or_default());
            match request(options, Method::POST, REJECTIONS_PATH, body).await {
                Ok(response) if response.status().is_success() => {}
                Ok(response) => tracing::warn!(status = %response.status(), "rejection report refused"),
                Err(error) => tracing::warn!(%error, "cannot report the rejection"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use translator::ir::delta::{Delta, Splice};

    use super::*;

    fn whole(version: u64, id: &str) -> Message {
        Message {
            version,
            proxy: Some(ir::Proxy {
                id: id.into(),
                ..ir::Proxy::default()
            }),
            base: None,
            delta: None,
            material: None,
        }
    }

    fn delta(version: u64, base: u64, delta: Delta) -> Message {
        Message {
            version,
            proxy: None,
            base: Some(base),
            delta: Some(delta),
            material: None,
        }
    }

    #[test]
    fn deltas_apply_only_to_the_version_they_were_made_from() {
        let mut last = None;
        let removed = Delta {
            removed_backends: vec!["a".into()],
            ..Delta::default()
        };
        // No version yet: a delta is refused and nothing is made up.
        assert!(matches!(
            receive(&mut last, delta(2, 1, removed.clone())),
            Err(ClientError::Delta { version: 2, .. })
        ));
        assert!(last.is_none());
        receive(&mut last, whole(1, "gw")).expect("a whole IR");
        // From another version: refused, and the version held stays.
        assert!(receive(&mut last, delta(3, 2, removed.clone())).is_err());
        assert_eq!(last.as_ref().map(|v| v.version), Some(1));
        let received = receive(&mut last, delta(2, 1, removed)).expect("applies");
        assert_eq!((received.version, received.proxy.id.as_str()), (2, "gw"));
        // One that does not fit the IR: refused, and the IR, partly changed, is let go.
        let misfit = Delta {
            virtual_hosts: vec![Splice {
                port: 0,
                listener: 0,
                at: 0,
                remove: 1,
                insert: vec![],
            }],
            ..Delta::default()
        };
        assert!(receive(&mut last, delta(3, 2, misfit)).is_err());
        assert!(last.is_none());
    }

    #[test]
    fn static_material_comes_with_a_whole_ir_and_stays_until_a_delta_changes_it() {
        let material = |pem: &str| {
            let mut m = crate::push::material::StaticMaterial::default();
            m.ca_bundles.insert("infra/ca".into(), pem.into());
            m
        };
        let mut last = None;
        let mut first = whole(1, "gw");
        first.material = Some(material("ONE"));
        receive(&mut last, first).expect("a whole IR");
        let ca = |last: &Option<Version>| {
            last.as_ref()
                .and_then(|v| v.material.ca_bundles.get("infra/ca").cloned())
        };
        assert_eq!(ca(&last).as_deref(), Some("ONE"));
        receive(&mut last, delta(2, 1, Delta::default())).expect("applies");
        assert_eq!(ca(&last).as_deref(), Some("ONE"), "a delta without material keeps it");
        let mut changed = delta(3, 2, Delta::default());
        changed.material = Some(material("TWO"));
        receive(&mut last, changed).expect("applies");
        assert_eq!(ca(&last).as_deref(), Some("TWO"));
        receive(&mut last, whole(4, "gw")).expect("a whole IR");
        assert_eq!(ca(&last), None, "a whole IR without material has none");
    }
}
