//! Constant load through a Gateway while the suite changes things, with every answer kept.
//!
//! Workers send GET requests at a fixed rate each, in one of the [`Mode`]s clients use: a
//! kept-alive HTTP/1.1 connection, a new connection per request, an h2c connection (prior
//! knowledge), and the same over TLS. Every request becomes an [`Outcome`]: when it was sent and
//! answered, on which connection, and which backend answered (the echo backends report their
//! Service and pod, and the request headers they saw).
//!
//! Kept-alive clients behave as real ones do (RFC 9112 section 9.3.1, RFC 9113 section 8.7): a
//! request that fails on a reused connection before any byte of an answer (the server closed it
//! while idle), or that the server refused without processing it (HTTP/2 REFUSED_STREAM, or a
//! stream above a GOAWAY's last stream id), is sent again once on a new connection. Such
//! requests are counted apart ([`Outcome::client_retry`]), never hidden.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, header};
use http_body_util::{BodyExt, Empty, Limited};
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde::{Deserialize, Serialize};
use tokio::net::TcpStream;
use tokio::sync::watch;

/// How a worker talks to the Gateway.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Mode {
    /// HTTP/1.1 on one kept-alive connection.
    KeepAlive,
    /// HTTP/1.1, a new connection (`Connection: close`) per request.
    NewConnection,
    /// HTTP/2 without TLS (prior knowledge) on one connection.
    H2c,
    /// HTTP/1.1 over TLS on one kept-alive connection.
    TlsKeepAlive,
    /// HTTP/1.1 over TLS, a new connection and handshake per request.
    TlsNewConnection,
}

impl Mode {
    pub const PLAIN: [Mode; 3] = [Mode::KeepAlive, Mode::NewConnection, Mode::H2c];
    pub const TLS: [Mode; 2] = [Mode::TlsKeepAlive, Mode::TlsNewConnection];

    pub fn name(self) -> &'static str {
        match self {
            Mode::KeepAlive => "HTTP/1.1 keep-alive",
            Mode::NewConnection => "HTTP/1.1 new connections",
            Mode::H2c => "h2c",
            Mode::TlsKeepAlive => "HTTPS keep-alive",
            Mode::TlsNewConnection => "HTTPS new connections",
        }
    }

    fn reuses_connections(self) -> bool {
        matches!(self, Mode::KeepAlive | Mode::H2c | Mode::TlsKeepAlive)
    }
}

/// Where requests go.
#[derive(Clone)]
pub struct Target {
    /// How reports name it.
    pub label: String,
    pub addr: SocketAddr,
    /// The Host header (HTTP/1.1), authority (HTTP/2) and TLS server name.
    pub host: String,
    pub path: String,
    /// TLS with this client configuration (for the TLS modes).
    pub tls: Option<Arc<rustls::ClientConfig>>,
}

/// The load: each target gets `workers` workers per mode, each sending `rate` requests per second.
#[derive(Clone)]
pub struct Plan {
    pub targets: Vec<Target>,
    pub modes: Vec<Mode>,
    pub workers: usize,
    pub rate: f64,
    /// A request header the echo backend reports back, kept in [`Answer::header`] (a header
    /// modifier of the route under test sets it).
    pub echo_header: Option<String>,
    pub timeout: Duration,
}

impl Plan {
    pub fn new(targets: Vec<Target>, modes: &[Mode]) -> Plan {
        Plan {
            targets,
            modes: modes.to_vec(),
            workers: 1,
            rate: 100.0,
            echo_header: None,
            timeout: Duration::from_secs(10),
        }
    }
}

/// What one request got.
#[derive(Clone, Debug, Serialize)]
pub struct Outcome {
    /// Sent and answered, since the load started.
    pub sent: Duration,
    pub done: Duration,
    pub mode: Mode,
    /// Index in [`Plan::targets`].
    pub target: usize,
    /// The connection it went out on (unique in the run; new-connection modes: one each).
    pub connection: u64,
    /// Sent a second time, on a new connection, as clients do (see the module's text).
    pub client_retry: bool,
    pub result: Result<Answer, String>,
}

impl Outcome {
    /// A 200 from a backend.
    pub fn ok(&self) -> bool {
        matches!(&self.result, Ok(a) if a.status == 200)
    }

    pub fn answer(&self) -> Option<&Answer> {
        self.result.as_ref().ok()
    }

    /// The error or the status, for reports.
    pub fn failure(&self) -> Option<String> {
        match &self.result {
            Ok(a) if a.status == 200 => None,
            Ok(a) => Some(format!("status {}", a.status)),
            Err(e) => Some(e.clone()),
        }
    }
}

