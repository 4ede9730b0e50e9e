//! Mangled names as the layout list holds them; shared by build.rs and tests/layout.rs.

/// A legacy-mangled name without its `17h<hash>E` (which changes with the build profile and the
/// toolchain) and the `.llvm.<n>` LTO adds to a local one.
pub fn unhashed(name: &str) -> &str {
    let name = name.split(".llvm.").next().unwrap_or(name);
    match name.len().checked_sub(20) {
        Some(at) if name.starts_with("_ZN") && name[at..].starts_with("17h") && name.ends_with('E') => &name[..at],
        _ => name,
    }
}
