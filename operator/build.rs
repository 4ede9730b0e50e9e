//! Places the functions `turna` runs to start and to proxy requests together at the start of
//! `.text` (operator/layout/functions.txt, recorded by operator/layout/record.sh).
//!
//! Why: the kernel maps a binary's code 64 KiB around each page it faults in, and the linker
//! otherwise scatters the few MiB a proxy runs over the binary's 24-30 MiB of `.text`. An idle
//! proxy (`make bench-operator`, 1 route, release build) kept 16.1-16.5 MiB of the binary
//! resident, 12.4-13.0 MiB with them grouped; `turna local` 18.2 -> 14.8 MiB RSS.
//!
//! The list holds mangled names without their hash (which changes with the build profile and
//! the toolchain); each becomes a linker-script pattern, so a stale name only matches nothing.
//! The script is `INSERT`ed into the default layout (lld and GNU ld). `TURNA_LAYOUT=off` links
//! without it (a linker that takes no scripts, such as mold; or recording a new list).

use std::fmt::Write as _;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=layout/functions.txt");
    println!("cargo:rerun-if-env-changed=TURNA_LAYOUT");
    let linux = std::env::var("CARGO_CFG_TARGET_OS").is_ok_and(|os| os == "linux");
    if !linux || std::env::var("TURNA_LAYOUT").is_ok_and(|v| v == "off") {
        return;
    }
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let list = std::fs::read_to_string(manifest.join("layout/functions.txt")).expect("read layout/functions.txt");
    let names: Vec<&str> = (list.lines().map(str::trim))
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    if names.is_empty() {
        return;
    }
    let mut script = String::from("SECTIONS\n{\n  .text : {\n");
    for name in names {
        // Legacy Rust names end in `17h<hash>E` (and `.llvm.<n>` when LTO renamed a local one);
        // cold functions (start-up's one-time paths among them) are in `.text.unlikely.`.
        let any_hash = if name.starts_with("_ZN") { "17h*" } else { "" };
        writeln!(script, "    *(.text.{name}{any_hash} .text.unlikely.{name}{any_hash})").expect("write to a String");
    }
    script.push_str("  }\n}\nINSERT AFTER .init;\n");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("layout.ld");
    std::fs::write(&out, script).expect("write layout.ld");
    println!("cargo:rustc-link-arg-bin=turna=-Wl,-T,{}", out.display());
}
