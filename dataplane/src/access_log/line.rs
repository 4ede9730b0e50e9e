//! The fields of a line and their JSON and text encodings.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::header::{self, HeaderName, HeaderValue};
use http::{Method, Uri, Version};
use translator::ir::RouteRef;

use super::{Flags, Format};
use crate::http::host::host_of;
use crate::upstream::Upstream;

const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");

/// One HTTP request. What it takes from the request is kept as the request's own shared
/// buffers (method, URI, header values) and written out only when the line is.
#[derive(Debug, Clone, Default)]
pub struct HttpLine {
    pub start: Option<SystemTime>,
    pub duration: Duration,
    pub client: Option<SocketAddr>,
    pub method: Method,
    /// Its path is logged; the query is not (it may carry secrets).
    pub uri: Uri,
    pub scheme: &'static str,
    pub version: Version,
    /// The Host header (the URI's authority stands in for it in HTTP/2).
    pub host: Option<HeaderValue>,
    pub user_agent: Option<HeaderValue>,
    /// The W3C `traceparent` header, whose trace id is logged when it is valid.
    pub traceparent: Option<HeaderValue>,
    /// 0 when no response was sent.
    pub status: u16,
    pub flags: Flags,
    /// Request body bytes read from the client.
    pub bytes_received: u64,
    /// Response body bytes sent to the client.
    pub bytes_sent: u64,
    /// The backend and endpoint of the last attempt.
    pub upstream: Option<(Arc<Upstream>, usize)>,
    pub attempts: u32,
    /// The listener's IR name: `k8s-namespace/gateway/listener` (no prefix for a static one).
    pub listener: String,
    /// The route and rule that served the request.
    pub route: Option<RouteRef>,
}

impl HttpLine {
    /// The request's own fields.
    pub fn from_request(
        start: SystemTime,
        client: SocketAddr,
        scheme: &'static str,
        parts: &http::request::Parts,
    ) -> Self {
        let headers = &parts.headers;
        HttpLine {
            start: Some(start),
            client: Some(client),
            method: parts.method.clone(),
            uri: parts.uri.clone(),
            scheme,
            version: parts.version,
            host: headers.get(header::HOST).cloned(),
            user_agent: headers.get(header::USER_AGENT).cloned(),
            traceparent: headers.get(TRACEPARENT).cloned(),
            ..HttpLine::default()
        }
    }

    /// Appends the line (with its newline) to `out`.
    pub fn encode(&self, format: Format, out: &mut String) {
        let mut out = Encoder::new(format, out);
        out.time("start_time", self.start);
        out.millis("duration_ms", self.duration);
        out.client(self.client);
        out.str("http.request.method", self.method.as_str());
        out.str("url.path", self.uri.path());
        out.str("url.scheme", self.scheme);
        out.str("server.address", &host_of(self.host.as_ref(), &self.uri));
        out.str("network.protocol.name", "http");
        out.str("network.protocol.version", version(self.version));
        out.int("http.response.status_code", u64::from(self.status));
        out.flags(self.flags);
        out.int("bytes_received", self.bytes_received);
        out.int("bytes_sent", self.bytes_sent);
        out.str("user_agent.original", text(self.user_agent.as_ref()));
        out.str("listener", &self.listener);
        out.route(self.route.as_ref());
        let (backend, endpoint) = match &self.upstream {
            Some((upstream, index)) => (upstream.id.as_str(), upstream.endpoint_address(*index)),
            None => ("", ""),
        };
        out.str("backend", backend);
        out.str("upstream.address", endpoint);
        out.int("attempts", u64::from(self.attempts));
        out.str("trace_id", trace_id(self.traceparent.as_ref()));
        out.finish()
    }
}

/// One TCP, TLS or UDP session.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StreamLine {
    pub start: Option<SystemTime>,
    pub duration: Duration,
    pub client: Option<SocketAddr>,
    /// `tcp` or `udp`.
    pub transport: &'static str,
    /// The Gateway listener port.
    pub port: u16,
    /// The TLS server name (SNI), when the client sent one.
    pub server_name: String,
    pub flags: Flags,
    /// Bytes from the client (UDP: in datagrams).
    pub bytes_received: u64,
    /// Bytes to the client.
    pub bytes_sent: u64,
    pub upstream: String,
    pub backend: String,
    pub route: Option<RouteRef>,
}

impl StreamLine {
    pub fn new(start: SystemTime, client: SocketAddr, transport: &'static str, port: u16) -> Self {
        StreamLine {
            start: Some(start),
            client: Some(client),
            transport,
            port,
            ..StreamLine::default()
        }
    }

