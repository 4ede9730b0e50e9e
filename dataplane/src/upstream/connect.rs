//! Raw connections to endpoints for TCP, TLS passthrough and UDP routes.

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use super::client::{ActiveGuard, gone};
use super::connector::{connect_tcp, handshake};
use super::tls::BackendTls;
use super::{ForwardError, Upstream};

/// A connection to an endpoint for stream routes: TCP, or TLS over it.
pub trait StreamIo: AsyncRead + AsyncWrite + Unpin + Send {}

impl<T: AsyncRead + AsyncWrite + Unpin + Send> StreamIo for T {}

impl Upstream {
    /// Connects to an endpoint like [`Upstream::connect_tcp`], then opens TLS when a
    /// BackendTLSPolicy applies.
    /// Returns the connection, its place among the endpoint's active ones and the endpoint
    /// ([`Upstream::endpoint_address`]).
    pub async fn connect_stream(
        &self,
        connect_retries: u32,
    ) -> Result<(Box<dyn StreamIo>, ActiveGuard, usize), ForwardError> {
        let client = match &self.tls {
            BackendTls::Invalid => return Err(ForwardError::InvalidTls(self.id.clone())),
            BackendTls::Tls(client) => Some(client.clone()),
            BackendTls::Plain => None,
        };
        let (tcp, guard, index) = self.connect_tcp(connect_retries).await?;
        match client {
            None => Ok((Box::new(tcp), guard, index)),
            Some(client) => match handshake(&client, tcp).await {
                Ok(tls) => Ok((Box::new(tls), guard, index)),
                Err(source) => Err(ForwardError::Connect {
                    backend: self.id.clone(),
                    source,
                }),
            },
        }
    }

    /// Connects to an endpoint over TCP, trying up to `connect_retries` others when one is
    /// unreachable (endpoints that are gone do not count, as for HTTP: `Upstream::open`).
    pub async fn connect_tcp(&self, connect_retries: u32) -> Result<(TcpStream, ActiveGuard, usize), ForwardError> {
        let mut tried = Vec::new();
        let mut counted = 0;
        loop {
            let index = self
                .pick_endpoint(&tried)
                .ok_or_else(|| ForwardError::NoEndpoints(self.id.clone()))?;
            tried.push(index);
            let endpoint = &self.endpoints[index];
            let guard = ActiveGuard::new(&endpoint.active);
            let error = match endpoint
                .pool
                .until_retired(connect_tcp(endpoint.pool.authority()))
                .await
            {
                Ok(stream) => {
                    endpoint.health.connected();
                    return Ok((stream, guard, index));
                }
                Err(error) => error,
            };
            self.connect_failed(endpoint, &error);
            if connect_retries == 0 || !gone(&error) {
                counted += 1;
            }
            if counted > connect_retries || tried.len() >= self.endpoints.len() {
                return Err(ForwardError::Connect {
                    backend: self.id.clone(),
                    source: error,
                });
            }
        }
    }

    /// The endpoint at `address` (`host:port`) when it can take requests (not ejected, not
    /// retired): where a persistent session goes on.
    pub fn serving_endpoint(&self, address: &str) -> Option<usize> {
        self.endpoints
            .iter()
            .position(|e| e.pool.authority().as_str() == address)
            .filter(|i| {
                let e = &self.endpoints[*i];
                !e.health.ejected() && !e.pool.retired()
            })
    }

    /// The `host:port` of endpoint `index`; empty for an index it does not have.
    pub fn endpoint_address(&self, index: usize) -> &str {
        self.endpoints.get(index).map_or("", |e| e.pool.authority().as_str())
    }

    /// The `host:port` of an endpoint for a new UDP session, counted as active while the guard
    /// lives.
    pub fn pick_datagram_endpoint(&self) -> Option<(String, ActiveGuard)> {
        let index = self.pick_endpoint(&[])?;
        let endpoint = &self.endpoints[index];
        Some((
            endpoint.pool.authority().as_str().to_string(),
            ActiveGuard::new(&endpoint.active),
        ))
    }
}
