//! Places the functions `turna` runs to start and to proxy requests together at the start of
//! `.text` (operator/layout/functions.txt, recorded by operator/layout/record.sh).
//!
//! Why: the kernel maps a binary's code 64 KiB around each page it faults in, and the linker
//! otherwise scatters the few MiB a proxy runs over the binary's 24-30 MiB of `.text`. An idle
//! proxy (`make bench-operator`, 1 route, release build) was 18.1-18.5 MiB RSS linked as the
//! linker likes, 13.7-13.8 with every copy of the listed functions grouped, 10.9-11.3 with the
//! copies that ran first, 9.1-10.9 with the proxy's before `turna local`'s and RELR (below).
//!
//! The list holds the mangled names of the functions that ran, hash included: the hash tells
//! apart the copies of a generic function, and changes with the build profile and the
//! toolchain, so each name becomes two linker-script patterns, the exact copy first and every
//! copy after. A stale name only matches nothing.
//! The script is `INSERT`ed into the default layout (lld and GNU ld). `TURNA_LAYOUT=off` links
//! without it (a linker that takes no scripts, such as mold; or recording a new list).

use std::fmt::Write as _;
use std::path::PathBuf;

#[path = "layout/names.rs"]
mod names;
use names::unhashed;

fn main() {
    println!("cargo:rerun-if-changed=layout/functions.txt");
    println!("cargo:rerun-if-changed=layout/names.rs");
    println!("cargo:rerun-if-env-changed=TURNA_LAYOUT");
    println!("cargo:rerun-if-env-changed=TURNA_RELR");
    let linux = std::env::var("CARGO_CFG_TARGET_OS").is_ok_and(|os| os == "linux");
    let glibc = linux && std::env::var("CARGO_CFG_TARGET_ENV").is_ok_and(|env| env == "gnu");
    // Relative relocations packed as a bitmap (RELR) instead of 24 bytes each: the loader
    // reads them all at start, and `.rela.dyn` (0.6 MiB) stayed resident in every idle proxy.
    // Needs glibc 2.36 at run time (Debian 12, as the image); `TURNA_RELR=off` for older ones.
    if glibc && !std::env::var("TURNA_RELR").is_ok_and(|v| v == "off") {
        println!("cargo:rustc-link-arg-bin=turna=-Wl,-z,pack-relative-relocs");
    }
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
    // First the very copies that ran, in the order they first ran: a generic function has as
    // many copies as instantiations, told apart only by their hash. The hashes are those of
    // the builds the list was recorded from (the release and bench profiles of the toolchain
    // used then); LTO may add `.llvm.<n>` to a local one. Cold functions (start-up's one-time
    // paths among them) are in `.text.unlikely.`.
    for name in &names {
        let any_suffix = if unhashed(name) != *name { "*" } else { "" };
        writeln!(
            script,
            "    *(.text.{name}{any_suffix} .text.unlikely.{name}{any_suffix})"
        )
        .expect("write to a String");
    }
    // Then every copy of the same functions, for builds whose hashes differ (another profile
    // or toolchain): all instantiations of a listed generic function, which still keeps most
    // of what runs together.
    let mut seen = std::collections::HashSet::new();
    for name in names.iter().map(|n| unhashed(n)).filter(|n| n.starts_with("_ZN")) {
        if seen.insert(name) {
            writeln!(script, "    *(.text.{name}17h* .text.unlikely.{name}17h*)").expect("write to a String");
        }
    }
    script.push_str("  }\n}\nINSERT AFTER .init;\n");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("layout.ld");
    std::fs::write(&out, script).expect("write layout.ld");
    println!("cargo:rustc-link-arg-bin=turna=-Wl,-T,{}", out.display());
}