    /// Appends the line (with its newline) to `out`.
    pub fn encode(&self, format: Format, out: &mut String) {
        let mut out = Encoder::new(format, out);
        out.time("start_time", self.start);
        out.millis("duration_ms", self.duration);
        out.client(self.client);
        out.str("network.transport", self.transport);
        out.int("server.port", u64::from(self.port));
        out.str("server.address", &self.server_name);
        out.flags(self.flags);
        out.int("bytes_received", self.bytes_received);
        out.int("bytes_sent", self.bytes_sent);
        out.route(self.route.as_ref());
        out.str("backend", &self.backend);
        out.str("upstream.address", &self.upstream);
        out.finish()
    }
}

/// Writes fields as a JSON object, or as `key=value` pairs (values quoted when they hold
/// spaces, quotes or nothing). Empty strings are left out of JSON.
struct Encoder<'o> {
    format: Format,
    out: &'o mut String,
    first: bool,
}

impl<'o> Encoder<'o> {
    fn new(format: Format, out: &'o mut String) -> Self {
        if format == Format::Json {
            out.push('{');
        }
        Encoder {
            format,
            out,
            first: true,
        }
    }

    fn key(&mut self, key: &str) {
        match self.format {
            Format::Json => {
                if !self.first {
                    self.out.push(',');
                }
                self.out.push('"');
                self.out.push_str(key);
                self.out.push_str("\":");
            }
            Format::Text => {
                if !self.first {
                    self.out.push(' ');
                }
                self.out.push_str(key);
                self.out.push('=');
            }
        }
        self.first = false;
    }

    fn str(&mut self, key: &str, value: &str) {
        if value.is_empty() && self.format == Format::Json {
            return;
        }
        self.key(key);
        match self.format {
            Format::Json => json_string(self.out, value),
            Format::Text => text_value(self.out, value),
        }
    }

    /// A value that needs no escaping, written by `write` (quoted in JSON).
    fn plain(&mut self, key: &str, write: impl FnOnce(&mut String)) {
        self.key(key);
        let quoted = self.format == Format::Json;
        if quoted {
            self.out.push('"');
        }
        write(self.out);
        if quoted {
            self.out.push('"');
        }
    }

    fn int(&mut self, key: &str, value: u64) {
        self.key(key);
        push_int(self.out, value, 1);
    }

    /// Milliseconds with three decimals (microseconds).
    fn millis(&mut self, key: &str, duration: Duration) {
        self.key(key);
        let micros = u64::try_from(duration.as_micros()).unwrap_or(u64::MAX);
        push_int(self.out, micros / 1000, 1);
        self.out.push('.');
        push_int(self.out, micros % 1000, 3);
    }

    /// `YYYY-MM-DDTHH:MM:SS.ffffffZ` in UTC.
    fn time(&mut self, key: &str, time: Option<SystemTime>) {
        match time.and_then(|t| t.duration_since(UNIX_EPOCH).ok()) {
            Some(since) => self.plain(key, |out| rfc3339(out, since)),
            None => self.str(key, ""),
        }
    }

    fn client(&mut self, client: Option<SocketAddr>) {
        let Some(client) = client else { return };
        // Addresses are plain ASCII: nothing to escape.
        self.plain("client.address", |out| match client.ip() {
            std::net::IpAddr::V4(ip) => {
                for (i, octet) in ip.octets().into_iter().enumerate() {
                    if i > 0 {
                        out.push('.');
                    }
                    push_int(out, u64::from(octet), 1);
                }
            }
            ip => {
                let _ = write!(out, "{ip}");
            }
        });
        self.int("client.port", u64::from(client.port()));
    }

    /// `route` (`namespace/name`), `route_kind` and `rule` (its name, or its position).
    fn route(&mut self, route: Option<&RouteRef>) {
        let Some(route) = route else {
            for key in ["route", "route_kind", "rule"] {
                self.str(key, "");
            }
            return;
        };
        let mut name = String::with_capacity(route.namespace.len() + route.name.len() + 1);
        name.push_str(&route.namespace);
        name.push('/');
        name.push_str(&route.name);
        self.str("route", &name);
        self.str("route_kind", &route.kind);
        match &route.rule_name {
            Some(rule) => self.str("rule", rule),
            None => self.plain("rule", |out| push_int(out, route.rule as u64, 1)),
        }
    }

