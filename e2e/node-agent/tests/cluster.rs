//! The node agent in a real cluster: `e2e/scripts/cluster.sh up` (bridge, control plane on the
//! bridge address, this crate's agent) on a private bridge and pod CIDR, then a Deployment whose
//! pod is a small Python HTTP server. Needs root, `ip`, `unshare` and `python3`; where those are
//! missing it says so and returns.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const BRIDGE: &str = "turnait0";
const POD_CIDR: &str = "10.242.0.0/16";
const NODE: &str = "turna-it";

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn ok(out: Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn missing_prerequisite() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root".into());
    }
    for tool in ["ip", "unshare", "python3", "openssl"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            return Some(format!("{tool} missing"));
        }
    }
    None
}

/// The cluster of this test; `down` on drop (and by the script's watchdog if we are killed).
struct Cluster {
    dir: tempfile::TempDir,
    tools: PathBuf,
}

impl Cluster {
    fn up() -> Cluster {
        let dir = tempfile::Builder::new()
            .prefix("turna-node-agent-it")
            .tempdir()
            .unwrap();
        let python = ok(
            Command::new("python3")
                .args(["-c", "import sys; print(sys.executable)"])
                .output()
                .unwrap(),
            "python3",
        );
        let images = dir.path().join("images.yaml");
        std::fs::write(&images, format!("images:\n  turna.test/python: {}\n", python.trim())).unwrap();
        let cluster_dir = dir.path().join("cluster");
        let out = Command::new(repo_root().join("e2e/scripts/cluster.sh"))
            .arg("up")
            .arg(&cluster_dir)
            .args(["--no-addons", "--stop-with", &std::process::id().to_string()])
            .env("TURNA_NODE_AGENT_BIN", env!("CARGO_BIN_EXE_turna-node-agent"))
            .env("TURNA_CLUSTER_BRIDGE", BRIDGE)
            .env("TURNA_POD_CIDR", POD_CIDR)
            .env("TURNA_NODE_NAME", NODE)
            .env("TURNA_IMAGE_MAP", &images)
            .output()
            .unwrap();
        let stdout = ok(out, "cluster.sh up");
        assert!(stdout.contains("export KUBECONFIG="), "no kubeconfig line in {stdout}");
        let env = std::fs::read_to_string(cluster_dir.join("env")).unwrap();
        let tools = env
            .lines()
            .find_map(|l| l.strip_prefix("export TURNA_TOOLS_BIN="))
            .map(PathBuf::from)
            .expect("TURNA_TOOLS_BIN in env");
        Cluster { dir, tools }
    }

    fn cluster_dir(&self) -> PathBuf {
        self.dir.path().join("cluster")
    }

    fn kubectl(&self, args: &[&str]) -> Output {
        Command::new(self.tools.join("kubectl"))
            .arg("--kubeconfig")
            .arg(self.cluster_dir().join("kubeconfig"))
            .args(args)
            .output()
            .unwrap()
    }

    fn kubectl_ok(&self, args: &[&str]) -> String {
        ok(self.kubectl(args), &format!("kubectl {}", args.join(" ")))
    }

    fn apply(&self, yaml: &str) {
        let path = self.dir.path().join("manifest.yaml");
        std::fs::write(&path, yaml).unwrap();
        self.kubectl_ok(&["apply", "-f", path.to_str().unwrap()]);
    }

    fn agent_log(&self) -> String {
        std::fs::read_to_string(self.cluster_dir().join("logs/node-agent.log")).unwrap_or_default()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new(repo_root().join("e2e/scripts/cluster.sh"))
            .arg("down")
            .arg(self.cluster_dir())
            .output();
    }
}

