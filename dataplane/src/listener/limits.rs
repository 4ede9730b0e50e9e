//! How much a client may ask of the proxy: request head sizes, timeouts, connections and
//! HTTP/2 streams. Each limit is answered with a status or a close, never by failing the proxy.
//!
//! The defaults follow what nginx and Envoy ship (or recommend for an edge proxy), so that a
//! request those accept is accepted here too.

use std::time::Duration;

use http::StatusCode;
use http::request::Parts;

/// The limits of every listener of one proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Client connections open at once on all TCP listeners (HTTP, HTTPS, TCP, TLS) of the
    /// proxy; further ones are closed as soon as they are accepted. Keeps the proxy below its
    /// open file limit (each proxied connection also holds a backend connection). Default
    /// 50,000 (Envoy's edge recommendation for its overload manager).
    pub max_connections: usize,
    /// The largest request head: the HTTP/1.1 request line and headers (431 beyond, also when
    /// the request line alone is longer: hyper reads them as one), and the HTTP/2 header list
    /// (`SETTINGS_MAX_HEADER_LIST_SIZE`, 431 from h2 beyond). Default 64 KiB (Envoy: 60 KiB;
    /// nginx: 8 KiB per line).
    pub max_header_bytes: usize,
    /// The most header fields of a request; 431 beyond. Default 100 (Envoy's and hyper's).
    pub max_headers: usize,
    /// The longest request target (path and query); 414 beyond. Default 16 KiB (nginx and
    /// Apache allow 8 KiB, AWS load balancers 16 KiB).
    pub max_uri_bytes: usize,
    /// How long a client has to send a complete request head: from the accepted connection (or
    /// the completed TLS handshake) for the first request, from its first byte for later ones
    /// on a kept-alive connection. The connection is closed without a response after it
    /// (slowloris). Default 10 s (nginx: 60 s, hyper: 30 s).
    pub header_timeout: Duration,
    /// How long a connection without a request in flight stays open (HTTP/1.1 keep-alive,
    /// HTTP/2 without streams: GOAWAY). Requests in flight, long responses and upgraded
    /// (WebSocket) connections are not cut. Default 75 s (nginx's keepalive_timeout; above the
    /// 60 s idle timeout of AWS load balancers in front, below the 4 min of Azure's).
    pub idle_timeout: Duration,
    /// The longest wait for the next part of a request body while no response has started: the
    /// request is answered 408 (HTTP/1.1 then closes the connection). Once the backend answered,
    /// a quiet client (a gRPC stream, say) is not cut. Default 60 s (nginx's
    /// client_body_timeout).
    pub request_body_timeout: Duration,
    /// How long a client has for its TLS ClientHello and handshake on HTTPS and TLS listeners.
    /// Default 10 s.
    pub tls_handshake_timeout: Duration,
    /// Streams a client may have open on one HTTP/2 connection; streams beyond it are refused
    /// (`REFUSED_STREAM`). Default 100 (Envoy's edge recommendation; nginx: 128).
    pub http2_max_concurrent_streams: u32,
    /// Streams a client may reset before they are served; beyond it the connection ends with
    /// GOAWAY `ENHANCE_YOUR_CALM` (HTTP/2 rapid reset, CVE-2023-44487). Default 20 (h2's).
    pub http2_max_pending_accept_reset_streams: usize,
    /// Streams the proxy may reset because of the client's protocol errors; beyond it the
    /// connection ends with GOAWAY `ENHANCE_YOUR_CALM`. Default 1024 (h2's).
    pub http2_max_local_error_reset_streams: usize,
    /// The proxy pings an HTTP/2 client that sent nothing for this long, and closes the
    /// connection when the ping is not answered within `http2_keep_alive_timeout`: a vanished
    /// client does not hold its streams forever. Default `None`, no pings, like nginx and Envoy:
    /// the timer each connection then needs makes every park of the runtime read the clock
    /// (about 1.3 % of an h2c request's instructions).
    pub http2_keep_alive_interval: Option<Duration>,
    /// See `http2_keep_alive_interval`. Default 20 s (hyper's).
    pub http2_keep_alive_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 50_000,
            max_header_bytes: 64 * 1024,
            max_headers: 100,
            max_uri_bytes: 16 * 1024,
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(75),
            request_body_timeout: Duration::from_secs(60),
            tls_handshake_timeout: Duration::from_secs(10),
            http2_max_concurrent_streams: 100,
            http2_max_pending_accept_reset_streams: 20,
            http2_max_local_error_reset_streams: 1024,
            http2_keep_alive_interval: None,
            http2_keep_alive_timeout: Duration::from_secs(20),
        }
    }
}

