#!/usr/bin/env python3
"""`make deploy-check`: Turna's Helm chart, Kustomize configurations and examples, checked
against a real kube-apiserver (e2e/scripts/apiserver.sh, Gateway API v1.7.0 CRDs).

For each installation variant (Helm: scope cluster with placement controller and gateway, scope
namespace with one and with two watched namespaces, mode standalone; Kustomize: the base and
both overlays):

1. render: `helm lint --strict` and `helm template`, or `kustomize build` (and `kubectl
   kustomize`, which `kubectl apply -k` uses, renders the same);
2. server-side dry-run of every rendered object, then apply for real;
3. RBAC, statically: the rules the rendered (Cluster)Roles grant the controller and proxy
   ServiceAccounts (and the reader ClusterRole's rules) equal deploy/tests/rbac-needs.txt for
   the variant, in both directions; scope=namespace renders no cluster-wide object;
4. RBAC, live: the API server's authorizer (SubjectAccessReview) allows each needed rule to the
   ServiceAccount, and with scope=namespace denies each of them cluster-wide;
5. the operator itself: `turna controller` runs with the controller ServiceAccount's token and
   the rendered configuration and arguments, accepts a Gateway, writes Gateway and HTTPRoute
   status and provisions the proxy objects where the placement puts them;
6. the provisioned proxy runs as its ServiceAccount (a token bound to a pod of its Deployment)
   with its Deployment's arguments and ConfigMap, gets its IR from the controller, reads its
   bundle Secret and the controller Service's EndpointSlices, and serves a request to a
   backend on loopback;
7. deleting the Gateway garbage-collects the proxy objects; neither process logs a forbidden
   request or an error.

The three examples files pass a server-side dry-run (namespace-scoped-admin.yaml is
applied: the namespace variants need it).

Environment: TURNA_DEPLOY_KEEP=1 keeps the work directory (rendered files, control plane logs,
controller logs); TURNA_DEPLOY_VARIANTS=<substring> checks only the variants whose name holds it
(e.g. "helm", "namespace"); TURNA_BIN names a built turna binary instead of building target/debug/turna.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import http.server
import threading
import urllib.request

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts/turna-gateway"
KUSTOMIZE = ROOT / "kustomize"
EXAMPLES = ROOT / "examples"
NEEDS = ROOT / "deploy/tests/rbac-needs.txt"
# TURNA_BIN: an already built turna binary (skips the cargo build).
TURNA = Path(os.environ.get("TURNA_BIN") or ROOT / "target/debug/turna")
GROUP = "gateway.networking.k8s.io"
MANAGED = "app.kubernetes.io/managed-by=turna-gateway"
# Cluster-scoped kinds among the resources of rbac-needs.txt.
CLUSTER_SCOPED = {
    "namespaces",
    "gatewayclasses",
    "gatewayclasses/status",
    "clusterroles",
    "clusterrolebindings",
    "tokenreviews",
    "selfsubjectaccessreviews",
}


class CheckFailed(Exception):
    """A check of this script failed; the message says which and why."""


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def run(
    args: list, *, env: dict | None = None, stdin: str | None = None, check: bool = True, cwd: Path | None = None
) -> str:
    result = subprocess.run(
        [str(a) for a in args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
    )
    if check and result.returncode != 0:
        raise CheckFailed(f"{' '.join(map(str, args))} exited {result.returncode}:\n{result.stderr}{result.stdout}")
    return result.stdout


@dataclass
class Variant:
    """One way to install Turna, and what it must grant."""

    name: str
    scope: str  # cluster or namespace
    placement: str  # controller or gateway (mode controller)
    home: str  # the controller namespace
    deployment: str  # controller Deployment name (also the Lease name of the chart)
    lease: str
    reader: str
    gateway_class: str
    render: list[str]  # the command printing the manifests
    lint: list[str] | None = None
    mode: str = "controller"  # or standalone
    # imagePullSecrets the values name, which every provisioned proxy pod must carry.
    pull_secrets: list[str] = field(default_factory=list)
    # spec.replicas of the provisioned proxy Deployment, when the values set a default TurnaProxy.
    proxy_replicas: int | None = None
    # The labels the chart's PodMonitor selects proxy pods by (check_monitors fills it).
    pod_monitor_selector: dict = field(default_factory=dict)
    # scope=namespace: the namespaces watched (empty: home).
    watch_namespaces: list[str] = field(default_factory=list)
    rendered: list[dict] = field(default_factory=list)

    @property
    def watched(self) -> list[str]:
        return self.watch_namespaces or [self.home]

    def place(self, namespace: str) -> str:
        """The `where` of rbac-needs.txt for a namespace."""
        return "home" if namespace == self.home else f"namespace {namespace}"

    @property
    def slug(self) -> str:
        """The name as a file name and DNS label prefix."""
        return re.sub(r"[^a-z0-9]+", "-", self.name.lower()).strip("-")

    @property
    def controller_sa(self) -> str:
        return self.deployment + "-controller"

    @property
    def proxy_sa(self) -> str:
        return self.deployment + "-proxy"


def variants(helm: str, kustomize: str) -> list[Variant]:
    def chart(name: str, release: str, namespace: str, *values: str, **kw) -> Variant:
        sets = [a for v in values for a in ("--set", v)]
        return Variant(
            name=name,
            home=namespace,
            deployment=release,
            lease=release,
            reader=f"{release}-reader",
            render=[helm, "template", release, str(CHART), "-n", namespace, *sets],
            lint=[helm, "lint", "--strict", str(CHART), "-n", namespace, *sets],
            **kw,
        )

    def overlay(name: str, path: str, home: str, **kw) -> Variant:
        return Variant(
            name=name,
            home=home,
            deployment="turna",
            lease="turna",
            reader="turna-reader",
            render=[kustomize, "build", str(KUSTOMIZE / path)],
            **kw,
        )

    tenant = (
        "scope=namespace",
        "gatewayClass.create=false",
        "gatewayClass.name=turna-team-a",
        "controllerName=rakunlabs.com/turna-team-a",
    )
    # Kustomize variants share names: the base is checked before the gateway overlay (a
    # superset), and the namespaced overlay after the chart's namespace variant (same Roles).
    return [
        chart("helm scope=cluster placement=controller", "hc", "helm-cluster", "imagePullSecrets[0].name=regcred",
              "proxyParameters.create=true", "proxyParameters.spec.replicas=3",
              scope="cluster", placement="controller", gateway_class="turna", pull_secrets=["regcred"],
              proxy_replicas=3),
        chart("helm scope=cluster placement=gateway", "hg", "helm-gateway", "proxy.placement=gateway",
              "imagePullSecrets[0].name=regcred",
              scope="cluster", placement="gateway", gateway_class="turna", pull_secrets=["regcred"]),
        chart("helm mode=standalone", "hs", "helm-standalone", "mode=standalone",
              "standalone.service.ports[0].name=http", "standalone.service.ports[0].port=80",
              scope="cluster", placement="controller", gateway_class="turna", mode="standalone"),
        chart("helm scope=namespace", "turna", "team-a", *tenant, "imagePullSecrets[0].name=regcred",
              scope="namespace", placement="controller", gateway_class="turna-team-a", pull_secrets=["regcred"]),
        # Several namespaces, each watched on its own: the route and its backend in the second.
        chart("helm scope=namespace watchNamespaces", "turna", "team-a", *tenant,
              "watchNamespaces[0]=team-a", "watchNamespaces[1]=team-a-apps",
              scope="namespace", placement="controller", gateway_class="turna-team-a",
              watch_namespaces=["team-a", "team-a-apps"]),
        overlay("kustomize turna-gateway", "turna-gateway", "turna-system",
                scope="cluster", placement="controller", gateway_class="turna"),
        overlay("kustomize turna-gateway-gateway-namespace", "turna-gateway-gateway-namespace", "turna-system",
                scope="cluster", placement="gateway", gateway_class="turna"),
        overlay("kustomize turna-gateway-namespaced", "turna-gateway-namespaced", "team-a",
                scope="namespace", placement="controller", gateway_class="turna-team-a"),
    ]


# ------------------------------------------------------------------ rbac-needs.txt

Rule = tuple[str, str, str, str, str]  # where, apiGroup, resource, verb, resourceName ("*": any)


def needs(variant: Variant) -> dict[str, set[Rule]]:
    """The rules of rbac-needs.txt the variant needs, by subject."""
    out: dict[str, set[Rule]] = {}
    applies = False
    for number, raw in enumerate(NEEDS.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("["):
            conditions = dict(c.split("=", 1) for c in line.strip("[]").split())
            applies = (
                conditions.get("mode", "controller") == variant.mode
                and conditions.get("scope", variant.scope) == variant.scope
                and conditions.get("placement", variant.placement) == variant.placement
            )
            continue
        if not applies:
            continue
        fields = line.split()
        if len(fields) not in (5, 6):
            raise CheckFailed(f"{NEEDS}:{number}: expected 5 or 6 fields: {raw}")
        subject, where, group, resources, verbs = fields[:5]
        names = fields[5] if len(fields) == 6 else "*"
        names = (
            names.replace("$lease", variant.lease)
            .replace("$reader", variant.reader)
            .replace("$class", variant.gateway_class)
        )
        group = "" if group == "core" else group
        places = [variant.place(n) for n in variant.watched] if where == "watched" else [where]
        for resource in resources.split(","):
            for verb in verbs.split(","):
                for name in names.split(","):
                    for place in places:
                        out.setdefault(subject, set()).add((place, group, resource, verb, name))
    return out


# ------------------------------------------------------------------ rendered RBAC


def expand(rules: list[dict], where: str) -> set[Rule]:
    granted: set[Rule] = set()
    for rule in rules or []:
        for group in rule.get("apiGroups", []):
            for resource in rule.get("resources", []):
                for verb in rule.get("verbs", []):
                    for name in rule.get("resourceNames") or ["*"]:
                        granted.add((where, group, resource, verb, name))
    return granted


def grants(docs: list[dict], namespace: str, account: str, home: str) -> set[Rule]:
    """What the bindings among `docs` grant the ServiceAccount namespace/account (directly or
    through its groups)."""
    groups = {"system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"}
    roles = {(d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]): d for d in docs}
    granted: set[Rule] = set()
    for binding in docs:
        kind = binding["kind"]
        if kind not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        matches = any(
            (s.get("kind") == "ServiceAccount" and s.get("name") == account
             and s.get("namespace", binding["metadata"].get("namespace")) == namespace)
            or (s.get("kind") == "Group" and s.get("name") in groups)
            for s in binding.get("subjects") or []
        )
        if not matches:
            continue
        ref = binding["roleRef"]
        bound_in = binding["metadata"].get("namespace", "")
        role = roles.get((ref["kind"], bound_in if ref["kind"] == "Role" else "", ref["name"]))
        if role is None:
            raise CheckFailed(f"{kind} {binding['metadata']['name']} refers to missing {ref['kind']} {ref['name']}")
        if kind == "ClusterRoleBinding":
            where = "cluster"
        else:
            where = "home" if bound_in == home else f"namespace {bound_in}"
        granted |= expand(role.get("rules"), where)
    return granted


def describe(rules: set[Rule]) -> str:
    return "\n".join(
        f"    {where} {group or 'core'} {resource} {verb}" + ("" if name == "*" else f" {name}")
        for where, group, resource, verb, name in sorted(rules)
    )


def compare(what: str, granted: set[Rule], needed: set[Rule]) -> None:
    extra, missing = granted - needed, needed - granted
    if extra or missing:
        message = f"{what}: RBAC differs from rbac-needs.txt"
        if missing:
            message += f"\n  needed but not granted:\n{describe(missing)}"
        if extra:
            message += f"\n  granted but not needed:\n{describe(extra)}"
        raise CheckFailed(message)


def check_static_rbac(variant: Variant, admin: list[dict]) -> None:
    docs = variant.rendered
    need = needs(variant)
    compare(f"{variant.name}: controller", grants(docs, variant.home, variant.controller_sa, variant.home),
            need.get("controller", set()))
    compare(f"{variant.name}: proxy", grants(docs, variant.home, variant.proxy_sa, variant.home),
            need.get("proxy", set()))
    readers = [d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"] == variant.reader]
    compare(f"{variant.name}: ClusterRole {variant.reader}",
            expand(readers[0]["rules"], "cluster") if readers else set(), need.get("reader", set()))
    if variant.scope == "namespace":
        cluster_wide = [f"{d['kind']} {d['metadata']['name']}" for d in docs
                        if d["kind"] in ("ClusterRole", "ClusterRoleBinding", "Namespace", "GatewayClass")]
        if cluster_wide:
            raise CheckFailed(f"{variant.name}: scope=namespace renders cluster-wide objects: {cluster_wide}")
        compare(f"{variant.name}: the administrator's part for the controller",
                grants(admin, variant.home, variant.controller_sa, variant.home), need.get("admin", set()))
    log(f"{variant.name}: rendered RBAC is exactly rbac-needs.txt")


# ------------------------------------------------------------------ the API server


class Cluster:
    """kubectl against the control plane of e2e/scripts/apiserver.sh, as admin."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.env = dict(os.environ)
        for line in (directory / "env").read_text().splitlines():
            match = re.match(r"export (\w+)=(.*)", line)
            if match:
                value = match.group(2)
                if value[:1] in "'\"":
                    value = value[1:-1]
                self.env[match.group(1)] = value
        self.kubectl_bin = str(Path(self.env["TURNA_TOOLS_BIN"]) / "kubectl")

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> str:
        return run([self.kubectl_bin, *args], env=self.env, stdin=stdin, check=check)

    def json(self, *args: str, stdin: str | None = None) -> dict:
        return json.loads(self.kubectl(*args, "-o", "json", stdin=stdin))

    def ensure_namespaces(self, docs: list[dict]) -> None:
        names = {d["metadata"]["namespace"] for d in docs if d["metadata"].get("namespace")}
        names |= {d["metadata"]["name"] for d in docs if d["kind"] == "Namespace"}
        for name in sorted(names):
            self.kubectl("create", "namespace", name, check=False)

    def dry_run_and_apply(self, what: str, text: str, docs: list[dict], *, apply: bool = True) -> None:
        self.ensure_namespaces(docs)
        out = self.kubectl("apply", "--server-side", "--force-conflicts", "--dry-run=server", "-f", "-", stdin=text)
        count = len([line for line in out.splitlines() if line.strip()])
        if count != len(docs):
            raise CheckFailed(f"{what}: server-side dry-run reported {count} of {len(docs)} objects:\n{out}")
        log(f"{what}: server-side dry-run of {len(docs)} objects passed")
        if apply:
            self.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=text)

    def allowed(self, namespace: str, account: str, rules: list[Rule], home: str) -> list[bool]:
        """The authorizer's answer for each rule, asked as namespace/account."""
        user = f"system:serviceaccount:{namespace}:{account}"
        groups = ["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"]
        reviews = []
        for where, group, resource, verb, name in rules:
            base, _, sub = resource.partition("/")
            attributes = {"group": group, "resource": base, "verb": verb}
            if sub:
                attributes["subresource"] = sub
            if name != "*":
                attributes["name"] = name
            if where == "home" and resource not in CLUSTER_SCOPED:
                attributes["namespace"] = home
            elif where.startswith("namespace ") and resource not in CLUSTER_SCOPED:
                attributes["namespace"] = where.split(" ", 1)[1]
            reviews.append({
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "spec": {"user": user, "groups": groups, "resourceAttributes": attributes},
            })
        answer = self.kubectl("create", "-o", "json", "-f", "-",
                              stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": reviews}))
        # One JSON document per created review.
        decoder, items, position = json.JSONDecoder(), [], 0
        while position < len(answer.rstrip()):
            item, position = decoder.raw_decode(answer, position)
            items.extend(item.get("items", [item]))
            while position < len(answer) and answer[position].isspace():
                position += 1
        if len(items) != len(reviews):
            raise CheckFailed(f"{len(reviews)} SubjectAccessReviews created, {len(items)} answered")
        return [bool(i.get("status", {}).get("allowed")) for i in items]


def check_live_rbac(cluster: Cluster, variant: Variant) -> None:
    need = needs(variant)
    subjects = {"controller": variant.controller_sa, "proxy": variant.proxy_sa}
    for subject, account in subjects.items():
        wanted = sorted(need.get(subject, set()) | (need.get("admin", set()) if subject == "controller" else set()))
        if not wanted:
            continue
        # The authorizer's cache follows the applied RBAC within moments.
        deadline = time.monotonic() + 30
        while True:
            answers = cluster.allowed(variant.home, account, wanted, variant.home)
            denied = {r for r, ok in zip(wanted, answers) if not ok}
            if not denied or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        if denied:
            raise CheckFailed(f"{variant.name}: the API server denies {account}:\n{describe(denied)}")
        if variant.scope == "namespace":
            local = [r for r in wanted if r[0] != "cluster" and r[2] not in CLUSTER_SCOPED]
            everywhere = [("cluster", *r[1:]) for r in local]
            answers = cluster.allowed(variant.home, account, everywhere, variant.home)
            leaked = {r for r, ok in zip(everywhere, answers) if ok}
            if leaked:
                raise CheckFailed(f"{variant.name}: {account} is allowed cluster-wide:\n{describe(leaked)}")
        log(f"{variant.name}: the API server allows {account} each of its {len(wanted)} needed rules"
            + (", none of them cluster-wide" if variant.scope == "namespace" else ""))


# ------------------------------------------------------------------ the operator


def write_kubeconfig(cluster: "Cluster", path: Path, token: str, namespace: str) -> None:
    """A kubeconfig of the control plane with a ServiceAccount token."""
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": cluster.env["TURNA_APISERVER_URL"],
                                                 "certificate-authority": cluster.env["TURNA_APISERVER_CA"]}}],
        "users": [{"name": "u", "user": {"token": token}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u", "namespace": namespace}}],
        "current-context": "c",
    }))


