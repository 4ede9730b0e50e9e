//! The kubelet API subset the apiserver needs for `kubectl logs`: HTTPS on the node IP with
//! client certificates from the cluster CA (the apiserver's `--kubelet-client-certificate`),
//! `GET /containerLogs/{namespace}/{pod}/{container}` with `follow`, `tailLines`, `limitBytes`
//! and `previous`, and `GET /healthz`.

use std::convert::Infallible;
use std::io::{Read, Seek, SeekFrom};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::config::AgentConfig;
use crate::error::{Error, Result};

type Body = BoxBody<Bytes, Infallible>;

/// Binds the kubelet port (so a failure to bind is reported at start) and returns the server.
pub async fn bind(cfg: &AgentConfig) -> Result<(TcpListener, TlsAcceptor)> {
    let tls = tls_config(cfg)?;
    let addr = SocketAddr::new(cfg.node_ip().into(), cfg.kubelet_port);
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| Error::io(format!("binding kubelet API on {addr}"), e))?;
    tracing::info!(%addr, "kubelet API listening");
    Ok((listener, TlsAcceptor::from(Arc::new(tls))))
}

/// Serves connections until the task is dropped.
pub async fn serve(listener: TcpListener, acceptor: TlsAcceptor, state_dir: PathBuf) {
    let state_dir = Arc::new(state_dir);
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "kubelet API accept");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let acceptor = acceptor.clone();
        let state_dir = state_dir.clone();
        tokio::spawn(async move {
            let tls = match acceptor.accept(tcp).await {
                Ok(t) => t,
                Err(e) => {
                    tracing::debug!(%peer, error = %e, "kubelet API TLS handshake");
                    return;
                }
            };
            let svc = service_fn(move |req| {
                let dir = state_dir.clone();
                async move { Ok::<_, Infallible>(handle(&dir, req).await) }
            });
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tls), svc)
                .await
            {
                tracing::debug!(%peer, error = %e, "kubelet API connection");
            }
        });
    }
}

fn tls_config(cfg: &AgentConfig) -> Result<rustls::ServerConfig> {
    let tls = |e: &dyn std::fmt::Display| Error::Tls(e.to_string());
    let mut names = vec![cfg.node_ip().to_string(), cfg.node_name.clone()];
    names.dedup();
    let key = rcgen::KeyPair::generate().map_err(|e| tls(&e))?;
    let cert = rcgen::CertificateParams::new(names)
        .and_then(|p| p.self_signed(&key))
        .map_err(|e| tls(&e))?;
    let chain = vec![cert.der().clone()];
    let key = PrivateKeyDer::try_from(key.serialize_der()).map_err(|e| tls(&e))?;
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(&cfg.client_ca_file).map_err(|e| tls(&e))? {
        roots.add(c.map_err(|e| tls(&e))?).map_err(|e| tls(&e))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| tls(&e))?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| tls(&e))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .map_err(|e| tls(&e))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

fn text(status: StatusCode, body: impl Into<String>) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from(body.into())).boxed());
    *r.status_mut() = status;
    r
}

/// Query parameters of a log request.
#[derive(Debug, Default, PartialEq)]
pub struct LogOptions {
    pub follow: bool,
    pub previous: bool,
    pub tail_lines: Option<usize>,
    pub limit_bytes: Option<usize>,
}

impl LogOptions {
    pub fn parse(query: &str) -> Self {
        let mut o = LogOptions::default();
        for pair in query.split('&') {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            match k {
                "follow" => o.follow = v == "true" || v == "1",
                "previous" => o.previous = v == "true" || v == "1",
                "tailLines" => o.tail_lines = v.parse().ok(),
                "limitBytes" => o.limit_bytes = v.parse().ok(),
                _ => {}
            }
        }
        o
    }
}

