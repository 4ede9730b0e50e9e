//! A network namespace joined to the host by a veth pair, for addresses the API server accepts in
//! EndpointSlices (it refuses loopback ones) that still stay on this machine.
//!
//! Listeners are bound inside the namespace from a thread that entered it; the test process
//! itself stays in the host namespace and reaches them through the veth.

use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A network namespace with `address` on its end of a veth pair; removed on drop.
pub struct Netns {
    name: String,
    host_link: String,
    /// The namespace's address.
    pub address: Ipv4Addr,
}

fn ip(args: &[&str]) {
    let output = Command::new("ip").args(args).output().expect("run ip");
    assert!(
        output.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
}

impl Netns {
    /// A new namespace with a /30 of 10.254.0.0/16 chosen by process and sequence.
    pub fn new() -> Netns {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let slot = (pid.wrapping_mul(7) + n) % (64 * 256);
        let base = u32::from(Ipv4Addr::new(10, 254, 0, 0)) + slot * 4;
        let host = Ipv4Addr::from(base + 1);
        let address = Ipv4Addr::from(base + 2);
        let name = format!("turna-op-{pid}-{n}");
        let host_link = format!("to{:x}h{n}", pid % 0xfffff);
        let peer = format!("to{:x}p{n}", pid % 0xfffff);
        let _ = Command::new("ip").args(["netns", "del", &name]).output();
        ip(&["netns", "add", &name]);
        ip(&["link", "add", &host_link, "type", "veth", "peer", "name", &peer]);
        ip(&["link", "set", &peer, "netns", &name]);
        ip(&["addr", "add", &format!("{host}/30"), "dev", &host_link]);
        ip(&["link", "set", &host_link, "up"]);
        ip(&[
            "netns",
            "exec",
            &name,
            "ip",
            "addr",
            "add",
            &format!("{address}/30"),
            "dev",
            &peer,
        ]);
        ip(&["netns", "exec", &name, "ip", "link", "set", &peer, "up"]);
        Netns {
            name,
            host_link,
            address,
        }
    }

    /// A TCP listener on the namespace's address (port 0: any), bound from inside it.
    pub fn listen(&self, port: u16) -> std::net::TcpListener {
        let path = format!("/var/run/netns/{}", self.name);
        let address = SocketAddr::from((self.address, port));
        std::thread::spawn(move || {
            let file = std::fs::File::open(&path).expect("open netns");
            // SAFETY: setns on a valid namespace fd changes only this thread, which ends here.
            let entered = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(entered, 0, "setns: {}", std::io::Error::last_os_error());
            let listener = std::net::TcpListener::bind(address).expect("bind in netns");
            listener.set_nonblocking(true).expect("nonblocking");
            listener
        })
        .join()
        .expect("netns thread")
    }

    /// Relays every connection to `listener` (from [`Netns::listen`]) to `target`.
    pub fn relay(listener: std::net::TcpListener, target: SocketAddr) -> tokio::task::JoinHandle<()> {
        let listener = tokio::net::TcpListener::from_std(listener).expect("tokio listener");
        tokio::spawn(async move {
            // Aborting the relay ends its connections too.
            let mut connections = tokio::task::JoinSet::new();
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    continue;
                };
                connections.spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
        })
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["link", "del", &self.host_link]).output();
        let _ = Command::new("ip").args(["netns", "del", &self.name]).output();
    }
}
