//! Readiness and liveness probes (httpGet, tcpSocket; gRPC as a TCP connect; exec is run by the
//! pod worker through the launcher), and the readiness
//! of a container without a readiness probe: its port is open in the pod's network namespace.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Consecutive results of one probe.
#[derive(Debug, Default, Clone)]
pub struct ProbeState {
    pub successes: i32,
    pub failures: i32,
    /// The probe's current verdict (after its thresholds).
    pub passing: bool,
}

impl ProbeState {
    /// Records one result and applies the probe's success/failure thresholds.
    pub fn record(&mut self, probe: &Probe, ok: bool) {
        if ok {
            self.successes += 1;
            self.failures = 0;
            if self.successes >= probe.success_threshold.unwrap_or(1).max(1) {
                self.passing = true;
            }
        } else {
            self.failures += 1;
            self.successes = 0;
            if self.failures >= probe.failure_threshold.unwrap_or(3).max(1) {
                self.passing = false;
            }
        }
    }
}

/// Runs `probe` once against the container at `ip`.
pub async fn check(probe: &Probe, container: &Container, ip: IpAddr) -> bool {
    let timeout = Duration::from_secs(u64::try_from(probe.timeout_seconds.unwrap_or(1).max(1)).unwrap_or(1));
    let fut = async {
        if let Some(h) = &probe.http_get {
            let Some(port) = resolve_port(&h.port, container) else {
                return false;
            };
            let host = h.host.as_deref().and_then(|h| h.parse().ok()).unwrap_or(ip);
            let https = h.scheme.as_deref() == Some("HTTPS");
            let path = h.path.as_deref().unwrap_or("/");
            let headers: Vec<(String, String)> = h
                .http_headers
                .iter()
                .flatten()
                .map(|hh| (hh.name.clone(), hh.value.clone()))
                .collect();
            if https {
                // No TLS client here: an HTTPS probe checks that the port accepts connections.
                return TcpStream::connect(SocketAddr::new(host, port)).await.is_ok();
            }
            http_get(SocketAddr::new(host, port), path, &headers).await
        } else if let Some(t) = &probe.tcp_socket {
            let Some(port) = resolve_port(&t.port, container) else {
                return false;
            };
            let host = t.host.as_deref().and_then(|h| h.parse().ok()).unwrap_or(ip);
            TcpStream::connect(SocketAddr::new(host, port)).await.is_ok()
        } else if let Some(g) = &probe.grpc {
            let Ok(port) = u16::try_from(g.port) else { return false };
            TcpStream::connect(SocketAddr::new(ip, port)).await.is_ok()
        } else {
            // exec probes run in the container's namespaces: the pod worker does them.
            false
        }
    };
    tokio::time::timeout(timeout, fut).await.unwrap_or(false)
}

pub(crate) fn resolve_port(port: &IntOrString, container: &Container) -> Option<u16> {
    match port {
        IntOrString::Int(p) => u16::try_from(*p).ok(),
        IntOrString::String(name) => container
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some(name.as_str()))
            .and_then(|p| u16::try_from(p.container_port).ok()),
    }
}

/// A minimal HTTP/1.1 GET: success is a 2xx or 3xx status, as for the kubelet.
pub(crate) async fn http_get(addr: SocketAddr, path: &str, headers: &[(String, String)]) -> bool {
    let Ok(mut s) = TcpStream::connect(addr).await else {
        return false;
    };
    let mut req = format!("GET {path} HTTP/1.1\r\nUser-Agent: kube-probe/1.37\r\nConnection: close\r\n");
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        req.push_str(&format!("Host: {addr}\r\n"));
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    if s.write_all(req.as_bytes()).await.is_err() {
        return false;
    }
    let mut buf = [0u8; 32];
    let mut n = 0;
    while n < 12 {
        match s.read(&mut buf[n..]).await {
            Ok(0) | Err(_) => return false,
            Ok(m) => n += m,
        }
    }
    let line = String::from_utf8_lossy(&buf[..n]);
    let code: u16 = line.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (200..400).contains(&code)
}