/// An answer, with what the echo backend said about itself.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Answer {
    pub status: u16,
    /// The backend's Service (`SERVICE_NAME`) and pod, when an echo backend answered.
    pub service: String,
    pub pod: String,
    /// The value of [`Plan::echo_header`] as the backend received it.
    pub header: Option<String>,
    /// A hash of the server certificate (TLS modes), to tell rotated certificates apart.
    pub certificate: Option<u64>,
}

#[derive(Deserialize)]
struct EchoBody {
    #[serde(default)]
    service: String,
    #[serde(default)]
    pod: String,
    #[serde(default)]
    headers: HashMap<String, Vec<String>>,
}

/// The load while it runs.
pub struct Running {
    started: Instant,
    stop: watch::Sender<bool>,
    workers: Vec<tokio::task::JoinHandle<()>>,
    outcomes: Arc<Mutex<Vec<Outcome>>>,
}

/// Starts the load; it runs until [`Running::stop`].
pub fn start(plan: Plan) -> Running {
    let started = Instant::now();
    let (stop, stopped) = watch::channel(false);
    let outcomes = Arc::new(Mutex::new(Vec::new()));
    let plan = Arc::new(plan);
    let connections = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    for target in 0..plan.targets.len() {
        for &mode in &plan.modes {
            for n in 0..plan.workers {
                let worker = Worker {
                    plan: plan.clone(),
                    target,
                    mode,
                    started,
                    connections: connections.clone(),
                    outcomes: outcomes.clone(),
                };
                // Spread the workers' ticks over one period.
                let offset = Duration::from_secs_f64(
                    (n as f64 + target as f64 / plan.targets.len() as f64) / plan.workers as f64 / plan.rate,
                );
                workers.push(tokio::spawn(worker.run(stopped.clone(), offset)));
            }
        }
    }
    Running {
        started,
        stop,
        workers,
        outcomes,
    }
}

impl Running {
    /// Time since the load started, on the clock of [`Outcome::sent`].
    pub fn now(&self) -> Duration {
        self.started.elapsed()
    }

    /// Stops the workers (requests in flight finish) and returns every outcome, by send time.
    pub async fn stop(self) -> Vec<Outcome> {
        let _ = self.stop.send(true);
        for w in self.workers {
            let _ = w.await;
        }
        let mut all = std::mem::take(&mut *self.outcomes.lock().expect("outcomes"));
        all.sort_by_key(|o| o.sent);
        all
    }
}

struct Worker {
    plan: Arc<Plan>,
    target: usize,
    mode: Mode,
    started: Instant,
    connections: Arc<AtomicU64>,
    outcomes: Arc<Mutex<Vec<Outcome>>>,
}

/// An open connection of a kept-alive worker.
struct Connection {
    id: u64,
    sender: Sender,
    certificate: Option<u64>,
    /// Requests answered on it so far.
    used: u32,
}

/// Why an exchange failed.
enum Failed {
    /// Before or while the answer's head came.
    Request(hyper::Error),
    Body(String),
}

enum Sender {
    Http1(http1::SendRequest<Empty<Bytes>>),
    Http2(http2::SendRequest<Empty<Bytes>>),
}

