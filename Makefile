# Turna: build, test and run. `make test` is what CI runs.
CARGO ?= cargo

.PHONY: all build release-pgo run quickstart-check test fmt-check clippy unit harness-test golden-bless bench bench-translator bench-table bench-operator bench-local bench-standalone bench-fleet \
	bench-dataplane bench-dataplane-instructions bench-dataplane-syscalls bench-protocols bench-security fuzz deploy-tools deploy-check layout-record \
	image image-test

all: build

## run: the quick start: demo backends and `turna local` on examples/local, a request through each route.
run:
	scripts/quickstart.sh

## quickstart-check: the quick start, exiting after its requests (part of `make test`).
quickstart-check:
	scripts/quickstart.sh --check

build:
	$(CARGO) build --workspace

## release-pgo: the shipped `turna` binary, profile-guided as in the Dockerfile
## (dataplane/bench/pgo.sh); prints its path.
release-pgo:
	dataplane/bench/pgo.sh -p turna-operator --bin turna

## test: formatting, lints, every test of the workspace, the quick start, the deploy checks, the
## image test and the conformance smoke.
test: fmt-check clippy unit harness-test quickstart-check deploy-check image-test conformance-smoke

fmt-check:
	$(CARGO) fmt --all -- --check

clippy:
	$(CARGO) clippy --workspace --all-targets -- -D warnings

unit:
	$(CARGO) test --workspace

## harness-test: the e2e scripts' process handling (e2e/scripts/lib_test.sh, a second).
harness-test:
	e2e/scripts/lib_test.sh

## deploy-tools: build helm and kustomize from deploy/tools/go.mod into
## ~/.cache/turna/tools/deploy-helm-<version>-kustomize-<version> (cached; a no-op when built).
deploy-tools:
	deploy/scripts/build-tools.sh

## deploy-check: helm lint/template and kustomize build of every installation variant, server-side
## dry-run against the e2e kube-apiserver, RBAC exactly deploy/tests/rbac-needs.txt, and the
## controller run as each variant's ServiceAccount (part of `make test`).
deploy-check: deploy-tools
	python3 deploy/tests/deploy_check.py

## image: Turna's image ghcr.io/rakunlabs/turna:<crate version> with Docker (deploy/image/image.sh):
## the published form (./Dockerfile: turna built profile-guided in Docker, distroless base) when
## its base images can be pulled, else the local form: the Dockerfile with a base made of Debian
## packages (turna.local/base:debian12) and turna built on the host. IMAGE_ARGS: --local,
## --registry, --tag IMAGE, --binary FILE.
image:
	deploy/image/image.sh build $(IMAGE_ARGS)

## image-test: the image on the local base with target/debug/turna, run with Docker: `turna
## --version`, non-root, and `turna local` on examples/local in a read-only, capability-less
## container serving requests on a published port (part of `make test`; says it skipped
## without a Docker engine or root).
image-test:
	deploy/image/image.sh test

## golden-bless: rewrite the translator's golden expectations (review the diff!).
golden-bless:
	TURNA_BLESS=1 $(CARGO) test -p turna-translator --test golden

## bench-translator: translation time for 1k/5k/10k HTTPRoutes.
bench-translator:
	$(CARGO) bench -p turna-translator --bench translate

## bench-table: a proxy's table built from the IR of 1k/5k/10k HTTPRoutes, and rebuilt after
## one route was added (what each new IR version costs the proxy). TURNA_BENCH_ROUTES,
## TURNA_BENCH_RUNS and TURNA_BENCH_COLD=1 (CPU caches evicted before each rebuild) tune it.
bench-table:
	$(CARGO) bench -p turna-dataplane --bench table_build

## bench-dataplane: Turna's proxy against nginx and HAProxy (req/s, p99, ratios); installs
## wrk, h2load, nginx and haproxy when missing. THREADS, DURATION and ROUNDS tune it; the proxy
## is built profile-guided like the shipped binary (PGO=0: plain release build).
bench-dataplane:
	dataplane/bench/run.sh

## bench-protocols: Turna's proxy against nginx and HAProxy beyond HTTP/1.1: HTTPS keep-alive and
## new TLS 1.3 handshakes, HTTP/2 over TLS, gRPC unary and streaming, TCP and TLS passthrough
## (Gbit/s), UDP (datagrams/s); rate and CPU per unit and the ratios. Installs its Debian packages
## when missing and builds its Go load tool (dataplane/bench/load). DURATION and ROUNDS tune it.
bench-protocols:
	dataplane/bench/protocols.sh

## bench-security: what a security policy's JWT check costs a request (RS256, ES256): the
## signature, a token seen for the first time, a token verified before (criterion).
bench-security:
	$(CARGO) bench -p turna-dataplane --bench security

