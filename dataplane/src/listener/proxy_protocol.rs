//! The PROXY protocol (v1 text and v2 binary, as HAProxy specifies them): a load balancer in
//! front of Turna sends the client's address ahead of the connection's bytes. On ports that
//! require it the header is read, exactly and nothing more, before TLS or HTTP; a connection
//! without a valid one is closed, so no client can pass itself off as a proxy's peer.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

/// The v2 signature.
const V2_SIGNATURE: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";
/// The longest v1 header, `\r\n` included.
const V1_MAX: usize = 107;
/// The largest v2 header read (addresses and TLVs); longer ones are refused.
const V2_MAX_BODY: usize = 1024;

/// What a header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header {
    /// The client's address.
    Proxied(SocketAddr),
    /// A health check of the proxy itself (v2 `LOCAL`, v1 `UNKNOWN`, or an address family
    /// without addresses): the connection's own address stands.
    Local,
}

/// How much of a header `bytes` holds.
#[derive(Debug, PartialEq, Eq)]
enum Parsed {
    /// The header, and its length.
    Done(Header, usize),
    /// Not enough bytes yet to tell.
    Incomplete,
}

/// Reads the PROXY header that must start `stream`: the client's address, or `None` for a
/// local connection. An invalid or missing header is an error (close the connection).
pub async fn read(stream: &mut TcpStream) -> io::Result<Option<SocketAddr>> {
    let mut buf = [0u8; V1_MAX + 1];
    // Usually the whole header arrives in the first segment: peek it, then take exactly it.
    let n = stream.peek(&mut buf).await?;
    if n == 0 {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    match parse(&buf[..n])? {
        Parsed::Done(header, len) if len <= n => {
            stream.read_exact(&mut buf[..len]).await?;
            return Ok(proxied(header));
        }
        _ => {}
    }
    // A header split over segments: read it piece by piece, never past its end.
    let mut read = Vec::with_capacity(32);
    loop {
        let wanted = match parse(&read)? {
            Parsed::Done(header, _) => return Ok(proxied(header)),
            // v2: the fixed part, then exactly the announced body.
            Parsed::Incomplete if read.len() >= 16 && read.starts_with(V2_SIGNATURE) => {
                16 + usize::from(u16::from_be_bytes([read[14], read[15]])) - read.len()
            }
            Parsed::Incomplete if read.first() == Some(&b'\r') && read.len() < 16 => 16 - read.len(),
            // v1: a byte at a time until the line ends.
            Parsed::Incomplete => 1,
        };
        let start = read.len();
        read.resize(start + wanted, 0);
        stream.read_exact(&mut read[start..]).await?;
    }
}

/// The client's address on a port that requires the PROXY protocol: the header's, or `peer`
/// for a local connection; `None` (close the connection) without a valid header by `deadline`.
pub async fn client(
    stream: &mut TcpStream,
    peer: SocketAddr,
    deadline: tokio::time::Instant,
    metrics: &crate::metrics::Metrics,
) -> Option<SocketAddr> {
    match tokio::time::timeout_at(deadline, read(stream)).await {
        Ok(Ok(client)) => Some(client.unwrap_or(peer)),
        Ok(Err(error)) => {
            metrics.proxy_protocol_errors.inc();
            tracing::debug!(%peer, %error, "connection without a valid PROXY protocol header closed");
            None
        }
        Err(_) => {
            metrics.timeouts.inc(crate::metrics::Timeout::header);
            None
        }
    }
}

fn proxied(header: Header) -> Option<SocketAddr> {
    match header {
        Header::Proxied(addr) => Some(addr),
        Header::Local => None,
    }
}

fn invalid(why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("PROXY protocol: {why}"))
}

/// Parses the header at the start of `bytes`.
fn parse(bytes: &[u8]) -> io::Result<Parsed> {
    let v2 = &V2_SIGNATURE[..bytes.len().min(12)];
    if bytes.len() < 12 && bytes == v2 && !bytes.is_empty() {
        // Could still be either: "PROXY" and the signature differ from the first byte.
        return Ok(Parsed::Incomplete);
    }
    if bytes.starts_with(V2_SIGNATURE) {
        return parse_v2(bytes);
    }
    let v1 = b"PROXY ";
    if bytes.len() < v1.len() {
        return if v1.starts_with(bytes) {
            Ok(Parsed::Incomplete)
        } else {
            Err(invalid("no header"))
        };
    }
    if !bytes.starts_with(v1) {
        return Err(invalid("no header"));
    }
    parse_v1(bytes)
}