    fn flags(&mut self, flags: Flags) {
        match self.format {
            Format::Json => {
                if flags.is_empty() {
                    return;
                }
                self.key("response_flags");
                self.out.push('[');
                for (i, flag) in flags.iter().enumerate() {
                    if i > 0 {
                        self.out.push(',');
                    }
                    json_string(self.out, flag.name());
                }
                self.out.push(']');
            }
            Format::Text => {
                self.key("response_flags");
                if flags.is_empty() {
                    self.out.push('-');
                }
                for (i, flag) in flags.iter().enumerate() {
                    if i > 0 {
                        self.out.push(',');
                    }
                    self.out.push_str(flag.name());
                }
            }
        }
    }

    fn finish(self) {
        if self.format == Format::Json {
            self.out.push('}');
        }
        self.out.push('\n');
    }
}

fn json_string(out: &mut String, value: &str) {
    out.push('"');
    let escaped = |b: u8| b < 0x20 || b == b'"' || b == b'\\' || b == 0x7f;
    // Nearly every value needs no escape: one scan of its bytes, one copy.
    if !value.bytes().any(escaped) {
        out.push_str(value);
        out.push('"');
        return;
    }
    // Runs of characters that need no escape are copied at once.
    let mut plain = 0;
    for (i, c) in value.char_indices() {
        let escape = match c {
            '"' => "\\\"",
            '\\' => "\\\\",
            '\n' => "\\n",
            '\r' => "\\r",
            '\t' => "\\t",
            c if (c as u32) < 0x20 || c == '\u{7f}' => "",
            _ => continue,
        };
        out.push_str(&value[plain..i]);
        if escape.is_empty() {
            let _ = write!(out, "\\u{:04x}", c as u32);
        } else {
            out.push_str(escape);
        }
        plain = i + c.len_utf8();
    }
    out.push_str(&value[plain..]);
    out.push('"');
}

/// A text value: `-` when empty, quoted (with `"` and `\` escaped) when it holds a space, a
/// quote, `=` or a control character, so a line always splits into its fields.
fn text_value(out: &mut String, value: &str) {
    if value.is_empty() {
        out.push('-');
        return;
    }
    let plain = value
        .bytes()
        .all(|c| c.is_ascii_graphic() && c != b'"' && c != b'=' && c != b'\\');
    if plain {
        out.push_str(value);
    } else {
        json_string(out, value);
    }
}

/// Appends `value` in decimal, zero-padded to `width` digits.
fn push_int(out: &mut String, mut value: u64, width: usize) {
    let mut digits = [b'0'; 20];
    let mut i = digits.len();
    while value > 0 || digits.len() - i < width.max(1) {
        i -= 1;
        digits[i] = b'0' + (value % 10) as u8;
        value /= 10;
    }
    // Only ASCII digits were written.
    out.push_str(std::str::from_utf8(&digits[i..]).unwrap_or_default());
}

fn version(version: Version) -> &'static str {
    match version {
        Version::HTTP_09 => "0.9",
        Version::HTTP_10 => "1.0",
        Version::HTTP_2 => "2",
        Version::HTTP_3 => "3",
        _ => "1.1",
    }
}

/// A header's value when it is text; empty otherwise.
fn text(value: Option<&HeaderValue>) -> &str {
    value.and_then(|v| v.to_str().ok()).unwrap_or_default()
}

/// The trace id of a W3C `traceparent` header (`00-<32 hex>-<16 hex>-<2 hex>`); empty when
/// there is none or it is malformed.
fn trace_id(traceparent: Option<&HeaderValue>) -> &str {
    let mut parts = text(traceparent).trim().split('-');
    let (Some(version), Some(trace), Some(parent)) = (parts.next(), parts.next(), parts.next()) else {
        return "";
    };
    let hex =
        |s: &str, len: usize| s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase());
    let zero = trace.bytes().all(|b| b == b'0');
    if hex(version, 2) && version != "ff" && hex(trace, 32) && !zero && hex(parent, 16) {
        trace
    } else {
        ""
    }
}

/// Appends `since` the Unix epoch as `YYYY-MM-DDTHH:MM:SS.ffffffZ`.
fn rfc3339(out: &mut String, since: Duration) {
    let secs = since.as_secs();
    let (days, day_secs) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil(days);
    push_int(out, year, 4);
    out.push('-');
    push_int(out, month, 2);
    out.push('-');
    push_int(out, day, 2);
    out.push('T');
    push_int(out, day_secs / 3600, 2);
    out.push(':');
    push_int(out, day_secs / 60 % 60, 2);
    out.push(':');
    push_int(out, day_secs % 60, 2);
    out.push('.');
    push_int(out, u64::from(since.subsec_micros()), 6);
    out.push('Z');
}