/// A limit that cannot be served.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LimitsError {
    #[error("{0} must be at least 1")]
    Zero(&'static str),
    #[error("max_header_bytes must be at least {min} (the request line and a Host header)", min = MIN_HEADER_BYTES)]
    HeaderBytes,
    #[error("max_header_bytes must be at most {max}", max = u32::MAX)]
    HeaderBytesTooLarge,
}

/// The smallest head limit accepted: a short request line and a few headers.
const MIN_HEADER_BYTES: usize = 1024;

impl Limits {
    /// Checks that every limit can serve requests at all (no zero timeouts or counts).
    pub fn validate(&self) -> Result<(), LimitsError> {
        let counts = [
            ("max_connections", self.max_connections),
            ("max_headers", self.max_headers),
            ("max_uri_bytes", self.max_uri_bytes),
            (
                "http2_max_concurrent_streams",
                self.http2_max_concurrent_streams as usize,
            ),
            (
                "http2_max_pending_accept_reset_streams",
                self.http2_max_pending_accept_reset_streams,
            ),
            (
                "http2_max_local_error_reset_streams",
                self.http2_max_local_error_reset_streams,
            ),
        ];
        let durations = [
            ("header_timeout", self.header_timeout),
            ("idle_timeout", self.idle_timeout),
            ("request_body_timeout", self.request_body_timeout),
            ("tls_handshake_timeout", self.tls_handshake_timeout),
            ("http2_keep_alive_timeout", self.http2_keep_alive_timeout),
        ];
        if let Some((name, _)) = counts.iter().find(|(_, n)| *n == 0) {
            return Err(LimitsError::Zero(name));
        }
        if let Some((name, _)) = durations.iter().find(|(_, d)| d.is_zero()) {
            return Err(LimitsError::Zero(name));
        }
        if self.max_header_bytes < MIN_HEADER_BYTES {
            return Err(LimitsError::HeaderBytes);
        }
        if u32::try_from(self.max_header_bytes).is_err() {
            return Err(LimitsError::HeaderBytesTooLarge);
        }
        Ok(())
    }

    /// The status refusing a request head hyper accepted but these limits do not: 414 for a
    /// long target, 431 for too many headers (HTTP/2 has no count limit of its own).
    pub(crate) fn refuse(&self, parts: &Parts) -> Option<StatusCode> {
        let target = parts.uri.path_and_query().map_or(0, |p| p.as_str().len());
        if target > self.max_uri_bytes {
            return Some(StatusCode::URI_TOO_LONG);
        }
        if parts.headers.len() > self.max_headers {
            return Some(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
        }
        None
    }

    /// The HTTP/2 header list limit, as the SETTINGS value.
    pub(crate) fn header_list_size(&self) -> u32 {
        u32::try_from(self.max_header_bytes).unwrap_or(u32::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_zeros_are_not() {
        assert_eq!(Limits::default().validate(), Ok(()));
        let zero = Limits {
            header_timeout: Duration::ZERO,
            ..Limits::default()
        };
        assert_eq!(zero.validate(), Err(LimitsError::Zero("header_timeout")));
        let none = Limits {
            max_connections: 0,
            ..Limits::default()
        };
        assert_eq!(none.validate(), Err(LimitsError::Zero("max_connections")));
        let tiny = Limits {
            max_header_bytes: 10,
            ..Limits::default()
        };
        assert_eq!(tiny.validate(), Err(LimitsError::HeaderBytes));
    }

    #[test]
    fn long_targets_and_many_headers_are_refused() {
        let limits = Limits {
            max_uri_bytes: 10,
            max_headers: 2,
            ..Limits::default()
        };
        let head = |uri: &str, headers: usize| {
            let mut request = http::Request::builder().uri(uri);
            for i in 0..headers {
                request = request.header(format!("x-{i}"), "v");
            }
            request.body(()).expect("request").into_parts().0
        };
        assert_eq!(limits.refuse(&head("/0123456", 2)), None);
        assert_eq!(limits.refuse(&head("/0123?4567", 0)), None);
        assert_eq!(limits.refuse(&head("/0123?45678", 0)), Some(StatusCode::URI_TOO_LONG));
        assert_eq!(
            limits.refuse(&head("/", 3)),
            Some(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE)
        );
    }
}