async fn handle(state_dir: &Path, req: Request<Incoming>) -> Response<Body> {
    let path = req.uri().path();
    if path == "/healthz" {
        return text(StatusCode::OK, "ok");
    }
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let ["containerLogs", ns, pod, container] = parts.as_slice() else {
        return text(StatusCode::NOT_FOUND, "not found");
    };
    let opts = LogOptions::parse(req.uri().query().unwrap_or(""));
    let Some(dir) = container_log_dir(state_dir, ns, pod, container) else {
        return text(
            StatusCode::NOT_FOUND,
            format!("container {container} of pod {ns}/{pod} not found on this node"),
        );
    };
    let Some(current) = latest_run(&dir) else {
        return text(
            StatusCode::BAD_REQUEST,
            format!("container {container} has not started"),
        );
    };
    let run = if opts.previous {
        match current.checked_sub(1) {
            Some(p) if dir.join(format!("{p}.log")).exists() => p,
            _ => {
                return text(
                    StatusCode::BAD_REQUEST,
                    format!("previous terminated container {container} in pod {pod} not found"),
                );
            }
        }
    } else {
        current
    };
    let file = dir.join(format!("{run}.log"));
    let content = std::fs::read(&file).unwrap_or_default();
    let offset = content.len() as u64;
    let mut initial = tail(&content, opts.tail_lines).to_vec();
    if let Some(limit) = opts.limit_bytes {
        initial.truncate(limit);
    }
    if !opts.follow || opts.previous {
        return Response::new(Full::new(Bytes::from(initial)).boxed());
    }
    let pid_file = dir
        .parent()
        .and_then(Path::parent)
        .map(|pod_dir| pod_dir.join("containers").join(format!("{container}.pid")));
    let follow = Follow {
        file,
        dir,
        run,
        offset,
        pid_file,
        first: Some(initial),
    };
    let stream = futures::stream::unfold(follow, |mut f| async move {
        f.next().await.map(|chunk| (Ok::<_, Infallible>(Frame::data(chunk)), f))
    });
    Response::new(BodyExt::boxed(StreamBody::new(stream)))
}

/// `<pod dir>/logs/<container>` of the newest pod dir named `<ns>_<pod>_<uid>`.
fn container_log_dir(state_dir: &Path, ns: &str, pod: &str, container: &str) -> Option<PathBuf> {
    let prefix = format!("{ns}_{pod}_");
    std::fs::read_dir(state_dir.join("pods"))
        .ok()?
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .max_by_key(|(t, _)| *t)
        .map(|(_, p)| p.join("logs").join(container))
        .filter(|d| d.is_dir())
}

/// The highest `<n>.log` in a container's log directory.
fn latest_run(dir: &Path) -> Option<u32> {
    std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().strip_suffix(".log")?.parse().ok())
        .max()
}

/// The last `lines` lines of `content` (all of it for `None`).
pub fn tail(content: &[u8], lines: Option<usize>) -> &[u8] {
    let Some(n) = lines else { return content };
    let body = content.strip_suffix(b"\n").unwrap_or(content);
    let mut seen = 0;
    for (i, b) in body.iter().enumerate().rev() {
        if *b == b'\n' {
            seen += 1;
            if seen == n {
                return &content[i + 1..];
            }
        }
    }
    if n == 0 { &content[content.len()..] } else { content }
}

/// Follows a log file until the container exits or restarts (a newer log appears).
struct Follow {
    file: PathBuf,
    dir: PathBuf,
    run: u32,
    offset: u64,
    pid_file: Option<PathBuf>,
    first: Option<Vec<u8>>,
}

impl Follow {
    async fn next(&mut self) -> Option<Bytes> {
        if let Some(first) = self.first.take()
            && !first.is_empty()
        {
            return Some(Bytes::from(first));
        }
        loop {
            let chunk = self.read_new();
            if !chunk.is_empty() {
                return Some(Bytes::from(chunk));
            }
            let restarted = latest_run(&self.dir).is_some_and(|r| r > self.run);
            if restarted || !self.file.exists() || !self.running() {
                // One last read: output written just before the exit.
                let chunk = self.read_new();
                return (!chunk.is_empty()).then(|| Bytes::from(chunk));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    fn read_new(&mut self) -> Vec<u8> {
        let mut buf = Vec::new();
        if let Ok(mut f) = std::fs::File::open(&self.file)
            && f.seek(SeekFrom::Start(self.offset)).is_ok()
            && f.by_ref().take(1 << 20).read_to_end(&mut buf).is_ok()
        {
            self.offset += buf.len() as u64;
        }
        buf
    }

    fn running(&self) -> bool {
        let Some(pid) = self
            .pid_file
            .as_ref()
            .and_then(|p| std::fs::read_to_string(p).ok())
            .and_then(|s| s.split_whitespace().next()?.parse::<i32>().ok())
        else {
            return false;
        };
        // SAFETY: signal 0 only checks that the process exists.
        unsafe { libc::kill(pid, 0) == 0 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_lines() {
        assert_eq!(tail(b"a\nb\nc\n", Some(2)), b"b\nc\n");
        assert_eq!(tail(b"a\nb\nc", Some(1)), b"c");
        assert_eq!(tail(b"a\nb\n", Some(5)), b"a\nb\n");
        assert_eq!(tail(b"a\nb\n", Some(0)), b"");
        assert_eq!(tail(b"a\nb\n", None), b"a\nb\n");
    }

    #[test]
    fn options() {
        let o = LogOptions::parse("follow=true&tailLines=10&limitBytes=5&timestamps=true");
        assert_eq!(
            o,
            LogOptions {
                follow: true,
                previous: false,
                tail_lines: Some(10),
                limit_bytes: Some(5)
            }
        );
    }
}
