//! Reading the server name (SNI) from a TLS ClientHello without terminating TLS.

/// What the first bytes of a connection say about its server name.
#[derive(Debug, PartialEq, Eq)]
pub enum ClientHello {
    /// More bytes are needed.
    Incomplete,
    /// A ClientHello; `None` when it names no server.
    ServerName(Option<String>),
    /// Not a TLS ClientHello.
    NotTls,
}

/// The largest ClientHello record read before giving up.
pub const MAX_HELLO: usize = 16 * 1024 + 5;

/// Parses the TLS record at the start of `buf`.
pub fn parse(buf: &[u8]) -> ClientHello {
    // Record header: type 22 (handshake), version, length.
    if buf.len() < 5 {
        return ClientHello::Incomplete;
    }
    if buf[0] != 22 {
        return ClientHello::NotTls;
    }
    let record_len = usize::from(u16::from_be_bytes([buf[3], buf[4]]));
    if buf.len() < 5 + record_len {
        return ClientHello::Incomplete;
    }
    match server_name(&buf[5..5 + record_len]) {
        Some(name) => ClientHello::ServerName(name),
        None => ClientHello::NotTls,
    }
}

/// A bounds-checked reader over a byte slice.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    fn u8(&mut self) -> Option<usize> {
        self.take(1).map(|b| usize::from(b[0]))
    }

    fn u16(&mut self) -> Option<usize> {
        self.take(2).map(|b| usize::from(u16::from_be_bytes([b[0], b[1]])))
    }

    fn u24(&mut self) -> Option<usize> {
        self.take(3)
            .map(|b| (usize::from(b[0]) << 16) | (usize::from(b[1]) << 8) | usize::from(b[2]))
    }

    /// A sub-reader over a length-prefixed vector.
    fn vec(&mut self, len: usize) -> Option<Reader<'a>> {
        self.take(len).map(Reader)
    }
}

/// The host_name of the server_name extension; outer `None` when malformed.
fn server_name(handshake: &[u8]) -> Option<Option<String>> {
    let mut r = Reader(handshake);
    // Handshake type 1: ClientHello.
    if r.u8()? != 1 {
        return None;
    }
    let len = r.u24()?;
    let mut hello = r.vec(len)?;
    hello.take(2 + 32)?; // version, random
    let session = hello.u8()?;
    hello.take(session)?;
    let suites = hello.u16()?;
    hello.take(suites)?;
    let compression = hello.u8()?;
    hello.take(compression)?;
    if hello.0.is_empty() {
        return Some(None);
    }
    let extensions_len = hello.u16()?;
    let mut extensions = hello.vec(extensions_len)?;
    while !extensions.0.is_empty() {
        let kind = extensions.u16()?;
        let len = extensions.u16()?;
        let mut data = extensions.vec(len)?;
        if kind != 0 {
            continue;
        }
        let list_len = data.u16()?;
        let mut list = data.vec(list_len)?;
        while !list.0.is_empty() {
            let name_type = list.u8()?;
            let name_len = list.u16()?;
            let name = list.take(name_len)?;
            if name_type == 0 {
                return Some(std::str::from_utf8(name).ok().map(str::to_ascii_lowercase));
            }
        }
        return Some(None);
    }
    Some(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ClientHello with the given server name extension.
    fn hello(name: &str) -> Vec<u8> {
        let mut sni = Vec::new();
        sni.extend_from_slice(&((name.len() + 3) as u16).to_be_bytes());
        sni.push(0);
        sni.extend_from_slice(&(name.len() as u16).to_be_bytes());
        sni.extend_from_slice(name.as_bytes());
        let mut extensions = vec![0, 0];
        extensions.extend_from_slice(&(sni.len() as u16).to_be_bytes());
        extensions.extend_from_slice(&sni);
        let mut body = vec![3, 3];
        body.extend_from_slice(&[0; 32]);
        body.push(0); // session id
        body.extend_from_slice(&[0, 2, 0x13, 0x01]); // one cipher suite
        body.extend_from_slice(&[1, 0]); // null compression
        body.extend_from_slice(&(extensions.len() as u16).to_be_bytes());
        body.extend_from_slice(&extensions);
        let mut handshake = vec![1];
        handshake.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
        handshake.extend_from_slice(&body);
        let mut record = vec![22, 3, 1];
        record.extend_from_slice(&(handshake.len() as u16).to_be_bytes());
        record.extend_from_slice(&handshake);
        record
    }

    #[test]
    fn reads_the_server_name() {
        let record = hello("Foo.Example.com");
        assert_eq!(parse(&record), ClientHello::ServerName(Some("foo.example.com".into())));
        assert_eq!(parse(&record[..record.len() - 1]), ClientHello::Incomplete);
        assert_eq!(parse(b"GET / HTTP/1.1\r\n"), ClientHello::NotTls);
    }

    #[test]
    fn truncated_hellos_are_not_tls() {
        let record = hello("a.com");
        for cut in 6..record.len() {
            let mut broken = record[..cut].to_vec();
            let len = (broken.len() - 5) as u16;
            broken[3..5].copy_from_slice(&len.to_be_bytes());
            assert_ne!(parse(&broken), ClientHello::Incomplete, "{cut}");
        }
    }
}