fn eventually<T>(what: &str, secs: u64, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn netns_list() -> String {
    ok(
        Command::new("ip").args(["netns", "list"]).output().unwrap(),
        "ip netns list",
    )
}

const WEB: &str = r#"
apiVersion: v1
kind: Secret
metadata: {name: web-secret}
stringData: {greeting: hello-from-secret}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 5
      containers:
      - name: web
        image: turna.test/python:v1
        args:
        - -u
        - -c
        - |
          import os, http.server
          print("GREETING", os.environ["GREETING"], open("/etc/web/greeting").read(), os.environ["POD_IP"], flush=True)
          http.server.ThreadingHTTPServer(("", 8080), http.server.SimpleHTTPRequestHandler).serve_forever()
        env:
        - {name: POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}
        - {name: GREETING, value: "hi-$(POD_NAME)"}
        - {name: POD_IP, valueFrom: {fieldRef: {fieldPath: status.podIP}}}
        ports: [{containerPort: 8080}]
        readinessProbe:
          httpGet: {path: /, port: 8080}
          periodSeconds: 2
        volumeMounts: [{name: secret, mountPath: /etc/web, readOnly: true}]
      volumes: [{name: secret, secret: {secretName: web-secret}}]
---
apiVersion: v1
kind: Pod
metadata: {name: exec-ready}
spec:
  containers:
  - name: main
    image: turna.test/python
    args: ["-c", "import time; time.sleep(3600)"]
    readinessProbe:
      exec:
        command: ["python3", "-c", "import os, sys; sys.exit(0 if os.path.exists('/etc/web/greeting') else 1)"]
      periodSeconds: 1
    volumeMounts: [{name: secret, mountPath: /etc/web}]
  volumes: [{name: secret, secret: {secretName: web-secret}}]
---
apiVersion: v1
kind: Pod
metadata: {name: crasher}
spec:
  containers:
  - name: crasher
    image: turna.test/python
    args: ["-c", "import sys; print('crashing'); sys.exit(3)"]
"#;

/// Two containers with preStop hooks that write when the hook ran and when SIGTERM came (into a
/// host directory mounted at its own path: a mount point the host already has).
const PRE_STOP: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: prestop}
spec:
  terminationGracePeriodSeconds: 10
  containers:
  - name: exec
    image: turna.test/python
    args:
    - -c
    - |
      import signal, sys, time
      def term(*_):
          open("EVENTS_DIR/events", "a").write("term exec %f\n" % time.time())
          sys.exit(0)
      signal.signal(signal.SIGTERM, term)
      open("EVENTS_DIR/events", "a").write("started exec\n")
      while True: time.sleep(0.05)
    lifecycle:
      preStop:
        exec:
          command: ["python3", "-c", "import time; open('EVENTS_DIR/events', 'a').write('prestop %f\\n' % time.time()); time.sleep(2)"]
    volumeMounts: [{name: events, mountPath: EVENTS_DIR}]
  - name: sleep
    image: turna.test/python
    args:
    - -c
    - |
      import signal, sys, time
      def term(*_):
          open("EVENTS_DIR/events", "a").write("term sleep %f\n" % time.time())
          sys.exit(0)
      signal.signal(signal.SIGTERM, term)
      open("EVENTS_DIR/events", "a").write("started sleep\n")
      while True: time.sleep(0.05)
    lifecycle:
      preStop:
        sleep: {seconds: 2}
    volumeMounts: [{name: events, mountPath: EVENTS_DIR}]
  volumes: [{name: events, hostPath: {path: EVENTS_DIR}}]
"#;