/// The readiness of a container without a readiness probe. The kubelet marks it ready once it
/// runs; here a listening socket stands for "started", on the first declared port
/// (`declared`) or, failing that, on any port: a container may listen elsewhere than it
/// declares (the conformance suite's connection-error backend declares 3000 and listens on
/// 3333 on purpose, and must still become ready).
pub fn started(pid: i32, netns_inode: Option<u64>, declared: Option<(u16, bool)>) -> bool {
    listening(pid, netns_inode, declared) || (declared.is_some() && listening(pid, netns_inode, None))
}

/// Whether the process `pid` (in network namespace `netns_inode`) listens on `port`, or on any
/// port when `port` is `None`: read from `/proc/<pid>/net/{tcp,tcp6,udp,udp6}`.
pub fn listening(pid: i32, netns_inode: Option<u64>, port: Option<(u16, bool)>) -> bool {
    // Until the launcher has joined the pod's namespace, /proc/<pid>/net is the host's.
    if let Some(ino) = netns_inode {
        let link = std::fs::read_link(format!("/proc/{pid}/ns/net")).ok();
        let want = format!("net:[{ino}]");
        if link.as_deref().map(|l| l.to_string_lossy().into_owned()) != Some(want) {
            return false;
        }
    }
    let tables: &[(&str, bool)] = &[("tcp", false), ("tcp6", false), ("udp", true), ("udp6", true)];
    tables.iter().any(|(table, udp)| {
        if let Some((_, want_udp)) = port
            && want_udp != *udp
        {
            return false;
        }
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")) else {
            return false;
        };
        text.lines().skip(1).any(|line| {
            let mut cols = line.split_whitespace();
            let local = cols.nth(1).unwrap_or("");
            let state = cols.nth(1).unwrap_or("");
            let bound = if *udp { state == "07" } else { state == "0A" };
            let lport = local
                .rsplit_once(':')
                .and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
            bound && port.is_none_or(|(p, _)| lport == Some(p))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn listening_sees_own_socket() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let pid = i32::try_from(std::process::id()).unwrap();
        assert!(listening(pid, None, Some((port, false))));
        drop(l);
        assert!(!listening(pid, None, Some((port, false))));
        assert!(!listening(pid, Some(1), None), "wrong namespace is never ready");
    }

    #[test]
    fn started_on_a_port_other_than_the_declared_one() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let pid = i32::try_from(std::process::id()).unwrap();
        // A port nobody listens on: bind and drop one.
        let declared = {
            let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            free.local_addr().unwrap().port()
        };
        assert!(!listening(pid, None, Some((declared, false))));
        assert!(started(pid, None, Some((declared, false))));
        assert!(
            !started(pid, Some(1), Some((declared, false))),
            "wrong namespace is never started"
        );
        drop(l);
    }

    #[tokio::test]
    async fn http_probe_reads_status() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            for code in ["200 OK", "503 Service Unavailable"] {
                let (mut s, _) = l.accept().await.unwrap();
                let mut buf = [0u8; 512];
                let _ = s.read(&mut buf).await.unwrap();
                let resp = format!("HTTP/1.1 {code}\r\ncontent-length: 0\r\n\r\n");
                s.write_all(resp.as_bytes()).await.unwrap();
            }
        });
        assert!(http_get(addr, "/ready", &[]).await);
        assert!(!http_get(addr, "/ready", &[]).await);
    }

    #[test]
    fn thresholds() {
        let probe = Probe {
            failure_threshold: Some(2),
            success_threshold: Some(1),
            ..Default::default()
        };
        let mut s = ProbeState::default();
        s.record(&probe, true);
        assert!(s.passing);
        s.record(&probe, false);
        assert!(s.passing);
        s.record(&probe, false);
        assert!(!s.passing);
    }
}