## bench-dataplane-instructions: instructions per proxied request (callgrind), Turna and nginx.
bench-dataplane-instructions:
	dataplane/bench/callgrind.sh

## bench-dataplane-syscalls: what the kernel does per proxied request, Turna and nginx: system
## calls by name (strace), context switches and page faults (perf), user and system CPU.
bench-dataplane-syscalls:
	dataplane/bench/syscalls.sh

## layout-record: record again the functions `turna` runs to start and to proxy requests
## (callgrind on `turna local` serving examples/local), which build.rs places together at the
## start of the binary's code (operator/layout/record.sh; needs valgrind).
layout-record:
	operator/layout/record.sh

## fuzz: bounded cargo-fuzz runs (FUZZ_SECONDS per target, default 60; FUZZ_TARGETS picks some)
## of the translator on arbitrary object sets, the IR validation, the ClientHello/SNI peek and
## the proxy's HTTP front; needs nightly, installs cargo-fuzz when missing (scripts/fuzz.sh).
fuzz:
	scripts/fuzz.sh

## bench-operator: apply -> Accepted status and -> first 200 through a proxy at 1, 1k and 5k
## routes, and the controller's memory, against the e2e kube-apiserver (operator/benches/convergence.rs).
## TURNA_BENCH_ROUTES, TURNA_BENCH_SAMPLES and TURNA_BENCH_DEBOUNCE tune it.
bench-operator:
	$(CARGO) bench -p turna-operator --bench convergence

## bench-standalone: a new HTTPRoute -> first 200 through `turna standalone` at 1, 1k and 5k
## routes, while the start-up statuses are written and after; its memory, against the e2e
## kube-apiserver (operator/benches/standalone.rs). TURNA_BENCH_ROUTES and TURNA_BENCH_SAMPLES tune it;
## TURNA_BENCH_LOG=operator=debug,dataplane=info logs each step of a pass.
bench-standalone:
	$(CARGO) bench -p turna-operator --bench standalone

## bench-fleet: 1,000 simulated proxies (the real push protocol, no traffic) on one turna
## controller: a route change -> every proxy, and the controller's memory and CPU per connected
## proxy (operator/benches/push_fleet.rs). TURNA_BENCH_PROXIES, _GATEWAYS, _ROUTES, _SAMPLES tune it.
bench-fleet:
	$(CARGO) bench -p turna-operator --bench push_fleet

## bench-local: an edited file -> first 200 through `turna local` at 1, 1k and 5k routes, and its
## memory (operator/benches/local_reload.rs); TURNA_BENCH_ROUTES and TURNA_BENCH_SAMPLES tune it.
bench-local:
	$(CARGO) bench -p turna-operator --bench local_reload

## bench: every benchmark of the Performance section of the README, one after another (about
## 55 minutes on 2 cores; the first run also builds the control plane): translation, the proxy
## against nginx and HAProxy (HTTP/1.1 and h2c, then the other protocols), turna local, turna
## standalone, controller convergence and the push fleet. Each has its own target to run it alone.
bench: bench-translator bench-table bench-dataplane bench-dataplane-syscalls bench-protocols bench-security bench-local bench-standalone bench-operator bench-fleet

# ---- e2e: a real control plane built from Go modules (e2e/README.md) ----
E2E_CLUSTER_DIR ?= $(CURDIR)/e2e/.cache/controlplane

.PHONY: tools cluster-tools cluster-smoke cluster-rust-smoke cluster-controlplane-up cluster-controlplane-down

## cluster-tools: build etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kubectl
## into ~/.cache/turna/tools/<k8s-version> (cached; a no-op when built).
tools: cluster-tools
cluster-tools:
	e2e/scripts/build-tools.sh

## cluster-smoke: start a control plane in a temp dir, create a GatewayClass and Gateway, check
## ServiceAccount tokens, RBAC, controllers and scheduler, stop.
cluster-smoke: cluster-tools
	e2e/scripts/smoke.sh

## cluster-rust-smoke: the same from Rust (e2e/rust/control_plane.rs, the harness for Rust tests).
cluster-rust-smoke: cluster-tools
	mkdir -p target/e2e
	rustc --edition 2024 --test --cfg turna_control_plane_selftest e2e/rust/control_plane.rs \
		-o target/e2e/control-plane-selftest
	target/e2e/control-plane-selftest

## cluster-controlplane-up/-down: a control plane in $(E2E_CLUSTER_DIR) to use by hand:
## eval "$$(e2e/scripts/apiserver.sh env $(E2E_CLUSTER_DIR))"; kubectl get gateways -A
cluster-controlplane-up: cluster-tools
	e2e/scripts/apiserver.sh start $(E2E_CLUSTER_DIR) --all
