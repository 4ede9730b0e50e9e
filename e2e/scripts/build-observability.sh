#!/usr/bin/env bash
# Build the third-party servers the tests start, each from the Go module that pins it:
#   prometheus    e2e/observability/go.mod  (operator/tests/prometheus.rs)
#   jaeger        e2e/tracing/go.mod        (Jaeger v2 all-in-one with its OTLP receivers;
#                                            dataplane/tests/tracing.rs)
#   oauth2-proxy  e2e/auth/go.mod           (the HTTP ExternalAuth filter's auth server: an OIDC
#                                            login, in front of mockoidc)
#   mockoidc      e2e/auth/go.mod           (e2e/auth/cmd/mockoidc: an OIDC provider for oauth2-proxy)
#   extauthz      e2e/auth/go.mod           (Istio's ext_authz sample server: the gRPC ExternalAuth
#                                            filter's auth server, Envoy ext_authz v3; also HTTP)
#   ratelimit     e2e/ratelimit/go.mod      (Envoy's rate limit service, envoyproxy/ratelimit: the
#                                            global rate limits' server, with Redis)
#   consul        e2e/consul/go.mod         (Consul v1.16.1, the last MPL-2.0 release: the static
#                                            layer's Consul key; operator/tests/static_consul.rs)
# into ${XDG_CACHE_HOME:-$HOME/.cache}/turna/<module folder>/<stamp>/bin, the stamp a hash of that
# module's go.mod, go.sum and own Go files, so every clone on the machine shares one build
# (TURNA_OBSERVABILITY_DIR overrides the folder of Prometheus, TURNA_TRACING_DIR Jaeger's,
# TURNA_AUTH_DIR that of the auth servers, TURNA_RATELIMIT_DIR the rate limit service's,
# TURNA_CONSUL_DIR Consul's).
# Idempotent: builds only what is missing. Prints the bin folder of each tool named, one per line.
# Without arguments it builds Prometheus and Jaeger only; the auth servers must be named.
#
#   e2e/scripts/build-observability.sh                  # build prometheus and jaeger, print both folders
#   e2e/scripts/build-observability.sh jaeger           # build Jaeger, print its folder
#   e2e/scripts/build-observability.sh oauth2-proxy mockoidc extauthz
set -euo pipefail
# shellcheck source=e2e/scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# build NAME MODULE_FOLDER PACKAGE OVERRIDE: builds NAME when missing; prints its bin folder.
build() {
	local name="$1" module="$2" package="$3" override="$4"
	local mod_dir="$E2E_DIR/$module" stamp dir bin tmp start
	# go.mod and go.sum, then the module's own Go files (e2e/auth/cmd), if any.
	stamp="$(
		cd "$mod_dir"
		{
			cat go.mod go.sum
			find . -name '*.go' -print0 | LC_ALL=C sort -z | xargs -0r cat
		} | sha256sum | cut -c1-16
	)"
	dir="${override:-${XDG_CACHE_HOME:-$HOME/.cache}/turna/$module/$stamp}"
	bin="$dir/bin"
	mkdir -p "$bin"
	(
		# One build at a time (parallel test binaries may all call this script).
		exec 9> "$dir/.lock"
		flock 9
		if [[ ! -x "$bin/$name" ]]; then
			log "building $name ($(go env GOVERSION)) into $bin"
			start=$(date +%s)
			cd "$mod_dir"
			nice -n 15 go mod download
			tmp="$(mktemp -d "$bin/.build.XXXXXX")"
			trap 'rm -rf "$tmp"' EXIT
			CGO_ENABLED=0 nice -n 15 go build -trimpath -ldflags "-s -w" -o "$tmp/$name" "$package"
			mv -f "$tmp/$name" "$bin/$name"
			log "$name built in $(($(date +%s) - start))s"
		fi
	)
	echo "$bin"
}

tools=("$@")
[[ ${#tools[@]} -gt 0 ]] || tools=(prometheus jaeger)
for tool in "${tools[@]}"; do
	case "$tool" in
	prometheus) build prometheus observability github.com/prometheus/prometheus/cmd/prometheus "${TURNA_OBSERVABILITY_DIR:-}" ;;
	jaeger) build jaeger tracing github.com/jaegertracing/jaeger/cmd/jaeger "${TURNA_TRACING_DIR:-}" ;;
	oauth2-proxy) build oauth2-proxy auth github.com/oauth2-proxy/oauth2-proxy/v7 "${TURNA_AUTH_DIR:-}" ;;
	mockoidc) build mockoidc auth github.com/turna/turna/e2e/auth/cmd/mockoidc "${TURNA_AUTH_DIR:-}" ;;
	extauthz) build extauthz auth istio.io/istio/samples/extauthz/cmd/extauthz "${TURNA_AUTH_DIR:-}" ;;
	ratelimit) build ratelimit ratelimit github.com/envoyproxy/ratelimit/src/service_cmd "${TURNA_RATELIMIT_DIR:-}" ;;
	consul) build consul consul github.com/hashicorp/consul "${TURNA_CONSUL_DIR:-}" ;;
	*) die "unknown tool $tool (prometheus, jaeger, oauth2-proxy, mockoidc, extauthz, ratelimit or consul)" ;;
	esac
done