fn parse_v1(bytes: &[u8]) -> io::Result<Parsed> {
    let Some(end) = bytes.windows(2).position(|w| w == b"\r\n") else {
        return if bytes.len() >= V1_MAX {
            Err(invalid("v1 header too long"))
        } else {
            Ok(Parsed::Incomplete)
        };
    };
    if end + 2 > V1_MAX {
        return Err(invalid("v1 header too long"));
    }
    let line = std::str::from_utf8(&bytes[6..end]).map_err(|_| invalid("v1 header is not text"))?;
    let fields: Vec<&str> = line.split(' ').collect();
    let header = match fields.first().copied() {
        Some("UNKNOWN") => Header::Local,
        Some(family @ ("TCP4" | "TCP6")) => {
            let [_, source, _destination, source_port, destination_port] = fields[..] else {
                return Err(invalid("v1 header needs two addresses and two ports"));
            };
            let ip: IpAddr = source.parse().map_err(|_| invalid("v1 source address"))?;
            let port = |p: &str| {
                (!p.is_empty()
                    && p.len() <= 5
                    && p.bytes().all(|b| b.is_ascii_digit())
                    && !(p.len() > 1 && p.starts_with('0')))
                .then(|| p.parse::<u16>().ok())
                .flatten()
                .ok_or_else(|| invalid("v1 port"))
            };
            let source_port = port(source_port)?;
            port(destination_port)?;
            if (family == "TCP4") != ip.is_ipv4() {
                return Err(invalid("v1 address of the wrong family"));
            }
            Header::Proxied(SocketAddr::new(ip, source_port))
        }
        _ => return Err(invalid("v1 protocol is not TCP4, TCP6 or UNKNOWN")),
    };
    Ok(Parsed::Done(header, end + 2))
}

