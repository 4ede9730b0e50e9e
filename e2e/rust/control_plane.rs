//! Start Turna's local Kubernetes control plane (`e2e/scripts/apiserver.sh`) from Rust tests.
//!
//! std only, so any test can include it without new dependencies:
//!
//! ```ignore
//! #[path = "../../e2e/rust/control_plane.rs"]
//! mod control_plane;
//!
//! #[test]
//! fn gateway_gets_status() {
//!     // One control plane per test binary (etcd + kube-apiserver + controller manager +
//!     // scheduler + Gateway API CRDs); stopped by a watchdog when the test process exits.
//!     let cp = control_plane::ControlPlane::shared();
//!     let ns = cp.fresh_namespace("gw-status");
//!     // kube-rs: kube::Config::from_custom_kubeconfig(
//!     //     kube::config::Kubeconfig::read_from(cp.kubeconfig())?, &Default::default()).await?
//!     cp.kubectl(&["get", "gatewayclasses"]).unwrap();
//! }
//! ```
//!
//! Or a private one (`ControlPlane::start(Options { .. })`), stopped and deleted on drop.
//! The binaries come from `e2e/scripts/build-tools.sh`, which `start` runs first (a no-op when
//! they are cached; set `TURNA_E2E_SKIP_BUILD=1` to fail instead of building).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// What to start besides etcd and kube-apiserver.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Gateway API experimental CRDs (established and discoverable on return).
    pub crds: bool,
    /// kube-controller-manager (ServiceAccounts, namespaces, GC, Deployments, EndpointSlices...).
    pub controllers: bool,
    /// kube-scheduler.
    pub scheduler: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            crds: true,
            controllers: false,
            scheduler: false,
        }
    }
}

impl Options {
    /// Everything: CRDs, controller manager and scheduler.
    pub fn all() -> Self {
        Options {
            crds: true,
            controllers: true,
            scheduler: true,
        }
    }
}

pub struct ControlPlane {
    dir: PathBuf,
    env: BTreeMap<String, String>,
    script: PathBuf,
    /// Stop and delete on drop (private planes; the shared one is left to its watchdog).
    owned: bool,
}

static SHARED: OnceLock<ControlPlane> = OnceLock::new();
static COUNTER: AtomicUsize = AtomicUsize::new(0);