impl Worker {
    async fn run(self, mut stopped: watch::Receiver<bool>, offset: Duration) {
        tokio::select! {
            _ = tokio::time::sleep(offset) => {}
            _ = stopped.changed() => return,
        }
        let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / self.plan.rate));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut open: Option<Connection> = None;
        loop {
            tokio::select! {
                biased;
                _ = stopped.changed() => break,
                _ = tick.tick() => {}
            }
            let sent = self.started.elapsed();
            let attempt = tokio::time::timeout(self.plan.timeout, self.request(&mut open));
            let (connection, client_retry, result) = match attempt.await {
                Ok(r) => r,
                Err(_) => {
                    // The connection may be stuck: the next request opens another.
                    let id = open.take().map_or(0, |c| c.id);
                    (id, false, Err("timeout".to_string()))
                }
            };
            let outcome = Outcome {
                sent,
                done: self.started.elapsed(),
                mode: self.mode,
                target: self.target,
                connection,
                client_retry,
                result,
            };
            self.outcomes.lock().expect("outcomes").push(outcome);
        }
    }

    /// One request, and the client's retry where a real client makes one.
    async fn request(&self, open: &mut Option<Connection>) -> (u64, bool, Result<Answer, String>) {
        let mut client_retry = false;
        loop {
            if !self.mode.reuses_connections() {
                open.take();
            }
            // A connection the server closed while idle is noticed here, before sending.
            if let Some(c) = open.as_mut()
                && !c.ready().await
            {
                open.take();
            }
            if open.is_none() {
                match self.connect().await {
                    Ok(c) => *open = Some(c),
                    Err(e) => return (0, client_retry, Err(e)),
                }
            }
            let c = open.as_mut().expect("connected");
            let id = c.id;
            let reused = c.used > 0;
            match self.exchange(c).await {
                Ok((answer, keep)) => {
                    c.used += 1;
                    if !keep || !self.mode.reuses_connections() {
                        open.take();
                    }
                    return (id, client_retry, Ok(answer));
                }
                Err(Failed::Request(e)) => {
                    open.take();
                    if !client_retry && retryable(&e, reused) {
                        client_retry = true;
                        continue;
                    }
                    return (id, client_retry, Err(describe(&e)));
                }
                // A body cut short is a failed request, not one to send again.
                Err(Failed::Body(e)) => {
                    open.take();
                    return (id, client_retry, Err(e));
                }
            }
        }
    }

    async fn connect(&self) -> Result<Connection, String> {
        let target = &self.plan.targets[self.target];
        let tcp = TcpStream::connect(target.addr)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        let _ = tcp.set_nodelay(true);
        let id = self.connections.fetch_add(1, Ordering::Relaxed) + 1;
        let tls = matches!(self.mode, Mode::TlsKeepAlive | Mode::TlsNewConnection);
        if tls {
            let config = target.tls.clone().ok_or("a TLS mode needs a TLS target")?;
            let name = rustls::pki_types::ServerName::try_from(target.host.clone()).map_err(|e| e.to_string())?;
            let stream = tokio_rustls::TlsConnector::from(config)
                .connect(name, tcp)
                .await
                .map_err(|e| format!("TLS handshake: {e}"))?;
            let certificate = stream
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|c| c.first())
                .map(|c| fingerprint(c.as_ref()));
            let (sender, connection) = http1::handshake(TokioIo::new(stream))
                .await
                .map_err(|e| format!("handshake: {e}"))?;
            tokio::spawn(connection);
            return Ok(Connection {
                id,
                sender: Sender::Http1(sender),
                certificate,
                used: 0,
            });
        }
        let sender = if self.mode == Mode::H2c {
            let (sender, connection) = http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
                .await
                .map_err(|e| format!("handshake: {e}"))?;
            tokio::spawn(connection);
            Sender::Http2(sender)
        } else {
            let (sender, connection) = http1::handshake(TokioIo::new(tcp))
                .await
                .map_err(|e| format!("handshake: {e}"))?;
            tokio::spawn(connection);
            Sender::Http1(sender)
        };
        Ok(Connection {
            id,
            sender,
            certificate: None,
            used: 0,
        })
    }

    /// Sends the request and reads the whole answer; `keep`: the connection may be reused.
    async fn exchange(&self, c: &mut Connection) -> Result<(Answer, bool), Failed> {
        let target = &self.plan.targets[self.target];
        let response = match &mut c.sender {
            Sender::Http1(s) => {
                let mut request = Request::get(target.path.as_str()).header(header::HOST, target.host.as_str());
                if !self.mode.reuses_connections() {
                    request = request.header(header::CONNECTION, "close");
                }
                s.send_request(request.body(Empty::new()).expect("request"))
                    .await
                    .map_err(Failed::Request)?
            }
            Sender::Http2(s) => {
                let uri = format!("http://{}{}", target.host, target.path);
                s.send_request(Request::get(uri).body(Empty::new()).expect("request"))
                    .await
                    .map_err(Failed::Request)?
            }
        };
        let status = response.status().as_u16();
        let keep = response
            .headers()
            .get(header::CONNECTION)
            .is_none_or(|v| !v.as_bytes().eq_ignore_ascii_case(b"close"));
        let body = Limited::new(response.into_body(), 1 << 20)
            .collect()
            .await
            .map_err(|e| Failed::Body(format!("reading the body: {e}")))?;
        let mut answer = Answer {
            status,
            certificate: c.certificate,
            ..Default::default()
        };
        if let Ok(echo) = serde_json::from_slice::<EchoBody>(&body.to_bytes()) {
            answer.service = echo.service;
            answer.pod = echo.pod;
            if let Some(name) = &self.plan.echo_header {
                answer.header = echo
                    .headers
                    .iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case(name))
                    .and_then(|(_, v)| v.first().cloned());
            }
        }
        Ok((answer, keep))
    }
}

