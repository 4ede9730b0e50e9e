//! Pod networking: a host bridge, one network namespace per pod joined to it by a veth pair, and
//! addresses from the pod CIDR. Pods get no default route, and the host does not forward, so
//! nothing in a pod can reach beyond this machine.

use std::collections::HashSet;
use std::net::Ipv4Addr;
use std::path::Path;

use crate::cmd::{ip, ip_batch};
use crate::config::Ipv4Net;
use crate::error::Result;

/// Creates the bridge with the node IP (the CIDR's first host address) unless it exists.
pub async fn ensure_bridge(bridge: &str, cidr: Ipv4Net) -> Result<()> {
    if ip(&["link", "show", "dev", bridge]).await.is_err() {
        ip(&["link", "add", bridge, "type", "bridge"]).await?;
    }
    let addr = format!("{}/{}", cidr.nth(1), cidr.prefix);
    ip(&["addr", "replace", &addr, "dev", bridge]).await?;
    ip(&["link", "set", "dev", bridge, "up"]).await?;
    Ok(())
}

/// Pod addresses: the CIDR minus its first /24 (the node IP) and its last /24 (addresses a
/// load-balancer controller hands out, e.g. 10.244.255.0/24).
#[derive(Debug)]
pub struct Ipam {
    cidr: Ipv4Net,
    used: HashSet<Ipv4Addr>,
    next: u32,
}

impl Ipam {
    const FIRST: u32 = 256 + 1;

    pub fn new(cidr: Ipv4Net) -> Self {
        Ipam {
            cidr,
            used: HashSet::new(),
            next: Self::FIRST,
        }
    }

    /// A free address, round-robin so that a released address is not reused at once.
    pub fn allocate(&mut self) -> Option<Ipv4Addr> {
        let end = self.cidr.size().checked_sub(256)?;
        let span = end.checked_sub(Self::FIRST)?;
        for _ in 0..span {
            let candidate = self.cidr.nth(self.next);
            self.next += 1;
            if self.next >= end {
                self.next = Self::FIRST;
            }
            if self.used.insert(candidate) {
                return Some(candidate);
            }
        }
        None
    }

    pub fn release(&mut self, addr: Ipv4Addr) {
        self.used.remove(&addr);
    }
}

/// The host side of a pod's veth: `tv` and 13 hex digits of a hash of the netns name (interface
/// names are limited to 15 characters).
pub fn host_veth_name(netns: &str) -> String {
    // FNV-1a: stable across runs and Rust versions.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in netns.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("tv{:013x}", h & 0x000f_ffff_ffff_ffff)
}

/// Creates network namespace `netns` with `eth0` at `addr` on `bridge` (two `ip -batch` runs).
pub async fn create_sandbox(netns: &str, bridge: &str, addr: Ipv4Addr, prefix: u8) -> Result<()> {
    let veth = host_veth_name(netns);
    // A leftover of a failed attempt would make `netns add` fail.
    if Path::new("/run/netns").join(netns).exists() || link_exists(&veth) {
        remove_sandbox(netns).await;
    }
    ip_batch(
        None,
        &[
            format!("netns add {netns}"),
            format!("link add {veth} type veth peer name eth0 netns {netns}"),
            format!("link set dev {veth} master {bridge} up"),
        ],
    )
    .await?;
    ip_batch(
        Some(netns),
        &[
            format!("addr add {addr}/{prefix} dev eth0"),
            "link set dev eth0 up".to_string(),
            "link set dev lo up".to_string(),
        ],
    )
    .await?;
    Ok(())
}

fn link_exists(name: &str) -> bool {
    Path::new("/sys/class/net").join(name).exists()
}

/// Kills whatever still runs in `netns` and deletes it with its veth. Errors are logged: this
/// runs on cleanup paths where the namespace may already be gone.
pub async fn remove_sandbox(netns: &str) {
    if Path::new("/run/netns").join(netns).exists() {
        if let Ok(pids) = ip(&["netns", "pids", netns]).await {
            for pid in pids.split_whitespace().filter_map(|p| p.parse::<i32>().ok()) {
                // SAFETY: kill has no memory-safety preconditions.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        match ip(&["netns", "del", netns]).await {
            Ok(_) => tracing::debug!(netns, "network namespace deleted"),
            Err(e) => tracing::warn!(netns, error = %e, "deleting network namespace"),
        }
    }
    // Normally gone with the namespace.
    let veth = host_veth_name(netns);
    if link_exists(&veth) {
        let _ = ip(&["link", "del", "dev", &veth]).await;
    }
}

/// Removes the namespaces (and their processes) and veths a previous run of this node left.
pub async fn remove_stale(netns_prefix: &str, bridge: &str) -> Result<usize> {
    let mut removed = 0;
    let list = ip(&["netns", "list"]).await?;
    for name in list.lines().filter_map(|l| l.split_whitespace().next()) {
        if name.starts_with(netns_prefix) {
            tracing::info!(netns = name, "removing stale pod network namespace");
            remove_sandbox(name).await;
            removed += 1;
        }
    }
    if let Ok(links) = ip(&["-o", "link", "show", "master", bridge]).await {
        for link in links.lines() {
            // "12: tvabc@if2: <...>"
            let Some(name) = link.split(':').nth(1).map(|n| n.trim()) else {
                continue;
            };
            let name = name.split('@').next().unwrap_or(name);
            if name.starts_with("tv") {
                tracing::info!(veth = name, "removing stale pod veth");
                let _ = ip(&["link", "del", "dev", name]).await;
                removed += 1;
            }
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipam_skips_first_block_and_reuses_late() {
        let mut ipam = Ipam::new(Ipv4Net::parse("10.9.0.0/22").unwrap());
        let a = ipam.allocate().unwrap();
        assert_eq!(a, Ipv4Addr::new(10, 9, 1, 1));
        let b = ipam.allocate().unwrap();
        ipam.release(a);
        assert_ne!(ipam.allocate().unwrap(), a);
        assert_ne!(a, b);
        let mut n = 3;
        while ipam.allocate().is_some() {
            n += 1;
        }
        // 1024 addresses minus the first and the last /24, minus x.x.1.0: 511 hosts, and the
        // released one once more.
        assert_eq!(n, 512);
    }

    #[test]
    fn veth_names_fit_and_differ() {
        let a = host_veth_name("node.ns.pod-a.1234");
        assert_eq!(a.len(), 15);
        assert_ne!(a, host_veth_name("node.ns.pod-b.1234"));
    }
}