impl ControlPlane {
    /// A control plane with everything (`Options::all()`), started once per test binary and
    /// stopped (and its state dir deleted) by a watchdog once this process has exited.
    /// Panics if it cannot be started: a test that needs it cannot go on.
    pub fn shared() -> &'static ControlPlane {
        Self::shared_with(Options::all())
    }

    /// [`ControlPlane::shared`] with `opts` (the first call of the binary decides them): tests
    /// that need only the API server and CRDs share a lighter plane.
    pub fn shared_with(opts: Options) -> &'static ControlPlane {
        SHARED.get_or_init(|| {
            let mut cp = Self::start_in(new_state_dir(), opts, true)
                .unwrap_or_else(|e| panic!("starting the e2e control plane: {e}"));
            cp.owned = false;
            cp
        })
    }

    /// A private control plane in a new state dir; stopped and deleted on drop (and by a
    /// watchdog if the process dies without dropping it).
    pub fn start(opts: Options) -> io::Result<ControlPlane> {
        Self::start_in(new_state_dir(), opts, true)
    }

    /// Start (or restart) the control plane of `dir`, keeping `dir` on drop.
    pub fn start_in_dir(dir: &Path, opts: Options) -> io::Result<ControlPlane> {
        let mut cp = Self::start_in(dir.to_path_buf(), opts, false)?;
        cp.owned = true;
        Ok(cp)
    }

    fn start_in(dir: PathBuf, opts: Options, cleanup: bool) -> io::Result<ControlPlane> {
        let scripts = scripts_dir()?;
        if std::env::var_os("TURNA_E2E_SKIP_BUILD").is_none() {
            run(Command::new(scripts.join("build-tools.sh")))?;
        }
        let script = scripts.join("apiserver.sh");
        let mut cmd = Command::new(&script);
        cmd.arg("start").arg(&dir);
        if opts.crds {
            cmd.arg("--crds");
        }
        if opts.controllers {
            cmd.arg("--with-controllers");
        }
        if opts.scheduler {
            cmd.arg("--with-scheduler");
        }
        cmd.arg("--stop-with").arg(std::process::id().to_string());
        if cleanup {
            cmd.env("TURNA_E2E_CLEANUP", "1");
        }
        run(cmd)?;
        let env = parse_env(&std::fs::read_to_string(dir.join("env"))?);
        Ok(ControlPlane {
            dir,
            env,
            script,
            owned: cleanup,
        })
    }

    /// The state dir (certificates under `pki/`, logs under `logs/`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Admin kubeconfig (client certificate in `system:masters`).
    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.join("kubeconfig")
    }

    /// `https://127.0.0.1:<port>`.
    pub fn url(&self) -> &str {
        &self.env["TURNA_APISERVER_URL"]
    }

    /// PEM of the CA that signed the serving certificate.
    pub fn ca_pem(&self) -> io::Result<String> {
        std::fs::read_to_string(&self.env["TURNA_APISERVER_CA"])
    }

    /// A static bearer token of an admin (`system:masters`).
    pub fn admin_token(&self) -> io::Result<String> {
        Ok(std::fs::read_to_string(&self.env["TURNA_APISERVER_TOKEN_FILE"])?
            .trim()
            .to_string())
    }

    /// Everything `apiserver.sh env` exports (KUBECONFIG, TURNA_APISERVER_URL, TURNA_TOOLS_BIN, ...).
    pub fn env(&self) -> &BTreeMap<String, String> {
        &self.env
    }

    /// Path of one of the built binaries (`kubectl`, `kube-apiserver`, `etcd`, ...).
    pub fn tool(&self, name: &str) -> PathBuf {
        Path::new(&self.env["TURNA_TOOLS_BIN"]).join(name)
    }

    /// A `kubectl` command against this control plane (not yet run).
    pub fn kubectl_cmd(&self) -> Command {
        let mut cmd = Command::new(self.tool("kubectl"));
        cmd.env("KUBECONFIG", self.kubeconfig());
        cmd
    }

    /// Run kubectl; Err with its stderr unless it exits 0. Returns stdout.
    pub fn kubectl(&self, args: &[&str]) -> io::Result<String> {
        let mut cmd = self.kubectl_cmd();
        cmd.args(args);
        let out = run(cmd)?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `kubectl apply --server-side -f -` of a YAML document stream.
    pub fn apply_yaml(&self, yaml: &str) -> io::Result<String> {
        use std::io::Write;
        let mut child = self
            .kubectl_cmd()
            .args(["apply", "--server-side", "--force-conflicts", "-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        child.stdin.take().expect("stdin").write_all(yaml.as_bytes())?;
        check(child.wait_with_output()?, "kubectl apply").map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
    }

    /// Create a namespace with a unique name starting with `prefix`, so tests sharing a control
    /// plane do not see each other's objects.
    pub fn fresh_namespace(&self, prefix: &str) -> String {
        let name = format!(
            "{prefix}-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        self.kubectl(&["create", "namespace", &name])
            .unwrap_or_else(|e| panic!("create namespace {name}: {e}"));
        name
    }

    /// Stop every process (idempotent).
    pub fn stop(&self) -> io::Result<()> {
        let mut cmd = Command::new(&self.script);
        cmd.arg("stop").arg(&self.dir);
        run(cmd).map(|_| ())
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        if self.owned {
            let _ = self.stop();
            if self.dir.starts_with(std::env::temp_dir()) {
                let _ = std::fs::remove_dir_all(&self.dir);
            }
        }
    }
}

fn new_state_dir() -> PathBuf {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    std::env::temp_dir().join(format!(
        "turna-e2e-{}-{}-{nanos:x}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ))
}

/// `e2e/scripts` of this repository: `TURNA_E2E_SCRIPTS`, else searched upwards from the
/// including crate's manifest dir and from the current dir.
fn scripts_dir() -> io::Result<PathBuf> {
    if let Some(d) = std::env::var_os("TURNA_E2E_SCRIPTS") {
        return Ok(PathBuf::from(d));
    }
    let starts = [
        option_env!("CARGO_MANIFEST_DIR").map(PathBuf::from),
        std::env::current_dir().ok(),
    ];
    for start in starts.into_iter().flatten() {
        for dir in start.ancestors() {
            let candidate = dir.join("e2e/scripts/apiserver.sh");
            if candidate.is_file() {
                return Ok(dir.join("e2e/scripts"));
            }
        }
    }
    Err(io::Error::new(
        io::ErrorKind::NotFound,
        "e2e/scripts/apiserver.sh not found (set TURNA_E2E_SCRIPTS)",
    ))
}

fn run(mut cmd: Command) -> io::Result<Output> {
    let what = format!("{cmd:?}");
    // stderr is captured and returned in the error, so a failing start explains itself.
    let out = cmd.stdin(Stdio::null()).stderr(Stdio::piped()).output()?;
    check(out, &what)
}

fn check(out: Output, what: &str) -> io::Result<Output> {
    if out.status.success() {
        Ok(out)
    } else {
        Err(io::Error::other(format!(
            "{what} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// Parse the `export K=V` lines of `apiserver.sh env`.
fn parse_env(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("export "))
        .filter_map(|kv| kv.split_once('='))
        // `PATH=<bin>:$PATH` is for shells; `tool()` gives the binaries' paths.
        .filter(|(k, _)| *k != "PATH")
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

// Self-test: `make cluster-rust-smoke` (rustc --test --cfg turna_control_plane_selftest).
#[cfg(all(test, turna_control_plane_selftest))]
mod selftest {
    use super::*;

    #[test]
    fn shared_plane_serves_gateway_api() {
        let cp = ControlPlane::shared();
        let ns = cp.fresh_namespace("selftest");
        cp.apply_yaml(&format!(
            "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\nmetadata: {{name: selftest}}\n\
             spec: {{controllerName: turna.dev/gateway-controller}}\n---\n\
             apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: gw, namespace: {ns}}}\n\
             spec: {{gatewayClassName: selftest, listeners: [{{name: http, protocol: HTTP, port: 80}}]}}\n"
        ))
        .unwrap();
        let got = cp
            .kubectl(&[
                "get",
                "gateway",
                "gw",
                "-n",
                &ns,
                "-o",
                "jsonpath={.spec.gatewayClassName}",
            ])
            .unwrap();
        assert_eq!(got, "selftest");
        // The controller manager creates the default ServiceAccount of the new namespace.
        let mut ok = false;
        for _ in 0..60 {
            if cp.kubectl(&["get", "serviceaccount", "default", "-n", &ns]).is_ok() {
                ok = true;
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(500));
        }
        assert!(ok, "no default ServiceAccount in {ns}");
    }

    #[test]
    fn private_plane_stops_on_drop() {
        let cp = ControlPlane::start(Options {
            crds: false,
            controllers: false,
            scheduler: false,
        })
        .unwrap();
        let dir = cp.dir().to_path_buf();
        assert!(cp.kubectl(&["get", "--raw", "/readyz"]).unwrap().contains("ok"));
        drop(cp);
        assert!(!dir.exists(), "state dir {} not removed", dir.display());
    }
}
