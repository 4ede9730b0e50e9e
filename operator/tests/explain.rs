//! Golden tests of `turna explain` from files: one folder per common mistake under
//! `tests/explain/` with the manifests (`input.yaml`), the command's arguments (`args`) and
//! what it prints (`expected.txt`). `TURNA_BLESS=1 cargo test -p turna-operator --test explain`
//! rewrites the expectations; review their diff like code.

use std::path::Path;
use std::process::Command;

#[test]
fn explain_says_what_is_wrong_and_how_to_fix_it() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/explain");
    let bless = std::env::var_os("TURNA_BLESS").is_some_and(|v| v == "1");
    let mut cases: Vec<_> = std::fs::read_dir(&root)
        .expect("tests/explain")
        .map(|e| e.expect("entry").path())
        .collect();
    cases.sort();
    assert!(cases.len() >= 12, "at least 12 cases");
    let mut failed = Vec::new();
    for case in &cases {
        let args = std::fs::read_to_string(case.join("args")).expect("args");
        let input = case.join("input.yaml");
        let out = Command::new(env!("CARGO_BIN_EXE_turna"))
            .arg("explain")
            .args(args.split_whitespace())
            .arg("-f")
            .arg(&input)
            .env("KUBECONFIG", "/nonexistent")
            .output()
            .expect("run turna explain");
        let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
        if !out.status.success() {
            text.push_str(&format!("error: {}", String::from_utf8_lossy(&out.stderr)));
        }
        let expected_path = case.join("expected.txt");
        if bless {
            std::fs::write(&expected_path, &text).expect("write expected.txt");
            continue;
        }
        let expected = std::fs::read_to_string(&expected_path).unwrap_or_default();
        if text != expected {
            failed.push(format!("{}:\n--- expected\n{expected}--- got\n{text}", case.display()));
        }
    }
    assert!(
        failed.is_empty(),
        "{}\nrerun with TURNA_BLESS=1 to accept",
        failed.join("\n")
    );
}