/// The date of a day counted from 1970-01-01 (Howard Hinnant's `civil_from_days`, for days on
/// or after the epoch).
fn civil(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access_log::Flag;

    fn line() -> HttpLine {
        let mut flags = Flags::default();
        flags.insert(Flag::UpstreamConnectFailure);
        flags.insert(Flag::RetriesExhausted);
        HttpLine {
            start: Some(UNIX_EPOCH + Duration::from_micros(1_764_756_000_123_456)),
            duration: Duration::from_micros(1_500),
            client: Some("[::1]:40000".parse().unwrap()),
            method: Method::GET,
            uri: "/a%20%22b%22?secret=1".parse().unwrap(),
            scheme: "http",
            host: Some(HeaderValue::from_static("example.com:8080")),
            user_agent: Some(HeaderValue::from_static("agent \"x\"\t1")),
            status: 503,
            flags,
            attempts: 3,
            route: Some(RouteRef {
                kind: "HTTPRoute".into(),
                namespace: "default".into(),
                name: "shop".into(),
                rule: 12,
                rule_name: None,
                static_layer: false,
            }),
            ..HttpLine::default()
        }
    }

    #[test]
    fn json_lines_parse_and_carry_the_dictionary_names() {
        let mut encoded = String::new();
        line().encode(Format::Json, &mut encoded);
        assert!(encoded.ends_with("}\n"));
        let value: serde_json::Value = serde_json::from_str(&encoded).expect("JSON");
        assert_eq!(value["start_time"], "2025-12-03T10:00:00.123456Z");
        assert_eq!(value["duration_ms"], 1.5);
        assert_eq!(value["client.address"], "::1");
        assert_eq!(value["client.port"], 40000);
        assert_eq!(value["url.path"], "/a%20%22b%22", "the query is left out");
        assert_eq!(value["server.address"], "example.com");
        assert_eq!(value["user_agent.original"], "agent \"x\"\t1");
        assert_eq!(value["http.response.status_code"], 503);
        assert_eq!(
            value["response_flags"],
            serde_json::json!(["upstream_connect_failure", "retries_exhausted"])
        );
        assert_eq!(value["route"], "default/shop");
        assert_eq!(value["rule"], "12");
        assert_eq!(value["attempts"], 3);
        // Empty fields are left out.
        assert!(value.get("trace_id").is_none() && value.get("backend").is_none());
    }

    #[test]
    fn text_lines_split_into_their_fields() {
        let mut encoded = String::new();
        line().encode(Format::Text, &mut encoded);
        assert!(encoded.starts_with("start_time=2025-12-03T10:00:00.123456Z duration_ms=1.500 "));
        assert!(
            encoded.contains(" user_agent.original=\"agent \\\"x\\\"\\t1\" "),
            "{encoded}"
        );
        assert!(encoded.contains(" response_flags=upstream_connect_failure,retries_exhausted "));
        assert!(encoded.contains(" rule=12 backend=- "), "{encoded}");
        assert!(encoded.ends_with(" trace_id=-\n"));
        assert_eq!(encoded.lines().count(), 1);
    }

    #[test]
    fn numbers_and_dates_are_written_by_hand_as_std_would() {
        for (value, width) in [(0, 1), (7, 3), (1234, 2), (u64::MAX, 1), (42, 6)] {
            let mut out = String::new();
            push_int(&mut out, value, width);
            assert_eq!(out, format!("{value:0width$}"));
        }
        assert_eq!(civil(0), (1970, 1, 1));
        assert_eq!(civil(11_016), (2000, 2, 29));
        assert_eq!(civil(20_790), (2026, 12, 3));
        let mut out = String::new();
        rfc3339(&mut out, Duration::ZERO);
        assert_eq!(out, "1970-01-01T00:00:00.000000Z");
    }

    #[test]
    fn control_characters_are_escaped() {
        let mut out = String::new();
        json_string(&mut out, "a\u{1}b\u{7f}é\"");
        assert_eq!(out, "\"a\\u0001b\\u007fé\\\"\"");
        assert_eq!(serde_json::from_str::<String>(&out).unwrap(), "a\u{1}b\u{7f}é\"");
    }

    #[test]
    fn trace_ids_come_from_valid_traceparents_only() {
        let with = |value: &'static str| trace_id(Some(&HeaderValue::from_static(value))).to_string();
        assert_eq!(
            with("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(with("00-00000000000000000000000000000000-00f067aa0ba902b7-01"), "");
        assert_eq!(with("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"), "");
        assert_eq!(with("garbage"), "");
        assert_eq!(trace_id(None), "");
    }
}
