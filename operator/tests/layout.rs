//! The `turna` binary's code layout (build.rs): the functions of operator/layout/functions.txt,
//! which a proxy runs to start and to serve, open `.text`, so they share the pages the kernel
//! maps instead of each pulling in 64 KiB of code around it. Read with `nm` (binutils).

use std::collections::HashSet;
use std::process::Command;

#[path = "../layout/names.rs"]
mod names;
use names::unhashed;

/// The output of a binutils `tool` run on the `turna` binary.
fn binutils(tool: &str, args: &[&str]) -> String {
    let out = Command::new(tool)
        .args(args)
        .arg(env!("CARGO_BIN_EXE_turna"))
        .output()
        .unwrap_or_else(|e| panic!("run {tool} (binutils): {e}"));
    assert!(out.status.success(), "{tool}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap_or_else(|_| panic!("{tool} prints text"))
}

#[test]
fn the_recorded_functions_open_the_text_section() {
    let list = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/layout/functions.txt"))
        .expect("read layout/functions.txt");
    // By name without the hash: this test build's hashes are not those of the recorded builds.
    let listed: HashSet<&str> = (list.lines().map(str::trim))
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(unhashed)
        .collect();
    let symbols = binutils("nm", &["-n", "--defined-only"]);
    // Code symbols in address order, from the first listed one.
    let text: Vec<&str> = symbols
        .lines()
        .filter_map(|l| match l.split_whitespace().collect::<Vec<_>>()[..] {
            [_, kind, name] if kind.eq_ignore_ascii_case("t") => Some(name),
            _ => None,
        })
        .skip_while(|n| !listed.contains(unhashed(n)))
        .collect();
    let present: HashSet<&str> = text
        .iter()
        .map(|n| unhashed(n))
        .filter(|n| listed.contains(n))
        .collect();
    assert!(
        present.len() * 2 >= listed.len(),
        "only {} of the {} listed functions are in the binary: record the list again (operator/layout/record.sh)",
        present.len(),
        listed.len()
    );
    // The copies of listed functions open .text: as many code symbols as there are copies are
    // almost all listed (linked as before, about a third are: listed names are common ones).
    let copies = text.iter().filter(|n| listed.contains(unhashed(n))).count();
    let opening = text[..copies].iter().filter(|n| listed.contains(unhashed(n))).count();
    assert!(
        opening * 10 >= copies * 9,
        "{opening} of the first {copies} code symbols are listed functions: the layout script is not in effect"
    );
}

#[test]
fn names_lose_only_their_hash() {
    assert_eq!(unhashed("_ZN5turna4main17h0123456789abcdefE"), "_ZN5turna4main");
    assert_eq!(unhashed("_ZN5turna4main17h0123456789abcdefE.llvm.42"), "_ZN5turna4main");
    assert_eq!(unhashed("mi_malloc"), "mi_malloc");
}

/// build.rs packs the relative relocations (RELR): the loader reads `.rela.dyn` whole at start,
/// and with one 24-byte entry per pointer in the binary's data it was 0.6 MiB of every proxy.
#[test]
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn relative_relocations_are_packed() {
    let sections = binutils("readelf", &["-SW"]);
    let size = |name: &str| {
        sections.lines().find_map(|l| {
            let fields: Vec<&str> = l.split_whitespace().collect();
            let at = fields.iter().position(|f| *f == name)?;
            u64::from_str_radix(fields.get(at + 4)?, 16).ok()
        })
    };
    assert!(
        size(".relr.dyn").is_some(),
        "no .relr.dyn: linked without -z pack-relative-relocs"
    );
    let rela = size(".rela.dyn").unwrap_or(0);
    assert!(
        rela < 64 * 1024,
        ".rela.dyn is {rela} bytes: the relative relocations are not packed"
    );
}
