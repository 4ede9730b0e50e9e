//! The agent's settings (from the command line, see `main.rs`).

use std::net::Ipv4Addr;
use std::path::PathBuf;

use crate::error::{Error, Result};

/// An IPv4 network such as 10.244.0.0/16.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Net {
    pub addr: Ipv4Addr,
    pub prefix: u8,
}

impl Ipv4Net {
    /// Parses `a.b.c.d/n`.
    pub fn parse(s: &str) -> Result<Self> {
        let (addr, prefix) = s
            .split_once('/')
            .ok_or_else(|| Error::Config(format!("{s}: not a CIDR")))?;
        let addr: Ipv4Addr = addr.parse().map_err(|_| Error::Config(format!("{s}: bad address")))?;
        let prefix: u8 = prefix
            .parse()
            .ok()
            .filter(|p| (8..=30).contains(p))
            .ok_or_else(|| Error::Config(format!("{s}: prefix must be 8..=30")))?;
        Ok(Ipv4Net {
            addr: Ipv4Addr::from(u32::from(addr) & Self::mask(prefix)),
            prefix,
        })
    }

    fn mask(prefix: u8) -> u32 {
        u32::MAX << (32 - u32::from(prefix))
    }

    /// The number of addresses in the network.
    pub fn size(&self) -> u32 {
        1u32 << (32 - u32::from(self.prefix))
    }

    /// The address `offset` places after the network address.
    pub fn nth(&self, offset: u32) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.addr) + offset)
    }

    /// Whether `ip` lies in the network.
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        u32::from(ip) & Self::mask(self.prefix) == u32::from(self.addr)
    }
}

impl std::fmt::Display for Ipv4Net {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// What one agent (one Node) needs to know.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// The Node's name; pods with `spec.nodeName` equal to it are ours.
    pub node_name: String,
    /// Kubeconfig of the agent's identity (`system:node:<name>` in `system:nodes`).
    pub kubeconfig: PathBuf,
    /// Per-pod directories (volumes, logs, container specs) live under it.
    pub state_dir: PathBuf,
    /// The host bridge every pod's veth is attached to.
    pub bridge: String,
    /// The pod network; the bridge has its first host address (the node IP).
    pub pod_cidr: Ipv4Net,
    /// Image repository to binary map (see [`crate::images`]).
    pub image_map: PathBuf,
    /// Port of the kubelet API (logs) on the node IP.
    pub kubelet_port: u16,
    /// CA whose client certificates may use the kubelet API (the apiserver's kubelet client).
    pub client_ca_file: PathBuf,
    /// `KUBERNETES_SERVICE_HOST`/`_PORT` given to pods: the apiserver as reachable from a pod.
    pub apiserver_host: String,
    pub apiserver_port: u16,
    /// Node capacity advertised to the scheduler.
    pub capacity_cpu: String,
    pub capacity_memory: String,
    pub capacity_pods: String,
}

impl AgentConfig {
    /// The node IP: the bridge's address, the first host address of the pod network.
    pub fn node_ip(&self) -> Ipv4Addr {
        self.pod_cidr.nth(1)
    }

    /// Directory of one pod's state.
    pub fn pod_dir(&self, namespace: &str, name: &str, uid: &str) -> PathBuf {
        self.state_dir.join("pods").join(format!("{namespace}_{name}_{uid}"))
    }

    /// Prefix of the network namespaces of this node (`ip netns`), used by the cleanup too.
    pub fn netns_prefix(&self) -> String {
        format!("{}.", self.node_name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidr_parsing_and_membership() {
        let n = Ipv4Net::parse("10.244.3.4/16").unwrap();
        assert_eq!(n.to_string(), "10.244.0.0/16");
        assert_eq!(n.size(), 65536);
        assert_eq!(n.nth(1), Ipv4Addr::new(10, 244, 0, 1));
        assert!(n.contains(Ipv4Addr::new(10, 244, 255, 1)));
        assert!(!n.contains(Ipv4Addr::new(10, 245, 0, 1)));
        assert!(Ipv4Net::parse("10.244.0.0").is_err());
        assert!(Ipv4Net::parse("10.244.0.0/31").is_err());
    }
}
