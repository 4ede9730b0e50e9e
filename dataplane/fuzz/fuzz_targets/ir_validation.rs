//! Any JSON that deserializes into an IR is either accepted or rejected by the dataplane's
//! validation (the table build), never a panic.
#![no_main]

use dataplane::metrics::Metrics;
use dataplane::table::Table;
use dataplane::{Material, PassiveHealth};
use libfuzzer_sys::fuzz_target;
use translator::ir;

fuzz_target!(|data: &[u8]| {
    let Ok(proxy) = serde_json::from_slice::<ir::Proxy>(data) else {
        return;
    };
    let metrics = Metrics::default();
    let first = Table::build(
        &proxy,
        &Material::default(),
        &Table::default(),
        &metrics,
        PassiveHealth::default(),
    );
    // A second build on top of the first takes the reuse paths (kept upstreams and endpoints).
    if let Ok(previous) = first {
        let _ = Table::build(
            &proxy,
            &Material::default(),
            &previous,
            &metrics,
            PassiveHealth::default(),
        );
    }
});