fn parse_v2(bytes: &[u8]) -> io::Result<Parsed> {
    if bytes.len() < 16 {
        return Ok(Parsed::Incomplete);
    }
    let version_command = bytes[12];
    if version_command >> 4 != 2 {
        return Err(invalid("v2 version"));
    }
    let body = usize::from(u16::from_be_bytes([bytes[14], bytes[15]]));
    if body > V2_MAX_BODY {
        return Err(invalid("v2 header too long"));
    }
    let len = 16 + body;
    if bytes.len() < len {
        return Ok(Parsed::Incomplete);
    }
    let addresses = &bytes[16..len];
    let header = match (version_command & 0x0f, bytes[13]) {
        // LOCAL: the proxy's own connection (a health check).
        (0x0, _) => Header::Local,
        // PROXY over TCP (0x1) or UDP (0x2) of IPv4 (0x1_) and IPv6 (0x2_).
        (0x1, 0x11 | 0x12) if addresses.len() >= 12 => {
            let ip = Ipv4Addr::new(addresses[0], addresses[1], addresses[2], addresses[3]);
            let port = u16::from_be_bytes([addresses[8], addresses[9]]);
            Header::Proxied(SocketAddr::new(IpAddr::V4(ip), port))
        }
        (0x1, 0x21 | 0x22) if addresses.len() >= 36 => {
            let mut octets = [0u8; 16];
            octets.copy_from_slice(&addresses[..16]);
            let port = u16::from_be_bytes([addresses[32], addresses[33]]);
            Header::Proxied(SocketAddr::new(IpAddr::V6(Ipv6Addr::from(octets)), port))
        }
        // UNSPEC or unix sockets: no address to take.
        (0x1, 0x00 | 0x31 | 0x32) => Header::Local,
        (0x1, _) => return Err(invalid("v2 addresses too short for their family")),
        _ => return Err(invalid("v2 command")),
    };
    Ok(Parsed::Done(header, len))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v2(command: u8, family: u8, body: &[u8]) -> Vec<u8> {
        let mut out = V2_SIGNATURE.to_vec();
        out.push(0x20 | command);
        out.push(family);
        out.extend_from_slice(&(body.len() as u16).to_be_bytes());
        out.extend_from_slice(body);
        out
    }

    #[test]
    fn v1_headers_give_the_source_address() {
        let line = b"PROXY TCP4 192.0.2.7 10.0.0.1 51234 80\r\nGET / HTTP/1.1\r\n";
        assert_eq!(
            parse(line).unwrap(),
            Parsed::Done(Header::Proxied("192.0.2.7:51234".parse().unwrap()), 40)
        );
        let line = b"PROXY TCP6 2001:db8::7 2001:db8::1 443 8443\r\n";
        assert_eq!(
            parse(line).unwrap(),
            Parsed::Done(Header::Proxied("[2001:db8::7]:443".parse().unwrap()), line.len())
        );
        assert_eq!(parse(b"PROXY UNKNOWN\r\n").unwrap(), Parsed::Done(Header::Local, 15));
        assert_eq!(parse(b"PROXY TCP4 192.0.2.7").unwrap(), Parsed::Incomplete);
        assert_eq!(parse(b"PRO").unwrap(), Parsed::Incomplete);
    }

    #[test]
    fn v1_headers_that_do_not_read_are_refused() {
        for bad in [
            &b"GET / HTTP/1.1\r\n"[..],
            b"PROXY TCP4 192.0.2.7 10.0.0.1 51234\r\n",
            b"PROXY TCP4 2001:db8::7 10.0.0.1 1 2\r\n",
            b"PROXY TCP4 192.0.2.7 10.0.0.1 070000 80\r\n",
            b"PROXY TCP4 192.0.2.7 10.0.0.1 01 80\r\n",
            b"PROXY UDP4 192.0.2.7 10.0.0.1 1 2\r\n",
            b"X",
        ] {
            assert!(parse(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
        let long = [b"PROXY TCP4 ".as_slice(), &[b'1'; 120]].concat();
        assert!(parse(&long).is_err());
    }

    #[test]
    fn v2_headers_give_the_source_address_and_skip_tlvs() {
        let mut body = vec![192, 0, 2, 7, 10, 0, 0, 1];
        body.extend_from_slice(&51234u16.to_be_bytes());
        body.extend_from_slice(&80u16.to_be_bytes());
        body.extend_from_slice(&[0x04, 0x00, 0x01, 0xff]); // a TLV
        let header = v2(0x1, 0x11, &body);
        let mut stream = header.clone();
        stream.extend_from_slice(b"GET / HTTP/1.1\r\n");
        assert_eq!(
            parse(&stream).unwrap(),
            Parsed::Done(Header::Proxied("192.0.2.7:51234".parse().unwrap()), header.len())
        );
        let mut body6 = Vec::new();
        body6.extend_from_slice(&"2001:db8::7".parse::<Ipv6Addr>().unwrap().octets());
        body6.extend_from_slice(&[0; 16]);
        body6.extend_from_slice(&443u16.to_be_bytes());
        body6.extend_from_slice(&8443u16.to_be_bytes());
        assert_eq!(
            parse(&v2(0x1, 0x21, &body6)).unwrap(),
            Parsed::Done(Header::Proxied("[2001:db8::7]:443".parse().unwrap()), 16 + 36)
        );
        assert_eq!(parse(&v2(0x0, 0x00, &[])).unwrap(), Parsed::Done(Header::Local, 16));
        assert_eq!(parse(&header[..20]).unwrap(), Parsed::Incomplete);
        assert_eq!(parse(&header[..5]).unwrap(), Parsed::Incomplete);
        assert!(parse(&v2(0x1, 0x11, &[1, 2, 3])).is_err(), "too short for IPv4");
        assert!(parse(&v2(0x5, 0x11, &body)).is_err(), "unknown command");
        let mut wrong_version = header.clone();
        wrong_version[12] = 0x11;
        assert!(parse(&wrong_version).is_err());
    }

    proptest::proptest! {
        /// Whatever a client sends, parsing never panics and never claims more than it read;
        /// a header cut short is incomplete, never a different header.
        #[test]
        fn any_bytes_parse_or_are_refused(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..200), cut in 0usize..200) {
            if let Ok(Parsed::Done(_, len)) = parse(&bytes) {
                proptest::prop_assert!(len <= bytes.len());
                let cut = cut.min(len);
                let partial = parse(&bytes[..cut]);
                proptest::prop_assert!(cut == len || matches!(partial, Ok(Parsed::Incomplete)) || partial.is_err());
            }
        }
    }
}
