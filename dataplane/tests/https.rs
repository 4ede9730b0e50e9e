//! HTTPS listeners over real sockets: certificates by SNI, ALPN, 421 Misdirected Request and
//! client-certificate validation.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use common::*;
use dataplane::{ApplyError, Dataplane, Material, Settings, TlsCertificate};
use http::{Request, StatusCode, Version};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rcgen::{CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use rustls::RootCertStore;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use translator::ir;

/// A self-signed certificate for `names`, as bundle material and as a client trust root.
fn self_signed(names: &[&str]) -> (TlsCertificate, CertificateDer<'static>) {
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let generated = rcgen::generate_simple_self_signed(names).unwrap();
    let material = TlsCertificate {
        chain_pem: generated.cert.pem(),
        key_pem: generated.signing_key.serialize_pem(),
    };
    (material, generated.cert.der().clone())
}

fn https_listener(name: &str, hostname: Option<&str>, secret: &str, rules: Vec<ir::HttpRule>) -> ir::Listener {
    let mut l = listener(name, hostname, vec![vhost(hostname.unwrap_or("*"), rules)]);
    l.protocol = ir::Protocol::Https;
    l.tls = Some(ir::ListenerTls {
        mode: ir::TlsMode::Terminate,
        certificates: vec![secret.into()],
    });
    l
}

/// A client identity: certificate chain and key.
type Identity = (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>);

fn connector(roots: &[CertificateDer<'static>], identity: Option<Identity>, alpn: &[&[u8]]) -> TlsConnector {
    let mut store = RootCertStore::empty();
    for root in roots {
        store.add(root.clone()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(store);
    let mut config = match identity {
        Some((chain, key)) => builder.with_client_auth_cert(chain, key).unwrap(),
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    TlsConnector::from(Arc::new(config))
}

/// GET `path` with `host` over TLS with server name `sni`; HTTP/2 when ALPN selects it.
async fn https_get(
    addr: SocketAddr,
    connector: &TlsConnector,
    sni: &str,
    host: &str,
    path: &str,
) -> Result<Reply, String> {
    let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let server_name = ServerName::try_from(sni.to_string()).map_err(|e| e.to_string())?;
    let tls = connector.connect(server_name, tcp).await.map_err(|e| e.to_string())?;
    let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
    let io = TokioIo::new(tls);
    let response = if h2 {
        let (mut sender, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        let req = Request::builder()
            .uri(format!("https://{host}{path}"))
            .body(Full::new(Bytes::new()))
            .unwrap();
        sender.send_request(req).await.map_err(|e| e.to_string())?
    } else {
        let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        let req = Request::builder()
            .uri(path)
            .header("host", host)
            .body(Full::new(Bytes::new()))
            .unwrap();
        sender.send_request(req).await.map_err(|e| e.to_string())?
    };
    let version = response.version();
    let (parts, body) = response.into_parts();
    let body = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
    let mut headers = parts.headers;
    headers.insert("x-client-version", format!("{version:?}").parse().unwrap());
    Ok(Reply {
        status: parts.status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

struct Fixture {
    _dp: Dataplane,
    addr: SocketAddr,
    exact_root: CertificateDer<'static>,
    wildcard_root: CertificateDer<'static>,
}

/// Port 443 with `a.example.com` (its own certificate) and `*.example.com`.
async fn two_listeners(validation: Option<ir::FrontendValidation>, mut material: Material) -> Fixture {
    let exact = EchoBackend::start("exact").await;
    let wildcard = EchoBackend::start("wildcard").await;
    let (exact_cert, exact_root) = self_signed(&["a.example.com"]);
    let (wildcard_cert, wildcard_root) = self_signed(&["*.example.com"]);
    material.certificates.insert("test/exact".into(), exact_cert);
    material.certificates.insert("test/wildcard".into(), wildcard_cert);
    let mut port = http_port(
        443,
        vec![
            https_listener(
                "exact",
                Some("a.example.com"),
                "test/exact",
                vec![rule("exact", prefix("/"), "exact")],
            ),
            https_listener(
                "wildcard",
                Some("*.example.com"),
                "test/wildcard",
                vec![rule("wildcard", prefix("/"), "wildcard")],
            ),
        ],
    );
    port.frontend_validation = validation;
    let ir = proxy(vec![port], vec![echo_backend(&exact), echo_backend(&wildcard)]);
    let dp = Dataplane::new(Settings::on([127, 0, 0, 1].into()));
    dp.apply_with(&ir, &material).await.unwrap();
    let addr = dp.local_addr(443).await.unwrap();
    Fixture {
        _dp: dp,
        addr,
        exact_root,
        wildcard_root,
    }
}

#[tokio::test]
async fn certificates_are_chosen_by_server_name() {
    let f = two_listeners(None, Material::default()).await;
    let trusts_exact = connector(std::slice::from_ref(&f.exact_root), None, &[b"http/1.1"]);
    let trusts_wildcard = connector(std::slice::from_ref(&f.wildcard_root), None, &[b"http/1.1"]);

    let reply = https_get(f.addr, &trusts_exact, "a.example.com", "a.example.com", "/")
        .await
        .unwrap();
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.backend(), "exact");
    assert_eq!(reply.echoed("x-forwarded-proto"), ["https"]);

    let reply = https_get(f.addr, &trusts_wildcard, "b.example.com", "b.example.com", "/")
        .await
        .unwrap();
    assert_eq!(reply.backend(), "wildcard");

    // b.example.com is served the wildcard certificate, which this client does not trust.
    assert!(
        https_get(f.addr, &trusts_exact, "b.example.com", "b.example.com", "/")
            .await
            .is_err()
    );
}

#[tokio::test]
async fn alpn_negotiates_http2() {
    let f = two_listeners(None, Material::default()).await;
    let client = connector(std::slice::from_ref(&f.exact_root), None, &[b"h2", b"http/1.1"]);
    let reply = https_get(f.addr, &client, "a.example.com", "a.example.com", "/h2")
        .await
        .unwrap();
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.header("x-client-version"), format!("{:?}", Version::HTTP_2));
    assert_eq!(reply.header("x-path"), "/h2");
}

#[tokio::test]
async fn requests_for_another_listener_are_misdirected() {
    let f = two_listeners(None, Material::default()).await;
    for alpn in [&[b"h2" as &[u8]][..], &[b"http/1.1"]] {
        let client = connector(std::slice::from_ref(&f.exact_root), None, alpn);
        let reply = https_get(f.addr, &client, "a.example.com", "b.example.com", "/")
            .await
            .unwrap();
        assert_eq!(reply.status, StatusCode::MISDIRECTED_REQUEST);
        let reply = https_get(f.addr, &client, "a.example.com", "a.example.com:443", "/")
            .await
            .unwrap();
        assert_eq!(reply.status, StatusCode::OK);
    }
}

/// A CA, and a client identity it signed.
fn client_ca() -> (String, Identity, Identity) {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
    let identity = |signer: Option<&CertifiedIssuer<'_, KeyPair>>| {
        let key = KeyPair::generate().unwrap();
        let params = CertificateParams::new(vec!["client".to_string()]).unwrap();
        let cert = match signer {
            Some(ca) => params.signed_by(&key, ca).unwrap(),
            None => params.self_signed(&key).unwrap(),
        };
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        (vec![cert.der().clone()], key)
    };
    (ca.pem(), identity(Some(&ca)), identity(None))
}

#[tokio::test]
async fn allow_valid_only_requires_a_client_certificate_from_the_ca() {
    let (ca_pem, valid, self_signed_identity) = client_ca();
    let mut material = Material::default();
    material.ca_bundles.insert("test/client-ca".into(), ca_pem);
    let validation = ir::FrontendValidation {
        mode: ir::FrontendValidationMode::AllowValidOnly,
        ca_certificates: vec!["test/client-ca".into()],
    };
    let f = two_listeners(Some(validation), material).await;
    let roots = std::slice::from_ref(&f.exact_root);

    let client = connector(roots, Some(valid), &[b"http/1.1"]);
    let reply = https_get(f.addr, &client, "a.example.com", "a.example.com", "/")
        .await
        .unwrap();
    assert_eq!(reply.status, StatusCode::OK);

    for identity in [None, Some(self_signed_identity)] {
        let client = connector(roots, identity, &[b"http/1.1"]);
        assert!(
            https_get(f.addr, &client, "a.example.com", "a.example.com", "/")
                .await
                .is_err()
        );
    }
    // Both refused handshakes are counted.
    let metrics = f._dp.metrics();
    assert!(
        metrics.contains("turna_dataplane_tls_handshake_errors_total 2"),
        "{metrics}"
    );
}

/// Presents `identity` when the server asks for a client certificate and records that it asked
/// (as the conformance suite's GetClientCertificate hook does).
#[derive(Debug)]
struct RecordingClientCert {
    key: Arc<rustls::sign::CertifiedKey>,
    asked: std::sync::atomic::AtomicBool,
}

impl RecordingClientCert {
    fn new((chain, key): Identity) -> Arc<Self> {
        let provider = rustls::crypto::ring::default_provider();
        let key = rustls::sign::CertifiedKey::from_der(chain, key, &provider).unwrap();
        Arc::new(Self {
            key: Arc::new(key),
            asked: Default::default(),
        })
    }

    fn asked(&self) -> bool {
        self.asked.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl rustls::client::ResolvesClientCert for RecordingClientCert {
    fn resolve(&self, _: &[&[u8]], _: &[rustls::SignatureScheme]) -> Option<Arc<rustls::sign::CertifiedKey>> {
        self.asked.store(true, std::sync::atomic::Ordering::SeqCst);
        Some(self.key.clone())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

#[tokio::test]
async fn allow_insecure_fallback_asks_for_a_certificate_and_accepts_every_client() {
    let (ca_pem, valid, self_signed_identity) = client_ca();
    let mut material = Material::default();
    material.ca_bundles.insert("test/client-ca".into(), ca_pem);
    let validation = ir::FrontendValidation {
        mode: ir::FrontendValidationMode::AllowInsecureFallback,
        ca_certificates: vec!["test/client-ca".into()],
    };
    let f = two_listeners(Some(validation), material).await;
    let client = connector(std::slice::from_ref(&f.exact_root), None, &[b"http/1.1"]);
    let reply = https_get(f.addr, &client, "a.example.com", "a.example.com", "/")
        .await
        .unwrap();
    assert_eq!(reply.status, StatusCode::OK);

    // Clients with a certificate are asked for it and served whether or not the CA signed it.
    for identity in [valid, self_signed_identity] {
        let resolver = RecordingClientCert::new(identity);
        let mut store = RootCertStore::empty();
        store.add(f.exact_root.clone()).unwrap();
        let mut config =
            rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(store)
                .with_client_cert_resolver(resolver.clone());
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let client = TlsConnector::from(Arc::new(config));
        let reply = https_get(f.addr, &client, "a.example.com", "a.example.com", "/")
            .await
            .unwrap();
        assert_eq!(reply.status, StatusCode::OK);
        assert!(resolver.asked(), "the server asked for a client certificate");
    }
}

#[tokio::test]
async fn missing_certificates_reject_the_ir() {
    let echo = EchoBackend::start("echo").await;
    let port = http_port(
        443,
        vec![https_listener(
            "tls",
            None,
            "test/missing",
            vec![rule("r", prefix("/"), "echo")],
        )],
    );
    let dp = Dataplane::new(Settings::on([127, 0, 0, 1].into()));
    let error = dp
        .apply(proxy(vec![port], vec![echo_backend(&echo)]))
        .await
        .unwrap_err();
    assert!(matches!(error, ApplyError::Invalid(_)), "{error}");
    assert!(error.to_string().contains("test/missing"), "{error}");
}

#[tokio::test]
async fn tls_terminate_and_passthrough_share_a_port() {
    use common::stream::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let passthrough = tcp_echo("pass").await;
    let terminated = tcp_echo("term").await;
    let (cert, root) = self_signed(&["term.example.com"]);
    let mut material = Material::default();
    material.certificates.insert("test/term".into(), cert);
    let mut terminate = stream_listener(
        "term",
        ir::Protocol::Tls,
        Some("term.example.com"),
        vec![stream_route("term", &[], vec![weighted(Some("term"), 1)])],
    );
    terminate.tls = Some(ir::ListenerTls {
        mode: ir::TlsMode::Terminate,
        certificates: vec!["test/term".into()],
    });
    let pass = stream_listener(
        "pass",
        ir::Protocol::Tls,
        Some("pass.example.com"),
        vec![stream_route("pass", &[], vec![weighted(Some("pass"), 1)])],
    );
    let ir = proxy(
        vec![port(ir::Transport::Tcp, 443, vec![terminate, pass])],
        vec![stream_backend("pass", passthrough), stream_backend("term", terminated)],
    );
    let dp = Dataplane::new(loopback());
    dp.apply_with(&ir, &material).await.unwrap();
    let addr = dp.local_addr(443).await.unwrap();

    // Terminated: the backend gets the decrypted bytes.
    let tcp = TcpStream::connect(addr).await.unwrap();
    let client = connector(&[root], None, &[]);
    let mut tls = client
        .connect(ServerName::try_from("term.example.com").unwrap(), tcp)
        .await
        .unwrap();
    tls.write_all(b"secret").await.unwrap();
    let mut buf = [0u8; 11];
    tls.read_exact(&mut buf).await.unwrap();
    assert_eq!(&buf, b"term:secret");

    // Passthrough: the backend gets the ClientHello itself.
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    assert!(exchange(&mut tcp, &client_hello("pass.example.com"), "pass").await);
}

#[tokio::test]
async fn changed_client_validation_closes_connections_accepted_before() {
    let (ca_pem, valid, _) = client_ca();
    let mut material = Material::default();
    material.ca_bundles.insert("test/client-ca".into(), ca_pem);
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let bind_port = free.local_addr().unwrap().port();
    drop(free);
    let echo = EchoBackend::start("echo").await;
    let (cert, root) = self_signed(&["a.example.com"]);
    material.certificates.insert("test/cert".into(), cert);
    let validation = |mode| ir::FrontendValidation {
        mode,
        ca_certificates: vec!["test/client-ca".into()],
    };
    let ir = |mode| {
        let mut port = http_port(
            443,
            vec![https_listener(
                "tls",
                Some("a.example.com"),
                "test/cert",
                vec![rule("r", prefix("/"), "echo")],
            )],
        );
        port.bind_port = bind_port;
        port.frontend_validation = Some(validation(mode));
        proxy(vec![port], vec![echo_backend(&echo)])
    };
    let dp = Dataplane::new(Settings::on([127, 0, 0, 1].into()));
    dp.apply_with(&ir(ir::FrontendValidationMode::AllowInsecureFallback), &material)
        .await
        .unwrap();
    let addr = dp.local_addr(443).await.unwrap();

    // A client without a certificate is served and keeps its connection open.
    let anonymous = connector(std::slice::from_ref(&root), None, &[b"http/1.1"]);
    let tcp = TcpStream::connect(addr).await.unwrap();
    let tls = anonymous
        .connect(ServerName::try_from("a.example.com").unwrap(), tcp)
        .await
        .unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await.unwrap();
    tokio::spawn(conn);
    let request = || {
        Request::builder()
            .uri("/")
            .header("host", "a.example.com")
            .body(Full::new(Bytes::new()))
            .unwrap()
    };
    assert_eq!(sender.send_request(request()).await.unwrap().status(), StatusCode::OK);

    dp.apply_with(&ir(ir::FrontendValidationMode::AllowValidOnly), &material)
        .await
        .unwrap();
    assert_eq!(dp.local_addr(443).await, Some(addr), "same local port");
    let mut closed = false;
    for _ in 0..50 {
        if sender.is_closed() || sender.send_request(request()).await.is_err() {
            closed = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(closed, "the connection accepted without a certificate was closed");
    assert!(
        https_get(addr, &anonymous, "a.example.com", "a.example.com", "/")
            .await
            .is_err()
    );
    let with_cert = connector(std::slice::from_ref(&root), Some(valid), &[b"http/1.1"]);
    let reply = https_get(addr, &with_cert, "a.example.com", "a.example.com", "/")
        .await
        .unwrap();
    assert_eq!(reply.status, StatusCode::OK);
}

#[tokio::test]
async fn new_certificates_apply_to_new_connections() {
    let echo = EchoBackend::start("echo").await;
    let (first, first_root) = self_signed(&["a.example.com"]);
    let (second, second_root) = self_signed(&["a.example.com"]);
    let ir = proxy(
        vec![http_port(
            443,
            vec![https_listener(
                "tls",
                Some("a.example.com"),
                "test/cert",
                vec![rule("r", prefix("/"), "echo")],
            )],
        )],
        vec![echo_backend(&echo)],
    );
    let dp = Dataplane::new(Settings::on([127, 0, 0, 1].into()));
    let mut material = Material::default();
    material.certificates.insert("test/cert".into(), first);
    dp.apply_with(&ir, &material).await.unwrap();
    let addr = dp.local_addr(443).await.unwrap();
    let trusts_first = connector(std::slice::from_ref(&first_root), None, &[b"http/1.1"]);
    let trusts_second = connector(std::slice::from_ref(&second_root), None, &[b"http/1.1"]);
    assert!(
        https_get(addr, &trusts_first, "a.example.com", "a.example.com", "/")
            .await
            .is_ok()
    );

    material.certificates.insert("test/cert".into(), second);
    dp.apply_with(&ir, &material).await.unwrap();
    assert_eq!(dp.local_addr(443).await, Some(addr), "the socket is kept");
    assert!(
        https_get(addr, &trusts_first, "a.example.com", "a.example.com", "/")
            .await
            .is_err()
    );
    assert!(
        https_get(addr, &trusts_second, "a.example.com", "a.example.com", "/")
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn https_and_tls_passthrough_share_a_port() {
    use common::stream::*;

    let echo = EchoBackend::start("web").await;
    let passthrough = tcp_echo("pass").await;
    let (cert, root) = self_signed(&["web.example.com"]);
    let mut material = Material::default();
    material.certificates.insert("test/web".into(), cert);
    let web = https_listener(
        "web",
        Some("web.example.com"),
        "test/web",
        vec![rule("web", prefix("/"), "web")],
    );
    let pass = stream_listener(
        "pass",
        ir::Protocol::Tls,
        Some("pass.example.com"),
        vec![stream_route("pass", &[], vec![weighted(Some("pass"), 1)])],
    );
    let ir = proxy(
        vec![port(ir::Transport::Tcp, 443, vec![web, pass])],
        vec![echo_backend(&echo), stream_backend("pass", passthrough)],
    );
    let dp = Dataplane::new(loopback());
    dp.apply_with(&ir, &material).await.unwrap();
    let addr = dp.local_addr(443).await.unwrap();

    for alpn in [&[b"h2" as &[u8]][..], &[b"http/1.1"]] {
        let client = connector(std::slice::from_ref(&root), None, alpn);
        let reply = https_get(addr, &client, "web.example.com", "web.example.com", "/x")
            .await
            .unwrap();
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(reply.backend(), "web");
        assert_eq!(reply.echoed("x-forwarded-proto"), ["https"]);
    }
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    assert!(exchange(&mut tcp, &client_hello("pass.example.com"), "pass").await);
}

/// A client socket that keeps a copy of every byte it reads: the TLS records as they came.
struct Recorded {
    tcp: TcpStream,
    read: Arc<std::sync::Mutex<Vec<u8>>>,
}

impl tokio::io::AsyncRead for Recorded {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let poll = std::pin::Pin::new(&mut self.tcp).poll_read(cx, buf);
        if let std::task::Poll::Ready(Ok(())) = &poll {
            self.read.lock().unwrap().extend_from_slice(&buf.filled()[before..]);
        }
        poll
    }
}

impl tokio::io::AsyncWrite for Recorded {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        data: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.tcp).poll_write(cx, data)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.tcp).poll_shutdown(cx)
    }
}

/// The TLS records in `bytes`, which hold whole records.
fn tls_records(bytes: &[u8]) -> usize {
    let (mut count, mut at) = (0, 0);
    while at + 5 <= bytes.len() {
        at += 5 + u16::from_be_bytes([bytes[at + 3], bytes[at + 4]]) as usize;
        count += 1;
    }
    assert_eq!(at, bytes.len(), "whole records");
    count
}

/// A backend that answers every request on a connection with one write of a whole response.
async fn one_write_backend() -> SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 1024];
                loop {
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        buf.drain(..end + 4);
                        let response = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello";
                        if conn.write_all(response).await.is_err() {
                            return;
                        }
                    }
                    match conn.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
            });
        }
    });
    addr
}

/// Reads one response with a 5-byte body off `tls`.
async fn read_hello<S: tokio::io::AsyncRead + Unpin>(tls: &mut S) -> String {
    use tokio::io::AsyncReadExt;
    let mut response = Vec::new();
    let mut chunk = [0u8; 1024];
    // Until the head and its 5-byte body are in.
    let whole = |r: &[u8]| {
        r.windows(4)
            .position(|w| w == b"\r\n\r\n")
            .is_some_and(|end| r.len() >= end + 4 + 5)
    };
    while !whole(&response) {
        let n = tls.read(&mut chunk).await.unwrap();
        assert!(n > 0, "the proxy closed the connection");
        response.extend_from_slice(&chunk[..n]);
    }
    String::from_utf8_lossy(&response).into_owned()
}

#[tokio::test]
async fn a_response_goes_out_as_one_tls_record() {
    use tokio::io::AsyncWriteExt;
    let backend_addr = one_write_backend().await;
    let (certificate, root) = self_signed(&["a.example.com"]);
    let mut material = Material::default();
    material.certificates.insert("test/a".into(), certificate);
    let listener = https_listener(
        "a",
        Some("a.example.com"),
        "test/a",
        vec![rule("a", prefix("/"), "one-write")],
    );
    let ir = proxy(
        vec![http_port(443, vec![listener])],
        vec![backend("one-write", vec![common::stream::endpoint(backend_addr)])],
    );
    let dp = Dataplane::new(Settings::on([127, 0, 0, 1].into()));
    dp.apply_with(&ir, &material).await.unwrap();
    let addr = dp.local_addr(443).await.unwrap();
    // Without ALPN (as wrk connects) the proxy reads the first bytes to tell HTTP/1.1 from
    // HTTP/2 and gives them back through a wrapper: the path where head and body were written
    // one at a time.
    for alpn in [&[][..], &[b"http/1.1" as &[u8]][..]] {
        let read = Arc::new(std::sync::Mutex::new(Vec::new()));
        let tcp = Recorded {
            tcp: TcpStream::connect(addr).await.unwrap(),
            read: read.clone(),
        };
        let client = connector(std::slice::from_ref(&root), None, alpn);
        let server_name = ServerName::try_from("a.example.com").unwrap();
        let mut tls = client.connect(server_name, tcp).await.unwrap();
        let request = b"GET / HTTP/1.1\r\nhost: a.example.com\r\n\r\n";
        // The first response also follows the handshake's last records (session tickets).
        tls.write_all(request).await.unwrap();
        assert!(read_hello(&mut tls).await.ends_with("hello"));
        let before = read.lock().unwrap().len();
        tls.write_all(request).await.unwrap();
        let response = read_hello(&mut tls).await;
        assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");
        assert!(response.ends_with("\r\n\r\nhello"), "{response}");
        let records = tls_records(&read.lock().unwrap()[before..]);
        assert_eq!(records, 1, "head and body in one record (ALPN {alpn:?})");
    }
}
