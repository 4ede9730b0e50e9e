//! Running `ip` and friends: the network plumbing is done with iproute2, as an operator would.

use std::process::Stdio;

use crate::error::{Error, Result};

/// Runs `program args...`, returning stdout; a non-zero exit is an [`Error::Command`].
pub async fn run(program: &str, args: &[&str]) -> Result<String> {
    run_with_input(program, args, None).await
}

/// [`run`] with `input` on stdin.
pub async fn run_with_input(program: &str, args: &[&str], input: Option<&str>) -> Result<String> {
    let mut child = tokio::process::Command::new(program)
        .args(args)
        .stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Error::io(format!("running {program}"), e))?;
    if let (Some(text), Some(mut stdin)) = (input, child.stdin.take()) {
        use tokio::io::AsyncWriteExt;
        stdin
            .write_all(text.as_bytes())
            .await
            .map_err(|e| Error::io(format!("writing to {program}"), e))?;
    }
    let out = child
        .wait_with_output()
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

/// `ip [-n netns] -batch -` with one command per line: one process for several changes.
pub async fn ip_batch(netns: Option<&str>, commands: &[String]) -> Result<String> {
    let mut args = Vec::with_capacity(4);
    if let Some(ns) = netns {
        args.extend(["-n", ns]);
    }
    args.extend(["-batch", "-"]);
    run_with_input("ip", &args, Some(&(commands.join("\n") + "\n"))).await
}