impl Connection {
    /// Whether the connection can take a request (false once the server closed it).
    async fn ready(&mut self) -> bool {
        match &mut self.sender {
            Sender::Http1(s) => !s.is_closed() && s.ready().await.is_ok(),
            Sender::Http2(s) => !s.is_closed() && s.ready().await.is_ok(),
        }
    }
}

/// Whether a client sends the request again (see the module's text).
fn retryable(e: &hyper::Error, reused: bool) -> bool {
    if let Some(h2) = source::<h2::Error>(e) {
        // Refused streams and streams after a GOAWAY were never processed.
        return h2.reason() == Some(h2::Reason::REFUSED_STREAM)
            || (h2.is_go_away() && h2.reason() == Some(h2::Reason::NO_ERROR));
    }
    if !reused {
        return false;
    }
    if e.is_incomplete_message() || e.is_canceled() {
        return true;
    }
    source::<std::io::Error>(e).is_some_and(|io| {
        matches!(
            io.kind(),
            std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::UnexpectedEof
        )
    })
}

fn source<T: std::error::Error + 'static>(e: &hyper::Error) -> Option<&T> {
    let mut next: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = next {
        if let Some(found) = s.downcast_ref::<T>() {
            return Some(found);
        }
        next = s.source();
    }
    None
}

fn describe(e: &hyper::Error) -> String {
    match std::error::Error::source(e) {
        Some(s) => format!("{e}: {s}"),
        None => e.to_string(),
    }
}

fn fingerprint(der: &[u8]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    der.hash(&mut h);
    h.finish()
}

/// Requests, failures and client retries of some outcomes.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Tally {
    pub requests: usize,
    pub failed: usize,
    pub client_retries: usize,
}

impl Tally {
    pub fn of<'a>(outcomes: impl IntoIterator<Item = &'a Outcome>) -> Tally {
        let mut t = Tally::default();
        for o in outcomes {
            t.requests += 1;
            t.failed += usize::from(!o.ok());
            t.client_retries += usize::from(o.client_retry);
        }
        t
    }
}

/// The first few distinct failures, for reports.
pub fn failure_sample<'a>(outcomes: impl IntoIterator<Item = &'a Outcome>, limit: usize) -> Vec<String> {
    let mut seen: Vec<String> = Vec::new();
    let mut counts: HashMap<String, usize> = HashMap::new();
    for o in outcomes {
        if let Some(f) = o.failure() {
            let key = format!("{}: {f}", o.mode.name());
            if !counts.contains_key(&key) {
                seen.push(key.clone());
            }
            *counts.entry(key).or_default() += 1;
        }
    }
    seen.into_iter()
        .take(limit)
        .map(|k| format!("{}x {k}", counts[&k]))
        .collect()
}

/// One request on a new connection (new TLS handshake for TLS targets), outside any load: for
/// probing what the Gateway serves now.
pub async fn once(target: &Target, echo_header: Option<&str>) -> Outcome {
    let mode = if target.tls.is_some() {
        Mode::TlsNewConnection
    } else {
        Mode::NewConnection
    };
    let mut plan = Plan::new(vec![target.clone()], &[mode]);
    plan.echo_header = echo_header.map(String::from);
    let worker = Worker {
        plan: Arc::new(plan),
        target: 0,
        mode,
        started: Instant::now(),
        connections: Arc::new(AtomicU64::new(0)),
        outcomes: Arc::default(),
    };
    let mut open = None;
    let (connection, client_retry, result) =
        match tokio::time::timeout(worker.plan.timeout, worker.request(&mut open)).await {
            Ok(r) => r,
            Err(_) => (0, false, Err("timeout".to_string())),
        };
    Outcome {
        sent: Duration::ZERO,
        done: worker.started.elapsed(),
        mode,
        target: 0,
        connection,
        client_retry,
        result,
    }
}

/// A client on one kept-alive HTTP/1.1 connection (opened again when the server closes it), for
/// polling many hosts one request at a time.
pub struct Client {
    worker: Worker,
    open: Option<Connection>,
}

impl Client {
    pub fn new(target: Target) -> Client {
        let mut plan = Plan::new(vec![target], &[Mode::KeepAlive]);
        plan.timeout = Duration::from_secs(5);
        Client {
            worker: Worker {
                plan: Arc::new(plan),
                target: 0,
                mode: Mode::KeepAlive,
                started: Instant::now(),
                connections: Arc::new(AtomicU64::new(0)),
                outcomes: Arc::default(),
            },
            open: None,
        }
    }