class Backend:
    """An HTTP backend on 127.0.0.1 answering every GET with a fixed body."""

    BODY = b"hello from the deploy-check backend\n"

    def __init__(self):
        body = self.BODY

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ControllerExited(CheckFailed):
    """The controller under test stopped on its own."""


def wait_for(what: str, probe, timeout: float, log_file: Path | None = None) -> None:
    """Polls `probe` until it returns true; a CheckFailed of the probe (an object not there
    yet) counts as false, except ControllerExited."""
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            if probe():
                return
            last = "not yet"
        except ControllerExited:
            raise
        except CheckFailed as error:
            last = error
        if time.monotonic() > deadline:
            break
        time.sleep(0.5)
    tail = ""
    if log_file and log_file.exists():
        tail = "\ncontroller log (last lines):\n" + "\n".join(log_file.read_text().splitlines()[-30:])
    raise CheckFailed(f"timed out after {timeout:.0f}s waiting for {what} (last: {last}){tail}")


def condition(obj: dict, kind: str, conditions_path=lambda s: s.get("conditions", [])) -> str | None:
    for c in conditions_path(obj.get("status") or {}) or []:
        if c.get("type") == kind:
            return c.get("status")
    return None


def check_operator(cluster: Cluster, variant: Variant, work: Path) -> None:
    """Runs `turna controller` as the variant's controller ServiceAccount and drives a Gateway
    through provisioning and garbage collection."""
    home = variant.home
    deployment = next(d for d in variant.rendered if d["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    image = container["image"]
    volumes = deployment["spec"]["template"]["spec"]["volumes"]
    config_map_name = next(v["configMap"]["name"] for v in volumes if "configMap" in v)
    config_map = next(d for d in variant.rendered if d["kind"] == "ConfigMap" and d["metadata"]["name"] == config_map_name)
    config = yaml.safe_load(config_map["data"]["turna.yaml"])
    provider = config["providers"]["kubernetes"]
    provider["health_address"] = f"127.0.0.1:{free_port()}"
    # The test backend listens on loopback, which EndpointSlices cannot name: an ExternalName
    # Service for localhost reaches it.
    provider.setdefault("backend", {})["allow_external_name"] = True
    slug = variant.slug
    config_file = work / f"{slug}.turna.yaml"
    config_file.write_text(yaml.safe_dump(config))
    # The rendered arguments, with this run's configuration file and a push server the proxy
    # reaches on loopback (no cluster DNS for the Service name here).
    args = [str(config_file) if a == "/etc/turna/turna.yaml" else a for a in container["args"]]
    service = next(d for d in variant.rendered if d["kind"] == "Service")["metadata"]["name"]
    push_port = free_port()
    args += ["--push-address", f"127.0.0.1:{push_port}", "--push-url", f"https://127.0.0.1:{push_port}"]
    # The proxy binds listener port + port_offset: pick a free one.
    bind_port = free_port()
    listener_port = bind_port - int(provider.get("port_offset", 8000))

    # The controller pod whose image the proxies run (POD_NAME; no kubelet runs it).
    pod = f"{variant.deployment}-check"
    cluster.kubectl("apply", "--server-side", "-f", "-", stdin=json.dumps({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": pod, "namespace": home},
        "spec": {"serviceAccountName": variant.controller_sa,
                 "containers": [{"name": "controller", "image": image}]},
    }))
    token = cluster.kubectl("create", "token", variant.controller_sa, "-n", home, "--duration=1h").strip()
    kubeconfig = work / f"{slug}.kubeconfig"
    write_kubeconfig(cluster, kubeconfig, token, home)
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG",)}
    env.update(KUBECONFIG=str(kubeconfig), POD_NAME=pod, POD_NAMESPACE=home, POD_IP="127.0.0.1",
               RUST_LOG="info,kube=warn", NO_COLOR="1")
    log_file = work / f"{slug}.controller.log"
    apps = home if variant.scope == "namespace" else f"{slug[:40].strip('-')}-apps"
    # The route and its backend: in the last watched namespace (watchNamespaces), else beside
    # the Gateway.
    routes = variant.watched[-1] if variant.scope == "namespace" else apps
    gateway = "web"
    with open(log_file, "w") as out:
        process = subprocess.Popen(
            [str(TURNA), *args],
            env=env, stdout=out, stderr=subprocess.STDOUT,
        )
    backend = Backend()
    try:
        manifests = [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": apps}},
            {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "echo", "namespace": routes},
             "spec": {"type": "ExternalName", "externalName": "localhost",
                      "ports": [{"name": "http", "port": backend.port}]}},
            {"apiVersion": f"{GROUP}/v1", "kind": "Gateway", "metadata": {"name": gateway, "namespace": apps},
             "spec": {"gatewayClassName": variant.gateway_class,
                      "listeners": [{"name": "http", "port": listener_port, "protocol": "HTTP",
                                     "allowedRoutes": {"namespaces": {"from": "All"}}}]}},
            {"apiVersion": f"{GROUP}/v1", "kind": "HTTPRoute", "metadata": {"name": "echo", "namespace": routes},
             "spec": {"parentRefs": [{"name": gateway, "namespace": apps}],
                      "rules": [{"backendRefs": [{"name": "echo", "port": backend.port}]}]}},
        ]
        if variant.scope == "namespace":
            manifests = manifests[1:]
        cluster.kubectl("apply", "--server-side", "-f", "-",
                        stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": manifests}))

        def gateway_accepted():
            if process.poll() is not None:
                raise ControllerExited(f"turna controller exited with {process.returncode}")
            return condition(cluster.json("get", "gateway", gateway, "-n", apps), "Accepted") == "True"

        wait_for(f"Gateway {apps}/{gateway} Accepted", gateway_accepted, 60, log_file)

        def route_status():
            route = cluster.json("get", "httproute", "echo", "-n", routes)
            parents = (route.get("status") or {}).get("parents") or []
            return any(p.get("controllerName") == config["providers"]["kubernetes"]["controller_name"]
                       and any(c.get("type") == "Accepted" and c.get("status") == "True"
                               for c in p.get("conditions", []))
                       for p in parents)

        wait_for(f"HTTPRoute {routes}/echo status", route_status, 30, log_file)
        if variant.scope == "cluster":
            wait_for(f"GatewayClass {variant.gateway_class} Accepted",
                     lambda: condition(cluster.json("get", "gatewayclass", variant.gateway_class), "Accepted") == "True",
                     30, log_file)

        proxies = apps if variant.placement == "gateway" else home
        selector = f"{MANAGED},gateway.networking.k8s.io/gateway-name={gateway}"
        kinds = ["deployments", "services", "configmaps", "poddisruptionbudgets"]
        if variant.scope == "cluster":
            kinds.append("serviceaccounts")

        def provisioned():
            for kind in kinds:
                if not cluster.json("get", kind, "-n", proxies, "-l", selector)["items"]:
                    return False
            if not cluster.json("get", "secrets", "-n", home, "-l", selector)["items"]:
                return False
            if variant.scope == "cluster":
                for kind in ("roles", "rolebindings"):
                    if not cluster.json("get", kind, "-n", home, "-l", selector)["items"]:
                        return False
                if not cluster.json("get", "clusterrolebindings", "-l", selector)["items"]:
                    return False
            return True

        wait_for(f"proxy objects in {proxies}", provisioned, 60, log_file)
        pod = cluster.json("get", "deployments", "-n", proxies, "-l", selector)["items"][0]["spec"]["template"]["spec"]
        proxy_args = pod["containers"][0]["args"]
        if f"{home}/{service}" not in proxy_args:
            raise CheckFailed(f"{variant.name}: the proxy is not told the controller Service: {proxy_args}")
        pulled_with = [s["name"] for s in pod.get("imagePullSecrets") or []]
        if variant.pull_secrets and pulled_with != variant.pull_secrets:
            raise CheckFailed(f"{variant.name}: proxy pods pull with {pulled_with}, not {variant.pull_secrets}")
        proxy_deployment = cluster.json("get", "deployments", "-n", proxies, "-l", selector)["items"][0]
        replicas = proxy_deployment["spec"].get("replicas")
        if variant.proxy_replicas is not None and replicas != variant.proxy_replicas:
            raise CheckFailed(f"{variant.name}: the proxy Deployment has {replicas} replicas, not the default "
                              f"TurnaProxy's {variant.proxy_replicas}")
        pod_labels = proxy_deployment["spec"]["template"]["metadata"]["labels"]
        missing = {k: v for k, v in variant.pod_monitor_selector.items() if pod_labels.get(k) != v}
        if missing:
            raise CheckFailed(f"{variant.name}: the chart's PodMonitor selects {missing}, "
                              f"which the proxy pods do not carry: {pod_labels}")
        log(f"{variant.name}: turna controller accepted the Gateway, wrote status and provisioned its proxy in {proxies}")
        check_proxy(cluster, variant, work, proxies, selector, bind_port, log_file)

        cluster.kubectl("delete", "gateway", gateway, "-n", apps, "--wait=false")

        def collected():
            return not cluster.json("get", "deployments", "-n", proxies, "-l", selector)["items"] and (
                variant.scope == "namespace"
                or not cluster.json("get", "clusterrolebindings", "-l", selector)["items"])

        wait_for("the proxy's garbage collection", collected, 60, log_file)
        refused = [line for line in log_file.read_text().splitlines()
                   if "forbidden" in line.lower() or " ERROR " in line]
        if refused:
            raise CheckFailed(f"{variant.name}: the controller logged refusals or errors:\n" + "\n".join(refused[:10]))
        log(f"{variant.name}: garbage collection removed the proxy; nothing refused, no error logged")
    finally:
        stop(process)
        backend.close()
        cluster.kubectl("delete", "httproute,service", "echo", "-n", routes, "--ignore-not-found", "--wait=false",
                        check=False)
        cluster.kubectl("delete", "pod", pod, "-n", home, "--ignore-not-found", "--wait=false", check=False)


def check_standalone(cluster: Cluster, variant: Variant, work: Path) -> None:
    """Runs `turna standalone` as the variant's ServiceAccount with the rendered arguments and
    configuration: it accepts a Gateway, writes its status and the route's, and serves a request
    itself on the port its Service forwards to."""
    home = variant.home
    deployment = next(d for d in variant.rendered if d["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    if container["args"][0] != "standalone":
        raise CheckFailed(f"{variant.name}: the Deployment runs {container['args']}, not turna standalone")
    config_map = next(d for d in variant.rendered if d["kind"] == "ConfigMap")
    config = yaml.safe_load(config_map["data"]["turna.yaml"])
    provider = config["providers"]["kubernetes"]
    services = {d["metadata"]["name"]: d for d in variant.rendered if d["kind"] == "Service"}
    exposed = services.get(provider["status"]["service"].split("/", 1)[1])
    if exposed is None:
        raise CheckFailed(f"{variant.name}: status.service {provider['status']['service']} is not rendered")
    offset = int(provider.get("port_offset", 8000))
    container_ports = {p["containerPort"] for p in container["ports"]}
    for port in exposed["spec"]["ports"]:
        if port["targetPort"] != port["port"] + offset or port["targetPort"] not in container_ports:
            raise CheckFailed(f"{variant.name}: Service port {port} does not reach listener port + {offset} "
                              f"on the pods ({sorted(container_ports)})")
    provider["health_address"] = f"127.0.0.1:{free_port()}"
    provider["address"] = "127.0.0.1"
    provider.setdefault("backend", {})["allow_external_name"] = True
    bind_port = free_port()
    listener_port = bind_port - offset
    slug = variant.slug
    config_file = work / f"{slug}.turna.yaml"
    config_file.write_text(yaml.safe_dump(config))
    args = [str(config_file) if a == "/etc/turna/turna.yaml" else a for a in container["args"]]
    token = cluster.kubectl("create", "token", variant.controller_sa, "-n", home, "--duration=1h").strip()
    kubeconfig = work / f"{slug}.kubeconfig"
    write_kubeconfig(cluster, kubeconfig, token, home)
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    env.update(KUBECONFIG=str(kubeconfig), POD_NAME=f"{variant.deployment}-check", POD_NAMESPACE=home,
               RUST_LOG="info,kube=warn", NO_COLOR="1")
    log_file = work / f"{slug}.standalone.log"
    apps = f"{slug[:40].strip('-')}-apps"
    gateway = "web"
    with open(log_file, "w") as out:
        process = subprocess.Popen([str(TURNA), *args], env=env, stdout=out, stderr=subprocess.STDOUT)
    backend = Backend()
    try:
        manifests = [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": apps}},
            {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "echo", "namespace": apps},
             "spec": {"type": "ExternalName", "externalName": "localhost",
                      "ports": [{"name": "http", "port": backend.port}]}},
            {"apiVersion": f"{GROUP}/v1", "kind": "Gateway", "metadata": {"name": gateway, "namespace": apps},
             "spec": {"gatewayClassName": variant.gateway_class,
                      "listeners": [{"name": "http", "port": listener_port, "protocol": "HTTP"}]}},
            {"apiVersion": f"{GROUP}/v1", "kind": "HTTPRoute", "metadata": {"name": "echo", "namespace": apps},
             "spec": {"parentRefs": [{"name": gateway}],
                      "rules": [{"backendRefs": [{"name": "echo", "port": backend.port}]}]}},
        ]
        cluster.kubectl("apply", "--server-side", "-f", "-",
                        stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": manifests}))

        def accepted():
            if process.poll() is not None:
                raise ControllerExited(f"turna standalone exited with {process.returncode}")
            route = cluster.json("get", "httproute", "echo", "-n", apps)
            parents = (route.get("status") or {}).get("parents") or []
            route_accepted = any(c.get("type") == "Accepted" and c.get("status") == "True"
                                 for p in parents for c in p.get("conditions", []))
            return condition(cluster.json("get", "gateway", gateway, "-n", apps), "Accepted") == "True" \
                and route_accepted

        wait_for(f"Gateway {apps}/{gateway} and its route Accepted", accepted, 60, log_file)

        def served():
            if process.poll() is not None:
                raise ControllerExited(f"turna standalone exited with {process.returncode}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{bind_port}/", timeout=2) as response:
                    return response.status == 200 and response.read() == Backend.BODY
            except OSError:
                return False

        wait_for(f"a request through turna standalone (127.0.0.1:{bind_port})", served, 60, log_file)
        refused = [line for line in log_file.read_text().splitlines()
                   if "forbidden" in line.lower() or " ERROR " in line]
        if refused:
            raise CheckFailed(f"{variant.name}: turna standalone logged refusals or errors:\n" + "\n".join(refused[:10]))
        log(f"{variant.name}: turna standalone accepted the Gateway, wrote status and served a request; "
            "nothing refused, no error logged")
    finally:
        stop(process)
        backend.close()
        # No namespace controller runs here: the objects themselves go, or the next variants'
        # controllers would serve this Gateway too.
        cluster.kubectl("delete", "gateway", gateway, "-n", apps, "--ignore-not-found", "--wait=false", check=False)
        cluster.kubectl("delete", "httproute,service", "echo", "-n", apps, "--ignore-not-found", "--wait=false",
                        check=False)


def check_proxy(cluster: Cluster, variant: Variant, work: Path, proxies: str, selector: str, bind_port: int,
                controller_log: Path) -> None:
    """Runs the provisioned proxy as its ServiceAccount, with a token bound to a pod of its
    Deployment as the kubelet would mount it: it gets its IR from the controller's push server,
    reads its bundle Secret and the controller Service's EndpointSlices, and serves a request."""
    deployment = cluster.json("get", "deployments", "-n", proxies, "-l", selector)["items"][0]
    template = deployment["spec"]["template"]
    container = template["spec"]["containers"][0]
    account = template["spec"]["serviceAccountName"]
    config_map = next(v["configMap"]["name"] for v in template["spec"]["volumes"] if "configMap" in v)
    data = cluster.json("get", "configmap", config_map, "-n", proxies)["data"]
    config = yaml.safe_load(data["turna.yaml"])
    config["providers"]["kubernetes"]["health_address"] = f"127.0.0.1:{free_port()}"
    slug = variant.slug
    files = {
        "/etc/turna/turna.yaml": work / f"{slug}.proxy.turna.yaml",
        "/etc/turna/push-ca.crt": work / f"{slug}.proxy.push-ca.crt",
    }
    files["/etc/turna/turna.yaml"].write_text(yaml.safe_dump(config))
    files["/etc/turna/push-ca.crt"].write_text(data["push-ca.crt"])

    pod = f"{deployment['metadata']['name']}-check"
    created = cluster.json("create", "-f", "-", stdin=json.dumps({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": pod, "namespace": proxies, "labels": template["metadata"]["labels"]},
        "spec": {"serviceAccountName": account, "containers": [{"name": "proxy", "image": container["image"]}]},
    }))
    token = cluster.kubectl("create", "token", account, "-n", proxies, "--duration=1h",
                            "--bound-object-kind=Pod", f"--bound-object-name={pod}",
                            f"--bound-object-uid={created['metadata']['uid']}").strip()
    token_file = work / f"{slug}.proxy.token"
    token_file.write_text(token)
    kubeconfig = work / f"{slug}.proxy.kubeconfig"
    write_kubeconfig(cluster, kubeconfig, token, proxies)
    args = [str(files.get(a, a)) for a in container["args"]] + ["--token-file", str(token_file)]
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    env.update(KUBECONFIG=str(kubeconfig), POD_NAME=pod, POD_NAMESPACE=proxies, RUST_LOG="info,kube=warn",
               NO_COLOR="1")
    log_file = work / f"{slug}.proxy.log"
    with open(log_file, "w") as out:
        process = subprocess.Popen([str(TURNA), *args], env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        def served():
            if process.poll() is not None:
                raise ControllerExited(f"turna proxy exited with {process.returncode}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{bind_port}/", timeout=2) as response:
                    return response.status == 200 and response.read() == Backend.BODY
            except OSError as error:
                raise CheckFailed(f"request through the proxy: {error}") from error

        wait_for(f"a request through the proxy (127.0.0.1:{bind_port})", served, 60, log_file)
        refused = [line for line in log_file.read_text().splitlines()
                   if "forbidden" in line.lower() or " ERROR " in line]
        if refused:
            raise CheckFailed(f"{variant.name}: the proxy logged refusals or errors:\n" + "\n".join(refused[:10]))
        log(f"{variant.name}: the proxy ({account}) got its IR and served a request; nothing refused")
    finally:
        stop(process)
        cluster.kubectl("delete", "pod", pod, "-n", proxies, "--ignore-not-found", "--wait=false", check=False)


def check_image_override(kustomize: str, work: Path) -> None:
    """An overlay of the base maps the image with `kustomize edit set image` (as a local
    cluster does with its own build), and the controller runs that image."""
    overlay = work / "image-overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(KUSTOMIZE / "turna-gateway", overlay)],
    }))
    run([kustomize, "edit", "set", "image", "ghcr.io/rakunlabs/turna=turna:local"], cwd=overlay)
    docs = load_all(run([kustomize, "build", str(overlay)]))
    images = [c["image"] for d in docs if d["kind"] == "Deployment"
              for c in d["spec"]["template"]["spec"]["containers"]]
    if images != ["turna:local"]:
        raise CheckFailed(f"kustomize edit set image on the base: Deployment images {images}, wanted turna:local")
    log("kustomize turna-gateway: kustomize edit set image maps the controller image")


def check_namespace_change(kustomize: str, work: Path) -> None:
    """Changing `namespace:` in the base's kustomization.yaml moves everything, including the
    ServiceAccount subjects of both configurations built on the base."""
    copy = work / "namespace-change"
    shutil.copytree(KUSTOMIZE, copy)
    base = copy / "turna-gateway/kustomization.yaml"
    text = base.read_text()
    if "namespace: turna-system\n" not in text:
        raise CheckFailed("kustomize/turna-gateway/kustomization.yaml sets no namespace: turna-system")
    base.write_text(text.replace("namespace: turna-system\n", "namespace: gateways\n"))
    for name in ("turna-gateway", "turna-gateway-gateway-namespace"):
        docs = load_all(run([kustomize, "build", str(copy / name)]))
        namespaces = {d["metadata"].get("namespace") for d in docs} - {None}
        namespaces |= {d["metadata"]["name"] for d in docs if d["kind"] == "Namespace"}
        namespaces |= {s.get("namespace") for d in docs for s in d.get("subjects") or []}
        if namespaces != {"gateways"}:
            raise CheckFailed(f"kustomize {name} with the base in namespace gateways uses namespaces {namespaces}")
    log("kustomize: a namespace set in the base's kustomization.yaml moves every object and subject")


def check_monitors(helm: str, variants: list[Variant]) -> None:
    """The ServiceMonitor selects the controller Service and names a port it has; the PodMonitor's
    selector is kept for check_operator to compare with the proxy pods it provisions. The
    Prometheus Operator's CRDs are not installed here: checked as rendered."""
    for variant in variants:
        if variant.lint is None or variant.scope != "cluster" or variant.mode != "controller":
            continue
        sets = ["--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.podMonitor.enabled=true"]
        docs = load_all(run([*variant.render, *sets]))
        service = next(d for d in docs if d["kind"] == "Service")
        monitor = next(d for d in docs if d["kind"] == "ServiceMonitor")
        selected = monitor["spec"]["selector"]["matchLabels"]
        if any(service["metadata"]["labels"].get(k) != v for k, v in selected.items()):
            raise CheckFailed(f"{variant.name}: the ServiceMonitor selects {selected}, not the controller Service")
        ports = {p["name"] for p in service["spec"]["ports"]}
        if any(e["port"] not in ports for e in monitor["spec"]["endpoints"]):
            raise CheckFailed(f"{variant.name}: the ServiceMonitor scrapes a port the Service lacks ({ports})")
        pod_monitor = next(d for d in docs if d["kind"] == "PodMonitor")
        variant.pod_monitor_selector = pod_monitor["spec"]["selector"]["matchLabels"]
        namespaces = pod_monitor["spec"]["namespaceSelector"]
        wanted = {"any": True} if variant.placement == "gateway" else {"matchNames": [variant.home]}
        if namespaces != wanted:
            raise CheckFailed(f"{variant.name}: the PodMonitor looks in {namespaces}, not {wanted}")
        log(f"{variant.name}: ServiceMonitor and PodMonitor render for the controller and its proxies")


def check_extra_config(helm: str, work: Path) -> None:
    """extraConfig is merged key by key over the generated configuration, and turna accepts the
    result (unknown keys would be refused)."""
    docs = load_all(run([helm, "template", "x", str(CHART), "-n", "x",
                         "--set", "extraConfig.backend.strategy=least_conn",
                         "--set", "extraConfig.debounce=500ms",
                         "--set", "allowExternalNameBackends=true"]))
    config_map = next(d for d in docs if d["kind"] == "ConfigMap")
    text = config_map["data"]["turna.yaml"]
    k = yaml.safe_load(text)["providers"]["kubernetes"]
    if (k["backend"] != {"strategy": "least_conn", "allow_external_name": True} or k["debounce"] != "500ms"
            or k["proxy"]["cluster_role"] != "x-reader"):
        raise CheckFailed(f"extraConfig was not merged over the generated configuration:\n{text}")
    config = work / "extra-config.turna.yaml"
    config.write_text(text)
    run([TURNA, "translate", "--config", config, "-f", ROOT / "examples/local", "-o", "status"])
    log("helm: extraConfig merges over the generated configuration, and turna accepts it")


# ------------------------------------------------------------------ main


def load_all(text: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(text) if d]


def main() -> int:
    run([ROOT / "deploy/scripts/build-tools.sh"])
    run([ROOT / "e2e/scripts/build-tools.sh"])
    tools = Path(run([ROOT / "deploy/scripts/build-tools.sh", "--print-dir"]).strip())
    helm, kustomize = str(tools / "helm"), str(tools / "kustomize")
    if not os.environ.get("TURNA_BIN"):
        log("building turna")
        # As scripts/quickstart.sh builds it, so `make test` builds it once.
        run(["cargo", "build", "--quiet", "--bin", "turna"])

    work = Path(tempfile.mkdtemp(prefix="turna-deploy-check."))
    failures = 0
    cluster_dir = work / "controlplane"
    try:
        only = os.environ.get("TURNA_DEPLOY_VARIANTS", "")
        all_variants = [v for v in variants(helm, kustomize) if only in v.name]
        for variant in all_variants:
            if variant.lint:
                run(variant.lint)
                log(f"{variant.name}: helm lint --strict passed")
            text = run(variant.render)
            (work / f"{variant.slug}.yaml").write_text(text)
            variant.rendered = load_all(text)
            log(f"{variant.name}: rendered {len(variant.rendered)} objects")
        check_image_override(kustomize, work)
        check_namespace_change(kustomize, work)
        check_extra_config(helm, work)
        check_monitors(helm, all_variants)
        # Values product.md forbids are refused.
        for values in (["scope=namespace", "gatewayClass.create=false", "proxy.placement=gateway"],
                       ["scope=namespace"],
                       ["scope=namespace", "gatewayClass.create=false", "gatewayClass.name="],
                       ["proxy.placement=elsewhere"],
                       ["mode=elsewhere"],
                       ["mode=standalone", "proxy.placement=gateway"],
                       ["mode=standalone", "metrics.podMonitor.enabled=true"],
                       ["mode=standalone", "scope=namespace", "gatewayClass.create=false",
                        "gatewayClass.name=t"]):
            sets = [a for v in values for a in ("--set", v)]
            result = subprocess.run([helm, "template", "x", str(CHART), *sets], capture_output=True, text=True)
            if result.returncode == 0:
                raise CheckFailed(f"helm template accepted {' '.join(values)}")
        log("helm: forbidden value combinations are refused")

        admin_text = (EXAMPLES / "namespace-scoped-admin.yaml").read_text()
        admin = load_all(admin_text)
        for variant in all_variants:
            check_static_rbac(variant, admin)

        log("starting the control plane")
        run([ROOT / "e2e/scripts/apiserver.sh", "start", cluster_dir, "--crds", "--stop-with", str(os.getpid())])
        cluster = Cluster(cluster_dir)
        # What `helm install` applies before the templates: the chart's crds/ (TurnaProxy,
        # TurnaSecurityPolicy, TurnaTrafficPolicy, TurnaBackendPolicy).
        cluster.kubectl("apply", "--server-side", "-f", str(CHART / "crds"))
        cluster.kubectl("wait", "--for", "condition=Established", "--timeout=60s",
                        "crd/turnaproxies.gateway.turna.rakunlabs.com",
                        "crd/turnasecuritypolicies.gateway.turna.rakunlabs.com",
                        "crd/turnatrafficpolicies.gateway.turna.rakunlabs.com",
                        "crd/turnabackendpolicies.gateway.turna.rakunlabs.com")

        for name in ("gateway-demo.yaml", "gateway-streams.yaml"):
            text = (EXAMPLES / name).read_text()
            cluster.dry_run_and_apply(f"examples/{name}", text, load_all(text), apply=False)
        cluster.dry_run_and_apply("examples/namespace-scoped-admin.yaml", admin_text, admin)

        # Users apply the Kustomize configurations with `kubectl apply -k`: kubectl's own
        # kustomize must render the same objects.
        for variant in all_variants:
            if variant.lint is None:
                embedded = load_all(cluster.kubectl("kustomize", variant.render[-1]))
                if embedded != variant.rendered:
                    raise CheckFailed(f"{variant.name}: kubectl kustomize renders other objects than kustomize build")
                log(f"{variant.name}: kubectl kustomize renders the same objects")

        for variant in all_variants:
            text = (work / f"{variant.slug}.yaml").read_text()
            cluster.dry_run_and_apply(variant.name, text, variant.rendered)
            check_live_rbac(cluster, variant)
            if variant.mode == "standalone":
                check_standalone(cluster, variant, work)
            else:
                check_operator(cluster, variant, work)
    except CheckFailed as error:
        failures += 1
        log(f"FAILED: {error}")
    finally:
        run([ROOT / "e2e/scripts/apiserver.sh", "stop", cluster_dir], check=False)
        if os.environ.get("TURNA_DEPLOY_KEEP") == "1" or failures:
            log(f"work directory kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    if failures:
        return 1
    log("deploy check passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
