//! Serves an IR from a YAML file until Ctrl-C:
//!
//!     cargo run -p turna-dataplane --example serve -- proxy.yaml [address] [health-address] \
//!         [namespace/name=chain.pem,key.pem ...]
//!
//! Each `namespace/name=chain.pem,key.pem` is a certificate Secret the IR's HTTPS and TLS
//! Terminate listeners may name, read from the two PEM files and handed to the dataplane as the
//! proxy's bundle is ([`Material`], [`Dataplane::apply_with`]); without one such listeners are
//! rejected.

use std::net::SocketAddr;

use dataplane::{Dataplane, Material, Settings, TlsCertificate};
use translator::ir;

/// The allocator of the `turna` binary, set as in `turna proxy`, so the benchmark measures
/// what ships.
#[global_allocator]
static ALLOCATOR: allocator::Mimalloc = allocator::Mimalloc;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    allocator::without_huge_pages();
    // One worker thread (TOKIO_WORKER_THREADS=1) runs on a current-thread runtime: no work
    // stealing or cross-thread wakeups, as a single nginx or HAProxy worker; `turna proxy`
    // chooses it the same way, and with one core (`operator::modes::proxy::runtime`).
    let single = std::env::var("TOKIO_WORKER_THREADS").is_ok_and(|n| n.trim() == "1");
    let runtime = if single {
        tokio::runtime::Builder::new_current_thread().enable_all().build()?
    } else {
        tokio::runtime::Builder::new_multi_thread().enable_all().build()?
    };
    runtime.block_on(run())
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    const USAGE: &str = "usage: serve <proxy.yaml> [address] [health-address] [namespace/name=chain.pem,key.pem ...]";
    let mut args = std::env::args().skip(1);
    let path = args.next().ok_or(USAGE)?;
    let address = args.next().unwrap_or_else(|| "0.0.0.0".into()).parse()?;
    let health: SocketAddr = args.next().unwrap_or_else(|| "127.0.0.1:9901".into()).parse()?;
    let mut material = Material::default();
    for secret in args {
        let (name, files) = secret.split_once('=').ok_or(USAGE)?;
        let (chain, key) = files.split_once(',').ok_or(USAGE)?;
        let certificate = TlsCertificate {
            chain_pem: std::fs::read_to_string(chain).map_err(|e| format!("{chain}: {e}"))?,
            key_pem: std::fs::read_to_string(key).map_err(|e| format!("{key}: {e}"))?,
        };
        material.certificates.insert(name.to_string(), certificate);
    }
    let proxy: ir::Proxy = serde_yaml::from_str(&std::fs::read_to_string(&path)?)?;
    let mut settings = Settings::on(address);
    // TURNA_ACCESS_LOG=json|text turns access logs on, TURNA_ACCESS_LOG_PATH names their file.
    settings.access_log = std::env::var("TURNA_ACCESS_LOG")
        .ok()
        .map(|format| dataplane::access_log::Settings {
            format: if format == "text" {
                dataplane::access_log::Format::Text
            } else {
                dataplane::access_log::Format::Json
            },
            path: std::env::var_os("TURNA_ACCESS_LOG_PATH").map(std::path::PathBuf::from),
        });
    let dataplane = Dataplane::new(settings);
    dataplane.serve_health(health).await?;
    dataplane.apply_with(&proxy, &material).await?;
    eprintln!("serving {path}; health on {health}");
    dataplane
        .serve(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await;
    Ok(())
}