#[test]
fn pods_run_as_processes_in_their_own_network_namespaces() {
    if let Some(why) = missing_prerequisite() {
        eprintln!("skipping the node agent cluster test: {why}");
        return;
    }
    // One run at a time on this machine: the bridge and CIDR are fixed.
    let lock = std::fs::File::create(std::env::temp_dir().join("turna-node-agent-it.lock")).unwrap();
    // SAFETY: flock on an open fd.
    assert_eq!(
        unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&lock), libc::LOCK_EX) },
        0
    );

    let started = Instant::now();
    let c = Cluster::up();
    c.apply(WEB);

    // The Node: Ready, at the bridge address, with its kubelet port, holding its Lease.
    let node = c.kubectl_ok(&[
        "get",
        "node",
        NODE,
        "-o",
        "jsonpath={.status.conditions[?(@.type==\"Ready\")].status} {.status.addresses[?(@.type==\"InternalIP\")].address} {.status.daemonEndpoints.kubeletEndpoint.Port} {.status.allocatable.pods}",
    ]);
    assert_eq!(node.trim(), "True 10.242.0.1 10250 500");
    let lease = c.kubectl_ok(&[
        "get",
        "lease",
        "-n",
        "kube-node-lease",
        NODE,
        "-o",
        "jsonpath={.spec.holderIdentity}",
    ]);
    assert_eq!(lease, NODE);

    // Running and Ready, with an address of the pod CIDR.
    let (pod, ip) = eventually("web pod Ready", 60, || {
        let out = c.kubectl(&["get", "pods", "-l", "app=web", "-o", "jsonpath={range .items[*]}{.metadata.name} {.status.podIP} {.status.phase} {.status.conditions[?(@.type==\"Ready\")].status}{\"\\n\"}{end}"]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.lines().find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 4 && f[2] == "Running" && f[3] == "True").then(|| (f[0].to_string(), f[1].to_string()))
        })
    });
    let ip: Ipv4Addr = ip.parse().unwrap();
    assert_eq!(ip.octets()[..2], [10, 242], "pod IP {ip} outside {POD_CIDR}");

    // Reachable from the host on the bridge.
    let mut s = TcpStream::connect_timeout(&SocketAddr::new(ip.into(), 8080), Duration::from_secs(5)).unwrap();
    s.write_all(b"GET /?from-the-test HTTP/1.1\r\nHost: web\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    assert!(resp.starts_with("HTTP/1.0 200"), "{resp}");

    // Env (with $(VAR) expansion and fieldRefs) and the Secret volume, through `kubectl logs`
    // (apiserver -> the agent's kubelet API).
    let logs = eventually("web logs", 20, || {
        let l = c.kubectl_ok(&["logs", &pod]);
        l.contains("GREETING").then_some(l)
    });
    assert!(
        logs.contains(&format!("GREETING hi-{pod} hello-from-secret {ip}")),
        "{logs}"
    );
    let tail = c.kubectl_ok(&["logs", &pod, "--tail=1"]);
    assert_eq!(tail.lines().count(), 1, "{tail}");
    // Among the last lines, not always the last: the readiness probe's requests are logged too,
    // and one the probe closes early adds Python's traceback of the broken pipe after it.
    let recent = c.kubectl_ok(&["logs", &pod, "--tail=50"]);
    assert!(
        recent.contains("GET /?from-the-test HTTP/1.1"),
        "the request shows in the log: {recent}"
    );

    // An exec probe runs in the container's namespaces: the Secret volume is only there.
    assert!(!Path::new("/etc/web").exists(), "the host must not see pod mounts");
    eventually("exec-ready Ready", 30, || {
        let out = c.kubectl_ok(&[
            "get",
            "pod",
            "exec-ready",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
        ]);
        (out == "True").then_some(())
    });

    // Restarts with back-off and a counted restart, with the last exit code.
    let last = eventually("crasher restarted", 30, || {
        let out = c.kubectl_ok(&["get", "pod", "crasher", "-o", "jsonpath={.status.containerStatuses[0].restartCount} {.status.containerStatuses[0].lastState.terminated.exitCode}"]);
        let f: Vec<String> = out.split_whitespace().map(String::from).collect();
        (f.len() == 2 && f[0].parse::<i32>().unwrap_or(0) >= 1).then(|| f[1].clone())
    });
    assert_eq!(last, "3");
    let previous = c.kubectl_ok(&["logs", "crasher", "--previous"]);
    assert!(previous.contains("crashing"), "{previous}");

    // Deletion: SIGTERM, the process and its namespace go, then the pod object.
    let cid = c.kubectl_ok(&[
        "get",
        "pod",
        &pod,
        "-o",
        "jsonpath={.status.containerStatuses[0].containerID}",
    ]);
    let pid: i32 = cid.trim_start_matches("turna://").parse().unwrap();
    let netns = netns_list()
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .find(|n| n.contains(&pod))
        .map(String::from)
        .expect("pod network namespace");
    // The container's private mount namespace holds no handles of pod network namespaces
    // (they would keep deleted pods' namespaces alive).
    let nsfs = ok(
        Command::new("nsenter")
            .args(["-t", &pid.to_string(), "-m", "findmnt", "-n", "-t", "nsfs"])
            .output()
            .unwrap(),
        "findmnt in the container's mount namespace",
    );
    assert!(!nsfs.contains("/run/netns"), "{nsfs}");
    // No way off this machine: the pod's only route is the bridge's network.
    let routes = ok(
        Command::new("ip")
            .args(["-n", &netns, "route", "show"])
            .output()
            .unwrap(),
        "ip route",
    );
    assert!(!routes.contains("default"), "pod has a default route: {routes}");
    assert_eq!(routes.lines().count(), 1, "{routes}");
    c.kubectl_ok(&["delete", "pod", &pod, "--wait=true", "--timeout=30s"]);
    // SAFETY: signal 0 only checks existence.
    assert_ne!(
        unsafe { libc::kill(pid, 0) },
        0,
        "container process {pid} survived deletion"
    );
    assert!(!netns_list().contains(&netns), "{netns} survived deletion");
    assert!(c.agent_log().contains("pod stopped and cleaned up"));

    // preStop hooks run before SIGTERM, within the grace period: an exec hook (in the
    // container's namespaces) and a sleep hook, both containers at once.
    let events = c.dir.path().join("prestop");
    std::fs::create_dir_all(&events).unwrap();
    c.apply(&PRE_STOP.replace("EVENTS_DIR", events.to_str().unwrap()));
    // Both containers have their SIGTERM handlers in place.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let log = std::fs::read_to_string(events.join("events")).unwrap_or_default();
        if log.contains("started exec") && log.contains("started sleep") {
            break;
        }
        if Instant::now() > deadline {
            let agent: Vec<String> = c
                .agent_log()
                .lines()
                .filter(|l| l.contains("prestop"))
                .map(String::from)
                .collect();
            panic!(
                "prestop containers did not start: events {log:?}\n{}\n{}",
                c.kubectl_ok(&["get", "pod", "prestop", "-o", "yaml"]),
                agent.join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let deleted = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    c.kubectl_ok(&["delete", "pod", "prestop", "--wait=true", "--timeout=30s"]);
    let log = std::fs::read_to_string(events.join("events")).unwrap_or_default();
    let at = |what: &str| -> f64 {
        log.lines()
            .find_map(|l| l.strip_prefix(what)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {what:?} in the events: {log}"))
    };
    let (hook, term_exec, term_sleep) = (at("prestop "), at("term exec "), at("term sleep "));
    assert!(
        hook - deleted < 2.0,
        "the exec hook ran {:.1}s after the delete: {log}",
        hook - deleted
    );
    assert!(
        term_exec - hook >= 1.9,
        "SIGTERM came before the exec hook's 2 s were over: {log}"
    );
    assert!(
        term_sleep - deleted >= 1.9,
        "SIGTERM came before the 2 s sleep hook was over: {log}"
    );
    assert!(
        term_exec - deleted < 8.0 && term_sleep - deleted < 8.0,
        "SIGTERM late: {log}"
    );

    // The Deployment gets a replacement pod.
    eventually("replacement pod", 30, || {
        let out = c.kubectl_ok(&[
            "get",
            "pods",
            "-l",
            "app=web",
            "-o",
            "jsonpath={.items[*].status.phase}",
        ]);
        (out.trim() == "Running").then_some(())
    });

    drop(c);
    assert!(
        !netns_list().contains(&format!("{NODE}.")),
        "namespaces left after down"
    );
    let bridge = Command::new("ip")
        .args(["link", "show", "dev", BRIDGE])
        .output()
        .unwrap();
    assert!(!bridge.status.success(), "bridge left after down");
    eprintln!("node agent cluster test took {:?}", started.elapsed());
}