    /// GET `path` with Host `host` on the client's connection.
    pub async fn get(&mut self, host: &str, path: &str) -> Result<Answer, String> {
        let target = &mut Arc::make_mut(&mut self.worker.plan).targets[0];
        if target.host != host || target.path != path {
            target.host = host.into();
            target.path = path.into();
        }
        match tokio::time::timeout(self.worker.plan.timeout, self.worker.request(&mut self.open)).await {
            Ok((_, _, result)) => result,
            Err(_) => {
                self.open = None;
                Err("timeout".into())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// An HTTP/1.1 server on loopback that answers like the echo backend and, when
    /// `answers_per_connection` is set, closes each connection after that many answers without
    /// saying so (as a server closing an idle keep-alive connection does).
    async fn server(answers_per_connection: Option<usize>, status: u16) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let (mut s, _) = listener.accept().await.unwrap();
                tokio::spawn(async move {
                    let mut answered = 0;
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 1024];
                    loop {
                        while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                            match s.read(&mut chunk).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                            }
                        }
                        let end = buf.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
                        buf.drain(..end);
                        let body = r#"{"service":"echo","pod":"echo-1","headers":{"X-Flip":["b"]}}"#;
                        let head = format!("HTTP/1.1 {status} X\r\ncontent-length: {}\r\n\r\n", body.len());
                        if s.write_all(format!("{head}{body}").as_bytes()).await.is_err() {
                            return;
                        }
                        answered += 1;
                        if answers_per_connection == Some(answered) {
                            return;
                        }
                    }
                });
            }
        });
        addr
    }

    fn plan(addr: SocketAddr, modes: &[Mode]) -> Plan {
        let mut p = Plan::new(
            vec![Target {
                label: "t".into(),
                addr,
                host: "h".into(),
                path: "/".into(),
                tls: None,
            }],
            modes,
        );
        p.rate = 200.0;
        p.echo_header = Some("x-flip".into());
        p
    }

    #[tokio::test]
    async fn answers_are_recorded_with_what_the_backend_said() {
        let addr = server(None, 200).await;
        let running = start(plan(addr, &[Mode::KeepAlive, Mode::NewConnection]));
        tokio::time::sleep(Duration::from_millis(300)).await;
        let outcomes = running.stop().await;
        let t = Tally::of(&outcomes);
        assert!(t.requests > 20, "{t:?}");
        assert_eq!(t.failed, 0, "{:?}", failure_sample(&outcomes, 3));
        let a = outcomes[0].answer().unwrap();
        assert_eq!(
            (a.service.as_str(), a.pod.as_str(), a.header.as_deref()),
            ("echo", "echo-1", Some("b"))
        );
        // Kept-alive requests share a connection; new-connection ones never do.
        let keep: std::collections::HashSet<u64> = outcomes
            .iter()
            .filter(|o| o.mode == Mode::KeepAlive)
            .map(|o| o.connection)
            .collect();
        let new = outcomes.iter().filter(|o| o.mode == Mode::NewConnection).count();
        let new_ids: std::collections::HashSet<u64> = outcomes
            .iter()
            .filter(|o| o.mode == Mode::NewConnection)
            .map(|o| o.connection)
            .collect();
        assert_eq!(keep.len(), 1);
        assert_eq!(new_ids.len(), new);
    }

    #[tokio::test]
    async fn a_connection_closed_while_idle_costs_no_request() {
        // Every connection ends after one answer, unannounced: the next request on it is sent
        // again on a new connection (or the close is noticed before sending).
        let addr = server(Some(1), 200).await;
        let running = start(plan(addr, &[Mode::KeepAlive]));
        tokio::time::sleep(Duration::from_millis(300)).await;
        let outcomes = running.stop().await;
        let t = Tally::of(&outcomes);
        assert!(t.requests > 20, "{t:?}");
        assert_eq!(t.failed, 0, "{:?}", failure_sample(&outcomes, 3));
        let connections: std::collections::HashSet<u64> = outcomes.iter().map(|o| o.connection).collect();
        assert_eq!(connections.len(), outcomes.len(), "one answer per connection");
    }

    #[tokio::test]
    async fn errors_and_other_statuses_are_failures() {
        let addr = server(None, 503).await;
        let outcome = once(&plan(addr, &[Mode::NewConnection]).targets[0], None).await;
        assert_eq!(outcome.failure().as_deref(), Some("status 503"));
        // Nothing listens there any more.
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        let outcome = once(&plan(closed, &[Mode::NewConnection]).targets[0], None).await;
        assert!(
            outcome.failure().unwrap().starts_with("connect:"),
            "{:?}",
            outcome.result
        );
        assert!(!outcome.client_retry);
    }
}
