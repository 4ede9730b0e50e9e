//! Serves an IR from a YAML file: `cargo run -p turna-dataplane --example serve -- proxy.yaml
//! [address] [health-address]`. Certificates are not loaded, so HTTPS and TLS Terminate
//! listeners are rejected; everything else is served until Ctrl-C.

use std::net::SocketAddr;

use dataplane::{Dataplane, Settings};
use translator::ir;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .ok_or("usage: serve <proxy.yaml> [address] [health-address]")?;
    let address = args.next().unwrap_or_else(|| "0.0.0.0".into()).parse()?;
    let health: SocketAddr = args.next().unwrap_or_else(|| "127.0.0.1:9901".into()).parse()?;
    let proxy: ir::Proxy = serde_yaml::from_str(&std::fs::read_to_string(&path)?)?;
    let mut settings = Settings::on(address);
    settings.access_log = std::env::var_os("TURNA_ACCESS_LOG").is_some();
    let dataplane = Dataplane::new(settings);
    dataplane.serve_health(health).await?;
    dataplane.apply(proxy).await?;
    eprintln!("serving {path}; health on {health}");
    dataplane
        .serve(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await;
    Ok(())
}