cluster-controlplane-down:
	e2e/scripts/apiserver.sh stop $(E2E_CLUSTER_DIR)

# ---- the local cluster: bridge, control plane on it, node agent (e2e/README.md) ----
# `make cluster-up E2E_CLUSTER_DIR=...` picks the directory; the default is e2e/.cache/cluster.
CLUSTER_DIR ?= $(if $(filter command line,$(origin E2E_CLUSTER_DIR)),$(E2E_CLUSTER_DIR),$(CURDIR)/e2e/.cache/cluster)

.PHONY: cluster-up cluster-down cluster-status

## cluster-up: bridge turna0 (10.244.0.1/16), the control plane on it, the node agent running pods
## as processes in network namespaces, then turna-lb and Turna (Kustomize base) when present.
## Needs root. Prints the `export KUBECONFIG=...` line.
cluster-up: cluster-tools
	e2e/scripts/cluster.sh up $(CLUSTER_DIR)

## cluster-down: stop all of it, remove the pods' namespaces and the bridge.
cluster-down:
	e2e/scripts/cluster.sh down $(CLUSTER_DIR)

cluster-status:
	e2e/scripts/cluster.sh status $(CLUSTER_DIR)

# ---- reliability: churn, faults, bad input and scale (e2e/reliability/README.md) ----
.PHONY: reliability

## reliability: the whole suite on a local cluster of its own (root): bad-input tests, every
## scenario, the fuzz targets; the table in e2e/.cache/reliability/reliability.md. Some
## scenarios alone: make reliability ARGS="--no-fuzz -- route-flip endpoint-churn".
reliability: cluster-tools
	e2e/reliability/run.sh $(ARGS)

# ---- conformance: the Gateway API suite against Turna (e2e/conformance/README.md) ----
.PHONY: images lb-controller-test conformance-build conformance-local conformance-smoke conformance deploy

## images: the binaries standing in for the suite's container images (echo-basic) into
## ~/.cache/turna/images/<version> (cached; a no-op when built).
images:
	e2e/scripts/build-images.sh

## lb-controller-test: turna-lb's tests (pool rules; a real apiserver, backends in a netns; root).
lb-controller-test: cluster-tools
	e2e/scripts/lb-controller.sh test

## conformance-build: go vet and unit tests of the conformance driver, and its binary (cached).
## Not part of `make test`: the suite itself takes far too long for CI.
conformance-build:
	e2e/conformance/run.sh vet
	e2e/conformance/run.sh build

## conformance-local: cluster-up, Turna installed from the Kustomize base, the full suite (all five
## profiles) for the default and gateway-namespace placements, reports in
## e2e/conformance/reports/<version>/, cluster-down.
conformance-local:
	e2e/conformance/local.sh

## conformance-smoke: core tests of each of the five profiles (e2e/conformance/run.sh's smoke
## subset), then Prometheus discovering and scraping the controller and a proxy by their pod
## annotations (e2e/observability/check.sh) and an EndpointSelector XBackend with session
## persistence and an XBackendTrafficPolicy (e2e/xbackend/check.sh) and ExternalAuth on routes
## and a listener against an ext_authz server pod (e2e/external-auth/check.sh), default placement, no report, on a cluster of its own (bridge turnasmk0,
## 10.245.0.0/16) so it runs beside a development cluster; part of `make test` (root; says it
## skipped otherwise). About 2 minutes with cached tools.
conformance-smoke:
	@if [ "$$(id -u)" != 0 ]; then echo "conformance-smoke: SKIPPED, needs root (a bridge and network namespaces)"; exit 0; fi; \
	E2E_CLUSTER_DIR=$(CURDIR)/e2e/.cache/smoke TURNA_CLUSTER_BRIDGE=turnasmk0 TURNA_POD_CIDR=10.245.0.0/16 \
		TURNA_NODE_NAME=turna-smoke e2e/conformance/local.sh --smoke --observability --xbackend --external-auth

## deploy: a kind cluster (kind's node image, or one built here when no registry is reachable:
## deploy/kind/README.md) with LoadBalancer support and the Gateway API CRDs, Turna's image from
## `make image` loaded, Turna installed from the chart, examples/gateway-demo.yaml, the Gateway
## Programmed and requests through its address. Needs a Docker engine (deploy/image/dockerd.sh).
deploy:
	deploy/conformance/kind.sh deploy

## conformance: the suite against the kind cluster, both placements; reports in
## e2e/conformance/reports/<version>/kind/ (deploy/conformance/README.md).
conformance:
	deploy/conformance/kind.sh
