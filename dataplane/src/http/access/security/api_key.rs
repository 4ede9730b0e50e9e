//! API keys: each data key of the policy's Secrets names a client and holds its key. A request
//! must carry a known key in one of the configured places (401 otherwise); it goes on without
//! it, and with the client's name in the configured header.
//!
//! Keys are looked up by their SHA-256, so finding one takes no time that depends on how much
//! of a wrong key matched.

use std::collections::HashMap;

use http::StatusCode;
use ring::digest;
use translator::ir;

use super::credential;
use crate::access_log::Flag;
use crate::http::access::count;
use crate::http::access::{Check, Checking, Request, Verdict};
use crate::http::response;
use crate::metrics::Decision;
use crate::tls::Material;

/// A compiled API key mechanism.
#[derive(Debug)]
pub struct ApiKey {
    /// Client names by the SHA-256 of their key.
    clients: HashMap<[u8; 32], String>,
    sources: Vec<ir::security::TokenSource>,
    forward_client_id_header: Option<ir::SmolStr>,
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    digest::digest(&digest::SHA256, bytes)
        .as_ref()
        .try_into()
        .unwrap_or([0; 32])
}

impl ApiKey {
    /// Reads the keys; none at all is an error (the policy cannot be enforced).
    pub fn compile(a: &ir::security::ApiKey, material: &Material) -> Result<Self, String> {
        let mut clients = HashMap::new();
        for c in &a.credentials {
            for (client, key) in material.credential(c) {
                // Files written with a trailing newline hold the same key.
                let key = key.strip_suffix(b"\n").unwrap_or(key);
                let key = key.strip_suffix(b"\r").unwrap_or(key);
                if key.is_empty() {
                    continue;
                }
                if let Some(other) = clients.insert(sha256(key), client.to_string())
                    && other != client
                {
                    tracing::warn!(client, other, "two API key clients share a key; the later one is used");
                }
            }
        }
        if clients.is_empty() {
            return Err("no API key is in the proxy's bundle".into());
        }
        Ok(ApiKey {
            clients,
            sources: a.sources.clone(),
            forward_client_id_header: a.forward_client_id_header.clone(),
        })
    }

    fn decide(&self, request: &mut Request<'_>) -> Verdict {
        let found = credential::find(request.parts, &self.sources);
        let client = found
            .as_ref()
            .and_then(|f| self.clients.get(&sha256(f.value.as_bytes())).map(|c| (f.source, c)));
        let Some((_, client)) = client else {
            count(request, "APIKey", Decision::denied);
            return Verdict::Deny(response::local(StatusCode::UNAUTHORIZED, false), Flag::Unauthenticated);
        };
        // Every place a key may travel is cleared, not only the one used.
        for source in &self.sources {
            credential::remove(request.parts, source);
        }
        if let Some(name) = &self.forward_client_id_header {
            credential::set(request.parts, name, client);
        }
        request
            .parts
            .extensions
            .insert(crate::http::access::ApiKeyClient(client.as_str().into()));
        count(request, "APIKey", Decision::allowed);
        Verdict::Allow { response_headers: None }
    }
}

impl Check for ApiKey {
    fn check<'a>(&'a self, request: &'a mut Request<'_>) -> Checking<'a> {
        Box::pin(std::future::ready(self.decide(request)))
    }
}
