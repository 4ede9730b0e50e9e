//! The SNI peek of TLS passthrough reads the first bytes of untrusted connections: any bytes are
//! incomplete, not TLS, or a ClientHello with or without a server name, never a panic.
#![no_main]

use dataplane::stream::sni;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = sni::parse(data);
});
