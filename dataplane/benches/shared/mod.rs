//! What the dataplane's table benchmarks share: a proxy of one plain HTTP listener on port 80
//! serving the given virtual hosts and backends, and its table.

use std::collections::BTreeMap;

use dataplane::metrics::Metrics;
use dataplane::table::Table;
use dataplane::{Material, PassiveHealth};
use translator::ir;

/// One proxy, one port, one HTTP listener without a hostname.
pub fn http_proxy(
    virtual_hosts: Vec<ir::VirtualHost>,
    backends: BTreeMap<ir::SmolStr, std::sync::Arc<ir::Backend>>,
) -> ir::Proxy {
    ir::Proxy {
        schema: ir::SCHEMA_VERSION,
        id: "bench/gateway".into(),
        gateways: vec!["bench/gateway".into()],
        ports: vec![ir::Port {
            transport: ir::Transport::Tcp,
            port: 80,
            bind_port: 8080,
            listeners: vec![ir::Listener {
                name: "bench/gateway/http".into(),
                protocol: ir::Protocol::Http,
                hostname: None,
                tls: None,
                virtual_hosts,
                stream_routes: vec![],
                tracing: None,
                filters: Vec::new(),
                security: None,
                traffic: None,
            }],
            frontend_validation: None,
        }],
        backends,
        connect_retries: 2,
        infrastructure: None,
        tracing: Default::default(),
        security: Default::default(),
        traffic: Default::default(),
    }
}

/// The table of `proxy`, reusing what `previous` compiled.
pub fn build(proxy: &ir::Proxy, previous: &Table) -> Table {
    Table::build(
        proxy,
        &Material::default(),
        previous,
        &Metrics::default(),
        PassiveHealth::default(),
    )
    .expect("valid IR")
}
