//! The modes of the `turna` binary other than `controller`.

pub mod controller;
pub mod local;
pub mod proxy;
pub mod standalone;

use std::net::{Ipv4Addr, SocketAddr};

/// Why an address of the configuration could not be used.
#[derive(Debug, thiserror::Error)]
#[error("invalid address {address:?}: {source}")]
pub struct AddressError {
    pub address: String,
    pub source: std::net::AddrParseError,
}

/// Parses an address as product.md writes it: `:9901` means every IPv4 address.
pub fn socket_address(address: &str) -> Result<SocketAddr, AddressError> {
    let text = match address.strip_prefix(':') {
        Some(port) => format!("{}:{port}", Ipv4Addr::UNSPECIFIED),
        None => address.to_string(),
    };
    text.parse().map_err(|source| AddressError {
        address: address.to_string(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_address_without_host_binds_every_ipv4_address() {
        assert_eq!(
            socket_address(":9901").expect("parses"),
            "0.0.0.0:9901".parse().expect("addr")
        );
        assert_eq!(
            socket_address("127.0.0.1:0").expect("parses"),
            "127.0.0.1:0".parse().expect("addr")
        );
        assert!(socket_address("nowhere").is_err());
    }
}
