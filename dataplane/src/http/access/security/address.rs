//! Client address lists: a denied client, or one outside an allow list, is answered 403. The
//! client is the connection's peer (the PROXY protocol header's on ports that require one), or,
//! with trusted hops, the X-Forwarded-For entry that many places before the one Turna appended.

use std::net::IpAddr;

use http::{HeaderMap, StatusCode};
use translator::ir;

use crate::access_log::Flag;
use crate::http::access::count;
use crate::http::access::{Check, Checking, Request, Verdict};
use crate::http::response;
use crate::metrics::Decision;

/// Networks as (address, prefix) with host bits cleared, IPv4 and IPv6 apart.
#[derive(Debug, Default)]
struct Networks {
    v4: Vec<(u32, u32)>,
    v6: Vec<(u128, u32)>,
}

impl Networks {
    /// `None` when a CIDR does not parse (the translator checked them: only a hand-written IR).
    fn parse(list: &[String]) -> Option<Networks> {
        let mut out = Networks::default();
        for text in list {
            match ir::security::parse_cidr(text)? {
                (IpAddr::V4(a), p) => out.v4.push((u32::from(a), u32::from(p))),
                (IpAddr::V6(a), p) => out.v6.push((u128::from(a), u32::from(p))),
            }
        }
        Some(out)
    }

    fn contains(&self, ip: IpAddr) -> bool {
        match canonical(ip) {
            IpAddr::V4(a) => {
                let a = u32::from(a);
                self.v4
                    .iter()
                    .any(|&(net, p)| a & u32::MAX.checked_shl(32 - p).unwrap_or(0) == net)
            }
            IpAddr::V6(a) => {
                let a = u128::from(a);
                self.v6
                    .iter()
                    .any(|&(net, p)| a & u128::MAX.checked_shl(128 - p).unwrap_or(0) == net)
            }
        }
    }

    fn is_empty(&self) -> bool {
        self.v4.is_empty() && self.v6.is_empty()
    }
}

/// An IPv4-mapped IPv6 address (a dual-stack socket's view of an IPv4 client) as IPv4.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// The compiled address lists of a policy.
#[derive(Debug)]
pub struct AddressFilter {
    allow: Networks,
    deny: Networks,
}

impl AddressFilter {
    pub fn compile(filter: &ir::security::AddressFilter) -> Result<Self, String> {
        let parse = |list: &[String], name: &str| {
            Networks::parse(list).ok_or_else(|| format!("clientAddress.{name} holds an invalid CIDR"))
        };
        Ok(AddressFilter {
            allow: parse(&filter.allow, "allow")?,
            deny: parse(&filter.deny, "deny")?,
        })
    }

    /// Whether `client` may pass.
    pub fn admits(&self, client: IpAddr) -> bool {
        !self.deny.contains(client) && (self.allow.is_empty() || self.allow.contains(client))
    }
}

/// The client's address: `peer`, or the X-Forwarded-For entry `trusted_hops` places before the
/// last one (which Turna appended: the peer). With fewer entries than that, the first one (the
/// farthest proxy was reached directly).
pub(crate) fn client_address(peer: IpAddr, headers: &HeaderMap, trusted_hops: u32) -> IpAddr {
    if trusted_hops == 0 {
        return peer;
    }
    let entries: Vec<&str> = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .collect();
    let Some(last) = entries.len().checked_sub(1) else {
        return peer;
    };
    let at = last.saturating_sub(trusted_hops as usize);
    // An entry that is not an address (garbled by a client) gives no address: the peer's,
    // which is not the client's, is refused by an allow list unless it is in it.
    entries[at].parse::<IpAddr>().unwrap_or(peer)
}

impl Check for AddressFilter {
    fn check<'a>(&'a self, request: &'a mut Request<'_>) -> Checking<'a> {
        let context = request.context;
        let client = client_address(context.peer.ip(), &request.parts.headers, context.trusted_hops);
        let verdict = if self.admits(client) {
            count(request, "ClientAddress", Decision::allowed);
            Verdict::Allow { response_headers: None }
        } else {
            count(request, "ClientAddress", Decision::denied);
            tracing::debug!(%client, rule = context.rule, "client address refused");
            Verdict::Deny(response::local(StatusCode::FORBIDDEN, false), Flag::ClientAddressDenied)
        };
        Box::pin(std::future::ready(verdict))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filter(allow: &[&str], deny: &[&str]) -> AddressFilter {
        AddressFilter::compile(&ir::security::AddressFilter {
            allow: allow.iter().map(|s| s.to_string()).collect(),
            deny: deny.iter().map(|s| s.to_string()).collect(),
        })
        .unwrap()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn deny_wins_and_an_allow_list_closes_the_rest() {
        let f = filter(&["10.0.0.0/8", "2001:db8::/32"], &["10.9.0.0/16"]);
        assert!(f.admits(ip("10.1.2.3")));
        assert!(!f.admits(ip("10.9.1.1")), "denied within allowed");
        assert!(!f.admits(ip("192.0.2.1")), "outside the allow list");
        assert!(f.admits(ip("2001:db8:1::5")));
        assert!(!f.admits(ip("2001:db9::5")));
        assert!(
            f.admits(ip("::ffff:10.1.2.3")),
            "an IPv4-mapped client is its IPv4 address"
        );
        let deny_only = filter(&[], &["192.0.2.0/24", "::1/128"]);
        assert!(deny_only.admits(ip("198.51.100.1")));
        assert!(!deny_only.admits(ip("192.0.2.200")));
        assert!(!deny_only.admits(ip("::1")));
        let everyone = filter(&["0.0.0.0/0", "::/0"], &[]);
        assert!(everyone.admits(ip("203.0.113.9")) && everyone.admits(ip("2001:db8::1")));
    }

    #[test]
    fn trusted_hops_name_an_x_forwarded_for_entry() {
        let peer = ip("10.0.0.5");
        let mut headers = HeaderMap::new();
        // client, then a CDN, then the load balancer Turna saw (which Turna appended).
        headers.append("x-forwarded-for", "198.51.100.7, 203.0.113.1".parse().unwrap());
        headers.append("x-forwarded-for", "10.0.0.5".parse().unwrap());
        assert_eq!(client_address(peer, &headers, 0), peer);
        assert_eq!(client_address(peer, &headers, 1), ip("203.0.113.1"));
        assert_eq!(client_address(peer, &headers, 2), ip("198.51.100.7"));
        assert_eq!(client_address(peer, &headers, 9), ip("198.51.100.7"));
        assert_eq!(client_address(peer, &HeaderMap::new(), 1), peer);
        let mut garbled = HeaderMap::new();
        garbled.append("x-forwarded-for", "not-an-ip, 10.0.0.5".parse().unwrap());
        assert_eq!(client_address(peer, &garbled, 1), peer);
    }
}
