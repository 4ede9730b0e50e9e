//! Running `ip` and friends: the network plumbing is done with iproute2, as an operator would.

use std::process::Stdio;

use crate::error::{Error, Result};

/// Runs `program args...`, returning stdout; a non-zero exit is an [`Error::Command`].
pub async fn run(program: &str, args: &[&str]) -> Result<String> {
    let out = tokio::process::Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|e| Error::io(format!("running {program}"), e))?;
    if !out.status.success() {
        return Err(Error::Command {
            command: format!("{program} {}", args.join(" ")),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `ip args...`.
pub async fn ip(args: &[&str]) -> Result<String> {
    run("ip", args).await
}
