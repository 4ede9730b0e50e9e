//! The wire format of IR push: a long-lived HTTPS response of newline-delimited JSON
//! [`Message`]s, and [`Rejection`]s the proxy POSTs back. Both directions authenticate the proxy
//! with `Authorization: Bearer <ServiceAccount token>`.
//!
//! A message carries a proxy's whole IR, or, for a proxy that asked for them
//! ([`DELTAS_QUERY`]) and holds the version before, only what changed since
//! ([`ir::delta::Delta`]): a route added among thousands is a few hundred bytes, not the whole
//! table to write, send and parse again. Proxies that also ask for [`RULES_QUERY`] get deltas
//! narrowed to the rules that changed within a virtual host ([`Delta::narrowed`]); operators
//! that do not know it send host-level deltas, which such proxies apply as well. Proxies that
//! ask for nothing get whole IRs only.

use serde::{Deserialize, Serialize};
use translator::ir;
use translator::ir::delta::Delta;

use super::material::StaticMaterial;

/// `GET`: the stream of [`Message`]s for the caller's Gateway.
pub const STREAM_PATH: &str = "/v1/ir";
/// The query of [`STREAM_PATH`] of a proxy that applies deltas.
pub const DELTAS_QUERY: &str = "deltas=1";
/// Added to [`DELTAS_QUERY`] by a proxy that applies rule splices too.
pub const RULES_QUERY: &str = "rules=1";

/// What a stream asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deltas {
    /// Whole IRs only.
    None,
    /// Deltas of virtual hosts.
    Hosts,
    /// Deltas narrowed to rules.
    Rules,
}

impl Deltas {
    /// What the query of a stream request asks for.
    pub fn asked(query: Option<&str>) -> Deltas {
        let parts = || query.unwrap_or_default().split('&');
        match (parts().any(|p| p == DELTAS_QUERY), parts().any(|p| p == RULES_QUERY)) {
            (false, _) => Deltas::None,
            (true, false) => Deltas::Hosts,
            (true, true) => Deltas::Rules,
        }
    }
}
/// `POST`: one [`Rejection`].
pub const REJECTIONS_PATH: &str = "/v1/rejections";

/// One version of a proxy's IR: the whole IR (`proxy`), or the `delta` that turns version
/// `base` into this one. Versions grow with every change of any proxy's IR.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub version: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy: Option<ir::Proxy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delta: Option<Delta>,
    /// The static layer's key material this proxy serves ([`StaticMaterial`]). With a whole IR,
    /// absent means none; with a delta, absent means unchanged since `base`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub material: Option<StaticMaterial>,
}

/// The line of a whole IR, serialized from a borrowed IR (the hub keeps one copy of it).
pub fn whole_line(version: u64, proxy: &ir::Proxy, material: &StaticMaterial) -> Vec<u8> {
    #[derive(Serialize)]
    struct Whole<'a> {
        version: u64,
        proxy: &'a ir::Proxy,
        #[serde(skip_serializing_if = "Option::is_none")]
        material: Option<&'a StaticMaterial>,
    }
    let material = Some(material).filter(|m| !m.is_empty());
    line(&Whole {
        version,
        proxy,
        material,
    })
}

/// The line of a delta from version `base`, with the static material when it changed.
pub fn delta_line(version: u64, base: u64, delta: &Delta, material: Option<&StaticMaterial>) -> Vec<u8> {
    #[derive(Serialize)]
    struct Changes<'a> {
        version: u64,
        base: u64,
        delta: &'a Delta,
        #[serde(skip_serializing_if = "Option::is_none")]
        material: Option<&'a StaticMaterial>,
    }
    line(&Changes {
        version,
        base,
        delta,
        material,
    })
}

fn line(message: &impl Serialize) -> Vec<u8> {
    // Plain data with string keys: serializing cannot fail.
    let mut line = serde_json::to_vec(message).unwrap_or_default();
    line.push(b'\n');
    line
}

/// A version the proxy could not apply; it keeps serving the previous one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rejection {
    pub version: u64,
    pub error: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_lines_read_back_as_messages() {
        let proxy = ir::Proxy {
            id: "default/gw".into(),
            ..ir::Proxy::default()
        };
        let whole: Message =
            serde_json::from_slice(&whole_line(3, &proxy, &StaticMaterial::default())).expect("a message");
        assert_eq!(whole.version, 3);
        assert_eq!(whole.proxy.as_ref(), Some(&proxy));
        assert!(whole.delta.is_none() && whole.base.is_none());
        let delta = Delta {
            removed_backends: vec!["default/old:80".into()],
            ..Delta::default()
        };
        let changes: Message = serde_json::from_slice(&delta_line(4, 3, &delta, None)).expect("a message");
        assert_eq!((changes.version, changes.base), (4, Some(3)));
        assert_eq!(changes.delta, Some(delta));
        assert!(changes.proxy.is_none());
    }

    #[test]
    fn a_stream_asks_for_host_or_rule_deltas_in_its_query() {
        assert_eq!(Deltas::asked(None), Deltas::None);
        assert_eq!(Deltas::asked(Some("rules=1")), Deltas::None, "rules only with deltas");
        assert_eq!(Deltas::asked(Some(DELTAS_QUERY)), Deltas::Hosts);
        assert_eq!(Deltas::asked(Some("rules=1&deltas=1")), Deltas::Rules);
        assert_eq!(Deltas::asked(Some("deltas=10")), Deltas::None);
    }
}
